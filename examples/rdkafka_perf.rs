//! A librdkafka performance producer: Kafka's `ProducerPerformance` (the Java perf test) for
//! librdkafka, so bench/routing.sh can run either client (`BENCH_CLIENT=librdkafka`).
//!
//! ```text
//! cargo build --release --example rdkafka_perf
//! target/release/examples/rdkafka_perf BOOTSTRAP TOPIC RECORDS RECORD_SIZE THROUGHPUT [k=v ...]
//! target/release/examples/rdkafka_perf --version
//! ```
//!
//! (bench/skew.sh also uses it as a keyed load generator: see `kroute.keys` below.)
//!
//! - RECORDS keyless records (no key: librdkafka's default partitioner, sticky for
//!   `sticky.partitioning.linger.ms` with keyless records), each a payload of RECORD_SIZE random
//!   uppercase letters (one buffer, reused for every record, like ProducerPerformance's);
//! - THROUGHPUT records/s (each record is sent at its due time start + i / THROUGHPUT, the
//!   delivery reports are served while waiting), -1 = as fast as possible: when librdkafka's queue
//!   is full (`QueueFull`, `queue.buffering.max.kbytes` / `.messages`) it serves delivery reports
//!   for 1 ms and tries again, as the Java producer's `send()` blocks on a full `buffer.memory`;
//! - `k=v` client properties, passed to librdkafka as they are (e.g. `acks=all linger.ms=5
//!   enable.idempotence=true`); the example sets only `bootstrap.servers`, `log_level` 4
//!   (warnings) and `statistics.interval.ms=500` (for the retry and producer-id counts below);
//!   a `k=v` overrides them;
//! - two pseudo-properties, taken out before the rest go to librdkafka (for bench/skew.sh):
//!   - `kroute.keys=N`: every record gets a key, drawn uniformly at random from N keys
//!     (`key-0` .. `key-<N-1>`), so librdkafka's default partitioner (`consistent_random`: a
//!     hash of the key) spreads the records over all partitions of the topic, ~1/P each with N
//!     well above the partition count P; without it records are keyless, as before;
//!   - `kroute.key_every=K` (with `kroute.keys`): only records 0, K, 2K, ... get a key, the others
//!     none (K = 2: batches that mix keyed and keyless records, for bench/coverage.sh);
//!   - `kroute.seconds=S`: stop sending after S seconds (RECORDS is then an upper bound), flush
//!     what was sent and report it; all sent records must be acknowledged.
//!
//! Latency is per record, from the first `send()` attempt to its delivery report (the
//! ProducerPerformance definition, queueing in the client included). Output:
//!
//! - stdout: ONE line at the end, in the format of ProducerPerformance's final summary
//!   (`N records sent, R records/sec (M MB/sec), A ms avg latency, X ms max latency, P ms 50th,
//!   P ms 95th, P ms 99th, P ms 99.9th.`): records and MB counted from successful deliveries, over
//!   the time from the first send to the end of the final flush; percentiles are whole ms taken
//!   like ProducerPerformance's (sorted, index `p x count`); avg and max are not truncated to
//!   whole ms;
//! - stderr: librdkafka's log lines (`ERROR` for levels 0-3, `WARN` for 4, ...), client errors
//!   (`WARN`, or `ERROR` when fatal), and one last line `rdkafka_perf: librdkafka V, statistics:
//!   txretries=N txerrs=N req_timeouts=N epoch_cnt=N producer_id=N` (sums over the brokers;
//!   `epoch_cnt`: producer id assignments, 1 for an idempotent producer that never bumped its
//!   epoch, 0 without idempotence);
//! - exit status 1 and an `ERROR` line naming the first error (and how many records failed) if
//!   any delivery failed, or a fatal error occurred, or the final flush timed out.

use std::process::ExitCode;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::statistics::Statistics;
use rdkafka::util::get_rdkafka_version;

const USAGE: &str = "usage: rdkafka_perf BOOTSTRAP TOPIC RECORDS RECORD_SIZE THROUGHPUT [k=v ...] \
                     (THROUGHPUT records/s, -1 = as fast as possible)";

