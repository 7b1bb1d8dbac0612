//! `volley __agent`: one host's share of a multi-host job, started by the launcher through
//! the remote shell (see [`super::remote`]).
//!
//! The agent connects back to the launcher, proves it belongs to the job with the secret it
//! reads from its standard input (never on a command line, where `ps` would show it), serves
//! a private rendezvous for the ranks of its host and starts them exactly as the local
//! launcher does ([`super::ranks`]). It forwards its ranks' hellos, exits and hang-report
//! answers to the launcher,
//! hands its ranks the whole job's hellos and the other hosts' exit notices, and stops its
//! ranks when the launcher says so, when it is signalled, or when the launcher goes away.

use super::host_cpus;
use super::ranks::{RankPlan, RankSet};
use super::rdv::HostRendezvous;
use super::signals;
use super::wire::{decode_word, read_frame, write_frame, ToAgent, ToLauncher};
use std::ffi::OsString;
use std::io::BufRead;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use volley::bootstrap::rendezvous::Hello;
use volley::bootstrap::{
    ENV_HOST_CPUS, ENV_HOST_RANKS, ENV_JOB_ID, ENV_JOB_KEY, ENV_LOCAL_RANK, ENV_LOCAL_SIZE,
    ENV_NODE, ENV_RANK, ENV_RENDEZVOUS, ENV_SIZE,
};

/// The variable through which a rank learns the address to bind its network transport to.
pub const ENV_NET_ADDR: &str = "VOLLEY_NET_ADDR";

/// How long the agent tries to reach the launcher.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The agent's command line (written by the launcher; words marked `ENC` are encoded with
/// [`super::wire::encode_word`]).
#[derive(Debug, clap::Args)]
pub struct AgentArgs {
    /// The launcher's TCP address (ENC: an IPv6 one has brackets).
    #[arg(long)]
    launcher: String,
    /// This host's node index.
    #[arg(long)]
    node: usize,
    /// Ranks in the job.
    #[arg(long)]
    size: usize,
    /// First rank of this host.
    #[arg(long)]
    first: usize,
    /// Ranks on this host.
    #[arg(long)]
    count: usize,
    /// Job id (hex).
    #[arg(long)]
    job_id: String,
    /// Seconds between SIGTERM and SIGKILL when stopping.
    #[arg(long)]
    grace: f64,
    /// Prefix output lines with the rank.
    #[arg(long)]
    label: bool,
    /// Pin ranks to CPUs.
    #[arg(long)]
    bind: bool,
    /// Working directory of the ranks (ENC).
    #[arg(long)]
    cwd: Option<String>,
    /// `NAME=VALUE` for every rank (ENC).
    #[arg(long = "env")]
    env: Vec<String>,
    /// PROGRAM and ARGS (ENC).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<String>,
}

/// What the main loop hears from the launcher's connection.
enum FromLauncher {
    Message(ToAgent),
    Gone(String),
}

/// Sends to the launcher; frames are written whole under the lock.
#[derive(Clone)]
struct Uplink(Arc<Mutex<TcpStream>>);

impl Uplink {
    fn send(&self, msg: &ToLauncher) -> std::io::Result<()> {
        let mut s = self.0.lock().unwrap_or_else(|e| e.into_inner());
        write_frame(&mut *s, msg)
    }
}

/// Runs the agent; returns its exit status.
pub fn main(args: AgentArgs) -> u8 {
    let who = format!("volley agent (node {})", args.node);
    match run(args) {
        Ok(code) => code,
        Err(e) => {
            say!("{who}: {e}");
            1
        }
    }
}

fn run(a: AgentArgs) -> Result<u8, String> {
    let mut secret = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut secret)
        .map_err(|e| format!("reading the job's secret from standard input: {e}"))?;
    let mut words = secret.split_whitespace();
    let (token, job_key) = match (words.next(), words.next()) {
        (Some(t), Some(k)) => (t.to_string(), k.to_string()),
        _ => return Err("no job secret on standard input".into()),
    };
    let launcher: SocketAddr = decode_word(&a.launcher)?
        .to_str()
        .and_then(|w| w.parse().ok())
        .ok_or_else(|| format!("bad launcher address {:?}", a.launcher))?;
    let stream = TcpStream::connect_timeout(&launcher, CONNECT_TIMEOUT)
        .map_err(|e| format!("cannot reach the launcher at {launcher}: {e}"))?;
    let _ = stream.set_nodelay(true);
    super::remote::keepalive(&stream);
    // The address of this host on the path to the launcher: the ranks' network transports
    // bind to it, so the other hosts can reach them the way this host reached the launcher.
    let net_addr = stream
        .local_addr()
        .map_err(|e| format!("getsockname: {e}"))?
        .ip();
    let up = Uplink(Arc::new(Mutex::new(
        stream.try_clone().map_err(|e| e.to_string())?,
    )));
    up.send(&ToLauncher::Auth {
        token,
        node: a.node,
    })
    .map_err(|e| format!("sending to the launcher: {e}"))?;
    let from_launcher = listen(stream);
    match start_and_watch(&a, &job_key, net_addr, &up, &from_launcher) {
        Ok(code) => Ok(code),
        Err(e) => {
            // Tell the launcher why (it ends the job naming this host) and leave quietly.
            if up.send(&ToLauncher::Failed(e.clone())).is_ok() {
                Ok(1)
            } else {
                Err(e)
            }
        }
    }
}

