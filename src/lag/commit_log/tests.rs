use bytes::{BufMut, BytesMut};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use super::*;

fn key(record_type: i16, group: &str, topic: &str, partition: i32) -> Vec<u8> {
    let mut k = Vec::new();
    k.put_i16(record_type);
    for s in [group, topic] {
        k.put_i16(s.len() as i16);
        k.put_slice(s.as_bytes());
    }
    k.put_i32(partition);
    k
}

/// An offset commit value of `version` with metadata "m".
fn value(version: i16, offset: i64, timestamp_ms: i64) -> Vec<u8> {
    let mut v = Vec::new();
    v.put_i16(version);
    v.put_i64(offset);
    if version >= 3 {
        v.put_i32(7); // leader epoch
    }
    if version >= 4 {
        v.put_u8(2); // compact string "m": length + 1
    } else {
        v.put_i16(1);
    }
    v.put_u8(b'm');
    v.put_i64(timestamp_ms);
    if version == 1 {
        v.put_i64(timestamp_ms + 86_400_000); // expire timestamp
    }
    if version >= 4 {
        v.put_u8(0); // no tagged fields
    }
    v
}

fn all(_: &str) -> bool {
    true
}

#[test]
fn every_value_version_gives_the_offset_and_the_commit_time() {
    for record_type in [0, 1] {
        for version in 0..=4 {
            let record = decode(
                &key(record_type, "g", "t", 3),
                Some(&value(version, 42, 1_700_000_000_123)),
                all,
            );
            assert_eq!(
                record,
                Ok(OffsetsRecord::Commit(LoggedCommit {
                    group: "g".into(),
                    topic: "t".into(),
                    partition: 3,
                    offset: 42,
                    timestamp_ms: 1_700_000_000_123,
                })),
                "key type {record_type}, value v{version}"
            );
        }
    }
}

#[test]
fn tombstones_other_record_types_and_unwatched_groups() {
    assert_eq!(
        decode(&key(1, "g", "t", 0), None, all),
        Ok(OffsetsRecord::Deleted {
            group: "g".into(),
            topic: "t".into(),
            partition: 0
        })
    );
    // Group metadata (type 2) and KIP-848 records (3+) are not offset commits.
    for record_type in [2, 3, 11] {
        assert_eq!(
            decode(&key(record_type, "g", "t", 0), Some(b"\x00"), all),
            Ok(OffsetsRecord::Other)
        );
    }
    // A group not watched: its value is never read, even a broken one.
    assert_eq!(
        decode(&key(1, "other", "t", 0), Some(b"\xff"), |g| g == "g"),
        Ok(OffsetsRecord::Other)
    );
}

#[test]
fn truncated_or_broken_records_are_errors_not_panics() {
    let (k, v) = (key(1, "g", "t", 0), value(4, 1, 2));
    for cut in 0..k.len() {
        assert!(
            decode(&k[..cut], Some(&v), all).is_err(),
            "key cut at {cut}"
        );
    }
    for cut in 0..v.len() - 1 {
        assert!(
            decode(&k, Some(&v[..cut]), all).is_err(),
            "value cut at {cut}"
        );
    }
    let mut bad_utf8 = key(1, "g", "t", 0);
    bad_utf8[4] = 0xff;
    assert!(decode(&bad_utf8, Some(&v), all).is_err());
    let mut negative = value(3, 1, 2);
    negative[..2].copy_from_slice(&(-1i16).to_be_bytes());
    assert!(decode(&k, Some(&negative), all).is_err());
}

fn record(offset: i64, producer_id: i64, transactional: bool, control: bool) -> Record {
    Record {
        transactional,
        control,
        delete_horizon: false,
        partition_leader_epoch: 0,
        producer_id,
        producer_epoch: 0,
        timestamp_type: TimestampType::Creation,
        offset,
        sequence: offset as i32, // offset - sequence constant: one batch
        timestamp: 0,
        key: Some(Bytes::from(key(1, "g", "t", 0))),
        value: Some(Bytes::from(value(3, offset, 1_000))),
        headers: IndexMap::new(),
    }
}

fn encoded(records: &[Record]) -> BytesMut {
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut buf, records, &options).expect("encode");
    buf
}

#[test]
fn a_fetch_cut_inside_a_batch_keeps_that_batch_for_the_next_fetch() {
    let mut both = encoded(&[record(10, -1, false, false), record(11, -1, false, false)]);
    let first_len = both.len();
    both.extend_from_slice(&encoded(&[record(12, -1, false, false)]));
    let whole = both.freeze();

    let (sets, next, skipped) = batches(whole.clone(), 10);
    assert_eq!((sets.len(), next, skipped), (2, 13, 0));
    assert_eq!(sets[1].records[0].offset, 12);

    let (sets, next, _) = batches(whole.slice(..first_len + 20), 10);
    assert_eq!((sets.len(), next), (1, 12));
}

#[test]
fn a_batch_that_does_not_decode_is_stepped_over() {
    let mut broken = encoded(&[record(5, -1, false, false), record(6, -1, false, false)]);
    broken[16] = 7; // an unknown magic byte
    let (sets, next, skipped) = batches(broken.freeze(), 5);
    assert_eq!((sets.len(), next, skipped), (0, 7, 1));
}

fn set(records: Vec<Record>) -> RecordSet {
    RecordSet {
        compression: Compression::None,
        version: 2,
        records,
    }
}

fn marker(offset: i64, producer_id: i64, abort: bool) -> RecordSet {
    let mut r = record(offset, producer_id, true, true);
    r.key = Some(Bytes::from_static(if abort {
        b"\x00\x00\x00\x00"
    } else {
        b"\x00\x00\x00\x01"
    }));
    set(vec![r])
}

#[test]
fn aborted_transactions_drop_their_batches_only() {
    // Producer 7 aborts the transaction starting at 10, then commits one at 20; producer 8's
    // transaction at 12 commits; plain batches always count.
    let mut aborted = Aborted::new([(7, 10)]);
    let steps = [
        (set(vec![record(5, -1, false, false)]), true),
        (set(vec![record(10, 7, true, false)]), false),
        (set(vec![record(12, 8, true, false)]), true),
        (marker(13, 7, true), false),
        (marker(14, 8, false), false),
        (set(vec![record(20, 7, true, false)]), true),
        (set(vec![]), false),
    ];
    for (i, (batch, keep)) in steps.iter().enumerate() {
        assert_eq!(aborted.keeps(batch), *keep, "step {i}");
    }
}
