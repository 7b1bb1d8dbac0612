//! Reads, writes, split-phase gets and puts, one-way stores, and their bulk forms.
//!
//! Completion rules (seed 004 §3.2): `read`/`write` return when the value is in / the owner
//! acknowledged the update; `get`/`put` return at once and complete by `sync` (a [`Phase`]
//! ends with one); `store` never completes at the issuer: the owner counts the bytes, and
//! `store_sync` / `all_store_sync` wait for them.

use crate::completion::{refusal_of, Completion, RefusalWords};
use crate::error::{GlobalError, Result};
use crate::global::{Global, Route};
use crate::handlers::{offset_len, to_words, PUT_INLINE_WORDS, STORE_INLINE_WORDS};
use crate::ptr::GlobalPtr;
use bytemuck::Pod;
use std::marker::PhantomData;
use std::sync::PoisonError;
use volley::rma::{AtomicOp, SegmentRef};

/// The pieces of a `len`-byte transfer in chunks of `chunk` bytes: (start, length). One
/// empty piece for an empty transfer, so it still completes like any other.
fn pieces(len: usize, chunk: usize) -> impl Iterator<Item = (usize, usize)> {
    let n = len.div_ceil(chunk).max(1);
    (0..n).map(move |i| (i * chunk, (len - (i * chunk).min(len)).min(chunk)))
}

impl<'rt> Global<'rt> {
    fn refused_err(&self, w: RefusalWords) -> GlobalError {
        let (rank, reason) = refusal_of(w);
        GlobalError::refused(rank, reason)
    }

    // ----- reads -----

    /// Reads `*p`; returns when the value is here (Split-C's `x = *p`).
    ///
    /// Inlined, so that the pointer's words stay in registers: a copy of a pointer just
    /// built in memory costs a stalled load per round trip.
    #[inline(always)]
    pub fn read<T: Pod>(&self, p: GlobalPtr<T>) -> Result<T> {
        let mut v = T::zeroed();
        // A value of one word travels in the request's answer (`get_word`): fewer words each
        // way than a get's, and nothing to unpack into a destination.
        if std::mem::size_of::<T>() <= 8 {
            let len = p.check_fits(1)?;
            let route = self.route(p.rank())?;
            if route == Route::Am {
                return self.read_word(p, len);
            }
            self.read_near(route, p, bytemuck::bytes_of_mut(&mut v))?;
            return Ok(v);
        }
        self.bulk_read(std::slice::from_mut(&mut v), p)?;
        Ok(v)
    }

    /// A blocking read of `len` (at most 8) bytes at `p` from another rank, through Active
    /// Messages.
    #[inline(always)]
    fn read_word<T: Pod>(&self, p: GlobalPtr<T>, len: usize) -> Result<T> {
        let c = Completion::expecting(1);
        let w = p.segment().to_words();
        let args = [w[0], w[1], offset_len(p.offset(), len), c.word()];
        self.rt.request_short(p.rank(), self.h.get_word, &args)?;
        let what = || format!("a read from rank {}", p.rank());
        let word = self.await_completion(&c, p.rank(), &what)?;
        Ok(bytemuck::pod_read_unaligned(&word.to_le_bytes()[..len]))
    }

    /// Reads `bytes` at `p` on a rank reached without messages: this rank's memory
    /// ([`Route::Local`]) or a peer's mapped memory ([`Route::Direct`]).
    fn read_near<T: Pod>(&self, route: Route, p: GlobalPtr<T>, bytes: &mut [u8]) -> Result<()> {
        if route == Route::Local {
            self.shared
                .own
                .read(p.segment(), p.offset(), bytes)
                .map_err(|r| GlobalError::refused(self.me, r))
        } else {
            self.rma
                .get(p.segment(), p.offset(), bytes)
                .map_err(GlobalError::from)
        }
    }

