//! A word's bytes to and from a chunk of at most 8 bytes, whole words by one load or store:
//! shared by the message words (`handlers`) and the hub's rows (`hub_rows`, also under
//! loom).

/// `chunk` (at most 8 bytes) as a word's bytes, zero-padded. A whole word goes as one load (a
/// copy of a length unknown here would call memcpy).
#[inline]
pub(crate) fn padded_word(chunk: &[u8]) -> [u8; 8] {
    <[u8; 8]>::try_from(chunk).unwrap_or_else(|_| {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        w
    })
}

/// The first `chunk.len()` (at most 8) bytes of `w` into `chunk`. A whole word goes as one
/// store (see [`padded_word`]).
#[inline]
pub(crate) fn store_word(chunk: &mut [u8], w: [u8; 8]) {
    match <&mut [u8; 8]>::try_from(&mut *chunk) {
        Ok(whole) => *whole = w,
        Err(_) => chunk.copy_from_slice(&w[..chunk.len()]),
    }
}
