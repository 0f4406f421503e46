//! One connection from kroute to a real broker, owned by one client connection (or by one
//! idempotent producer kroute renumbers, for its Produce requests to that broker).
//!
//! A broker answers the requests of a connection strictly in the order it read them, and
//! connection-bound behaviour (quota throttling, long-poll fetches, fetch sessions) must stay per
//! client, so every client connection gets its own upstream connection and nothing is shared.
//! An owned producer's renumbered batches for one broker all go through one connection of their
//! own, so that they reach the broker in the order they were numbered
//! ([`crate::route::producers`]).
//!
//! A writer task sends requests as they come; before it writes a request that expects an answer
//! it queues a [`PendingReply`] for the reader task. The reader matches each response to the
//! front of that queue, checks the correlation id, rewrites addresses if the API needs it and
//! hands the payload back through the reply's oneshot. If the broker goes away, every queued
//! reply is dropped, and the client connections waiting for them close promptly.
//!
//! A broker that keeps the connection open but does not answer is treated as gone: when the
//! oldest unanswered request is older than `upstream.request_timeout_ms` (plus its own wait if
//! it parks by design, [`deadline`]), the reader closes the connection. The reader learns of
//! new requests while it waits, and keeps one timer: the oldest request's deadline.

mod context;
pub mod deadline;
pub mod principals;
mod reauth;

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use tokio::io::{AsyncWriteExt, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant as TokioInstant, Sleep};
use tokio_util::codec::FramedRead;
use tracing::{debug, warn};

use crate::balance::scores::BrokerScore;
use crate::cluster::AbsurdCluster;
use crate::log_every::Every;
use crate::metrics::BrokerMetrics;
use crate::protocol::endpoints::carries_node_endpoints;
use crate::protocol::frame::{FRESH_BUFFER_BYTES, FrameCodec, FrameError, size_prefix};
use crate::protocol::header::{response_correlation_id, split_response};
use crate::rewrite::{Observed, needs_rewrite, rewrite_response};
use crate::security::stream::{ReadHalf, WriteHalf};
use crate::security::{Identity, OpenError, Opened, Reauthentication};
pub use context::Context;
use deadline::Limit;
use kafka_protocol::messages::{ApiKey, InitProducerIdResponse};
use kafka_protocol::protocol::Decodable;

/// The answer to one request: the response payload, or why there is none.
pub type Reply = Result<Bytes, UpstreamGone>;

/// Why a request has no answer: the broker connection ended (or would not take it) first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamGone {
    /// Written (or being written) when the connection ended: the broker may have acted on it.
    #[error("upstream connection closed before the response arrived")]
    Unanswered,
    /// Never written to the broker: it certainly did not act on it. (A renumbered batch that
    /// never left kroute leaves a hole its lane can be rewound over.)
    #[error("request not sent: its upstream connection could not take it")]
    NeverSent,
}

/// Something to do with an answer on the connection's reader, in the order answers arrive,
/// before it goes on (e.g. recording renumbered batches' outcomes); it may change the answer.
pub type AnswerHook = Box<dyn FnOnce(Reply) -> Reply + Send>;

/// What the reader must do with the response to one request.
///
/// Whatever happens, the reply is delivered exactly once: with the answer, or with
/// [`UpstreamGone`] if it is dropped unanswered (connection ended, request never sent).
pub struct PendingReply {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
    reply: Option<oneshot::Sender<Reply>>,
    hook: Option<AnswerHook>,
    /// A raw SASL token (after SaslHandshake v0): its answer has no header to check.
    raw: bool,
    /// Set when the writer takes it to write: from then on the broker may act on it.
    written: bool,
}

impl PendingReply {
    pub fn new(
        api_key: i16,
        api_version: i16,
        correlation_id: i32,
        reply: oneshot::Sender<Reply>,
    ) -> Self {
        Self {
            api_key,
            api_version,
            correlation_id,
            reply: Some(reply),
            hook: None,
            raw: false,
            written: false,
        }
    }

