//! librdkafka (the rdkafka crate) as a real, unmodified client: produce with unique ids, read
//! everything back, check exactly-once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use rdkafka::{ClientConfig, ClientContext, Offset, TopicPartitionList};

use super::unique;

/// Which records carry a key (`key-<i % 13>`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    None,
    All,
    /// Every other record: batches that mix keyed and keyless records.
    Alternate,
}

/// How to produce.
#[derive(Clone, Copy)]
pub struct Produce<'a> {
    pub prefix: &'a str,
    pub codec: &'a str,
    pub keys: Keys,
    /// Records a second at most (an offered load the cluster can take); None: as fast as it can.
    pub per_second: Option<u32>,
    /// Releases per second of `per_second`'s records: 0 releases each at its due time, N
    /// releases them in N bursts a second (each burst one request to one broker).
    pub bursts: u32,
    /// Send every record to this partition instead of letting the partitioner choose.
    pub partition: Option<i32>,
    /// `enable.idempotence` (librdkafka's default is false).
    pub idempotent: bool,
    /// More client configuration (e.g. security).
    pub config: &'a [(&'a str, &'a str)],
    /// Bytes of padding in each record's value after its id (1000: records of about 1 KiB).
    pub value_bytes: usize,
    /// librdkafka's `debug` contexts to record (e.g. "eos,msg,protocol"); "": none. When
    /// records fail, the whole log is written to a file and its lines about timeouts and
    /// retries go into the failure's message: what the client saw, in its own words.
    pub debug: &'a str,
}

impl Default for Produce<'_> {
    fn default() -> Self {
        Self {
            prefix: "rd-",
            codec: "none",
            keys: Keys::None,
            per_second: None,
            bursts: 0,
            partition: None,
            idempotent: false,
            config: &[],
            value_bytes: 1000,
            debug: "",
        }
    }
}

/// Keeps librdkafka's log lines (at most [`Recorder::MAX_LINES`]), stamped with the seconds
/// since the producer was made. It is the producer's context; its clones share the lines, so
/// [`produce`] keeps one to read them after a failure.
#[derive(Clone)]
struct Recorder {
    start: Instant,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    const MAX_LINES: usize = 400_000;

    fn new() -> Self {
        Self {
            start: Instant::now(),
            lines: Arc::default(),
        }
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Writes `lines` whole to `target/tmp/librdkafka-<prefix><pid>.log`; says where, or why not.
    fn save(lines: &[String], prefix: &str) -> String {
        let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("librdkafka-{prefix}{}.log", std::process::id()));
        match std::fs::write(&path, lines.join("\n")) {
            Ok(()) => format!(
                "librdkafka's log ({} lines): {}",
                lines.len(),
                path.display()
            ),
            Err(e) => format!("librdkafka's log not saved: {e}"),
        }
    }

    /// What the log says of failures: saved whole, its lines about timeouts, retries and
    /// idempotence resets (the last 24) returned for a failure's message.
    fn excerpt(&self, prefix: &str) -> String {
        let lines = self.lines();
        if lines.is_empty() {
            return String::new();
        }
        let saved = Self::save(&lines, prefix);
        let telling = [
            "imed out", "TIMEOUT", "REQTMOUT", "etry", "DRAIN", "BUMP", "Err", "FATAL",
        ];
        let picked: Vec<&str> = lines
            .iter()
            .filter(|l| telling.iter().any(|t| l.contains(t)))
            .map(String::as_str)
            .collect();
        let tail = &picked[picked.len().saturating_sub(24)..];
        format!("{saved}\n{}", tail.join("\n"))
    }
}

impl ClientContext for Recorder {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        let mut lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        if lines.len() < Self::MAX_LINES {
            let at = self.start.elapsed().as_secs_f64();
            lines.push(format!("{at:9.3} {level:?} {fac} {message}"));
        }
    }
}

/// One acknowledged record.
#[derive(Debug, Clone)]
pub struct Acked {
    pub id: String,
    pub key: Option<String>,
    pub partition: i32,
}

