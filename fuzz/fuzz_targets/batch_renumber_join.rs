//! Renumbering (new epoch and base sequence, CRCs recomputed) and joining batches of one
//! idempotent producer: renumbering changes only those header fields and agrees with
//! `sequenced`; a joined batch is one valid, joinable batch of all the records.
//!
//! Input: epoch (2 bytes), first sequence (4 bytes), then one partition entry's batches.
#![no_main]

use bytes::Bytes;
use kroute::route::batch::{Sequenced, renumber, sequenced};
use kroute::route::join::{JOIN_PLAIN_LIMIT, can_join, join, joinable};
use kroute_fuzz::{assert_within, measure};
use libfuzzer_sys::fuzz_target;

const BATCH_LENGTH: usize = 8;
const CRC: usize = 17;
const ATTRIBUTES: usize = 21;
const PRODUCER_EPOCH: usize = 51;
const RECORD_COUNT: usize = 57;

fn i32_at(b: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The batches of an entry, by their length fields, as far as they go.
fn batches(entry: &Bytes) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut pos = 0;
    while let Some(len) = i32_at(&entry[pos..], BATCH_LENGTH).and_then(|l| usize::try_from(l).ok())
    {
        let Some(end) = pos.checked_add(len + 12).filter(|e| *e <= entry.len()) else {
            break;
        };
        out.push(entry.slice(pos..end));
        pos = end;
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&[e0, e1, s0, s1, s2, s3], entry)) = data.split_first_chunk::<6>() else {
        return;
    };
    let epoch = i16::from_be_bytes([e0, e1]);
    let first = i32::from_be_bytes([s0, s1, s2, s3]);
    let entry = Bytes::copy_from_slice(entry);

    let (renumbered, allocs) = measure(|| renumber(&entry, epoch, first));
    assert_within("renumber", allocs, entry.len() + 64);
    let before = sequenced(&entry);
    match &renumbered {
        Some(out) => {
            assert_eq!(out.len(), entry.len());
            // Only epochs, base sequences and CRCs differ, batch by batch.
            let mut pos = 0;
            for batch in batches(out) {
                let old = &entry[pos..pos + batch.len()];
                for at in (0..batch.len()).filter(|at| !(CRC..CRC + 4).contains(at)) {
                    if !(PRODUCER_EPOCH..PRODUCER_EPOCH + 6).contains(&at) {
                        assert_eq!(batch[at], old[at], "byte {} of a batch changed", at);
                    }
                }
                let crc = crc32c(&batch[ATTRIBUTES..]);
                assert_eq!(i32_at(&batch, CRC).map(|c| c as u32), Some(crc));
                pos += batch.len();
            }
            if let (Some(s), true) = (before, first >= 0) {
                let want = Sequenced {
                    epoch,
                    base: first,
                    ..s
                };
                assert_eq!(sequenced(out), Some(want));
            }
        }
        None => assert!(
            before.is_none(),
            "sequenced entry {before:?} not renumbered"
        ),
    }

    let parts = batches(&entry);
    let parts: Vec<&Bytes> = parts.iter().take(16).collect();
    if parts.is_empty() {
        return;
    }
    let _ = parts.iter().all(|b| can_join(parts[0], b));
    let (joined, allocs) = measure(|| join(&parts, epoch, first));
    let total: usize = parts.iter().map(|b| b.len()).sum();
    // Every record re-framed: at most 20 more bytes each (two varints widened, a length).
    // Compressed batches are decompressed (at most JOIN_PLAIN_LIMIT in all, each decompressed
    // region held once and the re-framed records growing to it) and compressed again.
    let compressed = parts[0].get(ATTRIBUTES + 1).is_some_and(|a| a & 0x07 != 0);
    let decompressed = if compressed { 6 * JOIN_PLAIN_LIMIT as usize + (2 << 20) } else { 0 };
    assert_within(
        "join",
        allocs,
        2 * (total + 16 * parts.len()) + 20 * total + 1024 + decompressed,
    );
    if let Some(joined) = joined {
        assert!(parts.iter().all(|b| joinable(b, true)));
        assert!(
            joinable(&joined, true),
            "the joined batch is not one joinable batch"
        );
        assert!(
            can_join(&joined, &joined),
            "the joined batch's records do not read back"
        );
        let count: i64 = parts
            .iter()
            .map(|b| i64::from(i32_at(b, RECORD_COUNT).unwrap()))
            .sum();
        assert_eq!(i32_at(&joined, RECORD_COUNT).map(i64::from), Some(count));
        let crc = crc32c(&joined[ATTRIBUTES..]);
        assert_eq!(i32_at(&joined, CRC).map(|c| c as u32), Some(crc));
        assert_eq!(
            i16::from_be_bytes([joined[PRODUCER_EPOCH], joined[PRODUCER_EPOCH + 1]]),
            epoch
        );
    }
});

fn crc32c(bytes: &[u8]) -> u32 {
    // Castagnoli, bit by bit: independent of the crc32c crate kroute uses.
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}