    /// Expects the answer to a raw SASL token ([`crate::security::passthrough`]).
    pub fn raw_token(mut self) -> Self {
        self.raw = true;
        self
    }

    pub fn with_hook(mut self, hook: AnswerHook) -> Self {
        self.hook = Some(hook);
        self
    }

    fn deliver(mut self, answer: Reply) {
        self.finish(answer);
    }

    fn finish(&mut self, answer: Reply) {
        let answer = match self.hook.take() {
            Some(hook) => hook(answer),
            None => answer,
        };
        if let Some(reply) = self.reply.take() {
            // The client may have gone; its reply slot is then simply dropped.
            let _ = reply.send(answer);
        }
    }
}

impl Drop for PendingReply {
    fn drop(&mut self) {
        if self.hook.is_some() {
            self.finish(Err(if self.written {
                UpstreamGone::Unanswered
            } else {
                UpstreamGone::NeverSent
            }));
        }
    }
}

/// A request to send, with the reply it expects (none for Produce with acks=0).
pub struct Outbound {
    pub frame: Bytes,
    pub pending: Option<PendingReply>,
    /// Queued by kroute on a client's connection for another connection of the same principal
    /// ([`principals`]): never written while the client re-authenticates.
    pub injected: bool,
}

impl Outbound {
    /// A request of the connection's own.
    pub fn new(frame: Bytes, pending: Option<PendingReply>) -> Self {
        Outbound {
            frame,
            pending,
            injected: false,
        }
    }
}

/// Handle to a live upstream connection. Dropping it closes the connection.
pub struct Upstream {
    pub node_id: i32,
    tx: mpsc::Sender<Outbound>,
    link: Arc<Link>,
}

/// How many requests may wait for the writer before the client reader waits too.
const OUTBOUND_QUEUE: usize = 64;

impl Upstream {
    /// Connects to `addr` (the broker with `node_id`, or -1 for a bootstrap server), secured
    /// for `identity` ([`crate::security`]).
    pub async fn connect(
        ctx: Arc<dyn Context>,
        node_id: i32,
        addr: &str,
        identity: Identity,
    ) -> Result<Upstream, DialError> {
        let link = Link::new(ctx.as_ref(), node_id);
        let opened = dial(ctx.as_ref(), &link, addr, identity).await?;
        let (tx, rx) = mpsc::channel(OUTBOUND_QUEUE);
        start(opened, rx, ctx, link.clone());
        Ok(Upstream { node_id, tx, link })
    }

    /// The client of this connection authenticated itself (SASL passthrough): kroute must not
    /// take over the numbering of idempotent producers it starts, whose every batch would then
    /// go out under kroute's identity ([`crate::security::permit`]).
    pub fn client_authenticated(&self) {
        self.link
            .client_authenticated
            .store(true, Ordering::Relaxed);
    }

    /// The client is about to send a SaslHandshake (KIP-368 re-authentication included): from
    /// now until [`SaslGate::open`], requests injected by kroute are not written, since a
    /// broker takes nothing else between the handshake and the last SaslAuthenticate. Called
    /// before the handshake is queued, so none can slip in behind it.
    pub fn client_sasl_started(&self) -> SaslGate {
        self.link.client_sasl_busy.store(true, Ordering::Relaxed);
        SaslGate(self.link.clone())
    }

    /// Opens a connection in the background: requests may be queued at once (up to `queue`);
    /// if the connection cannot be made, their replies fail as if the broker had gone away.
    pub fn open(ctx: Arc<dyn Context>, node_id: i32, addr: String, queue: usize) -> Upstream {
        let link = Link::new(ctx.as_ref(), node_id);
        let (tx, rx) = mpsc::channel(queue);
        let background = link.clone();
        tokio::spawn(async move {
            match dial(ctx.as_ref(), &background, &addr, Identity::Kroute).await {
                Ok(opened) => start(opened, rx, ctx, background),
                Err(e) => {
                    background.reader_done.store(true, Ordering::Relaxed);
                    ctx.scores().unreachable(node_id, Instant::now());
                    debug!(broker = node_id, "cannot open a producer connection: {e}");
                    // Dropping `rx` fails the replies of everything queued.
                }
            }
        });
        Upstream { node_id, tx, link }
    }

