//! SASL toward the brokers: kroute authenticating a connection with its own credentials.
//!
//! Kafka's SASL is two request types on the connection itself (KIP-152): a SaslHandshake that
//! names the mechanism, then SaslAuthenticate requests carrying the mechanism's messages
//! ([`mechanism`]). The same exchange runs twice in a connection's life: right after connecting
//! (over the bare stream, [`authenticate`]) and, when the broker limits the session
//! (`connections.max.reauth.ms`, KIP-368), again before the session runs out, between the
//! client's requests on the live connection ([`crate::upstream`] provides that transport).

mod mechanism;
mod oauth;
mod scram;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, RequestHeader, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

pub use mechanism::{Exchange, Step, start};

use super::secret::{Secret, SecretSource};
use crate::config::{Mechanism, SaslConfig};
use crate::protocol::header::split_response;
use oauth::TokenEndpoint;

/// SaslHandshake v1: tokens then travel in SaslAuthenticate requests (v0 would send them raw).
const HANDSHAKE_VERSION: i16 = 1;
/// SaslAuthenticate v1: the first version whose answer carries `session_lifetime_ms`.
const AUTHENTICATE_VERSION: i16 = 1;
/// Correlation ids of kroute's own SASL requests. They only have to match the answer: a broker
/// answers a connection's requests in order, and kroute pipelines nothing behind them.
const FIRST_CORRELATION_ID: i32 = i32::MAX - 7;

/// Sends one request on a connection and returns the broker's answer (header and body).
pub trait SaslTransport {
    fn round_trip(
        &mut self,
        correlation_id: i32,
        api_key: ApiKey,
        api_version: i16,
        frame: Bytes,
    ) -> impl Future<Output = std::io::Result<Bytes>> + Send;
}

/// kroute's credentials, read from their source on every authentication.
pub struct Credentials {
    pub mechanism: Mechanism,
    username: String,
    secret: Source,
}

/// Where the password or token comes from.
enum Source {
    Local(SecretSource),
    Endpoint(Arc<TokenEndpoint>),
}

impl Credentials {
    /// The credentials of a validated `[upstream.sasl]` section (None: it has none).
    pub fn from_config(c: &SaslConfig) -> Result<Option<Credentials>, String> {
        let Some(mechanism) = c.mechanism else {
            return Ok(None);
        };
        let local = match mechanism {
            Mechanism::OAuthBearer => {
                SecretSource::from_options(c.token_file.as_ref(), c.token_env.as_ref())
            }
            _ => SecretSource::from_options(c.password_file.as_ref(), c.password_env.as_ref()),
        };
        let secret = match (local, &c.oauth) {
            (Some(local), _) => Source::Local(local),
            (None, Some(oauth)) => Source::Endpoint(Arc::new(TokenEndpoint::new(oauth)?)),
            (None, None) => return Ok(None),
        };
        Ok(Some(Credentials {
            mechanism,
            username: c.username.clone().unwrap_or_default(),
            secret,
        }))
    }

    /// The password or token, read now.
    async fn secret(&self) -> Result<Secret, String> {
        match &self.secret {
            Source::Local(source) => source.read(),
            Source::Endpoint(endpoint) => endpoint.token().await,
        }
    }
}

/// An authenticated session.
#[derive(Debug, Clone, Copy)]
pub struct Session {
    /// When to re-authenticate; None when the broker does not limit the session.
    pub reauthenticate_at: Option<Instant>,
}

