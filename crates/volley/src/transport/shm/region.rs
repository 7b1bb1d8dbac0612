//! One rank's shared-memory region: layout, creation and mapping.

use super::ring::{RingCtl, RingRef, Slot, MAX_RING_SLOTS, MIN_RING_SLOTS, SLOT_BYTES};
use crate::bootstrap::BootstrapError;
use crate::sync::{AtomicU64, Ordering};
use crate::transport::Channel;
use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};
use serde::{Deserialize, Serialize};
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::ptr::NonNull;

/// The largest medium payload: 64 KiB.
pub const MEDIUM_MAX: usize = 64 * 1024;
const MAGIC: u64 = u64::from_le_bytes(*b"VOLLEYR1");
const HEADER_BYTES: usize = 4096;
/// Where, in the header page, the bytes reserved for upper layers start (64-byte aligned).
const UPPER_OFFSET: usize = 1024;
/// Bytes of the header page reserved for upper layers (the one-sided layer's segment table).
pub const UPPER_BYTES: usize = HEADER_BYTES - UPPER_OFFSET;
/// A page, and the period of the copy slowdown that [`pool_offset_for`] avoids.
pub(crate) const PAGE: usize = 4096;
/// Bytes of a medium buffer: room for [`MEDIUM_MAX`] bytes at any offset below a page (a
/// payload is placed at its source's offset within a page).
pub const POOL_BUF_BYTES: usize = MEDIUM_MAX + PAGE;

/// Where, in a medium buffer, a payload read from `src` starts: at `src`'s own offset within
/// its page, so that the copy's destination lies at the same place modulo 4 KiB as its source.
/// Copies whose destination lies 1 to 31 bytes above the source modulo 4 KiB run about 20
/// times slower on this machine's CPUs (`rep movsb` takes them for overlapping, see
/// docs/journal.md); a page-aligned buffer met that whenever the caller's payload sat just
/// below a page boundary. The receiver's copies out of the buffer (a handler echoing the
/// payload into its own buffer) then see the caller's alignment, as they would the caller's
/// own buffer.
#[inline(always)]
pub fn pool_offset_for(src: *const u8) -> usize {
    src as usize & (PAGE - 1)
}

fn align_up(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

/// Sizes that every rank of a job must agree on; they decide where everything in a region is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    /// Ranks on this host (one incoming ring pair each).
    pub ranks: usize,
    /// Slots per ring (a power of two).
    pub ring_slots: usize,
    /// Medium buffers per channel.
    pub pool_bufs: usize,
    /// Bytes in the segment.
    pub segment_len: usize,
}

impl Layout {
    /// Checks the sizes, returning a reason for the first bad one.
    pub fn validate(&self) -> Result<(), (&'static str, String, &'static str)> {
        if !self.ring_slots.is_power_of_two()
            || !(MIN_RING_SLOTS..=MAX_RING_SLOTS).contains(&self.ring_slots)
        {
            return Err((
                "VOLLEY_RING_SLOTS",
                self.ring_slots.to_string(),
                "must be a power of two from 8 to 16384",
            ));
        }
        if !(1..=64).contains(&self.pool_bufs) {
            return Err((
                "VOLLEY_MEDIUM_BUFFERS",
                self.pool_bufs.to_string(),
                "must be from 1 to 64",
            ));
        }
        if self.segment_len > (1 << 40) {
            return Err((
                "VOLLEY_SEGMENT_BYTES",
                self.segment_len.to_string(),
                "must be at most 1 TiB",
            ));
        }
        Ok(())
    }

    fn ring_bytes(&self) -> usize {
        SLOT_BYTES + self.ring_slots * SLOT_BYTES
    }

    fn ring_offset(&self, src: usize, ch: Channel) -> usize {
        HEADER_BYTES + (src * 2 + ch as usize) * self.ring_bytes()
    }

    fn pool_flags_offset(&self) -> usize {
        HEADER_BYTES + self.ranks * 2 * self.ring_bytes()
    }

    fn pool_offset(&self) -> usize {
        align_up(
            self.pool_flags_offset() + 2 * self.pool_bufs * SLOT_BYTES,
            PAGE,
        )
    }

    fn segment_offset(&self) -> usize {
        align_up(
            self.pool_offset() + 2 * self.pool_bufs * POOL_BUF_BYTES,
            PAGE,
        )
    }

