//! The datagram format of the reliable layer: a fixed 56-byte header, then, in a data
//! datagram, records packed back to back, and in an unsequenced datagram exactly one
//! whole-message record. All integers are little-endian.
//!
//! ```text
//! offset size  field
//!  0     2     magic 0x6c76 ("vl")
//!  2     1     version, 1
//!  3     1     kind: 1 = data, 2 = ack, 3 = unsequenced; bit 0x80 set on a data
//!              datagram = the checksum covers only its head (see below)
//!  4     4     CRC-32 (IEEE) of the whole datagram with these four bytes zeroed
//!  8     8     job key
//! 16     8     sender's incarnation
//! 24     8     receiver's incarnation as the sender knows it, 0 = not yet known
//! 32     8     seq: this data datagram's sequence number, from 1; 0 in an ack; in an
//!              unsequenced datagram its own id, from 1, counted apart from seq
//! 40     8     ack: every datagram with seq <= ack has arrived, in order (cumulative);
//!              0 in an unsequenced datagram
//! 48     8     sack: bit i set = datagram ack + 2 + i has arrived out of order; 0 in an
//!              unsequenced datagram
//! 56           body (data and unsequenced): records, to the end of the datagram
//! ```
//!
//! An unsequenced datagram (seed 002's "no flow control") stands outside the sequenced stream:
//! it carries no acknowledgement, is never acknowledged or retransmitted, and its one message
//! is delivered on arrival. Its id only lets the receiver refuse a duplicate.
//!
//! A record is `tag u8, len u32, [total u32 if tag = FIRST], len bytes`. Tags: 1 = a whole
//! message, 2 = the first fragment of a message of `total` bytes, 3 = a middle fragment,
//! 4 = the last fragment. Fragments of one message travel in consecutive datagrams, so the
//! in-order receiver reassembles them with a single buffer.
//!
//! A head-only checksum (kind bit 0x80, data datagrams only) is the CRC-32 of the first
//! `HEADER_LEN + 9` bytes (fewer if the datagram is shorter), checksum field zeroed, followed
//! by the datagram's length as a `u32`: the header, the first record's words and truncation
//! are checked, the bytes after them are not. Senders use it only for a fragment's bytes
//! between peers on loopback (see [`Peer::checksum_payloads`](super::Peer::checksum_payloads)).
//!
//! [`decode`] is strict and total: it checks the length, magic, version, kind and checksum,
//! and walks every record of the body, so any byte string either decodes or is refused with a
//! [`DecodeError`]; it never panics. The checksum catches truncation and every error of up to
//! three bits in a datagram of up to 11 KiB (CRC-32 has Hamming distance 4 there).

use super::DecodeError;

/// Bytes in the fixed header.
pub const HEADER_LEN: usize = 56;
/// Bytes before the data of a whole-message, middle or last record.
pub(crate) const RECORD_OVERHEAD: usize = 5;
/// Bytes before the data of a first-fragment record.
pub(crate) const FIRST_OVERHEAD: usize = 9;

const MAGIC: u16 = 0x6c76;
const VERSION: u8 = 1;
/// Kind bit: the checksum covers the head only.
const HEAD_ONLY: u8 = 0x80;
/// Bytes a head-only checksum covers at most.
const HEAD_ONLY_SPAN: usize = HEADER_LEN + FIRST_OVERHEAD;

const TAG_COMPLETE: u8 = 1;
const TAG_FIRST: u8 = 2;
const TAG_MIDDLE: u8 = 3;
const TAG_LAST: u8 = 4;

/// What a datagram carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Sequenced records, plus the piggybacked acknowledgement.
    Data = 1,
    /// Only the acknowledgement fields.
    Ack = 2,
    /// One whole message outside the sequenced stream (see the module docs).
    Unsequenced = 3,
}

/// A decoded datagram header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// What the datagram carries.
    pub kind: Kind,
    /// The job the sender belongs to.
    pub job_key: u64,
    /// The sender's incarnation.
    pub src_incarnation: u64,
    /// The receiver's incarnation as the sender knows it; 0 if it does not know it yet.
    pub dst_incarnation: u64,
    /// Sequence number of a data datagram (from 1); 0 in an ack; an unsequenced datagram's
    /// id (from 1).
    pub seq: u64,
    /// Cumulative acknowledgement: every datagram with `seq <= ack` has arrived.
    pub ack: u64,
    /// Selective acknowledgement: bit `i` set means datagram `ack + 2 + i` has arrived.
    pub sack: u64,
}

