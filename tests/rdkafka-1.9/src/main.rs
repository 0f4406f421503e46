//! librdkafka 1.9.2 as a real, unmodified Kafka client for kroute's tests: the same command line
//! and output as tests/python/producer.py, so a test parses its run like the others'.
//!
//!   rdkafka-1-9-producer --bootstrap B --topic T [--count N] [--rate R] [--size S]
//!                        [--prefix P] [--config k=v]...
//!
//! Produces N keyless records (value: the id, a space, random letters up to S bytes) at most R a
//! second, with librdkafka's defaults (1.9: acks=all, not idempotent) and any `--config`, and
//! prints one line per record, then a summary:
//!
//!   ack id=<id> partition=<p> offset=<o>
//!   error id=<id> err=<message>
//!   done acked=<n> errors=<m>
//!
//! librdkafka's own log goes to stderr. Exit status 1 if any record failed.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;

/// Collects one line per delivery report.
struct Reports(Mutex<Vec<String>>);

impl ClientContext for Reports {}

impl ProducerContext for Reports {
    type DeliveryOpaque = Box<String>;

    fn delivery(&self, result: &DeliveryResult<'_>, id: Box<String>) {
        let line = match result {
            Ok(m) => format!(
                "ack id={id} partition={} offset={}",
                m.partition(),
                m.offset()
            ),
            Err((e, _)) => format!("error id={id} err={e}"),
        };
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(line);
    }
}

struct Args {
    bootstrap: String,
    topic: String,
    count: u32,
    rate: u32,
    size: usize,
    prefix: String,
    config: Vec<(String, String)>,
}

fn parse() -> Result<Args, String> {
    let mut one = HashMap::new();
    let mut config = Vec::new();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--config" => {
                let (k, v) = value
                    .split_once('=')
                    .ok_or(format!("--config needs k=v, got {value}"))?;
                config.push((k.to_string(), v.to_string()));
            }
            "--bootstrap" | "--topic" | "--count" | "--rate" | "--size" | "--prefix" => {
                one.insert(flag[2..].to_string(), value);
            }
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    let get = |k: &str, d: &str| one.get(k).cloned().unwrap_or_else(|| d.to_string());
    let number = |k: &str, d: &str| get(k, d).parse::<u64>().map_err(|e| format!("--{k}: {e}"));
    Ok(Args {
        bootstrap: one.get("bootstrap").cloned().ok_or("missing --bootstrap")?,
        topic: one.get("topic").cloned().ok_or("missing --topic")?,
        count: number("count", "1000")? as u32,
        rate: number("rate", "0")? as u32,
        size: number("size", "1024")? as usize,
        prefix: get("prefix", "rd19-"),
        config,
    })
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("rdkafka-1-9-producer: {e}");
            return ExitCode::from(2);
        }
    };
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &args.bootstrap);
    for (k, v) in &args.config {
        config.set(k, v);
    }
    let producer: ThreadedProducer<Reports> =
        match config.create_with_context(Reports(Mutex::new(Vec::new()))) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("rdkafka-1-9-producer: cannot create the producer: {e}");
                return ExitCode::from(2);
            }
        };
    let start = Instant::now();
    let mut letters = 7u64;
    for i in 0..args.count {
        if args.rate > 0 {
            // Offered load: record i is not handed over before start + i/rate.
            let due = start + Duration::from_secs_f64(f64::from(i) / f64::from(args.rate));
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
        }
        let id = format!("{}{i}", args.prefix);
        let mut value = format!("{id} ").into_bytes();
        while value.len() < args.size {
            letters = letters
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            value.push(b'a' + (letters >> 59) as u8 % 26);
        }
        let mut record =
            BaseRecord::<(), [u8], Box<String>>::with_opaque_to(&args.topic, Box::new(id));
        record = record.payload(&value[..]);
        // A full local queue: wait for deliveries, then hand the same record over again.
        while let Err((e, back)) = producer.send(record) {
            if !matches!(
                e.rdkafka_error_code(),
                Some(rdkafka::types::RDKafkaErrorCode::QueueFull)
            ) {
                eprintln!("rdkafka-1-9-producer: send failed: {e}");
                return ExitCode::from(1);
            }
            record = back;
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    if let Err(e) = producer.flush(Duration::from_secs(120)) {
        eprintln!("rdkafka-1-9-producer: flush: {e}");
    }
    let lines = producer
        .context()
        .0
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let errors = lines.iter().filter(|l| l.starts_with("error")).count();
    for line in &lines {
        println!("{line}");
    }
    println!("done acked={} errors={errors}", lines.len() - errors);
    if errors > 0 || lines.len() != args.count as usize {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
