//! Batches of an owned producer that wait in kroute until a partition's numbering takes them.
//!
//! A batch cannot always be numbered the moment it arrives: a lane's first batch goes alone
//! until it is acknowledged, a lane holds at most four unresolved batches, and a client's
//! batches of one partition are numbered in the client's order ([`crate::route::sequence`]).
//! Answering such a batch REQUEST_TIMED_OUT makes the client retry it only after its retry
//! backoff (100 ms and up for the Java producer), and every later batch of that partition
//! waits behind it: a new producer's first second cost several hundred milliseconds of p99 that
//! way. So the batch *waits* here instead, in arrival order, and is placed as soon as an answer
//! on one of the producer's connections frees a lane (the answer hook calls [`release`]), at
//! the latest by its deadline, after which it is answered REQUEST_TIMED_OUT as before.
//!
//! A waiting batch is its own part of the client's request: its answer arrives on the part's
//! receiver like any other part's, from the broker once placed or from kroute when it gives up.
//! It has no number yet, so the broker has seen nothing of it and dropping it loses nothing.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::produce_response::TopicProduceResponse;
use kafka_protocol::messages::{ApiKey, ProduceResponse, TopicName};
use kafka_protocol::protocol::Encodable;
use tokio::sync::oneshot;

use super::merge::no_answer;
use super::place::{Place, Placement, TopicChoice};
use super::sequenced::queue_waited;
use crate::proxy::Proxy;
use crate::route::batch::InspectBudget;
use crate::route::producers::{OwnedProducer, ProducerState};
use crate::route::sequence::{BatchKey, code};
use crate::upstream::{PendingReply, Reply};

/// How long a batch waits for a partition to take it before kroute answers REQUEST_TIMED_OUT.
/// Lanes free up within one answer of a broker; a wait this long means every lane is stuck
/// behind slow or failing brokers, and the client's own retry is then as good as waiting.
pub const WAIT_AT_MOST: Duration = Duration::from_millis(500);

/// Batches one producer may have waiting; beyond that they are answered REQUEST_TIMED_OUT.
const MAX_WAITING: usize = 256;

/// The request a waiting batch came in: what its own request upstream is built from.
#[derive(Clone)]
pub struct Shape {
    /// The client's request header bytes (API key, version, correlation id, client id).
    pub header: Bytes,
    pub version: i16,
    pub correlation_id: i32,
    pub acks: i16,
    pub timeout_ms: i32,
}

/// One batch waiting to be numbered.
pub struct Waiter {
    pub key: BatchKey,
    pub topic: TopicName,
    pub records: Bytes,
    /// Whether the batch may move (keyless, readable), as inspected when it arrived.
    pub movable: bool,
    /// The broker of the client connection it came in on.
    pub home: i32,
    pub shape: Shape,
    pub deadline: Instant,
    /// Where its answer goes: the client request's part for this batch.
    pub reply: oneshot::Sender<Reply>,
}

/// The waiting batches of one producer, in arrival order.
#[derive(Default)]
pub struct Waiting {
    queue: VecDeque<Waiter>,
}

impl Waiting {
    /// Whether a batch of the same client partition and epoch as `key` is waiting (a later
    /// batch of that partition must then wait behind it, to be numbered in the client's order).
    pub fn holds_partition_of(&self, key: &BatchKey) -> bool {
        self.queue.iter().any(|w| same_partition(&w.key, key))
    }

    pub fn is_full(&self) -> bool {
        self.queue.len() >= MAX_WAITING
    }

    pub fn push(&mut self, waiter: Waiter) {
        self.queue.push_back(waiter);
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

fn same_partition(a: &BatchKey, b: &BatchKey) -> bool {
    a.topic == b.topic && a.partition == b.partition && a.epoch == b.epoch
}

/// Places every waiting batch that can be placed now, answers those past their deadline (or
/// whose place is decided otherwise), and keeps the rest waiting. Requests that could not be
/// queued go to `unsent`, to be dropped once the producer's lock is released (dropping one
/// records its outcome under that lock).
pub fn release(
    proxy: &Arc<Proxy>,
    owner: &Arc<OwnedProducer>,
    state: &mut ProducerState,
    now: Instant,
    unsent: &mut Vec<PendingReply>,
) {
    if state.waiting.is_empty() {
        return;
    }
    let counters = &proxy.metrics.sequencing;
    let queue = std::mem::take(&mut state.waiting.queue);
    let mut keep: VecDeque<Waiter> = VecDeque::with_capacity(queue.len());
    for w in queue {
        if w.reply.is_closed() {
            // The client connection is gone: nobody waits for this batch, and it has no
            // number yet. The client sends it again on its new connection.
            continue;
        }
        let earlier_waits = keep.iter().any(|k| same_partition(&k.key, &w.key));
        let name = w.topic.as_str().to_owned();
        let layout = proxy.cluster.topic(&name);
        let mut used = HashSet::new();
        let mut place = Place {
            proxy,
            state,
            home: w.home,
            name: &name,
            layout: layout.as_deref(),
            used: &mut used,
            now,
        };
        let mut budget = InspectBudget::per_request();
        let placement = place.entry(
            w.key.clone(),
            &w.records,
            &mut TopicChoice::default(),
            (Some(w.movable), &mut budget),
            earlier_waits,
        );
        match placement.renumbered(&mut state.sequences) {
            Placement::Wait { .. } if now < w.deadline => keep.push_back(w),
            Placement::Wait { .. } => {
                counters.busy.increment(1);
                answer(w, code::REQUEST_TIMED_OUT);
            }
            Placement::Local(error) => answer(w, error),
            // Only adopted producers' batches pass untouched, and those never wait.
            Placement::Untouched => answer(w, code::REQUEST_TIMED_OUT),
            Placement::Numbered {
                node,
                target,
                seq,
                key,
                records,
            } => {
                let Waiter {
                    topic,
                    shape,
                    reply,
                    home,
                    ..
                } = w;
                queue_waited(
                    proxy,
                    owner,
                    state,
                    &shape,
                    (home, node, target, key, seq),
                    (topic, records),
                    reply,
                    unsent,
                );
            }
        }
    }
    // (Nothing was added meanwhile: the caller holds the producer's lock.)
    state.waiting.queue = keep;
}

/// Runs [`release`] at `deadline`, so a batch nothing else releases is answered in time.
pub fn release_at(proxy: Arc<Proxy>, owner: Arc<OwnedProducer>, deadline: Instant) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return; // (unit tests without a runtime)
    };
    runtime.spawn(async move {
        tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)).await;
        let mut unsent = Vec::new();
        {
            let mut state = owner.lock();
            release(&proxy, &owner, &mut state, Instant::now(), &mut unsent);
        }
        drop(unsent);
    });
}

/// Answers a waiting batch from kroute, as its broker would with `error`.
fn answer(w: Waiter, error: i16) {
    let _ = w
        .reply
        .send(Ok(local_answer(&w.shape, &w.topic, w.key.partition, error)));
}

/// A Produce response (with its header) naming one partition, answered with `error`.
pub fn local_answer(shape: &Shape, topic: &TopicName, partition: i32, error: i16) -> Bytes {
    let header_version = ApiKey::Produce.response_header_version(shape.version);
    let mut p = no_answer(error);
    p.index = partition;
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
