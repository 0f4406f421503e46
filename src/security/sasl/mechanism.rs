//! The client side of Kafka's SASL mechanisms, as byte-in, byte-out state machines.
//!
//! Kafka carries SASL in its own requests (KIP-152): after a SaslHandshake names the mechanism,
//! every message the client sends travels as the `auth_bytes` of a SaslAuthenticate request,
//! and the broker's answer comes back as the `auth_bytes` of the response. A mechanism here
//! knows nothing of that framing, or of sockets: it only turns "what the broker said" into
//! "what to send next", which keeps it easy to test against published vectors and hostile input.
//!
//! Everything that comes from the broker is untrusted: a mechanism never panics on it and
//! answers malformed input with an `Err`. Error messages may be logged, so they never contain
//! the password, the token, or anything derived from them.

use std::fmt;

use super::scram::{Hash, Scram};
use crate::config::Mechanism;
use crate::security::secret::Secret;

/// What the client sends next.
#[derive(PartialEq, Eq)]
pub enum Step {
    Send(Vec<u8>),
    Done,
}

/// Prints the length of a payload, not its bytes: a PLAIN or OAUTHBEARER payload holds the
/// password or token, and a `{:?}` in a log line must not leak it.
impl fmt::Debug for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Send(bytes) => write!(f, "Send(<{} bytes>)", bytes.len()),
            Step::Done => f.write_str("Done"),
        }
    }
}

/// One client-side SASL exchange. The caller sends each `Send` payload in a Kafka
/// SaslAuthenticate request (auth_bytes) and passes the server's auth_bytes answer to the next
/// `step` call; `step(None)` starts it. `Done` means the exchange completed and, for SCRAM, the
/// server's signature was verified. An Err is a protocol/verification failure with a message
/// that must NEVER contain the password/token, salted password, proofs or keys.
pub trait Exchange: Send {
    fn step(&mut self, server: Option<&[u8]>) -> Result<Step, String>;
}

/// The exchange for `mechanism`: `username` and the password `secret` (PLAIN, SCRAM), or the
/// bearer token `secret` (OAUTHBEARER, username ignored).
pub fn start(mechanism: Mechanism, username: &str, secret: &Secret) -> Box<dyn Exchange> {
    match mechanism {
        Mechanism::Plain => Box::new(Plain::new(username, secret)),
        Mechanism::ScramSha256 => Box::new(Scram::new(Hash::Sha256, username, secret)),
        Mechanism::ScramSha512 => Box::new(Scram::new(Hash::Sha512, username, secret)),
        Mechanism::OAuthBearer => Box::new(OAuthBearer::new(secret)),
    }
}

/// Broker text made safe for a log line: control characters replaced, length capped. The
/// broker chooses these bytes, and a log line is no place for its escape sequences.
pub(super) fn printable(text: &str) -> String {
    const MAX_CHARS: usize = 300;
    let mut out: String = text
        .chars()
        .take(MAX_CHARS)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if text.chars().nth(MAX_CHARS).is_some() {
        out.push_str("...");
    }
    out
}

/// PLAIN (RFC 4616): the password itself, in one message. Only safe over TLS.
struct Plain {
    username: String,
    password: Secret,
    state: PlainState,
}

enum PlainState {
    Start,
    Sent,
    Over,
}

impl Plain {
    fn new(username: &str, password: &Secret) -> Plain {
        Plain {
            username: username.to_string(),
            password: password.clone(),
            state: PlainState::Start,
        }
    }

    /// `authzid NUL authcid NUL passwd`, with an empty authzid: act as the user we log in as.
    /// NUL is the separator, so neither the name nor the password may contain one.
    fn message(&self) -> Result<Vec<u8>, String> {
        let password = self.password.expose();
        if self.username.contains('\0') || password.contains('\0') {
            return Err("PLAIN: the username or password contains a NUL character".into());
        }
        Ok(format!("\0{}\0{password}", self.username).into_bytes())
    }
}

impl Exchange for Plain {
    fn step(&mut self, server: Option<&[u8]>) -> Result<Step, String> {
        // Leave `Over` behind while we work: any error ends the exchange for good.
        let state = std::mem::replace(&mut self.state, PlainState::Over);
        match (state, server) {
            (PlainState::Start, None) => {
                let message = self.message()?;
                self.state = PlainState::Sent;
                Ok(Step::Send(message))
            }
            // A Kafka broker answers a good password with empty auth_bytes, a bad one with an
            // error code, which the caller sees before it would call us.
            (PlainState::Sent, Some([])) => Ok(Step::Done),
            (PlainState::Sent, Some(_)) => Err("PLAIN: the broker sent unexpected data".into()),
            (PlainState::Over, _) => Err("PLAIN: the exchange is already over".into()),
            (PlainState::Start, Some(_)) => {
                Err("PLAIN: server data before the client spoke".into())
            }
            (PlainState::Sent, None) => Err("PLAIN: the broker's answer is missing".into()),
        }
    }
}

/// OAUTHBEARER (RFC 7628): a bearer token (typically a JWT) obtained elsewhere, in one message.
struct OAuthBearer {
    token: Secret,
    state: BearerState,
}

