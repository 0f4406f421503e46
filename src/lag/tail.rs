//! Tails `__consumer_offsets` from its start, as Burrow does, and records every offset commit of
//! the watched groups with the time the group coordinator wrote it.
//!
//! Why not only poll: OffsetFetch answers where a group is, not when it committed or how often,
//! so a polling collector must stamp commits with its own poll times and cannot see the same
//! offset committed twice. Both distort Burrow's rules: a healthy group looks stopped between
//! two polls, a stalled one (the same offset again and again) looks stopped rather than stalled.
//! The coordinators' log has every commit with its timestamp.
//!
//! One round every [`ROUND`]: a Fetch (read_committed) to each leader of `__consumer_offsets`
//! partitions, over a connection kept per broker, from where the last round stopped. The
//! records are decoded in [`super::commit_log`] and handed to the [`LagStore`], which from the
//! first round that read on takes its commits from here only ([`LagStore::commits_from_log`]).
//! Leaders are asked again after any error. A cluster that refuses kroute the topic (an ACL on
//! `__consumer_offsets`) is logged once, and the collector's polled commits stand in; so they do
//! after [`FALL_BACK_AFTER`] failed rounds in a row (a leader down), until a round succeeds.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{ApiKey, BrokerId, FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use tracing::{debug, info, warn};

use super::LagStore;
use super::collect::now_ms;
use super::commit_log::{self, Aborted, OffsetsRecord};
use super::metrics::LagMetrics;
use super::poll;
use crate::ask::Session;
use crate::cluster::Brokers;

/// The coordinators' log.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// Pause between two rounds of fetches: how late a commit can be recorded, at most, beyond the
/// time a round takes.
const ROUND: Duration = Duration::from_millis(500);

/// Fetch versions with topic names (v13 names topics by id), from Kafka 2.8's minimum.
const FETCH_VERSIONS: std::ops::RangeInclusive<i16> = 4..=12;

const MAX_BYTES: i32 = 4 << 20;
const PARTITION_MAX_BYTES: i32 = 1 << 20;

const OFFSET_OUT_OF_RANGE: i16 = 1;
const TOPIC_AUTHORIZATION_FAILED: i16 = 29;

/// Rounds in a row that must fail before the collector's polled commits stand in (10 s): a
/// leader of the topic that is down leaves its groups' commits unread, and without a stand-in
/// their windows would fall silent and turn STOP.
const FALL_BACK_AFTER: u32 = 20;

