//! Wire-up: what a rank tells the others about itself at init, the agreement every rank
//! checks, and the exchange (through the launcher's rendezvous) that hands each rank the
//! regions and wake-up descriptors of its node-mates and the network addresses of the rest.

use super::config::Config;
use crate::am::error::{Error, Result};
use crate::bootstrap::{pmix, rendezvous, BootstrapError, JobInfo, Start};
use crate::transport::net::{
    tcp::{TcpConfig, TcpTransport},
    udp::{UdpConfig, UdpTransport},
    NetKind, NetTransport,
};
use crate::transport::shm::doorbell::Ordering as BellOrder;
use crate::transport::shm::wake_fd::WakeFd;
use crate::transport::shm::{Layout, Region};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};

/// What each rank tells the others about itself at init.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub(super) struct EndpointInfo {
    pub(super) layout: Layout,
    pub(super) requests: Vec<String>,
    pub(super) replies: Vec<String>,
    /// The node (host, or emulated node) the rank runs on: ranks of one node share memory.
    pub(super) node: usize,
    /// Network transport name and address, when the job spans several nodes.
    pub(super) net: Option<(String, SocketAddr)>,
    /// `VOLLEY_WAIT=block`: all ranks must agree.
    pub(super) block: bool,
    /// `VOLLEY_PROGRESS=thread`: this rank has a progress thread (ranks may differ).
    pub(super) thread: bool,
    /// Registered for `membarrier`: its sleepers fence for its senders (see `doorbell.rs`).
    pub(super) membarrier: bool,
}

/// Whether `blob` (a hello's payload) reads as a rank's endpoint information (fuzzing).
pub(crate) fn reads_as_endpoint_info(blob: &serde_json::Value) -> bool {
    serde_json::from_value::<EndpointInfo>(blob.clone()).is_ok()
}

/// What the exchange hands the engine: the node's regions, global ranks, doorbell orders and
/// eventfds by local index, and how to notice a rank that exits without finalizing.
pub(super) struct Wired {
    pub(super) regions: Vec<Region>,
    pub(super) local_ranks: Vec<usize>,
    pub(super) bells: Vec<Option<BellOrder>>,
    pub(super) wakes: Vec<WakeFd>,
    pub(super) watch: Watch,
}

/// How a rank learns that another has exited.
#[derive(Debug)]
pub(crate) enum Watch {
    /// Nobody to watch (a job of one rank).
    Nothing,
    /// `volley run`'s rendezvous connection, on which the launcher reports ranks that exit.
    Launcher(OwnedFd),
    /// Under a PMIx launcher: a pidfd per other rank of this node (readable once it has
    /// exited; `None` if it had exited before it could be watched); ranks of other nodes are
    /// watched by the network transport.
    Processes(Vec<(usize, Option<OwnedFd>)>),
}

/// Exchanges `info` with every rank of `job` (a job of one rank started bare has no one to
/// exchange with), checks that they agree, maps the node-mates' regions and connects `net`
/// to the ranks of other nodes.
pub(super) fn wire(
    job: &JobInfo,
    info: &EndpointInfo,
    membarrier: bool,
    own: Region,
    own_wake: WakeFd,
    net: Option<&mut Box<dyn NetTransport>>,
) -> Result<Wired> {
    let layout = info.layout;
    // How to ring a node-mate's doorbell: not at all unless it may sleep; with a compiler
    // barrier when both sides registered for membarrier, else with a fence.
    let bell = |theirs: &EndpointInfo| {
        (theirs.block || theirs.thread).then_some(if membarrier && theirs.membarrier {
            BellOrder::Barrier
        } else {
            BellOrder::Fenced
        })
    };
    let hello = rendezvous::Hello {
        rank: job.rank,
        pid: std::process::id(),
        blob: serde_json::to_value(info).expect("endpoint info serializes"),
    };
    let fds = [own.fd().as_raw_fd(), own_wake.raw()];
    let (peers, watch, path) = match &job.start {
        Start::Bare => {
            return Ok(Wired {
                regions: vec![own],
                local_ranks: vec![0],
                bells: vec![bell(info)],
                wakes: vec![own_wake],
                watch: Watch::Nothing,
            })
        }
        Start::Launcher { rendezvous: path } => {
            let (peers, conn) = rendezvous::exchange(path, job.size, &hello, fds)?;
            (peers, Watch::Launcher(conn), path.clone())
        }
        Start::Pmix { namespace } => {
            let client = pmix::client(namespace)?;
            let peers = pmix::node::exchange(&client, job, &hello, fds)?;
            (peers, Watch::Nothing, format!("PMIx namespace {namespace}"))
        }
    };
    let mut pids = Vec::new();
    let mut own = Some((own, own_wake));
    let mut regions = Vec::with_capacity(job.local_size);
    let mut local_ranks = Vec::with_capacity(job.local_size);
    let mut bells = Vec::with_capacity(job.local_size);
    let mut wakes = Vec::with_capacity(job.local_size);
    let mut addrs = vec![None; job.size];
    for peer in peers {
        let theirs: EndpointInfo =
            serde_json::from_value(peer.hello.blob.clone()).map_err(|e| {
                BootstrapError::Rendezvous {
                    path: path.clone(),
                    why: format!(
                        "rank {} sent unreadable endpoint info: {e}",
                        peer.hello.rank
                    ),
                }
            })?;
        check_agreement(job.rank, peer.hello.rank, info, &theirs)?;
        let r = peer.hello.rank;
        if theirs.node != job.node {
            // Hellos come in rank order, so local indices are ascending ranks
            // on every rank of a node alike.
            addrs[r] = Some(theirs.net.as_ref().map(|(_, a)| *a).ok_or_else(|| {
                BootstrapError::Rendezvous {
                    path: path.clone(),
                    why: format!("rank {r} is on another node but has no network"),
                }
            })?);
            continue;
        }
        local_ranks.push(r);
        bells.push(bell(&theirs));
        if r == job.rank {
            let (region, wake) = own.take().expect("own hello comes once");
            regions.push(region);
            wakes.push(wake);
        } else {
            let [region, wake] = peer.fds;
            regions.push(Region::open(region, layout, r, job.job_key)?);
            wakes.push(WakeFd::from_owned(wake));
            pids.push((r, peer.hello.pid));
        }
    }
    if regions.len() != job.local_size {
        return Err(BootstrapError::Rendezvous {
            path: path.clone(),
            why: format!(
                "{} ranks share node {} but VOLLEY_LOCAL_SIZE is {}",
                regions.len(),
                job.node,
                job.local_size
            ),
        }
        .into());
    }
    if let Some(net) = net {
        net.connect(job.rank, &addrs)
            .map_err(|e| Error::Network(e.to_string()))?;
    }
    let watch = match watch {
        Watch::Nothing if matches!(job.start, Start::Pmix { .. }) => Watch::Processes(
            pids.into_iter()
                .map(|(r, pid)| Ok((r, pidfd(pid)?)))
                .collect::<Result<_>>()?,
        ),
        w => w,
    };
    Ok(Wired {
        regions,
        local_ranks,
        bells,
        wakes,
        watch,
    })
}

