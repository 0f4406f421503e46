//! Re-partitioning keyless Produce batches toward the brokers that are fastest right now.
//!
//! For a topic enabled in `[routing]`, each partition entry of a Produce request is inspected
//! ([`super::batch`]); the movable ones (keyless, non-idempotent, non-transactional) all go to
//! the broker the strategy picks for this request, each to a distinct partition that broker
//! leads and that the request does not already name (a Produce request may name a partition
//! only once). Everything else stays where the client put it, byte-identical. Picking one broker
//! per request keeps most requests to one or two parts, so a slow broker holds up few answers.
//!
//! The answer the client gets names exactly the partitions it sent, in its order:
//! - a moved batch's result is reported under the client's partition, with `base_offset` and
//!   `log_start_offset` -1 (unknown, as with acks=0: the offsets belong to another partition)
//!   and without `current_leader` (it describes the other partition);
//! - errors from the target are reported under the client's partition, so the client retries
//!   and kroute routes the retry afresh; a part whose broker went away is NETWORK_EXCEPTION;
//! - `throttle_time_ms` is the largest of the parts'.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::produce_response::{
    LeaderIdAndEpoch, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use super::batch::{InspectBudget, KeepReason, inspect};
use super::{Merge, Part, Plan, Split};
use crate::config::Strategy;
use crate::protocol::header::{ProduceHead, RequestHead, split_response};
use crate::protocol::produce::{TopicEntry, parse_produce_body};
use crate::protocol::versions::PRODUCE_MAX_VERSION;
use crate::proxy::Proxy;
use crate::upstream::Reply;

/// Kafka's NETWORK_EXCEPTION: retriable, and makes the client refresh its metadata.
const NETWORK_EXCEPTION: i16 = 13;

/// The first Produce version that carries magic v2 batches.
const MIN_ROUTED_VERSION: i16 = 3;

/// Where one partition entry of the client's request went.
#[derive(Debug, Clone, Copy)]
struct Route {
    part: usize,
    partition: i32,
    moved: bool,
}

/// Rotates the partition chosen among a broker's partitions.
static PARTITION_CURSOR: AtomicUsize = AtomicUsize::new(0);

fn unsplit(acks: i16) -> Plan {
    if acks == 0 {
        Plan::ForwardNoReply
    } else {
        Plan::Forward
    }
}

