//! Where one batch of an owned idempotent producer goes, and which numbers its lane hands out.
//!
//! A client's retry goes where its first attempt went ([`crate::route::sequence::Lookup`]); a
//! fresh batch goes, if it may move, to the strategy's broker for its topic (the client's
//! partition if that broker leads it, else a partition of that broker whose lane takes it now,
//! else the next broker), and otherwise stays on its partition. With no lane to take it, it
//! waits ([`super::waiting`]). Placing only decides and takes numbers from the lane's state;
//! the batch's bytes are rewritten afterwards ([`super::number`]), and nothing here sends
//! anything, so the planner and the release of waiting batches place alike.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::Bytes;
use tracing::debug;

use super::PARTITION_CURSOR;
use crate::cluster::TopicLayout;
use crate::route::Context;
use crate::route::batch::{InspectBudget, KeepReason, inspect};
use crate::route::join;
use crate::route::producers::ProducerState;
use crate::route::sequence::{BatchKey, Joined, Lookup, code};

/// Where one partition entry goes.
pub(super) enum Placement {
    /// Byte-identical, to the client's partition on the connection's broker.
    Untouched,
    /// Numbered from `seq` on partition `target`, led by `node` (the numbers are written into
    /// `records` by [`super::number`]).
    Numbered {
        node: i32,
        target: i32,
        seq: i32,
        key: BatchKey,
        records: Bytes,
    },
    /// A joined batch resent whole ([`crate::route::join`]): `records` on partition `target`
    /// of `node`, answering for all its `members` (client batch and its own number).
    Joined {
        node: i32,
        target: i32,
        members: Vec<(BatchKey, i32)>,
        records: Bytes,
    },
    /// Numbered `seq` on partition `target` of `node` right behind head `head` of this request
    /// ([`TopicChoice::heads`]), to go out in one batch with it.
    JoinedTo {
        head: usize,
        node: i32,
        target: i32,
        seq: i32,
        key: BatchKey,
        records: Bytes,
    },
    /// Answered by kroute with this error code, not sent.
    Local(i16),
    /// No partition can number it now: it waits in kroute ([`super::waiting`]).
    Wait { movable: bool },
}

/// The broker chosen for the movable batches of one topic in this request, as in
/// [`super::plan`]: one broker per request keeps requests to few parts.
#[derive(Default)]
pub(super) struct TopicChoice {
    broker: Option<i32>,
    exhausted: Vec<i32>,
    /// Brokers never chosen: the client's principal has no connection there
    /// ([`super::unreachable`]).
    unreachable: Vec<i32>,
    /// Set once every broker was passed over at the spill depth: lanes are then filled up to
    /// what their numbering takes.
    deep: bool,
    /// The joinable batches of this request numbered fresh on a lane: once the chosen
    /// broker has no partition left for this request, later batches join these.
    pub heads: Vec<Head>,
}

impl TopicChoice {
    /// A choice that never picks the brokers in `unreachable`.
    pub fn excluding(unreachable: Vec<i32>) -> Self {
        TopicChoice {
            exhausted: unreachable.clone(),
            unreachable,
            ..TopicChoice::default()
        }
    }
}

/// A batch of this request that others may join.
pub(super) struct Head {
    pub node: i32,
    pub target: i32,
    pub seq: i32,
    /// Its records (renumbered or not: only their framing matters here).
    pub records: Bytes,
    /// Bytes of it and of the batches joined to it so far.
    pub bytes: usize,
}

/// Where a movable batch goes.
enum Pick {
    /// Fresh, on partition `.1` of broker `.0`.
    Lane(i32, i32),
    /// Joined to head `.0` of this request.
    Join(usize),
}

/// What placing one entry needs to see.
pub(super) struct Place<'a, 'b> {
    pub ctx: &'a dyn Context,
    pub state: &'a mut ProducerState,
    pub home: i32,
    pub name: &'a str,
    pub layout: Option<&'a TopicLayout>,
    pub used: &'b mut HashSet<i32>,
    pub now: Instant,
    /// The keyless part of a divided batch ([`super::division`]): not to the client's own
    /// partition, where its keyed part goes, while the strategy's broker has another.
    pub keep_off_own: bool,
}

