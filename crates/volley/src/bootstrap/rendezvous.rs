//! The rendezvous: each rank sends the launcher a hello (its rank, pid, an opaque JSON blob and
//! [`FDS_PER_HELLO`] file descriptors); when all ranks have arrived the launcher sends every rank
//! all hellos and all descriptors. Arriving at the rendezvous is therefore also the init barrier.
//!
//! The socket is `SOCK_SEQPACKET` in a private (0700) directory, so message boundaries are kept
//! and descriptors travel with `SCM_RIGHTS`; no shared-memory name ever exists in the file system,
//! so a crash cannot leave one behind.

use super::BootstrapError;
use nix::sys::socket::{
    accept, bind, connect, listen, recvmsg, sendmsg, socket, AddressFamily, Backlog,
    ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, UnixAddr,
};
use serde::{Deserialize, Serialize};
use std::io::{IoSlice, IoSliceMut};
use std::ops::Range;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

/// Largest rendezvous message; hellos are small JSON documents.
const MAX_MESSAGE: usize = 1 << 20;

/// How many descriptors travel with every hello, no more and no fewer (the runtime sends its
/// shared-memory region and its wake-up eventfd).
pub const FDS_PER_HELLO: usize = 2;

/// The descriptors of one hello, in the order the rank sent them.
pub type HelloFds = [OwnedFd; FDS_PER_HELLO];

/// What one rank tells the others at startup.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Hello {
    /// The sender's rank.
    pub rank: usize,
    /// The sender's process id (for liveness checks).
    pub pid: u32,
    /// Layer-specific endpoint information, opaque to the bootstrap.
    pub blob: serde_json::Value,
}

/// A hello together with the descriptors its rank attached.
#[derive(Debug)]
pub struct PeerHello {
    /// What the rank said.
    pub hello: Hello,
    /// The descriptors it sent, in its order; for a rank on another host, where its own would
    /// mean nothing, descriptors of `/dev/null`.
    pub fds: HelloFds,
}

fn rdv_err(path: &str, why: impl Into<String>) -> BootstrapError {
    BootstrapError::Rendezvous {
        path: path.to_string(),
        why: why.into(),
    }
}

fn send_msg(sock: RawFd, bytes: &[u8], fds: &[RawFd]) -> nix::Result<()> {
    let iov = [IoSlice::new(bytes)];
    let rights = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &rights };
    let sent = sendmsg::<()>(sock, &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None)?;
    if sent != bytes.len() {
        return Err(nix::Error::EMSGSIZE);
    }
    Ok(())
}

/// Receives one message and the descriptors that came with it (a hello's, if it brought
/// exactly [`FDS_PER_HELLO`]; any others are closed). Returns `None` on an orderly shutdown.
fn recv_msg(sock: RawFd) -> nix::Result<Option<(Vec<u8>, Option<HelloFds>)>> {
    let mut buf = vec![0u8; MAX_MESSAGE];
    // Room for one more than a hello's, so that a sender of too many is caught, not truncated.
    let mut cmsg = nix::cmsg_space!([RawFd; FDS_PER_HELLO + 1]);
    let (len, fds) = {
        let mut iov = [IoSliceMut::new(&mut buf)];
        let msg = recvmsg::<()>(sock, &mut iov, Some(&mut cmsg), MsgFlags::MSG_CMSG_CLOEXEC)?;
        let mut fds = Vec::new();
        for c in msg.cmsgs()? {
            if let ControlMessageOwned::ScmRights(raws) = c {
                for raw in raws {
                    // SAFETY: the kernel just installed `raw` in our table for this message;
                    // nothing else owns it, so wrapping it in an OwnedFd transfers ownership.
                    fds.push(unsafe { OwnedFd::from_raw_fd(raw) });
                }
            }
        }
        (msg.bytes, fds)
    };
    if len == 0 {
        return Ok(None);
    }
    buf.truncate(len);
    Ok(Some((buf, fds.try_into().ok())))
}

