//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), client side, as Kafka speaks them.
//!
//! Four messages, two from each side:
//!
//! ```text
//! client-first   n,,n=<user>,r=<client nonce>
//! server-first   r=<client nonce><server nonce>,s=<salt>,i=<iterations>
//! client-final   c=biws,r=<nonce>,p=<proof>
//! server-final   v=<server signature>          (or e=<error>)
//! ```
//!
//! Why all this instead of PLAIN: the password never crosses the wire. Both sides derive keys
//! from it (`SaltedPassword`, then `ClientKey`, `StoredKey`, `ServerKey`); the client proves it
//! holds `ClientKey` by signing the whole conversation (the *AuthMessage*), and the broker proves
//! it holds `ServerKey` by doing the same. The broker only stores `StoredKey` and `ServerKey`, so
//! a stolen credential store does not hand out the password, and a fake broker that does not
//! know the credential cannot produce a matching server signature. That last check is why the
//! exchange is only [`Step::Done`] after the server signature has been verified.
//!
//! Kafka's dialect: no channel binding (`n,,` whose base64 is `biws`), no authorization id, and
//! neither the username nor the password goes through SASLprep: Kafka's Java client sends the
//! password's UTF-8 bytes as they are, and so do we, or the derived keys would not match.

use std::num::NonZeroU32;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ring::rand::{SecureRandom, SystemRandom};
use ring::{digest, hmac, pbkdf2};

use super::mechanism::{Exchange, Step, printable};
use crate::security::secret::Secret;

/// The fewest PBKDF2 iterations Kafka accepts for SCRAM credentials; a broker asking for fewer
/// is either misconfigured or trying to make the password cheaper to brute-force.
const MIN_ITERATIONS: u32 = 4096;
/// The most iterations we compute. Kafka's client has no such bound, but the iteration count
/// comes from the broker, and `i=4294967295` would keep a thread busy for hours. Kafka's own
/// credential API (KIP-554) stores at most 16384, so this leaves a wide margin.
const MAX_ITERATIONS: u32 = 1_000_000;
/// Random bytes in a client nonce: 192 bits, far beyond guessing.
const NONCE_BYTES: usize = 24;
/// `c=` in client-final: the base64 of the gs2 header `n,,` ("no channel binding").
const CHANNEL_BINDING: &str = "biws";
/// `m=` starts a message only to announce an extension the client must understand; we
/// understand none, and RFC 5802 says to fail rather than guess.
const MANDATORY_EXTENSION: &str = "the broker requires an unsupported mandatory extension (m=)";

/// The hash a SCRAM mechanism is built on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Hash {
    Sha256,
    Sha512,
}

impl Hash {
    fn mechanism(self) -> &'static str {
        match self {
            Hash::Sha256 => "SCRAM-SHA-256",
            Hash::Sha512 => "SCRAM-SHA-512",
        }
    }

    fn hmac(self) -> hmac::Algorithm {
        match self {
            Hash::Sha256 => hmac::HMAC_SHA256,
            Hash::Sha512 => hmac::HMAC_SHA512,
        }
    }

    fn pbkdf2(self) -> pbkdf2::Algorithm {
        match self {
            Hash::Sha256 => pbkdf2::PBKDF2_HMAC_SHA256,
            Hash::Sha512 => pbkdf2::PBKDF2_HMAC_SHA512,
        }
    }
}

/// One SCRAM exchange.
pub(super) struct Scram {
    hash: Hash,
    username: String,
    password: Secret,
    state: State,
}

/// Where the exchange is. Each state holds exactly what the next message needs.
enum State {
    /// Nothing sent yet. The nonce is drawn when the exchange starts (tests fix it).
    Start { nonce: Option<String> },
    /// client-first sent; the nonce and our message go into the AuthMessage.
    SentFirst {
        nonce: String,
        client_first_bare: String,
    },
    /// client-final sent; enough to check the server signature, and no more.
    SentFinal {
        server_key: hmac::Key,
        auth_message: String,
    },
    /// Done or failed: either way, nothing more to say.
    Over,
}

