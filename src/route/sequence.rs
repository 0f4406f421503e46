//! The sequence numbers of one idempotent producer whose batches kroute may move.
//!
//! A broker checks an idempotent producer's batches per partition: within an epoch each batch
//! must start right after the last one it appended there, or it is refused with
//! OUT_OF_ORDER_SEQUENCE_NUMBER; a batch it has already appended (one of its last five) is
//! answered as a duplicate. Moving a batch from partition A to B breaks both partitions'
//! sequences, so for a producer it *owns* kroute numbers every batch itself: per target
//! partition (a *lane*) it hands out the next sequence, and it remembers which client batch got
//! which numbers, so that a client's retry goes to the same lane with the same numbers and the
//! broker deduplicates it.
//!
//! The rules that keep this safe (the state machine is in docs/idempotent-routing.md):
//! - numbers are never handed out twice within a lane's epoch, except to the same client batch;
//! - a lane is *rewound* (its next number moved back) only over numbers the broker certainly
//!   never appended: those after a batch it refused outright (a *hole*), once nothing sent
//!   after the hole is still unanswered;
//! - a lane switches to a client's newer epoch (sequences restart at 0) only when nothing of
//!   the older epoch is still unanswered or waiting for a retry there, so the broker never sees
//!   the older epoch after the newer one; and only when no client partition of its topic still
//!   has unfinished batches of the older epoch, which must find a lane of that epoch (a client
//!   moves one partition to a new epoch at a time, when that partition's batches are done);
//! - a lane numbers a batch only while every unresolved batch there is among the last four it
//!   numbered: a broker deduplicates a retry only against the last five batches it appended;
//! - a lane's first batch (per epoch) goes alone until it is acknowledged: a broker with no
//!   state for the producer appends any sequence, so a later batch could get in before it;
//! - OUT_OF_ORDER_SEQUENCE_NUMBER caused by kroute's numbering (a batch overtook its lane
//!   predecessor, or follows a hole) is reported as a retriable REQUEST_TIMED_OUT, so the
//!   client retries instead of resetting its producer state.
//!
//! Nothing here does I/O or reads a clock: callers pass what happened.

use std::collections::{HashMap, HashSet, VecDeque};

use bytes::Bytes;

/// Kafka error codes this state machine reacts to.
pub mod code {
    pub const UNKNOWN_SERVER_ERROR: i16 = -1;
    pub const NONE: i16 = 0;
    pub const CORRUPT_MESSAGE: i16 = 2;
    pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
    pub const LEADER_NOT_AVAILABLE: i16 = 5;
    pub const NOT_LEADER_OR_FOLLOWER: i16 = 6;
    pub const REQUEST_TIMED_OUT: i16 = 7;
    pub const MESSAGE_TOO_LARGE: i16 = 10;
    pub const NETWORK_EXCEPTION: i16 = 13;
    pub const RECORD_LIST_TOO_LARGE: i16 = 18;
    pub const INVALID_REQUIRED_ACKS: i16 = 21;
    pub const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
    pub const INVALID_TIMESTAMP: i16 = 32;
    pub const UNSUPPORTED_FOR_MESSAGE_FORMAT: i16 = 43;
    pub const POLICY_VIOLATION: i16 = 44;
    pub const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
    pub const DUPLICATE_SEQUENCE_NUMBER: i16 = 46;
    pub const INVALID_PRODUCER_EPOCH: i16 = 47;
    pub const INVALID_RECORD: i16 = 87;

    /// What kroute reports for a batch whose broker never answered (its connection ended, or
    /// its partition has no leader to resend to): the broker may or may not have appended it.
    /// REQUEST_TIMED_OUT, because every client retries it as "possibly persisted", as it
    /// would retry a connection of its own that ended. NETWORK_EXCEPTION would say the same to
    /// Java, but librdkafka fails the records of a Produce answer carrying it for good.
    pub const UNANSWERED: i16 = REQUEST_TIMED_OUT;