/// One record of a data datagram's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Record<'a> {
    /// A whole message.
    Complete(&'a [u8]),
    /// The first fragment of a message of `total` bytes.
    First { total: u32, data: &'a [u8] },
    /// A fragment in the middle of a message.
    Middle(&'a [u8]),
    /// The last fragment of a message.
    Last(&'a [u8]),
}

/// Iterates over the records of a body; yields one error and stops on a malformed record.
pub(crate) struct Records<'a> {
    rest: &'a [u8],
}

impl<'a> Records<'a> {
    /// Records of `body`.
    pub(crate) fn new(body: &'a [u8]) -> Self {
        Self { rest: body }
    }

    fn next_record(&mut self) -> Result<Record<'a>, DecodeError> {
        let (&tag, rest) = self.rest.split_first().ok_or(DecodeError::BadBody)?;
        let len = read_u32(rest, 0).ok_or(DecodeError::BadBody)? as usize;
        let (total, start) = if tag == TAG_FIRST {
            let total = read_u32(rest, 4).ok_or(DecodeError::BadBody)?;
            (total, 8)
        } else {
            (0, 4)
        };
        let data = rest
            .get(start..)
            .and_then(|r| r.get(..len))
            .ok_or(DecodeError::BadBody)?;
        self.rest = &rest[start + len..];
        Ok(match tag {
            TAG_COMPLETE => Record::Complete(data),
            TAG_FIRST if (total as usize) > len && len > 0 => Record::First { total, data },
            TAG_MIDDLE if len > 0 => Record::Middle(data),
            TAG_LAST if len > 0 => Record::Last(data),
            _ => return Err(DecodeError::BadBody),
        })
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<Record<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let r = self.next_record();
        if r.is_err() {
            self.rest = &[];
        }
        Some(r)
    }
}

fn read_u32(b: &[u8], at: usize) -> Option<u32> {
    let bytes = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(bytes.try_into().ok()?))
}

fn read_u64(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// Decodes and validates a datagram; returns its header and body (empty for an ack).
///
/// Does not check the job key or the incarnations: that is the [`Peer`](super::Peer)'s job,
/// and a transport may use the header to pick the peer first.
pub fn decode(bytes: &[u8]) -> Result<(Header, &[u8]), DecodeError> {
    if bytes.len() < HEADER_LEN {
        return Err(DecodeError::Truncated);
    }
    if u16::from_le_bytes([bytes[0], bytes[1]]) != MAGIC {
        return Err(DecodeError::BadMagic);
    }
    if bytes[2] != VERSION {
        return Err(DecodeError::BadVersion);
    }
    let (kind, head_only) = match bytes[3] {
        1 => (Kind::Data, false),
        0x81 => (Kind::Data, true),
        2 => (Kind::Ack, false),
        3 => (Kind::Unsequenced, false),
        _ => return Err(DecodeError::BadKind),
    };
    let stored = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
    let sum = if head_only {
        head_checksum(bytes, &[])
    } else {
        checksum(bytes)
    };
    if sum != stored {
        return Err(DecodeError::BadChecksum);
    }
    let header = Header {
        kind,
        job_key: read_u64(bytes, 8),
        src_incarnation: read_u64(bytes, 16),
        dst_incarnation: read_u64(bytes, 24),
        seq: read_u64(bytes, 32),
        ack: read_u64(bytes, 40),
        sack: read_u64(bytes, 48),
    };
    let body = &bytes[HEADER_LEN..];
    match kind {
        Kind::Ack => {
            if header.seq != 0 || !body.is_empty() {
                return Err(DecodeError::BadBody);
            }
        }
        Kind::Data => {
            if header.seq == 0 || body.is_empty() {
                return Err(DecodeError::BadBody);
            }
            for r in Records::new(body) {
                r?;
            }
        }
        Kind::Unsequenced => {
            if header.seq == 0 || header.ack != 0 || header.sack != 0 {
                return Err(DecodeError::BadBody);
            }
            unsequenced_message(body)?;
        }
    }
    Ok((header, body))
}

/// The message of an unsequenced datagram's body: exactly one whole-message record.
pub(crate) fn unsequenced_message(body: &[u8]) -> Result<&[u8], DecodeError> {
    let mut records = Records::new(body);
    match (records.next(), records.next()) {
        (Some(Ok(Record::Complete(m))), None) => Ok(m),
        _ => Err(DecodeError::BadBody),
    }
}

/// Clears `buf` and writes a complete datagram with `header` and `body` into it.
pub(crate) fn encode(buf: &mut Vec<u8>, header: &Header, body: &[u8]) {
    put_header(buf, header, body.len());
    buf.extend_from_slice(body);
    seal(buf);
}

/// Clears `buf` and writes a complete unsequenced datagram (`header.kind` is
/// [`Kind::Unsequenced`]) carrying `msg` as its one record.
pub(crate) fn encode_unsequenced(buf: &mut Vec<u8>, header: &Header, msg: &[u8]) {
    put_header(buf, header, RECORD_OVERHEAD + msg.len());
    put_complete(buf, msg);
    seal(buf);
}

/// Clears `buf` and writes `header` with its checksum field zero, reserving room for a body
/// of `body_len` bytes.
fn put_header(buf: &mut Vec<u8>, header: &Header, body_len: usize) {
    buf.clear();
    buf.reserve(HEADER_LEN + body_len);
    buf.extend_from_slice(&MAGIC.to_le_bytes());
    buf.push(VERSION);
    buf.push(header.kind as u8);
    buf.extend_from_slice(&[0; 4]);
    for w in [
        header.job_key,
        header.src_incarnation,
        header.dst_incarnation,
        header.seq,
        header.ack,
        header.sack,
    ] {
        buf.extend_from_slice(&w.to_le_bytes());
    }
}

/// Which fragment of a message a one-record datagram carries (see [`encode_fragment`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fragment {
    /// The first, of a message of this many bytes.
    First(u32),
    /// One in the middle.
    Middle,
    /// The last.
    Last,
}

