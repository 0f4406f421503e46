//! Whether a batch of an owned idempotent producer is divided, and the client numbers of its
//! parts.
//!
//! A batch mixing keyed and keyless records ([`crate::route::divide`]) becomes two client
//! batches as far as kroute's numbering knows ([`crate::route::sequence`]): the keyed records
//! first, numbered from the client's base sequence, then the keyless ones, numbered from where
//! the keyed ones end. So each part has its own lane, its own answer and its own retry, and a
//! client's retry of the whole batch, divided again the same way (dividing depends only on the
//! batch's bytes), finds both parts where their first attempt went.
//!
//! What a retry must never do is change how its batch was numbered the first time: a batch
//! kroute numbered whole stays whole, and one whose parts kroute numbered is divided again or,
//! if it cannot be now (its request's decompression budget ran out), answered "retry" rather
//! than numbered whole, which would append its records a second time.

use bytes::Bytes;

use crate::route::batch::{InspectBudget, KeepReason, Keys, inspect_keys, sequenced};
use crate::route::divide::divide_numbered;
use crate::route::sequence::{BatchKey, Producer, advance};

/// What becomes of one batch of the producer.
pub(super) enum Division {
    /// Numbered whole; `movable` if already known from looking at it.
    Whole { movable: Option<bool> },
    /// Numbered as two client batches: the keyed records (to stay on the client's partition)
    /// and the keyless ones (to move).
    Parts {
        keyed: (BatchKey, Bytes),
        keyless: (BatchKey, Bytes),
    },
    /// Its parts were numbered before, and it cannot be divided now: the client retries.
    NotNow,
}

/// Decides for batch `key` with `records`, in a topic whose layout kroute knows; what is kept
/// and why is counted through `kept` (reason, bytes).
pub(super) fn division(
    sequences: &Producer,
    key: &BatchKey,
    records: &Bytes,
    budget: &mut InspectBudget,
    kept: impl Fn(KeepReason, usize),
) -> Division {
    if sequences.remembers(key) {
        return Division::Whole { movable: None };
    }
    // (Asked only of a batch that stays whole: a fresh one almost never had parts numbered.)
    let undivided = |reason| {
        if sequences.remembers_part_of(key) {
            Division::NotNow
        } else {
            kept(reason, records.len());
            Division::Whole {
                movable: Some(false),
            }
        }
    };
    match inspect_keys(records, budget) {
        Ok(Keys::Keyless(_)) => Division::Whole {
            movable: Some(true),
        },
        Ok(Keys::Keyed { may_mix: false }) => undivided(KeepReason::Keyed),
        Ok(Keys::Keyed { may_mix: true }) => match divide_numbered(records, budget) {
            Ok(divided) => parts(key, divided.keyed, divided.keyless)
                .inspect(|p| kept(KeepReason::Keyed, p.0.1.len()))
                .map_or_else(
                    || undivided(KeepReason::Unsplittable),
                    |(keyed, keyless)| Division::Parts { keyed, keyless },
                ),
            Err(reason) => undivided(reason),
        },
        Err(reason) => undivided(reason),
    }
}

/// The parts' client keys: the keyed records from `key`'s base sequence on, the keyless ones
/// right after them. None unless each part reads as one producer's contiguous batches.
fn parts(
    key: &BatchKey,
    keyed: Bytes,
    keyless: Bytes,
) -> Option<((BatchKey, Bytes), (BatchKey, Bytes))> {
    let first = sequenced(&keyed)?;
    let second = sequenced(&keyless)?;
    if first.records.checked_add(second.records) != Some(key.records) {
        return None;
    }
    let keyed_key = BatchKey {
        records: first.records,
        content: first.content,
        ..key.clone()
    };
    let keyless_key = BatchKey {
        base: advance(key.base, first.records),
        records: second.records,
        content: second.content,
        ..key.clone()
    };
    Some(((keyed_key, keyed), (keyless_key, keyless)))
}
