//! The transport contract on the rings: how each class of message is framed (a short's
//! words in one slot, a medium's payload inline or in a medium buffer, a long's payload
//! placed in the target's segment first).

use super::super::frame::{
    KIND_LONG, KIND_MEDIUM_INLINE, KIND_MEDIUM_POOLED, KIND_SYSTEM, KIND_WORDS,
};
use super::super::ring::{MAX_FRAME_SLOTS, SLOT_BYTES};
use super::super::{pool_offset_for, MEDIUM_MAX};
use super::send::{Outgoing, TxPeer, Words};
use super::{extra_words, pooled_word, Links};
use crate::transport::contract::{Class, OnBlocked, Outbound, SendRefused, Sink, Transport};
use crate::transport::Channel;

/// A rank of this node as a destination: its local index and its entry.
#[derive(Clone, Copy)]
pub(crate) struct ShmPeer<'a> {
    pub(super) index: usize,
    pub(super) tx: &'a TxPeer,
}

impl Transport for Links {
    type Peer<'a> = ShmPeer<'a>;

    /// Peers are numbered by local index.
    #[inline(always)]
    fn peer(&self, dest: usize) -> Option<ShmPeer<'_>> {
        self.tx.get(dest).map(|tx| ShmPeer { index: dest, tx })
    }

    #[inline(always)]
    fn send<B: OnBlocked>(
        &self,
        peer: ShmPeer<'_>,
        msg: Outbound<'_>,
        blocked: B,
    ) -> Result<(), SendRefused> {
        let Outbound {
            ch,
            class,
            handler,
            args,
            payload,
            offset,
        } = msg;
        let (kind, extra, inline): (u8, [u64; 2], &[u8]) = match class {
            Class::Short => (KIND_WORDS, [0, 0], &[]),
            Class::System => (KIND_SYSTEM, [0, 0], &[]),
            Class::Medium => {
                if payload.len() > MEDIUM_MAX {
                    return Err(SendRefused::TooLarge {
                        len: payload.len(),
                        max: MEDIUM_MAX,
                    });
                }
                // Inline when it fits in a few slots, otherwise through one of this rank's
                // medium buffers.
                if medium_inline(args.len(), payload.len()) {
                    (KIND_MEDIUM_INLINE, [payload.len() as u64, 0], payload)
                } else {
                    return self.send_pooled(peer, msg, blocked);
                }
            }
            Class::Long => {
                // The payload goes into the target's segment before the frame's slots are
                // reserved, and could not be taken back: a send that may give up makes sure
                // of the room first (the slots stay free: only this rank reserves them).
                if B::GIVES_UP && !self.has_room(peer, ch, frame_slots(KIND_LONG, args.len(), 0)) {
                    return Err(SendRefused::WouldBlock);
                }
                self.place_long(peer.index, payload, offset)?;
                (KIND_LONG, [payload.len() as u64, offset as u64], &[])
            }
        };
        self.send_encoded(peer, ch, kind, handler, extra, args, inline, blocked)
    }

    fn sendable(
        &self,
        peer: ShmPeer<'_>,
        ch: Channel,
        class: Class,
        nargs: usize,
        payload_len: usize,
    ) -> bool {
        let (kind, inline) = match class {
            Class::Short => (KIND_WORDS, 0),
            Class::System => (KIND_SYSTEM, 0),
            Class::Long => (KIND_LONG, 0),
            Class::Medium => match medium_inline(nargs, payload_len) {
                true => (KIND_MEDIUM_INLINE, payload_len),
                false => {
                    if !self.medium_buffer_free(ch) {
                        return false;
                    }
                    (KIND_MEDIUM_POOLED, 0)
                }
            },
        };
        self.has_room(peer, ch, frame_slots(kind, nargs, inline))
    }

    #[inline(always)]
    fn poll<S: Sink>(&self, ch: Channel, sink: &S, stop: impl FnMut() -> bool) -> Option<usize> {
        self.poll_rings(ch, sink, stop)
    }

    fn pending(&self) -> bool {
        self.has_frames()
    }

    fn max_payload(&self, class: Class) -> usize {
        match class {
            Class::Medium => MEDIUM_MAX,
            Class::Long => self.regions[self.me].segment_len(),
            Class::Short | Class::System => 0,
        }
    }
}

/// The most payload bytes a medium frame carries inline.
const INLINE_MAX: usize = MAX_FRAME_SLOTS as usize * SLOT_BYTES;

/// Whether a medium message with `nargs` arguments and `payload_len` bytes travels inline
/// (in its frame's few slots) rather than in a medium buffer.
#[inline(always)]
fn medium_inline(nargs: usize, payload_len: usize) -> bool {
    (2 + nargs) * 8 + payload_len <= MAX_FRAME_SLOTS as usize * SLOT_BYTES
}

/// The slots a frame of `kind` with `nargs` arguments and `inline` payload bytes occupies.
#[inline(always)]
fn frame_slots(kind: u8, nargs: usize, inline: usize) -> u64 {
    let words = 1 + extra_words(kind) + nargs;
    // Without a payload inline (known when this is inlined), whole words: a shift.
    (match inline {
        0 => words.div_ceil(SLOT_BYTES / 8),
        _ => (words * 8 + inline).div_ceil(SLOT_BYTES),
    }) as u64
}

impl Links {
    /// Whether `nslots` slots can be reserved in the ring of `ch` towards `peer` now.
    fn has_room(&self, peer: ShmPeer<'_>, ch: Channel, nslots: u64) -> bool {
        peer.tx.rings[ch as usize].has_room(nslots)
    }

