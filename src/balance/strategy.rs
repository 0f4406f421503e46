//! Choosing the broker that a request's movable batches go to.
//!
//! `strict-cost` is Astraea's StrictCostDispatcher rule, moved into the proxy: each broker's
//! weight is `max_cost - cost + shift` (linear in its gap to the slowest broker; `shift` is the
//! smallest cost, so the slowest broker keeps a small share and is still probed). Weights are
//! recomputed from the live scores once per lease.
//!
//! Brokers take turns in smooth weighted round-robin counted in *bytes*: every byte sent earns
//! each broker credit in proportion to its weight and costs the broker it went to one unit, and
//! the next pick is the broker with the most credit. Requests differ a lot in size (a client's
//! request to a broker that leads 22 partitions carries far more than one to a broker leading
//! 4), so counting picks would follow request counts, not traffic; counting bytes makes each
//! broker's share of the traffic follow its weight.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use dashmap::DashMap;

use super::scores::Scores;

/// Costs within this fraction above the smallest count as equal to it. Measured latencies of
/// equal brokers differ by a few milliseconds from lease to lease (the broker leading fewer
/// partitions answers a little faster), and a linear rule turns every such difference into a
/// share that drifts away from equal; a broker that is really slower (a multiple of the
/// others' cost) is far outside the band and still loses its share at once.
pub const COST_DEAD_BAND: f64 = 0.2;

/// Weights from costs; a broker without a cost of its own gets the mean of the others.
pub fn weights(costs: &[Option<f64>]) -> Vec<f64> {
    let known: Vec<f64> = costs.iter().flatten().copied().collect();
    if known.is_empty() {
        return vec![1.0; costs.len()];
    }
    let neutral = known.iter().sum::<f64>() / known.len() as f64;
    let costs: Vec<f64> = costs.iter().map(|c| c.unwrap_or(neutral)).collect();
    let min = costs.iter().copied().fold(f64::MAX, f64::min);
    let band = min * (1.0 + COST_DEAD_BAND);
    let costs: Vec<f64> = costs
        .iter()
        .map(|c| if *c <= band { min } else { *c })
        .collect();
    let max = costs.iter().copied().fold(f64::MIN, f64::max);
    let shift = if min > 0.0 { min } else { 0.01 };
    costs.iter().map(|c| max - c + shift).collect()
}

/// Most leases' worth of change one piece of news may make (see [`equalize`]): a broker not
/// heard of for long has changed in ways one answer does not tell, and a broker sent little
/// is heard of by one answer at a time (at 8 leases' worth, one slow answer cut a recovered
/// broker's share 25-fold in the librdkafka routing test).
const MAX_LEASES_PER_NEWS: f64 = 3.0;

/// A broker below this fraction of an equal share is starved (see [`equalize`])...
const STARVED_BELOW: f64 = 0.5;
/// ...if its cost is at most this multiple of the mean. Being sent little made a broker up to
/// twice as slow here (lone requests to an idle broker against a busy one, docs/fleet.md); the
/// rest is room for a cost read from one or two answers.
const IDLE_PENALTY: f64 = 3.0;

/// How weights follow the scores.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rule {
    /// Astraea's linear rule in full at every lease (kroute before the fleet work): weights
    /// jump to [`weights`] of the latest costs. One kroute is fine with it; many herd.
    Linear,
    /// Shares that equalize latency, moved a limited step per lease (see [`equalize`]).
    Equalize(Equalize),
}

/// The parameters of [`Rule::Equalize`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Equalize {
    /// Each lease a broker's share is multiplied by `(mean cost / its cost)^gain`...
    pub gain: f64,
    /// ...by at most this factor either way. Bounding the step is what keeps a fleet of
    /// sidecars that all see the same slow broker from leaving it at once and coming back at
    /// once.
    pub max_step: f64,
    /// A broker whose cost is within `band` (relative) of the mean is also pulled towards an
    /// equal share by `(equal / share)^pull`, fully at the mean and not at all at the band's
    /// edge: brokers that cost the same get the same traffic (after a slow broker recovered,
    /// its latency tells nothing more once it is back to the others'), while a broker that
    /// stays slower than the band keeps the share its latency earns.
    pub pull: f64,
    pub band: f64,
    /// Smallest share, as a fraction of an equal share: the slowest broker is still probed.
    pub floor: f64,
}

