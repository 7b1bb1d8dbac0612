//! The rendezvous alone, without the runtime (which needs a network transport across
//! hosts): `rdv_check [hang|notices]`.
//!
//! Each rank sends a hello carrying its node and `VOLLEY_NET_ADDR` with two fresh memfds
//! holding `rank R` and `second R`, and checks what comes back: all `VOLLEY_SIZE` hellos in
//! rank order, the descriptors of ranks on its own node being their memfds and those of other
//! nodes' ranks not. Then it prints `rdv: rank R node N ppid P saw R0@N0/A0 R1@N1/A1 ...` (P is the process
//! that started it: the agent, for a multi-host job) and exits 0, or with `hang` prints it and
//! waits forever. With `notices`, rank 0 then exits at once and every other rank waits (30 s
//! at most) for the launcher's notice that rank 0 exited, prints `rdv: rank R heard that rank
//! 0 exited` and exits 0.

use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use volley::bootstrap::rendezvous::{exchange, poll_notices, Hello, Notice};
use volley::bootstrap::{JobInfo, Start};
use volley_tests::{arg_str, fail};

fn main() {
    let mode = arg_str(0).unwrap_or_default();
    let hang = mode == "hang";
    let job = JobInfo::from_env().unwrap_or_else(|e| fail(0, 2, &format!("{e}")));
    let me = job.rank;
    let Start::Launcher { rendezvous: path } = job.start.clone() else {
        fail(me, 2, "not started by `volley run`");
    };
    let addr = std::env::var("VOLLEY_NET_ADDR").unwrap_or_default();
    let files = ["rank", "second"].map(|what| memfd_holding(me, &format!("{what} {me}")));
    let hello = Hello {
        rank: me,
        pid: std::process::id(),
        blob: serde_json::json!({ "node": job.node, "addr": addr }),
    };
    let (peers, conn) = exchange(
        &path,
        job.size,
        &hello,
        files.each_ref().map(|f| f.as_raw_fd()),
    )
    .unwrap_or_else(|e| fail(me, 1, &format!("{e}")));
    if peers.len() != job.size {
        fail(
            me,
            1,
            &format!("{} hellos for {} ranks", peers.len(), job.size),
        );
    }
    let mut saw = Vec::new();
    for (i, p) in peers.into_iter().enumerate() {
        let node = p.hello.blob["node"].as_u64().unwrap_or(u64::MAX) as usize;
        let their_addr = p.hello.blob["addr"].as_str().unwrap_or("?").to_string();
        if p.hello.rank != i {
            fail(me, 1, &format!("hello {i} is rank {}", p.hello.rank));
        }
        for (fd, what) in p.fds.into_iter().zip(["rank", "second"]) {
            // Positional read: ranks of one node share these open files, and their offsets.
            let f = std::fs::File::from(fd);
            let mut buf = [0u8; 32];
            let n = std::os::unix::fs::FileExt::read_at(&f, &mut buf, 0).unwrap_or(0);
            let holds_its_file = &buf[..n] == format!("{what} {i}").as_bytes();
            if holds_its_file != (node == job.node) {
                fail(
                    me,
                    1,
                    &format!(
                        "node {}: the {what} descriptor of rank {i} (node {node}) \
                         {} its memfd",
                        job.node,
                        if holds_its_file { "is" } else { "is not" }
                    ),
                );
            }
        }
        saw.push(format!("{i}@{node}/{their_addr}"));
    }
    // SAFETY: getppid has no preconditions.
    let ppid = unsafe { libc::getppid() };
    println!(
        "rdv: rank {me} node {} ppid {ppid} saw {}",
        job.node,
        saw.join(" ")
    );
    std::io::stdout().flush().unwrap();
    if mode == "notices" && me != 0 {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let notices = poll_notices(&conn).unwrap_or_else(|e| fail(me, 1, &e.to_string()));
            if notices.contains(&Notice::Exited { rank: 0 }) {
                println!("rdv: rank {me} heard that rank 0 exited");
                return;
            }
            if std::time::Instant::now() > until {
                fail(me, 1, "no notice that rank 0 exited within 30 s");
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
    if hang {
        loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
    }
}

/// A fresh memfd holding `text`.
fn memfd_holding(me: usize, text: &str) -> std::fs::File {
    // SAFETY: the name is a NUL-terminated literal; the flags are valid.
    let raw = unsafe { libc::memfd_create(c"rdv_check".as_ptr(), libc::MFD_CLOEXEC) };
    if raw < 0 {
        fail(me, 1, "memfd_create failed");
    }
    // SAFETY: memfd_create just returned this descriptor, owned by nothing else.
    let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(raw) });
    file.write_all(text.as_bytes())
        .unwrap_or_else(|e| fail(me, 1, &format!("write memfd: {e}")));
    file
}
