//! `volley run --hosts ...`: the launcher of a job spread over several hosts.
//!
//! The launcher listens on TCP and starts one agent ([`super::agent`]) per host that gets
//! ranks, as `RSH... HOST /abs/path/to/volley __agent ARGS` (the same `volley` executable:
//! a shared file system is assumed, as for the program). The agent's arguments say where the
//! launcher listens, which node and ranks are its, and what to run; the one-time token that
//! admits it to the job travels on the remote shell's standard input. The launcher gathers
//! every rank's hello from the agents, sends each agent the whole list, relays exit notices
//! between hosts, and judges the job from the exits the agents report, with the same messages
//! and exit codes as a local job (naming the host).

use super::hosts::{self, Host};
use super::report::{RankAnswer, ReportClock, ANSWER_WITHIN};
use super::signals;
use super::status::{JobWatch, RankExit};
use super::wire::{
    encode_word, is_plain_word, read_frame, read_frame_up_to, write_frame, ToAgent, ToLauncher,
    MAX_AUTH_FRAME,
};
use super::{resolve_program, LaunchError, LaunchOptions};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream};
use std::ops::Range;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStderr, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use volley::bootstrap::rendezvous::Hello;

/// How long an agent may take to connect back (a remote shell may be slow to log in).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a connection may take to authenticate.
const AUTH_TIMEOUT: Duration = Duration::from_secs(10);
/// How long after its remote shell ended an agent's last reports may still be in flight.
const LAST_WORDS: Duration = Duration::from_secs(3);
/// How often the launcher's loop looks at the time-based checks (an agent that never
/// connected, a shell that ended without its agent) when no event wakes it.
const REMOTE_TICK: Duration = Duration::from_millis(50);

/// Where the ranks run and how to get there.
#[derive(Debug, Clone)]
pub struct HostOptions {
    /// The hosts, in node order.
    pub hosts: Vec<Host>,
    /// The remote shell command, split on whitespace; the host name follows it.
    pub rsh: String,
    /// The address agents connect back to (default: see [`default_addr`]).
    pub launcher_addr: Option<IpAddr>,
}

/// The launcher's address when none is given: 127.0.0.1 if every host is a local name,
/// else the first IPv4 address of an interface that is up and not loopback (then the first
/// such global IPv6 address, then 127.0.0.1).
pub fn default_addr(hosts: &[Host]) -> IpAddr {
    let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
    if hosts.iter().all(|h| hosts::is_local_name(&h.name)) {
        return loopback;
    }
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return loopback;
    };
    let mut v6 = None;
    for ifa in addrs {
        use nix::net::if_::InterfaceFlags as F;
        if !ifa.flags.contains(F::IFF_UP) || ifa.flags.contains(F::IFF_LOOPBACK) {
            continue;
        }
        let Some(a) = ifa.address else { continue };
        if let Some(sin) = a.as_sockaddr_in() {
            return IpAddr::V4(sin.ip());
        }
        if let Some(sin6) = a.as_sockaddr_in6() {
            let ip = sin6.ip();
            // Link-local addresses need a scope to be reached: skip them.
            if v6.is_none() && (ip.segments()[0] & 0xffc0) != 0xfe80 {
                v6 = Some(IpAddr::V6(ip));
            }
        }
    }
    v6.unwrap_or(loopback)
}

/// TCP keepalive, so that a host that vanishes without closing (power loss, cable) is
/// noticed within about half a minute by the other side.
pub fn keepalive(s: &TcpStream) {
    use nix::sys::socket::{setsockopt, sockopt};
    let _ = setsockopt(s, sockopt::KeepAlive, &true);
    let _ = setsockopt(s, sockopt::TcpKeepIdle, &10);
    let _ = setsockopt(s, sockopt::TcpKeepInterval, &5);
    let _ = setsockopt(s, sockopt::TcpKeepCount, &3);
}

/// What the launcher's threads tell its main loop.
enum Event {
    /// A connection proved it belongs to the job.
    Joined {
        conn: u64,
        node: usize,
        stream: TcpStream,
    },
    /// A frame from an admitted connection.
    Said { conn: u64, msg: ToLauncher },
    /// An admitted connection ended.
    Closed { conn: u64, why: String },
}

/// An agent's standard error: held back until the agent has connected (so that a remote
/// shell that fails, say for an unknown host, makes a one-line error of the launcher's), then
/// copied to the launcher's standard error as it comes (the agent's and its ranks' output).
#[derive(Clone)]
struct StderrGate(Arc<(Mutex<Gate>, Condvar)>);

