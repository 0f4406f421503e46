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

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::shutdown::{fetch_answer, long_poll_fetch};
use common::*;
use kafka_protocol::messages::{ApiKey, MetadataRequest};
use kroute::client::limits::LOG_EVERY;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// How long these tests wait for what kroute does at once or at a timeout of a few seconds:
/// far more than a loaded machine adds, and far less than a wrong kroute would take (a served
/// connection stays open for the default `idle_timeout_ms`, 10 minutes).
const PATIENCE: Duration = Duration::from_secs(60);

/// kroute's idle clock keeps whole milliseconds: an idle close may come a millisecond before
/// the exact limit.
const CLOCK_SLACK: Duration = Duration::from_millis(5);

/// A metric of kroute's, asked again if /metrics does not answer (a loaded machine): never the
/// 0 an unanswered scrape would read as.
fn scrape(kroute: &Kroute, name: &str, labels: &[&str]) -> f64 {
    wait_for("kroute's /metrics", PATIENCE, || {
        http_get(&kroute.admin, "/metrics")
            .filter(|(status, _)| *status == 200)
            .map(|(_, body)| metric_sum(&body, name, labels))
    })
}

/// kroute with these `[limits]` keys.
fn kroute_with_limits(limits: &str) -> Kroute {
    let kroute = Kroute::start_with(KrouteOptions {
        extra_toml: format!("[limits]\n{limits}\n"),
        ..Default::default()
    });
    // The readiness probes' connections have gone.
    wait_for("no client connection open", PATIENCE, || {
        (scrape(&kroute, "kroute_client_connections_active", &[]) == 0.0).then_some(())
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
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s.write_all(&metadata_request(correlation_id)).is_ok()
        && read_frame(s).is_some_and(|p| p[..4] == correlation_id.to_be_bytes())
}

/// Reads `s` until kroute closes it (EOF or reset): Some(bytes read meanwhile), or None if it
/// is still open after `timeout`.
fn read_until_closed(s: &mut TcpStream, timeout: Duration) -> Option<usize> {
    let deadline = Instant::now() + timeout;
    let mut buf = [0u8; 4096];
    let mut got = 0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => return Some(got),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                return None;
            }
            Err(_) => return Some(got),
        }
    }
}

/// Connects from `ip` and sends a request: the connection's own address if kroute closed it
/// without answering (within [`PATIENCE`]: far below the 10 minutes a served connection would
/// stay open), else None.
fn refused_from(ip: &str, addr: &str) -> Option<SocketAddr> {
    let mut s = connect_from(ip, addr, None);
    let local = s.local_addr().unwrap();
    let _ = s.write_all(&metadata_request(1)); // may already meet the close
    (read_until_closed(&mut s, PATIENCE) == Some(0)).then_some(local)
}

fn log_lines(kroute: &Kroute, part: &str) -> usize {
    kroute.logs().iter().filter(|l| l.contains(part)).count()
}

/// `lines` lines of one rate-limited kind, for events that all happened within `window` (as
/// this test measured it, around them): the first event is always logged, then at most one
/// line per [`LOG_EVERY`] of kroute's clock (whole milliseconds: a millisecond less at worst).
/// On a machine that took less than LOG_EVERY for all of them, that is exactly one line.
fn assert_rate_limited(what: &str, lines: usize, window: Duration) {
    let most = 1 + window.as_millis() / (LOG_EVERY.as_millis() - 1);
    assert!(
        lines >= 1 && lines as u128 <= most,
        "{lines} `{what}` lines for events within {window:?}: one at least, then one per \
         {LOG_EVERY:?} at most"
    );
}

const MIB: f64 = 1024.0 * 1024.0;

