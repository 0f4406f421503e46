//! `upstream.request_timeout_ms`: a broker that accepts connections but never answers does not
//! hold a client's requests forever.
//!
//! Broker 2 is made to "never answer" through its relay ([`common::slow`]): with a delay of an
//! hour, the relay accepts connections and passes every request on at once, and the broker
//! works on them, but its answers are held back. Releasing it puts the delay back as it was
//! and cuts the connections whose answers the relay still holds ([`Stuck::release`]), in a
//! drop guard, whatever happens. Tests take the binary's lock ([`SLOW_BROKER`]); another test
//! binary changing broker 2's relay at the same time would disturb them.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::librdkafka::assert_exactly_once;
use common::shutdown::{fetch_answer, long_poll_fetch};
use common::slow::{SLOW_BROKER, assert_no_sequence_error_passed};
use common::*;
use kafka_protocol::messages::{ApiKey, MetadataRequest};

/// kroute's request timeout in these tests.
const TIMEOUT: Duration = Duration::from_secs(2);
/// The WARN line kroute logs when it closes a connection for a request without an answer.
const TIMEOUT_LINE: &str = "no answer within upstream.request_timeout_ms";
/// How long these tests wait for what should come at once or at the timeout: far more than a
/// loaded machine adds.
const PATIENCE: Duration = Duration::from_secs(60);
/// Broker 2's delay while it is stuck: an hour (the relay's most).
const STUCK_MS: &str = "3600000";

/// Broker 2 answers nothing while this lives; [`Stuck::release`] (or dropping it) puts the
/// relay back as it was.
struct Stuck {
    before: String,
    released: bool,
}

impl Stuck {
    /// Makes broker 2 hold its answers, and returns once its relay holds them back.
    fn broker_2() -> Stuck {
        let delays = cluster(&["delays"]);
        let before = delays
            .lines()
            .find_map(|l| l.strip_prefix("broker 2 "))
            .map(|ms| ms.trim().to_string())
            .unwrap_or_else(|| "0".into());
        let took_up = relay_2_took_up(STUCK_MS);
        let stuck = Stuck {
            before,
            released: false,
        };
        cluster(&["delay", "2", STUCK_MS]);
        // The relay picks the new delay up within 100 ms and logs it: from then on it holds
        // back every answer broker 2 sends. (An answer that is merely slow, on a loaded
        // machine, is no sign of that.)
        if stuck.before != STUCK_MS {
            wait_for("broker 2's relay to take the delay up", PATIENCE, || {
                (relay_2_took_up(STUCK_MS) > took_up).then_some(())
            });
        }
        stuck
    }

    /// Puts the delay back, and once the relay has picked it up, cuts the connections it still
    /// holds answers on for an hour (a chunk the relay already waits on keeps its deadline):
    /// the other brokers' replica fetchers reconnect at once instead of after their socket
    /// timeout, and broker 2 leads its partitions as before.
    fn release(&mut self) {
        if std::mem::replace(&mut self.released, true) {
            return;
        }
        let script = repo_root().join("scripts/cluster.sh");
        let took_up = relay_2_took_up(&self.before);
        let _ = std::process::Command::new(&script)
            .args(["delay", "2", &self.before])
            .status();
        // The relay logs taking the delay up (no panic here: this runs in a drop too).
        let deadline = Instant::now() + PATIENCE;
        while self.before != STUCK_MS
            && relay_2_took_up(&self.before) <= took_up
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        // The relay cuts when it handles the signal: a connection open before tells when.
        let canary = TcpStream::connect(broker_2_address());
        let _ = std::process::Command::new(&script)
            .args(["cut", "2"])
            .status();
        if let Ok(mut canary) = canary {
            closed_within(&mut canary, PATIENCE);
        }
    }
}

impl Drop for Stuck {
    fn drop(&mut self) {
        self.release();
    }
}

/// Broker 2's address on the cluster (its relay's: the bootstrap list is in node order).
fn broker_2_address() -> String {
    cluster_bootstrap()
        .split(',')
        .nth(1)
        .expect("three brokers in KROUTE_TEST_CLUSTER")
        .to_string()
}

/// Broker 2's relay's log, in the cluster's state directory (scripts/cluster.sh).
fn relay_2_log() -> PathBuf {
    std::env::var_os("KROUTE_CLUSTER_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/cluster"))
        .join("logs/relay2.log")
}

