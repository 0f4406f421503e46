//! What kroute knows of the watched groups: each group's commit windows and owners, and each
//! partition's log-end history, filled by the collector and by commits seen passing through,
//! read by the metrics and the HTTP API.
//!
//! One lock for all of it: writers come once per poll and once per OffsetCommit, readers once
//! per scrape or API call, and each holds the lock for a short walk over plain maps. The caps
//! (`lag.max_groups`, `lag.max_partitions`) bound the memory and the metrics' cardinality;
//! whatever they keep out is counted, never silently lost.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use super::commit_log::LoggedCommit;
use super::config::LagConfig;
use super::evaluate::{GroupStatus, Params, PartitionInput, evaluate_group};
use super::log_end::LogEnd;
use super::window::{Commit, CommitWindow};

/// A topic and partition.
pub type TopicPartition = (String, i32);

/// Who owns a partition in a group: the member's host and client id (Burrow's `owner`,
/// `client_id`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owner {
    pub host: String,
    pub client_id: String,
}

/// Where a commit was learnt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Read with OffsetFetch asked at `asked_ms`: recorded only when the offset changed, since
    /// the answer does not say whether the group committed again, and only if nothing newer
    /// than the question was recorded meanwhile (a commit seen passing while the answer was on
    /// its way is newer than the answer, and recording the answer after it would look like a
    /// rewind).
    Polled { asked_ms: i64 },
    /// An OffsetCommit through kroute the broker accepted: every one counts.
    Observed,
    /// Read from `__consumer_offsets`, written by the coordinator at `timestamp_ms`: every one
    /// counts, at its own time.
    Logged { timestamp_ms: i64 },
}

/// What the caps kept out, and how much is tracked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub groups: usize,
    pub partitions: usize,
    /// Groups not tracked because `lag.max_groups` was reached (each time one was seen).
    pub groups_refused: u64,
    /// Partitions not tracked because `lag.max_partitions` was reached.
    pub partitions_refused: u64,
}

struct Group {
    windows: BTreeMap<TopicPartition, CommitWindow>,
    owners: HashMap<TopicPartition, Owner>,
    /// When a broker last listed the group (ms since the epoch).
    listed_ms: i64,
}

#[derive(Default)]
struct State {
    groups: BTreeMap<String, Group>,
    log_ends: HashMap<TopicPartition, LogEnd>,
    topic_ids: HashMap<[u8; 16], String>,
    /// Every topic's log ends by partition, from the last poll (Burrow's topic endpoints).
    topic_offsets: BTreeMap<String, Vec<i64>>,
    partitions: usize,
    groups_refused: u64,
    partitions_refused: u64,
}

/// The lag state of every watched group.
pub struct LagStore {
    config: LagConfig,
    params: Params,
    state: Mutex<State>,
    /// Whether commits come from `__consumer_offsets` ([`super::tail`]): then polled and
    /// observed ones are ignored, or one commit would be recorded twice at two times.
    from_log: AtomicBool,
    /// When the tail's last successful read of `__consumer_offsets` began (i64::MIN: none yet).
    log_read_ms: AtomicI64,
}

impl LagStore {
    pub fn new(config: &LagConfig) -> Self {
        Self {
            config: config.clone(),
            params: Params::of(config),
            state: Mutex::new(State::default()),
            from_log: AtomicBool::new(false),
            log_read_ms: AtomicI64::new(i64::MIN),
        }
    }

