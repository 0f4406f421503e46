//! Graceful shutdown (SIGTERM) and configuration overrides, with kroute as a process in front
//! of the real cluster: a request in flight is answered before its connection closes, new
//! connections are refused, the exit code is 0; the Java default (idempotent) producer runs
//! through three SIGTERM restarts without an error, a loss or a duplicate; flags and
//! environment variables go over the file, `check-config` shows them and no secret.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::librdkafka::{Produce, assert_exactly_once, produce};
use common::shutdown::*;
use common::*;

/// How long these tests wait for what kroute does at once (or at a drain timeout of seconds):
/// far more than a loaded machine adds, and far less than a drain timeout of minutes, so that
/// a connection, a listener or a process kroute left until then fails a wait.
const PATIENCE: Duration = Duration::from_secs(60);

/// kroute with `drain_timeout_ms`.
fn kroute_draining_for(ms: u64) -> Kroute {
    Kroute::start_with(KrouteOptions {
        extra_toml: format!("\n[shutdown]\ndrain_timeout_ms = {ms}\n"),
        ..Default::default()
    })
}

/// A client connection that has made one round trip through kroute, then sits idle.
fn idle_connection(addr: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connect to kroute");
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let body = kafka_protocol::messages::ApiVersionsRequest::default();
    s.write_all(&request_frame(
        kafka_protocol::messages::ApiKey::ApiVersions,
        0,
        1,
        &body,
    ))
    .unwrap();
    assert!(read_frame(&mut s).is_some(), "ApiVersions answered");
    s
}

/// A long-poll Fetch sent to broker 1's kroute address, once kroute has forwarded it.
fn fetch_in_flight(kroute: &Kroute, topic: &str, max_wait_ms: i32) -> TcpStream {
    let before = kroute.metric("kroute_requests_total", &["api=\"Fetch\""]);
    let mut s = TcpStream::connect(format!("127.0.0.1:{}", kroute.port_base + 1)).unwrap();
    s.write_all(&long_poll_fetch(topic, 0, max_wait_ms, 42))
        .unwrap();
    wait_for("the Fetch to reach kroute", PATIENCE, || {
        (kroute.metric("kroute_requests_total", &["api=\"Fetch\""]) > before).then_some(())
    });
    s
}

/// Partition 0's high watermark in a Fetch v12 answer (a payload as [`read_frame`] returns it):
/// how many records the broker had when it answered.
fn high_watermark(payload: &[u8]) -> i64 {
    use kafka_protocol::messages::{ApiKey, FetchResponse, ResponseHeader};
    use kafka_protocol::protocol::Decodable;
    let mut buf = bytes::Bytes::copy_from_slice(payload);
    ResponseHeader::decode(&mut buf, ApiKey::Fetch.response_header_version(12))
        .expect("Fetch response header");
    FetchResponse::decode(&mut buf, 12)
        .expect("Fetch response")
        .responses
        .first()
        .and_then(|t| t.partitions.first())
        .map(|p| p.high_watermark)
        .expect("partition 0 in the Fetch response")
}

/// What came next on a client connection.
#[derive(Debug)]
enum Next {
    /// An answer frame.
    Answer,
    /// kroute ended the connection (EOF or reset).
    Closed,
    /// Nothing within the time given.
    TimedOut,
}

/// Reads the next answer frame on `s`, waiting `timeout` at most.
fn next_frame(s: &mut TcpStream, timeout: Duration) -> Next {
    let ended = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => Next::TimedOut,
        _ => Next::Closed,
    };
    s.set_read_timeout(Some(timeout)).unwrap();
    let mut size = [0u8; 4];
    if let Err(e) = s.read_exact(&mut size) {
        return ended(e);
    }
    let mut payload = vec![0u8; i32::from_be_bytes(size).max(0) as usize];
    match s.read_exact(&mut payload) {
        Ok(()) => Next::Answer,
        Err(e) => ended(e),
    }
}

fn all_listeners(kroute: &Kroute) -> Vec<String> {
    let mut addrs = vec![kroute.bootstrap.clone()];
    addrs.extend((1..=3).map(|n| format!("127.0.0.1:{}", kroute.port_base + n)));
    addrs
}

