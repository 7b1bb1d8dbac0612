//! How handlers reach a rank that computes: seed 000's choice between polling and interrupts,
//! made phase by phase at run time (`Runtime::set_delivery`).

/// When handlers run on a rank that has a progress thread.
///
/// - **Polling**: only inside this rank's own runtime calls, on its own thread: a handler can
///   never interrupt the program between two calls, so no critical section is needed, and a
///   phase of heavy communication pays nothing for a second thread. A rank that computes
///   without calling serves nobody until it calls again.
/// - **Asynchronous** (the default with a progress thread): also while the program computes,
///   on the progress thread (seed 000's interrupts), so a busy rank still serves requests and
///   one-sided operations; handlers stay atomic with respect to each other, and
///   `Runtime::critical` keeps them out of the program's own critical sections.
///
/// A rank without a progress thread always polls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Delivery {
    /// Handlers run only in this rank's runtime calls.
    Polling,
    /// Handlers also run while the program computes, on the progress thread.
    Asynchronous,
}
