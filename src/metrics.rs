//! Metrics as pre-registered, typed handles.
//!
//! Label lookups cost 100-200 ns per update; a held handle about 14 ns. So every series a hot
//! path touches is registered once (per API key at startup, per broker when the broker is first
//! seen) and the data path only increments handles it already holds.

use std::sync::{Arc, OnceLock};

use dashmap::DashMap;
use kafka_protocol::messages::ApiKey;
use metrics::{
    Counter, Gauge, Histogram, Unit, counter, describe_counter, describe_gauge, describe_histogram,
    gauge, histogram,
};

use crate::balance::keep::KeepReason;
use crate::skew::traffic::{Class, ProduceTraffic};

/// Name of the upstream latency histogram (its buckets are set when the exporter is installed).
pub const UPSTREAM_LATENCY: &str = "kroute_upstream_request_duration_seconds";

/// Bucket bounds in seconds: sub-millisecond loopback answers up to long-poll fetches. From 1
/// ms to 1 s each bound is at most 1.5x the one before, so a quantile is placed within 1.5x:
/// with steps of 2-2.5x a p99 could only be placed somewhere between 20 and 50 ms, too coarse
/// to hold the fleet simulator to a real run (docs/fleet.md, part 3).
pub const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05,
    0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0, 30.0,
];

