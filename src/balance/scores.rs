//! Live per-broker scores, measured from kroute's own upstream Produce requests.
//!
//! A broker's cost is the time a request sent to it now would take: the bytes this kroute still
//! has waiting there, at the rate the broker has been answering them (see [`Drain`]), and at
//! least the time it spends on one request. It moves with every request kroute sends, where the
//! latency of answers tells of the queue as it was when they left: on a loaded cluster that is
//! seconds old, and a rule acting on it keeps leaving a broker after it emptied and floods the
//! next (docs/fleet.md, part 1). A broker whose answers stall is seen before they arrive: its
//! cost is at least the time its requests have waited with no answer. A broker with no recent
//! answer gets no cost of its own (the strategy gives it a neutral one) and so still receives
//! probe traffic. Beside the cost, a peak-sensitive EWMA of round trips (like tower's
//! PeakEwma) feeds the latency gauge. Everything here takes the current time as an argument so
//! it can be tested exactly.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dashmap::DashMap;
use metrics::{Gauge, gauge};

/// How the estimates react.
#[derive(Debug, Clone, Copy)]
pub struct ScoreConfig {
    /// Time constant with which the latency estimate (the gauge) follows faster samples.
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

/// How fast the broker drains this kroute's requests: bytes answered over the time the broker
/// spent on them, both decayed with [`DRAIN_TAU_SECS`], so their ratio is the recent rate. A
/// request's time is from its sending or the answer before it, whichever is later: behind a
/// backlog that is the gap between answers, alone it is its whole latency. Idle time does not
/// count: a broker sent little is not slow, it answers each request in its own latency.
///
/// The time per request is counted on the request's own connection instead: a Kafka broker
/// works on one request per connection at a time, so from its sending or the previous answer
/// on that connection to its answer is the time the broker spent on it. Counted across the
/// broker, a broker serving several connections side by side answers more often than it
/// takes per request, and a busy broker would look faster than an idle one as fast.
///
/// It also keeps the bytes in flight averaged over [`BACKLOG_TAU_SECS`]: a sidecar that sends
/// a few requests a lease has one or none in flight at any instant, and the instant of a lease
/// would otherwise decide its cost.
#[derive(Debug, Clone, Copy, Default)]
struct Drain {
    bytes: f64,
    busy_secs: f64,
    /// The logarithms of the seconds the broker spent on each request (on its connection),
    /// summed: see [`Self::per_request`].
    log_request_secs: f64,
    answers: f64,
    /// When the last answer came (µs since the scores' epoch).
    answered: u64,
    backlog: f64,
    /// When `backlog` was last brought up to date.
    backlog_micros: u64,
}

impl Drain {
    /// Counts an answer of `bytes` at `micros` to a request sent at `sent`, whose connection
    /// had its previous answer at `previous` (the broker started on it at the later of the two).
    fn answer(&mut self, sent: u64, previous: u64, micros: u64, bytes: usize) {
        let dt = micros.saturating_sub(self.answered) as f64 / 1e6;
        let keep = (-dt / DRAIN_TAU_SECS).exp();
        let service = micros.saturating_sub(sent.max(self.answered)) as f64 / 1e6;
        let on_connection = micros.saturating_sub(previous.max(sent)) as f64 / 1e6;
        self.bytes = self.bytes * keep + bytes as f64;
        self.busy_secs = self.busy_secs * keep + service;
        self.log_request_secs = self.log_request_secs * keep + on_connection.max(1e-6).ln();
        self.answers = self.answers * keep + 1.0;
        self.answered = self.answered.max(micros);
    }

    /// Brings the backlog average up to `micros`, `in_flight` bytes having waited since the
    /// last update.
    fn backlog_at(&self, micros: u64, in_flight: u64) -> f64 {
        let dt = micros.saturating_sub(self.backlog_micros) as f64 / 1e6;
        let keep = (-dt / BACKLOG_TAU_SECS).exp();
        self.backlog * keep + in_flight as f64 * (1.0 - keep)
    }

    fn update_backlog(&mut self, micros: u64, in_flight: u64) {
        self.backlog = self.backlog_at(micros, in_flight);
        self.backlog_micros = self.backlog_micros.max(micros);
    }

    /// Bytes per second the broker answers while busy, once anything was answered.
    fn rate(&self) -> Option<f64> {
        (self.bytes > 0.0 && self.busy_secs > 0.0).then(|| self.bytes / self.busy_secs)
    }