/// Clears `buf` and writes a complete data datagram whose body is one fragment record of
/// `data`.
#[cfg(test)]
pub(crate) fn encode_fragment(buf: &mut Vec<u8>, header: &Header, fragment: Fragment, data: &[u8]) {
    encode_fragment_head(buf, header, fragment, data, true);
    buf.extend_from_slice(data);
}

/// Clears `buf` and writes the head of a data datagram whose body is one fragment record of
/// `data`: the header and the record's own words, sealed with the checksum of the whole
/// datagram, or of the head only when `whole` is false. On the wire `data` follows the head,
/// gathered straight from the message, so a long message's bytes are never copied into a
/// datagram.
pub(crate) fn encode_fragment_head(
    buf: &mut Vec<u8>,
    header: &Header,
    fragment: Fragment,
    data: &[u8],
    whole: bool,
) {
    encode_fragment_head_inline(buf, header, fragment, &[], data, whole);
}

/// [`encode_fragment_head`] of a fragment whose bytes are `inline` followed by `tail`:
/// `inline` is written into `buf` after the record's words, and `tail` follows on the wire.
/// The datagram is the same as for one fragment of both joined (a message lent in two
/// pieces, a short head and its payload, puts the head's bytes here).
pub(crate) fn encode_fragment_head_inline(
    buf: &mut Vec<u8>,
    header: &Header,
    fragment: Fragment,
    inline: &[u8],
    tail: &[u8],
    whole: bool,
) {
    put_header(buf, header, FIRST_OVERHEAD + inline.len());
    let (tag, total) = match fragment {
        Fragment::First(total) => (TAG_FIRST, Some(total)),
        Fragment::Middle => (TAG_MIDDLE, None),
        Fragment::Last => (TAG_LAST, None),
    };
    put_record_head(buf, tag, total, inline.len() + tail.len());
    buf.extend_from_slice(inline);
    let c = if whole {
        checksum_parts(buf, tail)
    } else {
        buf[3] |= HEAD_ONLY;
        head_checksum(buf, tail)
    };
    buf[4..8].copy_from_slice(&c.to_le_bytes());
}

/// Writes the checksum of a datagram whose header is otherwise complete.
pub(crate) fn seal(datagram: &mut [u8]) {
    let c = checksum(datagram);
    datagram[4..8].copy_from_slice(&c.to_le_bytes());
}

/// Appends a whole-message record to a body.
pub(crate) fn put_complete(body: &mut Vec<u8>, data: &[u8]) {
    put_record(body, TAG_COMPLETE, None, data);
}

/// Appends a first-fragment record to a body (fragments otherwise travel one per datagram,
/// through [`encode_fragment`]).
#[cfg(test)]
pub(crate) fn put_first(body: &mut Vec<u8>, total: u32, data: &[u8]) {
    put_record(body, TAG_FIRST, Some(total), data);
}

fn put_record(body: &mut Vec<u8>, tag: u8, total: Option<u32>, data: &[u8]) {
    put_record_head(body, tag, total, data.len());
    body.extend_from_slice(data);
}

