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

/// Byte-counted smooth weighted round-robin state over one set of brokers.
#[derive(Debug)]
struct Rotation {
    nodes: Vec<i32>,
    weights: Vec<f64>,
    /// Credit in bytes: positive means the broker is owed traffic.
    credit: Vec<f64>,
    /// A typical charge (moving average): the credit handed out per choice.
    typical: f64,
    refreshed: Instant,
}

impl Rotation {
    fn new(nodes: &[i32], weights: Vec<f64>, now: Instant) -> Self {
        Self {
            nodes: nodes.to_vec(),
            credit: vec![0.0; nodes.len()],
            typical: 0.0,
            weights,
            refreshed: now,
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

/// The strict-cost strategy: one rotation per topic, over the brokers leading its partitions.
pub struct StrictCost {
    lease: Duration,
    topics: DashMap<String, Mutex<Rotation>>,
}

impl StrictCost {
    pub fn new(lease: Duration) -> Self {
        Self {
            lease,
            topics: DashMap::new(),
        }
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
        let entry = self.topics.entry(topic.to_string()).or_insert_with(|| {
            Mutex::new(Rotation::new(
                leaders,
                weights(&scores.costs(leaders, now)),
                now,
            ))
        });
        let mut r = entry.lock().unwrap_or_else(|e| e.into_inner());
        if r.nodes != leaders {
            *r = Rotation::new(leaders, weights(&scores.costs(leaders, now)), now);
        } else if now.saturating_duration_since(r.refreshed) >= self.lease {
            r.weights = weights(&scores.costs(leaders, now));
            r.refreshed = now;
        }
        r.choose(exclude)
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
    use crate::route::scores::ScoreConfig;

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
        let mut r = Rotation::new(&[1, 2, 3], vec![5.0, 1.0, 1.0], Instant::now());
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
            let mut r = Rotation::new(&[1, 2, 3], w.clone(), Instant::now());
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
        let s = StrictCost::new(Duration::from_millis(100));
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
        // Broker 2 becomes slow; after the lease, it gets much less.
        let slow = scores.broker(2);
        for i in 0..10u64 {
            for n in [1, 3] {
                let b = scores.broker(n);
                let t = now + Duration::from_millis(i);
                b.sent(t);
                b.answered(t, t + Duration::from_millis(2), &scores.config);
            }
            let t = now + Duration::from_millis(i);
            slow.sent(t);
            slow.answered(t, t + Duration::from_millis(40), &scores.config);
        }
        let later = now + Duration::from_millis(200);
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