/// What kind of series a metric is, for [`describe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// Every metric kroute exports, wherever it is registered: name, kind, unit, help text. The
/// one place metric names are documented; [`describe`] hands them to the recorder, so every
/// `# HELP` line comes from here (a unit test checks that every name registered in `src/` is
/// listed).
pub const DESCRIPTIONS: &[(&str, Kind, Option<Unit>, &str)] = &[
    // Process state.
    (
        "kroute_ready",
        Kind::Gauge,
        None,
        "1 while kroute is ready for traffic (what /ready answers 200 for), else 0",
    ),
    // Consumer lag ([lag]); the per-group series are rendered by crate::lag::metrics.
    (
        "kroute_lag_polls_total",
        Kind::Counter,
        Some(Unit::Count),
        "Lag polls of the cluster, by outcome (ok, failed: some request failed)",
    ),
    (
        "kroute_lag_poll_duration_seconds",
        Kind::Gauge,
        Some(Unit::Seconds),
        "How long the last lag poll took",
    ),
    (
        "kroute_lag_commits_observed_total",
        Kind::Counter,
        Some(Unit::Count),
        "Partition offsets of watched groups recorded from OffsetCommit requests through kroute",
    ),
    (
        "kroute_lag_commits_unreadable_total",
        Kind::Counter,
        Some(Unit::Count),
        "OffsetCommit requests or responses kroute could not read for lag (forwarded anyway)",
    ),
    (
        "kroute_lag_commits_logged_total",
        Kind::Counter,
        Some(Unit::Count),
        "Offset commits of watched groups recorded from __consumer_offsets",
    ),
    (
        "kroute_lag_offsets_log_errors_total",
        Kind::Counter,
        Some(Unit::Count),
        "Rounds of reading __consumer_offsets that failed (retried), and records or batches in it kroute could not decode (skipped), by kind",
    ),
    // Client side.
    (
        "kroute_client_connections_total",
        Kind::Counter,
        Some(Unit::Count),
        "Client connections accepted",
    ),
    (
        "kroute_client_connections_active",
        Kind::Gauge,
        Some(Unit::Count),
        "Client connections open now",
    ),
    (
        "kroute_client_connections_refused_total",
        Kind::Counter,
        Some(Unit::Count),
        "Client connections accepted and closed at once because a limit was reached, by reason (max_connections, max_connections_per_ip)",
    ),
    (
        "kroute_client_buffered_bytes",
        Kind::Gauge,
        Some(Unit::Bytes),
        "Bytes client connections hold now: requests read and not yet answered, replies not yet written",
    ),
    (
        "kroute_client_read_pauses_total",
        Kind::Counter,
        Some(Unit::Count),
        "Times kroute stopped reading from a client connection until it holds less, by limit (connection: limits.max_buffered_bytes_per_connection, total: limits.max_buffered_bytes, in_flight: limits.max_in_flight_per_connection)",
    ),
    (
        "kroute_client_timeouts_total",
        Kind::Counter,
        Some(Unit::Count),
        "Client connections kroute closed for a timeout, by reason (partial_frame: limits.partial_frame_timeout_ms, idle: limits.idle_timeout_ms)",
    ),
    (
        "kroute_requests_total",
        Kind::Counter,
        Some(Unit::Count),
        "Client requests by API (unknown: API keys kroute does not know)",
    ),
    (
        "kroute_request_bytes_total",
        Kind::Counter,
        Some(Unit::Bytes),
        "Bytes of client requests by API",
    ),
    (
        "kroute_response_bytes_total",
        Kind::Counter,
        Some(Unit::Bytes),
        "Bytes of responses to clients by API",
    ),
    (
        "kroute_client_protocol_errors_total",
        Kind::Counter,
        Some(Unit::Count),
        "Client connections closed by kroute for a bad frame or an unsupported SASL exchange, by reason",
    ),
    (
        "kroute_tls_handshake_failures_total",
        Kind::Counter,
        Some(Unit::Count),
        "Client connections that failed the TLS handshake",
    ),
    (
        "kroute_client_sasl_refused_total",
        Kind::Counter,
        Some(Unit::Count),
        "Clients that tried SASL on a kroute that authenticates upstream itself (originate)",
    ),
    // Brokers.
    (
        "kroute_brokers_known",
        Kind::Gauge,
        Some(Unit::Count),
        "Brokers in kroute's cluster view, each with a listener",
    ),
    (
        "kroute_metadata_refresh_failures_total",
        Kind::Counter,
        Some(Unit::Count),
        "Rounds of kroute's own metadata refresh in which no broker answered",
    ),
    (
        "kroute_injected_requests_total",
        Kind::Counter,
        Some(Unit::Count),
        "Requests kroute queued on a SASL client's own connection for another connection of the same principal (moved batches written under the client's identity)",
    ),
    (
        "kroute_client_connections_registered_total",
        Kind::Counter,
        Some(Unit::Count),
        "SASL passthrough client connections registered as their principal's, to carry moved batches under its identity",
    ),
    (
        "kroute_injected_requests_refused_total",
        Kind::Counter,
        Some(Unit::Count),
        "Injected requests not written because the connection's client was re-authenticating (answered as unanswered: retriable)",
    ),
    (
        "kroute_upstream_absurd_answers_total",
        Kind::Counter,
        Some(Unit::Count),
        "Broker answers refused because they describe no real cluster: more brokers than any has, or host names longer than DNS allows",
    ),
    (
        "kroute_upstream_unavailable_total",
        Kind::Counter,
        Some(Unit::Count),
        "Client connections closed because their broker could not be reached",
    ),
    (
        "kroute_upstream_connect_failures_total",
        Kind::Counter,
        Some(Unit::Count),
        "Connections to a broker that failed (TCP, TLS or SASL, or timed out), by broker",
    ),
    (
        "kroute_upstream_disconnects_total",
        Kind::Counter,
        Some(Unit::Count),
        "Broker connections that ended with requests in flight, by broker",
    ),
    (
        "kroute_upstream_request_timeouts_total",
        Kind::Counter,
        Some(Unit::Count),
        "Broker connections kroute closed because a request got no answer within upstream.request_timeout_ms, by broker",
    ),
    (
        UPSTREAM_LATENCY,
        Kind::Histogram,
        Some(Unit::Seconds),
        "Round trip of requests forwarded to a broker, by broker and API",
    ),
    (
        "kroute_upstream_produce_bytes_total",
        Kind::Counter,
        Some(Unit::Bytes),
        "Produce request bytes sent to each broker",
    ),
    (
        "kroute_upstream_protocol_errors_total",
        Kind::Counter,
        Some(Unit::Count),
        "Broker responses kroute could not parse or match to a request",
    ),
    (
        "kroute_rewrite_errors_total",
        Kind::Counter,
        Some(Unit::Count),
        "Broker responses whose broker addresses kroute could not rewrite",
    ),
    // Routing.
    (
        "kroute_broker_latency_seconds",
        Kind::Gauge,
        Some(Unit::Seconds),
        "Each broker's Produce round-trip estimate (peak-sensitive EWMA; shown, not routed on)",
    ),
    (
        "kroute_broker_cost_seconds",
        Kind::Gauge,
        Some(Unit::Seconds),
        "Routing score: each broker's cost, the time a Produce request sent now would take (kroute's bytes in flight at the broker's answer rate, at least its time per request or a stall's silence; neutral when stale)",
    ),
    (
        "kroute_batches_moved_total",
        Kind::Counter,
        Some(Unit::Count),
        "Keyless batches routing moved from the client's broker to another, by topic, from and to broker",
    ),
    (
        "kroute_records_moved_total",
        Kind::Counter,
        Some(Unit::Count),
        "Records in the batches routing moved, by topic, from and to broker",
    ),
    (
        "kroute_moved_bytes_total",
        Kind::Counter,
        Some(Unit::Bytes),
        "Bytes of the batches routing moved, by topic, from and to broker",
    ),
    (
        "kroute_batches_kept_total",
        Kind::Counter,
        Some(Unit::Count),
        "Produce batches left where the client put them, by reason",
    ),
    (
        "kroute_kept_bytes_total",
        Kind::Counter,
        Some(Unit::Bytes),
        "Bytes of the Produce batches left where the client put them, by reason (with kroute_moved_bytes_total: the share of keyless bytes routing could move, bench/coverage.sh)",
    ),
    // Idempotent producers.
    (
        "kroute_idempotent_batches_total",
        Kind::Counter,
        Some(Unit::Count),
        "Batches of idempotent producers whose numbering kroute owns, by outcome",
    ),
    (
        "kroute_idempotent_producers",
        Kind::Gauge,
        Some(Unit::Count),
        "Idempotent producers whose numbering kroute tracks now",
    ),
    (
        "kroute_idempotent_producers_max",
        Kind::Gauge,
        Some(Unit::Count),
        "Most idempotent producers kroute tracks at once (routing.max_producers)",
    ),
    (
        "kroute_idempotent_producers_adopted_total",
        Kind::Counter,
        Some(Unit::Count),
        "Idempotent producers kroute did not see start, asked once to reset to a newer epoch",
    ),
    (
        "kroute_idempotent_producers_recovered_total",
        Kind::Counter,
        Some(Unit::Count),
        "Idempotent producers kroute did not see start, numbered again above the epochs the brokers hold for them",
    ),
    (
        "kroute_idempotent_producers_refused_total",
        Kind::Counter,
        Some(Unit::Count),
        "Idempotent producers not tracked because routing.max_producers were tracked already",
    ),
    (
        "kroute_idempotent_producers_expired_total",
        Kind::Counter,
        Some(Unit::Count),
        "Idle idempotent producers forgotten after routing.producer_expiry_ms",
    ),
    // Security.
    (
        "kroute_sasl_authentications_total",
        Kind::Counter,
        Some(Unit::Count),
        "Upstream connections kroute authenticated with its own credentials, by mechanism",
    ),
    (
        "kroute_sasl_authentication_failures_total",
        Kind::Counter,
        Some(Unit::Count),
        "Brokers refusing kroute's credentials (or breaking off the exchange), by mechanism",
    ),
    (
        "kroute_sasl_reauthentications_total",
        Kind::Counter,
        Some(Unit::Count),
        "KIP-368 re-authentications of live upstream connections, by mechanism",
    ),
    (
        "kroute_upstream_tls_handshake_failures_total",
        Kind::Counter,
        Some(Unit::Count),
        "TLS handshakes with brokers that failed, by broker and reason",
    ),
    (
        "kroute_tls_reloads_total",
        Kind::Counter,
        Some(Unit::Count),
        "Changed certificate files re-read, by what (listener, upstream) and result (ok, error: the old files stay)",
    ),
    (
        "kroute_skew_sample_failures_total",
        Kind::Counter,
        Some(Unit::Count),
        "Skew samples (layout and log ends) that failed; the report keeps the last good one",
    ),
    (
        "kroute_tls_certificate_expiry_timestamp_seconds",
        Kind::Gauge,
        Some(Unit::Seconds),
        "When the certificate in use expires, Unix time, by what (listener, upstream)",
    ),
];

