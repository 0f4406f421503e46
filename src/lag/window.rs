//! A group's last N commits on one partition: the sliding window Burrow judges.
//!
//! Burrow keeps, per group and partition, a ring of the last `intervals` offset commits, each
//! with the lag it had when it was committed (core/internal/storage/inmemory.go). The window is
//! measured in commits, not in time: with a 30 s commit interval and 15 entries it spans 7.5
//! minutes (seed 002's worked example). A collector feeds it every commit it learns of, from an
//! OffsetCommit passing through kroute or from polling; the evaluator reads it.
//!
//! What the window stores, and what it refuses, follows Burrow:
//! - the lag of a commit is the partition's log-end offset known at that moment minus the
//!   committed offset, floored at 0 (log-end offsets are polled, so a commit can be ahead of the
//!   last one seen); it is never updated afterwards;
//! - a commit closer than `min_distance_ms` to the previous entry replaces that entry but keeps
//!   its timestamp (Burrow's `min-distance`, 0 by default), so a consumer that commits every few
//!   milliseconds still fills the window at the configured pace instead of flushing it;
//! - a commit older than the newest entry is dropped. Burrow reads `__consumer_offsets` from
//!   the start and back-fills such commits with an unknown lag; kroute sees commits as they
//!   happen, so an older one is a late copy of history it already has.
//!
//! One deliberate difference: Burrow drops a commit made before it knows the partition's log
//! end; the window keeps it with an unknown lag, which the rules skip exactly as they skip
//! Burrow's back-filled entries.
//!
//! A polling collector must only record a commit it has not seen: OffsetFetch answers with the
//! committed offset but not when it was committed, and recording an unchanged offset at every
//! poll would make a consumer that stopped look like one that stalls.

/// One commit in the window: Burrow's `ConsumerOffset` (JSON `offset`, `timestamp`,
/// `observedAt`, `lag`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommitEntry {
    /// The committed offset: the next record the group will read.
    pub offset: i64,
    /// When the commit was made, in ms since the epoch; the STOP rule measures with it.
    pub timestamp_ms: i64,
    /// When kroute learned of it, in ms since the epoch.
    pub observed_ms: i64,
    /// Log end minus offset when the commit was recorded (floored at 0); `None` when no log-end
    /// offset was known then (Burrow's JSON `null`).
    pub lag: Option<u64>,
}

/// A commit as a collector learns of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Commit {
    pub offset: i64,
    /// The commit's own time (OffsetCommit's arrival at kroute, or the commit timestamp).
    pub timestamp_ms: i64,
    /// When kroute learned of it.
    pub observed_ms: i64,
}

/// What [`CommitWindow::record`] did with a commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// A new entry (the oldest one fell out if the window was full).
    Appended,
    /// Within `min_distance_ms` of the newest entry: it replaced that entry's offset and lag.
    Merged,
    /// Same offset and timestamp as the newest entry: the same commit seen twice.
    Duplicate,
    /// Older than the newest entry: dropped.
    OutOfOrder,
}

/// The last `capacity` commits of one group on one partition, oldest first.
#[derive(Clone, Debug)]
pub struct CommitWindow {
    capacity: usize,
    min_distance_ms: i64,
    entries: Vec<CommitEntry>,
}

impl CommitWindow {
    /// A window of `capacity` commits (Burrow's `intervals`; at least 1), merging commits
    /// closer than `min_distance_ms` (Burrow's `min-distance`; 0 merges nothing).
    pub fn new(capacity: usize, min_distance_ms: i64) -> Self {
        let capacity = capacity.max(1);
        Self {
            capacity,
            min_distance_ms: min_distance_ms.max(0),
            entries: Vec::with_capacity(capacity),
        }
    }

    /// A window holding `entries` as they are (oldest first, at most `capacity` of them kept:
    /// the newest), for evaluating recorded history and for tests.
    pub fn from_entries(capacity: usize, entries: &[CommitEntry]) -> Self {
        let mut window = Self::new(capacity, 0);
        let skip = entries.len().saturating_sub(window.capacity);
        window.entries.extend_from_slice(&entries[skip..]);
        window
    }

    /// Records `commit`, with its lag against `log_end` (the partition's newest known log-end
    /// offset, if any).
    pub fn record(&mut self, commit: Commit, log_end: Option<i64>) -> Recorded {
        let entry = CommitEntry {
            offset: commit.offset,
            timestamp_ms: commit.timestamp_ms,
            observed_ms: commit.observed_ms,
            lag: log_end.map(|end| lag_between(end, commit.offset)),
        };
        let Some(newest) = self.entries.last_mut() else {
            self.entries.push(entry);
            return Recorded::Appended;
        };
        if entry.timestamp_ms < newest.timestamp_ms {
            return Recorded::OutOfOrder;
        }
        if entry.timestamp_ms == newest.timestamp_ms && entry.offset == newest.offset {
            return Recorded::Duplicate;
        }
        let since = i128::from(entry.timestamp_ms) - i128::from(newest.timestamp_ms);
        if since < i128::from(self.min_distance_ms) {
            *newest = CommitEntry {
                timestamp_ms: newest.timestamp_ms,
                ..entry
            };
            return Recorded::Merged;
        }
        if self.entries.len() == self.capacity {
            self.entries.remove(0);
        }
        self.entries.push(entry);
        Recorded::Appended
    }

