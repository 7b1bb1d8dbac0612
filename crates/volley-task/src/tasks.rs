//! The task table: logical ids, their locations, operations that follow a task wherever it
//! lives, and migration.

use crate::location::{to_bytes, Location};
use crate::state::{answer, op, Owned, Shared};
use crate::{Result, TaskError, CONTACT_CAPACITY};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use volley::rma::{self, LocalSegment, Perms, Refusal, Rma, SegmentRef, TargetWork};
use volley::{Runtime, RuntimeBuilder};

/// The layer's handlers, registered in a builder; [`TasksSetup::attach`] it once built.
#[derive(Debug)]
pub struct TasksSetup {
    shared: Shared,
}

/// What this rank's task-addressed operations met.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskStats {
    /// Operations refused at a task's old location and retried at its new one.
    pub retried: u64,
    /// Times an operation found its task being moved and asked again.
    pub waited_for_moves: u64,
}

/// The task layer of one runtime.
#[derive(Debug)]
pub struct Tasks<'a, 'rt> {
    pub(crate) rt: &'rt Runtime,
    rma: &'a Rma<'rt>,
    pub(crate) shared: Shared,
    seq: Cell<u64>,
    /// Locations this rank has learnt.
    cache: RefCell<HashMap<u64, Location>>,
    /// Segments of the tasks this rank owns.
    local: RefCell<HashMap<u64, Vec<LocalSegment>>>,
    /// Segments of tasks moved away, sealed, freed by [`Tasks::reclaim`].
    sealed: RefCell<Vec<LocalSegment>>,
    stats: Cell<TaskStats>,
}

impl TasksSetup {
    /// Binds the layer to the built runtime and its one-sided layer.
    pub fn attach<'a, 'rt>(self, rt: &'rt Runtime, rma: &'a Rma<'rt>) -> Tasks<'a, 'rt> {
        Tasks {
            rt,
            rma,
            shared: self.shared,
            seq: Cell::new(0),
            cache: RefCell::default(),
            local: RefCell::default(),
            sealed: RefCell::default(),
            stats: Cell::default(),
        }
    }
}

impl<'a, 'rt> Tasks<'a, 'rt> {
    /// Registers the layer's handlers in `b` (every rank, in the same place), with a
    /// first-contact queue of [`CONTACT_CAPACITY`] messages.
    pub fn register(b: &mut RuntimeBuilder) -> TasksSetup {
        Self::register_with_capacity(b, CONTACT_CAPACITY)
    }

    /// Like [`Tasks::register`] with a first-contact queue of `capacity` messages.
    pub fn register_with_capacity(b: &mut RuntimeBuilder, capacity: usize) -> TasksSetup {
        TasksSetup {
            shared: Shared::register(b, capacity),
        }
    }

    pub(crate) fn check_rank(&self, rank: usize) -> Result<()> {
        let size = self.rt.size();
        if rank >= size {
            return Err(TaskError::InvalidRank { rank, size });
        }
        Ok(())
    }

    pub(crate) fn next_seq(&self) -> u64 {
        let s = self.seq.get();
        self.seq.set(s + 1);
        s
    }

    /// Waits for the answer to call `seq`.
    pub(crate) fn wait_answer(&self, seq: u64) -> Vec<u64> {
        let mut got = None;
        self.rt.wait_until(|| {
            got = self.shared.lock().answers.remove(&seq);
            got.is_some()
        });
        got.unwrap_or_default()
    }

    /// Calls `op` at `rank` and waits for the answer.
    fn call(&self, rank: usize, op: u64, words: &[u64]) -> Result<Vec<u64>> {
        let seq = self.next_seq();
        self.rt
            .request_medium(rank, self.shared.call, &[op, seq], &to_bytes(words))?;
        Ok(self.wait_answer(seq))
    }

    /// The rank that keeps task `task`'s location.
    pub fn home(&self, task: u64) -> usize {
        (task % self.rt.size() as u64) as usize
    }

    /// Makes task `task` on this rank with segments of these lengths and permissions, and
    /// registers it at its home. [`TaskError::Exists`] if the id is taken (nothing kept).
    pub fn create(&self, task: u64, segments: &[(usize, Perms)]) -> Result<Location> {
        let mut made = Vec::with_capacity(segments.len());
        for &(len, perms) in segments {
            match self.rma.alloc(len, perms) {
                Ok(s) => made.push(s),
                Err(e) => {
                    made.into_iter().for_each(|s| {
                        self.rma.free(s);
                    });
                    return Err(e.into());
                }
            }
        }
        let loc = Location {
            rank: self.rt.rank(),
            epoch: 0,
            segments: made
                .iter()
                .zip(segments)
                .map(|(s, &(_, p))| (s.handle(), p))
                .collect(),
        };
        let ans = self.call(
            self.home(task),
            op::REGISTER,
            &[&[task, 1][..], &loc.to_words()].concat(),
        )?;
        if ans.first() != Some(&answer::OK) {
            made.into_iter().for_each(|s| {
                self.rma.free(s);
            });
            return Err(TaskError::Exists { task });
        }
        self.shared.lock().owned.insert(task, Owned::Here(0));
        self.local.borrow_mut().insert(task, made);
        self.cache.borrow_mut().insert(task, loc.clone());
        Ok(loc)
    }

