//! The lag collector: every `lag.poll_interval_ms`, asks the cluster which groups exist, who owns
//! their partitions, what they committed and where the partitions' logs end, and hands it all
//! to the [`LagStore`].
//!
//! One poll, in order:
//! 1. ListGroups on every broker: each lists the groups it coordinates;
//! 2. on each coordinator, for its watched groups: DescribeGroups (classic groups) or
//!    ConsumerGroupDescribe (KIP-848 groups) for the owners, and OffsetFetch for the commits;
//! 3. Metadata for every topic, then ListOffsets on each partition's leader (Burrow's topic
//!    endpoints list every topic's log ends; the windows use the committed partitions');
//! 4. the log ends are recorded first, then the commits, so a commit's lag is taken against a
//!    log end read after it (never one older than the commit, which would flatter a consumer).
//!
//! A broker that fails leaves its groups unread this time; the rest of the poll goes on. A
//! failure streak is logged once it lasts [`WARN_AFTER_FAILED_POLLS`] polls (one lost
//! connection is not worth a warning: the next poll reads it all again) and once when it ends.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tracing::{debug, info, warn};

use super::metrics::LagMetrics;
use super::poll::{self, Listed};
use super::store::{LagStore, Owner, Source, TopicPartition};
use crate::cluster::Brokers;

/// Polls in a row that must fail in part before it is logged as a warning.
pub const WARN_AFTER_FAILED_POLLS: u32 = 3;

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Polls forever.
pub async fn run(brokers: Arc<dyn Brokers>, lag: Arc<LagStore>, metrics: Arc<LagMetrics>) {
    let every = Duration::from_millis(lag.config().poll_interval_ms);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failed_in_a_row = 0u32;
    loop {
        tick.tick().await;
        if !brokers.cluster().is_ready() {
            continue;
        }
        let started = Instant::now();
        let errors = poll_once(brokers.as_ref(), &lag).await;
        metrics.poll_seconds.set(started.elapsed().as_secs_f64());
        match errors.first() {
            None => {
                metrics.polls_ok.increment(1);
                if failed_in_a_row >= WARN_AFTER_FAILED_POLLS {
                    info!("lag polling works again");
                }
                failed_in_a_row = 0;
            }
            Some(first) => {
                metrics.polls_failed.increment(1);
                failed_in_a_row += 1;
                if failed_in_a_row == WARN_AFTER_FAILED_POLLS {
                    warn!(
                        errors = errors.len(),
                        "lag polling failed in part {failed_in_a_row} times in a row (last: {first}); the groups involved keep their last state"
                    );
                } else {
                    debug!(errors = errors.len(), "lag poll failed in part: {first}");
                }
            }
        }
    }
}

/// One poll; returns what failed.
async fn poll_once(brokers: &dyn Brokers, lag: &LagStore) -> Vec<String> {
    let asked_ms = now_ms();
    let mut errors = Vec::new();
    let addresses: Vec<String> = brokers
        .cluster()
        .node_ids()
        .into_iter()
        .filter_map(|id| brokers.cluster().address(id))
        .collect();
    let mut owners: HashMap<String, HashMap<TopicPartition, Owner>> = HashMap::new();
    let mut commits: HashMap<String, Vec<(TopicPartition, i64)>> = HashMap::new();
    for addr in &addresses {
        let ask = brokers.ask(addr);
        let groups = match poll::list_groups(&ask).await {
            Ok(groups) => groups,
            Err(e) => {
                errors.push(format!("{addr}: ListGroups: {e:#}"));
                continue;
            }
        };
        let watched: Vec<Listed> = groups
            .into_iter()
            .filter(|g| lag.config().watches(&g.group))
            .collect();
        if let Err(e) = read_groups(&ask, &watched, &mut owners, &mut commits).await {
            errors.push(format!("{addr}: {e:#}"));
        }
    }
    let mut read: BTreeSet<TopicPartition> = lag.partitions_read();
    read.extend(commits.values().flatten().map(|(tp, _)| tp.clone()));
    let log_ends = match read_log_ends(brokers, lag, &addresses).await {
        Ok((ends, failed)) => {
            errors.extend(failed);
            ends
        }
        Err(e) => {
            errors.push(format!("log ends: {e:#}"));
            Vec::new()
        }
    };
    let now = now_ms();
    let mut topics: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for ((topic, partition), offset) in log_ends {
        if read.contains(&(topic.clone(), partition)) {
            lag.record_log_end((&topic, partition), offset, now);
        }
        topic_offset(&mut topics, topic, partition, offset);
    }
    if !topics.is_empty() {
        lag.set_topic_offsets(topics);
    }
    for (group, owned) in owners {
        if !lag.listed(&group, owned, now) {
            continue;
        }
        for ((topic, partition), offset) in commits.remove(&group).unwrap_or_default() {
            let polled = Source::Polled { asked_ms };
            lag.record_commit(&group, (&topic, partition), offset, now, polled);
        }
    }
    lag.expire(now);
    errors
}

