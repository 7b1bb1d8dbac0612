//! Reading packets from a buffer, without waiting: the receive and probe logic every
//! progress mode and the communication thread share.

use crate::error::{PrimError, Result};
use crate::ring::{padded, Header, Peek, Reader, CLOSE, DATA, PROC, PROC_DONE};

/// Consumes headers that deliver nothing (chain closes and empty data packets, `(NULL, 0)`)
/// and returns what comes next. Callers decide on this one look: a second `peek` could see
/// more published meanwhile, an empty header among it.
pub(crate) fn skip_empty(r: &mut Reader) -> Peek {
    loop {
        let p = r.peek();
        match p {
            Peek::Header(w) => {
                let h = Header::decode(w);
                if h.kind == CLOSE || (h.kind == DATA && h.value == 0) {
                    r.take_header();
                } else {
                    return p;
                }
            }
            _ => return p,
        }
    }
}

fn kind_name(kind: u64) -> &'static str {
    match kind {
        PROC | PROC_DONE => "procedure",
        _ => "data",
    }
}

/// Takes exactly `buf.len()` bytes of data if they are there: a data packet of that size
/// (returns `Some(Some(sender))`) or chained bare bytes (`Some(None)`). `None`: not yet.
pub(crate) fn try_data(r: &mut Reader, buf: &mut [u8]) -> Result<Option<Option<usize>>> {
    let cap = r.ring.cap() as usize;
    if padded(buf.len()) > cap {
        return Err(PrimError::TooLarge {
            bytes: buf.len(),
            capacity: cap,
        });
    }
    match skip_empty(r) {
        Peek::Empty => Ok(None),
        Peek::Header(w) => {
            let h = Header::decode(w);
            if h.kind != DATA {
                return Err(PrimError::WrongType {
                    found: kind_name(h.kind),
                    want: "data",
                });
            }
            if h.value as usize != buf.len() {
                return Err(PrimError::SizeMismatch {
                    have: h.value as usize,
                    want: buf.len(),
                });
            }
            // A packet is published whole, so its payload is there with its header.
            r.take_header();
            r.take_bytes(buf);
            Ok(Some(h.from))
        }
        Peek::Bare(n) => {
            let want = padded(buf.len()) as u64;
            if n >= want {
                r.take_bytes(buf);
                return Ok(Some(None));
            }
            // The peek stopped before the tail it saw: a header follows the bare bytes.
            if r.seen() > n {
                return Err(PrimError::ChainEnded {
                    have: n as usize,
                    want: buf.len(),
                });
            }
            Ok(None)
        }
    }
}

/// Takes a procedure header if one is next (`None`: nothing yet).
pub(crate) fn try_procedure(r: &mut Reader) -> Result<Option<Header>> {
    match skip_empty(r) {
        Peek::Empty => Ok(None),
        Peek::Header(w) if matches!(Header::decode(w).kind, PROC | PROC_DONE) => {
            r.take_header();
            Ok(Some(Header::decode(w)))
        }
        _ => Err(PrimError::WrongType {
            found: "data",
            want: "procedure",
        }),
    }
}

/// What `is_information` sees next, after dropping empty packets: `None` for nothing, else
/// whether it is a procedure.
pub(crate) fn next_kind(r: &mut Reader) -> Option<bool> {
    match skip_empty(r) {
        Peek::Empty => None,
        Peek::Header(w) => Some(matches!(Header::decode(w).kind, PROC | PROC_DONE)),
        Peek::Bare(_) => Some(false),
    }
}
