//! `--label`: copy each rank's output line by line with a `[rank] ` prefix.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::Child;
use std::thread::JoinHandle;

fn pump<R: Read + Send + 'static>(rank: usize, from: R, to_stderr: bool) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(from);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            if !line.ends_with(b"\n") {
                line.push(b'\n');
            }
            let prefix = format!("[{rank}] ");
            // One write per line under the stream lock, so lines from ranks never interleave.
            let _ = if to_stderr {
                let mut e = std::io::stderr().lock();
                e.write_all(prefix.as_bytes())
                    .and_then(|_| e.write_all(&line))
            } else {
                let mut o = std::io::stdout().lock();
                o.write_all(prefix.as_bytes())
                    .and_then(|_| o.write_all(&line))
                    .and_then(|_| o.flush())
            };
        }
    })
}

/// Starts the copy threads for a child spawned with piped stdout and stderr.
pub fn label(rank: usize, child: &mut Child) -> Vec<JoinHandle<()>> {
    let mut v = Vec::new();
    if let Some(out) = child.stdout.take() {
        v.push(pump(rank, out, false));
    }
    if let Some(err) = child.stderr.take() {
        v.push(pump(rank, err, true));
    }
    v
}