enum BearerState {
    Start,
    Sent,
    /// The broker sent an error challenge and we acknowledged it; holds the broker's JSON.
    Refused(String),
    Over,
}

impl OAuthBearer {
    fn new(token: &Secret) -> OAuthBearer {
        OAuthBearer {
            token: token.clone(),
            state: BearerState::Start,
        }
    }

    /// `gs2-header kvsep "auth=Bearer " token kvsep kvsep`, kvsep being 0x01. Kafka adds no
    /// host or port keys. The token must be an RFC 6750 `b64token`: anything else (a 0x01, a
    /// space, a stray newline) would break the framing or be rejected by the broker anyway.
    fn message(&self) -> Result<Vec<u8>, String> {
        let token = self.token.expose();
        let allowed = |c: char| c.is_ascii_alphanumeric() || "-._~+/=".contains(c);
        if token.is_empty() || !token.chars().all(allowed) {
            return Err("OAUTHBEARER: the token is empty or not a valid bearer token".into());
        }
        Ok(format!("n,,\x01auth=Bearer {token}\x01\x01").into_bytes())
    }
}

impl Exchange for OAuthBearer {
    fn step(&mut self, server: Option<&[u8]>) -> Result<Step, String> {
        let state = std::mem::replace(&mut self.state, BearerState::Over);
        match (state, server) {
            (BearerState::Start, None) => {
                let message = self.message()?;
                self.state = BearerState::Sent;
                Ok(Step::Send(message))
            }
            (BearerState::Sent, Some([])) => Ok(Step::Done),
            // RFC 7628 section 3.2.2: a failure comes as a JSON challenge the client must
            // acknowledge with a lone 0x01; the broker then fails the authentication. Keep the
            // JSON (status, scope: no secret) to explain the failure on the next step.
            (BearerState::Sent, Some(challenge)) => {
                let json = printable(&String::from_utf8_lossy(challenge));
                self.state = BearerState::Refused(json);
                Ok(Step::Send(vec![0x01]))
            }
            (BearerState::Refused(json), _) => Err(format!("OAUTHBEARER refused: {json}")),
            (BearerState::Over, _) => Err("OAUTHBEARER: the exchange is already over".into()),
            (BearerState::Start, Some(_)) => {
                Err("OAUTHBEARER: server data before the client spoke".into())
            }
            (BearerState::Sent, None) => Err("OAUTHBEARER: the broker's answer is missing".into()),
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A tiny deterministic PRNG (xorshift64) for the fuzz-style tests: the same seed gives
    /// the same inputs on every run, so a failure can be replayed.
    pub struct XorShift(u64);

    impl XorShift {
        pub fn new(seed: u64) -> XorShift {
            XorShift(seed | 1)
        }

        pub fn next_u64(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        pub fn below(&mut self, n: usize) -> usize {
            (self.next_u64() % n as u64) as usize
        }

        /// Up to `max_len` bytes, often empty, often made of the bytes SCRAM parsing cares about.
        pub fn bytes(&mut self, max_len: usize) -> Vec<u8> {
            let len = if self.below(4) == 0 {
                0
            } else {
                self.below(max_len + 1)
            };
            (0..len).map(|_| self.byte()).collect()
        }

        /// A few random edits: replace, insert, delete, truncate.
        pub fn mutate(&mut self, bytes: &mut Vec<u8>) {
            for _ in 0..=self.below(3) {
                let at = self.below(bytes.len() + 1);
                let byte = self.byte();
                match self.below(4) {
                    0 if at < bytes.len() => bytes[at] = byte,
                    1 => bytes.insert(at, byte),
                    2 if at < bytes.len() => drop(bytes.remove(at)),
                    _ => bytes.truncate(at),
                }
            }
        }

        fn byte(&mut self) -> u8 {
            const INTERESTING: &[u8] = b",=rsiemv0149+/ \x00\x01\x7f\xc3\xff";
            if self.below(2) == 0 {
                INTERESTING[self.below(INTERESTING.len())]
            } else {
                self.next_u64() as u8
            }
        }
    }

    fn sent(step: Result<Step, String>) -> Vec<u8> {
        match step {
            Ok(Step::Send(bytes)) => bytes,
            other => panic!("expected Send, got {other:?}"),
        }
    }

    #[test]
    fn plain_sends_empty_authzid_user_and_password() {
        let mut plain = start(Mechanism::Plain, "alice", &Secret::new("s3cret"));
        assert_eq!(sent(plain.step(None)), b"\0alice\0s3cret");
        assert_eq!(plain.step(Some(b"")), Ok(Step::Done));
        assert!(
            plain.step(Some(b"")).is_err(),
            "a finished exchange stays finished"
        );
    }

    #[test]
    fn plain_refuses_unexpected_data_and_bad_order() {
        let mut plain = start(Mechanism::Plain, "alice", &Secret::new("s3cret"));
        assert!(
            plain.step(Some(b"hello")).is_err(),
            "server data before the client-first"
        );
        let mut plain = start(Mechanism::Plain, "alice", &Secret::new("s3cret"));
        sent(plain.step(None));
        assert!(plain.step(Some(b"unexpected")).is_err());
        let mut plain = start(Mechanism::Plain, "alice", &Secret::new("s3cret"));
        sent(plain.step(None));
        assert!(plain.step(None).is_err(), "starting twice");
    }

    #[test]
    fn plain_refuses_nul_without_naming_the_password() {
        let mut plain = start(Mechanism::Plain, "alice", &Secret::new("s3c\0ret"));
        let err = plain.step(None).unwrap_err();
        assert!(err.contains("NUL") && !err.contains("s3c"), "{err}");
    }

    #[test]
    fn oauthbearer_sends_the_rfc_7628_initial_response() {
        let token = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJrcm91dGUifQ.";
        let mut bearer = start(Mechanism::OAuthBearer, "ignored", &Secret::new(token));
        let expected = format!("n,,\x01auth=Bearer {token}\x01\x01");
        assert_eq!(sent(bearer.step(None)), expected.as_bytes());
        assert_eq!(bearer.step(Some(b"")), Ok(Step::Done));
        assert!(bearer.step(Some(b"")).is_err());
    }

    #[test]
    fn oauthbearer_acknowledges_an_error_challenge_then_fails_with_it() {
        let json = r#"{"status":"invalid_token","scope":""}"#;
        let mut bearer = start(Mechanism::OAuthBearer, "", &Secret::new("tok.en"));
        sent(bearer.step(None));
        assert_eq!(
            bearer.step(Some(json.as_bytes())),
            Ok(Step::Send(vec![0x01]))
        );
        let err = bearer.step(Some(b"")).unwrap_err();
        assert_eq!(err, format!("OAUTHBEARER refused: {json}"));
        assert!(bearer.step(Some(b"")).is_err());
    }

    #[test]
    fn oauthbearer_refuses_a_token_that_would_break_the_framing() {
        for token in ["", "sec ret", "sec\x01ret", "secret\n"] {
            let mut bearer = start(Mechanism::OAuthBearer, "", &Secret::new(token));
            let err = bearer.step(None).unwrap_err();
            assert!(
                err.starts_with("OAUTHBEARER:") && !err.contains("sec"),
                "{err}"
            );
        }
    }

    #[test]
    fn scram_mechanisms_start_with_a_client_first_message() {
        for mechanism in [Mechanism::ScramSha256, Mechanism::ScramSha512] {
            let mut scram = start(mechanism, "user", &Secret::new("pencil"));
            let first = String::from_utf8(sent(scram.step(None))).unwrap();
            assert!(first.starts_with("n,,n=user,r="), "{first}");
        }
    }

    #[test]
    fn step_debug_hides_the_payload() {
        let step = Step::Send(b"\0alice\0s3cret".to_vec());
        assert_eq!(format!("{step:?}"), "Send(<13 bytes>)");
        assert_eq!(format!("{:?}", Step::Done), "Done");
    }

    #[test]
    fn printable_replaces_control_characters_and_caps_length() {
        assert_eq!(printable("bad\x1b[31m\nproof"), "bad?[31m?proof");
        let long = "x".repeat(1000);
        assert_eq!(printable(&long), format!("{}...", "x".repeat(300)));
    }

    /// Random broker answers, at every step of every mechanism: an exchange may fail but never
    /// panic, and once it is done or failed it stays over.
    #[test]
    fn random_broker_answers_never_panic() {
        let mut rng = XorShift::new(0x6b72_6f75_7465);
        let mechanisms = [
            Mechanism::Plain,
            Mechanism::ScramSha256,
            Mechanism::ScramSha512,
            Mechanism::OAuthBearer,
        ];
        for round in 0..2000 {
            let mechanism = mechanisms[round % mechanisms.len()];
            let mut exchange = start(mechanism, "user", &Secret::new("pencil"));
            assert!(matches!(exchange.step(None), Ok(Step::Send(_))));
            let mut over = false;
            for _ in 0..4 {
                let answer = rng.bytes(64);
                let server = (rng.below(8) != 0).then_some(answer.as_slice());
                let result = exchange.step(server);
                assert!(
                    !over || result.is_err(),
                    "{mechanism:?} went on after it was over"
                );
                over |= !matches!(result, Ok(Step::Send(_)));
            }
        }
    }

    #[test]
    fn no_error_names_the_secret() {
        let mut errors = Vec::new();
        let mut plain = start(Mechanism::Plain, "alice", &Secret::new("s3cret"));
        sent(plain.step(None));
        errors.push(plain.step(Some(b"x")).unwrap_err());
        errors.push(plain.step(None).unwrap_err());
        let mut bearer = start(Mechanism::OAuthBearer, "", &Secret::new("s3cret"));
        sent(bearer.step(None));
        errors.push(bearer.step(None).unwrap_err());
        let mut bearer = start(Mechanism::OAuthBearer, "", &Secret::new("s3cret token"));
        errors.push(bearer.step(None).unwrap_err());
        for err in errors {
            assert!(!err.contains("s3cret"), "{err}");
        }
    }
}
