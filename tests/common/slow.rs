//! A slow broker 2 for routing tests, and how to measure where produce bytes went.
//!
//! The test cluster runs in "relayed" mode (scripts/cluster.sh), where every broker advertises
//! the address of a delaying relay in front of it, so every client, direct or through kroute,
//! and every follower replicating from it, sees the delay. `cluster.sh delay 2 MS` makes broker
//! 2 answer MS later (no netem on this kernel, hence a relay). Tests that use it change shared
//! state, so the tests of one binary take [`slow_world`]'s lock and reset the delay when done.

use std::sync::{Mutex, MutexGuard};

use super::*;

/// Serialises the tests of one binary: they share broker 2's delay (and the brokers' bandwidth
/// caps, see capacity.rs).
pub static SLOW_BROKER: Mutex<()> = Mutex::new(());

/// Broker 2's delay, changed within a test (the world puts it back to none when it ends).
pub struct SlowBroker;

impl SlowBroker {
    pub fn set(ms: u32) {
        cluster(&["delay", "2", &ms.to_string()]);
    }
}

/// Delays broker `n` by some milliseconds for as long as it lives (then by none).
pub struct DelayedBroker(u32);

impl DelayedBroker {
    pub fn new(n: u32, ms: u32) -> Self {
        cluster(&["delay", &n.to_string(), &ms.to_string()]);
        DelayedBroker(n)
    }
}

impl Drop for DelayedBroker {
    fn drop(&mut self) {
        let _ = std::process::Command::new(repo_root().join("scripts/cluster.sh"))
            .args(["delay", &self.0.to_string(), "0"])
            .status();
    }
}

/// One test's world: the binary's lock, kroute routing topics `route-*`, broker 2 slow by
/// [`SLOW_MS`].
pub struct SlowWorld {
    pub kroute: Kroute,
    _reset: DelayedBroker,
    _serial: MutexGuard<'static, ()>,
}

pub fn slow_world() -> SlowWorld {
    slow_world_with("")
}

/// [`slow_world`] with more kroute configuration (keys of `[routing]` first).
pub fn slow_world_with(routing_toml: &str) -> SlowWorld {
    slow_world_of(KrouteOptions::default(), routing_toml)
}

/// [`slow_world_with`] for a kroute started with `opts` (its `extra_toml` goes last).
pub fn slow_world_of(opts: KrouteOptions, routing_toml: &str) -> SlowWorld {
    let serial = SLOW_BROKER.lock().unwrap_or_else(|e| e.into_inner());
    let kroute = Kroute::start_with(KrouteOptions {
        extra_toml: format!(
            "[routing]\nstrategy = \"strict-cost\"\ninclude = [\"route-*\"]\n{routing_toml}\n{}",
            opts.extra_toml
        ),
        ..opts
    });
    let reset = DelayedBroker::new(2, SLOW_MS);
    SlowWorld {
        kroute,
        _reset: reset,
        _serial: serial,
    }
}

/// Produce bytes kroute sent to each broker so far.
pub fn produce_bytes(k: &Kroute) -> [f64; 3] {
    let text = k.metrics();
    [1, 2, 3].map(|b| {
        metric_sum(
            &text,
            "kroute_upstream_produce_bytes_total",
            &[&format!("broker=\"{b}\"")],
        )
    })
}

/// Broker 2's share of the produce bytes sent between two readings of [`produce_bytes`].
pub fn share_of_broker_2(before: [f64; 3], after: [f64; 3]) -> f64 {
    shares(before, after)[1]
}

/// Each broker's share of the produce bytes sent between two readings of [`produce_bytes`].
pub fn shares(before: [f64; 3], after: [f64; 3]) -> [f64; 3] {
    let d = [0, 1, 2].map(|i| after[i] - before[i]);
    let total: f64 = d.iter().sum();
    assert!(
        total > 1e6,
        "too little produce traffic through kroute: {d:?}"
    );
    d.map(|b| b / total)
}

/// Broker 2's delay in a [`slow_world`].
pub const SLOW_MS: u32 = 40;

/// The share of the bytes Astraea's linear rule (`Rule::Linear` in src/balance/strategy.rs)
/// leaves a broker slower by [`SLOW_MS`] than two others that answer in `base_ms`: weights are
/// `max - cost + min`, so the fast brokers weigh `SLOW_MS + base` and the slow one `base`. The
/// share grows with the base latency, which load raises (over SASL_SSL with a CPU hog the fast
/// brokers took about 45 ms). The default rule gives a slow broker less: its share falls
/// towards the probe floor for as long as it stays slower than the band.
pub fn slow_share(base_ms: f64) -> f64 {
    let slow = f64::from(SLOW_MS);
    base_ms / (3.0 * base_ms + 2.0 * slow)
}

/// Slow broker 2 got `share` of the `client` producer's bytes through `kroute`: less than
/// strict-cost gives it while the others answer within twice its delay (a quarter; without
/// routing it gets a third). On failure, kroute's cost of each broker says whether the others
/// answered that fast (on a machine too loaded for them to, the bound does not hold).
pub fn assert_slow_broker_avoided(kroute: &Kroute, share: f64, client: &str) {
    eprintln!("broker 2 share with the {client} producer: {share:.3}");
    let most = slow_share(2.0 * f64::from(SLOW_MS));
    if share >= most {
        let text = kroute.metrics();
        let costs = [1, 2, 3].map(|b| {
            let cost = metric_sum(
                &text,
                "kroute_broker_cost_seconds",
                &[&format!("broker=\"{b}\"")],
            );
            format!("broker {b} {:.1} ms", cost * 1000.0)
        });
        panic!(
            "slow broker 2 got {share:.3} of the {client} producer's bytes (at most {most:.3}; \
             equal: 0.33); kroute's costs now: {}",
            costs.join(", ")
        );
    }
}

/// The idempotent producer `client` moved its batches off slow broker 2 through kroute: broker
/// 2 got less than its share ([`assert_slow_broker_avoided`]), batches moved and were
/// renumbered, kroute owned exactly this one producer and passed it no sequence error.
pub fn assert_moved_off_broker_2(kroute: &Kroute, before: [f64; 3], client: &str) {
    let share = share_of_broker_2(before, produce_bytes(kroute));
    assert_slow_broker_avoided(kroute, share, client);
    assert!(kroute.metric("kroute_batches_moved_total", &[]) > 0.0);
    assert!(
        kroute.metric(
            "kroute_idempotent_batches_total",
            &["outcome=\"renumbered\""]
        ) > 0.0
    );
    assert_eq!(kroute.metric("kroute_idempotent_producers", &[]), 1.0);
    assert_no_sequence_error_passed(kroute);
}

/// kroute passed no sequence error of its own numbering to a client.
pub fn assert_no_sequence_error_passed(kroute: &Kroute) {
    assert_eq!(
        kroute.metric(
            "kroute_idempotent_batches_total",
            &["outcome=\"sequence_error_passed\""]
        ),
        0.0,
        "kroute passed sequence errors to the client"
    );
}
