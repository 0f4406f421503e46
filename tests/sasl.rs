//! SASL toward the real secured cluster (`scripts/cluster.sh start --secured`), in both modes:
//! kroute authenticating every upstream connection itself (`originate`, the sidecar) and
//! clients authenticating themselves through kroute (`passthrough`), with the Java client,
//! librdkafka and kafka-python.

mod common;

use std::time::Duration;

use common::librdkafka::{self, Produce};
use common::secured::*;
use common::slow::*;
use common::*;

/// kroute in front of the listeners `listeners` of `scripts/cluster.sh secured`, with `toml`.
fn kroute_on(listeners: &str, toml: String) -> KrouteOptions {
    KrouteOptions {
        bootstrap_servers: Some(Secured::get().value(listeners).to_string()),
        extra_toml: toml,
        ..Default::default()
    }
}

fn sasl_metric(kroute: &Kroute, name: &str, mechanism: &str) -> f64 {
    kroute.metric(name, &[&format!("mechanism=\"{mechanism}\"")])
}

/// The Java client's `produce` to `topic` through `bootstrap` with `args` and client `flags`;
/// the outcome is the caller's to check.
fn java_produce(bootstrap: &str, topic: &str, args: &[&str], flags: &[String]) -> JavaRun {
    let mut all = vec!["produce", "--bootstrap", bootstrap, "--topic", topic];
    all.extend_from_slice(args);
    all.extend(flags.iter().map(String::as_str));
    java(&all)
}

/// Java produce then consume of `count` records through `bootstrap`, with client `flags`.
fn java_round_trip(bootstrap: &str, topic: &str, count: u32, flags: &[String]) {
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let n = count.to_string();
    let produced = java_on(
        "produce",
        bootstrap,
        topic,
        &[&["--count", &n, "--id-prefix", "s-"][..], &flags].concat(),
    );
    assert_eq!(produced.count("produced"), count as usize);
    let consumed = java_on(
        "consume",
        bootstrap,
        topic,
        &[&["--expect", &n, "--extra-wait-ms", "500"][..], &flags].concat(),
    );
    assert_eq!(consumed.count("consumed"), count as usize);
    assert_eq!(consumed.count("unique"), count as usize);
}

#[test]
fn originate_scram_sha_512_over_sasl_ssl_serves_java_and_librdkafka() {
    let password = PasswordFile::new("kroute-secret");
    let toml = upstream_tls() + &upstream_sasl("originate", "SCRAM-SHA-512", "kroute", &password);
    let kroute = Kroute::start_with(kroute_on("sasl_ssl", toml));
    let topic = unique("sasl-orig");
    create_topic(&topic, 3, &[]);

    // Clients speak plaintext without SASL to kroute, as an application next to its sidecar.
    java_round_trip(&kroute.bootstrap, &topic, 300, &[]);
    let acked = librdkafka::produce(&kroute.bootstrap, &topic, 200, Produce::default());
    assert_eq!(acked.len(), 200);
    let read = librdkafka::consume_all(&kroute.bootstrap, &topic);
    assert_eq!(read.len(), 500);

    assert!(
        sasl_metric(
            &kroute,
            "kroute_sasl_authentications_total",
            "SCRAM-SHA-512"
        ) >= 2.0
    );
    assert_eq!(
        kroute.metric("kroute_sasl_authentication_failures_total", &[]),
        0.0
    );
    kroute.assert_clean_logs(&[]);
}

#[test]
fn originate_plain_and_scram_sha_256_over_sasl_plaintext() {
    for mechanism in ["PLAIN", "SCRAM-SHA-256"] {
        let password = PasswordFile::new("kroute-secret");
        let toml = upstream_sasl("originate", mechanism, "kroute", &password);
        let kroute = Kroute::start_with(kroute_on("sasl_plaintext", toml));
        let topic = unique("sasl-plain");
        create_topic(&topic, 3, &[]);
        let run = common::producers::kafka_python(&kroute.bootstrap, &topic, 300, 1000, "kp-");
        run.assert_ok();
        assert_eq!(run.acks().len(), 300, "{mechanism}");
        let read = librdkafka::consume_all(&kroute.bootstrap, &topic);
        assert_eq!(read.len(), 300, "{mechanism}");
        assert!(sasl_metric(&kroute, "kroute_sasl_authentications_total", mechanism) >= 1.0);
        kroute.assert_clean_logs(&[]);
    }
}

