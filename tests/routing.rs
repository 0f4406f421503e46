//! Re-partitioning keyless batches away from a slow broker, with real clients and the real
//! cluster.
//!
//! The slow broker: the test cluster runs in "relayed" mode (scripts/cluster.sh), where every
//! broker advertises the address of a delaying relay in front of it, so every client, direct or
//! through kroute, and every follower replicating from it, sees the delay. `cluster.sh delay 2 MS`
//! makes broker 2 answer MS later (no netem on this kernel, hence a relay). The tests here change
//! that shared state, so they run one at a time and reset the delay when they end.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use common::*;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;

/// Serialises the tests of this file: they share broker 2's delay.
static SLOW_BROKER: Mutex<()> = Mutex::new(());

/// Makes broker 2 slow for as long as it lives.
struct SlowBroker;

impl SlowBroker {
    fn set(ms: u32) {
        cluster(&["delay", "2", &ms.to_string()]);
    }
}

impl Drop for SlowBroker {
    fn drop(&mut self) {
        let _ = std::process::Command::new(repo_root().join("scripts/cluster.sh"))
            .args(["delay", "2", "0"])
            .status();
    }
}

fn routing_kroute() -> Kroute {
    Kroute::start_with(KrouteOptions {
        extra_toml: "[routing]\nstrategy = \"strict-cost\"\ninclude = [\"route-*\"]\n".into(),
        ..Default::default()
    })
}

/// Produce bytes kroute sent to each broker so far.
fn produce_bytes(k: &Kroute) -> [f64; 3] {
    let text = k.metrics();
    [1, 2, 3].map(|b| {
        metric_sum(
            &text,
            "kroute_upstream_produce_bytes_total",
            &[&format!("broker=\"{b}\"")],
        )
    })
}

fn share_of_broker_2(before: [f64; 3], after: [f64; 3]) -> f64 {
    let d: Vec<f64> = (0..3).map(|i| after[i] - before[i]).collect();
    let total: f64 = d.iter().sum();
    assert!(
        total > 1e6,
        "too little produce traffic through kroute: {d:?}"
    );
    d[1] / total
}

/// librdkafka producer: keyless (or keyed) records with unique ids, acks=all; returns acks.
fn rd_produce(
    bootstrap: &str,
    topic: &str,
    prefix: &str,
    count: usize,
    codec: &str,
    keyed: bool,
) -> Vec<(String, i32)> {
    rd_produce_paced(bootstrap, topic, prefix, count, codec, keyed, None)
}

/// Like [`rd_produce`], at most `per_second` records a second: an offered load the cluster can
/// take, so round trips measure the brokers rather than the producer's own queue.
fn rd_produce_paced(
    bootstrap: &str,
    topic: &str,
    prefix: &str,
    count: usize,
    codec: &str,
    keyed: bool,
    per_second: Option<u32>,
) -> Vec<(String, i32)> {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("compression.codec", codec)
        .set("message.timeout.ms", "60000")
        .create()
        .expect("rdkafka producer");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let value_pad = "v".repeat(1000);
        let mut pending = Vec::with_capacity(count);
        // Pacing: 20 ticks a second, each releasing a twentieth of the rate.
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(50));
        let per_tick = per_second.map(|r| (r / 20).max(1) as usize);
        for i in 0..count {
            if let Some(n) = per_tick
                && i % n == 0
            {
                tick.tick().await;
            }
            let id = format!("{prefix}{i:08}");
            let value = format!("{id} {value_pad}");
            let key = format!("key-{}", i % 13);
            let mut record = FutureRecord::to(topic).payload(value.as_bytes());
            if keyed {
                record = record.key(key.as_bytes());
            }
            let delivery = producer
                .send_result(record)
                .unwrap_or_else(|(e, _)| panic!("enqueue: {e}"));
            pending.push((id, delivery));
        }
        let mut acks = Vec::with_capacity(count);
        for (id, delivery) in pending {
            let d = delivery
                .await
                .expect("delivery")
                .unwrap_or_else(|(e, _)| panic!("record {id} failed: {e}"));
            acks.push((id, d.partition));
        }
        acks
    })
}