impl Scram {
    pub(super) fn new(hash: Hash, username: &str, password: &Secret) -> Scram {
        Scram {
            hash,
            username: username.to_string(),
            password: password.clone(),
            state: State::Start { nonce: None },
        }
    }

    /// An exchange with a fixed client nonce, so tests can replay published vectors.
    #[cfg(test)]
    pub(super) fn with_nonce(hash: Hash, username: &str, password: &Secret, nonce: &str) -> Scram {
        let mut scram = Scram::new(hash, username, password);
        scram.state = State::Start {
            nonce: Some(nonce.to_string()),
        };
        scram
    }

    /// Moves from `state` to the next one, given what the broker said.
    fn advance(&self, state: State, server: Option<&[u8]>) -> Result<(State, Step), String> {
        match (state, server) {
            (State::Start { nonce }, None) => {
                let nonce = match nonce {
                    Some(nonce) => nonce,
                    None => random_nonce()?,
                };
                Ok(self.client_first(nonce))
            }
            (
                State::SentFirst {
                    nonce,
                    client_first_bare,
                },
                Some(message),
            ) => self.client_final(&nonce, &client_first_bare, message),
            (
                State::SentFinal {
                    server_key,
                    auth_message,
                },
                Some(message),
            ) => verify_server_final(&server_key, &auth_message, message),
            (State::Over, _) => Err("the exchange is already over".into()),
            (State::Start { .. }, Some(_)) => Err("server data before the client spoke".into()),
            (_, None) => Err("the broker's answer is missing".into()),
        }
    }

    fn client_first(&self, nonce: String) -> (State, Step) {
        let client_first_bare = format!("n={},r={nonce}", sasl_name(&self.username));
        let message = format!("n,,{client_first_bare}");
        let next = State::SentFirst {
            nonce,
            client_first_bare,
        };
        (next, Step::Send(message.into_bytes()))
    }

    /// Answers server-first with our proof (RFC 5802 section 3).
    fn client_final(
        &self,
        nonce: &str,
        client_first_bare: &str,
        message: &[u8],
    ) -> Result<(State, Step), String> {
        let server_first = std::str::from_utf8(message)
            .map_err(|_| "the server-first message is not UTF-8".to_string())?;
        let first = ServerFirst::parse(server_first)?;
        // The broker must extend our nonce: that makes this conversation, and so the proof
        // that signs it, unique to this exchange (no replaying an old proof).
        if !first.nonce.starts_with(nonce) {
            return Err("the server nonce does not start with the client nonce".into());
        }
        let password = self.password.expose();
        let keys = Keys::derive(self.hash, password, &first.salt, first.iterations);
        let without_proof = format!("c={CHANNEL_BINDING},r={}", first.nonce);
        let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
        let proof = STANDARD.encode(keys.client_proof(&auth_message));
        let next = State::SentFinal {
            server_key: keys.server_key,
            auth_message,
        };
        let reply = format!("{without_proof},p={proof}");
        Ok((next, Step::Send(reply.into_bytes())))
    }
}

impl Exchange for Scram {
    fn step(&mut self, server: Option<&[u8]>) -> Result<Step, String> {
        // Leave `Over` behind while we work: any error ends the exchange for good.
        let state = std::mem::replace(&mut self.state, State::Over);
        let (next, step) = self
            .advance(state, server)
            .map_err(|e| format!("{}: {e}", self.hash.mechanism()))?;
        self.state = next;
        Ok(step)
    }
}

/// The keys RFC 5802 derives from the password. None of them may ever reach an error message.
struct Keys {
    client_key: hmac::Tag,
    stored_key: hmac::Key,
    server_key: hmac::Key,
}

