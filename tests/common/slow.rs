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

/// One test's world: the binary's lock, kroute routing topics `route-*`, broker 2 slow by 40 ms.
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
    let reset = DelayedBroker::new(2, 40);
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
    let d: Vec<f64> = (0..3).map(|i| after[i] - before[i]).collect();
    let total: f64 = d.iter().sum();
    assert!(
        total > 1e6,
        "too little produce traffic through kroute: {d:?}"
    );
    d[1] / total
}

/// The idempotent producer `client` moved its batches off slow broker 2 through kroute: broker
/// 2 got under a fifth of the produce bytes since `before`, batches moved and were renumbered,
/// kroute owned exactly this one producer and passed it no sequence error.
pub fn assert_moved_off_broker_2(kroute: &Kroute, before: [f64; 3], client: &str) {
    let share = share_of_broker_2(before, produce_bytes(kroute));
    eprintln!("broker 2 share with the {client} producer: {share:.3}");
    assert!(
        share < 0.2,
        "slow broker 2 got {share:.3} of the {client} producer's bytes (equal: 0.33)"
    );
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
