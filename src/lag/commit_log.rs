//! The records of `__consumer_offsets`, read as Burrow reads them: every offset commit of every
//! group, with the time the coordinator wrote it.
//!
//! Polling OffsetFetch tells only where a group is now: not when it committed, nor whether it
//! committed the same offset again. Burrow's verdicts rest on both (STOP compares the silence
//! since the last commit with the window's span; STALL is the same offset committed again and
//! again), so like Burrow kroute tails the group coordinators' own log (`src/lag/tail.rs`) and
//! decodes here, by hand because no crate has these coordinator records:
//!
//! - the key: an int16 record type, then for types 0 and 1 (offset commits; 0 is the legacy
//!   spelling of the same key) the group, topic and partition. Other types are group metadata,
//!   KIP-848 and share-group state: skipped;
//! - the value: an int16 version, then offset, leader epoch (v3+), metadata, commit timestamp
//!   (every version), expire timestamp (v1 only). v4 is a flexible version: its metadata is a
//!   compact string and tagged fields follow, which the decoder never needs to reach. A missing
//!   value is a tombstone (the offset was deleted or expired).
//!
//! Commits written in a transaction (TxnOffsetCommit) count once the transaction commits; the
//! tailer reads with read_committed isolation and [`Aborted`] drops the batches of aborted ones,
//! as a Kafka consumer does.

use std::collections::{BTreeMap, HashSet};

use bytes::{Buf, Bytes};
use kafka_protocol::records::{RecordBatchDecoder, RecordSet};

/// One offset commit as the group coordinator wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedCommit {
    pub group: String,
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    /// When the coordinator wrote it, in ms since the epoch.
    pub timestamp_ms: i64,
}

/// What one record of `__consumer_offsets` is to the lag collector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OffsetsRecord {
    Commit(LoggedCommit),
    /// The group's offset for the partition was deleted (group deleted, offset expired).
    Deleted {
        group: String,
        topic: String,
        partition: i32,
    },
    /// Group metadata, KIP-848 or share-group state: nothing the lag rules use.
    Other,
}