    /// False once the broker side of the connection has ended (e.g. the broker closed an idle
    /// connection): requests sent now would be lost.
    pub fn is_open(&self) -> bool {
        !self.link.reader_done.load(Ordering::Relaxed) && !self.tx.is_closed()
    }

    /// Queues a request; fails if the connection is gone (the request then never left).
    pub async fn send(&self, out: Outbound) -> Result<(), UpstreamGone> {
        self.tx.send(out).await.map_err(|_| UpstreamGone::NeverSent)
    }

    /// Queues a request without waiting; if the connection is gone or its queue is full, the
    /// request comes back (dropping it fails its reply).
    pub fn try_send(&self, out: Outbound) -> Result<(), Box<Outbound>> {
        self.tx.try_send(out).map_err(|e| Box::new(e.into_inner()))
    }
}

/// Reopens a connection to injected requests once its client's SASL exchange is over.
pub struct SaslGate(Arc<Link>);

impl SaslGate {
    pub fn open(&self) {
        self.0.client_sasl_busy.store(false, Ordering::Relaxed);
    }

    /// The broker accepted the client for `lifetime_ms` (0: no limit). A broker closes a
    /// connection that sends it anything but a new SASL exchange once the session has expired
    /// (KIP-368), and a client re-authenticates only when it sends something itself: so kroute
    /// injects nothing in the session's last [`SESSION_MARGIN`] (a tenth of it, if shorter),
    /// nor after it, unless the client re-authenticates first. (Not a tenth of any session: the
    /// Java client re-authenticates at 85-95% of it, so up to the last 5% of an hour, 3
    /// minutes, would have been closed to an owned producer's batches, longer than its
    /// delivery timeout.)
    pub fn accepted(&self, lifetime_ms: i64) {
        let injectable_until = u64::try_from(lifetime_ms)
            .ok()
            .filter(|ms| *ms > 0)
            .map(Duration::from_millis)
            .and_then(|lifetime| {
                let margin = (lifetime / 10).min(SESSION_MARGIN);
                TokioInstant::now().checked_add(lifetime - margin)
            });
        *self.0.injectable_until() = injectable_until;
    }
}

/// How long before a client's SASL session ends kroute stops injecting on its connection: more
/// than an injected request needs to reach the broker.
const SESSION_MARGIN: Duration = Duration::from_secs(5);

/// Why a connection to a broker could not be made ready.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Secure(#[from] OpenError),
}

/// Opens the connection (TCP, then TLS and SASL as configured), counting failures on the
/// broker's metrics. The TLS and SASL handshakes get `connect_timeout_ms` too: a broker that
/// accepts but never answers must not hold the client connection forever.
async fn dial(
    ctx: &dyn Context,
    link: &Link,
    addr: &str,
    identity: Identity,
) -> Result<Opened, DialError> {
    let tcp = connect_tcp(ctx, link, addr).await?;
    let secure = ctx.security().open(tcp, link.node_id, addr, identity);
    match tokio::time::timeout(ctx.config().connect_timeout(), secure).await {
        Ok(Ok(opened)) => Ok(opened),
        Ok(Err(e)) => {
            link.metrics.connect_failures.increment(1);
            Err(e.into())
        }
        Err(_) => {
            link.metrics.connect_failures.increment(1);
            Err(
                std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS/SASL handshake timed out")
                    .into(),
            )
        }
    }
}

