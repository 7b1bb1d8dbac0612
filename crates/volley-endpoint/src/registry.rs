//! The rank's endpoints as volley's handlers see them: which ids are open (and in which
//! generation), each endpoint's tag, which handler indices it has, and its queues. Shared
//! with the handlers, which may run on volley's progress thread, hence the locks.

use crate::message::Reason;
use crate::name::EndpointId;
use crate::wire::{Header, Kind};
use crate::MAX_ARGS;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// A message waiting in an endpoint's request or reply queue (its payload copied out of
/// volley's buffer, which lives only while volley's handler runs).
#[derive(Debug)]
pub(crate) struct Queued {
    pub(crate) src_rank: usize,
    pub(crate) header: Header,
    pub(crate) args: [u64; MAX_ARGS],
    pub(crate) payload: Vec<u8>,
}

impl Queued {
    pub(crate) fn new(src_rank: usize, header: Header, args: &[u64], payload: &[u8]) -> Self {
        let mut a = [0; MAX_ARGS];
        a[..args.len()].copy_from_slice(args);
        Self {
            src_rank,
            header,
            args: a,
            payload: payload.to_vec(),
        }
    }

    pub(crate) fn args(&self) -> &[u64] {
        &self.args[..self.header.nargs as usize]
    }
}

/// A message that came back to this endpoint, waiting for handler 0.
#[derive(Debug)]
pub(crate) struct Bounced {
    /// The rank that returned it (the destination's).
    pub(crate) by_rank: usize,
    pub(crate) kind: Kind,
    pub(crate) reason: Reason,
    pub(crate) msg: Queued,
}

/// An endpoint's queues.
#[derive(Debug, Default)]
pub(crate) struct Queues {
    pub(crate) requests: VecDeque<Queued>,
    pub(crate) replies: VecDeque<Queued>,
    /// Unbounded: it holds only messages this endpoint sent.
    pub(crate) returned: VecDeque<Bounced>,
    /// Set, under this lock, when the endpoint closes: arrivals are then returned.
    pub(crate) closed: bool,
}

/// What volley's handlers need of one open endpoint.
#[derive(Debug)]
pub(crate) struct EpShared {
    pub(crate) id: EndpointId,
    pub(crate) tag: AtomicU64,
    /// Bit `i`: handler index `i` holds a request handler.
    request_bits: [AtomicU64; 4],
    /// Bit `i`: handler index `i` holds a reply handler.
    reply_bits: [AtomicU64; 4],
    /// Most messages in each of the request and reply queues.
    pub(crate) depth: usize,
    queues: Mutex<Queues>,
}

fn bit(bits: &[AtomicU64; 4], i: u8) -> bool {
    bits[i as usize / 64].load(Ordering::Acquire) >> (i % 64) & 1 == 1
}

impl EpShared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Queues> {
        // A panic in a program's handler does not happen under this lock; poisoning would
        // mean a bug here, and the queues are still consistent (every change is one call).
        self.queues.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records that index `i` holds a handler of `kind` (and not of the other).
    pub(crate) fn set_handler(&self, i: u8, kind: Kind) {
        let (on, off) = match kind {
            Kind::Request => (&self.request_bits, &self.reply_bits),
            Kind::Reply => (&self.reply_bits, &self.request_bits),
        };
        let m = 1u64 << (i % 64);
        on[i as usize / 64].fetch_or(m, Ordering::AcqRel);
        off[i as usize / 64].fetch_and(!m, Ordering::AcqRel);
    }

    fn has_handler(&self, i: u8, kind: Kind) -> bool {
        match kind {
            Kind::Request => bit(&self.request_bits, i),
            Kind::Reply => bit(&self.reply_bits, i),
        }
    }

    /// Queues an arriving request or reply; `Some` gives it back with the reason it must go
    /// back to its sender.
    pub(crate) fn accept(&self, kind: Kind, msg: Queued) -> Option<(Reason, Queued)> {
        let mut q = self.lock();
        if q.closed {
            return Some((Reason::Closed, msg));
        }
        if self.tag.load(Ordering::Acquire) != msg.header.dest_tag {
            return Some((Reason::BadTag, msg));
        }
        if msg.header.handler == 0 || !self.has_handler(msg.header.handler, kind) {
            return Some((Reason::NoHandler, msg));
        }
        let queue = match kind {
            Kind::Request => &mut q.requests,
            Kind::Reply => &mut q.replies,
        };
        if queue.len() >= self.depth {
            return Some((Reason::Full, msg));
        }
        queue.push_back(msg);
        None
    }
}

/// One endpoint number: its current generation and, while open, the endpoint.
#[derive(Debug)]
struct Slot {
    generation: u32,
    ep: Option<Arc<EpShared>>,
}

/// The rank's endpoints.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    slots: Mutex<Vec<Slot>>,
    /// Messages this rank returned to their senders.
    pub(crate) returned: AtomicU64,
    /// Returned messages that found their sender closed (nowhere left to deliver them).
    pub(crate) lost: AtomicU64,
}

impl Registry {
    fn slots(&self) -> MutexGuard<'_, Vec<Slot>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens an endpoint on the lowest free number, in that number's next generation.
    pub(crate) fn open(&self, tag: u64, depth: usize) -> Arc<EpShared> {
        let mut slots = self.slots();
        let id = match slots.iter().position(|s| s.ep.is_none()) {
            Some(i) => i,
            None => {
                slots.push(Slot {
                    generation: 0,
                    ep: None,
                });
                slots.len() - 1
            }
        };
        let slot = &mut slots[id];
        slot.generation = slot.generation.wrapping_add(1);
        let ep = Arc::new(EpShared {
            id: EndpointId {
                id: id as u32,
                generation: slot.generation,
            },
            tag: AtomicU64::new(tag),
            request_bits: Default::default(),
            reply_bits: Default::default(),
            depth,
            queues: Mutex::new(Queues::default()),
        });
        slot.ep = Some(ep.clone());
        ep
    }

