//! Re-partitioning keyless Produce batches toward the brokers that are fastest right now.
//!
//! For a topic enabled in `[routing]`, each partition entry of a Produce request is inspected
//! ([`super::batch`]); the movable ones (keyless, non-idempotent, non-transactional) all go to
//! the broker the strategy picks for this request, each to a distinct partition that broker
//! leads and that the request does not already name (a Produce request may name a partition
//! only once). Everything else stays where the client put it, byte-identical. Picking one broker
//! per request keeps most requests to one or two parts, so a slow broker holds up few answers.
//!
//! Batches of an idempotent producer that kroute owns are renumbered instead ([`sequenced`]).
//! The parts' answers are merged back into the client's partitions ([`merge`]).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, TopicName};
use kafka_protocol::protocol::{Encodable, StrBytes};

use super::batch::{InspectBudget, KeepReason, Keys, inspect_keys};
use super::divide::{Divided, divide};
use super::{Merge, Part, Plan, Split};
use crate::cluster::TopicLayout;
use crate::config::Strategy;
use crate::protocol::header::{ProduceHead, RequestHead};
use crate::protocol::produce::{PartitionEntry, TopicEntry, parse_produce_body};
use crate::protocol::versions::PRODUCE_MAX_VERSION;
use crate::route::Context;
use crate::security::Permit;
use crate::security::principal::Principal;
use merge::{ProduceMerge, Route};

/// The first Produce version that carries magic v2 batches.
const MIN_ROUTED_VERSION: i16 = 3;

/// Rotates the partition chosen among a broker's partitions.
static PARTITION_CURSOR: AtomicUsize = AtomicUsize::new(0);

pub(super) fn unsplit(acks: i16) -> Plan {
    if acks == 0 {
        Plan::ForwardNoReply
    } else {
        Plan::Forward
    }
}