    /// Task `task`'s location as its home knows it now.
    pub fn lookup(&self, task: u64) -> Result<Location> {
        let ans = self.call(self.home(task), op::LOOKUP, &[task])?;
        match ans.split_first() {
            Some((&answer::FOUND, w)) => {
                let loc = Location::from_words(w).ok_or(TaskError::UnknownTask { task })?;
                self.cache.borrow_mut().insert(task, loc.clone());
                Ok(loc)
            }
            _ => Err(TaskError::UnknownTask { task }),
        }
    }

    /// Task `task`'s location as this rank knows it (asking its home the first time).
    pub fn locate(&self, task: u64) -> Result<Location> {
        if let Some(l) = self.cache.borrow().get(&task) {
            return Ok(l.clone());
        }
        self.lookup(task)
    }

    /// Runs `f` on segment `index` of task `task` wherever it lives, following moves.
    fn follow<T>(
        &self,
        task: u64,
        index: usize,
        mut f: impl FnMut(SegmentRef) -> rma::Result<T>,
    ) -> Result<T> {
        let mut loc = self.locate(task)?;
        loop {
            let count = loc.segments.len();
            let &(seg, _) =
                loc.segments
                    .get(index)
                    .ok_or(TaskError::NoSuchSegment { task, index, count })?;
            let err = match self.rma.through_handlers(|| f(seg)) {
                Err(
                    e @ rma::Error::Refused {
                        reason: Refusal::NoSuchSegment | Refusal::WrongKey,
                        ..
                    },
                ) => e,
                r => return Ok(r?),
            };
            // Refused where this rank thought the task was: ask that rank.
            let ans = self.call(loc.rank, op::WHERE, &[task])?;
            let mut stats = self.stats.get();
            match ans.split_first() {
                Some((&answer::MOVED, w)) => match Location::from_words(w) {
                    Some(new) if new.epoch > loc.epoch => {
                        stats.retried += 1;
                        self.cache.borrow_mut().insert(task, new.clone());
                        loc = new;
                    }
                    _ => return Err(err.into()),
                },
                Some((&answer::MOVING, _)) => {
                    stats.waited_for_moves += 1;
                    self.rt.poll();
                }
                Some((&answer::HERE, &[epoch])) if epoch == loc.epoch => return Err(err.into()),
                _ => {
                    // Moved away and back, or this rank's location is older than the old
                    // owner's record: the home knows.
                    let new = self.lookup(task)?;
                    if new == loc {
                        return Err(err.into());
                    }
                    stats.retried += 1;
                    loc = new;
                }
            }
            self.stats.set(stats);
        }
    }

    /// Writes `data` at `offset` of segment `index` of task `task`.
    pub fn put(&self, task: u64, index: usize, offset: usize, data: &[u8]) -> Result<()> {
        self.follow(task, index, |s| self.rma.put(s, offset, data))
    }

    /// Reads `buf.len()` bytes at `offset` of segment `index` of task `task`.
    pub fn get(&self, task: u64, index: usize, offset: usize, buf: &mut [u8]) -> Result<()> {
        self.follow(task, index, |s| self.rma.get(s, offset, buf))
    }

    /// Adds `v` to the word at `offset` of segment `index` of task `task`; returns the old
    /// value.
    pub fn fetch_add(&self, task: u64, index: usize, offset: usize, v: u64) -> Result<u64> {
        self.follow(task, index, |s| self.rma.fetch_add(s, offset, v))
    }

    /// Moves task `task` to rank `to`, copying its segments (a simulated migration). Both the
    /// owner and `to` call it; other ranks learn the new location when their next access is
    /// refused at the old one. Returns the new location.
    pub fn migrate(&self, task: u64, to: usize) -> Result<Location> {
        self.check_rank(to)?;
        let me = self.rt.rank();
        let bad = |why| TaskError::BadMigration { task, to, me, why };
        let loc = self.lookup(task)?;
        if loc.rank == to {
            return Err(bad("the task is there already"));
        }
        if me == to {
            self.move_in(task, &loc)
        } else if me == loc.rank {
            self.move_out(task, to)
        } else {
            Err(bad("only the owner and the new owner call migrate"))
        }
    }

