//! This rank's segments: allocating them (alone or symmetrically on every rank), freeing them,
//! and reading and writing them locally.

use super::*;

impl<'rt> Rma<'rt> {
    pub(super) fn publish(&self, len: usize, perms: Perms, key: u64) -> Result<(u16, usize)> {
        let (id, area_offset) =
            self.alloc
                .borrow_mut()
                .alloc(len)
                .ok_or_else(|| Error::SegmentSpace {
                    len,
                    area: self.shared.local().segment_len,
                })?;
        self.shared.reset_work(id);
        self.own_table().publish(id, key, area_offset, len, perms);
        self.owned.borrow_mut().push(OwnedSegment {
            id,
            key,
            area_offset,
            len,
            alias_of: None,
        });
        Ok((id, area_offset))
    }

    /// Allocates a segment on this rank only; send [`LocalSegment::handle`] to others.
    pub fn alloc(&self, len: usize, perms: Perms) -> Result<LocalSegment> {
        let key = crate::bootstrap::random_u64();
        let (id, area_offset) = self.publish(len, perms, key)?;
        Ok(LocalSegment {
            handle: SegmentRef {
                rank: self.rt.rank(),
                id,
                key,
                len: len as u64,
            },
            area_offset,
        })
    }

    /// Allocates a segment on every rank (collective: every rank must make the same
    /// allocation and free calls in the same order). The same id, key and length are valid at
    /// every rank; returns after every rank has published its segment.
    ///
    /// The ranks compare what they got: if any rank had no room, or got another segment id
    /// (a rank-local [`Rma::alloc`] on some ranks only shifts the ids), or was asked for
    /// another length or permissions, no rank keeps a segment and every rank returns an error:
    /// [`Error::SegmentSpace`] where there was no room, [`Error::SymmetricMismatch`] elsewhere.
    pub fn alloc_symmetric(&self, len: usize, perms: Perms) -> Result<SymmetricSegment> {
        if self.rt.is_finalized() {
            return Err(crate::am::Error::Finalized.into());
        }
        let seq = self.symmetric_seq.get();
        self.symmetric_seq.set(seq + 1);
        let key = mix(self.rt.job_key() ^ seq.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let published = self.publish(len, perms, key);
        let mine = SymmetricOffer {
            id: published.as_ref().ok().map(|&(id, _)| id),
            len: len as u64,
            perms: perms.bits(),
        };
        // Every rank offers after publishing, so once every offer is in, every rank's segment
        // is live: the exchange is the barrier too.
        let others = self.exchange_offers(seq, mine)?;
        let differs = others.into_iter().find(|&(_, theirs)| theirs != mine);
        match (published, differs) {
            (Err(e), _) => Err(e),
            (Ok((id, _)), Some((rank, theirs))) => {
                self.retire(id, key);
                Err(Error::SymmetricMismatch {
                    me: self.rt.rank(),
                    rank,
                    mine: mine.to_string(),
                    theirs: theirs.to_string(),
                })
            }
            (Ok((id, _)), None) => Ok(SymmetricSegment {
                id,
                key,
                len: len as u64,
            }),
        }
    }

    /// Sends `mine` to every other rank and waits for theirs: (rank, offer), by rank.
    pub(super) fn exchange_offers(
        &self,
        seq: u64,
        mine: SymmetricOffer,
    ) -> Result<Vec<(usize, SymmetricOffer)>> {
        let (me, size) = (self.rt.rank(), self.rt.size());
        for peer in (0..size).filter(|&p| p != me) {
            self.rt
                .request_short(peer, self.handlers.offer, &mine.args(seq))?;
        }
        let shared = &self.shared;
        self.rt.wait_until(|| shared.offers_for(seq) >= size - 1);
        Ok(shared.take_offers(seq))
    }

    /// Frees segment `id` if it is live with `key` (a freed id is reused, so the id alone
    /// could name a later segment).
    pub(super) fn retire(&self, id: u16, key: u64) -> bool {
        let mut owned = self.owned.borrow_mut();
        let Some(i) = owned.iter().position(|o| o.id == id && o.key == key) else {
            return false;
        };
        let o = owned.swap_remove(i);
        self.own_table().retire(id);
        if o.alias_of.is_some() {
            self.alloc.borrow_mut().free_id(id);
            return true;
        }
        // Agents' windows on this segment go with it: they alias its space.
        let mut alloc = self.alloc.borrow_mut();
        owned.retain(|a| {
            let keep = a.alias_of != Some((id, key));
            if !keep {
                self.own_table().retire(a.id);
                alloc.free_id(a.id);
            }
            keep
        });
        alloc.free(id)
    }

    /// Seals a live segment (or window) of this rank: later remote accesses are refused
    /// ([`Refusal::NoSuchSegment`]) while its memory stays this rank's, readable with
    /// [`Rma::read_local`] until [`Rma::free`]. When it returns, no handler of this rank is
    /// still applying an access that was admitted before (handlers run with the engine, which
    /// this takes); accesses on the direct path are the initiators' own and are not waited
    /// for (see [`Rma::through_handlers`]). `false` if it was not live.
    pub fn seal(&self, seg: SegmentRef) -> bool {
        let _e = self.rt.enter_local();
        let live = seg.rank == self.rt.rank()
            && self
                .owned
                .borrow()
                .iter()
                .any(|o| o.id == seg.id && o.key == seg.key);
        if live {
            self.own_table().retire(seg.id);
        }
        live
    }

    /// Changes the permissions of a live segment (or window) of this rank; accesses checked
    /// after it returns see the new ones. `false` if it was not live.
    pub fn set_perms(&self, seg: SegmentRef, perms: Perms) -> bool {
        let owned = self.owned.borrow();
        let Some(o) = owned
            .iter()
            .find(|o| seg.rank == self.rt.rank() && o.id == seg.id && o.key == seg.key)
        else {
            return false;
        };
        self.own_table()
            .publish(o.id, o.key, o.area_offset, o.len, perms);
        true
    }

    /// Frees a segment of this rank; later accesses to it are refused. `false` if it was not
    /// live (already freed).
    pub fn free(&self, seg: LocalSegment) -> bool {
        self.retire(seg.handle.id, seg.handle.key)
    }

    /// Frees a symmetric segment (collective: waits for every rank first, so no rank still
    /// uses it; after [`Runtime::finalize`] no rank can, and it frees at once).
    pub fn free_symmetric(&self, seg: SymmetricSegment) -> bool {
        if !self.rt.is_finalized() {
            self.rt.barrier();
        }
        self.retire(seg.id, seg.key)
    }

    /// Where `len` bytes at `offset` of `seg`, a live segment of this rank, lie in the segment
    /// area; refused like a remote access otherwise.
    pub(super) fn owned_range(&self, seg: SegmentRef, offset: usize, len: usize) -> Result<usize> {
        let me = self.rt.rank();
        let refused = |reason| Error::Refused { rank: me, reason };
        if seg.rank != me {
            return Err(refused(Refusal::NoSuchSegment));
        }
        let owned = self.owned.borrow();
        let o = owned
            .iter()
            .find(|o| o.id == seg.id)
            .ok_or(refused(Refusal::NoSuchSegment))?;
        if o.key != seg.key {
            return Err(refused(Refusal::WrongKey));
        }
        if offset.checked_add(len).is_none_or(|e| e > o.len) {
            return Err(refused(Refusal::OutOfBounds {
                offset: offset as u64,
                len: len as u64,
                segment_len: o.len as u64,
            }));
        }
        Ok(o.area_offset + offset)
    }

    /// Copies bytes out of this rank's own segment `seg` (a [`SegmentRef`] with our rank; any
    /// other is refused).
    pub fn read_local(&self, seg: SegmentRef, offset: usize, buf: &mut [u8]) -> Result<()> {
        let _e = self.rt.enter_local();
        let at = self.owned_range(seg, offset, buf.len())?;
        fence(Ordering::Acquire);
        // SAFETY: range checked inside our own segment area, mapped for the runtime's life.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.shared.local().segment.add(at),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        Ok(())
    }

    /// Copies bytes into this rank's own segment `seg` (as for [`Rma::read_local`]).
    pub fn write_local(&self, seg: SegmentRef, offset: usize, data: &[u8]) -> Result<()> {
        let _e = self.rt.enter_local();
        let at = self.owned_range(seg, offset, data.len())?;
        // SAFETY: as in `read_local`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.shared.local().segment.add(at),
                data.len(),
            )
        };
        fence(Ordering::Release);
        Ok(())
    }
}