/// How many times broker 2's relay has logged taking up a delay of `ms` ms from its delay file
/// (it re-reads it every 100 ms and logs each change: `<dir>/delay/broker2: delay 0 ms ->
/// 3600000 ms`, the line `cluster.sh cap` waits for too).
fn relay_2_took_up(ms: &str) -> usize {
    let to = format!("-> {ms} ms");
    std::fs::read_to_string(relay_2_log())
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("/broker2: delay ") && l.contains(&to))
        .count()
}

/// Reads until the peer closes the connection: how many bytes came, and when it closed.
/// Fails if it is still open after `limit`.
fn read_until_closed(s: &mut TcpStream, limit: Duration) -> (usize, Instant) {
    s.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 4096];
    let mut got = 0;
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (got, Instant::now()),
            Ok(n) => got += n,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                panic!("the connection was still open after {limit:?}")
            }
            Err(_) => return (got, Instant::now()), // reset: closed too
        }
    }
}

/// A metric of kroute's, asked again if /metrics does not answer (a loaded machine): never the
/// 0 an unanswered scrape would read as.
fn scrape(kroute: &Kroute, name: &str, labels: &[&str]) -> f64 {
    wait_for("kroute's /metrics", PATIENCE, || {
        http_get(&kroute.admin, "/metrics")
            .filter(|(status, _)| *status == 200)
            .map(|(_, body)| metric_sum(&body, name, labels))
    })
}

fn timeouts(kroute: &Kroute, broker: &str) -> f64 {
    scrape(
        kroute,
        "kroute_upstream_request_timeouts_total",
        &[&format!("broker=\"{broker}\"")],
    )
}

