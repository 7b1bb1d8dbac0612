//! `volley bench msg`: the tag-matching layer (`volley-msg`) against the Active Messages under
//! it, on the same two ranks in the same job, and Open MPI's send/receive beside them.
//!
//! - round trips: 8 bytes bounced with `send` + `recv_into` (named source and tag), and a
//!   short request whose handler replies;
//! - overheads: a burst shorter than the ring, timed at the sender while the receiver does
//!   not poll (LogP o_s), then timed at the receiver as it drains the burst (o_r), per
//!   message: `send` of 8 bytes (eager) and `recv_into` against `request_short` with one
//!   argument and its handler. A message's overhead is o_s + o_r, as seed 000's Table 4-1
//!   adds them (send&receive 92 + 102 µs against 13.1 + 15.0 µs for Active Messages);
//! - one-way signals (seed 000's signal benchmark): a stream of messages whose receipt only
//!   counts, closed by one reply, per message.
//!
//! - sweeps from 8 B to 16 MiB: the tagged ping-pong (half its round trip, OSU's latency) and
//!   a one-way stream of blocking `send`s taken with `recv_into` (eager up to the eager limit,
//!   rendezvous above it, where each send waits for its pull), beside memcpy.
//!
//! Every message carries a value the receiver checks ([`PairFigures::failures`]); the
//! experiment `seed000-am-vs-sendrecv` runs the same measurements and reports them as seed
//! 000's requirement 37.

use super::loggp::{BandwidthPoint, LatencyPoint, Machine, SIZES};
use super::sweep::{sweep_iters, Curves};
use super::{median, median_curve, median_present, Medians, Reps, Transport, NETWORK_SCALE};
use serde::{Deserialize, Serialize};
use std::cell::Cell;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use volley::{ReplyHandler, RequestHandler, Runtime};
use volley_msg::{Msg, MsgSetup, ANY_SOURCE};

/// Messages per overhead burst: well inside a ring, so no send waits for room.
const BURST: usize = 16;
/// Tags of the measurements (distinct, so a stray message cannot be taken for another).
const TAG_PING: u64 = 1;
const TAG_BURST: u64 = 2;
const TAG_SIGNAL: u64 = 3;
const TAG_DONE: u64 = 4;
const TAG_SWEEP: u64 = 5;

/// One repetition's figures, rank 0's (ns).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PairFigures {
    /// 8-byte round trip with `send` and `recv_into`.
    pub tagged_rtt_ns: f64,
    /// Short request round trip (one argument).
    pub am_short_rtt_ns: f64,
    /// Sender's time per 8-byte `send` in a burst (o_s).
    pub tagged_send_overhead_ns: f64,
    /// Sender's time per short request in a burst (o_s).
    pub am_send_overhead_ns: f64,
    /// Receiver's time per 8-byte message taken with `recv_into` from a burst that is
    /// already in its rings (o_r; rank 1's figure).
    pub tagged_recv_overhead_ns: f64,
    /// Receiver's time per short request handled from a burst already in its rings (o_r).
    pub am_recv_overhead_ns: f64,
    /// One-way stream of 8-byte messages received with `recv_into`, per message.
    pub tagged_signal_ns: f64,
    /// One-way stream of short requests whose handler counts, per message.
    pub am_signal_ns: f64,
    /// 1 MiB round trip with `send` and `recv_into` (rendezvous both ways).
    #[serde(rename = "tagged_rtt_1MiB_ns", default)]
    pub tagged_rtt_1mib_ns: f64,
    /// 1 MiB round trip of a long request answered by a long reply (the payload written into
    /// each side's segment).
    #[serde(rename = "am_long_rtt_1MiB_ns", default)]
    pub am_long_rtt_1mib_ns: f64,
    /// Tagged ping-pong by size, 8 B to 16 MiB: half the round trip.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sweep_latency: Vec<LatencyPoint>,
    /// A one-way stream of blocking `send`s taken with `recv_into`, by size.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sweep_bandwidth: Vec<BandwidthPoint>,
    /// Messages checked (sent and received with the value they must carry).
    pub checked: u64,
    /// What arrived wrong (empty when everything arrived intact).
    pub failures: Vec<String>,
}

