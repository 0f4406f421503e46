//! TLS with the real Java client (PEM trust and key stores) against the real cluster: on kroute's
//! client listeners (mTLS, certificate rotation), and toward the brokers (TLS, mTLS, refused
//! certificates) on the secured listeners of `scripts/cluster.sh start --secured`.

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

// ---------------------------------------------------------------------------------------------
// mTLS on the client listeners, rotation, and TLS toward the brokers.

use std::sync::Arc;

use common::secured::*;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};

/// A test CA: (its PEM, an issuer for leaf certificates).
fn test_ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    let key = KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), Issuer::new(params, key))
}

/// A leaf certificate for `names` signed by `ca`: (cert PEM, PKCS#8 key PEM).
fn leaf(ca: &Issuer<'static, KeyPair>, names: &[&str]) -> (String, String) {
    let params =
        CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, ca).unwrap();
    (cert.pem(), key.serialize_pem())
}

fn write(dir: &std::path::Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// Replaces `path` whole, as rotation tools do (write aside, rename over).
fn replace(path: &std::path::Path, text: &str) {
    let aside = path.with_extension("new");
    std::fs::write(&aside, text).unwrap();
    std::fs::rename(&aside, path).unwrap();
}

/// A rustls client connection to kroute trusting only `ca_pem`, optionally with a client
/// certificate; Err if the handshake (or the first exchange, where TLS 1.3 reports a refused
/// client certificate) fails.
fn tls_client(
    addr: &str,
    ca_pem: &str,
    client: Option<(&str, &str)>,
) -> Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>, String> {
    let mut tls = tls_stream(addr, ca_pem, client);
    api_versions_round_trip(&mut tls)?;
    Ok(tls)
}

/// One ApiVersions request and its answer over `s`.
fn api_versions_round_trip(s: &mut (impl std::io::Read + Write)) -> Result<(), String> {
    use kafka_protocol::messages::ApiVersionsRequest;
    s.write_all(&request_frame(
        ApiKey::ApiVersions,
        3,
        7,
        &ApiVersionsRequest::default()
            .with_client_software_name(kafka_protocol::protocol::StrBytes::from_static_str("t"))
            .with_client_software_version(kafka_protocol::protocol::StrBytes::from_static_str("1")),
    ))
    .map_err(|e| e.to_string())?;
    let mut size = [0u8; 4];
    s.read_exact(&mut size).map_err(|e| e.to_string())?;
    let mut body = vec![0; i32::from_be_bytes(size).max(0) as usize];
    s.read_exact(&mut body).map_err(|e| e.to_string())?;
    Ok(())
}

#[test]
fn a_rotated_listener_certificate_reaches_new_connections_and_keeps_old_ones() {
    let dir = std::env::temp_dir().join(unique("kroute-rotate"));
    std::fs::create_dir_all(&dir).unwrap();
    let (ca1, issuer1) = test_ca("ca one");
    let (ca2, issuer2) = test_ca("ca two");
    let (cert1, key1) = leaf(&issuer1, &["127.0.0.1", "localhost"]);
    let (cert2, key2) = leaf(&issuer2, &["127.0.0.1", "localhost"]);
    let cert = write(&dir, "tls.crt", &cert1);
    let key = write(&dir, "tls.key", &key1);
    let trust = write(&dir, "trust.pem", &format!("{ca1}{ca2}"));
    let kroute = Kroute::start_with(KrouteOptions {
        extra_toml: format!(
            "[listen.tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\nreload_ms = 200\n",
            cert.display(),
            key.display()
        ),
        ..Default::default()
    });
    let topic = unique("tls-rotate");
    create_topic(&topic, 3, &[]);

    // A producer runs over TLS (trusting both CAs) through the rotation.
    let bootstrap = kroute.bootstrap.clone();
    let (t, tr) = (topic.clone(), trust.display().to_string());
    let producer = std::thread::spawn(move || {
        java_on(
            "produce",
            &bootstrap,
            &t,
            &[
                "--count",
                "3000",
                "--per-second",
                "500",
                "--id-prefix",
                "rot-",
                "--client-config",
                "security.protocol=SSL",
                "--client-config",
                "ssl.truststore.type=PEM",
                "--client-config",
                &format!("ssl.truststore.location={tr}"),
            ],
        )
    });
    let mut old = tls_client(&kroute.bootstrap, &ca1, None).expect("the first certificate");
    wait_for(
        "the producer's first batches",
        Duration::from_secs(60),
        || (kroute.metric("kroute_requests_total", &["api=\"Produce\""]) > 0.0).then_some(()),
    );

    replace(&key, &key2);
    replace(&cert, &cert2);
    wait_for("the reload", Duration::from_secs(20), || {
        let ok = ["what=\"listener\"", "result=\"ok\""];
        (kroute.metric("kroute_tls_reloads_total", &ok) >= 1.0
            && tls_client(&kroute.bootstrap, &ca2, None).is_ok())
        .then_some(())
    });
    assert!(
        tls_client(&kroute.bootstrap, &ca1, None).is_err(),
        "new connections still get the old certificate"
    );
    api_versions_round_trip(&mut old).expect("a connection from before the rotation still works");

    let run = producer.join().unwrap();
    assert_eq!(run.count("produced"), 3000);
    assert_eq!(run.count("errors"), 0);
    // A key swapped in before its certificate may fail one reload; the old pair stays then.
    kroute.assert_clean_logs(&[
        "changed certificate files not loaded",
        "TLS handshake failed",
    ]);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn mtls_on_the_listener_admits_only_clients_with_a_certificate_from_the_client_ca() {
    let dir = std::env::temp_dir().join(unique("kroute-mtls"));
    std::fs::create_dir_all(&dir).unwrap();
    let (ca, issuer) = test_ca("kroute test ca");
    let (server_cert, server_key) = leaf(&issuer, &["127.0.0.1"]);
    let (client_cert, client_key) = leaf(&issuer, &["app"]);
    let (_, other) = test_ca("someone else");
    let (stranger_cert, stranger_key) = leaf(&other, &["app"]);
    let kroute = Kroute::start_with(KrouteOptions {
        extra_toml: format!(
            "[listen.tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\nclient_ca_file = \"{}\"\n\
             client_auth = \"required\"\n",
            write(&dir, "s.crt", &server_cert).display(),
            write(&dir, "s.key", &server_key).display(),
            write(&dir, "ca.pem", &ca).display(),
        ),
        ..Default::default()
    });
    // The Java client with a PEM key store (key + chain) produces and consumes.
    let keystore = write(&dir, "client.pem", &format!("{client_key}{client_cert}"));
    let topic = unique("mtls");
    create_topic(&topic, 3, &[]);
    let flags = [
        "--client-config".to_string(),
        "security.protocol=SSL".into(),
        "--client-config".into(),
        "ssl.truststore.type=PEM".into(),
        "--client-config".into(),
        format!("ssl.truststore.location={}", dir.join("ca.pem").display()),
        "--client-config".into(),
        "ssl.keystore.type=PEM".into(),
        "--client-config".into(),
        format!("ssl.keystore.location={}", keystore.display()),
    ];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let produced = java_on(
        "produce",
        &kroute.bootstrap,
        &topic,
        &[&["--count", "200"][..], &flags].concat(),
    );
    assert_eq!(produced.count("produced"), 200);
    let consumed = java_on(
        "consume",
        &kroute.bootstrap,
        &topic,
        &[&["--expect", "200"][..], &flags].concat(),
    );
    assert_eq!(consumed.count("unique"), 200);

    // No certificate, or one from another CA: refused.
    assert!(tls_client(&kroute.bootstrap, &ca, None).is_err());
    assert!(
        tls_client(
            &kroute.bootstrap,
            &ca,
            Some((&stranger_cert, &stranger_key))
        )
        .is_err()
    );
    assert!(tls_client(&kroute.bootstrap, &ca, Some((&client_cert, &client_key))).is_ok());
    assert!(kroute.metric("kroute_tls_handshake_failures_total", &[]) >= 2.0);
    kroute.assert_clean_logs(&["TLS handshake failed"]);
    let _ = std::fs::remove_dir_all(dir);
}

/// kroute in front of the secured cluster's `listeners` with `[upstream.tls]` `tls`.
fn kroute_upstream_tls(listeners: &str, tls: String, ready: bool) -> Kroute {
    let opts = KrouteOptions {
        bootstrap_servers: Some(Secured::get().value(listeners).to_string()),
        extra_toml: tls,
        ..Default::default()
    };
    if ready {
        Kroute::start_with(opts)
    } else {
        Kroute::spawn_with(opts)
    }
}

#[test]
fn upstream_tls_and_mtls_reach_the_brokers_and_check_them() {
    let s = Secured::get();
    // TLS to the SSL listeners; mTLS with kroute's own certificate to the MTLS ones.
    let mtls = format!(
        "[upstream.tls]\nca_file = \"{}\"\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
        s.path("ca").display(),
        s.path("kroute_cert").display(),
        s.path("kroute_key").display()
    );
    for (listeners, tls) in [("ssl", upstream_tls()), ("mtls", mtls)] {
        let kroute = kroute_upstream_tls(listeners, tls, true);
        let topic = unique("up-tls");
        create_topic(&topic, 3, &[]);
        let produced = java_on("produce", &kroute.bootstrap, &topic, &["--count", "300"]);
        assert_eq!(produced.count("produced"), 300, "{listeners}");
        let consumed = java_on("consume", &kroute.bootstrap, &topic, &["--expect", "300"]);
        assert_eq!(consumed.count("unique"), 300, "{listeners}");
        if listeners == "mtls" {
            // kroute's client certificate is good for a while yet (the test PKI's are).
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs_f64();
            let expiry = kroute.metric(
                "kroute_tls_certificate_expiry_timestamp_seconds",
                &["what=\"upstream\""],
            );
            assert!(expiry > now, "expiry {expiry} is not after now {now}");
        }
        kroute.assert_clean_logs(&[]);
    }
}

#[test]
fn a_broker_certificate_from_an_unknown_ca_is_refused_naming_broker_and_reason() {
    let s = Secured::get();
    let tls = format!(
        "[upstream.tls]\nca_file = \"{}\"\n",
        s.path("unknown_ca").display()
    );
    let kroute = kroute_upstream_tls("ssl", tls, false);
    let first = s.value("ssl").split(',').next().unwrap().to_string();
    let host_port = first.rsplit_once(':').unwrap().1.to_string();
    let line = kroute.wait_for_log(&["unknown_ca", ":"], Duration::from_secs(30));
    assert!(
        s.value("ssl").split(',').any(|a| line.contains(a)),
        "the log line names no broker: {line} (brokers: {first}.. port {host_port})"
    );
    assert!(
        kroute.metric(
            "kroute_upstream_tls_handshake_failures_total",
            &["reason=\"unknown_ca\""]
        ) >= 1.0
    );
    assert_eq!(http_get(&kroute.admin, "/ready").map(|r| r.0), Some(503));
}

#[test]
fn an_expired_broker_certificate_is_refused_naming_broker_and_reason() {
    // A TLS server with the cluster PKI's expired broker certificate stands in for a broker:
    // the check that fails is kroute's own.
    let s = Secured::get();
    use rustls_pki_types::pem::PemObject;
    let chain: Vec<_> = rustls_pki_types::CertificateDer::pem_file_iter(s.path("expired_cert"))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let key = rustls_pki_types::PrivateKeyDer::from_pem_file(s.path("expired_key")).unwrap();
    let server = Arc::new(
        rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap(),
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut conn = rustls::ServerConnection::new(server.clone()).unwrap();
            let _ = conn.complete_io(&mut stream);
        }
    });
    let kroute = Kroute::spawn_with(KrouteOptions {
        bootstrap_servers: Some(addr.clone()),
        extra_toml: upstream_tls(),
        ..Default::default()
    });
    let line = kroute.wait_for_log(&["expired", &addr], Duration::from_secs(30));
    assert!(line.contains("TLS handshake failed"), "{line}");
    assert!(
        kroute.metric(
            "kroute_upstream_tls_handshake_failures_total",
            &["reason=\"expired\""]
        ) >= 1.0
    );
}

