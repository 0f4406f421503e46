//! Rewriting every broker address a response carries, so clients only ever dial kroute.
//!
//! Each response type that carries addresses is decoded, its endpoints are replaced with the
//! kroute address of the same node id (`advertised_host`, `broker_port_base + node_id`), and it
//! is re-encoded. Node ids stay the real ones. Record bytes inside Produce and Fetch responses are
//! zero-copy slices of the original frame and come out unchanged; those responses are only
//! re-encoded when they actually carry endpoints (KIP-951, sent on leader changes).
//!
//! The real addresses seen on the way are reported to the cluster view, so a broker that joins
//! gets a kroute listener as soon as any client's metadata shows it.

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, DescribeClusterResponse, DescribeQuorumResponse, FetchResponse,
    FindCoordinatorResponse, MetadataResponse, ProduceResponse, ShareAcknowledgeResponse,
    ShareFetchResponse, describe_quorum_response, fetch_response, produce_response,
    share_acknowledge_response, share_fetch_response,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::cluster::{AbsurdCluster, SeenBroker, TopicLayout, check_brokers};
use crate::protocol::encode::encode_checked;
use crate::protocol::versions;

/// What a response taught kroute about the cluster, besides what it rewrote.
#[derive(Debug, Default)]
pub struct Observed {
    pub brokers: Vec<SeenBroker>,
    /// Topics whose partition leaders a Metadata response listed (None: the topic errored).
    pub topics: Vec<(String, Option<TopicLayout>)>,
}

/// Maps node ids to the kroute address that stands for them.
#[derive(Debug, Clone)]
pub struct AddressMap {
    host: StrBytes,
    port_base: u16,
}

impl AddressMap {
    pub fn new(advertised_host: &str, port_base: u16) -> Self {
        Self {
            host: StrBytes::from_string(advertised_host.to_string()),
            port_base,
        }
    }

    /// kroute's port for `node_id`; 0 (undialable, never the real one) if it does not fit.
    pub fn port(&self, node_id: i32) -> i32 {
        let port = i64::from(self.port_base) + i64::from(node_id);
        if node_id < 0 || port > i64::from(u16::MAX) {
            0
        } else {
            port as i32
        }
    }
}

/// Whether kroute must decode and rewrite responses of this API version.
pub fn needs_rewrite(api_key: i16, version: i16) -> bool {
    match ApiKey::try_from(api_key) {
        Ok(ApiKey::Metadata | ApiKey::FindCoordinator | ApiKey::DescribeCluster) => true,
        Ok(ApiKey::DescribeQuorum | ApiKey::ShareFetch | ApiKey::ShareAcknowledge) => true,
        Ok(ApiKey::ApiVersions) => true,
        // node_endpoints arrived in Produce v10 and Fetch v16 (KIP-951).
        Ok(ApiKey::Produce) => version >= 10,
        Ok(ApiKey::Fetch) => version >= 16,
        _ => false,
    }
}

/// Something in a response that names a broker by node id and address.
trait Endpoint {
    fn node_id(&self) -> i32;
    fn address(&self) -> (&StrBytes, i32);
    fn set_address(&mut self, host: StrBytes, port: i32);
}

macro_rules! endpoint {
    ($ty:ty, $id:ident, $port_ty:ty) => {
        impl Endpoint for $ty {
            fn node_id(&self) -> i32 {
                self.$id.0
            }
            fn address(&self) -> (&StrBytes, i32) {
                (&self.host, i32::from(self.port))
            }
            fn set_address(&mut self, host: StrBytes, port: i32) {
                self.host = host;
                // DescribeQuorum ports are u16; the mapped port always fits (see AddressMap::port).
                self.port = <$port_ty>::try_from(port).unwrap_or_default();
            }
        }
    };
}

endpoint!(
    kafka_protocol::messages::metadata_response::MetadataResponseBroker,
    node_id,
    i32
);
endpoint!(
    kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker,
    broker_id,
    i32
);
endpoint!(
    kafka_protocol::messages::find_coordinator_response::Coordinator,
    node_id,
    i32
);
endpoint!(produce_response::NodeEndpoint, node_id, i32);
endpoint!(fetch_response::NodeEndpoint, node_id, i32);
endpoint!(share_fetch_response::NodeEndpoint, node_id, i32);
endpoint!(share_acknowledge_response::NodeEndpoint, node_id, i32);

/// Rewrites the addresses of one response body kind.
struct Pass<'a> {
    map: &'a AddressMap,
    seen: &'a mut Observed,
    changed: bool,
}

