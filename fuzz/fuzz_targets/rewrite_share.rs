//! The ShareFetch and ShareAcknowledge response rewriters (node_endpoints), v1: the first
//! byte's low bit picks the API, the rest as in every rewriter target.
#![no_main]

use kafka_protocol::messages::ApiKey;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&api, rest)) = data.split_first() else {
        return;
    };
    let api = if api & 1 == 0 {
        ApiKey::ShareFetch
    } else {
        ApiKey::ShareAcknowledge
    };
    kroute_fuzz::rewrite_target(api, 1..=1, rest);
});
