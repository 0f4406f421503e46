//! Merging the answers of a split Produce request back into the partitions the client named.
//!
//! The answer names exactly the partitions the client sent, in its order:
//! - a moved batch's result is reported under the client's partition, with `base_offset` and
//!   `log_start_offset` -1 (unknown, as with acks=0: the offsets belong to another partition)
//!   and without `current_leader` (it describes the other partition);
//! - errors from the target are reported under the client's partition, so the client retries;
//!   a part whose broker went away is [`UNANSWERED`] (retried as possibly appended);
//! - `throttle_time_ms` is the largest of the parts'.
//!
//! For a producer kroute numbers, the merge also withholds successes the client would read as
//! covering an earlier failed batch ([`Withhold`]): it runs in the client's order, when the
//! earlier batches' answers have gone out and their state is known.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::produce_response::{
    LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ApiKey, ProduceResponse, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable};
use metrics::Counter;

use crate::protocol::header::{RequestHead, split_response};
use crate::protocol::produce::TopicEntry;
use crate::route::Merge;
use crate::route::producers::OwnedProducer;
use crate::route::sequence::BatchKey;
use crate::route::sequence::code::{
    DUPLICATE_SEQUENCE_NUMBER, NONE, REQUEST_TIMED_OUT, UNANSWERED,
};
use crate::upstream::Reply;

/// Where one partition entry of the client's request went.
#[derive(Debug, Clone)]
pub enum Route {
    /// Into part `part`, as partition `partition` (`moved` if that is not the client's).
    Part {
        part: usize,
        partition: i32,
        moved: bool,
    },
    /// Answered by kroute without sending (e.g. a retry of a batch already appended).
    Local { error: i16 },
    /// Waited in kroute: part `part` answers this one batch, for whichever partition it was
    /// finally placed on (or for the client's, if kroute answered it).
    Waiting { part: usize },
    /// Divided ([`crate::route::divide`]): the batch of the keyed records went along `stayed`
    /// (to the client's partition), the batch of the keyless ones along `moved`.
    Divided {
        stayed: Box<Route>,
        moved: Box<Route>,
    },
}

impl Route {
    /// Calls `f` on each route of a single batch: this one, or both halves of a divided one.
    pub fn for_each_mut(&mut self, f: &mut impl FnMut(&mut Route)) {
        match self {
            Route::Divided { stayed, moved } => {
                stayed.for_each_mut(f);
                moved.for_each_mut(f);
            }
            single => f(single),
        }
    }

    /// Shifts the part indexes down by one: the part before them was dropped.
    pub fn shift_down(&mut self) {
        self.for_each_mut(&mut |route| {
            if let Route::Part { part, .. } | Route::Waiting { part } = route {
                *part -= 1;
            }
        });
    }
}

/// Merges the answers of a split Produce request back into the client's partitions.
pub struct ProduceMerge {
    pub version: i16,
    pub correlation_id: i32,
    pub topics: Vec<TopicName>,
    /// The client's partitions, per topic, in its order.
    pub original: Vec<Vec<i32>>,
    pub routes: Vec<Vec<Route>>,
    pub withhold: Option<Withhold>,
}

/// The producer kroute numbers whose batches a request carried, and each entry's batch (per
/// topic, in the client's order; None for an entry kroute left alone). A success for a batch
/// is withheld while an earlier batch of its partition waits for the client's retry
/// ([`crate::route::sequence::Producer::withholds_success`]): the client gets REQUEST_TIMED_OUT
/// and its retry is answered from kroute's memory.
pub struct Withhold {
    pub owner: Arc<OwnedProducer>,
    /// (A divided entry carries two: its parts, numbered as two client batches.)
    pub batches: Vec<Vec<Vec<BatchKey>>>,
    /// Counts the successes withheld.
    pub withheld: Counter,
}

impl ProduceMerge {
    /// The merge for a request with header `head` whose entries went along `routes`.
    pub fn new(
        head: &RequestHead,
        topics: Vec<(TopicName, TopicEntry)>,
        routes: Vec<Vec<Route>>,
    ) -> Self {
        ProduceMerge {
            version: head.api_version,
            correlation_id: head.correlation_id,
            original: topics
                .iter()
                .map(|(_, t)| t.partitions.iter().map(|p| p.index).collect())
                .collect(),
            topics: topics.into_iter().map(|(name, _)| name).collect(),
            routes,
            withhold: None,
        }
    }

    /// The same merge, withholding successes as `withhold` says.
    pub fn withholding(self, withhold: Withhold) -> Self {
        ProduceMerge {
            withhold: Some(withhold),
            ..self
        }
    }
}

pub(super) fn no_answer(error: i16) -> PartitionProduceResponse {
    PartitionProduceResponse::default()
        .with_error_code(error)
        .with_base_offset(-1)
        .with_log_append_time_ms(-1)
        .with_log_start_offset(-1)
}

/// The answer of another partition, as reported for the client's: its offsets and leader
/// describe that other partition, so they are left unknown.
fn moved_answer(mut p: PartitionProduceResponse) -> PartitionProduceResponse {
    p.base_offset = -1;
    p.log_start_offset = -1;
    p.current_leader = LeaderIdAndEpoch::default();
    p
}

