//! One client connection, from accept to close.
//!
//! Requests are read and forwarded as they arrive, many in flight. For each request that expects
//! an answer, a reply slot joins a queue in request order; the writer sends replies from the
//! front of that queue as they complete, so the client sees answers in the order it asked even
//! when later parts finish first. A malformed frame ends only this connection, with one log
//! line and a metric.
//!
//! At shutdown ([`super::Shutdown`]) the reader stops taking requests, the writer writes every
//! answer still owed and then closes the connection, between two answers; what the client sent
//! meanwhile is read and dropped until it closes too (closing with unread bytes would reset the
//! connection under answers it has not read yet). The broker connections stay open until the
//! last answer is in.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use kafka_protocol::messages::ApiKey;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::oneshot::error::TryRecvError;
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::FramedRead;
use tracing::{debug, warn};

use crate::lag::observe::commit_hook;
use crate::protocol::frame::{FrameCodec, FrameError, size_prefix};
use crate::protocol::header::{Malformed, RequestHead};
use crate::proxy::Proxy;
use crate::route::{Merge, Plan, Split, plan};
use crate::security::passthrough::{ClientSasl, ObserveError, UnsupportedV0};
use crate::security::permit::WrittenTopics;
use crate::security::{Identity, Permit, originate};
use crate::upstream::{AnswerHook, Outbound, PendingReply, Reply, Upstream, UpstreamGone};

/// Which kroute listener a client connected to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The bootstrap address: any broker will do.
    Bootstrap,
    /// The address that stands for this node id.
    Broker(i32),
}

/// A reply in request order: already known, still coming from upstream, or to be merged from
/// the answers of several brokers.
enum Slot {
    Ready {
        api_key: i16,
        payload: Bytes,
    },
    Waiting {
        api_key: i16,
        reply: oneshot::Receiver<Reply>,
    },
    Merging {
        api_key: i16,
        replies: Vec<oneshot::Receiver<Reply>>,
        merge: Box<dyn Merge>,
    },
}

/// The upstream connections of one client connection: its own broker's, plus those opened
/// on demand to other brokers for the parts of split requests.
struct Upstreams<'a> {
    proxy: &'a Arc<Proxy>,
    home: Upstream,
    others: HashMap<i32, Upstream>,
}