async fn connect_tcp(ctx: &dyn Context, link: &Link, addr: &str) -> std::io::Result<TcpStream> {
    let stream = match tokio::time::timeout(
        ctx.config().connect_timeout(),
        TcpStream::connect(addr),
    )
    .await
    {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            link.metrics.connect_failures.increment(1);
            return Err(e);
        }
        Err(_) => {
            link.metrics.connect_failures.increment(1);
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "connect timed out",
            ));
        }
    };
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Starts the writer and reader tasks of a connected stream.
fn start(opened: Opened, rx: mpsc::Receiver<Outbound>, ctx: Arc<dyn Context>, link: Arc<Link>) {
    let (rd, wr) = opened.stream.split();
    let (pending_tx, pending_rx) = mpsc::unbounded_channel();
    // Dropped when the reader ends: the writer stops too, and the connection closes.
    let (hangup_tx, hangup) = oneshot::channel();
    let reauth = opened.reauthentication;
    tokio::spawn(write_requests(
        wr,
        rx,
        pending_tx,
        link.clone(),
        reauth,
        hangup,
    ));
    tokio::spawn(read_responses(rd, pending_rx, ctx, link, hangup_tx));
}

/// A reply the reader is waiting for, stamped with when its request left and how long the
/// broker may take with it.
struct InFlight {
    pending: PendingReply,
    sent: Instant,
    /// The request's size, for the broker's score.
    bytes: usize,
    limit: Limit,
}

/// What the writer and reader of one connection share about their broker.
struct Link {
    node_id: i32,
    metrics: Arc<BrokerMetrics>,
    /// The broker's live score; Produce round trips feed it. None for unknown bootstrap nodes.
    score: Option<Arc<BrokerScore>>,
    /// Set when the client side closed this connection (so requests still in flight, such as
    /// a long-poll fetch, are not the broker's fault).
    client_left: AtomicBool,
    /// Set when the reader has stopped: nothing sent from then on can be answered.
    reader_done: AtomicBool,
    /// Set when the client authenticated itself over this connection (SASL passthrough).
    client_authenticated: AtomicBool,
    /// Set while the client runs a SASL exchange: injected requests are dropped meanwhile.
    client_sasl_busy: AtomicBool,
    /// Set once kroute knows who the client authenticated as ([`principals`]).
    principal_known: AtomicBool,
    /// Until when the client's SASL session leaves room for injected requests; None: no limit.
    /// (tokio's clock, so paused-time tests drive it)
    client_session: std::sync::Mutex<Option<TokioInstant>>,
    injected_refused: metrics::Counter,
    /// `upstream.request_timeout_ms`; None: off.
    request_timeout: Option<Duration>,
}

impl Link {
    fn new(ctx: &dyn Context, node_id: i32) -> Arc<Link> {
        Arc::new(Link {
            node_id,
            metrics: ctx.metrics().broker(node_id),
            score: (node_id >= 0).then(|| ctx.scores().broker(node_id)),
            client_left: AtomicBool::new(false),
            reader_done: AtomicBool::new(false),
            client_authenticated: AtomicBool::new(false),
            client_sasl_busy: AtomicBool::new(false),
            principal_known: AtomicBool::new(false),
            client_session: std::sync::Mutex::new(None),
            injected_refused: ctx.metrics().injected_refused.clone(),
            request_timeout: ctx.config().request_timeout(),
        })
    }

    fn injectable_until(&self) -> std::sync::MutexGuard<'_, Option<TokioInstant>> {
        self.client_session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a request injected on this client connection may go out now: the client is not
    /// in a SASL exchange and its session is not about to expire.
    fn injectable(&self) -> bool {
        !self.client_sasl_busy.load(Ordering::Relaxed)
            && self
                .injectable_until()
                .is_none_or(|until| TokioInstant::now() < until)
    }

    fn is_scored(&self, api_key: i16) -> Option<&BrokerScore> {
        self.score
            .as_deref()
            .filter(|_| api_key == ApiKey::Produce as i16)
    }
}