#[test]
fn originate_with_a_wrong_password_logs_counts_and_closes() {
    let password = PasswordFile::new("not-the-password");
    let toml = upstream_sasl("originate", "SCRAM-SHA-256", "kroute", &password);
    let kroute = Kroute::spawn_with(kroute_on("sasl_plaintext", toml));
    // kroute's own metadata connection is refused: one line naming the mechanism and reason.
    let line = kroute.wait_for_log(
        &["SCRAM-SHA-256", "authentication failed"],
        Duration::from_secs(30),
    );
    assert!(
        !line.contains("not-the-password"),
        "secret in a log: {line}"
    );
    // A client is let in only to find no broker behind kroute: its connection is closed.
    let mut client = std::net::TcpStream::connect(&kroute.bootstrap).unwrap();
    use std::io::Write;
    client
        .write_all(&request_frame(
            kafka_protocol::messages::ApiKey::Metadata,
            12,
            1,
            &kafka_protocol::messages::MetadataRequest::default(),
        ))
        .unwrap();
    assert!(closed_within(&mut client, Duration::from_secs(20)));
    assert!(
        sasl_metric(
            &kroute,
            "kroute_sasl_authentication_failures_total",
            "SCRAM-SHA-256"
        ) >= 1.0
    );
    assert!(
        kroute
            .logs()
            .iter()
            .all(|l| !l.contains("not-the-password"))
    );
}

#[test]
fn a_client_that_tries_sasl_on_an_originating_kroute_gets_a_clear_error() {
    let password = PasswordFile::new("kroute-secret");
    let toml = upstream_sasl("originate", "PLAIN", "kroute", &password);
    let kroute = Kroute::start_with(kroute_on("sasl_plaintext", toml));
    let topic = unique("sasl-refused");
    create_topic(&topic, 1, &[]);
    let flags = java_sasl("PLAIN", "alice", "alice-secret");
    let run = java_produce(
        &kroute.bootstrap,
        &topic,
        &["--count", "1", "--timeout-ms", "20000"],
        &flags,
    );
    assert!(
        !run.ok,
        "a SASL client must not get through an originating kroute"
    );
    let all = format!("{}\n{}", run.lines.join("\n"), run.stderr);
    assert!(
        all.contains("UnsupportedSaslMechanism") || all.contains("not enabled in the server"),
        "the client's error does not say why: {}",
        run.lines.join("\n")
    );
    assert!(kroute.metric("kroute_client_sasl_refused_total", &[]) >= 1.0);
    kroute.assert_clean_logs(&["a client tried SASL"]);
}

#[test]
fn passthrough_scram_clients_authenticate_themselves_over_upstream_tls() {
    // No kroute credentials: the client's SASL goes to the broker over TLS that kroute adds,
    // and kroute learns the brokers from the clients' metadata.
    let kroute = Kroute::spawn_with(kroute_on(
        "sasl_ssl",
        upstream_tls()
            + "[upstream.sasl]\nmode = \"passthrough\"\n\
               [routing]\nstrategy = \"strict-cost\"\ninclude = [\"*\"]\n",
    ));
    wait_for("kroute /ready", Duration::from_secs(30), || {
        http_get(&kroute.admin, "/ready").filter(|r| r.0 == 200)
    });
    let topic = unique("sasl-pass");
    create_topic(&topic, 3, &[]);
    let alice = java_sasl("SCRAM-SHA-256", "alice", "alice-secret");
    java_round_trip(&kroute.bootstrap, &topic, 300, &alice);
    // No kroute credentials needed for routing either: the producer's batches (it is the
    // Java default, idempotent) are numbered by kroute and go out over alice's own
    // connections, never one of kroute's.
    assert!(kroute.metric("kroute_injected_requests_total", &[]) >= 1.0);
    assert!(kroute.metric("kroute_client_connections_registered_total", &[]) >= 1.0);

    // A wrong password: the client gets the broker's own SASL_AUTHENTICATION_FAILED message.
    let wrong = java_sasl("SCRAM-SHA-256", "alice", "wrong-password");
    let run = java_produce(
        &kroute.bootstrap,
        &topic,
        &["--count", "1", "--timeout-ms", "20000"],
        &wrong,
    );
    assert!(!run.ok);
    let all = format!("{}\n{}", run.lines.join("\n"), run.stderr);
    assert!(
        // The Java client replaces spaces with '_' in its fail lines; 2.8 logs nothing else.
        all.contains("SaslAuthenticationException")
            && all.replace('_', " ").contains("invalid credentials"),
        "expected the broker's authentication failure: {}",
        run.lines.join("\n")
    );
    kroute.assert_clean_logs(&[]);
}

