//! The sampler: every `skew.sample_interval_ms`, the cluster's layout, every partition's log
//! end (read from its leader) and kroute's produce byte totals, kept as the last two
//! [`Sample`]s. Rates are the difference between them: the brokers' log ends say how many
//! records each partition takes from every producer, kroute's totals what passed through it.
//!
//! A failed sample is counted and logged once when a streak of failures begins and once when it
//! ends (the metadata refresh already warns about an unreachable cluster); the last good
//! samples stay, so the report goes on showing what was last known, with its time.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics::counter;
use tracing::info;

use super::layout::{Layout, fetch_layout};
use super::traffic::ClassBytes;
use crate::lag::collect::now_ms;
use crate::lag::poll::log_ends;
use crate::proxy::Proxy;

/// What one sample read.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// When it was taken (ms since the epoch).
    pub at_ms: i64,
    pub layout: Layout,
    /// Log-end offset of each partition whose leader answered.
    pub log_ends: BTreeMap<(String, i32), i64>,
    /// kroute's produce bytes since it started, by broker and class.
    pub traffic: BTreeMap<i32, ClassBytes>,
}

/// The previous sample and the newest, once taken.
pub type LastTwo = (Option<Arc<Sample>>, Option<Arc<Sample>>);

/// The last two samples (older first).
#[derive(Default)]
pub struct Samples {
    last: Mutex<LastTwo>,
}

impl Samples {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&self, sample: Sample) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        last.0 = last.1.take();
        last.1 = Some(Arc::new(sample));
    }

    /// (previous, newest).
    pub fn last_two(&self) -> LastTwo {
        self.last.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Samples forever (returns at once when `skew.enabled` is off, or when kroute has no
/// connection of its own to the cluster: SASL passthrough without kroute's credentials).
pub async fn run(proxy: Arc<Proxy>, samples: Arc<Samples>) {
    if !proxy.config.skew.enabled || proxy.security.learns_brokers_from_clients() {
        return;
    }
    let every = Duration::from_millis(proxy.config.skew.sample_interval_ms);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let failures = counter!("kroute_skew_sample_failures_total");
    let mut failing = false;
    loop {
        tick.tick().await;
        if !proxy.cluster.is_ready() {
            continue;
        }
        match take(&proxy).await {
            Ok(sample) => {
                if failing {
                    info!("skew sampling works again");
                    failing = false;
                }
                samples.push(sample);
            }
            Err(e) => {
                failures.increment(1);
                if !failing {
                    info!("skew sampling failed ({e:#}); the report shows the last good sample");
                    failing = true;
                }
            }
        }
    }
}

/// One sample: the layout from a known broker, then each leader's log ends. A leader that
/// fails leaves its partitions out of this sample (their rates are unknown, not zero).
async fn take(proxy: &Proxy) -> anyhow::Result<Sample> {
    let mut last_error = None;
    let mut layout = None;
    let configured = &proxy.config.upstream.bootstrap_servers;
    for addr in proxy.cluster.bootstrap_candidates(configured) {
        match fetch_layout(&proxy.ask(&addr)).await {
            Ok(l) => {
                layout = Some(l);
                break;
            }
            Err(e) => last_error = Some(e.context(addr)),
        }
    }
    let Some(layout) = layout else {
        return Err(last_error.unwrap_or_else(|| anyhow::anyhow!("no broker known")));
    };
    let mut by_leader: BTreeMap<i32, Vec<(String, i32)>> = BTreeMap::new();
    for (topic, p) in layout.partitions().filter(|(_, p)| p.leader >= 0) {
        by_leader
            .entry(p.leader)
            .or_default()
            .push((topic.to_string(), p.partition));
    }
    let mut ends = BTreeMap::new();
    for (leader, partitions) in by_leader {
        let Some(addr) = proxy.cluster.address(leader) else {
            continue;
        };
        if let Ok(read) = log_ends(&proxy.ask(&addr), &partitions).await {
            ends.extend(read);
        }
    }
    Ok(Sample {
        at_ms: now_ms(),
        layout,
        log_ends: ends,
        traffic: proxy.metrics.routing.traffic.totals(),
    })
}