fn seqpacket() -> nix::Result<OwnedFd> {
    socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
}

/// The rank side: sends this rank's hello and descriptors, blocks until every rank has done the
/// same, and returns all hellos (indexed by rank) with their descriptors.
///
/// The returned connection stays open for the life of the job; when the launcher goes away the
/// socket reads end-of-file.
pub fn exchange(
    path: &str,
    size: usize,
    hello: &Hello,
    fds: [RawFd; FDS_PER_HELLO],
) -> Result<(Vec<PeerHello>, OwnedFd), BootstrapError> {
    let addr = UnixAddr::new(path).map_err(|e| rdv_err(path, e.to_string()))?;
    exchange_at(&addr, path, size, hello, fds)
}

/// [`exchange`] with a node-local server on an abstract socket (see [`abstract_listener`]).
pub(crate) fn exchange_abstract(
    name: &str,
    size: usize,
    hello: &Hello,
    fds: [RawFd; FDS_PER_HELLO],
) -> Result<(Vec<PeerHello>, OwnedFd), BootstrapError> {
    let addr = UnixAddr::new_abstract(name.as_bytes()).map_err(|e| rdv_err(name, e.to_string()))?;
    exchange_at(&addr, name, size, hello, fds)
}

fn exchange_at(
    addr: &UnixAddr,
    path: &str,
    size: usize,
    hello: &Hello,
    fds: [RawFd; FDS_PER_HELLO],
) -> Result<(Vec<PeerHello>, OwnedFd), BootstrapError> {
    let sock = seqpacket().map_err(|e| BootstrapError::os("creating rendezvous socket", e))?;
    connect(sock.as_raw_fd(), addr).map_err(|e| rdv_err(path, format!("connect: {e}")))?;
    let bytes = serde_json::to_vec(hello).map_err(|e| rdv_err(path, e.to_string()))?;
    send_msg(sock.as_raw_fd(), &bytes, &fds)
        .map_err(|e| rdv_err(path, format!("send hello: {e}")))?;
    let mut peers = Vec::with_capacity(size);
    for i in 0..size {
        let (bytes, fds) = recv_msg(sock.as_raw_fd())
            .map_err(|e| rdv_err(path, format!("receive: {e}")))?
            .ok_or_else(|| {
                rdv_err(
                    path,
                    "launcher closed the rendezvous (another rank failed?)",
                )
            })?;
        let hello: Hello = serde_json::from_slice(&bytes)
            .map_err(|e| rdv_err(path, format!("bad hello from launcher: {e}")))?;
        let fds = fds.ok_or_else(|| {
            rdv_err(
                path,
                format!("a hello came without its {FDS_PER_HELLO} descriptors"),
            )
        })?;
        if hello.rank != i {
            return Err(rdv_err(
                path,
                format!("expected hello of rank {i}, got {}", hello.rank),
            ));
        }
        peers.push(PeerHello { hello, fds });
    }
    Ok((peers, sock))
}

/// What the launcher tells ranks after the rendezvous.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub enum Notice {
    /// A rank's process has ended with status 0.
    Exited {
        /// The rank.
        rank: usize,
    },
}

/// Launcher side: tells every connected rank that `rank` has exited. Ranks that are gone are
/// skipped.
pub fn notify_exit(conns: &[OwnedFd], rank: usize) {
    let bytes = serde_json::to_vec(&Notice::Exited { rank }).expect("notice serializes");
    for c in conns {
        // Never block the launcher on a rank that does not read its notices.
        let iov = [IoSlice::new(&bytes)];
        let flags = MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT;
        let _ = sendmsg::<()>(c.as_raw_fd(), &iov, &[], flags, None);
    }
}