/// The `waited_ms` of kroute's timeout line for `api`.
fn waited_ms(kroute: &Kroute, api: &str) -> u64 {
    let line = kroute.wait_for_log(&[TIMEOUT_LINE, api], PATIENCE);
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix("waited_ms="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no waited_ms in {line}"))
}

#[test]
fn a_request_to_a_broker_that_never_answers_is_closed_after_the_timeout() {
    let _serial = SLOW_BROKER.lock().unwrap_or_else(|e| e.into_inner());
    let kroute = Kroute::start_with(KrouteOptions {
        extra_toml: format!("request_timeout_ms = {}\n", TIMEOUT.as_millis()),
        ..Default::default()
    });

    // A long poll the broker holds longer than the timeout is answered, not cut: its
    // max_wait_ms comes on top. Broker 1 leads the topic's only partition.
    const POLL_WAIT: Duration = Duration::from_millis(3_000);
    let topic = unique("timeout-poll");
    cluster(&["create-topic", &topic, "--replica-assignment", "1:3"]);
    let mut poll = TcpStream::connect(format!("127.0.0.1:{}", kroute.port_base + 1)).unwrap();
    poll.set_read_timeout(Some(PATIENCE)).unwrap();
    let started = Instant::now();
    poll.write_all(&long_poll_fetch(&topic, 0, POLL_WAIT.as_millis() as i32, 7))
        .unwrap();
    match read_frame(&mut poll) {
        Some(answer) => {
            let held = started.elapsed();
            assert_eq!(fetch_answer(&answer), (7, 0));
            assert!(
                held >= Duration::from_millis(2_900),
                "the broker held the long poll only {held:?}"
            );
            assert_eq!(timeouts(&kroute, "1"), 0.0);
        }
        // Cut: right only if broker 1 (on a loaded machine) overran the long poll's wait by
        // more than the timeout. kroute's own clock tells: it waited both.
        None => {
            let waited = waited_ms(&kroute, "api=\"Fetch\"");
            eprintln!("broker 1 answered the long poll late: kroute cut it after {waited} ms");
            assert!(
                Duration::from_millis(waited) >= TIMEOUT + POLL_WAIT,
                "kroute cut a long poll after {waited} ms: its max_wait_ms did not count"
            );
        }
    }

    let mut stuck = Stuck::broker_2();
    let mut client = TcpStream::connect(format!("127.0.0.1:{}", kroute.port_base + 2)).unwrap();
    let sent = Instant::now();
    let metadata = MetadataRequest::default().with_topics(None);
    client
        .write_all(&request_frame(ApiKey::Metadata, 12, 1, &metadata))
        .unwrap();
    // The client's connection closes (what every Kafka client retries) without an answer,
    // not before the timeout, and because of it.
    let (bytes, closed) = read_until_closed(&mut client, PATIENCE);
    let after = closed.duration_since(sent);
    eprintln!("broker 2 never answered: the client's connection closed after {after:?}");
    assert_eq!(bytes, 0, "the stuck broker answered");
    assert!(
        after >= TIMEOUT,
        "closed after {after:?} (timeout {TIMEOUT:?})"
    );
    // kroute's own clock: it waited the timeout, and no longer than this test saw (its clock
    // started after `sent`; it logged before the client's connection closed). How much longer
    // than the timeout is the machine's load, not kroute's rule.
    let waited = Duration::from_millis(waited_ms(&kroute, "api=\"Metadata\""));
    assert!(
        waited >= TIMEOUT && waited <= after,
        "kroute waited {waited:?}; the client's connection closed {after:?} after the request"
    );
    assert_eq!(timeouts(&kroute, "2"), 1.0);
    assert_eq!(
        scrape(
            &kroute,
            "kroute_upstream_disconnects_total",
            &["broker=\"2\""]
        ),
        1.0
    );

    // Released, broker 2 answers through kroute again.
    stuck.release();
    let mut again = TcpStream::connect(format!("127.0.0.1:{}", kroute.port_base + 2)).unwrap();
    again.set_read_timeout(Some(PATIENCE)).unwrap();
    again
        .write_all(&request_frame(ApiKey::Metadata, 12, 2, &metadata))
        .unwrap();
    assert!(
        read_frame(&mut again).is_some(),
        "broker 2 did not answer once released"
    );
    kroute.assert_clean_logs(&[TIMEOUT_LINE]);
}

/// The Java idempotent producer (kroute numbers its batches) while broker 2 is stuck for a
/// while: batches sent to broker 2, on the client's own connections and on kroute's producer
/// connections, get no answer; kroute closes those connections after the timeout, which
/// the client sees as retriable, and once broker 2 answers again every record is written once.
#[test]
fn an_idempotent_producer_rides_out_a_stuck_broker() {
    let _serial = SLOW_BROKER.lock().unwrap_or_else(|e| e.into_inner());
    let kroute = Kroute::start_with(KrouteOptions {
        extra_toml: format!(
            "request_timeout_ms = {}\n[routing]\nstrategy = \"strict-cost\"\ninclude = [\"route-*\"]\n",
            TIMEOUT.as_millis()
        ),
        ..Default::default()
    });
    let topic = unique("route-stuck");
    create_topic_two_per_broker(&topic);

    // 20 s of records at a steady rate: broker 2 gets stuck (some 3 s in) while the producer is
    // still producing on a slow machine.
    let count = 30_000;
    let producer = java_produce_in_background(&kroute.bootstrap, &topic, count, 1_500, "st-");
    wait_for(
        "produce traffic to broker 2 through kroute",
        Duration::from_secs(60),
        || {
            let bytes = kroute.metric("kroute_upstream_produce_bytes_total", &["broker=\"2\""]);
            (bytes > 1e6).then_some(())
        },
    );
    let mut stuck = Stuck::broker_2();
    let stalled = Instant::now();
    // Stuck until kroute has given up on several of broker 2's connections.
    wait_for(
        "kroute to close broker 2's stuck connections",
        PATIENCE,
        || (timeouts(&kroute, "2") >= 3.0).then_some(()),
    );
    stuck.release();
    eprintln!(
        "broker 2 was stuck for {:?}; kroute closed {} of its connections",
        stalled.elapsed(),
        timeouts(&kroute, "2")
    );

    let run = producer.join().unwrap();
    run.assert_ok();
    let outcome = |o: &str| {
        kroute.metric(
            "kroute_idempotent_batches_total",
            &[&format!("outcome=\"{o}\"")],
        )
    };
    eprintln!(
        "java producer: retries={:?}; kroute: renumbered={} resent={} busy={} answered_from_memory={}",
        run.value("retries"),
        outcome("renumbered"),
        outcome("resent"),
        outcome("busy"),
        outcome("answered_from_memory"),
    );
    // Batches whose answers broker 2 held went to it again with the same numbers once the
    // client retried (the broker deduplicates what it had already written).
    assert!(outcome("resent") > 0.0, "no batch was resent to broker 2");
    assert_eq!(run.count("errors"), 0);
    let acked = run.acks();
    assert_eq!(acked.len(), count as usize);
    assert_no_sequence_error_passed(&kroute);
    assert_exactly_once(
        &kroute.bootstrap,
        &topic,
        acked.iter().map(|a| a.0.as_str()),
    );
    // The release cuts what kroute still had open to broker 2 (requests sent after the last
    // timeout among them): those connections end with requests in flight.
    kroute.assert_clean_logs(&[
        TIMEOUT_LINE,
        "upstream connection ended with requests in flight",
    ]);
}