/// Reads the whole topic through `bootstrap`: id -> partitions it was found in (one per copy).
fn rd_consume_all(bootstrap: &str, topic: &str, expect: usize) -> BTreeMap<String, Vec<i32>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", unique("route-check"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .expect("rdkafka consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let mut got: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    let mut n = 0;
    let mut record = |m: &rdkafka::message::BorrowedMessage| {
        let value = String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
        let id = value.split(' ').next().unwrap_or_default().to_string();
        got.entry(id).or_default().push(m.partition());
    };
    wait_for("all records consumed", Duration::from_secs(90), || {
        // Drain what is there; wait_for's pause only comes when nothing arrived for 200 ms.
        while n < expect {
            match consumer.poll(Timeout::After(Duration::from_millis(200))) {
                Some(Ok(m)) => {
                    record(&m);
                    n += 1;
                }
                Some(Err(_)) | None => break,
            }
        }
        (n >= expect).then_some(())
    });
    // Duplicates would arrive after `expect`: keep reading briefly.
    for _ in 0..10 {
        if let Some(Ok(m)) = consumer.poll(Timeout::After(Duration::from_millis(100))) {
            record(&m);
        }
    }
    got
}

fn assert_exactly_once(acked: &[(String, i32)], consumed: &BTreeMap<String, Vec<i32>>) {
    let ids: BTreeSet<&String> = acked.iter().map(|a| &a.0).collect();
    assert_eq!(ids.len(), acked.len(), "ids are unique");
    let missing: Vec<&&String> = ids
        .iter()
        .filter(|id| !consumed.contains_key(id.as_str()))
        .take(5)
        .collect();
    assert!(
        missing.is_empty(),
        "acknowledged records missing: {missing:?}"
    );
    let duplicated: Vec<(&String, &Vec<i32>)> = consumed
        .iter()
        .filter(|(_, p)| p.len() > 1)
        .take(5)
        .collect();
    assert!(
        duplicated.is_empty(),
        "records consumed twice: {duplicated:?}"
    );
    assert_eq!(
        consumed.len(),
        acked.len(),
        "nothing but what was acknowledged"
    );
}

#[test]
fn librdkafka_keyless_bytes_leave_a_slow_broker_and_come_back() {
    let _serial = SLOW_BROKER.lock().unwrap_or_else(|e| e.into_inner());
    let kroute = routing_kroute();
    let topic = unique("route-rd");
    create_topic_two_per_broker(&topic);
    let _reset = SlowBroker;

    // 3000 records/s of 1 KiB for 5 s per phase.
    let rate = Some(3000);
    SlowBroker::set(40);
    let before = produce_bytes(&kroute);
    let slow_phase = rd_produce_paced(
        &kroute.bootstrap,
        &topic,
        "slow-",
        15_000,
        "none",
        false,
        rate,
    );
    let slow_share = share_of_broker_2(before, produce_bytes(&kroute));

    SlowBroker::set(0);
    // Let the scores see the recovery (broker 2 keeps getting probe traffic), then measure.
    let warm = rd_produce_paced(
        &kroute.bootstrap,
        &topic,
        "warm-",
        3_000,
        "none",
        false,
        rate,
    );
    let before = produce_bytes(&kroute);
    let fast_phase = rd_produce_paced(
        &kroute.bootstrap,
        &topic,
        "fast-",
        15_000,
        "none",
        false,
        rate,
    );
    let recovered_share = share_of_broker_2(before, produce_bytes(&kroute));
    eprintln!(
        "broker 2 share of produce bytes: slow {slow_share:.3}, recovered {recovered_share:.3}"
    );

    assert!(
        slow_share < 0.15,
        "slow broker 2 still got {slow_share:.3} of the bytes (equal: 0.33)"
    );
    assert!(
        recovered_share > 0.22,
        "recovered broker 2 got only {recovered_share:.3} of the bytes"
    );
    assert!(kroute.metric("kroute_batches_moved_total", &["from=\"2\""]) > 0.0);

    let acked: Vec<(String, i32)> = [slow_phase, warm, fast_phase].concat();
    let consumed = rd_consume_all(&kroute.bootstrap, &topic, acked.len());
    assert_exactly_once(&acked, &consumed);
    kroute.assert_clean_logs(&[]);
}

