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
//!
//! Releasing a batch takes it through the same stages as the planner ([`super::sequenced`])
//! does, from place on: [`super::place`], [`super::number`], [`super::send`]; its answers,
//! when kroute writes them, come from [`super::replies`].

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::TopicName;
use tokio::sync::oneshot;

use super::answers::Numbered;
use super::number::{self, number};
use super::place::{Place, Placement, TopicChoice};
use super::replies::{JoinedWaiter, Shape, local_answer};
use super::send::{AnswerTo, Links, Request, count_numbered};
use crate::route::Context;
use crate::route::batch::InspectBudget;
use crate::route::join;
use crate::route::producers::{OwnedProducer, ProducerState};
use crate::route::sequence::{BatchKey, code};
use crate::upstream::{PendingReply, Reply};

/// How long a batch waits at most for a partition to take it before kroute answers
/// REQUEST_TIMED_OUT (and never longer than half the request's own `timeout_ms`, see
/// [`wait_limit`]). Lanes free up within one answer of a broker, but at full load, with the
/// brokers' links saturated, an answer takes seconds: a wait this long means every lane is stuck
/// behind slow or failing brokers. Giving up early is costly: the client retries the batch only
/// after its backoff, and every later batch of that partition is answered "not now" behind it
/// (500 ms here cost 2-3% of the batches and a quarter of the throughput at full load in
/// bench/routing.sh's 16/16/4 layout).
pub const WAIT_AT_MOST: Duration = Duration::from_secs(5);

/// Batches one producer may have waiting; beyond that they are answered REQUEST_TIMED_OUT. A
/// Java producer at full load has a few hundred batches in flight (32 MiB of buffer, 5
/// requests per connection); the bound keeps a runaway client from queueing without end.
const MAX_WAITING: usize = 1024;

/// How long a batch of a request with `timeout_ms` may wait: [`WAIT_AT_MOST`], or half the time
/// the client gave the brokers to answer if that is shorter, so the client hears back before it
/// gives up on the request itself.
pub fn wait_limit(timeout_ms: i32) -> Duration {
    let half = Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0) / 2);
    WAIT_AT_MOST.min(half.max(Duration::from_millis(100)))
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
/// whose place is decided otherwise), and keeps the rest waiting. A batch placed here takes
/// the later waiting batches that can go with it into one joined batch
/// ([`crate::route::join`]). Requests that could not be queued go to `unsent`, to be dropped
/// once the producer's lock is released (dropping one records its outcome under that lock).
pub fn release(
    ctx: &Arc<dyn Context>,
    owner: &Arc<OwnedProducer>,
    state: &mut ProducerState,
    now: Instant,
    unsent: &mut Vec<PendingReply>,
) {
    if state.waiting.is_empty() {
        return;
    }
    let mut queue: Vec<Option<Waiter>> = std::mem::take(&mut state.waiting.queue)
        .into_iter()
        .map(Some)
        .collect();
    let mut keep: VecDeque<Waiter> = VecDeque::with_capacity(queue.len());
    let mut links = Links { ctx, owner, unsent };
    for i in 0..queue.len() {
        let Some(w) = queue[i].take() else { continue };
        if w.reply.is_closed() {
            // The client connection is gone: nobody waits for this batch, and it has no
            // number yet. The client sends it again on its new connection.
            continue;
        }
        let earlier_waits = keep.iter().any(|k| same_partition(&k.key, &w.key));
        match place(ctx.as_ref(), state, &w, now, earlier_waits) {
            Placement::Wait { .. } if now < w.deadline => keep.push_back(w),
            placement => settle(&mut links, state, w, placement, &mut queue[i + 1..]),
        }
    }
    // (Nothing was added meanwhile: the caller holds the producer's lock.)
    state.waiting.queue = keep;
}

/// Where waiting batch `w` goes now, with its numbers written in. It is placed on its own
/// (nothing else of its request is placed with it any more), as movable as it was found on
/// arrival; `earlier_waits` tells whether a batch of its client partition still waits before it.
fn place(
    ctx: &dyn Context,
    state: &mut ProducerState,
    w: &Waiter,
    now: Instant,
    earlier_waits: bool,
) -> Placement {
    let name = w.topic.as_str();
    let layout = ctx.cluster().topic(name);
    let principal = w.shape.principal.as_ref();
    let mut choice = TopicChoice::excluding(super::unreachable(ctx, principal, layout.as_deref()));
    let mut used = HashSet::new();
    let mut place = Place {
        ctx,
        state,
        home: w.home,
        name,
        layout: layout.as_deref(),
        used: &mut used,
        now,
        keep_off_own: false,
    };
    let mut budget = InspectBudget::per_request();
    let placement = place.entry(
        w.key.clone(),
        &w.records,
        &mut choice,
        (Some(w.movable), &mut budget),
        earlier_waits,
    );
    number(placement, state)
}

