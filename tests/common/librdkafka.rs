//! librdkafka (the rdkafka crate) as a real, unmodified client: produce with unique ids, read
//! everything back, check exactly-once.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;

use super::{unique, wait_for};

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
    /// Send every record to this partition instead of letting the partitioner choose.
    pub partition: Option<i32>,
    /// `enable.idempotence` (librdkafka's default is false).
    pub idempotent: bool,
    /// More client configuration (e.g. security).
    pub config: &'a [(&'a str, &'a str)],
}

impl Default for Produce<'_> {
    fn default() -> Self {
        Self {
            prefix: "rd-",
            codec: "none",
            keys: Keys::None,
            per_second: None,
            partition: None,
            idempotent: false,
            config: &[],
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

/// Produces `count` records of about 1 KiB (value = `<id> vvv...`) with acks=all and waits for
/// every acknowledgement; panics on any failure.
pub fn produce(bootstrap: &str, topic: &str, count: usize, how: Produce) -> Vec<Acked> {
    let mut config = ClientConfig::new();
    for (k, v) in how.config {
        config.set(*k, *v);
    }
    let producer: FutureProducer = config
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("compression.codec", how.codec)
        .set("message.timeout.ms", "60000")
        .set(
            "enable.idempotence",
            if how.idempotent { "true" } else { "false" },
        )
        .create()
        .expect("rdkafka producer");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let pad = "v".repeat(1000);
        // Pacing: 20 ticks a second, each releasing a twentieth of the rate.
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        let per_tick = how.per_second.map(|r| (r / 20).max(1) as usize);
        let mut pending = Vec::with_capacity(count);
        for i in 0..count {
            if let Some(n) = per_tick
                && i % n == 0
            {
                tick.tick().await;
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
        for (id, key, delivery) in pending {
            let partition = match delivery.await.expect("delivery") {
                Ok(d) => d.partition,
                Err((e, _)) => panic!("record {id} failed: {e}"),
            };
            acked.push(Acked { id, key, partition });
        }
        acked
    })
}

/// Reads `topic` from the beginning until `expect` records arrived (and a moment longer, so
/// duplicates would show): id -> the partition of each copy found.
pub fn consume_all(bootstrap: &str, topic: &str, expect: usize) -> BTreeMap<String, Vec<i32>> {
    consume_all_with(bootstrap, topic, expect, &[])
}

/// [`consume_all`] with more client configuration (e.g. security).
pub fn consume_all_with(
    bootstrap: &str,
    topic: &str,
    expect: usize,
    config: &[(&str, &str)],
) -> BTreeMap<String, Vec<i32>> {
    consume_until(bootstrap, topic, config, |n, _| n >= expect)
}

/// Reads `topic` from the beginning until every id of `ids` arrived, however many duplicates
/// come with them (and a moment longer): id -> the partition of each copy found.
pub fn consume_ids<'a>(
    bootstrap: &str,
    topic: &str,
    ids: impl IntoIterator<Item = &'a str>,
) -> BTreeMap<String, Vec<i32>> {
    let wanted: std::collections::BTreeSet<String> = ids.into_iter().map(String::from).collect();
    consume_until(bootstrap, topic, &[], |_, got| {
        got.len() >= wanted.len() && wanted.iter().all(|id| got.contains_key(id))
    })
}

fn consume_until(
    bootstrap: &str,
    topic: &str,
    config: &[(&str, &str)],
    done: impl Fn(usize, &BTreeMap<String, Vec<i32>>) -> bool,
) -> BTreeMap<String, Vec<i32>> {
    let mut client = ClientConfig::new();
    for (k, v) in config {
        client.set(*k, *v);
    }
    let consumer: BaseConsumer = client
        .set("bootstrap.servers", bootstrap)
        .set("group.id", unique("rd-check"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .expect("rdkafka consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let mut got: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    let mut n = 0;
    let keep = |got: &mut BTreeMap<String, Vec<i32>>, m: &BorrowedMessage| {
        let value = String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
        let id = value.split(' ').next().unwrap_or_default().to_string();
        got.entry(id).or_default().push(m.partition());
    };
    wait_for("all records consumed", Duration::from_secs(90), || {
        // Drain what is there; wait_for's pause only comes when nothing arrived for 200 ms.
        while !done(n, &got) {
            match consumer.poll(Timeout::After(Duration::from_millis(200))) {
                Some(Ok(m)) => {
                    keep(&mut got, &m);
                    n += 1;
                }
                Some(Err(_)) | None => break,
            }
        }
        done(n, &got).then_some(())
    });
    for _ in 0..10 {
        if let Some(Ok(m)) = consumer.poll(Timeout::After(Duration::from_millis(100))) {
            keep(&mut got, &m);
        }
    }
    got
}

/// Every acknowledged id consumed exactly once, and nothing else.
pub fn assert_exactly_once<'a>(
    acked: impl IntoIterator<Item = &'a str>,
    consumed: &BTreeMap<String, Vec<i32>>,
) {
    let ids: Vec<&str> = acked.into_iter().collect();
    let unique_ids: BTreeSet<&str> = ids.iter().copied().collect();
    assert_eq!(unique_ids.len(), ids.len(), "ids are unique");
    let missing: Vec<&&str> = unique_ids
        .iter()
        .filter(|id| !consumed.contains_key(**id))
        .take(5)
        .collect();
    assert!(
        missing.is_empty(),
        "acknowledged records missing: {missing:?}"
    );
    let twice: Vec<(&String, &Vec<i32>)> = consumed
        .iter()
        .filter(|(_, p)| p.len() > 1)
        .take(5)
        .collect();
    assert!(twice.is_empty(), "records consumed twice: {twice:?}");
    assert_eq!(
        consumed.len(),
        ids.len(),
        "nothing but what was acknowledged"
    );
}