    /// Reads `dst.len()` elements starting at `p` into `dst` (blocking).
    pub fn bulk_read<T: Pod>(&self, dst: &mut [T], p: GlobalPtr<T>) -> Result<()> {
        let off = p.offset();
        p.check_fits(dst.len())?;
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(dst);
        match self.route(p.rank())? {
            route @ (Route::Local | Route::Direct) => self.read_near(route, p, bytes),
            Route::Am => {
                let what = || format!("a read from rank {}", p.rank());
                if bytes.len() <= self.chunk.get() {
                    // One message (the scalar case): if it cannot be sent, nothing is out.
                    let c = Completion::expecting(1);
                    self.send_get(p.segment(), off, bytes.as_mut_ptr(), bytes.len(), c.word())?;
                    return self.await_completion(&c, p.rank(), &what).map(|_| ());
                }
                let n = self.messages(bytes.len());
                let c = Completion::expecting(n);
                let sent = self.send_gets(p.segment(), off, bytes, c.word());
                self.finish(&c, p.rank(), n, sent, &what).map(|_| ())
            }
        }
    }

    /// Sends the get requests for `dst` (from `off` of `seg`), completed at `kind`; returns
    /// how many were sent, or the error that stopped them with that count.
    fn send_gets(
        &self,
        seg: SegmentRef,
        off: usize,
        dst: &mut [u8],
        kind: u64,
    ) -> std::result::Result<u64, (u64, GlobalError)> {
        let chunk = self.chunk.get();
        if dst.len() <= chunk {
            // One message: the scalar case, without the fragmenting loop.
            return match self.send_get(seg, off, dst.as_mut_ptr(), dst.len(), kind) {
                Ok(()) => Ok(1),
                Err(e) => Err((0, e)),
            };
        }
        let base = dst.as_mut_ptr();
        let mut sent = 0;
        for (start, len) in pieces(dst.len(), chunk) {
            // SAFETY: `start` is within `dst` (the pieces cover it).
            let at = unsafe { base.add(start) };
            if let Err(e) = self.send_get(seg, off + start, at, len, kind) {
                return Err((sent, e));
            }
            sent += 1;
        }
        Ok(sent)
    }

    /// Sends one get request: `len` bytes at `off` of `seg` into `dst`, completed at `kind`.
    #[inline(always)]
    fn send_get(
        &self,
        seg: SegmentRef,
        off: usize,
        dst: *mut u8,
        len: usize,
        kind: u64,
    ) -> Result<()> {
        let w = seg.to_words();
        let args = [w[0], w[1], offset_len(off, len), dst as u64, kind];
        Ok(self.rt.request_short(seg.rank, self.h.get, &args)?)
    }

    /// Waits for a [`Completion`] of `n` replies from `rank` of which `sent` went out (or an
    /// error after some): the value, or the first error.
    fn finish(
        &self,
        c: &Completion,
        rank: usize,
        n: u64,
        sent: std::result::Result<u64, (u64, GlobalError)>,
        what: &dyn Fn() -> String,
    ) -> Result<u64> {
        let err = match sent {
            Ok(_) => None,
            Err((sent, e)) => {
                c.forget(n - sent);
                Some(e)
            }
        };
        // Even after an error, the replies to what went out land in our memory: wait for them.
        let done = self.await_completion(c, rank, what);
        match err {
            Some(e) => Err(e),
            None => done,
        }
    }

    /// Waits until every reply of `c` (all from `rank`) is in: the value, or the first refusal.
    /// Inlined: it is on a blocking operation's path from its answer to the next request.
    #[inline(always)]
    fn await_completion(
        &self,
        c: &Completion,
        rank: usize,
        what: &dyn Fn() -> String,
    ) -> Result<u64> {
        self.wait_on(rank, || c.done(), what);
        c.result().map_err(|w| self.refused_err(w))
    }

    /// Messages a transfer of `len` bytes takes (one for an empty one).
    #[inline]
    pub(crate) fn messages(&self, len: usize) -> u64 {
        let chunk = self.chunk.get();
        // No division in the common one-message case: it costs more than the rest of a
        // scalar's issue.
        if len <= chunk {
            1
        } else {
            len.div_ceil(chunk) as u64
        }
    }

    // ----- writes -----