impl Rule {
    /// The rule kroute ships, chosen with the fleet simulator (docs/fleet.md).
    pub const DEFAULT: Rule = Rule::Equalize(Equalize {
        gain: 1.0,
        max_step: 1.5,
        pull: 0.5,
        band: 0.25,
        floor: 0.06,
    });
}

/// How the strategy behaves; the proxy takes [`Tuning::default`], the simulator varies it.
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    /// How often weights are recomputed.
    pub lease: Duration,
    pub rule: Rule,
    /// Each rotation's lease lasts `lease * (1 + u)` with `u` uniform in `[-jitter, jitter]`,
    /// so sidecars started together do not recompute together.
    pub jitter: f64,
    /// Seed of the jitter (the simulator fixes it; the proxy draws one).
    pub seed: u64,
    /// Leases end on a grid of whole leases from this instant, the same for every sidecar given
    /// the same one (the simulator's worst case: all recompute at once). None: jittered.
    pub grid: Option<Instant>,
}

impl Tuning {
    pub fn new(lease: Duration) -> Self {
        Self {
            lease,
            rule: Rule::DEFAULT,
            jitter: 0.5,
            seed: fastrand::u64(..),
            grid: None,
        }
    }
}

/// Byte-counted smooth weighted round-robin state over one set of brokers.
#[derive(Debug)]
struct Rotation {
    nodes: Vec<i32>,
    weights: Vec<f64>,
    /// Credit in bytes: positive means the broker is owed traffic.
    credit: Vec<f64>,
    /// A typical charge (moving average): the credit handed out per choice.
    typical: f64,
    /// When the weights were last recomputed, and when they are next.
    refreshed: Instant,
    next_refresh: Instant,
    /// When there was last news of each broker (see [`equalize`]).
    heard: Vec<Instant>,
}

impl Rotation {
    /// `start` breaks the first ties: every sidecar's rotation begins with the same broker
    /// otherwise, and a fleet started together sends its first requests to one broker.
    fn new(
        nodes: &[i32],
        weights: Vec<f64>,
        start: Vec<f64>,
        now: Instant,
        next_refresh: Instant,
    ) -> Self {
        Self {
            nodes: nodes.to_vec(),
            credit: start,
            typical: 0.0,
            weights,
            refreshed: now,
            next_refresh,
            heard: vec![now; nodes.len()],
        }
    }

    /// The broker owed the most traffic once the next batch's worth of credit is handed out
    /// (as smooth WRR adds the weights before choosing, so ties go to the heavier broker),
    /// leaving out `exclude`.
    fn choose(&self, exclude: &[i32]) -> Option<i32> {
        let total: f64 = self.weights.iter().sum();
        // Before any charge, any positive amount makes ties go to the heavier broker.
        let handout = self.typical.max(1.0);
        let ahead = |i: usize| self.credit[i] + self.weights[i] / total * handout;
        let mut best: Option<usize> = None;
        for (i, node) in self.nodes.iter().enumerate() {
            if exclude.contains(node) {
                continue;
            }
            if best.is_none_or(|b| ahead(i) > ahead(b)) {
                best = Some(i);
            }
        }
        best.map(|i| self.nodes[i])
    }

    /// Accounts `bytes` sent to `node`.
    fn charge(&mut self, node: i32, bytes: f64) {
        let total: f64 = self.weights.iter().sum();
        if total <= 0.0 {
            return;
        }
        self.typical = if self.typical == 0.0 {
            bytes
        } else {
            0.9 * self.typical + 0.1 * bytes
        };
        for (i, w) in self.weights.iter().enumerate() {
            self.credit[i] += w / total * bytes;
            if self.nodes[i] == node {
                self.credit[i] -= bytes;
            }
        }
    }
}