/// Appends a record's tag and lengths, the words before its `len` bytes of data.
fn put_record_head(body: &mut Vec<u8>, tag: u8, total: Option<u32>, len: usize) {
    body.push(tag);
    // Lengths fit: the peer limits messages to u32::MAX bytes and datagrams to 65507.
    body.extend_from_slice(&(len as u32).to_le_bytes());
    if let Some(t) = total {
        body.extend_from_slice(&t.to_le_bytes());
    }
}

/// CRC-32 (IEEE, reflected 0xEDB88320) of a datagram with its checksum field read as zero.
/// `crc32fast` folds with carry-less multiplication where the CPU has it: a table-driven
/// byte loop cost ~60 µs per 64 KiB datagram, more than the system calls.
fn checksum(datagram: &[u8]) -> u32 {
    checksum_parts(datagram, &[])
}

/// The head-only checksum of the datagram `head` followed by `tail`: its first
/// [`HEAD_ONLY_SPAN`] bytes (`head` is at least [`HEADER_LEN`] long), then its length.
fn head_checksum(head: &[u8], tail: &[u8]) -> u32 {
    let len = head.len() + tail.len();
    let first = &head[..head.len().min(HEAD_ONLY_SPAN)];
    let rest = &tail[..tail.len().min(HEAD_ONLY_SPAN - first.len())];
    let mut h = crc32fast::Hasher::new();
    h.update(&first[..4]);
    h.update(&[0; 4]);
    h.update(&first[8..]);
    h.update(rest);
    // Datagrams are at most 65507 bytes.
    h.update(&(len as u32).to_le_bytes());
    h.finalize()
}