#[test]
fn sigterm_answers_the_request_in_flight_then_closes_refuses_new_connections_and_exits_0() {
    // A drain timeout far past every wait below: what kroute would only do at the drain timeout
    // (close a connection, stop listening, exit) fails a wait instead of passing late.
    let mut kroute = kroute_draining_for(180_000);
    let topic = unique("shut-fetch");
    create_topic_two_per_broker(&topic); // partition 0 is led by broker 1
    let mut idle = idle_connection(&kroute.bootstrap);
    // The broker holds this Fetch of the empty partition 0 until a record arrives there (or
    // 60 s pass): kroute owes it an answer until this test produces one, whatever the
    // machine's speed.
    let mut fetch = fetch_in_flight(&kroute, &topic, 60_000);

    let stopping = Instant::now();
    kroute.sigterm();
    wait_for("/ready 503", PATIENCE, || {
        http_get(&kroute.admin, "/ready").filter(|(status, _)| *status == 503)
    });
    let not_ready = stopping.elapsed();
    // Liveness holds while it drains; the readiness gauge follows /ready.
    assert_eq!(http_get(&kroute.admin, "/health").map(|r| r.0), Some(200));
    assert_eq!(kroute.metric("kroute_ready", &[]), 0.0);
    // The idle connection closes at once; no listener takes a new connection. (kroute cannot
    // have exited: it still owes the Fetch its answer.)
    assert!(
        closed_within(&mut idle, PATIENCE),
        "the idle connection was not closed"
    );
    wait_for("every listener to refuse", PATIENCE, || {
        all_listeners(&kroute)
            .iter()
            .all(|a| refused(a))
            .then_some(())
    });
    eprintln!(
        "not ready after {not_ready:?}, listeners closed after {:?}",
        stopping.elapsed()
    );

    // The Fetch the broker holds is answered once partition 0 has a record (produced straight
    // to the cluster: kroute takes no connection now), then the connection ends.
    produce(
        &cluster_bootstrap(),
        &topic,
        1,
        Produce {
            partition: Some(0),
            ..Produce::default()
        },
    );
    fetch.set_read_timeout(Some(PATIENCE)).unwrap();
    let answer = read_frame(&mut fetch).expect("the Fetch in flight was not answered");
    assert_eq!(fetch_answer(&answer), (42, 0));
    // With the record: held through everything above, until there was something to answer.
    let records = high_watermark(&answer);
    assert!(
        records >= 1,
        "the Fetch was answered before the record was produced (high watermark {records}): \
         it was not held"
    );
    assert!(
        closed_within(&mut fetch, PATIENCE),
        "the connection stayed open after its last answer"
    );
    drop(fetch);

    let status = kroute.wait_exit(PATIENCE);
    assert!(status.success(), "kroute exited with {status}");
    let outcomes = drain_outcomes(&kroute, 1);
    assert_eq!(outcomes.len(), 1, "one shutdown: {outcomes:?}");
    let (drained, cut) = outcomes[0];
    assert!(drained >= 2 && cut == 0, "drained {drained}, cut {cut}");
    kroute.assert_clean_logs(&[]);
}

