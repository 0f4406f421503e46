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
//! Each partition entry goes one way through these stages, none of which calls back into an
//! earlier one:
//! 1. inspect ([`Planner::inspect`]): left alone, answered by kroute (the producer's origin is
//!    not settled yet, or an adopted producer's old epoch), or a batch of the producer to place;
//! 2. place ([`super::place`]): a lane, a join behind a batch of this request, or a wait;
//! 3. number ([`super::number`], [`super::request_joins`] for joins within the request):
//!    kroute's epoch and base sequence written into the batch;
//! 4. queue ([`super::send`]): the parts, on the producer's own connections
//!    ([`crate::route::producers`]), all under the producer's lock and in numbering order, so
//!    each partition receives its batches in that order;
//! 5. record the answers ([`super::answers`]); the answer hook then releases the producer's
//!    waiting batches ([`super::waiting`], which takes them through 2-4 again);
//! 6. merge the parts' answers for the client ([`super::merge`]).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use kafka_protocol::messages::TopicName;
use kafka_protocol::messages::produce_request::TopicProduceData;
use tokio::sync::oneshot;

use super::answers::Numbered;
use super::division::{Division, division};
use super::merge::{ProduceMerge, Route, Withhold};
use super::number::number;
use super::place::{Place, Placement, TopicChoice};
use super::replies::Shape;
use super::request_joins::PlanJoin;
use super::send::{AnswerTo, Links, Request, count_numbered, destination_without};
use super::waiting::{Waiter, release_at, wait_limit};
use super::{add_entry, unreachable};
use crate::cluster::TopicLayout;
use crate::protocol::header::RequestHead;
use crate::protocol::produce::{PartitionEntry, TopicEntry};
use crate::route::Context;
use crate::route::batch::{InspectBudget, KeepReason, sequenced};
use crate::route::producers::{LinkKey, Origin, OwnedProducer, ProducerState};
use crate::route::sequence::{BatchKey, code};
use crate::route::{Merge, Part, Plan, Split};
use crate::security::principal::Principal;
use crate::upstream::{PendingReply, Reply};

/// The producer whose batches fill this request, with the epoch of its first batch: the
/// producer of the first idempotent batch in a routed topic, owned, or tracked from now on if
/// kroute did not see it start ([`crate::route::producers`]). (acks=0 never comes from an
/// idempotent producer; such batches are left alone.)
pub(super) fn owner(
    ctx: &dyn Context,
    acks: i16,
    topics: &[(TopicName, TopicEntry)],
) -> Option<(i64, i16, Arc<OwnedProducer>)> {
    let routing = &ctx.config().routing;
    if acks == 0 || !routing.routes_idempotent() {
        return None;
    }
    let first = topics
        .iter()
        .filter(|(name, _)| routing.routes_topic(name.as_str()))
        .flat_map(|(_, t)| &t.partitions)
        .find_map(|p| sequenced(p.records.as_ref()?))?;
    let producers = &ctx.router().producers;
    let now = Instant::now();
    let owned = producers
        .get(first.producer_id)
        .or_else(|| producers.unresolved(first.producer_id, now))?;
    Some((first.producer_id, first.epoch, owned))
}

/// Settles the origin of a producer kroute did not see start, once kroute knows what the
/// brokers hold ([`crate::route::recovery`]).
fn resolve(
    ctx: &dyn Context,
    state: &mut ProducerState,
    epoch: i16,
    producer_id: i64,
    now: Instant,
) {
    if state.origin != Origin::Unresolved {
        return;
    }
    if let Some(origin) = ctx.router().recovery.origin(producer_id, epoch, now) {
        if matches!(origin, Origin::Adopted { .. }) {
            ctx.metrics().sequencing.adopted.increment(1);
        }
        state.origin = origin;
    }
}

