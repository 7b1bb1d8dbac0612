//! `volley run --hosts`: jobs spread over several hosts, here network namespaces.
//!
//! Each test that needs hosts builds its own: namespaces `vlyt-<pid>-<n>-<i>`, each with a
//! veth pair whose root end sits on a bridge holding 198.18.X.1/24 (the benchmarking range,
//! RFC 2544) and whose inner end holds 198.18.X.(2+i); `lo` is up inside. The launcher runs
//! in the root namespace with `--rsh 'ip netns exec' --launcher-addr 198.18.X.1`, so every
//! byte stays on loopback and those links. The namespaces and the bridge are removed
//! afterwards, also when a test fails (a drop guard), and a test fails if a process is still
//! running in one of them. Without root or `ip`, or where namespaces cannot be made, such a
//! test prints "skipped: <why>" to stderr and passes.
//!
//! The ranks inherit the launcher's environment through `ip netns exec`, TMPDIR included, so
//! the harness's checks (no leftover files, no surviving process) cover every host.

mod common;

use common::{last_report, process_gone, stuck_report, voluntary_switches, Job};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const RDV_CHECK: &str = env!("CARGO_BIN_EXE_rdv_check");
const ROUTES: &str = env!("CARGO_BIN_EXE_routes");
const HANG: &str = env!("CARGO_BIN_EXE_hang");

/// Runs `ip ARGS`; `Err` carries its stderr.
fn ip(args: &[&str]) -> Result<String, String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run `ip`: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The remote shell that makes the namespaces hosts.
const IP_NETNS_EXEC: &str = "ip netns exec";

/// Writes an executable shell script `name` into `scratch` (a remote shell for a test).
fn script(scratch: &common::Scratch, name: &str, text: &str) -> String {
    let path = scratch.path().join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path.to_str().unwrap().to_string()
}

/// Emulated hosts: network namespaces on a bridge. Removed on drop.
struct Hosts {
    names: Vec<String>,
    /// `198.18.X`
    prefix: String,
    bridge: Option<String>,
    veths: Vec<String>,
}

impl Hosts {
    /// `n` hosts, or `None` (after printing why) where namespaces cannot be made here.
    fn new(n: usize) -> Option<Self> {
        match Self::try_new(n) {
            Ok(h) => Some(h),
            Err(why) => {
                eprintln!("skipped: {why}");
                None
            }
        }
    }

