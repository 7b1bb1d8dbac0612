//! The slot array every queue uses, and its one consumer.

use crate::sync::{AtomicU64, Ordering};

/// Payload words of a message: with the sequence word, one 64-byte cache line.
pub const WORDS: usize = 7;

/// The payload word [`crate::PrewriteQueue`] keeps unused (always 0) so that it can write it
/// before knowing whether the slot is free.
pub const SPARE: usize = WORDS - 1;

/// A short message.
pub type Message = [u64; WORDS];

/// One slot: the sequence word that says whose turn it is, and the payload. The payload words
/// are atomics written and read with relaxed order (plain moves on x86); the sequence word's
/// release and acquire order them.
#[repr(align(64))]
struct Slot {
    seq: AtomicU64,
    words: [AtomicU64; WORDS],
}

/// `capacity` slots and the consumer's position.
pub struct Slots {
    slots: Box<[Slot]>,
    /// Next message number the consumer takes; only the consumer writes it.
    head: Padded,
}

#[repr(align(64))]
struct Padded(AtomicU64);

impl Slots {
    /// Empty slots, `capacity` of them (at least 2: with one slot, "holds message t" and
    /// "free for message t + 1" would be the same sequence value).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(2);
        let slots = (0..capacity as u64)
            .map(|i| Slot {
                seq: AtomicU64::new(i),
                words: std::array::from_fn(|_| AtomicU64::new(0)),
            })
            .collect();
        Self {
            slots,
            head: Padded(AtomicU64::new(0)),
        }
    }

    /// How many slots there are.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    fn slot(&self, n: u64) -> &Slot {
        &self.slots[(n % self.slots.len() as u64) as usize]
    }

    /// Whether message number `t`'s slot is free (its previous message was consumed).
    pub(crate) fn is_free(&self, t: u64) -> bool {
        self.slot(t).seq.load(Ordering::Acquire) == t
    }

    /// Whether message number `t`'s slot still holds a message of the previous lap: the queue
    /// is full for `t`.
    pub(crate) fn is_full_for(&self, t: u64) -> bool {
        self.slot(t).seq.load(Ordering::Acquire) < t
    }

    /// Stores 0 into the spare word of message `t`'s slot, whatever the slot holds: a write
    /// that changes nothing when every message through the queue has 0 there, but brings the
    /// line to this CPU for writing before the slot is read.
    pub(crate) fn prewrite(&self, t: u64) {
        self.slot(t).words[SPARE].store(0, Ordering::Relaxed);
    }

    /// Fills the slot of message `t` (whose producer owns it now) and hands it to the
    /// consumer.
    pub(crate) fn publish(&self, t: u64, msg: &Message) {
        let s = self.slot(t);
        for (w, v) in s.words.iter().zip(msg) {
            w.store(*v, Ordering::Relaxed);
        }
        s.seq.store(t + 1, Ordering::Release);
    }

    /// The consumer: the next message, if it has been published. One consumer per queue.
    pub fn try_pop(&self) -> Option<Message> {
        let h = self.head.0.load(Ordering::Relaxed);
        let s = self.slot(h);
        if s.seq.load(Ordering::Acquire) != h + 1 {
            return None;
        }
        let msg = std::array::from_fn(|i| s.words[i].load(Ordering::Relaxed));
        // Free for the message one lap later.
        s.seq.store(h + self.slots.len() as u64, Ordering::Release);
        self.head.0.store(h + 1, Ordering::Relaxed);
        Some(msg)
    }
}