/// Plans the request of owned producer `producer_id`, which came in on the connection to
/// broker `home` of a client authenticated as `principal` (if any); `header` is the request
/// header bytes.
pub(super) fn plan(
    ctx: &Arc<dyn Context>,
    (home, principal): (i32, Option<&Arc<Principal>>),
    head: &RequestHead,
    header: Bytes,
    (acks, timeout_ms): (i16, i32),
    topics: Vec<(TopicName, TopicEntry)>,
    (producer_id, first_epoch, owner): (i64, i16, Arc<OwnedProducer>),
) -> Plan {
    let now = Instant::now();
    let shape = Shape {
        header,
        version: head.api_version,
        correlation_id: head.correlation_id,
        acks,
        timeout_ms,
        principal: principal.cloned(),
    };
    let mut state = owner.lock();
    state.touch(now);
    resolve(ctx.as_ref(), &mut state, first_epoch, producer_id, now);
    let mut planner = Planner::new(ctx, home, producer_id, shape, now);
    let (mut routes, batches): (Vec<Vec<Route>>, Vec<Vec<Vec<BatchKey>>>) = topics
        .iter()
        .map(|(name, topic)| planner.topic(&mut state, name, topic))
        .unzip();
    // Requests that could not be queued: dropped only once the producer's lock is released,
    // because dropping one records its batches' outcome under that lock.
    let mut unsent: Vec<PendingReply> = Vec::new();
    let parts = planner.queue(&owner, &mut state, &mut routes, &mut unsent);
    drop(state);
    drop(unsent);
    let merge = ProduceMerge::new(head, topics, routes).withholding(Withhold {
        owner,
        batches,
        withheld: ctx.metrics().sequencing.success_withheld.clone(),
    });
    Plan::Split(Split {
        parts,
        merge: Some(Box::new(merge) as Box<dyn Merge>),
    })
}

/// One request's plan while it is built, under the producer's lock: the parts sent now, and
/// the batches that wait.
struct Planner<'a> {
    ctx: &'a Arc<dyn Context>,
    /// The broker of the client connection the request came in on.
    home: i32,
    producer_id: i64,
    shape: Shape,
    now: Instant,
    budget: InspectBudget,
    /// The parts sent now: each a request on one of the producer's connections.
    destinations: Vec<(LinkKey, Vec<TopicProduceData>)>,
    /// The renumbered batches of each part, to record its answer.
    numbered_in: Vec<Vec<Numbered>>,
    /// The answers of batches that wait in kroute, in the order of their `Route::Waiting`.
    waiting: Vec<oneshot::Receiver<Reply>>,
}

/// One topic of the request while it is planned.
struct TopicPlan<'t> {
    name: &'t TopicName,
    routed: bool,
    layout: Option<Arc<TopicLayout>>,
    /// Partitions this request names: a Produce request may name a partition only once.
    used: HashSet<i32>,
    choice: TopicChoice,
    /// Per head of `choice` (in its order): the batches going out joined with it.
    joins: Vec<PlanJoin>,
    /// Where each entry went so far, in the client's order.
    routes: Vec<Route>,
    /// The batches of the producer each entry carried that kroute numbers (two for a divided
    /// entry).
    batches: Vec<Vec<BatchKey>>,
}

/// What kroute does with one partition entry, before anything is decided about where it goes.
enum Inspected<'e> {
    /// Passed on byte-identical.
    Untouched,
    /// Answered by kroute with this error code, not sent.
    Local(i16),
    /// A batch of the producer, to place and number.
    Batch(BatchKey, &'e Bytes),
}

impl<'a> Planner<'a> {
    fn new(
        ctx: &'a Arc<dyn Context>,
        home: i32,
        producer_id: i64,
        shape: Shape,
        now: Instant,
    ) -> Self {
        Planner {
            ctx,
            home,
            producer_id,
            shape,
            now,
            budget: InspectBudget::per_request(),
            destinations: Vec::new(),
            numbered_in: Vec::new(),
            waiting: Vec::new(),
        }
    }

    /// Plans the entries of one topic, in the client's order; returns their routes and
    /// batches ([`TopicPlan::batches`]). Batches
    /// joined within the request are built once every entry of the topic is placed, because
    /// a later entry may still join an earlier one.
    fn topic(
        &mut self,
        state: &mut ProducerState,
        name: &TopicName,
        topic: &TopicEntry,
    ) -> (Vec<Route>, Vec<Vec<BatchKey>>) {
        let routed = self.ctx.config().routing.routes_topic(name.as_str());
        let layout = routed
            .then(|| self.ctx.cluster().topic(name.as_str()))
            .flatten();
        let principal = self.shape.principal.as_ref();
        let unreachable = unreachable(self.ctx.as_ref(), principal, layout.as_deref());
        let mut t = TopicPlan {
            name,
            routed,
            layout,
            used: topic.partitions.iter().map(|p| p.index).collect(),
            choice: TopicChoice::excluding(unreachable),
            joins: Vec::new(),
            routes: Vec::with_capacity(topic.partitions.len()),
            batches: Vec::with_capacity(topic.partitions.len()),
        };
        for entry in &topic.partitions {
            let route = self.entry(state, &mut t, &topic.name, entry);
            t.routes.push(route);
        }
        for join in t.joins.into_iter().filter(|j| j.records.len() > 1) {
            let numbered = &mut self.numbered_in[join.part];
            let parts = (&mut self.destinations[..], numbered);
            join.finish(self.ctx.as_ref(), state, name, parts, &mut t.routes);
        }
        (t.routes, t.batches)
    }

