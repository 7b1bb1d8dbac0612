//! Completion of one-sided operations: events, implicit scopes and `sync`.

use super::*;

/// A non-blocking operation in flight. `wait` returns its result; dropping it waits too (so a
/// buffer it writes stays borrowed until the data is in).
///
/// A get that travels as messages fills its buffer when it is waited for (or dropped): the
/// data arrives in memory the runtime owns, so an event that is leaked (`mem::forget`) leaves
/// its buffer unfilled and its completion slot taken, and nothing else.
#[derive(Debug)]
#[must_use = "an Event must be waited for (dropping it waits)"]
pub struct Event<'a> {
    rma: &'a Rma<'a>,
    state: EventState,
    /// A get's buffer, filled from its completion slot when the get completes.
    pub(super) dest: Option<&'a mut [u8]>,
    /// An in-place get's bytes in the target's mapped segment, copied into `dest` once the
    /// target has accepted the get.
    pub(super) src: Option<*mut u8>,
}

#[derive(Debug)]
enum EventState {
    Done(Option<Error>),
    Pending {
        slot: u32,
        target: SegmentRef,
        offset: u64,
        len: u64,
    },
    Taken,
}

impl<'rt> Rma<'rt> {
    /// Runs `f` with a scope in which gets and puts are implicit: issue many, and they all
    /// complete when the scope ends (Split-C's `sync`). The get buffers stay borrowed until
    /// then, which is what makes implicit gets safe. Returns `f`'s value, or the first error of
    /// the operations issued in the scope.
    ///
    /// ```no_run
    /// # fn demo(rma: &volley::rma::Rma<'_>, seg: volley::rma::SegmentRef) -> volley::Result<()> {
    /// let (mut a, mut b) = ([0u8; 8], [0u8; 64]);
    /// rma.implicit(|s| {
    ///     s.get(seg, 0, &mut a)?;
    ///     s.get(seg, 64, &mut b)?;
    ///     s.put(seg, 128, b"both gets are in flight")
    /// })?;
    /// // a and b are filled here.
    /// # Ok(()) }
    /// ```
    pub fn implicit<'s, R>(&'s self, f: impl FnOnce(&ImplicitScope<'s>) -> Result<R>) -> Result<R> {
        let scope = ImplicitScope {
            rma: self,
            events: RefCell::new(Vec::new()),
        };
        let value = f(&scope);
        // Complete everything issued, even if `f` failed, before the buffers are released.
        let mut first_err = None;
        for ev in scope.events.into_inner() {
            if let Err(e) = ev.wait() {
                first_err.get_or_insert(e);
            }
        }
        let value = value?;
        match first_err {
            Some(e) => Err(e),
            None => Ok(value),
        }
    }

    /// Waits for every implicit operation (`*_nbi`) issued so far and returns the first error
    /// among them, if any.
    ///
    /// On the direct path puts need no waiting; signals and flagged puts that travel as
    /// messages (`signal_nbi`) are waited for on both paths.
    pub fn sync(&self) -> Result<()> {
        let s = &self.shared;
        if s.remaining(handlers::IMPLICIT_SLOT) == 0 && s.error(handlers::IMPLICIT_SLOT).is_none() {
            return Ok(());
        }
        self.rt
            .wait_until(|| s.remaining(handlers::IMPLICIT_SLOT) == 0);
        match s.take_implicit_error() {
            None => Ok(()),
            Some(e) => Err(refusal_error(e)),
        }
    }

    pub(super) fn done(&self, err: Option<Error>) -> Event<'_> {
        Event {
            rma: self,
            state: EventState::Done(err),
            dest: None,
            src: None,
        }
    }

    pub(super) fn pending(
        &self,
        slot: u32,
        target: SegmentRef,
        offset: u64,
        len: u64,
    ) -> Event<'_> {
        Event {
            rma: self,
            state: EventState::Pending {
                slot,
                target,
                offset,
                len,
            },
            dest: None,
            src: None,
        }
    }
}

/// Operations issued inside [`Rma::implicit`]; all complete when the scope ends.
#[derive(Debug)]
pub struct ImplicitScope<'s> {
    rma: &'s Rma<'s>,
    events: RefCell<Vec<Event<'s>>>,
}

impl<'s> ImplicitScope<'s> {
    /// Starts a get into `buf`, filled when the scope ends.
    pub fn get(&self, target: SegmentRef, offset: usize, buf: &'s mut [u8]) -> Result<()> {
        let ev = self.rma.get_nb(target, offset, buf)?;
        self.events.borrow_mut().push(ev);
        Ok(())
    }

    /// Starts a put of `data` (reusable at once), complete when the scope ends.
    pub fn put(&self, target: SegmentRef, offset: usize, data: &[u8]) -> Result<()> {
        let ev = self.rma.put_nb(target, offset, data)?;
        self.events.borrow_mut().push(ev);
        Ok(())
    }
}

impl Event<'_> {
    /// Whether the operation has completed (polls once if not).
    pub fn test(&mut self) -> bool {
        match self.state {
            EventState::Pending { slot, .. } => {
                if self.rma.shared.remaining(slot) == 0 {
                    return true;
                }
                self.rma.rt.poll();
                self.rma.shared.remaining(slot) == 0
            }
            _ => true,
        }
    }

    /// Waits for completion and returns the operation's result.
    pub fn wait(mut self) -> Result<()> {
        self.finish()
    }

    pub(super) fn finish(&mut self) -> Result<()> {
        match std::mem::replace(&mut self.state, EventState::Taken) {
            EventState::Done(None) | EventState::Taken => Ok(()),
            EventState::Done(Some(e)) => Err(e),
            EventState::Pending {
                slot,
                target,
                offset,
                len,
            } => {
                let shared = &self.rma.shared;
                self.rma.rt.wait_until(|| shared.remaining(slot) == 0);
                let err = shared.error(slot);
                match (&err, self.dest.take(), self.src) {
                    (None, Some(buf), Some(src)) => {
                        // Acquire: pairs with the writer's release (fence or flag) before
                        // our reads, as on the direct path.
                        fence(Ordering::Acquire);
                        // SAFETY: `src..src + buf.len()` lies in the target's mapped segment
                        // (checked when the get was issued, and accepted by the target);
                        // `buf` is the caller's, borrowed until now.
                        unsafe {
                            crate::copy::copy_nonoverlapping(src, buf.as_mut_ptr(), buf.len())
                        };
                    }
                    (None, Some(buf), None) => shared.take_data(slot, buf),
                    _ => {}
                }
                self.rma.free_slots.borrow_mut().push(slot);
                let _ = (target, offset, len);
                match err {
                    None => Ok(()),
                    Some(e) => Err(refusal_error(e)),
                }
            }
        }
    }
}

impl Drop for Event<'_> {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}
