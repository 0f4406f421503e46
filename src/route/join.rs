//! Joining several record batches of one idempotent producer into one batch.
//!
//! A broker takes one batch per partition per Produce request and works on one request per
//! connection at a time, and an idempotent producer's batches for one partition must stay on
//! one connection to keep their order: a partition takes one batch of such a producer per
//! broker round trip (docs/idempotent-routing.md, "How fast a lane can go"). When kroute
//! concentrates a producer's traffic on a fast broker's few partitions, batches that wait for
//! the same partition are therefore *joined*: their records go out as one batch, with one
//! base sequence, so a round trip carries all of them.
//!
//! Only batches with plain attributes are joined (no transaction, no control batch,
//! CreateTime). Each record's offset delta and timestamp delta are rewritten relative to the
//! joined batch (both are varints, so the record is re-framed); key, value and headers are
//! copied as they are. Compressed batches of one codec (snappy, lz4, zstd) are joined too where
//! `routing.join_compressed` says so: their records are decompressed, re-framed and compressed
//! again with that codec ([`super::codec`]), which costs CPU (bench/join.sh measures it).

use bytes::{BufMut, Bytes, BytesMut};

use super::batch::{
    ATTRIBUTES, BASE_SEQUENCE, BASE_TIMESTAMP, BATCH_LENGTH, CRC, InspectBudget, LAST_OFFSET_DELTA,
    MAGIC, MAX_TIMESTAMP, PRODUCER_EPOCH, PRODUCER_ID, RECORD_COUNT, RECORDS, RecordFrame,
    next_record, plain_records, read_i16, read_i32, read_i64,
};
use super::codec;

/// The largest decompressed size of the batches joined into one compressed batch: 64 times
/// the default `routing.join_max_bytes`. Beyond it the join fails, its batches are retried
/// alone, and joining stops for the producer and topic (as after a joined batch refused).
pub const JOIN_PLAIN_LIMIT: u64 = 16 * 1024 * 1024;

/// Whether `records` is exactly one magic v2 batch that can be joined with others: CreateTime,
/// not transactional, not a control batch, length consistent, and uncompressed unless
/// `compressed` (then snappy, lz4 or zstd). Never gzip: joining gzip batches cost 31-52 ms of
/// CPU per MB in examples/join_cost, some 25-40 times what kroute spends on a produced MB
/// otherwise (docs/benchmarks.md, "Joining compressed batches").
pub fn joinable(records: &[u8], compressed: bool) -> bool {
    let Some(len) = read_i32(records, BATCH_LENGTH).and_then(|l| usize::try_from(l).ok()) else {
        return false;
    };
    let attributes = read_i16(records, ATTRIBUTES).unwrap_or(-1);
    let codec = attributes & 0x07;
    len.checked_add(12) == Some(records.len())
        && records.len() > RECORDS
        && records[MAGIC] == 2
        && attributes & !0x07 == 0
        && (codec == 0 || (compressed && matches!(codec, codec::SNAPPY | codec::LZ4 | codec::ZSTD)))
}

/// Whether `next` can be joined behind `first` (see [`join`]): both [`joinable`] with the same
/// codec, of the same producer and epoch, their timestamps within reach of each other's, and,
/// uncompressed, every record of `next` readable (reads without copying anything; compressed
/// records are read when joined, and a batch whose records do not read makes the join fail).
pub fn can_join(first: &[u8], next: &[u8]) -> bool {
    joinable(first, true)
        && joinable(next, true)
        && first.get(ATTRIBUTES..ATTRIBUTES + 2) == next.get(ATTRIBUTES..ATTRIBUTES + 2)
        && first.get(PRODUCER_ID..BASE_SEQUENCE) == next.get(PRODUCER_ID..BASE_SEQUENCE)
        && timestamp_shift(first, next).is_some_and(|shift| {
            next[ATTRIBUTES + 1] & 0x07 != 0 || reframe(next, shift, 0, None).is_some()
        })
}