/// One lease's step of [`Rule::Equalize`]: new shares (summing to 1) from the current shares
/// and the brokers' costs (None: no recent evidence). A broker moves only when there is news
/// of it, by as many leases' worth as `leases[b]` says (the leases since the news before; 0:
/// none). An estimate that has not changed was already acted on, and a sidecar that sends
/// little hears of each broker seldom: acting once per answer but for the whole time since the
/// last one keeps the fleet's speed the same whether 100 sidecars hear of a broker every lease
/// or 10,000 hear once a second (their errors average out over the fleet).
pub fn equalize(
    shares: &[f64],
    costs: &[Option<f64>],
    leases: &[f64],
    rule: &Equalize,
) -> Vec<f64> {
    let total: f64 = shares.iter().sum();
    let equal = total / shares.len() as f64;
    let known: f64 = shares
        .iter()
        .zip(costs)
        .filter_map(|(s, c)| c.map(|_| *s))
        .sum();
    // The share-weighted mean cost: what one byte costs on average right now.
    let mean = shares
        .iter()
        .zip(costs)
        .filter_map(|(s, c)| c.map(|c| s * c))
        .sum::<f64>()
        / known;
    let mut next: Vec<f64> = shares
        .iter()
        .zip(costs)
        .zip(leases)
        .map(|((s, c), k)| {
            let s = s.max(f64::MIN_POSITIVE);
            let step = match c {
                Some(c) if *k > 0.0 && *c > 0.0 && mean > 0.0 => {
                    let gap = (mean / c).ln();
                    let pull = rule.pull * (1.0 - gap.abs() / rule.band).max(0.0);
                    let bound = rule.max_step.powf(*k).ln();
                    // A broker sent little answers slower than one kept busy (lone requests
                    // took 6-8 ms at an idle broker, 4 at a busy one: docs/fleet.md), so its
                    // cost alone would keep it starved: one not clearly slower climbs back
                    // to half its equal share at the fastest step, and is judged there.
                    let starved = s < STARVED_BELOW * equal && *c <= IDLE_PENALTY * mean;
                    let step = if starved {
                        bound
                    } else {
                        (rule.gain * gap + pull * (equal / s).ln()) * k
                    };
                    step.clamp(-bound, bound).exp()
                }
                _ => 1.0,
            };
            (s * step).max(rule.floor * equal)
        })
        .collect();
    let sum: f64 = next.iter().sum();
    for s in &mut next {
        *s /= sum;
    }
    next
}

/// The strict-cost strategy: one rotation per topic, over the brokers leading its partitions.
pub struct StrictCost {
    tuning: Tuning,
    rng: Mutex<fastrand::Rng>,
    topics: DashMap<String, Mutex<Rotation>>,
}

impl StrictCost {
    pub fn new(tuning: Tuning) -> Self {
        Self {
            rng: Mutex::new(fastrand::Rng::with_seed(tuning.seed)),
            tuning,
            topics: DashMap::new(),
        }
    }

    /// Credits of a thousandth of a byte at most for `n` brokers, drawn at random (see
    /// [`Rotation::new`]): they break ties between equal weights, and are too small to change
    /// the order of unequal ones (a broker's first handout is its share of one byte).
    fn start(&self, n: usize) -> Vec<f64> {
        let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
        (0..n).map(|_| rng.f64() * 1e-3).collect()
    }

    /// The next lease's end after `now`, jittered.
    fn lease_end(&self, now: Instant) -> Instant {
        if let Some(grid) = self.tuning.grid {
            let lease = self.tuning.lease.as_secs_f64();
            let leases = (now.saturating_duration_since(grid).as_secs_f64() / lease).floor() + 1.0;
            return grid + Duration::from_secs_f64(leases * lease);
        }
        let u = self.rng.lock().unwrap_or_else(|e| e.into_inner()).f64() * 2.0 - 1.0;
        let factor = (1.0 + self.tuning.jitter * u).max(0.0);
        now + self.tuning.lease.mul_f64(factor)
    }

    /// Fresh weights for `leaders` from the scores, given the current ones (None: a new set)
    /// and how many leases of news each broker had since they were set (see [`equalize`]).
    fn reweigh(&self, current: Option<&[f64]>, costs: &[Option<f64>], leases: &[f64]) -> Vec<f64> {
        match (self.tuning.rule, current) {
            (Rule::Linear, _) => weights(costs),
            // A new set of brokers (start, leader change) starts from Astraea's weights of
            // what is already known, so a broker known to be slow is not sent an equal share
            // while the shares walk.
            (Rule::Equalize(_), None) => {
                let w = weights(costs);
                let total: f64 = w.iter().sum();
                w.iter().map(|x| x / total).collect()
            }
            (Rule::Equalize(rule), Some(shares)) => {
                if costs.iter().all(Option::is_none) {
                    return shares.to_vec();
                }
                equalize(shares, costs, leases, &rule)
            }
        }
    }