/// Gives the recorder the help text and unit of every metric in [`DESCRIPTIONS`]. Call once,
/// right after the recorder is installed.
pub fn describe() {
    for &(name, kind, unit, help) in DESCRIPTIONS {
        match (kind, unit) {
            (Kind::Counter, Some(u)) => describe_counter!(name, u, help),
            (Kind::Counter, None) => describe_counter!(name, help),
            (Kind::Gauge, Some(u)) => describe_gauge!(name, u, help),
            (Kind::Gauge, None) => describe_gauge!(name, help),
            (Kind::Histogram, Some(u)) => describe_histogram!(name, u, help),
            (Kind::Histogram, None) => describe_histogram!(name, help),
        }
    }
}

/// Sets the gauges that mirror kroute's state rather than count events: `kroute_ready` (1 if
/// `ready`: pass what `/ready` answers, so the two always agree) and
/// `kroute_idempotent_producers_max` (`routing.max_producers`). Call before every render of
/// `/metrics`.
pub fn observe(ready: bool, max_producers: usize) {
    gauge!("kroute_ready").set(if ready { 1.0 } else { 0.0 });
    gauge!("kroute_idempotent_producers_max").set(max_producers as f64);
}

/// Largest API key kroute keeps per-API series for; higher keys count as "unknown".
const API_SLOTS: usize = 128;