    /// Writes `*p = v`; returns when the owner has acknowledged the update.
    ///
    /// Inlined for the reason [`Global::read`] is; a value that fits in one put's arguments
    /// goes in one message, without the bulk path's fragmenting.
    #[inline(always)]
    pub fn write<T: Pod>(&self, p: GlobalPtr<T>, v: T) -> Result<()> {
        if std::mem::size_of::<T>() > PUT_INLINE_WORDS * 8 {
            return self.bulk_write(p, std::slice::from_ref(&v));
        }
        p.check_fits(1)?;
        let bytes = bytemuck::bytes_of(&v);
        match self.route(p.rank())? {
            Route::Am => {
                let c = Completion::expecting(1);
                self.send_put(p.segment(), p.offset(), bytes, c.word())?;
                let what = || format!("a write to rank {}", p.rank());
                self.await_completion(&c, p.rank(), &what).map(|_| ())
            }
            near => self.write_near(near, p, bytes),
        }
    }

    /// Writes `bytes` at `p` on a rank reached without messages ([`Route::Local`] or
    /// [`Route::Direct`]).
    fn write_near<T: Pod>(&self, route: Route, p: GlobalPtr<T>, bytes: &[u8]) -> Result<()> {
        if route == Route::Local {
            self.shared
                .own
                .write(p.segment(), p.offset(), bytes)
                .map_err(|r| GlobalError::refused(self.me, r))
        } else {
            self.rma
                .put(p.segment(), p.offset(), bytes)
                .map_err(GlobalError::from)
        }
    }

    /// Writes `src` at `p` (blocking, acknowledged).
    pub fn bulk_write<T: Pod>(&self, p: GlobalPtr<T>, src: &[T]) -> Result<()> {
        let off = p.offset();
        p.check_fits(src.len())?;
        let bytes: &[u8] = bytemuck::cast_slice(src);
        match self.route(p.rank())? {
            route @ (Route::Local | Route::Direct) => self.write_near(route, p, bytes),
            Route::Am => {
                let what = || format!("a write to rank {}", p.rank());
                if bytes.len() <= self.chunk.get() {
                    // One message (the scalar case): if it cannot be sent, nothing is out.
                    let c = Completion::expecting(1);
                    self.send_put(p.segment(), off, bytes, c.word())?;
                    return self.await_completion(&c, p.rank(), &what).map(|_| ());
                }
                let n = self.messages(bytes.len());
                let c = Completion::expecting(n);
                let sent = self.send_puts(p.segment(), off, bytes, c.word());
                self.finish(&c, p.rank(), n, sent, &what).map(|_| ())
            }
        }
    }

    fn send_puts(
        &self,
        seg: SegmentRef,
        off: usize,
        src: &[u8],
        kind: u64,
    ) -> std::result::Result<u64, (u64, GlobalError)> {
        let chunk = self.chunk.get();
        if src.len() <= chunk {
            // One message: the scalar case, without the fragmenting loop.
            return match self.send_put(seg, off, src, kind) {
                Ok(()) => Ok(1),
                Err(e) => Err((0, e)),
            };
        }
        let mut sent = 0;
        for (start, len) in pieces(src.len(), chunk) {
            if let Err(e) = self.send_put(seg, off + start, &src[start..start + len], kind) {
                return Err((sent, e));
            }
            sent += 1;
        }
        Ok(sent)
    }

    /// Sends one put request: `src` to `off` of `seg`, completed at `kind`; inline in the
    /// arguments when it fits.
    #[inline(always)]
    fn send_put(&self, seg: SegmentRef, off: usize, src: &[u8], kind: u64) -> Result<()> {
        let w = seg.to_words();
        let header = [w[0], w[1], offset_len(off, src.len()), kind];
        if src.len() <= PUT_INLINE_WORDS * 8 {
            let mut args = [0u64; 4 + PUT_INLINE_WORDS];
            args[..4].copy_from_slice(&header);
            let words = to_words(src, &mut args[4..]);
            Ok(self
                .rt
                .request_short(seg.rank, self.h.put, &args[..4 + words])?)
        } else {
            Ok(self.rt.request_medium(seg.rank, self.h.put, &header, src)?)
        }
    }

    // ----- split phase -----