/// Sends waiting batch `w` where `placement` says, or answers it. A batch numbered fresh takes
/// along, in one joined batch, those of `later` (the batches waiting behind it) that can go
/// with it.
fn settle(
    links: &mut Links,
    state: &mut ProducerState,
    w: Waiter,
    placement: Placement,
    later: &mut [Option<Waiter>],
) {
    match placement {
        // Past its deadline (`release` keeps the others).
        Placement::Wait { .. } => {
            links.ctx.metrics().sequencing.busy.increment(1);
            answer(w, code::REQUEST_TIMED_OUT);
        }
        Placement::Local(error) => answer(w, error),
        // Only adopted producers' batches pass untouched, and those never wait.
        Placement::Untouched => answer(w, code::REQUEST_TIMED_OUT),
        // (Each waiting batch is placed with a choice of its own: nothing to join there.)
        Placement::JoinedTo {
            target, seq, key, ..
        } => {
            state
                .sequences
                .resolve(&key, target, seq, code::INVALID_RECORD);
            answer(w, code::REQUEST_TIMED_OUT);
        }
        Placement::Joined {
            node,
            target,
            members,
            records,
        } => {
            let numbered = Numbered::members(&w.topic, target, members);
            let batch = (w.topic.clone(), records);
            let shape = w.shape.clone();
            let to = AnswerTo::Joined(vec![w.into_joined()]);
            let request = Request::batch((node, target), batch, numbered, to);
            links.queue(state, &shape, request);
        }
        Placement::Numbered {
            node,
            target,
            seq,
            key,
            records,
        } => {
            let joiners = if w.movable {
                take_joiners(links.ctx.as_ref(), state, later, &w, target, seq)
            } else {
                Vec::new()
            };
            let head = (w, key, seq, records);
            if joiners.is_empty() {
                send_alone(links, state, (node, target), head);
            } else {
                send_joined(links, state, (node, target), head, joiners);
            }
        }
    }
}

/// Takes from `later` (the waiting batches after `head`, in arrival order) those that can go
/// out joined behind `head`, numbered on `target` right after it (which starts at `seq`):
/// movable, joinable (of one codec), of the same topic, epoch and client principal, in their
/// client partition's order, up to `routing.join_max_bytes` in all. Returns them with their
/// numbers.
fn take_joiners(
    ctx: &dyn Context,
    state: &mut ProducerState,
    later: &mut [Option<Waiter>],
    head: &Waiter,
    target: i32,
    seq: i32,
) -> Vec<(Waiter, i32)> {
    // The head's bytes as the client sent them: same producer and epoch as the joiners'.
    let records = &head.records;
    let limit = ctx.router().join_max_bytes;
    let sequences = &mut state.sequences;
    let compressed = ctx.router().join_compressed;
    if limit == 0 || !sequences.joins(&head.key.topic) || !join::joinable(records, compressed) {
        return Vec::new();
    }
    let mut size = records.len();
    let mut joiners = Vec::new();
    for slot in later.iter_mut() {
        let Some(c) = slot else { continue };
        let fits = c.movable
            && !c.reply.is_closed()
            && c.topic == head.topic
            && c.key.epoch == head.key.epoch
            // A joined batch goes out under the head's identity: only its principal's batches.
            && c.shape.principal == head.shape.principal
            && size + c.records.len() <= limit
            // Every record readable, timestamps within reach of the head's.
            && join::can_join(records, &c.records);
        if !fits {
            continue;
        }
        let batch_seq = seq;
        let Some(own) = sequences.join(&c.key, target, batch_seq) else {
            continue;
        };
        size += c.records.len();
        if let Some(c) = slot.take() {
            joiners.push((c, own));
        }
    }
    joiners
}

/// Sends `head` alone, renumbered (`records`, kroute's base sequence `seq` for client batch
/// `key`), on partition `target` of `node`.
fn send_alone(
    links: &mut Links,
    state: &mut ProducerState,
    (node, target): (i32, i32),
    (head, key, seq, records): (Waiter, BatchKey, i32, Bytes),
) {
    let Waiter {
        topic,
        shape,
        reply,
        home,
        ..
    } = head;
    let bytes = records.len();
    count_numbered(
        links.ctx.as_ref(),
        topic.as_str(),
        home,
        node,
        &key,
        target,
        bytes,
    );
    let numbered = vec![Numbered {
        topic: topic.clone(),
        key,
        target,
        seq,
    }];
    let to = AnswerTo::Part(reply);
    let request = Request::batch((node, target), (topic, records), numbered, to);
    links.queue(state, &shape, request);
}

