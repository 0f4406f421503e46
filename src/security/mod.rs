//! Security toward the brokers and on the client listeners: TLS, mTLS and SASL.
//!
//! The data path sees two small interfaces:
//! - [`UpstreamSecurity::open`] turns a TCP connection to a broker into a ready
//!   [`BrokerStream`]: TLS handshake if `[upstream.tls]` is set, then kroute's own SASL
//!   authentication where this connection carries kroute's identity;
//! - [`Permit`] says which topics a client connection's batches may move to (kroute's side
//!   connections write under kroute's identity, which must never widen a client's rights).
//!
//! Two SASL modes ([`SaslMode`]): in `originate` (the sidecar) clients speak no SASL and kroute
//! authenticates every upstream connection; in `passthrough` a client authenticates itself over
//! its own 1:1 connection, and kroute's credentials serve only kroute's connections.

pub mod certs;
/// The security sections of `proxy.toml` (kept with the rest of its sections in
/// [`crate::config`]).
pub use crate::config::security as config;
pub mod listener_tls;
pub mod metrics;
pub mod originate;
pub mod passthrough;
pub mod permit;
pub mod principal;
pub mod reload;
pub mod sasl;
pub mod secret;
pub mod stream;
pub mod upstream_tls;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use rustls::ClientConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing::warn;

pub use permit::Permit;
pub use stream::BrokerStream;

use crate::config::{Config, SaslMode};
use crate::protocol::frame::size_prefix;
use crate::protocol::header::response_correlation_id;
use metrics::SecurityMetrics;
use reload::Reloading;
use sasl::{Credentials, SaslError, SaslTransport, Session};
use upstream_tls::HandshakeError;

/// Whose identity an upstream connection carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Identity {
    /// A client's own 1:1 connection: in passthrough mode the client authenticates itself.
    Client,
    /// A connection of kroute's: moved batches, renumbered producers, metadata.
    Kroute,
}

/// Loads the TLS files `config` names (certificates, keys, CAs of `[listen.tls]` and
/// `[upstream.tls]`), so that a bad one is named by its key before kroute starts
/// ([`Config::load_with`]).
pub fn check_files(config: &Config) -> Result<(), config::Invalid> {
    if let Some(tls) = &config.listen.tls {
        listener_tls::server_config(tls).map_err(|problem| ("listen.tls", problem))?;
    }
    if let Some(tls) = &config.upstream.tls {
        upstream_tls::client_config(tls).map_err(|problem| ("upstream.tls", problem))?;
    }
    Ok(())
}

/// Everything kroute needs to open a secured connection to a broker.
pub struct UpstreamSecurity {
    tls: Option<Arc<Reloading<ClientConfig>>>,
    credentials: Option<Arc<Credentials>>,
    mode: Option<SaslMode>,
    max_frame_bytes: usize,
    pub metrics: Arc<SecurityMetrics>,
}

/// A ready connection, and its SASL session if kroute authenticated it.
pub struct Opened {
    pub stream: BrokerStream,
    pub reauthentication: Option<Reauthentication>,
}

/// What a live connection needs to re-authenticate itself before its session ends.
pub struct Reauthentication {
    pub at: std::time::Instant,
    pub credentials: Arc<Credentials>,
    pub metrics: Arc<SecurityMetrics>,
}

/// Why a connection could not be made ready.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Tls(#[from] HandshakeError),
    #[error("SASL {mechanism}: {error}")]
    Sasl {
        mechanism: &'static str,
        error: SaslError,
    },
}

impl UpstreamSecurity {
    /// Loads certificates and credentials sources; an error names the file. Needs a tokio
    /// runtime (for reloading files).
    pub fn new(config: &Config, metrics: Arc<SecurityMetrics>) -> Result<Self, String> {
        let upstream = &config.upstream;
        let tls = match &upstream.tls {
            None => None,
            Some(c) => {
                if c.insecure_skip_verify {
                    warn!(
                        "upstream.tls.insecure_skip_verify is set: broker certificates are NOT checked"
                    );
                }
                let files = [&c.ca_file, &c.cert_file, &c.key_file]
                    .into_iter()
                    .flatten()
                    .cloned()
                    .collect();
                let (c2, m) = (c.clone(), metrics.clone());
                let every = Duration::from_millis(c.reload_ms);
                Some(reload::watch(
                    "upstream",
                    files,
                    every,
                    metrics.clone(),
                    move || {
                        let built = upstream_tls::client_config(&c2)?;
                        if let Some(at) = c2.cert_file.as_deref().and_then(certs::expiry) {
                            m.certificate_expiry("upstream", at as f64);
                        }
                        Ok(built)
                    },
                )?)
            }
        };
        let sasl = upstream.sasl.as_ref();
        Ok(UpstreamSecurity {
            tls,
            credentials: sasl
                .map(Credentials::from_config)
                .transpose()
                .map_err(|e| format!("upstream.sasl.oauth: {e}"))?
                .flatten()
                .map(Arc::new),
            mode: sasl.map(|s| s.mode),
            max_frame_bytes: config.limits.max_frame_bytes,
            metrics,
        })
    }

