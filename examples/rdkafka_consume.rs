//! A librdkafka performance consumer: Kafka's `ConsumerPerformance` (the Java consumer perf
//! test) for librdkafka, so bench/passthrough.sh's fetch phase can read with either client
//! (`BENCH_FETCH_CLIENT=librdkafka`).
//!
//! ```text
//! cargo build --release --example rdkafka_consume
//! target/release/examples/rdkafka_consume BOOTSTRAP TOPIC RECORDS [k=v ...]
//! ```
//!
//! - Reads RECORDS records of TOPIC from the earliest offset in a fresh consumer group
//!   (`kroute-bench-rdkafka-<pid>-<ms>`), with librdkafka's defaults otherwise; `k=v` client
//!   properties go to librdkafka as they are (and override the ones above).
//! - Fails (exit 1) if no record arrives for 60 s, or on a consumer error.
//! - stdout: ONE line at the end, in the format of ConsumerPerformance's result line
//!   (`start, end, MB, MB/s, records, records/s, rebalance ms, fetch ms, fetch MB/s, fetch
//!   records/s`), MB counted from record values (MiB, as Kafka's tool does). "fetch" is the time
//!   from the first record to the last, without the group join before it.
//! - `RDKAFKA_CONSUME_HOLD_S=N`: after the result line, stays in its group for N s more, polling
//!   at the log end (bench/fetch_memory.sh: what consumers that caught up cost kroute).
//! - `RDKAFKA_CONSUME_IDLE_END_MS=N`: also ends once no record came for N ms (since its last
//!   record, or since it got partitions if none came), with what it read; RECORDS 0 then means
//!   no count to reach (bench/fetch_group.sh: a member of a group reads its partitions to their
//!   end, without knowing how much is there).
//! - `RDKAFKA_CONSUME_GO=PATH`: first creates `PATH.ready.<pid>`, then waits for PATH to exist
//!   before it joins its group, so that many members started one by one join at once.
//! - `RDKAFKA_CONSUME_RTT=1`: also prints, on a second stdout line, the round-trip time of
//!   librdkafka's requests to the brokers while records came (almost all of them Fetch
//!   requests): `fetch_rtt_ms mean=.. p50=.. p99=.. max=.. requests=..`. librdkafka keeps a
//!   histogram per broker over each statistics interval (here 100 ms) and reports its count,
//!   sum, percentiles and maximum; mean and max are exact over the windows, p50 and p99 are
//!   estimated from the windows' own p50 and p99, each weighted by its requests (a window holds
//!   a few requests per broker, so its p99 is about its maximum: the estimate errs high).
//!   Windows that began before the first record or ended after the last are left out: Fetch
//!   requests at the log end wait up to `fetch.wait.max.ms` on purpose.

use std::process::ExitCode;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::message::Message;
use rdkafka::statistics::Statistics;
use rdkafka::{ClientConfig, ClientContext};

/// The statistics interval with `RDKAFKA_CONSUME_RTT=1`.
const RTT_WINDOW: Duration = Duration::from_millis(100);

/// One broker's round trips over one statistics window.
struct RttWindow {
    end: Instant,
    requests: i64,
    sum_us: i64,
    p50_us: i64,
    p99_us: i64,
    max_us: i64,
}

/// Collects the brokers' round-trip windows from librdkafka's statistics.
#[derive(Default)]
struct RttStats(Mutex<Vec<RttWindow>>);

impl ClientContext for RttStats {
    fn stats(&self, statistics: Statistics) {
        let end = Instant::now();
        let mut windows = self.0.lock().unwrap_or_else(|e| e.into_inner());
        // Real brokers only: not the bootstrap addresses (node -1) or the logical
        // coordinator entry (its requests are the group's, not fetches).
        for broker in statistics.brokers.values() {
            if broker.nodeid < 0 || broker.source == "logical" {
                continue;
            }
            if let Some(rtt) = broker.rtt.as_ref().filter(|w| w.cnt > 0) {
                windows.push(RttWindow {
                    end,
                    requests: rtt.cnt,
                    sum_us: rtt.sum,
                    p50_us: rtt.p50,
                    p99_us: rtt.p99,
                    max_us: rtt.max,
                });
            }
        }
    }
}