/// Counters for one API key.
pub struct ApiMetrics {
    pub requests: Counter,
    pub request_bytes: Counter,
    pub response_bytes: Counter,
}

/// Counters for one upstream broker, and lazily registered latency histograms per API.
pub struct BrokerMetrics {
    node: String,
    /// Produce request bytes sent to this broker (each broker's share of the traffic).
    pub produce_bytes: Counter,
    pub connect_failures: Counter,
    pub disconnects: Counter,
    /// Connections closed because the broker did not answer in time (upstream.request_timeout_ms).
    pub timeouts: Counter,
    latency: Vec<OnceLock<Histogram>>,
}

impl BrokerMetrics {
    /// The latency histogram for requests of `api_key` sent to this broker.
    pub fn latency(&self, api_key: i16) -> &Histogram {
        let slot = api_slot(api_key);
        self.latency[slot].get_or_init(|| {
            histogram!(UPSTREAM_LATENCY, "broker" => self.node.clone(), "api" => api_name(api_key))
        })
    }
}

/// Reasons a client connection is closed by kroute.
pub struct ProtocolErrors {
    pub negative_size: Counter,
    pub oversize: Counter,
    pub truncated: Counter,
    pub bad_header: Counter,
    /// A SaslHandshake v0 kroute cannot pass through (raw tokens of an unknown mechanism).
    pub unsupported_sasl: Counter,
}

/// The client-side limits ([`crate::client::limits`]).
#[derive(Clone)]
pub struct ClientLimitMetrics {
    /// Client connections open now (`kroute_client_connections_active`): admitted by the
    /// limits, TLS handshake included.
    pub open: Gauge,
    pub refused_max_connections: Counter,
    pub refused_per_ip: Counter,
    pub buffered_bytes: Gauge,
    pub paused_connection: Counter,
    pub paused_total: Counter,
    pub paused_in_flight: Counter,
    pub timeout_partial_frame: Counter,
    pub timeout_idle: Counter,
}

impl ClientLimitMetrics {
    fn new(open: Gauge) -> Self {
        let refused = |reason: &'static str| counter!("kroute_client_connections_refused_total", "reason" => reason);
        let paused =
            |limit: &'static str| counter!("kroute_client_read_pauses_total", "limit" => limit);
        let timeout =
            |reason: &'static str| counter!("kroute_client_timeouts_total", "reason" => reason);
        Self {
            open,
            refused_max_connections: refused("max_connections"),
            refused_per_ip: refused("max_connections_per_ip"),
            buffered_bytes: gauge!("kroute_client_buffered_bytes"),
            paused_connection: paused("connection"),
            paused_total: paused("total"),
            paused_in_flight: paused("in_flight"),
            timeout_partial_frame: timeout("partial_frame"),
            timeout_idle: timeout("idle"),
        }
    }
}

/// Counters for batches moved from one broker to another, for one topic.
pub struct MoveCounters {
    pub batches: Counter,
    pub records: Counter,
    pub bytes: Counter,
}