impl Medians for PairFigures {
    fn medians(reps: &[Self]) -> Self {
        let med = |f: fn(&Self) -> f64| median_present(reps.iter().map(f));
        Self {
            tagged_rtt_ns: med(|r| r.tagged_rtt_ns),
            am_short_rtt_ns: med(|r| r.am_short_rtt_ns),
            tagged_send_overhead_ns: med(|r| r.tagged_send_overhead_ns),
            am_send_overhead_ns: med(|r| r.am_send_overhead_ns),
            tagged_recv_overhead_ns: med(|r| r.tagged_recv_overhead_ns),
            am_recv_overhead_ns: med(|r| r.am_recv_overhead_ns),
            tagged_signal_ns: med(|r| r.tagged_signal_ns),
            am_signal_ns: med(|r| r.am_signal_ns),
            tagged_rtt_1mib_ns: med(|r| r.tagged_rtt_1mib_ns),
            am_long_rtt_1mib_ns: med(|r| r.am_long_rtt_1mib_ns),
            sweep_latency: median_curve(reps, |r| &r.sweep_latency),
            sweep_bandwidth: median_curve(reps, |r| &r.sweep_bandwidth),
            checked: reps.iter().map(|r| r.checked).sum(),
            failures: reps.iter().flat_map(|r| r.failures.clone()).collect(),
        }
    }
}

/// Two ranks with both layers: the Active Messages of the measurements and the tag-matching
/// layer.
pub(crate) struct Pair {
    pub(crate) rt: Runtime,
    pongs: Arc<AtomicU64>,
    /// The last value a pong carried.
    pong_value: Arc<AtomicU64>,
    sinks: Arc<AtomicU64>,
    /// Sum of the values the sink handler saw.
    sink_sum: Arc<AtomicU64>,
    ping: RequestHandler,
    ping_long: RequestHandler,
    sink: RequestHandler,
    scale: f64,
    checked: Cell<u64>,
}