    /// Plans one partition entry of topic `topic_key` through the stages, up to its part.
    fn entry(
        &mut self,
        state: &mut ProducerState,
        t: &mut TopicPlan,
        topic_key: &Bytes,
        entry: &PartitionEntry,
    ) -> Route {
        let (key, records) = match self.inspect(state, t.routed, topic_key, entry) {
            Inspected::Batch(key, records) => (key, records),
            Inspected::Untouched => {
                t.batches.push(Vec::new());
                return self.route(t, entry, Placement::Untouched);
            }
            Inspected::Local(error) => {
                t.batches.push(Vec::new());
                return Route::Local { error };
            }
        };
        let division = match &t.layout {
            Some(_) => {
                let home = self.home;
                let metrics = &self.ctx.metrics().routing;
                let kept = |reason, bytes| metrics.keep(reason, home, bytes);
                division(&state.sequences, &key, records, &mut self.budget, kept)
            }
            None => Division::Whole { movable: None },
        };
        match division {
            Division::Whole { movable } => {
                t.batches.push(vec![key.clone()]);
                self.batch(state, t, entry, (key, records), (movable, false))
            }
            Division::Parts { keyed, keyless } => {
                self.ctx.metrics().sequencing.divided.increment(1);
                t.batches.push(vec![keyed.0.clone(), keyless.0.clone()]);
                let stayed = self.batch(state, t, entry, (keyed.0, &keyed.1), (Some(false), false));
                let moved =
                    self.batch(state, t, entry, (keyless.0, &keyless.1), (Some(true), true));
                Route::Divided {
                    stayed: Box::new(stayed),
                    moved: Box::new(moved),
                }
            }
            Division::NotNow => {
                t.batches.push(Vec::new());
                self.ctx.metrics().sequencing.busy.increment(1);
                Route::Local {
                    error: code::REQUEST_TIMED_OUT,
                }
            }
        }
    }

    /// Places one batch of the producer (a client batch, or a part of a divided one), numbers
    /// it and puts it in its part, or leaves it waiting. `movable` if known; `keep_off_own`
    /// for a divided batch's keyless part, which does not join its keyed part's partition.
    fn batch(
        &mut self,
        state: &mut ProducerState,
        t: &mut TopicPlan,
        entry: &PartitionEntry,
        (key, records): (BatchKey, &Bytes),
        (movable, keep_off_own): (Option<bool>, bool),
    ) -> Route {
        match self.place(state, t, key.clone(), records, (movable, keep_off_own)) {
            Placement::Wait { movable } => self.wait(state, t.name, key, records, movable),
            placement => self.route(t, entry, placement),
        }
    }