/// What the delivery reports add up to.
struct Tally {
    ok: u64,
    bytes: u64,
    /// Latency of every successful record, microseconds.
    latencies_us: Vec<u32>,
    sum_us: u64,
    max_us: u64,
    failed: u64,
    first_error: Option<String>,
}

/// The last statistics librdkafka emitted, summed over its brokers.
#[derive(Default, Clone, Copy)]
struct Counters {
    txretries: u64,
    txerrs: u64,
    req_timeouts: u64,
    epoch_cnt: i64,
    producer_id: i64,
}

struct Perf {
    start: Instant,
    tally: Mutex<Tally>,
    counters: Mutex<Counters>,
    fatal: Mutex<Option<String>>,
    /// The last client error printed: rdkafka hands a producer's error events to the context
    /// twice (once while polling the queue, once in `BaseProducer::poll`).
    last_error: Mutex<String>,
}

impl ClientContext for Perf {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        let name = match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => "ERROR",
            RDKafkaLogLevel::Warning => "WARN",
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => "INFO",
            RDKafkaLogLevel::Debug => "DEBUG",
        };
        eprintln!("rdkafka_perf: {name} librdkafka {fac}: {log_message}");
    }

    fn stats(&self, s: Statistics) {
        let mut c = Counters::default();
        for b in s.brokers.values() {
            c.txretries += b.txretries;
            c.txerrs += b.txerrs;
            c.req_timeouts += b.req_timeouts;
        }
        if let Some(eos) = &s.eos {
            c.epoch_cnt = eos.epoch_cnt;
            c.producer_id = eos.producer_id;
        }
        *self.counters.lock().unwrap() = c;
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let msg = format!("{error}: {reason}");
        {
            let mut last = self.last_error.lock().unwrap();
            if *last == msg {
                return;
            }
            last.clone_from(&msg);
        }
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::Fatal) {
            eprintln!("rdkafka_perf: ERROR librdkafka fatal error: {msg}");
            self.fatal.lock().unwrap().get_or_insert(msg);
        } else {
            eprintln!("rdkafka_perf: WARN librdkafka client error: {msg}");
        }
    }
}

impl ProducerContext for Perf {
    /// When the record was first offered to `send()`: nanoseconds since `start`.
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, sent_ns: usize) {
        let now_ns = self.start.elapsed().as_nanos() as u64;
        let mut t = self.tally.lock().unwrap();
        match result {
            Ok(m) => {
                let us = now_ns.saturating_sub(sent_ns as u64) / 1000;
                t.ok += 1;
                t.bytes += m.payload_len() as u64;
                t.latencies_us.push(us.min(u64::from(u32::MAX)) as u32);
                t.sum_us += us;
                t.max_us = t.max_us.max(us);
            }
            Err((e, _)) => {
                t.failed += 1;
                if t.first_error.is_none() {
                    t.first_error = Some(e.to_string());
                }
            }
        }
    }
}

struct Args {
    bootstrap: String,
    topic: String,
    records: u64,
    size: usize,
    throughput: f64,
    props: Vec<(String, String)>,
    /// `kroute.keys`: a key per record, uniform over this many keys.
    keys: Option<u64>,
    /// `kroute.key_every`: only every this-many-th record gets a key (the others none).
    key_every: u64,
    /// `kroute.seconds`: stop sending after this long.
    seconds: Option<f64>,
}

