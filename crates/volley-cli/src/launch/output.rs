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
            let mut out = format!("[{rank}] ").into_bytes();
            out.extend_from_slice(&line);
            // One write per line, under the stream lock: lines of ranks never interleave, not
            // even when several agents of a multi-host job write into one pipe (a write of up
            // to PIPE_BUF bytes is atomic).
            let written = if to_stderr {
                std::io::stderr().lock().write_all(&out)
            } else {
                let mut o = std::io::stdout().lock();
                o.write_all(&out).and_then(|_| o.flush())
            };
            if written.is_err() {
                // The reader is gone (a closed pipe, say): stop reading too, so that the rank's
                // next write fails as it would without --label (SIGPIPE) instead of the job
                // running on with its output thrown away.
                break;
            }
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
