//! Sends that never wait: `try_request_*` inject at once or refuse, without polling, and
//! [`Runtime::sendable`] / [`Runtime::wait_sendable`] say when they would go.

use super::Runtime;
use crate::am::error::Result;
use crate::am::handler::{MessageClass, RequestHandler};
use crate::transport::Channel;

impl Runtime {
    /// Sends a short request if it can go at once, and otherwise returns
    /// [`Error::WouldBlock`](crate::am::Error::WouldBlock) having sent nothing. Unlike [`Runtime::request_short`] it never
    /// polls, so no handler runs inside it (whatever floods this rank meanwhile), and it never
    /// waits. Exact on every transport: shared memory refuses when the target's ring has no
    /// room, UDP when the reliable window towards the target is full, TCP when the send queue
    /// towards it is full. [`Runtime::wait_sendable`] waits (polling) until it would go.
    pub fn try_request_short(
        &self,
        dest: usize,
        handler: RequestHandler,
        args: &[u64],
    ) -> Result<()> {
        let _e = self.enter();
        self.send_guard("try_request_short")?;
        self.engine()
            .try_send_short(dest, Channel::Request, handler.0, args)
    }

    /// [`Runtime::request_medium`] if it can go at once, [`Error::WouldBlock`](crate::am::Error::WouldBlock) otherwise (no
    /// medium buffer free, or no room: see [`Runtime::try_request_short`]). Never polls.
    pub fn try_request_medium(
        &self,
        dest: usize,
        handler: RequestHandler,
        args: &[u64],
        payload: &[u8],
    ) -> Result<()> {
        let _e = self.enter();
        self.send_guard("try_request_medium")?;
        self.engine()
            .try_send_medium(dest, Channel::Request, handler.0, args, payload)
    }

    /// [`Runtime::request_long`] if it can go at once, [`Error::WouldBlock`](crate::am::Error::WouldBlock) otherwise; a
    /// refused send wrote nothing into the target's segment. Never polls. To a rank on another
    /// node it carries at most one network message's worth (8 MiB, [`Error::LongTooLarge`](crate::am::Error::LongTooLarge)
    /// beyond): a larger long travels in parts, which cannot be all or nothing.
    pub fn try_request_long(
        &self,
        dest: usize,
        handler: RequestHandler,
        args: &[u64],
        payload: &[u8],
        offset: usize,
    ) -> Result<()> {
        let _e = self.enter();
        self.send_guard("try_request_long")?;
        self.engine()
            .try_send_long(dest, Channel::Request, handler.0, args, payload, offset)
    }

    /// Whether a request of `class` with up to 16 arguments and a payload of `payload_len`
    /// bytes (ignored for short messages) would go to `dest` at once: if so, the next
    /// `try_request_*` of that shape to `dest` succeeds, provided nothing else sends to
    /// `dest` first (with a progress thread, its handlers' replies may). Does not poll. A
    /// payload too large for any message of `class` to `dest` is an error.
    pub fn sendable(&self, dest: usize, class: MessageClass, payload_len: usize) -> Result<bool> {
        let _e = self.enter();
        self.engine()
            .sendable(dest, Channel::Request, class, payload_len)
    }

    /// Polls (running request and reply handlers, as a blocked request does) until
    /// [`Runtime::sendable`] holds: the way to wait after [`Error::WouldBlock`](crate::am::Error::WouldBlock).
    pub fn wait_sendable(
        &self,
        dest: usize,
        class: MessageClass,
        payload_len: usize,
    ) -> Result<()> {
        let _e = self.enter();
        self.guard("wait_sendable");
        self.critical_guard("wait_sendable");
        self.engine()
            .wait_sendable(dest, Channel::Request, class, payload_len)
    }
}
