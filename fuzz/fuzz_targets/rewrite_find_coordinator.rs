//! The FindCoordinator rewriter: the single coordinator of v0-v3 and the list of v4-v6.
#![no_main]

use kafka_protocol::messages::ApiKey;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kroute_fuzz::rewrite_target(ApiKey::FindCoordinator, 0..=6, data);
});