#[derive(Default)]
struct Gate {
    open: bool,
    held: Vec<u8>,
    ended: bool,
}

impl StderrGate {
    fn start(mut from: ChildStderr) -> Self {
        let gate = StderrGate(Arc::default());
        let g = gate.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            loop {
                let n = match from.read(&mut buf) {
                    Ok(0) | Err(_) => 0,
                    Ok(n) => n,
                };
                let (lock, cv) = &*g.0;
                let mut st = lock.lock().unwrap_or_else(|e| e.into_inner());
                if n == 0 {
                    st.ended = true;
                    cv.notify_all();
                    return;
                }
                if st.open {
                    let _ = std::io::stderr().lock().write_all(&buf[..n]);
                } else if st.held.len() < 64 << 10 {
                    st.held.extend_from_slice(&buf[..n]);
                }
            }
        });
        gate
    }

    /// From now on, copy everything (and what was held back) to our standard error.
    fn open(&self) {
        let mut st = self.0 .0.lock().unwrap_or_else(|e| e.into_inner());
        let _ = std::io::stderr().lock().write_all(&st.held);
        st.held.clear();
        st.open = true;
    }

    /// What was held back, as one line, once the stream has ended (or after `wait`).
    fn held_line(&self, wait: Duration) -> String {
        let (lock, cv) = &*self.0;
        let st = lock.lock().unwrap_or_else(|e| e.into_inner());
        let (st, _) = cv
            .wait_timeout_while(st, wait, |st| !st.ended)
            .unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&st.held)
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// One host's agent as the launcher sees it.
struct Agent {
    host: String,
    node: usize,
    ranks: Range<usize>,
    /// The remote shell (for `ip netns exec`, the agent itself).
    child: Child,
    rsh_status: Option<(ExitStatus, Instant)>,
    stderr: StderrGate,
    /// The admitted connection and its writer.
    conn: Option<(u64, TcpStream)>,
    /// Ranks whose end it has reported.
    reported: usize,
    sent_hellos: bool,
}

impl Agent {
    fn place(&self) -> String {
        format!(" on host {}", self.host)
    }

    fn send(&mut self, msg: &ToAgent) {
        if let Some((_, s)) = &mut self.conn {
            // A failed send means the agent is gone: its connection's end reports that.
            let _ = write_frame(s, msg);
        }
    }

    fn finished(&self) -> bool {
        self.reported == self.ranks.len()
    }
}

/// The agents of a job; whatever path the launcher leaves by, their remote shells go.
struct Agents {
    list: Vec<Agent>,
    pgid: Option<Pid>,
}

impl Agents {
    fn by_conn(&mut self, conn: u64) -> Option<&mut Agent> {
        self.list
            .iter_mut()
            .find(|a| a.conn.as_ref().is_some_and(|(c, _)| *c == conn))
    }

    fn broadcast(&mut self, msg: &ToAgent, except: Option<usize>) {
        for a in self.list.iter_mut().filter(|a| Some(a.node) != except) {
            a.send(msg);
        }
    }

    fn reap(&mut self) {
        for a in &mut self.list {
            if a.rsh_status.is_none() {
                if let Ok(Some(s)) = a.child.try_wait() {
                    a.rsh_status = Some((s, Instant::now()));
                }
            }
        }
    }