/// Plans a Produce request that arrived on the connection to broker `home`. `permit` says
/// which topics' batches may move on this connection (a SASL client's only to topics it has
/// written itself, since kroute's side connections carry kroute's identity).
pub fn plan(
    ctx: &Arc<dyn Context>,
    home: i32,
    permit: &Permit,
    head: &RequestHead,
    produce: &ProduceHead,
    frame: &Bytes,
) -> Plan {
    let routing = &ctx.config().routing;
    if matches!(permit, Permit::Nothing)
        || routing.strategy == Strategy::Off
        || routing.include.is_empty()
        || home < 0
        || head.api_version < MIN_ROUTED_VERSION
        || head.api_version > PRODUCE_MAX_VERSION
    {
        let body_bytes = frame.len().saturating_sub(produce.body_offset);
        let traffic = &ctx.metrics().routing.traffic;
        traffic.add(home, crate::skew::traffic::Class::NotRouted, body_bytes);
        return unsplit(produce.acks);
    }
    let kept = &ctx.metrics().routing;
    let body = frame.slice(produce.body_offset..);
    if produce.transactional {
        kept.keep(KeepReason::Transactional, home, body.len());
        return unsplit(produce.acks);
    }
    // A body kroute cannot read goes to the broker untouched: the broker has the last word.
    let Some(request) = parse_produce_body(&body, head.api_version)
        .ok()
        .and_then(|r| named_topics(r.topics).map(|t| (r.acks, r.timeout_ms, t)))
    else {
        kept.keep(KeepReason::Malformed, home, body.len());
        return unsplit(produce.acks);
    };
    let (acks, timeout_ms, topics) = request;
    // A producer authenticated under a principal kroute does not know is never renumbered:
    // all of its batches would go out under kroute's identity.
    let principal = permit.principal();
    if permit.may_renumber()
        && let Some(owner) = sequenced::owner(ctx.as_ref(), acks, &topics)
    {
        let header = frame.slice(..produce.body_offset);
        let request = (acks, timeout_ms);
        return sequenced::plan(ctx, (home, principal), head, header, request, topics, owner);
    }

    let now = Instant::now();
    // destinations[i] = (node, topics for that node); index 0 is always home.
    let mut destinations: Vec<(i32, Vec<TopicProduceData>)> = vec![(home, Vec::new())];
    let mut routes: Vec<Vec<Route>> = Vec::with_capacity(topics.len());
    let mut moves: Vec<(&str, i32, u32, usize)> = Vec::new();
    let mut budget = InspectBudget::per_request();

    for (name, topic) in &topics {
        let name_str = name.as_str();
        let mut topic_routes = Vec::with_capacity(topic.partitions.len());
        let routed = routing.routes_topic(name_str) && permit.allows(name_str);
        let layout = if routed {
            ctx.cluster().topic(name_str)
        } else {
            None
        };
        let unreachable = unreachable(ctx.as_ref(), principal, layout.as_deref());
        let mut targets = Targets {
            ctx: ctx.as_ref(),
            name: name_str,
            now,
            used: topic.partitions.iter().map(|p| p.index).collect(),
            broker: None,
            no_client_connection: !unreachable.is_empty(),
            exhausted: unreachable,
        };
        for entry in &topic.partitions {
            let verdict = match (&layout, &entry.records) {
                _ if !routed => Err(KeepReason::Policy),
                (None, _) => Err(KeepReason::UnknownTopic),
                (_, None) => Err(KeepReason::Malformed),
                (Some(layout), Some(records)) => {
                    verdict(&mut targets, layout, entry.index, records, &mut budget)
                }
            };
            let bytes = entry.records.as_ref().map_or(0, |r| r.len());
            let route = match verdict {
                Ok(Verdict::Move {
                    broker,
                    partition,
                    records,
                }) => {
                    moves.push((name_str, broker, records, bytes));
                    let part = destination(&mut destinations, broker);
                    add_entry(
                        &mut destinations[part].1,
                        name,
                        partition,
                        entry.records.clone(),
                    );
                    Route::Part {
                        part,
                        partition,
                        moved: true,
                    }
                }
                Ok(Verdict::Divide {
                    broker,
                    partition,
                    divided,
                }) => {
                    kept.keep(KeepReason::Keyed, home, divided.keyed.len());
                    let moving = (divided.keyless_records, divided.keyless.len());
                    moves.push((name_str, broker, moving.0, moving.1));
                    let part = destination(&mut destinations, broker);
                    add_entry(
                        &mut destinations[part].1,
                        name,
                        partition,
                        Some(divided.keyless),
                    );
                    add_entry(
                        &mut destinations[0].1,
                        name,
                        entry.index,
                        Some(divided.keyed),
                    );
                    let stayed = Route::Part {
                        part: 0,
                        partition: entry.index,
                        moved: false,
                    };
                    let moved = Route::Part {
                        part,
                        partition,
                        moved: true,
                    };
                    Route::Divided {
                        stayed: Box::new(stayed),
                        moved: Box::new(moved),
                    }
                }
                Ok(Verdict::Stay {
                    reason,
                    keyed,
                    keyless,
                }) => {
                    kept.keep(KeepReason::Keyed, home, keyed);
                    kept.keep(reason, home, keyless);
                    stays(&mut destinations, name, entry)
                }
                Err(reason) => {
                    kept.keep(reason, home, bytes);
                    stays(&mut destinations, name, entry)
                }
            };
            topic_routes.push(route);
        }
        routes.push(topic_routes);
    }
    if moves.is_empty() {
        // Nothing moves: the original bytes go where the client sent them.
        return unsplit(produce.acks);
    }

    let header = frame.slice(..produce.body_offset);
    let mut parts = Vec::with_capacity(destinations.len());
    for (node_id, topic_data) in destinations {
        if topic_data.is_empty() {
            // Everything for home moved away; send home nothing, and shift part indexes.
            routes.iter_mut().flatten().for_each(Route::shift_down);
            continue;
        }
        let body = ProduceRequest::default()
            .with_acks(acks)
            .with_timeout_ms(timeout_ms)
            .with_topic_data(topic_data);
        match encode_part(&header, &body, head.api_version) {
            Some(frame) => parts.push(Part {
                node_id,
                frame,
                sent: None,
            }),
            None => {
                kept.kept(KeepReason::Malformed).increment(1);
                return unsplit(produce.acks);
            }
        }
    }
    for (topic, to, records, bytes) in moves {
        ctx.metrics().routing.moved(topic, home, to, records, bytes);
    }
    let merge = (produce.acks != 0)
        .then(|| Box::new(ProduceMerge::new(head, topics, routes)) as Box<dyn Merge>);
    Plan::Split(Split { parts, merge })
}