#[test]
fn at_the_drain_timeout_a_connection_still_owed_an_answer_is_cut_and_kroute_exits_0() {
    const DRAIN: Duration = Duration::from_millis(2_000);
    let mut kroute = kroute_draining_for(DRAIN.as_millis() as u64);
    let topic = unique("shut-cut");
    create_topic_two_per_broker(&topic);
    let mut idle = idle_connection(&kroute.bootstrap);
    // Held 60 s by the broker: its answer cannot come before a cut at the drain timeout.
    let mut fetch = fetch_in_flight(&kroute, &topic, 60_000);

    // kroute's drain clock starts when the signal reaches it, after this instant.
    let stopping = Instant::now();
    kroute.sigterm();
    // The idle connection closes at once (that it closed drained, not cut at the drain
    // timeout, is kroute's count below).
    assert!(
        closed_within(&mut idle, PATIENCE),
        "the idle connection was not closed"
    );
    // The Fetch gets no answer: kroute ends its connection (not this test's wait), and not
    // before the drain timeout.
    let next = next_frame(&mut fetch, PATIENCE);
    let cut_after = stopping.elapsed();
    assert!(
        matches!(next, Next::Closed),
        "a Fetch held 60 s, with a 2 s drain: {next:?} after {cut_after:?}"
    );
    assert!(
        cut_after >= DRAIN,
        "cut after {cut_after:?}, the drain timeout is {DRAIN:?}"
    );
    let status = kroute.wait_exit(PATIENCE);
    assert!(status.success(), "kroute exited with {status}");
    let outcomes = drain_outcomes(&kroute, 1);
    assert_eq!(outcomes.len(), 1, "one shutdown: {outcomes:?}");
    assert!(outcomes[0].0 >= 1 && outcomes[0].1 == 1, "{outcomes:?}");
    kroute.assert_clean_logs(&[]);
}

#[test]
fn java_idempotent_producer_through_three_sigterm_restarts_loses_and_duplicates_nothing() {
    let mut kroute = Kroute::start_with(KrouteOptions {
        extra_toml: "\n[routing]\ninclude = [\"shut-*\"]\n".into(),
        ..Default::default()
    });
    let topic = unique("shut-java");
    create_topic_two_per_broker(&topic);

    // 30 s of records at a steady rate, so that the three restarts below (a few seconds each,
    // about 12 s in all here) come while the producer is still producing on a slow machine.
    let count = 30_000;
    let producer = java_produce_in_background(&kroute.bootstrap, &topic, count, 1_000, "sj-");
    for round in 1..=3 {
        // Every kroute process carries produce traffic (a second or two) before it is stopped.
        wait_for(
            &format!("produce traffic before restart {round}"),
            Duration::from_secs(60),
            || {
                (kroute.metric("kroute_requests_total", &["api=\"Produce\""]) >= 300.0)
                    .then_some(())
            },
        );
        kroute.terminate_and_restart();
        eprintln!("kroute restarted with SIGTERM ({round} of 3)");
    }
    let run = producer.join().expect("producer thread");
    run.assert_ok();
    assert_eq!(run.count("errors"), 0, "records the client gave up on");
    let metrics = run.records("client-metrics");
    eprintln!("Java client metrics: {metrics:?}");
    assert!(
        metrics
            .iter()
            .all(|m| m.get("errors").map(String::as_str) == Some("0")),
        "the client counted record errors: {metrics:?}"
    );
    let acked = run.acks();
    assert_eq!(acked.len(), count as usize);
    assert_exactly_once(
        &kroute.bootstrap,
        &topic,
        acked.iter().map(|a| a.0.as_str()),
    );

    let outcomes = drain_outcomes(&kroute, 3);
    eprintln!("drained, cut at each shutdown: {outcomes:?}");
    assert_eq!(outcomes.len(), 3);
    assert!(
        outcomes
            .iter()
            .all(|(drained, cut)| *drained > 0 && *cut == 0)
    );
    kroute.assert_clean_logs(&[]);
}

/// A configuration file with every kind of secret reference (none of them a value).
const SECURED_FILE: &str = r#"
[listen]
bootstrap_port = 1111

[upstream]
bootstrap_servers = ["file-broker:9092"]

[upstream.sasl]
mode = "originate"
mechanism = "OAUTHBEARER"

[upstream.sasl.oauth]
token_endpoint_url = "https://kroute:pw-in-url@auth.example/token"
client_id = "kroute"
client_secret_env = "TEST_OAUTH_SECRET"
"#;

