//! Who a passthrough client authenticated as, read from its own SASL exchange.
//!
//! kroute routes an authenticated client's moved batches over connections authenticated as the
//! same principal ([`crate::upstream::principals`]), so it must know which client connections
//! share one. It reads the identity the client claims in its first SaslAuthenticate token and
//! trusts it only once the broker accepted the exchange (the session confirms it from the
//! broker's answer to the last round). The key is conservative: two connections share a
//! principal only if they used the same mechanism and claimed exactly the same identity
//! (authorization id and SCRAM extensions included), so kroute never merges two principals the
//! broker tells apart; at worst it keeps apart two that the broker would map to one.
//!
//! Only mechanisms whose identity is readable from the token are known: PLAIN (authzid,
//! authcid) and SCRAM (the client-first message without its nonce). Others (GSSAPI,
//! OAUTHBEARER) give no principal: such clients keep the older, narrower policy of
//! [`super::Permit`]. The password of PLAIN is never kept.

use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, RequestHeader, SaslAuthenticateRequest, SaslAuthenticateResponse,
};
use kafka_protocol::protocol::Decodable;

use crate::protocol::header::split_response;

/// A SASL principal as the broker authenticated it. Its Debug output is a hash: names are not
/// secrets, but logs need not carry them.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Principal {
    mechanism: Mechanism,
    /// PLAIN: "authzid\0authcid"; SCRAM: the client-first message minus the gs2 channel-binding
    /// flag and the nonce.
    identity: String,
}

impl fmt::Debug for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut h = DefaultHasher::new();
        self.hash(&mut h);
        write!(f, "principal#{:08x}", h.finish() as u32)
    }
}

/// The SASL mechanisms whose identity kroute can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mechanism {
    Plain,
    ScramSha256,
    ScramSha512,
}

impl Mechanism {
    /// The mechanism a SaslHandshake names, if kroute can read its identity.
    pub fn named(name: &str) -> Option<Mechanism> {
        match name {
            "PLAIN" => Some(Mechanism::Plain),
            "SCRAM-SHA-256" => Some(Mechanism::ScramSha256),
            "SCRAM-SHA-512" => Some(Mechanism::ScramSha512),
            _ => None,
        }
    }

    /// SaslAuthenticate round trips until the broker has accepted the client.
    pub fn rounds(self) -> u8 {
        match self {
            Mechanism::Plain => 1,
            Mechanism::ScramSha256 | Mechanism::ScramSha512 => 2,
        }
    }

    /// The identity claimed by the client's first token, or None if it cannot be read.
    pub fn principal(self, first_token: &[u8]) -> Option<Principal> {
        let identity = match self {
            Mechanism::Plain => plain_identity(first_token)?,
            Mechanism::ScramSha256 | Mechanism::ScramSha512 => scram_identity(first_token)?,
        };
        Some(Principal {
            mechanism: self,
            identity,
        })
    }
}

/// PLAIN's message is `authzid \0 authcid \0 password`: the first two name the principal.
fn plain_identity(token: &[u8]) -> Option<String> {
    let mut fields = token.split(|b| *b == 0);
    let (authzid, authcid, _password) = (fields.next()?, fields.next()?, fields.next()?);
    if authcid.is_empty() {
        return None;
    }
    let mut identity = String::from_utf8(authzid.to_vec()).ok()?;
    identity.push('\0');
    identity.push_str(std::str::from_utf8(authcid).ok()?);
    Some(identity)
}

/// SCRAM's client-first message is `gs2-header client-first-bare`, e.g.
/// `n,,n=alice,r=nonce[,extensions]` (`n,a=authzid,` with an authorization id). Everything but
/// the channel-binding flag and the nonce names the principal (extensions such as
/// `tokenauth=true` change who the broker takes the client for).
fn scram_identity(token: &[u8]) -> Option<String> {
    let message = std::str::from_utf8(token).ok()?;
    let (_flag, rest) = message.split_once(',')?;
    let (authzid, bare) = rest.split_once(',')?;
    let mut identity = String::from(authzid);
    let mut named = false;
    for attribute in bare.split(',') {
        if attribute.starts_with("r=") {
            continue;
        }
        named |= attribute.starts_with("n=") && attribute.len() > 2;
        identity.push(',');
        identity.push_str(attribute);
    }
    named.then_some(identity)
}

/// The token of a SaslAuthenticate request frame (header included).
pub fn request_token(frame: &[u8], version: i16) -> Option<Bytes> {
    let mut buf = Bytes::copy_from_slice(frame);
    let api = ApiKey::SaslAuthenticate;
    RequestHeader::decode(&mut buf, api.request_header_version(version)).ok()?;
    let request = SaslAuthenticateRequest::decode(&mut buf, version).ok()?;
    Some(request.auth_bytes)
}

/// If the broker's answer to a SaslAuthenticate request (header included) is a success: the
/// session's lifetime in ms (0: no limit, or not told before v1).
pub fn accepted(answer: &Bytes, version: i16) -> Option<i64> {
    let header_version = ApiKey::SaslAuthenticate.response_header_version(version);
    let (_, mut body) = split_response(answer, header_version).ok()?;
    let response = SaslAuthenticateResponse::decode(&mut body, version).ok()?;
    (response.error_code == 0).then_some(response.session_lifetime_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_authzid_and_authcid_never_the_password() {
        let p = Mechanism::Plain.principal(b"\0alice\0s3cret").unwrap();
        assert_eq!(p.identity, "\0alice");
        assert_eq!(
            p,
            Mechanism::Plain.principal(b"\0alice\0other").unwrap(),
            "the password is not part of the principal"
        );
        assert_ne!(p, Mechanism::Plain.principal(b"\0bob\0s3cret").unwrap());
        assert_ne!(p, Mechanism::Plain.principal(b"x\0alice\0s3cret").unwrap());
        assert!(!format!("{p:?}").contains("alice"));
        assert!(Mechanism::Plain.principal(b"\0\0pw").is_none());
        assert!(Mechanism::Plain.principal(b"alice").is_none());
    }

    #[test]
    fn scram_names_the_client_first_message_without_its_nonce() {
        let m = Mechanism::ScramSha512;
        let p = m.principal(b"n,,n=alice,r=abc").unwrap();
        assert_eq!(p, m.principal(b"y,,n=alice,r=xyz").unwrap());
        assert_ne!(p, m.principal(b"n,,n=alice,r=abc,tokenauth=true").unwrap());
        assert_ne!(p, m.principal(b"n,a=bob,n=alice,r=abc").unwrap());
        assert_ne!(
            p,
            Mechanism::ScramSha256
                .principal(b"n,,n=alice,r=abc")
                .unwrap()
        );
        assert!(m.principal(b"n,,r=abc").is_none());
        assert!(m.principal(b"n,,n=,r=abc").is_none());
        assert!(m.principal(b"garbage").is_none());
        assert!(m.principal(&[0xff, 0xfe]).is_none());
    }
}
