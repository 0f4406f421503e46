//! What one client may cost kroute, and all of them together (`[limits]`).
//!
//! - **Connections.** [`Limits::admit`] counts every accepted connection, before any TLS
//!   handshake; over `max_connections`, or over `max_connections_per_ip` from one address, the
//!   connection is closed at once, as Kafka's broker closes those over
//!   `max.connections.per.ip`. The [`Admitted`] guard gives the connection back when it ends.
//! - **Buffered bytes.** A connection holds the bytes of every request read and not yet
//!   answered, and of every reply not yet written to the client (a reply counts from the
//!   moment it arrives from the broker, even behind an earlier one still awaited). A Fetch
//!   also reserves room for its answer until it arrives, since a few bytes of request can ask
//!   for megabytes: its `max_bytes`, at least 1 MiB (a broker returns a first batch larger
//!   than `max_bytes` whole; Kafka's `max.message.bytes` is about 1 MiB), at most half the
//!   connection's limit (so a consumer's long poll leaves room for its other requests).
//!   kroute reads the next request only while the connection holds (and reserves) less than
//!   `max_buffered_bytes_per_connection`, all connections together hold less than
//!   `max_buffered_bytes`, and it has fewer than `max_in_flight_per_connection` requests in
//!   flight; otherwise it stops reading (the client's socket fills and TCP holds the client
//!   back) until enough is written. **A connection that holds nothing may always read one
//!   request**, whatever the total, and the request that crosses a limit is taken whole (it
//!   may be `max_frame_bytes` long): so every connection can always have one request in
//!   flight, and no limit, however low, can deadlock a client or let some clients starve the
//!   others. Answers to requests already forwarded are always taken: nothing a broker
//!   answered is dropped. One connection thus holds at most its limit plus one request plus
//!   the answers to the requests it had in flight when it was paused (beyond their
//!   reservations).
//! - **Timeouts.** A request whose first byte came more than `partial_frame_timeout_ms` ago
//!   and is still incomplete closes its connection (slowloris); the clock runs only while
//!   kroute is reading. A connection with no bytes read or written for `idle_timeout_ms` and
//!   no request waiting for a broker is closed (Kafka's `connections.max.idle.ms`); a client
//!   that never reads its answers is idle in this sense once they have all arrived.
//!
//! Every event has one log line, rate-limited to one per [`LOG_EVERY`] per kind (the line
//! says how many were not logged since), and a counter. The per-request cost is a few atomic
//! additions; nothing is allocated and no metric label is looked up.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::pin::Pin;

use tokio::sync::Notify;
use tokio::time::{Instant, Sleep};
use tracing::{info, warn};

use kafka_protocol::messages::ApiKey;

use crate::config::LimitsConfig;
use crate::metrics::ClientLimitMetrics;
use crate::protocol::header::WireReader;

use crate::log_every::Every;
/// At most one log line per kind of event per this long.
pub use crate::log_every::LOG_EVERY;

/// The least a Fetch reserves for its answer: a broker returns a first batch larger than the
/// request's `max_bytes` whole, and Kafka's `max.message.bytes` is about 1 MiB.
const FETCH_ANSWER_FLOOR: usize = 1024 * 1024;

/// The limits, and what all client connections hold now. One per kroute.
pub struct Limits {
    max_connections: usize,
    max_connections_per_ip: usize,
    max_in_flight: usize,
    per_connection: usize,
    total: usize,
    pub(super) partial_frame_timeout: Option<Duration>,
    pub(super) idle_timeout: Option<Duration>,
    open: AtomicUsize,
    /// Open connections per address; only with `max_connections_per_ip`.
    per_ip: Option<Mutex<HashMap<IpAddr, usize>>>,
    buffered: AtomicUsize,
    /// Woken when the total drops below `max_buffered_bytes`.
    below_total: Notify,
    metrics: ClientLimitMetrics,
    logs: Logs,
}

/// One rate limiter per kind of log line.
#[derive(Default)]
struct Logs {
    refused_total: Every,
    refused_per_ip: Every,
    paused_connection: Every,
    paused_total: Every,
    paused_in_flight: Every,
    partial_frame: Every,
    idle: Every,
}

