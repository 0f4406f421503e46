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
use super::principal::{Mechanism, Principal, request_token};
use crate::protocol::header::{Malformed, RequestHead, WireReader};

/// The SASL state of one client connection.
#[derive(Default)]
pub struct ClientSasl {
    permit: Permit,
    /// Raw token frames still expected from the client after a SaslHandshake v0.
    raw_tokens: u8,
    /// The SaslHandshake v1 exchange in progress, if its mechanism's identity is readable.
    exchange: Option<Exchange>,
}

/// A SASL exchange kroute follows to read its principal.
struct Exchange {
    mechanism: Mechanism,
    rounds_left: u8,
    claimed: Option<Principal>,
}

/// What one SASL request of the client means.
#[derive(Debug, Default, PartialEq)]
pub struct Observed {
    /// The client's first SASL request on this connection.
    pub first: bool,
    /// A SaslHandshake: an exchange starts (the first, or a KIP-368 re-authentication).
    pub handshake: bool,
    /// The last SaslAuthenticate round of an exchange whose principal kroute read: if the
    /// broker accepts it, the connection is authenticated as this principal.
    pub last_round: Option<Principal>,
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

    /// The broker accepted the client as `principal`: its batches move over its principal's
    /// own connections from now on.
    pub fn confirmed(&mut self, principal: std::sync::Arc<Principal>) {
        self.permit = Permit::Own(principal);
    }

    /// Whether the frame just read is a raw SASL token, to forward without parsing; counts it.
    pub fn take_raw_token(&mut self) -> bool {
        if self.raw_tokens == 0 {
            return false;
        }
        self.raw_tokens -= 1;
        true
    }

    /// Notes a SaslHandshake or SaslAuthenticate request from the client.
    pub fn observe(
        &mut self,
        head: &RequestHead,
        frame: &[u8],
        kroute_has_credentials: bool,
    ) -> Result<Observed, ObserveError> {
        let mut observed = Observed::default();
        match head.api() {
            Some(ApiKey::SaslHandshake) => {
                observed.handshake = true;
                let mechanism = handshake_mechanism(frame)?;
                self.exchange = None;
                if head.api_version == 0 {
                    self.raw_tokens = match mechanism.as_str() {
                        "PLAIN" | "OAUTHBEARER" => 1,
                        "SCRAM-SHA-256" | "SCRAM-SHA-512" => 2,
                        _ => return Err(UnsupportedV0(mechanism).into()),
                    };
                } else if let Some(mechanism) = Mechanism::named(&mechanism) {
                    self.exchange = Some(Exchange {
                        mechanism,
                        rounds_left: mechanism.rounds(),
                        claimed: None,
                    });
                }
            }
            Some(ApiKey::SaslAuthenticate) => observed.last_round = self.round(head, frame),
            _ => {}
        }
        observed.first = matches!(self.permit, Permit::Any);
        if observed.first {
            self.permit = Permit::for_authenticated_client(kroute_has_credentials);
        }
        Ok(observed)
    }

    /// One SaslAuthenticate round of the exchange: the first names the principal; the last
    /// returns it.
    fn round(&mut self, head: &RequestHead, frame: &[u8]) -> Option<Principal> {
        let exchange = self.exchange.as_mut()?;
        if exchange.rounds_left == exchange.mechanism.rounds() {
            let token = request_token(frame, head.api_version);
            exchange.claimed = token.and_then(|t| exchange.mechanism.principal(&t));
        }
        exchange.rounds_left = exchange.rounds_left.saturating_sub(1);
        if exchange.rounds_left > 0 {
            return None;
        }
        self.exchange.take().and_then(|e| e.claimed)
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

    fn authenticate(version: i16, token: &[u8]) -> (RequestHead, Vec<u8>) {
        use kafka_protocol::messages::{RequestHeader, SaslAuthenticateRequest};
        use kafka_protocol::protocol::Encodable;
        let api = ApiKey::SaslAuthenticate;
        let mut f = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(4)
            .encode(&mut f, api.request_header_version(version))
            .unwrap();
        SaslAuthenticateRequest::default()
            .with_auth_bytes(bytes::Bytes::copy_from_slice(token))
            .encode(&mut f, version)
            .unwrap();
        (RequestHead::parse(&f).unwrap(), f.to_vec())
    }

    #[test]
    fn the_last_round_of_a_readable_exchange_names_the_claimed_principal() {
        for version in [0, 1, 2] {
            let mut sasl = ClientSasl::default();
            let (head, frame) = handshake(1, "SCRAM-SHA-512");
            let observed = sasl.observe(&head, &frame, true).unwrap();
            assert!(observed.first && observed.handshake && observed.last_round.is_none());
            let (head, frame) = authenticate(version, b"n,,n=alice,r=abc");
            let first = sasl.observe(&head, &frame, true).unwrap();
            assert_eq!(first, Observed::default(), "SCRAM has two rounds");
            let (head, frame) = authenticate(version, b"c=biws,r=abcdef,p=proof");
            let last = sasl.observe(&head, &frame, true).unwrap().last_round;
            let alice = Mechanism::ScramSha512.principal(b"n,,n=alice,r=x");
            assert_eq!(last, alice, "v{version}");
            let (head, frame) = authenticate(version, b"n,,n=alice,r=abc");
            assert_eq!(
                sasl.observe(&head, &frame, true).unwrap(),
                Observed::default(),
                "a round outside an exchange names nobody"
            );
        }
        let mut sasl = ClientSasl::default();
        let (head, frame) = handshake(1, "PLAIN");
        sasl.observe(&head, &frame, true).unwrap();
        let (head, frame) = authenticate(1, b"\0bob\0pw");
        let last = sasl.observe(&head, &frame, true).unwrap().last_round;
        assert_eq!(last, Mechanism::Plain.principal(b"\0bob\0other"));
        let (head, frame) = handshake(1, "GSSAPI");
        sasl.observe(&head, &frame, true).unwrap();
        let (head, frame) = authenticate(1, b"kerberos");
        assert_eq!(sasl.observe(&head, &frame, true).unwrap().last_round, None);
    }

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
        assert!(sasl.observe(&head, &frame, false).unwrap().first);
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
            !sasl.observe(&head, &frame, false).unwrap().first,
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