    /// Total bytes of a region with this layout (address space; pages are committed on touch).
    pub fn total_len(&self) -> usize {
        align_up(self.segment_offset() + self.segment_len, PAGE)
    }

    /// Bytes of rings and buffer-state lines: the part a rank touches for short traffic.
    pub fn ring_footprint(&self) -> usize {
        self.pool_offset() - HEADER_BYTES
    }
}

/// Where, in the header page, the owner's doorbell lives (its own cache line).
const DOORBELL_OFFSET: usize = 64;
/// Where, in the header page, the owner's presence line lives (its own cache line).
const PRESENCE_OFFSET: usize = 128;

/// The fixed header at the start of a region, checked when a peer maps it.
#[repr(C)]
struct RegionHeader {
    magic: AtomicU64,
    job_key: AtomicU64,
    rank: AtomicU64,
    total_len: AtomicU64,
}

/// Ownership flags of one rank's medium buffers; the sender sets, the receiver clears.
#[derive(Debug, Clone, Copy)]
pub struct PoolFlags<'a> {
    flags: &'a [Slot],
}

impl PoolFlags<'_> {
    /// Claims a free buffer of `ch`, scanning from `start`; returns its index.
    #[inline]
    pub fn claim(&self, ch: Channel, start: usize, bufs: usize) -> Option<usize> {
        for k in 0..bufs {
            let idx = (start + k) % bufs;
            let flag = &self.flags[ch as usize * bufs + idx].header;
            // Acquire: pairs with the release in `release`, so the receiver's reads of the
            // payload happen-before we overwrite it. Only this rank sets flags: no CAS needed.
            if flag.load(Ordering::Acquire) == 0 {
                flag.store(1, Ordering::Relaxed);
                return Some(idx);
            }
        }
        None
    }

    /// Whether a buffer of `ch` is free (so that [`PoolFlags::claim`] by this rank, the only
    /// one that claims, would succeed).
    pub fn any_free(&self, ch: Channel, bufs: usize) -> bool {
        // Acquire: as in `claim`.
        (0..bufs).any(|idx| {
            self.flags[ch as usize * bufs + idx]
                .header
                .load(Ordering::Acquire)
                == 0
        })
    }

    /// Marks buffer `idx` of `ch` free again (called by the receiver after its handler).
    #[inline]
    pub fn release(&self, ch: Channel, idx: usize, bufs: usize) {
        self.flags[ch as usize * bufs + idx]
            .header
            .store(0, Ordering::Release);
    }
}

/// A mapped region: this rank's own or a peer's.
#[derive(Debug)]
pub struct Region {
    base: NonNull<u8>,
    len: usize,
    layout: Layout,
    fd: OwnedFd,
}

// SAFETY: the region is plain shared memory; all cross-thread/process access goes through the
// ring protocol's atomics, and the mapping itself is immutable after creation.
unsafe impl Send for Region {}

impl Region {
    /// Creates and maps a fresh region for `rank`, stamped with the job key.
    pub fn create(layout: Layout, rank: usize, job_key: u64) -> Result<Self, BootstrapError> {
        let name = std::ffi::CString::new(format!("volley-rank-{rank}")).expect("no NUL");
        let fd =
            nix::sys::memfd::memfd_create(&name, nix::sys::memfd::MemFdCreateFlag::MFD_CLOEXEC)
                .map_err(|e| BootstrapError::os("memfd_create", e))?;
        let len = layout.total_len();
        nix::unistd::ftruncate(fd.as_fd(), len as i64)
            .map_err(|e| BootstrapError::os("sizing shared memory (ftruncate)", e))?;
        let region = Self::map_fd(fd, len, layout)?;
        let h = region.header();
        h.job_key.store(job_key, Ordering::Relaxed);
        h.rank.store(rank as u64, Ordering::Relaxed);
        h.total_len.store(len as u64, Ordering::Relaxed);
        h.magic.store(MAGIC, Ordering::Release);
        Ok(region)
    }