impl Keys {
    /// `SaltedPassword := Hi(password, salt, i)`, which is PBKDF2 with HMAC as its PRF, then
    /// `ClientKey := HMAC(SaltedPassword, "Client Key")`, `StoredKey := H(ClientKey)` and
    /// `ServerKey := HMAC(SaltedPassword, "Server Key")`.
    fn derive(hash: Hash, password: &str, salt: &[u8], iterations: NonZeroU32) -> Keys {
        let algorithm = hash.hmac();
        let mut salted = vec![0; algorithm.digest_algorithm().output_len()];
        let secret = password.as_bytes();
        pbkdf2::derive(hash.pbkdf2(), iterations, salt, secret, &mut salted);
        let salted = hmac::Key::new(algorithm, &salted);
        let client_key = hmac::sign(&salted, b"Client Key");
        let stored_key = digest::digest(algorithm.digest_algorithm(), client_key.as_ref());
        let server_key = hmac::sign(&salted, b"Server Key");
        Keys {
            client_key,
            stored_key: hmac::Key::new(algorithm, stored_key.as_ref()),
            server_key: hmac::Key::new(algorithm, server_key.as_ref()),
        }
    }

    /// `ClientProof := ClientKey XOR HMAC(StoredKey, AuthMessage)`. The broker, which knows
    /// only `StoredKey`, recomputes the signature, XORs it back out and checks that
    /// `H(result)` is `StoredKey`.
    fn client_proof(&self, auth_message: &str) -> Vec<u8> {
        let signature = hmac::sign(&self.stored_key, auth_message.as_bytes());
        let (key, signature) = (self.client_key.as_ref(), signature.as_ref());
        key.iter().zip(signature).map(|(k, s)| k ^ s).collect()
    }
}

/// Checks server-final: the broker's proof that it knows `ServerKey`.
fn verify_server_final(
    server_key: &hmac::Key,
    auth_message: &str,
    message: &[u8],
) -> Result<(State, Step), String> {
    let text = std::str::from_utf8(message)
        .map_err(|_| "the server-final message is not UTF-8".to_string())?;
    match attributes(text)?.first() {
        Some(('e', error)) => Err(format!("the broker refused: {}", printable(error))),
        Some(('v', signature)) => {
            let signature = STANDARD
                .decode(signature)
                .map_err(|_| "the server signature is not base64".to_string())?;
            // hmac::verify recomputes HMAC(ServerKey, AuthMessage) and compares in constant
            // time, so timing tells an attacker nothing about how much of a forgery matched.
            hmac::verify(server_key, auth_message.as_bytes(), &signature).map_err(|_| {
                "the server signature does not match: the broker does not know the credential"
                    .to_string()
            })?;
            Ok((State::Over, Step::Done))
        }
        Some(('m', _)) => Err(MANDATORY_EXTENSION.into()),
        _ => Err("the server-final message has neither v= nor e=".into()),
    }
}

/// server-first, parsed: `[m=...,]r=<nonce>,s=<salt>,i=<iterations>[,<extensions>]`.
struct ServerFirst<'a> {
    nonce: &'a str,
    salt: Vec<u8>,
    iterations: NonZeroU32,
}

impl<'a> ServerFirst<'a> {
    fn parse(text: &'a str) -> Result<ServerFirst<'a>, String> {
        let mut attrs = attributes(text)?.into_iter();
        // Trailing attributes are extensions, which RFC 5802 tells a client to ignore.
        let (nonce, salt, iterations) = match (attrs.next(), attrs.next(), attrs.next()) {
            (Some(('r', r)), Some(('s', s)), Some(('i', i))) => (r, s, i),
            (Some(('m', _)), ..) => return Err(MANDATORY_EXTENSION.into()),
            _ => return Err("the server-first message is not r=..,s=..,i=..".into()),
        };
        // The nonce goes back into client-final verbatim, so it must be printable ASCII.
        if !nonce.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("the server nonce has characters a nonce cannot have".into());
        }
        let salt = STANDARD
            .decode(salt)
            .map_err(|_| "the salt is not base64".to_string())?;
        Ok(ServerFirst {
            nonce,
            salt,
            iterations: parse_iterations(iterations)?,
        })
    }
}

fn parse_iterations(text: &str) -> Result<NonZeroU32, String> {
    // Digits only: `str::parse` would also take a leading '+'.
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err("the iteration count is not a number".into());
    }
    let count: u32 = text
        .parse()
        .map_err(|_| "the iteration count is too large".to_string())?;
    if count < MIN_ITERATIONS {
        return Err(format!(
            "the broker asks for {count} iterations, fewer than the minimum {MIN_ITERATIONS}"
        ));
    }
    if count > MAX_ITERATIONS {
        return Err(format!(
            "the broker asks for {count} iterations, more than the maximum {MAX_ITERATIONS}"
        ));
    }
    NonZeroU32::new(count).ok_or_else(|| "the iteration count is zero".to_string())
}

