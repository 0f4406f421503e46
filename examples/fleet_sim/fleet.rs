//! The sidecars and the rules they choose brokers by.
//!
//! A kroute sidecar is kroute's own routing core (`kroute::balance`), one `Scores` and one
//! `StrictCost` per sidecar, fed with virtual time. The baselines are what a fleet without
//! kroute, or with a simpler rule, would do.

use std::time::{Duration, Instant};

use kroute::balance::scores::{ScoreConfig, Scores};
use kroute::balance::strategy::{Rule, StrictCost, Tuning};

/// How a sidecar chooses the broker of its next request.
#[derive(Debug, Clone, Copy)]
pub enum Policy {
    /// kroute's strict-cost strategy with this rule.
    Kroute(Rule),
    /// A plain client with sticky or random partitioning: partitions uniformly, so brokers in
    /// proportion to the partitions they lead.
    Uniform,
    /// Kafka's BuiltInPartitioner (KIP-794): partitions weighted `max + 1 - queue`, where the
    /// queue is this producer's own requests waiting on the partition's leader.
    Kip794,
    /// Power of two choices: of two random brokers, the one with fewer of this sidecar's
    /// requests in flight.
    TwoChoices,
    /// The split that equalizes latency for the true capacities (see `cluster::oracle_split`).
    Oracle,
}

impl Policy {
    pub fn name(&self) -> &'static str {
        match self {
            Policy::Kroute(Rule::Linear) => "kroute-linear (before)",
            Policy::Kroute(_) => "kroute",
            Policy::Uniform => "uniform",
            Policy::Kip794 => "kip-794",
            Policy::TwoChoices => "p2c-inflight",
            Policy::Oracle => "oracle",
        }
    }
}

/// How the sidecars' leases are phased.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Phases {
    /// Every sidecar recomputes at the same instants (started together, no jitter).
    Aligned,
    /// Jittered leases (what kroute ships).
    Random,
}

/// The topic every sidecar writes.
const TOPIC: &str = "t";

enum Chooser {
    Kroute {
        scores: Scores,
        strategy: StrictCost,
    },
    Plain(Policy),
}

/// One sidecar (a producer and its kroute, or a plain producer).
pub struct Sidecar {
    chooser: Chooser,
    /// This sidecar's requests in flight per broker.
    in_flight: Vec<u32>,
    /// When this sidecar's last answer from each broker came: its requests to a broker go on
    /// one connection, which the broker serves one request at a time, in order.
    last_answer: Vec<f64>,
}

/// What every sidecar shares: the broker ids and the virtual clock's origin.
pub struct Common {
    pub nodes: Vec<i32>,
    pub leaders: Vec<u32>,
    pub epoch: Instant,
    pub lease: Duration,
}

impl Common {
    pub fn instant(&self, t: f64) -> Instant {
        self.epoch + Duration::from_secs_f64(t)
    }
}

impl Sidecar {
    pub fn new(policy: Policy, phases: Phases, seed: u64, common: &Common) -> Self {
        let chooser = match policy {
            Policy::Kroute(rule) => {
                let tuning = Tuning {
                    lease: common.lease,
                    rule,
                    jitter: if phases == Phases::Random { 0.5 } else { 0.0 },
                    seed,
                    grid: (phases == Phases::Aligned).then_some(common.epoch),
                };
                Chooser::Kroute {
                    scores: Scores::since(ScoreConfig::default(), common.epoch),
                    strategy: StrictCost::new(tuning),
                }
            }
            other => Chooser::Plain(other),
        };
        Self {
            chooser,
            in_flight: vec![0; common.nodes.len()],
            last_answer: vec![0.0; common.nodes.len()],
        }
    }

    /// The broker (index) of a request of `bytes` sent at `t`; `oracle` is the oracle's split.
    pub fn choose(
        &mut self,
        t: f64,
        bytes: f64,
        common: &Common,
        oracle: &[f64],
        rng: &mut fastrand::Rng,
    ) -> usize {
        let b = match &self.chooser {
            Chooser::Kroute { scores, strategy } => {
                let now = common.instant(t);
                let node = strategy
                    .pick(TOPIC, &common.nodes, scores, now)
                    .unwrap_or(common.nodes[0]);
                strategy.charge(TOPIC, node, bytes as usize);
                scores.broker(node).sent(now, bytes as usize);
                (node - 1) as usize
            }
            Chooser::Plain(Policy::Uniform) => {
                weighted(rng, common.leaders.iter().map(|l| *l as f64))
            }
            Chooser::Plain(Policy::Kip794) => {
                let max = *self.in_flight.iter().max().unwrap_or(&0) as f64;
                let w = common
                    .leaders
                    .iter()
                    .zip(&self.in_flight)
                    .map(|(l, q)| *l as f64 * (max + 1.0 - *q as f64));
                weighted(rng, w)
            }
            Chooser::Plain(Policy::TwoChoices) => {
                let n = common.nodes.len();
                let a = rng.usize(..n);
                let c = (a + 1 + rng.usize(..n - 1)) % n;
                match self.in_flight[a].cmp(&self.in_flight[c]) {
                    std::cmp::Ordering::Less => a,
                    std::cmp::Ordering::Greater => c,
                    std::cmp::Ordering::Equal => {
                        if rng.bool() {
                            a
                        } else {
                            c
                        }
                    }
                }
            }
            Chooser::Plain(_) => weighted(rng, oracle.iter().copied()),
        };
        self.in_flight[b] += 1;
        b
    }

    /// The request of `bytes` sent to broker `b` at `sent` was answered at `t`.
    pub fn answered(&mut self, b: usize, sent: f64, t: f64, bytes: f64, common: &Common) {
        self.in_flight[b] = self.in_flight[b].saturating_sub(1);
        let previous = std::mem::replace(&mut self.last_answer[b], t);
        if let Chooser::Kroute { scores, .. } = &self.chooser {
            let score = scores.broker(common.nodes[b]);
            score.answered(
                common.instant(sent),
                common.instant(previous),
                common.instant(t),
                bytes as usize,
                &scores.config,
            );
        }
    }
}

/// An index drawn with probability proportional to its weight.
fn weighted(rng: &mut fastrand::Rng, weights: impl Iterator<Item = f64> + Clone) -> usize {
    let total: f64 = weights.clone().sum();
    let mut x = rng.f64() * total;
    let mut last = 0;
    for (i, w) in weights.enumerate() {
        if x < w {
            return i;
        }
        x -= w;
        last = i;
    }
    last
}