/// Rank side: the notices that have arrived, without blocking. `Err` means the launcher is gone.
pub fn poll_notices(conn: &OwnedFd) -> Result<Vec<Notice>, BootstrapError> {
    let mut out = Vec::new();
    loop {
        let mut buf = [0u8; 256];
        let mut iov = [IoSliceMut::new(&mut buf)];
        match recvmsg::<()>(conn.as_raw_fd(), &mut iov, None, MsgFlags::MSG_DONTWAIT) {
            Ok(msg) if msg.bytes == 0 => {
                return Err(rdv_err("launcher", "the launcher closed its connection"))
            }
            Ok(msg) => {
                let n = msg.bytes;
                if let Ok(notice) = serde_json::from_slice::<Notice>(&buf[..n]) {
                    out.push(notice);
                }
            }
            Err(nix::Error::EAGAIN) => return Ok(out),
            Err(e) => return Err(rdv_err("launcher", format!("receive notice: {e}"))),
        }
    }
}

/// The launcher side of the rendezvous (or, in a job spanning several hosts, one host's agent:
/// it serves the ranks of its host, which are a contiguous range of the job's ranks; or, under
/// a PMIx launcher, the first rank of a node, serving that node's ranks).
///
/// Only processes of this user are served: a socket in the file system sits in a private
/// directory, but an abstract one has no permissions, so every connection's credentials are
/// checked too.
#[derive(Debug)]
pub struct RendezvousServer {
    listener: OwnedFd,
    /// The ranks served here, ascending.
    ranks: Vec<usize>,
    path: String,
}

/// A rank that has said hello: its connection, hello, hello bytes and descriptors.
type Joined = (OwnedFd, Hello, Vec<u8>, HelloFds);

/// Every rank of a host has said hello; nobody has been answered yet
/// ([`RendezvousServer::gather`]). A multi-host launcher forwards [`Gathered::hellos`] to the
/// other hosts and answers with the whole job's hellos ([`Gathered::release`]).
#[derive(Debug)]
pub struct Gathered {
    path: String,
    /// Per rank served, in rank order.
    joined: Vec<Joined>,
}

impl RendezvousServer {
    /// Binds a listening socket at `path` for a job of `size` ranks, all served here.
    pub fn bind(path: &Path, size: usize) -> Result<Self, BootstrapError> {
        Self::bind_ranks(path, 0..size)
    }

    /// Binds a listening socket at `path` for the ranks `ranks` of a job (those of one host).
    pub fn bind_ranks(path: &Path, ranks: Range<usize>) -> Result<Self, BootstrapError> {
        let p = path.display().to_string();
        let listener =
            seqpacket().map_err(|e| BootstrapError::os("creating rendezvous socket", e))?;
        let addr = UnixAddr::new(path).map_err(|e| rdv_err(&p, e.to_string()))?;
        bind(listener.as_raw_fd(), &addr).map_err(|e| rdv_err(&p, format!("bind: {e}")))?;
        let backlog = Backlog::new(ranks.len().clamp(1, 4096) as i32).unwrap_or(Backlog::MAXCONN);
        listen(&listener, backlog).map_err(|e| rdv_err(&p, format!("listen: {e}")))?;
        Ok(Self {
            listener,
            ranks: ranks.collect(),
            path: p,
        })
    }

    /// Serves the ranks `ranks` (any set) on `listener`, made by [`abstract_listener`];
    /// `name` is its name, for messages.
    pub(crate) fn on_listener(listener: OwnedFd, mut ranks: Vec<usize>, name: &str) -> Self {
        ranks.sort_unstable();
        ranks.dedup();
        Self {
            listener,
            ranks,
            path: name.to_string(),
        }
    }

    /// Waits for every rank's hello, then sends all hellos and descriptors to every rank.
    /// Returns the open connections (kept so ranks can notice the launcher going away).
    pub fn serve(self) -> Result<Vec<OwnedFd>, BootstrapError> {
        self.serve_with(|_| {})
    }

    /// Like [`RendezvousServer::serve`], calling `on_arrival(n)` after the n-th hello so the
    /// launcher can tell "not started" from "waiting for a rank that is gone".
    pub fn serve_with(self, on_arrival: impl Fn(usize)) -> Result<Vec<OwnedFd>, BootstrapError> {
        let gathered = self.gather(on_arrival)?;
        let all = gathered.hellos();
        gathered.release(&all)
    }

