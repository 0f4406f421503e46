//! Batch inspection under a decompression budget, every codec: the verdict never costs more
//! than twice the budget (plus the decoders' fixed state), the budget only ever shrinks by
//! what was decompressed, and a batch judged movable is one `sequenced` agrees about. A batch
//! judged keyed is divided (`kroute::route::divide`) within bounds too, and its keyless part is
//! one inspection judges movable, with the records divide counted.
//!
//! Input: two bytes choosing the budget (1 KiB steps, 1 KiB to 64 MiB), then the records of
//! one partition entry.
#![no_main]

use bytes::Bytes;
use kroute::route::batch::{InspectBudget, KeepReason, inspect, sequenced};
use kroute::route::divide::divide;
use kroute_fuzz::{assert_within, measure};
use libfuzzer_sys::fuzz_target;

/// Fixed decoder state on the Rust heap: zstd's and lz4's read buffers (128 KiB, 32 KiB),
/// miniz_oxide's inflate state (~43 KiB) and gzip header fields (bounded by the input).
const DECODER_STATE: usize = 512 * 1024;

fuzz_target!(|data: &[u8]| {
    let Some((&[hi, lo], records)) = data.split_first_chunk::<2>() else {
        return;
    };
    let limit = (u64::from(u16::from_be_bytes([hi, lo])) + 1) * 1024;
    let records = Bytes::copy_from_slice(records);
    let mut budget = InspectBudget::with_limit(limit);
    let (verdict, allocs) = measure(|| inspect(&records, &mut budget));
    assert_within(
        "inspect",
        allocs,
        2 * limit as usize + 2 * records.len() + DECODER_STATE,
    );
    assert!(budget.remaining() <= limit);
    if verdict == Err(KeepReason::Keyed) {
        let mut budget = InspectBudget::with_limit(limit);
        let (divided, allocs) = measure(|| divide(&records, &mut budget));
        // Decompressed records, both parts re-framed, and both parts' batches.
        assert_within(
            "divide",
            allocs,
            4 * limit as usize + 6 * records.len() + DECODER_STATE,
        );
        if let Ok(d) = divided {
            let mut again = InspectBudget::with_limit(limit);
            let keyless = inspect(&d.keyless, &mut again).map(|m| m.records);
            assert_eq!(keyless, Ok(d.keyless_records), "the keyless part is movable");
        }
    }
    if let Ok(movable) = verdict {
        if let Some(s) = sequenced(&records) {
            assert!(movable.idempotent, "sequenced but not idempotent: {s:?}");
            assert_eq!(s.records as u32, movable.records);
        }
    }
});
