//! Whether a Produce, Fetch or ShareFetch answer names brokers at all.
//!
//! Since KIP-951 (Produce v10, Fetch v16) a broker may add the addresses of partition leaders it
//! is not (`NodeEndpoints`, a top-level tagged field) when it answers NOT_LEADER_OR_FOLLOWER;
//! kroute must rewrite those. A share consumer's ShareFetch answer (KIP-932) ends with the same
//! list as a plain field. Almost every answer carries none. Decoding a Fetch answer with
//! kafka-protocol to find out builds every topic and partition of it (and the Produce answer's
//! too) only to forward the bytes unchanged, on the path every consumed byte takes. This walks
//! the answer instead: fixed-width fields and length-prefixed records are skipped without
//! reading them, nothing is allocated, and only the top-level tagged fields are looked at.
//! (Written by hand: kafka-protocol offers no partial decoding.)
//!
//! The walk knows only the versions whose layout is written out below; for any other version,
//! or an answer it cannot walk to its end, it says "don't know" and kroute decodes as before.

use kafka_protocol::messages::ApiKey;

use super::header::WireReader;

/// The tag of `NodeEndpoints` in Produce (v10+) and Fetch (v16+) answers.
const NODE_ENDPOINTS_TAG: u32 = 0;

/// Some(false): this answer body (after its header) carries no node endpoints, and needs no
/// rewrite. Some(true): it does. None: not known (an unwalked version, or a body the walk could
/// not follow to its end): decode it.
pub fn carries_node_endpoints(api: ApiKey, version: i16, body: &[u8]) -> Option<bool> {
    let mut r = WireReader::new(body);
    // Whether the endpoints are a top-level tagged field (else a plain one, already read).
    let tagged = match (api, version) {
        (ApiKey::Fetch, 16..=17) => skip_fetch(&mut r).map(|()| true)?,
        (ApiKey::Produce, 10..=12) => skip_produce(&mut r, false).map(|()| true)?,
        (ApiKey::Produce, 13) => skip_produce(&mut r, true).map(|()| true)?,
        (ApiKey::ShareFetch, 1) => match skip_share_fetch(&mut r)? {
            0 => false,
            _ => return Some(true),
        },
        _ => return None,
    };
    let tags = r.unsigned_varint(WHAT).ok()?;
    let mut found = false;
    for _ in 0..tags {
        let tag = r.unsigned_varint(WHAT).ok()?;
        found |= tagged && tag == NODE_ENDPOINTS_TAG;
        let size = r.unsigned_varint(WHAT).ok()?;
        r.skip(size as usize, WHAT).ok()?;
    }
    (r.position() == body.len()).then_some(found)
}

const WHAT: &str = "response body";

/// A Fetch answer (v16-17) up to its top-level tagged fields.
fn skip_fetch(r: &mut WireReader) -> Option<()> {
    r.skip(4 + 2 + 4, WHAT).ok()?; // throttle_time_ms, error_code, session_id
    let topics = r.array_len(true, 18, WHAT).ok()?.unwrap_or(0);
    for _ in 0..topics {
        r.skip(16, WHAT).ok()?; // topic_id
        // 30 fixed bytes, then at least 1 (aborted), 4, 1 (records) and 1 (tags)
        let partitions = r.array_len(true, 37, WHAT).ok()?.unwrap_or(0);
        for _ in 0..partitions {
            // partition_index, error_code, high_watermark, last_stable_offset,
            // log_start_offset
            r.skip(4 + 2 + 8 + 8 + 8, WHAT).ok()?;
            if let Some(aborted) = r.array_len(true, 17, WHAT).ok()? {
                for _ in 0..aborted {
                    r.skip(8 + 8, WHAT).ok()?; // producer_id, first_offset
                    r.skip_tagged_fields(WHAT).ok()?;
                }
            }
            r.skip(4, WHAT).ok()?; // preferred_read_replica
            skip_compact_bytes(r)?; // records
            r.skip_tagged_fields(WHAT).ok()?;
        }
        r.skip_tagged_fields(WHAT).ok()?;
    }
    Some(())
}