impl ConsumerContext for RttStats {}

/// How long to wait for the next record before giving up.
const IDLE_LIMIT: Duration = Duration::from_secs(60);

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rdkafka_consume: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [bootstrap, topic, records, props @ ..] = args.as_slice() else {
        return Err("usage: rdkafka_consume BOOTSTRAP TOPIC RECORDS [k=v ...]".into());
    };
    let records: u64 = records.parse().map_err(|e| format!("RECORDS: {e}"))?;
    let start_wall = SystemTime::now();
    let group = format!(
        "kroute-bench-rdkafka-{}-{}",
        std::process::id(),
        start_wall
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    );
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("group.id", &group)
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false");
    for prop in props {
        let (k, v) = prop
            .split_once('=')
            .ok_or_else(|| format!("not k=v: {prop}"))?;
        config.set(k, v);
    }
    let idle_end = std::env::var("RDKAFKA_CONSUME_IDLE_END_MS").ok();
    let idle_end = idle_end
        .map(|ms| ms.parse().map(Duration::from_millis))
        .transpose()
        .map_err(|e| format!("RDKAFKA_CONSUME_IDLE_END_MS: {e}"))?;
    let hold = std::env::var("RDKAFKA_CONSUME_HOLD_S").map_or(Ok(0), |s| s.parse::<u64>());
    let hold = Duration::from_secs(hold.map_err(|e| format!("RDKAFKA_CONSUME_HOLD_S: {e}"))?);
    if records == 0 && idle_end.is_none() {
        return Err("RECORDS 0 needs RDKAFKA_CONSUME_IDLE_END_MS".into());
    }
    let rtt = std::env::var("RDKAFKA_CONSUME_RTT").is_ok_and(|v| v == "1");
    if rtt {
        config.set("statistics.interval.ms", RTT_WINDOW.as_millis().to_string());
    }
    if let Ok(go) = std::env::var("RDKAFKA_CONSUME_GO") {
        wait_for_go(&go)?;
    }
    let consumer: BaseConsumer<RttStats> = config
        .create_with_context(RttStats::default())
        .map_err(|e| e.to_string())?;
    consumer.subscribe(&[topic]).map_err(|e| e.to_string())?;

    let start = Instant::now();
    let (mut count, mut bytes) = (0u64, 0u64);
    let (mut first, mut last) = (None, start);
    // Since when it has had partitions, while no record came: a member whose partitions were
    // read to their end before they came to it (a rebalance) ends too.
    let mut assigned = None;
    while records == 0 || count < records {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(message)) => {
                let now = Instant::now();
                first.get_or_insert(now);
                last = now;
                count += 1;
                bytes += message.payload().map_or(0, |p| p.len() as u64);
            }
            Some(Err(e)) => return Err(format!("consumer error: {e}")),
            None if idle_end
                .is_some_and(|d| idle_since(&consumer, first, last, &mut assigned) > d) =>
            {
                break;
            }
            None if last.elapsed() > IDLE_LIMIT => {
                return Err(format!(
                    "no record for {IDLE_LIMIT:?} after {count} records"
                ));
            }
            None => {}
        }
    }
    println!(
        "{}",
        result_line(start_wall, start, first, last, count, bytes)
    );
    if rtt {
        let windows = consumer
            .context()
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        println!("{}", rtt_line(&windows, first, last));
    }
    if !hold.is_zero() {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let held = Instant::now();
        while held.elapsed() < hold {
            if let Some(Err(e)) = consumer.poll(Duration::from_millis(100)) {
                return Err(format!("consumer error at the log end: {e}"));
            }
        }
    }
    Ok(())
}