    /// Waits for the hello of every rank of the range (calling `on_arrival(n)` after the n-th)
    /// and returns them unanswered: the ranks keep waiting until [`Gathered::release`].
    pub fn gather(self, on_arrival: impl Fn(usize)) -> Result<Gathered, BootstrapError> {
        let mut slots: Vec<Option<Joined>> = self.ranks.iter().map(|_| None).collect();
        let mut arrived = 0;
        while arrived < slots.len() {
            let raw = accept(self.listener.as_raw_fd())
                .map_err(|e| rdv_err(&self.path, format!("accept: {e}")))?;
            // SAFETY: accept returned a fresh descriptor that nothing else owns.
            let conn = unsafe { OwnedFd::from_raw_fd(raw) };
            if !same_user(&conn) {
                continue;
            }
            let Some((bytes, fds)) = recv_msg(conn.as_raw_fd())
                .map_err(|e| rdv_err(&self.path, format!("receive hello: {e}")))?
            else {
                continue;
            };
            let hello: Hello = serde_json::from_slice(&bytes)
                .map_err(|e| rdv_err(&self.path, format!("bad hello: {e}")))?;
            let fds = fds.ok_or_else(|| {
                rdv_err(
                    &self.path,
                    format!(
                        "rank {} did not send {FDS_PER_HELLO} descriptors with its hello",
                        hello.rank
                    ),
                )
            })?;
            let slot = self
                .ranks
                .binary_search(&hello.rank)
                .ok()
                .and_then(|i| slots.get_mut(i))
                .ok_or_else(|| {
                    rdv_err(
                        &self.path,
                        format!("hello from rank {} outside the job", hello.rank),
                    )
                })?;
            if slot.is_some() {
                return Err(rdv_err(
                    &self.path,
                    format!("two ranks claim rank {}", hello.rank),
                ));
            }
            *slot = Some((conn, hello, bytes, fds));
            arrived += 1;
            on_arrival(arrived);
        }
        Ok(Gathered {
            path: self.path,
            joined: slots.into_iter().flatten().collect(),
        })
    }
}

impl Gathered {
    /// The hellos of this host's ranks, in rank order.
    pub fn hellos(&self) -> Vec<Hello> {
        self.joined.iter().map(|(_, h, _, _)| h.clone()).collect()
    }

    /// Answers every rank gathered here with `all`, the hellos of the whole job in rank order.
    /// The hellos of this host's ranks travel with their own descriptors; every other rank's
    /// (on another host, where its descriptors mean nothing) with descriptors of `/dev/null`,
    /// because [`exchange`] expects [`FDS_PER_HELLO`] descriptors per hello and the runtime
    /// ignores those of ranks on other nodes. Returns the open connections.
    pub fn release(self, all: &[Hello]) -> Result<Vec<OwnedFd>, BootstrapError> {
        if let Some((i, h)) = all.iter().enumerate().find(|(i, h)| h.rank != *i) {
            return Err(rdv_err(
                &self.path,
                format!("hello of rank {} in place {i} of the job's list", h.rank),
            ));
        }
        if let Some((_, h, _, _)) = self
            .joined
            .last()
            .filter(|(_, h, _, _)| h.rank >= all.len())
        {
            return Err(rdv_err(
                &self.path,
                format!(
                    "the job's list has {} hellos, fewer than rank {}",
                    all.len(),
                    h.rank
                ),
            ));
        }
        let null = std::fs::File::open("/dev/null")
            .map_err(|e| BootstrapError::os("opening /dev/null", e))?;
        let mut messages: Vec<(Vec<u8>, [RawFd; FDS_PER_HELLO])> = Vec::with_capacity(all.len());
        for h in all {
            let served = self
                .joined
                .binary_search_by_key(&h.rank, |(_, h, _, _)| h.rank);
            messages.push(if let Ok(i) = served {
                let (_, _, bytes, fds) = &self.joined[i];
                (bytes.clone(), fds.each_ref().map(|f| f.as_raw_fd()))
            } else {
                let bytes =
                    serde_json::to_vec(h).map_err(|e| rdv_err(&self.path, e.to_string()))?;
                (bytes, [null.as_raw_fd(); FDS_PER_HELLO])
            });
        }
        for (conn, _, _, _) in &self.joined {
            for (bytes, fds) in &messages {
                // A rank that died after its hello cannot be told; the launcher sees its exit
                // and ends the job, so keep serving the others.
                if send_msg(conn.as_raw_fd(), bytes, fds).is_err() {
                    break;
                }
            }
        }
        Ok(self
            .joined
            .into_iter()
            .map(|(conn, _, _, _)| conn)
            .collect())
    }
}

