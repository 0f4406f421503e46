//! kroute as a transparent proxy: real clients (the Java client and librdkafka) through kroute
//! against the real 3-broker cluster.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::librdkafka::{Acked, Keys, Produce, assert_exactly_once, produce};
use common::*;

#[test]
fn librdkafka_produce_and_consume_through_kroute() {
    let kroute = Kroute::start();
    let topic = unique("rd-basic");
    create_topic(&topic, 6, &[]);

    let acked = produce(&kroute.bootstrap, &topic, 500, Produce::default());
    assert_eq!(acked.len(), 500);
    assert_exactly_once(
        &kroute.bootstrap,
        &topic,
        acked.iter().map(|a| a.id.as_str()),
    );

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
    let keyed = Produce {
        keys: Keys::All,
        ..Default::default()
    };
    let partitions = |acked: Vec<Acked>| -> BTreeMap<String, BTreeSet<i32>> {
        let mut m: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
        for a in acked {
            m.entry(a.key.unwrap_or_default())
                .or_default()
                .insert(a.partition);
        }
        m
    };
    let direct = partitions(produce(&cluster_bootstrap(), &direct_topic, 200, keyed));
    let proxied = partitions(produce(&kroute.bootstrap, &proxied_topic, 200, keyed));
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
        java_on("produce", bootstrap, topic, &["--count", "100", "--keyed"])
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

    let run = java_on(
        "produce",
        &kroute.bootstrap,
        &topic,
        &["--count", "2000", "--id-prefix", "idem-"],
    );
    assert_eq!(run.count("produced"), 2000);
    assert_eq!(run.count("errors"), 0);
    let run = java_on(
        "produce",
        &kroute.bootstrap,
        &topic,
        &["--count", "300", "--acks", "0", "--id-prefix", "zero-"],
    );
    assert_eq!(run.count("produced"), 300);

    let consumed = java_on(
        "consume",
        &kroute.bootstrap,
        &topic,
        &["--expect", "2300", "--extra-wait-ms", "1000"],
    );
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

    java_on(
        "produce",
        &kroute.bootstrap,
        &topic,
        &[
            "--count",
            "200",
            "--transactional-id",
            &txn,
            "--id-prefix",
            "commit-",
        ],
    );
    java_on(
        "produce",
        &kroute.bootstrap,
        &topic,
        &[
            "--count",
            "100",
            "--transactional-id",
            &txn,
            "--abort",
            "--id-prefix",
            "abort-",
        ],
    );
    let committed = java_on(
        "consume",
        &kroute.bootstrap,
        &topic,
        &[
            "--expect",
            "200",
            "--isolation",
            "read_committed",
            "--extra-wait-ms",
            "1500",
        ],
    );
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

    let all = java_on(
        "consume",
        &kroute.bootstrap,
        &topic,
        &["--expect", "300", "--isolation", "read_uncommitted"],
    );
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
    java_on("produce", &kroute.bootstrap, &topic, &["--count", "600"]);
    let run = java_on(
        "group-consume",
        &kroute.bootstrap,
        &topic,
        &[
            "--group",
            &unique("g"),
            "--members",
            "3",
            "--expect",
            "600",
            "--timeout-ms",
            "60000",
        ],
    );
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
    java_on(
        "admin-create",
        &kroute.bootstrap,
        &topic,
        &["--partitions", "4", "--replication-factor", "3"],
    );
    let run = java_on("admin-describe", &kroute.bootstrap, &topic, &[]);
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