    /// Maps a peer's region received at the rendezvous and checks its header.
    pub fn open(
        fd: OwnedFd,
        layout: Layout,
        rank: usize,
        job_key: u64,
    ) -> Result<Self, BootstrapError> {
        let len = layout.total_len();
        let actual = nix::sys::stat::fstat(fd.as_raw_fd())
            .map_err(|e| BootstrapError::os("fstat of a peer region", e))?
            .st_size as usize;
        if actual != len {
            return Err(BootstrapError::Rendezvous {
                path: format!("region of rank {rank}"),
                why: format!("is {actual} bytes, expected {len}: ranks disagree on settings"),
            });
        }
        let region = Self::map_fd(fd, len, layout)?;
        let h = region.header();
        if h.magic.load(Ordering::Acquire) != MAGIC
            || h.job_key.load(Ordering::Relaxed) != job_key
            || h.rank.load(Ordering::Relaxed) != rank as u64
        {
            return Err(BootstrapError::Rendezvous {
                path: format!("region of rank {rank}"),
                why: "header does not belong to this job and rank".into(),
            });
        }
        Ok(region)
    }

    fn map_fd(fd: OwnedFd, len: usize, layout: Layout) -> Result<Self, BootstrapError> {
        let size = NonZeroUsize::new(len).expect("regions are never empty");
        // SAFETY: mapping a memfd we hold with a length equal to its size; no existing memory
        // is replaced because we let the kernel choose the address.
        let ptr = unsafe {
            mmap(
                None,
                size,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                fd.as_fd(),
                0,
            )
        }
        .map_err(|e| BootstrapError::os("mapping shared memory (mmap)", e))?;
        Ok(Self {
            base: ptr.cast(),
            len,
            layout,
            fd,
        })
    }

    fn header(&self) -> &RegionHeader {
        // SAFETY: the region starts with HEADER_BYTES >= size_of::<RegionHeader>() bytes,
        // page-aligned, zero-initialized by the kernel (a valid bit pattern for atomics).
        unsafe { &*self.base.as_ptr().cast::<RegionHeader>() }
    }

    /// The owner's doorbell (for `VOLLEY_WAIT=block`).
    pub fn doorbell(&self) -> &super::doorbell::Doorbell {
        const _: () = assert!(
            DOORBELL_OFFSET >= std::mem::size_of::<RegionHeader>()
                && DOORBELL_OFFSET + 64 <= UPPER_OFFSET
        );
        // SAFETY: the doorbell's 64 bytes lie in the header page between the fixed header and
        // the upper layers' bytes, 64-aligned (the mapping is page-aligned), zero-initialized by
        // the kernel, which is a valid value for its atomics; the mapping outlives `&self`.
        unsafe {
            &*self
                .base
                .as_ptr()
                .add(DOORBELL_OFFSET)
                .cast::<super::doorbell::Doorbell>()
        }
    }

    /// Whether the owner is on a CPU (see [`super::presence`]).
    pub fn presence(&self) -> &super::presence::Presence {
        const _: () = assert!(
            PRESENCE_OFFSET >= DOORBELL_OFFSET + 64 && PRESENCE_OFFSET + 64 <= UPPER_OFFSET
        );
        // SAFETY: the line lies in the header page after the doorbell's and before the upper
        // layers' bytes, 64-aligned, zero-initialized by the kernel (a valid value for its
        // atomic); the mapping outlives `&self`.
        unsafe {
            &*self
                .base
                .as_ptr()
                .add(PRESENCE_OFFSET)
                .cast::<super::presence::Presence>()
        }
    }