    /// The time the broker typically spends on one request (seconds), counted on each
    /// request's connection, per request so that requests of different sizes that take the
    /// same time (latency rather than bytes) do not make it noisy. A geometric mean: a broker
    /// sent little is heard of once or twice a second, and with an arithmetic mean one answer
    /// twenty times slower than the rest (the last of a slow spell, a producer's first burst)
    /// kept it looking slow, and so starved, for seconds after it recovered.
    fn per_request(&self) -> Option<f64> {
        (self.answers > 0.0).then(|| (self.log_request_secs / self.answers).exp())
    }
}

/// Time constant of [`Drain`]'s rate and time per request.
const DRAIN_TAU_SECS: f64 = 1.0;
/// Time constant of [`Drain`]'s backlog: a fifth of a lease, far below the seconds a loaded
/// broker's queue takes to drain (a longer one lets a sidecar flood a broker for that long
/// before its cost shows it: in the simulator's `bind-all`, 0.25 s tripled p99).
const BACKLOG_TAU_SECS: f64 = 0.05;

/// What is known of one broker, kept together so readers never see half an update.
#[derive(Debug, Default)]
struct State {
    estimate: Option<Ewma>,
    in_flight: u64,
    in_flight_bytes: u64,
    /// Since when requests have been in flight without a break (µs since `epoch`).
    busy_since: u64,
    drain: Drain,
    /// Until when the broker is treated as unreachable (a connect failed or a connection died
    /// with requests in flight).
    unavailable_until: Option<Instant>,
}

impl State {
    /// The time a request sent at `micros` would take, or None before any answer: the bytes
    /// waiting ahead of it at the rate the broker drains them, and at least the time the broker
    /// spends on one request. Not the two added: a broker that answers requests side by side
    /// (its latency is mostly the network's) has some in flight without any waiting behind
    /// another, and a broker that queues them has far more waiting than one request.
    fn predicted(&self, micros: u64) -> Option<f64> {
        let backlog = self.drain.backlog_at(micros, self.in_flight_bytes);
        let waiting = backlog / self.drain.rate()?;
        Some(waiting.max(self.drain.per_request()?) * 1e6)
    }

    /// How long requests have waited with no answer at all (µs), 0 with none in flight.
    fn silence(&self, micros: u64) -> f64 {
        if self.in_flight == 0 {
            return 0.0;
        }
        micros.saturating_sub(self.busy_since.max(self.drain.answered)) as f64
    }
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

    /// A Produce request of `bytes` left for this broker at `at`.
    pub fn sent(&self, at: Instant, bytes: usize) {
        let micros = self.micros(at);
        let mut s = self.state();
        let in_flight = s.in_flight_bytes;
        s.drain.update_backlog(micros, in_flight);
        if s.in_flight == 0 {
            s.busy_since = micros;
        }
        s.in_flight += 1;
        s.in_flight_bytes += bytes as u64;
    }

