//! Prints `rank R polite P`: whether the runtime decided to yield early while waiting.

use volley::Runtime;

fn main() {
    let rt = Runtime::builder().build().expect("build");
    println!("rank {} polite {}", rt.rank(), rt.is_polite());
    rt.barrier();
}
