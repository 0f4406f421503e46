//! Burrow's judgement of a consumer group, rule for rule (core/internal/evaluator/caching.go,
//! Burrow 1.9.5 and later).
//!
//! A partition is judged on its window of commits (each with the lag it had then), its current
//! lag (newest log end minus newest commit, floored at 0) and the last few log-end readings.
//! The rules run in this order and the first that fires decides:
//!
//! 1. Current lag at or below `allowed_lag`: **OK**. Nothing else matters while the consumer
//!    is caught up, however old its last commit.
//! 2. **STOP** when the time since the newest commit is longer than the window spans (newest
//!    minus oldest commit time), unless one of the recent log-end readings was at or below the
//!    newest commit (the consumer was caught up a moment ago and there was nothing to commit;
//!    Burrow #303). Checked before the zero-lag rule because an old window can show zero lag
//!    long after the consumer died (Burrow #290). Burrow measures with `now` in whole seconds,
//!    so this does too.
//! 3. **REWIND** when an offset is lower than the one before it, unless a later commit got back
//!    to the offset before the drop (a rebalance re-committing an older offset recovers at
//!    once). Only the first drop in the window is looked at.
//! 4. If some commit in the window had lag at or below `allowed_lag`, **OK**. Otherwise:
//!    **STALL** when every offset in the window is the same (committing without progress);
//!    **WARN** when the lag never went down from one commit to the next (progress, but slower
//!    than the producers).
//! 5. Otherwise **OK**.
//!
//! Commits without a known lag are skipped by the rules about lag (4) and count for the others.
//! A partition whose window is less full than `minimum_complete` is OK without looking.
//!
//! The group is its worst partition with STOP, STALL and REWIND reported as ERR; `complete` is
//! the fraction of its partitions with a full window; `maxlag` is the first partition with the
//! largest current lag; `totallag` the sum of the current lags.

use super::log_end::{EndOffset, LogEnd};
use super::status::Status;
use super::time_lag::TimeLag;
use super::window::{CommitEntry, CommitWindow, lag_between};

/// The evaluator's settings, Burrow's defaults by default.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Params {
    /// Lag at or below this counts as caught up (Burrow's `allowed-lag`, default 0).
    pub allowed_lag: u64,
    /// A partition whose window is less full than this is OK whatever it shows (Burrow's
    /// `minimum-complete`, default 0: judge from the first commit).
    pub minimum_complete: f32,
}

impl Params {
    /// The evaluator's settings in `[lag]`.
    pub fn of(config: &super::LagConfig) -> Self {
        Self {
            allowed_lag: config.allowed_lag,
            minimum_complete: config.minimum_complete,
        }
    }
}

impl Default for Params {
    fn default() -> Self {
        Self {
            allowed_lag: 0,
            minimum_complete: 0.0,
        }
    }
}

/// One partition of a group, as a collector hands it to the evaluator.
#[derive(Clone, Copy, Debug)]
pub struct PartitionInput<'a> {
    pub topic: &'a str,
    pub partition: i32,
    /// The member's host that owns the partition, or "" (Burrow's `owner`).
    pub owner: &'a str,
    /// The owner's client id, or "".
    pub client_id: &'a str,
    pub commits: &'a CommitWindow,
    /// The partition's log-end history; `None` when the brokers do not know the topic (deleted),
    /// which leaves the current lag at 0 as in Burrow.
    pub log_end: Option<&'a LogEnd>,
}

/// The verdict on one partition: Burrow's `PartitionStatus`, plus the time lag.
#[derive(Clone, Debug, PartialEq)]
pub struct PartitionStatus {
    pub topic: String,
    pub partition: i32,
    pub owner: String,
    pub client_id: String,
    /// OK, WARN, STOP, STALL or REWIND.
    pub status: Status,
    /// The oldest commit in the window (JSON `start`, `null` without commits).
    pub start: Option<CommitEntry>,
    /// The newest commit in the window (JSON `end`).
    pub end: Option<CommitEntry>,
    /// Newest log end minus newest commit, floored at 0; 0 without either (JSON `current_lag`).
    pub current_lag: u64,
    /// Fraction of the window filled (JSON `complete`).
    pub complete: f32,
    /// Seconds behind (not in Burrow's JSON).
    pub time_lag: TimeLag,
}

/// The verdict on a group: Burrow's `ConsumerGroupStatus` without the cluster and group names.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupStatus {
    /// OK, WARN or ERR; NOTFOUND for an unknown group.
    pub status: Status,
    /// Fraction of the partitions whose window is full (JSON `complete`).
    pub complete: f32,
    /// Every partition, in the order given (JSON `partitions` of `/lag`; `/status` lists only
    /// [`GroupStatus::not_ok`]). Their number is JSON `partition_count`.
    pub partitions: Vec<PartitionStatus>,
    /// Sum of the partitions' current lags (JSON `totallag`).
    pub total_lag: u64,
    /// The largest known time lag of a partition (not in Burrow's JSON).
    pub max_time_lag: TimeLag,
    maxlag: Option<usize>,
}

