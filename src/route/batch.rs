//! Deciding from its bytes whether a record batch may go to another partition.
//!
//! A batch may move only if it is a magic v2 batch, not transactional, not a control batch, and
//! every record key is null. Batches of an idempotent producer carry sequence numbers that
//! belong to their partition: they move only if kroute renumbers them ([`renumber`]). Keys live inside the (possibly compressed) records region, so compressed batches
//! are decompressed to look, with a size limit, and the original bytes are what gets forwarded.
//! The record walk reads only lengths and the key length of each record: no allocation per record.

use std::borrow::Cow;

use bytes::Bytes;

use super::codec::decompress;
pub use crate::balance::keep::KeepReason;

/// Decompressed bytes one request may cost to inspect; batches beyond it stay where they are.
/// (Decompression runs on the connection's task: this bounds both memory and time per request.)
const MAX_INSPECT_BYTES_PER_REQUEST: u64 = 64 * 1024 * 1024;

/// What is left of one request's decompression allowance.
#[derive(Debug)]
pub struct InspectBudget {
    remaining: u64,
}

impl InspectBudget {
    pub fn per_request() -> Self {
        Self::with_limit(MAX_INSPECT_BYTES_PER_REQUEST)
    }

    /// An allowance of `bytes` decompressed bytes (the fuzz targets use small ones).
    pub fn with_limit(bytes: u64) -> Self {
        Self { remaining: bytes }
    }

    /// Decompressed bytes still allowed.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }
}

// Record batch v2 layout (byte offsets).
pub(super) const BATCH_LENGTH: usize = 8;
pub(super) const MAGIC: usize = 16;
pub(super) const CRC: usize = 17;
pub(super) const ATTRIBUTES: usize = 21;
pub(super) const LAST_OFFSET_DELTA: usize = 23;
pub(super) const BASE_TIMESTAMP: usize = 27;
pub(super) const MAX_TIMESTAMP: usize = 35;
pub(super) const PRODUCER_ID: usize = 43;
pub(super) const PRODUCER_EPOCH: usize = 51;
pub(super) const BASE_SEQUENCE: usize = 53;
pub(super) const RECORD_COUNT: usize = 57;
pub(super) const RECORDS: usize = 61;

/// What is known about a partition's records after looking at them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Movable {
    pub records: u32,
    /// Some batch carries a producer id: an idempotent producer's sequence numbers.
    pub idempotent: bool,
}

/// Inspects the records of one partition entry of a Produce request.
pub fn inspect(records: &Bytes, budget: &mut InspectBudget) -> Result<Movable, KeepReason> {
    match inspect_keys(records, budget)? {
        Keys::Keyless(movable) => Ok(movable),
        Keys::Keyed { .. } => Err(KeepReason::Keyed),
    }
}

/// What [`inspect_keys`] found of the keys of an entry's records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    /// No record has a key.
    Keyless(Movable),
    /// A record has a key. `may_mix` unless every record was read and every one has a key:
    /// only then is there certainly nothing to divide ([`super::divide`]), and dividing (which
    /// decompresses the records again) is not tried.
    Keyed { may_mix: bool },
}

/// [`inspect`], telling an entry whose records all have keys from one that may mix them.
pub fn inspect_keys(records: &Bytes, budget: &mut InspectBudget) -> Result<Keys, KeepReason> {
    let mut rest = records.clone();
    let mut total = 0u32;
    let mut idempotent = false;
    if rest.is_empty() {
        return Err(KeepReason::Malformed);
    }
    while !rest.is_empty() {
        let batch = split_batch(&mut rest)?;
        match inspect_batch(&batch, budget)? {
            Scan::Keyless => {
                let count = read_i32(&batch, RECORD_COUNT).unwrap_or(0) as u32;
                total = total.saturating_add(count);
            }
            Scan::Keyed { all_keyed } => {
                let may_mix = total > 0 || !all_keyed || !rest.is_empty();
                return Ok(Keys::Keyed { may_mix });
            }
        }
        idempotent |= read_i64(&batch, PRODUCER_ID) != Some(-1);
    }
    Ok(Keys::Keyless(Movable {
        records: total,
        idempotent,
    }))
}

