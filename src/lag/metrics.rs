//! Lag in Prometheus: kroute's own counters for the collector (registered handles), and the
//! verdicts per group and partition, rendered at every scrape.
//!
//! The verdicts are rendered from the store rather than kept as registered gauges: a group or
//! partition that is forgotten then disappears from `/metrics` at once instead of lingering
//! with its last value, and the series are exactly the tracked ones, so `lag.max_groups` and
//! `lag.max_partitions` bound the cardinality. An unknown time lag has no sample (not 0).

use std::fmt::Write;

use metrics::{Counter, Gauge, counter, gauge};

use super::evaluate::GroupStatus;
use super::store::LagStore;

/// The collector's and the observer's counters.
#[derive(Clone)]
pub struct LagMetrics {
    pub polls_ok: Counter,
    pub polls_failed: Counter,
    pub poll_seconds: Gauge,
    pub commits_observed: Counter,
    pub commits_unreadable: Counter,
    pub commits_logged: Counter,
    pub log_reads_failed: Counter,
    pub log_undecodable: Counter,
}

impl Default for LagMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl LagMetrics {
    pub fn new() -> Self {
        Self {
            polls_ok: counter!("kroute_lag_polls_total", "outcome" => "ok"),
            polls_failed: counter!("kroute_lag_polls_total", "outcome" => "failed"),
            poll_seconds: gauge!("kroute_lag_poll_duration_seconds"),
            commits_observed: counter!("kroute_lag_commits_observed_total"),
            commits_unreadable: counter!("kroute_lag_commits_unreadable_total"),
            commits_logged: counter!("kroute_lag_commits_logged_total"),
            log_reads_failed: counter!("kroute_lag_offsets_log_errors_total", "kind" => "read"),
            log_undecodable: counter!("kroute_lag_offsets_log_errors_total", "kind" => "undecodable"),
        }
    }
}

/// The series rendered from the store: name, type, help.
pub const RENDERED: &[(&str, &str, &str)] = &[
    (
        "kroute_lag_group_status",
        "gauge",
        "Burrow status of the group: 0 NOTFOUND, 1 OK, 2 WARN, 3 ERR",
    ),
    (
        "kroute_lag_group_messages",
        "gauge",
        "Total lag of the group: the sum of its partitions' current lags (Burrow's totallag)",
    ),
    (
        "kroute_lag_group_time_lag_seconds",
        "gauge",
        "Largest known time lag of the group's partitions (absent while unknown)",
    ),
    (
        "kroute_lag_group_complete_ratio",
        "gauge",
        "Fraction of the group's partitions with a full window (Burrow's complete)",
    ),
    (
        "kroute_lag_partition_status",
        "gauge",
        "Burrow status of the partition: 1 OK, 2 WARN, 4 STOP, 5 STALL, 6 REWIND",
    ),
    (
        "kroute_lag_partition_messages",
        "gauge",
        "Current lag of the partition: newest log end minus newest commit",
    ),
    (
        "kroute_lag_partition_time_lag_seconds",
        "gauge",
        "How old the oldest unread message of the partition is (absent while unknown)",
    ),
    ("kroute_lag_groups", "gauge", "Consumer groups tracked now"),
    (
        "kroute_lag_groups_max",
        "gauge",
        "Most consumer groups tracked at once (lag.max_groups)",
    ),
    (
        "kroute_lag_partitions",
        "gauge",
        "Group partitions tracked now",
    ),
    (
        "kroute_lag_partitions_max",
        "gauge",
        "Most group partitions tracked at once (lag.max_partitions)",
    ),
    (
        "kroute_lag_groups_refused_total",
        "counter",
        "Times a group was not tracked because lag.max_groups was reached",
    ),
    (
        "kroute_lag_partitions_refused_total",
        "counter",
        "Times a group partition was not tracked because lag.max_partitions was reached",
    ),
];