    pub fn config(&self) -> &LagConfig {
        &self.config
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic elsewhere under the lock leaves plain maps behind: still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a log-end offset read at `now_ms`.
    pub fn record_log_end(&self, (topic, partition): (&str, i32), offset: i64, now_ms: i64) {
        let mut state = self.lock();
        let key = (topic.to_owned(), partition);
        let (intervals, points) = (self.config.intervals, self.config.time_lag_points);
        state
            .log_ends
            .entry(key)
            .or_insert_with(|| LogEnd::new(intervals, points))
            .record(offset, now_ms);
    }

    /// Every topic's log ends by partition, as the last poll read them.
    pub fn set_topic_offsets(&self, topics: BTreeMap<String, Vec<i64>>) {
        self.lock().topic_offsets = topics;
    }

    /// The topics of the last poll, sorted.
    pub fn topics(&self) -> Vec<String> {
        self.lock().topic_offsets.keys().cloned().collect()
    }

    /// A topic's log ends by partition; `None` for a topic the last poll did not see.
    pub fn topic_offsets(&self, topic: &str) -> Option<Vec<i64>> {
        self.lock().topic_offsets.get(topic).cloned()
    }

    /// Remembers the names of topic ids (OffsetCommit v10 names topics by id).
    pub fn learn_topic_ids(&self, ids: impl IntoIterator<Item = ([u8; 16], String)>) {
        self.lock().topic_ids.extend(ids);
    }

    pub fn topic_name(&self, id: &[u8; 16]) -> Option<String> {
        self.lock().topic_ids.get(id).cloned()
    }

    /// Notes that a broker lists `group` now, with the owners of its partitions. Returns
    /// whether the group is tracked (false: refused by `lag.max_groups`).
    pub fn listed(&self, group: &str, owners: HashMap<TopicPartition, Owner>, now_ms: i64) -> bool {
        let mut state = self.lock();
        let Some(g) = group_entry(&mut state, group, self.config.max_groups, now_ms) else {
            return false;
        };
        g.listed_ms = now_ms;
        g.owners = owners;
        true
    }

    /// Whether commits are taken from `__consumer_offsets` (see [`Source::Logged`]).
    pub fn commits_from_log(&self) -> bool {
        self.from_log.load(Ordering::Relaxed)
    }

    pub fn set_commits_from_log(&self, on: bool) {
        self.from_log.store(on, Ordering::Relaxed);
    }

    /// Notes a read of `__consumer_offsets` that began at `at_ms`: the commits made before
    /// then are known (or older ones still are being caught up on).
    pub fn log_read_at(&self, at_ms: i64) {
        self.log_read_ms.fetch_max(at_ms, Ordering::Relaxed);
    }

    /// The time a verdict at `now_ms` is taken at: now, or, while commits come from the log,
    /// when the tail last read it. A commit made since is not known yet, so the silence it
    /// would end must not count as the consumer's: Burrow reads the topic as it is written,
    /// the tail every 500 ms, and a consumer committing after every poll has a window that
    /// spans less than that (Burrow's STOP rule compares the two).
    fn judged_at(&self, now_ms: i64) -> i64 {
        let read = self.log_read_ms.load(Ordering::Relaxed);
        if self.commits_from_log() && read != i64::MIN {
            now_ms.min(read)
        } else {
            now_ms
        }
    }

    /// Records a commit read from `__consumer_offsets`, learnt at `now_ms`.
    pub fn record_logged_commit(&self, commit: &LoggedCommit, now_ms: i64) {
        let source = Source::Logged {
            timestamp_ms: commit.timestamp_ms,
        };
        let tp = (commit.topic.as_str(), commit.partition);
        self.record_commit(&commit.group, tp, commit.offset, now_ms, source);
    }

    /// Records a commit of `group` learnt at `now_ms`, with its lag against the newest log end
    /// read by the commit's time. Polled and observed commits are ignored while commits come
    /// from the log.
    pub fn record_commit(
        &self,
        group: &str,
        (topic, partition): (&str, i32),
        offset: i64,
        now_ms: i64,
        source: Source,
    ) {
        if offset < 0 {
            return; // no commit (OffsetFetch answers -1)
        }
        if self.commits_from_log() && !matches!(source, Source::Logged { .. }) {
            return;
        }
        let mut guard = self.lock();
        let state = &mut *guard;
        let key = (topic.to_owned(), partition);
        let timestamp_ms = match source {
            Source::Logged { timestamp_ms } => timestamp_ms,
            Source::Polled { .. } | Source::Observed => now_ms,
        };
        let log_end = state
            .log_ends
            .get(&key)
            .and_then(|end| end.known_at(timestamp_ms))
            .map(|e| e.offset);
        let is_new = !state
            .groups
            .get(group)
            .is_some_and(|g| g.windows.contains_key(&key));
        if !state.groups.contains_key(group) && state.groups.len() >= self.config.max_groups {
            state.groups_refused += 1;
            return;
        }
        if is_new && state.partitions >= self.config.max_partitions {
            state.partitions_refused += 1;
            return;
        }
        let Some(g) = group_entry(state, group, self.config.max_groups, now_ms) else {
            return;
        };
        let (intervals, min_distance) = (
            self.config.intervals,
            i64::try_from(self.config.min_distance_ms).unwrap_or(i64::MAX),
        );
        let window = g
            .windows
            .entry(key)
            .or_insert_with(|| CommitWindow::new(intervals, min_distance));
        if let (Source::Polled { asked_ms }, Some(newest)) = (source, window.newest())
            && (newest.offset == offset || newest.observed_ms >= asked_ms)
        {
            return;
        }
        let commit = Commit {
            offset,
            timestamp_ms,
            observed_ms: now_ms,
        };
        window.record(commit, log_end);
        if is_new {
            state.partitions += 1;
        }
    }

    /// Forgets groups no broker listed for `lag.expire_group_ms`, and the log ends no tracked
    /// group reads any more.
    pub fn expire(&self, now_ms: i64) {
        let mut guard = self.lock();
        let state = &mut *guard;
        let keep_ms = i64::try_from(self.config.expire_group_ms).unwrap_or(i64::MAX);
        let before = state.groups.len();
        state
            .groups
            .retain(|_, g| now_ms.saturating_sub(g.listed_ms) <= keep_ms);
        if state.groups.len() != before {
            state.partitions = state.groups.values().map(|g| g.windows.len()).sum();
        }
        let read: BTreeSet<&TopicPartition> = state
            .groups
            .values()
            .flat_map(|g| g.windows.keys())
            .collect();
        state.log_ends.retain(|tp, _| read.contains(tp));
    }

    /// Every partition some tracked group has committed: whose log ends to read.
    pub fn partitions_read(&self) -> BTreeSet<TopicPartition> {
        let state = self.lock();
        state
            .groups
            .values()
            .flat_map(|g| g.windows.keys().cloned())
            .collect()
    }

    /// The tracked groups, sorted.
    pub fn groups(&self) -> Vec<String> {
        self.lock().groups.keys().cloned().collect()
    }

    /// Burrow's verdict on `group` at `now_ms` ([`Self::judged_at`]); `None` for a group kroute
    /// does not track.
    pub fn status(&self, group: &str, now_ms: i64) -> Option<GroupStatus> {
        let at = self.judged_at(now_ms);
        let state = self.lock();
        let g = state.groups.get(group)?;
        Some(judge(&state, g, &self.params, at))
    }

    /// Every tracked group's verdict, sorted by group.
    pub fn statuses(&self, now_ms: i64) -> Vec<(String, GroupStatus)> {
        let at = self.judged_at(now_ms);
        let state = self.lock();
        state
            .groups
            .iter()
            .map(|(name, g)| (name.clone(), judge(&state, g, &self.params, at)))
            .collect()
    }

    pub fn counts(&self) -> Counts {
        let state = self.lock();
        Counts {
            groups: state.groups.len(),
            partitions: state.partitions,
            groups_refused: state.groups_refused,
            partitions_refused: state.partitions_refused,
        }
    }
}

/// The entry of `group`, created if the cap allows (a refusal is counted).
fn group_entry<'a>(
    state: &'a mut State,
    group: &str,
    max_groups: usize,
    now_ms: i64,
) -> Option<&'a mut Group> {
    if !state.groups.contains_key(group) {
        if state.groups.len() >= max_groups {
            state.groups_refused += 1;
            return None;
        }
        let fresh = Group {
            windows: BTreeMap::new(),
            owners: HashMap::new(),
            listed_ms: now_ms,
        };
        state.groups.insert(group.to_owned(), fresh);
    }
    state.groups.get_mut(group)
}