/// Puts `entry` whole, byte-identical, in the part for the client's broker (part 0).
fn stays(
    destinations: &mut [(i32, Vec<TopicProduceData>)],
    name: &TopicName,
    entry: &PartitionEntry,
) -> Route {
    add_entry(
        &mut destinations[0].1,
        name,
        entry.index,
        entry.records.clone(),
    );
    Route::Part {
        part: 0,
        partition: entry.index,
        moved: false,
    }
}

/// What happens to one partition entry of a routed topic that kroute can read.
enum Verdict {
    /// The whole entry moves to `partition` of `broker`.
    Move {
        broker: i32,
        partition: i32,
        records: u32,
    },
    /// Its keyed records stay, its keyless ones move to `partition` of `broker`.
    Divide {
        broker: i32,
        partition: i32,
        divided: Divided,
    },
    /// Mixed, but its keyless records have nowhere better to go (`reason`): the entry stays
    /// whole, its bytes counted as `keyed` and `keyless` would have been divided.
    Stay {
        reason: KeepReason,
        keyed: usize,
        keyless: usize,
    },
}

/// Decides where the entry for client partition `index` goes: keyless batches move, mixed ones
/// are divided ([`crate::route::divide`]) and their keyless part moves, the rest stays.
fn verdict(
    targets: &mut Targets,
    layout: &TopicLayout,
    index: i32,
    records: &Bytes,
    budget: &mut InspectBudget,
) -> Result<Verdict, KeepReason> {
    match inspect_keys(records, budget)? {
        // Not owned by kroute (see `sequenced`): its numbers must stay.
        Keys::Keyless(movable) if movable.idempotent => Err(KeepReason::Idempotent),
        Keys::Keyless(movable) => {
            let (broker, partition) = targets.pick(layout, index, records.len())?;
            Ok(Verdict::Move {
                broker,
                partition,
                records: movable.records,
            })
        }
        Keys::Keyed { may_mix: false } => Err(KeepReason::Keyed),
        Keys::Keyed { may_mix: true } => {
            let divided = divide(records, budget)?;
            match targets.pick(layout, index, divided.keyless.len()) {
                Ok((broker, partition)) => Ok(Verdict::Divide {
                    broker,
                    partition,
                    divided,
                }),
                Err(reason) => Ok(Verdict::Stay {
                    reason,
                    keyed: divided.keyed.len(),
                    keyless: divided.keyless.len(),
                }),
            }
        }
    }
}

/// Where one topic's movable records of a request go: one broker per request (the next one
/// once it has no partition left that the request does not already name).
struct Targets<'a> {
    ctx: &'a dyn Context,
    name: &'a str,
    now: Instant,
    /// Partitions this request already names (original or assigned): never twice.
    used: HashSet<i32>,
    /// The broker this request's movable records of the topic go to.
    broker: Option<i32>,
    /// Brokers that have no partition left free in this request, or to which the client's
    /// principal has no connection.
    exhausted: Vec<i32>,
    /// Some brokers are left out because the client's principal has no connection there.
    no_client_connection: bool,
}

