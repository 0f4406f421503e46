//! Queueing renumbered batches on an owned producer's own connections.
//!
//! The last stage of the idempotent path, shared by the planner ([`super::sequenced`]) and by
//! the release of waiting batches ([`super::waiting`]). Requests are queued under the
//! producer's lock, in the order they were numbered, so each partition's batches reach the
//! broker in numbering order (rule 7 of docs/idempotent-routing.md). Every request carrying
//! renumbered batches gets a hook that records its answer ([`super::answers`]) on the way back.

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::produce_request::TopicProduceData;
use kafka_protocol::messages::{ApiKey, ProduceRequest, TopicName};
use tokio::sync::oneshot;

use super::answers::{Numbered, recorder};
use super::replies::{JoinedWaiter, Shape, answer_joined};
use super::{add_entry, encode_part};
use crate::route::Context;
use crate::route::producers::{LinkKey, OwnedProducer, ProducerLink, ProducerState};
use crate::route::sequence::BatchKey;
use crate::upstream::{Outbound, PendingReply, Reply};

/// Where the answer to a request of the producer goes.
pub(super) enum AnswerTo {
    /// To the part of one client request.
    Part(oneshot::Sender<Reply>),
    /// To the waiting batches that went out joined in it, each answered for itself.
    Joined(Vec<JoinedWaiter>),
}

/// One request for the producer's connection `link`, carrying `topic_data` in a request
/// shaped like the client's, answered to `to`.
pub(super) struct Request {
    pub link: LinkKey,
    pub topic_data: Vec<TopicProduceData>,
    /// The renumbered client batches it carries: its answer records their outcome.
    pub numbered: Vec<Numbered>,
    pub to: AnswerTo,
}

impl Request {
    /// A request carrying one batch alone: `records` of `topic` for partition `target` of
    /// broker `node`, standing for the client batches `numbered`.
    pub fn batch(
        (node, target): (i32, i32),
        (topic, records): (TopicName, Bytes),
        numbered: Vec<Numbered>,
        to: AnswerTo,
    ) -> Self {
        let mut topic_data = Vec::with_capacity(1);
        add_entry(&mut topic_data, &topic, target, Some(records));
        Request {
            link: LinkKey::new(node, target),
            topic_data,
            numbered,
            to,
        }
    }
}

/// The producer's connections, while its lock is held.
pub(super) struct Links<'a> {
    pub ctx: &'a Arc<dyn Context>,
    pub owner: &'a Arc<OwnedProducer>,
    /// Requests that could not be queued (full or closed connection, unknown broker). The
    /// caller drops them only once the producer's lock is released: dropping one records "no
    /// answer came" for its batches, under that lock, and its part fails retriably.
    pub unsent: &'a mut Vec<PendingReply>,
}

impl Links<'_> {
    /// Queues `request` on its connection (`state` is the producer's, locked); returns the
    /// frame.
    pub fn queue(&mut self, state: &mut ProducerState, shape: &Shape, request: Request) -> Bytes {
        let Request {
            link,
            topic_data,
            numbered,
            to,
        } = request;
        let body = ProduceRequest::default()
            .with_acks(shape.acks)
            .with_timeout_ms(shape.timeout_ms)
            .with_topic_data(topic_data);
        let frame = encode_part(&shape.header, &body, shape.version).unwrap_or_default();
        if tracing::enabled!(tracing::Level::TRACE) {
            for n in &numbered {
                tracing::trace!(key = ?n.key, node = link.node_id, n.target, n.seq, "sent");
            }
        }
        let pending = self.pending(shape, numbered, to);
        match self
            .ctx
            .cluster()
            .address(link.node_id)
            .filter(|_| !frame.is_empty())
        {
            Some(addr) => {
                let out = Outbound::new(frame.clone(), Some(pending));
                // No connection (of the client's principal) there now: the part fails
                // retriably, as on a full or closed connection.
                let principal = shape.principal.as_ref();
                let sent = match state.link(self.ctx, (link, principal), &addr) {
                    Some(link) => {
                        let injected = matches!(link, ProducerLink::Client(..));
                        let sent = link.try_send(out).map_err(|out| out.pending);
                        if injected && sent.is_ok() {
                            self.ctx.metrics().injected.increment(1);
                        }
                        sent
                    }
                    None => Err(out.pending),
                };
                if let Err(pending) = sent {
                    self.unsent.extend(pending);
                }
            }
            None => self.unsent.push(pending),
        }
        frame
    }

    /// The reply a request waits for: answered to `to`, after its `numbered` batches' outcome
    /// is recorded (and, for waiting batches sent joined, each of them answered).
    fn pending(&self, shape: &Shape, numbered: Vec<Numbered>, to: AnswerTo) -> PendingReply {
        let (reply, joined) = match to {
            AnswerTo::Part(reply) => (reply, None),
            // Each waiter is answered by the hook; nobody reads this reply.
            AnswerTo::Joined(waiters) => (oneshot::channel().0, Some(waiters)),
        };
        let pending = PendingReply::new(
            ApiKey::Produce as i16,
            shape.version,
            shape.correlation_id,
            reply,
        );
        if numbered.is_empty() {
            return pending;
        }
        let (ctx, owner) = (self.ctx.clone(), self.owner.clone());
        let mut hook = recorder(ctx, owner, shape.version, numbered);
        if let Some(waiters) = joined {
            let version = shape.version;
            hook = Box::new(move |answer| {
                let answer = hook(answer);
                answer_joined(&answer, version, waiters);
                answer
            });
        }
        pending.with_hook(hook)
    }
}

/// Counts a batch sent with kroute's numbers (and its move, if it moved).
pub(super) fn count_numbered(
    ctx: &dyn Context,
    topic: &str,
    home: i32,
    node: i32,
    key: &BatchKey,
    target: i32,
    bytes: usize,
) {
    ctx.metrics().sequencing.renumbered.increment(1);
    if target != key.partition {
        let count = key.records.max(0) as u32;
        ctx.metrics().routing.moved(topic, home, node, count, bytes);
    }
}

/// The part for connection `link` that does not name `partition` of `topic` yet (a Produce
/// request may name a partition only once: a retry resent to a partition the client also
/// names in this request goes in a second request on the same connection, behind the first).
pub(super) fn destination_without(
    destinations: &mut Vec<(LinkKey, Vec<TopicProduceData>)>,
    link: LinkKey,
    topic: &TopicName,
    partition: i32,
) -> usize {
    let names = |data: &[TopicProduceData]| {
        data.iter()
            .filter(|t| t.name == *topic)
            .flat_map(|t| &t.partition_data)
            .any(|p| p.index == partition)
    };
    if let Some(i) = destinations
        .iter()
        .position(|(l, data)| *l == link && !names(data))
    {
        return i;
    }
    destinations.push((link, Vec::new()));
    destinations.len() - 1
}
