//! Planning a Produce request of an idempotent producer that kroute owns.
//!
//! Every batch of a routed topic is renumbered by kroute ([`crate::route::sequence`]), whether
//! it moves or not, because kroute hands out the numbers of every partition such a producer
//! writes to. A client's retry goes where the first attempt went, with the same numbers; a
//! retry of a batch already appended is answered from memory. Keyed batches stay on their
//! partition; keyless ones move as in [`super::plan`], to partitions whose numbering can take
//! them now. A batch that has nowhere to go right now (every lane that could take it carries
//! its first batch, say) waits in kroute until an answer frees a lane ([`super::waiting`]).
//!
//! The parts are queued here, under the producer's lock, on the producer's own connections
//! ([`crate::route::producers`]), so each partition receives its batches in numbering order.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use kafka_protocol::messages::produce_request::TopicProduceData;
use kafka_protocol::messages::{ApiKey, ProduceRequest, TopicName};
use tokio::sync::oneshot;

use super::answers::{Numbered, recorder};
use super::merge::{ProduceMerge, Route};
use super::place::{Place, Placement, TopicChoice};
use super::request_joins::PlanJoin;
use super::waiting::{JoinedWaiter, Shape, WAIT_AT_MOST, Waiter, answer_joined, release_at};
use super::{add_entry, encode_part};
use crate::protocol::header::RequestHead;
use crate::protocol::produce::TopicEntry;
use crate::proxy::Proxy;
use crate::route::batch::{InspectBudget, KeepReason, sequenced};
use crate::route::producers::{LinkKey, Origin, OwnedProducer, ProducerState};
use crate::route::sequence::{BatchKey, code};
use crate::route::{Merge, Part, Plan, Split};
use crate::upstream::{Outbound, PendingReply, Reply};

/// The producer whose batches fill this request, with the epoch of its first batch: the
/// producer of the first idempotent batch in a routed topic, owned, or tracked from now on if
/// kroute did not see it start ([`crate::route::producers`]). (acks=0 never comes from an
/// idempotent producer; such batches are left alone.)
pub(super) fn owner(
    proxy: &Proxy,
    acks: i16,
    topics: &[(TopicName, TopicEntry)],
) -> Option<(i64, i16, Arc<OwnedProducer>)> {
    let routing = &proxy.config.routing;
    if acks == 0 || !routing.routes_idempotent() {
        return None;
    }
    let first = topics
        .iter()
        .filter(|(name, _)| routing.routes_topic(name.as_str()))
        .flat_map(|(_, t)| &t.partitions)
        .find_map(|p| sequenced(p.records.as_ref()?))?;
    let producers = &proxy.router.producers;
    let now = Instant::now();
    let owned = producers
        .get(first.producer_id)
        .or_else(|| producers.unresolved(first.producer_id, now))?;
    Some((first.producer_id, first.epoch, owned))
}

/// Settles the origin of a producer kroute did not see start, once kroute knows what the
/// brokers hold ([`crate::route::recovery`]).
fn resolve(proxy: &Proxy, state: &mut ProducerState, epoch: i16, producer_id: i64, now: Instant) {
    if state.origin != Origin::Unresolved {
        return;
    }
    if let Some(origin) = proxy.router.recovery.origin(producer_id, epoch, now) {
        if matches!(origin, Origin::Adopted { .. }) {
            proxy.metrics.sequencing.adopted.increment(1);
        }
        state.origin = origin;
    }
}