#[test]
fn java_non_idempotent_keyless_producer_avoids_the_slow_broker() {
    let _serial = SLOW_BROKER.lock().unwrap_or_else(|e| e.into_inner());
    let kroute = routing_kroute();
    let topic = unique("route-java");
    create_topic_two_per_broker(&topic);
    let _reset = SlowBroker;
    SlowBroker::set(40);

    let before = produce_bytes(&kroute);
    let run = java_ok(&[
        "produce",
        "--bootstrap",
        &kroute.bootstrap,
        "--topic",
        &topic,
        "--count",
        "20000",
        "--record-size",
        "1024",
        "--idempotent",
        "false",
        "--acks",
        "all",
        "--id-prefix",
        "jv-",
    ]);
    let share = share_of_broker_2(before, produce_bytes(&kroute));
    eprintln!("broker 2 share with the Java producer: {share:.3}");
    assert!(
        share < 0.15,
        "slow broker 2 got {share:.3} of the Java producer's bytes"
    );
    assert_eq!(run.count("errors"), 0);

    let acked: Vec<(String, i32)> = run
        .records("ack")
        .into_iter()
        .map(|r| (r["id"].clone(), r["partition"].parse().unwrap()))
        .collect();
    let consumed = rd_consume_all(&kroute.bootstrap, &topic, acked.len());
    assert_exactly_once(&acked, &consumed);
    kroute.assert_clean_logs(&[]);
}

#[test]
fn keyed_mixed_and_transactional_batches_stay_where_the_client_put_them() {
    let _serial = SLOW_BROKER.lock().unwrap_or_else(|e| e.into_inner());
    let kroute = routing_kroute();
    let _reset = SlowBroker;
    SlowBroker::set(40);

    // Keyed (Java, murmur2; librdkafka, CRC32): every record is where the client computed.
    let keyed = unique("route-keyed");
    create_topic_two_per_broker(&keyed);
    let java = java_ok(&[
        "produce",
        "--bootstrap",
        &kroute.bootstrap,
        "--topic",
        &keyed,
        "--count",
        "3000",
        "--keyed",
        "--idempotent",
        "false",
        "--id-prefix",
        "jk-",
    ]);
    let mut acked: Vec<(String, i32)> = java
        .records("ack")
        .into_iter()
        .map(|r| (r["id"].clone(), r["partition"].parse().unwrap()))
        .collect();
    acked.extend(rd_produce(
        &kroute.bootstrap,
        &keyed,
        "rk-",
        3000,
        "lz4",
        true,
    ));

    // Transactional (Java): batches byte-identical and where the client put them.
    let txn_topic = unique("route-txn");
    create_topic_two_per_broker(&txn_topic);
    let txn = java_ok(&[
        "produce",
        "--bootstrap",
        &kroute.bootstrap,
        "--topic",
        &txn_topic,
        "--count",
        "2000",
        "--transactional-id",
        &unique("rtx"),
        "--id-prefix",
        "tx-",
    ]);

    let consumed = rd_consume_all(&kroute.bootstrap, &keyed, acked.len());
    assert_exactly_once(&acked, &consumed);
    for (id, partition) in &acked {
        assert_eq!(consumed[id], vec![*partition], "keyed record {id} moved");
    }
    let txn_acked: Vec<(String, i32)> = txn
        .records("ack")
        .into_iter()
        .map(|r| (r["id"].clone(), r["partition"].parse().unwrap()))
        .collect();
    let txn_consumed = rd_consume_all(&kroute.bootstrap, &txn_topic, txn_acked.len());
    assert_exactly_once(&txn_acked, &txn_consumed);
    for (id, partition) in &txn_acked {
        assert_eq!(
            txn_consumed[id],
            vec![*partition],
            "transactional record {id} moved"
        );
    }
    assert_eq!(
        kroute.metric("kroute_batches_moved_total", &[]),
        0.0,
        "nothing here may move"
    );
    assert!(kroute.metric("kroute_batches_kept_total", &["reason=\"keyed\""]) > 0.0);
    assert!(kroute.metric("kroute_batches_kept_total", &["reason=\"transactional\""]) > 0.0);
    kroute.assert_clean_logs(&[]);
}