    /// Runs `f` with a [`Phase`] in which gets and puts are split-phase, and syncs when it
    /// ends (also if `f` fails or panics): Split-C's `x := *p; ...; sync()`. The buffers of
    /// gets stay borrowed until the sync, which is what makes them safe.
    pub fn phase<'env, R>(&'env self, f: impl FnOnce(&Phase<'env, 'rt>) -> Result<R>) -> Result<R> {
        /// Syncs if `f` unwinds, so no reply writes a buffer that is gone.
        struct SyncOnUnwind<'a, 'rt>(&'a Global<'rt>);
        impl Drop for SyncOnUnwind<'_, '_> {
            fn drop(&mut self) {
                let _ = self.0.sync();
            }
        }
        let phase = Phase {
            g: self,
            _borrows: PhantomData,
        };
        let guard = SyncOnUnwind(self);
        let value = f(&phase);
        std::mem::forget(guard);
        let synced = self.sync();
        let value = value?;
        synced.map(|()| value)
    }

    /// Starts a get of `*p` whose value a [`Pending`] hands over (the handle form: finer
    /// completion than `sync`). Dropping the handle waits for the value.
    pub fn get_nb<T: Pod>(&self, p: GlobalPtr<T>) -> Result<Pending<'_, 'rt, T>> {
        p.check_fits(1)?;
        let mut value = Box::new(T::zeroed());
        let route = self.route(p.rank())?;
        if route != Route::Am {
            self.bulk_read(std::slice::from_mut(&mut *value), p)?;
            return Ok(Pending {
                g: self,
                value,
                completion: Box::new(Completion::expecting(0)),
                rank: p.rank(),
            });
        }
        let n = self.messages(std::mem::size_of::<T>());
        let completion = Box::new(Completion::expecting(n));
        let bytes: &mut [u8] = bytemuck::bytes_of_mut(&mut *value);
        if let Err((sent, e)) = self.send_gets(p.segment(), p.offset(), bytes, completion.word()) {
            completion.forget(n - sent);
            self.wait_for(|| completion.done(), &|| "a get's replies".into());
            return Err(e);
        }
        Ok(Pending {
            g: self,
            value,
            completion,
            rank: p.rank(),
        })
    }

    /// Starts `*p := v` (split-phase; `v` may be reused at once), completed by [`Global::sync`].
    pub fn put<T: Pod>(&self, p: GlobalPtr<T>, v: &T) -> Result<()> {
        self.bulk_put(p, std::slice::from_ref(v))
    }

    /// Starts writing `src` at `p`, completed by [`Global::sync`].
    pub fn bulk_put<T: Pod>(&self, p: GlobalPtr<T>, src: &[T]) -> Result<()> {
        let off = p.offset();
        p.check_fits(src.len())?;
        let bytes: &[u8] = bytemuck::cast_slice(src);
        match self.route(p.rank())? {
            Route::Local | Route::Direct => self.bulk_write(p, src),
            Route::Am => {
                let n = self.messages(bytes.len());
                self.shared.counter.issue(n);
                self.split_dests.note(p.rank());
                if let Err((sent, e)) = self.send_puts(p.segment(), off, bytes, 0) {
                    self.shared.counter.unissue(n - sent);
                    return Err(e);
                }
                Ok(())
            }
        }
    }

    /// Waits until every get and put this rank started has completed; returns the first
    /// refusal among them (Split-C's `sync`). Returns at once with nothing outstanding.
    pub fn sync(&self) -> Result<()> {
        let c = &self.shared.counter;
        let what = || format!("sync: {} gets/puts outstanding", c.outstanding());
        match self.split_dests.take_single() {
            // All to one rank: spin while it runs, as a blocking read's wait does.
            Some(rank) => self.wait_on(rank, || c.outstanding() == 0, &what),
            None => self.wait_for(|| c.outstanding() == 0, &what),
        }
        let first = self
            .shared
            .split_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match first {
            None => Ok(()),
            Some(w) => Err(self.refused_err(w)),
        }
    }

    // ----- stores -----

    /// One-way `*p :- v`: returns at once, with no completion here; the owner's byte
    /// counter grows by `size_of::<T>()` once the value is in.
    pub fn store<T: Pod>(&self, p: GlobalPtr<T>, v: &T) -> Result<()> {
        self.bulk_store(p, std::slice::from_ref(v))
    }

    /// One-way store of `src` at `p`, counted at the owner as `size_of_val(src)` bytes.
    pub fn bulk_store<T: Pod>(&self, p: GlobalPtr<T>, src: &[T]) -> Result<()> {
        let off = p.offset();
        let len = p.check_fits(src.len())?;
        let bytes: &[u8] = bytemuck::cast_slice(src);
        let rank = p.rank();
        match self.route(rank)? {
            Route::Local => {
                if let Err(r) = self.shared.own.write(p.segment(), off, bytes) {
                    return Err(GlobalError::refused(self.me, r));
                }
                self.shared
                    .stored
                    .fetch_add(len as u64, std::sync::atomic::Ordering::Release);
            }
            Route::Direct => {
                self.rma
                    .put(p.segment(), off, bytes)
                    .map_err(GlobalError::from)?;
                // The data is in (the put fenced it) before the counter says so.
                self.rma
                    .atomic(self.ctrl.on(rank), 0, AtomicOp::FetchAdd, len as u64, 0)
                    .map_err(GlobalError::from)?;
            }
            Route::Am => {
                let chunk = self.chunk.get();
                if bytes.len() <= chunk {
                    // One message: the scalar case, without the fragmenting loop.
                    self.send_store(p.segment(), off, bytes)?;
                } else {
                    for (start, n) in pieces(bytes.len(), chunk) {
                        self.send_store(p.segment(), off + start, &bytes[start..start + n])?;
                        self.count_stored_to(rank, n as u64);
                    }
                    return Ok(());
                }
            }
        }
        self.count_stored_to(rank, len as u64);
        Ok(())
    }

    /// Sends one store request: `src` to `off` of `seg`; inline in the arguments when it fits.
    #[inline(always)]
    fn send_store(&self, seg: SegmentRef, off: usize, src: &[u8]) -> Result<()> {
        let w = seg.to_words();
        let header = [w[0], w[1], offset_len(off, src.len())];
        if src.len() <= STORE_INLINE_WORDS * 8 {
            let mut args = [0u64; 3 + STORE_INLINE_WORDS];
            args[..3].copy_from_slice(&header);
            let words = to_words(src, &mut args[3..]);
            Ok(self
                .rt
                .request_short(seg.rank, self.h.store, &args[..3 + words])?)
        } else {
            Ok(self
                .rt
                .request_medium(seg.rank, self.h.store, &header, src)?)
        }
    }

    /// Counts `n` bytes this rank stored into `rank` (for `all_store_sync`).
    #[inline]
    pub(crate) fn count_stored_to(&self, rank: usize, n: u64) {
        let c = &self.stored_to[rank];
        c.set(c.get() + n);
    }

    /// Bytes stored into this rank so far (by every rank, itself included): those its
    /// handlers wrote, plus those peers wrote directly (`hw`), counted in the counter
    /// segment's word.
    pub fn stored_bytes(&self) -> u64 {
        let direct = self
            .shared
            .own
            .atomic(self.ctrl.on(self.me), 0, AtomicOp::Load, 0, 0)
            .unwrap_or(0);
        direct.wrapping_add(
            self.shared
                .stored
                .load(std::sync::atomic::Ordering::Acquire),
        )
    }

    /// Bytes stored into this rank that `store_sync` has not consumed yet.
    pub fn store_pending(&self) -> u64 {
        self.stored_bytes().wrapping_sub(self.consumed.get())
    }

    /// Waits until at least `n` more bytes have been stored into this rank, and consumes
    /// them (Split-C's `store_sync(n)`). If fewer ever arrive it waits, and says so on
    /// standard error after `VOLLEY_HANG_WARN_SECS` (see [`Global::all_store_sync`] for the
    /// collective form that knows how much to expect). A store refused here is an error.
    pub fn store_sync(&self, n: u64) -> Result<()> {
        let consumed = self.consumed.get();
        self.wait_for(|| self.stored_bytes().wrapping_sub(consumed) >= n, &|| {
            format!(
                "store_sync({n}): {} bytes have arrived",
                self.stored_bytes().wrapping_sub(consumed)
            )
        });
        self.consumed.set(consumed.wrapping_add(n));
        self.local_store_refusal()
    }

    /// A store refused at this rank since the last report, as an error.
    pub(crate) fn local_store_refusal(&self) -> Result<()> {
        let count = self
            .shared
            .store_refused
            .load(std::sync::atomic::Ordering::Relaxed);
        let new = count - self.local_refusals_reported.get();
        if new == 0 {
            return Ok(());
        }
        self.local_refusals_reported.set(count);
        let first = self
            .shared
            .store_first_refusal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let (_, reason) = refusal_of(first.unwrap_or((1, 0, 0, 0, 0)));
        Err(GlobalError::StoreRefused {
            rank: self.me,
            count: new,
            reason,
        })
    }
}

