//! A librdkafka producer for bench/soak.sh: paced records, keyed or keyless, every outcome logged,
//! until a stop file appears. The librdkafka counterpart of bench/soak/SoakProducer.java (same
//! record layout, same log lines).
//!
//! ```text
//! cargo build --release --example soak_rdkafka
//! target/release/examples/soak_rdkafka BOOTSTRAP TOPIC PREFIX RATE KEYS VALUE_BYTES STOP_FILE OUT_FILE [k=v ...]
//! ```
//!
//! - record i (from 0): id `PREFIX-<i, 9 digits>`; with KEYS > 0 key `PREFIX-k<i % KEYS>` and seq
//!   = the record's number among its key's records, keyless (KEYS = 0): no key, seq = i;
//! - value `"<id> <key|-> <seq> "` padded with `x` to VALUE_BYTES bytes;
//! - RATE records/s (record i is sent at start + i / RATE; delivery reports are served while
//!   waiting; a full queue is waited out);
//! - `k=v`: librdkafka properties as they are (e.g. `enable.idempotence=true`); the example sets
//!   only `bootstrap.servers`, `client.id` and the log level (warnings).
//!
//! OUT_FILE lines (times in epoch ms):
//!
//! - `a <id> <partition> <offset> <send_ms> <ack_ms>`: acknowledged (offset -1: unknown);
//! - `f <id> <send_ms> <fail_ms> <error>`: failed (spaces in the error are `_`);
//! - `e <ms> <error>`: a client error event or a librdkafka log line at warning level or above;
//! - `d <ms> <FAC>:<text>`: with `debug=eos`, librdkafka's debug lines on idempotence errors
//!   (DUPSEQ: a batch it marks delivered because the answer was DUPLICATE_SEQUENCE_NUMBER;
//!   ERRSEQ, ERRPID, UNKPID);
//! - `done sent=N acked=N failed=N txretries=N epoch_cnt=N`: last line, after the final flush
//!   (up to 180 s; records still undelivered then are purged: `f` lines with librdkafka's
//!   `Purged in queue` / `Purged in flight`, after an `e` line `flush_timeout_after_180s`).
//!
//! Exit 0 (the checker judges the log), 2 on bad usage, 1 if the producer cannot be created.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::ClientConfig;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{
    BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext, PurgeConfig,
};
use rdkafka::statistics::Statistics;

const USAGE: &str =
    "usage: soak_rdkafka BOOTSTRAP TOPIC PREFIX RATE KEYS VALUE_BYTES STOP_FILE OUT_FILE [k=v ...]";

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn clean(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join("_")
}

struct Soak {
    prefix: String,
    out: Mutex<BufWriter<File>>,
    acked: AtomicU64,
    failed: AtomicU64,
    /// Records handed to librdkafka whose delivery report has not come yet.
    pending: Mutex<std::collections::BTreeMap<u64, u64>>,
    txretries: AtomicU64,
    epoch_cnt: AtomicU64,
}

impl Soak {
    fn line(&self, l: &str) {
        let mut o = self.out.lock().unwrap();
        let _ = writeln!(o, "{l}");
    }

    fn id(&self, i: u64) -> String {
        format!("{}-{i:09}", self.prefix)
    }
}

impl ClientContext for Soak {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        if matches!(
            level,
            RDKafkaLogLevel::Emerg
                | RDKafkaLogLevel::Alert
                | RDKafkaLogLevel::Critical
                | RDKafkaLogLevel::Error
                | RDKafkaLogLevel::Warning
        ) {
            self.line(&format!(
                "e {} log_{level:?}_{fac}:{}",
                now_ms(),
                clean(log_message)
            ));
        } else if matches!(
            fac,
            "DUPSEQ" | "ERRSEQ" | "ERRPID" | "UNKPID" | "IMPLICITACK"
        ) {
            // with debug=eos: librdkafka's decisions on idempotence errors (DUPSEQ: a batch it
            // marks delivered because the answer was DUPLICATE_SEQUENCE_NUMBER; IMPLICITACK:
            // earlier messages it marks delivered because a later batch of their partition was
            // acknowledged, S1 in docs/hardening.md)
            self.line(&format!("d {} {fac}:{}", now_ms(), clean(log_message)));
        }
    }

    fn stats(&self, s: Statistics) {
        let r: u64 = s.brokers.values().map(|b| b.txretries).sum();
        self.txretries.store(r, Ordering::Relaxed);
        if let Some(eos) = &s.eos {
            self.epoch_cnt
                .store(eos.epoch_cnt.max(0) as u64, Ordering::Relaxed);
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.line(&format!(
            "e {} error:{}",
            now_ms(),
            clean(&format!("{error}: {reason}"))
        ));
    }
}

impl ProducerContext for Soak {
    /// The record's number i.
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, i: usize) {
        let i = i as u64;
        let t = now_ms();
        let sent = self.pending.lock().unwrap().remove(&i).unwrap_or(0);
        match result {
            Ok(m) => {
                self.acked.fetch_add(1, Ordering::Relaxed);
                self.line(&format!(
                    "a {} {} {} {sent} {t}",
                    self.id(i),
                    m.partition(),
                    m.offset()
                ));
            }
            Err((e, _)) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                self.line(&format!(
                    "f {} {sent} {t} {}",
                    self.id(i),
                    clean(&e.to_string())
                ));
            }
        }
    }
}

struct Args {
    bootstrap: String,
    topic: String,
    prefix: String,
    rate: f64,
    keys: u64,
    value_bytes: usize,
    stop: String,
    out: String,
    props: Vec<(String, String)>,
}

