//! Produce bytes received through this kroute, per broker, by what routing could do with them.
//!
//! The data path adds a batch's bytes once, when routing has decided on it: a map lookup by
//! node id and one atomic add, no allocation after a broker's first batch. The sampler
//! ([`super::sample`]) reads the totals and turns two readings into rates.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use dashmap::DashMap;

use crate::balance::keep::KeepReason;

/// What happened to a batch's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Kept: a record has a key, so its partition is the client's choice.
    Keyed,
    /// Kept for a reason no routing can change: an idempotent producer kroute does not own, a
    /// transaction, a control batch, bytes kroute could not read.
    Pinned,
    /// Not looked at: routing is off, or the topic is not in `routing.include`.
    NotRouted,
    /// Keyless, and stayed: the strategy chose the broker the client sent it to, or had no
    /// better partition.
    Kept,
    /// Keyless, moved away from the broker it was sent to.
    MovedOut,
    /// Moved here from another broker.
    MovedIn,
}

impl Class {
    pub const ALL: [Class; 6] = [
        Class::Keyed,
        Class::Pinned,
        Class::NotRouted,
        Class::Kept,
        Class::MovedOut,
        Class::MovedIn,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Class::Keyed => "keyed",
            Class::Pinned => "pinned",
            Class::NotRouted => "not_routed",
            Class::Kept => "kept",
            Class::MovedOut => "moved_out",
            Class::MovedIn => "moved_in",
        }
    }

    /// Where a batch kept for `reason` counts.
    pub fn of_kept(reason: KeepReason) -> Class {
        match reason {
            KeepReason::Keyed => Class::Keyed,
            KeepReason::Policy => Class::NotRouted,
            KeepReason::Home
            | KeepReason::NoPartition
            | KeepReason::UnknownTopic
            | KeepReason::NoClientConnection => Class::Kept,
            KeepReason::Malformed
            | KeepReason::Idempotent
            | KeepReason::Transactional
            | KeepReason::Control
            | KeepReason::Uninspectable
            | KeepReason::Unsplittable => Class::Pinned,
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// Bytes by class, for one broker.
pub type ClassBytes = [u64; CLASSES];

/// How many classes there are.
pub const CLASSES: usize = Class::ALL.len();

#[derive(Default)]
struct Totals([AtomicU64; CLASSES]);

/// Produce bytes by broker and class, since kroute started.
#[derive(Default)]
pub struct ProduceTraffic {
    brokers: DashMap<i32, Totals>,
}

impl ProduceTraffic {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `bytes` of class `class` to broker `node` (-1, a bootstrap connection, is not a
    /// broker and is not counted).
    pub fn add(&self, node: i32, class: Class, bytes: usize) {
        if node < 0 {
            return;
        }
        let add =
            |totals: &Totals| totals.0[class.index()].fetch_add(bytes as u64, Ordering::Relaxed);
        // A read lock on the map's shard; its write lock only for a broker's first batch.
        match self.brokers.get(&node) {
            Some(totals) => add(&totals),
            None => add(&self.brokers.entry(node).or_default()),
        };
    }

    /// A batch moved from `from` to `to`.
    pub fn moved(&self, from: i32, to: i32, bytes: usize) {
        self.add(from, Class::MovedOut, bytes);
        self.add(to, Class::MovedIn, bytes);
    }

    /// The totals so far, by broker.
    pub fn totals(&self) -> BTreeMap<i32, ClassBytes> {
        self.brokers
            .iter()
            .map(|e| {
                let mut bytes = [0; CLASSES];
                for (b, a) in bytes.iter_mut().zip(e.value().0.iter()) {
                    *b = a.load(Ordering::Relaxed);
                }
                (*e.key(), bytes)
            })
            .collect()
    }
}

/// Bytes of `class` in `bytes`.
pub fn of(bytes: &ClassBytes, class: Class) -> u64 {
    bytes[class.index()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_by_broker_and_class() {
        let t = ProduceTraffic::new();
        t.add(1, Class::Keyed, 10);
        t.add(1, Class::of_kept(KeepReason::Keyed), 5);
        t.add(-1, Class::Keyed, 99);
        t.moved(1, 2, 7);
        let totals = t.totals();
        assert_eq!(of(&totals[&1], Class::Keyed), 15);
        assert_eq!(of(&totals[&1], Class::MovedOut), 7);
        assert_eq!(of(&totals[&2], Class::MovedIn), 7);
        assert!(!totals.contains_key(&-1));
    }

    #[test]
    fn every_keep_reason_has_a_class() {
        for reason in KeepReason::ALL {
            let class = Class::of_kept(reason);
            assert!(!matches!(class, Class::MovedOut | Class::MovedIn));
        }
        assert_eq!(Class::of_kept(KeepReason::Home), Class::Kept);
    }
}