/// A get in flight whose value this handle hands over ([`Global::get_nb`]).
#[must_use = "a Pending get must be waited for (dropping it waits)"]
pub struct Pending<'g, 'rt, T: Pod> {
    g: &'g Global<'rt>,
    /// Where the reply writes: owned here, so a handle that is leaked leaks it too and a late
    /// reply never writes freed memory.
    value: Box<T>,
    completion: Box<Completion>,
    rank: usize,
}

impl<T: Pod> Pending<'_, '_, T> {
    /// Whether the value is in (polls once if not).
    pub fn test(&mut self) -> bool {
        if !self.completion.done() {
            self.g.rt.poll();
        }
        self.completion.done()
    }

    /// Waits for the value.
    pub fn wait(mut self) -> Result<T> {
        let v = self.finish();
        // Done: nothing can write the boxes any more.
        v
    }

    fn finish(&mut self) -> Result<T> {
        let (c, rank) = (&self.completion, self.rank);
        self.g
            .wait_on(rank, || c.done(), &|| format!("a get from rank {rank}"));
        c.result()
            .map(|_| *self.value)
            .map_err(|w| self.g.refused_err(w))
    }
}

impl<T: Pod> Drop for Pending<'_, '_, T> {
    fn drop(&mut self) {
        let c = &self.completion;
        self.g.wait_for(|| c.done(), &|| "a dropped get".into());
    }
}