    /// Whose batch `entry` is and what kroute knows of that producer decide whether kroute
    /// numbers it: a batch of another producer, or one kroute cannot read, stays as it is.
    fn inspect<'e>(
        &self,
        state: &ProducerState,
        routed: bool,
        topic_key: &Bytes,
        entry: &'e PartitionEntry,
    ) -> Inspected<'e> {
        let records = entry.records.as_ref();
        let numbering = records
            .filter(|_| routed)
            .and_then(sequenced)
            .filter(|s| s.producer_id == self.producer_id);
        let bytes = records.map_or(0, |r| r.len());
        let kept = |reason| self.ctx.metrics().routing.keep(reason, self.home, bytes);
        match (records, numbering, state.origin) {
            // Not known yet what the brokers hold for it: the client retries.
            (Some(_), Some(_), Origin::Unresolved) => Inspected::Local(code::REQUEST_TIMED_OUT),
            // An adopted producer: its old epoch is refused, newer ones pass untouched.
            (Some(_), Some(s), Origin::Adopted { passes_from }) if s.epoch < passes_from => {
                Inspected::Local(code::OUT_OF_ORDER_SEQUENCE_NUMBER)
            }
            (Some(_), Some(_), Origin::Adopted { .. }) => {
                kept(KeepReason::Idempotent);
                Inspected::Untouched
            }
            (Some(records), Some(s), Origin::Numbered { .. }) => {
                let key = BatchKey {
                    topic: topic_key.clone(),
                    partition: entry.index,
                    epoch: s.epoch,
                    base: s.base,
                    records: s.records,
                    content: s.content,
                };
                Inspected::Batch(key, records)
            }
            _ => {
                if routed {
                    kept(KeepReason::Malformed);
                }
                Inspected::Untouched
            }
        }
    }

    /// Where batch `key` goes ([`super::place`]), with its numbers written in.
    fn place(
        &mut self,
        state: &mut ProducerState,
        t: &mut TopicPlan,
        key: BatchKey,
        records: &Bytes,
        (movable, keep_off_own): (Option<bool>, bool),
    ) -> Placement {
        let earlier_waits = state.waiting.holds_partition_of(&key);
        let mut place = Place {
            ctx: self.ctx.as_ref(),
            state,
            home: self.home,
            name: t.name.as_str(),
            layout: t.layout.as_deref(),
            used: &mut t.used,
            now: self.now,
            keep_off_own,
        };
        let movable = (movable, &mut self.budget);
        let placement = place.entry(key, records, &mut t.choice, movable, earlier_waits);
        number(placement, state)
    }

    /// Leaves a batch no lane takes now waiting in kroute, as a part of the request of its own
    /// (answered when it is sent, or given up on); REQUEST_TIMED_OUT at once if too many wait.
    fn wait(
        &mut self,
        state: &mut ProducerState,
        topic: &TopicName,
        key: BatchKey,
        records: &Bytes,
        movable: bool,
    ) -> Route {
        if state.waiting.is_full() {
            self.ctx.metrics().sequencing.busy.increment(1);
            return Route::Local {
                error: code::REQUEST_TIMED_OUT,
            };
        }
        let (reply, answer) = oneshot::channel();
        state.waiting.push(Waiter {
            key,
            topic: topic.clone(),
            records: records.clone(),
            movable,
            home: self.home,
            shape: self.shape.clone(),
            deadline: self.now + wait_limit(self.shape.timeout_ms),
            reply,
        });
        self.ctx.metrics().sequencing.waited.increment(1);
        self.waiting.push(answer);
        Route::Waiting {
            part: self.waiting.len() - 1,
        }
    }

    /// Puts a placed and numbered `entry` in its part (or answers it); returns its route.
    fn route(&mut self, t: &mut TopicPlan, entry: &PartitionEntry, placement: Placement) -> Route {
        match placement {
            Placement::Local(error) => Route::Local { error },
            Placement::Untouched => {
                let records = entry.records.clone();
                self.send_now(t, (self.home, entry.index), records, Vec::new(), false)
            }
            // A joined batch's offsets are the first member's: reported unknown for each.
            Placement::Joined {
                node,
                target,
                members,
                records,
            } => {
                let numbered = Numbered::members(t.name, target, members);
                self.send_now(t, (node, target), Some(records), numbered, true)
            }
            Placement::Numbered {
                node,
                target,
                seq,
                key,
                records,
            } => self.numbered(t, entry.index, (node, target, seq), key, records),
            Placement::JoinedTo {
                head,
                node,
                target,
                seq,
                key,
                records,
            } => self.join_behind(t, head, (node, target, seq), key, records),
            // (`entry` routes waiting batches before they get here.)
            Placement::Wait { .. } => Route::Local {
                error: code::REQUEST_TIMED_OUT,
            },
        }
    }

    /// Puts a batch numbered `seq` on partition `target` of `node` in its part. A head that
    /// later batches of the request may join is recorded with it.
    fn numbered(
        &mut self,
        t: &mut TopicPlan,
        client_partition: i32,
        (node, target, seq): (i32, i32, i32),
        key: BatchKey,
        records: Bytes,
    ) -> Route {
        let bytes = records.len();
        count_numbered(
            self.ctx.as_ref(),
            t.name.as_str(),
            self.home,
            node,
            &key,
            target,
            bytes,
        );
        if t.choice.heads.len() > t.joins.len() {
            // A head others may join: where it goes is known below.
            t.joins.push(PlanJoin {
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
            topic: t.name.clone(),
            key,
            target,
            seq,
        };
        let moved = target != client_partition;
        self.send_now(t, (node, target), Some(records), vec![numbered], moved)
    }

    /// Adds a batch numbered `seq` right behind head `head` of this request to the head's
    /// joined batch, built once the topic is placed ([`PlanJoin::finish`]).
    fn join_behind(
        &mut self,
        t: &mut TopicPlan,
        head: usize,
        (node, target, seq): (i32, i32, i32),
        key: BatchKey,
        records: Bytes,
    ) -> Route {
        let Some(join) = t.joins.get_mut(head) else {
            // (Every head of the choice is recorded when it is numbered.)
            return Route::Local {
                error: code::REQUEST_TIMED_OUT,
            };
        };
        let bytes = records.len();
        count_numbered(
            self.ctx.as_ref(),
            t.name.as_str(),
            self.home,
            node,
            &key,
            target,
            bytes,
        );
        join.records.push(records);
        self.numbered_in[join.part].push(Numbered {
            topic: t.name.clone(),
            key,
            target,
            seq,
        });
        Route::Part {
            part: join.part,
            partition: target,
            moved: true,
        }
    }

    /// Puts `records` for `partition` of broker `node` in the part for that connection, with
    /// the client batches `numbered` they stand for; returns the entry's route.
    fn send_now(
        &mut self,
        t: &mut TopicPlan,
        (node, partition): (i32, i32),
        records: Option<Bytes>,
        numbered: Vec<Numbered>,
        moved: bool,
    ) -> Route {
        let link = LinkKey::new(node, partition);
        let part = destination_without(&mut self.destinations, link, t.name, partition);
        add_entry(&mut self.destinations[part].1, t.name, partition, records);
        let parts = self.numbered_in.len().max(part + 1);
        self.numbered_in.resize_with(parts, Vec::new);
        self.numbered_in[part].extend(numbered);
        // A head just numbered: its joined batch replaces this entry, in this part.
        if let Some(join) = t.joins.last_mut().filter(|j| j.part == usize::MAX) {
            join.part = part;
            join.route = t.routes.len();
        }
        Route::Part {
            part,
            partition,
            moved,
        }
    }

    /// Queues the parts sent now on the producer's connections, in the order they were
    /// numbered, and adds the waiting batches' parts after them (their routes shifted to
    /// match). `state` is still locked: `unsent` must outlive that lock.
    fn queue(
        self,
        owner: &Arc<OwnedProducer>,
        state: &mut ProducerState,
        routes: &mut [Vec<Route>],
        unsent: &mut Vec<PendingReply>,
    ) -> Vec<Part> {
        // Waiting batches' parts come after the parts sent now.
        let sent_now = self.destinations.len();
        for route in routes.iter_mut().flatten() {
            route.for_each_mut(&mut |route| {
                if let Route::Waiting { part } = route {
                    *part += sent_now;
                }
            });
        }
        let mut parts = Vec::with_capacity(sent_now + self.waiting.len());
        let mut numbered_in = self.numbered_in;
        numbered_in.resize_with(sent_now, Vec::new);
        let mut links = Links {
            ctx: self.ctx,
            owner,
            unsent,
        };
        for ((link, topic_data), numbered) in self.destinations.into_iter().zip(numbered_in) {
            let (reply, sent) = oneshot::channel();
            let request = Request {
                link,
                topic_data,
                numbered,
                to: AnswerTo::Part(reply),
            };
            let frame = links.queue(state, &self.shape, request);
            parts.push(Part {
                node_id: link.node_id,
                frame,
                sent: Some(sent),
            });
        }
        if !self.waiting.is_empty() {
            let deadline = self.now + wait_limit(self.shape.timeout_ms);
            release_at(self.ctx.clone(), owner.clone(), deadline);
        }
        for answer in self.waiting {
            parts.push(Part {
                node_id: self.home,
                frame: Bytes::new(),
                sent: Some(answer),
            });
        }
        parts
    }
}
