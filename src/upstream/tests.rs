//! The reader's request timeout, on an in-memory broker connection with tokio's clock paused:
//! waiting on a reply lets the clock jump to the next timer, so the tests measure exactly when
//! a reply fails.

use std::time::Duration;

use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::{FetchRequest, RequestHeader};
use kafka_protocol::protocol::{Encodable, StrBytes};
use tokio::io::{AsyncWriteExt, DuplexStream};
use tokio::sync::oneshot::error::TryRecvError;

use super::*;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::proxy::Proxy;

/// A reader running on one end of an in-memory connection; the test plays the writer (it
/// queues what the reader expects) and the broker (it writes answers, or does not).
struct Harness {
    pending_tx: mpsc::UnboundedSender<InFlight>,
    broker: DuplexStream,
    link: Arc<Link>,
    hangup: oneshot::Receiver<()>,
    timeout: Option<Duration>,
}

fn harness(request_timeout_ms: u64) -> Harness {
    let text = format!(
        "[upstream]\nbootstrap_servers = [\"127.0.0.1:1\"]\n\
         request_timeout_ms = {request_timeout_ms}\n"
    );
    let proxy = Proxy::new(Config::parse(&text, "t").unwrap(), Metrics::new()).unwrap();
    let link = Link::new(proxy.as_ref(), 2);
    let (kroute, broker) = tokio::io::duplex(64 * 1024);
    let (rd, _wr) = tokio::io::split(kroute);
    let (pending_tx, pending_rx) = mpsc::unbounded_channel();
    let (hangup_tx, hangup) = oneshot::channel();
    let timeout = proxy.config.request_timeout();
    tokio::spawn(read_responses(
        Box::new(rd),
        pending_rx,
        proxy,
        link.clone(),
        hangup_tx,
    ));
    Harness {
        pending_tx,
        broker,
        link,
        hangup,
        timeout,
    }
}

/// A request frame of `api` version `version` with `body`.
fn request<R: Encodable>(api: ApiKey, version: i16, correlation_id: i32, body: &R) -> Bytes {
    let header = RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("t")));
    let mut out = BytesMut::new();
    header
        .encode(&mut out, api.request_header_version(version))
        .unwrap();
    body.encode(&mut out, version).unwrap();
    out.freeze()
}

impl Harness {
    /// Queues a request as the writer does when it sends it now; returns its reply.
    fn sent(&self, api: ApiKey, version: i16, correlation_id: i32, frame: &Bytes) -> Waiter {
        let (tx, rx) = oneshot::channel();
        let pending = PendingReply::new(api as i16, version, correlation_id, tx);
        let limit = deadline::limit(self.timeout, api as i16, version, frame);
        let sent = TokioInstant::now().into_std();
        self.pending_tx
            .send(InFlight {
                pending,
                sent,
                bytes: frame.len(),
                limit,
            })
            .ok()
            .unwrap();
        Waiter(rx)
    }

    /// The broker answers request `correlation_id` (a response that needs no rewriting).
    async fn answer(&mut self, correlation_id: i32) {
        let mut frame = BytesMut::new();
        frame.put_i32(8);
        frame.put_i32(correlation_id);
        frame.put_i32(0);
        self.broker.write_all(&frame).await.unwrap();
    }
}

struct Waiter(oneshot::Receiver<Reply>);

impl Waiter {
    /// Waits for the reply (the paused clock runs on to the next timer meanwhile).
    async fn reply(self) -> Reply {
        self.0.await.unwrap_or(Err(UpstreamGone::Unanswered))
    }

    fn is_waiting(&mut self) -> bool {
        matches!(self.0.try_recv(), Err(TryRecvError::Empty))
    }
}

/// An ordinary request, whose answer kroute passes on as it is.
fn heartbeat(correlation_id: i32) -> Bytes {
    let body = kafka_protocol::messages::HeartbeatRequest::default();
    request(ApiKey::Heartbeat, 4, correlation_id, &body)
}

/// Lets the reader task run on what just happened.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_request_fails_at_its_deadline_and_closes_the_connection() {
    let mut h = harness(5_000);
    let start = TokioInstant::now();
    // Queued while the reader waits for frames: it learns of it without any answer coming.
    let reply = h.sent(ApiKey::Heartbeat, 4, 1, &heartbeat(1)).reply().await;
    assert!(matches!(reply, Err(UpstreamGone::Unanswered)));
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_secs(5) && waited < Duration::from_millis(5_010),
        "{waited:?}"
    );
    settle().await;
    assert!(h.link.reader_done.load(Ordering::Relaxed));
    // The writer is told to stop: the connection closes.
    assert!((&mut h.hangup).await.is_err());
}