/// A ShareFetch answer (v1) up to its top-level tagged fields; the number of node endpoints it
/// lists (its last plain field).
fn skip_share_fetch(r: &mut WireReader) -> Option<usize> {
    r.skip(4 + 2, WHAT).ok()?; // throttle_time_ms, error_code
    r.nullable_string(true, WHAT).ok()?; // error_message
    r.skip(4, WHAT).ok()?; // acquisition_lock_timeout_ms
    let topics = r.array_len(true, 18, WHAT).ok()?.unwrap_or(0);
    for _ in 0..topics {
        r.skip(16, WHAT).ok()?; // topic_id
        // at least 22 bytes: 8 fixed, 2 messages, current_leader (9), records, acquired, tags
        let partitions = r.array_len(true, 22, WHAT).ok()?.unwrap_or(0);
        for _ in 0..partitions {
            r.skip(4 + 2, WHAT).ok()?; // partition_index, error_code
            r.nullable_string(true, WHAT).ok()?; // error_message
            r.skip(2, WHAT).ok()?; // acknowledge_error_code
            r.nullable_string(true, WHAT).ok()?; // acknowledge_error_message
            r.skip(4 + 4, WHAT).ok()?; // current_leader: leader_id, leader_epoch
            r.skip_tagged_fields(WHAT).ok()?;
            skip_compact_bytes(r)?; // records
            if let Some(acquired) = r.array_len(true, 19, WHAT).ok()? {
                for _ in 0..acquired {
                    r.skip(8 + 8 + 2, WHAT).ok()?; // first_offset, last_offset, delivery_count
                    r.skip_tagged_fields(WHAT).ok()?;
                }
            }
            r.skip_tagged_fields(WHAT).ok()?;
        }
        r.skip_tagged_fields(WHAT).ok()?;
    }
    Some(r.array_len(true, 11, WHAT).ok()?.unwrap_or(0))
}

/// A Produce answer (v10-13; topics by id from v13) up to its top-level tagged fields.
fn skip_produce(r: &mut WireReader, topic_ids: bool) -> Option<()> {
    let topics = r.array_len(true, 3, WHAT).ok()?.unwrap_or(0);
    for _ in 0..topics {
        if topic_ids {
            r.skip(16, WHAT).ok()?;
        } else {
            r.nullable_string(true, WHAT).ok()?;
        }
        // 30 fixed bytes, then at least 1 (record errors), 1 (message) and 1 (tags)
        let partitions = r.array_len(true, 33, WHAT).ok()?.unwrap_or(0);
        for _ in 0..partitions {
            // index, error_code, base_offset, log_append_time_ms, log_start_offset
            r.skip(4 + 2 + 8 + 8 + 8, WHAT).ok()?;
            if let Some(errors) = r.array_len(true, 6, WHAT).ok()? {
                for _ in 0..errors {
                    r.skip(4, WHAT).ok()?; // batch_index
                    r.nullable_string(true, WHAT).ok()?;
                    r.skip_tagged_fields(WHAT).ok()?;
                }
            }
            r.nullable_string(true, WHAT).ok()?; // error_message
            r.skip_tagged_fields(WHAT).ok()?;
        }
        r.skip_tagged_fields(WHAT).ok()?;
    }
    r.skip(4, WHAT).ok()?; // throttle_time_ms
    Some(())
}