async fn write_requests(
    wr: WriteHalf,
    mut rx: mpsc::Receiver<Outbound>,
    pending_tx: mpsc::UnboundedSender<InFlight>,
    link: Arc<Link>,
    mut reauth: Option<Reauthentication>,
    mut hangup: oneshot::Receiver<()>,
) {
    let mut out = BufWriter::with_capacity(64 * 1024, wr);
    loop {
        let next = tokio::select! {
            biased;
            // The reader ended (the broker closed, or did not answer in time): the connection
            // closes, and the requests still queued here fail with it.
            _ = &mut hangup => return,
            next = rx.recv() => next,
        };
        let Some(Outbound {
            frame,
            pending,
            injected,
        }) = next
        else {
            break;
        };
        if injected && !link.injectable() {
            // The client re-authenticates, or its session is about to expire: dropping the
            // request fails its reply (retriable).
            link.injected_refused.increment(1);
            continue;
        }
        if let Some(due) = reauth.as_ref().filter(|r| Instant::now() >= r.at) {
            // Between requests, before the broker's session runs out (KIP-368). Dropping the
            // request in hand on failure fails its reply: its client sees the broker go away.
            match reauth::reauthenticate(&mut out, &pending_tx, due, link.request_timeout).await {
                Ok(next) => reauth = next,
                Err(e) => {
                    warn!(
                        broker = link.node_id,
                        "closing upstream connection: re-authentication failed: {e}"
                    );
                    return;
                }
            }
        }
        if frame.get(..2) == Some(&[0, 0]) {
            link.metrics.produce_bytes.increment(frame.len() as u64);
        }
        if let Some(mut pending) = pending {
            pending.written = true;
            // Queue the reply before the bytes leave, so the reader always finds it.
            let sent = Instant::now();
            if let Some(score) = link.is_scored(pending.api_key) {
                score.sent(sent, frame.len());
            }
            let (api_key, version) = (pending.api_key, pending.api_version);
            let limit = deadline::limit(link.request_timeout, api_key, version, &frame);
            let in_flight = InFlight {
                pending,
                sent,
                bytes: frame.len(),
                limit,
            };
            if let Err(mut unsent) = pending_tx.send(in_flight) {
                // Reader gone: the broker closed the connection. This request never left.
                if let Some(score) = link.is_scored(unsent.0.pending.api_key) {
                    score.abandoned(unsent.0.bytes);
                }
                unsent.0.pending.written = false;
                return;
            }
        }
        let written = async {
            out.write_all(&size_prefix(frame.len())).await?;
            out.write_all(&frame).await?;
            if rx.is_empty() {
                out.flush().await?;
            }
            std::io::Result::Ok(())
        };
        // A broker that does not answer may not read either: the reader's end stops the write.
        let written = tokio::select! {
            _ = &mut hangup => return,
            written = written => written,
        };
        if written.is_err() {
            return;
        }
    }
    // The client connection is done with this broker: its end is no surprise to the reader.
    link.client_left.store(true, Ordering::Relaxed);
    let _ = out.shutdown().await;
}

/// Why a connection's reader stopped.
enum Ended {
    /// The broker closed the connection, or the connection failed.
    Broken(String),
    /// The broker sent what cannot be matched or read: its fault, whoever still waits.
    Violated(String),
    /// The oldest request got no answer within its limit ([`deadline`]).
    TimedOut { api_key: i16, waited: Duration },
}

/// What the reader waits for next.
enum Event {
    Frame(Option<Result<Bytes, FrameError>>),
    Queued(Option<InFlight>),
    Overdue,
}

