//! kroute as a transparent proxy: real clients (the Java client and librdkafka) through kroute
//! against the real 3-broker cluster.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::*;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;

fn rdkafka_producer(bootstrap: &str) -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("message.timeout.ms", "30000")
        .create()
        .expect("rdkafka producer")
}

/// Produces `count` records (value = id) with optional keys; returns (id, key, partition).
fn rdkafka_produce(
    bootstrap: &str,
    topic: &str,
    count: usize,
    keyed: bool,
) -> Vec<(String, Option<String>, i32)> {
    let producer = rdkafka_producer(bootstrap);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut sends = Vec::new();
        for i in 0..count {
            let id = format!("rd-{i:06}");
            let key = keyed.then(|| format!("key-{}", i % 17));
            let mut record = FutureRecord::to(topic).payload(id.as_bytes());
            if let Some(k) = &key {
                record = record.key(k.as_bytes());
            }
            let delivery = producer
                .send_result(record)
                .unwrap_or_else(|(e, _)| panic!("enqueue failed: {e}"));
            sends.push((id, key, delivery));
        }
        let mut acked = Vec::new();
        for (id, key, delivery) in sends {
            let result = delivery.await.expect("delivery future");
            let partition = result
                .unwrap_or_else(|(e, _)| panic!("record {id} failed: {e}"))
                .partition;
            acked.push((id, key, partition));
        }
        acked
    })
}

/// Reads every record of `topic` from the beginning until `expect` arrive: (value, partition).
fn rdkafka_consume(bootstrap: &str, topic: &str, expect: usize) -> Vec<(String, i32)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", unique("rd-group"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .expect("rdkafka consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let mut got = Vec::new();
    wait_for("records through kroute", Duration::from_secs(60), || {
        // Drain what is there; wait_for's pause only comes when nothing arrived for 200 ms.
        while got.len() < expect {
            match consumer.poll(Timeout::After(Duration::from_millis(200))) {
                Some(Ok(m)) => {
                    let value =
                        String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
                    got.push((value, m.partition()));
                }
                Some(Err(_)) | None => break,
            }
        }
        (got.len() >= expect).then_some(())
    });
    // Anything beyond `expect` would be a duplicate: give it a moment to show up.
    for _ in 0..5 {
        if let Some(Ok(m)) = consumer.poll(Timeout::After(Duration::from_millis(200))) {
            got.push((
                String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned(),
                m.partition(),
            ));
        }
    }
    got
}

#[test]
fn librdkafka_produce_and_consume_through_kroute() {
    let kroute = Kroute::start();
    let topic = unique("rd-basic");
    create_topic(&topic, 6, &[]);

    let acked = rdkafka_produce(&kroute.bootstrap, &topic, 500, false);
    assert_eq!(acked.len(), 500);
    let consumed = rdkafka_consume(&kroute.bootstrap, &topic, 500);
    let sent: BTreeSet<String> = acked.iter().map(|a| a.0.clone()).collect();
    let got: BTreeSet<String> = consumed.iter().map(|c| c.0.clone()).collect();
    assert_eq!(consumed.len(), 500, "no duplicates");
    assert_eq!(sent, got, "every record consumed, content intact");

    // The traffic really went through kroute.
    assert!(kroute.metric("kroute_requests_total", &["api=\"Produce\""]) >= 1.0);
    assert!(kroute.metric("kroute_requests_total", &["api=\"Fetch\""]) >= 1.0);
    assert!(
        kroute.metric(
            "kroute_upstream_request_duration_seconds_count",
            &["api=\"Produce\""]
        ) >= 1.0
    );
    kroute.assert_clean_logs(&[]);
}