/// The `fetch_rtt_ms` line (see the module's doc) from the windows that lay wholly between the
/// first record and the last.
fn rtt_line(windows: &[RttWindow], first: Option<Instant>, last: Instant) -> String {
    let from = first.map(|f| f + RTT_WINDOW);
    let inside: Vec<&RttWindow> = windows
        .iter()
        .filter(|w| from.is_some_and(|f| w.end >= f) && w.end <= last)
        .collect();
    let requests: i64 = inside.iter().map(|w| w.requests).sum();
    let sum: i64 = inside.iter().map(|w| w.sum_us).sum();
    let ms = |us: Option<f64>| us.map_or("-".to_string(), |us| format!("{:.2}", us / 1e3));
    let max = inside.iter().map(|w| w.max_us as f64).reduce(f64::max);
    // The histogram's buckets can put a percentile a little above the exact maximum.
    let at_most_max = |v: Option<f64>| v.zip(max).map(|(v, m)| v.min(m));
    format!(
        "fetch_rtt_ms mean={} p50={} p99={} max={} requests={requests}",
        ms((requests > 0).then(|| sum as f64 / requests as f64)),
        ms(at_most_max(weighted_quantile(&inside, |w| w.p50_us, 0.5))),
        ms(at_most_max(weighted_quantile(&inside, |w| w.p99_us, 0.99))),
        ms(max),
    )
}

/// The `q` quantile of `value` over `windows`, each counted as many times as it had requests.
fn weighted_quantile(
    windows: &[&RttWindow],
    value: impl Fn(&RttWindow) -> i64,
    q: f64,
) -> Option<f64> {
    let mut points: Vec<(i64, i64)> = windows.iter().map(|w| (value(w), w.requests)).collect();
    points.sort_unstable();
    let total: i64 = points.iter().map(|p| p.1).sum();
    let rank = (q * total as f64).ceil() as i64;
    let mut seen = 0;
    points.into_iter().find_map(|(v, n)| {
        seen += n;
        (seen >= rank).then_some(v as f64)
    })
}

/// How long no record came: since the last one, or since partitions were assigned if none came.
fn idle_since(
    consumer: &BaseConsumer<RttStats>,
    first: Option<Instant>,
    last: Instant,
    assigned: &mut Option<Instant>,
) -> Duration {
    if first.is_some() {
        return last.elapsed();
    }
    if assigned.is_none() && consumer.assignment().is_ok_and(|a| a.count() > 0) {
        *assigned = Some(Instant::now());
    }
    assigned.map_or(Duration::ZERO, |at| at.elapsed())
}

/// Says it is ready (`GO.ready.<pid>`), then waits for the file GO (at most [`IDLE_LIMIT`]).
fn wait_for_go(go: &str) -> Result<(), String> {
    let ready = format!("{go}.ready.{}", std::process::id());
    std::fs::write(&ready, b"").map_err(|e| format!("{ready}: {e}"))?;
    let since = Instant::now();
    while !std::path::Path::new(go).exists() {
        if since.elapsed() > IDLE_LIMIT {
            return Err(format!("{go} did not appear within {IDLE_LIMIT:?}"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// ConsumerPerformance's result line for `count` records of `bytes` read from `start` on.
fn result_line(
    start_wall: SystemTime,
    start: Instant,
    first: Option<Instant>,
    last: Instant,
    count: u64,
    bytes: u64,
) -> String {
    let total = last.duration_since(start);
    let first = first.unwrap_or(start);
    let fetch = last.duration_since(first);
    let rebalance = first.duration_since(start);
    let mb = bytes as f64 / (1024.0 * 1024.0);
    let per_s = |x: f64, d: Duration| x / d.as_secs_f64().max(1e-9);
    format!(
        "{}, {}, {mb:.4}, {:.4}, {count}, {:.4}, {}, {}, {:.4}, {:.4}",
        timestamp(start_wall),
        timestamp(start_wall + total),
        per_s(mb, total),
        per_s(count as f64, total),
        rebalance.as_millis(),
        fetch.as_millis(),
        per_s(mb, fetch),
        per_s(count as f64, fetch),
    )
}

/// `YYYY-MM-DD HH:MM:SS:mmm` in UTC, as ConsumerPerformance prints its times.
fn timestamp(at: SystemTime) -> String {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs() as i64;
    let (days, of_day) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}:{:03}",
        of_day / 3600,
        of_day / 60 % 60,
        of_day % 60,
        since.subsec_millis()
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (H. Hinnant's civil_from_days).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}
