//! Sleeping in the kernel until a message arrives, for layers whose waits look at memory that
//! messages write.

use super::Runtime;
use std::time::Duration;

impl Runtime {
    /// Sleeps in the kernel until a message for this rank arrives through any transport (a
    /// node-mate's ring, the network socket), a timer of the reliable protocol is due, or
    /// `timeout` passes; returns at once if something is already waiting. Runs no handler:
    /// poll afterwards, then look again. Sends what this rank has queued first, since a peer
    /// may wait for it. A message wakes the sleeper; a node-mate's plain store into mapped
    /// memory does not (send a message after it). With a progress thread serving, sleeps
    /// until that thread has run handlers instead.
    ///
    /// # Panics
    ///
    /// Inside a handler or a critical section (it would wait for handlers that cannot run).
    pub fn sleep_until_message(&self, timeout: Duration) {
        let _e = self.enter();
        self.guard("sleep_until_message");
        self.critical_guard("sleep_until_message");
        self.engine().sleep_for(timeout);
    }
}