#[tokio::test(start_paused = true)]
async fn answered_requests_pass_and_each_oldest_gets_its_full_time() {
    let mut h = harness(5_000);
    let start = TokioInstant::now();
    let first = h.sent(ApiKey::Heartbeat, 4, 1, &heartbeat(1));
    tokio::time::sleep(Duration::from_secs(4)).await;
    let mut second = h.sent(ApiKey::Heartbeat, 4, 2, &heartbeat(2));
    h.answer(1).await;
    assert!(first.reply().await.is_ok());
    // The second was sent at 4 s, the first answered at 4 s: its deadline is 9 s, not 5 s.
    tokio::time::sleep(Duration::from_millis(4_900)).await;
    settle().await;
    assert!(second.is_waiting(), "timed out before its own deadline");
    assert!(matches!(
        second.reply().await,
        Err(UpstreamGone::Unanswered)
    ));
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_secs(9) && waited < Duration::from_millis(9_010),
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_long_poll_gets_its_wait_and_the_request_behind_it_starts_after_it() {
    let mut h = harness(5_000);
    let start = TokioInstant::now();
    let fetch = request(
        ApiKey::Fetch,
        12,
        1,
        &FetchRequest::default().with_max_wait_ms(10_000),
    );
    let long_poll = h.sent(ApiKey::Fetch, 12, 1, &fetch);
    let mut behind = h.sent(ApiKey::Heartbeat, 4, 2, &heartbeat(2));
    // Answered at 14 s: after the timeout alone, within max_wait_ms + the timeout.
    tokio::time::sleep(Duration::from_secs(14)).await;
    settle().await;
    assert!(behind.is_waiting());
    h.answer(1).await;
    assert!(long_poll.reply().await.is_ok());
    // The request behind it was sent at 0 s, but the broker could start on it at 14 s only.
    assert!(matches!(
        behind.reply().await,
        Err(UpstreamGone::Unanswered)
    ));
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_secs(19) && waited < Duration::from_millis(19_010),
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn no_limit_when_off_or_for_a_sync_group() {
    for (timeout_ms, api, frame) in [
        (0, ApiKey::Heartbeat, heartbeat(1)),
        (
            5_000,
            ApiKey::SyncGroup,
            request(
                ApiKey::SyncGroup,
                5,
                1,
                &kafka_protocol::messages::SyncGroupRequest::default(),
            ),
        ),
    ] {
        let mut h = harness(timeout_ms);
        let version = if api == ApiKey::Heartbeat { 4 } else { 5 };
        let mut reply = h.sent(api, version, 1, &frame);
        tokio::time::sleep(Duration::from_secs(3_600)).await;
        settle().await;
        assert!(reply.is_waiting(), "{api:?} timed out");
        h.answer(1).await;
        assert!(reply.reply().await.is_ok());
    }
}

/// A reply that goes through a hook (as a renumbered batch's does): dropped unanswered, it
/// says whether the request was ever written.
fn hooked(correlation_id: i32) -> (PendingReply, oneshot::Receiver<Reply>) {
    let (tx, rx) = oneshot::channel();
    let pending = PendingReply::new(ApiKey::Heartbeat as i16, 4, correlation_id, tx)
        .with_hook(Box::new(|answer| answer));
    (pending, rx)
}

#[tokio::test]
async fn a_request_the_writer_never_wrote_is_known_unsent_and_one_it_wrote_is_not() {
    let text = "[upstream]\nbootstrap_servers = [\"127.0.0.1:1\"]\n";
    let proxy = Proxy::new(Config::parse(text, "t").unwrap(), Metrics::new()).unwrap();
    let link = Link::new(proxy.as_ref(), 2);
    let (kroute, _broker) = tokio::io::duplex(64 * 1024);
    let (_rd, wr) = tokio::io::split(kroute);
    let (tx, rx) = mpsc::channel(8);
    let (pending_tx, mut pending_rx) = mpsc::unbounded_channel();
    let (_hangup_tx, hangup) = oneshot::channel();
    tokio::spawn(write_requests(
        Box::new(wr),
        rx,
        pending_tx,
        link.clone(),
        None,
        hangup,
    ));

    // Its client re-authenticates: a request kroute injected is dropped, unwritten.
    link.client_sasl_busy.store(true, Ordering::Relaxed);
    let (pending, injected) = hooked(1);
    let mut out = Outbound::new(heartbeat(1), Some(pending));
    out.injected = true;
    tx.send(out).await.ok().unwrap();
    assert_eq!(injected.await.unwrap(), Err(UpstreamGone::NeverSent));

    // The client's own request is written; its connection ends before the answer.
    let (pending, own) = hooked(2);
    tx.send(Outbound::new(heartbeat(2), Some(pending)))
        .await
        .ok()
        .unwrap();
    let in_flight = pending_rx.recv().await.unwrap();
    drop(in_flight);
    assert_eq!(own.await.unwrap(), Err(UpstreamGone::Unanswered));
}
