//! What joining batches costs kroute's CPU, per codec: the time `kroute::route::join::join`
//! takes per MB of records joined (decompressing, re-framing and compressing again for a
//! compressed codec; re-framing alone uncompressed), on 1 KiB records of two shapes: an id then
//! random lowercase letters (as tests/go/franz writes them: lz4 and snappy barely compress
//! them), and an id then words drawn from 64 (compressible, like text or JSON).
//!
//!   cargo run --release --example join_cost [-- BATCHES_PER_JOIN RECORDS_PER_BATCH ROUNDS]
//!
//! Prints one line per shape and codec: MB of records joined, seconds, ms per MB, and the
//! compression ratio of the joined batch. bench/join.sh runs it and writes the table to docs/benchmarks.md.

use std::time::Instant;

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

/// About 1000 bytes of `shape`: random letters, or words drawn from 64.
fn filler(shape: &str) -> String {
    if shape == "letters" {
        return (0..1000)
            .map(|_| char::from(b'a' + fastrand::u8(..26)))
            .collect();
    }
    let mut out = String::with_capacity(1010);
    while out.len() < 1000 {
        let word = fastrand::u32(..64);
        out.push_str(&format!("w{word}x{} ", word * 7919 % 1000));
    }
    out
}

/// One idempotent producer's batch of `n` records of about 1 KiB of `shape`, its records
/// numbered from `first`.
fn batch(n: usize, first: usize, compression: Compression, shape: &str) -> Bytes {
    let records: Vec<Record> = (0..n)
        .map(|i| {
            let letters = filler(shape);
            Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: -1,
                producer_id: 7,
                producer_epoch: 0,
                timestamp_type: TimestampType::Creation,
                offset: i as i64,
                sequence: (first + i) as i32,
                timestamp: 1_700_000_000_000 + i as i64,
                key: None,
                value: Some(Bytes::from(format!("id-{:08} {letters}", first + i))),
                headers: Default::default(),
            }
        })
        .collect();
    let mut out = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression,
    };
    RecordBatchEncoder::encode(&mut out, &records, &options).expect("encode");
    out.freeze()
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("a number"))
        .collect();
    let batches_per_join = args.first().copied().unwrap_or(4);
    let records_per_batch = args.get(1).copied().unwrap_or(16);
    let rounds = args.get(2).copied().unwrap_or(200);
    println!("shape\tcodec\tmb_joined\tseconds\tms_per_mb\tratio");
    for (shape, (name, codec)) in ["letters", "words"].into_iter().flat_map(|shape| {
        [
            ("none", Compression::None),
            ("gzip", Compression::Gzip),
            ("snappy", Compression::Snappy),
            ("lz4", Compression::Lz4),
            ("zstd", Compression::Zstd),
        ]
        .map(|codec| (shape, codec))
    }) {
        let batches: Vec<Bytes> = (0..batches_per_join)
            .map(|b| batch(records_per_batch, b * records_per_batch, codec, shape))
            .collect();
        let refs: Vec<&Bytes> = batches.iter().collect();
        let plain_bytes = batches_per_join * records_per_batch * 1013;
        let start = Instant::now();
        let mut joined_len = 0;
        for _ in 0..rounds {
            let joined = kroute::route::join::join(&refs, 0, 0).expect("joinable");
            joined_len = joined.len();
        }
        let seconds = start.elapsed().as_secs_f64();
        let mb = (plain_bytes * rounds) as f64 / 1e6;
        println!(
            "{shape}\t{name}\t{mb:.1}\t{seconds:.3}\t{:.2}\t{:.2}",
            seconds * 1000.0 / mb,
            plain_bytes as f64 / joined_len as f64
        );
    }
}
