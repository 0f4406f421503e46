//! Which API versions kroute can decode, and the ApiVersions rewrite that tells clients so.
//!
//! A client picks, per API, the highest version both it and the broker support. For the APIs
//! whose responses kroute decodes, the broker's max is lowered to what kroute can decode; a min is
//! never raised (Kafka 4 advertises Produce min 0 on purpose, for old librdkafka). Every other API
//! passes through with the broker's own range, including APIs kroute has never heard of.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, DescribeClusterResponse, DescribeQuorumResponse, FetchResponse,
    FindCoordinatorResponse, MetadataResponse, ProduceResponse, ShareAcknowledgeResponse,
    ShareFetchResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, Message};

/// Produce v13 names topics by id; kroute caps Produce at v12 so that the routing work, which
/// must know topic names, reads them from the request itself.
pub const PRODUCE_MAX_VERSION: i16 = 12;

/// Kafka's UNSUPPORTED_VERSION error code.
pub const UNSUPPORTED_VERSION: i16 = 35;

/// The highest version of `api_key` kroute decodes, or `None` when it only forwards bytes.
pub fn decodable_max(api_key: i16) -> Option<i16> {
    let max = match ApiKey::try_from(api_key).ok()? {
        ApiKey::ApiVersions => ApiVersionsResponse::VERSIONS.max,
        ApiKey::Metadata => MetadataResponse::VERSIONS.max,
        ApiKey::FindCoordinator => FindCoordinatorResponse::VERSIONS.max,
        ApiKey::DescribeCluster => DescribeClusterResponse::VERSIONS.max,
        ApiKey::DescribeQuorum => DescribeQuorumResponse::VERSIONS.max,
        ApiKey::Produce => PRODUCE_MAX_VERSION.min(ProduceResponse::VERSIONS.max),
        ApiKey::Fetch => FetchResponse::VERSIONS.max,
        ApiKey::ShareFetch => ShareFetchResponse::VERSIONS.max,
        ApiKey::ShareAcknowledge => ShareAcknowledgeResponse::VERSIONS.max,
        _ => return None,
    };
    Some(max)
}

/// Lowers the max version of every API kroute decodes. Returns the re-encoded body, or `None`
/// when the broker answered with an error (that body is forwarded untouched).
pub fn clamp_api_versions(body: &Bytes, version: i16) -> anyhow::Result<Option<Bytes>> {
    // error_code is the first field in every version; an UNSUPPORTED_VERSION answer is a v0
    // body whatever the request version was, so nothing else of it can be decoded safely.
    if body.get(..2).is_some_and(|b| b != [0, 0]) {
        return Ok(None);
    }
    let mut cursor = body.clone();
    let mut response = ApiVersionsResponse::decode(&mut cursor, version)?;
    for api in &mut response.api_keys {
        if let Some(ours) = decodable_max(api.api_key) {
            api.max_version = api.max_version.min(ours).max(api.min_version);
        }
    }
    super::encode::encode_checked(&response, version).map(Some)
}