#[test]
fn flags_go_over_environment_over_file_and_check_config_shows_them_without_secrets() {
    let dir = empty_dir("kroute-check");
    std::fs::write(dir.join("proxy.toml"), SECURED_FILE).unwrap();
    let secret = ("TEST_OAUTH_SECRET", "s3cret-value-never-printed");

    // The file in the working directory, with the defaults.
    let file = check_config(&dir, &[], &[secret]);
    assert_eq!(file.code, 0, "{}", file.stderr);
    assert!(
        file.stdout
            .contains("# effective configuration: proxy.toml")
    );
    assert!(
        file.stdout.contains("bootstrap_port = 1111"),
        "{}",
        file.stdout
    );
    assert!(file.stdout.contains("broker_port_base = 9100"));
    assert!(file.stdout.contains("drain_timeout_ms = 10000"));
    assert!(
        file.stdout
            .contains("client_secret_env = \"TEST_OAUTH_SECRET\"")
    );

    // Environment over file and default, flag over environment.
    let env = [
        ("KROUTE_BOOTSTRAP_PORT", "2222"),
        ("KROUTE_BROKER_PORT_BASE", "7000"),
        ("KROUTE_BOOTSTRAP_SERVERS", "env-a:1, env-b:2"),
        ("KROUTE_LOG_FORMAT", "json"),
        ("KROUTE_DRAIN_TIMEOUT_MS", "2500"),
        secret,
    ];
    let over = check_config(&dir, &["--bootstrap-port", "3333"], &env);
    assert_eq!(over.code, 0, "{}", over.stderr);
    let out = &over.stdout;
    for expected in [
        "bootstrap_port = 3333",
        "# listen.bootstrap_port set by --bootstrap-port",
        "broker_port_base = 7000",
        "# listen.broker_port_base set by KROUTE_BROKER_PORT_BASE",
        "bootstrap_servers = [\"env-a:1\", \"env-b:2\"]",
        "format = \"json\"",
        "drain_timeout_ms = 2500",
    ] {
        assert!(out.contains(expected), "no `{expected}` in:\n{out}");
    }
    for printed in [&file.stdout, out] {
        for secret in ["s3cret-value-never-printed", "pw-in-url"] {
            assert!(!printed.contains(secret), "{secret} printed:\n{printed}");
        }
        assert!(
            printed.contains("<redacted>@auth.example/token"),
            "{printed}"
        );
    }

    // What check-config prints is a configuration kroute loads again, to the same effect.
    std::fs::write(dir.join("effective.toml"), out).unwrap();
    let again = check_config(&dir, &["--config", "effective.toml"], &[]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(again.stdout.contains("bootstrap_port = 3333"));
    assert!(again.stdout.contains("drain_timeout_ms = 2500"));
    // KROUTE_CONFIG names the file as --config does.
    let by_env = check_config(
        &dir,
        &[],
        &[(
            "KROUTE_CONFIG",
            dir.join("effective.toml").to_str().unwrap(),
        )],
    );
    assert_eq!(by_env.code, 0, "{}", by_env.stderr);
    assert!(by_env.stdout.contains("effective.toml"));
    let _ = std::fs::remove_dir_all(dir);
}

/// Flags, environment variables, and what the error must name.
type BadCase<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a [&'a str]);

#[test]
fn a_bad_override_or_key_exits_2_naming_it_and_a_missing_default_file_is_no_error() {
    let dir = empty_dir("kroute-check-bad");
    // No file anywhere: the bootstrap servers must come from an override.
    let none = check_config(&dir, &[], &[]);
    assert_eq!(none.code, 2);
    assert!(
        none.stderr.contains("upstream.bootstrap_servers")
            && none.stderr.contains("KROUTE_BOOTSTRAP_SERVERS"),
        "{}",
        none.stderr
    );
    let servers = ("KROUTE_BOOTSTRAP_SERVERS", "broker:9092");
    let env_only = check_config(&dir, &[], &[servers]);
    assert_eq!(env_only.code, 0, "{}", env_only.stderr);
    assert!(
        env_only
            .stdout
            .contains("# effective configuration: defaults (no configuration file)")
    );
    // A file that is named must exist.
    let missing = check_config(
        &dir,
        &[],
        &[servers, ("KROUTE_CONFIG", "/nonexistent/k.toml")],
    );
    assert_eq!(missing.code, 2);
    assert!(
        missing.stderr.contains("/nonexistent/k.toml"),
        "{}",
        missing.stderr
    );

    let cases: [BadCase; 5] = [
        (
            &[],
            &[("KROUTE_BROKER_PORT_BASE", "abc")],
            &["KROUTE_BROKER_PORT_BASE", "listen.broker_port_base"],
        ),
        (
            &[],
            &[("KROUTE_ADMIN_LISTEN", "localhost")],
            &["KROUTE_ADMIN_LISTEN", "admin.listen"],
        ),
        (
            &["--log-format", "yaml"],
            &[("KROUTE_LOG_FORMAT", "json")],
            &["--log-format", "log.format"],
        ),
        (
            &["--drain-timeout-ms", "10s"],
            &[],
            &["--drain-timeout-ms", "shutdown.drain_timeout_ms"],
        ),
        (
            &[],
            &[("KROUTE_BOOTSTRAP_SERVERS", "no-port")],
            &["KROUTE_BOOTSTRAP_SERVERS", "upstream.bootstrap_servers"],
        ),
    ];
    for (args, env, named) in cases {
        let mut env = env.to_vec();
        if !env.iter().any(|(k, _)| *k == servers.0) {
            env.push(servers);
        }
        let run = check_config(&dir, args, &env);
        assert_eq!(run.code, 2, "{args:?} {env:?}: {}", run.stdout);
        for name in named {
            assert!(
                run.stderr.contains(name),
                "{name} not named: {}",
                run.stderr
            );
        }
    }
    // A wrong key in the file is named, as before.
    std::fs::write(dir.join("proxy.toml"), "[listen]\nbootstrap_prot = 1\n").unwrap();
    let typo = check_config(&dir, &[], &[servers]);
    assert_eq!(typo.code, 2);
    assert!(typo.stderr.contains("bootstrap_prot"), "{}", typo.stderr);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn configured_by_environment_alone_with_json_logs_it_serves_clients_and_stops_cleanly() {
    let mut kroute = Kroute::start_without_file(
        &["--log-format", "json"],
        &[("KROUTE_DRAIN_TIMEOUT_MS", "5000")],
    );
    let topic = unique("shut-json");
    create_topic(&topic, 3, &[]);
    let acked = produce(&kroute.bootstrap, &topic, 200, Produce::default());
    assert_exactly_once(
        &kroute.bootstrap,
        &topic,
        acked.iter().map(|a| a.id.as_str()),
    );

    kroute.sigterm();
    let status = kroute.wait_exit(PATIENCE);
    assert!(status.success(), "kroute exited with {status}");

    // One JSON object per line, the event's fields at the top level; no warning.
    kroute.wait_for_log(&["shutdown complete"], PATIENCE);
    let lines: Vec<serde_json::Value> = kroute
        .logs()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(lines.len() > 5);
    for line in &lines {
        for key in ["timestamp", "level", "message", "target"] {
            assert!(line.get(key).is_some(), "no {key} in {line}");
        }
        let level = line["level"].as_str().unwrap_or_default();
        assert!(level != "WARN" && level != "ERROR", "kroute warned: {line}");
    }
    let find = |message: &str| {
        lines
            .iter()
            .find(|l| {
                l["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with(message))
            })
            .unwrap_or_else(|| panic!("no `{message}` line"))
    };
    let loaded = find("configuration loaded");
    let overrides = loaded["overrides"].as_str().unwrap_or_default();
    for expected in [
        "upstream.bootstrap_servers from KROUTE_BOOTSTRAP_SERVERS",
        "log.format from --log-format",
        "shutdown.drain_timeout_ms from KROUTE_DRAIN_TIMEOUT_MS",
    ] {
        assert!(overrides.contains(expected), "{loaded}");
    }
    assert!(
        loaded["file"]
            .as_str()
            .is_some_and(|f| f.starts_with("none"))
    );
    let started = find("shutting down");
    assert_eq!(started["reason"], "SIGTERM");
    assert_eq!(started["drain_timeout_ms"], 5000);
    let done = find("shutdown complete");
    assert_eq!(done["cut"], 0, "{done}");
}