impl Pass<'_> {
    /// Refuses a broker list no real cluster has, before any of it is copied.
    fn check<'b>(
        &self,
        brokers: impl ExactSizeIterator<Item = (i32, &'b str)>,
    ) -> Result<(), AbsurdCluster> {
        check_brokers(brokers)
    }

    fn endpoints<'e, E: Endpoint + 'e>(&mut self, list: impl IntoIterator<Item = &'e mut E>) {
        for e in list {
            self.one(e);
        }
    }

    fn one<E: Endpoint>(&mut self, e: &mut E) {
        let id = e.node_id();
        if id < 0 {
            return; // "no node" placeholders (e.g. coordinator not available) carry no address
        }
        let (host, port) = e.address();
        self.seen.brokers.push((id, host.to_string(), port));
        e.set_address(self.map.host.clone(), self.map.port(id));
        self.changed = true;
    }
}

/// Decodes a body as `T`, lets `edit` rewrite it, and re-encodes it if anything changed.
fn recode<T: Decodable + Encodable>(
    body: &Bytes,
    version: i16,
    map: &AddressMap,
    seen: &mut Observed,
    edit: impl FnOnce(&mut T, &mut Pass) -> Result<(), AbsurdCluster>,
) -> anyhow::Result<Option<Bytes>> {
    let mut cursor = body.clone();
    let mut message = T::decode(&mut cursor, version)?;
    let mut pass = Pass {
        map,
        seen,
        changed: false,
    };
    edit(&mut message, &mut pass)?;
    if !pass.changed {
        return Ok(None);
    }
    encode_checked(&message, version).map(Some)
}

/// Rewrites the body of a response to `api_key`/`version`. `None` means forward it unchanged.
/// Real broker addresses found are appended to `seen`.
pub fn rewrite_response(
    api_key: i16,
    version: i16,
    body: &Bytes,
    map: &AddressMap,
    seen: &mut Observed,
) -> anyhow::Result<Option<Bytes>> {
    let Ok(api) = ApiKey::try_from(api_key) else {
        return Ok(None);
    };
    match api {
        ApiKey::ApiVersions => versions::clamp_api_versions(body, version),
        ApiKey::Metadata => recode(body, version, map, seen, |m: &mut MetadataResponse, p| {
            p.check(m.brokers.iter().map(|b| (b.node_id.0, b.host.as_str())))?;
            p.endpoints(&mut m.brokers);
            p.seen.topics.extend(crate::cluster::layouts(m));
            Ok(())
        }),
        ApiKey::DescribeCluster => recode(
            body,
            version,
            map,
            seen,
            |m: &mut DescribeClusterResponse, p| {
                p.check(m.brokers.iter().map(|b| (b.broker_id.0, b.host.as_str())))?;
                p.endpoints(&mut m.brokers);
                Ok(())
            },
        ),
        ApiKey::FindCoordinator => recode(
            body,
            version,
            map,
            seen,
            |m: &mut FindCoordinatorResponse, p| {
                if version < 4 {
                    if m.node_id.0 >= 0 {
                        p.seen
                            .brokers
                            .push((m.node_id.0, m.host.to_string(), m.port));
                        m.host = p.map.host.clone();
                        m.port = p.map.port(m.node_id.0);
                        p.changed = true;
                    }
                } else {
                    p.endpoints(&mut m.coordinators);
                }
                Ok(())
            },
        ),
        ApiKey::Produce => recode(body, version, map, seen, |m: &mut ProduceResponse, p| {
            p.endpoints(&mut m.node_endpoints);
            Ok(())
        }),
        ApiKey::Fetch => recode(body, version, map, seen, |m: &mut FetchResponse, p| {
            p.endpoints(&mut m.node_endpoints);
            Ok(())
        }),
        ApiKey::ShareFetch => recode(body, version, map, seen, |m: &mut ShareFetchResponse, p| {
            p.endpoints(&mut m.node_endpoints);
            Ok(())
        }),
        ApiKey::ShareAcknowledge => recode(
            body,
            version,
            map,
            seen,
            |m: &mut ShareAcknowledgeResponse, p| {
                p.endpoints(&mut m.node_endpoints);
                Ok(())
            },
        ),
        ApiKey::DescribeQuorum => recode(
            body,
            version,
            map,
            seen,
            |m: &mut DescribeQuorumResponse, p| {
                // Controller listeners: not brokers, but still real addresses a client must not
                // learn. They map to the kroute address of the same node id.
                for node in &mut m.nodes {
                    rewrite_quorum_node(node, p);
                }
                Ok(())
            },
        ),
        _ => Ok(None),
    }
}

