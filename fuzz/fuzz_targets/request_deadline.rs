//! The request deadline (src/upstream/deadline.rs): for requests that wait by design
//! (Fetch, ShareFetch, JoinGroup, CreateTopics, DeleteTopics, ...) it reads the wait from the
//! client's request, decoding most of them with kafka-protocol. Input: a request payload
//! (header included), as a client sends it.
#![no_main]

use std::time::Duration;

use bytes::Bytes;
use kroute::protocol::header::RequestHead;
use kroute::upstream::deadline::limit;
use kroute_fuzz::{assert_not_presized, measure};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(head) = RequestHead::parse(data) else {
        return;
    };
    let frame = Bytes::copy_from_slice(data);
    let timeout = Some(Duration::from_secs(60));
    let (_, allocs) = measure(|| limit(timeout, head.api_key, head.api_version, &frame));
    assert_not_presized("request deadline", frame.len(), allocs);
});