/// Plans the request of owned producer `producer_id`; `header` is the request header bytes.
pub(super) fn plan(
    proxy: &Arc<Proxy>,
    home: i32,
    head: &RequestHead,
    header: Bytes,
    (acks, timeout_ms): (i16, i32),
    topics: Vec<(TopicName, TopicEntry)>,
    (producer_id, first_epoch, owner): (i64, i16, Arc<OwnedProducer>),
) -> Plan {
    let now = Instant::now();
    let routing = &proxy.config.routing;
    let shape = Shape {
        header,
        version: head.api_version,
        correlation_id: head.correlation_id,
        acks,
        timeout_ms,
    };
    let mut state = owner.lock();
    state.touch(now);
    resolve(proxy, &mut state, first_epoch, producer_id, now);
    let mut destinations: Vec<(LinkKey, Vec<TopicProduceData>)> = Vec::new();
    let mut routes: Vec<Vec<Route>> = Vec::with_capacity(topics.len());
    // The renumbered batches of each part, to record its answer.
    let mut numbered_in: Vec<Vec<Numbered>> = Vec::new();
    // The answers of batches that wait in kroute, in the order of their `Route::Waiting`.
    let mut waiting: Vec<oneshot::Receiver<Reply>> = Vec::new();
    let mut budget = InspectBudget::per_request();

    for (name, topic) in &topics {
        let name_str = name.as_str();
        let routed = routing.routes_topic(name_str);
        let layout = routed.then(|| proxy.cluster.topic(name_str)).flatten();
        // A Produce request may name a partition only once.
        let mut used: HashSet<i32> = topic.partitions.iter().map(|p| p.index).collect();
        let mut choice = TopicChoice::default();
        // Per head of `choice` (in its order): the batches going out joined with it.
        let mut joins: Vec<PlanJoin> = Vec::new();
        let mut topic_routes = Vec::with_capacity(topic.partitions.len());
        for entry in &topic.partitions {
            let records = entry.records.as_ref();
            let numbering = records
                .filter(|_| routed)
                .and_then(sequenced)
                .filter(|s| s.producer_id == producer_id);
            let placement = match (records, numbering, state.origin) {
                // Not known yet what the brokers hold for it: the client retries.
                (Some(_), Some(_), Origin::Unresolved) => Placement::Local(code::REQUEST_TIMED_OUT),
                // An adopted producer: its old epoch is refused, newer ones pass untouched.
                (Some(_), Some(s), Origin::Adopted { passes_from }) if s.epoch < passes_from => {
                    Placement::Local(code::OUT_OF_ORDER_SEQUENCE_NUMBER)
                }
                (Some(_), Some(_), Origin::Adopted { .. }) => {
                    proxy
                        .metrics
                        .routing
                        .kept(KeepReason::Idempotent)
                        .increment(1);
                    Placement::Untouched
                }
                (Some(records), Some(s), Origin::Numbered { .. }) => {
                    let key = BatchKey {
                        topic: topic.name.clone(),
                        partition: entry.index,
                        epoch: s.epoch,
                        base: s.base,
                        records: s.records,
                    };
                    let earlier_waits = state.waiting.holds_partition_of(&key);
                    let mut place = Place {
                        proxy,
                        state: &mut state,
                        home,
                        name: name_str,
                        layout: layout.as_deref(),
                        used: &mut used,
                        now,
                    };
                    let movable = (None, &mut budget);
                    let placement =
                        place.entry(key.clone(), records, &mut choice, movable, earlier_waits);
                    match placement.renumbered(&mut state) {
                        Placement::Wait { movable } if !state.waiting.is_full() => {
                            let (reply, answer) = oneshot::channel();
                            state.waiting.push(Waiter {
                                key,
                                topic: name.clone(),
                                records: records.clone(),
                                movable,
                                home,
                                shape: shape.clone(),
                                deadline: now + WAIT_AT_MOST,
                                reply,
                            });
                            proxy.metrics.sequencing.waited.increment(1);
                            topic_routes.push(Route::Waiting {
                                part: waiting.len(),
                            });
                            waiting.push(answer);
                            continue;
                        }
                        Placement::Wait { .. } => {
                            proxy.metrics.sequencing.busy.increment(1);
                            Placement::Local(code::REQUEST_TIMED_OUT)
                        }
                        other => other,
                    }
                }
                _ => {
                    if routed {
                        proxy
                            .metrics
                            .routing
                            .kept(KeepReason::Malformed)
                            .increment(1);
                    }
                    Placement::Untouched
                }
            };
            // A joined batch's offsets are the first member's: reported unknown for each.
            let mut joined = false;
            let (node, partition, records, numbered) = match placement {
                Placement::Local(error) => {
                    topic_routes.push(Route::Local { error });
                    continue;
                }
                Placement::JoinedTo {
                    head,
                    node,
                    target,
                    seq,
                    key,
                    records,
                } => {
                    let Some(join) = joins.get_mut(head) else {
                        // (Every head of the choice is recorded below when it is numbered.)
                        topic_routes.push(Route::Local {
                            error: code::REQUEST_TIMED_OUT,
                        });
                        continue;
                    };
                    count_numbered(proxy, name_str, home, node, &key, target, records.len());
                    join.records.push(records);
                    numbered_in[join.part].push(Numbered {
                        topic: name.clone(),
                        key,
                        target,
                        seq,
                    });
                    topic_routes.push(Route::Part {
                        part: join.part,
                        partition: target,
                        moved: true,
                    });
                    continue;
                }
                Placement::Untouched => (home, entry.index, entry.records.clone(), Vec::new()),
                Placement::Joined {
                    node,
                    target,
                    members,
                    records,
                } => {
                    joined = true;
                    let numbered = Numbered::members(name, target, members);
                    (node, target, Some(records), numbered)
                }
                Placement::Numbered {
                    node,
                    target,
                    seq,
                    key,
                    records,
                } => {
                    count_numbered(proxy, name_str, home, node, &key, target, records.len());
                    if choice.heads.len() > joins.len() {
                        // A head others may join: where it goes is known below.
                        joins.push(PlanJoin {
                            part: usize::MAX,
                            route: usize::MAX,
                            target,
                            seq,
                            epoch: key.epoch,
                            topic_key: key.topic.clone(),
                            records: vec![records.clone()],
                        });
                    }
                    let numbered = Numbered {
                        topic: name.clone(),
                        key,
                        target,
                        seq,
                    };
                    (node, target, Some(records), vec![numbered])
                }
                // Handled above.
                Placement::Wait { .. } => continue,
            };
            let link = LinkKey::new(node, partition);
            let part = destination_without(&mut destinations, link, name, partition);
            add_entry(&mut destinations[part].1, name, partition, records);
            numbered_in.resize_with(numbered_in.len().max(part + 1), Vec::new);
            numbered_in[part].extend(numbered);
            if let Some(join) = joins.last_mut().filter(|j| j.part == usize::MAX) {
                join.part = part;
                join.route = topic_routes.len();
            }
            topic_routes.push(Route::Part {
                part,
                partition,
                moved: joined || partition != entry.index,
            });
        }
        for join in joins.into_iter().filter(|j| j.records.len() > 1) {
            let numbered = &mut numbered_in[join.part];
            join.finish(
                proxy,
                &mut state,
                name,
                (&mut destinations, numbered),
                &mut topic_routes,
            );
        }
        routes.push(topic_routes);
    }

    // Waiting batches' parts come after the parts sent now.
    let sent_now = destinations.len();
    for route in routes.iter_mut().flatten() {
        if let Route::Waiting { part } = route {
            *part += sent_now;
        }
    }
    let mut parts = Vec::with_capacity(sent_now + waiting.len());
    // Requests that could not be queued: dropped only once the producer's lock is released,
    // because dropping one records its batches' outcome under that lock.
    let mut unsent: Vec<PendingReply> = Vec::new();
    numbered_in.resize_with(sent_now, Vec::new);
    for ((link, topic_data), numbered) in destinations.into_iter().zip(numbered_in) {
        let (reply, sent) = oneshot::channel();
        let frame = queue(
            proxy,
            &owner,
            &mut state,
            &shape,
            link,
            topic_data,
            numbered,
            AnswerTo::Part(reply),
            &mut unsent,
        );
        parts.push(Part {
            node_id: link.node_id,
            frame,
            sent: Some(sent),
        });
    }
    if !waiting.is_empty() {
        release_at(proxy.clone(), owner.clone(), now + WAIT_AT_MOST);
    }
    for answer in waiting {
        parts.push(Part {
            node_id: home,
            frame: Bytes::new(),
            sent: Some(answer),
        });
    }
    drop(state);
    drop(unsent);
    let merge = ProduceMerge::new(head, topics, routes);
    Plan::Split(Split {
        parts,
        merge: Some(Box::new(merge) as Box<dyn Merge>),
    })
}

