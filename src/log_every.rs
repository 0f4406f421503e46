//! Rate-limited log lines: the first of a kind is logged, then at most one per [`LOG_EVERY`],
//! saying how many were not logged since.
//!
//! Events a peer can repeat at will (a client reconnecting to a broker kroute cannot reach, a
//! broker answering garbage to every connection) must stay cheap and leave the log readable:
//! each keeps its counter for every event and its line for the first one of a period. One
//! [`Every`] per kind of line, usually a `static` at the call site. (Written here rather than
//! taken from a crate: the whole of it is two atomics and a comparison, and its clock is
//! tokio's, so paused-time tests drive it.)

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// At most one line per kind in this period.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// A log line's rate limit: the first event is logged, then at most one per [`LOG_EVERY`].
pub struct Every {
    /// Set at the first event.
    epoch: OnceLock<Instant>,
    /// Not before this (ms after `epoch`).
    next_ms: AtomicU64,
    /// Events not logged since the last line.
    skipped: AtomicU64,
}

impl Default for Every {
    fn default() -> Self {
        Self::new()
    }
}

impl Every {
    pub const fn new() -> Self {
        Self {
            epoch: OnceLock::new(),
            next_ms: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
        }
    }

    /// Some(n): log this event now, n events were not logged since the last line.
    pub fn due(&self) -> Option<u64> {
        let epoch = self.epoch.get_or_init(Instant::now);
        let now = u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        let next = self.next_ms.load(Ordering::Relaxed);
        let period = LOG_EVERY.as_millis() as u64;
        if now >= next
            && self
                .next_ms
                .compare_exchange(next, now + period, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            return Some(self.skipped.swap(0, Ordering::Relaxed));
        }
        self.skipped.fetch_add(1, Ordering::Relaxed);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_first_event_is_logged_then_one_a_period_with_the_count_between() {
        let every = Every::new();
        assert_eq!(every.due(), Some(0));
        for _ in 0..12 {
            assert_eq!(every.due(), None);
        }
        tokio::time::advance(LOG_EVERY - Duration::from_millis(1)).await;
        assert_eq!(every.due(), None);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(
            every.due(),
            Some(13),
            "the line says how many were not logged"
        );
        tokio::time::advance(LOG_EVERY * 3).await;
        assert_eq!(every.due(), Some(0));
    }
}
