//! Deciding what happens to one request: where it goes and what answer the client gets.
//!
//! Only the fixed header is read for almost every request. Produce is read as far as `acks`
//! (acks = 0 gets no answer from the broker, so none is waited for) and, for topics enabled for
//! routing, decoded so that keyless batches can move ([`produce`]). An ApiVersions request in a
//! version kroute cannot decode is answered by kroute itself, as a broker would.
//!
//! A request that must go to several brokers becomes a [`Split`]: parts, each a frame for one
//! broker, plus a [`Merge`] that turns the parts' answers into the one answer the client
//! expects. The client session sends parts and merges answers without knowing the API; Produce
//! is only the first user of this mechanism.

pub mod batch;
pub mod codec;
mod context;
pub mod divide;
pub mod join;
pub mod produce;
pub mod producers;
pub mod recovery;
pub mod sequence;

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};
use kafka_protocol::protocol::Message;

use crate::balance::scores::{ScoreConfig, Scores};
use crate::balance::strategy::{StrictCost, Tuning};
use crate::config::RoutingConfig;
use crate::protocol::header::{Malformed, RequestHead, produce_head};
use crate::protocol::versions::unsupported_api_versions_body;
use crate::security::Permit;
use crate::upstream::Reply;
pub use context::Context;
use producers::Producers;
use tokio::sync::oneshot;

/// What to do with one request.
pub enum Plan {
    /// Send the frame upstream and relay the answer.
    Forward,
    /// Send the frame upstream; the broker will not answer (Produce with acks = 0).
    ForwardNoReply,
    /// Do not send anything upstream; answer with this response payload.
    Answer(Bytes),
    /// Send parts to several brokers and merge their answers.
    Split(Split),
}

/// One request, split across brokers.
pub struct Split {
    pub parts: Vec<Part>,
    /// None when no broker answers (Produce with acks = 0).
    pub merge: Option<Box<dyn Merge>>,
}

/// A request frame for one broker.
pub struct Part {
    pub node_id: i32,
    pub frame: Bytes,
    /// Set when the part is already queued on a connection of its own (an owned idempotent
    /// producer's, see [`producers`]): its answer arrives here and the session must not send
    /// it again.
    pub sent: Option<oneshot::Receiver<Reply>>,
}

/// Turns the answers of a split request's parts (in part order) into the client's answer.
/// A part whose broker went away arrives as an error; the merge reports that as a retriable
/// error to the client rather than failing the whole connection.
pub trait Merge: Send {
    fn merge(self: Box<Self>, answers: Vec<Reply>) -> Bytes;
}

/// The routing state shared by all connections: live scores, the strategy and the owned
/// idempotent producers.
pub struct Router {
    pub scores: Scores,
    pub strict_cost: StrictCost,
    pub producers: Producers,
    /// What the brokers held of idempotent producers when kroute started.
    pub recovery: recovery::Recovery,
    /// Unresolved batches a lane may hold before an idempotent batch spills to another
    /// broker (`routing.lane_spill_depth`).
    pub lane_spill_depth: u32,
    /// Largest batch built by joining waiting batches (`routing.join_max_bytes`; 0: none).
    pub join_max_bytes: usize,
    /// Whether compressed batches are joined too (`routing.join_compressed`).
    pub join_compressed: bool,
}

impl Router {
    pub fn new(config: &RoutingConfig) -> Self {
        Self {
            scores: Scores::new(ScoreConfig {
                decay: Duration::from_millis(config.score_decay_ms),
                stale_after: Duration::from_millis(config.score_stale_ms),
            }),
            strict_cost: StrictCost::new(Tuning::new(Duration::from_millis(config.lease_ms))),
            producers: Producers::new(
                Duration::from_millis(config.producer_expiry_ms),
                config.max_producers,
            ),
            recovery: recovery::Recovery::new(Duration::from_millis(config.producer_expiry_ms)),
            lane_spill_depth: config.lane_spill_depth,
            join_max_bytes: config.join_max_bytes as usize,
            join_compressed: config.join_compressed,
        }
    }
}

/// Plans one request that arrived on a connection whose own broker is `home` (-1: bootstrap).
/// `permit` says which topics' batches may move at all on this connection (see
/// [`crate::security::Permit`]).
pub fn plan(
    ctx: &Arc<dyn Context>,
    home: i32,
    permit: &Permit,
    head: &RequestHead,
    frame: &Bytes,
) -> Result<Plan, Malformed> {
    match head.api() {
        Some(ApiKey::Produce) => {
            let produce = produce_head(frame, head.api_version)?;
            Ok(produce::plan(ctx, home, permit, head, &produce, frame))
        }
        Some(ApiKey::ApiVersions) if head.api_version > ApiVersionsResponse::VERSIONS.max => {
            // ApiVersions responses always use response header v0: just the correlation id.
            let body = unsupported_api_versions_body();
            let mut payload = BytesMut::with_capacity(4 + body.len());
            payload.put_i32(head.correlation_id);
            payload.extend_from_slice(&body);
            Ok(Plan::Answer(payload.freeze()))
        }
        _ => Ok(Plan::Forward),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::metrics::Metrics;
    use crate::proxy::Proxy;

    fn proxy() -> Arc<dyn Context> {
        let config =
            Config::parse("[upstream]\nbootstrap_servers = [\"127.0.0.1:1\"]\n", "t").unwrap();
        Proxy::new(config, Metrics::new()).unwrap()
    }

    fn head(api_key: i16, api_version: i16) -> RequestHead {
        RequestHead {
            api_key,
            api_version,
            correlation_id: 9,
        }
    }

    #[test]
    fn unknown_and_ordinary_apis_are_forwarded() {
        let p = proxy();
        for (key, version) in [(3, 12), (9999, 1), (18, 4)] {
            assert!(matches!(
                plan(&p, 1, &Permit::Any, &head(key, version), &Bytes::new()),
                Ok(Plan::Forward)
            ));
        }
    }

    #[test]
    fn future_api_versions_request_is_answered_locally() {
        let Ok(Plan::Answer(payload)) =
            plan(&proxy(), 1, &Permit::Any, &head(18, 99), &Bytes::new())
        else {
            panic!("expected a local answer");
        };
        assert_eq!(&payload[..4], &9i32.to_be_bytes());
        assert_eq!(&payload[4..6], &35i16.to_be_bytes());
    }

    #[test]
    fn truncated_produce_is_malformed() {
        let frame = Bytes::from_static(&[0, 0, 0, 9, 0, 0, 0, 9]);
        assert!(plan(&proxy(), 1, &Permit::Any, &head(0, 9), &frame).is_err());
    }
}