#[test]
fn passthrough_librdkafka_and_kafka_python_authenticate_themselves_and_route_under_their_own_identity()
 {
    let password = PasswordFile::new("kroute-secret");
    let toml = upstream_tls()
        + &upstream_sasl("passthrough", "SCRAM-SHA-256", "kroute", &password)
        + "[routing]\nstrategy = \"strict-cost\"\ninclude = [\"sasl-rd-*\"]\n";
    let kroute = Kroute::start_with(kroute_on("sasl_ssl", toml));
    let topic = unique("sasl-rd");
    create_topic(&topic, 6, &[]);
    let sasl = [
        ("security.protocol", "SASL_PLAINTEXT"),
        ("sasl.mechanism", "PLAIN"),
        ("sasl.username", "alice"),
        ("sasl.password", "alice-secret"),
    ];
    let how = Produce {
        config: &sasl,
        per_second: Some(2000),
        ..Produce::default()
    };
    let acked = librdkafka::produce(&kroute.bootstrap, &topic, 3000, how);
    assert_eq!(acked.len(), 3000);
    // kafka-python does its own SCRAM (librdkafka here is built without it).
    let run = common::producers::kafka_python_with(
        &kroute.bootstrap,
        &topic,
        500,
        1000,
        "kp-",
        &["--sasl", "SCRAM-SHA-512:alice:alice-secret"],
    );
    run.assert_ok();
    assert_eq!(run.acks().len(), 500);
    let read = librdkafka::consume_all_with(&kroute.bootstrap, &topic, &sasl);
    assert_eq!(read.len(), 3500);
    assert!(read.values().all(|copies| copies.len() == 1), "duplicates");
    // alice's batches moved over alice's own connections (PLAIN for librdkafka, SCRAM for
    // kafka-python: two principals, each its own connections).
    assert!(kroute.metric("kroute_batches_moved_total", &[]) > 0.0);
    assert!(kroute.metric("kroute_injected_requests_total", &[]) > 0.0);
    assert!(
        sasl_metric(
            &kroute,
            "kroute_sasl_authentications_total",
            "SCRAM-SHA-256"
        ) >= 1.0
    );
    kroute.assert_clean_logs(&[]);
}

/// `cluster.sh tool` AclCommand on the cluster's PLAINTEXT listener (a super user there):
/// `change` is --add or --remove, for `principal` on literal topic `topic`.
fn acl(change: &str, principal: &str, operations: &[&str], topic: &str) {
    let bootstrap = cluster_bootstrap();
    let mut args = vec![
        "tool",
        "org.apache.kafka.tools.AclCommand",
        "--bootstrap-server",
        &bootstrap,
        change,
        "--force",
        "--allow-principal",
        principal,
        "--topic",
        topic,
    ];
    for op in operations {
        args.extend(["--operation", op]);
    }
    cluster(&args);
}

/// Whether bob, straight to the brokers (SASL PLAIN), may write partition `p` of `topic`: one
/// record with id prefix `probe-`, not retried.
fn bob_writes_directly(topic: &str, p: i32) -> bool {
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let producer: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", Secured::get().value("sasl_plaintext"))
        .set("security.protocol", "SASL_PLAINTEXT")
        .set("sasl.mechanism", "PLAIN")
        .set("sasl.username", "bob")
        .set("sasl.password", "bob-secret")
        .set("message.timeout.ms", "10000")
        .set("retries", "0")
        .create()
        .expect("rdkafka producer");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let record = FutureRecord::<(), _>::to(topic)
            .payload("probe-")
            .partition(p);
        producer.send(record, Duration::from_secs(10)).await.is_ok()
    })
}

