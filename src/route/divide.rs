//! Splitting a partition entry whose batches mix keyed and keyless records.
//!
//! A producer that sends some records with a key and some without gets batches that mix them:
//! its partitioner put a keyed record on the partition its key hashes to, and keyless ones on
//! whatever partition it was filling. The keyed records must stay; the keyless ones may go
//! anywhere. [`divide`] rewrites such an entry as two record sets: the keyed records, which
//! stay on the client's partition, and the keyless ones, which routing places like any keyless
//! batch.
//!
//! Each mixed batch becomes two batches of the same header (timestamps, attributes, codec),
//! each record copied byte for byte except its offset delta, which counts from 0 again in its
//! part; batch length, last offset delta, max timestamp, record count and CRC are written
//! afresh, and a compressed batch's parts are compressed again with its codec
//! ([`super::codec::compress`]). A batch whose records are all of one kind goes to its side
//! untouched. Records keep their order within each part, so a key's records stay in the
//! client's order on the client's partition.
//!
//! A plain producer's batches are divided with [`divide`]. An idempotent producer's only with
//! [`divide_numbered`], where kroute owns its numbers: its parts are then numbered as two
//! consecutive client batches ([`crate::route::produce`]'s sequenced planning). A transaction's
//! records stay together.

use bytes::{Bytes, BytesMut};

use super::batch::{
    ATTRIBUTES, BATCH_LENGTH, CRC, InspectBudget, KeepReason, LAST_OFFSET_DELTA, MAGIC,
    MAX_TIMESTAMP, PRODUCER_ID, RECORD_COUNT, RECORDS, RecordFrame, next_record, plain_records,
    read_i16, read_i32, read_i64,
};
use super::codec::compress;
use super::join::write_record;

/// A partition entry divided into the records that stay and the records that may move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divided {
    /// Batches of the keyed records, for the client's partition.
    pub keyed: Bytes,
    /// Batches of the keyless records.
    pub keyless: Bytes,
    /// How many records `keyless` holds.
    pub keyless_records: u32,
}

/// Divides the batches of one partition entry into keyed and keyless records. Err says why the
/// entry stays whole: `Keyed` if it holds no keyless record (or no keyed one: then nothing
/// needs dividing), `Idempotent`, `Transactional` or `Control` for batches that are not
/// divided, `Unsplittable` if a part would come out larger than its batch, and the reasons of
/// [`super::batch::inspect`] for batches that cannot be read.
pub fn divide(records: &Bytes, budget: &mut InspectBudget) -> Result<Divided, KeepReason> {
    divide_entry(records, budget, false)
}

/// [`divide`] for the batches of an idempotent producer whose numbers kroute owns
/// ([`crate::route::sequence`]): each part keeps the batch's producer id, epoch and base
/// sequence, which kroute rewrites when it numbers the part.
pub fn divide_numbered(records: &Bytes, budget: &mut InspectBudget) -> Result<Divided, KeepReason> {
    divide_entry(records, budget, true)
}

fn divide_entry(
    records: &Bytes,
    budget: &mut InspectBudget,
    numbered: bool,
) -> Result<Divided, KeepReason> {
    let mut keyed = BytesMut::with_capacity(records.len());
    let mut keyless = BytesMut::with_capacity(records.len());
    let mut keyless_records = 0u32;
    let mut keyed_records = 0u32;
    let mut rest = &records[..];
    while !rest.is_empty() {
        let batch = next_batch(&mut rest)?;
        let parts = divide_batch(batch, budget, numbered)?;
        keyed_records += parts.keyed_records;
        keyless_records += parts.keyless_records;
        keyed.extend_from_slice(&parts.keyed);
        keyless.extend_from_slice(&parts.keyless);
    }
    if keyless_records == 0 || keyed_records == 0 {
        return Err(KeepReason::Keyed);
    }
    Ok(Divided {
        keyed: keyed.freeze(),
        keyless: keyless.freeze(),
        keyless_records,
    })
}

/// The two parts of one batch (either may be empty).
struct BatchParts<'b> {
    keyed: std::borrow::Cow<'b, [u8]>,
    keyless: std::borrow::Cow<'b, [u8]>,
    keyed_records: u32,
    keyless_records: u32,
}

/// Splits the first batch off `rest`.
fn next_batch<'b>(rest: &mut &'b [u8]) -> Result<&'b [u8], KeepReason> {
    let total = read_i32(rest, BATCH_LENGTH)
        .and_then(|l| usize::try_from(l).ok())
        .and_then(|l| l.checked_add(12))
        .filter(|t| *t >= RECORDS && *t <= rest.len())
        .ok_or(KeepReason::Malformed)?;
    let (batch, tail) = rest.split_at(total);
    *rest = tail;
    Ok(batch)
}

