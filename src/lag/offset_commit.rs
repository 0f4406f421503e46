//! Reading the OffsetCommit requests that pass through kroute, and the brokers' answers.
//!
//! A group that commits through kroute is seen at commit time, like Burrow sees it in
//! `__consumer_offsets`, rather than at the next poll; and every commit is seen, including a
//! commit of the same offset again, which polling cannot tell from no commit at all (that is
//! what STALL is made of). Only commits the broker accepted count, so the answer is read too.
//!
//! Read by hand rather than with kafka-protocol's decoder: a client's counts are not trusted
//! to size anything (each is checked against the bytes present), and only the few fields lag
//! needs are kept. Versions 2 to 10 (Kafka 4 accepts no older ones); flexible from 8; version
//! 10 names topics by id.

use crate::protocol::header::{Malformed, WireReader};

/// A topic as a commit names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TopicRef {
    Name(String),
    /// Version 10 and later: the topic id.
    Id([u8; 16]),
}

/// What a client asked to commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitRequest {
    pub group: String,
    /// (topic, partition, committed offset).
    pub offsets: Vec<(TopicRef, i32, i64)>,
}

const WHAT: &str = "offset commit request";
const ANSWER: &str = "offset commit response";

/// Kafka's longest topic name (`Topic.MAX_NAME_LENGTH`, ASCII characters). A longer name is
/// malformed: each partition entry carries its own copy of its topic's name, so a name this
/// reader accepted at any length would let a request of a few KiB cost megabytes.
pub const MAX_TOPIC_NAME: usize = 249;

/// The first version kroute reads, and the newest it knows.
pub const VERSIONS: std::ops::RangeInclusive<i16> = 2..=10;

/// Reads an OffsetCommit request payload (after the size prefix) of `version`.
pub fn read_request(payload: &[u8], version: i16) -> Result<CommitRequest, Malformed> {
    if !VERSIONS.contains(&version) {
        return Err(Malformed { what: WHAT });
    }
    let flexible = version >= 8;
    let mut r = WireReader::new(payload);
    r.skip(8, WHAT)?; // api key, version, correlation id
    r.skip_nullable_string(WHAT)?; // client id: never compact
    if flexible {
        r.skip_tagged_fields(WHAT)?;
    }
    let group = r
        .nullable_string(flexible, WHAT)?
        .ok_or(Malformed { what: WHAT })?
        .to_owned();
    r.i32(WHAT)?; // generation id or member epoch
    r.nullable_string(flexible, WHAT)?; // member id
    if version >= 7 {
        r.nullable_string(flexible, WHAT)?; // group instance id
    }
    if version <= 4 {
        r.i64(WHAT)?; // retention time
    }
    let mut offsets = Vec::new();
    // A topic takes at least a name length and a partition count.
    let topics = r.array_len(flexible, 3, WHAT)?.unwrap_or(0);
    for _ in 0..topics {
        let topic = topic_ref(&mut r, version, WHAT)?;
        // A partition takes at least its index, offset and metadata length.
        let partitions = r.array_len(flexible, 13, WHAT)?.unwrap_or(0);
        for _ in 0..partitions {
            let partition = r.i32(WHAT)?;
            let offset = r.i64(WHAT)?;
            if version >= 6 {
                r.i32(WHAT)?; // leader epoch
            }
            r.nullable_string(flexible, WHAT)?; // metadata
            if flexible {
                r.skip_tagged_fields(WHAT)?;
            }
            offsets.push((topic.clone(), partition, offset));
        }
        if flexible {
            r.skip_tagged_fields(WHAT)?;
        }
    }
    if flexible {
        r.skip_tagged_fields(WHAT)?;
    }
    Ok(CommitRequest { group, offsets })
}