/// Produces `count` records (value = `<id> vvv...`, see [`Produce::value_bytes`]) with
/// acks=all and waits for every acknowledgement; panics on any failure.
pub fn produce(bootstrap: &str, topic: &str, count: usize, how: Produce) -> Vec<Acked> {
    let mut config = ClientConfig::new();
    for (k, v) in how.config {
        config.set(*k, *v);
    }
    if !how.debug.is_empty() {
        config
            .set("debug", how.debug)
            .set_log_level(RDKafkaLogLevel::Debug);
    }
    let recorder = Recorder::new();
    let producer: FutureProducer<Recorder> = config
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("compression.codec", how.codec)
        .set("message.timeout.ms", "60000")
        .set(
            "enable.idempotence",
            if how.idempotent { "true" } else { "false" },
        )
        .create_with_context(recorder.clone())
        .expect("rdkafka producer");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let pad = "v".repeat(how.value_bytes);
        // Pacing: each record at its due time (the timer's millisecond releases a few at
        // once), or `bursts` times a second. In 20 bursts a second each burst is one request
        // to one broker, and a broker's share of a second is 20 coin tosses.
        let start = tokio::time::Instant::now();
        let mut pending = Vec::with_capacity(count);
        for i in 0..count {
            if let Some(rate) = how.per_second {
                let per_burst = match how.bursts {
                    0 => 1,
                    n => (rate / n).max(1) as usize,
                };
                if i % per_burst == 0 {
                    let due = start + Duration::from_secs_f64(i as f64 / f64::from(rate));
                    tokio::time::sleep_until(due).await;
                }
            }
            let id = format!("{}{i:08}", how.prefix);
            let value = format!("{id} {pad}");
            let key = match how.keys {
                Keys::All => Some(format!("key-{}", i % 13)),
                Keys::Alternate if i % 2 == 0 => Some(format!("key-{}", i % 13)),
                _ => None,
            };
            let mut record = FutureRecord::to(topic).payload(value.as_bytes());
            if let Some(k) = &key {
                record = record.key(k.as_bytes());
            }
            if let Some(p) = how.partition {
                record = record.partition(p);
            }
            let delivery = match producer.send_result(record) {
                Ok(d) => d,
                Err((e, _)) => panic!("enqueue {id}: {e}"),
            };
            pending.push((id, key, delivery));
        }
        let mut acked = Vec::with_capacity(count);
        // Every failure is gathered before failing: how many records failed, and which, tells
        // a stall of one batch from one of a whole partition.
        let mut failed: Vec<(String, String)> = Vec::new();
        for (id, key, delivery) in pending {
            match delivery.await.expect("delivery") {
                Ok(d) => acked.push(Acked {
                    id,
                    key,
                    partition: d.partition,
                }),
                Err((e, _)) => failed.push((id, e.to_string())),
            }
        }
        if let (Some(first), Some(last)) = (failed.first(), failed.last()) {
            panic!(
                "{} of {count} records failed after {:.1} s, the first {} ({}), the last {} ({})\n{}",
                failed.len(),
                start.elapsed().as_secs_f64(),
                first.0,
                first.1,
                last.0,
                last.1,
                recorder.excerpt(how.prefix)
            );
        }
        // Kept after a success too: a batch that came close to its deadline is worth a look.
        if !how.debug.is_empty() {
            Recorder::save(&recorder.lines(), how.prefix);
        }
        acked
    })
}

/// Every copy of each record read back: id -> (partition, offset) of each copy, in the order
/// read.
pub type Copies = BTreeMap<String, Vec<(i32, i64)>>;

/// How long reading a topic back may take before the check reports what it has.
const READ_BACK_DEADLINE: Duration = Duration::from_secs(90);

/// Reads every partition of `topic` from the beginning up to its high watermark (every record
/// an acks=all producer was told is in, and every copy of it). Stops there, or at the
/// deadline, and returns what it read.
pub fn consume_all(bootstrap: &str, topic: &str) -> Copies {
    read_back(bootstrap, topic, &[], &BTreeSet::new())
}

