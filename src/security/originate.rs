//! Clients that try SASL on a kroute whose upstream SASL is `originate`.
//!
//! In originate mode kroute authenticates to the brokers itself, and its clients (usually the
//! application next to it in the same pod) connect without SASL. A client configured for SASL
//! anyway must fail at once with an error it can show its user, not hang or retry forever: its
//! SaslHandshake is answered UNSUPPORTED_SASL_MECHANISM with no mechanism enabled (the Java
//! client reports "... not enabled in the server, enabled mechanisms are []"), and a stray
//! SaslAuthenticate ILLEGAL_SASL_STATE.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, SaslAuthenticateResponse, SaslHandshakeResponse};
use kafka_protocol::protocol::{Encodable, StrBytes};

use crate::protocol::header::RequestHead;

const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
const ILLEGAL_SASL_STATE: i16 = 34;

/// The answer to a client's SASL request on an originating kroute; None for other requests.
pub fn refusal(head: &RequestHead) -> Option<Bytes> {
    let version = head.api_version;
    let mut payload = BytesMut::with_capacity(64);
    match head.api()? {
        ApiKey::SaslHandshake => {
            let body = SaslHandshakeResponse::default().with_error_code(UNSUPPORTED_SASL_MECHANISM);
            header(
                &mut payload,
                ApiKey::SaslHandshake,
                version,
                head.correlation_id,
            );
            body.encode(&mut payload, version).ok()?;
        }
        ApiKey::SaslAuthenticate => {
            let body = SaslAuthenticateResponse::default()
                .with_error_code(ILLEGAL_SASL_STATE)
                .with_error_message(Some(StrBytes::from_static_str(
                    "kroute authenticates to the brokers itself: connect without SASL",
                )));
            header(
                &mut payload,
                ApiKey::SaslAuthenticate,
                version,
                head.correlation_id,
            );
            body.encode(&mut payload, version).ok()?;
        }
        _ => return None,
    }
    Some(payload.freeze())
}

/// A response header: the correlation id, plus an empty tag buffer in flexible versions.
fn header(out: &mut BytesMut, api: ApiKey, version: i16, correlation_id: i32) {
    out.put_i32(correlation_id);
    if api.response_header_version(version) >= 1 {
        out.put_u8(0);
    }
}
