//! The secured listeners of the test cluster (`scripts/cluster.sh start --secured`): SSL, mTLS,
//! SASL_PLAINTEXT, SASL_SSL and a SASL_SSL listener whose sessions last 10 s, with users
//! alice, bob, kroute and admin (`<name>-secret`) for PLAIN and SCRAM, and ACLs that let only
//! alice write to topics `acl-*`.

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use super::*;

/// What `scripts/cluster.sh secured` prints: file paths and listener address lists.
pub struct Secured(BTreeMap<String, String>);

impl Secured {
    pub fn get() -> &'static Secured {
        static S: OnceLock<Secured> = OnceLock::new();
        S.get_or_init(|| {
            let text = cluster(&["secured"]);
            let map = text
                .lines()
                .filter_map(|l| l.split_once('='))
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .collect();
            Secured(map)
        })
    }

    /// A value (listener list or file path) by its key; fails the test if the cluster lacks it.
    pub fn value(&self, key: &str) -> &str {
        self.0.get(key).unwrap_or_else(|| {
            panic!("`cluster.sh secured` prints no {key}= (is the cluster secured?)")
        })
    }

    pub fn path(&self, key: &str) -> PathBuf {
        PathBuf::from(self.value(key))
    }
}

/// A password file for `user` (`<user>-secret`, or `password` if given), deleted on drop.
pub struct PasswordFile(pub PathBuf);

impl PasswordFile {
    pub fn new(password: &str) -> PasswordFile {
        let path = std::env::temp_dir().join(unique("kroute-password"));
        std::fs::write(&path, format!("{password}\n")).unwrap();
        PasswordFile(path)
    }
}

impl Drop for PasswordFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `[upstream.tls]` trusting the test CA.
pub fn upstream_tls() -> String {
    format!(
        "[upstream.tls]\nca_file = \"{}\"\n",
        Secured::get().path("ca").display()
    )
}

/// `[upstream.sasl]` for `user` with `mechanism` in `mode`, the password in `file`.
pub fn upstream_sasl(mode: &str, mechanism: &str, user: &str, file: &PasswordFile) -> String {
    format!(
        "[upstream.sasl]\nmode = \"{mode}\"\nmechanism = \"{mechanism}\"\nusername = \"{user}\"\n\
         password_file = \"{}\"\n",
        file.0.display()
    )
}

/// Java client flags for SASL (over plaintext to kroute) as `user` with `password`.
pub fn java_sasl(mechanism: &str, user: &str, password: &str) -> Vec<String> {
    let module = if mechanism == "PLAIN" {
        "org.apache.kafka.common.security.plain.PlainLoginModule"
    } else {
        "org.apache.kafka.common.security.scram.ScramLoginModule"
    };
    [
        "security.protocol=SASL_PLAINTEXT".to_string(),
        format!("sasl.mechanism={mechanism}"),
        format!("sasl.jaas.config={module} required username=\"{user}\" password=\"{password}\";"),
    ]
    .into_iter()
    .flat_map(|c| ["--client-config".to_string(), c])
    .collect()
}

/// A rustls client stream to `addr` (certificate name 127.0.0.1) trusting only `ca_pem`,
/// optionally with a client certificate (cert, key PEM); the handshake happens on first use.
pub fn tls_stream(
    addr: &str,
    ca_pem: &str,
    client: Option<(&str, &str)>,
) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let config = match client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder
            .with_client_auth_cert(
                rustls_pki_types::CertificateDer::pem_slice_iter(cert.as_bytes())
                    .map(Result::unwrap)
                    .collect(),
                rustls_pki_types::PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            )
            .unwrap(),
    };
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    rustls::StreamOwned::new(conn, tcp)
}
