//! The Fetch response rewriter (KIP-951 node_endpoints), v16-v18; record bytes pass through.
#![no_main]

use kafka_protocol::messages::ApiKey;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kroute_fuzz::rewrite_target(ApiKey::Fetch, 16..=18, data);
});
