//! The loom models' ranks: one thread each, rank 0 on the model's own thread.

use loom::sync::Arc;

/// Runs `rank(me, mem)` for every rank `me` below `ranks` on threads of its own, all sharing
/// `mem`, and waits for them all.
pub(crate) fn run_ranks<M: Send + Sync + 'static>(
    ranks: usize,
    mem: Arc<M>,
    rank: impl Fn(usize, Arc<M>) + Copy + Send + 'static,
) {
    let others: Vec<_> = (1..ranks)
        .map(|me| {
            let mem = mem.clone();
            loom::thread::spawn(move || rank(me, mem))
        })
        .collect();
    rank(0, mem);
    for h in others {
        h.join().unwrap();
    }
}
