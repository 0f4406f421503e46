//! The skew report and plan on the real cluster: a topic with seed 000's 22/10/4 leaders as
//! `/v1/skew`, the gauges and `kroute skew` show it; a plan from `kroute plan` applied with
//! Kafka's own tools evens it out; a topic being reassigned is refused, naming it; a consumer
//! group member with far more partitions than the others is flagged.
//!
//! kroute samples every 500 ms here. Each check waits for a condition on what kroute reports
//! (a sample after the change), never for a time.

mod common;

use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::librdkafka::{Keys, Produce, produce};
use common::prometheus::promtool;
use common::{
    Kroute, KrouteOptions, cluster, cluster_bootstrap, create_topic, http_get, repo_root, unique,
    wait_for,
};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Message};
use serde_json::Value;

fn skew_kroute(extra: &str) -> Kroute {
    Kroute::start_with(KrouteOptions {
        extra_toml: format!("\n[skew]\nsample_interval_ms = 500\n{extra}"),
        ..KrouteOptions::default()
    })
}

/// 36 partitions led 22/10/4 by brokers 1/2/3, replication factor 2; broker 3 holds replicas
/// of its own 4 partitions only, as a broker added after the topic was made.
fn create_22_10_4(name: &str) {
    let assignment: Vec<&str> = (0..36)
        .map(|p| match p {
            0..22 => "1:2",
            22..32 => "2:1",
            _ => "3:1",
        })
        .collect();
    cluster(&[
        "create-topic",
        name,
        "--replica-assignment",
        &assignment.join(","),
    ]);
}

fn report(k: &Kroute) -> Option<Value> {
    let (code, body) = http_get(&k.admin, "/v1/skew")?;
    (code == 200).then(|| serde_json::from_str(&body).ok())?
}

/// The topic's leaders per broker in the newest report, as "1:22 2:10 3:4".
fn leaders(report: &Value, topic: &str) -> Option<String> {
    let t = report["topics"]
        .as_array()?
        .iter()
        .find(|t| t["topic"] == topic)?;
    let counts: Vec<String> = t["leaders"]
        .as_object()?
        .iter()
        .map(|(b, n)| format!("{b}:{n}"))
        .collect();
    Some(counts.join(" "))
}

/// `kroute ARGS --admin <k's admin>`, from a directory without proxy.toml (`--admin` needs no
/// configuration).
fn kroute_cmd(k: &Kroute, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kroute"))
        .current_dir(std::env::temp_dir())
        .env_remove("KROUTE_CONFIG")
        .args(args)
        .args(["--admin", &k.admin])
        .output()
        .expect("run kroute")
}

fn tool(class: &str, args: &[&str]) -> String {
    let mut all = vec!["tool", class, "--bootstrap-server"];
    let bootstrap = cluster_bootstrap();
    all.push(&bootstrap);
    all.extend_from_slice(args);
    cluster(&all)
}

const REASSIGN: &str = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand";

#[test]
fn the_report_shows_leaders_records_keyed_bytes_and_the_gauges() {
    let topic = unique("skew-report");
    create_22_10_4(&topic);
    let k = skew_kroute(&format!("\n[routing]\ninclude = [\"{topic}\"]\n"));
    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let (bootstrap, topic, stop) = (k.bootstrap.clone(), topic.clone(), stop.clone());
        std::thread::spawn(move || {
            let how = Produce {
                keys: Keys::All,
                per_second: Some(400),
                ..Produce::default()
            };
            while !stop.load(Ordering::Relaxed) {
                produce(&bootstrap, &topic, 200, how);
            }
        })
    };
    // A report whose window saw keyed records through kroute and records on the topic.
    let seen = wait_for(
        "a report with keyed traffic",
        Duration::from_secs(60),
        || {
            let r = report(&k)?;
            let keyed: f64 = r["brokers"]
                .as_array()?
                .iter()
                .filter_map(|b| b["produce_bytes_per_s"]["keyed"].as_f64())
                .sum();
            let t = r["topics"]
                .as_array()?
                .iter()
                .find(|t| t["topic"] == topic)?;
            (keyed > 0.0 && t["records_per_s"].as_f64()? > 0.0).then_some(r)
        },
    );
    stop.store(true, Ordering::Relaxed);
    producer.join().unwrap();
    assert_eq!(leaders(&seen, &topic).as_deref(), Some("1:22 2:10 3:4"));
    let t = seen["topics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["topic"] == topic)
        .unwrap();
    assert_eq!(t["even"], 12.0);
    assert!((t["max_over_even"].as_f64().unwrap() - 22.0 / 12.0).abs() < 1e-9);
    for b in seen["brokers"].as_array().unwrap() {
        let bytes = &b["produce_bytes_per_s"];
        assert_eq!(bytes["moved_out"], 0.0, "keyed records never move: {b}");
        if bytes["keyed"].as_f64().unwrap() > 0.0 {
            assert_eq!(b["unmovable_share"], 1.0, "{b}");
        }
    }

    let metrics = k.metrics();
    let gauge = format!("kroute_skew_topic_leaders{{topic=\"{topic}\",broker=\"1\"}} 22");
    assert!(metrics.contains(&gauge), "{gauge} missing");
    assert!(metrics.contains("kroute_skew_broker_partitions_led{broker=\"3\"}"));
    // The rendered gauges pass Prometheus' own checks next to the registered metrics.
    let (ok, out) = promtool(&repo_root(), &["check", "metrics"], Some(&metrics));
    assert!(
        ok && out.trim().is_empty(),
        "promtool check metrics:\n{out}"
    );

    let out = kroute_cmd(&k, &["skew"]);
    assert!(out.status.success(), "{out:?}");
    let table = String::from_utf8_lossy(&out.stdout);
    let line = table
        .lines()
        .find(|l| l.contains(&topic))
        .expect("topic row");
    assert!(
        line.contains("1:22 2:10 3:4") && line.contains("max/even 1.83"),
        "{line}"
    );
    k.assert_clean_logs(&[]);
}

