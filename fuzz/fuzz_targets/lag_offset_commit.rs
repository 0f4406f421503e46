//! The lag collector's OffsetCommit readers (src/lag/offset_commit.rs), v2-v10: the first
//! byte picks request (even) or response (odd) and the version. What a client or broker
//! sends never costs more memory than a fixed multiple of its size.
#![no_main]

use kroute::lag::offset_commit::{read_request, read_response};
use kroute_fuzz::{assert_within, measure, pick};
use libfuzzer_sys::fuzz_target;

/// Per committed partition (at least 13 bytes of request, 6 of response): one entry of
/// about 48 bytes, vectors grown to twice that, and its topic name (at most 249 bytes).
const PER_BYTE: usize = 32;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, payload)) = data.split_first() else {
        return;
    };
    let version = pick(selector >> 1, 2..=10);
    if selector & 1 == 0 {
        let (read, allocs) = measure(|| read_request(payload, version));
        assert_within(
            "offset commit request",
            allocs,
            PER_BYTE * payload.len() + 4096,
        );
        if let Ok(read) = read {
            assert!(read.offsets.len() * 13 <= payload.len());
        }
    } else {
        let (read, allocs) = measure(|| read_response(payload, version));
        assert_within(
            "offset commit response",
            allocs,
            2 * PER_BYTE * payload.len() + 4096,
        );
        if let Ok(read) = read {
            assert!(read.len() * 6 <= payload.len());
        }
    }
});