/// [`consume_all`] with more client configuration (e.g. security).
pub fn consume_all_with(bootstrap: &str, topic: &str, config: &[(&str, &str)]) -> Copies {
    read_back(bootstrap, topic, config, &BTreeSet::new())
}

/// [`consume_all`], and if some of `ids` are not there by then, goes on reading until they
/// arrive or the deadline passes (a record may be acknowledged before the high watermark
/// passes it with acks=1).
pub fn consume_ids<'a>(
    bootstrap: &str,
    topic: &str,
    ids: impl IntoIterator<Item = &'a str>,
) -> Copies {
    let wanted: BTreeSet<String> = ids.into_iter().map(String::from).collect();
    read_back(bootstrap, topic, &[], &wanted)
}

/// One partition being read back: where it must get to, and where it is.
struct Progress {
    high_watermark: i64,
    next: i64,
}

fn read_back(
    bootstrap: &str,
    topic: &str,
    config: &[(&str, &str)],
    wanted: &BTreeSet<String>,
) -> Copies {
    let mut client = ClientConfig::new();
    for (k, v) in config {
        client.set(*k, *v);
    }
    let consumer: BaseConsumer = client
        .set("bootstrap.servers", bootstrap)
        .set("group.id", unique("rd-check"))
        .set("enable.auto.commit", "false")
        // Every record, committed or not: duplicates anywhere must show.
        .set("isolation.level", "read_uncommitted")
        .create()
        .expect("rdkafka consumer");
    let deadline = Instant::now() + READ_BACK_DEADLINE;
    let mut progress = assign_from_start(&consumer, topic);
    let mut got = Copies::new();
    loop {
        let all_read = progress.values().all(|p| p.next >= p.high_watermark);
        let all_wanted = got.len() >= wanted.len() && wanted.iter().all(|id| got.contains_key(id));
        if all_read && all_wanted {
            return got;
        }
        if Instant::now() >= deadline {
            eprintln!(
                "read-back of {topic}: deadline passed, {} ids read",
                got.len()
            );
            return got;
        }
        if all_read {
            // Something acknowledged is not below the watermarks read at the start yet.
            refresh_watermarks(&consumer, topic, &mut progress);
        }
        match consumer.poll(Timeout::After(Duration::from_millis(200))) {
            Some(Ok(m)) => {
                let value = String::from_utf8_lossy(m.payload().unwrap_or_default());
                let id = value.split(' ').next().unwrap_or_default().to_string();
                got.entry(id).or_default().push((m.partition(), m.offset()));
                if let Some(p) = progress.get_mut(&m.partition()) {
                    p.next = p.next.max(m.offset() + 1);
                }
            }
            Some(Err(e)) => eprintln!("read-back of {topic}: {e}"),
            None => note_positions(&consumer, &mut progress),
        }
    }
}

/// Assigns every partition of `topic` from its first offset; its watermarks, per partition.
fn assign_from_start(consumer: &BaseConsumer, topic: &str) -> BTreeMap<i32, Progress> {
    let timeout = Duration::from_secs(10);
    let metadata = consumer
        .fetch_metadata(Some(topic), timeout)
        .expect("topic metadata");
    let partitions: Vec<i32> = metadata
        .topics()
        .iter()
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect();
    assert!(!partitions.is_empty(), "{topic} has no partitions");
    let mut progress = BTreeMap::new();
    let mut list = TopicPartitionList::new();
    for p in partitions {
        let (low, high) = consumer
            .fetch_watermarks(topic, p, timeout)
            .expect("watermarks");
        list.add_partition_offset(topic, p, Offset::Offset(low))
            .expect("partition offset");
        progress.insert(
            p,
            Progress {
                high_watermark: high,
                next: low,
            },
        );
    }
    consumer.assign(&list).expect("assign");
    progress
}

fn refresh_watermarks(
    consumer: &BaseConsumer,
    topic: &str,
    progress: &mut BTreeMap<i32, Progress>,
) {
    for (p, at) in progress.iter_mut() {
        if let Ok((_, high)) = consumer.fetch_watermarks(topic, *p, Duration::from_secs(10)) {
            at.high_watermark = high;
        }
    }
}