impl Place<'_, '_> {
    /// Decides where an entry to renumber goes and with which numbers. `movable` is known for
    /// a batch that already waited (else the batch is inspected here, within the request's
    /// `budget`); `earlier_waits` tells whether an earlier batch of its client partition is
    /// waiting in kroute.
    pub fn entry(
        &mut self,
        key: BatchKey,
        records: &Bytes,
        choice: &mut TopicChoice,
        (movable, budget): (Option<bool>, &mut InspectBudget),
        earlier_waits: bool,
    ) -> Placement {
        let counters = &self.ctx.metrics().sequencing;
        let lookup = self.state.sequences.lookup(&key);
        if let Lookup::ResendJoined(j) = &lookup {
            tracing::trace!(?key, j.target, ?j.members, "looked up: resend joined");
        } else {
            tracing::trace!(?key, ?lookup, "looked up");
        }
        match lookup {
            Lookup::Acknowledged => {
                counters.answered_from_memory.increment(1);
                Placement::Local(code::NONE)
            }
            Lookup::StillInFlight => {
                debug!(?key, "retry while the first copy is unanswered");
                counters.busy.increment(1);
                Placement::Local(code::REQUEST_TIMED_OUT)
            }
            Lookup::Resend { target, seq } => self.resend(key, records, target, seq),
            Lookup::ResendJoined(joined) => self.resend_joined(key, joined),
            Lookup::Fresh => {
                let movable = movable.unwrap_or_else(|| self.movable(records, budget));
                self.fresh(key, records, choice, movable, earlier_waits)
            }
        }
    }

    /// A retry, to go where its first attempt went (partition `target`), with the same
    /// numbers (from `seq`).
    fn resend(&mut self, key: BatchKey, records: &Bytes, target: i32, seq: i32) -> Placement {
        // (A partition this request names already goes out in a part of its own.)
        self.used.insert(target);
        match self.node_of(key.partition, target) {
            Some(node) => {
                self.ctx.metrics().sequencing.resent.increment(1);
                Placement::Numbered {
                    node,
                    target,
                    seq,
                    key,
                    records: records.clone(),
                }
            }
            // Its partition has no known leader: the client retries again later, when
            // kroute's metadata may know one.
            None => {
                self.ctx.cluster().stale();
                let sequences = &mut self.state.sequences;
                Placement::Local(sequences.resolve(&key, target, seq, code::UNANSWERED))
            }
        }
    }

    /// A retry of a batch that went out joined: the whole joined batch goes again, where it
    /// went, for every member still pending.
    fn resend_joined(&mut self, key: BatchKey, joined: Joined) -> Placement {
        self.used.insert(joined.target);
        let Some(node) = self.node_of(key.partition, joined.target) else {
            self.ctx.cluster().stale();
            let sequences = &mut self.state.sequences;
            let mut reported = code::UNANSWERED;
            for (member, seq) in &joined.members {
                let r = sequences.resolve(member, joined.target, *seq, code::UNANSWERED);
                if *member == key {
                    reported = r;
                }
            }
            return Placement::Local(reported);
        };
        self.ctx.metrics().sequencing.resent.increment(1);
        Placement::Joined {
            node,
            target: joined.target,
            members: joined.members,
            records: joined.records,
        }
    }

    /// Whether a fresh batch may move: keyless and readable, in a topic kroute knows.
    fn movable(&self, records: &Bytes, budget: &mut InspectBudget) -> bool {
        match inspect(records, budget) {
            Ok(_) if self.layout.is_some() => true,
            Ok(_) => {
                self.kept(KeepReason::UnknownTopic, records.len());
                false
            }
            Err(reason) => {
                self.kept(reason, records.len());
                false
            }
        }
    }

