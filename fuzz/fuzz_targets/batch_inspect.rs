//! Batch inspection under a decompression budget, every codec: the verdict never costs more
//! than twice the budget (plus the decoders' fixed state), the budget only ever shrinks by
//! what was decompressed, and a batch judged movable is one `sequenced` agrees about.
//!
//! Input: two bytes choosing the budget (1 KiB steps, 1 KiB to 64 MiB), then the records of
//! one partition entry.
#![no_main]

use bytes::Bytes;
use kroute::route::batch::{InspectBudget, inspect, sequenced};
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
    if let Ok(movable) = verdict {
        if let Some(s) = sequenced(&records) {
            assert!(movable.idempotent, "sequenced but not idempotent: {s:?}");
            assert_eq!(s.records as u32, movable.records);
        }
    }
});