/// Plans a Produce request that arrived on the connection to broker `home`. `may_route` is
/// false on connections where moving batches is not allowed (e.g. SASL-authenticated ones,
/// whose identity kroute's side connections would not carry).
pub fn plan(
    proxy: &Proxy,
    home: i32,
    may_route: bool,
    head: &RequestHead,
    produce: &ProduceHead,
    frame: &Bytes,
) -> Plan {
    let routing = &proxy.config.routing;
    if !may_route
        || routing.strategy == Strategy::Off
        || routing.include.is_empty()
        || home < 0
        || head.api_version < MIN_ROUTED_VERSION
        || head.api_version > PRODUCE_MAX_VERSION
    {
        return unsplit(produce.acks);
    }
    let kept = &proxy.metrics.routing;
    if produce.transactional {
        kept.kept(KeepReason::Transactional).increment(1);
        return unsplit(produce.acks);
    }
    // A body kroute cannot read goes to the broker untouched: the broker has the last word.
    let body = frame.slice(produce.body_offset..);
    let Some(request) = parse_produce_body(&body, head.api_version)
        .ok()
        .and_then(|r| named_topics(r.topics).map(|t| (r.acks, r.timeout_ms, t)))
    else {
        kept.kept(KeepReason::Malformed).increment(1);
        return unsplit(produce.acks);
    };
    let (acks, timeout_ms, topics) = request;

    let now = Instant::now();
    // destinations[i] = (node, topics for that node); index 0 is always home.
    let mut destinations: Vec<(i32, Vec<TopicProduceData>)> = vec![(home, Vec::new())];
    let mut routes: Vec<Vec<Route>> = Vec::with_capacity(topics.len());
    let mut moves: Vec<(&str, i32, u32, usize)> = Vec::new();
    let mut budget = InspectBudget::per_request();

    for (name, topic) in &topics {
        let name_str = name.as_str();
        let mut topic_routes = Vec::with_capacity(topic.partitions.len());
        let routed = routing.routes_topic(name_str);
        let layout = if routed {
            proxy.cluster.topic(name_str)
        } else {
            None
        };
        // Partitions this request already names (original or assigned): never twice.
        let mut used: HashSet<i32> = topic.partitions.iter().map(|p| p.index).collect();
        // The broker this request's movable batches of the topic go to, and the brokers that
        // have no partition left free in this request.
        let mut target: Option<i32> = None;
        let mut exhausted: Vec<i32> = Vec::new();
        for entry in &topic.partitions {
            let verdict = match (&layout, &entry.records) {
                _ if !routed => Err(KeepReason::Policy),
                (None, _) => Err(KeepReason::UnknownTopic),
                (_, None) => Err(KeepReason::Malformed),
                (Some(layout), Some(records)) => {
                    inspect(records, &mut budget).and_then(|movable| {
                        loop {
                            let broker = match target {
                                Some(b) => b,
                                None => {
                                    let router = &proxy.router;
                                    let leaders = layout.leaders();
                                    let b = router
                                        .strict_cost
                                        .pick_excluding(
                                            name_str,
                                            leaders,
                                            &exhausted,
                                            &router.scores,
                                            now,
                                        )
                                        .ok_or(KeepReason::NoPartition)?;
                                    *target.insert(b)
                                }
                            };
                            let strategy = &proxy.router.strict_cost;
                            if layout.leader_of(entry.index) == Some(broker) {
                                strategy.charge(name_str, broker, records.len());
                                return Err(KeepReason::Home);
                            }
                            let free: Vec<i32> = layout
                                .led_by(broker)
                                .filter(|p| !used.contains(p))
                                .collect();
                            if free.is_empty() {
                                // Overflow: the rest of this request's batches go to the next broker.
                                exhausted.push(broker);
                                target = None;
                                continue;
                            }
                            let partition =
                                free[PARTITION_CURSOR.fetch_add(1, Ordering::Relaxed) % free.len()];
                            used.insert(partition);
                            strategy.charge(name_str, broker, records.len());
                            return Ok((broker, partition, movable.records));
                        }
                    })
                }
            };
            let (node, partition, moved) = match verdict {
                Ok((broker, partition, records)) => {
                    let bytes = entry.records.as_ref().map_or(0, |r| r.len());
                    moves.push((name_str, broker, records, bytes));
                    (broker, partition, true)
                }
                Err(reason) => {
                    kept.kept(reason).increment(1);
                    (home, entry.index, false)
                }
            };
            let part = destination(&mut destinations, node);
            let topic_data = &mut destinations[part].1;
            if topic_data.last().is_none_or(|t| t.name != *name) {
                topic_data.push(TopicProduceData::default().with_name(name.clone()));
            }
            if let Some(t) = topic_data.last_mut() {
                t.partition_data.push(
                    PartitionProduceData::default()
                        .with_index(partition)
                        .with_records(entry.records.clone()),
                );
            }
            topic_routes.push(Route {
                part,
                partition,
                moved,
            });
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
            for r in routes.iter_mut().flatten() {
                r.part -= 1;
            }
            continue;
        }
        let body = ProduceRequest::default()
            .with_acks(acks)
            .with_timeout_ms(timeout_ms)
            .with_topic_data(topic_data);
        match encode_part(&header, &body, head.api_version) {
            Some(frame) => parts.push(Part { node_id, frame }),
            None => {
                kept.kept(KeepReason::Malformed).increment(1);
                return unsplit(produce.acks);
            }
        }
    }
    for (topic, to, records, bytes) in moves {
        proxy.metrics.routing.moved(topic, home, to, records, bytes);
    }
    let merge = (produce.acks != 0).then(|| {
        Box::new(ProduceMerge {
            version: head.api_version,
            correlation_id: head.correlation_id,
            original: topics
                .iter()
                .map(|(_, t)| t.partitions.iter().map(|p| p.index).collect())
                .collect(),
            topics: topics.into_iter().map(|(name, _)| name).collect(),
            routes,
        }) as Box<dyn Merge>
    });
    Plan::Split(Split { parts, merge })
}