impl Upstreams<'_> {
    /// Sends one part to `node_id`, connecting first if needed. Failure to reach the broker is
    /// not fatal for the client connection: the part's reply (if any) becomes an error.
    async fn send_part(&mut self, node_id: i32, out: Outbound) {
        if node_id == self.home.node_id {
            let _ = self.home.send(out).await;
            return;
        }
        // A side connection the broker has closed (idle timeout, restart) is replaced first.
        if self.others.get(&node_id).is_some_and(|u| !u.is_open()) {
            self.others.remove(&node_id);
        }
        if !self.others.contains_key(&node_id) {
            let Some(addr) = self.proxy.cluster.address(node_id) else {
                return;
            };
            match Upstream::connect(self.proxy, node_id, &addr, Identity::Kroute).await {
                Ok(u) => {
                    self.others.insert(node_id, u);
                }
                Err(e) => {
                    // Keep routed batches away from it for a while; this part fails retriably.
                    self.proxy
                        .router
                        .scores
                        .unreachable(node_id, Instant::now());
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
enum ClientError {
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
}

/// Keeps the active-connections gauge honest however the session ends.
struct ActiveConnection<'a>(&'a Proxy);

impl Drop for ActiveConnection<'_> {
    fn drop(&mut self) {
        self.0.metrics.connections_active.decrement(1.0);
    }
}

/// Serves one client connection until either side closes it, or shutdown closes it.
pub async fn serve<S>(stream: S, peer: SocketAddr, target: Target, proxy: Arc<Proxy>)
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    proxy.metrics.connections_accepted.increment(1);
    proxy.metrics.connections_active.increment(1.0);
    let _active = ActiveConnection(&proxy);
    let mut session = proxy.shutdown.session();
    if proxy.shutdown.is_draining() {
        return;
    }

    let upstream = match connect_upstream(&proxy, target).await {
        Ok(u) => u,
        Err(why) => {
            proxy.metrics.upstream_unavailable.increment(1);
            warn!(%peer, ?target, "closing client connection: no upstream broker: {why}");
            return;
        }
    };
    let (mut rd, wr) = tokio::io::split(stream);
    let (slots_tx, slots_rx) = mpsc::channel(proxy.config.limits.max_in_flight_per_connection);

    // Owned here, not by the reader: at shutdown the answers still come in after it stopped.
    let mut upstreams = Upstreams {
        proxy: &proxy,
        home: upstream,
        others: HashMap::new(),
    };
    let writer = write_replies(wr, slots_rx, &proxy);
    tokio::pin!(writer);
    tokio::select! {
        read = read_requests(&mut rd, &mut upstreams, slots_tx, &proxy) => match read {
            Ok(ReadEnd::Closed) => debug!(%peer, "client closed the connection"),
            Ok(ReadEnd::Draining) => match writer.await {
                Ok(()) => {
                    session.answered();
                    linger(&mut rd, &proxy).await;
                    debug!(%peer, "connection drained at shutdown");
                }
                Err(ClientError::Cut) => debug!(%peer, "connection cut at the drain timeout"),
                Err(e) => debug!(%peer, "client connection ended while draining: {e}"),
            },
            Err(ClientError::Upstream(_)) => debug!(%peer, "upstream went away"),
            // A reset or other socket error is the client's business, not a protocol problem.
            Err(ClientError::Frame(FrameError::Io(e))) => debug!(%peer, "client connection failed: {e}"),
            Err(e) => {
                count_protocol_error(&proxy, &e);
                warn!(%peer, ?target, "closing client connection: {e}");
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
async fn linger(rd: &mut (impl AsyncRead + Unpin), proxy: &Proxy) {
    let mut buf = vec![0u8; 16 * 1024];
    let until_closed = async {
        while let Ok(n) = rd.read(&mut buf).await
            && n > 0
        {}
    };
    tokio::select! {
        _ = until_closed => {}
        _ = tokio::time::sleep(LINGER) => {}
        _ = proxy.shutdown.cut() => {}
    }
}

fn count_protocol_error(proxy: &Proxy, e: &ClientError) {
    let errors = &proxy.metrics.protocol_errors;
    match e {
        ClientError::Frame(FrameError::NegativeSize(_)) => errors.negative_size.increment(1),
        ClientError::Frame(FrameError::TooLarge { .. }) => errors.oversize.increment(1),
        ClientError::Frame(FrameError::Truncated(_)) => errors.truncated.increment(1),
        ClientError::Header(_) => errors.bad_header.increment(1),
        ClientError::Sasl(_) => errors.unsupported_sasl.increment(1),
        ClientError::Frame(FrameError::Io(_)) | ClientError::Upstream(_) | ClientError::Cut => {}
    }
}

/// Opens the upstream connection this client's requests go to.
async fn connect_upstream(proxy: &Arc<Proxy>, target: Target) -> Result<Upstream, String> {
    match target {
        Target::Broker(node_id) => {
            let addr = proxy
                .cluster
                .address(node_id)
                .ok_or_else(|| format!("broker {node_id} is not in the cluster"))?;
            Upstream::connect(proxy, node_id, &addr, Identity::Client)
                .await
                .map_err(|e| format!("broker {node_id} at {addr}: {e}"))
        }
        Target::Bootstrap => {
            let mut errors = Vec::new();
            for addr in proxy
                .cluster
                .bootstrap_candidates(&proxy.config.upstream.bootstrap_servers)
            {
                let node_id = proxy.cluster.node_id_of(&addr).unwrap_or(-1);
                match Upstream::connect(proxy, node_id, &addr, Identity::Client).await {
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
    rd: impl AsyncRead + Unpin,
    upstreams: &mut Upstreams<'_>,
    slots: mpsc::Sender<Slot>,
    proxy: &Arc<Proxy>,
) -> Result<ReadEnd, ClientError> {
    let home = upstreams.home.node_id;
    // Side connections carry kroute's identity, not the client's: once the client
    // authenticates, its batches move only where it may write itself.
    let mut sasl = ClientSasl::default();
    let codec = FrameCodec::new(proxy.config.limits.max_frame_bytes);
    let mut frames = FramedRead::with_capacity(rd, codec, 64 * 1024);
    loop {
        let frame = tokio::select! {
            biased;
            _ = proxy.shutdown.draining() => return Ok(ReadEnd::Draining),
            frame = frames.next() => match frame {
                Some(frame) => frame?,
                None => return Ok(ReadEnd::Closed),
            },
        };
        if sasl.take_raw_token() {
            forward_raw_token(&upstreams.home, &slots, frame).await?;
            continue;
        }
        let head = RequestHead::parse(&frame)?;
        let api = proxy.metrics.api(head.api_key);
        api.requests.increment(1);
        api.request_bytes.increment(4 + frame.len() as u64);
        let pending =
            |reply| PendingReply::new(head.api_key, head.api_version, head.correlation_id, reply);
        // Every reply slot is queued before its request leaves, so replies keep request order.
        if matches!(
            head.api(),
            Some(ApiKey::SaslHandshake | ApiKey::SaslAuthenticate)
        ) && let Some(payload) = client_sasl(proxy, &mut sasl, &upstreams.home, &head, &frame)?
        {
            let slot = Slot::Ready {
                api_key: head.api_key,
                payload,
            };
            slots.send(slot).await.map_err(|_| UpstreamGone)?;
            continue;
        }
        let permit = sasl.permit();
        match plan(proxy, home, permit, &head, &frame)? {
            Plan::ForwardNoReply => {
                let out = Outbound {
                    frame,
                    pending: None,
                };
                upstreams.home.send(out).await?;
            }
            Plan::Answer(payload) => {
                let api_key = head.api_key;
                let slot = Slot::Ready { api_key, payload };
                slots.send(slot).await.map_err(|_| UpstreamGone)?;
            }
            Plan::Forward => {
                let (tx, reply) = oneshot::channel();
                let api_key = head.api_key;
                slots
                    .send(Slot::Waiting { api_key, reply })
                    .await
                    .map_err(|_| UpstreamGone)?;
                let mut reply = pending(tx);
                if let Permit::Written(written) = permit
                    && head.api() == Some(ApiKey::Produce)
                {
                    reply = reply.with_hook(learn_written_topics(written, head.api_version));
                }
                if head.api() == Some(ApiKey::OffsetCommit)
                    && let Some(hook) = commit_hook(proxy, head.api_version, &frame)
                {
                    reply = reply.with_hook(hook);
                }
                let out = Outbound {
                    frame,
                    pending: Some(reply),
                };
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
                    let api_key = head.api_key;
                    let slot = Slot::Merging {
                        api_key,
                        replies,
                        merge,
                    };
                    slots.send(slot).await.map_err(|_| UpstreamGone)?;
                    senders = txs;
                }
                for (i, part) in parts.into_iter().enumerate() {
                    if part.sent.is_some() || senders.get(i).is_some_and(Option::is_none) {
                        continue; // already on its way
                    }
                    let reply = senders.get_mut(i).and_then(Option::take);
                    let out = Outbound {
                        frame: part.frame,
                        pending: reply.map(pending),
                    };
                    upstreams.send_part(part.node_id, out).await;
                }
            }
        }
    }
}

/// A SASL request of the client's: refused by kroute itself in originate mode (the answer is
/// returned), else noted ([`ClientSasl`]) and left to be forwarded.
fn client_sasl(
    proxy: &Proxy,
    sasl: &mut ClientSasl,
    home: &Upstream,
    head: &RequestHead,
    frame: &Bytes,
) -> Result<Option<Bytes>, ClientError> {
    if proxy.security.originates() {
        let refusal = originate::refusal(head);
        if refusal.is_some() && head.api() == Some(ApiKey::SaslHandshake) {
            proxy.security.metrics.client_sasl_refused();
            warn!(
                broker = home.node_id,
                "a client tried SASL, but kroute authenticates upstream itself (upstream.sasl.mode = \"originate\"): refused"
            );
        }
        return Ok(refusal);
    }
    let kroute_has_credentials = proxy.security.routes_authenticated_clients();
    match sasl.observe(head, frame, kroute_has_credentials) {
        Ok(true) => home.client_authenticated(),
        Ok(false) => {}
        Err(ObserveError::Malformed(e)) => return Err(e.into()),
        Err(ObserveError::Unsupported(e)) => return Err(e.into()),
    }
    Ok(None)
}

/// Forwards a raw SASL token (after a SaslHandshake v0); the broker's raw answer comes back
/// in its place in the reply order.
async fn forward_raw_token(
    home: &Upstream,
    slots: &mpsc::Sender<Slot>,
    frame: Bytes,
) -> Result<(), ClientError> {
    let (tx, reply) = oneshot::channel();
    let api_key = ApiKey::SaslAuthenticate as i16;
    slots
        .send(Slot::Waiting { api_key, reply })
        .await
        .map_err(|_| UpstreamGone)?;
    let pending = PendingReply::new(api_key, 0, 0, tx).raw_token();
    let out = Outbound {
        frame,
        pending: Some(pending),
    };
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

/// Writes the replies in request order, each as soon as it is complete, until the reader has
/// stopped and every reply is written; then closes the connection (for writing). At the drain
/// timeout it stops waiting for answers ([`ClientError::Cut`]), having written whole frames
/// only.
async fn write_replies(
    wr: impl AsyncWrite + Unpin,
    mut slots: mpsc::Receiver<Slot>,
    proxy: &Proxy,
) -> Result<(), ClientError> {
    let mut out = BufWriter::with_capacity(64 * 1024, wr);
    while let Some(slot) = slots.recv().await {
        let (api_key, payload) = match slot {
            Slot::Ready { api_key, payload } => (api_key, payload),
            Slot::Waiting { api_key, mut reply } => {
                let answer = match reply.try_recv() {
                    Ok(answer) => answer,
                    Err(TryRecvError::Closed) => Err(UpstreamGone),
                    Err(TryRecvError::Empty) => {
                        // Nothing ready to add: let the client have what is buffered meanwhile.
                        out.flush().await.map_err(FrameError::Io)?;
                        tokio::select! {
                            answer = &mut reply => answer.unwrap_or(Err(UpstreamGone)),
                            _ = proxy.shutdown.cut() => return Err(ClientError::Cut),
                        }
                    }
                };
                if answer.is_err() {
                    // Replies already written are the client's: deliver them before closing.
                    let _ = out.flush().await;
                }
                (api_key, answer?)
            }
            Slot::Merging {
                api_key,
                replies,
                merge,
            } => {
                out.flush().await.map_err(FrameError::Io)?;
                let mut answers = Vec::with_capacity(replies.len());
                for mut reply in replies {
                    answers.push(tokio::select! {
                        answer = &mut reply => answer.unwrap_or(Err(UpstreamGone)),
                        _ = proxy.shutdown.cut() => return Err(ClientError::Cut),
                    });
                }
                (api_key, merge.merge(answers))
            }
        };
        proxy
            .metrics
            .api(api_key)
            .response_bytes
            .increment(4 + payload.len() as u64);
        out.write_all(&size_prefix(payload.len()))
            .await
            .map_err(FrameError::Io)?;
        out.write_all(&payload).await.map_err(FrameError::Io)?;
        if slots.is_empty() {
            out.flush().await.map_err(FrameError::Io)?;
        }
    }
    // Flushes, then ends the stream (TLS close_notify, TCP FIN) after the last whole answer.
    out.shutdown().await.map_err(FrameError::Io)?;
    Ok(())
}