    /// A request of `bytes` will never be answered (its connection ended).
    pub fn abandoned(&self, bytes: usize) {
        let mut s = self.state();
        s.in_flight = s.in_flight.saturating_sub(1);
        s.in_flight_bytes = s.in_flight_bytes.saturating_sub(bytes as u64);
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

    /// The request of `bytes` sent at `sent` was answered at `now`; `previous_answer` is the
    /// previous answer on its connection (any instant up to `sent` if there was none): the
    /// broker started on the request at the later of the two.
    pub fn answered(
        &self,
        sent: Instant,
        previous_answer: Instant,
        now: Instant,
        bytes: usize,
        config: &ScoreConfig,
    ) {
        let now_micros = self.micros(now);
        let rtt = now.saturating_duration_since(sent).as_secs_f64() * 1e6;
        let mut s = self.state();
        let in_flight = s.in_flight_bytes;
        s.drain.update_backlog(now_micros, in_flight);
        let (sent, previous) = (self.micros(sent), self.micros(previous_answer));
        s.drain.answer(sent, previous, now_micros, bytes);
        s.in_flight = s.in_flight.saturating_sub(1);
        s.in_flight_bytes = s.in_flight_bytes.saturating_sub(bytes as u64);
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

    /// Whether anything new is known since `since`: an answer, or requests waiting longer
    /// than the broker was expected to take (it stalls).
    pub fn news_since(&self, since: Instant, now: Instant) -> bool {
        let micros = self.micros(now);
        let s = self.state();
        let answered = s.estimate.is_some_and(|e| e.at > since);
        let silence = s.silence(micros);
        let stalled = silence > 0.0 && s.predicted(micros).is_none_or(|p| silence > p);
        answered || stalled
    }

    /// The cost (µs) of sending to this broker now, or None without recent evidence.
    ///
    /// The cost is the time a request sent now is expected to take: this kroute's bytes still
    /// waiting at the broker, and the request's own, at the rate the broker has been draining
    /// them. It reacts to what kroute sends at once: latencies measured on answers tell of the
    /// queue as it was when those requests left, and when queues take seconds to drain, a rule
    /// acting on them keeps leaving a broker long after it stopped being loaded, then floods
    /// another (the swings of docs/fleet.md, part 1). A broker that stops answering costs at
    /// least the time it has been silent.
    pub fn cost(&self, now: Instant, config: &ScoreConfig) -> Option<f64> {
        let micros = self.micros(now);
        let s = self.state();
        let recent = s
            .estimate
            .filter(|e| now.saturating_duration_since(e.at) <= config.stale_after)
            .map(|e| e.micros);
        let silence = s.silence(micros);
        let predicted = recent.and(s.predicted(micros));
        drop(s);
        let cost = match (predicted.or(recent), silence) {
            (Some(c), st) => Some(c.max(st)),
            // In flight but no recent answers: only evidence once it is worse than usual.
            (None, st) if st > config.stale_after.as_secs_f64() * 1e6 / 10.0 => Some(st),
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

    const BYTES: usize = 1000;

    /// A broker that serves requests one after another, `service` each, in virtual time, and
    /// tells the score of each send and answer in time order.
    struct Fifo<'a> {
        score: &'a BrokerScore,
        cfg: ScoreConfig,
        service: Duration,
        /// Answers due: (when, sent).
        due: std::collections::VecDeque<(Instant, Instant)>,
        /// The last answer: the broker starts on the next request no earlier.
        last_answer: Option<Instant>,
        latencies: Vec<Duration>,
    }

    impl<'a> Fifo<'a> {
        fn new(score: &'a BrokerScore, service: Duration) -> Self {
            Self {
                score,
                cfg: ScoreConfig::default(),
                service,
                due: Default::default(),
                last_answer: None,
                latencies: Vec::new(),
            }
        }

        /// Delivers the answers due by `t`.
        fn until(&mut self, t: Instant) {
            while let Some(&(at, sent)) = self.due.front().filter(|d| d.0 <= t) {
                self.due.pop_front();
                let previous = self.last_answer.unwrap_or(sent);
                self.score.answered(sent, previous, at, BYTES, &self.cfg);
                self.last_answer = Some(at);
                self.latencies.push(at - sent);
            }
        }

        fn send(&mut self, t: Instant) {
            self.until(t);
            let start = self.due.back().map_or(t, |d| d.0.max(t));
            self.score.sent(t, BYTES);
            self.due.push_back((start + self.service, t));
        }

        /// Sends `count` requests `gap` apart from `t`; returns the time after the last.
        fn steady(&mut self, mut t: Instant, gap: Duration, count: u32) -> Instant {
            for _ in 0..count {
                self.send(t);
                t += gap;
            }
            self.until(t);
            t
        }

        fn cost(&mut self, t: Instant) -> f64 {
            self.until(t);
            self.score.cost(t, &self.cfg).unwrap()
        }
    }

    #[test]
    fn a_broker_sent_little_costs_its_latency() {
        let t0 = Instant::now();
        let s = BrokerScore::new(t0, 1);
        let mut b = Fifo::new(&s, ms(2));
        let t = b.steady(t0, ms(10), 50);
        let cost = b.cost(t + ms(100));
        assert!((cost - 2000.0).abs() < 100.0, "{cost}");
    }

    #[test]
    fn a_broker_serving_connections_side_by_side_costs_what_an_idle_one_as_fast_does() {
        // Every 20 ms, broker 1 gets a request on each of two connections at once, broker 2
        // one request; both take 8 ms over each request, broker 1 on its two side by side.
        // Counted across the broker, broker 1's second answer came 0 ms after its first.
        let cfg = ScoreConfig::default();
        let t0 = Instant::now();
        let (busy, idle) = (BrokerScore::new(t0, 1), BrokerScore::new(t0, 2));
        let mut t = t0;
        for _ in 0..100 {
            busy.sent(t, BYTES);
            busy.sent(t, BYTES);
            idle.sent(t, BYTES);
            for _ in 0..2 {
                busy.answered(t, t, t + ms(8), BYTES, &cfg);
            }
            idle.answered(t, t, t + ms(8), BYTES, &cfg);
            t += ms(20);
        }
        let (busy, idle) = (busy.cost(t, &cfg).unwrap(), idle.cost(t, &cfg).unwrap());
        assert!((idle - 8000.0).abs() < 100.0, "idle {idle}");
        assert!((busy - idle).abs() < 0.1 * idle, "busy {busy}, idle {idle}");
    }

    #[test]
    fn a_backlog_costs_before_its_answers_tell_and_not_after_it_drained() {
        let t0 = Instant::now();
        let s = BrokerScore::new(t0, 1);
        let mut b = Fifo::new(&s, ms(2));
        let t = b.steady(t0, ms(10), 50);
        // A burst of 100 requests: 200 ms of work.
        for _ in 0..100 {
            b.send(t);
        }
        let soon = t + ms(50);
        let cost = b.cost(soon);
        let seen = b.latencies.iter().max().copied().unwrap_or_default();
        assert!(
            cost > 2.0 * seen.as_secs_f64() * 1e6,
            "cost {cost} µs while the slowest answer so far took {seen:?}"
        );
        assert!(cost > 100_000.0, "{cost}");
        // Once it drained, the last answers took 200 ms, but a request sent now takes 2: seen
        // a few backlog time constants after the last answer.
        let drained = t + ms(400);
        let cost = b.cost(drained);
        assert!(b.latencies.iter().max() >= Some(&ms(190)));
        assert!(cost < 4000.0, "drained, cost {cost}");
    }

    #[test]
    fn a_slower_broker_is_seen_within_a_few_answers() {
        let t0 = Instant::now();
        let s = BrokerScore::new(t0, 1);
        let mut b = Fifo::new(&s, ms(2));
        let t = b.steady(t0, ms(10), 50);
        b.service = ms(20);
        let t = b.steady(t, ms(25), 4);
        // A typical time per request over the last second: four answers of 20 ms among forty
        // of 2 raise it by a quarter, a second of them by four times (the peak-sensitive
        // latency estimate of before took one answer; it also kept a drained broker costly
        // for as long as its backlog's answers came in).
        let cost = b.cost(t);
        assert!(cost > 2_400.0, "after 4 answers of 20 ms, cost {cost}");
        let t = b.steady(t, ms(25), 36);
        let cost = b.cost(t);
        assert!(
            cost > 8_000.0,
            "after a second of answers of 20 ms, cost {cost}"
        );
        let t = b.steady(t, ms(25), 160);
        let cost = b.cost(t);
        assert!((cost - 20_000.0).abs() < 2000.0, "{cost}");
    }

    #[test]
    fn a_broker_heard_of_seldom_looks_recovered_within_seconds_of_recovering() {
        // Twice a second, as a broker sent little is: 5 s of 100 ms answers, then 4 ms ones.
        let t0 = Instant::now();
        let s = BrokerScore::new(t0, 1);
        let mut b = Fifo::new(&s, ms(100));
        let t = b.steady(t0, ms(500), 10);
        b.service = ms(4);
        let t = b.steady(t, ms(500), 4);
        // An arithmetic mean over the same second still reads 18 ms: the slow answers' weight
        // has decayed to a seventh, but each weighs 25 fast ones.
        let cost = b.cost(t);
        assert!(cost < 8_000.0, "2 s after recovering, cost {cost}");
    }

    #[test]
    fn a_stalled_broker_scores_worse_before_it_answers() {
        let cfg = ScoreConfig::default();
        let t0 = Instant::now();
        let s = BrokerScore::new(t0, 1);
        let mut b = Fifo::new(&s, ms(2));
        let t = b.steady(t0, ms(10), 20);
        s.sent(t, BYTES);
        s.sent(t + ms(50), BYTES);
        let later = t + ms(500);
        let cost = s.cost(later, &cfg).unwrap();
        assert!(cost >= 400_000.0, "stalled requests count: {cost}");
        assert!(s.news_since(t + ms(100), later), "a stall is news");
        s.abandoned(BYTES);
        s.abandoned(BYTES);
        assert!(s.cost(later + ms(500), &cfg).unwrap() < 3000.0);
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
        let mut b = Fifo::new(&s, ms(5));
        let t = b.steady(t0, ms(10), 3);
        assert!(s.cost(t, &cfg).is_some());
        assert_eq!(s.cost(t + cfg.stale_after + ms(1), &cfg), None);
    }

    #[test]
    fn one_request_at_a_time_costs_between_the_fastest_and_slowest_service() {
        // A property over many pseudo-random sequences of services, each request sent once
        // the one before was answered, the cost read a second after the last.
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
            let mut b = Fifo::new(&s, ms(1));
            let (mut lo, mut hi) = (f64::MAX, 0.0f64);
            let mut t = t0;
            for _ in 0..50 {
                b.service = ms(1 + next() % 100);
                lo = lo.min(b.service.as_secs_f64() * 1e6);
                hi = hi.max(b.service.as_secs_f64() * 1e6);
                let gap = b.service + ms(next() % 50);
                t = b.steady(t, gap, 1);
                let c = b.cost(t + ms(1000));
                assert!(
                    c >= lo * 0.999 && c <= hi * 1.001,
                    "{c} outside [{lo}, {hi}]"
                );
            }
        }
    }
}