#[test]
fn keyed_records_land_where_they_would_directly() {
    let kroute = Kroute::start();
    let direct_topic = unique("keyed-direct");
    let proxied_topic = unique("keyed-proxied");
    create_topic(&direct_topic, 5, &[]);
    create_topic(&proxied_topic, 5, &[]);

    // librdkafka: CRC32-based partitioner.
    let partitions =
        |acked: Vec<(String, Option<String>, i32)>| -> BTreeMap<String, BTreeSet<i32>> {
            let mut m: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
            for (_, key, p) in acked {
                m.entry(key.unwrap()).or_default().insert(p);
            }
            m
        };
    let direct = partitions(rdkafka_produce(
        &cluster_bootstrap(),
        &direct_topic,
        200,
        true,
    ));
    let proxied = partitions(rdkafka_produce(
        &kroute.bootstrap,
        &proxied_topic,
        200,
        true,
    ));
    assert!(
        direct.values().all(|p| p.len() == 1),
        "a key maps to one partition"
    );
    assert_eq!(
        direct, proxied,
        "librdkafka keyed partitions differ through kroute"
    );

    // The Java client: murmur2.
    let java_map = |bootstrap: &str, topic: &str| -> BTreeMap<String, String> {
        java_ok(&[
            "produce",
            "--bootstrap",
            bootstrap,
            "--topic",
            topic,
            "--count",
            "100",
            "--keyed",
        ])
        .records("ack")
        .into_iter()
        .map(|r| (r["key"].clone(), r["partition"].clone()))
        .collect()
    };
    let jd = java_map(&cluster_bootstrap(), &direct_topic);
    let jp = java_map(&kroute.bootstrap, &proxied_topic);
    assert_eq!(jd.len(), 10);
    assert_eq!(jd, jp, "Java keyed partitions differ through kroute");
    kroute.assert_clean_logs(&[]);
}

#[test]
fn java_idempotent_producer_and_acks_zero() {
    let kroute = Kroute::start();
    let topic = unique("java-idem");
    create_topic(&topic, 3, &["min.insync.replicas=2"]);

    let run = java_ok(&[
        "produce",
        "--bootstrap",
        &kroute.bootstrap,
        "--topic",
        &topic,
        "--count",
        "2000",
        "--id-prefix",
        "idem-",
    ]);
    assert_eq!(run.count("produced"), 2000);
    assert_eq!(run.count("errors"), 0);
    let run = java_ok(&[
        "produce",
        "--bootstrap",
        &kroute.bootstrap,
        "--topic",
        &topic,
        "--count",
        "300",
        "--acks",
        "0",
        "--id-prefix",
        "zero-",
    ]);
    assert_eq!(run.count("produced"), 300);

    let consumed = java_ok(&[
        "consume",
        "--bootstrap",
        &kroute.bootstrap,
        "--topic",
        &topic,
        "--expect",
        "2300",
        "--extra-wait-ms",
        "1000",
    ]);
    assert_eq!(
        consumed.count("consumed"),
        2300,
        "exactly the records produced, no duplicates"
    );
    assert_eq!(consumed.count("unique"), 2300);
    let ids: BTreeSet<String> = consumed
        .records("rec")
        .into_iter()
        .map(|r| r["id"].clone())
        .collect();
    for i in [0, 1999] {
        assert!(ids.contains(&format!("idem-{i:08}")), "missing idem-{i:08}");
    }
    assert!(kroute.metric("kroute_requests_total", &["api=\"InitProducerId\""]) >= 1.0);
    kroute.assert_clean_logs(&[]);
}

#[test]
fn java_transactions_commit_and_abort() {
    let kroute = Kroute::start();
    let topic = unique("java-txn");
    create_topic(&topic, 3, &[]);
    let txn = unique("txn");

    java_ok(&[
        "produce",
        "--bootstrap",
        &kroute.bootstrap,
        "--topic",
        &topic,
        "--count",
        "200",
        "--transactional-id",
        &txn,
        "--id-prefix",
        "commit-",
    ]);
    java_ok(&[
        "produce",
        "--bootstrap",
        &kroute.bootstrap,
        "--topic",
        &topic,
        "--count",
        "100",
        "--transactional-id",
        &txn,
        "--abort",
        "--id-prefix",
        "abort-",
    ]);
    let committed = java_ok(&[
        "consume",
        "--bootstrap",
        &kroute.bootstrap,
        "--topic",
        &topic,
        "--expect",
        "200",
        "--isolation",
        "read_committed",
        "--extra-wait-ms",
        "1500",
    ]);
    assert_eq!(committed.count("consumed"), 200);
    let ids: Vec<String> = committed
        .records("rec")
        .into_iter()
        .map(|r| r["id"].clone())
        .collect();
    assert!(
        ids.iter().all(|id| id.starts_with("commit-")),
        "aborted records visible: {ids:?}"
    );

    let all = java_ok(&[
        "consume",
        "--bootstrap",
        &kroute.bootstrap,
        "--topic",
        &topic,
        "--expect",
        "300",
        "--isolation",
        "read_uncommitted",
    ]);
    assert_eq!(all.count("consumed"), 300, "aborted records are in the log");
    assert!(kroute.metric("kroute_requests_total", &["api=\"EndTxn\""]) >= 2.0);
    assert!(kroute.metric("kroute_requests_total", &["api=\"FindCoordinator\""]) >= 1.0);
    kroute.assert_clean_logs(&[]);
}