fn parse(args: &[String]) -> Result<Args, String> {
    if args.len() < 5 {
        return Err(USAGE.into());
    }
    let records = args[2]
        .parse::<u64>()
        .map_err(|e| format!("RECORDS '{}': {e}", args[2]))?;
    let size = args[3]
        .parse::<usize>()
        .map_err(|e| format!("RECORD_SIZE '{}': {e}", args[3]))?;
    let throughput = args[4]
        .parse::<f64>()
        .map_err(|e| format!("THROUGHPUT '{}': {e}", args[4]))?;
    if records == 0 || size == 0 || !(throughput > 0.0 || throughput == -1.0) {
        return Err(format!(
            "RECORDS and RECORD_SIZE must be >= 1, THROUGHPUT > 0 or -1\n{USAGE}"
        ));
    }
    let all: Vec<(String, String)> = args[5..]
        .iter()
        .map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| format!("property '{kv}' is not k=v"))
        })
        .collect::<Result<_, _>>()?;
    let (mut keys, mut seconds, mut key_every, mut props) = (None, None, 1, Vec::new());
    for (k, v) in all {
        match k.as_str() {
            "kroute.keys" => match v.parse::<u64>() {
                Ok(n) if n >= 1 => keys = Some(n),
                _ => return Err(format!("kroute.keys '{v}': must be an integer >= 1")),
            },
            "kroute.key_every" => match v.parse::<u64>() {
                Ok(n) if n >= 1 => key_every = n,
                _ => return Err(format!("kroute.key_every '{v}': must be an integer >= 1")),
            },
            "kroute.seconds" => match v.parse::<f64>() {
                Ok(s) if s > 0.0 && s.is_finite() => seconds = Some(s),
                _ => return Err(format!("kroute.seconds '{v}': must be a number > 0")),
            },
            _ if k.starts_with("kroute.") => {
                return Err(format!(
                    "unknown pseudo-property '{k}' (kroute.keys, kroute.key_every and kroute.seconds exist)"
                ));
            }
            _ => props.push((k, v)),
        }
    }
    Ok(Args {
        bootstrap: args[0].clone(),
        topic: args[1].clone(),
        records,
        size,
        throughput,
        props,
        keys,
        key_every,
        seconds,
    })
}

/// RECORD_SIZE random uppercase letters (ProducerPerformance's payload without a payload file).
fn payload(size: usize) -> Vec<u8> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    let mut x = now.map_or(1, |d| d.as_nanos() as u64) | 1;
    x ^= u64::from(std::process::id()) << 17;
    (0..size)
        .map(|_| {
            // xorshift64
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b'A' + (x % 26) as u8
        })
        .collect()
}

/// A xorshift64 generator for the keys (seeded from the clock and the pid).
struct Rng(u64);

impl Rng {
    fn new() -> Self {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        let x = now.map_or(1, |d| d.as_nanos() as u64) ^ (u64::from(std::process::id()) << 32);
        Rng(x | 1)
    }

    /// Uniform in 0..n (Lemire's multiply-shift; the bias is below 2^-32 for the n used here).
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((u128::from(self.0) * u128::from(n)) >> 64) as u64
    }
}

