//! MBCF_ZBUF_PACKED: a batch of z-buffer conditional writes to consecutive locations in one
//! message. Location `i` is the reference word at `ref_offset + 8 i` and the datum of
//! `datum_size` bytes at `data_offset + i * datum_size`; each item carries a reference value
//! and a datum, and the write/no-write decision is made per location, exactly as
//! [`Rma::conditional_write`] makes it for one. The whole batch runs in one handler at the
//! target (on both paths, for the reason in the module notes of [`super`]), so it is atomic
//! with respect to every other conditional write to that rank, and a set of batches leaves the
//! same image whatever order they arrive in.

use super::{check, check_word, reply, word, Fail};
use crate::am::{ReplyHandler, RequestHandler, RuntimeBuilder};
use crate::rma::error::{Error, Result};
use crate::rma::handlers::Shared;
use crate::rma::segment::{Perms, Refusal, SegmentRef};
use crate::rma::Rma;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Registers the handler: args [id, key, ref_offset, data_offset, count, slot]; payload: the
/// `count` reference values (8 bytes each, little-endian), then the `count` data.
pub(super) fn register(
    b: &mut RuntimeBuilder,
    shared: &Arc<Shared>,
    ack: ReplyHandler,
) -> RequestHandler {
    let s = shared.clone();
    b.request_handler("volley.rma.zbuf_packed", move |m, tok| {
        let (id, key, ref_off, data_off, count, slot) =
            (m.arg(0), m.arg(1), m.arg(2), m.arg(3), m.arg(4), m.arg(5));
        let r = apply(&s, id, key, (ref_off, data_off, count), m.payload());
        reply(tok, ack, slot, r);
    })
}

fn apply(
    s: &Shared,
    id: u64,
    key: u64,
    (ref_off, data_off, count): (u64, u64, u64),
    payload: &[u8],
) -> Result<(u64, u64, u64), Fail> {
    let malformed = || Fail {
        code: Refusal::EntrySize.code(),
        off: data_off,
        len: payload.len() as u64,
        seg_len: 0,
    };
    let refs_len = count.checked_mul(8).filter(|&l| l <= payload.len() as u64);
    let Some(refs_len) = refs_len.filter(|_| count > 0) else {
        s.count_refusal();
        return Err(malformed());
    };
    let data_len = payload.len() as u64 - refs_len;
    if data_len % count != 0 {
        s.count_refusal();
        return Err(malformed());
    }
    let datum = (data_len / count) as usize;
    // Every location is checked before any is written: the first and last reference words
    // (aligned, and the range between them), and the whole data range.
    let rp = check_word(s, id, key, ref_off, Perms::WRITE, true)?;
    check(s, id, key, ref_off, refs_len, Perms::WRITE, true)?;
    let dp = check(s, id, key, data_off, data_len, Perms::WRITE, true)?;
    let (refs, data) = payload.split_at(refs_len as usize);
    let mut wrote = 0u64;
    for i in 0..count as usize {
        let v = u64::from_le_bytes(refs[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        // SAFETY: reference word i lies in the checked, 8-aligned range; handlers run one at
        // a time, so compare, write and store are one step for every conditional write.
        let r = unsafe { word(rp.add(i * 8)) };
        if r.load(Ordering::Acquire) > v {
            // SAFETY: datum i lies in the checked data range.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    data.as_ptr().add(i * datum),
                    dp.add(i * datum),
                    datum,
                )
            };
            r.store(v, Ordering::Release);
            wrote += 1;
        }
    }
    Ok((wrote, data_off, data_len))
}

impl Rma<'_> {
    /// MBCF_ZBUF_PACKED: for each location `i` (see the module notes), if the reference word
    /// at `ref_offset + 8 i` of `target` is greater (unsigned) than `refs[i]`, writes datum
    /// `i` of `data` (`data.len() / refs.len()` bytes each) at `data_offset + i * datum` and
    /// stores `refs[i]` in the word; otherwise leaves that location alone. Returns how many
    /// locations were written. One message: the references and data together are at most
    /// [`crate::Runtime::max_medium`] bytes. Every location is checked before any is written.
    pub fn conditional_write_packed(
        &self,
        target: SegmentRef,
        ref_offset: usize,
        refs: &[u64],
        data_offset: usize,
        data: &[u8],
    ) -> Result<usize> {
        let _e = self.rt.enter();
        self.check_rank(target.rank)?;
        if refs.is_empty() || data.len() % refs.len() != 0 {
            return Err(Error::InvalidConfig {
                name: "conditional_write_packed",
                value: format!("{} references, {} data bytes", refs.len(), data.len()),
                why: "expected at least one reference and the same datum size for each",
            });
        }
        let len = refs.len() * 8 + data.len();
        if len > self.rt.max_medium() {
            return Err(Error::PayloadTooLarge {
                len,
                max: self.rt.max_medium(),
            });
        }
        let mut payload = Vec::with_capacity(len);
        for r in refs {
            payload.extend_from_slice(&r.to_le_bytes());
        }
        payload.extend_from_slice(data);
        let (off, dlen) = (data_offset as u64, data.len() as u64);
        let slot = self.take_slot()?;
        self.shared.add_remaining(slot, 1, target.rank);
        let args = [
            target.id as u64,
            target.key,
            ref_offset as u64,
            off,
            refs.len() as u64,
            slot as u64,
        ];
        if let Err(e) =
            self.rt
                .request_medium(target.rank, self.handlers.mem.zbuf_packed, &args, &payload)
        {
            self.shared.add_remaining_neg(slot, 1);
            return Err(self.abandon_slot(slot, target, off, dlen, e.into()));
        }
        self.finish_slot(slot, target, off, dlen)
            .map(|v| v as usize)
    }
}