    /// Not a Kafka code: kroute's own record of a copy of a batch that never left kroute (its
    /// connection could not take it). If no copy ever did, the broker certainly did not append
    /// it: a hole, like a refusal. Reported to the client as [`UNANSWERED`].
    pub const NEVER_SENT: i16 = i16::MIN;

    /// Whether a broker's `code` for a partition says the leader kroute sent it to is not (or
    /// no longer) the leader, so kroute's view of the cluster is out of date.
    pub fn leader_moved(code: i16) -> bool {
        matches!(
            code,
            NOT_LEADER_OR_FOLLOWER | LEADER_NOT_AVAILABLE | UNKNOWN_TOPIC_OR_PARTITION
        )
    }
}

/// Client batches remembered per client partition. Clients keep at most 5 batches in flight
/// per partition; the rest are recent ones whose retry is answered from memory.
const REMEMBERED_PER_PARTITION: usize = 16;

/// Batches a broker remembers per (producer, partition) to answer a retry as a duplicate.
const BROKER_REMEMBERS: usize = 5;

/// A topic partition: (topic name, partition index).
pub type TopicPartition = (Bytes, i32);

/// One client batch, as the client numbered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchKey {
    pub topic: Bytes,
    /// The partition the client sent the batch to.
    pub partition: i32,
    pub epoch: i16,
    /// The client's base sequence.
    pub base: i32,
    pub records: i32,
    /// What the batch carries apart from its producer numbers
    /// ([`crate::route::batch::Sequenced::content`]): the same when the client renumbers the
    /// batch into a new epoch.
    pub content: u32,
}

/// A batch kroute joined from several client batches ([`crate::route::join`]), to be resent
/// whole: the broker deduplicates a batch only by its exact first and last numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Joined {
    pub target: i32,
    /// The joined batch, renumbered, as first sent.
    pub records: Bytes,
    /// Its client batches that are resent with it (in flight again): key and own number.
    pub members: Vec<(BatchKey, i32)>,
}

/// What to do with a client batch before choosing where it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// A retry of a batch whose earlier attempt failed: send it to `target` with base sequence
    /// `seq` again.
    Resend { target: i32, seq: i32 },
    /// The same for a batch that went out joined with others: the joined batch is resent.
    ResendJoined(Joined),
    /// A retry of a batch whose earlier attempt is still on its way: one copy on the wire at a
    /// time (its answer, or its connection's end, always resolves it), so the client retries
    /// again later.
    StillInFlight,
    /// A retry of a batch the broker has acknowledged: answer success without sending.
    Acknowledged,
    /// A batch to place afresh.
    Fresh,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Sent, answer not yet seen.
    InFlight,
    /// Answered with an error after which the broker may or may not have appended it; the
    /// client retries it with the same numbers.
    Pending,
    /// Appended.
    Acked,
    /// Certainly not appended and never to be resent with these numbers.
    Dead,
    /// Certainly not appended, and the client was told to retry: its retry is numbered afresh
    /// (in this epoch, so a lane of this epoch must stay available for it).
    Retry,
}

impl Assignment {
    /// Whether it is client batch `key` (its epoch, first number and size).
    fn is(&self, key: &BatchKey) -> bool {
        self.epoch == key.epoch && self.base == key.base && self.records == key.records
    }

    /// Whether it went out joined behind another client batch.
    fn is_follower(&self) -> bool {
        self.seq != self.batch_seq
    }
}

#[derive(Debug, Clone)]
struct Assignment {
    epoch: i16,
    base: i32,
    records: i32,
    content: u32,
    target: i32,
    seq: i32,
    /// The first number of the batch the broker sees: `seq`, unless the batch was joined
    /// behind another one ([`crate::route::join`]).
    batch_seq: i32,
    /// The joined batch this one went out in, while it may have to be resent.
    joined: Option<Bytes>,
    /// Its own client has not heard the outcome yet and will ask again, so it is not forgotten
    /// meanwhile: resent with a joined batch on another client batch's retry, or its success
    /// withheld ([`withheld`]).
    owes_answer: bool,
    /// A copy of it may have reached the broker (one was written, whatever came of it).
    ever_sent: bool,
    state: State,
}

