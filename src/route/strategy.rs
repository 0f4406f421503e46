//! Choosing the broker that a request's movable batches go to.
//!
//! `strict-cost` is Astraea's StrictCostDispatcher rule, moved into the proxy: each broker's
//! weight is `max_cost - cost + shift` (linear in its gap to the slowest broker; `shift` is the
//! smallest cost, so the slowest broker keeps a small share and is still probed), and brokers
//! are taken in smooth weighted round-robin (nginx style), so shares follow the weights closely
//! even over a few picks. Weights are recomputed from the live scores once per lease.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use dashmap::DashMap;

use super::scores::Scores;

/// Weights from costs; a broker without a cost of its own gets the mean of the others.
pub fn weights(costs: &[Option<f64>]) -> Vec<f64> {
    let known: Vec<f64> = costs.iter().flatten().copied().collect();
    if known.is_empty() {
        return vec![1.0; costs.len()];
    }
    let neutral = known.iter().sum::<f64>() / known.len() as f64;
    let costs: Vec<f64> = costs.iter().map(|c| c.unwrap_or(neutral)).collect();
    let max = costs.iter().copied().fold(f64::MIN, f64::max);
    let min = costs.iter().copied().fold(f64::MAX, f64::min);
    let shift = if min > 0.0 { min } else { 0.01 };
    costs.iter().map(|c| max - c + shift).collect()
}

/// Smooth weighted round-robin state over one set of brokers.
#[derive(Debug)]
struct Rotation {
    nodes: Vec<i32>,
    weights: Vec<f64>,
    current: Vec<f64>,
    refreshed: Instant,
}

impl Rotation {
    /// The next broker not in `exclude`; every broker still takes its turns, so the shares of
    /// the others are those of the weights.
    fn next_excluding(&mut self, exclude: &[i32]) -> Option<i32> {
        if self.nodes.iter().all(|n| exclude.contains(n)) {
            return None;
        }
        // Each broker comes up at least once per `nodes.len()` rounds of smooth WRR... for
        // positive weights; bound the search anyway.
        for _ in 0..(self.nodes.len() * 64) {
            let node = self.next()?;
            if !exclude.contains(&node) {
                return Some(node);
            }
        }
        None
    }

    fn next(&mut self) -> Option<i32> {
        let total: f64 = self.weights.iter().sum();
        let mut best: Option<usize> = None;
        for (i, w) in self.weights.iter().enumerate() {
            self.current[i] += w;
            if best.is_none_or(|b| self.current[i] > self.current[b]) {
                best = Some(i);
            }
        }
        let best = best?;
        self.current[best] -= total;
        Some(self.nodes[best])
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

    /// Like [`Self::pick`], skipping the brokers in `exclude` (e.g. those with no partition left
    /// free in this request) without disturbing the rotation's shares among the others.
    pub fn pick_excluding(
        &self,
        topic: &str,
        leaders: &[i32],
        exclude: &[i32],
        scores: &Scores,
        now: Instant,
    ) -> Option<i32> {
        if leaders.iter().all(|l| exclude.contains(l)) {
            return None;
        }
        // Brokers kroute just failed to reach are left out until their cool-down ends.
        let available = scores.available(leaders, now);
        let leaders = available.as_slice();
        if leaders.is_empty() {
            return None;
        }
        let fresh = || Rotation {
            nodes: leaders.to_vec(),
            weights: weights(&scores.costs(leaders, now)),
            current: vec![0.0; leaders.len()],
            refreshed: now,
        };
        if let Some(entry) = self.topics.get(topic) {
            let mut r = entry.lock().unwrap_or_else(|e| e.into_inner());
            if r.nodes != leaders {
                *r = fresh();
            } else if now.saturating_duration_since(r.refreshed) >= self.lease {
                r.weights = weights(&scores.costs(leaders, now));
                r.refreshed = now;
            }
            return r.next_excluding(exclude);
        }
        let entry = self
            .topics
            .entry(topic.to_string())
            .or_insert_with(|| Mutex::new(fresh()));
        let mut r = entry.lock().unwrap_or_else(|e| e.into_inner());
        r.next_excluding(exclude)
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
    fn smooth_round_robin_matches_weights_and_interleaves() {
        let mut r = Rotation {
            nodes: vec![1, 2, 3],
            weights: vec![5.0, 1.0, 1.0],
            current: vec![0.0; 3],
            refreshed: Instant::now(),
        };
        let picks: Vec<i32> = (0..7).map(|_| r.next().unwrap()).collect();
        assert_eq!(picks.iter().filter(|n| **n == 1).count(), 5);
        assert_eq!(picks, vec![1, 1, 2, 1, 3, 1, 1], "nginx's smooth sequence");
    }

    #[test]
    fn shares_converge_to_weights_for_any_costs() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..100 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let costs: Vec<Option<f64>> = (0..3)
                .map(|i| Some(1.0 + ((seed >> (i * 16)) % 1000) as f64))
                .collect();
            let w = weights(&costs);
            let mut r = Rotation {
                nodes: vec![1, 2, 3],
                weights: w.clone(),
                current: vec![0.0; 3],
                refreshed: Instant::now(),
            };
            let n = 3000;
            let mut counts = [0usize; 3];
            for _ in 0..n {
                counts[(r.next().unwrap() - 1) as usize] += 1;
            }
            let total: f64 = w.iter().sum();
            for i in 0..3 {
                let expected = n as f64 * w[i] / total;
                assert!(
                    (counts[i] as f64 - expected).abs() <= 2.0,
                    "{counts:?} vs weights {w:?}"
                );
            }
            // The slowest broker still gets probe traffic.
            assert!(counts.iter().all(|c| *c > 0));
        }
    }

    #[test]
    fn picks_refresh_on_lease_and_follow_leader_changes() {
        let scores = Scores::new(ScoreConfig::default());
        let s = StrictCost::new(Duration::from_millis(100));
        let now = Instant::now();
        let picks: Vec<i32> = (0..6)
            .map(|_| s.pick("t", &[1, 2, 3], &scores, now).unwrap())
            .collect();
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
        let picks: Vec<i32> = (0..78)
            .map(|_| s.pick("t", &[1, 2, 3], &scores, later).unwrap())
            .collect();
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
        assert!((0..20).all(|_| s.pick("t", &[1, 3], &scores, later) == Some(1)));
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