/// Reads the broker's answers and hands each to the oldest request still expecting one, until
/// the broker closes, sends something wrong, or leaves the oldest request unanswered too long.
async fn read_responses(
    rd: ReadHalf,
    pending_rx: mpsc::UnboundedReceiver<InFlight>,
    ctx: Arc<dyn Context>,
    link: Arc<Link>,
    _hangup: oneshot::Sender<()>,
) {
    let codec = FrameCodec::new(ctx.config().limits.max_frame_bytes);
    let mut frames = FramedRead::with_capacity(rd, codec, FRESH_BUFFER_BYTES);
    let mut expected = Expected::new(pending_rx);
    let ended = loop {
        let event = tokio::select! {
            frame = frames.next() => Event::Frame(frame),
            queued = expected.rx.recv(), if expected.rx_open => Event::Queued(queued),
            () = &mut expected.timer, if expected.armed.is_some() => Event::Overdue,
        };
        match event {
            Event::Queued(Some(in_flight)) => expected.push(in_flight),
            Event::Queued(None) => expected.rx_open = false, // the writer is gone
            Event::Overdue => {
                if let Some(timed_out) = expected.overdue() {
                    break timed_out;
                }
            }
            Event::Frame(Some(Ok(frame))) => {
                if let Err(ended) = deliver(ctx.as_ref(), &link, &mut expected, frame) {
                    break ended;
                }
            }
            Event::Frame(Some(Err(FrameError::Io(e)))) => {
                break Ended::Broken(format!("read error: {e}"));
            }
            Event::Frame(Some(Err(e))) => {
                ctx.metrics().upstream_protocol_errors.increment(1);
                break Ended::Violated(format!("unreadable response: {e}"));
            }
            Event::Frame(None) => break Ended::Broken("closed by the broker".into()),
        }
    };
    // Set first, so that nothing the writer queues from now on slips past the final drain.
    link.reader_done.store(true, Ordering::Relaxed);
    let unanswered = expected.close();
    report_end(ctx.as_ref(), &link, &unanswered, ended);
    // Dropping `unanswered` fails every reply still expected, and returning drops `_hangup`,
    // which stops the writer: the connection closes, and the clients waiting are disconnected.
}

/// Matches one response to the oldest request and hands it on. Err: why the connection
/// cannot go on.
fn deliver(
    ctx: &dyn Context,
    link: &Link,
    expected: &mut Expected,
    frame: Bytes,
) -> Result<(), Ended> {
    let Some((
        InFlight {
            pending,
            sent,
            bytes,
            ..
        },
        previous_answer,
    )) = expected.answered()
    else {
        ctx.metrics().upstream_protocol_errors.increment(1);
        return Err(Ended::Violated("response without a request".into()));
    };
    let now = Instant::now();
    link.metrics
        .latency(pending.api_key)
        .record(now.saturating_duration_since(sent));
    if let Some(score) = link.is_scored(pending.api_key) {
        let previous = previous_answer.into_std();
        score.answered(sent, previous, now, bytes, &ctx.scores().config);
    }
    match response_correlation_id(&frame) {
        _ if pending.raw => {}
        Ok(id) if id == pending.correlation_id => {}
        _ => {
            ctx.metrics().upstream_protocol_errors.increment(1);
            return Err(Ended::Violated(format!(
                "response does not match request correlation id {}",
                pending.correlation_id
            )));
        }
    }
    let payload = answer(ctx, link, &pending, frame).map_err(|e| {
        // Its client cannot be told anything true: the connection ends, its client's too.
        ctx.metrics().rewrite_errors.increment(1);
        if e.downcast_ref::<AbsurdCluster>().is_some() {
            ctx.metrics().absurd_answers.increment(1);
        }
        static CANNOT_REWRITE: Every = Every::new();
        if let Some(also) = CANNOT_REWRITE.due() {
            warn!(
                broker = link.node_id,
                also_closed = also,
                "cannot rewrite {} v{} response, closing the connection: {e:#}",
                crate::metrics::api_name(pending.api_key),
                pending.api_version
            );
        }
        // Logged above: the connection's end needs no line of its own.
        Ended::Broken("a response could not be rewritten".to_string())
    })?;
    pending.deliver(Ok(payload));
    Ok(())
}