/// Compact nullable bytes (varint length + 1, 0 for null), skipped.
fn skip_compact_bytes(r: &mut WireReader) -> Option<()> {
    match r.unsigned_varint(WHAT).ok()? {
        0 => Some(()),
        n => r.skip((n - 1) as usize, WHAT).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::messages::fetch_response::{
        AbortedTransaction, FetchableTopicResponse, NodeEndpoint as FetchEndpoint, PartitionData,
    };
    use kafka_protocol::messages::produce_response::{
        BatchIndexAndErrorMessage, LeaderIdAndEpoch, NodeEndpoint as ProduceEndpoint,
        PartitionProduceResponse, TopicProduceResponse,
    };
    use kafka_protocol::messages::{
        BrokerId, FetchResponse, ProduceResponse, ProducerId, ShareFetchResponse, TopicName,
    };
    use kafka_protocol::protocol::{Encodable, StrBytes};

    fn encode<T: Encodable>(m: &T, version: i16) -> Bytes {
        let mut out = BytesMut::new();
        m.encode(&mut out, version).unwrap();
        out.freeze()
    }

    fn fetch(endpoints: bool) -> FetchResponse {
        let partition = |i, records: Option<&'static [u8]>| {
            PartitionData::default()
                .with_partition_index(i)
                .with_high_watermark(100)
                .with_aborted_transactions(Some(vec![
                    AbortedTransaction::default()
                        .with_producer_id(ProducerId(5))
                        .with_first_offset(7),
                ]))
                .with_records(records.map(Bytes::from_static))
        };
        let mut response = FetchResponse::default().with_responses(vec![
            FetchableTopicResponse::default()
                .with_topic_id(Default::default())
                .with_partitions(vec![
                    partition(0, Some(&[1; 300])),
                    partition(1, None),
                    partition(2, Some(&[])),
                ]),
        ]);
        if endpoints {
            response = response.with_node_endpoints(vec![
                FetchEndpoint::default()
                    .with_node_id(BrokerId(2))
                    .with_host(StrBytes::from_static_str("broker-2"))
                    .with_port(9092),
            ]);
        }
        response
    }

    fn produce(endpoints: bool, version: i16) -> ProduceResponse {
        let mut topic = TopicProduceResponse::default().with_partition_responses(vec![
            PartitionProduceResponse::default()
                .with_index(3)
                .with_error_code(6)
                .with_record_errors(vec![
                    BatchIndexAndErrorMessage::default()
                        .with_batch_index(1)
                        .with_batch_index_error_message(Some(StrBytes::from_static_str("bad"))),
                ])
                .with_error_message(Some(StrBytes::from_static_str("not leader")))
                .with_current_leader(LeaderIdAndEpoch::default().with_leader_id(BrokerId(2))),
        ]);
        if version < 13 {
            topic = topic.with_name(TopicName(StrBytes::from_static_str("orders")));
        }
        let mut response = ProduceResponse::default()
            .with_responses(vec![topic])
            .with_throttle_time_ms(1);
        if endpoints {
            response = response.with_node_endpoints(vec![
                ProduceEndpoint::default()
                    .with_node_id(BrokerId(2))
                    .with_host(StrBytes::from_static_str("broker-2"))
                    .with_port(9092),
            ]);
        }
        response
    }

    fn share_fetch(endpoints: bool) -> ShareFetchResponse {
        use kafka_protocol::messages::share_fetch_response as share;
        let partition = |i, records: Option<&'static [u8]>| {
            share::PartitionData::default()
                .with_partition_index(i)
                .with_error_message(Some(StrBytes::from_static_str("none")))
                .with_current_leader(share::LeaderIdAndEpoch::default().with_leader_id(1))
                .with_records(records.map(Bytes::from_static))
                .with_acquired_records(vec![
                    share::AcquiredRecords::default()
                        .with_first_offset(3)
                        .with_last_offset(9)
                        .with_delivery_count(1),
                ])
        };
        let mut response = ShareFetchResponse::default()
            .with_responses(vec![
                share::ShareFetchableTopicResponse::default()
                    .with_partitions(vec![partition(0, Some(&[1; 300])), partition(1, None)]),
            ])
            // A top-level tag 0 is no endpoint list in a ShareFetch answer.
            .with_unknown_tagged_fields([(0, Bytes::from_static(&[7, 7]))].into());
        if endpoints {
            response = response.with_node_endpoints(vec![
                share::NodeEndpoint::default()
                    .with_node_id(BrokerId(2))
                    .with_host(StrBytes::from_static_str("broker-2"))
                    .with_port(9092),
            ]);
        }
        response
    }

    #[test]
    fn the_walk_finds_node_endpoints_exactly_where_the_decoder_does() {
        for endpoints in [false, true] {
            let body = encode(&share_fetch(endpoints), 1);
            assert_eq!(
                carries_node_endpoints(ApiKey::ShareFetch, 1, &body),
                Some(endpoints),
                "ShareFetch"
            );
            if !endpoints {
                let cut = &body[..body.len() - 1];
                assert_eq!(carries_node_endpoints(ApiKey::ShareFetch, 1, cut), None);
            }
        }
        for version in 16..=17 {
            for endpoints in [false, true] {
                let body = encode(&fetch(endpoints), version);
                assert_eq!(
                    carries_node_endpoints(ApiKey::Fetch, version, &body),
                    Some(endpoints),
                    "Fetch v{version}"
                );
                let cut = &body[..body.len() - 1];
                assert_eq!(carries_node_endpoints(ApiKey::Fetch, version, cut), None);
            }
        }
        for version in 10..=13 {
            for endpoints in [false, true] {
                let body = encode(&produce(endpoints, version), version);
                assert_eq!(
                    carries_node_endpoints(ApiKey::Produce, version, &body),
                    Some(endpoints),
                    "Produce v{version}"
                );
            }
        }
        let body = encode(&fetch(false), 15);
        assert_eq!(carries_node_endpoints(ApiKey::Fetch, 15, &body), None);
        assert_eq!(carries_node_endpoints(ApiKey::Metadata, 12, &body), None);
    }
}
