//! The idempotent producers kroute owns: those whose batches it numbers itself.
//!
//! kroute may renumber a producer's batches only if no number it hands out can match a batch
//! the brokers already hold from that producer: a broker answers a batch whose numbers match
//! one of its last five as a duplicate, without appending it (a silent loss). That holds for a
//! producer id kroute saw handed out (an InitProducerId answer passing through it): a new
//! producer id has no history anywhere, and the producer reaches the cluster only through this
//! kroute. A producer kroute did not see start (it was producing before this kroute process
//! started, through an earlier one that may have renumbered it) is *recovered*: kroute reads
//! the epochs the brokers hold for it and writes its batches under a higher producer epoch,
//! where every partition's numbering starts afresh ([`super::recovery`]). Only when that is not
//! possible (the brokers could not be asked) is it *adopted*: its batches of the epoch kroute
//! first saw are answered OUT_OF_ORDER_SEQUENCE_NUMBER without being sent; the client resets
//! to a newer epoch (KIP-360: numbering restarts at 0, which brokers accept), and batches of
//! newer epochs pass untouched, never moved.
//!
//! Each owned producer gets upstream connections of its own for its renumbered batches, and a
//! batch is numbered and queued in one step under the producer's lock, always on the same
//! connection for its partition: a partition's batches then reach the broker in the order of
//! their numbers, as a client's own batches for one partition do over its one connection.
//! The batches of a request whose client authenticated itself (SASL passthrough) as a
//! principal kroute knows go out on that principal's own client connections instead
//! ([`crate::upstream::principals`]): one is chosen per broker and shard and kept while it can
//! carry requests, so every batch reaches the broker as the client that sent it. The principal
//! is the request's, not the producer's: a producer's connections change principal when its
//! client's does (an OAUTHBEARER token refreshed is a new one), and a batch never goes out under
//! another request's identity.
//!
//! Memory is bounded: at most `routing.max_producers` are tracked (more are simply not
//! owned), and a producer idle for `routing.producer_expiry_ms` is forgotten, connections
//! included.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use metrics::{Counter, Gauge, counter, gauge};

use super::produce::Waiting;
use super::sequence::Producer;
use crate::route::Context;
use crate::security::principal::Principal;
use crate::upstream::principals::Injector;
use crate::upstream::{Outbound, Upstream};

/// Requests one producer connection may queue before sends on it fail (retriably).
const LINK_QUEUE: usize = 1024;

/// Connections per broker for one producer. A broker works on one request per connection at
/// a time; spreading partitions over a few connections (a partition always on the same one)
/// lets it work on several of the producer's requests at once, as it would for the several
/// client connections whose batches kroute gathers here.
pub const LINKS_PER_BROKER: i32 = 3;

/// Which of a producer's connections a partition's batches use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LinkKey {
    pub node_id: i32,
    shard: i32,
}

impl LinkKey {
    pub fn new(node_id: i32, partition: i32) -> Self {
        LinkKey {
            node_id,
            shard: partition.rem_euclid(LINKS_PER_BROKER),
        }
    }
}

/// How kroute came to know a producer, which says what it may do with its batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// kroute numbers its batches and writes them under producer epoch client epoch +
    /// `epoch_shift`: 0 for a producer kroute saw start; above every epoch the brokers hold
    /// for it for a producer recovered after a kroute restart ([`super::recovery`]).
    Numbered { epoch_shift: i16 },
    /// Seen after a kroute restart, before kroute has read what the brokers hold: its batches
    /// are answered "retry" until then.
    Unresolved,
    /// Neither: adopted (see above). Its batches of epochs before `passes_from` are refused,
    /// later ones pass untouched, never renumbered.
    Adopted { passes_from: i16 },
}

/// A connection an owned producer's batches go out on.
pub enum ProducerLink {
    /// kroute's own, for requests of clients that did not authenticate themselves.
    Kroute(Upstream),
    /// One of the connections of this principal.
    Client(Arc<Principal>, Injector),
}

impl ProducerLink {
    /// Whether requests queued now can go out. A client's connection that cannot carry them
    /// (its client re-authenticates, or left it idle to the end of its SASL session) is
    /// replaced by another of the principal's, if there is one: requests still in flight on it
    /// are answered, and a later batch that overtakes one of them is refused as out of order
    /// and retried, as after any connection change.
    fn is_usable_by(&self, principal: Option<&Arc<Principal>>) -> bool {
        match (self, principal) {
            (ProducerLink::Kroute(u), None) => u.is_open(),
            (ProducerLink::Client(p, i), Some(principal)) => p == principal && i.is_ready(),
            _ => false,
        }
    }

    /// Queues a request without waiting; gives it back if it cannot go out now.
    pub fn try_send(&self, out: Outbound) -> Result<(), Box<Outbound>> {
        match self {
            ProducerLink::Kroute(u) => u.try_send(out),
            ProducerLink::Client(_, i) => i.try_send(out),
        }
    }
}

/// What kroute keeps for one owned producer.
pub struct ProducerState {
    pub sequences: Producer,
    pub origin: Origin,
    /// Batches waiting for a partition to number them.
    pub waiting: Waiting,
    links: HashMap<LinkKey, ProducerLink>,
    last_used: Instant,
}