/// Logs and counts the end of a connection that still owed `unanswered` replies.
fn report_end(ctx: &dyn Context, link: &Link, unanswered: &VecDeque<InFlight>, ended: Ended) {
    let (metrics, node_id) = (&link.metrics, link.node_id);
    for w in unanswered {
        if let Some(score) = link.is_scored(w.pending.api_key) {
            score.abandoned(w.bytes);
        }
    }
    let in_flight = unanswered.len();
    let why = match ended {
        Ended::TimedOut { api_key, waited } => {
            // The broker's fault whoever still waits: always reported.
            metrics.timeouts.increment(1);
            metrics.disconnects.increment(1);
            if node_id >= 0 {
                ctx.scores().unreachable(node_id, Instant::now());
            }
            static TIMED_OUT: Every = Every::new();
            if let Some(also) = TIMED_OUT.due() {
                warn!(
                    broker = node_id,
                    api = crate::metrics::api_name(api_key),
                    waited_ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
                    in_flight,
                    also_closed = also,
                    "closing upstream connection: no answer within upstream.request_timeout_ms"
                );
            }
            return;
        }
        Ended::Violated(why) => {
            metrics.disconnects.increment(1);
            static VIOLATED: Every = Every::new();
            if let Some(also) = VIOLATED.due() {
                warn!(
                    broker = node_id,
                    in_flight,
                    also_closed = also,
                    "closing upstream connection: the broker broke the protocol: {why}"
                );
            }
            return;
        }
        Ended::Broken(why) => why,
    };
    if unanswered.is_empty() || link.client_left.load(Ordering::Relaxed) {
        debug!(
            broker = node_id,
            in_flight, "upstream connection ended: {why}"
        );
    } else {
        metrics.disconnects.increment(1);
        if node_id >= 0 {
            ctx.scores().unreachable(node_id, Instant::now());
        }
        // Perhaps the broker is gone and its partitions have new leaders.
        ctx.cluster().stale();
        static ENDED: Every = Every::new();
        if let Some(also) = ENDED.due() {
            warn!(
                broker = node_id,
                in_flight,
                also_ended = also,
                "upstream connection ended with requests in flight: {why}"
            );
        }
    }
}

/// The requests a connection's reader expects answers to, oldest first, and the one timer
/// that matters: the oldest one's deadline.
struct Expected {
    rx: mpsc::UnboundedReceiver<InFlight>,
    /// False once the writer has gone: nothing more will be queued.
    rx_open: bool,
    waiting: VecDeque<InFlight>,
    /// When the last answer came (or the connection opened): the broker could start on the
    /// oldest request no earlier.
    last_answer: TokioInstant,
    timer: Pin<Box<Sleep>>,
    /// The deadline `timer` is set to; None: disarmed.
    armed: Option<TokioInstant>,
}

impl Expected {
    fn new(rx: mpsc::UnboundedReceiver<InFlight>) -> Self {
        let now = TokioInstant::now();
        Expected {
            rx,
            rx_open: true,
            waiting: VecDeque::new(),
            last_answer: now,
            timer: Box::pin(tokio::time::sleep_until(now)),
            armed: None,
        }
    }

    fn push(&mut self, in_flight: InFlight) {
        self.waiting.push_back(in_flight);
        if self.waiting.len() == 1 {
            self.rearm();
        }
    }

    /// Takes the oldest request, whose answer has just come, with the previous answer on this
    /// connection (or its opening): a broker works on one request per connection at a time,
    /// so it started on this one no earlier.
    fn answered(&mut self) -> Option<(InFlight, TokioInstant)> {
        // The writer queues a request before its bytes leave: whatever is answered is queued.
        while let Ok(in_flight) = self.rx.try_recv() {
            self.waiting.push_back(in_flight);
        }
        let oldest = self.waiting.pop_front()?;
        let previous = std::mem::replace(&mut self.last_answer, TokioInstant::now());
        self.rearm();
        Some((oldest, previous))
    }