/// kroute's numbering of one target partition.
#[derive(Debug, Clone)]
struct Lane {
    epoch: i16,
    next: i32,
    /// Client batches in flight, and waiting for a retry with the same numbers.
    in_flight: u32,
    pending: u32,
    /// Of those, the ones that went out joined behind another (not a batch of their own).
    followers: u32,
    /// The first number of a batch the broker refused: everything after it is not appended.
    hole_at: Option<i32>,
    /// The first number of a batch the client gave up on without an answer (it moved to a new
    /// epoch): whether it was appended is unknown, so the lane takes nothing more in its epoch.
    abandoned_at: Option<i32>,
    /// The number after the highest batch acknowledged in this epoch.
    acked_end: Option<i32>,
    /// The first numbers of the last batches numbered in this epoch (at most
    /// BROKER_REMEMBERS - 1): a retry is deduplicated only if it is among the last
    /// BROKER_REMEMBERS batches the broker appended.
    numbered: VecDeque<i32>,
}

impl Lane {
    fn new(epoch: i16) -> Self {
        Lane {
            epoch,
            next: 0,
            in_flight: 0,
            pending: 0,
            followers: 0,
            hole_at: None,
            abandoned_at: None,
            acked_end: None,
            numbered: VecDeque::new(),
        }
    }

    fn takes(&self, epoch: i16) -> bool {
        if self.hole_at.is_some() {
            return false;
        }
        match self.epoch.cmp(&epoch) {
            // A broker with no state for the producer appends any sequence: until one batch
            // is known appended, a batch that overtook a lost first one would get in and
            // shut it out. So the first batch goes alone.
            std::cmp::Ordering::Equal => {
                self.abandoned_at.is_none()
                    && (self.acked_end.is_some() || self.in_flight + self.pending == 0)
            }
            std::cmp::Ordering::Less => self.in_flight == 0 && self.pending == 0,
            std::cmp::Ordering::Greater => false,
        }
    }

    /// Counts a client batch entering (`delta` 1) or leaving (-1) `state`; `follower` if it
    /// went out joined behind another one.
    fn count(&mut self, state: State, follower: bool, delta: i32) {
        let counter = match state {
            State::InFlight => &mut self.in_flight,
            State::Pending => &mut self.pending,
            State::Acked | State::Dead | State::Retry => return,
        };
        *counter = counter.saturating_add_signed(delta);
        if follower {
            self.followers = self.followers.saturating_add_signed(delta);
        }
    }

    /// Unresolved batches as the broker sees them: a joined batch counts once.
    fn batches(&self) -> u32 {
        (self.in_flight + self.pending).saturating_sub(self.followers)
    }
}

/// What the client sent to one partition in its newest epoch, and its recent batches there.
#[derive(Debug, Default)]
struct ClientPartition {
    epoch: i16,
    recent: VecDeque<Assignment>,
    /// Base sequences of batches of this epoch kroute has seen but not numbered (answered "not
    /// now", or waiting in kroute): the client sends them again before any later batch. Only
    /// what kroute saw counts: a client may skip numbers in a new epoch (Java rewrites its
    /// in-flight batches into it, and some of those then complete under their old numbers),
    /// so a gap in its numbering is not a batch still to come.
    unnumbered: Vec<i32>,
}

impl ClientPartition {
    /// Remembers that `key` was numbered `seq` on `target`, in the broker batch that starts at
    /// `batch_seq`, and is in flight.
    fn numbered(&mut self, key: &BatchKey, target: i32, seq: i32, batch_seq: i32) {
        self.unnumbered.retain(|b| *b != key.base);
        self.recent.push_back(Assignment {
            epoch: key.epoch,
            base: key.base,
            records: key.records,
            content: key.content,
            target,
            seq,
            batch_seq,
            joined: None,
            owes_answer: false,
            ever_sent: false,
            state: State::InFlight,
        });
    }