/// Splits a SCRAM message into its `a=value` attributes, in order. Values may contain `=`
/// (base64 padding); they never contain `,`, which is what separates attributes.
fn attributes(text: &str) -> Result<Vec<(char, &str)>, String> {
    text.split(',')
        .map(|part| {
            attribute(part)
                .ok_or_else(|| "the broker's message is not a list of a=value attributes".into())
        })
        .collect()
}

/// One `a=value` attribute: a single ASCII letter, `=`, then the value.
fn attribute(part: &str) -> Option<(char, &str)> {
    let (name, value) = part.split_once('=')?;
    let mut chars = name.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) if c.is_ascii_alphabetic() => Some((c, value)),
        _ => None,
    }
}

/// The username as a SCRAM `saslname`: `=` and `,` would break the attribute syntax, so they
/// travel as `=3D` and `=2C` (`=` first, or we would escape our own escapes).
fn sasl_name(username: &str) -> String {
    username.replace('=', "=3D").replace(',', "=2C")
}

/// A fresh client nonce: random bytes from the OS, base64 so they are printable and have no `,`.
fn random_nonce() -> Result<String, String> {
    let mut bytes = [0; NONCE_BYTES];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| "the system random number generator failed".to_string())?;
    Ok(STANDARD.encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::super::mechanism::start;
    use super::super::mechanism::tests::XorShift;
    use super::*;
    use crate::config::Mechanism;

    // RFC 7677 section 3.
    const PASSWORD: &str = "pencil";
    const NONCE: &str = "rOprNGfwEbeRWgbNEkqO";
    const SERVER_NONCE: &str = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
    const SALT: &str = "W22ZaJ0SNY7soEsUEjb6gQ==";
    const SERVER_FIRST: &str = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                                s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const PROOF: &str = "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    const SIGNATURE: &str = "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

    fn rfc7677() -> Scram {
        Scram::with_nonce(Hash::Sha256, "user", &Secret::new(PASSWORD), NONCE)
    }

    fn sent(step: Result<Step, String>) -> String {
        match step {
            Ok(Step::Send(bytes)) => String::from_utf8(bytes).expect("client messages are UTF-8"),
            other => panic!("expected Send, got {other:?}"),
        }
    }

    /// The RFC 7677 exchange, up to and including client-final.
    fn after_client_final() -> Scram {
        let mut scram = rfc7677();
        sent(scram.step(None));
        sent(scram.step(Some(SERVER_FIRST.as_bytes())));
        scram
    }

    #[test]
    fn sha256_matches_the_rfc_7677_vector() {
        let mut scram = rfc7677();
        assert_eq!(sent(scram.step(None)), "n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let expected = format!("c=biws,r={SERVER_NONCE},p={PROOF}");
        assert_eq!(sent(scram.step(Some(SERVER_FIRST.as_bytes()))), expected);
        let server_final = format!("v={SIGNATURE}");
        assert_eq!(scram.step(Some(server_final.as_bytes())), Ok(Step::Done));
        assert!(
            scram.step(Some(server_final.as_bytes())).is_err(),
            "done is over"
        );
    }

    /// server-first messages a broker must not get away with (our nonce: rOprNGfwEbeRWgbNEkqO).
    const BAD_SERVER_FIRST: &[&[u8]] = &[
        b"",
        b"s=c2FsdA==,i=4096",
        b"s=c2FsdA==,r=rOprNGfwEbeRWgbNEkqOx,i=4096",
        b"r=rOprNGfwEbeRWgbNEkqOx,s=c2FsdA==",
        b"r=rOprNGfwEbeRWgbNEkqOx,s=c2F*dA==,i=4096",
        b"r=rOprNGfwEbeRWgbNEkqO\xff,s=c2FsdA==,i=4096",
        b"r=someoneElse,s=c2FsdA==,i=4096",
        b"r=rOprNGfw,s=c2FsdA==,i=4096",
        b"r=rOprNGfwEbeRWgbNEkqO x,s=c2FsdA==,i=4096",
        b"r=rOprNGfwEbeRWgbNEkqOx,s=c2FsdA==,i=1000",
        b"r=rOprNGfwEbeRWgbNEkqOx,s=c2FsdA==,i=0",
        b"r=rOprNGfwEbeRWgbNEkqOx,s=c2FsdA==,i=+4096",
        b"r=rOprNGfwEbeRWgbNEkqOx,s=c2FsdA==,i=",
        b"r=rOprNGfwEbeRWgbNEkqOx,s=c2FsdA==,i=99999999999",
        b"r=rOprNGfwEbeRWgbNEkqOx,s=c2FsdA==,i=4294967295",
        b"m=x,r=rOprNGfwEbeRWgbNEkqOx,s=c2FsdA==,i=4096",
        b"rr=rOprNGfwEbeRWgbNEkqOx,s=c2FsdA==,i=4096",
        b"r,s,i",
        b",,,",
    ];

    /// server-final messages that must not complete the exchange.
    const BAD_SERVER_FINAL: &[&[u8]] = &[
        b"v=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5n",
        b"v=6rriTRBi23WpRR*wtup+mMhUZUn/dB5nLTJRsjl95G4=",
        b"e=invalid-proof",
        b"",
        b"x=1",
        b"v=\xff",
        b"m=x,v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
    ];

    /// The error for `message` as server-first; the exchange must be over after it.
    fn server_first_error(message: &[u8]) -> String {
        let mut scram = rfc7677();
        sent(scram.step(None));
        let err = scram.step(Some(message));
        assert!(scram.step(Some(b"v=x")).is_err(), "over");
        err.expect_err("a bad server-first must fail")
    }

    /// The error for `message` as server-final; the exchange must be over after it.
    fn server_final_error(message: &[u8]) -> String {
        let mut scram = after_client_final();
        let err = scram.step(Some(message));
        let good = format!("v={SIGNATURE}");
        assert!(scram.step(Some(good.as_bytes())).is_err(), "over");
        err.expect_err("a bad server-final must fail")
    }

    #[test]
    fn every_bad_server_first_is_an_error() {
        for message in BAD_SERVER_FIRST {
            let err = server_first_error(message);
            let shown = String::from_utf8_lossy(message);
            assert!(err.starts_with("SCRAM-SHA-256: "), "{shown}: {err}");
        }
    }

    #[test]
    fn every_bad_server_final_is_an_error() {
        for message in BAD_SERVER_FINAL {
            let err = server_final_error(message);
            let shown = String::from_utf8_lossy(message);
            assert!(err.starts_with("SCRAM-SHA-256: "), "{shown}: {err}");
        }
    }

    #[test]
    fn a_wrong_server_signature_is_caught() {
        let err = server_final_error(BAD_SERVER_FINAL[0]);
        assert!(err.contains("signature does not match"), "{err}");
    }

    #[test]
    fn a_server_error_is_reported_by_name() {
        let err = server_final_error(b"e=invalid-proof");
        assert_eq!(err, "SCRAM-SHA-256: the broker refused: invalid-proof");
    }

    #[test]
    fn the_server_nonce_must_extend_the_client_nonce() {
        let foreign = b"r=someoneElse,s=c2FsdA==,i=4096";
        let cut_short = b"r=rOprNGfw,s=c2FsdA==,i=4096";
        for message in [&foreign[..], &cut_short[..]] {
            let err = server_first_error(message);
            assert!(err.contains("does not start with the client"), "{err}");
        }
    }

    #[test]
    fn fewer_than_4096_iterations_are_refused() {
        let err = server_first_error(b"r=rOprNGfwEbeRWgbNEkqOx,s=c2FsdA==,i=1000");
        assert!(err.contains("1000 iterations, fewer than the"), "{err}");
    }

    #[test]
    fn out_of_order_steps_are_errors() {
        let mut scram = rfc7677();
        let early = scram.step(Some(SERVER_FIRST.as_bytes()));
        assert!(early.is_err(), "server spoke first");
        let mut scram = rfc7677();
        sent(scram.step(None));
        assert!(scram.step(None).is_err(), "started twice");
        let mut scram = after_client_final();
        assert!(scram.step(None).is_err(), "no server-final");
    }

    #[test]
    fn usernames_are_escaped() {
        let password = Secret::new(PASSWORD);
        let mut scram = Scram::with_nonce(Hash::Sha256, "a=b,c=2C", &password, NONCE);
        let first = sent(scram.step(None));
        assert_eq!(first, format!("n,,n=a=3Db=2Cc=3D2C,r={NONCE}"));
    }

    #[test]
    fn client_nonces_are_random_base64() {
        let nonce = |scram: &mut Box<dyn Exchange>| {
            let first = sent(scram.step(None));
            first.replace("n,,n=user,r=", "")
        };
        let secret = Secret::new(PASSWORD);
        let a = nonce(&mut start(Mechanism::ScramSha256, "user", &secret));
        let b = nonce(&mut start(Mechanism::ScramSha256, "user", &secret));
        assert_ne!(a, b);
        assert_eq!(STANDARD.decode(&a).map(|n| n.len()), Ok(NONCE_BYTES));
        assert!(!a.contains(','));
    }

    /// A SCRAM server written straight from RFC 5802's formulas, naming ring's algorithms
    /// itself rather than going through `Hash`, so a mix-up there shows as a disagreement.
    /// It checks the client's proof the way a broker does: it knows only StoredKey.
    struct TestServer {
        hmac: hmac::Algorithm,
        digest: &'static digest::Algorithm,
        salt: &'static [u8],
        stored_key: Vec<u8>,
        server_key: hmac::Key,
        conversation: String,
        nonce: String,
    }

    impl TestServer {
        fn new(pbkdf2: pbkdf2::Algorithm, hmac: hmac::Algorithm, password: &str) -> TestServer {
            let digest = hmac.digest_algorithm();
            let salt = b"kroute test salt";
            let mut salted = vec![0; digest.output_len()];
            let iterations = NonZeroU32::new(MIN_ITERATIONS).expect("not zero");
            pbkdf2::derive(pbkdf2, iterations, salt, password.as_bytes(), &mut salted);
            let salted = hmac::Key::new(hmac, &salted);
            let client_key = hmac::sign(&salted, b"Client Key");
            let server_key = hmac::sign(&salted, b"Server Key");
            let stored_key = digest::digest(digest, client_key.as_ref());
            TestServer {
                hmac,
                digest,
                salt,
                stored_key: stored_key.as_ref().to_vec(),
                server_key: hmac::Key::new(hmac, server_key.as_ref()),
                conversation: String::new(),
                nonce: String::new(),
            }
        }

        fn first(&mut self, client_first: &str) -> String {
            let bare = client_first.strip_prefix("n,,").expect("gs2 header");
            let client_nonce = bare.split_once(",r=").expect("r=").1;
            self.nonce = format!("{client_nonce}+server/nonce");
            let salt = STANDARD.encode(self.salt);
            let server_first = format!("r={},s={salt},i={MIN_ITERATIONS}", self.nonce);
            self.conversation = format!("{bare},{server_first}");
            server_first
        }

        /// server-final for a good proof, None for a bad one.
        fn last(&self, client_final: &str) -> Option<String> {
            let (without_proof, proof) = client_final.rsplit_once(",p=")?;
            assert_eq!(without_proof, format!("c=biws,r={}", self.nonce));
            let proof = STANDARD.decode(proof).ok()?;
            let auth_message = format!("{},{without_proof}", self.conversation);
            let stored_key = hmac::Key::new(self.hmac, &self.stored_key);
            let signature = hmac::sign(&stored_key, auth_message.as_bytes());
            let sig = signature.as_ref();
            let client_key: Vec<u8> = proof.iter().zip(sig).map(|(p, s)| p ^ s).collect();
            let ok = proof.len() == self.digest.output_len()
                && digest::digest(self.digest, &client_key).as_ref() == self.stored_key;
            let server_signature = hmac::sign(&self.server_key, auth_message.as_bytes());
            ok.then(|| format!("v={}", STANDARD.encode(server_signature)))
        }
    }

    /// Runs `client` against `server`; Err if either side refuses.
    fn run(client: &mut dyn Exchange, server: &mut TestServer) -> Result<Step, String> {
        let server_first = server.first(&sent(client.step(None)));
        let client_final = sent(client.step(Some(server_first.as_bytes())));
        let server_final = server.last(&client_final).ok_or("server refused")?;
        client.step(Some(server_final.as_bytes()))
    }

    /// SCRAM-SHA-512 has no published vector; agreeing with a server built independently from
    /// the RFC's formulas is the next best thing. SHA-256 runs too, with a random nonce.
    #[test]
    fn both_hashes_agree_with_an_independent_server() {
        let cases = [
            (
                Mechanism::ScramSha512,
                pbkdf2::PBKDF2_HMAC_SHA512,
                hmac::HMAC_SHA512,
            ),
            (
                Mechanism::ScramSha256,
                pbkdf2::PBKDF2_HMAC_SHA256,
                hmac::HMAC_SHA256,
            ),
        ];
        for (mechanism, pbkdf2, hmac) in cases {
            let mut server = TestServer::new(pbkdf2, hmac, PASSWORD);
            let mut client = start(mechanism, "user", &Secret::new(PASSWORD));
            assert_eq!(run(client.as_mut(), &mut server), Ok(Step::Done));
        }
    }

    #[test]
    fn a_wrong_password_is_refused_by_the_server() {
        let sha512 = (pbkdf2::PBKDF2_HMAC_SHA512, hmac::HMAC_SHA512);
        let mut server = TestServer::new(sha512.0, sha512.1, PASSWORD);
        let mut client = start(Mechanism::ScramSha512, "user", &Secret::new("pencils"));
        assert_eq!(
            run(client.as_mut(), &mut server),
            Err("server refused".into())
        );
    }

    /// Every error the failure tests produce, checked for the password and the values derived
    /// from it (RFC 7677's salted password, proof and server signature, in base64 as sent).
    #[test]
    fn no_error_names_the_password_or_derived_values() {
        let mut errors: Vec<String> = Vec::new();
        errors.extend(BAD_SERVER_FIRST.iter().map(|m| server_first_error(m)));
        errors.extend(BAD_SERVER_FINAL.iter().map(|m| server_final_error(m)));
        let mut scram = rfc7677();
        errors.push(scram.step(Some(b"r=x")).unwrap_err());
        let mut scram = after_client_final();
        errors.push(scram.step(None).unwrap_err());

        let salt = STANDARD.decode(SALT).expect("RFC salt");
        let mut salted = [0; 32];
        let sha256 = pbkdf2::PBKDF2_HMAC_SHA256;
        let iterations = NonZeroU32::new(4096).expect("not zero");
        pbkdf2::derive(sha256, iterations, &salt, b"pencil", &mut salted);
        let forbidden = [PASSWORD, &STANDARD.encode(salted), PROOF, SIGNATURE];
        for err in &errors {
            for secret in forbidden {
                assert!(!err.contains(secret), "{err:?} contains {secret}");
            }
        }
    }

    /// The RFC exchange with its broker messages randomly damaged: every outcome is fine
    /// except a panic, or a Done without the genuine signature.
    #[test]
    fn damaged_broker_messages_never_panic() {
        let mut rng = XorShift::new(0x5c4a_3d00);
        let good_final = format!("v={SIGNATURE}");
        for _ in 0..200 {
            let mut first = SERVER_FIRST.as_bytes().to_vec();
            rng.mutate(&mut first);
            let mut scram = rfc7677();
            sent(scram.step(None));
            let _ = scram.step(Some(&first));

            let mut last = good_final.clone().into_bytes();
            rng.mutate(&mut last);
            let mut scram = after_client_final();
            if scram.step(Some(&last)) == Ok(Step::Done) {
                // Trailing extensions (",x=y") are ignored; the signature itself must be intact.
                assert!(last.starts_with(good_final.as_bytes()), "forged");
            }
        }
    }
}