/// The answer for the client's entry `index` of topic `name` that went along `route`, from
/// the parts' answers (`found`, by part, topic and partition).
fn entry_answer<'a>(
    route: &Route,
    name: &'a str,
    index: i32,
    found: &mut BTreeMap<(usize, &'a str, i32), PartitionProduceResponse>,
) -> PartitionProduceResponse {
    match route {
        Route::Local { error } => no_answer(*error),
        Route::Waiting { part } => {
            let first = (*part, name, i32::MIN);
            let last = (*part, name, i32::MAX);
            let answer = found.range(first..=last).next().map(|(k, _)| *k);
            match answer.and_then(|k| found.remove(&k).map(|p| (k.2, p))) {
                Some((partition, p)) if partition != index => moved_answer(p),
                Some((_, p)) => p,
                None => no_answer(UNANSWERED),
            }
        }
        Route::Part {
            part,
            partition,
            moved,
        } => {
            // (Batches joined into one share its answer.)
            let answer = found.get(&(*part, name, *partition)).cloned();
            let p = answer.unwrap_or_else(|| no_answer(UNANSWERED));
            if *moved { moved_answer(p) } else { p }
        }
        Route::Divided { stayed, moved } => {
            let stayed = entry_answer(stayed, name, index, found);
            let moved = entry_answer(moved, name, index, found);
            divided_answer(stayed, moved)
        }
    }
}

/// The answer for a divided batch: the part that stayed, with its base offset (the offsets of
/// the client's records after its first moved one are not base + index, as with any moved
/// batch), unless only the part that moved failed: then that part's error, so the client
/// retries the batch. A plain producer's retry appends again the part that succeeded, as after
/// any answer it did not get. Errors of single records are left out: their indexes count the
/// records of one part, not the client's batch.
fn divided_answer(
    stayed: PartitionProduceResponse,
    moved: PartitionProduceResponse,
) -> PartitionProduceResponse {
    let succeeded =
        |p: &PartitionProduceResponse| matches!(p.error_code, NONE | DUPLICATE_SEQUENCE_NUMBER);
    let mut p = if succeeded(&stayed) && !succeeded(&moved) {
        moved_answer(moved)
    } else {
        stayed
    };
    p.record_errors.clear();
    p
}

impl Withhold {
    /// Turns the successes to withhold in the merged `responses` into REQUEST_TIMED_OUT; keeps
    /// the appended part of a divided batch answered with an error until the client's retry
    /// of it; and lets kroute forget a batch once its client is told it succeeded. The
    /// producer's lock is taken only if some batch of the request succeeded or was divided.
    fn apply(&self, responses: &mut [TopicProduceResponse]) {
        let mut state = None;
        for (topic, batches) in responses.iter_mut().zip(&self.batches) {
            for (p, batch) in topic.partition_responses.iter_mut().zip(batches) {
                let succeeded = matches!(p.error_code, NONE | DUPLICATE_SEQUENCE_NUMBER);
                if !succeeded && batch.len() > 1 {
                    let state = state.get_or_insert_with(|| self.owner.lock());
                    for key in batch {
                        state.sequences.owes_retry_answer(key);
                    }
                }
                if !succeeded || batch.is_empty() {
                    continue;
                }
                let state = state.get_or_insert_with(|| self.owner.lock());
                if batch
                    .iter()
                    .any(|key| state.sequences.withholds_success(key))
                {
                    self.withheld.increment(1);
                    let index = p.index;
                    *p = no_answer(REQUEST_TIMED_OUT);
                    p.index = index;
                } else {
                    for key in batch {
                        state.sequences.answered(key);
                    }
                }
            }
        }
    }
}

impl Merge for ProduceMerge {
    fn merge(self: Box<Self>, answers: Vec<Reply>) -> Bytes {
        let header_version = ApiKey::Produce.response_header_version(self.version);
        let mut throttle = 0;
        let mut endpoints: Vec<NodeEndpoint> = Vec::new();
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
                if !endpoints.iter().any(|x| x.node_id == e.node_id) {
                    endpoints.push(e.clone());
                }
            }
            for t in &response.responses {
                for p in &t.partition_responses {
                    found.insert((part, t.name.as_str(), p.index), p.clone());
                }
            }
        }
        let mut responses: Vec<TopicProduceResponse> = self
            .topics
            .iter()
            .zip(&self.original)
            .zip(&self.routes)
            .map(|((name, original), routes)| {
                let partition_responses = original
                    .iter()
                    .zip(routes)
                    .map(|(index, route)| {
                        let mut p = entry_answer(route, name.as_str(), *index, &mut found);
                        p.index = *index;
                        p
                    })
                    .collect();
                TopicProduceResponse::default()
                    .with_name(name.clone())
                    .with_partition_responses(partition_responses)
            })
            .collect();
        if let Some(withhold) = &self.withhold {
            withhold.apply(&mut responses);
        }
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