    /// Makes room to remember `key`'s new numbers: drops its earlier RETRY attempt, and the
    /// oldest resolved batch that owes its client nothing if the memory is full. Failing that,
    /// the oldest resolved batch of an older epoch: the client moved on from it and rewrites
    /// what it still wants into its new epoch at once, so one still unclaimed after a memory's
    /// worth of newer batches was given up (a client that gives up on a batch bumps its
    /// epoch). None if every batch there is unresolved or owed in the client's epoch.
    fn make_room(&mut self, key: &BatchKey) -> Option<()> {
        self.recent
            .retain(|a| !(a.state == State::Retry && a.is(key)));
        if self.recent.len() >= REMEMBERED_PER_PARTITION {
            let resolved = |a: &Assignment| matches!(a.state, State::Acked | State::Dead);
            let epoch = self.epoch;
            let forgettable = self
                .recent
                .iter()
                .position(|a| resolved(a) && !a.owes_answer)
                .or_else(|| {
                    self.recent
                        .iter()
                        .position(|a| resolved(a) && a.epoch < epoch)
                })?;
            self.recent.remove(forgettable);
        }
        Some(())
    }

    /// What to do with `key`, seen for the first time, if it is a batch of an older epoch
    /// that the client renumbered into its new one without having heard how it went.
    ///
    /// When Java bumps its epoch after a refusal (KIP-360), it renumbers the batches still in
    /// flight on the partition from 0 in the new epoch and sends them again as they are
    /// otherwise. Directly to a broker those batches are certainly not appended (the refused
    /// one left a gap before them). Through kroute they went to lanes of their own: one kroute
    /// answered with a retriable error although it may be appended (its success withheld, or
    /// a retry refused while its first copy was unanswered: the batch owes its client an
    /// answer) comes back renumbered, and numbered afresh it would be appended twice. So such a
    /// batch is known again by its content ([`BatchKey::content`]), within the numbers the
    /// client's renumbering reaches (the records of the older epoch's batches kroute
    /// remembers), and answered as the batch it was.
    fn renumbered(&mut self, key: &BatchKey) -> Option<Lookup> {
        // Asked for every fresh batch: the search that almost always finds nothing goes first.
        let older = |a: &&Assignment| a.epoch < key.epoch;
        let i = self.recent.iter().position(|a| {
            older(&a) && a.owes_answer && a.records == key.records && a.content == key.content
        })?;
        let reach: i64 = self
            .recent
            .iter()
            .filter(older)
            .map(|a| i64::from(a.records))
            .sum();
        if i64::from(key.base) >= reach {
            return None;
        }
        let a = &mut self.recent[i];
        match a.state {
            State::Acked => {
                a.owes_answer = false;
                let acked = Assignment {
                    epoch: key.epoch,
                    base: key.base,
                    joined: None,
                    ..a.clone()
                };
                // Remembered under its new numbers too, for a retry of those.
                if self.make_room(key).is_some() {
                    self.recent.push_back(acked);
                }
                Some(Lookup::Acknowledged)
            }
            // Its outcome is still to come: the client asks again.
            State::InFlight => Some(Lookup::StillInFlight),
            // Certainly not appended, or abandoned with the older epoch: numbered afresh.
            State::Pending | State::Dead | State::Retry => {
                a.owes_answer = false;
                None
            }
        }
    }

    /// Notes a batch of this partition that is about to be placed afresh (see `unnumbered`).
    fn seen_unnumbered(&mut self, key: &BatchKey) {
        if key.epoch == self.epoch && !self.unnumbered.contains(&key.base) {
            if self.unnumbered.len() >= REMEMBERED_PER_PARTITION {
                self.unnumbered.remove(0);
            }
            self.unnumbered.push(key.base);
        }
    }
}

/// Adds `n` to a sequence number the way Kafka does: after i32::MAX comes 0.
pub fn advance(seq: i32, n: i32) -> i32 {
    ((i64::from(seq) + i64::from(n)) % (i64::from(i32::MAX) + 1)) as i32
}

/// Whether `seq` comes after `from` in a lane's numbering, which wraps after i32::MAX.
fn after(seq: i32, from: i32) -> bool {
    let distance = (i64::from(seq) - i64::from(from)).rem_euclid(i64::from(i32::MAX) + 1);
    distance > 0 && distance < 1 << 30
}

