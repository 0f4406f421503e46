//! kroute's client-side limits (`[limits]`, src/client/limits.rs), against the real cluster:
//! connections over `max_connections` / `max_connections_per_ip` are closed at once; a request
//! larger than `max_buffered_bytes_per_connection` still goes (reading pauses meanwhile); a
//! slowloris client is closed after `partial_frame_timeout_ms` and an idle one after
//! `idle_timeout_ms`, but not while a broker owes it an answer; a client that never reads its
//! answers stops being read, kroute's memory stays bounded and everyone else is served.
//!
//! The tests of this binary run one at a time, so that kroute's memory can be read from the one
//! kroute process this test binary runs.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::shutdown::{fetch_answer, long_poll_fetch};
use common::*;
use kafka_protocol::messages::{ApiKey, MetadataRequest};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// kroute with these `[limits]` keys.
fn kroute_with_limits(limits: &str) -> Kroute {
    let kroute = Kroute::start_with(KrouteOptions {
        extra_toml: format!("[limits]\n{limits}\n"),
        ..Default::default()
    });
    // The readiness probes' connections have gone.
    wait_for("no client connection open", Duration::from_secs(10), || {
        (kroute.metric("kroute_client_connections_active", &[]) == 0.0).then_some(())
    });
    kroute
}

fn metadata_request(correlation_id: i32) -> Bytes {
    request_frame(
        ApiKey::Metadata,
        12,
        correlation_id,
        &MetadataRequest::default().with_topics(Some(vec![])),
    )
}

/// A TCP connection to `addr` from the local address `ip` (any of 127.0.0.0/8 on Linux), with
/// a receive buffer of `recv_buffer` bytes if given.
fn connect_from(ip: &str, addr: &str, recv_buffer: Option<u32>) -> TcpStream {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    let stream = rt.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        if let Some(size) = recv_buffer {
            socket.set_recv_buffer_size(size).unwrap();
        }
        socket.bind(format!("{ip}:0").parse().unwrap()).unwrap();
        socket.connect(addr.parse().unwrap()).await.unwrap()
    });
    let stream = stream.into_std().unwrap();
    stream.set_nonblocking(false).unwrap();
    stream
}

/// Sends a Metadata request and reads its answer (its correlation id checked).
fn answered(s: &mut TcpStream, correlation_id: i32) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&metadata_request(correlation_id)).is_ok()
        && read_frame(s).is_some_and(|p| p[..4] == correlation_id.to_be_bytes())
}

/// Connects from `ip`; true if kroute closed the connection at once without answering.
fn refused_from(ip: &str, addr: &str) -> bool {
    let mut s = connect_from(ip, addr, None);
    let _ = s.write_all(&metadata_request(1)); // may already meet the close
    closed_within(&mut s, Duration::from_secs(5))
}

fn log_lines(kroute: &Kroute, part: &str) -> usize {
    kroute.logs().iter().filter(|l| l.contains(part)).count()
}

const MIB: f64 = 1024.0 * 1024.0;