/// A listening socket in the abstract namespace (Linux): it has no file to leave behind when
/// its process is killed. `name` should be unguessable; [`RendezvousServer`] serves only this
/// user's processes whatever the name.
pub(crate) fn abstract_listener(name: &str, backlog: usize) -> Result<OwnedFd, BootstrapError> {
    let listener = seqpacket().map_err(|e| BootstrapError::os("creating rendezvous socket", e))?;
    let addr = UnixAddr::new_abstract(name.as_bytes()).map_err(|e| rdv_err(name, e.to_string()))?;
    bind(listener.as_raw_fd(), &addr).map_err(|e| rdv_err(name, format!("bind: {e}")))?;
    let backlog = Backlog::new(backlog.clamp(1, 4096) as i32).unwrap_or(Backlog::MAXCONN);
    listen(&listener, backlog).map_err(|e| rdv_err(name, format!("listen: {e}")))?;
    Ok(listener)
}

/// Whether the process at the other end of `conn` runs as this process's user.
fn same_user(conn: &OwnedFd) -> bool {
    nix::sys::socket::getsockopt(conn, nix::sys::socket::sockopt::PeerCredentials)
        // SAFETY: geteuid cannot fail and has no preconditions.
        .is_ok_and(|cred| cred.uid() == unsafe { libc::geteuid() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn three_ranks_exchange_hellos_and_descriptors() {
        let dir = scratch_dir("test");
        let path = dir.join("rdv.sock");
        let server = RendezvousServer::bind(&path, 3).unwrap();
        let server = std::thread::spawn(move || server.serve().unwrap());
        let ranks: Vec<_> = (0..3)
            .map(|rank| {
                let path = path.display().to_string();
                std::thread::spawn(move || {
                    let mut file = tempfile_with(format!("rank{rank}").as_bytes());
                    let second = tempfile_with(format!("second{rank}").as_bytes());
                    let hello = Hello {
                        rank,
                        pid: std::process::id(),
                        blob: serde_json::json!({ "r": rank }),
                    };
                    let fds = [file.as_raw_fd(), second.as_raw_fd()];
                    let (peers, _conn) = exchange(&path, 3, &hello, fds).unwrap();
                    file.flush().unwrap();
                    peers
                        .into_iter()
                        .map(|p| {
                            let [a, b] = p.fds.map(contents);
                            (p.hello.blob["r"].as_u64().unwrap(), a, b)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for r in ranks {
            let got = r.join().unwrap();
            let want: Vec<_> = (0..3)
                .map(|r| (r, format!("rank{r}"), format!("second{r}")))
                .collect();
            assert_eq!(got, want);
        }
        assert_eq!(server.join().unwrap().len(), 3);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn two_hosts_gather_apart_and_release_the_whole_list() {
        // Ranks 0 and 1 on "host" A, rank 2 on "host" B: each host gathers its own ranks, the
        // lists are joined as a multi-host launcher does, and every rank gets all three hellos
        // with the real descriptor for ranks of its host only.
        let dir = scratch_dir("hosts");
        let hosts = [(dir.join("a.sock"), 0..2), (dir.join("b.sock"), 2..3)];
        let (to_main, gathered) = std::sync::mpsc::channel();
        let mut releases = Vec::new();
        for (i, (path, ranks)) in hosts.iter().enumerate() {
            let server = RendezvousServer::bind_ranks(path, ranks.clone()).unwrap();
            let to_main = to_main.clone();
            let (to_host, all) = std::sync::mpsc::channel::<Vec<Hello>>();
            releases.push(to_host);
            std::thread::spawn(move || {
                let g = server.gather(|_| {}).unwrap();
                to_main.send((i, g.hellos())).unwrap();
                g.release(&all.recv().unwrap()).unwrap()
            });
        }
        let ranks: Vec<_> = (0..3)
            .map(|rank| {
                let path = hosts[usize::from(rank >= 2)].0.display().to_string();
                std::thread::spawn(move || {
                    let file = tempfile_with(format!("rank{rank}").as_bytes());
                    let second = tempfile_with(format!("second{rank}").as_bytes());
                    let hello = Hello {
                        rank,
                        pid: std::process::id(),
                        blob: serde_json::json!(rank),
                    };
                    let fds = [file.as_raw_fd(), second.as_raw_fd()];
                    let (peers, _conn) = exchange(&path, 3, &hello, fds).unwrap();
                    peers
                        .into_iter()
                        .map(|p| {
                            let [a, b] = p.fds.map(contents);
                            (p.hello.rank, format!("{a}+{b}"))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all = [Vec::new(), Vec::new()];
        for _ in 0..2 {
            let (i, h) = gathered.recv().unwrap();
            all[i] = h;
        }
        let all: Vec<Hello> = all.concat();
        for r in &releases {
            r.send(all.clone()).unwrap();
        }
        let got: Vec<_> = ranks.into_iter().map(|r| r.join().unwrap()).collect();
        let s = |x: &str| x.to_string();
        let host_a = vec![
            (0, s("rank0+second0")),
            (1, s("rank1+second1")),
            (2, s("+")),
        ];
        assert_eq!(got[0], host_a);
        assert_eq!(got[1], host_a);
        let host_b = vec![(0, s("+")), (1, s("+")), (2, s("rank2+second2"))];
        assert_eq!(got[2], host_b);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_hello_without_all_its_descriptors_is_refused() {
        let dir = scratch_dir("short");
        let path = dir.join("rdv.sock");
        let server = RendezvousServer::bind(&path, 1).unwrap();
        let server = std::thread::spawn(move || server.serve().unwrap_err().to_string());
        let sock = seqpacket().unwrap();
        connect(sock.as_raw_fd(), &UnixAddr::new(&path).unwrap()).unwrap();
        let hello = Hello {
            rank: 0,
            pid: std::process::id(),
            blob: serde_json::json!(null),
        };
        let file = tempfile_with(b"only one");
        let bytes = serde_json::to_vec(&hello).unwrap();
        send_msg(sock.as_raw_fd(), &bytes, &[file.as_raw_fd()]).unwrap();
        let why = server.join().unwrap();
        assert!(
            why.contains("rank 0 did not send 2 descriptors with its hello"),
            "{why}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A fresh directory for one test's sockets, named by `tag` and this process (the test
    /// removes it at its end).
    fn scratch_dir(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("volley-rdv-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// The bytes of a file received at the rendezvous, read at offset 0 (positionally: every
    /// rank holds the same open files, whose offsets are shared, so seeking would race).
    fn contents(fd: OwnedFd) -> String {
        let f = std::fs::File::from(fd);
        let mut buf = [0u8; 16];
        let n = std::os::unix::fs::FileExt::read_at(&f, &mut buf, 0).unwrap();
        String::from_utf8(buf[..n].to_vec()).unwrap()
    }

    fn tempfile_with(bytes: &[u8]) -> std::fs::File {
        let path = std::env::temp_dir().join(format!(
            "volley-rdv-file-{}-{}",
            std::process::id(),
            super::super::job::random_u64()
        ));
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        f.write_all(bytes).unwrap();
        f
    }
}