impl GroupStatus {
    /// What Burrow answers for a group it does not know: NOTFOUND, complete 1, nothing else.
    pub fn not_found() -> Self {
        Self {
            status: Status::NotFound,
            complete: 1.0,
            partitions: Vec::new(),
            total_lag: 0,
            max_time_lag: TimeLag::Unknown,
            maxlag: None,
        }
    }

    /// The partition with the largest current lag, the first of equals (JSON `maxlag`, shown
    /// by `/status` and `/lag` alike).
    pub fn maxlag(&self) -> Option<&PartitionStatus> {
        self.maxlag.and_then(|i| self.partitions.get(i))
    }

    /// The partitions worse than OK: what Burrow's `/status` lists.
    pub fn not_ok(&self) -> impl Iterator<Item = &PartitionStatus> {
        self.partitions.iter().filter(|p| p.status > Status::Ok)
    }
}

/// Judges a group from its partitions at `now_ms` (ms since the epoch).
pub fn evaluate_group(
    partitions: &[PartitionInput<'_>],
    params: &Params,
    now_ms: i64,
) -> GroupStatus {
    let partitions: Vec<PartitionStatus> = partitions
        .iter()
        .map(|input| evaluate_partition(input, params, now_ms))
        .collect();
    let status = partitions
        .iter()
        .map(|p| p.status.for_group())
        .fold(Status::Ok, Status::max);
    let complete = if partitions.is_empty() {
        0.0
    } else {
        let full = partitions.iter().filter(|p| p.complete == 1.0).count();
        full as f32 / partitions.len() as f32
    };
    GroupStatus {
        status,
        complete,
        total_lag: partitions
            .iter()
            .fold(0u64, |sum, p| sum.saturating_add(p.current_lag)),
        max_time_lag: TimeLag::max_of(partitions.iter().map(|p| &p.time_lag)),
        maxlag: first_largest_lag(&partitions),
        partitions,
    }
}

/// Judges one partition at `now_ms`.
pub fn evaluate_partition(
    input: &PartitionInput<'_>,
    params: &Params,
    now_ms: i64,
) -> PartitionStatus {
    let commits = input.commits.entries();
    let current_lag = current_lag(input.commits, input.log_end);
    let complete = input.commits.complete();
    let status = if !commits.is_empty() && complete >= params.minimum_complete {
        let now_ms = whole_seconds(now_ms);
        let recent: Vec<EndOffset> = input
            .log_end
            .into_iter()
            .flat_map(|l| l.recent().copied())
            .collect();
        judge(
            commits,
            stop_guards(&recent, commits, now_ms),
            current_lag,
            now_ms,
            params.allowed_lag,
        )
    } else {
        Status::Ok
    };
    let time_lag = match (input.commits.newest(), input.log_end) {
        (Some(newest), Some(log_end)) => log_end.table().time_lag(newest.offset, now_ms),
        _ => TimeLag::Unknown,
    };
    PartitionStatus {
        topic: input.topic.to_owned(),
        partition: input.partition,
        owner: input.owner.to_owned(),
        client_id: input.client_id.to_owned(),
        status,
        start: commits.first().copied(),
        end: commits.last().copied(),
        current_lag,
        complete,
        time_lag,
    }
}

/// Newest log end minus newest commit, floored at 0; 0 when either is missing.
pub fn current_lag(commits: &CommitWindow, log_end: Option<&LogEnd>) -> u64 {
    match (commits.newest(), log_end.and_then(LogEnd::latest)) {
        (Some(commit), Some(end)) => lag_between(end.offset, commit.offset),
        _ => 0,
    }
}

/// Burrow's rules on a non-empty window, in Burrow's order (module doc). `recent` are the last
/// log-end readings; `now_ms` is already in whole seconds.
fn judge(
    commits: &[CommitEntry],
    recent: impl IntoIterator<Item = i64>,
    current_lag: u64,
    now_ms: i64,
    allowed_lag: u64,
) -> Status {
    let Some(newest) = commits.last() else {
        return Status::Ok;
    };
    if current_lag <= allowed_lag {
        return Status::Ok;
    }
    if let [only] = commits {
        return first_commit(only, now_ms);
    }
    if stopped(commits, now_ms) && !recently_caught_up(newest.offset, recent) {
        return Status::Stop;
    }
    if first_rewind(commits).is_some_and(|at| !rewind_recovered(commits, at)) {
        return Status::Rewind;
    }
    if lag_never_within(commits, allowed_lag) {
        if stalled(commits) {
            return Status::Stall;
        }
        if lag_never_decreased(commits) {
            return Status::Warn;
        }
    }
    Status::Ok
}

/// How long a group that committed once, with lag, may stay silent before it is STOP.
pub const FIRST_COMMIT_GRACE_MS: i64 = 60_000;

/// A window of one commit says nothing of the consumer's pace, and Burrow's rules on it are
/// vacuous: it spans 0 s, so any silence is "longer than the window" (STOP a second after the
/// commit), and one offset is "always the same" (STALL). Every consumer that starts with a
/// backlog and commits every 5 s (the Java, librdkafka and kafka-python default) would page its
/// owner for the 5 s before its second commit. Here it is OK until
/// [`FIRST_COMMIT_GRACE_MS`] of silence (longer than the commit interval of any common client;
/// Kafka Streams' default is 30 s), then STOP.
fn first_commit(only: &CommitEntry, now_ms: i64) -> Status {
    if now_ms.saturating_sub(only.timestamp_ms) > FIRST_COMMIT_GRACE_MS {
        Status::Stop
    } else {
        Status::Ok
    }
}

/// Some commits have a known lag, and none at or below `allowed_lag` (Burrow's
/// `isLagAlwaysNotZero`). Burrow drops the commits made before it knew the partition's log end;
/// kroute keeps them with an unknown lag, and a window of only those says nothing about lag:
/// judging it would show a consumer that just started as stalled or slow.
fn lag_never_within(commits: &[CommitEntry], allowed_lag: u64) -> bool {
    let mut known = commits.iter().filter_map(|c| c.lag).peekable();
    known.peek().is_some() && known.all(|lag| lag > allowed_lag)
}

/// The index of the first commit lower than the one before it (Burrow's
/// `checkIfOffsetsRewind`).
fn first_rewind(commits: &[CommitEntry]) -> Option<usize> {
    commits
        .windows(2)
        .position(|pair| pair[1].offset < pair[0].offset)
        .map(|i| i + 1)
}

/// A commit at or after `at` got back to the offset before the drop (Burrow's
/// `checkIfRewindRecovered`).
fn rewind_recovered(commits: &[CommitEntry], at: usize) -> bool {
    let Some(before) = at.checked_sub(1).and_then(|i| commits.get(i)) else {
        return true;
    };
    commits.iter().skip(at).any(|c| c.offset >= before.offset)
}

/// Longer since the newest commit than the window spans (Burrow's `checkIfOffsetsStopped`).
fn stopped(commits: &[CommitEntry], now_ms: i64) -> bool {
    let (Some(oldest), Some(newest)) = (commits.first(), commits.last()) else {
        return false;
    };
    let silent = i128::from(now_ms) - i128::from(newest.timestamp_ms);
    let span = i128::from(newest.timestamp_ms) - i128::from(oldest.timestamp_ms);
    silent > span
}

/// Every commit in the window is the same offset (Burrow's `checkIfOffsetsStalled`).
fn stalled(commits: &[CommitEntry]) -> bool {
    commits
        .windows(2)
        .all(|pair| pair[0].offset == pair[1].offset)
}

/// The known lags never go down from one to the next (Burrow's `checkIfLagNotDecreasing`).
fn lag_never_decreased(commits: &[CommitEntry]) -> bool {
    let lags: Vec<u64> = commits.iter().filter_map(|c| c.lag).collect();
    lags.windows(2).all(|pair| pair[1] >= pair[0])
}

/// The offsets of the log-end readings that may hold STOP back ([`recently_caught_up`]).
///
/// Burrow holds STOP back while any of the last `intervals` readings was at or below the newest
/// commit (#303: a consumer with nothing to read need not commit). At its defaults that is up to
/// 100 s after a caught-up consumer stopped while its topic went on growing. Here a caught-up
/// reading holds STOP back only until the first later reading that showed records to read is
/// older than the window spans: from then on the consumer had work and did not commit for longer
/// than its window, which is what STOP means.
fn stop_guards(recent: &[EndOffset], commits: &[CommitEntry], now_ms: i64) -> Vec<i64> {
    let offsets = || recent.iter().map(|e| e.offset).collect();
    let (Some(oldest), Some(newest)) = (commits.first(), commits.last()) else {
        return offsets();
    };
    let Some(caught_up) = recent.iter().rposition(|e| e.offset <= newest.offset) else {
        return offsets();
    };
    let span = newest.timestamp_ms.saturating_sub(oldest.timestamp_ms);
    match recent.get(caught_up + 1) {
        Some(work) if now_ms.saturating_sub(work.timestamp_ms.max(newest.timestamp_ms)) > span => {
            recent[caught_up + 1..].iter().map(|e| e.offset).collect()
        }
        _ => offsets(),
    }
}

/// A recent log-end reading was at or below the newest commit: the consumer was caught up
/// (Burrow's `checkIfRecentLagZero`).
fn recently_caught_up(newest_offset: i64, recent: impl IntoIterator<Item = i64>) -> bool {
    recent.into_iter().any(|end| end <= newest_offset)
}

/// `now_ms` cut to whole seconds, as Burrow's `time.Now().Unix() * 1000`.
fn whole_seconds(now_ms: i64) -> i64 {
    now_ms.div_euclid(1000).saturating_mul(1000)
}

/// The first partition with the largest current lag (Burrow replaces its pick only on a
/// strictly larger lag).
fn first_largest_lag(partitions: &[PartitionStatus]) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, p) in partitions.iter().enumerate() {
        let larger = best
            .and_then(|b| partitions.get(b))
            .is_none_or(|b| p.current_lag > b.current_lag);
        if larger {
            best = Some(i);
        }
    }
    best
}

#[cfg(test)]
mod tests;
