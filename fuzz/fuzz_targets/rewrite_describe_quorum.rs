//! The DescribeQuorum rewriter (controller listeners), v0-v2.
#![no_main]

use kafka_protocol::messages::ApiKey;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kroute_fuzz::rewrite_target(ApiKey::DescribeQuorum, 0..=2, data);
});