/// The earlier of a lane's mark (if any) and `seq`.
fn earliest(mark: Option<i32>, seq: i32) -> i32 {
    mark.filter(|m| after(seq, *m)).unwrap_or(seq)
}

/// The sequence state of one owned producer (one producer id, all its epochs).
#[derive(Debug, Default)]
pub struct Producer {
    lanes: HashMap<TopicPartition, Lane>,
    clients: HashMap<TopicPartition, ClientPartition>,
    /// Topics where a joined batch was refused: batches are no longer joined there.
    no_join: HashSet<Bytes>,
}

impl Producer {
    /// Looks a client batch up before placing it. Seeing a newer epoch on a client partition
    /// also releases what the client abandoned there.
    pub fn lookup(&mut self, key: &BatchKey) -> Lookup {
        let client = self
            .clients
            .entry((key.topic.clone(), key.partition))
            .or_insert_with(|| ClientPartition {
                epoch: key.epoch,
                recent: VecDeque::new(),
                unnumbered: Vec::new(),
            });
        if key.epoch > client.epoch {
            client.unnumbered.clear();
            // The client moved this partition to a new epoch: it will never retry the older
            // epoch's batches here. (Java rewrites them into the new epoch.)
            client.epoch = key.epoch;
            for a in client.recent.iter_mut() {
                if a.epoch < key.epoch && a.state == State::Pending {
                    if let Some(lane) = self.lanes.get_mut(&(key.topic.clone(), a.target))
                        && lane.epoch == a.epoch
                    {
                        lane.count(State::Pending, a.is_follower(), -1);
                        lane.abandoned_at = Some(earliest(lane.abandoned_at, a.batch_seq));
                    }
                    a.state = State::Dead;
                    a.joined = None;
                }
                if a.epoch < key.epoch && a.state == State::Retry {
                    a.state = State::Dead;
                }
            }
        }
        let Some(i) = client.recent.iter().position(|a| a.is(key)) else {
            if let Some(known) = client.renumbered(key) {
                return known;
            }
            client.seen_unnumbered(key);
            return Lookup::Fresh;
        };
        let a = &mut client.recent[i];
        match a.state {
            // Still owed, if it was: the retry's own answer may be an error (the other part
            // of a divided batch not done yet), and the client then asks again. The merged
            // answer clears it when the client is told success (`answered`).
            State::Acked => Lookup::Acknowledged,
            State::Dead => {
                client.recent.remove(i);
                client.seen_unnumbered(key);
                Lookup::Fresh
            }
            // Kept until the retry is numbered (`assign` replaces it): until then the client
            // partition still needs a lane of this epoch.
            State::Retry => {
                client.seen_unnumbered(key);
                Lookup::Fresh
            }
            State::InFlight => {
                // The client is told to retry: it will not hear the first copy's outcome.
                a.owes_answer = true;
                Lookup::StillInFlight
            }
            State::Pending if a.joined.is_some() => {
                let (target, batch_seq, epoch) = (a.target, a.batch_seq, a.epoch);
                let records = a.joined.clone().unwrap_or_default();
                let members = self.resend_joined(key, target, epoch, batch_seq);
                Lookup::ResendJoined(Joined {
                    target,
                    records,
                    members,
                })
            }
            State::Pending => {
                let (target, seq) = (a.target, a.seq);
                a.state = State::InFlight;
                if let Some(lane) = self.lanes.get_mut(&(key.topic.clone(), target)) {
                    lane.count(State::Pending, false, -1);
                    lane.count(State::InFlight, false, 1);
                }
                Lookup::Resend { target, seq }
            }
        }
    }

    /// Whether numbering this fresh batch now keeps the client's order: no earlier batch of its
    /// partition that kroute saw is still unnumbered (answered "not now", waiting, or to be
    /// renumbered when retried). A client retries one partition's batches in their order,
    /// waiting for each; had kroute numbered a later batch first on the same lane, the earlier
    /// one would wait for it forever.
    pub fn in_client_order(&self, key: &BatchKey) -> bool {
        let Some(c) = self.clients.get(&(key.topic.clone(), key.partition)) else {
            return true;
        };
        let before = |base: i32| after(key.base, base);
        c.epoch != key.epoch
            || !(c.unnumbered.iter().any(|b| before(*b))
                || c.recent
                    .iter()
                    .any(|a| a.epoch == key.epoch && a.state == State::Retry && before(a.base)))
    }