#[test]
fn connections_over_the_limits_are_accepted_and_closed_at_once() {
    let _serial = serial();
    // Every refusal (the readiness probes' too) and its log line come after this.
    let started = Instant::now();
    let kroute = kroute_with_limits("max_connections = 4\nmax_connections_per_ip = 2");
    let addr = kroute.bootstrap.clone();
    let refused_so_far = |reason: &str| {
        scrape(
            &kroute,
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
    // kroute refuses both between these two instants.
    let pair_from = Instant::now();
    let third =
        refused_from("127.0.0.1", &addr).expect("a third from 127.0.0.1 was not closed unanswered");
    let closed_after = pair_from.elapsed();
    let fourth = refused_from("127.0.0.1", &addr)
        .expect("a fourth from 127.0.0.1 was not closed unanswered");
    let pair_span = pair_from.elapsed();
    assert_eq!(refused("max_connections_per_ip"), 2.0);

    // Two more from 127.0.0.2 reach max_connections = 4; 127.0.0.3's first is refused.
    for i in 0..2 {
        let mut s = connect_from("127.0.0.2", &addr, None);
        assert!(answered(&mut s, 20 + i), "connection {i} from 127.0.0.2");
        held.push(s);
    }
    assert!(
        refused_from("127.0.0.3", &addr).is_some(),
        "a fifth in total was not closed unanswered"
    );
    assert_eq!(refused("max_connections"), 1.0);
    assert_eq!(
        scrape(&kroute, "kroute_client_connections_active", &[]),
        4.0
    );
    // Those held are still served.
    for (i, s) in held.iter_mut().enumerate() {
        assert!(answered(s, 30 + i as i32), "held connection {i}");
    }

    // One closes: its address may connect again.
    drop(held.remove(0));
    wait_for("the closed connection to be given back", PATIENCE, || {
        (scrape(&kroute, "kroute_client_connections_active", &[]) == 3.0).then_some(())
    });
    let mut again = connect_from("127.0.0.1", &addr, None);
    assert!(answered(&mut again, 40), "127.0.0.1 again after one closed");
    drop(again);
    drop(held);
    wait_for("every connection given back", PATIENCE, || {
        (scrape(&kroute, "kroute_client_connections_active", &[]) == 0.0).then_some(())
    });

    // WARN lines, rate-limited per limit. The one refusal over max_connections has its line.
    let per_ip_lines: Vec<String> = kroute
        .logs()
        .into_iter()
        .filter(|l| l.contains("limits.max_connections_per_ip reached"))
        .collect();
    assert_rate_limited(
        "limits.max_connections_per_ip reached",
        per_ip_lines.len(),
        started.elapsed(),
    );
    // The third and fourth came less than LOG_EVERY apart: not both have a line of their own.
    if pair_span < LOG_EVERY - Duration::from_secs(1) {
        let own = |peer: SocketAddr| {
            let field = format!("peer={peer}");
            per_ip_lines
                .iter()
                .filter(|l| l.split_whitespace().any(|w| w == field))
                .count()
        };
        assert!(
            own(third) + own(fourth) <= 1,
            "two refusals {pair_span:?} apart both logged:\n{}",
            per_ip_lines.join("\n")
        );
    }
    assert_eq!(log_lines(&kroute, "limits.max_connections reached"), 1);
    eprintln!(
        "a refused connection was closed after {closed_after:?}; two refusals took {pair_span:?}"
    );
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
    let pauses = scrape(
        &kroute,
        "kroute_client_read_pauses_total",
        &["limit=\"connection\""],
    );
    assert!(pauses >= 1.0, "reading never paused at 64 KiB");
    let consumed = java_on(
        "consume",
        &kroute.bootstrap,
        &topic,
        &["--expect", "60", "--timeout-ms", "60000"],
    );
    assert_eq!(consumed.count("unique"), 60);
    wait_for("nothing buffered", PATIENCE, || {
        (scrape(&kroute, "kroute_client_buffered_bytes", &[]) == 0.0).then_some(())
    });
    let pauses = scrape(
        &kroute,
        "kroute_client_read_pauses_total",
        &["limit=\"connection\""],
    );
    eprintln!("60 records of 200 KB produced and consumed through a 64 KiB limit; {pauses} pauses");
    // Pauses at the per-connection limit are routine: INFO, never WARN.
    kroute.assert_clean_logs(&[]);
}

#[test]
fn slowloris_and_idle_connections_are_closed_but_not_while_a_broker_owes_an_answer() {
    let _serial = serial();
    const PARTIAL: Duration = Duration::from_millis(1_000);
    const IDLE: Duration = Duration::from_millis(3_000);
    let kroute = kroute_with_limits(&format!(
        "partial_frame_timeout_ms = {}\nidle_timeout_ms = {}",
        PARTIAL.as_millis(),
        IDLE.as_millis()
    ));
    let timeouts = |reason: &str| {
        scrape(
            &kroute,
            "kroute_client_timeouts_total",
            &[&format!("reason=\"{reason}\"")],
        )
    };
    let topic = unique("limits-idle");
    create_topic_two_per_broker(&topic); // partition 0 is led by broker 1
    // Idle closes counted from here: the Fetch's connection may idle out at any time after
    // its answer, 5 s from now at the earliest.
    let idle_before = timeouts("idle");

    // A Fetch the broker holds 5 s (the topic is empty): longer than the idle timeout.
    let mut fetch = TcpStream::connect(format!("127.0.0.1:{}", kroute.port_base + 1)).unwrap();
    let fetch_sent = Instant::now();
    fetch
        .write_all(&long_poll_fetch(&topic, 0, 5_000, 42))
        .unwrap();

    // Every close for an incomplete request (and its WARN line) comes from here on.
    let slowloris_from = Instant::now();

    // A request in two writes, the second well within the timeout of the first, is answered.
    // The gap between the writes is this thread's: held up past the timeout (a loaded machine),
    // kroute is right to close the connection, and the attempt shows nothing; it is made again.
    let request = metadata_request(7);
    let (gap, answer) = (0..10)
        .find_map(|_| {
            let mut halves = TcpStream::connect(&kroute.bootstrap).unwrap();
            halves.set_nodelay(true).unwrap();
            let first = Instant::now();
            let written = halves.write_all(&request[..10]).is_ok()
                && halves.write_all(&request[10..]).is_ok();
            let gap = first.elapsed();
            halves.set_read_timeout(Some(PATIENCE)).unwrap();
            let answer = if written {
                read_frame(&mut halves)
            } else {
                None
            };
            (gap < PARTIAL / 2).then_some((gap, answer))
        })
        .expect("ten times, this thread was held up half the timeout between two writes");
    assert!(
        answer.is_some(),
        "a request in two writes {gap:?} apart was not answered"
    );
    // Counted from here: an attempt given up on above may have been closed for its request.
    let partial_before = timeouts("partial_frame");

    // Slowloris: part of a request, then silence. kroute's clock starts when it reads the
    // first byte, after `stalled_from`.
    let mut stalled = TcpStream::connect(&kroute.bootstrap).unwrap();
    let stalled_from = Instant::now();
    stalled.write_all(&request[..20]).unwrap();
    assert_eq!(
        read_until_closed(&mut stalled, PATIENCE),
        Some(0),
        "the stalled connection was not closed"
    );
    let stalled_closed = stalled_from.elapsed();
    // For its incomplete request: only these two connections can be closed for that.
    assert_eq!(timeouts("partial_frame"), partial_before + 1.0);

    // A trickle: one byte every 200 ms is activity, but the request never completes: its
    // frame is longer than the 150 bytes (30 s) the trickle has. The partial-frame timeout
    // closes it while bytes are still coming, the trickle cut short.
    let mut trickle = TcpStream::connect(&kroute.bootstrap).unwrap();
    trickle.set_nodelay(true).unwrap();
    let mut writer = trickle.try_clone().unwrap();
    let mut frame = vec![0u8; 4 + 200];
    frame[..4].copy_from_slice(&200i32.to_be_bytes());
    let trickle_from = Instant::now();
    let trickling = std::thread::spawn(move || {
        for b in frame.iter().take(150) {
            if writer.write_all(&[*b]).is_err() {
                return true; // the connection is gone: cut short
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        false
    });
    assert_eq!(
        read_until_closed(&mut trickle, PATIENCE),
        Some(0),
        "the trickling connection was not closed"
    );
    let trickle_closed = trickle_from.elapsed();
    let slowloris_window = slowloris_from.elapsed();
    assert!(
        trickling.join().unwrap(),
        "the trickling connection was closed only once the trickle had ended: its bytes held \
         the partial-frame clock back"
    );
    assert_eq!(timeouts("partial_frame"), partial_before + 2.0);

    // Idle: answered, then silent. Its last activity (the answer) came after `idle_from`.
    let mut idle = TcpStream::connect(&kroute.bootstrap).unwrap();
    let idle_from = Instant::now();
    assert!(answered(&mut idle, 8));
    assert_eq!(
        read_until_closed(&mut idle, PATIENCE),
        Some(0),
        "the idle connection was not closed"
    );
    let idle_closed = idle_from.elapsed();
    // The Fetch's connection may have idled out already too (on a slow run).
    assert!(timeouts("idle") >= idle_before + 1.0);

    // The Fetch was held past the idle timeout and answered; then its connection idles out.
    fetch.set_read_timeout(Some(PATIENCE)).unwrap();
    let answer = read_frame(&mut fetch).expect("the held Fetch was not answered");
    let held = fetch_sent.elapsed();
    assert_eq!(fetch_answer(&answer), (42, 0));
    assert_eq!(
        read_until_closed(&mut fetch, PATIENCE),
        Some(0),
        "the Fetch's connection was not closed"
    );
    // The broker answered 5 s after the Fetch was sent at the earliest (perhaps before the test
    // read it): kroute's idle clock for that connection started then.
    let fetch_closed = fetch_sent.elapsed();

    eprintln!(
        "closed: stalled after {stalled_closed:?}, trickle after {trickle_closed:?}, idle after \
         {idle_closed:?}; Fetch answer read after {held:?}, connection closed {fetch_closed:?} after \
         the Fetch was sent"
    );
    // Not before their timeouts, counted from instants taken before kroute's clocks started.
    // (How soon after is not for a loaded machine to promise: kroute's counters above say why
    // each connection closed, and the trickle was cut short, long before its 30 s ran out.)
    assert!(stalled_closed >= PARTIAL, "{stalled_closed:?}");
    assert!(trickle_closed >= PARTIAL, "{trickle_closed:?}");
    assert!(idle_closed + CLOCK_SLACK >= IDLE, "{idle_closed:?}");
    assert!(held >= Duration::from_millis(4_500), "{held:?}");
    assert!(
        fetch_closed >= Duration::from_millis(7_900),
        "{fetch_closed:?}"
    );
    assert_eq!(timeouts("partial_frame"), partial_before + 2.0);
    assert_eq!(timeouts("idle"), idle_before + 2.0);
    // One WARN for the slowloris closes (rate-limited), INFO lines for idle ones.
    assert_rate_limited(
        "a request stayed incomplete",
        log_lines(&kroute, "a request stayed incomplete"),
        slowloris_window,
    );
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
    let fetches = || scrape(&kroute, "kroute_requests_total", &["api=\"Fetch\""]);
    let buffered = || scrape(&kroute, "kroute_client_buffered_bytes", &[]);
    let pauses = |limit: &str| {
        scrape(
            &kroute,
            "kroute_client_read_pauses_total",
            &[&format!("limit=\"{limit}\"")],
        )
    };
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
    // Stalled: both paused, every Fetch kroute took answered by the broker, and none taken for
    // a second. (A connection may pause more than once: an answer smaller than the room it
    // reserved, or bytes the kernel still takes, let it read a little more first. Once every
    // Fetch it took is answered and nothing moves, nothing can free room again.)
    let answered = || {
        scrape(
            &kroute,
            "kroute_upstream_request_duration_seconds_count",
            &["api=\"Fetch\""],
        )
    };
    let mut last = (fetches(), Instant::now());
    wait_for("kroute to stop reading them", PATIENCE, || {
        let now = fetches();
        if now != last.0 {
            last = (now, Instant::now());
        }
        let paused = pauses("connection") + pauses("total") >= 2.0;
        let quiet = last.1.elapsed() >= Duration::from_secs(1);
        (paused && quiet && answered() >= now).then_some(())
    });
    let stalled_fetches = fetches();
    // The answers to the Fetches taken are in: the clients hold the total.
    assert!(buffered() >= 1.0 * MIB, "{} bytes buffered", buffered());
    // Nothing more is forwarded; each connection holds at most its limit and the answers to
    // the (at most two) Fetches in flight when it paused: 3 MiB.
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
    let total_pauses = pauses("total");
    let mut other = TcpStream::connect(&kroute.bootstrap).unwrap();
    other.set_read_timeout(Some(PATIENCE)).unwrap();
    other
        .write_all(&[metadata_request(1), metadata_request(2)].concat())
        .unwrap();
    for id in [1i32, 2] {
        let answer = read_frame(&mut other).expect("the other connection's answer");
        assert_eq!(answer[..4], id.to_be_bytes());
    }
    assert!(
        pauses("total") >= total_pauses + 1.0,
        "the other connection's second request did not wait for the total"
    );
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
    let read = librdkafka::consume_all(&kroute.bootstrap, &other_topic);
    assert_eq!(read.len(), 300);

    // Closed, the hostile connections give everything back.
    drop(hostile);
    wait_for("nothing buffered", PATIENCE, || {
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