    /// The descriptor to hand to peers.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// The layout this region was created with.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The incoming ring from local rank `src` on channel `ch`.
    #[inline(always)]
    pub fn ring(&self, src: usize, ch: Channel) -> RingRef<'_> {
        assert!(src < self.layout.ranks);
        let off = self.layout.ring_offset(src, ch);
        // SAFETY: `off` and the following ring_bytes() lie inside the mapping (the layout
        // computed the mapping's length); RingCtl and Slot are 64-byte aligned plain atomics
        // and cells, valid for any bit pattern, and off is a multiple of 64.
        unsafe {
            let ctl = &*self.base.as_ptr().add(off).cast::<RingCtl>();
            let slots = std::slice::from_raw_parts(
                self.base.as_ptr().add(off + SLOT_BYTES).cast::<Slot>(),
                self.layout.ring_slots,
            );
            RingRef::new(ctl, slots)
        }
    }

    /// The state flags of this region's medium buffers.
    pub fn pool_flags(&self) -> PoolFlags<'_> {
        // SAFETY: the flags area (2 * pool_bufs lines) lies inside the mapping, 64-aligned.
        let flags = unsafe {
            std::slice::from_raw_parts(
                self.base
                    .as_ptr()
                    .add(self.layout.pool_flags_offset())
                    .cast::<Slot>(),
                2 * self.layout.pool_bufs,
            )
        };
        PoolFlags { flags }
    }

    /// Address of byte `at` of medium buffer `idx` of channel `ch`, where `at` is below a
    /// page; [`MEDIUM_MAX`] bytes follow it in the buffer.
    #[inline(always)]
    pub fn pool_buf(&self, ch: Channel, idx: usize, at: usize) -> *mut u8 {
        assert!(idx < self.layout.pool_bufs && at < PAGE);
        let off = self.layout.pool_offset()
            + (ch as usize * self.layout.pool_bufs + idx) * POOL_BUF_BYTES
            + at;
        // SAFETY: inside the mapping by construction of the layout.
        unsafe { self.base.as_ptr().add(off) }
    }

    /// The header-page bytes reserved for upper layers ([`UPPER_BYTES`] long, 64-byte aligned,
    /// zeroed at creation), mapped by every local rank like the rest of the region.
    #[inline(always)]
    pub fn upper_ptr(&self) -> *mut u8 {
        // SAFETY: UPPER_OFFSET + UPPER_BYTES == HEADER_BYTES, inside the mapping.
        unsafe { self.base.as_ptr().add(UPPER_OFFSET) }
    }

    /// Address of the segment's first byte.
    #[inline(always)]
    pub fn segment_ptr(&self) -> *mut u8 {
        // SAFETY: inside the mapping by construction of the layout.
        unsafe { self.base.as_ptr().add(self.layout.segment_offset()) }
    }

    /// Length of the segment.
    pub fn segment_len(&self) -> usize {
        self.layout.segment_len
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: we own this mapping; every reference into it borrows `self`, so none outlive it.
        unsafe {
            let _ = munmap(self.base.cast(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn footprints_for_documented_rank_counts() {
        for (ranks, expect_kib) in [(2, 16), (16, 130), (64, 520)] {
            let l = Layout {
                ranks,
                ring_slots: 64,
                pool_bufs: 4,
                segment_len: 0,
            };
            let kib = l.ring_footprint() / 1024;
            assert!(kib.abs_diff(expect_kib) <= 4, "{ranks} ranks: {kib} KiB");
        }
    }

    /// A payload placed at `pool_offset_for` its source lies at the source's place modulo
    /// 4 KiB, and the largest one ends inside its buffer, before the next buffer and the
    /// segment.
    #[test]
    fn medium_buffers_place_payloads_at_their_source_offset() {
        let l = Layout {
            ranks: 1,
            ring_slots: 8,
            pool_bufs: 2,
            segment_len: 4096,
        };
        let r = Region::create(l, 0, 5).unwrap();
        let source = vec![0u8; 3 * PAGE];
        for shift in [0, 1, 16, 31, 32, 64, 2048, 4080, 4095] {
            let src = source.as_ptr().wrapping_add(shift);
            let at = pool_offset_for(src);
            assert!(at < PAGE);
            for ch in [Channel::Request, Channel::Reply] {
                for idx in 0..l.pool_bufs {
                    let dst = r.pool_buf(ch, idx, at) as usize;
                    assert_eq!(dst % PAGE, src as usize % PAGE, "shift {shift}");
                    let end = dst + MEDIUM_MAX;
                    let next = match (ch, idx + 1 < l.pool_bufs) {
                        (_, true) => r.pool_buf(ch, idx + 1, 0) as usize,
                        (Channel::Request, false) => r.pool_buf(Channel::Reply, 0, 0) as usize,
                        (Channel::Reply, false) => r.segment_ptr() as usize,
                    };
                    assert!(end <= next, "shift {shift}: {ch:?} buffer {idx} overruns");
                }
            }
        }
    }

    #[test]
    fn peer_mapping_checks_job_key() {
        let l = Layout {
            ranks: 1,
            ring_slots: 8,
            pool_bufs: 1,
            segment_len: 4096,
        };
        let r = Region::create(l, 0, 77).unwrap();
        let dup = r.fd().try_clone().unwrap();
        assert!(
            Region::open(dup, l, 0, 78).is_err(),
            "other job's key must be refused"
        );
        let dup = r.fd().try_clone().unwrap();
        let peer = Region::open(dup, l, 0, 77).unwrap();
        // A write through one mapping is visible through the other.
        // SAFETY: both point at the segment of a live mapping of at least 4096 bytes.
        unsafe {
            *r.segment_ptr() = 42;
            assert_eq!(*peer.segment_ptr(), 42);
        }
    }
}