    /// A rotation for a new set of brokers (a new topic, or its leaders changed).
    fn fresh_rotation(&self, leaders: &[i32], scores: &Scores, now: Instant) -> Rotation {
        let first = self.reweigh(None, &scores.costs(leaders, now), &[]);
        Rotation::new(
            leaders,
            first,
            self.start(leaders.len()),
            now,
            self.lease_end(now),
        )
    }

    /// The broker that the next movable batches of `topic` should go to. `leaders` are the
    /// brokers that lead at least one partition of it, ascending.
    pub fn pick(&self, topic: &str, leaders: &[i32], scores: &Scores, now: Instant) -> Option<i32> {
        self.pick_excluding(topic, leaders, &[], scores, now)
    }

    /// Like [`Self::pick`], leaving out the brokers in `exclude` (e.g. those with no partition
    /// left free in this request).
    pub fn pick_excluding(
        &self,
        topic: &str,
        leaders: &[i32],
        exclude: &[i32],
        scores: &Scores,
        now: Instant,
    ) -> Option<i32> {
        // Brokers kroute just failed to reach are left out until their cool-down ends.
        let available = scores.available(leaders, now);
        let leaders = available.as_slice();
        if leaders.iter().all(|l| exclude.contains(l)) {
            return None;
        }
        // Looked up before inserting so that the usual pick allocates no topic name.
        let entry = match self.topics.get(topic) {
            Some(entry) => entry,
            None => {
                let rotation = self.fresh_rotation(leaders, scores, now);
                self.topics
                    .entry(topic.to_string())
                    .or_insert_with(|| Mutex::new(rotation))
                    .downgrade()
            }
        };
        let mut r = entry.lock().unwrap_or_else(|e| e.into_inner());
        if r.nodes != leaders {
            *r = self.fresh_rotation(leaders, scores, now);
        } else if now >= r.next_refresh {
            let costs = scores.costs(leaders, now);
            let news = scores.news(leaders, r.refreshed, now);
            let lease = self.tuning.lease.as_secs_f64();
            let mut leases = vec![0.0; leaders.len()];
            for (b, news) in news.iter().enumerate() {
                if *news {
                    let waited = now.saturating_duration_since(r.heard[b]).as_secs_f64();
                    leases[b] = (waited / lease).clamp(1.0, MAX_LEASES_PER_NEWS);
                    r.heard[b] = now;
                }
            }
            r.weights = self.reweigh(Some(&r.weights), &costs, &leases);
            tracing::debug!(topic, ?leaders, ?costs, ?leases, weights = ?r.weights, "lease");
            r.refreshed = now;
            r.next_refresh = self.lease_end(now);
        }
        r.choose(exclude)
    }

    /// The current weights of `topic`'s rotation, normalized (for the simulator and tests).
    pub fn shares(&self, topic: &str) -> Option<(Vec<i32>, Vec<f64>)> {
        let entry = self.topics.get(topic)?;
        let r = entry.lock().unwrap_or_else(|e| e.into_inner());
        let total: f64 = r.weights.iter().sum();
        Some((
            r.nodes.clone(),
            r.weights.iter().map(|w| w / total).collect(),
        ))
    }