    /// The new owner's side: fresh segments (writable, for the copy), sent to the owner,
    /// which fills them; then their own permissions, the new location published at the home,
    /// and the old owner told, which from then on forwards to it.
    fn move_in(&self, task: u64, loc: &Location) -> Result<Location> {
        let mut made = Vec::with_capacity(loc.segments.len());
        for &(s, perms) in &loc.segments {
            made.push(self.rma.alloc(s.len(), perms | Perms::WRITE)?);
        }
        let new = Location {
            rank: self.rt.rank(),
            epoch: loc.epoch + 1,
            segments: made
                .iter()
                .zip(&loc.segments)
                .map(|(s, &(_, p))| (s.handle(), p))
                .collect(),
        };
        self.call(
            loc.rank,
            op::LANDING,
            &[&[task][..], &new.to_words()].concat(),
        )?;
        self.rt
            .wait_until(|| self.shared.lock().arrived.remove(&task));
        for &(s, perms) in &new.segments {
            self.rma.set_perms(s, perms);
        }
        let words = [&[task][..], &new.to_words()].concat();
        let ans = self.call(
            self.home(task),
            op::REGISTER,
            &[&[task, 0][..], &new.to_words()].concat(),
        )?;
        debug_assert_eq!(ans.first(), Some(&answer::OK));
        self.shared
            .lock()
            .owned
            .insert(task, Owned::Here(new.epoch));
        self.local.borrow_mut().insert(task, made);
        self.cache.borrow_mut().insert(task, new.clone());
        self.call(loc.rank, op::FINISH, &words)?;
        Ok(new)
    }

    /// The owner's side: refuse new accesses, seal, copy, and forward once the new owner has
    /// published the new location.
    fn move_out(&self, task: u64, to: usize) -> Result<Location> {
        let me = self.rt.rank();
        let old = self
            .local
            .borrow_mut()
            .remove(&task)
            .ok_or(TaskError::NotHere { task, rank: me })?;
        self.shared.lock().owned.insert(task, Owned::Moving);
        let mut new = None;
        self.rt.wait_until(|| {
            new = self.shared.lock().landings.remove(&task);
            new.is_some()
        });
        let new = new.expect("waited for");
        // Sealed first: an access admitted before is applied by now and copied below; one
        // after is refused, and its initiator asks here and retries at the new location.
        for s in &old {
            self.rma.seal(s.handle());
        }
        let mut buf = Vec::new();
        for (s, &(dst, _)) in old.iter().zip(&new.segments) {
            buf.resize(s.handle().len(), 0);
            self.rma.read_local(s.handle(), 0, &mut buf)?;
            self.rma.put(dst, 0, &buf)?;
        }
        self.call(to, op::MOVED, &[task])?;
        // The new owner's FINISH turns `Moving` into the forwarding record.
        self.rt
            .wait_until(|| matches!(self.shared.lock().owned.get(&task), Some(Owned::Moved(_))));
        self.cache.borrow_mut().insert(task, new.clone());
        self.sealed.borrow_mut().extend(old);
        Ok(new)
    }

    /// Frees the sealed segments of tasks moved away. Call it when no access aimed at their
    /// old locations can still be in flight (after a barrier, say): an in-place get admitted
    /// before the seal copies out of the old memory when it is waited for.
    pub fn reclaim(&self) -> usize {
        let sealed = std::mem::take(&mut *self.sealed.borrow_mut());
        let n = sealed.len();
        for s in sealed {
            self.rma.free(s);
        }
        n
    }

    /// The target-side work counted for task `task`'s segments at this rank, its owner.
    pub fn work(&self, task: u64) -> Result<TargetWork> {
        let local = self.local.borrow();
        let segs = local.get(&task).ok_or(TaskError::NotHere {
            task,
            rank: self.rt.rank(),
        })?;
        let mut sum = TargetWork::default();
        for s in segs {
            let w = self.rma.target_work(s.handle())?;
            sum.frames += w.frames;
            sum.bytes += w.bytes;
            sum.largest_frame = sum.largest_frame.max(w.largest_frame);
        }
        Ok(sum)
    }

    /// This rank's segments of task `task` (it must own it).
    pub fn segments(&self, task: u64) -> Result<Vec<SegmentRef>> {
        let local = self.local.borrow();
        let segs = local.get(&task).ok_or(TaskError::NotHere {
            task,
            rank: self.rt.rank(),
        })?;
        Ok(segs.iter().map(|s| s.handle()).collect())
    }

    /// What this rank's task-addressed operations met so far.
    pub fn stats(&self) -> TaskStats {
        self.stats.get()
    }

    /// Lookups of unknown tasks this rank answered as their home (each refused).
    pub fn unknown_lookups(&self) -> u64 {
        self.shared.lock().unknown_lookups
    }
}
