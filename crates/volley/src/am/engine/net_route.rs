//! The network route: peers on other nodes, reached through a [`NetTransport`], with the
//! flush and poll policy that keeps system calls off the shared-memory path.

use super::super::backoff::Backoff;
use super::super::frame_kind::FrameKind;
use super::super::net_frame;
use super::super::poll_policy::NetPollState;
use super::super::stats::bump;
use super::Engine;
use crate::transport::net::{NetError, NetTransport};
use crate::transport::Channel;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::time::Instant;

/// Sends closer together than this share a flush (about the cost of one send system call).
pub(super) const FLUSH_INTERVAL_NS: u64 = 2_000;

/// A message from the network: source rank and bytes.
pub(super) type Delivered = (usize, Vec<u8>);

/// The network transport and the messages it delivered that no handler has run for yet.
pub(super) struct NetRoute {
    pub(super) transport: RefCell<Box<dyn NetTransport>>,
    /// Requests and replies received, in arrival order per source. Requests wait here while a
    /// blocked reply send polls (it may run reply handlers only).
    pub(super) inbox: [RefCell<VecDeque<Delivered>>; 2],
    /// Scratch for `progress`, kept to avoid an allocation per poll.
    pub(super) scratch: Cell<Vec<Delivered>>,
    /// Encoding buffer for outgoing messages (taken while in use).
    pub(super) encode_buf: Cell<Vec<u8>>,
    pub(super) policy: RefCell<NetPollState>,
    pub(super) epoch: Instant,
    /// When queued messages were last pushed out.
    pub(super) last_flush: Cell<u64>,
    /// Whether a send since then left its message queued in the transport (a run of sends
    /// shares one flush; the poll that ran the handlers which sent them flushes at its end).
    pub(super) unflushed: Cell<bool>,
    pub(super) polls: Cell<u64>,
    pub(super) empty_polls: Cell<u64>,
    /// Messages sent and handled through the network.
    pub(super) sent: Cell<u64>,
    pub(super) handled: Cell<u64>,
    /// Peers that left normally: a broken connection to them is no failure.
    pub(super) departed: Vec<Cell<bool>>,
}

impl NetRoute {
    pub(super) fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }
}