/// Moves each partition's progress to the consumer's position: it passes offsets that carry
/// no record for the application (transaction markers).
fn note_positions(consumer: &BaseConsumer, progress: &mut BTreeMap<i32, Progress>) {
    let Ok(positions) = consumer.position() else {
        return;
    };
    for e in positions.elements() {
        if let (Some(p), Offset::Offset(o)) = (progress.get_mut(&e.partition()), e.offset()) {
            p.next = p.next.max(o);
        }
    }
}

/// What reading a topic back found against what was acknowledged.
pub struct ReadBack<'a> {
    /// Acknowledged, never read.
    pub missing: Vec<&'a str>,
    /// Read more than once: every copy's (partition, offset).
    pub duplicated: Vec<(&'a str, &'a [(i32, i64)])>,
    /// Read, never acknowledged.
    pub unexpected: Vec<(&'a str, &'a [(i32, i64)])>,
}

impl<'a> ReadBack<'a> {
    pub fn of(acked: impl IntoIterator<Item = &'a str>, read: &'a Copies) -> Self {
        let acked: Vec<&str> = acked.into_iter().collect();
        let unique: BTreeSet<&str> = acked.iter().copied().collect();
        assert_eq!(unique.len(), acked.len(), "acknowledged ids are unique");
        ReadBack {
            missing: unique
                .iter()
                .copied()
                .filter(|id| !read.contains_key(*id))
                .collect(),
            duplicated: read
                .iter()
                .filter(|(id, copies)| copies.len() > 1 && unique.contains(id.as_str()))
                .map(|(id, copies)| (id.as_str(), copies.as_slice()))
                .collect(),
            unexpected: read
                .iter()
                .filter(|(id, _)| !unique.contains(id.as_str()))
                .map(|(id, copies)| (id.as_str(), copies.as_slice()))
                .collect(),
        }
    }

    /// The three lists, counted, with the first few of each.
    pub fn describe(&self) -> String {
        const SHOWN: usize = 20;
        let mut missing = self.missing.clone();
        missing.truncate(SHOWN);
        format!(
            "missing {} (acknowledged, never read): {missing:?}\n\
             duplicated {} (id, [(partition, offset)...]): {:?}\n\
             unexpected {} (read, never acknowledged): {:?}",
            self.missing.len(),
            self.duplicated.len(),
            &self.duplicated[..self.duplicated.len().min(SHOWN)],
            self.unexpected.len(),
            &self.unexpected[..self.unexpected.len().min(SHOWN)],
        )
    }

    pub fn is_exactly_once(&self) -> bool {
        self.missing.is_empty() && self.duplicated.is_empty() && self.unexpected.is_empty()
    }
}

/// Reads `topic` back through `bootstrap` ([`consume_ids`]) and checks that every acknowledged
/// id is there exactly once, and nothing else; otherwise fails naming what is missing, what is
/// there twice (where) and what is there unacknowledged. Returns what it read.
pub fn assert_exactly_once<'a>(
    bootstrap: &str,
    topic: &str,
    acked: impl IntoIterator<Item = &'a str>,
) -> Copies {
    assert_exactly_once_with(bootstrap, topic, &[], acked)
}

/// [`assert_exactly_once`] with more client configuration for the reader (e.g. SASL).
pub fn assert_exactly_once_with<'a>(
    bootstrap: &str,
    topic: &str,
    config: &[(&str, &str)],
    acked: impl IntoIterator<Item = &'a str>,
) -> Copies {
    let acked: Vec<&str> = acked.into_iter().collect();
    let wanted: BTreeSet<String> = acked.iter().map(|id| id.to_string()).collect();
    let read = read_back(bootstrap, topic, config, &wanted);
    let report = ReadBack::of(acked, &read);
    assert!(
        report.is_exactly_once(),
        "{topic} read back, not exactly once:\n{}",
        report.describe()
    );
    read
}