    /// Whether kroute remembers numbering client batch `key` whole (this very batch).
    pub fn remembers(&self, key: &BatchKey) -> bool {
        self.clients
            .get(&(key.topic.clone(), key.partition))
            .is_some_and(|c| c.recent.iter().any(|a| a.is(key)))
    }

    /// Whether kroute remembers numbering a part of client batch `key` on its own: a batch of
    /// its epoch within its numbers, but not the whole of it ([`crate::route::divide`]).
    pub fn remembers_part_of(&self, key: &BatchKey) -> bool {
        let Some(c) = self.clients.get(&(key.topic.clone(), key.partition)) else {
            return false;
        };
        let end = advance(key.base, key.records);
        c.recent.iter().any(|a| {
            a.epoch == key.epoch
                && a.records < key.records
                && (a.base == key.base || (after(a.base, key.base) && after(end, a.base)))
        })
    }

    /// Whether a fresh batch of `epoch` may be numbered on partition `target` of `topic` now.
    pub fn lane_takes(&self, topic: &Bytes, target: i32, epoch: i16) -> bool {
        // A lookup by borrowed key would need the tuple; partitions are few, so build it.
        let tp = (topic.clone(), target);
        self.lanes.get(&tp).is_none_or(|lane| {
            lane.takes(epoch)
                && self.remembered(&tp, lane)
                && (lane.epoch >= epoch || !self.epoch_unfinished(topic, lane.epoch))
        })
    }

    /// Whether a client partition of `topic` still in `epoch` has batches of it that are
    /// unanswered, pending a retry with the same numbers, to be retried and renumbered, or
    /// seen and not numbered yet.
    /// Their retries can only go to lanes of `epoch` (a broker refuses an older epoch after a
    /// newer one), so no lane may leave `epoch` meanwhile: once every lane had, such a batch
    /// would wait for a lane until the client's delivery timeout. Only asked when a lane would
    /// switch epochs, which is rare.
    fn epoch_unfinished(&self, topic: &Bytes, epoch: i16) -> bool {
        self.clients
            .iter()
            .filter(|((t, _), c)| t == topic && c.epoch == epoch)
            .any(|(_, c)| {
                !c.unnumbered.is_empty()
                    || c.recent.iter().any(|a| {
                        a.epoch == epoch
                            && matches!(a.state, State::InFlight | State::Pending | State::Retry)
                    })
            })
    }

    /// Batches sent to partition `target` of `topic` and not resolved yet: those a new batch
    /// there would queue behind.
    pub fn lane_load(&self, topic: &Bytes, target: i32) -> u32 {
        self.lanes
            .get(&(topic.clone(), target))
            .map_or(0, Lane::batches)
    }

    /// Whether every unresolved batch of `lane` is among its last BROKER_REMEMBERS - 1
    /// numbered, so that the broker still remembers it after one more is appended.
    fn remembered(&self, tp: &TopicPartition, lane: &Lane) -> bool {
        lane.in_flight + lane.pending == 0
            || self
                .clients
                .iter()
                .filter(|(c, _)| c.0 == tp.0)
                .flat_map(|(_, c)| &c.recent)
                .filter(|a| a.target == tp.1 && a.epoch == lane.epoch)
                .filter(|a| matches!(a.state, State::InFlight | State::Pending))
                .all(|a| lane.numbered.contains(&a.batch_seq))
    }