/// ProducerPerformance's percentiles: sorted, the value at index `p x count`.
fn percentile_ms(sorted_us: &[u32], p: f64) -> u64 {
    let i = ((p * sorted_us.len() as f64) as usize).min(sorted_us.len() - 1);
    u64::from(sorted_us[i]) / 1000
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.first().map(String::as_str) == Some("--version") {
        println!("librdkafka {}", get_rdkafka_version().1);
        return ExitCode::SUCCESS;
    }
    let args = match parse(&argv) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("rdkafka_perf: ERROR {e}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rdkafka_perf: ERROR {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &args.bootstrap)
        .set("statistics.interval.ms", "500")
        .set_log_level(RDKafkaLogLevel::Warning);
    for (k, v) in &args.props {
        config.set(k, v);
    }
    let stats_ms: u64 = config
        .get("statistics.interval.ms")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let context = Perf {
        start: Instant::now(),
        tally: Mutex::new(Tally {
            ok: 0,
            bytes: 0,
            latencies_us: Vec::with_capacity(args.records.min(1 << 22) as usize),
            sum_us: 0,
            max_us: 0,
            failed: 0,
            first_error: None,
        }),
        counters: Mutex::new(Counters::default()),
        fatal: Mutex::new(None),
        last_error: Mutex::new(String::new()),
    };
    let producer: BaseProducer<Perf> = config
        .create_with_context(context)
        .map_err(|e| format!("creating the producer: {e}"))?;
    let value = payload(args.size);
    let interval_ns = (args.throughput > 0.0).then(|| 1e9 / args.throughput);
    let keys: Vec<String> = (0..args.keys.unwrap_or(0))
        .map(|k| format!("key-{k}"))
        .collect();
    let mut rng = Rng::new();
    let deadline = args.seconds.map(Duration::from_secs_f64);

    // the clock starts here, like ProducerPerformance's (its Stats are created before the loop)
    let start = Instant::now();
    let mut sent = 0u64;
    for i in 0..args.records {
        if deadline.is_some_and(|d| start.elapsed() >= d) {
            break;
        }
        if let Some(iv) = interval_ns {
            let due = start + Duration::from_nanos((iv * i as f64) as u64);
            loop {
                let now = Instant::now();
                if now >= due {
                    break;
                }
                producer.poll(due - now);
            }
        }
        let sent_ns = producer.context().start.elapsed().as_nanos() as usize;
        let mut record =
            BaseRecord::<[u8], [u8], usize>::with_opaque_to(&args.topic, sent_ns).payload(&value);
        if !keys.is_empty() && i % args.key_every == 0 {
            record = record.key(keys[rng.below(keys.len() as u64) as usize].as_bytes());
        }
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    producer.poll(Duration::from_millis(1));
                }
                Err((e, _)) => return Err(format!("send of record {i} failed: {e}")),
            }
        }
        sent += 1;
        producer.poll(Duration::ZERO);
        if let Some(f) = producer.context().fatal.lock().unwrap().as_ref() {
            return Err(format!("fatal error after {i} records: {f}"));
        }
    }
    let flushed = producer.flush(Duration::from_secs(600));
    let elapsed = start.elapsed().as_secs_f64();
    // one more statistics emission, so the counters include the end of the run
    if stats_ms > 0 {
        producer.poll(Duration::from_millis(stats_ms + 100));
    }

    let ctx = producer.context();
    let mut t = ctx.tally.lock().unwrap();
    t.latencies_us.sort_unstable();
    let (p50, p95, p99, p999) = if t.latencies_us.is_empty() {
        (0, 0, 0, 0)
    } else {
        (
            percentile_ms(&t.latencies_us, 0.5),
            percentile_ms(&t.latencies_us, 0.95),
            percentile_ms(&t.latencies_us, 0.99),
            percentile_ms(&t.latencies_us, 0.999),
        )
    };
    let avg_ms = if t.ok > 0 {
        t.sum_us as f64 / t.ok as f64 / 1000.0
    } else {
        0.0
    };
    println!(
        "{} records sent, {:.1} records/sec ({:.2} MB/sec), {:.2} ms avg latency, {:.2} ms max latency, \
         {p50} ms 50th, {p95} ms 95th, {p99} ms 99th, {p999} ms 99.9th.",
        t.ok,
        t.ok as f64 / elapsed,
        t.bytes as f64 / elapsed / (1024.0 * 1024.0),
        avg_ms,
        t.max_us as f64 / 1000.0,
    );
    let c = *ctx.counters.lock().unwrap();
    eprintln!(
        "rdkafka_perf: librdkafka {}, statistics: txretries={} txerrs={} req_timeouts={} epoch_cnt={} producer_id={}",
        get_rdkafka_version().1,
        c.txretries,
        c.txerrs,
        c.req_timeouts,
        c.epoch_cnt,
        c.producer_id
    );
    if t.failed > 0 {
        return Err(format!(
            "{} of {} records failed delivery, the first with: {}",
            t.failed,
            sent,
            t.first_error.as_deref().unwrap_or("?")
        ));
    }
    if let Some(f) = ctx.fatal.lock().unwrap().as_ref() {
        return Err(format!("fatal error: {f}"));
    }
    flushed.map_err(|e| format!("final flush: {e}"))?;
    if t.ok != sent {
        return Err(format!("{} of {} records acknowledged", t.ok, sent));
    }
    Ok(())
}
