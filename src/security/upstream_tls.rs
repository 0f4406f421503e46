//! TLS on kroute's connections to the brokers (rustls, ring provider).
//!
//! The broker's certificate is checked against the host kroute dials, as a Kafka client checks
//! it (`ssl.endpoint.identification.algorithm=https`): a host name must match a DNS SAN, an IP
//! address an IP SAN. The configuration is rebuilt when its files change
//! ([`super::reload`]), so a rotated client certificate reaches the next connection.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::PrivateKeyDer;
use rustls_pki_types::pem::PemObject;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use super::certs::load_certs;
use crate::config::UpstreamTlsConfig;

/// Builds the rustls client configuration of `[upstream.tls]`, or says which file is wrong.
pub fn client_config(c: &UpstreamTlsConfig) -> Result<ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?;
    let builder = if c.insecure_skip_verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)))
    } else {
        builder.with_root_certificates(roots(c)?)
    };
    match (&c.cert_file, &c.key_file) {
        (Some(cert), Some(key)) => {
            let chain = load_certs(cert)?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| format!("cannot read a private key from {}: {e}", key.display()))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("client certificate and key do not fit together: {e}"))
        }
        _ => Ok(builder.with_no_client_auth()),
    }
}

/// The CAs broker certificates must chain to: the configured bundle, or the platform's.
fn roots(c: &UpstreamTlsConfig) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    if let Some(file) = &c.ca_file {
        for cert in load_certs(file)? {
            roots
                .add(cert)
                .map_err(|e| format!("bad CA certificate in {}: {e}", file.display()))?;
        }
        return Ok(roots);
    }
    let native = rustls_native_certs::load_native_certs();
    let (added, _) = roots.add_parsable_certificates(native.certs);
    if added == 0 {
        return Err("no ca_file given and no CA certificates found on this system".into());
    }
    Ok(roots)
}

/// Runs the TLS handshake with the broker at `host` over `tcp`.
pub async fn connect(
    config: Arc<ClientConfig>,
    host: &str,
    tcp: TcpStream,
) -> Result<TlsStream<TcpStream>, HandshakeError> {
    let name = ServerName::try_from(host.to_string()).map_err(|_| HandshakeError {
        reason: "bad_name",
        detail: format!("{host:?} is not a valid DNS name or IP address"),
    })?;
    TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(HandshakeError::from_io)
}

/// A failed handshake: a short reason for the metric label, and rustls' own words for the log.
#[derive(Debug, thiserror::Error)]
#[error("TLS handshake failed ({reason}): {detail}")]
pub struct HandshakeError {
    pub reason: &'static str,
    pub detail: String,
}

impl HandshakeError {
    pub fn from_io(e: std::io::Error) -> HandshakeError {
        let detail = e.to_string();
        let reason = match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
            Some(rustls::Error::InvalidCertificate(c)) => certificate_reason(c),
            Some(rustls::Error::AlertReceived(_)) => "alert",
            Some(_) => "protocol",
            None if e.kind() == std::io::ErrorKind::UnexpectedEof => "closed",
            None => "io",
        };
        HandshakeError { reason, detail }
    }
}

fn certificate_reason(c: &rustls::CertificateError) -> &'static str {
    use rustls::CertificateError as C;
    match c {
        C::Expired | C::ExpiredContext { .. } => "expired",
        C::NotValidYet | C::NotValidYetContext { .. } => "not_yet_valid",
        C::UnknownIssuer => "unknown_ca",
        C::NotValidForName | C::NotValidForNameContext { .. } => "name_mismatch",
        C::Revoked => "revoked",
        _ => "bad_certificate",
    }
}

/// `insecure_skip_verify`: accepts any certificate, but still checks the handshake signatures
/// (a peer must hold the key of the certificate it shows, whatever that certificate is).
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
