//! Time lag: how many seconds behind a consumer is, from the history of the log-end offset.
//!
//! An offset lag of 10 000 messages is a second on a busy topic and a day on a quiet one. The
//! time lag answers the question operators actually ask: how old is the newest message the
//! group has not read yet? kafka-lag-exporter's answer (its `LookupTable`), rebuilt here: keep
//! a table of (log-end offset, time) points sampled at every poll; the committed offset `c` was
//! the log end at some moment `t(c)`, found by linear interpolation between the two points
//! around `c`; the time lag is `now - t(c)`.
//!
//! The table, as kafka-lag-exporter keeps it:
//! - points come in time order with non-decreasing offsets; an older point, or a lower
//!   offset, is refused (a log end seen to go down is a stale answer, or a new leader that has
//!   not caught up; the history stays). A topic that was deleted and re-created needs
//!   [`OffsetTimeTable::clear`];
//! - a run of equal offsets is kept as its first and last point (the last one moves forward),
//!   so an idle topic does not push its history out of the table;
//! - it holds at most `capacity` points, dropping the oldest.
//!
//! The lookup, as kafka-lag-exporter does it, with the holes filled:
//! - committed at or past the newest log end: caught up, 0 s (it checks this first, so it holds
//!   even with one point);
//! - otherwise fewer than 2 points: unknown. Not 0: a consumer with lag is not on time;
//! - inside the table: the newest segment containing `c`, so on a stretch where the log end
//!   stood still `t(c)` is the last moment it stood there (the earliest its next message can
//!   have been written);
//! - below the oldest point: extrapolated along the line through the oldest and newest points;
//! - the log end never moved in the whole table (kafka-lag-exporter divides by zero there): the
//!   unread messages are older than the oldest point, so the lag is at least its age, and is
//!   reported as that lower bound;
//! - never negative (a `now` before the newest point gives 0).
//!
//! The estimate never grows when the offset lag shrinks: for a given table and `now`, a
//! smaller committed offset never gets a smaller time lag.

use std::collections::VecDeque;

/// One observation of a partition's log-end offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Point {
    pub offset: i64,
    /// When it was observed, in ms since the epoch.
    pub time_ms: i64,
}

/// What [`OffsetTimeTable::add`] did with a point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Added {
    /// A new point (the oldest one fell out if the table was full).
    Inserted,
    /// The same offset as the two newest points: the newest point moved to this time.
    Extended,
    /// Not newer than the newest point: refused.
    OutOfOrder,
    /// A lower offset than the newest point: refused.
    Regressed,
}

/// How a time lag was obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Basis {
    /// Between two points of the table.
    Interpolated,
    /// Older than the table: along the table's overall rate.
    Extrapolated,
    /// The log end did not move in the whole table: the age of its oldest point, a lower bound.
    AtLeast,
}

/// A partition's (or a group's) time lag.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TimeLag {
    /// Not enough history: no commit, no log end, or fewer than 2 points with lag behind.
    Unknown,
    /// The committed offset is at or past the newest log end: 0 s, exactly.
    CaughtUp,
    /// Seconds behind (finite, never negative), and how they were obtained.
    Behind { seconds: f64, basis: Basis },
}

impl TimeLag {
    /// Seconds behind; `None` when unknown.
    pub fn seconds(&self) -> Option<f64> {
        match self {
            TimeLag::Unknown => None,
            TimeLag::CaughtUp => Some(0.0),
            TimeLag::Behind { seconds, .. } => Some(*seconds),
        }
    }

    /// The largest of `lags` that is known: a group's time lag is its worst partition's.
    /// Unknown only when none is known (partitions without history do not hide the others).
    pub fn max_of<'a>(lags: impl IntoIterator<Item = &'a TimeLag>) -> TimeLag {
        let mut worst = TimeLag::Unknown;
        for lag in lags {
            let larger = match (lag.seconds(), worst.seconds()) {
                (Some(_), None) => true,
                (Some(new), Some(old)) => new > old,
                (None, _) => false,
            };
            if larger {
                worst = *lag;
            }
        }
        worst
    }
}

