//! What the goals ask of a run, read off its trace.

use hdrhistogram::Histogram;

use crate::run::{BIN, Trace};

/// How a run met a drop (`at`) and recovery (`until`) of the watched broker.
pub struct Step {
    /// Seconds to settle near the oracle's share while degraded, and back after recovery.
    pub converge: Option<f64>,
    pub recover: Option<f64>,
    /// Most the watched share went above its share before the drop, after recovery.
    pub overshoot: f64,
    /// Largest peak-to-peak of any broker's 1 s shares in the three steady phases.
    pub peak_to_peak: f64,
}

impl Trace {
    /// Each broker's share of the bytes sent in `[from, to)`.
    pub fn shares(&self, from: f64, to: f64) -> Vec<f64> {
        let (a, b) = self.bins(from, to);
        let n = self.bytes.first().map_or(0, Vec::len);
        let mut sum = vec![0.0; n];
        for bin in &self.bytes[a..b] {
            for (s, x) in sum.iter_mut().zip(bin) {
                *s += x;
            }
        }
        let total: f64 = sum.iter().sum::<f64>().max(1e-9);
        sum.iter().map(|s| s / total).collect()
    }

    fn bins(&self, from: f64, to: f64) -> (usize, usize) {
        let a = ((from / BIN).round() as usize).min(self.bytes.len());
        let b = ((to / BIN).round() as usize).clamp(a, self.bytes.len());
        (a, b)
    }

    /// Share of `broker` in each whole second of `[from, to)`.
    pub fn second_shares(&self, broker: usize, from: f64, to: f64) -> Vec<f64> {
        let mut out = Vec::new();
        let mut t = from;
        while t + 1.0 <= to + 1e-9 {
            out.push(self.shares(t, t + 1.0)[broker]);
            t += 1.0;
        }
        out
    }

    /// The largest peak-to-peak of any broker's 1 s shares in `[from, to)`.
    pub fn peak_to_peak(&self, from: f64, to: f64) -> f64 {
        let n = self.bytes.first().map_or(0, Vec::len);
        (0..n)
            .map(|b| {
                let s = self.second_shares(b, from, to);
                let hi = s.iter().copied().fold(f64::MIN, f64::max);
                let lo = s.iter().copied().fold(f64::MAX, f64::min);
                hi - lo
            })
            .fold(0.0, f64::max)
    }

    /// Mean absolute change of `broker`'s 1 s share from one second to the next.
    pub fn mean_change(&self, broker: usize, from: f64, to: f64) -> f64 {
        let s = self.second_shares(broker, from, to);
        if s.len() < 2 {
            return 0.0;
        }
        s.windows(2).map(|w| (w[1] - w[0]).abs()).sum::<f64>() / (s.len() - 1) as f64
    }

    /// Latency percentile (ms) of the requests sent in `[from, to)` (whole seconds).
    pub fn percentile(&self, q: f64, from: f64, to: f64) -> f64 {
        let mut h = Histogram::<u64>::new_with_bounds(1, 600_000_000, 2).expect("bounds");
        let a = (from.floor() as usize).min(self.latency.len());
        let b = (to.ceil() as usize).clamp(a, self.latency.len());
        for s in &self.latency[a..b] {
            let _ = h.add(s);
        }
        h.value_at_quantile(q) as f64 / 1000.0
    }

    /// The first time after `at` (seconds after it) from which `broker`'s share, over
    /// half-second windows, is within `near` of `target` and its 1 s shares stay within `stay`
    /// of it until `until`. None: never.
    pub fn settles(
        &self,
        broker: usize,
        target: f64,
        at: f64,
        until: f64,
        near: f64,
        stay: f64,
    ) -> Option<f64> {
        let mut tau = 0.5;
        while at + tau <= until {
            let t = at + tau;
            let close = (self.shares(t - 0.5, t)[broker] - target).abs() <= near;
            if close
                && self
                    .second_shares(broker, t, until)
                    .iter()
                    .all(|s| (s - target).abs() <= stay)
            {
                return Some(tau);
            }
            tau += BIN;
        }
        None
    }

    /// The [`Step`] of broker `watched` dropping at `at` and recovering at `until`, in a run of
    /// `end` seconds: settling within 3 points of the target and staying within 5.
    pub fn step(&self, watched: usize, at: f64, until: f64, end: f64) -> Step {
        let target = self.oracle_share(watched, at + 10.0, until);
        let before = self.oracle_share(watched, 10.0, at);
        Step {
            converge: self.settles(watched, target, at, until, 0.03, 0.05),
            recover: self.settles(watched, before, until, end, 0.03, 0.05),
            overshoot: self
                .second_shares(watched, until, end)
                .iter()
                .map(|x| x - before)
                .fold(0.0, f64::max),
            peak_to_peak: self
                .peak_to_peak(10.0, at)
                .max(self.peak_to_peak(at + 10.0, until))
                .max(self.peak_to_peak(until + 10.0, end)),
        }
    }

    /// The oracle's share of `broker` averaged over `[from, to)` (an antagonist's changes
    /// included).
    pub fn oracle_mean(&self, broker: usize, from: f64, to: f64) -> f64 {
        let (a, b) = self.bins(from, to);
        let bins = &self.oracle[a.min(self.oracle.len())..b.min(self.oracle.len())];
        if bins.is_empty() {
            return 0.0;
        }
        bins.iter().map(|o| o[broker]).sum::<f64>() / bins.len() as f64
    }

    /// The oracle's share of `broker` in the middle of `[from, to)`.
    pub fn oracle_share(&self, broker: usize, from: f64, to: f64) -> f64 {
        let mid = (((from + to) / 2.0) / BIN) as usize;
        self.oracle
            .get(mid.min(self.oracle.len().saturating_sub(1)))
            .map_or(0.0, |o| o[broker])
    }
}