impl Engine {
    /// Sends one message through the network transport, polling while its window is full.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    pub(super) fn net_send(
        &self,
        dest: usize,
        ch: Channel,
        kind: FrameKind,
        handler: u16,
        args: &[u64],
        payload: &[u8],
        offset: u64,
    ) {
        let net = self
            .net
            .as_ref()
            .expect("a rank off this node implies a network route");
        let mut buf = net.encode_buf.take();
        net_frame::encode(&mut buf, ch, kind, handler, args, payload, offset);
        let mut backoff = Backoff::new(self.polite);
        let mut blocked = false;
        loop {
            let now = net.now();
            let sent = net.transport.borrow_mut().send(dest, &buf, now);
            match sent {
                Ok(()) => {
                    // A message alone leaves at once; messages sent in a quick run share the
                    // system calls of a flush every FLUSH_INTERVAL_NS (and a poll flushes too).
                    if now.saturating_sub(net.last_flush.get()) >= FLUSH_INTERVAL_NS {
                        self.flush_net_at(now);
                    } else {
                        net.unflushed.set(true);
                    }
                    break;
                }
                Err(NetError::WouldBlock) => {
                    if !blocked {
                        blocked = true;
                        bump(&self.stats.blocked_sends);
                    }
                    // The window opens only when acks arrive: poll the network itself, not
                    // just when the policy's turn comes.
                    self.poll_net(ch == Channel::Request, true);
                    self.wait_step(ch, &mut backoff);
                }
                Err(e) => self.net_failed(e),
            }
        }
        net.encode_buf.set(buf);
        if kind != FrameKind::System {
            bump(&net.sent);
        }
    }

    /// Pushes out what the network transport has queued.
    #[inline]
    pub(crate) fn flush_net(&self) {
        if let Some(net) = &self.net {
            self.flush_net_at(net.now());
        }
    }

    pub(super) fn flush_net_at(&self, now: u64) {
        let Some(net) = &self.net else { return };
        let result = net.transport.borrow_mut().flush(now);
        // From the flush's end: a flush that takes longer than the interval must not make
        // every following send flush again.
        net.last_flush.set(net.now());
        net.unflushed.set(false);
        if let Err(e) = result {
            self.net_peer_failed(e);
        }
    }

    /// A network failure the rank cannot recover from: report it and end the rank, as for a
    /// corrupt ring (the launcher then ends the job and names this rank).
    #[cold]
    #[inline(never)]
    pub(super) fn net_failed(&self, e: NetError) -> ! {
        let line = format!(
            "volley: rank {}: network transport failed: {e}; ending this rank\n",
            self.me
        );
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
        // A peer that died is usually seen here before its launcher has reaped it: give the
        // launcher a moment to stop this rank and name the rank that really failed.
        if self.launcher.is_some() {
            std::thread::sleep(std::time::Duration::from_secs(2));
        }
        std::process::exit(70);
    }

    /// Polls the network transport (when `force` or the policy says so) and runs the handlers
    /// of what it delivered: replies always, requests if `requests`. Returns handlers run.
    #[inline(never)]
    pub(super) fn poll_net(&self, requests: bool, force: bool) -> usize {
        let Some(net) = &self.net else {
            return 0;
        };
        if force || net.policy.borrow_mut().tick() {
            let mut scratch = net.scratch.take();
            let now = net.now();
            net.last_flush.set(now);
            net.unflushed.set(false);
            let result = net.transport.borrow_mut().progress(now, &mut scratch);
            bump(&net.polls);
            if scratch.is_empty() {
                bump(&net.empty_polls);
            }
            net.policy.borrow_mut().record(scratch.len());
            for (src, msg) in scratch.drain(..) {
                // The channel bit is in the first word; a message too short for it is
                // dropped by the decoder later, so any channel will do.
                let reply = msg.get(3).is_some_and(|b| b & 1 != 0);
                net.inbox[reply as usize].borrow_mut().push_back((src, msg));
            }
            net.scratch.set(scratch);
            if let Err(e) = result {
                self.net_peer_failed(e);
            }
        }
        let mut handled = 0;
        if self.handlers_held() {
            return 0;
        }
        for (ch, wanted) in [(Channel::Reply, true), (Channel::Request, requests)] {
            if !wanted {
                continue;
            }
            // One message at a time: handlers may poll again and append to the inbox.
            loop {
                let next = net.inbox[ch as usize].borrow_mut().pop_front();
                let Some((src, msg)) = next else { break };
                match self.deliver_net(src, ch, &msg) {
                    Ok(user) => {
                        handled += 1;
                        if user {
                            bump(&net.handled);
                        }
                    }
                    Err(()) => bump(&self.stats.dropped),
                }
                net.transport.borrow_mut().recycle(src, msg);
            }
        }
        handled
    }

    /// A failed pair: harmless when the peer had finished (it sent us its FinalizeAck, so
    /// it needs nothing more and we expect nothing more), fatal otherwise.
    pub(super) fn net_peer_failed(&self, e: NetError) {
        if let NetError::PeerFailed { peer, .. } = &e {
            if let Some(net) = &self.net {
                if net.departed.get(*peer).is_some_and(Cell::get) {
                    return;
                }
            }
        }
        self.net_failed(e)
    }

    /// Leaves the network after the two-phase finalize: lingers until our last messages are
    /// acknowledged and the peers no longer need our acks (bounded).
    pub(crate) fn close_net(&self) {
        let Some(net) = &self.net else {
            return;
        };
        let deadline = net.now() + 10_000_000_000;
        let mut now = || net.now();
        if let Err(e) = net.transport.borrow_mut().close(&mut now, deadline) {
            let line = format!("volley: rank {}: closing the network: {e}\n", self.me);
            let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
        }
    }
}