/// What the routing did with Produce batches.
pub struct RoutingMetrics {
    kept: Vec<Counter>,
    kept_bytes: Vec<Counter>,
    moved: DashMap<(String, i32, i32), MoveCounters>,
    /// Bytes by broker and by what routing did with them (the skew report's).
    pub traffic: ProduceTraffic,
}

impl RoutingMetrics {
    fn new() -> Self {
        Self {
            kept: KeepReason::ALL
                .iter()
                .map(|r| counter!("kroute_batches_kept_total", "reason" => r.label()))
                .collect(),
            kept_bytes: KeepReason::ALL
                .iter()
                .map(|r| counter!("kroute_kept_bytes_total", "reason" => r.label()))
                .collect(),
            moved: DashMap::new(),
            traffic: ProduceTraffic::new(),
        }
    }

    /// Counts one batch of `bytes` kept on broker `home` for `reason`.
    pub fn keep(&self, reason: KeepReason, home: i32, bytes: usize) {
        self.kept(reason).increment(1);
        self.kept_bytes[Self::index(reason)].increment(bytes as u64);
        self.traffic.add(home, Class::of_kept(reason), bytes);
    }

    /// The counter of batches kept for `reason`.
    pub fn kept(&self, reason: KeepReason) -> &Counter {
        &self.kept[Self::index(reason)]
    }

    fn index(reason: KeepReason) -> usize {
        KeepReason::ALL
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(0)
    }

    /// Counts one batch moved from `from` to `to`. The handles for a (topic, from, to) triple
    /// are registered once; later batches cost one map lookup.
    pub fn moved(&self, topic: &str, from: i32, to: i32, records: u32, bytes: usize) {
        let key = (topic.to_string(), from, to);
        let counters = self.moved.entry(key).or_insert_with(|| {
            let labels = [
                ("topic", topic.to_string()),
                ("from", from.to_string()),
                ("to", to.to_string()),
            ];
            MoveCounters {
                batches: counter!("kroute_batches_moved_total", &labels),
                records: counter!("kroute_records_moved_total", &labels),
                bytes: counter!("kroute_moved_bytes_total", &labels),
            }
        });
        counters.batches.increment(1);
        counters.records.increment(u64::from(records));
        counters.bytes.increment(bytes as u64);
        self.traffic.moved(from, to, bytes);
    }
}

/// Everything kroute exports, as handles.
/// What happens to the batches of idempotent producers kroute renumbers.
#[derive(Clone)]
pub struct SequenceMetrics {
    /// Batches sent with kroute's numbers (first attempts and resends).
    pub renumbered: Counter,
    /// Client retries resent with the numbers of their first attempt.
    pub resent: Counter,
    /// Client retries of batches already appended, answered by kroute.
    pub answered_from_memory: Counter,
    /// Batches with nowhere to go yet, answered REQUEST_TIMED_OUT.
    pub busy: Counter,
    /// Batches that waited in kroute until a partition could number them.
    pub waited: Counter,
    /// Batches sent joined behind another waiting batch, in one batch for one partition.
    pub joined: Counter,
    /// Client batches mixing keyed and keyless records, numbered as two ([`crate::route::divide`]).
    pub divided: Counter,
    /// OUT_OF_ORDER_SEQUENCE_NUMBER answers caused by kroute's numbering, reported as
    /// REQUEST_TIMED_OUT.
    pub sequence_errors_hidden: Counter,
    /// Producers kroute did not see start, adopted (asked to reset to a newer epoch).
    pub adopted: Counter,
    /// OUT_OF_ORDER_SEQUENCE_NUMBER answers passed to the client (the broker's state differs
    /// from kroute's: the client must reset, as it would without kroute).
    pub sequence_errors_passed: Counter,
    /// Successes reported REQUEST_TIMED_OUT because an earlier batch of the client's partition
    /// waits for its retry (the client would take them as acknowledging it).
    pub success_withheld: Counter,
}