/// The producer numbering of one partition entry's batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sequenced {
    pub producer_id: i64,
    pub epoch: i16,
    /// The first batch's base sequence.
    pub base: i32,
    /// Records in all batches.
    pub records: i32,
    /// What the batches carry, whatever their producer numbers: see [`content_of`].
    pub content: u32,
}

/// Reads the producer numbering of a partition entry from its batch headers alone: None unless
/// every batch is a magic v2, non-transactional, non-control batch of one producer id and
/// epoch, numbered contiguously.
pub fn sequenced(records: &Bytes) -> Option<Sequenced> {
    let mut rest = records.clone();
    let mut found: Option<Sequenced> = None;
    while !rest.is_empty() {
        let batch = split_batch(&mut rest).ok()?;
        let attributes = i16::from_be_bytes([*batch.get(ATTRIBUTES)?, *batch.get(ATTRIBUTES + 1)?]);
        if batch.get(MAGIC) != Some(&2) || attributes & 0x30 != 0 {
            return None;
        }
        let producer_id = read_i64(&batch, PRODUCER_ID).filter(|p| *p >= 0)?;
        let epoch = i16::from_be_bytes(batch.get(PRODUCER_EPOCH..BASE_SEQUENCE)?.try_into().ok()?);
        let base = read_i32(&batch, BASE_SEQUENCE).filter(|s| *s >= 0)?;
        let count = read_i32(&batch, RECORD_COUNT).filter(|c| *c > 0)?;
        found = Some(match found {
            None => Sequenced {
                producer_id,
                epoch,
                base,
                records: count,
                content: content_of(0, &batch)?,
            },
            Some(s) => {
                let contiguous = super::sequence::advance(s.base, s.records) == base;
                if s.producer_id != producer_id || s.epoch != epoch || !contiguous {
                    return None;
                }
                Sequenced {
                    records: s.records.checked_add(count)?,
                    content: content_of(s.content, &batch)?,
                    ..s
                }
            }
        });
    }
    found
}

/// A fingerprint of what one batch carries, left out what a producer rewrites when it moves a
/// batch to a new epoch: CRC-32C (continuing `crc`) of the batch after its CRC, without the
/// producer id, epoch and base sequence (attributes, offset and timestamp range, record count
/// and the records, compressed or not). The Java producer renumbers the batches in flight on a
/// partition into its new epoch after a refusal (KIP-360) and resends them with the same
/// bytes otherwise: this is how kroute knows such a batch again
/// ([`crate::route::sequence::Producer::lookup`]). Two batches have the same content only if
/// their records and timestamps are byte for byte the same.
fn content_of(crc: u32, batch: &[u8]) -> Option<u32> {
    let crc = crc32c::crc32c_append(crc, batch.get(ATTRIBUTES..PRODUCER_ID)?);
    Some(crc32c::crc32c_append(crc, batch.get(RECORD_COUNT..)?))
}

/// A copy of a partition entry's batches numbered from `first` on under producer epoch `epoch`
/// (the client's, or above it for a producer kroute recovered after a restart: see
/// [`crate::route::recovery`]), each batch's CRC-32C recomputed (it covers both). Everything
/// else stays byte-identical.
pub fn renumber(records: &Bytes, epoch: i16, first: i32) -> Option<Bytes> {
    let mut out = records.to_vec();
    let mut pos = 0usize;
    let mut seq = first;
    while pos < out.len() {
        let len = read_i32(&out[pos..], BATCH_LENGTH).and_then(|l| usize::try_from(l).ok())?;
        let end = pos.checked_add(len)?.checked_add(12)?;
        let batch = out.get_mut(pos..end)?;
        let count = read_i32(batch, RECORD_COUNT)?;
        batch
            .get_mut(PRODUCER_EPOCH..BASE_SEQUENCE)?
            .copy_from_slice(&epoch.to_be_bytes());
        batch
            .get_mut(BASE_SEQUENCE..BASE_SEQUENCE + 4)?
            .copy_from_slice(&seq.to_be_bytes());
        let crc = crc32c::crc32c(batch.get(ATTRIBUTES..)?);
        batch
            .get_mut(CRC..CRC + 4)?
            .copy_from_slice(&crc.to_be_bytes());
        seq = super::sequence::advance(seq, count);
        pos = end;
    }
    Some(Bytes::from(out))
}