/// Counts a batch sent with kroute's numbers (and its move, if it moved).
pub(super) fn count_numbered(
    proxy: &Proxy,
    topic: &str,
    home: i32,
    node: i32,
    key: &BatchKey,
    target: i32,
    bytes: usize,
) {
    proxy.metrics.sequencing.renumbered.increment(1);
    if target != key.partition {
        let count = key.records.max(0) as u32;
        proxy.metrics.routing.moved(topic, home, node, count, bytes);
    }
}

/// Where the answer to a request of the producer goes.
pub(super) enum AnswerTo {
    /// To the part of one client request.
    Part(oneshot::Sender<Reply>),
    /// To the waiting batches that went out joined in it, each answered for itself.
    Joined(Vec<JoinedWaiter>),
}

/// Queues one request of the producer on its connection `link`: `topic_data` in a request
/// shaped like the client's, answered to `to`, recording the outcome of its `numbered`
/// batches on the way. Returns the frame. A request that cannot be queued (full or closed
/// connection, unknown broker) goes to `unsent`: dropped once the producer's lock is released,
/// it records "no answer came" and its part fails retriably.
#[allow(clippy::too_many_arguments)]
pub(super) fn queue(
    proxy: &Arc<Proxy>,
    owner: &Arc<OwnedProducer>,
    state: &mut ProducerState,
    shape: &Shape,
    link: LinkKey,
    topic_data: Vec<TopicProduceData>,
    numbered: Vec<Numbered>,
    to: AnswerTo,
    unsent: &mut Vec<PendingReply>,
) -> Bytes {
    let body = ProduceRequest::default()
        .with_acks(shape.acks)
        .with_timeout_ms(shape.timeout_ms)
        .with_topic_data(topic_data);
    let frame = encode_part(&shape.header, &body, shape.version).unwrap_or_default();
    let (reply, joined) = match to {
        AnswerTo::Part(reply) => (reply, None),
        // Each waiter is answered by the hook; nobody reads this reply.
        AnswerTo::Joined(waiters) => (oneshot::channel().0, Some(waiters)),
    };
    let mut pending = PendingReply::new(
        ApiKey::Produce as i16,
        shape.version,
        shape.correlation_id,
        reply,
    );
    if !numbered.is_empty() {
        let mut hook = recorder(proxy.clone(), owner.clone(), shape.version, numbered);
        if let Some(waiters) = joined {
            let version = shape.version;
            hook = Box::new(move |answer| {
                let answer = hook(answer);
                answer_joined(&answer, version, waiters);
                answer
            });
        }
        pending = pending.with_hook(hook);
    }
    match proxy
        .cluster
        .address(link.node_id)
        .filter(|_| !frame.is_empty())
    {
        Some(addr) => {
            let out = Outbound {
                frame: frame.clone(),
                pending: Some(pending),
            };
            if let Err(out) = state.link(proxy, link, &addr).try_send(out) {
                unsent.extend(out.pending);
            }
        }
        None => unsent.push(pending),
    }
    frame
}