impl Limits {
    pub fn new(config: &LimitsConfig, metrics: &ClientLimitMetrics) -> Arc<Limits> {
        Arc::new(Limits {
            max_connections: config.max_connections,
            max_connections_per_ip: config.max_connections_per_ip,
            max_in_flight: config.max_in_flight_per_connection,
            per_connection: config.max_buffered_bytes_per_connection,
            total: config.max_buffered_bytes,
            partial_frame_timeout: config.partial_frame_timeout(),
            idle_timeout: config.idle_timeout(),
            open: AtomicUsize::new(0),
            per_ip: (config.max_connections_per_ip > 0).then(|| Mutex::new(HashMap::new())),
            buffered: AtomicUsize::new(0),
            below_total: Notify::new(),
            metrics: metrics.clone(),
            logs: Logs::default(),
        })
    }

    /// Counts a connection just accepted from `peer`; None: over a limit (counted and logged),
    /// the caller closes it at once.
    pub fn admit(self: &Arc<Self>, peer: SocketAddr) -> Option<Admitted> {
        let open = self.open.fetch_add(1, Ordering::Relaxed);
        if self.max_connections > 0 && open >= self.max_connections {
            self.open.fetch_sub(1, Ordering::Relaxed);
            self.metrics.refused_max_connections.increment(1);
            if let Some(also) = self.logs.refused_total.due() {
                warn!(%peer, limit = self.max_connections, also_refused = also,
                    "client connection refused: limits.max_connections reached");
            }
            return None;
        }
        let ip = peer.ip();
        if let Some(per_ip) = &self.per_ip {
            let mut per_ip = per_ip.lock().unwrap_or_else(|e| e.into_inner());
            let n = per_ip.entry(ip).or_insert(0);
            if *n >= self.max_connections_per_ip {
                drop(per_ip);
                self.open.fetch_sub(1, Ordering::Relaxed);
                self.metrics.refused_per_ip.increment(1);
                if let Some(also) = self.logs.refused_per_ip.due() {
                    warn!(%peer, limit = self.max_connections_per_ip, also_refused = also,
                        "client connection refused: limits.max_connections_per_ip reached");
                }
                return None;
            }
            *n += 1;
        }
        self.metrics.open.increment(1.0);
        Some(Admitted {
            limits: self.clone(),
            peer,
            buffered: AtomicUsize::new(0),
            reserved: AtomicUsize::new(0),
            slots: AtomicUsize::new(0),
            awaiting: AtomicUsize::new(0),
            paused: AtomicBool::new(false),
            room: Notify::new(),
            epoch: Instant::now(),
            active_ms: AtomicU64::new(0),
        })
    }

    fn charge(&self, bytes: usize) {
        self.buffered.fetch_add(bytes, Ordering::Relaxed);
        self.metrics.buffered_bytes.increment(bytes as f64);
    }

    fn release(&self, bytes: usize) {
        let before = self.buffered.fetch_sub(bytes, Ordering::SeqCst);
        self.metrics.buffered_bytes.decrement(bytes as f64);
        if before >= self.total && before - bytes < self.total {
            self.below_total.notify_waiters();
        }
    }

    fn over_total(&self) -> bool {
        self.buffered.load(Ordering::SeqCst) >= self.total
    }

    /// What the answer to a request reserves until it arrives: for Fetch (and ShareFetch) its
    /// `max_bytes`, at least [`FETCH_ANSWER_FLOOR`], at most half a connection's limit; 0 for
    /// every other API (their answers are small, and their number is bounded by
    /// `max_in_flight_per_connection`).
    pub fn reservation(&self, api_key: i16, version: i16, payload: &[u8]) -> usize {
        let asked = if api_key == ApiKey::Fetch as i16 {
            fetch_max_bytes(payload, version).unwrap_or(0)
        } else if api_key == ApiKey::ShareFetch as i16 {
            0
        } else {
            return 0;
        };
        asked.max(FETCH_ANSWER_FLOOR).min(self.per_connection / 2)
    }
}