/// A record that claims to be an offset commit but does not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("malformed offset commit record: {0}")]
pub struct Malformed(&'static str);

/// Decodes one record's key and value; `wanted` is asked with the group name before the value
/// is decoded, so that the groups not watched cost only their key.
pub fn decode(
    key: &[u8],
    value: Option<&[u8]>,
    wanted: impl Fn(&str) -> bool,
) -> Result<OffsetsRecord, Malformed> {
    let mut key = Reader(key);
    let record_type = key.i16()?;
    if record_type != 0 && record_type != 1 {
        return Ok(OffsetsRecord::Other);
    }
    let group = key.string()?;
    if !wanted(&group) {
        return Ok(OffsetsRecord::Other);
    }
    let topic = key.string()?;
    let partition = key.i32()?;
    let Some(value) = value else {
        return Ok(OffsetsRecord::Deleted {
            group,
            topic,
            partition,
        });
    };
    let (offset, timestamp_ms) = decode_value(value)?;
    Ok(OffsetsRecord::Commit(LoggedCommit {
        group,
        topic,
        partition,
        offset,
        timestamp_ms,
    }))
}

/// The offset and commit timestamp of an offset commit value.
fn decode_value(value: &[u8]) -> Result<(i64, i64), Malformed> {
    let mut r = Reader(value);
    let version = r.i16()?;
    let offset = r.i64()?;
    match version {
        0..=2 => r.skip_string()?,
        3 => {
            r.i32()?; // leader epoch
            r.skip_string()?;
        }
        4.. => {
            r.i32()?;
            r.skip_compact_string()?;
        }
        _ => return Err(Malformed("negative value version")),
    }
    Ok((offset, r.i64()?))
}

/// A bounded reader over a record's bytes: every read checks what is left.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], Malformed> {
        if self.0.len() < n {
            return Err(Malformed("truncated"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn i16(&mut self) -> Result<i16, Malformed> {
        Ok(self.take(2)?.get_i16())
    }

    fn i32(&mut self) -> Result<i32, Malformed> {
        Ok(self.take(4)?.get_i32())
    }

    fn i64(&mut self) -> Result<i64, Malformed> {
        Ok(self.take(8)?.get_i64())
    }

    fn string(&mut self) -> Result<String, Malformed> {
        let len = usize::try_from(self.i16()?).map_err(|_| Malformed("null string"))?;
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| Malformed("string not UTF-8"))
    }

    fn skip_string(&mut self) -> Result<(), Malformed> {
        let len = self.i16()?;
        // Metadata is a plain string, but a null (-1) costs nothing to accept.
        self.take(usize::try_from(len).unwrap_or(0)).map(|_| ())
    }

    fn skip_compact_string(&mut self) -> Result<(), Malformed> {
        let mut len: u64 = 0;
        for shift in (0..35).step_by(7) {
            let byte = self.take(1)?[0];
            len |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                // Compact strings store length + 1 (0 is null).
                let len =
                    usize::try_from(len.saturating_sub(1)).map_err(|_| Malformed("length"))?;
                return self.take(len).map(|_| ());
            }
        }
        Err(Malformed("varint too long"))
    }
}

/// The complete record batches in a Fetch answer's `records`, each decoded with its base
/// offset, and the offset to fetch from next. A fetch may end in a partial batch (the broker
/// cuts at its byte limit): it is left for the next fetch. A batch that does not decode (an old
/// message format, a codec kroute lacks) is skipped with the next offset moved past it.
pub fn batches(mut records: Bytes, mut next: i64) -> (Vec<RecordSet>, i64, usize) {
    const HEADER: usize = 12; // base offset (8) + batch length (4)
    let (mut sets, mut skipped) = (Vec::new(), 0);
    while records.len() >= HEADER {
        let base = (&records[..8]).get_i64();
        let length = (&records[8..12]).get_i32();
        let Ok(length) = usize::try_from(length) else {
            break;
        };
        if records.len() < HEADER + length {
            break;
        }
        let mut batch = records.split_to(HEADER + length);
        // The last offset is base + last offset delta (bytes 23..27 of a v2 batch).
        let last = (batch.len() >= 27).then(|| base + i64::from((&batch[23..27]).get_i32()));
        match RecordBatchDecoder::decode(&mut batch) {
            Ok(set) => {
                let end = set
                    .records
                    .last()
                    .map(|r| r.offset)
                    .or(last)
                    .unwrap_or(base);
                next = next.max(end + 1);
                sets.push(set);
            }
            Err(_) => {
                skipped += 1;
                next = next.max(last.unwrap_or(base) + 1);
            }
        }
    }
    (sets, next, skipped)
}

/// The aborted transactions of one fetched partition (from the Fetch answer), applied in offset
/// order: a transactional batch is dropped while its producer has an aborted transaction open.
pub struct Aborted {
    /// First offset -> producer ids whose aborted transaction starts there.
    pending: BTreeMap<i64, Vec<i64>>,
    open: HashSet<i64>,
}

impl Aborted {
    pub fn new(aborted: impl IntoIterator<Item = (i64, i64)>) -> Self {
        let mut pending: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        for (producer_id, first_offset) in aborted {
            pending.entry(first_offset).or_default().push(producer_id);
        }
        Self {
            pending,
            open: HashSet::new(),
        }
    }

    /// Whether the records of `set` count. Call for every batch, in offset order.
    pub fn keeps(&mut self, set: &RecordSet) -> bool {
        let Some(first) = set.records.first() else {
            return false;
        };
        while let Some(entry) = self.pending.first_entry() {
            if *entry.key() > first.offset {
                break;
            }
            self.open.extend(entry.remove());
        }
        if !first.transactional {
            return true;
        }
        if first.control {
            // The transaction's end marker: an abort marker closes the aborted transaction.
            if is_abort_marker(first.key.as_deref()) {
                self.open.remove(&first.producer_id);
            }
            return false;
        }
        !self.open.contains(&first.producer_id)
    }
}

/// A control record's key: version (int16), type (int16: 0 abort, 1 commit).
fn is_abort_marker(key: Option<&[u8]>) -> bool {
    key.is_some_and(|k| k.len() >= 4 && (&k[2..4]).get_i16() == 0)
}

#[cfg(test)]
mod tests;
