//! Single-copy large collectives between the processes of one node (cross-memory attach,
//! `process_vm_readv`/`process_vm_writev`, what Open MPI's `smsc/cma` does): the ranks
//! exchange their buffers' addresses in a small all-to-all, then each moves its bytes
//! straight between its own buffers and the peers'. An all-to-all reads each block once from
//! its sender's buffer; an all-reduce reads its chunk of every peer's data in L2-sized
//! pieces, combines them in rank order and writes each combined piece into every rank's
//! data. Where the kernel refuses (a ptrace policy, a seccomp filter) or
//! `VOLLEY_COLL_CMA=off`, every rank alike uses the mapped scratch instead.

use super::what::What;
use super::{copy_pod, fold, fold_under, reduce_chunk};
use crate::error::{GlobalError, Result};
use crate::global::Global;
use crate::reduce::Op;
use bytemuck::Pod;
use nix::sys::uio::{process_vm_readv, process_vm_writev, RemoteIoVec};
use nix::unistd::Pid;
use std::cell::RefCell;
use std::io::{IoSlice, IoSliceMut};
use volley::copy;

/// Bytes of each rank's chunk combined at a time: the pieces read from the peers stay in L2
/// (measured for 1 MiB on 2 ranks: 256 KiB 3-5 % faster than 128 KiB, 64 KiB 12 % slower).
const PIECE_BYTES: usize = 256 << 10;

/// Copies at least this long between a slow pair of addresses go through the bounce buffer:
/// the kernel copies with `rep movsb` from a few hundred bytes up.
const BOUNCE_MIN: usize = 4096;

/// What each rank tells every other at the start of a call: where the bytes for (or from)
/// it are, how many, and which collective this is.
type Announce = [u64; 3];

/// The other processes of the job (all on this node), by rank.
#[derive(Debug)]
pub(crate) struct CmaPeers {
    pids: Vec<Pid>,
    /// A buffer for copies whose two ends sit at a distance the kernel's copy crawls over
    /// ([`volley::copy::is_slow_pair`]): the kernel copies between the remote range and this
    /// buffer placed at the remote range's page offset, and a split copy does the rest.
    bounce: RefCell<Vec<u8>>,
}

impl CmaPeers {
    fn new(pids: Vec<Pid>) -> Self {
        Self {
            pids,
            bounce: RefCell::new(Vec::new()),
        }
    }

    /// Runs `f` on a buffer of `len` bytes whose address is `addr` modulo 4096.
    fn with_bounce<R>(&self, addr: u64, len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
        let mut b = self.bounce.borrow_mut();
        if b.len() < len + 4096 {
            b.resize(len + 4096, 0);
        }
        let skew = (addr as usize).wrapping_sub(b.as_ptr() as usize) & 4095;
        f(&mut b[skew..skew + len])
    }

    /// Copies `into.len()` bytes at `addr` of rank `r`'s memory into `into`.
    fn read(&self, r: usize, addr: u64, into: &mut [u8]) -> Result<()> {
        if into.len() >= BOUNCE_MIN && copy::is_slow_pair(addr as *const u8, into.as_ptr()) {
            return self.with_bounce(addr, into.len(), |b| {
                self.read_direct(r, addr, b)?;
                copy::copy_bytes(into, b);
                Ok(())
            });
        }
        self.read_direct(r, addr, into)
    }

    fn read_direct(&self, r: usize, addr: u64, into: &mut [u8]) -> Result<()> {
        let mut done = 0;
        while done < into.len() {
            let remote = [RemoteIoVec {
                base: addr as usize + done,
                len: into.len() - done,
            }];
            let n = process_vm_readv(
                self.pids[r],
                &mut [IoSliceMut::new(&mut into[done..])],
                &remote,
            )
            .map_err(|e| cross(r, e))?;
            if n == 0 {
                return Err(cross(r, nix::errno::Errno::EFAULT));
            }
            done += n;
        }
        Ok(())
    }

    /// Copies `from` to `addr` of rank `r`'s memory.
    fn write(&self, r: usize, addr: u64, from: &[u8]) -> Result<()> {
        if from.len() >= BOUNCE_MIN && copy::is_slow_pair(from.as_ptr(), addr as *const u8) {
            return self.with_bounce(addr, from.len(), |b| {
                copy::copy_bytes(b, from);
                self.write_direct(r, addr, b)
            });
        }
        self.write_direct(r, addr, from)
    }