/// A Fetch request's `max_bytes` (v3 on), read in place: request header (client id, tagged
/// fields from v12), `replica_id` up to v14, `max_wait_ms`, `min_bytes`, `max_bytes`.
fn fetch_max_bytes(payload: &[u8], version: i16) -> Option<usize> {
    const WHAT: &str = "fetch max_bytes";
    if version < 3 {
        return None;
    }
    let mut r = WireReader::new(payload);
    r.skip(8, WHAT).ok()?;
    r.skip_nullable_string(WHAT).ok()?;
    if ApiKey::Fetch.request_header_version(version) >= 2 {
        r.skip_tagged_fields(WHAT).ok()?;
    }
    r.skip(if version < 15 { 12 } else { 8 }, WHAT).ok()?;
    usize::try_from(r.i32(WHAT).ok()?).ok()
}

/// Which limit stopped a connection's reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pause {
    InFlight,
    Connection,
    Total,
}

/// Why kroute closes a connection on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Timeout {
    #[error("a request stayed incomplete longer than limits.partial_frame_timeout_ms")]
    PartialFrame,
    #[error("idle longer than limits.idle_timeout_ms")]
    Idle,
}

/// One admitted client connection: what it holds, counted here and in the total. Dropping it
/// gives back the connection and everything it still held.
pub struct Admitted {
    limits: Arc<Limits>,
    peer: SocketAddr,
    buffered: AtomicUsize,
    /// Room reserved for answers still to come ([`Limits::reservation`]).
    reserved: AtomicUsize,
    /// Requests taken whose replies are not written yet.
    slots: AtomicUsize,
    /// Of those, the ones still waiting for a broker's answer.
    awaiting: AtomicUsize,
    /// Set while the reader waits for room: only then is `room` notified.
    paused: AtomicBool,
    room: Notify,
    epoch: Instant,
    /// When bytes last moved (read, written, or an answer arrived), ms after `epoch`.
    active_ms: AtomicU64,
}

impl Admitted {
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    fn charge(&self, bytes: usize) {
        self.buffered.fetch_add(bytes, Ordering::SeqCst);
        self.limits.charge(bytes);
    }

    fn release(&self, bytes: usize) {
        self.buffered.fetch_sub(bytes, Ordering::SeqCst);
        self.limits.release(bytes);
        if self.paused.load(Ordering::SeqCst) {
            self.room.notify_one();
        }
    }

    /// A reply slot joins the queue: `request` bytes, plus `answered` bytes if its answer is
    /// already known; else it waits for a broker, with `reserved` bytes of room for it.
    pub(super) fn queued(&self, request: usize, answered: Option<usize>, reserved: usize) {
        self.slots.fetch_add(1, Ordering::Relaxed);
        match answered {
            Some(bytes) => self.charge(request + bytes),
            None => {
                self.awaiting.fetch_add(1, Ordering::Relaxed);
                if reserved > 0 {
                    self.reserved.fetch_add(reserved, Ordering::SeqCst);
                }
                self.charge(request);
            }
        }
    }

    /// The answer of a waiting slot arrived (`bytes` long), in place of `reserved`.
    pub(super) fn arrived(&self, bytes: usize, reserved: usize) {
        self.awaiting.fetch_sub(1, Ordering::Relaxed);
        if reserved > 0 {
            self.reserved.fetch_sub(reserved, Ordering::SeqCst);
        }
        self.charge(bytes);
        self.active();
        if self.paused.load(Ordering::SeqCst) {
            self.room.notify_one(); // a smaller answer than reserved frees room
        }
    }

    /// A slot's reply was written: its request and reply (`bytes` together) are done with.
    pub(super) fn written(&self, bytes: usize) {
        self.slots.fetch_sub(1, Ordering::Relaxed);
        self.active();
        self.release(bytes);
    }

    /// Bytes moved on the connection.
    pub(super) fn active(&self) {
        self.active_at(Instant::now());
    }

    /// Bytes moved on the connection at `now`.
    pub(super) fn active_at(&self, now: Instant) {
        let ms = now.saturating_duration_since(self.epoch).as_millis() as u64;
        self.active_ms.store(ms, Ordering::Relaxed);
    }

