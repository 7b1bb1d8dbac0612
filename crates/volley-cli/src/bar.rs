//! The progress bars of the benchmarks and runners: one style, drawn on standard error only
//! when it is a terminal (hidden, and free, when the output goes to a file or a pipe).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

fn with_template(len: u64, template: &str) -> ProgressBar {
    let target = if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let bar = ProgressBar::with_draw_target(Some(len), target);
    bar.set_style(ProgressStyle::with_template(template).expect("a valid template"));
    bar
}

/// A bar of `len` steps (`{bar} 3/8 message`). It starts no thread: callers that fork (the
/// floors) may hold one.
pub fn steps(len: u64) -> ProgressBar {
    with_template(len, "{bar:30} {pos}/{len} {msg}")
}

/// A bar of `secs` seconds, its position the caller's elapsed time (`{bar} 00:01:02 of 600s`).
pub fn seconds(secs: u64) -> ProgressBar {
    with_template(secs, "{bar:30} {elapsed_precise} of {len}s  {msg}")
}

/// The bar of the benchmark running now, which every job it starts advances ([`job_done`]).
static CURRENT: std::sync::Mutex<Option<ProgressBar>> = std::sync::Mutex::new(None);

/// While this lives, [`job_done`] advances a bar of `name`'s jobs; cleared when dropped.
pub struct Activity(ProgressBar);

/// Starts a bar for a benchmark whose jobs are not counted ahead: it counts them as they end.
pub fn activity(name: &str) -> Activity {
    let bar = with_template(0, "{elapsed_precise} {msg}: {pos} jobs done");
    bar.set_message(name.to_string());
    bar.tick();
    *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = Some(bar.clone());
    Activity(bar)
}

impl Drop for Activity {
    fn drop(&mut self) {
        *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.0.finish_and_clear();
    }
}

/// One job of the running benchmark ended (nothing when no [`activity`] is on).
pub fn job_done() {
    if let Some(b) = CURRENT.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
        b.inc(1);
    }
}
