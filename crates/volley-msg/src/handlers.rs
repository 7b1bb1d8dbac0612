//! The layer's Active Message protocol, registered in the runtime builder.
//!
//! | message | kind | arguments | at the target | reply |
//! |---|---|---|---|---|
//! | eager | medium request | tag; the payload | match or queue | credit, when enough has been freed |
//! | eager in words | short request | tag and length; the payload, 8 bytes a word | as eager | as eager |
//! | rts | short request | tag, length, send id; address, process (0: none), key's address, key | match (start pulling) or queue | credit, as above |
//! | pull | short request | send id, offset, length, receive id | read the send's bytes | chunk |
//! | chunk | medium reply | receive id, offset; the bytes | into the receive's buffer | — |
//! | pulled | short request | send id, length | the send has that many more bytes received | — |
//! | credit | short request or reply | bytes | the sender's share grows back | — |
//!
//! The receiver pulls a rendezvous message (rather than the sender pushing it after a
//! clear-to-send): the sender's part is a handler that replies with the bytes straight from
//! the send's buffer, so it needs no action of the sender's program beyond polling, and the
//! receiver, which knows where the bytes go, keeps several chunks in flight.
//!
//! Between processes of one node, the sender also names its process and the bytes' address
//! in the announcement, and the receiver reads them straight into the receive's buffer with
//! `process_vm_readv` (one copy, no chunk messages), telling the sender with `pulled` after
//! each piece; where the kernel refuses, it pulls. Before its first read from a process it
//! reads the key word the announcement names there and compares it with the key it carries:
//! a process id that names another process in the receiver's namespace (ranks of one node in
//! separate containers) is never read from.

use crate::config::WORDS_EAGER_BYTES;
use crate::state::{Direct, Shared};
use volley::debug::allow_alloc;
use volley::{ReplyHandler, RequestHandler, RuntimeBuilder};

/// The handlers' indices.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Handlers {
    pub(crate) eager: RequestHandler,
    pub(crate) eager_words: RequestHandler,
    pub(crate) rts: RequestHandler,
    pub(crate) pull: RequestHandler,
    pub(crate) pulled: RequestHandler,
    pub(crate) credit: RequestHandler,
}

