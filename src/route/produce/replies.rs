//! Answers kroute writes itself for one batch of a client's request that waited in kroute.
//!
//! A waiting batch is a part of its client request of its own ([`super::waiting`]), so its
//! answer must look like a broker's answer to a request naming that one partition: the merge
//! ([`super::merge`]) reads it like any other part's. Such an answer is made up either from
//! nothing (kroute gave up on the batch, or decided it without sending) or from the broker's
//! answer to the joined batch it went out in, whose offsets belong to another batch.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ApiKey, ProduceResponse, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable};
use tokio::sync::oneshot;

use super::merge::no_answer;
use crate::protocol::header::split_response;
use crate::security::principal::Principal;
use crate::upstream::{Reply, UpstreamGone};

/// The client request a batch came in: the requests kroute sends for it upstream, and the
/// answers kroute writes for it, are shaped like this one.
#[derive(Clone)]
pub struct Shape {
    /// The client's request header bytes (API key, version, correlation id, client id).
    pub header: Bytes,
    pub version: i16,
    pub correlation_id: i32,
    pub acks: i16,
    pub timeout_ms: i32,
    /// Who the client authenticated as, if kroute knows: the request's batches go out on this
    /// principal's connections ([`crate::route::producers`]).
    pub principal: Option<Arc<Principal>>,
}

/// A waiting batch that went out in a joined batch: what its answer needs.
pub struct JoinedWaiter {
    pub shape: Shape,
    pub topic: TopicName,
    /// The client's partition.
    pub partition: i32,
    pub reply: oneshot::Sender<Reply>,
}

/// Answers each batch of a joined batch from the broker's answer to it (`version`), as its own
/// request expects: the joined batch's result, with offsets unknown (they are the first
/// batch's), or no answer if none came.
pub fn answer_joined(answer: &Reply, version: i16, waiters: Vec<JoinedWaiter>) {
    let header_version = ApiKey::Produce.response_header_version(version);
    let result = answer.as_ref().ok().and_then(|payload| {
        let (_, mut body) = split_response(payload, header_version).ok()?;
        let response = ProduceResponse::decode(&mut body, version).ok()?;
        let p = response
            .responses
            .into_iter()
            .next()?
            .partition_responses
            .into_iter()
            .next()?;
        Some(p)
    });
    for w in waiters {
        let reply = match &result {
            Some(p) => {
                let mut mine = no_answer(p.error_code);
                mine.index = p.index;
                mine.error_message = p.error_message.clone();
                mine.log_append_time_ms = p.log_append_time_ms;
                Ok(partition_answer(&w.shape, &w.topic, mine))
            }
            None => Err(UpstreamGone::Unanswered),
        };
        let _ = w.reply.send(reply);
    }
}

/// A Produce response (with its header) naming one partition, answered with `error`.
pub fn local_answer(shape: &Shape, topic: &TopicName, partition: i32, error: i16) -> Bytes {
    let mut p = no_answer(error);
    p.index = partition;
    partition_answer(shape, topic, p)
}

/// A Produce response (with its header) for a request shaped `shape`, naming one partition.
fn partition_answer(shape: &Shape, topic: &TopicName, p: PartitionProduceResponse) -> Bytes {
    let header_version = ApiKey::Produce.response_header_version(shape.version);
    let response = ProduceResponse::default().with_responses(vec![
        TopicProduceResponse::default()
            .with_name(topic.clone())
            .with_partition_responses(vec![p]),
    ]);
    let mut out = BytesMut::with_capacity(64);
    out.put_i32(shape.correlation_id);
    if header_version >= 1 {
        out.put_u8(0); // no tagged fields in the response header
    }
    // A response this simple encodes in every version a request was decoded in; if not, the
    // merge finds no answer for the partition and reports it retriable.
    let _ = response.encode(&mut out, shape.version);
    out.freeze()
}
