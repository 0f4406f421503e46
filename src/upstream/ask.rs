//! kroute's own requests to a broker: one request over a fresh connection secured as kroute's
//! (not a client's), one answer, then the connection is dropped.
//!
//! Used where kroute itself needs to know something of the cluster (the broker list, the
//! producers a partition holds). Rare requests: a connection each keeps them apart from the
//! clients' traffic and needs no correlation bookkeeping.

use std::time::Duration;

use bytes::BytesMut;
use futures_util::StreamExt;
use kafka_protocol::messages::{ApiKey, RequestHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_util::codec::FramedRead;

use crate::protocol::frame::{FrameCodec, size_prefix};
use crate::protocol::header::{response_correlation_id, split_response};
use crate::security::{Identity, UpstreamSecurity};

/// Where and how to ask.
pub struct Ask<'a> {
    pub addr: &'a str,
    pub timeout: Duration,
    pub max_frame_bytes: usize,
    pub security: &'a UpstreamSecurity,
}

/// Sends `request` as API `api` version `version` and decodes the answer, within the timeout.
pub async fn exchange<Req: Encodable, Resp: Decodable>(
    ask: &Ask<'_>,
    api: ApiKey,
    version: i16,
    request: &Req,
) -> anyhow::Result<Resp> {
    tokio::time::timeout(ask.timeout, async {
        let tcp = TcpStream::connect(ask.addr).await?;
        tcp.set_nodelay(true)?;
        let mut stream = ask
            .security
            .open(tcp, -1, ask.addr, Identity::Kroute)
            .await?
            .stream;
        let header = RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(1)
            .with_client_id(Some(StrBytes::from_static_str("kroute")));
        let mut payload = BytesMut::new();
        header.encode(&mut payload, api.request_header_version(version))?;
        request.encode(&mut payload, version)?;
        stream.write_all(&size_prefix(payload.len())).await?;
        stream.write_all(&payload).await?;

        let mut frames = FramedRead::new(stream, FrameCodec::new(ask.max_frame_bytes));
        let frame = frames
            .next()
            .await
            .ok_or_else(|| anyhow::anyhow!("connection closed before the {api:?} response"))??;
        anyhow::ensure!(
            response_correlation_id(&frame)? == 1,
            "unexpected correlation id"
        );
        let (_, mut body) = split_response(&frame, api.response_header_version(version))?;
        Resp::decode(&mut body, version)
    })
    .await
    .map_err(|_| anyhow::anyhow!("timed out after {:?}", ask.timeout))?
}