/// Sends `head` and its `joiners` as one joined batch on partition `target` of `node`.
fn send_joined(
    links: &mut Links,
    state: &mut ProducerState,
    (node, target): (i32, i32),
    (head, key, seq, records): (Waiter, BatchKey, i32, Bytes),
    joiners: Vec<(Waiter, i32)>,
) {
    let mut parts: Vec<&Bytes> = Vec::with_capacity(joiners.len() + 1);
    parts.push(&records);
    parts.extend(joiners.iter().map(|(j, _)| &j.records));
    let joined = number::joined(state, key.epoch, seq, &parts);
    let topic = head.topic.clone();
    let shape = head.shape.clone();
    let mut numbered = vec![Numbered {
        topic: topic.clone(),
        key,
        target,
        seq,
    }];
    let mut sizes = vec![(head.home, records.len())];
    for (j, own) in &joiners {
        numbered.push(Numbered {
            topic: topic.clone(),
            key: j.key.clone(),
            target,
            seq: *own,
        });
        sizes.push((j.home, j.records.len()));
    }
    let (epoch, topic_key) = (head.key.epoch, head.key.topic.clone());
    let waiters: Vec<JoinedWaiter> = std::iter::once(head)
        .chain(joiners.into_iter().map(|(j, _)| j))
        .map(Waiter::into_joined)
        .collect();
    let Some(joined) = joined else {
        give_back(state, (&topic_key, target, epoch, seq), &numbered, waiters);
        return;
    };
    state
        .sequences
        .set_joined(&topic_key, target, epoch, seq, &joined);
    let ctx = links.ctx;
    let joined_behind = numbered.len() as u64 - 1;
    ctx.metrics().sequencing.joined.increment(joined_behind);
    for (n, (home, size)) in numbered.iter().zip(sizes) {
        count_numbered(
            ctx.as_ref(),
            topic.as_str(),
            home,
            node,
            &n.key,
            target,
            size,
        );
    }
    let to = AnswerTo::Joined(waiters);
    let request = Request::batch((node, target), (topic, joined), numbered, to);
    links.queue(state, &shape, request);
}

/// Takes back the numbers of a joined batch that could not be built (`topic_key`, on
/// `target`, client epoch `epoch`, from `seq`) and answers each of its batches "not now".
/// Cannot happen for batches checked one by one against the head; if it did, nothing was sent:
/// as after a refusal of a joined batch, each is retried alone.
fn give_back(
    state: &mut ProducerState,
    (topic_key, target, epoch, seq): (&Bytes, i32, i16, i32),
    numbered: &[Numbered],
    waiters: Vec<JoinedWaiter>,
) {
    let sequences = &mut state.sequences;
    sequences.set_joined(topic_key, target, epoch, seq, &Bytes::new());
    for n in numbered {
        sequences.resolve(&n.key, target, n.seq, code::INVALID_RECORD);
    }
    for w in waiters {
        let _ = w.reply.send(Ok(local_answer(
            &w.shape,
            &w.topic,
            w.partition,
            code::REQUEST_TIMED_OUT,
        )));
    }
}

impl Waiter {
    fn into_joined(self) -> JoinedWaiter {
        JoinedWaiter {
            shape: self.shape,
            topic: self.topic,
            partition: self.key.partition,
            reply: self.reply,
        }
    }
}

/// Runs [`release`] at `deadline`, so a batch nothing else releases is answered in time.
pub fn release_at(ctx: Arc<dyn Context>, owner: Arc<OwnedProducer>, deadline: Instant) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return; // (unit tests without a runtime)
    };
    runtime.spawn(async move {
        tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)).await;
        let mut unsent = Vec::new();
        {
            let mut state = owner.lock();
            release(&ctx, &owner, &mut state, Instant::now(), &mut unsent);
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

#[cfg(test)]
mod wait_limit_tests {
    use super::*;

    #[test]
    fn waits_at_most_five_seconds_or_half_the_requests_timeout() {
        assert_eq!(wait_limit(30_000), WAIT_AT_MOST);
        assert_eq!(wait_limit(4_000), Duration::from_secs(2));
        assert_eq!(wait_limit(0), Duration::from_millis(100));
        assert_eq!(wait_limit(-1), Duration::from_millis(100));
    }
}