fn parse(a: &[String]) -> Result<Args, String> {
    if a.len() < 8 {
        return Err(USAGE.into());
    }
    let num = |i: usize, what: &str| -> Result<f64, String> {
        a[i].parse::<f64>()
            .map_err(|e| format!("{what} '{}': {e}\n{USAGE}", a[i]))
    };
    let rate = num(3, "RATE")?;
    let keys = num(4, "KEYS")?;
    let value_bytes = num(5, "VALUE_BYTES")?;
    if rate <= 0.0 || keys < 0.0 || value_bytes < 1.0 {
        return Err(format!("RATE > 0, KEYS >= 0, VALUE_BYTES >= 1\n{USAGE}"));
    }
    let props = a[8..]
        .iter()
        .map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| format!("property '{kv}' is not k=v"))
        })
        .collect::<Result<_, _>>()?;
    Ok(Args {
        bootstrap: a[0].clone(),
        topic: a[1].clone(),
        prefix: a[2].clone(),
        rate,
        keys: keys as u64,
        value_bytes: value_bytes as usize,
        stop: a[6].clone(),
        out: a[7].clone(),
        props,
    })
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let args = match parse(&argv) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("soak_rdkafka: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("soak_rdkafka: ERROR {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    let out = File::create(&args.out).map_err(|e| format!("{}: {e}", args.out))?;
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &args.bootstrap)
        .set("client.id", format!("soak-{}", args.prefix))
        .set("statistics.interval.ms", "1000");
    // debug lines reach the context only at log level Debug (it writes warnings and DUPSEQ)
    config.set_log_level(if args.props.iter().any(|(k, _)| k == "debug") {
        RDKafkaLogLevel::Debug
    } else {
        RDKafkaLogLevel::Warning
    });
    for (k, v) in &args.props {
        config.set(k, v);
    }
    let ctx = Soak {
        prefix: args.prefix.clone(),
        out: Mutex::new(BufWriter::with_capacity(1 << 16, out)),
        acked: AtomicU64::new(0),
        failed: AtomicU64::new(0),
        pending: Mutex::new(Default::default()),
        txretries: AtomicU64::new(0),
        epoch_cnt: AtomicU64::new(0),
    };
    let producer: BaseProducer<Soak> = config
        .create_with_context(ctx)
        .map_err(|e| format!("creating the producer: {e}"))?;
    let stop = std::path::Path::new(&args.stop);
    let mut per_key = vec![0u64; args.keys.max(1) as usize];
    let interval_ns = 1e9 / args.rate;
    let start = Instant::now();
    let mut last_check = Instant::now();
    let mut last_flush = Instant::now();
    let mut i: u64 = 0;
    loop {
        if last_check.elapsed() >= Duration::from_millis(100) {
            if stop.exists() {
                break;
            }
            last_check = Instant::now();
        }
        if last_flush.elapsed() >= Duration::from_secs(1) {
            let _ = producer.context().out.lock().unwrap().flush();
            last_flush = Instant::now();
        }
        let due = start + Duration::from_nanos((interval_ns * i as f64) as u64);
        let now = Instant::now();
        if now < due {
            producer.poll((due - now).min(Duration::from_millis(100)));
            continue;
        }
        let id = producer.context().id(i);
        let (key, seq) = if args.keys > 0 {
            let k = i % args.keys;
            let seq = per_key[k as usize];
            per_key[k as usize] += 1;
            (Some(format!("{}-k{k}", args.prefix)), seq)
        } else {
            (None, i)
        };
        let mut value = format!("{id} {} {seq} ", key.as_deref().unwrap_or("-"));
        while value.len() < args.value_bytes {
            value.push('x');
        }
        producer
            .context()
            .pending
            .lock()
            .unwrap()
            .insert(i, now_ms());
        let mut record =
            BaseRecord::<str, str, usize>::with_opaque_to(&args.topic, i as usize).payload(&value);
        if let Some(k) = key.as_deref() {
            record = record.key(k);
        }
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    producer.poll(Duration::from_millis(1));
                }
                Err((e, _)) => {
                    let ctx = producer.context();
                    let sent = ctx.pending.lock().unwrap().remove(&i).unwrap_or(0);
                    ctx.failed.fetch_add(1, Ordering::Relaxed);
                    ctx.line(&format!(
                        "f {id} {sent} {} send:{}",
                        now_ms(),
                        clean(&e.to_string())
                    ));
                    break;
                }
            }
        }
        producer.poll(Duration::ZERO);
        i += 1;
    }
    let flushed = producer.flush(Duration::from_secs(180));
    if flushed.is_err() {
        // what is still undelivered fails now (PurgeQueue / PurgeInflight delivery reports)
        producer.purge(PurgeConfig::default().queue().inflight());
        producer
            .context()
            .line(&format!("e {} flush_timeout_after_180s", now_ms()));
    }
    // the purged records' reports, and one more statistics emission for the counters
    producer.poll(Duration::from_millis(1100));
    let _ = producer.flush(Duration::from_secs(5));
    let ctx = producer.context();
    let left: Vec<(u64, u64)> = std::mem::take(&mut *ctx.pending.lock().unwrap())
        .into_iter()
        .collect();
    for (j, sent) in left {
        ctx.failed.fetch_add(1, Ordering::Relaxed);
        ctx.line(&format!(
            "f {} {sent} {} flush_timeout",
            ctx.id(j),
            now_ms()
        ));
    }
    ctx.line(&format!(
        "done sent={i} acked={} failed={} txretries={} epoch_cnt={}",
        ctx.acked.load(Ordering::Relaxed),
        ctx.failed.load(Ordering::Relaxed),
        ctx.txretries.load(Ordering::Relaxed),
        ctx.epoch_cnt.load(Ordering::Relaxed)
    ));
    ctx.out
        .lock()
        .unwrap()
        .flush()
        .map_err(|e| format!("{}: {e}", args.out))
}
