//! Reading a Produce request body (v3 to v12) without trusting its lengths.
//!
//! kafka-protocol's decoder sizes every array from the count the peer sends before reading
//! a single element, so a 12-byte body announcing 2^31 topics makes it allocate hundreds of GB
//! and abort the process. This reader only ever holds what is actually there: each element must
//! be read before the next is considered, and record bytes stay zero-copy slices of the frame.

use bytes::Bytes;

use super::header::{Malformed, WireReader};

/// One partition entry: the partition the client chose and its record bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionEntry {
    pub index: i32,
    pub records: Option<Bytes>,
}

/// One topic entry of a Produce request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicEntry {
    /// The topic name as sent (UTF-8 is checked when it is used).
    pub name: Bytes,
    pub partitions: Vec<PartitionEntry>,
}

/// The parts of a Produce request body that routing needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProduceBody {
    pub acks: i16,
    pub timeout_ms: i32,
    pub topics: Vec<TopicEntry>,
}

const WHAT: &str = "produce request body";

fn malformed() -> Malformed {
    Malformed { what: WHAT }
}

struct BodyReader<'a> {
    r: WireReader<'a>,
    body: &'a Bytes,
    flexible: bool,
}

impl BodyReader<'_> {
    fn i32(&mut self) -> Result<i32, Malformed> {
        let hi = self.r.i16(WHAT)? as u16;
        let lo = self.r.i16(WHAT)? as u16;
        Ok(((u32::from(hi) << 16) | u32::from(lo)) as i32)
    }

    /// An array or string length: -1 (null) or more.
    fn length(&mut self, classic_i16: bool) -> Result<i64, Malformed> {
        if self.flexible {
            Ok(i64::from(self.r.unsigned_varint(WHAT)?) - 1)
        } else if classic_i16 {
            Ok(i64::from(self.r.i16(WHAT)?))
        } else {
            Ok(i64::from(self.i32()?))
        }
    }

    /// A nullable byte run of `len` bytes as a zero-copy slice.
    fn bytes(&mut self, len: i64) -> Result<Option<Bytes>, Malformed> {
        if len < 0 {
            return Ok(None);
        }
        let start = self.r.position();
        self.r
            .skip(usize::try_from(len).map_err(|_| malformed())?, WHAT)?;
        Ok(Some(self.body.slice(start..self.r.position())))
    }

    fn tagged_fields(&mut self) -> Result<(), Malformed> {
        if self.flexible {
            self.r.skip_tagged_fields(WHAT)?;
        }
        Ok(())
    }
}

/// Parses a Produce body of `version` (3..=12; topic names, not ids).
pub fn parse_produce_body(body: &Bytes, version: i16) -> Result<ProduceBody, Malformed> {
    if !(3..=12).contains(&version) {
        return Err(malformed());
    }
    let mut b = BodyReader {
        r: WireReader::new(body),
        body,
        flexible: version >= 9,
    };
    let txn_len = b.length(true)?;
    b.bytes(txn_len)?;
    let acks = b.r.i16(WHAT)?;
    let timeout_ms = b.i32()?;
    let topic_count = b.length(false)?;
    let mut topics = Vec::new();
    for _ in 0..topic_count.max(0) {
        let name_len = b.length(true)?;
        let name = b.bytes(name_len)?.ok_or_else(malformed)?;
        let partition_count = b.length(false)?;
        let mut partitions = Vec::new();
        for _ in 0..partition_count.max(0) {
            let index = b.i32()?;
            let records_len = b.length(false)?;
            let records = b.bytes(records_len)?;
            b.tagged_fields()?;
            partitions.push(PartitionEntry { index, records });
        }
        b.tagged_fields()?;
        topics.push(TopicEntry { name, partitions });
    }
    b.tagged_fields()?;
    Ok(ProduceBody {
        acks,
        timeout_ms,
        topics,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{BufMut, BytesMut};
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{ProduceRequest, TopicName, TransactionalId};
    use kafka_protocol::protocol::{Encodable, StrBytes};

    fn encoded(version: i16, txn: Option<&str>) -> Bytes {
        let request = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_transactional_id(txn.map(|t| TransactionalId(StrBytes::from_string(t.into()))))
            .with_topic_data(vec![
                TopicProduceData::default()
                    .with_name(TopicName(StrBytes::from_static_str("orders")))
                    .with_partition_data(vec![
                        PartitionProduceData::default()
                            .with_index(3)
                            .with_records(Some(Bytes::from_static(b"batch-a"))),
                        PartitionProduceData::default()
                            .with_index(5)
                            .with_records(None),
                    ]),
                TopicProduceData::default()
                    .with_name(TopicName(StrBytes::from_static_str("logs")))
                    .with_partition_data(vec![
                        PartitionProduceData::default()
                            .with_index(0)
                            .with_records(Some(Bytes::from_static(b"batch-b"))),
                    ]),
            ]);
        let mut out = BytesMut::new();
        request.encode(&mut out, version).unwrap();
        out.freeze()
    }

    #[test]
    fn reads_what_kafka_protocol_writes_in_every_version() {
        for version in 3..=12 {
            for txn in [None, Some("tx-1")] {
                let body = parse_produce_body(&encoded(version, txn), version).unwrap();
                assert_eq!((body.acks, body.timeout_ms), (-1, 30_000), "v{version}");
                type Entry<'a> = (&'a [u8], i32, Option<&'a [u8]>);
                let summary: Vec<Entry> = body
                    .topics
                    .iter()
                    .flat_map(|t| {
                        t.partitions
                            .iter()
                            .map(move |p| (&t.name[..], p.index, p.records.as_deref()))
                    })
                    .collect();
                assert_eq!(
                    summary,
                    vec![
                        (&b"orders"[..], 3, Some(&b"batch-a"[..])),
                        (&b"orders"[..], 5, None),
                        (&b"logs"[..], 0, Some(&b"batch-b"[..])),
                    ],
                    "v{version}"
                );
            }
        }
    }

    #[test]
    fn hostile_counts_cost_nothing() {
        // No transactional id, acks, timeout, then 2^31-1 topics and nothing else.
        let mut classic = BytesMut::new();
        classic.put_i16(-1);
        classic.put_i16(1);
        classic.put_i32(1000);
        classic.put_i32(i32::MAX);
        assert!(parse_produce_body(&classic.freeze(), 3).is_err());
        let mut flexible = BytesMut::new();
        flexible.put_u8(0);
        flexible.put_i16(1);
        flexible.put_i32(1000);
        flexible.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(parse_produce_body(&flexible.freeze(), 9).is_err());
    }

    #[test]
    fn every_truncation_is_an_error() {
        for version in [3, 8, 9, 12] {
            let full = encoded(version, Some("t"));
            for cut in 0..full.len() {
                assert!(
                    parse_produce_body(&full.slice(..cut), version).is_err(),
                    "v{version} cut {cut}"
                );
            }
        }
    }
}