/// Tails forever (returns at once unless `lag.offsets_log` is on).
pub async fn run(brokers: Arc<dyn Brokers>, lag: Arc<LagStore>, metrics: Arc<LagMetrics>) {
    if !lag.config().offsets_log {
        return;
    }
    let mut tail = Tail::default();
    let (mut denied, mut failed_rounds) = (false, 0u32);
    loop {
        tokio::time::sleep(ROUND).await;
        if !brokers.cluster().is_ready() {
            continue;
        }
        let started_ms = now_ms();
        match tail.round(brokers.as_ref(), &lag, &metrics).await {
            Ok(read) => {
                if denied || failed_rounds >= FALL_BACK_AFTER {
                    info!("reading {OFFSETS_TOPIC} works again: lag commits come from it");
                }
                (denied, failed_rounds) = (false, 0);
                if read {
                    lag.log_read_at(started_ms);
                    lag.set_commits_from_log(true);
                }
            }
            Err(Refused::Denied) => {
                if !denied {
                    warn!(
                        "kroute may not read {OFFSETS_TOPIC} (topic authorization failed): lag verdicts come from polling only, which cannot tell when or how often a group committed"
                    );
                }
                lag.set_commits_from_log(false);
                denied = true;
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
            Err(Refused::Other(e)) => {
                debug!("reading {OFFSETS_TOPIC}: {e:#}");
                metrics.log_reads_failed.increment(1);
                tail.forget_leaders();
                failed_rounds += 1;
                if failed_rounds == FALL_BACK_AFTER && lag.commits_from_log() {
                    warn!(
                        "reading {OFFSETS_TOPIC} failed {FALL_BACK_AFTER} times in a row (last: {e:#}): polled commits stand in until it works again"
                    );
                    lag.set_commits_from_log(false);
                }
            }
        }
    }
}

enum Refused {
    Denied,
    Other(anyhow::Error),
}

impl From<anyhow::Error> for Refused {
    fn from(e: anyhow::Error) -> Self {
        Refused::Other(e)
    }
}

/// Where the tail stands.
#[derive(Default)]
struct Tail {
    /// Partition -> its leader's broker id; empty until asked (and after an error).
    leaders: BTreeMap<i32, i32>,
    /// Partition -> the next offset to read.
    next: HashMap<i32, i64>,
    sessions: HashMap<i32, Session>,
}

impl Tail {
    fn forget_leaders(&mut self) {
        self.leaders.clear();
        self.sessions.clear();
    }

    /// One fetch from every leader. Ok(false) while the topic does not exist yet. A leader that
    /// fails does not keep the others' commits from being recorded; the first error is
    /// returned after all were asked.
    async fn round(
        &mut self,
        brokers: &dyn Brokers,
        lag: &LagStore,
        metrics: &LagMetrics,
    ) -> Result<bool, Refused> {
        if self.leaders.is_empty() {
            self.find_leaders(brokers).await?;
            if self.leaders.is_empty() {
                return Ok(false); // no group has committed yet: the topic does not exist
            }
        }
        let mut by_leader: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
        for (partition, leader) in &self.leaders {
            by_leader.entry(*leader).or_default().push(*partition);
        }
        let mut first_error = None;
        for (leader, partitions) in by_leader {
            let read = self
                .read_from(brokers, lag, metrics, leader, &partitions)
                .await;
            if let Err(e) = read {
                self.sessions.remove(&leader);
                if matches!(e, Refused::Denied) {
                    return Err(e);
                }
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(true), Err)
    }

    async fn read_from(
        &mut self,
        brokers: &dyn Brokers,
        lag: &LagStore,
        metrics: &LagMetrics,
        leader: i32,
        partitions: &[i32],
    ) -> Result<(), Refused> {
        let addr = brokers
            .cluster()
            .address(leader)
            .ok_or_else(|| anyhow::anyhow!("broker {leader}: address unknown"))?;
        if let Entry::Vacant(slot) = self.sessions.entry(leader) {
            slot.insert(Session::open(&brokers.ask(&addr)).await?);
        }
        let answer = self.fetch(leader, partitions).await?;
        self.record(answer, lag, metrics)
    }

    /// The leaders of the topic's partitions, and where to start on the ones new to the tail:
    /// the start of the log, so that the windows fill with the history the log still has.
    async fn find_leaders(&mut self, brokers: &dyn Brokers) -> anyhow::Result<()> {
        let first = brokers
            .cluster()
            .node_ids()
            .into_iter()
            .find_map(|id| brokers.cluster().address(id))
            .ok_or_else(|| anyhow::anyhow!("no broker known"))?;
        let topic = BTreeSet::from([OFFSETS_TOPIC.to_string()]);
        let found = poll::leaders(&brokers.ask(&first), &topic).await?;
        let mut new: BTreeMap<i32, Vec<(String, i32)>> = BTreeMap::new();
        for ((_, partition), leader) in found.leaders {
            self.leaders.insert(partition, leader);
            if !self.next.contains_key(&partition) {
                new.entry(leader)
                    .or_default()
                    .push((OFFSETS_TOPIC.to_string(), partition));
            }
        }
        for (leader, partitions) in new {
            let addr = brokers
                .cluster()
                .address(leader)
                .ok_or_else(|| anyhow::anyhow!("broker {leader}: address unknown"))?;
            for ((_, partition), start) in
                poll::log_starts(&brokers.ask(&addr), &partitions).await?
            {
                self.next.insert(partition, start);
            }
        }
        Ok(())
    }

    async fn fetch(&mut self, leader: i32, partitions: &[i32]) -> anyhow::Result<FetchResponse> {
        let session = self
            .sessions
            .get_mut(&leader)
            .ok_or_else(|| anyhow::anyhow!("no connection to broker {leader}"))?;
        let version = session.version(ApiKey::Fetch, FETCH_VERSIONS)?;
        let wanted = partitions
            .iter()
            .filter_map(|p| self.next.get(p).map(|next| (*p, *next)))
            .map(|(partition, offset)| {
                FetchPartition::default()
                    .with_partition(partition)
                    .with_current_leader_epoch(-1)
                    .with_fetch_offset(offset)
                    .with_log_start_offset(-1)
                    .with_partition_max_bytes(PARTITION_MAX_BYTES)
            })
            .collect();
        let request = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(1)
            .with_max_bytes(MAX_BYTES)
            .with_isolation_level(1) // read_committed: see commit_log's Aborted
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(vec![
                FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_static_str(OFFSETS_TOPIC)))
                    .with_partitions(wanted),
            ]);
        session.call(ApiKey::Fetch, version, &request).await
    }

    /// Records the commits of one Fetch answer and moves the partitions' positions on.
    fn record(
        &mut self,
        answer: FetchResponse,
        lag: &LagStore,
        metrics: &LagMetrics,
    ) -> Result<(), Refused> {
        let now = now_ms();
        let watched = |group: &str| lag.config().watches(group);
        for topic in answer.responses {
            for p in topic.partitions {
                match p.error_code {
                    0 => {}
                    TOPIC_AUTHORIZATION_FAILED => return Err(Refused::Denied),
                    OFFSET_OUT_OF_RANGE => {
                        // Compaction or retention removed what was next: start again from
                        // the log's start, found with the leaders.
                        self.next.remove(&p.partition_index);
                        return Err(anyhow::anyhow!("offset out of range").into());
                    }
                    code => return Err(anyhow::anyhow!("Fetch error {code}").into()),
                }
                let Some(next) = self.next.get_mut(&p.partition_index) else {
                    continue;
                };
                let Some(records) = p.records else { continue };
                let aborted = p.aborted_transactions.unwrap_or_default();
                let mut aborted =
                    Aborted::new(aborted.iter().map(|a| (a.producer_id.0, a.first_offset)));
                let (sets, after, skipped) = commit_log::batches(records, *next);
                *next = after;
                if skipped > 0 {
                    debug!(
                        "{OFFSETS_TOPIC}-{}: {skipped} batches kroute cannot decode, skipped",
                        p.partition_index
                    );
                    metrics.log_undecodable.increment(skipped as u64);
                }
                for set in sets.iter().filter(|s| aborted.keeps(s)) {
                    for r in &set.records {
                        let Some(key) = r.key.as_deref() else {
                            continue;
                        };
                        match commit_log::decode(key, r.value.as_deref(), watched) {
                            Ok(OffsetsRecord::Commit(c)) => {
                                lag.record_logged_commit(&c, now);
                                metrics.commits_logged.increment(1);
                            }
                            Ok(OffsetsRecord::Deleted { .. } | OffsetsRecord::Other) => {}
                            Err(e) => {
                                debug!("{OFFSETS_TOPIC}-{}: {e}", p.partition_index);
                                metrics.log_undecodable.increment(1);
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }
}