    /// A batch kroute has not numbered yet: in the client's order, to the strategy's choice if
    /// it may move (joined behind a batch of this request once that broker has no partition
    /// left), else on its own partition; with no lane to take it, it waits.
    fn fresh(
        &mut self,
        key: BatchKey,
        records: &Bytes,
        choice: &mut TopicChoice,
        movable: bool,
        earlier_waits: bool,
    ) -> Placement {
        let counters = &self.ctx.metrics().sequencing;
        if !self.state.sequences.in_client_order(&key) {
            if earlier_waits {
                return Placement::Wait { movable };
            }
            // The earlier batch was answered "not now": the client retries it first, and
            // waits for this one's answer before it does.
            debug!(
                ?key,
                "an earlier batch of its partition is not numbered yet"
            );
            counters.busy.increment(1);
            return Placement::Local(code::REQUEST_TIMED_OUT);
        }
        // A batch that can be joined with others waits rather than queue deep behind a busy
        // partition: when an answer frees one, the waiting batches go out joined, in one round
        // trip ([`crate::route::join`]).
        let joinable = movable
            && self.ctx.router().join_max_bytes > 0
            && self.state.sequences.joins(&key.topic)
            && join::joinable(records, self.ctx.router().join_compressed);
        let picked = movable
            .then(|| self.choose(&key, records, choice, joinable))
            .flatten();
        let moved = match picked {
            Some(Pick::Join(head)) => return self.join(key, records, choice, head, movable),
            Some(Pick::Lane(node, target)) => Some((node, target)),
            None => None,
        };
        // Not movable, or no broker of the topic takes it: its own partition, if it can.
        let target = moved.or_else(|| {
            if joinable {
                return None;
            }
            let stays = self
                .state
                .sequences
                .lane_takes(&key.topic, key.partition, key.epoch);
            stays.then(|| (self.leader_of_own(key.partition), key.partition))
        });
        self.assign(key, records, choice, target, (joinable, movable))
    }

    /// Numbers fresh batch `key` on `target` (broker, partition) if that lane takes it; a
    /// `joinable` one becomes a head later batches of this request may join. With no lane, it
    /// waits.
    fn assign(
        &mut self,
        key: BatchKey,
        records: &Bytes,
        choice: &mut TopicChoice,
        target: Option<(i32, i32)>,
        (joinable, movable): (bool, bool),
    ) -> Placement {
        match target.and_then(|(node, target)| {
            let seq = self.state.sequences.assign(&key, target)?;
            Some((node, target, seq))
        }) {
            Some((node, target, seq)) => {
                tracing::trace!(?key, node, target, seq, "numbered");
                if joinable {
                    choice.heads.push(Head {
                        node,
                        target,
                        seq,
                        records: records.clone(),
                        bytes: records.len(),
                    });
                }
                Placement::Numbered {
                    node,
                    target,
                    seq,
                    key,
                    records: records.clone(),
                }
            }
            None => {
                debug!(
                    ?key,
                    lanes = %self.state.sequences.describe(&key.topic),
                    "no partition takes the batch now: it waits"
                );
                Placement::Wait { movable }
            }
        }
    }

    /// Numbers a batch right behind head `h` of this request, to go out joined with it.
    fn join(
        &mut self,
        key: BatchKey,
        records: &Bytes,
        choice: &mut TopicChoice,
        h: usize,
        movable: bool,
    ) -> Placement {
        let Some(head) = choice.heads.get_mut(h) else {
            return Placement::Wait { movable };
        };
        match self.state.sequences.join(&key, head.target, head.seq) {
            Some(seq) => {
                head.bytes += records.len();
                Placement::JoinedTo {
                    head: h,
                    node: head.node,
                    target: head.target,
                    seq,
                    key,
                    records: records.clone(),
                }
            }
            None => Placement::Wait { movable },
        }
    }

    /// The broker to send partition `target` to: its leader in kroute's view (for the client's
    /// own partition, see [`Place::leader_of_own`]).
    fn node_of(&self, client_partition: i32, target: i32) -> Option<i32> {
        if target == client_partition {
            return Some(self.leader_of_own(target));
        }
        self.layout?.leader_of(target)
    }

    /// The leader of the client's own `partition`: kroute's view, which kroute keeps current
    /// itself; failing that, the connection's broker (the client's view). Not the client's view
    /// first: a client told REQUEST_TIMED_OUT does not refresh its metadata, and would send its
    /// retries to a broker that is gone for ever.
    fn leader_of_own(&self, partition: i32) -> i32 {
        self.layout
            .and_then(|layout| layout.leader_of(partition))
            .unwrap_or(self.home)
    }

    fn kept(&self, reason: KeepReason, bytes: usize) {
        self.ctx.metrics().routing.keep(reason, self.home, bytes);
    }

