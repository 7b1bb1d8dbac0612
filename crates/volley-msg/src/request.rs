//! Completion handles of non-blocking sends and receives.

use crate::error::{MsgError, Result};
use crate::msg::{Msg, Received};
use crate::state::{Buf, Phase};

/// A non-blocking send in flight ([`Msg::isend`]). [`SendRequest::wait`] gives the data back.
/// Dropping it lets the send finish on its own (the layer keeps the data until then).
#[derive(Debug)]
#[must_use = "a send request is completed by test or wait (dropping it lets the send finish on its own)"]
pub struct SendRequest<'a> {
    msg: &'a Msg<'a>,
    state: SendState,
}

#[derive(Debug)]
enum SendState {
    /// Sent eagerly: complete, holding the caller's vector.
    Done(Vec<u8>),
    /// A rendezvous send: slot `id`.
    Pending(u64),
    /// Given back.
    Taken,
}

impl<'a> SendRequest<'a> {
    pub(crate) fn done(msg: &'a Msg<'a>, data: Vec<u8>) -> Self {
        Self {
            msg,
            state: SendState::Done(data),
        }
    }

    pub(crate) fn pending(msg: &'a Msg<'a>, id: u64) -> Self {
        Self {
            msg,
            state: SendState::Pending(id),
        }
    }

    /// Whether the send has completed (polls once).
    pub fn test(&mut self) -> bool {
        match self.state {
            SendState::Pending(id) => {
                self.msg.rt.poll();
                self.msg.pump();
                self.msg
                    .shared
                    .lock()
                    .sends
                    .get(id)
                    .is_none_or(|s| s.done())
            }
            _ => true,
        }
    }

    /// Waits for the send to complete and gives its data back.
    pub fn wait(mut self) -> Result<Vec<u8>> {
        match std::mem::replace(&mut self.state, SendState::Taken) {
            SendState::Done(v) => Ok(v),
            SendState::Pending(id) => {
                self.msg.wait_send(id);
                let slot = self.msg.shared.lock().sends.remove(id);
                let slot = slot.ok_or(MsgError::Finalized)?;
                if !slot.done() {
                    return Err(MsgError::Finalized);
                }
                // The handler that sent the last chunk let go of its reference before it
                // recorded the chunk, so this is the last one.
                Ok(std::sync::Arc::try_unwrap(slot.bytes)
                    .ok()
                    .and_then(|b| b.into_vec())
                    .unwrap_or_default())
            }
            SendState::Taken => Err(MsgError::Finalized),
        }
    }
}

impl Drop for SendRequest<'_> {
    fn drop(&mut self) {
        if let SendState::Pending(id) = self.state {
            let mut st = self.msg.shared.lock();
            match st.sends.get_mut(id) {
                Some(slot) if slot.done() => {
                    st.sends.remove(id);
                }
                Some(slot) => slot.detached = true,
                None => {}
            }
        }
    }
}

/// A non-blocking receive ([`Msg::irecv`]). Dropping it before it has matched cancels it; a
/// receive already pulling a message finishes first (and the message is dropped).
#[derive(Debug)]
#[must_use = "a receive request is completed by test or wait (dropping it cancels the receive)"]
pub struct RecvRequest<'a> {
    msg: &'a Msg<'a>,
    id: u64,
    taken: bool,
}

impl<'a> RecvRequest<'a> {
    pub(crate) fn new(msg: &'a Msg<'a>, id: u64) -> Self {
        Self {
            msg,
            id,
            taken: false,
        }
    }

    /// Whether the message is in (polls once).
    pub fn test(&mut self) -> bool {
        self.msg.rt.poll();
        self.msg.recv_finished(self.id)
    }

    /// Waits for the message and returns it.
    pub fn wait(mut self) -> Result<Received> {
        let slot = self.msg.wait_take(self.id);
        if slot.is_some() {
            self.taken = true;
        }
        match slot {
            Some(s) => match (s.phase, s.buf) {
                (Phase::Done { src, tag, .. }, Buf::Owned(data)) => Ok(Received { src, tag, data }),
                _ => Err(MsgError::Finalized),
            },
            None => Err(MsgError::Finalized),
        }
    }
}

impl Drop for RecvRequest<'_> {
    fn drop(&mut self) {
        if self.taken {
            return;
        }
        let id = self.id;
        let cancelled = {
            let mut st = self.msg.shared.lock();
            let posted = st.matcher.cancel(|&p| p == id).is_some();
            if posted {
                st.recvs.remove(id);
            }
            posted
        };
        if !cancelled {
            self.msg.wait_recv(id);
            self.msg.shared.lock().recvs.remove(id);
        }
    }
}
