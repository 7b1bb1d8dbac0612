//! Atomic operations at the owner: the built-in word atomics, registered procedures
//! (Split-C's `atomic(f, p, args)`), and remote pushes onto per-rank buckets (the task-queue
//! and sample-sort pattern).

use crate::completion::Completion;
use crate::error::{GlobalError, Result};
use crate::global::{Global, Route};
use crate::handlers::{push_local, run_procedure, BUCKET_HEADER, PROC_ARGS};
use crate::ptr::GlobalPtr;
use bytemuck::Pod;
use std::marker::PhantomData;
use volley::rma::{AtomicOp, SymmetricSegment};

/// A registered atomic procedure on a `T` ([`crate::GlobalSetup::atomic_proc`]).
pub struct AtomicProc<T> {
    index: usize,
    _t: PhantomData<fn(&mut T)>,
}

impl<T> Clone for AtomicProc<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for AtomicProc<T> {}

impl<T> std::fmt::Debug for AtomicProc<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AtomicProc({})", self.index)
    }
}

impl<T> AtomicProc<T> {
    pub(crate) fn new(index: usize) -> Self {
        Self {
            index,
            _t: PhantomData,
        }
    }
}

/// A bucket on every rank that any rank may push items onto, each push atomic at the owner
/// ([`Global::all_bucket_alloc`], [`Global::push`], [`Global::take`]).
pub struct Bucket<T> {
    seg: SymmetricSegment,
    capacity: usize,
    _t: PhantomData<T>,
}

impl<T> std::fmt::Debug for Bucket<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Bucket(capacity {})", self.capacity)
    }
}

impl<T> Bucket<T> {
    /// Items each rank's bucket holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

impl<'rt> Global<'rt> {
    fn word_atomic(
        &self,
        p: GlobalPtr<u64>,
        op: AtomicOp,
        operand: u64,
        compare: u64,
    ) -> Result<u64> {
        p.check_fits(1)?;
        self.route(p.rank())?;
        Ok(self
            .rma
            .atomic(p.segment(), p.offset(), op, operand, compare)?)
    }

    /// Atomically adds `v` to `*p`; returns the old value. A CPU atomic on the owner's
    /// memory under `hw` on one node, a handler at the owner otherwise.
    pub fn fetch_add(&self, p: GlobalPtr<u64>, v: u64) -> Result<u64> {
        self.word_atomic(p, AtomicOp::FetchAdd, v, 0)
    }

    /// Atomically sets `*p = new` if it equals `expect`; returns the old value.
    pub fn compare_swap(&self, p: GlobalPtr<u64>, expect: u64, new: u64) -> Result<u64> {
        self.word_atomic(p, AtomicOp::CompareSwap, new, expect)
    }

    /// Atomically sets `*p = v`; returns the old value.
    pub fn swap(&self, p: GlobalPtr<u64>, v: u64) -> Result<u64> {
        self.word_atomic(p, AtomicOp::Swap, v, 0)
    }

    /// Runs procedure `f` on `*p` at its owner with `args` (at most 11), atomically with
    /// respect to every handler and procedure there, and returns its result (blocking).
    ///
    /// Procedures always run at the owner, under every strategy: under `np` on its progress
    /// thread, serialized with the handlers it runs. They are atomic with respect to other
    /// procedures and to the global layer's handlers, not to the built-in word atomics that
    /// `hw` applies directly, nor to the owner's own code outside [`volley::Runtime::critical`]:
    /// don't mix those on one pointee.
    pub fn atomic<T: Pod>(&self, f: AtomicProc<T>, p: GlobalPtr<T>, args: &[u64]) -> Result<u64> {
        if args.len() > PROC_ARGS {
            return Err(GlobalError::BadArguments(format!(
                "{} arguments to an atomic procedure; at most {PROC_ARGS}",
                args.len()
            )));
        }
        let registered = self
            .shared
            .procs
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len();
        if f.index >= registered {
            return Err(GlobalError::UnknownProcedure {
                index: f.index,
                registered,
            });
        }
        p.check_fits(1)?;
        if self.route(p.rank())? == Route::Local {
            return self
                .rt
                .critical(|| {
                    run_procedure(&self.shared, p.segment(), p.offset(), f.index as u64, args)
                })
                .map_err(|r| GlobalError::refused(self.me, r));
        }
        let c = Completion::expecting(1);
        let w = p.segment().to_words();
        let mut a = [0u64; 5 + PROC_ARGS];
        a[..5].copy_from_slice(&[w[0], w[1], p.offset() as u64, f.index as u64, c.word()]);
        a[5..5 + args.len()].copy_from_slice(args);
        let sent = self
            .rt
            .request_short(p.rank(), self.h.atomic, &a[..5 + args.len()])
            .map(|()| 1)
            .map_err(|e| (0, e.into()));
        let r = match sent {
            Ok(_) => None,
            Err((_, e)) => {
                c.forget(1);
                Some(e)
            }
        };
        self.wait_on(p.rank(), || c.done(), &|| {
            format!("an atomic at rank {}", p.rank())
        });
        if let Some(e) = r {
            return Err(e);
        }
        c.result().map_err(|w| {
            let (rank, reason) = crate::completion::refusal_of(w);
            GlobalError::refused(rank, reason)
        })
    }