/// Reads the answer to an OffsetCommit request of `version` (the payload with its header):
/// (topic, partition, error code) for each partition.
pub fn read_response(payload: &[u8], version: i16) -> Result<Vec<(TopicRef, i32, i16)>, Malformed> {
    if !VERSIONS.contains(&version) {
        return Err(Malformed { what: ANSWER });
    }
    let flexible = version >= 8;
    let mut r = WireReader::new(payload);
    r.skip(4, ANSWER)?; // correlation id
    if flexible {
        r.skip_tagged_fields(ANSWER)?;
    }
    if version >= 3 {
        r.i32(ANSWER)?; // throttle time
    }
    let mut out = Vec::new();
    let topics = r.array_len(flexible, 3, ANSWER)?.unwrap_or(0);
    for _ in 0..topics {
        let topic = topic_ref(&mut r, version, ANSWER)?;
        let partitions = r.array_len(flexible, 6, ANSWER)?.unwrap_or(0);
        for _ in 0..partitions {
            let partition = r.i32(ANSWER)?;
            let error = r.i16(ANSWER)?;
            if flexible {
                r.skip_tagged_fields(ANSWER)?;
            }
            out.push((topic.clone(), partition, error));
        }
        if flexible {
            r.skip_tagged_fields(ANSWER)?;
        }
    }
    if flexible {
        r.skip_tagged_fields(ANSWER)?;
    }
    Ok(out)
}

fn topic_ref(
    r: &mut WireReader<'_>,
    version: i16,
    what: &'static str,
) -> Result<TopicRef, Malformed> {
    if version >= 10 {
        let mut id = [0u8; 16];
        id.copy_from_slice(r.take(16, what)?);
        return Ok(TopicRef::Id(id));
    }
    let name = r
        .nullable_string(version >= 8, what)?
        .filter(|n| n.len() <= MAX_TOPIC_NAME)
        .ok_or(Malformed { what })?;
    Ok(TopicRef::Name(name.to_owned()))
}

#[cfg(test)]
mod tests {
    use bytes::{BufMut, BytesMut};
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::offset_commit_response::{
        OffsetCommitResponsePartition, OffsetCommitResponseTopic,
    };
    use kafka_protocol::messages::{
        ApiKey, OffsetCommitRequest, OffsetCommitResponse, RequestHeader, TopicName,
    };
    use kafka_protocol::protocol::{Encodable, StrBytes};

    use super::*;