/// Queues one batch that waited: renumbered `records` of `topic` for partition `target` of
/// broker `node`, with kroute's base sequence `seq` for client batch `key`.
#[allow(clippy::too_many_arguments)]
pub(super) fn queue_waited(
    proxy: &Arc<Proxy>,
    owner: &Arc<OwnedProducer>,
    state: &mut ProducerState,
    shape: &Shape,
    (home, node, target, key, seq): (i32, i32, i32, BatchKey, i32),
    (topic, records): (TopicName, Bytes),
    reply: oneshot::Sender<Reply>,
    unsent: &mut Vec<PendingReply>,
) {
    count_numbered(
        proxy,
        topic.as_str(),
        home,
        node,
        &key,
        target,
        records.len(),
    );
    let numbered = vec![Numbered {
        topic: topic.clone(),
        key,
        target,
        seq,
    }];
    let to = AnswerTo::Part(reply);
    queue_batch(
        proxy,
        owner,
        state,
        shape,
        (node, target),
        (topic, records),
        numbered,
        to,
        unsent,
    );
}

/// Queues one batch alone in a request: `records` of `topic` for partition `target` of broker
/// `node`, recording the outcome for the client batches `numbered` it carries.
#[allow(clippy::too_many_arguments)]
pub(super) fn queue_batch(
    proxy: &Arc<Proxy>,
    owner: &Arc<OwnedProducer>,
    state: &mut ProducerState,
    shape: &Shape,
    (node, target): (i32, i32),
    (topic, records): (TopicName, Bytes),
    numbered: Vec<Numbered>,
    to: AnswerTo,
    unsent: &mut Vec<PendingReply>,
) {
    let mut topic_data = Vec::with_capacity(1);
    add_entry(&mut topic_data, &topic, target, Some(records));
    let link = LinkKey::new(node, target);
    queue(
        proxy, owner, state, shape, link, topic_data, numbered, to, unsent,
    );
}

/// The part for connection `link` that does not name `partition` of `topic` yet (a Produce
/// request may name a partition only once: a retry resent to a partition the client also
/// names in this request goes in a second request on the same connection, behind the first).
fn destination_without(
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
