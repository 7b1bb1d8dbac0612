//! Sending and receiving a collective's parcels: through the mailbox, or through a fast
//! lane's slots for latency-bound ones.

use super::*;

/// Where a latency-bound collective's messages travel.
#[derive(Debug, Clone, Copy)]
pub(super) enum Lane {
    /// The mailbox (data larger than a short message).
    Mailbox,
    /// Fast slots of lane `lane`, call number `seq` of that lane.
    Fast { lane: u64, seq: u64 },
}

/// The fast lane of barriers.
pub(super) const BARRIER_LANE: u64 = 0;
/// The fast lane of small all-reduces.
pub(super) const REDUCE_LANE: u64 = 1;
/// The fast lane of small all-to-alls.
pub(super) const ALLTOALL_LANE: u64 = 2;
/// Not a fast lane: names the broadcast ring where a search leaves one out (`except`).
pub(super) const RING_LANE: u64 = 3;
/// The step of recursive doubling's unfold (the last slot of a lane).
pub(super) const UNFOLD_STEP: u64 = 63;

/// Reduces by a user closure: operator code 255.
pub(super) const USER_OP: u8 = 255;
/// Reductions up to this size use recursive doubling; larger ones reduce-scatter and gather.
pub(super) const SMALL_REDUCE: usize = 16 << 10;
/// Rounds a collective's wait (a hub call's, a fast-lane message's) runs bare, looking at the
/// shared words it waits on, before it becomes the runtime's general wait, which publishes it
/// for the hang report: a few microseconds, long enough for a hand-off (one or two rounds, and
/// up to a few dozen spins while the other CPU hands its core over) or a cache-line transfer.
pub(super) const QUICK_ROUNDS: u32 = 256;
/// The quick rounds poll for messages every this many rounds (a rank may need this one's
/// reply before it can arrive).
pub(super) const QUICK_POLL: u32 = 4;

