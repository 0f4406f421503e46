//! One simulated run: a scenario, a fleet of N sidecars under one policy, a virtual clock.
//!
//! Requests arrive as one Poisson stream for the whole cluster (the cluster's request rate is
//! fixed; N only divides it among more sidecars, so the cost of a run does not grow with N),
//! each from a sidecar drawn at random, with an exponentially distributed size. Events are
//! processed in time order: an arrival is routed and queued at its leader; the leader's write
//! queues the followers' writes; the last of those answers the sidecar.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::cluster::{Cluster, Shape, oracle_split};
use crate::fleet::{Common, Phases, Policy, Sidecar};

/// When brokers run below their capacity.
#[derive(Debug, Clone)]
pub enum Pattern {
    /// Fixed capacity factors, one per broker.
    Fixed(Vec<f64>),
    /// `broker` runs at `factor` from `at` until `until`.
    Drop {
        broker: usize,
        at: f64,
        until: f64,
        factor: f64,
    },
    /// `broker` alternates between full capacity and `factor`, `period` seconds a cycle,
    /// from `from` on.
    Square {
        broker: usize,
        period: f64,
        factor: f64,
        from: f64,
    },
    /// Every broker in `brokers` runs at `factor` from `at` until `until`.
    DropMany {
        brokers: Vec<usize>,
        at: f64,
        until: f64,
        factor: f64,
    },
}

impl Pattern {
    pub fn factor(&self, b: usize, t: f64) -> f64 {
        match self {
            Pattern::Fixed(f) => f[b],
            Pattern::Drop {
                broker,
                at,
                until,
                factor,
            } if *broker == b && t >= *at && t < *until => *factor,
            Pattern::DropMany {
                brokers,
                at,
                until,
                factor,
            } if brokers.contains(&b) && t >= *at && t < *until => *factor,
            Pattern::Square {
                broker,
                period,
                factor,
                from,
            } if *broker == b && t >= *from && ((t - from) / period).fract() >= 0.5 => *factor,
            _ => 1.0,
        }
    }

    /// The lowest capacity factor of broker `b`.
    fn lowest(&self, b: usize) -> f64 {
        match self {
            Pattern::Fixed(f) => f[b],
            Pattern::Drop { broker, factor, .. } | Pattern::Square { broker, factor, .. }
                if *broker == b =>
            {
                *factor
            }
            Pattern::DropMany {
                brokers, factor, ..
            } if brokers.contains(&b) => *factor,
            _ => 1.0,
        }
    }

    /// When the steady state of a pattern without a step begins: after a 20 s warm-up, and
    /// for an antagonist the whole periods that cover its first 10 s (a drop's goals leave out
    /// 10 s after the change; whole periods keep the slow and fast halves even).
    pub fn steady_from(&self) -> f64 {
        match self {
            Pattern::Square { from, period, .. } => from + (10.0 / period).ceil() * period,
            _ => 20.0,
        }
    }

    /// The step of a drop (start, end), if this pattern is one.
    pub fn step(&self) -> Option<(f64, f64)> {
        match self {
            Pattern::Drop { at, until, .. } | Pattern::DropMany { at, until, .. } => {
                Some((*at, *until))
            }
            _ => None,
        }
    }
}

/// A scenario: the cluster, its load and what happens to it.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    pub shape: Shape,
    /// Offered load as a fraction of the cluster's capacity in its worst phase (with one of
    /// three brokers at half capacity, 80% of that is 67% of the nominal capacity): the oracle
    /// can then keep every broker at this utilization throughout.
    pub load: f64,
    pub seconds: f64,
    pub pattern: Pattern,
    /// Fraction of the sidecars that are plain clients (KIP-794) instead of krouts.
    pub plain: f64,
    pub phases: Phases,
    /// Mean request size, bytes.
    pub mean_bytes: f64,
    /// Every request is `mean_bytes` (a bench's records of one size, one a request), not
    /// exponentially distributed.
    pub fixed_size: bool,
}

impl Scenario {
    /// Offered bytes per second.
    pub fn offered(&self) -> f64 {
        let worst: f64 = (0..self.shape.brokers())
            .map(|b| self.pattern.lowest(b))
            .sum();
        self.load * self.shape.capacity * worst / self.shape.work_per_byte()
    }

    fn factors(&self, t: f64) -> Vec<f64> {
        (0..self.shape.brokers())
            .map(|b| self.pattern.factor(b, t))
            .collect()
    }
}

/// Bin of the share series, seconds.
pub const BIN: f64 = 0.1;

/// What a run measured.
pub struct Trace {
    /// Bytes sent to each broker per [`BIN`] (by send time).
    pub bytes: Vec<Vec<f64>>,
    /// Latency (µs) of the requests sent in each whole second.
    pub latency: Vec<Histogram<u64>>,
    /// The oracle's split at the start of each bin.
    pub oracle: Vec<Vec<f64>>,
    pub requests: u64,
    pub wall: Duration,
}

#[derive(Clone, Copy)]
struct Request {
    sidecar: u32,
    broker: u16,
    sent: f64,
    bytes: f64,
}