fn spin_for(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

impl Pair {
    /// Builds the runtime with both layers (every rank of the job); attach the returned
    /// setup to `rt` for the tag-matching layer.
    pub(crate) fn new(scale: f64) -> Result<(Self, MsgSetup), String> {
        let pongs = Arc::new(AtomicU64::new(0));
        let pong_value = Arc::new(AtomicU64::new(0));
        let sinks = Arc::new(AtomicU64::new(0));
        let sink_sum = Arc::new(AtomicU64::new(0));
        let mut b = Runtime::builder();
        let (p, v) = (pongs.clone(), pong_value.clone());
        let pong: ReplyHandler = b.reply_handler("pong", move |m| {
            v.store(m.arg(0), Ordering::Relaxed);
            p.store(p.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        });
        let ping = b.request_handler("ping", move |m, tok| {
            tok.reply_short(pong, &[m.arg(0) + 1]).expect("reply");
        });
        // Echoes a long payload: the reply writes it into the requester's segment.
        let ping_long = b.request_handler("ping_long", move |m, tok| {
            tok.reply_long(pong, &[m.arg(0) + 1], m.payload(), 0)
                .expect("reply");
        });
        let (s, sum) = (sinks.clone(), sink_sum.clone());
        // Handlers run one at a time: plain loads and stores count exactly.
        let sink = b.request_handler("sink", move |m, _| {
            sum.store(sum.load(Ordering::Relaxed) + m.arg(0), Ordering::Relaxed);
            s.store(s.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        });
        let setup = Msg::register(&mut b).map_err(|e| e.to_string())?;
        let rt = b.build().map_err(|e| format!("joining the job: {e}"))?;
        if rt.size() != 2 {
            return Err(format!("needs 2 ranks, got {}", rt.size()));
        }
        let pair = Self {
            rt,
            pongs,
            pong_value,
            sinks,
            sink_sum,
            ping,
            ping_long,
            sink,
            scale,
            checked: Cell::new(0),
        };
        Ok((pair, setup))
    }

    fn iters(&self, n: u64) -> u64 {
        ((n as f64 * self.scale) as u64).max(10)
    }

    /// One repetition of every measurement; rank 0's figures (rank 1's are defaults).
    pub(crate) fn one_rep(&self, msg: &Msg<'_>) -> PairFigures {
        let mut f = PairFigures::default();
        let me = self.rt.rank();
        let fail = |f: &mut PairFigures, what: String| {
            if f.failures.len() < 10 {
                f.failures.push(what);
            }
        };
        let ck = |ok: bool, f: &mut PairFigures, what: &dyn Fn() -> String| {
            self.checked.set(self.checked.get() + 1);
            if !ok {
                fail(f, what());
            }
        };
        // Tagged round trip: rank 1 echoes value + 1.
        self.rt.barrier();
        let n = self.iters(20_000);
        let warm = n / 10;
        let mut buf = [0u8; 8];
        let mut t0 = Instant::now();
        for i in 0..warm + n {
            if i == warm {
                t0 = Instant::now();
            }
            if me == 0 {
                let out = i * 3 + 1;
                let r = msg
                    .send(1, TAG_PING, &out.to_le_bytes())
                    .and_then(|()| msg.recv_into(1, TAG_PING, &mut buf));
                let got = u64::from_le_bytes(buf);
                ck(r.is_ok() && got == out + 1, &mut f, &|| {
                    format!("tagged pong {i}: {r:?}, value {got}")
                });
            } else {
                let r = msg.recv_into(0, TAG_PING, &mut buf).and_then(|_| {
                    let v = u64::from_le_bytes(buf) + 1;
                    msg.send(0, TAG_PING, &v.to_le_bytes())
                });
                ck(r.is_ok(), &mut f, &|| format!("tagged ping {i}: {r:?}"));
            }
        }
        f.tagged_rtt_ns = t0.elapsed().as_nanos() as f64 / n as f64;
        // AM round trip: the ping handler replies value + 1.
        self.rt.barrier();
        if me == 0 {
            let mut t0 = Instant::now();
            for i in 0..warm + n {
                if i == warm {
                    t0 = Instant::now();
                }
                let target = self.pongs.load(Ordering::Relaxed) + 1;
                self.rt.request_short(1, self.ping, &[i]).expect("ping");
                self.rt
                    .wait_until(|| self.pongs.load(Ordering::Relaxed) >= target);
                let got = self.pong_value.load(Ordering::Relaxed);
                ck(got == i + 1, &mut f, &|| {
                    format!("AM pong {i}: value {got}")
                });
            }
            f.am_short_rtt_ns = t0.elapsed().as_nanos() as f64 / n as f64;
        }
        self.rt.barrier();
        // Overheads: bursts at a receiver that is not polling, then drained; the sender
        // times its sends, the receiver the drain.
        let bursts = self.iters(400);
        let (mut tagged_o, mut am_o) = (Vec::new(), Vec::new());
        let (mut tagged_r, mut am_r) = (Vec::new(), Vec::new());
        for b in 0..bursts {
            for am in [false, true] {
                // Read before the barrier, while no sink can be in flight: the last burst was
                // handled before this rank got here, and rank 0 sends the next only after
                // the barrier. Read after it, the count could include the start of the new
                // burst (drained by the barrier's own polls), and the wait below would never end.
                let base = self.sinks.load(Ordering::Relaxed);
                self.rt.barrier();
                if me == 0 {
                    // Let rank 1 leave the barrier first, so it does not drain the burst there.
                    spin_for(Duration::from_micros(10));
                    let t0 = Instant::now();
                    for k in 0..BURST as u64 {
                        let v = b * BURST as u64 + k;
                        if am {
                            self.rt.request_short(1, self.sink, &[v]).expect("sink");
                        } else {
                            let r = msg.send(1, TAG_BURST, &v.to_le_bytes());
                            ck(r.is_ok(), &mut f, &|| format!("burst send: {r:?}"));
                        }
                    }
                    let per = t0.elapsed().as_nanos() as f64 / BURST as f64;
                    if am { &mut am_o } else { &mut tagged_o }.push(per);
                } else {
                    // Stay off the rings while the burst is injected (it takes a few µs).
                    spin_for(Duration::from_micros(30));
                    let t0 = Instant::now();
                    let (mut got, mut errors) = ([0u64; BURST], 0);
                    if am {
                        self.rt.wait_until(|| {
                            self.sinks.load(Ordering::Relaxed) >= base + BURST as u64
                        });
                    } else {
                        for g in &mut got {
                            errors += msg.recv_into(0, TAG_BURST, &mut buf).is_err() as usize;
                            *g = u64::from_le_bytes(buf);
                        }
                    }
                    let per = t0.elapsed().as_nanos() as f64 / BURST as f64;
                    if am { &mut am_r } else { &mut tagged_r }.push(per);
                    // Checked after the clock stops: the AM sink sums its values (checked
                    // with the signals below), the tagged ones are checked here.
                    for (k, &value) in got.iter().enumerate().filter(|_| !am) {
                        let v = b * BURST as u64 + k as u64;
                        ck(errors == 0 && value == v, &mut f, &|| {
                            format!("burst message {v}: value {value}, {errors} receive errors")
                        });
                    }
                }
            }
        }
        if me == 0 {
            f.tagged_send_overhead_ns = median(&mut tagged_o);
            f.am_send_overhead_ns = median(&mut am_o);
        } else {
            f.tagged_recv_overhead_ns = median(&mut tagged_r);
            f.am_recv_overhead_ns = median(&mut am_r);
        }
        // One-way signals: a stream, then one reply once all have been received.
        let n = self.iters(50_000);
        self.rt.barrier();
        let (base, base_sum) = (
            self.sinks.load(Ordering::Relaxed),
            self.sink_sum.load(Ordering::Relaxed),
        );
        if me == 0 {
            let t0 = Instant::now();
            for i in 0..n {
                let r = msg.send(1, TAG_SIGNAL, &i.to_le_bytes());
                ck(r.is_ok(), &mut f, &|| format!("signal send: {r:?}"));
            }
            let r = msg.recv_into(ANY_SOURCE, TAG_DONE, &mut buf);
            ck(r.is_ok() && u64::from_le_bytes(buf) == n, &mut f, &|| {
                format!("signal stream end: {r:?}")
            });
            f.tagged_signal_ns = t0.elapsed().as_nanos() as f64 / n as f64;
        } else {
            let mut bad = 0;
            for i in 0..n {
                let r = msg.recv_into(0, TAG_SIGNAL, &mut buf);
                if r.is_err() || u64::from_le_bytes(buf) != i {
                    bad += 1;
                }
            }
            ck(bad == 0, &mut f, &|| format!("{bad} signals arrived wrong"));
            let r = msg.send(0, TAG_DONE, &n.to_le_bytes());
            ck(r.is_ok(), &mut f, &|| format!("signal stream end: {r:?}"));
        }
        self.rt.barrier();
        if me == 0 {
            let target = self.pongs.load(Ordering::Relaxed) + 1;
            let t0 = Instant::now();
            for i in 0..n {
                self.rt.request_short(1, self.sink, &[i]).expect("sink");
            }
            // Rings are FIFO: the ping's reply comes after every sink ran.
            self.rt.request_short(1, self.ping, &[0]).expect("ping");
            self.rt
                .wait_until(|| self.pongs.load(Ordering::Relaxed) >= target);
            f.am_signal_ns = t0.elapsed().as_nanos() as f64 / n as f64;
        }
        self.rt.barrier();
        if me == 1 {
            let count = self.sinks.load(Ordering::Relaxed) - base;
            let sum = self.sink_sum.load(Ordering::Relaxed) - base_sum;
            // Bursts counted here too: every burst sink ran before the stream began.
            ck(count == n && sum == n * (n - 1) / 2, &mut f, &|| {
                format!("AM signals: {count} handled (sum {sum}), expected {n}")
            });
        }
        self.bulk(msg, &mut f);
        f.checked = self.checked.replace(0);
        f
    }

    /// 1 MiB round trips: the tagged layer's rendezvous (by single copy on one node, pulled in
    /// 64 KiB chunks otherwise) against a long request and reply.
    fn bulk(&self, msg: &Msg<'_>, f: &mut PairFigures) {
        const MIB: usize = 1 << 20;
        let me = self.rt.rank();
        let n = self.iters(300);
        let data: Vec<u8> = (0..MIB).map(|j| (j * 7 + 3) as u8).collect();
        let mut buf = vec![0u8; MIB];
        self.rt.barrier();
        let t0 = Instant::now();
        for i in 0..n {
            let r = if me == 0 {
                msg.send(1, TAG_PING, &data)
                    .and_then(|()| msg.recv_into(1, TAG_PING, &mut buf))
                    .map(drop)
            } else {
                msg.recv_into(0, TAG_PING, &mut buf)
                    .and_then(|_| msg.send(0, TAG_PING, &buf))
            };
            let intact = r.is_ok() && (i + 1 < n || buf == data);
            self.checked.set(self.checked.get() + 1);
            if !intact && f.failures.len() < 10 {
                f.failures
                    .push(format!("1 MiB tagged round trip {i}: {r:?}"));
            }
        }
        f.tagged_rtt_1mib_ns = t0.elapsed().as_nanos() as f64 / n as f64;
        self.rt.barrier();
        if me == 0 {
            let t0 = Instant::now();
            for i in 0..n {
                let target = self.pongs.load(Ordering::Relaxed) + 1;
                self.rt
                    .request_long(1, self.ping_long, &[i], &data, 0)
                    .expect("long ping");
                self.rt
                    .wait_until(|| self.pongs.load(Ordering::Relaxed) >= target);
            }
            f.am_long_rtt_1mib_ns = t0.elapsed().as_nanos() as f64 / n as f64;
            self.rt
                .read_segment(0, &mut buf)
                .expect("reading the echoed payload");
            self.checked.set(self.checked.get() + 1);
            if buf != data && f.failures.len() < 10 {
                f.failures.push("the 1 MiB long echo differs".into());
            }
        }
        self.rt.barrier();
    }

    /// The sweeps, every size from 8 B to 16 MiB: a tagged ping-pong, and a one-way stream of
    /// blocking `send`s closed by one answer. The last message of each is checked byte by byte.
    fn sweeps(&self, msg: &Msg<'_>, f: &mut PairFigures) {
        let me = self.rt.rank();
        let max = 1usize << *SIZES.end();
        let data: Vec<u8> = (0..max).map(|j| (j * 13 + 5) as u8).collect();
        let mut buf = vec![0u8; max];
        let fail = |f: &mut PairFigures, what: String| {
            if f.failures.len() < 10 {
                f.failures.push(what);
            }
        };
        for size in SIZES.map(|p| 1usize << p) {
            let (out, into) = (&data[..size], &mut buf[..size]);
            into.fill(0);
            // Ping-pong; the first round trip warms up.
            let n = sweep_iters(self.scale, size, 10_000, 64 << 20);
            self.rt.barrier();
            let mut t0 = Instant::now();
            for i in 0..=n {
                if i == 1 {
                    t0 = Instant::now();
                }
                let r = if me == 0 {
                    msg.send(1, TAG_SWEEP, out)
                        .and_then(|()| msg.recv_into(1, TAG_SWEEP, into).map(drop))
                } else {
                    msg.recv_into(0, TAG_SWEEP, into)
                        .and_then(|_| msg.send(0, TAG_SWEEP, into))
                };
                if r.is_err() {
                    fail(f, format!("sweep ping-pong of {size} B, round {i}: {r:?}"));
                }
            }
            let rtt_ns = t0.elapsed().as_nanos() as f64 / n as f64;
            self.checked.set(self.checked.get() + 1);
            if into != out {
                fail(f, format!("sweep ping-pong of {size} B: the echo differs"));
            }
            f.sweep_latency.push(LatencyPoint {
                size,
                latency_us: rtt_ns / 2e3,
            });
            // One-way stream.
            into.fill(0);
            let n = sweep_iters(self.scale, size, 20_000, 64 << 20);
            self.rt.barrier();
            let t0 = Instant::now();
            let r = if me == 0 {
                (0..n)
                    .try_for_each(|_| msg.send(1, TAG_SWEEP, out))
                    .and_then(|()| msg.recv_into(1, TAG_DONE, &mut [0u8; 8]).map(drop))
            } else {
                (0..n)
                    .try_for_each(|_| msg.recv_into(0, TAG_SWEEP, into).map(drop))
                    .and_then(|()| msg.send(0, TAG_DONE, &n.to_le_bytes()))
            };
            let ns = t0.elapsed().as_nanos() as f64;
            self.checked.set(self.checked.get() + 1);
            if r.is_err() || (me == 1 && into != out) {
                fail(f, format!("sweep stream of {size} B: {r:?}"));
            }
            f.sweep_bandwidth.push(BandwidthPoint {
                size,
                mb_per_s: (n as usize * size) as f64 / ns * 1e3,
            });
        }
        f.checked += self.checked.replace(0);
    }

    /// Merges rank 1's figures (the receive overheads, what it checked and what arrived
    /// wrong there) into rank 0's, through the tag-matching layer.
    pub(crate) fn merge_receiver(&self, msg: &Msg<'_>, f: &mut PairFigures) -> Result<(), String> {
        const TAG_REPORT: u64 = 9;
        if self.rt.rank() == 1 {
            let text = serde_json::to_vec(&*f).map_err(|e| e.to_string())?;
            msg.send(0, TAG_REPORT, &text).map_err(|e| e.to_string())?;
        } else {
            let m = msg.recv(1, TAG_REPORT).map_err(|e| e.to_string())?;
            let r: PairFigures = serde_json::from_slice(&m.data).map_err(|e| e.to_string())?;
            f.tagged_recv_overhead_ns = r.tagged_recv_overhead_ns;
            f.am_recv_overhead_ns = r.am_recv_overhead_ns;
            f.checked += r.checked;
            f.failures
                .extend(r.failures.into_iter().map(|e| format!("rank 1: {e}")));
        }
        Ok(())
    }
}

/// The whole benchmark's results (ns; medians over the repetitions).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MsgReport {
    /// 8-byte round trip with `send` and `recv_into`.
    pub tagged_rtt_ns: f64,
    /// Short request round trip.
    pub am_short_rtt_ns: f64,
    /// A tagged message's overhead, `tagged_send_overhead_ns + tagged_recv_overhead_ns`
    /// (seed 000's "overhead": the processor time a message costs at both ends).
    pub tagged_overhead_ns: f64,
    /// An Active Message's overhead, `am_send_overhead_ns + am_recv_overhead_ns`.
    pub am_overhead_ns: f64,
    /// Sender's time per 8-byte `send` in a burst (LogP o_s).
    pub tagged_send_overhead_ns: f64,
    /// Sender's time per short request in a burst (LogP o_s).
    pub am_send_overhead_ns: f64,
    /// Receiver's time per 8-byte message drained with `recv_into` (LogP o_r).
    pub tagged_recv_overhead_ns: f64,
    /// Receiver's time per short request handled from its rings (LogP o_r).
    pub am_recv_overhead_ns: f64,
    /// One-way stream of 8-byte messages, per message.
    pub tagged_signal_ns: f64,
    /// One-way stream of short requests, per message.
    pub am_signal_ns: f64,
    /// 1 MiB round trip with `send` and `recv_into` (rendezvous, pulled).
    #[serde(rename = "tagged_rtt_1MiB_ns")]
    pub tagged_rtt_1mib_ns: f64,
    /// 1 MiB round trip of a long request and long reply.
    #[serde(rename = "am_long_rtt_1MiB_ns")]
    pub am_long_rtt_1mib_ns: f64,
    /// Open MPI's `MPI_Send`/`MPI_Recv` round trip of 8 bytes, measured in the same run right
    /// after each repetition's volley job, median (shared memory only; absent without Open
    /// MPI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mpi_sendrecv_rtt_ns: Option<f64>,
    /// Why there is no MPI figure, if there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mpi_note: Option<String>,
    /// The floor: a cache-line ping-pong between two processes (shared memory), or raw
    /// sockets (network), measured before the job.
    pub floor_ns: f64,
    /// What the floor is.
    pub floor_key: String,
    /// `tagged_overhead_ns / am_overhead_ns` (target at least 5).
    pub overhead_ratio: f64,
    /// `tagged_send_overhead_ns / am_send_overhead_ns`.
    pub send_overhead_ratio: f64,
    /// `tagged_rtt_ns / mpi_sendrecv_rtt_ns`, the median of the repetitions' own ratios, each
    /// volley job followed at once by Open MPI (target at most 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tagged_rtt_over_mpi: Option<f64>,
    /// Messages checked, and what arrived wrong.
    pub checked: u64,
    /// What arrived wrong (empty when everything arrived intact).
    pub failures: Vec<String>,
    /// shm, udp or tcp.
    pub transport: String,
    /// Repetitions.
    pub reps: usize,
    /// Iteration scale.
    pub scale: f64,
    /// The sweeps as named curves (µs and MB/s, the memcpy floor on the first), as
    /// `volley report` and `--plot` read them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub configs: Vec<Curves>,
    /// Where and when (absent in reports from before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<Machine>,
    /// Every repetition's figures.
    pub runs: Vec<PairFigures>,
}

/// Runs one rank of the benchmark; rank 0 writes every repetition to `out`.
pub fn run(out: &std::path::Path, scale: f64, reps: usize) -> Result<(), String> {
    let (pair, setup) = Pair::new(scale)?;
    let msg = setup.attach(&pair.rt).map_err(|e| e.to_string())?;
    let mut runs = Vec::new();
    for _ in 0..reps {
        let mut f = pair.one_rep(&msg);
        pair.sweeps(&msg, &mut f);
        pair.merge_receiver(&msg, &mut f)?;
        runs.push(f);
    }
    if pair.rt.rank() == 0 {
        super::write_reps(out, runs)?;
    }
    Ok(())
}

/// The floor of `transport`, measured before the job (it forks, so no thread may exist yet).
pub(crate) fn floor(
    transport: Transport,
    scale: f64,
    reps: usize,
) -> Result<(String, f64), String> {
    Ok(match transport {
        Transport::Shm => (
            "cacheline_rtt_ns".into(),
            super::floor::cacheline_rtt_ns(((200_000.0 * scale) as u64).max(1000), reps.max(3))?,
        ),
        net => {
            let kind = if net == Transport::Udp {
                super::floor::SocketFloor::Udp
            } else {
                super::floor::SocketFloor::Tcp
            };
            let iters = ((50_000.0 * scale) as u64).max(100);
            (
                format!("{}_raw_rtt_ns", net.name()),
                super::floor::socket_rtt_ns(kind, 8, iters, reps.max(3))?,
            )
        }
    })
}

/// Runs the job over `transport` beside its floor and Open MPI (shared memory). With Open MPI,
/// each repetition is a volley job followed at once by Open MPI's ping-pong, and the ratio is
/// the median of the repetitions' own ratios: this VM changes speed between seconds, so only
/// figures taken side by side compare.
pub fn bench(reps: usize, scale: f64, transport: Transport) -> Result<MsgReport, String> {
    let machine = Machine::here();
    let (floor_key, floor_ns) = floor(transport, scale, reps)?;
    let memcpy = super::sweep::memcpy_curve(reps, scale);
    let job_scale = if transport == Transport::Shm {
        scale
    } else {
        scale * NETWORK_SCALE
    };
    let mpi_iters = ((20_000.0 * scale) as u64).max(10);
    let mut runs: Reps<PairFigures> = Reps { reps: Vec::new() };
    let (mut mpis, mut ratios) = (Vec::new(), Vec::new());
    // Set once Open MPI is known not to be measured; the first repetition finds out.
    let mut mpi_note = (transport != Transport::Shm)
        .then(|| "Open MPI is measured over shared memory only".to_string());
    for _ in 0..reps.max(1) {
        let rep: Reps<PairFigures> = super::run_ranks("msg", 2, job_scale, 1, transport, &[])?;
        let tagged = rep.medians()?.tagged_rtt_ns;
        runs.reps.extend(rep.reps);
        if mpi_note.is_some() {
            continue;
        }
        match super::mpi_peer::sendrecv_rtt_ns(mpi_iters, 3) {
            Ok(Some(ns)) => {
                mpis.push(ns);
                ratios.push(tagged / ns);
            }
            Ok(None) => {
                mpi_note = Some("Open MPI is not installed (mpicc, mpirun): no MPI figure".into())
            }
            Err(e) => mpi_note = Some(format!("Open MPI failed: {e}")),
        }
    }
    let m = runs.medians()?;
    let (mpi, tagged_over_mpi) = if mpi_note.is_none() && !mpis.is_empty() {
        (
            Some(super::median(&mut mpis)),
            Some(super::median(&mut ratios)),
        )
    } else {
        (None, None)
    };
    let tagged_o = m.tagged_send_overhead_ns + m.tagged_recv_overhead_ns;
    let am_o = m.am_send_overhead_ns + m.am_recv_overhead_ns;
    Ok(MsgReport {
        tagged_rtt_ns: m.tagged_rtt_ns,
        am_short_rtt_ns: m.am_short_rtt_ns,
        tagged_overhead_ns: tagged_o,
        am_overhead_ns: am_o,
        tagged_send_overhead_ns: m.tagged_send_overhead_ns,
        am_send_overhead_ns: m.am_send_overhead_ns,
        tagged_recv_overhead_ns: m.tagged_recv_overhead_ns,
        am_recv_overhead_ns: m.am_recv_overhead_ns,
        tagged_signal_ns: m.tagged_signal_ns,
        am_signal_ns: m.am_signal_ns,
        tagged_rtt_1mib_ns: m.tagged_rtt_1mib_ns,
        am_long_rtt_1mib_ns: m.am_long_rtt_1mib_ns,
        mpi_sendrecv_rtt_ns: mpi,
        mpi_note,
        floor_ns,
        floor_key,
        overhead_ratio: tagged_o / am_o,
        send_overhead_ratio: m.tagged_send_overhead_ns / m.am_send_overhead_ns,
        tagged_rtt_over_mpi: tagged_over_mpi,
        checked: m.checked,
        failures: m.failures,
        transport: transport.name().into(),
        reps,
        scale,
        configs: vec![Curves {
            name: "tagged send/recv".into(),
            latency: m.sweep_latency,
            bandwidth: m.sweep_bandwidth,
            memcpy,
        }],
        machine: Some(machine),
        runs: runs.reps,
    })
}

/// The sweeps in the OSU micro-benchmarks' layout.
pub fn print_osu(r: &MsgReport, w: &mut dyn Write) {
    let (lat, bw) = (
        "send + recv_into ping-pong, half the round trip",
        "a stream of blocking sends",
    );
    super::sweep::print_osu("msg", lat, bw, &r.configs, w);
}

/// The sweeps as CSV.
pub fn csv(r: &MsgReport) -> String {
    super::sweep::csv(&r.configs)
}

/// The table: every figure beside the floor, tagged beside AM and Open MPI.
pub fn print_table(r: &MsgReport, w: &mut dyn Write) {
    let _ = writeln!(
        w,
        "volley bench msg: 2 ranks over {}, pinned; median of {} repetitions",
        r.transport, r.reps
    );
    let row = |w: &mut dyn Write, name: &str, v: f64, note: &str| {
        let _ = writeln!(
            w,
            "  {name:<22} {v:>10.1} ns  {:>6.2} x floor  {note}",
            v / r.floor_ns
        );
    };
    row(
        w,
        &format!("{} (floor)", r.floor_key),
        r.floor_ns,
        "measured before the job",
    );
    row(
        w,
        "tagged_rtt_ns",
        r.tagged_rtt_ns,
        "8 B send + recv_into, named source and tag",
    );
    row(
        w,
        "am_short_rtt_ns",
        r.am_short_rtt_ns,
        "short request, handler replies",
    );
    if let Some(mpi) = r.mpi_sendrecv_rtt_ns {
        row(
            w,
            "mpi_sendrecv_rtt_ns",
            mpi,
            &format!(
                "Open MPI MPI_Send + MPI_Recv, 8 B, pinned (tagged {:.2} x this, target <= 1)",
                r.tagged_rtt_ns / mpi
            ),
        );
    }
    for (key, v, note) in [
        (
            "tagged_send_overhead_ns",
            r.tagged_send_overhead_ns,
            "o_s: sender's time per 8 B send in a burst",
        ),
        (
            "tagged_recv_overhead_ns",
            r.tagged_recv_overhead_ns,
            "o_r: receiver's time per recv_into of a queued burst",
        ),
        ("tagged_overhead_ns", r.tagged_overhead_ns, "o_s + o_r"),
        (
            "am_send_overhead_ns",
            r.am_send_overhead_ns,
            "o_s: sender's time per short request in a burst",
        ),
        (
            "am_recv_overhead_ns",
            r.am_recv_overhead_ns,
            "o_r: receiver's time per handler run from a queued burst",
        ),
        ("am_overhead_ns", r.am_overhead_ns, "o_s + o_r"),
    ] {
        row(w, key, v, note);
    }
    row(
        w,
        "tagged_signal_ns",
        r.tagged_signal_ns,
        "one-way stream, per message",
    );
    row(
        w,
        "am_signal_ns",
        r.am_signal_ns,
        "one-way stream, per message",
    );
    row(
        w,
        "tagged_rtt_1MiB_ns",
        r.tagged_rtt_1mib_ns,
        &format!(
            "rendezvous both ways ({:.2} x the long AM's)",
            r.tagged_rtt_1mib_ns / r.am_long_rtt_1mib_ns
        ),
    );
    row(
        w,
        "am_long_rtt_1MiB_ns",
        r.am_long_rtt_1mib_ns,
        "long request, long reply",
    );
    let _ = writeln!(
        w,
        "  overhead (o_s + o_r): tagged / AM = {:.2}, send side alone {:.2} (seed 000: AM 5-7 x lower on the nCUBE/2, >10 x on the CM-5)",
        r.overhead_ratio, r.send_overhead_ratio
    );
    if let Some(n) = &r.mpi_note {
        let _ = writeln!(w, "  note: {n}");
    }
    let _ = writeln!(
        w,
        "  {} messages checked, {} arrived wrong",
        r.checked,
        r.failures.len()
    );
    super::sweep::print_curves("sweeps", &r.configs, w);
    for e in &r.failures {
        let _ = writeln!(w, "  FAILED: {e}");
    }
}