impl ProducerState {
    /// The producer's connection `key` to its broker at `addr` for a request of a client
    /// authenticated as `principal` (if any): kroute's own, opened (in the background) if there
    /// is none or the last one ended; or one of the principal's, if it has any there.
    pub fn link(
        &mut self,
        ctx: &Arc<dyn Context>,
        (key, principal): (LinkKey, Option<&Arc<Principal>>),
        addr: &str,
    ) -> Option<&ProducerLink> {
        if self
            .links
            .get(&key)
            .is_some_and(|l| !l.is_usable_by(principal))
        {
            self.links.remove(&key);
        }
        let link = match self.links.entry(key) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => e.insert(match principal {
                None => ProducerLink::Kroute(Upstream::open(
                    ctx.clone(),
                    key.node_id,
                    addr.to_string(),
                    LINK_QUEUE,
                )),
                Some(principal) => {
                    let connections = ctx.client_connections();
                    let shard = key.shard as usize;
                    let injector = connections.pick(principal, key.node_id, shard)?;
                    ProducerLink::Client(principal.clone(), injector)
                }
            }),
        };
        Some(link)
    }

    pub fn touch(&mut self, now: Instant) {
        self.last_used = now;
    }

    /// The producer epoch the brokers see for a batch of client epoch `epoch`: None if it
    /// would overflow (the batch cannot be numbered).
    pub fn upstream_epoch(&self, epoch: i16) -> Option<i16> {
        match self.origin {
            Origin::Numbered { epoch_shift } => epoch.checked_add(epoch_shift),
            Origin::Unresolved | Origin::Adopted { .. } => None,
        }
    }
}

/// One owned producer, shared by the client connections it uses.
pub struct OwnedProducer {
    state: Mutex<ProducerState>,
}

impl OwnedProducer {
    pub fn lock(&self) -> MutexGuard<'_, ProducerState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The registry of owned producers.
pub struct Producers {
    expiry: Duration,
    max: usize,
    owned: Mutex<HashMap<i64, Arc<OwnedProducer>>>,
    tracked: Gauge,
    refused: Counter,
    expired: Counter,
}

impl Producers {
    pub fn new(expiry: Duration, max: usize) -> Self {
        Self {
            expiry,
            max,
            owned: Mutex::new(HashMap::new()),
            tracked: gauge!("kroute_idempotent_producers"),
            refused: counter!("kroute_idempotent_producers_refused_total"),
            expired: counter!("kroute_idempotent_producers_expired_total"),
        }
    }

    fn map(&self) -> MutexGuard<'_, HashMap<i64, Arc<OwnedProducer>>> {
        self.owned.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A producer id was handed out: kroute owns its numbering from now on, if there is room.
    pub fn own(&self, producer_id: i64, now: Instant) {
        self.insert(producer_id, Origin::Numbered { epoch_shift: 0 }, now);
    }

    /// An idempotent producer kroute did not see start: tracked from now on, its origin
    /// resolved when kroute knows what the brokers hold for it ([`super::recovery`]). None if
    /// there is no room.
    pub fn unresolved(&self, producer_id: i64, now: Instant) -> Option<Arc<OwnedProducer>> {
        self.insert(producer_id, Origin::Unresolved, now);
        self.get(producer_id)
    }

    fn insert(&self, producer_id: i64, origin: Origin, now: Instant) {
        let mut map = self.map();
        if map.contains_key(&producer_id) {
            return;
        }
        if map.len() >= self.max {
            self.expire(&mut map, now);
            if map.len() >= self.max {
                self.refused.increment(1);
                return;
            }
        }
        let state = ProducerState {
            sequences: Producer::default(),
            origin,
            waiting: Waiting::default(),
            links: HashMap::new(),
            last_used: now,
        };
        map.insert(
            producer_id,
            Arc::new(OwnedProducer {
                state: Mutex::new(state),
            }),
        );
        self.tracked.set(map.len() as f64);
    }

    /// The owned producer with this id, if any.
    pub fn get(&self, producer_id: i64) -> Option<Arc<OwnedProducer>> {
        self.map().get(&producer_id).cloned()
    }

    /// Forgets producers idle for longer than the expiry.
    pub fn sweep(&self, now: Instant) {
        let mut map = self.map();
        self.expire(&mut map, now);
    }

    fn expire(&self, map: &mut HashMap<i64, Arc<OwnedProducer>>, now: Instant) {
        let before = map.len();
        map.retain(|_, p| {
            // A producer busy right now is not idle.
            p.state.try_lock().map_or(true, |s| {
                now.saturating_duration_since(s.last_used) < self.expiry
            })
        });
        self.expired.increment((before - map.len()) as u64);
        self.tracked.set(map.len() as f64);
    }

    /// How many producers are tracked.
    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.map().len()
    }
}

/// Sweeps expired producers now and then, forever.
pub async fn sweep_forever(ctx: Arc<dyn Context>) {
    let period = Duration::from_millis(ctx.config().routing.producer_expiry_ms / 4)
        .clamp(Duration::from_millis(100), Duration::from_secs(60));
    loop {
        tokio::time::sleep(period).await;
        ctx.router().producers.sweep(Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_refuses_new_producers_until_old_ones_expire() {
        let producers = Producers::new(Duration::from_secs(10), 2);
        let t0 = Instant::now();
        producers.own(1, t0);
        producers.own(2, t0);
        producers.own(3, t0 + Duration::from_secs(1));
        assert!(producers.get(3).is_none(), "over the cap: not owned");
        assert_eq!(producers.tracked(), 2);
        if let Some(p) = producers.get(2) {
            p.lock().touch(t0 + Duration::from_secs(5));
        }
        producers.own(3, t0 + Duration::from_secs(11));
        assert!(
            producers.get(1).is_none(),
            "idle past the expiry: forgotten"
        );
        assert!(producers.get(2).is_some(), "used recently: kept");
        assert!(producers.get(3).is_some());
    }
}