    fn try_new(n: usize) -> Result<Self, String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root (network namespaces need it)".into());
        }
        ip(&["-V"]).map_err(|e| format!("`ip` is not usable: {e}"))?;
        static N: AtomicUsize = AtomicUsize::new(0);
        let k = N.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        // A /24 of 198.18.0.0/15 no interface of this machine uses yet.
        let taken = ip(&["-4", "-o", "addr", "show"])?;
        let x = (0..200)
            .map(|i| 20 + (pid as usize + 7 * k + i) % 200)
            .find(|x| !taken.contains(&format!("198.18.{x}.")))
            .ok_or("no free 198.18.X.0/24 here")?;
        let mut hosts = Hosts {
            names: Vec::new(),
            prefix: format!("198.18.{x}"),
            bridge: None,
            veths: Vec::new(),
        };
        // Interface names have at most 15 bytes.
        let tag = format!("vy{}k{k}", pid % 100_000);
        let bridge = format!("{tag}b");
        ip(&["link", "add", &bridge, "type", "bridge"])?;
        hosts.bridge = Some(bridge.clone());
        ip(&[
            "addr",
            "add",
            &format!("{}.1/24", hosts.prefix),
            "dev",
            &bridge,
        ])?;
        ip(&["link", "set", &bridge, "up"])?;
        for i in 0..n {
            let ns = format!("vlyt-{pid}-{k}-{i}");
            ip(&["netns", "add", &ns]).map_err(|e| format!("cannot make namespaces: {e}"))?;
            hosts.names.push(ns.clone());
            let veth = format!("{tag}h{i}");
            ip(&[
                "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ])?;
            hosts.veths.push(veth.clone());
            ip(&["link", "set", &veth, "master", &bridge, "up"])?;
            let addr = format!("{}/24", hosts.addr(i));
            ip(&["-n", &ns, "addr", "add", &addr, "dev", "eth0"])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(hosts)
    }

    fn name(&self, i: usize) -> &str {
        &self.names[i]
    }

    /// Host i's address.
    fn addr(&self, i: usize) -> String {
        format!("{}.{}", self.prefix, 2 + i)
    }

    /// `run -n N --hosts ... --rsh 'ip netns exec' --launcher-addr ...` and then `rest`.
    fn run(&self, n: usize, rest: &[&str]) -> Job {
        self.run_via(IP_NETNS_EXEC, n, rest)
            .timeout(Duration::from_secs(60))
    }

    /// `run -n N` on every host, through the remote shell `rsh`, and then `rest`.
    fn run_via(&self, rsh: &str, n: usize, rest: &[&str]) -> Job {
        let mut args: Vec<String> = vec!["run".into(), "-n".into(), n.to_string()];
        args.extend(["--hosts".into(), self.names.join(",")]);
        args.extend(self.via_rsh(rsh));
        args.extend(rest.iter().map(|s| s.to_string()));
        Job::raw(args)
    }

    /// The remote shell and launcher address options.
    fn via(&self) -> Vec<String> {
        self.via_rsh(IP_NETNS_EXEC)
    }

    /// The options for remote shell `rsh` and the launcher's address on the bridge.
    fn via_rsh(&self, rsh: &str) -> Vec<String> {
        vec![
            "--rsh".into(),
            rsh.into(),
            "--launcher-addr".into(),
            format!("{}.1", self.prefix),
        ]
    }

    /// Processes running in host i's namespace.
    fn pids(&self, i: usize) -> Vec<String> {
        ip(&["netns", "pids", self.name(i)])
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_string)
            .collect()
    }

    /// Checks that no process is left in any namespace, removes everything and checks that
    /// no namespace is left.
    fn finish(self) {
        let left: Vec<(String, Vec<String>)> = (0..self.names.len())
            .map(|i| (self.names[i].clone(), self.pids(i)))
            .filter(|(_, p)| !p.is_empty())
            .collect();
        let names = self.names.clone();
        drop(self);
        assert!(
            left.is_empty(),
            "processes left in the namespaces: {left:?}"
        );
        let listed = ip(&["netns", "list"]).unwrap_or_default();
        for n in names {
            assert!(
                !listed.split_whitespace().any(|w| w == n),
                "namespace {n} is left"
            );
        }
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in &self.names {
            // Whatever a failed test left running in there goes first.
            for pid in ip(&["netns", "pids", ns])
                .unwrap_or_default()
                .split_whitespace()
            {
                if let Ok(pid) = pid.parse::<i32>() {
                    // SAFETY: plain system call.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
            // Deleting the namespace deletes its end of the veth pair, and so the pair.
            let _ = ip(&["netns", "del", ns]);
        }
        for v in &self.veths {
            let _ = ip(&["link", "del", v]);
        }
        if let Some(b) = &self.bridge {
            let _ = ip(&["link", "del", b]);
        }
    }
}

fn sorted_lines(s: &str) -> Vec<String> {
    let mut v: Vec<String> = s.lines().map(str::to_string).collect();
    v.sort();
    v
}

const IDENTITY: &str = "echo rank $VOLLEY_RANK of $VOLLEY_SIZE node $VOLLEY_NODE \
                        local $VOLLEY_LOCAL_RANK/$VOLLEY_LOCAL_SIZE host $VOLLEY_HOST_RANKS \
                        addr $VOLLEY_NET_ADDR";

#[test]
fn two_hosts_of_two_ranks_get_their_layout_and_address() {
    let Some(h) = Hosts::new(2) else { return };
    let out = h.run(4, &["/bin/sh", "-c", IDENTITY]).output();
    out.assert_success();
    let want: Vec<String> = (0..4)
        .map(|r| {
            format!(
                "rank {r} of 4 node {} local {}/2 host 2 addr {}",
                r / 2,
                r % 2,
                h.addr(r / 2)
            )
        })
        .collect();
    assert_eq!(sorted_lines(&out.stdout), want, "\n{out}");
    h.finish();
}

#[test]
fn hostfile_slots_and_idle_hosts() {
    let Some(h) = Hosts::new(3) else { return };
    let scratch = common::Scratch::new("hostfile");
    let file = scratch.path().join("hosts");
    std::fs::write(
        &file,
        format!(
            "# two hosts with slots, one spare\n{} slots=1\n\n{} slots=3  # big one\n{}\n",
            h.name(0),
            h.name(1),
            h.name(2)
        ),
    )
    .unwrap();
    let file = file.to_str().unwrap().to_string();
    let mut args = vec!["run", "-n", "4", "--hostfile", &file];
    let via = h.via();
    args.extend(via.iter().map(String::as_str));
    args.extend(["/bin/sh", "-c", IDENTITY]);
    let out = Job::raw(&args).output();
    out.assert_success();
    let host_of = [0, 1, 1, 1];
    let local = [0, 0, 1, 2];
    let size = [1, 3, 3, 3];
    let want: Vec<String> = (0..4)
        .map(|r| {
            format!(
                "rank {r} of 4 node {} local {}/{} host {} addr {}",
                host_of[r],
                local[r],
                size[r],
                size[r],
                h.addr(host_of[r])
            )
        })
        .collect();
    assert_eq!(sorted_lines(&out.stdout), want, "\n{out}");
    // More hosts than ranks: the idle hosts get no agent, the job runs.
    let out = h.run(1, &["/bin/sh", "-c", IDENTITY]).output();
    out.assert_success();
    assert_eq!(
        out.stdout,
        format!("rank 0 of 1 node 0 local 0/1 host 1 addr {}\n", h.addr(0)),
        "\n{out}"
    );
    h.finish();
}

#[test]
fn rendezvous_across_hosts_gives_every_rank_all_hellos_in_order() {
    let Some(h) = Hosts::new(2) else { return };
    // 5 ranks on 2 hosts: 3 and 2.
    let out = h.run(5, &[RDV_CHECK]).output();
    out.assert_success();
    let node = |r: usize| usize::from(r >= 3);
    let saw: Vec<String> = (0..5)
        .map(|r| format!("{r}@{}/{}", node(r), h.addr(node(r))))
        .collect();
    let saw = saw.join(" ");
    let lines = sorted_lines(&out.stdout);
    assert_eq!(lines.len(), 5, "\n{out}");
    for (r, line) in lines.iter().enumerate() {
        let (head, tail) = line.split_once(" ppid ").expect("ppid in line");
        assert_eq!(head, format!("rdv: rank {r} node {}", node(r)), "\n{out}");
        assert!(tail.ends_with(&format!(" saw {saw}")), "{line}\n{out}");
    }
    h.finish();
}

#[test]
fn exit_notices_reach_ranks_on_every_host() {
    let Some(h) = Hosts::new(2) else { return };
    // Rank 0 (first host) exits right after the rendezvous; ranks 1 (same host), 2 and 3
    // (other host) wait for the notice of it, which only the launcher can relay.
    let out = h.run(4, &[RDV_CHECK, "notices"]).output();
    out.assert_success();
    for r in 1..4 {
        out.assert_stdout_has(&[&format!("rdv: rank {r} heard that rank 0 exited")]);
    }
    h.finish();
}

#[test]
fn label_prefixes_lines_from_every_host() {
    let Some(h) = Hosts::new(2) else { return };
    let out = h
        .run(
            3,
            &[
                "--label",
                "/bin/sh",
                "-c",
                "echo out $VOLLEY_NODE; echo err $VOLLEY_NODE >&2",
            ],
        )
        .output();
    out.assert_success();
    assert_eq!(
        sorted_lines(&out.stdout),
        ["[0] out 0", "[1] out 0", "[2] out 1"],
        "\n{out}"
    );
    for l in ["[0] err 0", "[1] err 0", "[2] err 1"] {
        out.assert_stderr_has(&[l]);
    }
    h.finish();
}

/// A rank on the second host fails while the others sleep: the job ends quickly with the
/// usual message and code.
fn failing_rank_on_the_second_host(how: &str, code: i32, says: &str) {
    let Some(h) = Hosts::new(2) else { return };
    let script = format!("if [ $VOLLEY_RANK = 3 ]; then {how}; fi; sleep 30");
    // The sleeping ranks die at the SIGTERM of their agents, told to stop by the launcher;
    // with a long grace a job that ended only when the launcher gave up on its agents (grace
    // + 3 s, then SIGKILL) misses the deadline below.
    let out = h
        .run(4, &["--grace", "20", "/bin/sh", "-c", &script])
        .output();
    out.assert_code(code).assert_stderr_has(&[
        "volley run: rank 3 (pid ",
        &format!(" on host {} {says}; stopping the job", h.name(1)),
    ]);
    assert!(
        out.elapsed < Duration::from_secs(10),
        "took {:?} to end the job\n{out}",
        out.elapsed
    );
    h.finish();
}

#[test]
fn rank_exiting_7_on_the_second_host_ends_the_job() {
    failing_rank_on_the_second_host("exit 7", 7, "exited with status 7");
}

#[test]
fn rank_killed_on_the_second_host_ends_the_job() {
    failing_rank_on_the_second_host(
        "kill -9 $$",
        128 + libc::SIGKILL,
        "was killed by signal SIGKILL",
    );
}

#[test]
fn agent_joining_after_the_failure_is_stopped_too() {
    // The first host's remote shell is slow: rank 3, on the second host, has already failed
    // when its agent joins. That agent must still be told to stop (or the job would wait for
    // it until the launcher gives up, and the sleeping ranks' children could outlive it).
    let Some(h) = Hosts::new(2) else { return };
    let scratch = common::Scratch::new("slow-rsh");
    let rsh = script(
        &scratch,
        "slow-rsh",
        &format!(
            "#!/bin/sh\nif [ \"$1\" = {} ]; then sleep 1; fi\nexec ip netns exec \"$@\"\n",
            h.name(0)
        ),
    );
    let out = h
        .run_via(
            &rsh,
            4,
            &[
                "--grace",
                "20",
                "/bin/sh",
                "-c",
                // Not `exec`: each rank's sleep is a child of its shell, outside PDEATHSIG's
                // reach.
                "if [ $VOLLEY_RANK = 3 ]; then exit 7; fi; sleep 30; true",
            ],
        )
        .output();
    out.assert_code(7)
        .assert_stderr_has(&["rank 3 (pid ", "exited with status 7"]);
    assert!(
        out.elapsed < Duration::from_secs(10),
        "took {:?} to end the job\n{out}",
        out.elapsed
    );
    h.finish();
}

#[test]
fn an_ssh_style_remote_shell_keeps_every_word() {
    // ssh joins its command words with spaces and hands the line to the remote user's shell,
    // unlike `ip netns exec`, which execs the words as they are. This remote shell does what
    // ssh does, so words with spaces, quotes, `$`, globs or nothing at all must reach the rank
    // (and the job's VOLLEY_* settings its environment) unchanged.
    let Some(h) = Hosts::new(2) else { return };
    let scratch = common::Scratch::new("ssh-rsh");
    let rsh = script(
        &scratch,
        "fake-ssh",
        "#!/bin/sh\nhost=$1\nshift\nexec ip netns exec \"$host\" /bin/sh -c \"$*\"\n",
    );
    let words = [
        "two  spaces",
        "it's",
        "\"q\"",
        "$HOME",
        "*",
        "",
        "a;b|c&d",
        "x\ty",
    ];
    let setting = "one 'two' $three";
    // The line is written with one `echo`: `printf` and then `echo` would be two writes, and
    // without `--label` the launcher passes output on as it comes, so the two hosts' halves
    // could interleave.
    let mut args = vec![
        "/bin/sh",
        "-c",
        "line=$(printf '%s|' \"$VOLLEY_NODE\" \"$VOLLEY_TEST_SETTING\" \"$@\"); echo \"$line\"",
        "sh",
    ];
    args.extend(words);
    let out = h
        .run_via(&rsh, 2, &args)
        .env("VOLLEY_TEST_SETTING", setting)
        .output();
    out.assert_success();
    let want: Vec<String> = (0..2)
        .map(|node| format!("{node}|{setting}|{}|", words.join("|")))
        .collect();
    assert_eq!(sorted_lines(&out.stdout), want, "\n{out}");
    h.finish();
}

/// Starts `rdv_check hang` on 2 hosts × 2 ranks and waits until every rank has passed the
/// rendezvous; returns the job and, per rank, the pid of its parent (its host's agent).
fn start_hanging_job(h: &Hosts) -> (common::Running, Vec<u32>) {
    let mut job = h.run(4, &[RDV_CHECK, "hang"]).spawn();
    let ready = job.wait_for_lines(4, Duration::from_secs(30), |l| l.starts_with("rdv: rank "));
    let mut agents = vec![0u32; 4];
    for l in &ready {
        let word = |after: &str| -> usize {
            let rest = l.split(after).nth(1).expect("field in line");
            rest.split_whitespace().next().unwrap().parse().unwrap()
        };
        agents[word("rdv: rank ")] = word(" ppid ") as u32;
    }
    (job, agents)
}

#[test]
fn ctrl_c_to_the_launcher_stops_every_host() {
    let Some(h) = Hosts::new(2) else { return };
    let (job, agents) = start_hanging_job(&h);
    let sent = Instant::now();
    job.signal(libc::SIGINT);
    let out = job.finish();
    assert!(!out.status.success(), "interrupted job exited 0:\n{out}");
    out.assert_stderr_has(&["interrupted by SIGINT"]);
    assert!(sent.elapsed() < Duration::from_secs(15), "\n{out}");
    for pid in agents {
        assert!(process_gone(pid), "agent {pid} survived:\n{out}");
    }
    h.finish();
}

#[test]
fn agents_and_launcher_sleep_while_ranks_run() {
    // Woken by events (a rank's end, a signal, a frame from the other side), not on a timer:
    // loops that looked every 2 ms (agents) and 5 ms (launcher) switched about 250 and 100
    // times in these 500 ms. The launcher still ticks every 50 ms for its time-based checks.
    let Some(h) = Hosts::new(2) else { return };
    let (job, agents) = start_hanging_job(&h);
    let (first, second) = (agents[0], agents[2]);
    let count = || {
        [
            voluntary_switches(job.pid()),
            voluntary_switches(first),
            voluntary_switches(second),
        ]
    };
    let before = count();
    std::thread::sleep(Duration::from_millis(500));
    let after = count();
    job.signal(libc::SIGINT);
    let out = job.finish();
    let woke: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a.since(b)).collect();
    assert!(
        woke[0] < 40 && woke[1] < 25 && woke[2] < 25,
        "launcher and agents woke {woke:?} times in 500 ms with nothing to do\n{out}"
    );
    h.finish();
}

#[test]
fn killed_agent_ends_the_job_naming_its_host() {
    let Some(h) = Hosts::new(2) else { return };
    let (job, agents) = start_hanging_job(&h);
    // Ranks 2 and 3 are on the second host: their parent is its agent.
    let victim = agents[2];
    // SAFETY: plain system call on a process of our job.
    assert_eq!(unsafe { libc::kill(victim as i32, libc::SIGKILL) }, 0);
    let sent = Instant::now();
    let out = job.finish();
    assert_ne!(out.code(), Some(0), "\n{out}");
    out.assert_stderr_has(&[&format!("lost the agent on host {}", h.name(1))]);
    assert!(
        sent.elapsed() < Duration::from_secs(10),
        "took {:?}\n{out}",
        sent.elapsed()
    );
    h.finish();
}

#[test]
fn killed_launcher_takes_every_host_down() {
    let Some(h) = Hosts::new(2) else { return };
    let (job, _) = start_hanging_job(&h);
    job.signal(libc::SIGKILL);
    // The harness fails the test if any process of the job (agents, ranks: they all carry
    // its TMPDIR) outlives the launcher.
    let out = job.finish();
    assert_eq!(out.status.code(), None, "\n{out}");
    h.finish();
}

/// A bad command line: exit code 2, one line on stderr mentioning `mention`, nothing run.
fn refused(args: &[&str], mention: &str) {
    let out = Job::raw(args).timeout(Duration::from_secs(10)).output();
    out.assert_code(2);
    assert!(out.stdout.is_empty(), "something ran:\n{out}");
    let lines: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(lines.len(), 1, "expected one line for {args:?}:\n{out}");
    assert!(
        lines[0].contains(mention),
        "the error for {args:?} should mention {mention:?}: {:?}",
        lines[0]
    );
}

#[test]
fn bad_host_lists_are_refused() {
    refused(&["run", "-n", "2", "--hosts", "a,,b", "/bin/true"], "empty");
    refused(&["run", "-n", "2", "--hosts", "", "/bin/true"], "empty");
    refused(&["run", "-n", "2", "--hosts", "a,", "/bin/true"], "empty");
    let scratch = common::Scratch::new("hostfiles");
    let missing = scratch.path().join("no-such-hostfile");
    let missing = missing.to_str().unwrap();
    refused(
        &["run", "-n", "2", "--hostfile", missing, "/bin/true"],
        "no-such-hostfile",
    );
    let bad = scratch.path().join("bad");
    std::fs::write(&bad, "good-host\nother slots=two\n").unwrap();
    refused(
        &[
            "run",
            "-n",
            "2",
            "--hostfile",
            bad.to_str().unwrap(),
            "/bin/true",
        ],
        "line 2",
    );
    let empty = scratch.path().join("empty");
    std::fs::write(&empty, "# nobody\n\n").unwrap();
    refused(
        &[
            "run",
            "-n",
            "2",
            "--hostfile",
            empty.to_str().unwrap(),
            "/bin/true",
        ],
        "no host",
    );
    let small = scratch.path().join("small");
    std::fs::write(&small, "a slots=1\nb slots=1\n").unwrap();
    refused(
        &[
            "run",
            "-n",
            "3",
            "--hostfile",
            small.to_str().unwrap(),
            "/bin/true",
        ],
        "2 slots",
    );
    refused(
        &[
            "run",
            "-n",
            "2",
            "--hosts",
            "a",
            "--hostfile",
            "f",
            "/bin/true",
        ],
        "--hostfile",
    );
    refused(&["run", "-n", "2", "--rsh", "rsh", "/bin/true"], "--hosts");
    refused(
        &[
            "run",
            "-n",
            "2",
            "--hosts",
            "a",
            "--ranks-per-node",
            "1",
            "/bin/true",
        ],
        "--ranks-per-node",
    );
    refused(
        &[
            "run",
            "-n",
            "2",
            "--hosts",
            "a",
            "--launcher-addr",
            "nowhere",
            "/bin/true",
        ],
        "nowhere",
    );
}

#[test]
fn a_volley_path_a_remote_shell_would_split_is_refused() {
    // The agent is started as `RSH HOST <volley's path> __agent ...`: every word but the path
    // is encoded, so a path with a space would reach the remote shell as two words.
    let scratch = common::Scratch::new("spaced volley");
    let dir = scratch.path().join("with space");
    std::fs::create_dir(&dir).unwrap();
    let volley = dir.join("volley");
    std::fs::copy(common::launcher(), &volley).unwrap();
    let out = common::output_of_fresh_executable(
        Command::new(&volley)
            .args(["run", "-n", "2", "--hosts", "a,b", "--rsh", "/bin/true"])
            .arg(env!("CARGO_BIN_EXE_hello")),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(out.stdout.is_empty(), "something ran: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.contains("with space/volley") && stderr.contains("remote shell"),
        "the error should name the path and why: {stderr}"
    );
}

#[test]
fn unknown_host_is_a_one_line_error_naming_it() {
    let Some(h) = Hosts::new(1) else { return };
    let stranger = format!("{}-nonexistent", h.name(0));
    let mut args = vec![
        "run".to_string(),
        "-n".into(),
        "3".into(),
        "--hosts".into(),
        format!("{},{stranger}", h.name(0)),
    ];
    args.extend(h.via());
    args.extend(["/bin/sh".into(), "-c".into(), "sleep 30".into()]);
    let out = Job::raw(&args).timeout(Duration::from_secs(20)).output();
    assert_ne!(out.code(), Some(0), "\n{out}");
    let lines: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(lines.len(), 1, "expected a one-line error:\n{out}");
    assert!(
        lines[0].contains(&format!("host {stranger}")),
        "the error should name the host: {:?}",
        lines[0]
    );
    assert!(out.elapsed < Duration::from_secs(10), "\n{out}");
    h.finish();
}

/// The real runtime across hosts: every rank exchanges messages with every other, through
/// shared memory with its host-mate and through the network with the other host.
fn routes_across_two_hosts(net: &str) {
    let Some(h) = Hosts::new(2) else { return };
    let out = h
        .run(4, &[ROUTES, "2"])
        .env("VOLLEY_NET", net)
        .timeout(Duration::from_secs(180))
        .output();
    out.assert_success();
    for rank in 0..4 {
        out.assert_stdout_has(&[&format!(
            "routes: rank {rank} node {}: 400 messages through shared memory, 800 through {net}",
            rank / 2
        )]);
    }
    h.finish();
}

#[test]
fn runtime_job_across_two_hosts_over_udp_and_tcp() {
    routes_across_two_hosts("udp");
    routes_across_two_hosts("tcp");
}

#[test]
fn an_ipv6_launcher_address_reaches_the_agents() {
    // Two "hosts" that are this one, reached by a remote shell that runs the command here;
    // the agents connect back to the launcher over IPv6 loopback, and the ranks' network
    // transports (one rank per node) talk over it too.
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("skipped: no IPv6 loopback here");
        return;
    }
    let scratch = common::Scratch::new("ipv6-rsh");
    let rsh = script(&scratch, "here", "#!/bin/sh\nshift\nexec \"$@\"\n");
    let out = Job::raw([
        "run",
        "-n",
        "2",
        "--hosts",
        "localhost,localhost",
        "--rsh",
        &rsh,
        "--launcher-addr",
        "::1",
        env!("CARGO_BIN_EXE_fetch_add_check"),
        "200",
    ])
    .output();
    out.assert_success();
}

#[test]
fn a_hang_report_gathers_the_ranks_of_every_host() {
    let Some(h) = Hosts::new(2) else { return };
    // Ranks 0-1 on host 0, 2-3 on host 1: rank 0 waits for a reply from rank 1 (same host),
    // which never comes; the report comes through the launcher's own ranks' agent and the
    // other host's alike.
    let mut job = h.run(4, &[HANG, "no-reply"]).spawn();
    job.wait_for_lines(4, Duration::from_secs(30), |l| {
        l.starts_with("hang: rank ") && l.ends_with(" ready")
    });
    // A rank prints "ready" just before it starts waiting, so a report taken at once may
    // catch one of them in between: ask again until every rank is in its wait.
    let waiting = |report: &str, rank: usize| {
        let host = h.name(rank / 2);
        report.lines().any(|l| {
            l.split_whitespace().next() == Some(&rank.to_string())
                && l.contains("waiting in wait_until")
                && l.contains(&format!("(host {host})"))
        })
    };
    let mut all = stuck_report(&mut job, true);
    let mut stderr = last_report(&all).expect("a complete report");
    for _ in 0..4 {
        if (0..4).all(|rank| waiting(&stderr, rank)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
        let before = all.matches(common::HANG_REPORT).count();
        job.signal(libc::SIGUSR1);
        all = job.wait_for_stderr(Duration::from_secs(60), |s| {
            s.matches(common::HANG_REPORT).count() > before && last_report(s).is_some()
        });
        stderr = last_report(&all).expect("a complete report");
    }
    assert!(job.alive(), "the job ended after the report:\n{stderr}");
    job.signal(libc::SIGTERM);
    let _ = job.finish();
    for rank in 0..4 {
        assert!(
            waiting(&stderr, rank),
            "rank {rank} on {}:\n{stderr}",
            h.name(rank / 2)
        );
    }
    assert!(
        stderr.contains("rank 0 waits for a reply from rank 1 (rank 1 handled its 1 requests"),
        "{stderr}"
    );
    h.finish();
}