    /// Allocates a bucket of `capacity` items of `T` on every rank (collective).
    pub fn all_bucket_alloc<T: Pod>(&self, capacity: usize) -> Result<Bucket<T>> {
        let bytes = capacity
            .checked_mul(std::mem::size_of::<T>())
            .and_then(|b| b.checked_add(BUCKET_HEADER))
            .ok_or_else(|| {
                GlobalError::BadArguments(format!("bucket of {capacity} items overflows"))
            })?;
        let seg = self.alloc_zeroed(bytes)?;
        Ok(Bucket {
            seg,
            capacity,
            _t: PhantomData,
        })
    }

    /// Pushes `item` onto `rank`'s bucket: one-way, counted like a store (so
    /// [`Global::all_store_sync`] waits for it), the slot taken atomically at the owner. A
    /// push onto a full bucket is dropped and reported: here at once when the owner's memory
    /// is reachable, and by the owner's [`Global::take`] in every case.
    pub fn push<T: Pod>(&self, b: &Bucket<T>, rank: usize, item: &T) -> Result<()> {
        let bytes = bytemuck::bytes_of(item);
        let (bucket, ctrl) = (b.seg.on(rank), self.ctrl.on(rank));
        let cap = b.capacity as u64;
        let size = bytes.len() as u64;
        // The slot the push took, where this rank takes it (a handler takes it otherwise).
        let slot = match self.route(rank)? {
            Route::Local => {
                let idx = push_local(&self.shared.own, bucket, cap, bytes)
                    .map_err(|r| GlobalError::refused(self.me, r))?;
                self.shared
                    .stored
                    .fetch_add(size, std::sync::atomic::Ordering::Release);
                Some(idx)
            }
            Route::Direct => {
                let idx = self.rma.fetch_add(bucket, 0, 1)?;
                if idx < cap {
                    self.rma
                        .put(bucket, BUCKET_HEADER + idx as usize * bytes.len(), bytes)?;
                }
                self.rma.atomic(ctrl, 0, AtomicOp::FetchAdd, size, 0)?;
                Some(idx)
            }
            Route::Am => {
                let w = bucket.to_words();
                self.rt
                    .request_medium(rank, self.h.push, &[w[0], w[1], cap], bytes)?;
                None
            }
        };
        self.count_stored_to(rank, size);
        match slot {
            Some(idx) if idx >= cap => Err(GlobalError::BucketOverflow {
                rank,
                pushed: idx + 1,
                capacity: cap,
            }),
            _ => Ok(()),
        }
    }

    /// Takes every item pushed onto this rank's bucket since the last `take` (call it after
    /// [`Global::all_store_sync`], when every push is in), and empties the bucket. More
    /// pushes than the capacity is an error: the excess was dropped.
    pub fn take<T: Pod>(&self, b: &Bucket<T>) -> Result<Vec<T>> {
        let mine = b.seg.on(self.me);
        let own = &self.shared.own;
        let refused = |r| GlobalError::refused(self.me, r);
        let count = own.atomic(mine, 0, AtomicOp::Swap, 0, 0).map_err(refused)?;
        let n = (count as usize).min(b.capacity);
        let mut items = vec![T::zeroed(); n];
        own.read(mine, BUCKET_HEADER, bytemuck::cast_slice_mut(&mut items))
            .map_err(refused)?;
        if count > b.capacity as u64 {
            return Err(GlobalError::BucketOverflow {
                rank: self.me,
                pushed: count,
                capacity: b.capacity as u64,
            });
        }
        Ok(items)
    }

    /// Frees a bucket (collective).
    pub fn free_bucket<T: Pod>(&self, b: Bucket<T>) {
        self.rma.free_symmetric(b.seg);
    }
}
