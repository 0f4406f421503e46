//! Graceful shutdown of the client side: on SIGTERM kroute stops accepting, every client
//! connection stops reading requests, writes the answers it still owes, then closes (between
//! requests, never inside a frame). Connections still owed answers at the drain timeout are
//! cut.
//!
//! The interface is small: [`Shutdown::draining`] tells listeners to stop and sessions to stop
//! reading; [`Shutdown::cut`] tells sessions to stop waiting for answers; every session holds a
//! [`Session`] so that [`Shutdown::drain`] knows when the last one has closed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use metrics::{Counter, counter, describe_counter};
use tokio::sync::watch;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};
use tracing::info;

/// Counts the client connections cut at the drain timeout.
pub const CONNECTIONS_CUT: &str = "kroute_shutdown_connections_cut_total";

/// How long sessions get, once cut, to close (a client that reads nothing can hold a write).
const CUT_GRACE: Duration = Duration::from_secs(1);

pub struct Shutdown {
    draining: CancellationToken,
    cut: CancellationToken,
    /// Client sessions open now.
    open: watch::Sender<usize>,
    /// Sessions that ended after draining began, with every answer written.
    drained: AtomicU64,
    /// Sessions that ended after the cut, still owed answers.
    cut_count: AtomicU64,
    cut_total: Counter,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

/// How a drain went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drained {
    /// Client connections open when it began.
    pub open_at_start: usize,
    /// Connections that closed with every answer they were owed written.
    pub drained: u64,
    /// Connections closed at the drain timeout, or still open at exit, owed answers.
    pub cut: u64,
}

impl Shutdown {
    pub fn new() -> Self {
        describe_counter!(
            CONNECTIONS_CUT,
            "Client connections closed at shutdown with answers still owed, because the drain timeout (shutdown.drain_timeout_ms) passed"
        );
        Self {
            draining: CancellationToken::new(),
            cut: CancellationToken::new(),
            open: watch::Sender::new(0),
            drained: AtomicU64::new(0),
            cut_count: AtomicU64::new(0),
            cut_total: counter!(CONNECTIONS_CUT),
        }
    }

    /// True from the moment shutdown begins.
    pub fn is_draining(&self) -> bool {
        self.draining.is_cancelled()
    }

    /// Completes when shutdown begins: stop accepting, stop reading requests.
    pub fn draining(&self) -> WaitForCancellationFuture<'_> {
        self.draining.cancelled()
    }

    /// Completes at the drain timeout: stop waiting for answers.
    pub fn cut(&self) -> WaitForCancellationFuture<'_> {
        self.cut.cancelled()
    }

    /// Registers a client session until the returned guard drops.
    pub fn session(&self) -> Session<'_> {
        self.open.send_modify(|n| *n += 1);
        Session {
            shutdown: self,
            answered: false,
        }
    }

    /// Begins the shutdown (`reason`: what asked for it) and waits until every client session has closed, or `timeout`
    /// passed (or `hurry` completed, e.g. a second signal): then the rest are cut, and get
    /// a moment to close. Logs one line at the start and one at the end.
    pub async fn drain(
        &self,
        reason: &str,
        timeout: Duration,
        hurry: impl Future<Output = ()>,
    ) -> Drained {
        let open_at_start = *self.open.borrow();
        self.draining.cancel();
        info!(
            reason,
            connections = open_at_start,
            drain_timeout_ms = timeout.as_millis() as u64,
            "shutting down: not accepting connections; draining client connections"
        );
        let mut open = self.open.subscribe();
        let closed = tokio::select! {
            _ = open.wait_for(|n| *n == 0) => true,
            _ = tokio::time::sleep(timeout) => false,
            _ = hurry => false,
        };
        if !closed {
            self.cut.cancel();
            let _ = tokio::time::timeout(CUT_GRACE, open.wait_for(|n| *n == 0)).await;
        }
        // Whatever is open now goes with the process.
        let stuck = *self.open.borrow() as u64;
        self.cut_total.increment(stuck);
        let outcome = Drained {
            open_at_start,
            drained: self.drained.load(Ordering::Relaxed),
            cut: self.cut_count.load(Ordering::Relaxed) + stuck,
        };
        info!(
            drained = outcome.drained,
            cut = outcome.cut,
            "shutdown complete: {} client connections drained, {} cut at the drain timeout",
            outcome.drained,
            outcome.cut
        );
        outcome
    }
}

/// One client session, counted while it lives.
pub struct Session<'a> {
    shutdown: &'a Shutdown,
    answered: bool,
}

impl Session<'_> {
    /// Every answer the client was owed is written: closing now cuts nothing.
    pub fn answered(&mut self) {
        self.answered = true;
    }
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        let s = self.shutdown;
        if s.is_draining() {
            if self.answered || !s.cut.is_cancelled() {
                s.drained.fetch_add(1, Ordering::Relaxed);
            } else {
                s.cut_count.fetch_add(1, Ordering::Relaxed);
                s.cut_total.increment(1);
            }
        }
        s.open.send_modify(|n| *n = n.saturating_sub(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn drain_waits_for_sessions_then_cuts_the_rest() {
        let shutdown = std::sync::Arc::new(Shutdown::new());
        let idle = shutdown.session();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
        // A session that finishes its answers in 2 s, and one that never does.
        let s = shutdown.clone();
        let finishing = tokio::spawn(async move {
            let mut session = s.session();
            s.draining().await;
            tokio::time::sleep(Duration::from_secs(2)).await;
            session.answered();
            drop(session);
            let _ = done_tx.send(());
        });
        let s = shutdown.clone();
        let stuck = tokio::spawn(async move {
            let _session = s.session();
            s.cut().await;
        });
        tokio::task::yield_now().await;
        drop(idle); // closes before the drain: not counted
        assert!(!shutdown.is_draining());
        let outcome = shutdown
            .drain("test", Duration::from_secs(5), std::future::pending())
            .await;
        assert!(shutdown.is_draining());
        done_rx.await.unwrap();
        finishing.await.unwrap();
        stuck.await.unwrap();
        assert_eq!(
            outcome,
            Drained {
                open_at_start: 2,
                drained: 1,
                cut: 1
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_second_signal_cuts_at_once() {
        let shutdown = std::sync::Arc::new(Shutdown::new());
        let s = shutdown.clone();
        let stuck = tokio::spawn(async move {
            let _session = s.session();
            s.cut().await;
        });
        tokio::task::yield_now().await;
        let start = tokio::time::Instant::now();
        let outcome = shutdown
            .drain("test", Duration::from_secs(10), async {})
            .await;
        stuck.await.unwrap();
        assert_eq!(outcome.cut, 1);
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "{:?}",
            start.elapsed()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn drain_without_sessions_ends_at_once() {
        let shutdown = Shutdown::new();
        let start = tokio::time::Instant::now();
        let outcome = shutdown
            .drain("test", Duration::from_secs(10), std::future::pending())
            .await;
        assert_eq!(outcome.open_at_start, 0);
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
}