    fn request(version: i16) -> Vec<u8> {
        let header = RequestHeader::default()
            .with_request_api_key(ApiKey::OffsetCommit as i16)
            .with_request_api_version(version)
            .with_correlation_id(7)
            .with_client_id(Some(StrBytes::from_static_str("c")));
        let topic = |name: &'static str, parts: &[(i32, i64)]| {
            OffsetCommitRequestTopic::default()
                .with_name(TopicName(StrBytes::from_static_str(name)))
                .with_partitions(
                    parts
                        .iter()
                        .map(|(p, o)| {
                            OffsetCommitRequestPartition::default()
                                .with_partition_index(*p)
                                .with_committed_offset(*o)
                                .with_committed_metadata(Some(StrBytes::from_static_str("m")))
                        })
                        .collect(),
                )
        };
        let body = OffsetCommitRequest::default()
            .with_group_id(StrBytes::from_static_str("g").into())
            .with_member_id(StrBytes::from_static_str("member"))
            .with_topics(vec![topic("a", &[(0, 10), (1, 20)]), topic("b", &[(3, 5)])]);
        let mut out = BytesMut::new();
        header
            .encode(
                &mut out,
                ApiKey::OffsetCommit.request_header_version(version),
            )
            .unwrap();
        body.encode(&mut out, version).unwrap();
        out.to_vec()
    }

    fn name(n: &str) -> TopicRef {
        TopicRef::Name(n.into())
    }

    #[test]
    fn reads_every_version_kafka_4_accepts_with_names() {
        for version in 2..=9 {
            let read = read_request(&request(version), version).unwrap();
            assert_eq!(read.group, "g", "v{version}");
            assert_eq!(
                read.offsets,
                vec![(name("a"), 0, 10), (name("a"), 1, 20), (name("b"), 3, 5)],
                "v{version}"
            );
        }
    }

    #[test]
    fn reads_answers() {
        for version in 2..=9 {
            let body = OffsetCommitResponse::default().with_topics(vec![
                OffsetCommitResponseTopic::default()
                    .with_name(TopicName(StrBytes::from_static_str("a")))
                    .with_partitions(vec![
                        OffsetCommitResponsePartition::default().with_partition_index(0),
                        OffsetCommitResponsePartition::default()
                            .with_partition_index(1)
                            .with_error_code(27),
                    ]),
            ]);
            let mut out = BytesMut::new();
            out.put_i32(7);
            if ApiKey::OffsetCommit.response_header_version(version) >= 1 {
                out.put_u8(0);
            }
            body.encode(&mut out, version).unwrap();
            assert_eq!(
                read_response(&out, version).unwrap(),
                vec![(name("a"), 0, 0), (name("a"), 1, 27)],
                "v{version}"
            );
        }
    }

    /// A commit of many partitions of one topic with a 32 767-byte name: 64 KiB of request
    /// held 2 000 copies of the name (64 MiB) before names were capped at Kafka's 249.
    #[test]
    fn topic_names_longer_than_kafka_allows_are_malformed() {
        let commit = |name: &str, partitions: i32| {
            let body = OffsetCommitRequest::default()
                .with_group_id(StrBytes::from_static_str("g").into())
                .with_topics(vec![
                    OffsetCommitRequestTopic::default()
                        .with_name(TopicName(StrBytes::from_string(name.into())))
                        .with_partitions(
                            (0..partitions)
                                .map(|p| {
                                    OffsetCommitRequestPartition::default().with_partition_index(p)
                                })
                                .collect(),
                        ),
                ]);
            let header = RequestHeader::default()
                .with_request_api_key(ApiKey::OffsetCommit as i16)
                .with_request_api_version(2);
            let mut out = BytesMut::new();
            header.encode(&mut out, 1).unwrap();
            body.encode(&mut out, 2).unwrap();
            out.to_vec()
        };
        let longest = "t".repeat(MAX_TOPIC_NAME);
        let read = read_request(&commit(&longest, 3), 2).unwrap();
        assert_eq!(read.offsets.len(), 3);
        assert!(read_request(&commit(&"t".repeat(MAX_TOPIC_NAME + 1), 3), 2).is_err());
        let bloated = commit(&"t".repeat(i16::MAX as usize), 2_000);
        assert!(bloated.len() < 64 * 1024);
        assert!(read_request(&bloated, 2).is_err());
        // The answer's names are capped the same way.
        let mut answer = BytesMut::new();
        answer.put_i32(7);
        OffsetCommitResponse::default()
            .with_topics(vec![
                OffsetCommitResponseTopic::default()
                    .with_name(TopicName(StrBytes::from_string("t".repeat(300))))
                    .with_partitions(vec![OffsetCommitResponsePartition::default()]),
            ])
            .encode(&mut answer, 2)
            .unwrap();
        assert!(read_response(&answer, 2).is_err());
    }

    #[test]
    fn truncated_or_inflated_input_is_malformed_not_a_panic() {
        let full = request(9);
        for cut in 0..full.len() {
            assert!(read_request(&full[..cut], 9).is_err(), "cut at {cut}");
        }
        // A topic count far beyond the bytes present is refused before anything is sized.
        let mut inflated = request(2);
        // header (8) + client id (2 + 1) + group (2 + 1) + generation (4) + member (2 + 6) +
        // retention (8): the topic count follows.
        let at = 8 + 3 + 3 + 4 + 8 + 8;
        inflated[at..at + 4].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(read_request(&inflated, 2).is_err());
        assert!(read_request(&request(9), 1).is_err(), "v1 is not read");
    }
}