    fn write_direct(&self, r: usize, addr: u64, from: &[u8]) -> Result<()> {
        let mut done = 0;
        while done < from.len() {
            let remote = [RemoteIoVec {
                base: addr as usize + done,
                len: from.len() - done,
            }];
            let n = process_vm_writev(self.pids[r], &[IoSlice::new(&from[done..])], &remote)
                .map_err(|e| cross(r, e))?;
            if n == 0 {
                return Err(cross(r, nix::errno::Errno::EFAULT));
            }
            done += n;
        }
        Ok(())
    }
}

fn cross(rank: usize, e: nix::errno::Errno) -> GlobalError {
    GlobalError::CrossMemory {
        rank,
        source: std::io::Error::from(e),
    }
}

impl Global<'_> {
    /// Whether large all-reduces and all-to-alls on this node copy straight between the
    /// ranks' buffers (collective on first call: every rank must call it at the same place;
    /// later calls only read the decision). `false` under `proc` and `np`, across nodes,
    /// with `VOLLEY_COLL_CMA=off`, or where the kernel refuses.
    pub fn single_copy_collectives(&self) -> Result<bool> {
        Ok(self.cma_peers(usize::MAX)?.is_some())
    }

    /// The peers for a collective of `bytes` (deciding once, collectively, whether the kernel
    /// lets this job copy between its processes); `None` where the single copy does not apply.
    fn cma_peers(&self, bytes: usize) -> Result<Option<&CmaPeers>> {
        if !self.mapped_applies(bytes) {
            return Ok(None);
        }
        if self.cma.get().is_none() {
            let decided = self.probe_cma()?;
            let _ = self.cma.set(decided);
        }
        Ok(self.cma.get().and_then(Option::as_ref))
    }

    /// Every rank reads and rewrites a word of every other's, then all agree on whether every
    /// rank could (`VOLLEY_COLL_CMA=off` on a rank counts as could not).
    fn probe_cma(&self) -> Result<Option<CmaPeers>> {
        const PROBE: u64 = 0x636d_615f_7072_6f62;
        let (me, p) = (self.me, self.procs);
        let wanted = std::env::var("VOLLEY_COLL_CMA").map_or(true, |v| v != "off");
        // Read by the peers through the kernel until the all-reduce below: keep it in memory.
        let word = std::hint::black_box(PROBE ^ me as u64);
        let mine = [
            u64::from(std::process::id()),
            std::ptr::addr_of!(word) as u64,
        ];
        let mut all = vec![[0u64; 2]; p];
        self.all_gather(&[mine], &mut all)?;
        let peers = CmaPeers::new(all.iter().map(|a| Pid::from_raw(a[0] as i32)).collect());
        let works = |r: usize| {
            let mut got = [0u8; 8];
            let want = PROBE ^ r as u64;
            peers.read(r, all[r][1], &mut got).is_ok()
                && u64::from_ne_bytes(got) == want
                && peers.write(r, all[r][1], &want.to_ne_bytes()).is_ok()
        };
        let ok = wanted && (0..p).filter(|&r| r != me).all(works);
        let agreed = self.all_reduce_one(u64::from(ok), Op::Min)? == 1;
        std::hint::black_box(&word);
        Ok(agreed.then_some(peers))
    }

    /// Tells every rank `addr(j)` for rank j, with `bytes` and `what`, and returns what each
    /// rank said to this one, after checking that every rank called the same collective with
    /// the same length.
    fn announce(
        &self,
        epoch: u64,
        what: What,
        bytes: usize,
        addr: impl Fn(usize) -> u64,
    ) -> Result<Vec<Announce>> {
        let p = self.procs;
        let out: Vec<Announce> = (0..p)
            .map(|j| [addr(j), bytes as u64, what.code()])
            .collect();
        let mut heard = vec![[0u64; 3]; p];
        self.all_to_all(&out, &mut heard)?;
        for (rank, h) in heard.iter().enumerate() {
            if h[1] != bytes as u64 || h[2] != what.code() {
                return Err(GlobalError::CollectiveMismatch {
                    epoch,
                    me: self.me,
                    rank,
                    mine: format!("{} of {bytes} bytes", What::describe(what.code())),
                    theirs: format!("{} of {} bytes", What::describe(h[2]), h[1]),
                });
            }
        }
        Ok(heard)
    }

    /// The all-to-all of `send` into `recv` with one copy per block; `Ok(false)`, having
    /// done nothing, where it does not apply.
    pub(super) fn cma_all_to_all<T: Pod>(
        &self,
        epoch: u64,
        what: What,
        send: &[T],
        recv: &mut [T],
    ) -> Result<bool> {
        let Some(peers) = self.cma_peers(std::mem::size_of_val(send))? else {
            return Ok(false);
        };
        let (me, p) = (self.me, self.procs);
        let n = send.len() / p;
        let block = n * std::mem::size_of::<T>();
        let base = send.as_ptr() as u64;
        let heard = self.announce(epoch, what, block, |j| base + (j * block) as u64)?;
        copy_pod(&mut recv[me * n..(me + 1) * n], &send[me * n..(me + 1) * n]);
        for k in 1..p {
            let src = (me + k) % p;
            let into = bytemuck::cast_slice_mut(&mut recv[src * n..(src + 1) * n]);
            peers.read(src, heard[src][0], into)?;
        }
        // No rank returns (and changes its send buffer) before every rank has read from it.
        self.barrier()?;
        Ok(true)
    }

    /// The all-reduce of `data` with one read of each rank's chunk from every peer and one
    /// write of the result into every peer, combined in rank order as the other paths do;
    /// `Ok(false)`, having done nothing, where it does not apply. The chunk is combined in
    /// place in `data`: operands of lower ranks fold into a scratch piece first, then into
    /// this rank's own values, and higher ranks' fold into those, so no piece is copied
    /// into or out of an accumulator.
    pub(super) fn cma_all_reduce<T: Pod>(
        &self,
        epoch: u64,
        what: What,
        data: &mut [T],
        f: &impl Fn(T, T) -> T,
    ) -> Result<bool> {
        let Some(peers) = self.cma_peers(std::mem::size_of_val(data))? else {
            return Ok(false);
        };
        let (me, p, size) = (self.me, self.procs, std::mem::size_of::<T>());
        let base = data.as_ptr() as u64;
        let heard = self.announce(epoch, what, std::mem::size_of_val(data), |_| base)?;
        let mine = reduce_chunk(data.len(), p, me);
        let piece = (PIECE_BYTES / size.max(1)).clamp(1, mine.len().max(1));
        let mut theirs = vec![T::zeroed(); piece];
        let mut lower = vec![T::zeroed(); if me > 1 { piece } else { 0 }];
        let mut start = mine.start;
        // Only this rank reads or writes chunk `mine` of any rank's data until the barrier.
        while start < mine.end {
            let end = (start + piece).min(mine.end);
            let at = (start * size) as u64;
            let d = &mut data[start..end];
            let theirs = &mut theirs[..end - start];
            let read = |src: usize, into: &mut [T]| {
                peers.read(src, heard[src][0] + at, bytemuck::cast_slice_mut(into))
            };
            if me > 0 {
                // Ranks below this one, in order, then this rank's own values.
                let acc: &mut [T] = if me == 1 {
                    read(0, theirs)?;
                    theirs
                } else {
                    let acc = &mut lower[..end - start];
                    read(0, acc)?;
                    for src in 1..me {
                        read(src, theirs)?;
                        fold(acc, theirs, f);
                    }
                    acc
                };
                fold_under(acc, d, f);
            }
            for src in me + 1..p {
                read(src, theirs)?;
                fold(d, theirs, f);
            }
            for (dst, h) in heard.iter().enumerate().filter(|&(r, _)| r != me) {
                peers.write(dst, h[0] + at, bytemuck::cast_slice(d))?;
            }
            start = end;
        }
        // Every rank's data holds every chunk's result.
        self.barrier()?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads and writes through the kernel between buffers of this process at every kind of
    /// distance, the slow ones through the bounce buffer: the bytes arrive exactly.
    #[test]
    fn reads_and_writes_at_any_distance_arrive_exactly() {
        let peers = CmaPeers::new(vec![Pid::this()]);
        let src: Vec<u8> = (0..70_000u32).map(|i| (i * 13 + i / 4093) as u8).collect();
        let page = |p: *const u8| p as usize & 4095;
        for len in [100, 4095, 4096, 65_536] {
            for skew in [0usize, 1, 16, 31, 32, 200] {
                let mut store = vec![0u8; len + 8192];
                // `into` sits `skew` bytes past `src` modulo 4096.
                let at = (page(src.as_ptr()) + skew).wrapping_sub(page(store.as_ptr())) & 4095;
                let into = &mut store[at..at + len];
                assert_eq!(
                    copy::is_slow_pair(src.as_ptr(), into.as_ptr()),
                    (1..32).contains(&skew)
                );
                peers.read(0, src.as_ptr() as u64, into).unwrap();
                assert_eq!(into, &src[..len], "read of {len} at skew {skew}");
                let mut back = vec![0u8; len + 8192];
                let at = (page(into.as_ptr()) + skew).wrapping_sub(page(back.as_ptr())) & 4095;
                let dst = back[at..].as_mut_ptr() as u64;
                peers.write(0, dst, into).unwrap();
                assert_eq!(
                    &back[at..at + len],
                    &src[..len],
                    "write of {len} at skew {skew}"
                );
            }
        }
    }
}