fn divide_batch<'b>(
    batch: &'b [u8],
    budget: &mut InspectBudget,
    numbered: bool,
) -> Result<BatchParts<'b>, KeepReason> {
    if batch.get(MAGIC) != Some(&2) {
        return Err(KeepReason::Malformed);
    }
    let attributes = read_i16(batch, ATTRIBUTES).ok_or(KeepReason::Malformed)?;
    if attributes & 0x20 != 0 {
        return Err(KeepReason::Control);
    }
    if attributes & 0x10 != 0 {
        return Err(KeepReason::Transactional);
    }
    if !numbered && read_i64(batch, PRODUCER_ID) != Some(-1) {
        return Err(KeepReason::Idempotent);
    }
    let count = read_i32(batch, RECORD_COUNT)
        .and_then(|c| u32::try_from(c).ok())
        .ok_or(KeepReason::Malformed)?;
    let plain = plain_records(batch, budget)?;
    let mut keyed = Part::default();
    let mut keyless = Part::default();
    let mut pos = 0usize;
    for _ in 0..count {
        let record = next_record(&plain, &mut pos).ok_or(KeepReason::Malformed)?;
        let part = match record.keyed().ok_or(KeepReason::Malformed)? {
            true => &mut keyed,
            false => &mut keyless,
        };
        part.push(&record)?;
    }
    if pos != plain.len() {
        return Err(KeepReason::Malformed);
    }
    let whole = std::borrow::Cow::Borrowed(batch);
    let none = std::borrow::Cow::Borrowed(&[][..]);
    Ok(match (keyed.count, keyless.count) {
        (_, 0) => BatchParts {
            keyed: whole,
            keyless: none,
            keyed_records: count,
            keyless_records: 0,
        },
        (0, _) => BatchParts {
            keyed: none,
            keyless: whole,
            keyed_records: 0,
            keyless_records: count,
        },
        (k, n) => BatchParts {
            keyed: keyed.frame(batch, attributes)?.into(),
            keyless: keyless.frame(batch, attributes)?.into(),
            keyed_records: k,
            keyless_records: n,
        },
    })
}

/// The records of one part of a batch, re-framed as they are added.
#[derive(Default)]
struct Part {
    records: Vec<u8>,
    count: u32,
    max_timestamp_delta: i64,
}

impl Part {
    /// Appends `record` with the next offset delta of this part.
    fn push(&mut self, record: &RecordFrame) -> Result<(), KeepReason> {
        let offset_delta = i64::from(self.count);
        write_record(
            &mut self.records,
            record,
            record.timestamp_delta,
            offset_delta,
        )
        .ok_or(KeepReason::Malformed)?;
        self.max_timestamp_delta = if self.count == 0 {
            record.timestamp_delta
        } else {
            self.max_timestamp_delta.max(record.timestamp_delta)
        };
        self.count += 1;
        Ok(())
    }