impl Global<'_> {
    pub(super) fn next_epoch(&self) -> u64 {
        let e = self.epoch.get();
        self.epoch.set(e + 1);
        e
    }

    /// Sends one parcel (fragmented into medium messages); to itself, straight into the
    /// mailbox.
    pub(super) fn send_parcel(
        &self,
        dest: usize,
        epoch: u64,
        step: u64,
        what: What,
        bytes: &[u8],
    ) -> Result<()> {
        let total = bytes.len() as u64;
        if dest == self.me {
            self.shared
                .mailbox
                .deliver(self.me, [epoch, what.code(), total, 0, step], bytes);
            return Ok(());
        }
        let frag = self.rt.max_medium();
        let n = bytes.len().div_ceil(frag).max(1);
        for i in 0..n {
            let start = (i * frag).min(bytes.len());
            let piece = &bytes[start..(start + frag).min(bytes.len())];
            let h = [epoch, what.code(), total, start as u64, step];
            self.rt.request_medium(dest, self.h.coll, &h, piece)?;
        }
        Ok(())
    }

    /// Receives the parcel of `src` for (epoch, step), checking that it comes from the same
    /// collective and, when `len` is given, has that many bytes.
    pub(super) fn recv_parcel(
        &self,
        src: usize,
        epoch: u64,
        step: u64,
        what: What,
        len: Option<usize>,
    ) -> Result<Vec<u8>> {
        let mb = &self.shared.mailbox;
        let (mut polls, mut elsewhere) = (0u32, None);
        let cond = || {
            if mb.ready(src, epoch, step) {
                return true;
            }
            polls = polls.wrapping_add(1);
            // Now and then: has the other rank called a fast-lane collective at this epoch?
            if polls % 4096 == 0 {
                elsewhere = self.lanes_what_of(epoch, None, true);
            }
            elsewhere.is_some()
        };
        self.wait_for(cond, &|| {
            format!(
                "rank {src} in collective #{epoch} ({}, step {step}); a rank that never \
                     calls it, or calls another, keeps every other rank here",
                What::describe(what.code())
            )
        });
        if let Some((theirs, rank)) = elsewhere.filter(|_| !mb.ready(src, epoch, step)) {
            return Err(GlobalError::CollectiveMismatch {
                epoch,
                me: self.me,
                rank,
                mine: What::describe(what.code()),
                theirs: What::describe(theirs),
            });
        }
        let p = mb.take(src, epoch, step).expect("ready parcel");
        if p.what != what.code() || len.is_some_and(|l| l != p.total) {
            let mine = What::describe(what.code())
                + &len.map_or(String::new(), |l| format!(" ({l} bytes per message)"));
            let theirs = What::describe(p.what) + &format!(" ({} bytes per message)", p.total);
            return Err(GlobalError::CollectiveMismatch {
                epoch,
                me: self.me,
                rank: src,
                mine,
                theirs,
            });
        }
        Ok(p.data)
    }

    pub(super) fn recv_into<T: Pod>(
        &self,
        src: usize,
        epoch: u64,
        step: u64,
        what: What,
        dst: &mut [T],
    ) -> Result<()> {
        let data = self.recv_parcel(src, epoch, step, what, Some(std::mem::size_of_val(dst)))?;
        volley::copy::copy_bytes(bytemuck::cast_slice_mut::<T, u8>(dst), &data);
        self.shared.mailbox.recycle(data);
        Ok(())
    }

    /// Sends one step's message of a latency-bound collective on `lane`: one short message,
    /// its data inline.
    pub(super) fn send_fast(
        &self,
        lane: Lane,
        dest: usize,
        epoch: u64,
        step: u64,
        what: What,
        bytes: &[u8],
    ) -> Result<()> {
        let Lane::Fast { lane, seq } = lane else {
            return self.send_parcel(dest, epoch, step, what, bytes);
        };
        let mut words = [0u64; FAST_WORDS];
        let n = crate::handlers::to_words(bytes, &mut words);
        if let Some(direct) = &self.direct_lanes {
            let h = [seq, epoch, what.code(), bytes.len() as u64, self.me as u64];
            direct.of(dest).0[lane as usize]
                .slot(step, seq)
                .fill(h, &words[..n]);
            return Ok(());
        }
        let mut args = [0u64; 4 + FAST_WORDS];
        args[0] = lane | step << 8 | (bytes.len() as u64) << 16;
        args[1] = seq;
        args[2] = epoch;
        args[3] = what.code();
        args[4..4 + n].copy_from_slice(&words[..n]);
        self.rt
            .request_short(dest, self.h.coll_fast, &args[..4 + n])?;
        Ok(())
    }

    /// What collective a fast-lane message or ring broadcast of call `epoch` here (lane
    /// `except` left out), or with `hub` a hub row of that call, belongs to and who sent it, if one is here: for
    /// mismatch diagnosis.
    pub(super) fn lanes_what_of(
        &self,
        epoch: u64,
        except: Option<u64>,
        hub: bool,
    ) -> Option<(u64, usize)> {
        let lanes = &self.lanes().0;
        (0..lanes.len() as u64)
            .filter(|&l| Some(l) != except)
            .find_map(|l| lanes[l as usize].what_of(epoch))
            .or_else(|| {
                let ring = self
                    .bcast_ring
                    .as_ref()
                    .filter(|_| except != Some(RING_LANE))?;
                ring.what_of(epoch)
            })
            .or_else(|| {
                let h = self.hub.as_ref().filter(|_| hub)?;
                h.what_of(epoch)
            })
    }

    /// This rank's fast lanes: in mapped memory where senders write them directly, else
    /// those the `coll_fast` handler fills.
    pub(super) fn lanes(&self) -> &crate::handlers::Lanes {
        match &self.direct_lanes {
            Some(d) => d.of(self.me),
            None => &self.shared.lanes,
        }
    }

    /// Receives one step's message of a latency-bound collective from `src` into `dst`.
    pub(super) fn recv_fast(
        &self,
        lane: Lane,
        src: usize,
        epoch: u64,
        step: u64,
        what: What,
        dst: &mut [u8],
    ) -> Result<()> {
        let Lane::Fast { lane, seq } = lane else {
            return self.recv_into(src, epoch, step, what, dst);
        };
        let lanes = &self.lanes().0;
        let slot = lanes[lane as usize].slot(step, seq);
        let elsewhere = self.await_slot(slot, seq, src, epoch, Some(lane), &|| {
            format!(
                "rank {src} in collective #{epoch} ({}, step {step}); a rank that never \
                 calls it, or calls another, keeps every other rank here",
                What::describe(what.code())
            )
        });
        self.read_slot(slot, src, epoch, what, elsewhere, dst)
    }

    /// Waits until `slot` holds message `seq` from `src` (spinning while `src` runs, see
    /// `Runtime::wait_on`), or until another rank is found in another collective at `epoch`,
    /// which it returns (fast lane `except`, the one waited on, is not searched). `hang` says
    /// what the wait is for, should it last.
    pub(super) fn await_slot(
        &self,
        slot: &crate::handlers::FastSlot,
        seq: u64,
        src: usize,
        epoch: u64,
        except: Option<u64>,
        hang: &dyn Fn() -> String,
    ) -> Option<(u64, usize)> {
        if self.quick_await(slot, seq) {
            return None;
        }
        let (mut polls, mut elsewhere) = (0u32, None);
        let mb = &self.shared.mailbox;
        self.wait_on(
            src,
            || {
                if slot.holds(seq) {
                    return true;
                }
                polls = polls.wrapping_add(1);
                // Now and then: has another rank called another collective at this epoch?
                if polls % 4096 == 0 {
                    elsewhere = mb
                        .what_of(epoch)
                        .or_else(|| self.lanes_what_of(epoch, except, true));
                }
                elsewhere.is_some()
            },
            hang,
        );
        elsewhere
    }

    /// The first rounds of a wait for a fast-lane message from a rank on this node, for a rank
    /// with a core of its own: a look at the slot and a spin, with a poll for messages every
    /// [`QUICK_POLL`] rounds; whether the message came. The runtime's wait polls on every
    /// round, so it sees the message that ends most of these waits, a cache-line transfer
    /// away, up to a poll late (a 2-rank barrier costs 4-11 % more that way). A polite rank
    /// goes straight to the runtime's wait, which knows when to yield.
    #[inline]
    fn quick_await(&self, slot: &crate::handlers::FastSlot, seq: u64) -> bool {
        if self.direct_lanes.is_none() || self.rt.is_polite() {
            return false;
        }
        for round in 1..=QUICK_ROUNDS {
            if slot.holds(seq) {
                return true;
            }
            if round % QUICK_POLL == 0 {
                self.rt.poll();
            }
            std::hint::spin_loop();
        }
        false
    }

    /// Reads the message of `src` for collective #`epoch` out of `slot` into `dst`, once the
    /// wait for it ended, checking that it comes from the same collective with as many bytes;
    /// `elsewhere`: the collective another rank was found in instead, which is an error.
    pub(super) fn read_slot(
        &self,
        slot: &crate::handlers::FastSlot,
        src: usize,
        epoch: u64,
        what: What,
        elsewhere: Option<(u64, usize)>,
        dst: &mut [u8],
    ) -> Result<()> {
        let mismatch = |rank: usize, theirs: String| GlobalError::CollectiveMismatch {
            epoch,
            me: self.me,
            rank,
            mine: What::describe(what.code()) + &format!(" ({} bytes per message)", dst.len()),
            theirs,
        };
        if let Some((theirs, rank)) = elsewhere {
            return Err(mismatch(rank, What::describe(theirs)));
        }
        let (e, w, len) = (
            slot.epoch.load(Ordering::Relaxed),
            slot.what.load(Ordering::Relaxed),
            slot.len.load(Ordering::Relaxed) as usize,
        );
        if e != epoch || w != what.code() || len != dst.len() {
            return Err(mismatch(
                src,
                What::describe(w) + &format!(" ({len} bytes per message)"),
            ));
        }
        let mut words = [0u64; FAST_WORDS];
        for (w, x) in words.iter_mut().zip(&slot.words[..len.div_ceil(8)]) {
            *w = x.load(Ordering::Relaxed);
        }
        crate::handlers::from_words(&words, dst);
        Ok(())
    }

    /// The lane of the next call of a latency-bound collective of `bytes` per message:
    /// `lane`'s fast slots when the data fits one short message, else the mailbox.
    pub(super) fn lane(&self, lane: u64, bytes: usize) -> Lane {
        // An all-to-all of more ranks than a lane has steps cannot use it either.
        let steps = crate::handlers::FAST_STEPS;
        if bytes > FAST_WORDS * 8 || (lane == ALLTOALL_LANE && self.procs > steps) {
            return Lane::Mailbox;
        }
        let counter = &self.fast_calls[lane as usize];
        let seq = counter.get();
        counter.set(seq + 1);
        Lane::Fast { lane, seq }
    }
}