    /// Numbers a fresh batch on `target` (which must take it: see [`Producer::lane_takes`]).
    /// None if the client has too many unresolved batches on its partition to remember one
    /// more, or the lane does not take the batch.
    pub fn assign(&mut self, key: &BatchKey, target: i32) -> Option<i32> {
        if !self.lane_takes(&key.topic, target, key.epoch) || !self.in_client_order(key) {
            return None;
        }
        let client = self.clients.get_mut(&(key.topic.clone(), key.partition))?;
        client.make_room(key)?;
        let lane = self
            .lanes
            .entry((key.topic.clone(), target))
            .or_insert_with(|| Lane::new(key.epoch));
        if lane.epoch < key.epoch {
            *lane = Lane::new(key.epoch);
        }
        let seq = lane.next;
        lane.next = advance(seq, key.records);
        lane.count(State::InFlight, false, 1);
        lane.numbered.push_back(seq);
        if lane.numbered.len() >= BROKER_REMEMBERS {
            lane.numbered.pop_front();
        }
        client.numbered(key, target, seq, seq);
        Some(seq)
    }

    /// Records the broker's answer (`error`; [`code::UNANSWERED`] when none came, or
    /// [`code::NEVER_SENT`] when this copy never left kroute) for the batch `key` sent to
    /// `target` with base sequence `seq`; returns the error code to report to the client.
    pub fn resolve(&mut self, key: &BatchKey, target: i32, seq: i32, error: i16) -> i16 {
        let tp = (key.topic.clone(), target);
        let Some((client_epoch, a)) = self
            .clients
            .get_mut(&(key.topic.clone(), key.partition))
            .and_then(|c| {
                let client_epoch = c.epoch;
                c.recent
                    .iter_mut()
                    .find(|a| a.is(key) && a.target == target && a.seq == seq)
                    .map(|a| (client_epoch, a))
            })
        else {
            // Forgotten meanwhile (the client moved on): report what the broker said.
            return error;
        };
        let Some(lane) = self.lanes.get_mut(&tp).filter(|l| l.epoch == a.epoch) else {
            return error;
        };
        let was = a.state;
        // The broker judged the batch it saw: for a joined one, the one that starts there.
        let first = a.batch_seq;
        let joined = a.joined.is_some() || first != seq;
        a.ever_sent |= error != code::NEVER_SENT;
        let (mut now, reported) = match error {
            code::NONE | code::DUPLICATE_SEQUENCE_NUMBER => {
                let end = advance(seq, a.records);
                lane.acked_end = Some(lane.acked_end.filter(|e| after(*e, end)).unwrap_or(end));
                (State::Acked, error)
            }
            _ if was == State::Acked => (State::Acked, code::NONE),
            code::NEVER_SENT if !a.ever_sent => {
                // No copy reached the broker: a hole, renumbered (perhaps elsewhere) when the
                // client retries. Kept pending, it could only go to this target, whose
                // connection may not come back (a client's connection left idle past its
                // SASL session): the client would retry it there until it gave up.
                lane.hole_at = Some(earliest(lane.hole_at, first));
                (State::Retry, code::UNANSWERED)
            }
            // An earlier copy may be appended: resent with the same numbers.
            code::NEVER_SENT => (State::Pending, code::UNANSWERED),
            code::OUT_OF_ORDER_SEQUENCE_NUMBER => {
                if lane.hole_at.is_some_and(|h| after(first, h)) {
                    // Behind a refused batch: renumbered when the client retries.
                    (State::Retry, code::REQUEST_TIMED_OUT)
                } else if lane.abandoned_at.is_some_and(|h| after(first, h))
                    || lane.acked_end.unwrap_or(0) == first
                {
                    // Everything before it is appended (or unknowable): the broker's view
                    // differs from kroute's, and the client must reset, as it would directly.
                    (State::Pending, error)
                } else {
                    // It overtook a predecessor on its lane: the same numbers will fit once
                    // the predecessor is in.
                    (State::Pending, code::REQUEST_TIMED_OUT)
                }
            }
            code::MESSAGE_TOO_LARGE
            | code::RECORD_LIST_TOO_LARGE
            | code::INVALID_RECORD
            | code::INVALID_TIMESTAMP
            | code::TOPIC_AUTHORIZATION_FAILED
            | code::POLICY_VIOLATION
            | code::UNSUPPORTED_FOR_MESSAGE_FORMAT
            | code::INVALID_REQUIRED_ACKS
            | code::INVALID_PRODUCER_EPOCH => {
                // Refused before appending: a hole in the lane.
                lane.hole_at = Some(earliest(lane.hole_at, first));
                if joined {
                    // Perhaps for another batch's records, or for the joined size: each goes
                    // alone when retried, to get its own verdict.
                    self.no_join.insert(key.topic.clone());
                    (State::Retry, code::REQUEST_TIMED_OUT)
                } else {
                    (State::Dead, error)
                }
            }
            // Anything else may or may not have been appended: resend the same numbers.
            _ => (State::Pending, error),
        };
        if now == State::Pending && a.epoch < client_epoch {
            // The client moved this partition to a newer epoch meanwhile: it will not retry
            // the batch, abandoned as in `lookup`.
            lane.abandoned_at = Some(earliest(lane.abandoned_at, first));
            now = State::Dead;
        }
        if now == State::Retry && a.epoch < client_epoch {
            now = State::Dead;
        }
        if now != State::Acked {
            // Not appended, or not known to be: the client's retry decides, nothing is owed.
            a.owes_answer = false;
        }
        if was != now {
            lane.count(was, a.is_follower(), -1);
            lane.count(now, a.is_follower(), 1);
            a.state = now;
        }
        if now != State::Pending {
            a.joined = None;
        }
        if lane.in_flight == 0
            && let Some(hole) = lane.hole_at
        {
            self.rewind(&tp, hole);
        }
        reported
    }