    /// Sets the timer to the oldest request's deadline (or disarms it).
    fn rearm(&mut self) {
        let deadline = self.waiting.front().and_then(|oldest| {
            let sent = TokioInstant::from_std(oldest.sent);
            deadline::head_deadline(sent, self.last_answer, oldest.limit)
        });
        if deadline != self.armed {
            if let Some(at) = deadline {
                self.timer.as_mut().reset(at);
            }
            self.armed = deadline;
        }
    }

    /// The timer went off: the oldest request's deadline has passed.
    fn overdue(&mut self) -> Option<Ended> {
        let Some(oldest) = self.waiting.front() else {
            self.rearm(); // nothing to time out (cannot happen: the timer follows the queue)
            return None;
        };
        let started = TokioInstant::from_std(oldest.sent).max(self.last_answer);
        Some(Ended::TimedOut {
            api_key: oldest.pending.api_key,
            waited: started.elapsed(),
        })
    }

    /// Everything still expected once the reader stops: the queue is closed first, so nothing
    /// the writer queues later is left behind.
    fn close(mut self) -> VecDeque<InFlight> {
        self.rx.close();
        while let Ok(in_flight) = self.rx.try_recv() {
            self.waiting.push_back(in_flight);
        }
        self.waiting
    }
}

/// Turns a broker response into what the client receives: as-is, or with addresses rewritten.
fn answer(
    ctx: &dyn Context,
    link: &Link,
    pending: &PendingReply,
    frame: Bytes,
) -> anyhow::Result<Bytes> {
    if pending.api_key == ApiKey::InitProducerId as i16 {
        observe_producer_id(ctx, link, pending.api_version, &frame);
    }
    if !needs_rewrite(pending.api_key, pending.api_version) {
        return Ok(frame);
    }
    let Ok(api) = kafka_protocol::messages::ApiKey::try_from(pending.api_key) else {
        return Ok(frame);
    };
    let (header, body) = split_response(&frame, api.response_header_version(pending.api_version))?;
    // Most Produce and Fetch answers name no broker: forwarded as they came, not decoded.
    if carries_node_endpoints(api, pending.api_version, &body) == Some(false) {
        return Ok(frame);
    }
    let mut seen = Observed::default();
    let rewritten = rewrite_response(
        pending.api_key,
        pending.api_version,
        &body,
        ctx.addresses(),
        &mut seen,
    )?;
    ctx.cluster().observe(&seen.brokers);
    ctx.cluster().observe_topics(seen.topics);
    Ok(match rewritten {
        None => frame,
        Some(body) => {
            let mut out = bytes::BytesMut::with_capacity(header.len() + body.len());
            out.extend_from_slice(&header);
            out.extend_from_slice(&body);
            out.freeze()
        }
    })
}

/// A producer id handed out through kroute: kroute may own its numbering (see
/// [`crate::route::producers`]).
fn observe_producer_id(ctx: &dyn Context, link: &Link, version: i16, frame: &Bytes) {
    if !ctx.config().routing.routes_idempotent() {
        return;
    }
    // An authenticated client's producer is owned only where kroute knows its principal: its
    // batches then go out on that principal's own connections.
    if !link.principal_known.load(Ordering::Relaxed)
        && link.client_authenticated.load(Ordering::Relaxed)
    {
        return;
    }
    let header_version = ApiKey::InitProducerId.response_header_version(version);
    let Ok((_, mut body)) = split_response(frame, header_version) else {
        return;
    };
    if let Ok(r) = InitProducerIdResponse::decode(&mut body, version)
        && r.error_code == 0
        && r.producer_id.0 >= 0
    {
        ctx.own_producer(r.producer_id.0, Instant::now());
    }
}

#[cfg(test)]
mod tests;