    fn last_active(&self) -> Instant {
        self.epoch + Duration::from_millis(self.active_ms.load(Ordering::Relaxed))
    }

    /// What stops the next request from being read, if anything.
    pub(super) fn blocked(&self) -> Option<Pause> {
        let l = &*self.limits;
        if self.slots.load(Ordering::Relaxed) >= l.max_in_flight {
            return Some(Pause::InFlight);
        }
        let buffered = self.buffered.load(Ordering::SeqCst);
        if buffered == 0 {
            None // one request may always be in flight
        } else if buffered + self.reserved.load(Ordering::SeqCst) >= l.per_connection {
            Some(Pause::Connection)
        } else if l.over_total() {
            Some(Pause::Total)
        } else {
            None
        }
    }

    /// Stops reading if a limit says so: counts and logs the pause, and returns true; then
    /// [`Self::room`] until it says there is room, and [`Self::resume`].
    pub(super) fn pause(&self) -> bool {
        let Some(why) = self.blocked() else {
            return false;
        };
        self.paused(why);
        self.paused.store(true, Ordering::SeqCst);
        true
    }

    pub(super) fn resume(&self) {
        self.paused.store(false, Ordering::SeqCst);
    }

    /// While paused: waits until a request may be read (true), or `timer` fires (false).
    pub(super) async fn room(&self, mut timer: Pin<&mut Sleep>) -> bool {
        loop {
            let own = self.room.notified();
            let total = self.limits.below_total.notified();
            tokio::pin!(own, total);
            own.as_mut().enable();
            total.as_mut().enable();
            if self.blocked().is_none() {
                return true;
            }
            tokio::select! {
                _ = own => {}
                _ = total => {}
                () = timer.as_mut() => return false,
            }
        }
    }

    fn paused(&self, why: Pause) {
        let (m, logs) = (&self.limits.metrics, &self.limits.logs);
        let buffered = self.buffered.load(Ordering::Relaxed);
        let peer = self.peer;
        match why {
            Pause::InFlight => {
                m.paused_in_flight.increment(1);
                if let Some(also) = logs.paused_in_flight.due() {
                    info!(%peer, limit = self.limits.max_in_flight, also_paused = also,
                        "client reads paused: limits.max_in_flight_per_connection reached");
                }
            }
            Pause::Connection => {
                m.paused_connection.increment(1);
                if let Some(also) = logs.paused_connection.due() {
                    info!(%peer, buffered_bytes = buffered, limit = self.limits.per_connection, also_paused = also,
                        "client reads paused: limits.max_buffered_bytes_per_connection reached");
                }
            }
            Pause::Total => {
                m.paused_total.increment(1);
                if let Some(also) = logs.paused_total.due() {
                    warn!(%peer, total_bytes = self.limits.buffered.load(Ordering::Relaxed), limit = self.limits.total, also_paused = also,
                        "client reads paused: limits.max_buffered_bytes reached by all connections together");
                }
            }
        }
    }

    /// Decides what a connection's timer means now: Err to close the connection, else when
    /// to look again (None: never). `partial_since`: when the first byte of an incomplete
    /// request arrived, while kroute is reading.
    pub(super) fn check(
        &self,
        now: Instant,
        partial_since: Option<Instant>,
    ) -> Result<Option<Instant>, Timeout> {
        let l = &*self.limits;
        let mut next: Option<Instant> = None;
        if let (Some(limit), Some(since)) = (l.partial_frame_timeout, partial_since) {
            let due = since + limit;
            if now >= due {
                return Err(Timeout::PartialFrame);
            }
            next = Some(due);
        }
        if let Some(limit) = l.idle_timeout {
            let due = if self.awaiting.load(Ordering::Relaxed) > 0 {
                now + limit // a broker still owes an answer: not idle; look again later
            } else {
                let due = self.last_active() + limit;
                if now >= due {
                    return Err(Timeout::Idle);
                }
                due
            };
            next = Some(next.map_or(due, |n| n.min(due)));
        }
        Ok(next)
    }