    /// Whether SASL clients' batches may move at all: only when kroute's own connections can
    /// authenticate to the brokers too.
    pub fn routes_authenticated_clients(&self) -> bool {
        self.credentials.is_some()
    }

    /// Passthrough without credentials of kroute's own: kroute cannot open authenticated
    /// connections, so it learns the brokers from its clients' metadata answers instead of
    /// asking itself.
    pub fn learns_brokers_from_clients(&self) -> bool {
        self.mode == Some(SaslMode::Passthrough) && self.credentials.is_none()
    }

    /// In originate mode clients must not speak SASL to kroute.
    pub fn originates(&self) -> bool {
        self.mode == Some(SaslMode::Originate)
    }

    /// TLS, then kroute's SASL where `identity` calls for it, on a fresh connection to broker
    /// `node` (-1: a bootstrap server) at `addr`.
    pub async fn open(
        &self,
        tcp: TcpStream,
        node: i32,
        addr: &str,
        identity: Identity,
    ) -> Result<Opened, OpenError> {
        let mut stream = match &self.tls {
            None => BrokerStream::Plain(tcp),
            Some(tls) => {
                let host = crate::config::split_host_port(addr).map_or(addr, |(h, _)| h);
                let host = host.trim_start_matches('[').trim_end_matches(']');
                match upstream_tls::connect(tls.get(), host, tcp).await {
                    Ok(s) => BrokerStream::Tls(Box::new(s)),
                    Err(e) => {
                        self.metrics.upstream_handshake_failed(node, e.reason);
                        return Err(e.into());
                    }
                }
            }
        };
        let authenticates = match identity {
            Identity::Kroute => true,
            Identity::Client => self.originates(),
        };
        let Some(credentials) = self.credentials.as_ref().filter(|_| authenticates) else {
            return Ok(Opened {
                stream,
                reauthentication: None,
            });
        };
        let mechanism = credentials.mechanism;
        let mut direct = Direct {
            stream: &mut stream,
            max_frame_bytes: self.max_frame_bytes,
        };
        match sasl::authenticate(credentials, &mut direct).await {
            Ok(Session { reauthenticate_at }) => {
                self.metrics.authenticated(mechanism);
                Ok(Opened {
                    stream,
                    reauthentication: reauthenticate_at.map(|at| Reauthentication {
                        at,
                        credentials: credentials.clone(),
                        metrics: self.metrics.clone(),
                    }),
                })
            }
            Err(error) => {
                self.metrics.authentication_failed(mechanism);
                Err(OpenError::Sasl {
                    mechanism: mechanism.name(),
                    error,
                })
            }
        }
    }
}

/// SASL over a connection nothing else uses yet: write a request, read its answer.
struct Direct<'a> {
    stream: &'a mut BrokerStream,
    max_frame_bytes: usize,
}

impl SaslTransport for Direct<'_> {
    async fn round_trip(
        &mut self,
        correlation_id: i32,
        _api_key: ApiKey,
        _api_version: i16,
        frame: Bytes,
    ) -> std::io::Result<Bytes> {
        self.stream.write_all(&size_prefix(frame.len())).await?;
        self.stream.write_all(&frame).await?;
        self.stream.flush().await?;
        let size = self.stream.read_i32().await?;
        let size = usize::try_from(size)
            .ok()
            .filter(|s| *s <= self.max_frame_bytes)
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("bad frame size {size} in a SASL answer"),
                )
            })?;
        let mut answer = vec![0; size];
        self.stream.read_exact(&mut answer).await?;
        let answer = Bytes::from(answer);
        if response_correlation_id(&answer).ok() != Some(correlation_id) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("a SASL answer does not match request correlation id {correlation_id}"),
            ));
        }
        Ok(answer)
    }
}