fn split_batch(rest: &mut Bytes) -> Result<Bytes, KeepReason> {
    let len = read_i32(rest, BATCH_LENGTH).ok_or(KeepReason::Malformed)?;
    let total = usize::try_from(len)
        .ok()
        .and_then(|l| l.checked_add(12))
        .filter(|t| *t >= RECORDS && *t <= rest.len())
        .ok_or(KeepReason::Malformed)?;
    Ok(rest.split_to(total))
}

pub(super) fn read_i64(b: &[u8], at: usize) -> Option<i64> {
    Some(i64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

pub(super) fn read_i32(b: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn inspect_batch(batch: &Bytes, budget: &mut InspectBudget) -> Result<Scan, KeepReason> {
    if batch.get(MAGIC) != Some(&2) {
        return Err(KeepReason::Malformed);
    }
    let attributes = i16::from_be_bytes([batch[ATTRIBUTES], batch[ATTRIBUTES + 1]]);
    if attributes & 0x20 != 0 {
        return Err(KeepReason::Control);
    }
    if attributes & 0x10 != 0 {
        return Err(KeepReason::Transactional);
    }
    let count = read_i32(batch, RECORD_COUNT)
        .and_then(|c| u32::try_from(c).ok())
        .ok_or(KeepReason::Malformed)?;
    let plain = plain_records(batch, budget)?;
    scan_keys(&plain, count)
}

/// The records region of a magic v2 `batch`, decompressed within `budget` if it is compressed
/// (borrowed if not).
pub(super) fn plain_records<'b>(
    batch: &'b [u8],
    budget: &mut InspectBudget,
) -> Result<Cow<'b, [u8]>, KeepReason> {
    let attributes = read_i16(batch, ATTRIBUTES).ok_or(KeepReason::Malformed)?;
    let region = batch.get(RECORDS..).ok_or(KeepReason::Malformed)?;
    match attributes & 0x07 {
        0 => Ok(Cow::Borrowed(region)),
        codec => {
            let plain = decompress(codec, region, budget.remaining)?;
            budget.remaining -= plain.len() as u64;
            Ok(Cow::Owned(plain))
        }
    }
}

pub(super) fn read_i16(b: &[u8], at: usize) -> Option<i16> {
    Some(i16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

/// Reads a zigzag varint (as used inside records) as i64.
pub(super) fn varint(b: &[u8], pos: &mut usize) -> Option<i64> {
    let mut raw: u64 = 0;
    for shift in (0..70).step_by(7) {
        let byte = *b.get(*pos)?;
        *pos += 1;
        raw |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some((raw >> 1) as i64 ^ -((raw & 1) as i64));
        }
    }
    None
}

/// What the keys of one batch's records are.
enum Scan {
    Keyless,
    /// `all_keyed` if every record was read and has a key.
    Keyed {
        all_keyed: bool,
    },
}

/// Walks `count` records until it has seen both a key and a null key. Once a key is seen, a
/// record that does not read ends the walk (the batch stays, keyed, either way).
fn scan_keys(records: &[u8], count: u32) -> Result<Scan, KeepReason> {
    let mut pos = 0usize;
    let mut keyed = false;
    for _ in 0..count {
        let Some(has_key) = next_record(records, &mut pos).and_then(|r| r.keyed()) else {
            return match keyed {
                true => Ok(Scan::Keyed { all_keyed: false }),
                false => Err(KeepReason::Malformed),
            };
        };
        match (has_key, keyed) {
            (true, _) => keyed = true,
            (false, true) => return Ok(Scan::Keyed { all_keyed: false }),
            (false, false) => {}
        }
    }
    Ok(match keyed {
        true => Scan::Keyed { all_keyed: true },
        false => Scan::Keyless,
    })
}

/// The frame of one record of an uncompressed records region, as re-framing and key checks
/// read it (the record's own bytes, not copied).
pub(super) struct RecordFrame<'p> {
    pub attributes: u8,
    pub timestamp_delta: i64,
    pub offset_delta: i64,
    /// Everything after the offset delta: key, value, headers.
    pub rest: &'p [u8],
}

impl RecordFrame<'_> {
    /// Whether the record has a key (a null key has length -1); None if that does not read.
    pub fn keyed(&self) -> Option<bool> {
        let mut at = 0;
        Some(varint(self.rest, &mut at)? >= 0)
    }
}