#[test]
fn acls_hold_for_moved_batches_a_denied_principal_gets_nothing_in_and_a_revoked_write_stops_the_next_batch()
 {
    // bob's default (idempotent) producer authenticates itself through kroute, which moves its
    // batches over bob's own connections: the brokers authorize every batch as bob.
    let password = PasswordFile::new("kroute-secret");
    let toml = upstream_sasl("passthrough", "SCRAM-SHA-512", "kroute", &password)
        + "[routing]\nstrategy = \"strict-cost\"\ninclude = [\"acl-*\"]\nexclude = []\n";
    let kroute = Kroute::start_with(kroute_on("sasl_plaintext", toml));
    let bob = java_sasl("SCRAM-SHA-256", "bob", "bob-secret");
    let produce = |topic: &str, count: &str, prefix: &str| {
        let args = [
            "--count",
            count,
            "--per-second",
            "200",
            "--id-prefix",
            prefix,
        ];
        let timeout = ["--timeout-ms", "20000"];
        java_produce(
            &kroute.bootstrap,
            topic,
            &[&args[..], &timeout].concat(),
            &bob,
        )
    };
    let refused = |run: &JavaRun, what: &str| {
        assert_eq!(run.acks().len(), 0, "{what}: bob got records in");
        assert!(
            run.lines.iter().any(|l| l.contains("TopicAuthorization")),
            "{what}: expected the broker's authorization error:\n{}",
            run.lines
                .iter()
                .rev()
                .take(5)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n")
        );
    };
    let injected = || kroute.metric("kroute_injected_requests_total", &[]);

    // 1. bob may see the topic (Describe) but not write it: nothing gets in, though its
    //    batches were moved.
    let denied = unique("acl-bob");
    create_topic(&denied, 6, &[]);
    acl("--add", "User:bob", &["Describe"], &denied);
    refused(&produce(&denied, "40", "d-"), "denied");
    assert!(injected() > 0.0, "none of bob's batches was moved");
    let read = librdkafka::consume_all(&cluster_bootstrap(), &denied);
    assert!(read.is_empty(), "{} records got into {denied}", read.len());

    // 2. bob may write, then loses Write: every batch after that is refused, moved or not.
    let revoked = unique("acl-revoke");
    create_topic(&revoked, 6, &[]);
    acl("--add", "User:bob", &["Describe", "Write"], &revoked);
    let before = injected();
    let allowed = produce(&revoked, "600", "w-");
    allowed.assert_ok();
    assert_eq!(allowed.acks().len(), 600);
    assert!(injected() > before, "none of bob's batches was moved");
    acl("--remove", "User:bob", &["Write"], &revoked);
    // Until every leader has applied the change (each broker on its own time).
    wait_for(
        "Write revoked on every broker",
        Duration::from_secs(30),
        || {
            (0..6)
                .all(|p| !bob_writes_directly(&revoked, p))
                .then_some(())
        },
    );
    let before = injected();
    refused(&produce(&revoked, "40", "r-"), "after the revocation");
    assert!(
        injected() > before,
        "no batch was moved after the revocation"
    );
    let read = librdkafka::consume_all(&cluster_bootstrap(), &revoked);
    let through_kroute: Vec<&String> = read.keys().filter(|id| !id.starts_with("probe-")).collect();
    assert_eq!(
        through_kroute.len(),
        600,
        "only the records acknowledged before"
    );
    assert!(through_kroute.iter().all(|id| id.starts_with("w-")));
    kroute.assert_clean_logs(&[]);
}