/// Joins `batches` (each [`joinable`], all of the same producer and client epoch, which callers
/// check: the first may already carry kroute's numbers) into one batch with producer epoch
/// `epoch` and base sequence `base_sequence`, in their order; None if one cannot be read. The
/// joined batch takes the first one's header (offset, leader epoch, producer id); its record
/// count, last offset delta, timestamps and CRC describe all the records.
pub fn join(batches: &[&Bytes], epoch: i16, base_sequence: i32) -> Option<Bytes> {
    let first = batches.first()?;
    let attributes = first.get(ATTRIBUTES..ATTRIBUTES + 2)?;
    if !batches
        .iter()
        .all(|b| joinable(b, true) && b.get(ATTRIBUTES..ATTRIBUTES + 2) == Some(attributes))
    {
        return None;
    }
    let producer = first.get(PRODUCER_ID..PRODUCER_EPOCH)?;
    if batches
        .iter()
        .any(|b| b.get(PRODUCER_ID..PRODUCER_EPOCH) != Some(producer))
    {
        return None;
    }
    let capacity = batches.iter().map(|b| b.len()).sum::<usize>();
    let mut out = BytesMut::with_capacity(capacity + 16 * batches.len());
    out.extend_from_slice(first.get(..RECORDS)?);
    let codec = i16::from(attributes[1] & 0x07);
    // Uncompressed: the records are re-framed straight into the batch.
    let mut plain = BytesMut::new();
    let records = if codec == 0 { &mut out } else { &mut plain };
    let mut budget = InspectBudget::with_limit(JOIN_PLAIN_LIMIT);
    let mut offset: i64 = 0;
    let mut max_timestamp = i64::MIN;
    for batch in batches {
        max_timestamp = max_timestamp.max(read_i64(batch, MAX_TIMESTAMP)?);
        let shift = timestamp_shift(first, batch)?;
        let region = plain_records(batch, &mut budget).ok()?;
        let count = read_i32(batch, RECORD_COUNT)?;
        reframe_records(&region, count, shift, offset, Some(&mut *records))?;
        offset = offset.checked_add(i64::from(count))?;
    }
    if codec != 0 {
        out.extend_from_slice(&codec::compress(codec, &plain)?);
    }
    let total = i32::try_from(offset).ok().filter(|n| *n > 0)?;
    let length = i32::try_from(out.len() - 12).ok()?;
    out[BATCH_LENGTH..BATCH_LENGTH + 4].copy_from_slice(&length.to_be_bytes());
    out[LAST_OFFSET_DELTA..LAST_OFFSET_DELTA + 4].copy_from_slice(&(total - 1).to_be_bytes());
    out[MAX_TIMESTAMP..MAX_TIMESTAMP + 8].copy_from_slice(&max_timestamp.to_be_bytes());
    out[PRODUCER_EPOCH..BASE_SEQUENCE].copy_from_slice(&epoch.to_be_bytes());
    out[BASE_SEQUENCE..BASE_SEQUENCE + 4].copy_from_slice(&base_sequence.to_be_bytes());
    out[RECORD_COUNT..RECORD_COUNT + 4].copy_from_slice(&total.to_be_bytes());
    let crc = crc32c::crc32c(&out[ATTRIBUTES..]);
    out[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
    debug_assert_eq!(out.get(PRODUCER_ID..PRODUCER_EPOCH), Some(producer));
    Some(out.freeze())
}

/// How far `batch`'s base timestamp is from `first`'s.
fn timestamp_shift(first: &[u8], batch: &[u8]) -> Option<i64> {
    read_i64(batch, BASE_TIMESTAMP)?.checked_sub(read_i64(first, BASE_TIMESTAMP)?)
}

/// Walks the records of `batch`, each with its timestamp delta moved by `shift` and its offset
/// delta by `offset`, writing them re-framed to `out` if given; returns how many there are.
/// None if a record does not fit its frame or the batch holds other than its record count.
fn reframe(batch: &[u8], shift: i64, offset: i64, out: Option<&mut BytesMut>) -> Option<i32> {
    let count = read_i32(batch, RECORD_COUNT)?;
    reframe_records(batch.get(RECORDS..)?, count, shift, offset, out)
}

/// [`reframe`] for the `count` records of an uncompressed records region `body`.
fn reframe_records(
    body: &[u8],
    count: i32,
    shift: i64,
    offset: i64,
    mut out: Option<&mut BytesMut>,
) -> Option<i32> {
    let mut pos = 0usize;
    for _ in 0..count {
        let record = next_record(body, &mut pos)?;
        let timestamp_delta = record.timestamp_delta.checked_add(shift)?;
        let offset_delta = record.offset_delta.checked_add(offset)?;
        if let Some(out) = out.as_deref_mut() {
            write_record(out, &record, timestamp_delta, offset_delta)?;
        }
    }
    (pos == body.len()).then_some(count)
}

/// Appends `record` to `out` with new timestamp and offset deltas (both varints, so its
/// length is written afresh); its attributes, key, value and headers are copied as they are.
pub(super) fn write_record(
    out: &mut impl BufMut,
    record: &RecordFrame,
    timestamp_delta: i64,
    offset_delta: i64,
) -> Option<()> {
    // attributes, then the two deltas (at most 10 bytes each as varints)
    let mut head = [0u8; 21];
    head[0] = record.attributes;
    let mut n = 1 + put_varint(&mut head[1..], timestamp_delta);
    n += put_varint(&mut head[n..], offset_delta);
    put_varint_buf(out, i64::try_from(n + record.rest.len()).ok()?);
    out.put_slice(&head[..n]);
    out.put_slice(record.rest);
    Some(())
}

/// Writes a zigzag varint into `out` (room for 10 bytes); returns its length.
fn put_varint(out: &mut [u8], value: i64) -> usize {
    let mut raw = ((value << 1) ^ (value >> 63)) as u64;
    let mut n = 0;
    while raw >= 0x80 {
        out[n] = (raw as u8 & 0x7f) | 0x80;
        raw >>= 7;
        n += 1;
    }
    out[n] = raw as u8;
    n + 1
}

/// Writes a zigzag varint at the end of `out`.
fn put_varint_buf(out: &mut impl BufMut, value: i64) {
    let mut buf = [0u8; 10];
    let n = put_varint(&mut buf, value);
    out.put_slice(&buf[..n]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::batch::varint;
    use kafka_protocol::records::{
        Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions,
        TimestampType,
    };

    /// One batch of `n` records of producer 7, epoch 3, written by kafka-protocol's encoder.
    fn batch(n: usize, first_value: usize, timestamp: i64, compression: Compression) -> Bytes {
        let records: Vec<Record> = (0..n)
            .map(|i| Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: -1,
                producer_id: 7,
                producer_epoch: 3,
                timestamp_type: TimestampType::Creation,
                offset: i as i64,
                sequence: 40 + i as i32,
                timestamp: timestamp + i as i64,
                key: None,
                value: Some(Bytes::from(format!(
                    "v{}-{}",
                    first_value + i,
                    "x".repeat(200)
                ))),
                headers: [(
                    "h".into(),
                    Some(Bytes::from(format!("header-{}", first_value + i))),
                )]
                .into_iter()
                .collect(),
            })
            .collect();
        let mut out = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut out,
            &records,
            &RecordEncodeOptions {
                version: 2,
                compression,
            },
        )
        .unwrap();
        out.freeze()
    }

    #[test]
    fn joined_records_keep_their_content_and_order_with_new_offsets_and_sequences() {
        let a = batch(2, 0, 1_700_000_000_000, Compression::None);
        let b = batch(1, 2, 1_700_000_000_500, Compression::None);
        // An earlier clock in a later batch: a negative timestamp delta.
        let c = batch(70, 3, 1_699_999_999_000, Compression::None);
        let joined = join(&[&a, &b, &c], 3, 1000).expect("joinable");
        // The decoder checks the CRC-32C and the batch framing.
        let sets = RecordBatchDecoder::decode_all(&mut joined.clone()).expect("one valid batch");
        assert_eq!(sets.len(), 1);
        let records = &sets[0].records;
        assert_eq!(records.len(), 73);
        let mut expected = Vec::new();
        for set in [&a, &b, &c] {
            expected.extend(
                RecordBatchDecoder::decode_all(&mut set.clone()).unwrap()[0]
                    .records
                    .clone(),
            );
        }
        for (i, (got, want)) in records.iter().zip(&expected).enumerate() {
            assert_eq!(got.offset, i as i64);
            assert_eq!(got.sequence, 1000 + i as i32);
            assert_eq!(got.timestamp, want.timestamp, "record {i}");
            assert_eq!(
                (&got.key, &got.value, &got.headers),
                (&want.key, &want.value, &want.headers)
            );
            assert_eq!((got.producer_id, got.producer_epoch), (7, 3));
        }
        let info = RecordBatchDecoder::decode_batch_info(&mut joined.clone()).unwrap();
        assert_eq!(info[0].record_count, 73);
        assert_eq!(info[0].base_sequence, 1000);
        assert_eq!(read_i64(&joined, MAX_TIMESTAMP), Some(1_700_000_000_500));
        assert!(joinable(&joined, false));
    }

    #[test]
    fn compressed_batches_of_one_codec_join_into_one_batch_of_that_codec() {
        let gzip = batch(3, 0, 1_700_000_000_000, Compression::Gzip);
        assert!(!joinable(&gzip, true), "gzip costs too much to join");
        for codec in [Compression::Snappy, Compression::Lz4, Compression::Zstd] {
            let a = batch(3, 0, 1_700_000_000_000, codec);
            let b = batch(5, 3, 1_700_000_000_200, codec);
            assert!(joinable(&a, true) && !joinable(&a, false), "{codec:?}");
            assert!(can_join(&a, &b));
            let joined = join(&[&a, &b], 3, 40).expect("joinable");
            assert_eq!(
                joined[ATTRIBUTES..ATTRIBUTES + 2],
                a[ATTRIBUTES..ATTRIBUTES + 2]
            );
            let sets = RecordBatchDecoder::decode_all(&mut joined.clone()).expect("valid");
            assert_eq!(sets.len(), 1, "{codec:?}");
            let values: Vec<_> = sets[0].records.iter().map(|r| r.value.clone()).collect();
            let mut expected = Vec::new();
            for set in [&a, &b] {
                let records = &RecordBatchDecoder::decode_all(&mut set.clone()).unwrap()[0].records;
                expected.extend(records.iter().map(|r| r.value.clone()));
            }
            assert_eq!(values, expected, "{codec:?}");
            let offsets: Vec<i64> = sets[0].records.iter().map(|r| r.offset).collect();
            assert_eq!(offsets, (0..8).collect::<Vec<i64>>());
        }
    }

    #[test]
    fn only_plain_batches_of_one_producer_and_codec_are_joined() {
        let plain = batch(2, 0, 1_700_000_000_000, Compression::None);
        let gzip = batch(2, 0, 1_700_000_000_000, Compression::Gzip);
        assert!(joinable(&plain, false));
        assert!(!joinable(&gzip, false));
        assert_eq!(join(&[&plain, &gzip], 3, 0), None);
        assert!(can_join(&plain, &plain));
        assert!(!can_join(&plain, &gzip));
        let mut other = plain.to_vec();
        other[PRODUCER_ID + 7] = 8; // producer id 8
        assert!(!can_join(&plain, &other));
        assert_eq!(join(&[&plain, &Bytes::from(other)], 3, 0), None);
        let mut transactional = plain.to_vec();
        transactional[ATTRIBUTES + 1] = 0x10;
        assert!(!joinable(&transactional, true));
        // Two batches in one entry, or one cut short, are not one batch.
        let two = [plain.as_ref(), plain.as_ref()].concat();
        assert!(!joinable(&two, true));
        assert!(!joinable(&plain[..plain.len() - 1], true));
    }

    #[test]
    fn a_record_that_does_not_fit_its_frame_refuses_the_join() {
        let plain = batch(2, 0, 1_700_000_000_000, Compression::None);
        let mut broken = plain.to_vec();
        broken[RECORD_COUNT + 3] = 3; // claims 3 records, holds 2
        assert!(!can_join(&plain, &broken));
        assert_eq!(join(&[&plain, &Bytes::from(broken)], 3, 0), None);
        for cut in [RECORDS + 1, plain.len() - 3] {
            let mut short = plain[..cut].to_vec();
            let len = (short.len() - 12) as i32;
            short[BATCH_LENGTH..BATCH_LENGTH + 4].copy_from_slice(&len.to_be_bytes());
            assert_eq!(
                join(&[&plain, &Bytes::from(short)], 3, 0),
                None,
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn varints_round_trip() {
        for v in [
            0,
            1,
            -1,
            63,
            -64,
            64,
            300,
            -300,
            i64::from(i32::MAX),
            i64::MIN,
            i64::MAX,
        ] {
            let mut out = [0u8; 10];
            let n = put_varint(&mut out, v);
            let mut pos = 0;
            assert_eq!(varint(&out[..n], &mut pos), Some(v));
            assert_eq!(pos, n);
        }
    }
}
