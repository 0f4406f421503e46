//! TLS on kroute's client listeners (rustls with the ring provider).
//!
//! kroute terminates TLS from clients and speaks plaintext to the brokers. The certificate must
//! name the `advertised_host` clients dial (as a DNS name or IP address SAN), because a client
//! checks every broker address it learns from metadata against it.

use std::path::Path;
use std::sync::Arc;

use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::config::TlsConfig;

/// Builds the acceptor for `config`, or says which file is wrong and why.
pub fn acceptor(config: &TlsConfig) -> Result<TlsAcceptor, String> {
    let certs = load_certs(&config.cert_file)?;
    let key = PrivateKeyDer::from_pem_file(&config.key_file).map_err(|e| {
        format!(
            "cannot read a private key from {}: {e}",
            config.key_file.display()
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("certificate and key do not fit together: {e}"))?;
    Ok(TlsAcceptor::from(Arc::new(server)))
}

fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read certificates from {}: {e}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("bad certificate in {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("no certificate in {}", path.display()));
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn loads_a_generated_pair_and_names_bad_files() {
        let dir = std::env::temp_dir().join(format!("kroute-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let generated = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
        let cert = write(&dir, "c.pem", &generated.cert.pem());
        let key = write(&dir, "k.pem", &generated.signing_key.serialize_pem());
        let ok = TlsConfig {
            cert_file: cert.clone(),
            key_file: key.clone(),
        };
        assert!(acceptor(&ok).is_ok());

        let empty = write(&dir, "empty.pem", "");
        let swapped = TlsConfig {
            cert_file: key.clone(),
            key_file: cert.clone(),
        };
        let err = |c: &TlsConfig| acceptor(c).err().unwrap_or_default();
        assert!(err(&swapped).contains("k.pem"), "{}", err(&swapped));
        let no_cert = TlsConfig {
            cert_file: empty,
            key_file: key,
        };
        assert!(
            err(&no_cert).contains("no certificate"),
            "{}",
            err(&no_cert)
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