/// The recent history of one partition's log-end offset, for time lags.
#[derive(Clone, Debug)]
pub struct OffsetTimeTable {
    capacity: usize,
    points: VecDeque<Point>,
}

impl OffsetTimeTable {
    /// A table of at most `capacity` points (at least 2).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(2);
        Self {
            capacity,
            points: VecDeque::with_capacity(capacity),
        }
    }

    /// Adds an observation of the log end.
    pub fn add(&mut self, offset: i64, time_ms: i64) -> Added {
        let point = Point { offset, time_ms };
        let Some(newest) = self.points.back().copied() else {
            self.points.push_back(point);
            return Added::Inserted;
        };
        if time_ms <= newest.time_ms {
            return Added::OutOfOrder;
        }
        if offset < newest.offset {
            return Added::Regressed;
        }
        if self.is_flat_with(offset) {
            if let Some(last) = self.points.back_mut() {
                last.time_ms = time_ms;
            }
            return Added::Extended;
        }
        if self.points.len() == self.capacity {
            self.points.pop_front();
        }
        self.points.push_back(point);
        Added::Inserted
    }

    /// Forgets everything (the partition's log was replaced: a re-created topic).
    pub fn clear(&mut self) {
        self.points.clear();
    }

    /// The points, oldest first.
    pub fn points(&self) -> impl Iterator<Item = &Point> {
        self.points.iter()
    }

    pub fn len(&self) -> usize {
        self.points.len()
    }

    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// How long ago, seen from `now_ms`, the log end stood at `committed`.
    pub fn time_lag(&self, committed: i64, now_ms: i64) -> TimeLag {
        let (Some(oldest), Some(newest)) = (self.points.front(), self.points.back()) else {
            return TimeLag::Unknown;
        };
        if committed >= newest.offset {
            return TimeLag::CaughtUp;
        }
        if self.points.len() < 2 {
            return TimeLag::Unknown;
        }
        let (when_ms, basis) = if oldest.offset == newest.offset {
            (oldest.time_ms as f64, Basis::AtLeast)
        } else if committed < oldest.offset {
            // Capped at the oldest point's time so rounding cannot place it inside the table.
            let at = along(oldest, newest, committed).min(oldest.time_ms as f64);
            (at, Basis::Extrapolated)
        } else {
            (self.interpolate(committed), Basis::Interpolated)
        };
        let seconds = ((now_ms as f64 - when_ms) / 1000.0).max(0.0);
        TimeLag::Behind { seconds, basis }
    }

    /// True when the two newest points have `offset`: one more would only extend the stretch.
    fn is_flat_with(&self, offset: i64) -> bool {
        let mut newest = self.points.iter().rev();
        matches!(
            (newest.next(), newest.next()),
            (Some(a), Some(b)) if a.offset == offset && b.offset == offset
        )
    }

    /// When the log end was at `offset`, for an offset within the table: on the newest segment
    /// that contains it, kept inside that segment's times so rounding cannot reorder segments.
    fn interpolate(&self, offset: i64) -> f64 {
        let segments = self.points.iter().zip(self.points.iter().skip(1)).rev();
        for (left, right) in segments {
            if left.offset <= offset && offset <= right.offset {
                if left.offset == right.offset {
                    return right.time_ms as f64;
                }
                let at = along(left, right, offset);
                return at.clamp(left.time_ms as f64, right.time_ms as f64);
            }
        }
        // Unreachable for an offset between the oldest and newest points; the oldest time is
        // the answer that keeps the estimate monotone if it ever happens.
        self.points.front().map_or(0.0, |p| p.time_ms as f64)
    }
}

/// The time at `offset` on the line through `left` and `right` (whose offsets differ), counted
/// back from `right`.
fn along(left: &Point, right: &Point, offset: i64) -> f64 {
    let dx = (i128::from(right.time_ms) - i128::from(left.time_ms)) as f64;
    let dy = (i128::from(right.offset) - i128::from(left.offset)) as f64;
    let back = (i128::from(right.offset) - i128::from(offset)) as f64;
    if dy <= 0.0 {
        return right.time_ms as f64;
    }
    right.time_ms as f64 - back * dx / dy
}

#[cfg(test)]
mod tests;
