//! One client connection, from accept to close.
//!
//! Requests are read ([`super::intake`], within the connection's [`super::limits`]) and
//! forwarded as they arrive, many in flight. For each request that expects an answer, a reply
//! slot joins a queue in request order ([`super::replies`]); the writer sends replies from the
//! front of that queue as they complete, so the client sees answers in the order it asked even
//! when later parts finish first. A malformed frame ends only this connection, with one log
//! line and a metric.
//!
//! At shutdown ([`crate::shutdown::Shutdown`]) the reader stops taking requests, the writer
//! writes every answer still owed and then closes the connection, between two answers; what the
//! client sent meanwhile is read and dropped until it closes too (closing with unread bytes
//! would reset the connection under answers it has not read yet). The broker connections stay
//! open until the last answer is in.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::sync::oneshot;
use tracing::{debug, warn};

use super::Context;
use super::authenticated::ClientAuth;
use super::intake::Intake;
use super::limits::{Admitted, Timeout};
use super::replies::{Pending, Slot, Slots, queue, write_replies};
use crate::lag::observe::commit_observer;
use crate::log_every::Every;
use crate::metrics::Metrics;
use crate::protocol::frame::FrameError;
use crate::protocol::header::{Malformed, RequestHead};
use crate::route::{self, Plan, Split, plan};
use crate::security::passthrough::{ObserveError, UnsupportedV0};
use crate::security::permit::WrittenTopics;
use crate::security::principal::Principal;
use crate::security::{Identity, Permit, originate};
use crate::shutdown::Shutdown;
use crate::upstream::{AnswerHook, Outbound, PendingReply, Upstream, UpstreamGone};

/// Which kroute listener a client connected to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The bootstrap address: any broker will do.
    Bootstrap,
    /// The address that stands for this node id.
    Broker(i32),
}

/// The upstream connections of one client connection: its own broker's, plus those opened
/// on demand to other brokers for the parts of split requests.
struct Upstreams<'a> {
    ctx: &'a Arc<dyn Context>,
    home: Upstream,
    others: HashMap<i32, Upstream>,
}

impl Upstreams<'_> {
    /// Sends one part to `node_id`, connecting first if needed. Failure to reach the broker is
    /// not fatal for the client connection: the part's reply (if any) becomes an error. A part
    /// of a client authenticated as `principal` goes over one of that principal's own
    /// connections, never one of kroute's.
    async fn send_part(&mut self, node_id: i32, out: Outbound, principal: Option<&Principal>) {
        if node_id == self.home.node_id {
            let _ = self.home.send(out).await;
            return;
        }
        if let Some(principal) = principal {
            let connections = self.ctx.client_connections();
            // None: its connection ended since the plan; dropping `out` fails the part.
            if let Some(injector) = connections.any(principal, node_id)
                && injector.send(out).await.is_ok()
            {
                self.ctx.metrics().injected.increment(1);
            }
            return;
        }
        // A side connection the broker has closed (idle timeout, restart) is replaced first.
        if self.others.get(&node_id).is_some_and(|u| !u.is_open()) {
            self.others.remove(&node_id);
        }
        if !self.others.contains_key(&node_id) {
            let Some(addr) = self.ctx.cluster().address(node_id) else {
                return;
            };
            match Upstream::connect(self.ctx.clone(), node_id, &addr, Identity::Kroute).await {
                Ok(u) => {
                    self.others.insert(node_id, u);
                }
                Err(e) => {
                    // Keep routed batches away from it for a while; this part fails retriably.
                    self.ctx.scores().unreachable(node_id, Instant::now());
                    debug!(
                        broker = node_id,
                        "cannot open a connection for a routed part: {e}"
                    );
                    return;
                }
            }
        }
        if let Some(u) = self.others.get(&node_id)
            && u.send(out).await.is_err()
        {
            self.others.remove(&node_id); // reconnect next time
        }
    }
}

/// How long a drained connection waits for its client to close after the last answer.
const LINGER: Duration = Duration::from_secs(2);

/// Why the reader stopped without an error.
enum ReadEnd {
    /// The client closed the connection.
    Closed,
    /// Shutdown began: no more requests are taken.
    Draining,
}