#[test]
fn originate_reauthenticates_through_three_session_lifetimes_without_client_errors() {
    // The `reauth` listeners end a session after 10 s (connections.max.reauth.ms).
    let password = PasswordFile::new("kroute-secret");
    let toml = upstream_tls() + &upstream_sasl("originate", "SCRAM-SHA-256", "kroute", &password);
    let kroute = Kroute::start_with(kroute_on("reauth", toml));
    let topic = unique("sasl-reauth");
    create_topic(&topic, 3, &[]);
    let run = java_on(
        "produce",
        &kroute.bootstrap,
        &topic,
        &[
            "--count",
            "3500",
            "--per-second",
            "100",
            "--id-prefix",
            "ra-",
            "--timeout-ms",
            "90000",
        ],
    );
    assert_eq!(run.count("produced"), 3500);
    assert_eq!(run.count("errors"), 0);
    let reauths = sasl_metric(
        &kroute,
        "kroute_sasl_reauthentications_total",
        "SCRAM-SHA-256",
    );
    assert!(reauths >= 3.0, "only {reauths} re-authentications in 35 s");
    let acked = run.acks();
    assert_eq!(acked.len(), 3500);
    librdkafka::assert_exactly_once(
        &kroute.bootstrap,
        &topic,
        acked.iter().map(|a| a.0.as_str()),
    );
    kroute.assert_clean_logs(&[]);
}

#[test]
fn an_authenticated_default_producer_moves_off_a_slow_broker_under_its_own_identity() {
    // The Java default producer (idempotent) authenticates itself as alice through kroute
    // (passthrough, SASL_SSL upstream), with SCRAM, then with OAUTHBEARER: its batches are
    // renumbered and moved over alice's own connections, exactly once.
    let password = PasswordFile::new("kroute-secret");
    let toml = upstream_tls() + &upstream_sasl("passthrough", "SCRAM-SHA-512", "kroute", &password);
    let world = slow_world_of(kroute_on("sasl_ssl", toml), "");
    let kroute = &world.kroute;
    let oauth = [
        "--client-config".to_string(),
        "security.protocol=SASL_PLAINTEXT".to_string(),
        "--client-config".to_string(),
        "sasl.mechanism=OAUTHBEARER".to_string(),
        "--client-config".to_string(),
        "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule \
         required unsecuredLoginStringClaim_sub=\"alice\";"
            .to_string(),
    ];
    let clients = [
        (
            "SCRAM",
            java_sasl("SCRAM-SHA-512", "alice", "alice-secret"),
            "15000",
        ),
        ("OAUTHBEARER", oauth.to_vec(), "6000"),
    ];
    for (mechanism, flags, count) in clients {
        let topic = unique("route-sasl");
        create_topic_two_per_broker(&topic);
        let before = produce_bytes(kroute);
        let injected = kroute.metric("kroute_injected_requests_total", &[]);
        let mut args = vec![
            "--count",
            count,
            "--per-second",
            "3000",
            "--record-size",
            "1024",
            "--id-prefix",
            "ss-",
        ];
        args.extend(flags.iter().map(String::as_str));
        let run = java_on("produce", &kroute.bootstrap, &topic, &args);
        let acked = run.acks();
        assert_eq!(acked.len().to_string(), count, "{mechanism}");
        let share = share_of_broker_2(before, produce_bytes(kroute));
        assert_slow_broker_avoided(kroute, share, &format!("Java with {mechanism}"));
        // Moved batches went out on alice's own connections: kroute opened none for them.
        assert!(
            kroute.metric("kroute_injected_requests_total", &[]) > injected,
            "{mechanism}"
        );
        librdkafka::assert_exactly_once(
            &cluster_bootstrap(),
            &topic,
            acked.iter().map(|a| a.0.as_str()),
        );
    }
    assert!(kroute.metric("kroute_batches_moved_total", &[]) > 0.0);
    assert!(kroute.metric("kroute_client_connections_registered_total", &[]) >= 6.0);
    assert_eq!(
        kroute.metric("kroute_batches_kept_total", &["reason=\"idempotent\""]),
        0.0
    );
    assert_no_sequence_error_passed(kroute);
    kroute.assert_clean_logs(&[]);
}

