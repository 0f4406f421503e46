//! Live per-broker latency scores, measured from kroute's own upstream Produce round trips.
//!
//! The estimate is a peak-sensitive, time-decayed EWMA (like tower's PeakEwma): a sample slower
//! than the estimate replaces it at once, so a broker that slows down is seen on its next answer;
//! faster samples pull it down with a time constant, so a recovered broker earns traffic back
//! within about a second. A broker whose answers stall is seen even before they arrive: its cost
//! is at least the mean age of its Produce requests in flight. A broker with no recent sample
//! gets no cost of its own (the strategy gives it a neutral one) and so still receives probe
//! traffic. Everything here takes the current time as an argument so it can be tested exactly.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dashmap::DashMap;
use metrics::{Gauge, gauge};

/// How the estimate reacts.
#[derive(Debug, Clone, Copy)]
pub struct ScoreConfig {
    /// Time constant of the decay towards faster samples.
    pub decay: Duration,
    /// A broker without a sample for this long has no score of its own.
    pub stale_after: Duration,
}

impl Default for ScoreConfig {
    fn default() -> Self {
        Self {
            decay: Duration::from_millis(300),
            stale_after: Duration::from_secs(3),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Ewma {
    micros: f64,
    at: Instant,
}

/// What is known of one broker, kept together so readers never see half an update.
#[derive(Debug, Default)]
struct State {
    estimate: Option<Ewma>,
    in_flight: u64,
    /// Sum of the send times (µs since `epoch`) of the requests in flight.
    sent_sum_micros: u64,
    /// Until when the broker is treated as unreachable (a connect failed or a connection died
    /// with requests in flight).
    unavailable_until: Option<Instant>,
}

/// The score of one broker.
pub struct BrokerScore {
    epoch: Instant,
    state: Mutex<State>,
    latency_gauge: Gauge,
    cost_gauge: Gauge,
}

impl BrokerScore {
    fn new(epoch: Instant, node: i32) -> Self {
        Self {
            epoch,
            state: Mutex::new(State::default()),
            latency_gauge: gauge!("kroute_broker_latency_seconds", "broker" => node.to_string()),
            cost_gauge: gauge!("kroute_broker_cost_seconds", "broker" => node.to_string()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn micros(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.epoch).as_micros() as u64
    }

    /// A Produce request left for this broker at `at`.
    pub fn sent(&self, at: Instant) {
        let micros = self.micros(at);
        let mut s = self.state();
        s.sent_sum_micros += micros;
        s.in_flight += 1;
    }

    /// The request sent at `sent` will never be answered (its connection ended).
    pub fn abandoned(&self, sent: Instant) {
        let micros = self.micros(sent);
        let mut s = self.state();
        s.sent_sum_micros = s.sent_sum_micros.saturating_sub(micros);
        s.in_flight = s.in_flight.saturating_sub(1);
    }

    /// The broker could not be reached: keep batches away from it for `cooldown`.
    pub fn unavailable(&self, now: Instant, cooldown: Duration) {
        self.state().unavailable_until = Some(now + cooldown);
    }

    /// Whether batches may be sent here now.
    pub fn is_available(&self, now: Instant) -> bool {
        self.state()
            .unavailable_until
            .is_none_or(|until| now >= until)
    }

    /// The request sent at `sent` was answered at `now`.
    pub fn answered(&self, sent: Instant, now: Instant, config: &ScoreConfig) {
        let sent_micros = self.micros(sent);
        let rtt = now.saturating_duration_since(sent).as_secs_f64() * 1e6;
        let mut s = self.state();
        s.sent_sum_micros = s.sent_sum_micros.saturating_sub(sent_micros);
        s.in_flight = s.in_flight.saturating_sub(1);
        let next = match s.estimate {
            Some(prev) if rtt < prev.micros => {
                let dt = now.saturating_duration_since(prev.at).as_secs_f64();
                let keep = (-dt / config.decay.as_secs_f64()).exp();
                prev.micros * keep + rtt * (1.0 - keep)
            }
            // First sample, or a new peak: take it at once.
            _ => rtt,
        };
        s.estimate = Some(Ewma {
            micros: next,
            at: now,
        });
        drop(s);
        self.latency_gauge.set(next / 1e6);
    }

    /// Whether anything new is known since `since`: an answer, or requests in flight for longer
    /// than the latest estimate (the broker stalls).
    pub fn news_since(&self, since: Instant, now: Instant) -> bool {
        let now_micros = self.micros(now);
        let s = self.state();
        let answered = s.estimate.is_some_and(|e| e.at > since);
        let stalled = s.in_flight > 0 && {
            let age = now_micros.saturating_sub(s.sent_sum_micros / s.in_flight) as f64;
            s.estimate.is_none_or(|e| age > e.micros)
        };
        answered || stalled
    }

    /// The cost (µs) of sending to this broker now, or None without recent evidence.
    pub fn cost(&self, now: Instant, config: &ScoreConfig) -> Option<f64> {
        let now_micros = self.micros(now);
        let s = self.state();
        let recent = s
            .estimate
            .filter(|e| now.saturating_duration_since(e.at) <= config.stale_after)
            .map(|e| e.micros);
        let stalled = (s.in_flight > 0).then(|| {
            let mean_sent = s.sent_sum_micros / s.in_flight;
            now_micros.saturating_sub(mean_sent) as f64
        });
        drop(s);
        let cost = match (recent, stalled) {
            (Some(r), Some(st)) => Some(r.max(st)),
            (Some(r), None) => Some(r),
            // In flight but no recent answers: only evidence once it is worse than usual.
            (None, Some(st)) if st > config.stale_after.as_secs_f64() * 1e6 / 10.0 => Some(st),
            _ => None,
        };
        self.cost_gauge.set(cost.unwrap_or(0.0) / 1e6);
        cost
    }
}

/// Scores of every broker, registered on first use.
pub struct Scores {
    epoch: Instant,
    pub config: ScoreConfig,
    brokers: DashMap<i32, Arc<BrokerScore>>,
}

impl Scores {
    pub fn new(config: ScoreConfig) -> Self {
        Self::since(config, Instant::now())
    }

    /// Scores whose clock starts at `epoch`: no time passed to them may be earlier (the
    /// simulator's virtual clock starts there).
    pub fn since(config: ScoreConfig, epoch: Instant) -> Self {
        Self {
            epoch,
            config,
            brokers: DashMap::new(),
        }
    }

    pub fn broker(&self, node_id: i32) -> Arc<BrokerScore> {
        if let Some(s) = self.brokers.get(&node_id) {
            return s.clone();
        }
        self.brokers
            .entry(node_id)
            .or_insert_with(|| Arc::new(BrokerScore::new(self.epoch, node_id)))
            .clone()
    }

    /// The brokers of `nodes` that batches may be sent to now.
    pub fn available(&self, nodes: &[i32], now: Instant) -> Vec<i32> {
        nodes
            .iter()
            .copied()
            .filter(|n| self.broker(*n).is_available(now))
            .collect()
    }

    /// Marks `node` unreachable for the stale period.
    pub fn unreachable(&self, node: i32, now: Instant) {
        self.broker(node).unavailable(now, self.config.stale_after);
    }

    /// Which of `nodes` have news since `since` (see [`BrokerScore::news_since`]).
    pub fn news(&self, nodes: &[i32], since: Instant, now: Instant) -> Vec<bool> {
        nodes
            .iter()
            .map(|n| self.broker(*n).news_since(since, now))
            .collect()
    }

    /// Costs of `nodes` at `now` (None = no recent evidence).
    pub fn costs(&self, nodes: &[i32], now: Instant) -> Vec<Option<f64>> {
        nodes
            .iter()
            .map(|n| self.broker(*n).cost(now, &self.config))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Feeds `count` answers of `rtt` spaced `gap` apart, starting at `t`; returns the end time.
    fn feed(
        s: &BrokerScore,
        cfg: &ScoreConfig,
        mut t: Instant,
        rtt: Duration,
        gap: Duration,
        count: u32,
    ) -> Instant {
        for _ in 0..count {
            s.sent(t);
            s.answered(t, t + rtt, cfg);
            t += gap;
        }
        t
    }

    #[test]
    fn slowdown_is_seen_at_once_and_recovery_within_a_second() {
        let cfg = ScoreConfig::default();
        let t0 = Instant::now();
        let s = BrokerScore::new(t0, 1);
        let t = feed(&s, &cfg, t0, ms(2), ms(10), 50);
        let fast = s.cost(t, &cfg).unwrap();
        assert!((fast - 2000.0).abs() < 1.0, "{fast}");

        let t = feed(&s, &cfg, t, ms(22), ms(10), 1);
        assert!(
            s.cost(t, &cfg).unwrap() >= 21_000.0,
            "one slow answer raises the cost at once"
        );

        let t = feed(&s, &cfg, t, ms(2), ms(10), 100);
        let recovered = s.cost(t, &cfg).unwrap();
        assert!(
            recovered < 3000.0,
            "after 1 s of fast answers cost is {recovered}"
        );
    }

    #[test]
    fn a_stalled_broker_scores_worse_before_it_answers() {
        let cfg = ScoreConfig::default();
        let t0 = Instant::now();
        let s = BrokerScore::new(t0, 1);
        let t = feed(&s, &cfg, t0, ms(2), ms(10), 20);
        s.sent(t);
        s.sent(t + ms(50));
        let later = t + ms(500);
        let cost = s.cost(later, &cfg).unwrap();
        assert!(cost >= 400_000.0, "stalled requests count: {cost}");
        s.abandoned(t);
        s.abandoned(t + ms(50));
        assert!(s.cost(later, &cfg).unwrap() < 3000.0);
    }

    #[test]
    fn unreachable_brokers_cool_down() {
        let t0 = Instant::now();
        let s = BrokerScore::new(t0, 1);
        assert!(s.is_available(t0));
        s.unavailable(t0, ms(3000));
        assert!(!s.is_available(t0 + ms(2999)));
        assert!(s.is_available(t0 + ms(3000)));
    }

    #[test]
    fn stale_brokers_have_no_score() {
        let cfg = ScoreConfig::default();
        let t0 = Instant::now();
        let s = BrokerScore::new(t0, 1);
        assert_eq!(s.cost(t0, &cfg), None);
        let t = feed(&s, &cfg, t0, ms(5), ms(10), 3);
        assert!(s.cost(t, &cfg).is_some());
        assert_eq!(s.cost(t + cfg.stale_after + ms(1), &cfg), None);
    }

    #[test]
    fn estimate_stays_between_fastest_and_slowest_sample() {
        // A property over many pseudo-random sample sequences.
        let cfg = ScoreConfig::default();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..200 {
            let t0 = Instant::now();
            let s = BrokerScore::new(t0, 1);
            let (mut lo, mut hi) = (f64::MAX, 0.0f64);
            let mut t = t0;
            for _ in 0..50 {
                let rtt = ms(1 + next() % 100);
                lo = lo.min(rtt.as_secs_f64() * 1e6);
                hi = hi.max(rtt.as_secs_f64() * 1e6);
                t = feed(&s, &cfg, t, rtt, ms(next() % 50), 1);
                let c = s.cost(t, &cfg).unwrap();
                assert!(c >= lo - 1e-6 && c <= hi + 1e-6, "{c} outside [{lo}, {hi}]");
            }
        }
    }
}