#[test]
fn insecure_skip_verify_is_explicit_and_warned() {
    // The unknown CA did not sign the brokers' certificates; skipping verification lets kroute
    // in anyway, and says so at start.
    let tls = "[upstream.tls]\ninsecure_skip_verify = true\n".to_string();
    let kroute = kroute_upstream_tls("ssl", tls, true);
    kroute.wait_for_log(&["WARN", "insecure_skip_verify"], Duration::from_secs(5));
    let topic = unique("up-insecure");
    create_topic(&topic, 3, &[]);
    let produced = java_on("produce", &kroute.bootstrap, &topic, &["--count", "100"]);
    assert_eq!(produced.count("produced"), 100);
    kroute.assert_clean_logs(&["insecure_skip_verify"]);
}

#[test]
fn a_broker_that_never_answers_the_tls_handshake_closes_the_client_in_time() {
    // It accepts TCP and then says nothing: the handshake gets connect_timeout_ms, like the
    // connect itself, and the client connection waiting on it is closed.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    let held = std::thread::spawn(move || silent.incoming().flatten().collect::<Vec<_>>());
    let kroute = Kroute::spawn_with(KrouteOptions {
        bootstrap_servers: Some(addr),
        extra_toml: format!("connect_timeout_ms = 1000\n{}", upstream_tls()),
        ..Default::default()
    });
    let mut client = wait_for(
        "kroute's bootstrap listener",
        Duration::from_secs(30),
        || TcpStream::connect(&kroute.bootstrap).ok(),
    );
    client
        .write_all(&request_frame(
            ApiKey::Metadata,
            12,
            1,
            &MetadataRequest::default(),
        ))
        .unwrap();
    assert!(
        closed_within(&mut client, Duration::from_secs(10)),
        "the client waits forever on a silent broker"
    );
    kroute.wait_for_log(&["handshake timed out"], Duration::from_secs(5));
    drop(held);
}
