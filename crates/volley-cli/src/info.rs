//! `volley info`: limits, defaults, the per-rank memory footprint, and how a program started
//! here would join its job.

use std::io::Write as _;
use std::process::ExitCode;
use volley::am::{DEFAULT_MEDIUM_BUFFERS, DEFAULT_RING_SLOTS, DEFAULT_SEGMENT_BYTES};
use volley::transport::shm::{Layout, MEDIUM_MAX, POOL_BUF_BYTES};

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
    let mut line = |text: String| {
        out.push_str(&text);
        out.push('\n');
    };
    line(format!("volley {}", env!("CARGO_PKG_VERSION")));
    line("transports             shm (ranks on this host, including loopback), udp, tcp (VOLLEY_NET)".into());
    line(format!("max arguments          {}", volley::MAX_ARGS));
    line(format!("max medium payload     {MEDIUM_MAX} bytes"));
    line(format!(
        "ring slots (default)   {DEFAULT_RING_SLOTS} x 64 B per sender and channel"
    ));
    line(format!(
        "medium buffers         {DEFAULT_MEDIUM_BUFFERS} x {} KiB per channel (a payload and a page, to place it at its source's page offset)",
        POOL_BUF_BYTES / 1024
    ));
    line(format!(
        "segment (default)      {} MiB",
        DEFAULT_SEGMENT_BYTES >> 20
    ));
    line(format!(
        "cores available        {}",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    ));
    let (bootstrap, why) =
        volley::bootstrap::Start::detect(|name| std::env::var(name).ok().filter(|v| !v.is_empty()));
    line(format!("bootstrap              {bootstrap}: {why}"));
    line(String::new());
    line("per-rank footprint (rings + buffer flags; medium buffers and segment are committed on first touch):".into());
    for ranks in [2, 16, 64] {
        let l = Layout {
            ranks,
            ring_slots: DEFAULT_RING_SLOTS,
            pool_bufs: DEFAULT_MEDIUM_BUFFERS,
            segment_len: DEFAULT_SEGMENT_BYTES,
        };
        line(format!("  {ranks:>3} local ranks: rings {:>7.1} KiB, medium buffers {} KiB, region total {:.1} MiB",
            l.ring_footprint() as f64 / 1024.0,
            2 * DEFAULT_MEDIUM_BUFFERS * POOL_BUF_BYTES / 1024,
            l.total_len() as f64 / (1 << 20) as f64
        ));
    }
    out
}
