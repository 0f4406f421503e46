//! Brokers with their own capacity: a bandwidth cap on one broker's relay, and the produce
//! throughput a real client gets to it.
//!
//! In relayed mode (scripts/cluster.sh) every connection to broker N, from clients and from
//! followers alike, goes through broker N's relay; `cluster.sh cap N MBPS` makes that relay a
//! link of MBPS MB/s per direction (a token bucket; 0 = unlimited). A cap is shared state of the
//! cluster, so a test that sets one holds [`super::slow::SLOW_BROKER`] (the delay tests' lock:
//! the tests of one binary never shape brokers at the same time) and resets the cap on drop.

use std::sync::MutexGuard;

use super::slow::SLOW_BROKER;
use super::*;

/// Broker `broker`'s relay capped at some MB/s for as long as it lives; unlimited again on drop,
/// also when the test fails.
pub struct CappedBroker {
    broker: u8,
}

impl CappedBroker {
    /// Caps `broker` at `mbps` MB/s per direction (`cluster.sh cap` returns once the relay
    /// applied it).
    pub fn set(broker: u8, mbps: f64) -> CappedBroker {
        let guard = CappedBroker { broker };
        guard.change(mbps);
        guard
    }

    /// Sets another cap (0 = unlimited); the guard still resets it on drop.
    pub fn change(&self, mbps: f64) {
        cluster(&["cap", &self.broker.to_string(), &format!("{mbps}")]);
    }
}

impl Drop for CappedBroker {
    fn drop(&mut self) {
        // not `cluster`: it would panic inside a panic when the cluster is gone
        let _ = Command::new(repo_root().join("scripts/cluster.sh"))
            .args(["cap", &self.broker.to_string(), "0"])
            .status();
    }
}

/// The lock the delay tests of this binary take too.
pub fn serial() -> MutexGuard<'static, ()> {
    SLOW_BROKER.lock().unwrap_or_else(|e| e.into_inner())
}

/// Value size of the records [`produce_rate`] sends.
pub const RECORD_SIZE: usize = 10_000;

/// Produces `count` records of [`RECORD_SIZE`] bytes with the Java client (default idempotent
/// producer, batches of up to 256 KiB so the client itself is not the limit) to `topic` through
/// `bootstrap`, checks they were all acknowledged, and returns the throughput in MB/s
/// (10^6 bytes/s) the client achieved: the record bytes acknowledged between the 10th and the
/// 90th percentile of the ack times, over that time (so the client's start and the last
/// stragglers do not count).
pub fn produce_rate(bootstrap: &str, topic: &str, count: usize) -> f64 {
    let (count_s, size_s) = (count.to_string(), RECORD_SIZE.to_string());
    let run = java_on(
        "produce",
        bootstrap,
        topic,
        &[
            "--count",
            &count_s,
            "--record-size",
            &size_s,
            "--linger-ms",
            "5",
            "--client-config",
            "batch.size=262144",
        ],
    );
    assert_eq!(run.count("produced"), count);
    assert_eq!(run.count("errors"), 0);
    let mut acked_at: Vec<f64> = run
        .records("ack")
        .iter()
        .map(|ack| {
            let field = |k: &str| ack[k].parse::<f64>().expect(k);
            field("at_ms") + field("latency_us") / 1000.0
        })
        .collect();
    assert_eq!(acked_at.len(), count, "one ack line per record");
    acked_at.sort_by(f64::total_cmp);
    let (from, to) = (count / 10, count * 9 / 10);
    let secs = (acked_at[to] - acked_at[from]) / 1000.0;
    assert!(secs > 0.0, "acks {from}..{to} all at one time");
    ((to - from) * RECORD_SIZE) as f64 / secs / 1e6
}
