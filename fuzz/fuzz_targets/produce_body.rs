//! The Produce request body reader (v3-v12): never more memory than the body holds, record
//! bytes are slices of the body, and where kafka-protocol's own decoder reads the same body,
//! both see the same acks, timeout, topics, partitions and record bytes.
#![no_main]

use bytes::Bytes;
use kafka_protocol::messages::ProduceRequest;
use kafka_protocol::protocol::Decodable;
use kroute::protocol::produce::parse_produce_body;
use kroute_fuzz::{assert_within, measure, pick};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let version = pick(selector, 3..=12);
    let body = Bytes::copy_from_slice(body);
    let (parsed, allocs) = measure(|| parse_produce_body(&body, version));
    // A topic takes at least 3 bytes and 56 bytes of memory, a partition at least 6 and 40;
    // vectors grow to twice what they hold.
    assert_within("produce body", allocs, 40 * body.len() + 1024);
    let Ok(parsed) = parsed else {
        return;
    };
    let range = body.as_ptr() as usize..=body.as_ptr() as usize + body.len();
    for topic in &parsed.topics {
        for records in topic.partitions.iter().filter_map(|p| p.records.as_ref()) {
            let start = records.as_ptr() as usize;
            assert!(
                records.is_empty()
                    || range.contains(&start) && range.contains(&(start + records.len()))
            );
        }
    }
    // kroute's reader succeeded, so every count was backed by elements: kafka-protocol
    // cannot pre-size anything absurd from this body.
    let Ok(theirs) = ProduceRequest::decode(&mut body.clone(), version) else {
        return; // e.g. a topic name that is not UTF-8, which kroute checks when it uses it
    };
    assert_eq!(
        (parsed.acks, parsed.timeout_ms),
        (theirs.acks, theirs.timeout_ms)
    );
    assert_eq!(parsed.topics.len(), theirs.topic_data.len());
    for (ours, theirs) in parsed.topics.iter().zip(&theirs.topic_data) {
        assert_eq!(&ours.name[..], theirs.name.0.as_bytes());
        assert_eq!(ours.partitions.len(), theirs.partition_data.len());
        for (p, q) in ours.partitions.iter().zip(&theirs.partition_data) {
            assert_eq!((p.index, &p.records), (q.index, &q.records));
        }
    }
});
