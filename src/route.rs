//! Deciding what happens to one request: where it goes and what answer the client gets.
//!
//! Only the fixed header is read for almost every request. Produce is read as far as `acks`
//! (acks = 0 gets no answer from the broker, so none is waited for), and an ApiVersions request
//! in a version kroute cannot decode is answered by kroute itself, as a broker would.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};
use kafka_protocol::protocol::Message;

use crate::protocol::header::{Malformed, RequestHead, produce_acks};
use crate::protocol::versions::unsupported_api_versions_body;

/// What to do with one request.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// Send the frame upstream and relay the answer.
    Forward,
    /// Send the frame upstream; the broker will not answer (Produce with acks = 0).
    ForwardNoReply,
    /// Do not send anything upstream; answer with this response payload.
    Answer(Bytes),
}

/// Plans one request from its header (and, for Produce, its acks).
pub fn plan(head: &RequestHead, frame: &[u8]) -> Result<Plan, Malformed> {
    match head.api() {
        Some(ApiKey::Produce) if produce_acks(frame, head.api_version)? == 0 => {
            Ok(Plan::ForwardNoReply)
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

    fn head(api_key: i16, api_version: i16) -> RequestHead {
        RequestHead {
            api_key,
            api_version,
            correlation_id: 9,
        }
    }

    #[test]
    fn unknown_and_ordinary_apis_are_forwarded() {
        assert_eq!(plan(&head(3, 12), &[]).unwrap(), Plan::Forward);
        assert_eq!(plan(&head(9999, 1), &[]).unwrap(), Plan::Forward);
        assert_eq!(plan(&head(18, 4), &[]).unwrap(), Plan::Forward);
    }

    #[test]
    fn future_api_versions_request_is_answered_locally() {
        let Plan::Answer(payload) = plan(&head(18, 99), &[]).unwrap() else {
            panic!("expected a local answer");
        };
        assert_eq!(&payload[..4], &9i32.to_be_bytes());
        assert_eq!(&payload[4..6], &35i16.to_be_bytes());
    }

    #[test]
    fn truncated_produce_is_malformed() {
        assert!(plan(&head(0, 9), &[0, 0, 0, 9, 0, 0, 0, 9]).is_err());
    }
}