    /// Frames and sends a message of frame kind `kind` whose words after the header are
    /// `extra` (as many as the kind has), `args`, then `inline` bytes.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) fn send_encoded(
        &self,
        peer: ShmPeer<'_>,
        ch: Channel,
        kind: u8,
        handler: u16,
        extra: [u64; 2],
        args: &[u64],
        inline: &[u8],
        blocked: impl OnBlocked,
    ) -> Result<(), SendRefused> {
        let nextra = extra_words(kind);
        let words = 1 + nextra + args.len();
        // Without a payload inline (known when this is inlined), whole words: a shift.
        let nslots = match inline.is_empty() {
            true => words.div_ceil(SLOT_BYTES / 8),
            false => (words * 8 + inline.len()).div_ceil(SLOT_BYTES),
        } as u64;
        debug_assert!(nslots <= MAX_FRAME_SLOTS);
        let out = Outgoing {
            kind,
            handler,
            nargs: args.len(),
            nslots,
        };
        let body = Words {
            extra,
            nextra,
            args,
            inline,
        };
        self.send_frame(peer, ch, out, body, blocked)
    }

    /// A medium message whose payload travels in one of this rank's medium buffers. A send
    /// that gives up for want of ring room gives the buffer back.
    #[cold]
    #[inline(never)]
    pub(super) fn send_pooled<B: OnBlocked>(
        &self,
        peer: ShmPeer<'_>,
        msg: Outbound<'_>,
        mut blocked: B,
    ) -> Result<(), SendRefused> {
        let (ch, payload) = (msg.ch, msg.payload);
        let idx = self
            .claim_medium_buffer(ch, &mut blocked)
            .ok_or(SendRefused::WouldBlock)?;
        let at = pool_offset_for(payload.as_ptr());
        // SAFETY: `idx` is a buffer we just claimed, so no receiver reads it until the frame
        // naming it is published; MEDIUM_MAX >= payload.len() bytes follow byte `at` < 4096.
        unsafe {
            crate::copy::copy_nonoverlapping(
                payload.as_ptr(),
                self.regions[self.me].pool_buf(ch, idx, at),
                payload.len(),
            );
        }
        let extra = [pooled_word(payload.len(), at, idx), 0];
        let kind = KIND_MEDIUM_POOLED;
        let sent = self.send_encoded(peer, ch, kind, msg.handler, extra, msg.args, &[], blocked);
        if sent.is_err() {
            self.unclaim_medium_buffer(ch, idx);
        }
        sent
    }

    /// Sends a medium message of `len` bytes (at most [`MEDIUM_MAX`]) whose payload `fill`
    /// writes in place: into one of this rank's medium buffers, which the receiver reads
    /// from, so the payload is written once. A payload that travels inline (a few hundred
    /// bytes) is filled on the stack and copied into the frame's slots with its header.
    /// `fill` runs exactly once, before the frame's slots are reserved.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send_medium_with<B: OnBlocked>(
        &self,
        peer: ShmPeer<'_>,
        ch: Channel,
        handler: u16,
        args: &[u64],
        len: usize,
        fill: impl FnOnce(&mut [u8]),
        mut blocked: B,
    ) -> Result<(), SendRefused> {
        debug_assert!(len <= MEDIUM_MAX);
        if medium_inline(args.len(), len) {
            let mut scratch = [0u8; INLINE_MAX];
            let inline = &mut scratch[..len];
            fill(inline);
            let extra = [len as u64, 0];
            let kind = KIND_MEDIUM_INLINE;
            return self.send_encoded(peer, ch, kind, handler, extra, args, inline, blocked);
        }
        let idx = self
            .claim_medium_buffer(ch, &mut blocked)
            .ok_or(SendRefused::WouldBlock)?;
        // Gives the buffer back if the send does not go (or `fill` unwinds).
        struct Claimed<'a> {
            links: &'a Links,
            ch: Channel,
            idx: usize,
            sent: bool,
        }
        impl Drop for Claimed<'_> {
            fn drop(&mut self) {
                if !self.sent {
                    self.links.unclaim_medium_buffer(self.ch, self.idx);
                }
            }
        }
        let mut claimed = Claimed {
            links: self,
            ch,
            idx,
            sent: false,
        };
        // SAFETY: `idx` is a buffer we just claimed, so no receiver reads it until the frame
        // naming it is published; it holds MEDIUM_MAX >= len bytes from its start, and
        // nothing else refers to them while `fill` runs.
        let buf = unsafe {
            std::slice::from_raw_parts_mut(self.regions[self.me].pool_buf(ch, idx, 0), len)
        };
        fill(buf);
        let extra = [pooled_word(len, 0, idx), 0];
        let kind = KIND_MEDIUM_POOLED;
        let sent = self.send_encoded(peer, ch, kind, handler, extra, args, &[], blocked);
        claimed.sent = sent.is_ok();
        sent
    }

    /// Copies a long payload into the segment of the rank at local index `dest` at `offset`
    /// (the caller checked that it fits the segment), unless the guard refuses the range: the
    /// sender writes the payload, so the sender asks.
    pub(super) fn place_long(
        &self,
        dest: usize,
        payload: &[u8],
        offset: usize,
    ) -> Result<(), SendRefused> {
        let target = &self.regions[dest];
        debug_assert!(offset + payload.len() <= target.segment_len());
        if let Some(guard) = &self.guard {
            guard
                .admit(target.upper_ptr(), offset, payload.len())
                .map_err(SendRefused::Guarded)?;
        }
        // SAFETY: the range lies in the target's segment (the caller checked), which is mapped
        // for the life of the links. Concurrent writes to overlapping ranges are the program's
        // race to avoid, as with any remote write; they cannot touch memory outside the
        // segment.
        unsafe {
            crate::copy::copy_nonoverlapping(
                payload.as_ptr(),
                target.segment_ptr().add(offset),
                payload.len(),
            );
        }
        Ok(())
    }
}