    /// Records that `bytes` of `topic` went to `node`, so later picks make up the difference.
    pub fn charge(&self, topic: &str, node: i32, bytes: usize) {
        if let Some(entry) = self.topics.get(topic) {
            entry
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .charge(node, bytes as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balance::scores::ScoreConfig;

    fn equalize_default(shares: &[f64], costs: &[Option<f64>], leases: &[f64]) -> Vec<f64> {
        let Rule::Equalize(rule) = Rule::DEFAULT else {
            unreachable!("the default rule is Equalize")
        };
        equalize(shares, costs, leases, &rule)
    }

    #[test]
    fn a_starved_broker_climbs_back_unless_clearly_slower() {
        let starved = [0.49, 0.02, 0.49];
        // Twice the others' cost: what being sent little costs. It climbs at the fastest step.
        let idle = equalize_default(&starved, &[Some(4.0), Some(8.0), Some(4.0)], &[1.0; 3]);
        assert!(idle[1] > 0.02 * 1.4, "{idle:?}");
        // Ten times: slow. It keeps the floor.
        let slow = equalize_default(&starved, &[Some(4.0), Some(40.0), Some(4.0)], &[1.0; 3]);
        assert!(slow[1] < 0.021, "{slow:?}");
        // Above half an equal share, the cost decides again: twice the others' loses share.
        let half = [0.4, 0.2, 0.4];
        let judged = equalize_default(&half, &[Some(4.0), Some(8.0), Some(4.0)], &[1.0; 3]);
        assert!(judged[1] < 0.2, "{judged:?}");
    }

    #[test]
    fn equal_costs_keep_equal_shares_and_a_slow_broker_loses_at_most_one_step() {
        let third = [1.0 / 3.0; 3];
        let same = equalize_default(&third, &[Some(5.0); 3], &[1.0; 3]);
        assert!(
            same.iter().all(|s| (s - 1.0 / 3.0).abs() < 1e-12),
            "{same:?}"
        );
        let slow = equalize_default(&third, &[Some(2.0), Some(20.0), Some(2.0)], &[1.0; 3]);
        // max_step 1.5: the slow broker falls by at most 1.5 against each of the others.
        assert!(slow[1] < 1.0 / 3.0);
        assert!((slow[0] / slow[1] - 2.25).abs() < 1e-9, "{slow:?}");
        // No news: the costs are not acted on again.
        let held = equalize_default(&slow, &[Some(2.0), Some(20.0), Some(2.0)], &[0.0; 3]);
        assert!(held[1] >= slow[1], "{held:?} after {slow:?}");
        // News after a long silence stands for several leases.
        let long = equalize_default(
            &third,
            &[Some(2.0), Some(20.0), Some(2.0)],
            &[1.0, 4.0, 1.0],
        );
        assert!(long[1] < slow[1]);
        // The floor keeps probe traffic going to a broker that stays slow.
        let mut s = third.to_vec();
        for _ in 0..200 {
            s = equalize_default(&s, &[Some(2.0), Some(200.0), Some(2.0)], &[1.0; 3]);
        }
        assert!(s[1] > 0.01 && s[1] < 0.03, "{s:?}");
    }

    proptest::proptest! {
        /// Shares stay a split of the traffic, and the costliest broker with news never gains
        /// on a cheaper one.
        #[test]
        fn equalize_keeps_a_split_and_its_direction(
            raw in proptest::collection::vec((0.01f64..1.0, proptest::option::of(1.0f64..1e6), 0.0f64..8.0), 2..12)
        ) {
            let total: f64 = raw.iter().map(|r| r.0).sum();
            let shares: Vec<f64> = raw.iter().map(|r| r.0 / total).collect();
            let costs: Vec<Option<f64>> = raw.iter().map(|r| r.1).collect();
            let leases: Vec<f64> = raw.iter().map(|r| r.2).collect();
            let next = equalize_default(&shares, &costs, &leases);
            proptest::prop_assert!((next.iter().sum::<f64>() - 1.0).abs() < 1e-9);
            proptest::prop_assert!(next.iter().all(|s| *s > 0.0 && s.is_finite()));
            for i in 0..next.len() {
                for j in 0..next.len() {
                    let (Some(ci), Some(cj)) = (costs[i], costs[j]) else { continue };
                    if ci > cj && leases[i] >= 1.0 && leases[j] >= 1.0
                        && shares[i] > 0.1 / shares.len() as f64 * 2.0
                        && shares[j] > 0.1 / shares.len() as f64 * 2.0
                        && (leases[i] - leases[j]).abs() < 1e-12
                    {
                        let gi = next[i] / shares[i];
                        let gj = next[j] / shares[j];
                        proptest::prop_assert!(gi <= gj * (1.0 + 1e-9), "{gi} > {gj}");
                    }
                }
            }
        }
    }

    /// One kroute in virtual time against brokers whose latency grows with the share they get
    /// (broker 2 has half the capacity): the shares settle where the latencies are equal and
    /// stay there, without swinging.
    #[test]
    fn shares_settle_where_latencies_are_equal() {
        let t0 = Instant::now();
        let scores = Scores::since(ScoreConfig::default(), t0);
        let s = StrictCost::new(Tuning {
            seed: 7,
            ..Tuning::new(Duration::from_millis(250))
        });
        let capacity = [1.0, 0.5, 1.0];
        // Latency: 1 ms plus a queueing term that grows as a broker nears its capacity.
        let latency = |b: usize, share: f64| {
            let rho = (share * 1.2 / capacity[b]).min(0.99);
            Duration::from_micros((1000.0 + 300.0 * rho / (1.0 - rho)) as u64)
        };
        let mut history = Vec::new();
        // Answers due (when, broker, sent), delivered in time order before each pick.
        let mut due: Vec<(Instant, i32, Instant)> = Vec::new();
        for step in 0..20_000u64 {
            let now = t0 + Duration::from_millis(step);
            due.sort_by_key(|d| std::cmp::Reverse(d.0));
            while due.last().is_some_and(|d| d.0 <= now) {
                if let Some((at, node, sent)) = due.pop() {
                    // Each request on a connection of its own: the broker starts on it at once.
                    scores
                        .broker(node)
                        .answered(sent, sent, at, 1000, &scores.config);
                }
            }
            let node = s.pick("t", &[1, 2, 3], &scores, now).unwrap();
            s.charge("t", node, 1000);
            let (_, shares) = s.shares("t").unwrap();
            let b = (node - 1) as usize;
            scores.broker(node).sent(now, 1000);
            due.push((now + latency(b, shares[b]), node, now));
            if step % 1000 == 999 {
                history.push(shares);
            }
        }
        // Equal latency: share * 1.2 / capacity equal, so broker 2 gets 1/5.
        let last = &history[history.len() - 1];
        assert!((last[1] - 0.2).abs() < 0.05, "{history:?}");
        let late: Vec<f64> = history[10..].iter().map(|h| h[1]).collect();
        let spread = late.iter().copied().fold(f64::MIN, f64::max)
            - late.iter().copied().fold(f64::MAX, f64::min);
        assert!(spread < 0.04, "broker 2's share swings: {late:?}");
    }

    #[test]
    fn leases_are_jittered_or_on_a_common_grid() {
        let t0 = Instant::now();
        let lease = Duration::from_millis(250);
        let jittered = StrictCost::new(Tuning {
            seed: 3,
            ..Tuning::new(lease)
        });
        let ends: Vec<Duration> = (0..50).map(|_| jittered.lease_end(t0) - t0).collect();
        assert!(ends.iter().all(|d| *d >= lease / 2 && *d <= lease * 3 / 2));
        assert!(
            ends.iter().any(|d| *d < lease * 9 / 10) && ends.iter().any(|d| *d > lease * 11 / 10)
        );
        let grid = StrictCost::new(Tuning {
            grid: Some(t0),
            jitter: 0.0,
            ..Tuning::new(lease)
        });
        assert_eq!(
            grid.lease_end(t0 + Duration::from_millis(260)),
            t0 + lease * 2
        );
        assert_eq!(grid.lease_end(t0 + Duration::from_millis(10)), t0 + lease);
    }

    #[test]
    fn weights_follow_astraea() {
        // Equal costs: equal weights.
        assert_eq!(
            weights(&[Some(5.0), Some(5.0), Some(5.0)]),
            vec![5.0, 5.0, 5.0]
        );
        // One slow broker: weight max - cost + min.
        assert_eq!(
            weights(&[Some(2.0), Some(22.0), Some(2.0)]),
            vec![22.0, 2.0, 22.0]
        );
        // No evidence at all: uniform.
        assert_eq!(weights(&[None, None]), vec![1.0, 1.0]);
        // A broker without samples gets the neutral (mean) cost.
        assert_eq!(weights(&[Some(2.0), None, Some(6.0)]), vec![6.0, 4.0, 2.0]);
    }

    #[test]
    fn costs_close_to_the_smallest_count_as_equal_but_a_slow_broker_still_loses_its_share() {
        // Equal brokers, a few ms apart: equal weights, not a drift towards the fastest.
        assert_eq!(
            weights(&[Some(10.0), Some(11.5), Some(12.0)]),
            vec![10.0, 10.0, 10.0]
        );
        // Just outside the band: the linear rule again.
        assert_eq!(
            weights(&[Some(10.0), Some(10.0), Some(13.0)]),
            vec![13.0, 13.0, 10.0]
        );
        // A slow broker (a multiple of the others' cost) keeps only the probing share.
        let w = weights(&[Some(10.0), Some(11.0), Some(40.0)]);
        assert_eq!(w, vec![40.0, 40.0, 10.0]);
        assert!(w[2] / w.iter().sum::<f64>() < 0.12);
    }

    /// Picks and charges `sizes` in turn; returns bytes per node 1..=3.
    fn run(r: &mut Rotation, sizes: impl Iterator<Item = f64>) -> [f64; 3] {
        let mut got = [0.0; 3];
        for size in sizes {
            let node = r.choose(&[]).unwrap();
            r.charge(node, size);
            got[(node - 1) as usize] += size;
        }
        got
    }

    #[test]
    fn rotation_interleaves_by_weight() {
        let now = Instant::now();
        let mut r = Rotation::new(&[1, 2, 3], vec![5.0, 1.0, 1.0], vec![0.0; 3], now, now);
        let picks: Vec<i32> = (0..7)
            .map(|_| {
                let n = r.choose(&[]).unwrap();
                r.charge(n, 1.0);
                n
            })
            .collect();
        assert_eq!(picks.iter().filter(|n| **n == 1).count(), 5);
        assert_eq!(
            picks,
            vec![1, 1, 2, 1, 3, 1, 1],
            "nginx's smooth sequence, counted in bytes"
        );
        assert!(r.choose(&[1]).is_some_and(|n| n != 1), "exclusion skips");
        assert_eq!(r.choose(&[1, 2, 3]), None);
    }

    #[test]
    fn byte_shares_converge_to_weights_whatever_the_request_sizes() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rand = move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            seed >> 33
        };
        for _ in 0..100 {
            let costs: Vec<Option<f64>> =
                (0..3).map(|_| Some(1.0 + (rand() % 1000) as f64)).collect();
            let w = weights(&costs);
            let now = Instant::now();
            let mut r = Rotation::new(&[1, 2, 3], w.clone(), vec![0.0; 3], now, now);
            // Request sizes from 1 KiB to 1 MiB, the skew a proxy sees.
            let sizes: Vec<f64> = (0..3000)
                .map(|_| (1024 + rand() % (1024 * 1024)) as f64)
                .collect();
            let total: f64 = sizes.iter().sum();
            let got = run(&mut r, sizes.into_iter());
            let wsum: f64 = w.iter().sum();
            for i in 0..3 {
                let expected = total * w[i] / wsum;
                // Off by at most about two of the largest requests.
                assert!(
                    (got[i] - expected).abs() <= 2.5 * 1024.0 * 1024.0,
                    "{got:?} vs weights {w:?}"
                );
            }
            // The slowest broker still gets probe traffic.
            assert!(got.iter().all(|g| *g > 0.0));
        }
    }

    #[test]
    fn picks_refresh_on_lease_and_follow_leader_changes() {
        let scores = Scores::new(ScoreConfig::default());
        let s = StrictCost::new(Tuning {
            rule: Rule::Linear,
            jitter: 0.0,
            ..Tuning::new(Duration::from_millis(100))
        });
        let now = Instant::now();
        let pick = |t| {
            let n = s.pick("t", &[1, 2, 3], &scores, t).unwrap();
            s.charge("t", n, 1000);
            n
        };
        let picks: Vec<i32> = (0..6).map(|_| pick(now)).collect();
        assert_eq!(
            picks.iter().filter(|n| **n == 2).count(),
            2,
            "no evidence: uniform"
        );
        // Broker 2 becomes slow; after the lease, it gets much less. Each broker answers its
        // requests one at a time.
        for (node, rtt) in [(1, 2), (2, 40), (3, 2)] {
            let b = scores.broker(node);
            for i in 0..10u64 {
                let t = now + Duration::from_millis(i * rtt);
                b.sent(t, 1000);
                b.answered(t, t, t + Duration::from_millis(rtt), 1000, &scores.config);
            }
        }
        let later = now + Duration::from_millis(500);
        let picks: Vec<i32> = (0..78).map(|_| pick(later)).collect();
        let to_slow = picks.iter().filter(|n| **n == 2).count();
        assert!(
            (1..=4).contains(&to_slow),
            "slow broker got {to_slow} of 78"
        );
        assert_eq!(
            s.pick("t", &[1, 3], &scores, later)
                .map(|n| n == 1 || n == 3),
            Some(true)
        );
        assert_eq!(s.pick("t", &[], &scores, later), None);
        // An unreachable broker gets nothing until its cool-down ends.
        scores.unreachable(3, later);
        assert!((0..20).all(|_| {
            let n = s.pick("t", &[1, 3], &scores, later);
            s.charge("t", 1, 1000);
            n == Some(1)
        }));
        // Excluded brokers are skipped; all excluded: none.
        assert!(
            (0..20).all(|_| s.pick_excluding("t", &[1, 2, 3], &[1], &scores, later) == Some(2))
        );
        assert_eq!(
            s.pick_excluding("t", &[1, 2], &[1, 2], &scores, later),
            None
        );
    }
}
