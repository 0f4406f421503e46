//! TLS on kroute's client listeners, with the real Java client (PEM trust store) against the
//! real cluster; kroute talks plaintext to the brokers.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use common::*;
use kafka_protocol::messages::{ApiKey, MetadataRequest};

#[test]
fn java_client_produces_and_consumes_over_tls() {
    let dir = std::env::temp_dir().join(unique("kroute-tls"));
    std::fs::create_dir_all(&dir).unwrap();
    // The certificate names the address clients dial, as every broker address they learn does.
    let generated =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .unwrap();
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    std::fs::write(&cert, generated.cert.pem()).unwrap();
    std::fs::write(&key, generated.signing_key.serialize_pem()).unwrap();
    let kroute = Kroute::start_with(KrouteOptions {
        extra_toml: format!(
            "[listen.tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
            cert.display(),
            key.display()
        ),
        ..Default::default()
    });

    let topic = unique("tls");
    create_topic(&topic, 3, &[]);
    let trust = format!("ssl.truststore.location={}", cert.display());
    let ssl = [
        "--client-config",
        "security.protocol=SSL",
        "--client-config",
        "ssl.truststore.type=PEM",
        "--client-config",
        &trust,
    ];
    let produced = java_on(
        "produce",
        &kroute.bootstrap,
        &topic,
        &[&["--count", "500", "--id-prefix", "tls-"][..], &ssl].concat(),
    );
    assert_eq!(produced.count("produced"), 500);
    let consumed = java_on(
        "consume",
        &kroute.bootstrap,
        &topic,
        &[&["--expect", "500", "--extra-wait-ms", "500"][..], &ssl].concat(),
    );
    assert_eq!(consumed.count("consumed"), 500);
    assert_eq!(consumed.count("unique"), 500);
    assert!(kroute.metric("kroute_requests_total", &["api=\"Produce\""]) >= 1.0);

    // A plaintext client on the TLS port gets closed; kroute keeps serving TLS clients.
    let mut plain = TcpStream::connect(&kroute.bootstrap).unwrap();
    plain
        .write_all(&request_frame(
            ApiKey::Metadata,
            12,
            1,
            &MetadataRequest::default(),
        ))
        .unwrap();
    assert!(
        closed_within(&mut plain, Duration::from_secs(15)),
        "plaintext client left open"
    );
    assert!(kroute.metric("kroute_tls_handshake_failures_total", &[]) >= 1.0);
    let again = java_on(
        "consume",
        &kroute.bootstrap,
        &topic,
        &[&["--expect", "500"][..], &ssl].concat(),
    );
    assert_eq!(again.count("consumed"), 500);

    kroute.assert_clean_logs(&["TLS handshake failed"]);
    let _ = std::fs::remove_dir_all(dir);
}
