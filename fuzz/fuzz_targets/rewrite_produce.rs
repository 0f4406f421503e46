//! The Produce response rewriter (KIP-951 node_endpoints), v10-v12 (kroute caps Produce at v12).
#![no_main]

use kafka_protocol::messages::ApiKey;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kroute_fuzz::rewrite_target(ApiKey::Produce, 10..=12, data);
});