#[test]
fn connections_over_the_limits_are_accepted_and_closed_at_once() {
    let _serial = serial();
    let kroute = kroute_with_limits("max_connections = 4\nmax_connections_per_ip = 2");
    let addr = kroute.bootstrap.clone();
    let refused_so_far = |reason: &str| {
        kroute.metric(
            "kroute_client_connections_refused_total",
            &[&format!("reason=\"{reason}\"")],
        )
    };
    // The readiness probes (three quick connections) may have met the per-IP limit already.
    let per_ip_before = refused_so_far("max_connections_per_ip");
    let total_before = refused_so_far("max_connections");
    let refused = |reason: &str| {
        let before = if reason == "max_connections" {
            total_before
        } else {
            per_ip_before
        };
        refused_so_far(reason) - before
    };

    // Two from 127.0.0.1 are served; the third and fourth are closed unanswered.
    let mut held: Vec<TcpStream> = (0..2)
        .map(|i| {
            let mut s = connect_from("127.0.0.1", &addr, None);
            assert!(answered(&mut s, 10 + i), "connection {i} from 127.0.0.1");
            s
        })
        .collect();
    let started = Instant::now();
    assert!(refused_from("127.0.0.1", &addr), "a third from 127.0.0.1");
    let closed_after = started.elapsed();
    assert!(refused_from("127.0.0.1", &addr), "a fourth from 127.0.0.1");
    assert_eq!(refused("max_connections_per_ip"), 2.0);

    // Two more from 127.0.0.2 reach max_connections = 4; 127.0.0.3's first is refused.
    for i in 0..2 {
        let mut s = connect_from("127.0.0.2", &addr, None);
        assert!(answered(&mut s, 20 + i), "connection {i} from 127.0.0.2");
        held.push(s);
    }
    assert!(refused_from("127.0.0.3", &addr), "a fifth in total");
    assert_eq!(refused("max_connections"), 1.0);
    assert_eq!(kroute.metric("kroute_client_connections_active", &[]), 4.0);
    // Those held are still served.
    for (i, s) in held.iter_mut().enumerate() {
        assert!(answered(s, 30 + i as i32), "held connection {i}");
    }

    // One closes: its address may connect again.
    drop(held.remove(0));
    wait_for(
        "the closed connection to be given back",
        Duration::from_secs(5),
        || (kroute.metric("kroute_client_connections_active", &[]) == 3.0).then_some(()),
    );
    let mut again = connect_from("127.0.0.1", &addr, None);
    assert!(answered(&mut again, 40), "127.0.0.1 again after one closed");
    drop(again);
    drop(held);
    wait_for(
        "every connection given back",
        Duration::from_secs(5),
        || (kroute.metric("kroute_client_connections_active", &[]) == 0.0).then_some(()),
    );

    // One WARN line per limit: the second refusal came within 10 s of the first.
    assert_eq!(
        log_lines(&kroute, "limits.max_connections_per_ip reached"),
        1
    );
    assert_eq!(log_lines(&kroute, "limits.max_connections reached"), 1);
    eprintln!("a refused connection was closed after {closed_after:?}");
    kroute.assert_clean_logs(&["client connection refused"]);
}

#[test]
fn a_request_larger_than_the_connection_limit_still_goes_and_reading_pauses_meanwhile() {
    let _serial = serial();
    // 64 KiB per connection; the Java producer sends requests of 200 KB records.
    let kroute = kroute_with_limits("max_buffered_bytes_per_connection = 65536");
    let topic = unique("limits-big");
    create_topic(&topic, 3, &[]);
    let run = java_on(
        "produce",
        &kroute.bootstrap,
        &topic,
        &[
            "--count",
            "60",
            "--record-size",
            "200000",
            "--id-prefix",
            "big-",
            "--timeout-ms",
            "60000",
        ],
    );
    assert_eq!(run.count("produced"), 60);
    assert_eq!(run.count("errors"), 0);
    let pauses = kroute.metric("kroute_client_read_pauses_total", &["limit=\"connection\""]);
    assert!(pauses >= 1.0, "reading never paused at 64 KiB");
    let consumed = java_on(
        "consume",
        &kroute.bootstrap,
        &topic,
        &["--expect", "60", "--timeout-ms", "60000"],
    );
    assert_eq!(consumed.count("unique"), 60);
    wait_for("nothing buffered", Duration::from_secs(10), || {
        (kroute.metric("kroute_client_buffered_bytes", &[]) == 0.0).then_some(())
    });
    let pauses = kroute.metric("kroute_client_read_pauses_total", &["limit=\"connection\""]);
    eprintln!("60 records of 200 KB produced and consumed through a 64 KiB limit; {pauses} pauses");
    // Pauses at the per-connection limit are routine: INFO, never WARN.
    kroute.assert_clean_logs(&[]);
}

