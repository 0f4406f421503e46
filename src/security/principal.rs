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
//! authcid), SCRAM (the client-first message without its nonce) and OAUTHBEARER (a SHA-256
//! digest of the whole initial response: token, authorization id and extensions; connections
//! sharing one token are one principal, since the broker derives the principal from the token
//! alone, and a refreshed token makes a new one). GSSAPI gives no principal: such clients keep
//! the older, narrower policy of [`super::Permit`]. Neither PLAIN's password nor a bearer
//! token is kept.

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
    /// flag and the nonce; OAUTHBEARER: the hex SHA-256 of the initial response minus the flag.
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
    OAuthBearer,
}

impl Mechanism {
    /// The mechanism a SaslHandshake names, if kroute can read its identity.
    pub fn named(name: &str) -> Option<Mechanism> {
        match name {
            "PLAIN" => Some(Mechanism::Plain),
            "SCRAM-SHA-256" => Some(Mechanism::ScramSha256),
            "SCRAM-SHA-512" => Some(Mechanism::ScramSha512),
            "OAUTHBEARER" => Some(Mechanism::OAuthBearer),
            _ => None,
        }
    }

    /// SaslAuthenticate round trips until the broker has accepted the client.
    pub fn rounds(self) -> u8 {
        match self {
            Mechanism::Plain | Mechanism::OAuthBearer => 1,
            Mechanism::ScramSha256 | Mechanism::ScramSha512 => 2,
        }
    }

    /// The identity claimed by the client's first token, or None if it cannot be read.
    pub fn principal(self, first_token: &[u8]) -> Option<Principal> {
        let identity = match self {
            Mechanism::Plain => plain_identity(first_token)?,
            Mechanism::ScramSha256 | Mechanism::ScramSha512 => scram_identity(first_token)?,
            Mechanism::OAuthBearer => bearer_identity(first_token)?,
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

/// OAUTHBEARER's initial response (RFC 7628) is `gs2-header \x01auth=Bearer <token>\x01
/// [key=value\x01]... \x01`. The broker takes the principal from the token (and a custom
/// validator may look at the extensions), so all of it but the channel-binding flag names the
/// principal; kept as a digest, since a bearer token is a secret.
fn bearer_identity(token: &[u8]) -> Option<String> {
    let (_flag, rest) = token.split_at(token.iter().position(|b| *b == b',')? + 1);
    let auth = b"\x01auth=Bearer ";
    if !rest.windows(auth.len()).any(|w| w == auth) {
        return None;
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, rest);
    Some(digest.as_ref().iter().map(|b| format!("{b:02x}")).collect())
}

/// The token of a SaslAuthenticate request frame (header included).
pub fn request_token(frame: &[u8], version: i16) -> Option<Bytes> {
    let mut buf = Bytes::copy_from_slice(frame);
    let api = ApiKey::SaslAuthenticate;
    RequestHeader::decode(&mut buf, api.request_header_version(version)).ok()?;
    let request = SaslAuthenticateRequest::decode(&mut buf, version).ok()?;
    Some(request.auth_bytes)
}

impl Principal {
    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }
}

/// If the broker's answer to the last SaslAuthenticate round of `mechanism` (header included)
/// is a success: the session's lifetime in ms (0: no limit, or not told before v1). An
/// OAUTHBEARER server refuses a token with an error *challenge* and no error code (RFC 7628:
/// the client answers it, and only then fails), so there a success also has no challenge.
pub fn accepted(answer: &Bytes, version: i16, mechanism: Mechanism) -> Option<i64> {
    let header_version = ApiKey::SaslAuthenticate.response_header_version(version);
    let (_, mut body) = split_response(answer, header_version).ok()?;
    let response = SaslAuthenticateResponse::decode(&mut body, version).ok()?;
    let challenged = mechanism == Mechanism::OAuthBearer && !response.auth_bytes.is_empty();
    (response.error_code == 0 && !challenged).then_some(response.session_lifetime_ms)
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

    #[test]
    fn oauthbearer_names_a_digest_of_token_and_extensions_never_the_token() {
        let m = Mechanism::OAuthBearer;
        let p = m.principal(b"n,,\x01auth=Bearer abc.def.\x01\x01").unwrap();
        assert_eq!(
            p,
            m.principal(b"y,,\x01auth=Bearer abc.def.\x01\x01").unwrap()
        );
        assert_ne!(
            p,
            m.principal(b"n,,\x01auth=Bearer abc.xyz.\x01\x01").unwrap()
        );
        assert_ne!(
            p,
            m.principal(b"n,,\x01auth=Bearer abc.def.\x01ext=1\x01\x01")
                .unwrap()
        );
        assert!(!p.identity.contains("abc"));
        assert!(!format!("{p:?}").contains("abc"));
        assert!(m.principal(b"n,,\x01auth=Basic abc\x01\x01").is_none());
        assert!(m.principal(b"garbage").is_none());
    }
}
