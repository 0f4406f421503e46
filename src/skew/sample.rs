//! The sampler: every `skew.sample_interval_ms`, the cluster's layout, every partition's log
//! end (read from its leader) and kroute's produce byte totals, kept for `skew.rate_window_ms`
//! ([`Samples`]). Rates are the difference between the oldest and the newest: the brokers' log ends say how many
//! records each partition takes from every producer, kroute's totals what passed through it.
//!
//! A failed sample is counted and logged once when a streak of failures begins and once when it
//! ends (the metadata refresh already warns about an unreachable cluster); the last good
//! samples stay, so the report goes on showing what was last known, with its time.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics::counter;
use tracing::info;

use super::Sources;
use super::layout::{Layout, fetch_layout};
use super::traffic::ClassBytes;
use crate::lag::collect::now_ms;
use crate::lag::poll::log_ends;

/// What one sample read.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// When it was taken (ms since the epoch).
    pub at_ms: i64,
    /// Shared with the previous sample while it does not change.
    pub layout: Arc<Layout>,
    /// Log-end offset of each partition whose leader answered.
    pub log_ends: BTreeMap<(String, i32), i64>,
    /// kroute's produce bytes since it started, by broker and class.
    pub traffic: BTreeMap<i32, ClassBytes>,
}

/// The oldest sample of the rate window and the newest, once taken.
pub type Window = (Option<Arc<Sample>>, Option<Arc<Sample>>);

/// The samples of the last `skew.rate_window_ms`, oldest first. Rates are taken between the
/// oldest and the newest: over one sample interval, a partition's rate is a handful of records
/// and a plan weighted by it follows noise (measured: 22/10/4 partitions under an even keyed
/// load looked 59/55/23 over 1.6 s), while over minutes it is the load.
pub struct Samples {
    window_ms: i64,
    kept: Mutex<VecDeque<Arc<Sample>>>,
}

impl Samples {
    /// Keeps the samples of the last `window_ms`.
    pub fn new(window_ms: u64) -> Self {
        Self {
            window_ms: i64::try_from(window_ms).unwrap_or(i64::MAX),
            kept: Mutex::new(VecDeque::new()),
        }
    }

    pub fn push(&self, mut sample: Sample) {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(last) = kept.back()
            && last.layout == sample.layout
        {
            sample.layout = last.layout.clone();
        }
        let newest_at = sample.at_ms;
        kept.push_back(Arc::new(sample));
        // The oldest kept is the newest one at least the window old: rates span the window.
        while kept.len() > 2 && kept[1].at_ms <= newest_at - self.window_ms {
            kept.pop_front();
        }
    }

    /// (oldest in the window, newest).
    pub fn window(&self) -> Window {
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let oldest = kept.front().filter(|_| kept.len() > 1).cloned();
        (oldest, kept.back().cloned())
    }
}

/// Samples forever (returns at once when `skew.enabled` is off, or when kroute has no
/// connection of its own to the cluster: SASL passthrough without kroute's credentials).
pub async fn run(sources: Arc<dyn Sources>, samples: Arc<Samples>) {
    if !sources.settings().enabled || sources.learns_brokers_from_clients() {
        return;
    }
    let every = Duration::from_millis(sources.settings().sample_interval_ms);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let failures = counter!("kroute_skew_sample_failures_total");
    let mut failing = false;
    loop {
        tick.tick().await;
        if !sources.cluster().is_ready() {
            continue;
        }
        match take(sources.as_ref()).await {
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

/// The layout now, from the first known broker (or configured bootstrap server) that answers.
pub async fn current_layout(sources: &dyn Sources) -> anyhow::Result<Layout> {
    let mut last_error = anyhow::anyhow!("no broker known");
    let configured = sources.bootstrap_servers();
    for addr in sources.cluster().bootstrap_candidates(configured) {
        match fetch_layout(&sources.ask(&addr)).await {
            Ok(layout) => return Ok(layout),
            Err(e) => last_error = e.context(format!("Metadata from {addr}")),
        }
    }
    Err(last_error)
}

/// One sample: the layout from a known broker, then each leader's log ends. A leader that
/// fails leaves its partitions out of this sample (their rates are unknown, not zero).
async fn take(sources: &dyn Sources) -> anyhow::Result<Sample> {
    let layout = current_layout(sources).await?;
    let mut by_leader: BTreeMap<i32, Vec<(String, i32)>> = BTreeMap::new();
    for (topic, p) in layout.partitions().filter(|(_, p)| p.leader >= 0) {
        by_leader
            .entry(p.leader)
            .or_default()
            .push((topic.to_string(), p.partition));
    }
    let mut ends = BTreeMap::new();
    for (leader, partitions) in by_leader {
        let Some(addr) = sources.cluster().address(leader) else {
            continue;
        };
        if let Ok(read) = log_ends(&sources.ask(&addr), &partitions).await {
            ends.extend(read);
        }
    }
    Ok(Sample {
        at_ms: now_ms(),
        layout: Arc::new(layout),
        log_ends: ends,
        traffic: sources.traffic().totals(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> Sample {
        Sample {
            at_ms: ms,
            ..Sample::default()
        }
    }

    #[test]
    fn the_window_spans_the_rate_window_once_it_can() {
        let samples = Samples::new(10_000);
        assert!(samples.window().1.is_none());
        samples.push(at(0));
        let (oldest, newest) = samples.window();
        assert!(oldest.is_none() && newest.is_some(), "one sample: no rates");
        for t in [2_000, 4_000, 9_000] {
            samples.push(at(t));
        }
        let (oldest, newest) = samples.window();
        assert_eq!((oldest.unwrap().at_ms, newest.unwrap().at_ms), (0, 9_000));
        samples.push(at(12_000));
        // 2 000 is the newest sample at least 10 s before 12 000.
        assert_eq!(samples.window().0.unwrap().at_ms, 2_000);
        samples.push(at(30_000));
        assert_eq!(samples.window().0.unwrap().at_ms, 12_000);
    }

    #[test]
    fn an_unchanged_layout_is_shared() {
        let samples = Samples::new(10_000);
        samples.push(at(0));
        samples.push(at(1));
        let (a, b) = samples.window();
        assert!(Arc::ptr_eq(&a.unwrap().layout, &b.unwrap().layout));
    }
}
