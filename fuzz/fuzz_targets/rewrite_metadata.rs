//! The Metadata rewriter (brokers -> kroute addresses, topic layouts observed), v0-v13.
#![no_main]

use kafka_protocol::messages::ApiKey;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kroute_fuzz::rewrite_target(ApiKey::Metadata, 0..=13, data);
});