/// Why an authentication did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum SaslError {
    #[error("the broker does not offer {wanted} (it offers: {offered})")]
    Unsupported {
        wanted: &'static str,
        offered: String,
    },
    #[error("authentication failed: {0}")]
    Refused(String),
    #[error("credentials: {0}")]
    Credentials(String),
    #[error("SASL exchange: {0}")]
    Protocol(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Runs a whole SASL exchange over `transport` and returns the session it opened.
pub async fn authenticate<T: SaslTransport>(
    credentials: &Credentials,
    transport: &mut T,
) -> Result<Session, SaslError> {
    let mechanism = credentials.mechanism;
    let started = Instant::now();
    let mut ids = FIRST_CORRELATION_ID..=i32::MAX;
    let mut next_id = || ids.next().unwrap_or(FIRST_CORRELATION_ID);

    let request =
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism.name()));
    let id = next_id();
    let frame = encode(ApiKey::SaslHandshake, HANDSHAKE_VERSION, id, &request)?;
    let answer = transport
        .round_trip(id, ApiKey::SaslHandshake, HANDSHAKE_VERSION, frame)
        .await?;
    let handshake: SaslHandshakeResponse =
        decode(ApiKey::SaslHandshake, HANDSHAKE_VERSION, answer)?;
    if handshake.error_code != 0 {
        let offered: Vec<&str> = handshake.mechanisms.iter().map(|m| m.as_str()).collect();
        return Err(SaslError::Unsupported {
            wanted: mechanism.name(),
            offered: offered.join(", "),
        });
    }

    let secret = credentials.secret().await.map_err(SaslError::Credentials)?;
    let mut exchange = start(mechanism, &credentials.username, &secret);
    let mut server: Option<Bytes> = None;
    let mut lifetime_ms = 0;
    while let Step::Send(message) = exchange
        .step(server.as_deref())
        .map_err(SaslError::Protocol)?
    {
        let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(message));
        let id = next_id();
        let frame = encode(ApiKey::SaslAuthenticate, AUTHENTICATE_VERSION, id, &request)?;
        let answer = transport
            .round_trip(id, ApiKey::SaslAuthenticate, AUTHENTICATE_VERSION, frame)
            .await?;
        let response: SaslAuthenticateResponse =
            decode(ApiKey::SaslAuthenticate, AUTHENTICATE_VERSION, answer)?;
        if response.error_code != 0 {
            let message = response.error_message.map(|m| m.to_string());
            return Err(SaslError::Refused(
                message.unwrap_or_else(|| format!("error code {}", response.error_code)),
            ));
        }
        lifetime_ms = response.session_lifetime_ms;
        server = Some(response.auth_bytes);
    }
    Ok(Session {
        reauthenticate_at: reauthentication_time(started, lifetime_ms),
    })
}

/// When to re-authenticate a session the broker ends after `lifetime_ms` (0: never).
///
/// Like the Java client, at a random point between 85% and 95% of the lifetime, so that many
/// connections opened together do not all re-authenticate at once; but never later than
/// [`LEAST_REAUTH_MARGIN`] (or half the lifetime, if shorter) before the session ends.
fn reauthentication_time(started: Instant, lifetime_ms: i64) -> Option<Instant> {
    if lifetime_ms <= 0 {
        return None;
    }
    let lifetime = Duration::from_millis(lifetime_ms as u64);
    let jitter = (started.elapsed().subsec_nanos() ^ std::process::id()) % 1000;
    let share = 0.85 + 0.10 * f64::from(jitter) / 1000.0;
    let latest = lifetime.saturating_sub(LEAST_REAUTH_MARGIN.min(lifetime / 2));
    Some(started + lifetime.mul_f64(share).min(latest))
}

/// How long before a session ends kroute re-authenticates at the latest. A broker reads a
/// connection's requests one at a time (it answers one before it reads the next), and closes
/// the connection when it reads any but a SaslHandshake after the session ended. A request
/// kroute sends just before re-authenticating is read only once those ahead of it are
/// answered: behind an acks=all Produce or a long-poll Fetch on a loaded broker, that took more
/// than the Java client's 5% margin of a 10 s session in our tests (the broker closed the
/// connection with two requests in flight).
const LEAST_REAUTH_MARGIN: Duration = Duration::from_secs(5);

fn encode<M: Encodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &M,
) -> Result<Bytes, SaslError> {
    let header = RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("kroute")));
    let mut out = BytesMut::new();
    let bad = |e: anyhow::Error| SaslError::Protocol(format!("encoding {api:?}: {e}"));
    header
        .encode(&mut out, api.request_header_version(version))
        .map_err(bad)?;
    body.encode(&mut out, version).map_err(bad)?;
    Ok(out.freeze())
}

fn decode<M: Decodable>(api: ApiKey, version: i16, frame: Bytes) -> Result<M, SaslError> {
    let bad = |e: anyhow::Error| SaslError::Protocol(format!("bad {api:?} answer: {e}"));
    let (_, mut body) =
        split_response(&frame, api.response_header_version(version)).map_err(|e| bad(e.into()))?;
    M::decode(&mut body, version).map_err(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reauthentication_falls_between_85_and_95_percent_of_a_long_lifetime() {
        let start = Instant::now();
        assert!(reauthentication_time(start, 0).is_none());
        let at = reauthentication_time(start, 3_600_000).unwrap();
        let after = at.duration_since(start);
        assert!(after >= Duration::from_secs(3_060), "{after:?}");
        assert!(after <= Duration::from_secs(3_420), "{after:?}");
    }

    #[test]
    fn short_sessions_keep_the_least_margin_or_half_their_lifetime() {
        let start = Instant::now();
        let at = reauthentication_time(start, 10_000).unwrap();
        assert_eq!(at.duration_since(start), Duration::from_secs(5));
        let at = reauthentication_time(start, 30_000).unwrap();
        assert_eq!(at.duration_since(start), Duration::from_secs(25));
        let at = reauthentication_time(start, 4_000).unwrap();
        assert_eq!(at.duration_since(start), Duration::from_secs(2));
    }
}