    /// Picks (broker, partition) for a movable batch: the strategy's broker for this topic,
    /// the client's partition if that broker leads it, else the partition of that broker that
    /// this request does not name yet, whose numbering takes the batch now and has the fewest
    /// unresolved batches (each waits behind those on its connection); when the strategy's
    /// broker has no such partition, the next broker.
    ///
    /// First pass: only lanes with fewer than `routing.lane_spill_depth` unresolved batches
    /// count. A lane moves one batch per broker round trip (docs/idempotent-routing.md), so a
    /// batch queued deep behind a fast broker's few partitions waits longer than one sent at
    /// once to an idle partition of a slower broker. Only when no broker has such a lane, and
    /// only if `deep` (the batch cannot wait to be joined with others), are lanes filled up to
    /// the broker's deduplication window, in strategy order again.
    ///
    /// (A rule that let a batch wait for a fast broker's lane rather than join one more than
    /// twice as slow was tried and dropped: at max load, brokers' costs grow with their
    /// queues, and in the skewed layouts of bench/routing.sh a third of the batches then
    /// waited for the four partitions of the least loaded broker; throughput fell from about
    /// 0.75x to 0.55x of direct.)
    fn choose(
        &mut self,
        key: &BatchKey,
        records: &Bytes,
        choice: &mut TopicChoice,
        joinable: bool,
    ) -> Option<Pick> {
        let bytes = records.len();
        // A batch that can wait to be joined never queues deep.
        let deep = !joinable;
        let layout = self.layout?;
        let router = self.ctx.router();
        loop {
            let broker = self.broker(layout, choice, deep)?;
            let sequences = &self.state.sequences;
            let depth = if choice.deep {
                u32::MAX
            } else {
                router.lane_spill_depth
            };
            let takes = |p: i32| {
                sequences.lane_takes(&key.topic, p, key.epoch)
                    && sequences.lane_load(&key.topic, p) < depth
            };
            let own = !self.keep_off_own && layout.leader_of(key.partition) == Some(broker);
            if own && takes(key.partition) {
                router.strict_cost.charge(self.name, broker, bytes);
                self.kept(KeepReason::Home, bytes);
                return Some(Pick::Lane(broker, key.partition));
            }
            let free: Vec<(u32, i32)> = layout
                .led_by(broker)
                .filter(|p| !self.used.contains(p) && takes(*p))
                .map(|p| (sequences.lane_load(&key.topic, p), p))
                .collect();
            let Some(least) = free.iter().map(|f| f.0).min() else {
                // No partition of this broker left for this request: join the smallest batch
                // this request already sends there, rather than go to a slower broker.
                if joinable && let Some(h) = self.smallest_head(choice, broker, records) {
                    router.strict_cost.charge(self.name, broker, bytes);
                    return Some(Pick::Join(h));
                }
                choice.exhausted.push(broker);
                choice.broker = None;
                continue;
            };
            let emptiest: Vec<i32> = free.iter().filter(|f| f.0 == least).map(|f| f.1).collect();
            let cursor = PARTITION_CURSOR.fetch_add(1, Ordering::Relaxed);
            let partition = emptiest[cursor % emptiest.len()];
            self.used.insert(partition);
            router.strict_cost.charge(self.name, broker, bytes);
            return Some(Pick::Lane(broker, partition));
        }
    }

    /// The broker this request's movable batches of the topic go to: the one chosen already,
    /// else the strategy's pick among those not exhausted. Once every broker is exhausted at
    /// the spill depth, a batch that may queue `deep` starts over from the strategy's first
    /// choice, with lanes filled up to their deduplication window.
    fn broker(&self, layout: &TopicLayout, choice: &mut TopicChoice, deep: bool) -> Option<i32> {
        if let Some(b) = choice.broker {
            return Some(b);
        }
        let router = self.ctx.router();
        loop {
            let picked = router.strict_cost.pick_excluding(
                self.name,
                layout.leaders(),
                &choice.exhausted,
                &router.scores,
                self.now,
            );
            match picked {
                Some(b) => return Some(*choice.broker.insert(b)),
                None if deep && !choice.deep => {
                    choice.deep = true;
                    choice.exhausted.clone_from(&choice.unreachable);
                }
                None => return None,
            }
        }
    }

    /// The head of this request on `broker` with the fewest bytes that `records` can join
    /// within `routing.join_max_bytes`.
    fn smallest_head(&self, choice: &TopicChoice, broker: i32, records: &Bytes) -> Option<usize> {
        let limit = self.ctx.router().join_max_bytes;
        let (h, head) = choice
            .heads
            .iter()
            .enumerate()
            .filter(|(_, head)| head.node == broker && head.bytes + records.len() <= limit)
            .min_by_key(|(_, head)| head.bytes)?;
        // Every record readable, timestamps within reach of the head's.
        join::can_join(&head.records, records).then_some(h)
    }
}