/// [`checksum`] of the datagram `head` followed by `tail`, without joining them.
fn checksum_parts(head: &[u8], tail: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&head[..4]);
    h.update(&[0; 4]);
    h.update(&head[8..]);
    h.update(tail);
    h.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_matches_reference() {
        // The standard check value of CRC-32/IEEE.
        assert_eq!(crc32fast::hash(b"123456789"), 0xcbf4_3926);
        // The checksum field is read as zero whatever it holds.
        let mut d = b"abcdEFGHijklmnop".to_vec();
        let c = checksum(&d);
        d[4..8].copy_from_slice(&[1, 2, 3, 4]);
        assert_eq!(checksum(&d), c);
        let mut zeroed = d.clone();
        zeroed[4..8].fill(0);
        assert_eq!(c, crc32fast::hash(&zeroed));
    }

    #[test]
    fn roundtrip() {
        let h = data_header();
        let mut body = Vec::new();
        put_complete(&mut body, b"abc");
        put_first(&mut body, 10, b"defg");
        let mut buf = Vec::new();
        encode(&mut buf, &h, &body);
        let (d, b) = decode(&buf).unwrap();
        assert_eq!(d, h);
        let recs: Vec<_> = Records::new(b).map(|r| r.unwrap()).collect();
        for (fragment, record) in [
            (
                Fragment::First(9),
                Record::First {
                    total: 9,
                    data: b"xyz",
                },
            ),
            (Fragment::Middle, Record::Middle(b"xyz")),
            (Fragment::Last, Record::Last(b"xyz")),
        ] {
            let mut one = Vec::new();
            encode_fragment(&mut one, &h, fragment, b"xyz");
            let (d, b) = decode(&one).unwrap();
            assert_eq!(d, h);
            assert_eq!(
                Records::new(b).map(|r| r.unwrap()).collect::<Vec<_>>(),
                [record]
            );
        }
        assert_eq!(
            recs,
            [
                Record::Complete(b"abc"),
                Record::First {
                    total: 10,
                    data: b"defg"
                }
            ]
        );
    }

    /// A data datagram's header with every field distinct.
    fn data_header() -> Header {
        Header {
            kind: Kind::Data,
            job_key: 7,
            src_incarnation: 8,
            dst_incarnation: 9,
            seq: 10,
            ack: 11,
            sack: 12,
        }
    }

    /// A fragment's head seals the checksum of head and data together: the two sent one
    /// after the other decode, and a datagram with any byte of the data changed is refused.
    #[test]
    fn a_gathered_fragment_is_checked_over_its_data_too() {
        let h = data_header();
        let data: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
        let mut head = Vec::new();
        encode_fragment_head(&mut head, &h, Fragment::First(5000), &data, true);
        assert_eq!(head.len(), HEADER_LEN + FIRST_OVERHEAD);
        let mut datagram = head.clone();
        datagram.extend_from_slice(&data);
        let (d, b) = decode(&datagram).unwrap();
        assert_eq!(d, h);
        assert_eq!(
            Records::new(b).map(|r| r.unwrap()).collect::<Vec<_>>(),
            [Record::First {
                total: 5000,
                data: &data
            }]
        );
        for at in [
            HEADER_LEN + FIRST_OVERHEAD,
            HEADER_LEN + 1000,
            datagram.len() - 1,
        ] {
            let mut bad = datagram.clone();
            bad[at] ^= 0x10;
            assert_eq!(decode(&bad), Err(DecodeError::BadChecksum), "byte {at}");
        }
        // The data without its head, or a head sealed over other data, is refused too.
        assert_eq!(
            decode(&datagram[..datagram.len() - 1]),
            Err(DecodeError::BadChecksum)
        );
        let mut other = Vec::new();
        encode_fragment_head(&mut other, &h, Fragment::First(5000), &data[1..], true);
        other.extend_from_slice(&data[..data.len() - 1]);
        assert_eq!(decode(&other), Err(DecodeError::BadChecksum));
    }

    /// A head-only checksum (loopback fragments) still refuses a changed header, record
    /// word or length, a head-only flag on another kind, and a flag set or cleared in
    /// transit; it does not look at the data.
    #[test]
    fn a_head_only_checksum_checks_the_head_and_the_length() {
        let h = data_header();
        let data = vec![3u8; 2000];
        for fragment in [Fragment::First(5000), Fragment::Middle, Fragment::Last] {
            let mut d = Vec::new();
            encode_fragment_head(&mut d, &h, fragment, &data, false);
            assert_eq!(d[3], 0x81);
            d.extend_from_slice(&data);
            assert_eq!(decode(&d).map(|(h, _)| h), Ok(h), "{fragment:?}");
            // The data is not covered.
            let mut changed = d.clone();
            let last = changed.len() - 1;
            changed[last] ^= 1;
            assert!(decode(&changed).is_ok());
            // Any byte of the head, the length, or the flag is.
            for at in (0..HEADER_LEN + 5).filter(|&at| !(4..8).contains(&at)) {
                let mut bad = d.clone();
                bad[at] ^= 0x04;
                assert!(decode(&bad).is_err(), "{fragment:?} byte {at}");
            }
            assert_eq!(decode(&d[..d.len() - 1]), Err(DecodeError::BadChecksum));
            let mut cleared = d.clone();
            cleared[3] = 1;
            assert_eq!(decode(&cleared), Err(DecodeError::BadChecksum));
            let mut whole = Vec::new();
            encode_fragment_head(&mut whole, &h, fragment, &data, true);
            whole.extend_from_slice(&data);
            whole[3] = 0x81;
            assert_eq!(decode(&whole), Err(DecodeError::BadChecksum));
        }
        for kind in [0x82, 0x83, 0x80] {
            let mut d = Vec::new();
            encode(
                &mut d,
                &Header {
                    kind: Kind::Ack,
                    seq: 0,
                    ..h
                },
                &[],
            );
            d[3] = kind;
            assert_eq!(decode(&d), Err(DecodeError::BadKind));
        }
    }

    #[test]
    fn unsequenced_roundtrip_and_strictness() {
        let h = Header {
            kind: Kind::Unsequenced,
            job_key: 7,
            src_incarnation: 8,
            dst_incarnation: 9,
            seq: 3,
            ack: 0,
            sack: 0,
        };
        let mut buf = Vec::new();
        encode_unsequenced(&mut buf, &h, b"hello");
        let (d, body) = decode(&buf).unwrap();
        assert_eq!(d, h);
        assert_eq!(unsequenced_message(body), Ok(&b"hello"[..]));
        // An id of 0, acknowledgement fields, or a body other than one whole message are
        // refused.
        for bad in [
            Header { seq: 0, ..h },
            Header { ack: 1, ..h },
            Header { sack: 1, ..h },
        ] {
            encode_unsequenced(&mut buf, &bad, b"hello");
            assert_eq!(decode(&buf), Err(DecodeError::BadBody), "{bad:?}");
        }
        let mut two = Vec::new();
        put_complete(&mut two, b"a");
        put_complete(&mut two, b"b");
        let mut first = Vec::new();
        put_first(&mut first, 10, b"abcd");
        for body in [&two[..], &first[..], &[][..]] {
            encode(&mut buf, &h, body);
            assert_eq!(decode(&buf), Err(DecodeError::BadBody));
        }
    }
}
