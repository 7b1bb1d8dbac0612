//! What a procedure packet's handler gets: who sent it, its id, and the buffer its chained
//! arguments come from.

use crate::error::Result;
use crate::recv;
use crate::ring::{header, LocalWriter, Reader, DATA, NO_RANK};

/// A running procedure packet (seed 003 §6: the handler "gets its parameters" itself, from
/// the chain that carried it).
pub struct Invocation<'a> {
    pub(crate) from: Option<usize>,
    pub(crate) id: u32,
    pub(crate) args: &'a mut Reader,
    pub(crate) wait: &'a mut dyn FnMut(),
    pub(crate) reply: Option<&'a mut LocalWriter>,
}

impl std::fmt::Debug for Invocation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Invocation")
            .field("from", &self.from)
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Invocation<'_> {
    /// The sending rank, or `None` for a procedure from this rank's program thread
    /// (`INTERNAL`).
    pub fn from(&self) -> Option<usize> {
        self.from
    }

    /// The handler id.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Receives the next `buf.len()` bytes of arguments from the buffer the procedure came
    /// from (waits for them; errors as `Prim::receive`'s data form).
    pub fn receive(&mut self, buf: &mut [u8]) -> Result<()> {
        loop {
            if recv::try_data(self.args, buf)?.is_some() {
                return Ok(());
            }
            (self.wait)();
        }
    }

    /// Receives one 8-byte argument.
    pub fn receive_u64(&mut self) -> Result<u64> {
        let mut b = [0u8; 8];
        self.receive(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Sends `data` to the program thread's internal buffer (the synchronous reply of seed
    /// 003 §6.1). Only on the communication thread: elsewhere there is no one to reply to.
    pub fn reply(&mut self, data: &[u8]) -> Result<()> {
        let w = self
            .reply
            .as_deref_mut()
            .ok_or(crate::PrimError::NoCommThread)?;
        let image = crate::prim::data_image(header(DATA, NO_RANK, false, data.len() as u32), data);
        if image.len() as u64 * 8 > w.ring.cap() {
            return Err(crate::PrimError::TooLarge {
                bytes: image.len() * 8,
                capacity: w.ring.cap() as usize,
            });
        }
        w.emit(&image, &[0], &mut |_| std::thread::yield_now());
        Ok(())
    }
}