/// Split-phase operations whose buffers are borrowed until the phase's `sync`
/// ([`Global::phase`]).
pub struct Phase<'env, 'rt> {
    g: &'env Global<'rt>,
    /// Invariant in `'env`: the buffers handed in must live as long as the phase.
    _borrows: PhantomData<&'env mut &'env ()>,
}

impl<'env, 'rt> Phase<'env, 'rt> {
    /// `*dst := *p`: starts reading `*p` into `dst`, which is filled by the end of the phase.
    pub fn get<T: Pod>(&self, dst: &'env mut T, p: GlobalPtr<T>) -> Result<()> {
        self.bulk_get(std::slice::from_mut(dst), p)
    }

    /// Starts reading `dst.len()` elements at `p` into `dst`.
    pub fn bulk_get<T: Pod>(&self, dst: &'env mut [T], p: GlobalPtr<T>) -> Result<()> {
        let g = self.g;
        p.check_fits(dst.len())?;
        match g.route(p.rank())? {
            Route::Local | Route::Direct => g.bulk_read(dst, p),
            Route::Am => {
                let bytes: &mut [u8] = bytemuck::cast_slice_mut(dst);
                let n = g.messages(bytes.len());
                g.shared.counter.issue(n);
                g.split_dests.note(p.rank());
                if let Err((sent, e)) = g.send_gets(p.segment(), p.offset(), bytes, 0) {
                    g.shared.counter.unissue(n - sent);
                    return Err(e);
                }
                Ok(())
            }
        }
    }

    /// `*p := *v` ([`Global::put`]).
    pub fn put<T: Pod>(&self, p: GlobalPtr<T>, v: &T) -> Result<()> {
        self.g.put(p, v)
    }

    /// [`Global::bulk_put`].
    pub fn bulk_put<T: Pod>(&self, p: GlobalPtr<T>, src: &[T]) -> Result<()> {
        self.g.bulk_put(p, src)
    }

    /// The global layer, for anything else inside the phase.
    pub fn global(&self) -> &'env Global<'rt> {
        self.g
    }
}

#[cfg(test)]
mod tests {
    use super::pieces;

    #[test]
    fn pieces_cover_the_transfer_once() {
        assert_eq!(pieces(0, 8).collect::<Vec<_>>(), vec![(0, 0)]);
        assert_eq!(pieces(8, 8).collect::<Vec<_>>(), vec![(0, 8)]);
        assert_eq!(
            pieces(17, 8).collect::<Vec<_>>(),
            vec![(0, 8), (8, 8), (16, 1)]
        );
    }
}
