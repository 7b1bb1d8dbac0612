//! The 64-bit frame header that starts every frame in a ring slot.
//!
//! ```text
//! bits  0..16  seq      0x8000 | ring position mod 2^15: what the receiver polls for
//! bits 16..32  handler  handler index (or system operation)
//! bits 32..37  nargs    number of u64 arguments, 0..=16
//! bits 37..40  kind     one of the KIND_ constants (nonzero)
//! bits 40..48  nslots   slots the frame occupies, 1..=255
//! bits 48..56  flags    bit 48: PADDED (the frame claims the slots after it up to the
//!                        next quarter of the ring); the others reserved, 0
//! bits 56..64  check    makes the top byte of (header * job multiplier) zero
//! ```
//!
//! The check: the job's key gives an odd multiplier whose low byte is 1 ([`FrameKey`]), and
//! the check byte is chosen so that the top byte of the header times it is 0. A multiplier
//! with that low byte moves the product's top byte by exactly the check byte, so the receiver
//! tests a header with one multiplication and one compare; a changed bit of the body changes
//! the product's top byte by a key-dependent amount (caught but for about 1 in 256), and a
//! header made under another job's key passes about 1 time in 256.
//!
//! A 15-bit position suffices because a slot only ever holds 0 or the header of the frame that
//! most recently started there, one lap (ring size < 2^15 slots) earlier: see `ring`. The top
//! bit is always set, so a sequence is never 0 and a zeroed slot never matches: the receiver's
//! test for the next frame is one compare.

use super::ring::MAX_HINTED_ARGS;

/// Frame kind of a frame whose body is only its argument words (a short message): a receiver
/// may serve it straight from its slot, and a padded one in one slot may carry a credit hint.
pub(crate) const KIND_WORDS: u8 = 1;
/// Frame kind of a medium message whose payload follows its arguments in the frame.
pub(crate) const KIND_MEDIUM_INLINE: u8 = 2;
/// Frame kind of a medium message whose payload is in one of the sender's medium buffers.
pub(crate) const KIND_MEDIUM_POOLED: u8 = 3;
/// Frame kind of a long message, whose payload the sender placed in the target's segment.
pub(crate) const KIND_LONG: u8 = 4;
/// Frame kind of padding to the end of the ring: the next frame starts at slot 0.
pub(crate) const KIND_SKIP: u8 = 5;
/// Frame kind of the runtime's own one-way messages (barrier, finalize): words only.
pub(crate) const KIND_SYSTEM: u8 = 6;

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Handler index or system operation.
    pub handler: u16,
    /// Number of u64 arguments.
    pub nargs: u8,
    /// What the frame carries: one of the `KIND_` constants.
    pub kind: u8,
    /// Slots occupied, including the header slot.
    pub nslots: u8,
}

/// Why a header was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderError {
    /// The check byte does not match: the frame is corrupt or from another job.
    BadCheck,
    /// The check byte matches but a field is out of range.
    BadField,
}

/// Header flag: the frame claims, besides its own slots, the rest of the quarter of the ring
/// it ends in, so that the next frame starts at a quarter boundary (see `ring`, "Padded
/// frames"). The receiver moves past the padding and zeroes it like any slot it consumes.
pub const PADDED: u64 = 1 << 48;

const SEQ_MASK: u64 = 0xffff;
/// Set in every sequence, so that none is 0.
const SEQ_MARK: u64 = 0x8000;

/// The sequence number a header at ring position `pos` carries: never 0.
#[inline(always)]
pub fn seq_for(pos: u64) -> u64 {
    (pos & (SEQ_MARK - 1)) | SEQ_MARK
}

/// The sequence field of a raw header word.
#[inline(always)]
pub fn seq_of(word: u64) -> u64 {
    word & SEQ_MASK
}

/// A job's key as the frame check uses it: a multiplier derived from the key, odd, with 1 as
/// its low byte (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameKey(u64);

impl FrameKey {
    /// The multiplier of job key `job_key`.
    pub fn new(job_key: u64) -> Self {
        // Mixed, so that keys that differ in a few low bits give unrelated multipliers.
        let mixed = (job_key ^ job_key >> 29).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        Self((mixed ^ mixed >> 32) & !0xff | 1)
    }
}

/// The check byte for header body `body` (its top byte 0), in place.
#[inline(always)]
fn check_byte(body: u64, key: FrameKey) -> u64 {
    // Top byte of the product t: the check is -t, so that body | check << 56 multiplies to a
    // product whose top byte is t + check = 0 (mod 256).
    (body.wrapping_mul(key.0) >> 56).wrapping_neg() << 56
}

impl FrameHeader {
    /// Encodes the header for ring position `pos` under the job key `key`.
    #[inline(always)]
    pub fn encode(&self, pos: u64, key: FrameKey) -> u64 {
        self.encode_with(pos, key, 0)
    }