#[test]
fn a_plan_applied_with_kafkas_tools_evens_out_the_leaders() {
    let topic = unique("skew-plan");
    create_22_10_4(&topic);
    let k = skew_kroute("");
    wait_for("the topic in a sample", Duration::from_secs(30), || {
        leaders(&report(&k)?, &topic)
    });
    let dir = std::env::temp_dir().join(unique("kroute-plan"));
    std::fs::create_dir_all(&dir).unwrap();
    let (moves, elect) = (dir.join("moves.json"), dir.join("elect.json"));
    let out = kroute_cmd(
        &k,
        &[
            "plan",
            "--topics",
            &topic,
            "--reassignment-out",
            moves.to_str().unwrap(),
            "--election-out",
            elect.to_str().unwrap(),
        ],
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(said.contains("leaders before  1:22 2:10 3:4"), "{said}");
    // Broker 3 holds no replica of 32 partitions: 8 must be copied to it (12/12/12 within
    // 10%: 13/13/10 or closer); broker 2 gains its leaders by leader changes alone.
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&moves).unwrap()).unwrap();
    let planned = file["partitions"].as_array().unwrap();
    let copies = planned
        .iter()
        .filter(|p| p["replicas"].as_array().unwrap().contains(&Value::from(3)))
        .count();
    assert!((6..=8).contains(&copies), "{said}\n{file}");
    assert!(said.contains(&format!("{copies} replica moves")), "{said}");

    tool(
        REASSIGN,
        &[
            "--execute",
            "--reassignment-json-file",
            moves.to_str().unwrap(),
        ],
    );
    wait_for("the reassignment", Duration::from_secs(60), || {
        let verify = tool(
            REASSIGN,
            &[
                "--verify",
                "--reassignment-json-file",
                moves.to_str().unwrap(),
            ],
        );
        (!verify.contains("in progress")).then_some(())
    });
    tool(
        "org.apache.kafka.tools.LeaderElectionCommand",
        &[
            "--election-type",
            "PREFERRED",
            "--path-to-json-file",
            elect.to_str().unwrap(),
        ],
    );
    let after = wait_for("even leaders in a sample", Duration::from_secs(60), || {
        let r = report(&k)?;
        let t = r["topics"]
            .as_array()?
            .iter()
            .find(|t| t["topic"] == topic)?;
        (t["max_over_even"].as_f64()? <= 1.1).then(|| leaders(&r, &topic))?
    });
    eprintln!("leaders after the plan: {after}");
    // Applied: nothing more to do.
    let again = kroute_cmd(&k, &["plan", "--topics", &topic]);
    let said = String::from_utf8_lossy(&again.stdout);
    assert!(said.contains("0 leader changes, 0 replica moves"), "{said}");
    let _ = std::fs::remove_dir_all(&dir);
    k.assert_clean_logs(&[]);
}

