//! Job control: runtime-internal messages (barrier, finalize), the launcher's health reports,
//! fatal ring corruption, the watchdog and the statistics.

use super::super::report::Doing;
use super::super::stats::{NetworkStats, Stats};
#[cfg(test)]
use super::super::watchdog::Watchdog;
use super::super::wireup::Watch;
use super::Engine;
use crate::am::error::Result;
use crate::bootstrap::rendezvous::{self, Notice};
use crate::transport::net::NetError;
use crate::transport::Channel;
use std::os::fd::{AsRawFd, OwnedFd};

/// Most rounds a dissemination barrier can need (log2 of the largest job).
pub(crate) const MAX_BARRIER_ROUNDS: usize = 64;

/// Runtime-internal one-way operations (the handler field of a `System` frame).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub(crate) enum SystemOp {
    /// args: [epoch, round]
    Barrier = 1,
    /// Phase 1 of leaving: the sender will send no more requests.
    Finalize = 2,
    /// Phase 2: the sender has received every rank's Finalize (so it has handled every
    /// request sent to it and injected every reply). A rank exits only after all of these.
    FinalizeAck = 3,
}

impl Engine {
    /// Fails loudly if a peer has exited without finalizing: nothing it owed us can arrive, so
    /// waiting on would hang. Called from long waits only.
    #[cold]
    pub(crate) fn check_health(&self) {
        let fatal = |why: String| -> ! {
            end_rank(&format!(
                "volley: rank {}: {why}; ending this rank",
                self.me
            ))
        };
        let exited = |rank: usize| {
            fatal(format!(
                "rank {rank} exited without finalizing (dropping its Runtime) while this rank \
                 still runs"
            ))
        };
        match &self.watch {
            Watch::Nothing => {}
            Watch::Launcher(conn) => match rendezvous::poll_notices(conn) {
                Ok(notices) => {
                    for Notice::Exited { rank } in notices {
                        if rank < self.size && rank != self.me && !self.finalized_from[rank].get() {
                            exited(rank);
                        }
                    }
                }
                Err(e) => fatal(format!("lost the launcher ({e})")),
            },
            Watch::Processes(pidfds) => {
                for (rank, fd) in pidfds {
                    if !self.finalized_from[*rank].get() && fd.as_ref().is_none_or(readable) {
                        exited(*rank);
                    }
                }
            }
        }
    }

    /// A frame whose length cannot be right: the ring is out of step and nothing after this
    /// frame can be trusted, so the rank stops loudly rather than read garbage.
    #[cold]
    #[inline(never)]
    pub(super) fn corrupt_ring(&self, src: usize, ch: Channel, word: u64) -> ! {
        end_rank(&format!(
            "volley: rank {}: corrupt frame header {word:#018x} on the {ch:?} ring from rank \
             {src}; ending this rank",
            self.me
        ))
    }

    pub(super) fn deliver_system(&self, src: usize, op: u16, args: &[u64]) -> Result<(), ()> {
        match op {
            x if x == SystemOp::Barrier as u16 => {
                let (epoch, round) = (args.first().ok_or(())?, *args.get(1).ok_or(())? as usize);
                let c = self.barrier_arrivals[(*epoch & 1) as usize]
                    .get(round)
                    .ok_or(())?;
                c.set(c.get() + 1);
                Ok(())
            }
            x if x == SystemOp::Finalize as u16 => {
                if !self.finalized_from[src].replace(true) {
                    self.finalized_peers.set(self.finalized_peers.get() + 1);
                }
                Ok(())
            }
            x if x == SystemOp::FinalizeAck as u16 => {
                self.finalize_acks.set(self.finalize_acks.get() + 1);
                if let Some(net) = &self.net {
                    net.departed(src);
                }
                Ok(())
            }
            _ => Err(()),
        }
    }

    /// Takes one barrier arrival for (epoch, round), from rank `from`, waiting for it.
    pub(crate) fn await_barrier_arrival(&self, epoch: u64, round: usize, from: usize) {
        let c = &self.barrier_arrivals[(epoch & 1) as usize][round];
        let purpose = Doing::Barrier {
            round: round as u32,
            from: from as u32,
        };
        self.waiting_for(purpose, || {
            self.wait_awaiting(|| c.get() > 0, || self.is_running(from))
        });
        c.set(c.get() - 1);
    }

    /// What the watchdog reported so far.
    #[cfg(test)]
    pub(crate) fn watchdog_reports(&self) -> Vec<String> {
        self.watchdog
            .as_ref()
            .map_or_else(Vec::new, Watchdog::reports)
    }

    /// All counters of this rank.
    pub(crate) fn stats(&self) -> Stats {
        let mut stats = self.stats.snapshot();
        let (sent, handled) = self.shm.short_counts();
        for ch in 0..2 {
            stats.sent[ch][0] += sent[ch];
            stats.handled[ch][0] += handled[ch];
        }
        if let Some(sync) = self.thread_sync() {
            stats.progress = sync.stats();
        }
        if let Some(net) = &self.net {
            let (ours, transport, transport_stats) = net.stats();
            stats.network = NetworkStats {
                transport,
                sent: ours.sent,
                handled: ours.handled,
                polls: ours.polls,
                empty_polls: ours.empty_polls,
                interval: ours.interval,
                transport_stats,
            };
        }
        stats
    }

    /// Leaves the network after the two-phase finalize: lingers until our last messages are
    /// acknowledged and the peers no longer need our acks (bounded).
    pub(crate) fn close_net(&self) {
        let Some(net) = &self.net else {
            return;
        };
        if let Err(e) = net.close() {
            let line = format!("volley: rank {}: closing the network: {e}\n", self.me);
            let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
        }
    }
}

/// A network failure rank `me` cannot recover from: report it and end the rank, as for a
/// corrupt ring (the launcher then ends the job and names this rank).
#[cold]
#[inline(never)]
pub(super) fn net_failed(me: usize, has_launcher: bool, e: NetError) -> ! {
    // A peer that died is usually seen here before its launcher has reaped it: give the
    // launcher a moment to stop this rank and name the rank that really failed.
    if has_launcher {
        let line = format!("volley: rank {me}: network transport failed: {e}\n");
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
        std::thread::sleep(std::time::Duration::from_secs(2));
    }
    end_rank(&format!(
        "volley: rank {me}: network transport failed: {e}; ending this rank"
    ))
}

/// Ends this rank after an error it cannot recover from: prints `line` (in one write) and
/// exits with status 70; under a PMIx launcher, first asks it to end the whole job with that
/// message (`PMIx_Abort`), which is how such launchers learn which rank failed and why.
#[cold]
#[inline(never)]
pub(crate) fn end_rank(line: &str) -> ! {
    let text = format!("{line}\n");
    let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), text.as_bytes());
    crate::bootstrap::pmix::abort_job(70, line);
    std::process::exit(70);
}

/// Whether `fd` is readable now (a pidfd is once its process has exited).
fn readable(fd: &OwnedFd) -> bool {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no timeout.
    unsafe { libc::poll(&mut pfd, 1, 0) > 0 && pfd.revents & libc::POLLIN != 0 }
}