    /// [`FrameHeader::encode`] with header flags `flags` (0 or [`PADDED`]).
    #[inline(always)]
    pub fn encode_with(&self, pos: u64, key: FrameKey, flags: u64) -> u64 {
        let body = seq_for(pos)
            | (self.handler as u64) << 16
            | (self.nargs as u64) << 32
            | (self.kind as u64) << 37
            | (self.nslots as u64) << 40
            | flags;
        body | check_byte(body, key)
    }

    /// Decodes a header word whose sequence already matched. A `BadCheck` error carries no
    /// trustworthy length; a `BadField` error does (see [`FrameHeader::claimed_slots`]).
    #[cfg(test)]
    #[inline(always)]
    pub fn decode(word: u64, key: FrameKey) -> Result<Self, HeaderError> {
        HeaderWord::check(word, key).map(|w| w.to_header())
    }

    /// The slot count a raw header claims, whatever else is wrong with it.
    #[inline(always)]
    pub fn claimed_slots(word: u64) -> u64 {
        (word >> 40) & 0xff
    }
}

/// A checked header word, decoded lazily: the hot receive path reads fields straight from the
/// register instead of materializing a packed struct (which compiled to a store-forwarding
/// stall on the stack).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderWord(u64);

impl HeaderWord {
    /// Whether the check byte of `word` matches the rest of it under `key`.
    #[inline(always)]
    fn sealed(word: u64, key: FrameKey) -> bool {
        word.wrapping_mul(key.0) < 1 << 56
    }

    /// Validates the check byte and the fields of a header whose sequence already matched.
    #[inline(always)]
    pub fn check(word: u64, key: FrameKey) -> Result<Self, HeaderError> {
        if !Self::sealed(word, key) {
            return Err(HeaderError::BadCheck);
        }
        let kind = (word >> 37) & 0x7;
        let nargs = (word >> 32) & 0x1f;
        let nslots = (word >> 40) & 0xff;
        // One branch for all fields (`|` not `||`): this runs for every frame received.
        if (kind == 0)
            | (kind > KIND_SYSTEM as u64)
            | (nargs as usize > crate::MAX_ARGS)
            | (nslots == 0)
            | ((word >> 48) & 0xff & !1 != 0)
        {
            return Err(HeaderError::BadField);
        }
        Ok(Self(word))
    }

    /// The check for the common case, a short frame in one slot (at most 7 arguments): `Some`
    /// exactly when [`HeaderWord::check`] accepts `word`, its kind is [`KIND_WORDS`], it
    /// occupies one slot and its arguments fit in that slot. One masked compare covers the kind, the slot
    /// count, the reserved flags and the top bits of the argument count (the frame may be
    /// [`PADDED`]). `None` says nothing more: the caller runs the full check.
    #[inline(always)]
    pub fn one_slot_short(word: u64, key: FrameKey) -> Option<Self> {
        Self::one_slot(word, key, !(PADDED >> 35))
    }

    /// [`HeaderWord::one_slot_short`] for a frame that is not [`PADDED`], in the same one
    /// masked compare: the drain's common case, a stream's frame, with no padding to test.
    #[inline(always)]
    pub fn one_slot_unpadded_short(word: u64, key: FrameKey) -> Option<Self> {
        Self::one_slot(word, key, !0)
    }

    #[inline(always)]
    fn one_slot(word: u64, key: FrameKey, flags_mask: u64) -> Option<Self> {
        // Bits 35..56 (less what `flags_mask` clears): nargs' top two bits (zero: at most 7),
        // kind, nslots and the reserved flags, shifted down, so that the mask and the
        // expected value are immediates.
        let mask: u64 = ((1 << 21) - 1) & flags_mask;
        const EXPECTED: u64 = (KIND_WORDS as u64) << 2 | 1 << 5;
        ((word >> 35) & mask == EXPECTED && Self::sealed(word, key)).then_some(Self(word))
    }

    /// The header of a frame that passed [`HeaderWord::check`] or
    /// [`HeaderWord::one_slot_short`] before, read again from its slot (which its sender
    /// leaves untouched until the frame is retired).
    #[inline(always)]
    pub fn checked_before(word: u64) -> Self {
        Self(word)
    }

    /// Whether the frame claims the rest of its quarter of the ring ([`PADDED`]).
    #[inline(always)]
    pub fn padded(self) -> bool {
        self.0 & PADDED != 0
    }

    /// Whether the frame carries a credit hint in its slot's last word: a padded one-slot
    /// short does when that word is free (see `ring`, "Credit hints").
    #[inline(always)]
    pub fn carries_hint(self) -> bool {
        self.padded()
            && self.is(KIND_WORDS)
            && self.nslots() == 1
            && self.nargs() <= MAX_HINTED_ARGS
    }

    /// Handler index or system operation.
    #[inline(always)]
    pub fn handler(self) -> u16 {
        (self.0 >> 16) as u16
    }