/// Reads the launcher's frames on a thread.
fn listen(stream: TcpStream) -> Receiver<FromLauncher> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut r = std::io::BufReader::new(stream);
        loop {
            match read_frame::<ToAgent>(&mut r) {
                Ok(Some(m)) => {
                    if tx.send(FromLauncher::Message(m)).is_err() {
                        return;
                    }
                    signals::notify();
                }
                Ok(None) => {
                    let _ = tx.send(FromLauncher::Gone("it closed the connection".into()));
                    signals::notify();
                    return;
                }
                Err(e) => {
                    let _ = tx.send(FromLauncher::Gone(e.to_string()));
                    signals::notify();
                    return;
                }
            }
        }
    });
    rx
}

fn start_and_watch(
    a: &AgentArgs,
    job_key: &str,
    net_addr: std::net::IpAddr,
    up: &Uplink,
    from_launcher: &Receiver<FromLauncher>,
) -> Result<u8, String> {
    let decoded = |w: &String| decode_word(w);
    if let Some(cwd) = &a.cwd {
        let cwd = PathBuf::from(decoded(cwd)?);
        std::env::set_current_dir(&cwd).map_err(|e| {
            format!(
                "cannot enter the launcher's working directory {} on this host: {e}",
                cwd.display()
            )
        })?;
    }
    let program = decoded(&a.command[0])?;
    let program = super::resolve_program(&program).map_err(|e| e.to_string())?;
    let args: Vec<OsString> = a.command[1..]
        .iter()
        .map(decoded)
        .collect::<Result<_, _>>()?;
    let mut env: Vec<(OsString, OsString)> = Vec::new();
    for w in &a.env {
        let kv = decoded(w)?;
        let kv = kv.to_string_lossy();
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("bad --env {kv:?}"))?;
        env.push((k.into(), v.into()));
    }
    let ranks: Vec<usize> = (a.first..a.first + a.count).collect();
    // The rendezvous thread forwards this host's hellos and waits for the job's.
    let (job_hellos_tx, job_hellos_rx) = mpsc::channel::<Vec<Hello>>();
    let complete = {
        let up = up.clone();
        Box::new(move |mine: Vec<Hello>| {
            up.send(&ToLauncher::Hellos(mine))
                .map_err(|e| format!("forwarding hellos: {e}"))?;
            job_hellos_rx
                .recv()
                .map_err(|_| "the job stopped before every rank joined".to_string())
        })
    };
    // Several agents may share a file system (and a TMPDIR): the node keeps them apart.
    let rdv = HostRendezvous::start(
        &format!("{}-node{}", a.job_id, a.node),
        a.first..a.first + a.count,
        complete,
    )?;
    env.extend([
        (ENV_JOB_ID.into(), a.job_id.clone().into()),
        (ENV_JOB_KEY.into(), job_key.into()),
        (ENV_RENDEZVOUS.into(), rdv.socket().into()),
        (ENV_NET_ADDR.into(), net_addr.to_string().into()),
    ]);
    signals::install();
    let plan = RankPlan {
        program: &program,
        args: &args,
        label: a.label,
        bind: a.bind,
        stdin_to_first: false,
        env,
    };
    let (size, node, count, first) = (a.size, a.node, a.count, a.first);
    let mut set = RankSet::spawn(&plan, &ranks, |i| {
        vec![
            (ENV_RANK, (first + i).to_string()),
            (ENV_SIZE, size.to_string()),
            (ENV_LOCAL_RANK, i.to_string()),
            (ENV_LOCAL_SIZE, count.to_string()),
            (ENV_NODE, node.to_string()),
            (ENV_HOST_RANKS, count.to_string()),
            (ENV_HOST_CPUS, host_cpus()),
        ]
    })?;
    let grace = Duration::from_secs_f64(a.grace.clamp(0.0, 3600.0));
    let result = watch(&mut set, &rdv, up, from_launcher, job_hellos_tx);
    if result.is_err() || set.running() > 0 {
        set.stop(grace);
    }
    set.finish();
    drop(rdv);
    result
}

/// Relays between the ranks and the launcher until every rank has ended (`Ok(0)`), the
/// launcher says stop, or something fails.
fn watch(
    set: &mut RankSet,
    rdv: &HostRendezvous,
    up: &Uplink,
    from_launcher: &Receiver<FromLauncher>,
    job_hellos: Sender<Vec<Hello>>,
) -> Result<u8, String> {
    let mut job_hellos = Some(job_hellos);
    loop {
        if let Some(sig) = signals::received() {
            return Ok(128u8.saturating_add(sig as u8));
        }
        if let Some(e) = rdv.take_error() {
            return Err(format!("rendezvous failed: {e}"));
        }
        for e in set.poll()? {
            if e.status.success() {
                rdv.notify_exit(e.rank);
            }
            let report = ToLauncher::Exited {
                rank: e.rank,
                pid: e.pid,
                status: e.status,
            };
            // A launcher that cannot be told is gone: the next receive reports it.
            let _ = up.send(&report);
        }
        if set.running() == 0 {
            return Ok(0);
        }
        match signals::recv(from_launcher, super::SUPERVISE_BACKSTOP) {
            Ok(FromLauncher::Message(ToAgent::Hellos(all))) => {
                if let Some(tx) = job_hellos.take() {
                    let _ = tx.send(all);
                }
            }
            Ok(FromLauncher::Message(ToAgent::Exited(rank))) => rdv.notify_exit(rank),
            Ok(FromLauncher::Message(ToAgent::Stop)) => return Ok(0),
            Ok(FromLauncher::Message(ToAgent::Report)) => {
                let answers = super::report::ask(set.report_targets());
                let _ = up.send(&ToLauncher::Reports(answers));
            }
            Ok(FromLauncher::Gone(why)) => {
                return Err(format!("lost the launcher ({why}); stopping the ranks"))
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                return Err("lost the launcher; stopping the ranks".into())
            }
        }
    }
}