impl SequenceMetrics {
    fn new() -> Self {
        let outcome = |o: &'static str| counter!("kroute_idempotent_batches_total", "outcome" => o);
        Self {
            renumbered: outcome("renumbered"),
            adopted: counter!("kroute_idempotent_producers_adopted_total"),
            resent: outcome("resent"),
            answered_from_memory: outcome("answered_from_memory"),
            busy: outcome("busy"),
            waited: outcome("waited"),
            joined: outcome("joined"),
            divided: outcome("divided"),
            sequence_errors_hidden: outcome("sequence_error_hidden"),
            sequence_errors_passed: outcome("sequence_error_passed"),
            success_withheld: outcome("success_withheld"),
        }
    }
}

pub struct Metrics {
    pub connections_accepted: Counter,
    pub client_limits: ClientLimitMetrics,
    pub upstream_unavailable: Counter,
    pub injected: Counter,
    pub injected_refused: Counter,
    pub tls_handshake_failures: Counter,
    pub protocol_errors: ProtocolErrors,
    pub rewrite_errors: Counter,
    pub upstream_protocol_errors: Counter,
    pub absurd_answers: Counter,
    pub brokers_known: Gauge,
    pub metadata_refresh_failures: Counter,
    pub routing: RoutingMetrics,
    pub sequencing: SequenceMetrics,
    pub lag: Arc<crate::lag::metrics::LagMetrics>,
    apis: Vec<ApiMetrics>,
    brokers: DashMap<i32, Arc<BrokerMetrics>>,
}

fn api_slot(api_key: i16) -> usize {
    usize::try_from(api_key)
        .ok()
        .filter(|k| *k < API_SLOTS)
        .unwrap_or(API_SLOTS)
}

/// Label value for an API key: kafka-protocol's name, or "unknown".
pub fn api_name(api_key: i16) -> &'static str {
    match ApiKey::try_from(api_key) {
        Ok(k) => api_key_name(k),
        Err(_) => "unknown",
    }
}

fn api_key_name(k: ApiKey) -> &'static str {
    // Debug names are the Kafka names ("Produce", "Metadata", ...); leak once per key at startup.
    static NAMES: OnceLock<Vec<(i16, &'static str)>> = OnceLock::new();
    let names = NAMES.get_or_init(|| {
        ApiKey::iter()
            .map(|k| (k as i16, &*Box::leak(format!("{k:?}").into_boxed_str())))
            .collect()
    });
    names
        .iter()
        .find(|(key, _)| *key == k as i16)
        .map(|(_, n)| *n)
        .unwrap_or("unknown")
}

impl Metrics {
    /// Registers every fixed series. Call after the recorder is installed.
    pub fn new() -> Self {
        let apis = (0..=API_SLOTS)
            .map(|slot| {
                let name = if slot == API_SLOTS {
                    "unknown"
                } else {
                    api_name(slot as i16)
                };
                ApiMetrics {
                    requests: counter!("kroute_requests_total", "api" => name),
                    request_bytes: counter!("kroute_request_bytes_total", "api" => name),
                    response_bytes: counter!("kroute_response_bytes_total", "api" => name),
                }
            })
            .collect();
        let error = |reason: &'static str| counter!("kroute_client_protocol_errors_total", "reason" => reason);
        Self {
            connections_accepted: counter!("kroute_client_connections_total"),
            client_limits: ClientLimitMetrics::new(gauge!("kroute_client_connections_active")),
            upstream_unavailable: counter!("kroute_upstream_unavailable_total"),
            injected: counter!("kroute_injected_requests_total"),
            injected_refused: counter!("kroute_injected_requests_refused_total"),
            tls_handshake_failures: counter!("kroute_tls_handshake_failures_total"),
            protocol_errors: ProtocolErrors {
                negative_size: error("negative_size"),
                oversize: error("oversize"),
                truncated: error("truncated"),
                bad_header: error("bad_header"),
                unsupported_sasl: error("unsupported_sasl"),
            },
            rewrite_errors: counter!("kroute_rewrite_errors_total"),
            upstream_protocol_errors: counter!("kroute_upstream_protocol_errors_total"),
            absurd_answers: counter!("kroute_upstream_absurd_answers_total"),
            brokers_known: gauge!("kroute_brokers_known"),
            metadata_refresh_failures: counter!("kroute_metadata_refresh_failures_total"),
            routing: RoutingMetrics::new(),
            sequencing: SequenceMetrics::new(),
            lag: Arc::new(crate::lag::metrics::LagMetrics::new()),
            apis,
            brokers: DashMap::new(),
        }
    }

