//! What is known of one partition's log-end offset over time, shared by every group reading it.
//!
//! Two histories come from the same observations, because two rules need different ones:
//! - Burrow keeps the last `intervals` log-end offsets exactly as polled (its broker-offset
//!   ring). The newest gives the current lag; all of them answer "was the consumer caught up
//!   recently?", which holds back STOP for a consumer that simply had nothing to read (Burrow
//!   #303). With a 10 s poll and 10 intervals that is the last 100 s.
//! - The time-lag table ([`OffsetTimeTable`]) keeps a longer, compressed history to turn an
//!   offset into a time.
//!
//! A collector calls [`LogEnd::record`] with every log-end offset it reads (ListOffsets,
//! latest) and the time it read it.

use std::collections::VecDeque;

use super::time_lag::{Added, OffsetTimeTable};

/// One observation of the log-end offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndOffset {
    pub offset: i64,
    /// When it was read, in ms since the epoch.
    pub timestamp_ms: i64,
}

/// The log-end history of one partition.
#[derive(Clone, Debug)]
pub struct LogEnd {
    intervals: usize,
    recent: VecDeque<EndOffset>,
    table: OffsetTimeTable,
}

impl LogEnd {
    /// Keeps the last `intervals` readings for Burrow's rules (at least 1) and up to
    /// `table_points` points for time lags.
    pub fn new(intervals: usize, table_points: usize) -> Self {
        let intervals = intervals.max(1);
        Self {
            intervals,
            recent: VecDeque::with_capacity(intervals),
            table: OffsetTimeTable::new(table_points),
        }
    }

    /// Records a reading. One older than the newest reading is a stale answer and is ignored;
    /// a lower offset is kept for Burrow's rules (it uses what the broker says) and refused by
    /// the time table (see its rules). Returns what the time table did with it.
    pub fn record(&mut self, offset: i64, timestamp_ms: i64) -> Added {
        if self
            .recent
            .back()
            .is_some_and(|newest| timestamp_ms < newest.timestamp_ms)
        {
            return Added::OutOfOrder;
        }
        if self.recent.len() == self.intervals {
            self.recent.pop_front();
        }
        self.recent.push_back(EndOffset {
            offset,
            timestamp_ms,
        });
        self.table.add(offset, timestamp_ms)
    }

    /// The newest reading: the log end the current lag is measured against.
    pub fn latest(&self) -> Option<EndOffset> {
        self.recent.back().copied()
    }

    /// The newest reading taken at or before `timestamp_ms`: what was known of the log end when
    /// something happened then. A commit's lag is measured against it, as Burrow measures a
    /// commit against the log end it knew when the commit arrived; a reading taken after the
    /// commit would show a consumer that was caught up as behind.
    pub fn known_at(&self, timestamp_ms: i64) -> Option<EndOffset> {
        self.recent
            .iter()
            .rev()
            .find(|e| e.timestamp_ms <= timestamp_ms)
            .copied()
    }

    /// The last `intervals` readings, oldest first.
    pub fn recent(&self) -> impl Iterator<Item = &EndOffset> {
        self.recent.iter()
    }

    /// The time-lag table.
    pub fn table(&self) -> &OffsetTimeTable {
        &self.table
    }

    /// Forgets the time-lag history (the topic was re-created); the recent readings age out by
    /// themselves.
    pub fn clear_table(&mut self) {
        self.table.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_intervals_readings_and_feeds_the_table() {
        let mut log_end = LogEnd::new(2, 10);
        for (i, offset) in [100, 200, 300].into_iter().enumerate() {
            log_end.record(offset, i as i64 * 1_000);
        }
        let recent: Vec<i64> = log_end.recent().map(|e| e.offset).collect();
        assert_eq!(recent, [200, 300]);
        assert_eq!(log_end.latest().map(|e| e.offset), Some(300));
        assert_eq!(log_end.table().len(), 3);
    }

    #[test]
    fn known_at_is_the_newest_reading_not_after_the_moment() {
        let mut log_end = LogEnd::new(5, 10);
        log_end.record(100, 1_000);
        log_end.record(200, 2_000);
        assert_eq!(log_end.known_at(999), None);
        assert_eq!(log_end.known_at(1_000).map(|e| e.offset), Some(100));
        assert_eq!(log_end.known_at(1_999).map(|e| e.offset), Some(100));
        assert_eq!(log_end.known_at(5_000).map(|e| e.offset), Some(200));
    }

    #[test]
    fn a_lower_offset_counts_for_burrow_but_not_for_the_table() {
        let mut log_end = LogEnd::new(5, 10);
        log_end.record(300, 1_000);
        assert_eq!(log_end.record(250, 2_000), Added::Regressed);
        assert_eq!(log_end.latest().map(|e| e.offset), Some(250));
        assert_eq!(log_end.table().len(), 1);
    }

    #[test]
    fn a_stale_reading_is_ignored() {
        let mut log_end = LogEnd::new(5, 10);
        log_end.record(300, 2_000);
        assert_eq!(log_end.record(400, 1_000), Added::OutOfOrder);
        assert_eq!(log_end.recent().count(), 1);
        log_end.clear_table();
        assert!(log_end.table().is_empty());
    }
}