/// An unsecured (alg none) JWT for `sub`, as the test brokers' default OAUTHBEARER validator
/// accepts: valid for an hour.
fn unsecured_token(sub: &str) -> String {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = format!(r#"{{"sub":"{sub}","iat":{now},"exp":{}}}"#, now + 3600);
    format!("{}.{}.", b64(r#"{"alg":"none"}"#), b64(&claims))
}

#[test]
fn originate_oauthbearer_reads_the_token_file_at_each_login() {
    let token = std::env::temp_dir().join(unique("kroute-token"));
    std::fs::write(&token, unsecured_token("kroute")).unwrap();
    let toml = format!(
        "[upstream.sasl]\nmode = \"originate\"\nmechanism = \"OAUTHBEARER\"\ntoken_file = \"{}\"\n",
        token.display()
    );
    let kroute = Kroute::start_with(kroute_on("sasl_plaintext", toml));
    let topic = unique("sasl-oauth");
    create_topic(&topic, 3, &[]);
    java_round_trip(&kroute.bootstrap, &topic, 200, &[]);
    let logins = sasl_metric(&kroute, "kroute_sasl_authentications_total", "OAUTHBEARER");
    assert!(logins >= 1.0);

    // A token the broker refuses (expired a minute ago) is read by the next login, which fails:
    // the file really is read at each login, not once.
    use base64::Engine;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
    let expired = format!(
        "{}.{}.",
        b64(r#"{"alg":"none"}"#),
        b64(&format!(
            r#"{{"sub":"kroute","iat":{},"exp":{}}}"#,
            now - 120,
            now - 60
        ))
    );
    std::fs::write(&token, &expired).unwrap();
    let failures = |k: &Kroute| {
        sasl_metric(
            k,
            "kroute_sasl_authentication_failures_total",
            "OAUTHBEARER",
        )
    };
    wait_for(
        "a login with the expired token",
        Duration::from_secs(30),
        || (failures(&kroute) >= 1.0).then_some(()),
    );
    // A fresh token again: new connections log in.
    std::fs::write(&token, unsecured_token("kroute")).unwrap();
    let topic2 = unique("sasl-oauth");
    create_topic(&topic2, 3, &[]);
    java_round_trip(&kroute.bootstrap, &topic2, 100, &[]);
    assert!(sasl_metric(&kroute, "kroute_sasl_authentications_total", "OAUTHBEARER") > logins);
    let logs = kroute.logs().join("\n");
    assert!(!logs.contains(&expired[..20]), "a token reached the log");
    kroute.assert_clean_logs(&["authentication failed", "metadata refresh failed"]);
    let _ = std::fs::remove_file(token);
}

#[test]
fn a_pre_kip_152_client_authenticates_with_raw_tokens_through_kroute() {
    use kafka_protocol::messages::{ApiKey, MetadataRequest, SaslHandshakeRequest};
    use kafka_protocol::protocol::StrBytes;
    use kroute::config::Mechanism;
    use kroute::security::sasl::{Step, start};
    use kroute::security::secret::Secret;
    use std::io::Write;

    let kroute = Kroute::spawn_with(kroute_on(
        "sasl_plaintext",
        "[upstream.sasl]\nmode = \"passthrough\"\n".into(),
    ));
    wait_for("kroute /ready", Duration::from_secs(30), || {
        http_get(&kroute.admin, "/ready").filter(|r| r.0 == 200)
    });
    for mechanism in [
        Mechanism::Plain,
        Mechanism::ScramSha256,
        Mechanism::ScramSha512,
    ] {
        let mut s = std::net::TcpStream::connect(&kroute.bootstrap).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let handshake = SaslHandshakeRequest::default()
            .with_mechanism(StrBytes::from_static_str(mechanism.name()));
        s.write_all(&request_frame(ApiKey::SaslHandshake, 0, 1, &handshake))
            .unwrap();
        let answer = read_frame(&mut s).expect("SaslHandshake v0 answer");
        assert_eq!(
            &answer[4..6],
            &[0, 0],
            "{}: handshake refused",
            mechanism.name()
        );

        // The tokens travel raw: a size, the bytes, no header either way.
        let mut exchange = start(mechanism, "alice", &Secret::new("alice-secret"));
        let mut server: Option<Vec<u8>> = None;
        while let Step::Send(token) = exchange.step(server.as_deref()).unwrap() {
            s.write_all(&(token.len() as i32).to_be_bytes()).unwrap();
            s.write_all(&token).unwrap();
            server = Some(read_frame(&mut s).expect("raw token answer"));
        }
        // Authenticated: an ordinary request on the same connection is answered.
        s.write_all(&request_frame(
            ApiKey::Metadata,
            12,
            2,
            &MetadataRequest::default(),
        ))
        .unwrap();
        let metadata = read_frame(&mut s).expect("metadata after raw SASL");
        assert_eq!(&metadata[..4], &2i32.to_be_bytes(), "{}", mechanism.name());
    }
    // A v0 handshake for a mechanism whose rounds kroute cannot count: a clear close.
    let mut s = std::net::TcpStream::connect(&kroute.bootstrap).unwrap();
    let gssapi =
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("GSSAPI"));
    s.write_all(&request_frame(ApiKey::SaslHandshake, 0, 1, &gssapi))
        .unwrap();
    assert!(closed_within(&mut s, Duration::from_secs(10)));
    kroute.wait_for_log(&["SaslHandshake v0", "GSSAPI"], Duration::from_secs(5));
    kroute.assert_clean_logs(&["SaslHandshake v0"]);
}

/// A real pre-KIP-152 client, not only hand-made frames: kafka-python 2.0.2 authenticates with
/// SaslHandshake v0 and raw SCRAM tokens and, told to speak Kafka 0.11's protocol, produces with
/// Produce v3 (acks=1, no retries). Its batches move over kroute's own connections like any
/// plain producer's, and every acknowledged record is there once.
#[test]
fn an_old_protocol_client_authenticates_with_raw_tokens_and_its_batches_move() {
    let password = PasswordFile::new("kroute-secret");
    let toml = upstream_sasl("passthrough", "SCRAM-SHA-512", "kroute", &password)
        + "[routing]\nstrategy = \"strict-cost\"\ninclude = [\"sasl-old-*\"]\n";
    let kroute = Kroute::start_with(kroute_on("sasl_plaintext", toml));
    let topic = unique("sasl-old");
    create_topic(&topic, 6, &[]);
    let run = common::producers::kafka_python_in(
        common::producers::OLD_KAFKA_PYTHON,
        &[
            "--sasl",
            "SCRAM-SHA-512:alice:alice-secret",
            "--api-version",
            "0.11",
        ],
        (&kroute.bootstrap, &topic, 600, 1000, "old-"),
    );
    run.assert_ok();
    let acked = run.acks();
    assert_eq!(acked.len(), 600);
    let alice = [
        ("security.protocol", "SASL_PLAINTEXT"),
        ("sasl.mechanism", "PLAIN"),
        ("sasl.username", "alice"),
        ("sasl.password", "alice-secret"),
    ];
    librdkafka::assert_exactly_once_with(
        &kroute.bootstrap,
        &topic,
        &alice,
        acked.iter().map(|(id, _)| id.as_str()),
    );
    assert!(kroute.metric("kroute_batches_moved_total", &[]) > 0.0);
    kroute.assert_clean_logs(&[]);
}

#[test]
fn passthrough_clients_reauthenticate_themselves_through_kroute() {
    // The Java client re-authenticates its own sessions (KIP-368) on the 10 s listener, while
    // kroute moves its batches over those same connections: nothing is injected between a
    // SaslHandshake and the end of its exchange, and the client sees no error.
    let kroute = Kroute::spawn_with(kroute_on(
        "reauth",
        upstream_tls()
            + "[upstream.sasl]\nmode = \"passthrough\"\n\
               [routing]\nstrategy = \"strict-cost\"\ninclude = [\"sasl-pass-reauth-*\"]\n",
    ));
    wait_for("kroute /ready", Duration::from_secs(30), || {
        http_get(&kroute.admin, "/ready").filter(|r| r.0 == 200)
    });
    let topic = unique("sasl-pass-reauth");
    create_topic(&topic, 3, &[]);
    let alice = java_sasl("SCRAM-SHA-512", "alice", "alice-secret");
    let mut args = vec![
        "--count",
        "3200",
        "--per-second",
        "100",
        "--id-prefix",
        "pr-",
        "--timeout-ms",
        "90000",
    ];
    args.extend(alice.iter().map(String::as_str));
    let run = java_on("produce", &kroute.bootstrap, &topic, &args);
    assert_eq!(run.count("produced"), 3200);
    assert_eq!(run.count("errors"), 0);
    assert!(kroute.metric("kroute_injected_requests_total", &[]) > 0.0);
    assert!(kroute.metric("kroute_batches_moved_total", &[]) > 0.0);
    let acked = run.acks();
    assert_eq!(acked.len(), 3200);
    librdkafka::assert_exactly_once(
        &cluster_bootstrap(),
        &topic,
        acked.iter().map(|a| a.0.as_str()),
    );
    // Each of the client's connections re-authenticated through kroute: more SaslHandshake
    // requests than connections.
    let handshakes = kroute.metric("kroute_requests_total", &["api=\"SaslHandshake\""]);
    let connections = kroute.metric("kroute_client_connections_total", &[]);
    assert!(
        handshakes >= connections + 2.0,
        "{handshakes} SaslHandshake requests on {connections} connections in 32 s"
    );
    kroute.assert_clean_logs(&[]);
}

/// A one-route OAuth 2 token endpoint: checks the client-credentials request (Basic
/// `kroute-client:client-secret`) and answers an unsecured token for `kroute`; counts requests.
fn token_endpoint() -> (String, std::sync::Arc<std::sync::atomic::AtomicU32>) {
    use base64::Engine;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::sync::atomic::{AtomicU32, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/oauth2/token", listener.local_addr().unwrap());
    let served = std::sync::Arc::new(AtomicU32::new(0));
    let count = served.clone();
    let basic = base64::engine::general_purpose::STANDARD.encode("kroute-client:client-secret");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let mut reader = BufReader::new(stream);
            let (mut head, mut line) = (String::new(), String::new());
            while reader.read_line(&mut line).unwrap_or(0) > 2 {
                head.push_str(&line);
                line.clear();
            }
            let length: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap_or(0))
                })
                .unwrap_or(0);
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let body = String::from_utf8_lossy(&body);
            let good = head.starts_with("POST /oauth2/token")
                && head.contains(&format!("Basic {basic}"))
                && body.contains("grant_type=client_credentials")
                && body.contains("scope=kafka");
            let answer = if good {
                count.fetch_add(1, Ordering::Relaxed);
                let json = format!(
                    r#"{{"access_token":"{}","token_type":"Bearer","expires_in":3600}}"#,
                    unsecured_token("kroute")
                );
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{json}",
                    json.len()
                )
            } else {
                "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".into()
            };
            let _ = reader.get_mut().write_all(answer.as_bytes());
        }
    });
    (url, served)
}

#[test]
fn originate_oauthbearer_with_tokens_from_a_client_credentials_endpoint() {
    let (url, served) = token_endpoint();
    let secret = PasswordFile::new("client-secret");
    let toml = format!(
        "[upstream.sasl]\nmode = \"originate\"\nmechanism = \"OAUTHBEARER\"\n\
         [upstream.sasl.oauth]\ntoken_endpoint_url = \"{url}\"\nclient_id = \"kroute-client\"\n\
         client_secret_file = \"{}\"\nscope = \"kafka\"\n",
        secret.0.display()
    );
    let kroute = Kroute::start_with(kroute_on("sasl_plaintext", toml));
    let topic = unique("sasl-oauth-endpoint");
    create_topic(&topic, 3, &[]);
    java_round_trip(&kroute.bootstrap, &topic, 200, &[]);
    let logins = sasl_metric(&kroute, "kroute_sasl_authentications_total", "OAUTHBEARER");
    assert!(logins >= 3.0, "{logins} logins");
    // The token is kept for most of its hour: one request serves every login.
    assert_eq!(served.load(std::sync::atomic::Ordering::Relaxed), 1);
    kroute.assert_clean_logs(&[]);
}