/// Why kroute closed a client connection.
#[derive(Debug, thiserror::Error)]
pub(super) enum ClientError {
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error(transparent)]
    Header(#[from] Malformed),
    #[error(transparent)]
    Upstream(#[from] UpstreamGone),
    #[error(transparent)]
    Sasl(#[from] UnsupportedV0),
    #[error("the drain timeout passed with answers still owed")]
    Cut,
    #[error(transparent)]
    Timeout(#[from] Timeout),
}

/// Serves one client connection until either side closes it, or shutdown closes it. `conn`:
/// what the connection may hold ([`super::limits`]); dropping it gives the connection back.
pub async fn serve<S>(stream: S, target: Target, ctx: Arc<dyn Context>, conn: Admitted)
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let peer = conn.peer();
    ctx.metrics().connections_accepted.increment(1);
    let mut session = ctx.shutdown().session();
    if ctx.shutdown().is_draining() {
        return;
    }

    let upstream = match connect_upstream(&ctx, target).await {
        Ok(u) => u,
        Err(why) => {
            ctx.metrics().upstream_unavailable.increment(1);
            // A client retries at once, many times a second: one line per period.
            static NO_UPSTREAM: Every = Every::new();
            if let Some(also) = NO_UPSTREAM.due() {
                warn!(%peer, ?target, also_closed = also,
                    "closing client connection: no upstream broker: {why}");
            }
            return;
        }
    };
    let (mut rd, wr) = tokio::io::split(stream);
    let (slots, replies) = queue(&conn, ctx.config().limits.max_in_flight_per_connection);

    // Owned here, not by the reader: at shutdown the answers still come in after it stopped.
    let mut upstreams = Upstreams {
        ctx: &ctx,
        home: upstream,
        others: HashMap::new(),
    };
    let writer = write_replies(wr, replies, ctx.metrics(), ctx.shutdown());
    tokio::pin!(writer);
    let intake = Intake::new(&mut rd, ctx.config().limits.max_frame_bytes, &conn);
    // Biased, the reader first: the writer takes the reply slots the reader queued in the same
    // poll, and is not woken for them (`Replies::take_queued`).
    tokio::select! {
        biased;
        read = read_requests(intake, &mut upstreams, slots, &ctx) => match read {
            Ok(ReadEnd::Closed) => debug!(%peer, "client closed the connection"),
            Ok(ReadEnd::Draining) => match writer.await {
                Ok(()) => {
                    session.answered();
                    linger(&mut rd, ctx.shutdown()).await;
                    debug!(%peer, "connection drained at shutdown");
                }
                Err(ClientError::Cut) => debug!(%peer, "connection cut at the drain timeout"),
                Err(e) => debug!(%peer, "client connection ended while draining: {e}"),
            },
            Err(ClientError::Upstream(_)) => debug!(%peer, "upstream went away"),
            Err(ClientError::Timeout(_)) => {} // counted and logged by the limits
            // A reset or other socket error is the client's business, not a protocol problem.
            Err(ClientError::Frame(FrameError::Io(e))) => debug!(%peer, "client connection failed: {e}"),
            Err(e) => {
                count_protocol_error(ctx.metrics(), &e);
                static BAD_CLIENT: Every = Every::new();
                if let Some(also) = BAD_CLIENT.due() {
                    warn!(%peer, ?target, also_closed = also, "closing client connection: {e}");
                }
            }
        },
        written = &mut writer => {
            if let Err(e) = written {
                debug!(%peer, "client connection ended while replying: {e}");
            }
        }
    }
}

/// After the last answer of a drained connection: reads and drops whatever the client still
/// sends until it closes (it has seen the end of the connection), for [`LINGER`] at most and
/// never past the drain timeout.
async fn linger(rd: &mut (impl AsyncRead + Unpin), shutdown: &Shutdown) {
    let mut buf = vec![0u8; 16 * 1024];
    let until_closed = async {
        while let Ok(n) = rd.read(&mut buf).await
            && n > 0
        {}
    };
    tokio::select! {
        _ = until_closed => {}
        _ = tokio::time::sleep(LINGER) => {}
        _ = shutdown.cut() => {}
    }
}

fn count_protocol_error(metrics: &Metrics, e: &ClientError) {
    let errors = &metrics.protocol_errors;
    match e {
        ClientError::Frame(FrameError::NegativeSize(_)) => errors.negative_size.increment(1),
        ClientError::Frame(FrameError::TooLarge { .. }) => errors.oversize.increment(1),
        ClientError::Frame(FrameError::Truncated(_)) => errors.truncated.increment(1),
        ClientError::Header(_) => errors.bad_header.increment(1),
        ClientError::Sasl(_) => errors.unsupported_sasl.increment(1),
        ClientError::Frame(FrameError::Io(_))
        | ClientError::Upstream(_)
        | ClientError::Cut
        | ClientError::Timeout(_) => {}
    }
}

/// Opens the upstream connection this client's requests go to.
async fn connect_upstream(ctx: &Arc<dyn Context>, target: Target) -> Result<Upstream, String> {
    match target {
        Target::Broker(node_id) => {
            let addr = ctx
                .cluster()
                .address(node_id)
                .ok_or_else(|| format!("broker {node_id} is not in the cluster"))?;
            Upstream::connect(ctx.clone(), node_id, &addr, Identity::Client)
                .await
                .map_err(|e| format!("broker {node_id} at {addr}: {e}"))
        }
        Target::Bootstrap => {
            let mut errors = Vec::new();
            for addr in ctx
                .cluster()
                .bootstrap_candidates(&ctx.config().upstream.bootstrap_servers)
            {
                let node_id = ctx.cluster().node_id_of(&addr).unwrap_or(-1);
                match Upstream::connect(ctx.clone(), node_id, &addr, Identity::Client).await {
                    Ok(u) => return Ok(u),
                    Err(e) => errors.push(format!("{addr}: {e}")),
                }
            }
            Err(errors.join("; "))
        }
    }
}

/// Reads requests and sends them on, queueing a reply slot for each, until the client closes
/// or shutdown begins (checked before every request, so none is taken after).
async fn read_requests(
    mut intake: Intake<'_, impl AsyncRead + Unpin>,
    upstreams: &mut Upstreams<'_>,
    slots: Slots<'_>,
    ctx: &Arc<dyn Context>,
) -> Result<ReadEnd, ClientError> {
    let home = upstreams.home.node_id;
    // The connection's context as routing sees it (one pointer per connection, not per request).
    let route_ctx: Arc<dyn route::Context> = ctx.clone();
    // What the client's own SASL exchange allows its batches ([`ClientAuth`]).
    let mut auth = ClientAuth::default();
    let limits = slots.limits();
    loop {
        let frame = tokio::select! {
            biased;
            _ = ctx.shutdown().draining() => return Ok(ReadEnd::Draining),
            frame = intake.next() => match frame? {
                Some(frame) => frame,
                None => return Ok(ReadEnd::Closed),
            },
        };
        let request_bytes = frame.len();
        if auth.take_raw_token() {
            forward_raw_token(&upstreams.home, &slots, frame).await?;
            continue;
        }
        let head = RequestHead::parse(&frame)?;
        let api = ctx.metrics().api(head.api_key);
        api.requests.increment(1);
        api.request_bytes.increment(4 + frame.len() as u64);
        let pending =
            |reply| PendingReply::new(head.api_key, head.api_version, head.correlation_id, reply);
        // Every reply slot is queued before its request leaves, so replies keep request order.
        let sasl_request = matches!(
            head.api(),
            Some(ApiKey::SaslHandshake | ApiKey::SaslAuthenticate)
        );
        if !sasl_request {
            auth.other_request();
        } else if let Some(payload) =
            client_sasl(ctx.as_ref(), &mut auth, &upstreams.home, &head, &frame)?
        {
            slots
                .send(answered(head.api_key, request_bytes, payload))
                .await?;
            continue;
        }
        let permit = auth.permit().clone();
        match plan(&route_ctx, home, &permit, &head, &frame)? {
            Plan::ForwardNoReply => {
                let out = Outbound::new(frame, None);
                upstreams.home.send(out).await?;
            }
            Plan::Answer(payload) => {
                slots
                    .send(answered(head.api_key, request_bytes, payload))
                    .await?;
            }
            Plan::Forward => {
                let (tx, reply) = oneshot::channel();
                let slot = Slot {
                    api_key: head.api_key,
                    request_bytes,
                    reserved: limits.reservation(head.api_key, head.api_version, &frame),
                    reply: Pending::Waiting(reply),
                };
                slots.send(slot).await?;
                let mut reply = pending(tx);
                if sasl_request && let Some(hook) = auth.take_answer_hook() {
                    reply = reply.with_hook(hook);
                }
                if let Permit::Written(written) = &permit
                    && head.api() == Some(ApiKey::Produce)
                {
                    reply = reply.with_hook(learn_written_topics(written, head.api_version));
                }
                if head.api() == Some(ApiKey::OffsetCommit)
                    && let Some(observe) = commit_observer(
                        ctx.lag_store(),
                        &ctx.metrics().lag,
                        head.api_version,
                        &frame,
                    )
                {
                    reply = reply.with_hook(Box::new(move |answer| {
                        if let Ok(accepted) = &answer {
                            observe(accepted);
                        }
                        answer
                    }));
                }
                let out = Outbound::new(frame, Some(reply));
                upstreams.home.send(out).await?;
            }
            Plan::Split(Split { parts, merge }) => {
                let mut senders = Vec::with_capacity(parts.len());
                let mut parts = parts;
                if let Some(merge) = merge {
                    // Parts already queued elsewhere bring their reply receiver along.
                    let (txs, replies): (Vec<_>, Vec<_>) = parts
                        .iter_mut()
                        .map(|p| match p.sent.take() {
                            Some(reply) => (None, reply),
                            None => {
                                let (tx, rx) = oneshot::channel();
                                (Some(tx), rx)
                            }
                        })
                        .unzip();
                    let slot = Slot {
                        api_key: head.api_key,
                        request_bytes,
                        reserved: 0,
                        reply: Pending::Merging { replies, merge },
                    };
                    slots.send(slot).await?;
                    senders = txs;
                }
                for (i, part) in parts.into_iter().enumerate() {
                    if part.sent.is_some() || senders.get(i).is_some_and(Option::is_none) {
                        continue; // already on its way
                    }
                    let reply = senders.get_mut(i).and_then(Option::take);
                    let out = Outbound::new(part.frame, reply.map(pending));
                    let principal = permit.principal().map(|p| &**p);
                    upstreams.send_part(part.node_id, out, principal).await;
                }
            }
        }
    }
}

/// A SASL request of the client's: refused by kroute itself in originate mode (the answer is
/// returned), else noted ([`ClientSasl`]) and left to be forwarded.
fn client_sasl(
    ctx: &dyn Context,
    auth: &mut ClientAuth,
    home: &Upstream,
    head: &RequestHead,
    frame: &Bytes,
) -> Result<Option<Bytes>, ClientError> {
    if ctx.security().originates() {
        let refusal = originate::refusal(head);
        if refusal.is_some() && head.api() == Some(ApiKey::SaslHandshake) {
            ctx.security().metrics.client_sasl_refused();
            warn!(
                broker = home.node_id,
                "a client tried SASL, but kroute authenticates upstream itself (upstream.sasl.mode = \"originate\"): refused"
            );
        }
        return Ok(refusal);
    }
    let kroute_has_credentials = ctx.security().routes_authenticated_clients();
    let connections = ctx.client_connections();
    match auth.observe(home, connections, (head, frame), kroute_has_credentials) {
        Ok(()) => {}
        Err(ObserveError::Malformed(e)) => return Err(e.into()),
        Err(ObserveError::Unsupported(e)) => return Err(e.into()),
    }
    Ok(None)
}

/// Forwards a raw SASL token (after a SaslHandshake v0); the broker's raw answer comes back
/// in its place in the reply order.
async fn forward_raw_token(
    home: &Upstream,
    slots: &Slots<'_>,
    frame: Bytes,
) -> Result<(), ClientError> {
    let (tx, reply) = oneshot::channel();
    let api_key = ApiKey::SaslAuthenticate as i16;
    let slot = Slot {
        api_key,
        request_bytes: frame.len(),
        reserved: 0,
        reply: Pending::Waiting(reply),
    };
    slots.send(slot).await?;
    let pending = PendingReply::new(api_key, 0, 0, tx).raw_token();
    let out = Outbound::new(frame, Some(pending));
    home.send(out).await?;
    Ok(())
}

/// Watches the answer to a Produce request a SASL client sent over its own connection, for the
/// topics it may write ([`crate::security::permit`]).
fn learn_written_topics(written: &Arc<WrittenTopics>, api_version: i16) -> AnswerHook {
    let written = written.clone();
    Box::new(move |reply| {
        if let Ok(answer) = &reply {
            written.learn(api_version, answer);
        }
        reply
    })
}

/// A slot answered by kroute itself.
fn answered(api_key: i16, request_bytes: usize, payload: Bytes) -> Slot {
    Slot {
        api_key,
        request_bytes,
        reserved: 0,
        reply: Pending::Answered(Ok(payload)),
    }
}
