//! A client's own SASL on its connection through kroute (passthrough).
//!
//! The client's SaslHandshake and SaslAuthenticate requests go to the broker over the client's
//! own 1:1 connection like any request, at any point in its life (KIP-368 re-authentication
//! included). Two things need kroute's attention:
//! - once a client authenticates, what routing may do for it changes ([`Permit`]);
//! - after a SaslHandshake **v0** (pre-KIP-152 clients), the SASL tokens travel as raw
//!   size-prefixed frames without a request header, and the broker answers them the same way,
//!   without a correlation id. kroute must forward those frames as they are rather than parse
//!   them as requests. How many there are depends on the mechanism: PLAIN and OAUTHBEARER send
//!   one, SCRAM two (client-first, client-final). Mechanisms whose round count kroute cannot
//!   know (GSSAPI) are refused for v0, with a clear error; v1 works for every mechanism.

use kafka_protocol::messages::ApiKey;

use super::Permit;
use crate::protocol::header::{Malformed, RequestHead, WireReader};

/// The SASL state of one client connection.
#[derive(Default)]
pub struct ClientSasl {
    permit: Permit,
    /// Raw token frames still expected from the client after a SaslHandshake v0.
    raw_tokens: u8,
}

/// A SaslHandshake v0 kroute cannot pass through.
#[derive(Debug, thiserror::Error)]
#[error(
    "SaslHandshake v0 (raw tokens) with mechanism {0:?} cannot pass through kroute; use a client with SaslHandshake v1"
)]
pub struct UnsupportedV0(pub String);

impl ClientSasl {
    /// Which topics this client's batches may move to.
    pub fn permit(&self) -> &Permit {
        &self.permit
    }

    /// Whether the frame just read is a raw SASL token, to forward without parsing; counts it.
    pub fn take_raw_token(&mut self) -> bool {
        if self.raw_tokens == 0 {
            return false;
        }
        self.raw_tokens -= 1;
        true
    }

    /// Notes a SaslHandshake or SaslAuthenticate request from the client. Returns true the
    /// first time (the client has just started authenticating itself).
    pub fn observe(
        &mut self,
        head: &RequestHead,
        frame: &[u8],
        kroute_has_credentials: bool,
    ) -> Result<bool, ObserveError> {
        if head.api() == Some(ApiKey::SaslHandshake) && head.api_version == 0 {
            let mechanism = handshake_mechanism(frame)?;
            self.raw_tokens = match mechanism.as_str() {
                "PLAIN" | "OAUTHBEARER" => 1,
                "SCRAM-SHA-256" | "SCRAM-SHA-512" => 2,
                _ => return Err(UnsupportedV0(mechanism).into()),
            };
        }
        let first = self.permit.is_any();
        if first {
            self.permit = Permit::for_authenticated_client(kroute_has_credentials);
        }
        Ok(first)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    #[error(transparent)]
    Malformed(#[from] Malformed),
    #[error(transparent)]
    Unsupported(#[from] UnsupportedV0),
}

/// The mechanism a SaslHandshake request (header v1, then a string) names.
fn handshake_mechanism(frame: &[u8]) -> Result<String, Malformed> {
    let what = "SaslHandshake request";
    let mut r = WireReader::new(frame);
    r.skip(8, what)?;
    r.skip_nullable_string(what)?; // client id
    let len = r.i16(what)?;
    let start = r.position();
    let len = usize::try_from(len).map_err(|_| Malformed { what })?;
    r.skip(len, what)?;
    let name = frame.get(start..start + len).ok_or(Malformed { what })?;
    Ok(String::from_utf8_lossy(name).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{BufMut, BytesMut};

    fn handshake(version: i16, mechanism: &str) -> (RequestHead, Vec<u8>) {
        let mut f = BytesMut::new();
        f.put_i16(ApiKey::SaslHandshake as i16);
        f.put_i16(version);
        f.put_i32(9);
        f.put_i16(3);
        f.put_slice(b"cli");
        f.put_i16(mechanism.len() as i16);
        f.put_slice(mechanism.as_bytes());
        (RequestHead::parse(&f).unwrap(), f.to_vec())
    }

    #[test]
    fn a_v0_handshake_announces_the_mechanisms_raw_tokens() {
        let mut sasl = ClientSasl::default();
        assert!(!sasl.take_raw_token());
        let (head, frame) = handshake(0, "SCRAM-SHA-256");
        assert!(sasl.observe(&head, &frame, false).unwrap());
        assert!(sasl.take_raw_token() && sasl.take_raw_token());
        assert!(
            !sasl.take_raw_token(),
            "SCRAM sends two raw tokens, no more"
        );
        assert!(
            !sasl.permit().allows("t"),
            "an authenticated client without kroute credentials"
        );

        let (head, frame) = handshake(0, "PLAIN");
        assert!(
            !sasl.observe(&head, &frame, false).unwrap(),
            "not the first time"
        );
        assert!(sasl.take_raw_token() && !sasl.take_raw_token());

        let (head, frame) = handshake(1, "GSSAPI");
        assert!(
            sasl.observe(&head, &frame, false).is_ok(),
            "v1 works for any mechanism"
        );
        assert!(!sasl.take_raw_token());
        let (head, frame) = handshake(0, "GSSAPI");
        assert!(matches!(
            sasl.observe(&head, &frame, false),
            Err(ObserveError::Unsupported(_))
        ));
        let (head, frame) = handshake(0, "PLAIN");
        assert!(
            sasl.observe(&head, &frame[..frame.len() - 2], false)
                .is_err()
        );
    }
}