fn rewrite_quorum_node(node: &mut describe_quorum_response::Node, p: &mut Pass) {
    let port = u16::try_from(p.map.port(node.node_id.0)).unwrap_or_default();
    for listener in &mut node.listeners {
        listener.host = p.map.host.clone();
        listener.port = port;
        p.changed = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{BufMut, BytesMut};
    use kafka_protocol::messages::BrokerId;
    use kafka_protocol::messages::find_coordinator_response::Coordinator;
    use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
    use kafka_protocol::protocol::Message;

    fn map() -> AddressMap {
        AddressMap::new("proxy.local", 9100)
    }

    fn encode<T: Encodable>(m: &T, v: i16) -> Bytes {
        let mut out = BytesMut::new();
        m.encode(&mut out, v).unwrap();
        out.freeze()
    }

    fn broker(id: i32, port: i32) -> MetadataResponseBroker {
        MetadataResponseBroker::default()
            .with_node_id(BrokerId(id))
            .with_host(StrBytes::from_static_str("10.0.0.9"))
            .with_port(port)
    }

    #[test]
    fn metadata_brokers_point_at_kroute_in_every_version() {
        let resp =
            MetadataResponse::default().with_brokers(vec![broker(1, 19092), broker(3, 19094)]);
        for v in MetadataResponse::VERSIONS.min..=MetadataResponse::VERSIONS.max {
            let mut seen = Observed::default();
            let out = rewrite_response(3, v, &encode(&resp, v), &map(), &mut seen)
                .unwrap()
                .unwrap();
            let back = MetadataResponse::decode(&mut out.clone(), v).unwrap();
            let addrs: Vec<_> = back
                .brokers
                .iter()
                .map(|b| (b.node_id.0, b.host.to_string(), b.port))
                .collect();
            assert_eq!(
                addrs,
                vec![
                    (1, "proxy.local".into(), 9101),
                    (3, "proxy.local".into(), 9103)
                ]
            );
            assert_eq!(
                seen.brokers,
                vec![(1, "10.0.0.9".into(), 19092), (3, "10.0.0.9".into(), 19094)]
            );
        }
    }

    #[test]
    fn find_coordinator_old_and_new_shapes() {
        let old = FindCoordinatorResponse::default()
            .with_node_id(BrokerId(2))
            .with_host(StrBytes::from_static_str("10.0.0.2"))
            .with_port(19093);
        for v in 0..=3 {
            let out = rewrite_response(10, v, &encode(&old, v), &map(), &mut Observed::default())
                .unwrap()
                .unwrap();
            let back = FindCoordinatorResponse::decode(&mut out.clone(), v).unwrap();
            assert_eq!((back.host.as_str(), back.port), ("proxy.local", 9102));
        }
        let new = FindCoordinatorResponse::default().with_coordinators(vec![
            Coordinator::default()
                .with_node_id(BrokerId(2))
                .with_host(StrBytes::from_static_str("10.0.0.2"))
                .with_port(19093),
            Coordinator::default().with_node_id(BrokerId(-1)),
        ]);
        for v in 4..=6 {
            let out = rewrite_response(10, v, &encode(&new, v), &map(), &mut Observed::default())
                .unwrap()
                .unwrap();
            let back = FindCoordinatorResponse::decode(&mut out.clone(), v).unwrap();
            assert_eq!(back.coordinators[0].port, 9102);
            assert_eq!(back.coordinators[1].port, 0, "placeholder untouched");
        }
    }

    #[test]
    fn produce_without_endpoints_is_forwarded_as_is() {
        let resp = ProduceResponse::default();
        assert!(
            rewrite_response(0, 11, &encode(&resp, 11), &map(), &mut Observed::default())
                .unwrap()
                .is_none()
        );
        let with = ProduceResponse::default().with_node_endpoints(vec![
            produce_response::NodeEndpoint::default()
                .with_node_id(BrokerId(3))
                .with_host(StrBytes::from_static_str("10.0.0.3"))
                .with_port(19094),
        ]);
        let out = rewrite_response(0, 11, &encode(&with, 11), &map(), &mut Observed::default())
            .unwrap()
            .unwrap();
        let back = ProduceResponse::decode(&mut out.clone(), 11).unwrap();
        assert_eq!(back.node_endpoints[0].port, 9103);
    }

    #[test]
    fn fetch_endpoints_rewritten_and_records_kept() {
        let records = Bytes::from_static(b"opaque record bytes");
        let resp = FetchResponse::default()
            .with_responses(vec![
                fetch_response::FetchableTopicResponse::default().with_partitions(vec![
                    fetch_response::PartitionData::default().with_records(Some(records.clone())),
                ]),
            ])
            .with_node_endpoints(vec![
                fetch_response::NodeEndpoint::default()
                    .with_node_id(BrokerId(1))
                    .with_host(StrBytes::from_static_str("10.0.0.1"))
                    .with_port(19092),
            ]);
        let out = rewrite_response(1, 17, &encode(&resp, 17), &map(), &mut Observed::default())
            .unwrap()
            .unwrap();
        let back = FetchResponse::decode(&mut out.clone(), 17).unwrap();
        assert_eq!(back.node_endpoints[0].host.as_str(), "proxy.local");
        assert_eq!(back.responses[0].partitions[0].records, Some(records));
    }

    #[test]
    fn truncated_bodies_are_errors_not_panics() {
        // Broker responses cut short at every byte.
        let resp =
            MetadataResponse::default().with_brokers(vec![broker(1, 19092), broker(2, 19093)]);
        for v in [0, 9, 12, 13] {
            let full = encode(&resp, v);
            for cut in 0..full.len() {
                let part = full.slice(..cut);
                assert!(
                    rewrite_response(3, v, &part, &map(), &mut Observed::default()).is_err(),
                    "v{v} cut {cut}"
                );
            }
        }
    }

    /// K1 (docs/hardening.md): an array count beyond the bytes left is refused before anything
    /// is sized from it (vendor/kafka-protocol). As released, kafka-protocol 0.18 would ask
    /// for 2^31 - 1 brokers here, about 170 GB, and the failed allocation aborts kroute.
    #[test]
    fn array_counts_beyond_the_bytes_left_are_errors() {
        for v in [1, 9, 12] {
            let mut body = BytesMut::new();
            if v >= 3 {
                body.put_i32(0); // throttle_time_ms
            }
            if v >= 9 {
                body.extend_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x08]); // compact: 2^31 - 1
            } else {
                body.put_i32(i32::MAX);
            }
            body.extend_from_slice(&[1; 16]);
            let err = rewrite_response(3, v, &body.freeze(), &map(), &mut Observed::default())
                .expect_err("a count the bytes cannot hold");
            assert!(format!("{err:#}").contains("exceeds"), "v{v}: {err:#}");
        }
    }

    /// Found by the rewrite_find_coordinator and rewrite_describe_cluster fuzz targets: a
    /// tagged field numbered 2^31 or above was counted but not written back, so the rewritten
    /// response did not decode.
    #[test]
    fn a_tag_kafka_protocol_cannot_write_back_is_an_error_not_a_broken_answer() {
        let resp = FindCoordinatorResponse::default()
            .with_node_id(BrokerId(2))
            .with_host(StrBytes::from_static_str("10.0.0.2"))
            .with_port(19093);
        let mut body = encode(&resp, 3).to_vec();
        assert_eq!(body.pop(), Some(0), "no tagged fields");
        // One tagged field: tag 2^31 (a 5-byte varint), two bytes of data.
        body.extend_from_slice(&[1, 0x80, 0x80, 0x80, 0x80, 0x08, 2, 0xaa, 0xbb]);
        let body = Bytes::from(body);
        assert!(FindCoordinatorResponse::decode(&mut body.clone(), 3).is_ok());
        let err = rewrite_response(10, 3, &body, &map(), &mut Observed::default()).unwrap_err();
        assert!(err.to_string().contains("tagged field"), "{err}");
        // Below 2^31 the unknown field is written back and the answer decodes.
        let mut fine = body.to_vec();
        fine.splice(fine.len() - 8..fine.len() - 3, [0x7f]);
        let out = rewrite_response(10, 3, &Bytes::from(fine), &map(), &mut Observed::default())
            .unwrap()
            .unwrap();
        let back = FindCoordinatorResponse::decode(&mut out.clone(), 3).unwrap();
        assert_eq!(back.port, 9102);
        assert_eq!(back.unknown_tagged_fields.len(), 1);
    }

    #[test]
    fn port_mapping_never_yields_the_real_port() {
        assert_eq!(map().port(5), 9105);
        assert_eq!(map().port(-1), 0);
        assert_eq!(map().port(70_000), 0);
    }
}
