//! Switching how handlers reach the rank, phase by phase (see [`Delivery`]).

use super::Runtime;
use crate::am::delivery::Delivery;
use crate::am::error::{Error, Result};

impl Runtime {
    /// When handlers run on this rank now (see [`Delivery`]).
    pub fn delivery(&self) -> Delivery {
        match self.engine().thread_sync() {
            Some(sync) if !sync.paused() => Delivery::Asynchronous,
            _ => Delivery::Polling,
        }
    }

    /// Switches how handlers reach this rank from now on, for the program's next phase: in
    /// [`Delivery::Polling`] they run only inside its own runtime calls (no handler runs on
    /// the progress thread once this returns), in [`Delivery::Asynchronous`] also while it
    /// computes. Ranks choose independently. Asynchronous delivery needs a progress thread
    /// ([`RuntimeBuilder::progress_thread`](crate::RuntimeBuilder::progress_thread) or `VOLLEY_PROGRESS=thread`); without one a rank
    /// always polls, and asking for it is an error.
    pub fn set_delivery(&self, delivery: Delivery) -> Result<()> {
        let _e = self.enter();
        self.guard("set_delivery");
        match (self.engine().thread_sync(), delivery) {
            // Owning the engine: the progress thread gives it back before this runs, and
            // takes it again only after this rank's next leave, which orders the flag.
            (Some(sync), d) => {
                sync.set_paused(d == Delivery::Polling);
                if d == Delivery::Polling {
                    // A progress thread asleep on the doorbell gets up and naps instead, so
                    // that this rank's own waits may sleep there.
                    self.engine().wake_owner();
                }
            }
            (None, Delivery::Polling) => {}
            (None, Delivery::Asynchronous) => {
                return Err(Error::InvalidConfig {
                    name: "delivery",
                    value: "asynchronous".into(),
                    why: "this rank has no progress thread (RuntimeBuilder::progress_thread or VOLLEY_PROGRESS=thread)",
                })
            }
        }
        Ok(())
    }
}
