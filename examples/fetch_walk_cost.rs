//! What kroute spends on a Fetch answer that names no broker (almost all of them), before and
//! after it stopped decoding them: `kroute::rewrite::rewrite_response` (kafka-protocol decodes
//! the whole answer to find its KIP-951 node endpoints, then forwards the original bytes) against
//! `kroute::protocol::endpoints::carries_node_endpoints` (a walk that skips every field and
//! record set and reads only the top-level tagged fields).
//!
//!   cargo run --release --example fetch_walk_cost [-- ROUNDS]
//!
//! Fetch v16 answers of three shapes (partitions x record bytes each): a consumer at the log end
//! (many partitions, few bytes), a catching-up one (few partitions, 1 MiB each), and one between.
//! Prints per shape: ns per answer for each way, and ns per MB of the answer.

use std::time::Instant;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::ApiKey;
use kafka_protocol::messages::FetchResponse;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::protocol::Encodable;
use kroute::protocol::endpoints::carries_node_endpoints;
use kroute::rewrite::{AddressMap, Observed, rewrite_response};

const VERSION: i16 = 16;

/// A Fetch v16 body: `topics` x `partitions` partitions carrying `bytes` of records each.
fn answer(topics: usize, partitions: usize, bytes: usize) -> Bytes {
    let records = Bytes::from(vec![7u8; bytes]);
    let response = FetchResponse::default().with_responses(
        (0..topics)
            .map(|_| {
                FetchableTopicResponse::default().with_partitions(
                    (0..partitions)
                        .map(|p| {
                            PartitionData::default()
                                .with_partition_index(p as i32)
                                .with_high_watermark(1_000_000)
                                .with_last_stable_offset(1_000_000)
                                .with_records(Some(records.clone()))
                        })
                        .collect(),
                )
            })
            .collect(),
    );
    let mut out = BytesMut::new();
    response.encode(&mut out, VERSION).expect("encode");
    out.freeze()
}

/// Nanoseconds per call of `f`, over `rounds` calls.
fn time(rounds: u32, mut f: impl FnMut()) -> f64 {
    let start = Instant::now();
    for _ in 0..rounds {
        f();
    }
    start.elapsed().as_nanos() as f64 / f64::from(rounds)
}

fn main() {
    let rounds: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    let map = AddressMap::new("127.0.0.1", 9100);
    println!("shape\tanswer_bytes\tdecode_ns\twalk_ns\tdecode_ns_per_MB\twalk_ns_per_MB");
    for (name, topics, partitions, bytes) in [
        ("at-log-end 20x50x0.1KiB", 20, 50, 100),
        ("between 5x12x16KiB", 5, 12, 16 << 10),
        ("catching-up 1x6x1MiB", 1, 6, 1 << 20),
    ] {
        let body = answer(topics, partitions, bytes);
        let decode = time(rounds, || {
            let mut seen = Observed::default();
            let out = rewrite_response(ApiKey::Fetch as i16, VERSION, &body, &map, &mut seen);
            assert!(matches!(out, Ok(None)), "nothing to rewrite");
        });
        let walk = time(rounds, || {
            let found = carries_node_endpoints(ApiKey::Fetch, VERSION, &body);
            assert_eq!(found, Some(false));
        });
        let mb = body.len() as f64 / 1e6;
        println!(
            "{name}\t{}\t{decode:.0}\t{walk:.0}\t{:.0}\t{:.0}",
            body.len(),
            decode / mb,
            walk / mb
        );
    }
}