/// Owners and commits of the `groups` a broker coordinates.
async fn read_groups(
    ask: &crate::ask::Ask<'_>,
    groups: &[Listed],
    owners: &mut HashMap<String, HashMap<TopicPartition, Owner>>,
    commits: &mut HashMap<String, Vec<(TopicPartition, i64)>>,
) -> anyhow::Result<()> {
    if groups.is_empty() {
        return Ok(());
    }
    let (consumer, classic): (Vec<&Listed>, Vec<&Listed>) =
        groups.iter().partition(|g| g.consumer_protocol);
    let names = |gs: &[&Listed]| gs.iter().map(|g| g.group.clone()).collect::<Vec<_>>();
    let mut found = HashMap::new();
    if !classic.is_empty() {
        found.extend(poll::classic_owners(ask, &names(&classic)).await?);
    }
    if !consumer.is_empty() {
        found.extend(poll::consumer_owners(ask, &names(&consumer)).await?);
    }
    let all: Vec<String> = groups.iter().map(|g| g.group.clone()).collect();
    let committed = poll::committed(ask, &all).await?;
    for group in all {
        // A group listed but not described (it just went away) still counts as listed.
        owners.insert(group.clone(), found.remove(&group).unwrap_or_default());
        if let Some(c) = committed.get(&group) {
            commits.insert(group, c.clone());
        }
    }
    Ok(())
}

/// Puts a partition's log end into its topic's list (Burrow's `offsets`: one per partition, by
/// partition number; -1 for a partition not read).
fn topic_offset(topics: &mut BTreeMap<String, Vec<i64>>, topic: String, partition: i32, end: i64) {
    let Ok(index) = usize::try_from(partition) else {
        return;
    };
    let offsets = topics.entry(topic).or_default();
    if offsets.len() <= index {
        offsets.resize(index + 1, -1);
    }
    offsets[index] = end;
}

/// The log ends of every partition of every topic, read from their leaders (as Burrow reads
/// them: its topic endpoints list them all); also teaches the store topic ids. Returns the
/// readings and the leaders that failed.
async fn read_log_ends(
    brokers: &dyn Brokers,
    lag: &LagStore,
    addresses: &[String],
) -> anyhow::Result<(Vec<(TopicPartition, i64)>, Vec<String>)> {
    let first = addresses
        .first()
        .ok_or_else(|| anyhow::anyhow!("no broker known"))?;
    let found = poll::all_leaders(&brokers.ask(first)).await?;
    lag.learn_topic_ids(found.topic_ids);
    let mut by_leader: BTreeMap<i32, Vec<TopicPartition>> = BTreeMap::new();
    for (tp, leader) in found.leaders {
        by_leader.entry(leader).or_default().push(tp);
    }
    let (mut ends, mut failed) = (Vec::new(), Vec::new());
    for (leader, tps) in by_leader {
        let Some(addr) = brokers.cluster().address(leader) else {
            failed.push(format!("broker {leader}: address unknown"));
            continue;
        };
        match poll::log_ends(&brokers.ask(&addr), &tps).await {
            Ok(read) => ends.extend(read),
            Err(e) => failed.push(format!("{addr}: ListOffsets: {e:#}")),
        }
    }
    Ok((ends, failed))
}