    /// Moves lane `tp` back to `hole` once nothing sent after the hole is unanswered: every
    /// batch numbered from the hole on was refused or never got in, so its numbers are free.
    fn rewind(&mut self, tp: &TopicPartition, hole: i32) {
        let Some(lane) = self.lanes.get_mut(tp) else {
            return;
        };
        let lane_clients = self.clients.iter_mut().filter(|(c, _)| c.0 == tp.0);
        for (_, client) in lane_clients {
            for a in client.recent.iter_mut() {
                if a.target == tp.1 && a.epoch == lane.epoch && !after(hole, a.seq) {
                    a.state = match a.state {
                        // The client was told to retry it: it comes back, to be renumbered.
                        State::Pending => {
                            lane.count(State::Pending, a.is_follower(), -1);
                            State::Retry
                        }
                        State::Acked => State::Acked,
                        State::Retry => State::Retry,
                        State::InFlight | State::Dead => State::Dead,
                    };
                }
            }
        }
        lane.next = hole;
        lane.hole_at = None;
        lane.numbered.retain(|s| after(hole, *s));
    }

    /// The lanes and client partitions of `topic`, for a debug log line (why a batch waits):
    /// `lane P: epoch E next N in_flight I pending Q hole H abandoned A acked_end K`, then
    /// `client P: epoch E unnumbered [bases] epoch/base->lane/seq state, ...`.
    pub fn describe(&self, topic: &Bytes) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        for ((_, p), l) in self.lanes.iter().filter(|((t, _), _)| t == topic) {
            let _ = write!(
                out,
                "lane {p}: epoch {} next {} in_flight {} pending {} hole {:?} abandoned {:?} \
                 acked_end {:?}; ",
                l.epoch, l.next, l.in_flight, l.pending, l.hole_at, l.abandoned_at, l.acked_end
            );
        }
        for ((_, p), c) in self.clients.iter().filter(|((t, _), _)| t == topic) {
            let _ = write!(
                out,
                "client {p}: epoch {} unnumbered {:?}",
                c.epoch, c.unnumbered
            );
            for a in &c.recent {
                let _ = write!(
                    out,
                    " {}/{}->{}/{} {:?}",
                    a.epoch, a.base, a.target, a.seq, a.state
                );
            }
            out.push_str("; ");
        }
        out
    }

    /// Client batches currently unresolved.
    #[cfg(test)]
    pub fn unresolved(&self) -> usize {
        self.clients
            .values()
            .flat_map(|c| &c.recent)
            .filter(|a| matches!(a.state, State::InFlight | State::Pending))
            .count()
    }
}

mod joined;
#[cfg(test)]
mod tests;
mod withheld;
