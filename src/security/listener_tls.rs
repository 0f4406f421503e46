//! TLS on kroute's client listeners (rustls with the ring provider), optionally mTLS.
//!
//! The certificate must name the `advertised_host` clients dial (as a DNS name or IP address
//! SAN), because a client checks every broker address it learns from metadata against it. With
//! `client_ca_file`, clients present certificates that chain to it: always (`required`) or if
//! they have one (`optional`). The files are re-read when they change ([`super::reload`]): each
//! new connection takes the configuration current at its accept, existing ones keep theirs.

use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::PrivateKeyDer;
use rustls_pki_types::pem::PemObject;
use tokio_rustls::TlsAcceptor;

use super::certs::{expiry, load_certs};
use super::metrics::SecurityMetrics;
use super::reload::{self, Reloading};
use crate::config::{ClientAuth, TlsConfig};

/// The client listeners' TLS configuration, kept current with its files.
#[derive(Clone)]
pub struct ListenerTls(Arc<Reloading<ServerConfig>>);

impl ListenerTls {
    /// Loads the files (an error names the bad one) and watches them for changes. Needs a
    /// tokio runtime unless `reload_ms` is 0.
    pub fn new(config: &TlsConfig, metrics: Arc<SecurityMetrics>) -> Result<ListenerTls, String> {
        let files = [
            Some(&config.cert_file),
            Some(&config.key_file),
            config.client_ca_file.as_ref(),
        ]
        .into_iter()
        .flatten()
        .cloned()
        .collect();
        let every = std::time::Duration::from_millis(config.reload_ms);
        let (c, m) = (config.clone(), metrics.clone());
        let reloading = reload::watch("listener", files, every, metrics, move || {
            let built = server_config(&c)?;
            if let Some(at) = expiry(&c.cert_file) {
                m.certificate_expiry("listener", at as f64);
            }
            Ok(built)
        })?;
        Ok(ListenerTls(reloading))
    }

    /// An acceptor with the configuration current now.
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.0.get())
    }
}

/// Builds the server configuration for `config`, or says which file is wrong and why.
pub fn server_config(config: &TlsConfig) -> Result<ServerConfig, String> {
    let certs = load_certs(&config.cert_file)?;
    let key = PrivateKeyDer::from_pem_file(&config.key_file).map_err(|e| {
        format!(
            "cannot read a private key from {}: {e}",
            config.key_file.display()
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?;
    let builder = match (&config.client_ca_file, config.client_auth) {
        (Some(ca), auth) if auth != ClientAuth::None => {
            let mut roots = RootCertStore::empty();
            for cert in load_certs(ca)? {
                roots
                    .add(cert)
                    .map_err(|e| format!("bad CA certificate in {}: {e}", ca.display()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if auth == ClientAuth::Optional {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            let verifier = verifier
                .build()
                .map_err(|e| format!("client CA {}: {e}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("certificate and key do not fit together: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    fn config(cert: &Path, key: &Path) -> TlsConfig {
        TlsConfig {
            cert_file: cert.to_path_buf(),
            key_file: key.to_path_buf(),
            client_ca_file: None,
            client_auth: ClientAuth::None,
            reload_ms: 0,
        }
    }

    #[test]
    fn loads_a_generated_pair_and_names_bad_files() {
        let dir = std::env::temp_dir().join(format!("kroute-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let generated = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
        let cert = write(&dir, "c.pem", &generated.cert.pem());
        let key = write(&dir, "k.pem", &generated.signing_key.serialize_pem());
        assert!(server_config(&config(&cert, &key)).is_ok());

        let empty = write(&dir, "empty.pem", "");
        let err = |c: &TlsConfig| server_config(c).err().unwrap_or_default();
        let swapped = config(&key, &cert);
        assert!(err(&swapped).contains("k.pem"), "{}", err(&swapped));
        let no_cert = config(&empty, &key);
        assert!(
            err(&no_cert).contains("no certificate"),
            "{}",
            err(&no_cert)
        );

        // mTLS: the client CA is loaded, and a bad one is named.
        let mut mtls = config(&cert, &key);
        mtls.client_auth = ClientAuth::Required;
        mtls.client_ca_file = Some(cert.clone());
        assert!(server_config(&mtls).is_ok());
        mtls.client_ca_file = Some(empty.clone());
        assert!(err(&mtls).contains("empty.pem"), "{}", err(&mtls));
        let _ = std::fs::remove_dir_all(dir);
    }
}