/// Reads the record at `pos` of an uncompressed records region, moving `pos` past it; None if
/// it does not fit its length.
pub(super) fn next_record<'p>(region: &'p [u8], pos: &mut usize) -> Option<RecordFrame<'p>> {
    let len = usize::try_from(varint(region, pos)?).ok()?;
    let end = pos.checked_add(len).filter(|e| *e <= region.len())?;
    let attributes = *region.get(*pos)?;
    let mut at = *pos + 1;
    let timestamp_delta = varint(region, &mut at)?;
    let offset_delta = varint(region, &mut at)?;
    let rest = region.get(at..end)?;
    *pos = end;
    Some(RecordFrame {
        attributes,
        timestamp_delta,
        offset_delta,
        rest,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::records::{
        Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions,
        TimestampType,
    };

    /// Record `i` of a producer (-1: a plain one), with `key`.
    pub(crate) fn record(i: usize, key: Option<&str>, producer_id: i64) -> Record {
        Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id,
            producer_epoch: if producer_id < 0 { -1 } else { 0 },
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: if producer_id < 0 { -1 } else { i as i32 },
            timestamp: 1_700_000_000_000,
            key: key.map(|k| Bytes::copy_from_slice(k.as_bytes())),
            value: Some(Bytes::from(format!("value-{i}-{}", "x".repeat(50)))),
            headers: Default::default(),
        }
    }

    /// Encodes one batch with kafka-protocol's encoder (an independent implementation).
    pub(crate) fn batch(
        keys: &[Option<&str>],
        compression: Compression,
        producer_id: i64,
        transactional: bool,
    ) -> Bytes {
        let records: Vec<Record> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| Record {
                transactional,
                ..record(i, *k, producer_id)
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

    pub(crate) const CODECS: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    fn check(records: &Bytes) -> Result<Movable, KeepReason> {
        inspect(records, &mut InspectBudget::per_request())
    }

    #[test]
    fn the_per_request_budget_is_shared_by_its_batches() {
        let b = batch(&[None], Compression::Gzip, -1, false);
        let mut budget = InspectBudget { remaining: 200 };
        assert!(inspect(&b, &mut budget).is_ok());
        let left = budget.remaining;
        assert!(left < 200);
        let mut tiny = InspectBudget { remaining: 10 };
        assert_eq!(inspect(&b, &mut tiny), Err(KeepReason::Uninspectable));
    }

    #[test]
    fn keyless_batches_move_in_every_compression() {
        for c in CODECS {
            let b = batch(&[None, None, None], c, -1, false);
            let movable = Movable {
                records: 3,
                idempotent: false,
            };
            assert_eq!(check(&b), Ok(movable), "{c:?}");
        }
    }

    #[test]
    fn any_key_keeps_the_batch_in_every_compression() {
        for c in CODECS {
            assert_eq!(
                check(&batch(&[None, Some("k"), None], c, -1, false)),
                Err(KeepReason::Keyed),
                "{c:?}"
            );
            assert_eq!(
                check(&batch(&[Some("")], c, -1, false)),
                Err(KeepReason::Keyed),
                "empty key is a key"
            );
        }
    }

    #[test]
    fn idempotent_batches_are_flagged_and_transactional_ones_stay() {
        assert_eq!(
            check(&batch(&[None], Compression::None, 7, false)),
            Ok(Movable {
                records: 1,
                idempotent: true
            })
        );
        assert_eq!(
            check(&batch(&[None], Compression::None, 7, true)),
            Err(KeepReason::Transactional)
        );
    }

    #[test]
    fn only_an_entry_read_whole_with_every_record_keyed_cannot_mix() {
        let keys = |records: &Bytes| inspect_keys(records, &mut InspectBudget::per_request());
        // (An idempotent producer's records, which kafka-protocol writes as one batch; a plain
        // producer's it writes one batch per record: see the divide tests.)
        for c in CODECS {
            let keyed = batch(&[Some("a"), Some("b")], c, 7, false);
            assert_eq!(keys(&keyed), Ok(Keys::Keyed { may_mix: false }), "{c:?}");
            let mixed = batch(&[Some("a"), None], c, 7, false);
            assert_eq!(keys(&mixed), Ok(Keys::Keyed { may_mix: true }), "{c:?}");
        }
        let mut one = BytesMut::new();
        one.extend_from_slice(&batch(&[None], Compression::None, -1, false));
        one.extend_from_slice(&batch(&[Some("k")], Compression::None, -1, false));
        assert_eq!(keys(&one.freeze()), Ok(Keys::Keyed { may_mix: true }));
        let mut later = BytesMut::new();
        later.extend_from_slice(&batch(&[Some("k")], Compression::None, -1, false));
        later.extend_from_slice(&batch(&[Some("j")], Compression::None, -1, false));
        assert_eq!(keys(&later.freeze()), Ok(Keys::Keyed { may_mix: true }));
        // A key, then a record that does not read: keyed, and maybe mixed.
        let mut cut = batch(&[Some("a")], Compression::None, 7, false).to_vec();
        cut[RECORD_COUNT + 3] = 2;
        assert_eq!(keys(&Bytes::from(cut)), Ok(Keys::Keyed { may_mix: true }));
    }

    #[test]
    fn two_batches_in_one_entry_are_both_checked() {
        let mut both = BytesMut::new();
        both.extend_from_slice(&batch(&[None], Compression::None, -1, false));
        both.extend_from_slice(&batch(&[None, None], Compression::Lz4, -1, false));
        let movable = Movable {
            records: 3,
            idempotent: false,
        };
        assert_eq!(check(&both.clone().freeze()), Ok(movable));
        both.extend_from_slice(&batch(&[Some("k")], Compression::None, -1, false));
        assert_eq!(check(&both.freeze()), Err(KeepReason::Keyed));
    }

    #[test]
    fn garbage_and_truncation_never_panic_and_never_move() {
        let good = batch(&[None], Compression::None, -1, false);
        for cut in 0..good.len() {
            assert!(check(&good.slice(..cut)).is_err(), "cut at {cut}");
        }
        let mut corrupt = good.to_vec();
        corrupt[61..].fill(0xff);
        assert!(check(&Bytes::from(corrupt)).is_err());
        let mut compressed = batch(&[None], Compression::Gzip, -1, false).to_vec();
        let n = compressed.len();
        compressed[n - 8..].fill(0);
        compressed[65..70].fill(0x55);
        assert!(check(&Bytes::from(compressed)).is_err());
    }

    /// An idempotent batch of `n` keyless records: producer 7, epoch 0, sequences 0..n.
    fn numbered(n: usize, compression: Compression) -> Bytes {
        batch(&vec![None; n], compression, 7, false)
    }

    fn concat(parts: &[&Bytes]) -> Bytes {
        let mut out = BytesMut::new();
        for part in parts {
            out.extend_from_slice(part);
        }
        out.freeze()
    }

    fn with_bytes(b: &Bytes, at: usize, bytes: &[u8]) -> Bytes {
        let mut out = b.to_vec();
        out[at..at + bytes.len()].copy_from_slice(bytes);
        Bytes::from(out)
    }

    /// The producer numbering `sequenced` reads from `records`.
    fn numbering(records: &Bytes) -> Option<(i64, i16, i32, i32)> {
        sequenced(records).map(|s| (s.producer_id, s.epoch, s.base, s.records))
    }

    fn seq(producer_id: i64, epoch: i16, base: i32, records: i32) -> Option<(i64, i16, i32, i32)> {
        Some((producer_id, epoch, base, records))
    }

    #[test]
    fn content_survives_a_new_epoch_and_numbers_and_tells_other_records_apart() {
        for c in CODECS {
            let b = numbered(3, c);
            let content = sequenced(&b).map(|s| s.content);
            // What Java does to a batch in flight when it bumps its epoch (KIP-360).
            let rewritten = renumber(&b, 1, 45).unwrap();
            assert_eq!(sequenced(&rewritten).map(|s| s.content), content, "{c:?}");
            let other = batch(&[None, None, Some("k")], c, 7, false);
            assert_ne!(sequenced(&other).map(|s| s.content), content, "{c:?}");
        }
    }

    #[test]
    fn sequenced_reads_producer_epoch_base_and_count_from_the_header() {
        for c in CODECS {
            assert_eq!(numbering(&numbered(3, c)), seq(7, 0, 0, 3), "{c:?}");
        }
        // Other values, written into the header (sequenced reads no CRC).
        let b = numbered(2, Compression::None);
        let b = with_bytes(&b, PRODUCER_ID, &0x0102_0304_0506_0708i64.to_be_bytes());
        let b = with_bytes(&b, PRODUCER_EPOCH, &3i16.to_be_bytes());
        let b = with_bytes(&b, BASE_SEQUENCE, &1000i32.to_be_bytes());
        assert_eq!(numbering(&b), seq(0x0102_0304_0506_0708, 3, 1000, 2));
    }

    #[test]
    fn sequenced_sums_contiguous_batches_of_one_entry() {
        let second = renumber(&numbered(2, Compression::Lz4), 0, 3).unwrap();
        let third = renumber(&numbered(4, Compression::Zstd), 0, 5).unwrap();
        let entry = concat(&[&numbered(3, Compression::None), &second, &third]);
        assert_eq!(numbering(&entry), seq(7, 0, 0, 9));
        // Contiguous across the sequence wrap too.
        let last = renumber(&numbered(1, Compression::None), 0, i32::MAX).unwrap();
        let after = numbered(2, Compression::None);
        assert_eq!(numbering(&concat(&[&last, &after])), seq(7, 0, i32::MAX, 3));
    }

    #[test]
    fn sequenced_refuses_entries_kroute_may_not_renumber() {
        let one = numbered(3, Compression::None);
        let no = |records: Bytes, why: &str| assert_eq!(sequenced(&records), None, "{why}");
        no(batch(&[None], Compression::None, 7, true), "transactional");
        no(
            batch(&[None], Compression::None, -1, false),
            "not idempotent",
        );
        no(Bytes::new(), "empty");
        let mut control = one.to_vec();
        control[ATTRIBUTES + 1] |= 0x20;
        no(Bytes::from(control), "control");
        no(with_bytes(&one, MAGIC, &[1]), "magic 1");
        no(
            with_bytes(&one, BASE_SEQUENCE, &(-1i32).to_be_bytes()),
            "no sequence",
        );
        no(
            with_bytes(&one, RECORD_COUNT, &0i32.to_be_bytes()),
            "no records",
        );
        for cut in 1..one.len() {
            assert_eq!(sequenced(&one.slice(..cut)), None, "cut at {cut}");
        }
        let next = |b: Bytes| renumber(&b, 0, 3).unwrap();
        let two = |b: Bytes| concat(&[&one, &b]);
        // Each of these would be fine alone: mixed within one entry, they are not.
        let other_producer = next(batch(&[None], Compression::None, 8, false));
        no(two(other_producer), "two producers");
        no(
            two(batch(&[None], Compression::None, -1, false)),
            "idempotent and not",
        );
        no(
            two(next(batch(&[None], Compression::None, 7, true))),
            "transactional second",
        );
        let next_epoch = with_bytes(
            &next(numbered(1, Compression::None)),
            PRODUCER_EPOCH,
            &[0, 1],
        );
        no(two(next_epoch), "two epochs");
        no(two(numbered(2, Compression::None)), "second restarts at 0");
        no(
            two(renumber(&numbered(2, Compression::None), 0, 4).unwrap()),
            "a gap",
        );
        no(
            two(renumber(&numbered(2, Compression::None), 0, 2).unwrap()),
            "an overlap",
        );
        no(
            two(next(numbered(2, Compression::None)).slice(..70)),
            "second truncated",
        );
    }

    #[test]
    fn renumber_rewrites_base_sequences_and_crcs_and_nothing_else() {
        for c in CODECS {
            let first = numbered(3, c);
            let second = numbered(2, Compression::None);
            let entry = concat(&[&first, &second]);
            let out = renumber(&entry, 0, 100).unwrap();
            assert_eq!(out.len(), entry.len(), "{c:?}");
            // The decoder checks each batch's CRC-32C.
            let sets = RecordBatchDecoder::decode_all(&mut out.clone()).expect("valid CRCs");
            let before = RecordBatchDecoder::decode_all(&mut entry.clone()).unwrap();
            assert_eq!(sets.len(), 2);
            let sequences: Vec<i32> = sets
                .iter()
                .flat_map(|s| &s.records)
                .map(|r| r.sequence)
                .collect();
            assert_eq!(sequences, (100..105).collect::<Vec<_>>(), "{c:?}");
            for (old, new) in before.iter().zip(&sets) {
                assert_eq!(old.compression, new.compression);
                for (o, n) in old.records.iter().zip(&new.records) {
                    assert_eq!(
                        Record {
                            sequence: n.sequence,
                            ..o.clone()
                        },
                        *n,
                        "{c:?}"
                    );
                }
            }
            // Byte for byte, only each batch's CRC and base sequence changed.
            let fields = |at: usize| {
                [first.len(), 0].iter().any(|start| {
                    (start + CRC..start + CRC + 4).contains(&at)
                        || (start + BASE_SEQUENCE..start + BASE_SEQUENCE + 4).contains(&at)
                })
            };
            for at in (0..entry.len()).filter(|at| !fields(*at)) {
                assert_eq!(out[at], entry[at], "{c:?}: byte {at}");
            }
            assert_eq!(numbering(&out), seq(7, 0, 100, 5), "{c:?}");
            // Renumbering a batch back to 0 gives the encoder's own bytes, CRC included.
            let alone = renumber(&first, 0, 100).unwrap();
            assert_eq!(renumber(&alone, 0, 0).unwrap(), first, "{c:?}");
        }
    }

    #[test]
    fn renumber_wraps_after_i32_max() {
        let entry = concat(&[
            &numbered(2, Compression::None),
            &numbered(3, Compression::Gzip),
            &numbered(1, Compression::None),
        ]);
        let out = renumber(&entry, 0, i32::MAX - 1).unwrap();
        let bases: Vec<i32> = RecordBatchDecoder::decode_batch_info(&mut out.clone())
            .expect("valid CRCs")
            .iter()
            .map(|b| b.base_sequence)
            .collect();
        assert_eq!(bases, [i32::MAX - 1, 0, 3]);
        assert_eq!(numbering(&out), seq(7, 0, i32::MAX - 1, 6));
    }

    #[test]
    fn renumber_writes_the_upstream_epoch_into_every_batch() {
        let entry = concat(&[
            &numbered(2, Compression::None),
            &numbered(3, Compression::Zstd),
        ]);
        let out = renumber(&entry, 9, 40).unwrap();
        let infos = RecordBatchDecoder::decode_batch_info(&mut out.clone()).expect("valid CRCs");
        let epochs: Vec<i16> = infos.iter().map(|b| b.producer_epoch).collect();
        assert_eq!(epochs, [9, 9]);
        assert_eq!(numbering(&out), seq(7, 9, 40, 5));
    }

    #[test]
    fn renumber_refuses_a_truncated_entry() {
        let first = numbered(2, Compression::None);
        let entry = concat(&[&first, &numbered(3, Compression::Snappy)]);
        assert_eq!(renumber(&Bytes::new(), 0, 5), Some(Bytes::new()));
        for cut in (1..entry.len()).filter(|cut| *cut != first.len()) {
            assert_eq!(renumber(&entry.slice(..cut), 0, 5), None, "cut at {cut}");
        }
        let short = with_bytes(&first, BATCH_LENGTH, &40i32.to_be_bytes());
        assert_eq!(
            renumber(&short.slice(..52), 0, 5),
            None,
            "header cut by its own length"
        );
    }

    #[test]
    fn zigzag_varints() {
        let mut pos = 0;
        assert_eq!(varint(&[0x01], &mut pos), Some(-1));
        pos = 0;
        assert_eq!(varint(&[0x02], &mut pos), Some(1));
        pos = 0;
        assert_eq!(varint(&[0xac, 0x02], &mut pos), Some(150));
        pos = 0;
        assert_eq!(varint(&[0xff; 12], &mut pos), None);
    }
}