impl Targets<'_> {
    /// The broker and partition for `bytes` of movable records sent to client partition
    /// `index`; Err(Home) if the strategy picks the broker that leads it.
    fn pick(
        &mut self,
        layout: &TopicLayout,
        index: i32,
        bytes: usize,
    ) -> Result<(i32, i32), KeepReason> {
        let router = self.ctx.router();
        loop {
            let broker = match self.broker {
                Some(b) => b,
                None => {
                    let b = router
                        .strict_cost
                        .pick_excluding(
                            self.name,
                            layout.leaders(),
                            &self.exhausted,
                            &router.scores,
                            self.now,
                        )
                        .ok_or(if self.no_client_connection {
                            KeepReason::NoClientConnection
                        } else {
                            KeepReason::NoPartition
                        })?;
                    *self.broker.insert(b)
                }
            };
            if layout.leader_of(index) == Some(broker) {
                router.strict_cost.charge(self.name, broker, bytes);
                return Err(KeepReason::Home);
            }
            let free: Vec<i32> = layout
                .led_by(broker)
                .filter(|p| !self.used.contains(p))
                .collect();
            if free.is_empty() {
                // Overflow: the rest of this request's batches go to the next broker.
                self.exhausted.push(broker);
                self.broker = None;
                continue;
            }
            let partition = free[PARTITION_CURSOR.fetch_add(1, Ordering::Relaxed) % free.len()];
            self.used.insert(partition);
            router.strict_cost.charge(self.name, broker, bytes);
            return Ok((broker, partition));
        }
    }
}

/// The leaders of a topic to which a client authenticated as `principal` has no connection
/// through kroute: its batches cannot go out there under its own identity
/// ([`crate::upstream::principals`]). Empty for other clients.
pub(super) fn unreachable(
    ctx: &dyn Context,
    principal: Option<&Arc<Principal>>,
    layout: Option<&TopicLayout>,
) -> Vec<i32> {
    let (Some(principal), Some(layout)) = (principal, layout) else {
        return Vec::new();
    };
    let connections = ctx.client_connections();
    layout
        .leaders()
        .iter()
        .copied()
        .filter(|node| !connections.reaches(principal, *node))
        .collect()
}

/// Topic entries with their names as Kafka topic names; None if a name is not UTF-8 or a
/// topic appears twice (kroute then leaves the request alone rather than reason about it).
pub(super) fn named_topics(topics: Vec<TopicEntry>) -> Option<Vec<(TopicName, TopicEntry)>> {
    let mut seen = HashSet::new();
    let mut named = Vec::with_capacity(topics.len());
    for t in topics {
        let name = StrBytes::from_utf8(t.name.clone()).ok()?;
        if !seen.insert(name.clone()) {
            return None;
        }
        named.push((TopicName(name), t));
    }
    Some(named)
}

/// Appends one partition entry to a part's topic data (entries of one topic are consecutive).
pub(super) fn add_entry(
    topic_data: &mut Vec<TopicProduceData>,
    name: &TopicName,
    partition: i32,
    records: Option<Bytes>,
) {
    if topic_data.last().is_none_or(|t| t.name != *name) {
        topic_data.push(TopicProduceData::default().with_name(name.clone()));
    }
    if let Some(t) = topic_data.last_mut() {
        t.partition_data.push(
            PartitionProduceData::default()
                .with_index(partition)
                .with_records(records),
        );
    }
}

pub(super) fn destination(
    destinations: &mut Vec<(i32, Vec<TopicProduceData>)>,
    node: i32,
) -> usize {
    if let Some(i) = destinations.iter().position(|d| d.0 == node) {
        return i;
    }
    destinations.push((node, Vec::new()));
    destinations.len() - 1
}

pub(super) fn encode_part(header: &Bytes, body: &ProduceRequest, version: i16) -> Option<Bytes> {
    let size = body.compute_size(version).ok()?;
    let mut frame = BytesMut::with_capacity(header.len() + size);
    frame.extend_from_slice(header);
    body.encode(&mut frame, version).ok()?;
    Some(frame.freeze())
}

mod answers;
mod division;
mod merge;
mod number;
mod place;
mod replies;
mod request_joins;
mod send;
mod sequenced;
mod waiting;

pub use waiting::Waiting;
#[cfg(test)]
mod silent_broker;
#[cfg(test)]
mod tests;
