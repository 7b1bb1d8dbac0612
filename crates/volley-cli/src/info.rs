//! `volley info`: limits, defaults and the per-rank memory footprint.

use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;
use volley::am::{DEFAULT_MEDIUM_BUFFERS, DEFAULT_RING_SLOTS, DEFAULT_SEGMENT_BYTES};
use volley::transport::shm::{Layout, MEDIUM_MAX};

/// Prints the table; a failed write (a closed pipe, a full disk) ends with an error code
/// rather than a panic.
pub fn print() -> ExitCode {
    let text = table();
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader left (`volley info | head -1`): nothing to say about it.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::from(141),
        Err(e) => {
            eprintln!("volley info: writing the table: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The table's text.
fn table() -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    macro_rules! println {
        ($($arg:tt)*) => { let _ = writeln!(out, $($arg)*); };
    }
    println!("volley {}", env!("CARGO_PKG_VERSION"));
    println!("transports             shm (ranks on this host, including loopback), udp, tcp (VOLLEY_NET)");
    println!("max arguments          {}", volley::MAX_ARGS);
    println!("max medium payload     {MEDIUM_MAX} bytes");
    println!("ring slots (default)   {DEFAULT_RING_SLOTS} x 64 B per sender and channel");
    println!(
        "medium buffers         {DEFAULT_MEDIUM_BUFFERS} x {} KiB per channel",
        MEDIUM_MAX / 1024
    );
    println!("segment (default)      {} MiB", DEFAULT_SEGMENT_BYTES >> 20);
    println!(
        "cores available        {}",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!();
    println!("per-rank footprint (rings + buffer flags; medium buffers and segment are committed on first touch):");
    for ranks in [2, 16, 64] {
        let l = Layout {
            ranks,
            ring_slots: DEFAULT_RING_SLOTS,
            pool_bufs: DEFAULT_MEDIUM_BUFFERS,
            segment_len: DEFAULT_SEGMENT_BYTES,
        };
        println!(
            "  {ranks:>3} local ranks: rings {:>7.1} KiB, medium buffers {} KiB, region total {:.1} MiB",
            l.ring_footprint() as f64 / 1024.0,
            2 * DEFAULT_MEDIUM_BUFFERS * MEDIUM_MAX / 1024,
            l.total_len() as f64 / (1 << 20) as f64
        );
    }
    out
}