    /// Closes `ep`: later arrivals are returned as closed. Returns what was still queued for
    /// its handlers.
    pub(crate) fn close(&self, ep: &EpShared) -> Queues {
        let mut slots = self.slots();
        if let Some(slot) = slots.get_mut(ep.id.id as usize) {
            if slot.generation == ep.id.generation {
                slot.ep = None;
            }
        }
        drop(slots);
        let mut q = ep.lock();
        let left = std::mem::take(&mut *q);
        q.closed = true;
        left
    }

    /// The open endpoint `id`, or why a message to it cannot be delivered: a number never
    /// opened (or a generation not yet reached) is unreachable, an older generation or a
    /// closed endpoint is closed.
    pub(crate) fn find(&self, id: EndpointId) -> Result<Arc<EpShared>, Reason> {
        let slots = self.slots();
        let slot = slots.get(id.id as usize).ok_or(Reason::Unreachable)?;
        if id.generation == 0 || id.generation > slot.generation {
            return Err(Reason::Unreachable);
        }
        match &slot.ep {
            Some(ep) if slot.generation == id.generation => Ok(ep.clone()),
            _ => Err(Reason::Closed),
        }
    }

    /// Delivers a message returned to endpoint `to`; counts it lost if `to` has closed.
    pub(crate) fn bounced(&self, b: Bounced) {
        let to = b.msg.header.src;
        if let Ok(ep) = self.find(to) {
            let mut q = ep.lock();
            if !q.closed {
                q.returned.push_back(b);
                return;
            }
        }
        self.lost.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(dest: EndpointId, tag: u64, handler: u8) -> Queued {
        let h = Header {
            dest,
            dest_tag: tag,
            src: EndpointId {
                id: 0,
                generation: 1,
            },
            src_tag: 0,
            handler,
            nargs: 1,
            index: 0,
        };
        Queued::new(0, h, &[42], b"x")
    }

    #[test]
    fn generations_tell_closed_from_unreachable() {
        let r = Registry::default();
        let a = r.open(5, 4);
        assert_eq!(
            a.id,
            EndpointId {
                id: 0,
                generation: 1
            }
        );
        assert!(r.find(a.id).is_ok());
        assert_eq!(
            r.find(EndpointId {
                id: 1,
                generation: 1
            })
            .err(),
            Some(Reason::Unreachable)
        );
        r.close(&a);
        assert_eq!(r.find(a.id).err(), Some(Reason::Closed));
        // The number comes back in a new generation; the old name stays closed.
        let b = r.open(5, 4);
        assert_eq!(
            b.id,
            EndpointId {
                id: 0,
                generation: 2
            }
        );
        assert_eq!(r.find(a.id).err(), Some(Reason::Closed));
        assert!(r.find(b.id).is_ok());
        assert_eq!(
            r.find(EndpointId {
                id: 0,
                generation: 3
            })
            .err(),
            Some(Reason::Unreachable)
        );
    }

    #[test]
    fn accept_checks_tag_handler_room_and_closing() {
        let r = Registry::default();
        let ep = r.open(5, 2);
        ep.set_handler(3, Kind::Request);
        let reason = |res: Option<(Reason, Queued)>| res.map(|e| e.0);
        assert_eq!(
            reason(ep.accept(Kind::Request, msg(ep.id, 6, 3))),
            Some(Reason::BadTag)
        );
        assert_eq!(
            reason(ep.accept(Kind::Reply, msg(ep.id, 5, 3))),
            Some(Reason::NoHandler)
        );
        assert_eq!(
            reason(ep.accept(Kind::Request, msg(ep.id, 5, 0))),
            Some(Reason::NoHandler)
        );
        assert!(ep.accept(Kind::Request, msg(ep.id, 5, 3)).is_none());
        assert!(ep.accept(Kind::Request, msg(ep.id, 5, 3)).is_none());
        let (why, back) = ep.accept(Kind::Request, msg(ep.id, 5, 3)).unwrap();
        assert_eq!((why, back.args()), (Reason::Full, &[42u64][..]));
        // A handler index changing kind moves its bit.
        ep.set_handler(3, Kind::Reply);
        assert!(ep.accept(Kind::Reply, msg(ep.id, 5, 3)).is_none());
        let left = r.close(&ep);
        assert_eq!((left.requests.len(), left.replies.len()), (2, 1));
        assert_eq!(
            reason(ep.accept(Kind::Reply, msg(ep.id, 5, 3))),
            Some(Reason::Closed)
        );
    }

    #[test]
    fn returns_to_a_closed_sender_are_counted_lost() {
        let r = Registry::default();
        let src = r.open(1, 4);
        let mut m = msg(src.id, 0, 1);
        m.header.src = src.id;
        r.bounced(Bounced {
            by_rank: 1,
            kind: Kind::Request,
            reason: Reason::BadTag,
            msg: m,
        });
        assert_eq!(src.lock().returned.len(), 1);
        r.close(&src);
        let mut m = msg(src.id, 0, 1);
        m.header.src = src.id;
        r.bounced(Bounced {
            by_rank: 1,
            kind: Kind::Request,
            reason: Reason::BadTag,
            msg: m,
        });
        assert_eq!(r.lost.load(Ordering::Relaxed), 1);
    }
}