#[test]
fn mixed_keyed_and_keyless_batches_stay() {
    let _serial = SLOW_BROKER.lock().unwrap_or_else(|e| e.into_inner());
    let kroute = routing_kroute();
    let _reset = SlowBroker;
    SlowBroker::set(40);
    let topic = unique("route-mixed");
    create_topic_two_per_broker(&topic);

    // Records alternating keyed/keyless, all sent to partition 2 (led by the slow broker):
    // every batch mixes both, so none may move.
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &kroute.bootstrap)
        .set("acks", "all")
        .set("linger.ms", "20")
        .create()
        .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let acked: Vec<(String, i32)> = rt.block_on(async {
        let mut pending = Vec::new();
        for i in 0..2000 {
            let id = format!("mx-{i:08}");
            let key = format!("k{i}");
            let mut r = FutureRecord::to(&topic).payload(id.as_bytes()).partition(2);
            if i % 2 == 0 {
                r = r.key(key.as_bytes());
            }
            let delivery = match producer.send_result(r) {
                Ok(d) => d,
                Err((e, _)) => panic!("{e}"),
            };
            pending.push((id.clone(), delivery));
        }
        let mut out = Vec::new();
        for (id, d) in pending {
            let d = d
                .await
                .unwrap()
                .unwrap_or_else(|(e, _)| panic!("{id}: {e}"));
            out.push((id, d.partition));
        }
        out
    });
    let consumed = rd_consume_all(&kroute.bootstrap, &topic, acked.len());
    assert_exactly_once(&acked, &consumed);
    assert!(
        consumed.values().all(|p| p == &vec![2]),
        "a mixed batch moved"
    );
    assert_eq!(kroute.metric("kroute_batches_moved_total", &[]), 0.0);
    kroute.assert_clean_logs(&[]);
}

#[test]
fn compressed_keyless_batches_move_in_every_codec() {
    let _serial = SLOW_BROKER.lock().unwrap_or_else(|e| e.into_inner());
    let kroute = routing_kroute();
    let _reset = SlowBroker;
    SlowBroker::set(40);
    for codec in ["gzip", "snappy", "lz4", "zstd"] {
        let topic = unique(&format!("route-{codec}"));
        create_topic_two_per_broker(&topic);
        let moved_before = kroute.metric(
            "kroute_batches_moved_total",
            &[&format!("topic=\"{topic}\"")],
        );
        let acked = rd_produce(
            &kroute.bootstrap,
            &topic,
            &format!("{codec}-"),
            4000,
            codec,
            false,
        );
        let moved = kroute.metric(
            "kroute_batches_moved_total",
            &[&format!("topic=\"{topic}\"")],
        ) - moved_before;
        assert!(moved > 0.0, "{codec}: no batch moved");
        let consumed = rd_consume_all(&kroute.bootstrap, &topic, acked.len());
        assert_exactly_once(&acked, &consumed);
    }
    assert_eq!(
        kroute.metric("kroute_batches_kept_total", &["reason=\"uninspectable\""]),
        0.0
    );
    assert_eq!(
        kroute.metric("kroute_batches_kept_total", &["reason=\"malformed\""]),
        0.0
    );
    kroute.assert_clean_logs(&[]);
}
