//! What a procedure packet's handler gets: who sent it, its id, and the buffer its chained
//! arguments come from.

use crate::error::Result;
use crate::outbound::{image, Outbound};
use crate::recv;
use crate::ring::{header, LocalWriter, Reader, DATA, NO_RANK};
use crate::Info;

/// A running procedure packet (seed 003 §6: the handler "gets its parameters" itself, from
/// the chain that carried it).
pub struct Invocation<'a> {
    pub(crate) from: Option<usize>,
    pub(crate) id: u32,
    pub(crate) args: &'a mut Reader,
    pub(crate) wait: &'a mut dyn FnMut(),
    pub(crate) reply: Option<&'a mut LocalWriter>,
    /// The running thread as a sender to any rank.
    pub(crate) out: &'a mut dyn Outbound,
    /// Whether the communication thread tells the program thread this procedure ran.
    pub(crate) report: bool,
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
        if buf.is_empty() {
            // Nothing to take (a data receive of 0 bytes would wait for a whole packet).
            return Ok(());
        }
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

    /// Sends `info` to `rank` from wherever this handler runs (seed 003 Fig. 3's
    /// asynchronous Active Message: on the communication thread, a request is served while
    /// the program thread computes). A procedure packet's `args` follow it as a closed chain,
    /// which its handler receives; a data packet takes none. One whole packet under the
    /// destination's link: no other sender's words come inside it. On the communication
    /// thread a send to a rank on another node is checked and queued for the program thread,
    /// which sends it from its next call into the layer (volley's runtime has one driving
    /// thread); at most a buffer's worth waits per destination, then this waits. A send to
    /// this rank's own full buffer fails ([`PrimError::OwnBufferFull`]).
    ///
    /// [`PrimError::OwnBufferFull`]: crate::PrimError::OwnBufferFull
    pub fn send(&mut self, rank: usize, info: Info<'_>, args: &[u8]) -> Result<()> {
        let (words, headers, payload) = image(self.out.me(), info, args, self.out.handlers())?;
        self.out.send_image(rank, &words, &headers, payload)
    }

    /// Asks the communication thread not to tell the program thread that this procedure ran
    /// (its procedure receive will not return for it): for requests served there entirely,
    /// which the program never waits for; otherwise those reports fill the program thread's
    /// buffer and the communication thread waits for room. No effect on the program thread.
    pub fn quiet(&mut self) {
        self.report = false;
    }

    /// Whether this handler runs on the communication thread.
    pub fn on_comm_thread(&self) -> bool {
        self.reply.is_some()
    }
}
