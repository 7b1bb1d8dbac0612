//! The mailbox: collective messages (parcels) that have arrived, whole or in part.

use std::sync::{Mutex, PoisonError};

/// Collective messages that have arrived, whole or in part.
#[derive(Debug, Default)]
pub(crate) struct Mailbox {
    parcels: Mutex<Vec<Parcel>>,
    /// Buffers of parcels already read, for the next ones: large collectives then reuse
    /// memory whose pages are in, instead of faulting fresh pages in on every call.
    pool: Mutex<Vec<Vec<u8>>>,
}

#[derive(Debug)]
pub(super) struct Parcel {
    pub(super) src: usize,
    pub(super) epoch: u64,
    pub(super) step: u64,
    pub(super) what: u64,
    pub(super) total: usize,
    pub(super) got: usize,
    pub(super) data: Vec<u8>,
}

impl Mailbox {
    /// Files one fragment: header words (epoch, what, total, offset, step) and its bytes.
    pub(crate) fn deliver(&self, src: usize, h: [u64; 5], bytes: &[u8]) {
        let [epoch, what, total, off, step] = h;
        let mut parcels = self.parcels.lock().unwrap_or_else(PoisonError::into_inner);
        let i = match parcels
            .iter()
            .position(|p| p.src == src && p.epoch == epoch && p.step == step)
        {
            Some(i) => i,
            None => {
                parcels.push(Parcel {
                    src,
                    epoch,
                    step,
                    what,
                    total: total as usize,
                    got: 0,
                    data: self.buffer(total as usize),
                });
                parcels.len() - 1
            }
        };
        let p = &mut parcels[i];
        let range = (off as usize)..(off as usize).saturating_add(bytes.len());
        if let Some(dst) = p.data.get_mut(range) {
            volley::copy::copy_bytes(dst, bytes);
            p.got += bytes.len();
        } else {
            // Cannot be placed: make the parcel complete and mismatched so the receiver
            // reports it.
            p.what = u64::MAX;
            p.got = p.total;
        }
    }

    /// What collective a parcel of call `epoch` belongs to, if one has arrived (for mismatch
    /// diagnosis).
    pub(crate) fn what_of(&self, epoch: u64) -> Option<(u64, usize)> {
        let parcels = self.parcels.lock().unwrap_or_else(PoisonError::into_inner);
        parcels
            .iter()
            .find(|p| p.epoch == epoch)
            .map(|p| (p.what, p.src))
    }

    pub(super) fn ready(&self, src: usize, epoch: u64, step: u64) -> bool {
        let parcels = self.parcels.lock().unwrap_or_else(PoisonError::into_inner);
        parcels
            .iter()
            .any(|p| p.src == src && p.epoch == epoch && p.step == step && p.got >= p.total)
    }

    /// A buffer of `len` bytes, recycled when one is free.
    pub(super) fn buffer(&self, len: usize) -> Vec<u8> {
        let mut v = self
            .pool
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
            .unwrap_or_default();
        v.clear();
        v.resize(len, 0);
        v
    }

    /// Returns a parcel's buffer for reuse (a bounded number are kept).
    pub(crate) fn recycle(&self, v: Vec<u8>) {
        const KEEP: usize = 64;
        let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
        if pool.len() < KEEP && v.capacity() <= 64 << 20 {
            pool.push(v);
        }
    }

    pub(super) fn take(&self, src: usize, epoch: u64, step: u64) -> Option<Parcel> {
        let mut parcels = self.parcels.lock().unwrap_or_else(PoisonError::into_inner);
        let i = parcels
            .iter()
            .position(|p| p.src == src && p.epoch == epoch && p.step == step)?;
        Some(parcels.swap_remove(i))
    }
}
