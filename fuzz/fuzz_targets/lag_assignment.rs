//! The consumer-protocol assignment reader of the lag collector (src/lag/poll.rs): bytes a
//! group leader wrote, read from DescribeGroups. Never more memory than a fixed multiple of
//! their size.
#![no_main]

use kroute::lag::poll::read_assignment;
use kroute_fuzz::{assert_within, measure};
use libfuzzer_sys::fuzz_target;

/// Per assigned partition (4 bytes): a (String, i32) of 32 bytes, vectors grown to twice
/// that, and its topic name's copy (at most 249 bytes).
const PER_BYTE: usize = 96;

fuzz_target!(|data: &[u8]| {
    let (read, allocs) = measure(|| read_assignment(data));
    assert_within("assignment", allocs, PER_BYTE * data.len() + 4096);
    if let Ok(read) = read {
        assert!(read.len() * 4 <= data.len());
    }
});
