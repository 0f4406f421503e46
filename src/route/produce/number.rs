//! Writing kroute's numbers into the batches it placed.
//!
//! Placing a batch ([`super::place`]) hands out its base sequence from the lane; the batch
//! still carries the client's epoch and numbers. Here they are rewritten: the producer epoch
//! the brokers see (a recovered producer writes above every epoch they hold,
//! [`crate::route::recovery`]), kroute's base sequence, and a new CRC. Batches that go out
//! joined ([`crate::route::join`]) are re-framed into one batch that takes one base sequence.

use bytes::Bytes;

use super::place::Placement;
use crate::route::batch::renumber;
use crate::route::join;
use crate::route::producers::ProducerState;
use crate::route::sequence::code;

/// `placement` with kroute's producer epoch and base sequence written into a numbered batch
/// (and its CRC recomputed); any other placement as it is. A batch that cannot be rewritten
/// (which cannot happen for entries `sequenced` accepted) is answered INVALID_RECORD, its
/// numbers left as a hole.
pub(super) fn number(placement: Placement, state: &mut ProducerState) -> Placement {
    let Placement::Numbered {
        node,
        target,
        seq,
        key,
        records,
    } = placement
    else {
        return placement;
    };
    let epoch = state.upstream_epoch(key.epoch);
    match epoch.and_then(|epoch| renumber(&records, epoch, seq)) {
        Some(records) => Placement::Numbered {
            node,
            target,
            seq,
            key,
            records,
        },
        None => Placement::Local(
            state
                .sequences
                .resolve(&key, target, seq, code::INVALID_RECORD),
        ),
    }
}

/// `batches` (the client's, of client epoch `epoch`, in their order) joined into one batch
/// with the producer epoch the brokers see and base sequence `seq`; None if one cannot be read.
pub(super) fn joined(
    state: &ProducerState,
    epoch: i16,
    seq: i32,
    batches: &[&Bytes],
) -> Option<Bytes> {
    let epoch = state.upstream_epoch(epoch)?;
    join::join(batches, epoch, seq)
}