    /// Per-API counters; unknown keys share one series.
    pub fn api(&self, api_key: i16) -> &ApiMetrics {
        &self.apis[api_slot(api_key)]
    }

    /// Per-broker handles, registered the first time a broker is used. `node_id` -1 stands for
    /// a bootstrap server whose node id is not known yet.
    pub fn broker(&self, node_id: i32) -> Arc<BrokerMetrics> {
        if let Some(m) = self.brokers.get(&node_id) {
            return m.clone();
        }
        self.brokers
            .entry(node_id)
            .or_insert_with(|| {
                let node = if node_id < 0 {
                    "bootstrap".to_string()
                } else {
                    node_id.to_string()
                };
                Arc::new(BrokerMetrics {
                    produce_bytes: counter!("kroute_upstream_produce_bytes_total", "broker" => node.clone()),
                    connect_failures: counter!("kroute_upstream_connect_failures_total", "broker" => node.clone()),
                    disconnects: counter!("kroute_upstream_disconnects_total", "broker" => node.clone()),
                    timeouts: counter!("kroute_upstream_request_timeouts_total", "broker" => node.clone()),
                    latency: (0..=API_SLOTS).map(|_| OnceLock::new()).collect(),
                    node,
                })
            })
            .clone()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `counter!`/`gauge!`/`histogram!` with a literal name anywhere under `src/`.
    fn registered_in_sources() -> Vec<(String, Kind, String)> {
        fn walk(dir: &std::path::Path, out: &mut Vec<(String, Kind, String)>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    walk(&path, out);
                    continue;
                }
                if path.extension().is_none_or(|e| e != "rs") {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                for (mac, kind) in [
                    ("counter!(", Kind::Counter),
                    ("gauge!(", Kind::Gauge),
                    ("histogram!(", Kind::Histogram),
                ] {
                    for (at, _) in text.match_indices(mac) {
                        let rest = text[at + mac.len()..].trim_start();
                        let Some(lit) = rest.strip_prefix('"') else {
                            continue;
                        };
                        let name = &lit[..lit.find('"').unwrap()];
                        if name.is_empty()
                            || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                        {
                            continue;
                        }
                        out.push((name.to_string(), kind, path.display().to_string()));
                    }
                }
            }
        }
        let mut out = Vec::new();
        walk(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut out,
        );
        out
    }

    #[test]
    fn every_metric_is_described_with_a_unit_in_its_name() {
        let found = registered_in_sources();
        assert!(found.len() > 20, "the source scan found only {found:?}");
        for (name, kind, file) in &found {
            let described = DESCRIPTIONS.iter().find(|d| d.0 == name);
            assert!(
                described.is_some_and(|d| d.1 == *kind),
                "{file}: {name} ({kind:?}) is not in metrics::DESCRIPTIONS as a {kind:?}"
            );
        }
        let mut names = std::collections::HashSet::new();
        for &(name, kind, unit, help) in DESCRIPTIONS {
            assert!(names.insert(name), "{name} is described twice");
            assert!(name.starts_with("kroute_"), "{name}");
            assert!(!help.is_empty() && !help.ends_with('.'), "{name}: {help:?}");
            assert_eq!(kind == Kind::Counter, name.ends_with("_total"), "{name}");
            let suffix = match unit {
                Some(Unit::Seconds) => Some("_seconds"),
                Some(Unit::Bytes) => Some("_bytes"),
                _ => None,
            };
            if let Some(suffix) = suffix {
                let base = name.strip_suffix("_total").unwrap_or(name);
                assert!(base.ends_with(suffix), "{name} must end in {suffix}");
            }
        }
    }

    #[test]
    fn api_names_and_slots() {
        assert_eq!(api_name(0), "Produce");
        assert_eq!(api_name(3), "Metadata");
        assert_eq!(api_name(-5), "unknown");
        assert_eq!(api_slot(-5), API_SLOTS);
        assert_eq!(api_slot(30_000), API_SLOTS);
        let m = Metrics::new();
        m.api(-1).requests.increment(1);
        assert!(Arc::ptr_eq(&m.broker(2), &m.broker(2)));
    }
}