    /// The commits, oldest first.
    pub fn entries(&self) -> &[CommitEntry] {
        &self.entries
    }

    /// The newest commit.
    pub fn newest(&self) -> Option<&CommitEntry> {
        self.entries.last()
    }

    /// How many commits the window holds when full.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The fraction of the window that holds commits (Burrow's partition `complete`): a
    /// partition seen only briefly is judged on less history.
    pub fn complete(&self) -> f32 {
        self.entries.len() as f32 / self.capacity as f32
    }
}

/// Messages between `offset` and `end`: `end - offset`, or 0 when `offset` is at or past `end`.
pub fn lag_between(end: i64, offset: i64) -> u64 {
    let lag = i128::from(end) - i128::from(offset);
    u64::try_from(lag.max(0)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit(offset: i64, timestamp_ms: i64) -> Commit {
        Commit {
            offset,
            timestamp_ms,
            observed_ms: timestamp_ms + 5,
        }
    }

    #[test]
    fn the_lag_is_taken_against_the_log_end_known_at_commit_time() {
        let mut window = CommitWindow::new(3, 0);
        assert_eq!(
            window.record(commit(100, 1_000), Some(150)),
            Recorded::Appended
        );
        assert_eq!(
            window.record(commit(160, 2_000), Some(150)),
            Recorded::Appended
        );
        assert_eq!(window.record(commit(170, 3_000), None), Recorded::Appended);
        let lags: Vec<Option<u64>> = window.entries().iter().map(|e| e.lag).collect();
        assert_eq!(lags, [Some(50), Some(0), None]);
        assert_eq!(window.entries()[0].observed_ms, 1_005);
    }

    #[test]
    fn a_full_window_drops_its_oldest_commit() {
        let mut window = CommitWindow::new(2, 0);
        for (i, offset) in [10, 20, 30].into_iter().enumerate() {
            window.record(commit(offset, i as i64 * 1_000), Some(40));
        }
        let offsets: Vec<i64> = window.entries().iter().map(|e| e.offset).collect();
        assert_eq!(offsets, [20, 30]);
        assert_eq!(window.complete(), 1.0);
    }

    #[test]
    fn complete_is_the_filled_fraction() {
        let mut window = CommitWindow::new(10, 0);
        assert_eq!(window.complete(), 0.0);
        for i in 0..5 {
            window.record(commit(i, i * 1_000), Some(10));
        }
        assert_eq!(window.complete(), 0.5);
    }

    #[test]
    fn repeated_commits_of_one_offset_are_all_kept() {
        // A consumer that commits the same offset again and again is what STALL looks for.
        let mut window = CommitWindow::new(5, 0);
        for i in 0..3 {
            assert_eq!(
                window.record(commit(7, i * 1_000), Some(9)),
                Recorded::Appended
            );
        }
        assert_eq!(window.entries().len(), 3);
    }

    #[test]
    fn late_and_duplicate_commits_are_dropped() {
        let mut window = CommitWindow::new(5, 0);
        window.record(commit(10, 2_000), Some(20));
        assert_eq!(
            window.record(commit(9, 1_000), Some(20)),
            Recorded::OutOfOrder
        );
        assert_eq!(
            window.record(commit(10, 2_000), Some(20)),
            Recorded::Duplicate
        );
        assert_eq!(
            window.record(commit(11, 2_000), Some(20)),
            Recorded::Appended
        );
        assert_eq!(window.entries().len(), 2);
    }

    #[test]
    fn commits_closer_than_min_distance_replace_the_newest_but_keep_its_time() {
        let mut window = CommitWindow::new(5, 10_000);
        window.record(commit(10, 0), Some(30));
        assert_eq!(window.record(commit(15, 4_000), Some(30)), Recorded::Merged);
        assert_eq!(window.record(commit(20, 9_999), Some(30)), Recorded::Merged);
        assert_eq!(
            window.entries(),
            [CommitEntry {
                offset: 20,
                timestamp_ms: 0,
                observed_ms: 10_004,
                lag: Some(10),
            }]
        );
        // Measured from the kept time, so frequent commits still open a new entry on schedule.
        assert_eq!(
            window.record(commit(25, 10_000), Some(30)),
            Recorded::Appended
        );
        assert_eq!(window.entries().len(), 2);
    }

    #[test]
    fn from_entries_keeps_the_newest() {
        let entries: Vec<CommitEntry> = (0..4)
            .map(|i| CommitEntry {
                offset: i,
                timestamp_ms: i,
                observed_ms: i,
                lag: Some(0),
            })
            .collect();
        let window = CommitWindow::from_entries(3, &entries);
        assert_eq!(window.entries(), &entries[1..]);
        assert_eq!(CommitWindow::new(0, -5).capacity(), 1);
    }

    #[test]
    fn lag_between_never_overflows() {
        assert_eq!(lag_between(i64::MAX, i64::MIN), u64::MAX);
        assert_eq!(lag_between(i64::MIN, i64::MAX), 0);
        assert_eq!(lag_between(5, 5), 0);
    }
}