/// Registers the protocol's handlers on `shared`.
///
/// The handlers allocate on purpose (an unexpected message is copied into the bounded queue;
/// the matching tables grow), so they run inside `volley::debug::allow_alloc`: a program that
/// checks its own handlers for allocation (`volley::debug::HandlerAllocCheck`) can use this
/// layer.
pub(crate) fn register(b: &mut RuntimeBuilder, shared: &Shared) -> Handlers {
    let s = shared.clone();
    let chunk: ReplyHandler = b.reply_handler("volley.msg.chunk", move |m| {
        allow_alloc(|| {
            s.lock()
                .chunk_arrived(m.arg(0), m.arg(1) as usize, m.payload())
        });
    });
    let s = shared.clone();
    let credit_back: ReplyHandler = b.reply_handler("volley.msg.credit_back", move |m| {
        allow_alloc(|| s.lock().release(m.src(), m.arg(0) as usize));
    });
    let s = shared.clone();
    let eager = b.request_handler("volley.msg.eager", move |m, tok| {
        let give = allow_alloc(|| s.lock().arrive_eager(m.src(), m.arg(0), m.payload()));
        if let Some(n) = give {
            // A reply never fails for want of room (reply channels have reserved credits);
            // an error here means the job is going down, which the runtime reports.
            let _ = tok.reply_short(credit_back, &[n]);
        }
    });
    let s = shared.clone();
    let eager_words = b.request_handler("volley.msg.eager_words", move |m, tok| {
        let (tag, payload) = unpack_words(m.args());
        let give = allow_alloc(|| s.lock().arrive_eager(m.src(), tag, payload));
        if let Some(n) = give {
            let _ = tok.reply_short(credit_back, &[n]);
        }
    });
    let s = shared.clone();
    let rts = b.request_handler("volley.msg.rts", move |m, tok| {
        let direct = (m.arg(4) != 0).then(|| Direct {
            pid: m.arg(4) as i32,
            addr: m.arg(3),
            key_addr: m.arg(5),
            key: m.arg(6),
        });
        let give = allow_alloc(|| {
            s.lock()
                .arrive_rendezvous(m.src(), m.arg(0), m.arg(1) as usize, m.arg(2), direct)
        });
        if let Some(n) = give {
            let _ = tok.reply_short(credit_back, &[n]);
        }
    });
    let s = shared.clone();
    let pull = b.request_handler("volley.msg.pull", move |m, tok| {
        let (id, offset, len, recv) = (m.arg(0), m.arg(1) as usize, m.arg(2) as usize, m.arg(3));
        let Some(bytes) = s.lock().sends.get(id).map(|slot| slot.bytes.clone()) else {
            return;
        };
        // Replied outside the lock: a reply that waits for room runs reply handlers, and
        // they take it.
        let _ = match bytes.bytes().get(offset..offset + len) {
            Some(data) => tok.reply_medium(chunk, &[recv, offset as u64], data),
            None => Ok(()),
        };
        drop(bytes);
        allow_alloc(|| s.lock().sent_to_receiver(id, len));
    });
    let s = shared.clone();
    let pulled = b.request_handler("volley.msg.pulled", move |m, _| {
        allow_alloc(|| s.lock().sent_to_receiver(m.arg(0), m.arg(1) as usize));
    });
    let s = shared.clone();
    let credit = b.request_handler("volley.msg.credit", move |m, _| {
        allow_alloc(|| s.lock().release(m.src(), m.arg(0) as usize));
    });
    Handlers {
        eager,
        eager_words,
        rts,
        pull,
        pulled,
        credit,
    }
}

/// The arguments of an eager message in words: its tag and length in the first (tag in the
/// low 32 bits), then the payload, 8 bytes to a word in the machine's byte order (a job's
/// ranks share one architecture), so that the receiver reads the bytes in place. Returns how
/// many of `args` it takes; `payload` is at most [`WORDS_EAGER_BYTES`] long.
pub(crate) fn pack_words(tag: u64, payload: &[u8], args: &mut [u64; volley::MAX_ARGS]) -> usize {
    debug_assert!(tag <= u32::MAX as u64 && payload.len() <= WORDS_EAGER_BYTES);
    args[0] = tag | (payload.len() as u64) << 32;
    let words = payload.len().div_ceil(8);
    bytemuck::cast_slice_mut::<u64, u8>(&mut args[1..=words])[..payload.len()]
        .copy_from_slice(payload);
    1 + words
}

/// [`pack_words`] undone: the tag and the payload, read in place.
pub(crate) fn unpack_words(args: &[u64]) -> (u64, &[u8]) {
    let (tag, len) = (args[0] & u32::MAX as u64, (args[0] >> 32) as usize);
    let bytes: &[u8] = bytemuck::cast_slice(&args[1..]);
    let Some(payload) = bytes.get(..len) else {
        panic!(
            "volley-msg: an eager message in words says {len} bytes but its arguments hold {}",
            bytes.len()
        );
    };
    (tag, payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_of_every_length_come_back_from_their_words() {
        for len in 0..=WORDS_EAGER_BYTES {
            let payload: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
            let mut args = [0u64; volley::MAX_ARGS];
            let n = pack_words(crate::MAX_TAG, &payload, &mut args);
            assert_eq!(n, 1 + len.div_ceil(8));
            let (tag, got) = unpack_words(&args[..n]);
            assert_eq!(tag, crate::MAX_TAG);
            assert_eq!(got, &payload[..]);
        }
    }

    #[test]
    #[should_panic(expected = "says 9 bytes but its arguments hold 8")]
    fn a_length_beyond_the_words_is_refused() {
        let args = [7 | 9 << 32, 0];
        let _ = unpack_words(&args);
    }
}