#[test]
fn unknown_topics_and_topics_being_reassigned_are_refused_by_name() {
    let topic = unique("skew-busy");
    // One replica, on broker 1: moving it to broker 2 copies its data.
    cluster(&["create-topic", &topic, "--replica-assignment", "1"]);
    let k = skew_kroute("");
    wait_for("the topic in a sample", Duration::from_secs(30), || {
        leaders(&report(&k)?, &topic)
    });
    let out = kroute_cmd(&k, &["plan", "--topics", &format!("{topic},no-such-topic")]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("topic no-such-topic does not exist"), "{err}");

    // A reassignment held in progress: the copy is throttled to 1 byte/s.
    produce(&k.bootstrap, &topic, 200, Produce::default());
    let dir = std::env::temp_dir().join(unique("kroute-busy"));
    std::fs::create_dir_all(&dir).unwrap();
    let moves = dir.join("moves.json");
    let file = format!(
        "{{\"version\":1,\"partitions\":[{{\"topic\":\"{topic}\",\"partition\":0,\"replicas\":[2]}}]}}"
    );
    std::fs::write(&moves, file).unwrap();
    let moves = moves.to_str().unwrap();
    tool(
        REASSIGN,
        &[
            "--execute",
            "--throttle",
            "1",
            "--reassignment-json-file",
            moves,
        ],
    );
    let out = kroute_cmd(&k, &["plan", "--topics", &topic]);
    let err = String::from_utf8_lossy(&out.stderr);
    tool(REASSIGN, &["--cancel", "--reassignment-json-file", moves]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        err.contains(&format!(
            "topic {topic} is being reassigned (partitions [0])"
        )),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    k.assert_clean_logs(&[]);
}

/// A subscribed consumer of `topics` in `group`, with the range assignor, committing every
/// 500 ms, until `stop`.
fn range_consumer(
    bootstrap: &str,
    topics: &[String],
    group: &str,
    client_id: &str,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("client.id", client_id)
        .set("partition.assignment.strategy", "range")
        .set("auto.commit.interval.ms", "500")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "6000")
        .create()
        .expect("consumer");
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    consumer.subscribe(&names).expect("subscribe");
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(50)) {
                let _ = m.offset();
            }
        }
        consumer.unsubscribe();
    })
}

#[test]
fn a_group_member_with_far_more_partitions_is_flagged() {
    let topics = [unique("skew-g1"), unique("skew-g2")];
    for t in &topics {
        create_topic(t, 3, &[]);
    }
    let group = unique("skew-group");
    let k = skew_kroute(&format!(
        "member_margin = 0.2\n\n[lag]\nenabled = true\npoll_interval_ms = 500\ninclude = [\"{group}\"]\n"
    ));
    // Records in every partition: a member commits only partitions it consumed from, and the
    // lag collector lists only partitions with commits.
    for t in &topics {
        for partition in 0..3 {
            let how = Produce {
                partition: Some(partition),
                ..Produce::default()
            };
            produce(&k.bootstrap, t, 20, how);
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    // The range assignor gives the first member 2 of each topic's 3 partitions: 4 against 2.
    let members: Vec<_> = ["skew-member-a", "skew-member-b"]
        .iter()
        .map(|id| range_consumer(&k.bootstrap, &topics, &group, id, stop.clone()))
        .collect();
    let flagged = wait_for("the group in a report", Duration::from_secs(90), || {
        let r = report(&k)?;
        let g = r["groups"]
            .as_array()?
            .iter()
            .find(|g| g["group"] == group)?;
        let owned: u64 = g["members"]
            .as_array()?
            .iter()
            .filter_map(|m| m["partitions"].as_u64())
            .sum();
        (owned == 6 && g["members"].as_array()?.len() == 2).then(|| g.clone())
    });
    stop.store(true, Ordering::Relaxed);
    for m in members {
        m.join().unwrap();
    }
    assert_eq!(flagged["skewed"], true, "{flagged}");
    assert_eq!(flagged["mean_partitions"], 3.0);
    let heavy: Vec<&Value> = flagged["members"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["overloaded"] == true)
        .collect();
    assert_eq!(heavy.len(), 1, "{flagged}");
    assert_eq!(heavy[0]["partitions"], 4);
    let gauge = format!(
        "kroute_skew_group_member_overloaded{{group=\"{group}\",owner=\"{}\",client_id=\"{}\"}} 1",
        heavy[0]["owner"].as_str().unwrap(),
        heavy[0]["client_id"].as_str().unwrap()
    );
    assert!(k.metrics().contains(&gauge), "{gauge} missing");
    k.assert_clean_logs(&[]);
}