/// A descriptor that becomes readable when process `pid` exits (`pidfd_open`), or `None` if
/// it has exited already.
fn pidfd(pid: u32) -> Result<Option<OwnedFd>> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ESRCH) {
            return Ok(None);
        }
        return Err(BootstrapError::os("watching a node-mate (pidfd_open)", e).into());
    }
    // SAFETY: the kernel just returned this descriptor, owned by nobody else.
    Ok(Some(unsafe {
        <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32)
    }))
}

fn check_agreement(
    me: usize,
    rank: usize,
    mine: &EndpointInfo,
    theirs: &EndpointInfo,
) -> Result<()> {
    if mine.requests != theirs.requests || mine.replies != theirs.replies {
        let table = |i: &EndpointInfo| {
            i.requests
                .iter()
                .map(|n| format!("request:{n}"))
                .chain(i.replies.iter().map(|n| format!("reply:{n}")))
                .collect()
        };
        return Err(Error::HandlerTableMismatch {
            me,
            rank,
            mine: table(mine),
            theirs: table(theirs),
        });
    }
    let (a, b) = (&mine.layout, &theirs.layout);
    // Ranks of other nodes may have other node sizes.
    let same_node = mine.node == theirs.node;
    for (name, x, y) in [
        ("VOLLEY_RING_SLOTS", a.ring_slots, b.ring_slots),
        ("VOLLEY_MEDIUM_BUFFERS", a.pool_bufs, b.pool_bufs),
        ("VOLLEY_SEGMENT_BYTES", a.segment_len, b.segment_len),
        (
            "ranks on this node",
            a.ranks,
            if same_node { b.ranks } else { a.ranks },
        ),
    ] {
        if x != y {
            return Err(Error::ConfigMismatch {
                me,
                rank,
                mine: format!("{name}={x}"),
                theirs: format!("{name}={y}"),
            });
        }
    }
    if mine.block != theirs.block {
        let mode = |b: bool| {
            if b {
                "VOLLEY_WAIT=block"
            } else {
                "VOLLEY_WAIT=spin"
            }
        };
        return Err(Error::ConfigMismatch {
            me,
            rank,
            mine: mode(mine.block).into(),
            theirs: mode(theirs.block).into(),
        });
    }
    if !same_node {
        if let (Some((x, _)), Some((y, _))) = (&mine.net, &theirs.net) {
            if x != y {
                return Err(Error::ConfigMismatch {
                    me,
                    rank,
                    mine: format!("VOLLEY_NET={x}"),
                    theirs: format!("VOLLEY_NET={y}"),
                });
            }
        }
    }
    Ok(())
}

/// Binds this rank's network transport (before the rendezvous, to publish its address).
pub(super) fn bind_network(config: &Config, job: &JobInfo) -> Result<Box<dyn NetTransport>> {
    let addr = config.net_addr()?;
    let net_err = |e: crate::transport::net::NetError| Error::Network(e.to_string());
    Ok(match config.net_kind()? {
        NetKind::Udp => {
            let mut udp = UdpConfig::default();
            udp.reliable.peer_timeout = config.peer_timeout_ns()?;
            udp.faults = config.faults()?;
            let incarnation = crate::bootstrap::random_u64() | 1;
            Box::new(UdpTransport::bind(addr, job.job_key, incarnation, udp).map_err(net_err)?)
        }
        NetKind::Tcp => {
            let tcp = TcpConfig {
                congestion: config.tcp_congestion()?,
                ..TcpConfig::default()
            };
            Box::new(TcpTransport::bind(addr, job.job_key, tcp).map_err(net_err)?)
        }
    })
}