    /// Number of u64 arguments.
    #[inline(always)]
    pub fn nargs(self) -> usize {
        ((self.0 >> 32) & 0x1f) as usize
    }

    /// Whether the frame is of kind `kind` (one comparison, no decoding).
    #[inline(always)]
    pub fn is(self, kind: u8) -> bool {
        (self.0 >> 37) & 0x7 == kind as u64
    }

    /// What the frame carries (see [`FrameHeader::kind`]).
    #[inline(always)]
    pub fn kind(self) -> u8 {
        ((self.0 >> 37) & 0x7) as u8
    }

    /// Slots occupied.
    #[inline(always)]
    pub fn nslots(self) -> u64 {
        (self.0 >> 40) & 0xff
    }

    /// The decoded struct.
    #[cfg(test)]
    pub fn to_header(self) -> FrameHeader {
        FrameHeader {
            handler: self.handler(),
            nargs: self.nargs() as u8,
            kind: self.kind(),
            nslots: self.nslots() as u8,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::shm::ring::SLOT_BYTES;

    /// Words in one slot: the header and up to 7 arguments.
    const SLOT_WORDS: usize = SLOT_BYTES / 8;

    #[test]
    fn round_trip_every_kind() {
        for kind in 1..=KIND_SYSTEM {
            let h = FrameHeader {
                handler: 513,
                nargs: 16,
                kind,
                nslots: 3,
            };
            let key = FrameKey::new(0xdead_beef);
            let w = h.encode(70_000, key);
            assert_eq!(seq_of(w), seq_for(70_000));
            assert_eq!(FrameHeader::decode(w, key), Ok(h));
        }
    }

    #[test]
    fn other_job_key_or_flipped_bit_is_refused() {
        let h = FrameHeader {
            handler: 7,
            nargs: 2,
            kind: KIND_WORDS,
            nslots: 1,
        };
        let w = h.encode(5, FrameKey::new(42));
        assert_eq!(
            FrameHeader::decode(w, FrameKey::new(43)),
            Err(HeaderError::BadCheck)
        );
        let mut refused = 0;
        for bit in 16..56 {
            if FrameHeader::decode(w ^ (1 << bit), FrameKey::new(42)).is_err() {
                refused += 1;
            }
        }
        // An 8-bit check catches single-bit flips except for rare collisions.
        assert!(refused >= 38, "only {refused} of 40 flips refused");
    }

    #[test]
    fn the_one_slot_check_agrees_with_the_full_check() {
        // Every kind, edge values of each field and single-bit flips of valid headers.
        let key = FrameKey::new(0x5eed_cafe);
        let mut words = Vec::new();
        for kind in 0..8u64 {
            for nargs in [0u64, 1, 7, 8, 16, 17, 31] {
                for nslots in [0u64, 1, 2, 4, 255] {
                    let body = 77 | 3 << 16 | nargs << 32 | kind << 37 | nslots << 40;
                    let word = body | check_byte(body, key);
                    words.push(word);
                    words.extend((0..64).map(|bit| word ^ 1 << bit));
                    words.push(word | 1 << 50);
                    let padded = body | PADDED;
                    words.push(padded | check_byte(padded, key));
                }
            }
        }
        let (mut accepted, mut accepted_unpadded) = (0, 0);
        for word in words {
            let full = HeaderWord::check(word, key)
                .ok()
                .filter(|h| h.is(KIND_WORDS) && h.nslots() == 1 && h.nargs() < SLOT_WORDS);
            let fast = HeaderWord::one_slot_short(word, key);
            assert_eq!(fast, full, "{word:#x}");
            accepted += usize::from(fast.is_some());
            let unpadded = HeaderWord::one_slot_unpadded_short(word, key);
            assert_eq!(unpadded, full.filter(|h| !h.padded()), "{word:#x}");
            accepted_unpadded += usize::from(unpadded.is_some());
        }
        // The three valid one-slot shorts built above (0, 1 and 7 arguments), unflipped, each
        // also padded.
        assert_eq!((accepted, accepted_unpadded), (6, 3));
    }

    #[test]
    fn no_sequence_is_zero_and_a_lap_apart_they_differ() {
        // A zeroed slot never matches any position's sequence, and a stale header (one lap
        // earlier, in the largest ring) never matches the current one.
        let lap = crate::transport::shm::ring::MAX_RING_SLOTS as u64;
        for pos in 0..(1u64 << 17) {
            assert_ne!(seq_for(pos), 0, "position {pos}");
            assert_eq!(seq_of(seq_for(pos)), seq_for(pos));
            if pos >= lap {
                assert_ne!(seq_for(pos), seq_for(pos - lap), "position {pos}");
            }
        }
        let ok = FrameHeader::decode(0, FrameKey::new(0x1234));
        assert!(ok.is_err(), "a zeroed slot decoded as {ok:?}");
    }
}