    /// This part as a batch with `batch`'s header, compressed with its codec.
    fn frame(&self, batch: &[u8], attributes: i16) -> Result<Vec<u8>, KeepReason> {
        let codec = attributes & 0x07;
        let compressed;
        let region = if codec == 0 {
            &self.records[..]
        } else {
            compressed = compress(codec, &self.records).ok_or(KeepReason::Unsplittable)?;
            &compressed[..]
        };
        let mut out = Vec::with_capacity(RECORDS + region.len());
        out.extend_from_slice(batch.get(..RECORDS).ok_or(KeepReason::Malformed)?);
        out.extend_from_slice(region);
        // (A compressed part can come out larger than the whole batch; the client sized its
        // batches to what the topic takes, so such a part is not sent.)
        if out.len() > batch.len() {
            return Err(KeepReason::Unsplittable);
        }
        let base_timestamp =
            read_i64(batch, super::batch::BASE_TIMESTAMP).ok_or(KeepReason::Malformed)?;
        let max_timestamp = base_timestamp.saturating_add(self.max_timestamp_delta);
        let length = i32::try_from(out.len() - 12).map_err(|_| KeepReason::Unsplittable)?;
        let last = i32::try_from(self.count - 1).map_err(|_| KeepReason::Malformed)?;
        let count = i32::try_from(self.count).map_err(|_| KeepReason::Malformed)?;
        out[..8].copy_from_slice(&0i64.to_be_bytes());
        out[BATCH_LENGTH..BATCH_LENGTH + 4].copy_from_slice(&length.to_be_bytes());
        out[LAST_OFFSET_DELTA..LAST_OFFSET_DELTA + 4].copy_from_slice(&last.to_be_bytes());
        out[MAX_TIMESTAMP..MAX_TIMESTAMP + 8].copy_from_slice(&max_timestamp.to_be_bytes());
        out[RECORD_COUNT..RECORD_COUNT + 4].copy_from_slice(&count.to_be_bytes());
        let crc = crc32c::crc32c(&out[ATTRIBUTES..]);
        out[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::records::{
        Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions,
    };

    use crate::route::batch::tests::CODECS;
    use crate::route::batch::varint;
    const T0: i64 = 1_700_000_000_000;

    /// A record `i` with `key`, a value and a header naming it, and a timestamp that goes
    /// back and forth (so the max timestamp is not the last record's).
    fn record(i: usize, key: Option<&str>, producer_id: i64) -> Record {
        Record {
            // (kafka-protocol's encoder starts a new batch where offset - sequence changes:
            // this keeps one batch whose base sequence is -1.)
            sequence: if producer_id < 0 {
                i as i32 - 1
            } else {
                i as i32
            },
            timestamp: T0 + [5, 1, 9, 3, 7, 2][i % 6] + 10 * (i as i64 / 6),
            value: Some(Bytes::from(format!("value-{i}-{}", "x".repeat(300)))),
            headers: [("n".into(), Some(Bytes::from(format!("{i}"))))]
                .into_iter()
                .collect(),
            ..crate::route::batch::tests::record(i, key, producer_id)
        }
    }

    /// One batch written by kafka-protocol's encoder (an independent implementation).
    fn encode(records: &[Record], compression: Compression) -> Bytes {
        let mut out = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression,
        };
        RecordBatchEncoder::encode(&mut out, records, &options).unwrap();
        out.freeze()
    }

    fn mixed(keys: &[Option<&str>], compression: Compression) -> (Vec<Record>, Bytes) {
        let records: Vec<Record> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| record(i, *k, -1))
            .collect();
        let batch = encode(&records, compression);
        (records, batch)
    }

    /// A record as compared here: key, value, headers, timestamp, offset.
    type Seen = (Option<Bytes>, Option<Bytes>, String, i64, i64);

    /// Decodes `batch` (checking its CRC) into what the tests compare.
    fn decoded(batch: &Bytes) -> Vec<Seen> {
        let mut buf = batch.clone();
        let set = RecordBatchDecoder::decode(&mut buf).unwrap();
        set.records
            .into_iter()
            .map(|r| {
                let headers = format!("{:?}", r.headers);
                (r.key, r.value, headers, r.timestamp, r.offset)
            })
            .collect()
    }