fn judge(state: &State, group: &Group, params: &Params, now_ms: i64) -> GroupStatus {
    let unowned = Owner::default();
    let inputs: Vec<PartitionInput<'_>> = group
        .windows
        .iter()
        .map(|(tp, window)| {
            let owner = group.owners.get(tp).unwrap_or(&unowned);
            PartitionInput {
                topic: &tp.0,
                partition: tp.1,
                owner: &owner.host,
                client_id: &owner.client_id,
                commits: window,
                log_end: state.log_ends.get(tp),
            }
        })
        .collect();
    evaluate_group(&inputs, params, now_ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lag::Status;

    fn store(config: LagConfig) -> LagStore {
        LagStore::new(&config)
    }

    #[test]
    fn polled_commits_count_only_when_the_offset_moves_observed_ones_always() {
        let s = store(LagConfig {
            intervals: 5,
            ..LagConfig::default()
        });
        s.record_log_end(("t", 0), 100, 0);
        let polled = Source::Polled { asked_ms: 0 };
        for (i, source) in [polled, polled, Source::Observed].into_iter().enumerate() {
            s.record_commit("g", ("t", 0), 40, i as i64 * 1_000, source);
        }
        let status = s.status("g", 3_000).unwrap();
        let p = &status.partitions[0];
        assert_eq!(p.start.map(|c| c.timestamp_ms), Some(0));
        assert_eq!(p.end.map(|c| c.timestamp_ms), Some(2_000));
        assert_eq!(p.complete, 2.0 / 5.0);
        assert_eq!(p.current_lag, 60);
    }

    #[test]
    fn a_poll_answer_older_than_a_commit_seen_passing_is_not_a_rewind() {
        let s = store(LagConfig::default());
        s.record_log_end(("t", 0), 100, 0);
        s.record_commit("g", ("t", 0), 50, 1_000, Source::Observed);
        // Asked at 900, before that commit; answered with the offset before it.
        s.record_commit("g", ("t", 0), 40, 1_100, Source::Polled { asked_ms: 900 });
        let status = s.status("g", 1_200).unwrap();
        assert_eq!(status.partitions[0].end.map(|c| c.offset), Some(50));
        assert_eq!(status.partitions[0].complete, 1.0 / 10.0);
    }

    #[test]
    fn a_stalled_consumer_seen_committing_is_stall() {
        let s = store(LagConfig {
            intervals: 3,
            ..LagConfig::default()
        });
        for i in 0..3 {
            s.record_log_end(("t", 0), 100 + i * 10, i * 1_000);
            s.record_commit("g", ("t", 0), 40, i * 1_000, Source::Observed);
        }
        let status = s.status("g", 2_500).unwrap();
        assert_eq!(status.partitions[0].status, Status::Stall);
        assert_eq!(status.status, Status::Err);
    }

    #[test]
    fn silence_counts_only_up_to_the_last_read_of_the_offsets_log() {
        let s = store(LagConfig {
            intervals: 5,
            ..LagConfig::default()
        });
        s.set_commits_from_log(true);
        s.record_log_end(("t", 0), 1_000, 0);
        // A consumer behind by some records, committing every 40 ms: its window spans 160 ms.
        for i in 0..5 {
            let commit = LoggedCommit {
                group: "g".into(),
                topic: "t".into(),
                partition: 0,
                offset: 100 + i * 10,
                timestamp_ms: 10_000 + i * 40,
            };
            s.record_logged_commit(&commit, 10_300);
        }
        // Read from 10.2 s on: judged at 11 s, 840 ms after its newest commit, it is still OK,
        // since kroute knows its commits only up to 10.2 s.
        s.log_read_at(10_200);
        let status = s.status("g", 11_000).unwrap();
        assert_eq!(status.partitions[0].status, Status::Ok, "{status:?}");
        // The next read, from 11 s on, finds nothing newer: the silence is the consumer's.
        s.log_read_at(11_000);
        let status = s.status("g", 11_500).unwrap();
        assert_eq!(status.partitions[0].status, Status::Stop, "{status:?}");
        // Polled commits (the log unreadable) are judged at the time asked.
        s.set_commits_from_log(false);
        assert_eq!(s.judged_at(20_000), 20_000);
    }

    #[test]
    fn caps_refuse_and_count() {
        let s = store(LagConfig {
            max_groups: 1,
            max_partitions: 2,
            ..LagConfig::default()
        });
        s.record_commit("a", ("t", 0), 1, 0, Source::Observed);
        s.record_commit("a", ("t", 1), 1, 0, Source::Observed);
        s.record_commit("a", ("t", 2), 1, 0, Source::Observed);
        s.record_commit("b", ("t", 0), 1, 0, Source::Observed);
        assert!(!s.listed("c", HashMap::new(), 0));
        let counts = s.counts();
        assert_eq!((counts.groups, counts.partitions), (1, 2));
        assert_eq!((counts.groups_refused, counts.partitions_refused), (2, 1));
        assert_eq!(s.groups(), vec!["a".to_string()]);
        assert!(s.status("b", 0).is_none());
    }

    #[test]
    fn unlisted_groups_expire_with_their_log_ends() {
        let s = store(LagConfig {
            expire_group_ms: 10_000,
            ..LagConfig::default()
        });
        let owners = HashMap::from([(
            ("t".to_string(), 0),
            Owner {
                host: "/10.0.0.1".into(),
                client_id: "c".into(),
            },
        )]);
        assert!(s.listed("g", owners, 0));
        s.record_log_end(("t", 0), 5, 0);
        s.record_commit("g", ("t", 0), 5, 0, Source::Polled { asked_ms: 0 });
        assert_eq!(s.status("g", 0).unwrap().partitions[0].owner, "/10.0.0.1");
        s.expire(10_000);
        assert_eq!(s.counts().groups, 1);
        s.expire(10_001);
        assert_eq!(s.counts(), Counts::default());
        assert!(s.partitions_read().is_empty());
    }
}