const LEADER_DONE: u8 = 0;
const ANSWER: u8 = 1;

fn nanos(t: f64) -> u64 {
    (t * 1e9) as u64
}

/// Runs `scenario` with `sidecars` sidecars of `policy` (the scenario's plain fraction running
/// KIP-794 instead).
pub fn run(
    scenario: &Scenario,
    sidecars: usize,
    policy: Policy,
    seed: u64,
    lease: Duration,
) -> Trace {
    let started = Instant::now();
    let n = scenario.shape.brokers();
    let mut rng = fastrand::Rng::with_seed(seed);
    let common = Common {
        nodes: (1..=n as i32).collect(),
        leaders: scenario.shape.leaders.clone(),
        epoch: Instant::now(),
        lease,
    };
    let plain = (scenario.plain * sidecars as f64).round() as usize;
    let mut fleet: Vec<Sidecar> = (0..sidecars)
        .map(|i| {
            let p = if i < plain { Policy::Kip794 } else { policy };
            Sidecar::new(
                p,
                scenario.phases,
                seed ^ (i as u64).wrapping_mul(0x9e37_79b9),
                &common,
            )
        })
        .collect();
    let mut cluster = Cluster::new(scenario.shape.clone());
    let bins = (scenario.seconds / BIN).ceil() as usize;
    let mut trace = Trace {
        bytes: vec![vec![0.0; n]; bins],
        latency: (0..scenario.seconds.ceil() as usize)
            .map(|_| Histogram::new_with_bounds(1, 600_000_000, 2).expect("histogram bounds"))
            .collect(),
        oracle: Vec::with_capacity(bins),
        requests: 0,
        wall: Duration::ZERO,
    };
    let rate = scenario.offered() / scenario.mean_bytes;
    let mut oracles: Vec<(Vec<f64>, Vec<f64>)> = Vec::new();
    let mut split_at = |t: f64| -> Vec<f64> {
        let f = scenario.factors(t);
        if let Some((_, s)) = oracles.iter().find(|(k, _)| *k == f) {
            return s.clone();
        }
        let s = oracle_split(&scenario.shape, &f, scenario.offered(), scenario.mean_bytes);
        oracles.push((f, s.clone()));
        s
    };
    let mut oracle = split_at(0.0);
    let mut requests: Vec<Request> = Vec::new();
    let mut free: Vec<u32> = Vec::new();
    let mut events: BinaryHeap<Reverse<(u64, u64, u8, u32)>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut next_arrival = -rng.f64().max(1e-12).ln() / rate;
    loop {
        let next_event = events.peek().map(|Reverse(e)| e.0);
        let arrival_first =
            next_arrival < scenario.seconds && next_event.is_none_or(|e| nanos(next_arrival) <= e);
        if arrival_first {
            let t = next_arrival;
            next_arrival += -rng.f64().max(1e-12).ln() / rate;
            let bin = (t / BIN) as usize;
            while trace.oracle.len() <= bin {
                oracle = split_at(trace.oracle.len() as f64 * BIN);
                trace.oracle.push(oracle.clone());
            }
            let s = rng.usize(..sidecars);
            let bytes = if scenario.fixed_size {
                scenario.mean_bytes
            } else {
                (-rng.f64().max(1e-12).ln() * scenario.mean_bytes).max(64.0)
            };
            let b = fleet[s].choose(t, bytes, &common, &oracle, &mut rng);
            trace.bytes[bin][b] += bytes;
            let arrive = t + scenario.shape.net;
            let done = cluster.lead(b, arrive, bytes, scenario.pattern.factor(b, arrive));
            let req = Request {
                sidecar: s as u32,
                broker: b as u16,
                sent: t,
                bytes,
            };
            let id = match free.pop() {
                Some(id) => {
                    requests[id as usize] = req;
                    id
                }
                None => {
                    requests.push(req);
                    (requests.len() - 1) as u32
                }
            };
            seq += 1;
            events.push(Reverse((nanos(done), seq, LEADER_DONE, id)));
            trace.requests += 1;
            continue;
        }
        let Some(Reverse((at, _, kind, id))) = events.pop() else {
            break;
        };
        let t = at as f64 / 1e9;
        let req = requests[id as usize];
        if kind == LEADER_DONE {
            let pattern = &scenario.pattern;
            let acked =
                cluster.replicate(req.broker as usize, t, req.bytes, |f| pattern.factor(f, t));
            seq += 1;
            events.push(Reverse((
                nanos(acked + scenario.shape.net),
                seq,
                ANSWER,
                id,
            )));
        } else {
            fleet[req.sidecar as usize].answered(
                req.broker as usize,
                req.sent,
                t,
                req.bytes,
                &common,
            );
            let second = req.sent as usize;
            if let Some(h) = trace.latency.get_mut(second) {
                let micros = ((t - req.sent) * 1e6).max(1.0) as u64;
                h.saturating_record(micros);
            }
            free.push(id);
        }
    }
    trace.wall = started.elapsed();
    trace
}