    fn expect(records: &[&Record]) -> Vec<Seen> {
        records
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let headers = format!("{:?}", r.headers);
                (
                    r.key.clone(),
                    r.value.clone(),
                    headers,
                    r.timestamp,
                    i as i64,
                )
            })
            .collect()
    }

    fn check(records: &Bytes) -> Result<Divided, KeepReason> {
        divide(records, &mut InspectBudget::per_request())
    }

    #[test]
    fn mixed_batches_divide_into_keyed_and_keyless_in_every_codec() {
        let keys = [
            None,
            Some("a"),
            None,
            None,
            Some("b"),
            Some("a"),
            None,
            None,
        ];
        for c in CODECS {
            let (records, batch) = mixed(&keys, c);
            let divided = check(&batch).unwrap_or_else(|e| panic!("{c:?}: {e:?}"));
            let keyed: Vec<&Record> = records.iter().filter(|r| r.key.is_some()).collect();
            let keyless: Vec<&Record> = records.iter().filter(|r| r.key.is_none()).collect();
            assert_eq!(decoded(&divided.keyed), expect(&keyed), "{c:?}");
            assert_eq!(decoded(&divided.keyless), expect(&keyless), "{c:?}");
            assert_eq!(divided.keyless_records, 5);
            for part in [&divided.keyed, &divided.keyless] {
                // The header's codec and base timestamp are the batch's; max timestamp is
                // the part's own.
                assert_eq!(
                    part[ATTRIBUTES..ATTRIBUTES + 2],
                    batch[ATTRIBUTES..ATTRIBUTES + 2]
                );
                let mut buf = part.clone();
                let set = RecordBatchDecoder::decode(&mut buf).unwrap();
                let max = set.records.iter().map(|r| r.timestamp).max();
                assert_eq!(read_i64(part, MAX_TIMESTAMP), max, "{c:?}");
                assert_eq!(read_i64(part, 0), Some(0));
            }
        }
    }

    /// The records of an uncompressed batch: (attributes, timestamp delta, offset delta, the
    /// bytes after the offset delta).
    fn walk(batch: &[u8]) -> Vec<(u8, i64, i64, Vec<u8>)> {
        let region = &batch[RECORDS..];
        let mut pos = 0;
        let mut out = Vec::new();
        while pos < region.len() {
            let len = varint(region, &mut pos).unwrap() as usize;
            let end = pos + len;
            let attributes = region[pos];
            let mut at = pos + 1;
            let timestamp_delta = varint(region, &mut at).unwrap();
            let offset_delta = varint(region, &mut at).unwrap();
            out.push((
                attributes,
                timestamp_delta,
                offset_delta,
                region[at..end].to_vec(),
            ));
            pos = end;
        }
        out
    }

    #[test]
    fn uncompressed_parts_carry_each_record_byte_for_byte_but_its_offset_delta() {
        let keys = [Some("k"), None, Some("k"), None, None, Some("j")];
        let (_, batch) = mixed(&keys, Compression::None);
        let divided = check(&batch).unwrap();
        let whole = walk(&batch);
        for (part, keyed) in [(&divided.keyed, true), (&divided.keyless, false)] {
            let expected: Vec<_> = whole
                .iter()
                .zip(keys)
                .filter(|(_, k)| k.is_some() == keyed)
                .enumerate()
                .map(|(i, (r, _))| (r.0, r.1, i as i64, r.3.clone()))
                .collect();
            assert_eq!(walk(part), expected);
        }
    }

    #[test]
    fn entries_of_one_kind_are_not_divided() {
        for keys in [vec![None, None], vec![Some("a"), Some("b")]] {
            let (_, batch) = mixed(&keys, Compression::Lz4);
            assert_eq!(check(&batch), Err(KeepReason::Keyed));
        }
    }

    #[test]
    fn batches_of_one_kind_in_a_mixed_entry_go_to_their_side_untouched() {
        let (_, keyed) = mixed(&[Some("a"), Some("b")], Compression::Gzip);
        let (_, keyless) = mixed(&[None, None, None], Compression::None);
        let mut entry = BytesMut::new();
        entry.extend_from_slice(&keyed);
        entry.extend_from_slice(&keyless);
        let divided = check(&entry.freeze()).unwrap();
        assert_eq!(divided.keyed, keyed);
        assert_eq!(divided.keyless, keyless);
        assert_eq!(divided.keyless_records, 3);
    }

    #[test]
    fn idempotent_and_transactional_batches_are_not_divided() {
        let records: Vec<Record> = [None, Some("a")]
            .iter()
            .enumerate()
            .map(|(i, k)| record(i, *k, 7))
            .collect();
        assert_eq!(
            check(&encode(&records, Compression::None)),
            Err(KeepReason::Idempotent)
        );
        let transactional: Vec<Record> = records
            .into_iter()
            .map(|r| Record {
                transactional: true,
                ..r
            })
            .collect();
        assert_eq!(
            check(&encode(&transactional, Compression::None)),
            Err(KeepReason::Transactional)
        );
    }

    #[test]
    fn decompressing_counts_against_the_request_budget() {
        let (_, batch) = mixed(&[None, Some("a")], Compression::Zstd);
        let mut tiny = InspectBudget::with_limit(100);
        assert_eq!(divide(&batch, &mut tiny), Err(KeepReason::Uninspectable));
        let mut budget = InspectBudget::with_limit(1 << 20);
        assert!(divide(&batch, &mut budget).is_ok());
        assert!(budget.remaining() < (1 << 20) - 600);
    }

    #[test]
    fn garbage_and_truncation_never_panic_and_never_divide() {
        let (_, good) = mixed(&[None, Some("a"), None], Compression::None);
        for cut in 0..good.len() {
            assert!(check(&good.slice(..cut)).is_err(), "cut at {cut}");
        }
        let mut corrupt = good.to_vec();
        corrupt[RECORDS + 3..].fill(0xff);
        assert!(check(&Bytes::from(corrupt)).is_err());
        let (_, gz) = mixed(&[None, Some("a")], Compression::Gzip);
        let mut broken = gz.to_vec();
        let n = broken.len();
        broken[n - 20..n - 8].fill(0x55);
        assert!(check(&Bytes::from(broken)).is_err());
    }
}