/// The body kroute answers itself when a client asks for an ApiVersions version it cannot
/// decode: what a broker does too, a v0 body with UNSUPPORTED_VERSION and the range it supports,
/// after which the client retries with a version from that range.
pub fn unsupported_api_versions_body() -> Bytes {
    let response = ApiVersionsResponse::default()
        .with_error_code(UNSUPPORTED_VERSION)
        .with_api_keys(vec![
            ApiVersion::default()
                .with_api_key(ApiKey::ApiVersions as i16)
                .with_min_version(0)
                .with_max_version(ApiVersionsResponse::VERSIONS.max),
        ]);
    let mut out = BytesMut::new();
    // Encoding a default-built v0 message into a BytesMut cannot fail.
    if response.encode(&mut out, 0).is_err() {
        out.clear();
    }
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fails when a kafka-protocol upgrade changes what kroute can decode, so the table above is
    /// reviewed (new versions may carry new address fields) before clients are offered them.
    #[test]
    fn decodable_table_is_reviewed() {
        let table: Vec<(ApiKey, i16)> = ApiKey::iter()
            .filter_map(|k| decodable_max(k as i16).map(|m| (k, m)))
            .collect();
        assert_eq!(
            table,
            vec![
                (ApiKey::Produce, 12),
                (ApiKey::Fetch, 18),
                (ApiKey::Metadata, 13),
                (ApiKey::FindCoordinator, 6),
                (ApiKey::ApiVersions, 4),
                (ApiKey::DescribeQuorum, 2),
                (ApiKey::DescribeCluster, 2),
                (ApiKey::ShareFetch, 1),
                (ApiKey::ShareAcknowledge, 1),
            ]
        );
        assert_eq!(
            ProduceResponse::VERSIONS.max,
            13,
            "Produce grew: review the cap"
        );
    }

    fn encode(resp: &ApiVersionsResponse, version: i16) -> Bytes {
        let mut out = BytesMut::new();
        resp.encode(&mut out, version).unwrap();
        out.freeze()
    }

    #[test]
    fn clamps_max_never_raises_min_and_keeps_unknown_apis() {
        let broker = ApiVersionsResponse::default().with_api_keys(vec![
            ApiVersion::default()
                .with_api_key(0)
                .with_min_version(0)
                .with_max_version(13),
            ApiVersion::default()
                .with_api_key(3)
                .with_min_version(0)
                .with_max_version(99),
            ApiVersion::default()
                .with_api_key(9999)
                .with_min_version(2)
                .with_max_version(7),
            ApiVersion::default()
                .with_api_key(11)
                .with_min_version(0)
                .with_max_version(9),
        ]);
        for version in 0..=4 {
            let out = clamp_api_versions(&encode(&broker, version), version)
                .unwrap()
                .unwrap();
            let decoded = ApiVersionsResponse::decode(&mut out.clone(), version).unwrap();
            let ranges: Vec<(i16, i16, i16)> = decoded
                .api_keys
                .iter()
                .map(|a| (a.api_key, a.min_version, a.max_version))
                .collect();
            assert_eq!(
                ranges,
                vec![(0, 0, 12), (3, 0, 13), (9999, 2, 7), (11, 0, 9)]
            );
        }
    }

    /// Found by the api_versions_clamp fuzz target: a tagged field numbered 2^31 or above was
    /// counted but not written back (see [`super::encode::encode_checked`]).
    #[test]
    fn a_tag_that_cannot_be_written_back_is_an_error() {
        let broker = ApiVersionsResponse::default().with_api_keys(vec![
            ApiVersion::default()
                .with_api_key(3)
                .with_min_version(0)
                .with_max_version(99),
        ]);
        let mut body = encode(&broker, 3).to_vec();
        assert_eq!(body.pop(), Some(0), "no tagged fields");
        body.extend_from_slice(&[1, 0xff, 0xff, 0xff, 0xff, 0x0f, 0]);
        let body = Bytes::from(body);
        assert!(ApiVersionsResponse::decode(&mut body.clone(), 3).is_ok());
        assert!(clamp_api_versions(&body, 3).is_err());
    }

    #[test]
    fn error_answers_pass_untouched() {
        let body = encode(
            &ApiVersionsResponse::default().with_error_code(UNSUPPORTED_VERSION),
            0,
        );
        assert!(clamp_api_versions(&body, 3).unwrap().is_none());
    }

    #[test]
    fn local_unsupported_answer_is_a_valid_v0_body() {
        let body = unsupported_api_versions_body();
        let decoded = ApiVersionsResponse::decode(&mut body.clone(), 0).unwrap();
        assert_eq!(decoded.error_code, UNSUPPORTED_VERSION);
        assert_eq!(decoded.api_keys[0].max_version, 4);
    }
}