#[test]
fn slowloris_and_idle_connections_are_closed_but_not_while_a_broker_owes_an_answer() {
    let _serial = serial();
    let kroute = kroute_with_limits("partial_frame_timeout_ms = 1000\nidle_timeout_ms = 3000");
    let timeouts = |reason: &str| {
        kroute.metric(
            "kroute_client_timeouts_total",
            &[&format!("reason=\"{reason}\"")],
        )
    };
    let topic = unique("limits-idle");
    create_topic_two_per_broker(&topic); // partition 0 is led by broker 1

    // A Fetch the broker holds 5 s (the topic is empty): longer than the idle timeout.
    let mut fetch = TcpStream::connect(format!("127.0.0.1:{}", kroute.port_base + 1)).unwrap();
    let fetch_sent = Instant::now();
    fetch
        .write_all(&long_poll_fetch(&topic, 0, 5_000, 42))
        .unwrap();

    // A request in two halves, within the timeout, is answered.
    let mut halves = TcpStream::connect(&kroute.bootstrap).unwrap();
    let request = metadata_request(7);
    halves.write_all(&request[..10]).unwrap();
    halves.write_all(&request[10..]).unwrap();
    halves
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    assert!(read_frame(&mut halves).is_some(), "a request in two writes");
    drop(halves);

    // Slowloris: half a request, then silence.
    let mut stalled = TcpStream::connect(&kroute.bootstrap).unwrap();
    stalled.write_all(&request[..20]).unwrap();
    let stalled_at = Instant::now();
    assert!(closed_within(&mut stalled, Duration::from_secs(5)));
    let stalled_closed = stalled_at.elapsed();

    // A trickle: one byte every 200 ms is activity, but the request never completes in time.
    let mut trickle = TcpStream::connect(&kroute.bootstrap).unwrap();
    let mut writer = trickle.try_clone().unwrap();
    let bytes = request.to_vec();
    let trickle_at = Instant::now();
    let trickling = std::thread::spawn(move || {
        for b in bytes.iter().take(40) {
            if writer.write_all(&[*b]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    assert!(closed_within(&mut trickle, Duration::from_secs(5)));
    let trickle_closed = trickle_at.elapsed();
    trickling.join().unwrap();

    // Idle: answered, then silent.
    let mut idle = TcpStream::connect(&kroute.bootstrap).unwrap();
    assert!(answered(&mut idle, 8));
    let idle_at = Instant::now();
    assert!(closed_within(&mut idle, Duration::from_secs(10)));
    let idle_closed = idle_at.elapsed();

    // The Fetch was held past the idle timeout and answered; then its connection idles out.
    fetch
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let answer = read_frame(&mut fetch).expect("the held Fetch was not answered");
    let held = fetch_sent.elapsed();
    assert_eq!(fetch_answer(&answer), (42, 0));
    assert!(closed_within(&mut fetch, Duration::from_secs(10)));
    // The broker answered 5 s after the Fetch was sent (perhaps before the test read it).
    let fetch_closed = fetch_sent.elapsed();

    eprintln!(
        "closed: stalled after {stalled_closed:?}, trickle after {trickle_closed:?}, idle after \
         {idle_closed:?}; Fetch answer read after {held:?}, connection closed {fetch_closed:?} after \
         the Fetch was sent"
    );
    let within = |d: Duration, lo: u64, hi: u64| {
        d >= Duration::from_millis(lo) && d <= Duration::from_millis(hi)
    };
    assert!(within(stalled_closed, 900, 2_500), "{stalled_closed:?}");
    assert!(within(trickle_closed, 900, 2_500), "{trickle_closed:?}");
    assert!(within(idle_closed, 2_900, 5_000), "{idle_closed:?}");
    assert!(held >= Duration::from_millis(4_500), "{held:?}");
    assert!(within(fetch_closed, 7_900, 11_000), "{fetch_closed:?}");
    assert_eq!(timeouts("partial_frame"), 2.0);
    wait_for("two idle closes counted", Duration::from_secs(5), || {
        (timeouts("idle") == 2.0).then_some(())
    });
    // One WARN for the two slowloris closes (rate-limited), INFO lines for idle ones.
    assert_eq!(log_lines(&kroute, "a request stayed incomplete"), 1);
    assert!(log_lines(&kroute, "closing idle client connection") >= 1);
    kroute.assert_clean_logs(&["a request stayed incomplete"]);
}

#[test]
fn a_client_that_never_reads_stops_being_read_and_others_keep_working() {
    let _serial = serial();
    // 1 MiB per connection and in total: two clients that never read hold the total.
    let kroute = kroute_with_limits(
        "max_buffered_bytes_per_connection = 1048576\nmax_buffered_bytes = 1048576",
    );
    // 4 MB in partition 0, led by broker 1: every Fetch from offset 0 answers about 1 MiB.
    let topic = unique("limits-unread");
    cluster(&["create-topic", &topic, "--replica-assignment", "1:2:3"]);
    librdkafka::produce(
        &cluster_bootstrap(),
        &topic,
        4000,
        librdkafka::Produce::default(),
    );
    let fetches = || kroute.metric("kroute_requests_total", &["api=\"Fetch\""]);
    let buffered = || kroute.metric("kroute_client_buffered_bytes", &[]);
    let rss_before = rss_bytes(kroute.pid());

    // Two clients pipeline 200 Fetches each (200 MiB of answers each) and never read.
    let broker1 = format!("127.0.0.1:{}", kroute.port_base + 1);
    let mut hostile = Vec::new();
    for c in 0..2 {
        let mut s = connect_from("127.0.0.1", &broker1, Some(4096));
        for i in 0..200 {
            s.write_all(&long_poll_fetch(&topic, 0, 100, c * 1000 + i))
                .unwrap();
        }
        hostile.push(s);
    }
    // Stalled: both paused, and no Fetch forwarded for a second.
    let mut last = (fetches(), Instant::now());
    wait_for(
        "kroute to stop reading them",
        Duration::from_secs(60),
        || {
            let now = fetches();
            if now != last.0 {
                last = (now, Instant::now());
            }
            let paused =
                kroute.metric("kroute_client_read_pauses_total", &["limit=\"connection\""]);
            (paused >= 2.0 && last.1.elapsed() >= Duration::from_secs(1)).then_some(())
        },
    );
    // Nothing more is forwarded; each connection holds at most its limit and the answers to
    // the (at most two) Fetches in flight when it paused: 3 MiB.
    let stalled_fetches = fetches();
    let mut peak: f64 = 0.0;
    let mut rss_peak = 0;
    let window = Instant::now();
    while window.elapsed() < Duration::from_secs(3) {
        peak = peak.max(buffered());
        rss_peak = rss_peak.max(rss_bytes(kroute.pid()));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(fetches(), stalled_fetches, "kroute kept forwarding Fetches");
    assert!(
        stalled_fetches < 60.0,
        "{stalled_fetches} of 400 Fetches forwarded"
    );
    assert!(
        peak >= 1.0 * MIB,
        "{peak} bytes buffered: the clients do not hold the total"
    );
    assert!(peak <= 6.0 * MIB, "{peak} bytes buffered");
    let grown = rss_peak.saturating_sub(rss_before);
    assert!(grown < 64 << 20, "RSS grew by {grown} bytes");

    // Everyone else is served: a connection holding nothing may read even over the total; its
    // second request waits for its first answer to be written.
    let mut other = TcpStream::connect(&kroute.bootstrap).unwrap();
    other
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    other
        .write_all(&[metadata_request(1), metadata_request(2)].concat())
        .unwrap();
    for id in [1i32, 2] {
        let answer = read_frame(&mut other).expect("the other connection's answer");
        assert_eq!(answer[..4], id.to_be_bytes());
    }
    assert!(kroute.metric("kroute_client_read_pauses_total", &["limit=\"total\""]) >= 1.0);
    // A real client, producing and consuming through kroute meanwhile.
    let other_topic = unique("limits-others");
    create_topic(&other_topic, 3, &[]);
    let acked = librdkafka::produce(
        &kroute.bootstrap,
        &other_topic,
        300,
        librdkafka::Produce::default(),
    );
    assert_eq!(acked.len(), 300);
    let read = librdkafka::consume_all(&kroute.bootstrap, &other_topic, 300);
    assert_eq!(read.len(), 300);

    // Closed, the hostile connections give everything back.
    drop(hostile);
    wait_for("nothing buffered", Duration::from_secs(10), || {
        (buffered() == 0.0).then_some(())
    });
    eprintln!(
        "never-reading clients: {stalled_fetches} of 400 Fetches forwarded, buffered peak \
         {:.2} MiB, RSS {:.1} MiB before, peak {:.1} MiB (+{:.1} MiB)",
        peak / MIB,
        rss_before as f64 / MIB,
        rss_peak as f64 / MIB,
        grown as f64 / MIB
    );
    kroute.assert_clean_logs(&["client reads paused"]);
}
