//! kroute's own requests to a broker: over a fresh connection secured as kroute's (not a
//! client's), each at the newest version both kroute and that broker know.
//!
//! Used where kroute itself needs to know something of the cluster (the broker list, the
//! producers a partition holds, the consumer groups' offsets). Rare requests: a connection each
//! keeps them apart from the clients' traffic and needs no correlation bookkeeping beyond a
//! counter.
//!
//! The brokers kroute fronts run Kafka 2.8 to 4.x, whose API versions differ (Metadata v12 came
//! with 3.0, ListGroups v5 with 3.8, batched OffsetFetch v8 with 3.0). So a [`Session`] first
//! asks the broker's ApiVersions, and every request names the range of versions kroute can use
//! for it; the newest one the broker serves is sent. The versions are asked again on every
//! connection: a rolling upgrade changes them, and these requests are rare.

use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::time::Duration;

use bytes::BytesMut;
use futures_util::StreamExt;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_util::codec::FramedRead;

use crate::protocol::frame::{FrameCodec, size_prefix};
use crate::protocol::header::{response_correlation_id, split_response};
use crate::security::{BrokerStream, Identity, UpstreamSecurity};

/// Where and how to ask.
pub struct Ask<'a> {
    pub addr: &'a str,
    pub timeout: Duration,
    pub max_frame_bytes: usize,
    pub security: &'a UpstreamSecurity,
}

/// ApiVersions v3 (Kafka 2.4+) is the newest every supported broker (2.8+) answers.
const API_VERSIONS_VERSION: i16 = 3;

/// Sends `request` as API `api` at the newest version in `wanted` the broker serves, and decodes
/// the answer, all within the timeout. For requests whose fields do not depend on the version.
pub async fn exchange<Req: Encodable, Resp: Decodable>(
    ask: &Ask<'_>,
    api: ApiKey,
    wanted: RangeInclusive<i16>,
    request: &Req,
) -> anyhow::Result<Resp> {
    within(ask.timeout, async {
        let mut session = Session::open_untimed(ask).await?;
        let version = session.version(api, wanted)?;
        session.call_untimed(api, version, request).await
    })
    .await
}

/// One connection to a broker for several of kroute's own requests, knowing the API versions
/// the broker serves. Each step is bounded by the ask's timeout.
pub struct Session {
    frames: FramedRead<BrokerStream, FrameCodec>,
    /// API key -> the broker's (min, max) version.
    versions: HashMap<i16, (i16, i16)>,
    next_correlation_id: i32,
    timeout: Duration,
}

impl Session {
    /// Connects, secures the connection as kroute's, and asks the broker's API versions.
    pub async fn open(ask: &Ask<'_>) -> anyhow::Result<Session> {
        within(ask.timeout, Session::open_untimed(ask)).await
    }

    async fn open_untimed(ask: &Ask<'_>) -> anyhow::Result<Session> {
        let tcp = TcpStream::connect(ask.addr).await?;
        tcp.set_nodelay(true)?;
        let stream = ask
            .security
            .open(tcp, -1, ask.addr, Identity::Kroute)
            .await?
            .stream;
        let mut session = Session {
            frames: FramedRead::new(stream, FrameCodec::new(ask.max_frame_bytes)),
            versions: HashMap::new(),
            next_correlation_id: 1,
            timeout: ask.timeout,
        };
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("kroute"))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let response: ApiVersionsResponse = session
            .call_untimed(ApiKey::ApiVersions, API_VERSIONS_VERSION, &request)
            .await?;
        anyhow::ensure!(
            response.error_code == 0,
            "ApiVersions error {}",
            response.error_code
        );
        session.versions = response
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect();
        Ok(session)
    }

    /// The newest version of `api` in `wanted` that the broker serves, or an error naming both
    /// ranges (e.g. an API the broker's Kafka does not have yet).
    pub fn version(&self, api: ApiKey, wanted: RangeInclusive<i16>) -> anyhow::Result<i16> {
        newest_common(api, self.versions.get(&(api as i16)).copied(), wanted)
    }

    /// Sends `request` as `api` at `version` (see [`Self::version`]) and decodes the answer.
    pub async fn call<Req: Encodable, Resp: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        request: &Req,
    ) -> anyhow::Result<Resp> {
        within(self.timeout, self.call_untimed(api, version, request)).await
    }

    async fn call_untimed<Req: Encodable, Resp: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        request: &Req,
    ) -> anyhow::Result<Resp> {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        let header = RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("kroute")));
        let mut payload = BytesMut::new();
        header.encode(&mut payload, api.request_header_version(version))?;
        request.encode(&mut payload, version)?;
        let stream = self.frames.get_mut();
        stream.write_all(&size_prefix(payload.len())).await?;
        stream.write_all(&payload).await?;
        stream.flush().await?;

        let frame =
            self.frames.next().await.ok_or_else(|| {
                anyhow::anyhow!("connection closed before the {api:?} response")
            })??;
        anyhow::ensure!(
            response_correlation_id(&frame)? == correlation_id,
            "unexpected correlation id"
        );
        let (_, mut body) = split_response(&frame, api.response_header_version(version))?;
        Resp::decode(&mut body, version)
    }
}

/// The newest version in both `served` (the broker's (min, max) of `api`) and `wanted`.
fn newest_common(
    api: ApiKey,
    served: Option<(i16, i16)>,
    wanted: RangeInclusive<i16>,
) -> anyhow::Result<i16> {
    let Some((min, max)) = served else {
        anyhow::bail!("the broker does not serve {api:?}");
    };
    let version = max.min(*wanted.end());
    anyhow::ensure!(
        version >= min && wanted.contains(&version),
        "the broker serves {api:?} v{min}..=v{max}, kroute needs v{}..=v{}",
        wanted.start(),
        wanted.end()
    );
    Ok(version)
}

async fn within<T>(
    timeout: Duration,
    work: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| anyhow::anyhow!("timed out after {timeout:?}"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_version_both_know_is_chosen() {
        // Kafka 2.8 serves Metadata up to v11, 3.x v12, 4.x v13.
        assert_eq!(
            newest_common(ApiKey::Metadata, Some((0, 11)), 10..=12).unwrap(),
            11
        );
        assert_eq!(
            newest_common(ApiKey::Metadata, Some((0, 12)), 10..=12).unwrap(),
            12
        );
        assert_eq!(
            newest_common(ApiKey::Metadata, Some((0, 13)), 10..=12).unwrap(),
            12
        );
    }

    #[test]
    fn no_common_version_is_an_error_naming_both_ranges() {
        let e = newest_common(ApiKey::OffsetFetch, Some((0, 7)), 8..=8).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the broker serves OffsetFetch v0..=v7, kroute needs v8..=v8"
        );
        // A broker whose oldest version is newer than kroute's newest (e.g. Produce from 4.0).
        assert!(newest_common(ApiKey::Produce, Some((3, 13)), 0..=2).is_err());
        let e = newest_common(ApiKey::ConsumerGroupDescribe, None, 0..=0).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the broker does not serve ConsumerGroupDescribe"
        );
    }
}