    /// Waits up to `limit` for every remote shell to end.
    fn wait_all(&mut self, limit: Duration) {
        let until = Instant::now() + limit;
        loop {
            self.reap();
            if self.list.iter().all(|a| a.rsh_status.is_some()) || Instant::now() >= until {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Agents {
    fn drop(&mut self) {
        if let Some(g) = self.pgid {
            // An agent still there gets a moment to stop its ranks' whole process group (a
            // rank's own children are beyond PR_SET_PDEATHSIG's reach), then goes anyway.
            self.reap();
            if self.list.iter().any(|a| a.rsh_status.is_none()) {
                let _ = killpg(g, Signal::SIGTERM);
                self.wait_all(Duration::from_secs(1));
            }
            let _ = killpg(g, Signal::SIGKILL);
        }
        for a in &mut self.list {
            let _ = a.child.wait();
        }
    }
}

/// Runs a job on several hosts; returns the launcher's exit code like [`super::launch`].
pub fn launch_hosts(opts: &LaunchOptions, h: &HostOptions) -> Result<i32, LaunchError> {
    super::check_rank_count(opts.ranks)?;
    let setup = LaunchError::Setup;
    let cwd = std::env::current_dir().map_err(|e| setup(format!("current directory: {e}")))?;
    // Resolved here (a shared file system is assumed) for a prompt error, and made absolute so
    // that it means the same on every host.
    let program = cwd.join(resolve_program(&opts.program)?);
    let placement = hosts::place(opts.ranks, &h.hosts).map_err(setup)?;
    let rsh: Vec<&str> = h.rsh.split_whitespace().collect();
    if rsh.is_empty() {
        return Err(setup("--rsh is empty".into()));
    }
    let volley = std::env::current_exe()
        .map_err(|e| setup(format!("cannot find the volley executable: {e}")))?;
    // The one word of the agent's command line that cannot be encoded (it is the program the
    // remote side starts): a remote shell would split or expand anything but plain bytes.
    if !is_plain_word(volley.as_os_str()) {
        return Err(setup(format!(
            "the volley executable's path {volley:?} has characters a remote shell would split \
             or expand; for jobs on several hosts run volley from a path of letters, digits and \
             _./:=,@+- only"
        )));
    }
    let addr = h.launcher_addr.unwrap_or_else(|| default_addr(&h.hosts));
    let listener = TcpListener::bind((addr, 0)).map_err(|e| {
        setup(format!(
            "cannot listen on {addr}: {e} (choose an address of this host with --launcher-addr)"
        ))
    })?;
    let listen_at = listener
        .local_addr()
        .map_err(|e| setup(format!("getsockname: {e}")))?;
    let token = format!(
        "{:016x}{:016x}",
        volley::bootstrap::random_u64(),
        volley::bootstrap::random_u64()
    );
    let job_id = volley::bootstrap::random_u64();
    let job_key = volley::bootstrap::random_u64() | 1;
    signals::install();
    let (events_tx, events) = mpsc::channel();
    accept_agents(listener, token.clone(), events_tx);

    // The job's settings reach every host: its VOLLEY_* variables (except the identity the
    // agents set, and the network address, which is per host) and the ones given to us.
    let identity = [
        "VOLLEY_RANK",
        "VOLLEY_SIZE",
        "VOLLEY_LOCAL_RANK",
        "VOLLEY_LOCAL_SIZE",
        "VOLLEY_NODE",
        "VOLLEY_HOST_RANKS",
        "VOLLEY_JOB_ID",
        "VOLLEY_JOB_KEY",
        "VOLLEY_RENDEZVOUS",
        super::agent::ENV_NET_ADDR,
    ];
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| {
            let k = k.to_string_lossy();
            k.starts_with("VOLLEY_") && !identity.contains(&k.as_ref())
        })
        .collect();
    env.extend(opts.env.iter().cloned());

    let mut agents = Agents {
        list: Vec::new(),
        pgid: None,
    };
    let launcher_pid = std::process::id() as libc::pid_t;
    for (node, (host, ranks)) in h.hosts.iter().zip(&placement).enumerate() {
        // A host without ranks gets no agent.
        if ranks.is_empty() {
            continue;
        }
        let mut cmd = Command::new(rsh[0]);
        cmd.args(&rsh[1..])
            .arg(&host.name)
            .arg(&volley)
            .arg("__agent");
        let mut word = |w: &OsStr| {
            cmd.arg(encode_word(w));
        };
        for (k, v) in [
            ("--launcher", listen_at.to_string()),
            ("--node", node.to_string()),
            ("--size", opts.ranks.to_string()),
            ("--first", ranks.start.to_string()),
            ("--count", ranks.len().to_string()),
            ("--job-id", format!("{job_id:016x}")),
            ("--grace", opts.grace.as_secs_f64().to_string()),
        ] {
            word(OsStr::new(k));
            word(OsStr::new(&v));
        }
        if opts.label {
            word(OsStr::new("--label"));
        }
        if opts.bind {
            word(OsStr::new("--bind"));
        }
        word(OsStr::new("--cwd"));
        word(cwd.as_os_str());
        for (k, v) in &env {
            let mut kv = k.clone();
            kv.push("=");
            kv.push(v);
            word(OsStr::new("--env"));
            word(&kv);
        }
        word(OsStr::new("--"));
        word(program.as_os_str());
        for a in &opts.args {
            word(a);
        }
        cmd.stdin(Stdio::piped())
            .stderr(Stdio::piped())
            // Away from the terminal's process group: Ctrl-C reaches the launcher alone,
            // which then stops the job in order.
            .process_group(agents.pgid.map_or(0, |p| p.as_raw()));
        // SAFETY: the closure runs in the child between fork and exec and only makes
        // async-signal-safe system calls (prctl, getppid).
        unsafe {
            cmd.pre_exec(move || {
                // A remote shell that execs the agent (`ip netns exec`) passes this on to it.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::getppid() != launcher_pid {
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().map_err(|e| {
            setup(format!(
                "cannot start the remote shell `{}` for host {}: {e}",
                h.rsh, host.name
            ))
        })?;
        if agents.pgid.is_none() {
            agents.pgid = Some(Pid::from_raw(child.id() as i32));
        }
        if let Some(mut stdin) = child.stdin.take() {
            // The secret, off every command line. A shell that already failed cannot take it:
            // its exit tells the story.
            let _ = writeln!(stdin, "{token} {job_key:016x}");
        }
        let stderr = StderrGate::start(child.stderr.take().expect("piped stderr"));
        agents.list.push(Agent {
            host: host.name.clone(),
            node,
            ranks: ranks.clone(),
            child,
            rsh_status: None,
            stderr,
            conn: None,
            reported: 0,
            sent_hellos: false,
        });
    }
    let mut clock = super::report::ReportClock::new(opts.hang_report_after);
    let code = match supervise(opts.ranks, &mut agents, &events, &h.rsh, &mut clock) {
        Ok(()) => {
            // Every rank has ended: the agents are leaving.
            agents.wait_all(Duration::from_secs(5));
            0
        }
        Err(code) => {
            stop_agents(&mut agents, &events, opts.grace + Duration::from_secs(3));
            code
        }
    };
    drop(agents);
    Ok(code)
}

/// Tells every agent to stop its ranks, also those that join only now (their remote shell was
/// slower than the failure), and waits up to `limit` for the remote shells to end.
fn stop_agents(agents: &mut Agents, events: &Receiver<Event>, limit: Duration) {
    agents.broadcast(&ToAgent::Stop, None);
    let until = Instant::now() + limit;
    loop {
        agents.reap();
        if agents.list.iter().all(|a| a.rsh_status.is_some()) || Instant::now() >= until {
            return;
        }
        if let Ok(Event::Joined { conn, node, stream }) =
            events.recv_timeout(Duration::from_millis(5))
        {
            if let Some(a) = agents
                .list
                .iter_mut()
                .find(|a| a.node == node && a.conn.is_none())
            {
                a.conn = Some((conn, stream));
                a.stderr.open();
                a.send(&ToAgent::Stop);
            }
        }
    }
}

/// Admits connections that present the token, on threads; each admitted connection's frames
/// become events.
fn accept_agents(listener: TcpListener, token: String, events: Sender<Event>) {
    std::thread::spawn(move || {
        for (conn, stream) in (1u64..).zip(listener.incoming()) {
            let Ok(stream) = stream else { continue };
            let (token, events) = (token.clone(), events.clone());
            std::thread::spawn(move || serve_conn(conn, stream, &token, &events));
        }
    });
}

fn serve_conn(conn: u64, stream: TcpStream, token: &str, events: &Sender<Event>) {
    let peer = stream
        .peer_addr()
        .map_or_else(|_| "?".to_string(), |a| a.to_string());
    let _ = stream.set_nodelay(true);
    keepalive(&stream);
    let _ = stream.set_read_timeout(Some(AUTH_TIMEOUT));
    let mut r = std::io::BufReader::new(match stream.try_clone() {
        Ok(s) => s,
        Err(_) => return,
    });
    let node = match read_frame_up_to::<ToLauncher>(&mut r, MAX_AUTH_FRAME) {
        Ok(Some(ToLauncher::Auth { token: t, node }))
            if t.len() == token.len()
                // Compared in full whatever the first difference, so timing tells nothing.
                && t.bytes().zip(token.bytes()).fold(0, |d, (a, b)| d | (a ^ b)) == 0 =>
        {
            node
        }
        _ => {
            say!("volley run: refused a connection from {peer}: not an agent of this job");
            return;
        }
    };
    let _ = stream.set_read_timeout(None);
    // Sends to a stuck agent must not hang the launcher.
    let _ = stream.set_write_timeout(Some(Duration::from_secs(10)));
    if events.send(Event::Joined { conn, node, stream }).is_err() {
        return;
    }
    signals::notify();
    loop {
        match read_frame::<ToLauncher>(&mut r) {
            Ok(Some(msg)) => {
                if events.send(Event::Said { conn, msg }).is_err() {
                    return;
                }
                signals::notify();
            }
            Ok(None) => {
                let _ = events.send(Event::Closed {
                    conn,
                    why: "the connection closed".into(),
                });
                signals::notify();
                return;
            }
            Err(e) => {
                let _ = events.send(Event::Closed {
                    conn,
                    why: e.to_string(),
                });
                signals::notify();
                return;
            }
        }
    }
}

/// The launcher's view of the job.
struct JobState {
    n: usize,
    watch: JobWatch,
    hellos: Vec<Option<Hello>>,
    /// Hellos received from the agents.
    arrived: usize,
    /// A hang report being gathered from the agents.
    report: Option<Gathering>,
}

/// A hang report the launcher is gathering: the agents asked that have not answered yet (by
/// node), the answers so far (with their host), and when it was asked.
struct Gathering {
    waiting: Vec<usize>,
    answers: Vec<(RankAnswer, String)>,
    asked: Instant,
}

impl Gathering {
    /// Asks every connected agent for its ranks' answers.
    fn start(agents: &mut Agents) -> Self {
        agents.broadcast(&ToAgent::Report, None);
        Self {
            waiting: agents
                .list
                .iter()
                .filter(|a| a.conn.is_some())
                .map(|a| a.node)
                .collect(),
            answers: Vec::new(),
            asked: Instant::now(),
        }
    }

    /// Whether every agent answered, or the time for answers is over.
    fn complete(&self) -> bool {
        self.waiting.is_empty() || self.asked.elapsed() > ANSWER_WITHIN + Duration::from_secs(1)
    }

    /// The answers, with every rank of an agent that did not answer said to be silent.
    fn finish(mut self, agents: &Agents) -> Vec<(RankAnswer, String)> {
        for a in agents
            .list
            .iter()
            .filter(|a| self.waiting.contains(&a.node))
        {
            for rank in a.ranks.clone() {
                let answer = Err("did not answer: its host's agent did not".to_string());
                self.answers
                    .push((RankAnswer { rank, answer }, a.host.clone()));
            }
        }
        self.answers
    }
}

/// Handles one event; `Err(exit code)` stops the job (the reason already printed).
fn on_event(ev: Event, agents: &mut Agents, job: &mut JobState) -> Result<(), i32> {
    match ev {
        Event::Joined { conn, node, stream } => {
            match agents
                .list
                .iter_mut()
                .find(|a| a.node == node && a.conn.is_none())
            {
                Some(a) => {
                    a.conn = Some((conn, stream));
                    a.stderr.open();
                }
                None => {
                    say!("volley run: refused a second agent for node {node}");
                    let _ = stream.shutdown(std::net::Shutdown::Both);
                }
            }
        }
        Event::Said { conn, msg } => {
            let Some(a) = agents.by_conn(conn) else {
                return Ok(());
            };
            match msg {
                ToLauncher::Auth { .. } => {}
                ToLauncher::Hellos(list) => {
                    let expected: Vec<usize> = a.ranks.clone().collect();
                    let got: Vec<usize> = list.iter().map(|h| h.rank).collect();
                    if a.sent_hellos || got != expected {
                        say!(
                            "volley run: the agent on host {} sent hellos of ranks {got:?}, \
                             expected {expected:?}; stopping the job",
                            a.host
                        );
                        return Err(1);
                    }
                    a.sent_hellos = true;
                    for hello in list {
                        let r = hello.rank;
                        job.hellos[r] = Some(hello);
                    }
                    job.arrived += expected.len();
                    if job.arrived == job.n {
                        let all: Vec<Hello> =
                            job.hellos.iter_mut().flat_map(Option::take).collect();
                        agents.broadcast(&ToAgent::Hellos(all), None);
                    }
                }
                ToLauncher::Exited { rank, pid, status } => {
                    if !a.ranks.contains(&rank) {
                        say!(
                            "volley run: the agent on host {} reported rank {rank}, not one \
                             of its ranks; stopping the job",
                            a.host
                        );
                        return Err(1);
                    }
                    a.reported += 1;
                    let (place, node) = (a.place(), a.node);
                    job.watch.exited(
                        RankExit { rank, pid, status },
                        &place,
                        job.arrived >= job.n,
                    )?;
                    agents.broadcast(&ToAgent::Exited(rank), Some(node));
                }
                ToLauncher::Failed(why) => {
                    say!("volley run: host {}: {why}; stopping the job", a.host);
                    return Err(1);
                }
                ToLauncher::Reports(list) => {
                    if let Some(g) = &mut job.report {
                        if let Some(i) = g.waiting.iter().position(|&n| n == a.node) {
                            g.waiting.swap_remove(i);
                            let host = a.host.clone();
                            g.answers.extend(
                                list.into_iter()
                                    .filter(|r| a.ranks.contains(&r.rank))
                                    .map(|r| (r, host.clone())),
                            );
                        }
                    }
                }
            }
        }
        Event::Closed { conn, why } => {
            if let Some(a) = agents.by_conn(conn) {
                if !a.finished() {
                    say!(
                        "volley run: lost the agent on host {} (node {}, ranks {}..{}): \
                         {why}; stopping the job",
                        a.host,
                        a.node,
                        a.ranks.start,
                        a.ranks.end - 1
                    );
                    return Err(1);
                }
                a.conn = None;
            }
        }
    }
    Ok(())
}

/// Runs the job until every rank has exited 0 (`Ok`) or it must stop (`Err(exit code)`, the
/// reason already printed).
fn supervise(
    n: usize,
    agents: &mut Agents,
    events: &Receiver<Event>,
    rsh: &str,
    clock: &mut ReportClock,
) -> Result<(), i32> {
    let started = Instant::now();
    let mut job = JobState {
        n,
        watch: JobWatch::new(n),
        hellos: vec![None; n],
        arrived: 0,
        report: None,
    };
    loop {
        if let Some(sig) = signals::received() {
            return Err(job.watch.interrupted(sig));
        }
        if clock.due() && job.report.is_none() {
            job.report = Some(Gathering::start(agents));
        }
        if job.report.as_ref().is_some_and(Gathering::complete) {
            if let Some(g) = job.report.take() {
                super::report::print(n, g.finish(agents), clock);
            }
        }
        // Everything pending is handled before the remote shells' ends are judged: an agent
        // that joined, reported and left in a hurry has its reports here already.
        // Events and the remote shells' ends wake this at once; the tick serves the checks
        // below that wait for time to pass.
        let mut next = signals::recv(events, clock.bound(REMOTE_TICK));
        loop {
            match next {
                Ok(ev) => on_event(ev, agents, &mut job)?,
                // The accepting thread never ends while we hold the receiver.
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
            }
            next = events.try_recv().map_err(|_| RecvTimeoutError::Timeout);
        }
        let (watch, arrived) = (&job.watch, job.arrived);
        watch.check_stranded(arrived)?;
        if watch.all_done() {
            return Ok(());
        }
        agents.reap();
        for a in &agents.list {
            let Some((status, when)) = a.rsh_status else {
                if a.conn.is_none() && !a.finished() && started.elapsed() > CONNECT_TIMEOUT {
                    say!(
                        "volley run: the agent on host {} did not connect back within {:?} \
                         (can it reach this host's address? see --launcher-addr)",
                        a.host,
                        CONNECT_TIMEOUT
                    );
                    return Err(2);
                }
                continue;
            };
            if a.finished() {
                continue;
            }
            // A shell that ended without its agent ever joining failed to start it (give the
            // agent's connection a moment to be admitted first).
            let never_joined = a.conn.is_none() && a.reported == 0 && !a.sent_hellos;
            if never_joined && when.elapsed() > Duration::from_millis(300) {
                let said = a.stderr.held_line(Duration::from_secs(1));
                let said = if said.is_empty() {
                    String::new()
                } else {
                    format!(": {said}")
                };
                say!(
                    "volley run: cannot start the agent on host {}{said} (`{rsh} {}` {})",
                    a.host,
                    a.host,
                    super::status::RankStatus::from(status).describe().replacen(
                        "was killed",
                        "killed",
                        1
                    )
                );
                return Err(2);
            }
            // Its last reports may still be on their way; past that, it is gone.
            if when.elapsed() > LAST_WORDS {
                say!(
                    "volley run: the agent on host {} ended ({}) with ranks still running; \
                     stopping the job",
                    a.host,
                    super::status::RankStatus::from(status).describe()
                );
                return Err(1);
            }
        }
    }
}