#[test]
fn consumer_group_with_several_members() {
    let kroute = Kroute::start();
    let topic = unique("group");
    create_topic(&topic, 6, &[]);
    java_ok(&[
        "produce",
        "--bootstrap",
        &kroute.bootstrap,
        "--topic",
        &topic,
        "--count",
        "600",
    ]);
    let run = java_ok(&[
        "group-consume",
        "--bootstrap",
        &kroute.bootstrap,
        "--topic",
        &topic,
        "--group",
        &unique("g"),
        "--members",
        "3",
        "--expect",
        "600",
        "--timeout-ms",
        "60000",
    ]);
    assert_eq!(run.count("consumed"), 600);
    assert_eq!(run.count("unique"), 600);
    assert_eq!(run.count("members_with_assignment"), 3);
    assert!(
        kroute.metric("kroute_requests_total", &["api=\"JoinGroup\""])
            + kroute.metric("kroute_requests_total", &["api=\"ConsumerGroupHeartbeat\""])
            >= 3.0
    );
    kroute.assert_clean_logs(&[]);
}

#[test]
fn admin_sees_only_kroute_addresses() {
    let kroute = Kroute::start();
    let topic = unique("admin");
    java_ok(&[
        "admin-create",
        "--bootstrap",
        &kroute.bootstrap,
        "--topic",
        &topic,
        "--partitions",
        "4",
        "--replication-factor",
        "3",
    ]);
    let run = java_ok(&[
        "admin-describe",
        "--bootstrap",
        &kroute.bootstrap,
        "--topic",
        &topic,
    ]);
    let parts = run.records("partition");
    assert_eq!(parts.len(), 4);
    let nodes = run.records("node");
    let ports: BTreeSet<u16> = nodes.iter().map(|n| n["port"].parse().unwrap()).collect();
    let expected: BTreeSet<u16> = (1..=3).map(|n| kroute.port_base + n).collect();
    assert_eq!(ports, expected, "admin client sees kroute's broker ports");
    for p in &parts {
        let leader: u16 = p["leader"].parse().unwrap();
        assert_eq!(
            p["leader_addr"],
            format!("127.0.0.1:{}", kroute.port_base + leader)
        );
    }
    let controller = &run.records("controller")[0];
    assert!(expected.contains(&controller["port"].parse().unwrap()));
    assert!(kroute.metric("kroute_requests_total", &["api=\"CreateTopics\""]) >= 1.0);
    kroute.assert_clean_logs(&[]);
}

#[test]
fn check_config_names_the_bad_key() {
    let dir = std::env::temp_dir();
    let bad = dir.join(format!("{}.toml", unique("bad")));
    std::fs::write(
        &bad,
        "[upstream]\nbootstrap_servers = [\"127.0.0.1:1\"]\n[listen]\nbootstrap_prot = 9\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kroute"))
        .args(["check-config", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("bootstrap_prot"));
    let good = std::process::Command::new(env!("CARGO_BIN_EXE_kroute"))
        .args(["check-config", "--config"])
        .arg(repo_root().join("proxy.toml"))
        .output()
        .unwrap();
    assert!(
        good.status.success(),
        "{}",
        String::from_utf8_lossy(&good.stderr)
    );
    let _ = std::fs::remove_file(bad);
}