    /// Counts and logs a close for `why`; `partial_bytes`: of the incomplete request.
    pub(super) fn timed_out(&self, why: Timeout, partial_bytes: usize) {
        let (m, logs, peer) = (&self.limits.metrics, &self.limits.logs, self.peer);
        match why {
            Timeout::PartialFrame => {
                m.timeout_partial_frame.increment(1);
                if let Some(also) = logs.partial_frame.due() {
                    warn!(%peer, partial_bytes, also_closed = also,
                        "closing client connection: a request stayed incomplete longer than limits.partial_frame_timeout_ms");
                }
            }
            Timeout::Idle => {
                m.timeout_idle.increment(1);
                if let Some(also) = logs.idle.due() {
                    info!(%peer, also_closed = also,
                        "closing idle client connection: nothing moved for limits.idle_timeout_ms");
                }
            }
        }
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let l = &*self.limits;
        let held = self.buffered.load(Ordering::SeqCst);
        if held > 0 {
            l.release(held);
        }
        l.open.fetch_sub(1, Ordering::Relaxed);
        if let Some(per_ip) = &l.per_ip {
            let mut per_ip = per_ip.lock().unwrap_or_else(|e| e.into_inner());
            let ip = self.peer.ip();
            if let Some(n) = per_ip.get_mut(&ip) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    per_ip.remove(&ip);
                }
            }
        }
        l.metrics.open.decrement(1.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(toml: &str) -> Arc<Limits> {
        let config: LimitsConfig = toml::from_str(toml).unwrap();
        let metrics = crate::metrics::Metrics::new();
        Limits::new(&config, &metrics.client_limits)
    }

    fn poll_once<F: Future>(f: Pin<&mut F>) -> std::task::Poll<F::Output> {
        f.poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
    }

    fn peer(ip: &str) -> SocketAddr {
        format!("{ip}:40000").parse().unwrap()
    }

    #[test]
    fn connections_over_the_limits_are_refused_and_given_back() {
        let l = limits("max_connections = 3\nmax_connections_per_ip = 2\n");
        let a1 = l.admit(peer("10.0.0.1")).unwrap();
        let a2 = l.admit(peer("10.0.0.1")).unwrap();
        assert!(l.admit(peer("10.0.0.1")).is_none(), "third from one IP");
        let b1 = l.admit(peer("10.0.0.2")).unwrap();
        assert!(l.admit(peer("10.0.0.3")).is_none(), "fourth in total");
        drop(a1);
        let a3 = l.admit(peer("10.0.0.1")).unwrap();
        drop((a2, a3, b1));
        assert_eq!(l.open.load(Ordering::Relaxed), 0);
        assert!(l.per_ip.as_ref().unwrap().lock().unwrap().is_empty());
    }

    #[test]
    fn unlimited_by_zero() {
        let l = limits("max_connections = 0\n");
        let all: Vec<_> = (0..100).map(|_| l.admit(peer("[::1]")).unwrap()).collect();
        assert_eq!(l.open.load(Ordering::Relaxed), 100);
        drop(all);
        assert_eq!(l.open.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_connection_pauses_at_its_limit_but_may_always_hold_one_request() {
        let l = limits(
            "max_buffered_bytes_per_connection = 1000\nmax_buffered_bytes = 1500\nmax_in_flight_per_connection = 3\n",
        );
        let a = l.admit(peer("10.0.0.1")).unwrap();
        // One request far above every limit is still taken: nothing else was held.
        assert_eq!(a.blocked(), None);
        a.queued(5000, None, 0);
        assert_eq!(a.blocked(), Some(Pause::Connection));
        a.arrived(10, 0);
        a.written(5010);
        assert_eq!(a.blocked(), None);
        // Under the connection's limit, but the total is reached by another connection.
        let b = l.admit(peer("10.0.0.2")).unwrap();
        b.queued(1400, Some(100), 0);
        a.queued(10, None, 0);
        assert_eq!(a.blocked(), Some(Pause::Total));
        assert_eq!(b.blocked(), Some(Pause::Connection));
        let c = l.admit(peer("10.0.0.3")).unwrap();
        assert_eq!(c.blocked(), None, "a connection holding nothing may read");
        b.written(1500);
        assert_eq!(a.blocked(), None);
        a.queued(10, Some(0), 0);
        a.queued(10, Some(0), 0);
        assert_eq!(a.blocked(), Some(Pause::InFlight));
        drop(a);
        assert_eq!(
            l.buffered.load(Ordering::Relaxed),
            0,
            "a closed connection gives back what it held"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn room_waits_for_written_replies() {
        let l = limits("max_buffered_bytes_per_connection = 100\n");
        let a = l.admit(peer("10.0.0.1")).unwrap();
        a.queued(200, None, 0);
        assert!(a.pause());
        let timer = tokio::time::sleep(Duration::from_secs(3600));
        tokio::pin!(timer);
        {
            let waiting = a.room(timer.as_mut());
            tokio::pin!(waiting);
            assert!(poll_once(waiting.as_mut()).is_pending());
            a.arrived(50, 0);
            assert!(poll_once(waiting.as_mut()).is_pending());
            a.written(250);
            assert_eq!(poll_once(waiting.as_mut()), std::task::Poll::Ready(true));
        }
        a.resume();
        assert!(!a.pause());
    }

    #[test]
    fn timers() {
        let l = limits("partial_frame_timeout_ms = 1000\nidle_timeout_ms = 5000\n");
        let a = l.admit(peer("10.0.0.1")).unwrap();
        let t0 = a.epoch;
        let s = Duration::from_secs(1);
        assert_eq!(a.check(t0, None), Ok(Some(t0 + 5 * s)));
        assert_eq!(a.check(t0, Some(t0)), Ok(Some(t0 + s)));
        assert_eq!(a.check(t0 + s, Some(t0)), Err(Timeout::PartialFrame));
        assert_eq!(a.check(t0 + 5 * s, None), Err(Timeout::Idle));
        // A request waiting for a broker: never idle.
        a.queued(10, None, 0);
        assert_eq!(a.check(t0 + 50 * s, None), Ok(Some(t0 + 55 * s)));
    }

    #[test]
    fn a_fetch_reserves_room_for_its_answer() {
        use bytes::BytesMut;
        use kafka_protocol::messages::{FetchRequest, RequestHeader};
        use kafka_protocol::protocol::Encodable;
        let l = limits("max_buffered_bytes_per_connection = 8388608\n");
        let fetch = |version: i16, max_bytes: i32| {
            let mut b = BytesMut::new();
            RequestHeader::default()
                .with_request_api_key(1)
                .with_request_api_version(version)
                .encode(&mut b, ApiKey::Fetch.request_header_version(version))
                .unwrap();
            FetchRequest::default()
                .with_max_wait_ms(500)
                .with_max_bytes(max_bytes)
                .encode(&mut b, version)
                .unwrap();
            b.freeze()
        };
        const MIB: usize = 1 << 20;
        for version in [4, 11, 12, 15, 17] {
            assert_eq!(
                fetch_max_bytes(&fetch(version, 3 * MIB as i32), version),
                Some(3 * MIB)
            );
            let f = fetch(version, 3 * MIB as i32);
            assert_eq!(l.reservation(1, version, &f), 3 * MIB, "v{version}");
            let small = fetch(version, 10);
            assert_eq!(l.reservation(1, version, &small), MIB, "at least one batch");
            let huge = fetch(version, 50 * MIB as i32);
            assert_eq!(l.reservation(1, version, &huge), 4 * MIB, "half the limit");
        }
        assert_eq!(
            l.reservation(1, 12, &[0, 1, 0, 12, 0]),
            MIB,
            "unreadable: the floor"
        );
        assert_eq!(l.reservation(3, 12, &fetch(12, 1)), 0, "not a Fetch");
        // The answer replaces the reservation.
        let a = l.admit(peer("10.0.0.1")).unwrap();
        a.queued(100, None, 4 * MIB);
        assert_eq!(a.blocked(), None);
        a.queued(100, None, 4 * MIB);
        assert_eq!(a.blocked(), Some(Pause::Connection));
        a.arrived(1000, 4 * MIB);
        assert_eq!(a.blocked(), None);
    }
}