/// The Prometheus text of every tracked group at `now_ms`.
pub fn render(lag: &LagStore, now_ms: i64) -> String {
    let statuses = lag.statuses(now_ms);
    let cluster = &lag.config().cluster;
    let mut out = String::with_capacity(256 + statuses.len() * 512);
    let mut families: Vec<(&str, String)> = RENDERED.iter().map(|r| (r.0, String::new())).collect();
    let mut put = |name: &str, labels: &str, value: f64| {
        if let Some((_, lines)) = families.iter_mut().find(|f| f.0 == name) {
            let _ = if labels.is_empty() {
                writeln!(lines, "{name} {value}")
            } else {
                writeln!(lines, "{name}{{{labels}}} {value}")
            };
        }
    };
    for (group, status) in &statuses {
        group_series(&mut put, cluster, group, status);
    }
    let counts = lag.counts();
    let config = lag.config();
    put("kroute_lag_groups", "", counts.groups as f64);
    put("kroute_lag_groups_max", "", config.max_groups as f64);
    put("kroute_lag_partitions", "", counts.partitions as f64);
    put(
        "kroute_lag_partitions_max",
        "",
        config.max_partitions as f64,
    );
    put(
        "kroute_lag_groups_refused_total",
        "",
        counts.groups_refused as f64,
    );
    put(
        "kroute_lag_partitions_refused_total",
        "",
        counts.partitions_refused as f64,
    );
    for ((name, kind, help), (_, lines)) in RENDERED.iter().zip(families) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        out.push_str(&lines);
    }
    out
}

fn group_series(
    put: &mut impl FnMut(&str, &str, f64),
    cluster: &str,
    group: &str,
    status: &GroupStatus,
) {
    let labels = format!(
        "cluster=\"{}\",group=\"{}\"",
        escape(cluster),
        escape(group)
    );
    put(
        "kroute_lag_group_status",
        &labels,
        f64::from(status.status.code()),
    );
    put(
        "kroute_lag_group_messages",
        &labels,
        status.total_lag as f64,
    );
    put(
        "kroute_lag_group_complete_ratio",
        &labels,
        f64::from(status.complete),
    );
    if let Some(seconds) = status.max_time_lag.seconds() {
        put("kroute_lag_group_time_lag_seconds", &labels, seconds);
    }
    for p in &status.partitions {
        let labels = format!(
            "{labels},topic=\"{}\",partition=\"{}\"",
            escape(&p.topic),
            p.partition
        );
        put(
            "kroute_lag_partition_status",
            &labels,
            f64::from(p.status.code()),
        );
        put(
            "kroute_lag_partition_messages",
            &labels,
            p.current_lag as f64,
        );
        if let Some(seconds) = p.time_lag.seconds() {
            put("kroute_lag_partition_time_lag_seconds", &labels, seconds);
        }
    }
}

/// A label value as the text format wants it: backslash, quote and newline escaped.
pub(crate) fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lag::config::LagConfig;
    use crate::lag::store::Source;

    #[test]
    fn renders_each_tracked_group_and_partition_and_no_unknown_time_lag() {
        let lag = LagStore::new(&LagConfig::default());
        lag.record_log_end(("t", 0), 100, 0);
        lag.record_commit("g\"1", ("t", 0), 40, 0, Source::Observed);
        let text = render(&lag, 1_000);
        let code = lag.status("g\"1", 1_000).unwrap().status.code();
        assert!(text.contains(&format!(
            "kroute_lag_group_status{{cluster=\"local\",group=\"g\\\"1\"}} {code}\n"
        )));
        assert!(text.contains(
            "kroute_lag_partition_messages{cluster=\"local\",group=\"g\\\"1\",topic=\"t\",partition=\"0\"} 60\n"
        ));
        assert!(text.contains("kroute_lag_groups 1\n"), "{text}");
        // One log-end point: the time lag is unknown, so there is no sample.
        assert!(!text.contains("kroute_lag_partition_time_lag_seconds{"));
        assert_eq!(text.matches("# TYPE ").count(), RENDERED.len());
    }
}
