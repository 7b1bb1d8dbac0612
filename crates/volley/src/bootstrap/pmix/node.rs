//! The node-local rendezvous under a PMIx launcher. Shared-memory regions and wake-up
//! descriptors cannot travel through PMIx, so the first rank of each node serves the node's
//! ranks the same rendezvous `volley run` serves, on an abstract Unix socket (no file to leave
//! behind when a rank is killed; only this user's processes are served) whose random name it
//! publishes with its endpoint information. The collecting fence that publishes it is also
//! the init barrier.

use super::super::rendezvous::{self, Hello, PeerHello, RendezvousServer, FDS_PER_HELLO};
use super::super::{random_u64, BootstrapError, JobInfo};
use super::Client;
use serde::{Deserialize, Serialize};
use std::os::fd::RawFd;

/// The key under which every rank publishes what it tells the others.
const KEY: &str = "volley.hello";

/// What a rank publishes: its hello, its node, and (the first rank of a node only) the
/// name of the node's rendezvous socket.
#[derive(Debug, Serialize, Deserialize)]
struct Published {
    hello: Hello,
    node: usize,
    server: Option<String>,
}

/// Publishes `hello`, fences, and returns every rank's hello in rank order, those of this
/// node's ranks with the descriptors they sent (see [`rendezvous::exchange`]).
pub(crate) fn exchange(
    pmix: &Client,
    job: &JobInfo,
    hello: &Hello,
    fds: [RawFd; FDS_PER_HELLO],
) -> Result<Vec<PeerHello>, BootstrapError> {
    let serving = if job.local_rank == 0 {
        let name = format!(
            "volley-{:016x}-{}-{:016x}",
            job.job_key,
            job.rank,
            random_u64()
        );
        let listener = rendezvous::abstract_listener(&name, job.local_size)?;
        Some((name, listener))
    } else {
        None
    };
    let published = Published {
        hello: hello.clone(),
        node: job.node,
        server: serving.as_ref().map(|(name, _)| name.clone()),
    };
    let text = serde_json::to_string(&published).expect("a hello serializes");
    pmix.put_string(KEY, &text)?;
    pmix.commit()?;
    pmix.fence(true)?;
    let mut all = Vec::with_capacity(job.size);
    let mut mates = Vec::new();
    let mut server = None;
    for r in 0..job.size {
        let text = pmix.get_string(r as u32, KEY)?;
        let theirs: Published = serde_json::from_str(&text).map_err(|e| {
            BootstrapError::Pmix(format!(
                "rank {r} published unreadable endpoint information: {e}"
            ))
        })?;
        if theirs.hello.rank != r {
            return Err(BootstrapError::Pmix(format!(
                "rank {r} published the hello of rank {}",
                theirs.hello.rank
            )));
        }
        if theirs.node == job.node {
            mates.push(r);
            server = server.or(theirs.server);
        }
        all.push(theirs.hello);
    }
    let name = server.ok_or_else(|| {
        BootstrapError::Pmix(format!(
            "no rank of node {} serves its rendezvous (no local rank 0?)",
            job.node
        ))
    })?;
    if mates.len() != job.local_size {
        return Err(BootstrapError::Pmix(format!(
            "{} ranks published node {} but PMIx says it has {}",
            mates.len(),
            job.node,
            job.local_size
        )));
    }
    // The first rank serves its node from a thread and joins the exchange like the others.
    let server = serving.map(|(name, listener)| {
        let server = RendezvousServer::on_listener(listener, mates, &name);
        let all = all.clone();
        std::thread::Builder::new()
            .name("volley-node-rendezvous".into())
            .spawn(move || server.gather(|_| {})?.release(&all).map(drop))
            .map_err(|e| BootstrapError::os("starting the node rendezvous", e))
    });
    let server = server.transpose()?;
    let (peers, _conn) = rendezvous::exchange_abstract(&name, job.size, hello, fds)?;
    if let Some(thread) = server {
        thread
            .join()
            .map_err(|_| BootstrapError::Pmix("the node rendezvous panicked".into()))??;
    }
    Ok(peers)
}
