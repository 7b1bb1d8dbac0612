//! One host's side of the rendezvous, served on a thread: the socket in a private 0700
//! temporary directory, the ranks' connections once they have joined, and the exit notices
//! relayed to them.
//!
//! The directory goes as soon as every rank has joined, or when its owner exits. An owner
//! killed outright before that leaves it behind; its owner lock tells the next launcher or
//! agent on the host (same user, same `TMPDIR`), which removes it.

use nix::fcntl::{Flock, FlockArg};
use std::fs::File;
use std::ops::Range;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use volley::bootstrap::rendezvous::{self, Hello, RendezvousServer};

/// Turns the hellos of this host's ranks into the whole job's hellos, in rank order: the
/// identity on a single host; a round trip through the launcher for an agent.
pub type Complete = Box<dyn FnOnce(Vec<Hello>) -> Result<Vec<Hello>, String> + Send>;

/// What the owner and the rendezvous thread share.
#[derive(Default)]
struct Link {
    /// The ranks' connections, once every rank has been answered.
    conns: Vec<OwnedFd>,
    /// Ranks that have exited with status 0 (replayed to connections handed over later).
    exited: Vec<usize>,
    /// Why the rendezvous failed, if it did.
    error: Option<String>,
}

/// Where a rendezvous directory's name starts, in `$TMPDIR`.
const DIR_PREFIX: &str = "volley-";
/// The file in a rendezvous directory on which its owner (launcher or agent) holds an
/// exclusive `flock` for its life. The lock goes with the process however it ends, so a
/// directory whose lock can be taken was left by an owner killed outright before every rank
/// joined (the only time the directory outlives its use), and the next owner removes it.
const OWNER_LOCK: &str = "owner.lock";

/// Removes a directory however its owner leaves.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The rendezvous of one host's ranks.
pub struct HostRendezvous {
    sock: PathBuf,
    arrived: Arc<AtomicUsize>,
    link: Arc<Mutex<Link>>,
    // Dropped after `_dir`: the directory goes while the lock on it is still held.
    _dir: TempDir,
    _owner: Flock<File>,
}

impl HostRendezvous {
    /// Creates `$TMPDIR/volley-<name>` (0700) with the socket for the ranks `ranks`, and serves
    /// it on a thread: once they have all said hello, `complete` gives the job's hellos and
    /// every rank is answered.
    pub fn start(name: &str, ranks: Range<usize>, complete: Complete) -> Result<Self, String> {
        let tmp = std::env::temp_dir();
        remove_abandoned(&tmp);
        let dir = tmp.join(format!("{DIR_PREFIX}{name}"));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let dir = TempDir(dir);
        let owner = hold_owner_lock(&dir.0)?;
        let sock = dir.0.join("rendezvous.sock");
        let server = RendezvousServer::bind_ranks(&sock, ranks).map_err(|e| e.to_string())?;
        // Hellos received so far. All of this host's ranks have joined once it reaches their
        // number, which happens before any of them is released from the rendezvous, so no
        // rank can exit "early" after it.
        let arrived = Arc::new(AtomicUsize::new(0));
        let link: Arc<Mutex<Link>> = Arc::default();
        {
            let (arrived, link, dir) = (arrived.clone(), link.clone(), dir.0.clone());
            std::thread::spawn(move || {
                let result = server
                    .gather(|n| {
                        arrived.store(n, Ordering::Release);
                        // The supervisor judges ranks that exit before the others arrive.
                        super::signals::notify();
                    })
                    .map_err(|e| e.to_string())
                    .and_then(|gathered| {
                        // Every rank is connected: the socket is no longer needed, so nothing
                        // is left in the file system even if this process is killed outright.
                        let _ = std::fs::remove_dir_all(&dir);
                        let all = complete(gathered.hellos())?;
                        gathered.release(&all).map_err(|e| e.to_string())
                    });
                let mut link = link.lock().unwrap_or_else(|e| e.into_inner());
                match result {
                    Ok(conns) => {
                        // Ranks that exited before the connections were handed over.
                        for &rank in &link.exited {
                            rendezvous::notify_exit(&conns, rank);
                        }
                        link.conns = conns;
                    }
                    Err(e) => link.error = Some(e),
                }
                drop(link);
                super::signals::notify();
            });
        }
        Ok(Self {
            sock,
            arrived,
            link,
            _dir: dir,
            _owner: owner,
        })
    }

    /// The socket's path, for `VOLLEY_RENDEZVOUS`.
    pub fn socket(&self) -> &Path {
        &self.sock
    }

    /// How many of this host's ranks have said hello.
    pub fn arrived(&self) -> usize {
        self.arrived.load(Ordering::Acquire)
    }

    /// Why the rendezvous failed, once.
    pub fn take_error(&self) -> Option<String> {
        self.lock().error.take()
    }

    /// Tells this host's ranks that `rank` (of any host) has exited with status 0: ranks still
    /// waiting on it fail loudly if it left without finalizing, instead of waiting forever.
    /// Before the connections are handed over, the notice is replayed then.
    pub fn notify_exit(&self, rank: usize) {
        let mut link = self.lock();
        link.exited.push(rank);
        rendezvous::notify_exit(&link.conns, rank);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Link> {
        self.link.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Creates `dir`'s owner lock, already locked: it is locked under a temporary name and then
/// renamed, so that no other launcher ever finds the lock of a live owner unlocked.
fn hold_owner_lock(dir: &Path) -> Result<Flock<File>, String> {
    let fail = |what: &str, e: &dyn std::fmt::Display| format!("{what} in {}: {e}", dir.display());
    let fresh = dir.join(format!("{OWNER_LOCK}.new"));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&fresh)
        .map_err(|e| fail("creating the owner lock", &e))?;
    let held = Flock::lock(file, FlockArg::LockExclusiveNonblock)
        .map_err(|(_, e)| fail("locking the owner lock", &e))?;
    std::fs::rename(&fresh, dir.join(OWNER_LOCK)).map_err(|e| fail("naming the owner lock", &e))?;
    Ok(held)
}

/// Removes this user's rendezvous directories in `tmp` whose owner has died (their owner lock
/// can be taken). Directories without an owner lock (being set up, or made by something else)
/// are left alone.
fn remove_abandoned(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    let me = nix::unistd::geteuid().as_raw();
    for entry in entries.flatten() {
        let ours = entry.file_name().to_string_lossy().starts_with(DIR_PREFIX)
            // Not followed: a symbolic link is not a rendezvous directory.
            && entry.metadata().is_ok_and(|m| m.is_dir() && m.uid() == me);
        if !ours {
            continue;
        }
        let dir = entry.path();
        let Ok(lock) = File::open(dir.join(OWNER_LOCK)) else {
            continue;
        };
        if let Ok(held) = Flock::lock(lock, FlockArg::LockExclusiveNonblock) {
            // Its owner is gone; removed while we hold the lock, so another launcher sweeping
            // at the same time finds it held and leaves it to us.
            let _ = std::fs::remove_dir_all(&dir);
            drop(held);
        }
    }
}