/// Topic entries with their names as Kafka topic names; None if a name is not UTF-8 or a
/// topic appears twice (kroute then leaves the request alone rather than reason about it).
fn named_topics(topics: Vec<TopicEntry>) -> Option<Vec<(TopicName, TopicEntry)>> {
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

fn destination(destinations: &mut Vec<(i32, Vec<TopicProduceData>)>, node: i32) -> usize {
    if let Some(i) = destinations.iter().position(|d| d.0 == node) {
        return i;
    }
    destinations.push((node, Vec::new()));
    destinations.len() - 1
}

fn encode_part(header: &Bytes, body: &ProduceRequest, version: i16) -> Option<Bytes> {
    let size = body.compute_size(version).ok()?;
    let mut frame = BytesMut::with_capacity(header.len() + size);
    frame.extend_from_slice(header);
    body.encode(&mut frame, version).ok()?;
    Some(frame.freeze())
}

/// Merges the answers of a split Produce request back into the client's partitions.
struct ProduceMerge {
    version: i16,
    correlation_id: i32,
    topics: Vec<TopicName>,
    original: Vec<Vec<i32>>,
    routes: Vec<Vec<Route>>,
}

impl Merge for ProduceMerge {
    fn merge(self: Box<Self>, answers: Vec<Reply>) -> Bytes {
        let header_version = ApiKey::Produce.response_header_version(self.version);
        let mut throttle = 0;
        let mut endpoints = Vec::new();
        // (part, topic, partition) -> that part's answer.
        let mut found: BTreeMap<(usize, &str, i32), PartitionProduceResponse> = BTreeMap::new();
        let decoded: Vec<Option<ProduceResponse>> = answers
            .into_iter()
            .map(|answer| {
                let payload = answer.ok()?;
                let (_, mut body) = split_response(&payload, header_version).ok()?;
                ProduceResponse::decode(&mut body, self.version).ok()
            })
            .collect();
        for (part, response) in decoded.iter().enumerate() {
            let Some(response) = response else { continue };
            throttle = throttle.max(response.throttle_time_ms);
            for e in &response.node_endpoints {
                if !endpoints.iter().any(
                    |x: &kafka_protocol::messages::produce_response::NodeEndpoint| {
                        x.node_id == e.node_id
                    },
                ) {
                    endpoints.push(e.clone());
                }
            }
            for t in &response.responses {
                for p in &t.partition_responses {
                    found.insert((part, t.name.as_str(), p.index), p.clone());
                }
            }
        }
        let responses = self
            .topics
            .iter()
            .zip(&self.original)
            .zip(&self.routes)
            .map(|((name, original), routes)| {
                let partition_responses = original
                    .iter()
                    .zip(routes)
                    .map(|(index, route)| {
                        let answer = found.remove(&(route.part, name.as_str(), route.partition));
                        let mut p = answer.unwrap_or_else(|| {
                            PartitionProduceResponse::default()
                                .with_error_code(NETWORK_EXCEPTION)
                                .with_base_offset(-1)
                                .with_log_append_time_ms(-1)
                                .with_log_start_offset(-1)
                        });
                        p.index = *index;
                        if route.moved {
                            p.base_offset = -1;
                            p.log_start_offset = -1;
                            p.current_leader = LeaderIdAndEpoch::default();
                        }
                        p
                    })
                    .collect();
                TopicProduceResponse::default()
                    .with_name(name.clone())
                    .with_partition_responses(partition_responses)
            })
            .collect();
        let merged = ProduceResponse::default()
            .with_responses(responses)
            .with_throttle_time_ms(throttle)
            .with_node_endpoints(endpoints);
        let mut out = BytesMut::new();
        out.put_i32(self.correlation_id);
        if header_version >= 1 {
            out.put_u8(0); // no tagged fields in the response header
        }
        // Encoding a response built from decoded parts cannot fail for a version they decoded in.
        if merged.encode(&mut out, self.version).is_err() {
            out.truncate(if header_version >= 1 { 5 } else { 4 });
        }
        out.freeze()
    }
}

#[cfg(test)]
mod tests;
