//! Consumer lag on the real cluster, with real consumers (librdkafka) committing through kroute:
//! one test per Burrow status, a KIP-848 group, an unknown group, and the time lag.
//!
//! kroute polls every 500 ms and keeps windows of 5 commits. Each step that needs kroute to
//! have seen new log ends waits for two completed polls (`kroute_lag_polls_total`) rather than
//! for a time, so every lag kroute records is the one the test set up.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::librdkafka::{Produce, produce};
use common::prometheus::promtool;
use common::{Kroute, KrouteOptions, cluster, create_topic, http_get, repo_root, unique, wait_for};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use serde_json::Value;

const LAG_TOML: &str = "\n[lag]\nenabled = true\npoll_interval_ms = 500\nintervals = 5\n";

fn lag_kroute() -> Kroute {
    Kroute::start_with(KrouteOptions {
        extra_toml: LAG_TOML.into(),
        ..KrouteOptions::default()
    })
}

/// A one-partition topic (the statuses are per partition; one keeps them readable).
fn topic(prefix: &str) -> String {
    let name = unique(prefix);
    create_topic(&name, 1, &[]);
    name
}

/// Produces `n` records to partition 0 through kroute and waits until kroute has polled twice
/// since (one after another: the second poll began after the records were in), so its newest
/// log end includes them. Returns when the records were in, before the polls (ms since the
/// epoch).
fn produce_seen(k: &Kroute, topic: &str, n: usize) -> i64 {
    let how = Produce {
        partition: Some(0),
        ..Produce::default()
    };
    assert_eq!(produce(&k.bootstrap, topic, n, how).len(), n);
    let produced_at = wall_ms();
    polls_pass(k, 2);
    produced_at
}

fn polls_pass(k: &Kroute, n: u32) {
    let polls = |k: &Kroute| k.metric("kroute_lag_polls_total", &["outcome=\"ok\""]);
    let start = polls(k);
    wait_for("kroute's lag polls", Duration::from_secs(30), || {
        (polls(k) >= start + f64::from(n)).then_some(())
    });
}

/// A consumer of `group` that only commits (a simple group: no subscription).
fn committer(k: &Kroute, group: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", &k.bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("librdkafka consumer")
}

fn commit(c: &BaseConsumer, topic: &str, offset: i64) {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Offset(offset))
        .expect("partition offset");
    c.commit(&tpl, CommitMode::Sync).expect("commit");
}

/// Now, in ms since the epoch: the clock kroute stamps commits with.
fn wall_ms() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

/// Burrow's answer for `group` at `/v3/kafka/local/consumer/{group}/{what}`.
fn burrow(k: &Kroute, group: &str, what: &str) -> (u16, Value) {
    let path = format!("/v3/kafka/local/consumer/{group}/{what}");
    let (code, body) = http_get(&k.admin, &path).expect("admin endpoint answers");
    let json = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"));
    (code, json)
}

/// The group status and its first partition's status, from `/lag`.
fn statuses(k: &Kroute, group: &str) -> (String, String) {
    let (_, v) = burrow(k, group, "lag");
    let group_status = v["status"]["status"].as_str().unwrap_or("").to_string();
    let partition = v["status"]["partitions"][0]["status"]
        .as_str()
        .unwrap_or("");
    (group_status, partition.to_string())
}

fn wait_statuses(k: &Kroute, group: &str, want: (&str, &str), timeout: Duration) -> Value {
    wait_for(&format!("{group} to be {want:?}"), timeout, || {
        let (g, p) = statuses(k, group);
        (g == want.0 && p == want.1).then(|| burrow(k, group, "lag").1)
    })
}

/// [`wait_statuses`] once the newest commit kroute holds for partition 0 is `offset` (commits
/// read from `__consumer_offsets` arrive a moment after the client's commit returned).
fn wait_statuses_at(
    k: &Kroute,
    group: &str,
    want: (&str, &str),
    offset: i64,
    timeout: Duration,
) -> Value {
    wait_for(
        &format!("{group} to be {want:?} at {offset}"),
        timeout,
        || {
            let (_, v) = burrow(k, group, "lag");
            let p = &v["status"]["partitions"][0];
            (v["status"]["status"] == want.0
                && p["status"] == want.1
                && p["end"]["offset"] == offset)
                .then_some(v)
        },
    )
}

#[test]
fn a_consumer_falling_behind_is_warn() {
    let k = lag_kroute();
    let (topic, group) = (topic("lag-warn-"), unique("g-warn-"));
    let c = committer(&k, &group);
    // Each round the producers add 50 and the consumer moves 10: the lag grows at every commit.
    for round in 1..=5 {
        produce_seen(&k, &topic, 50);
        commit(&c, &topic, 10 * round);
    }
    let v = wait_statuses_at(&k, &group, ("WARN", "WARN"), 50, Duration::from_secs(5));
    let p = &v["status"]["partitions"][0];
    assert_eq!(p["current_lag"], 200, "{v}");
    assert_eq!(p["complete"], 1.0, "{v}");
    let lags: Vec<i64> = [&p["start"], &p["end"]]
        .iter()
        .map(|c| c["lag"].as_i64().unwrap_or(-1))
        .collect();
    // The first commit came before kroute knew the partition's log end: its lag is unknown
    // (null), and the rules skip it.
    assert_eq!(lags, [-1, 200], "{v}");
    // The metric agrees: WARN is 2.
    let metric = k.metric("kroute_lag_group_status", &[&format!("group=\"{group}\"")]);
    assert_eq!(metric, 2.0);
    k.assert_clean_logs(&[]);
}

/// The longest kroute may go between the starts of two reads of `__consumer_offsets` (its
/// tail reads every 500 ms; the rest allows for the read itself on a busy machine).
const LOG_READ_PERIOD_MS: i64 = 1_500;

#[test]
fn a_consumer_that_stops_with_lag_is_stop_and_the_group_err() {
    let k = lag_kroute();
    let (topic, group) = (topic("lag-stop-"), unique("g-stop-"));
    let c = committer(&k, &group);
    produce_seen(&k, &topic, 100);
    for offset in [10, 20, 30] {
        commit(&c, &topic, offset);
        polls_pass(&k, 2);
    }
    // Burrow's rule: STOP once the time since the newest commit is longer than the window
    // spans (newest minus oldest commit). Every reading on the way is checked against the commit
    // times kroute shows and the clock read around the request, so a slow machine cannot make
    // a right answer look early or late.
    let v = wait_for(
        &format!("{group} to be STOP"),
        Duration::from_secs(30),
        || {
            let asked = wall_ms();
            let (_, v) = burrow(&k, &group, "lag");
            let answered = wall_ms();
            let p = &v["status"]["partitions"][0];
            if p["end"]["offset"] != 30 {
                return None; // the last commit is not read from the log yet
            }
            let times = [&p["start"], &p["end"]].map(|c| c["timestamp"].as_i64());
            let [Some(oldest), Some(newest)] = times else {
                panic!("no commit times: {v}");
            };
            let span = newest - oldest;
            assert!(span > 0, "the window spans no time: {v}");
            if p["status"] == "STOP" {
                // kroute judged at some moment before `answered`.
                assert!(
                    answered - newest > span,
                    "STOP after at most {} ms without a commit, the window spans {span} ms: {v}",
                    answered - newest
                );
                return Some(v);
            }
            // kroute judged in whole seconds (Burrow's clock), at the start of its last read of
            // `__consumer_offsets` (a commit made since is not known yet), which comes every
            // 500 ms plus the read's own time (up to 1 s allowed here): past the span by more
            // than that, the rule says STOP.
            assert!(
                asked - newest <= span + 1000 + LOG_READ_PERIOD_MS,
                "not STOP {} ms after the last commit, the window spans {span} ms: {v}",
                asked - newest
            );
            None
        },
    );
    assert_eq!(v["status"]["status"], "ERR", "{v}");
    assert_eq!(v["status"]["totallag"], 70, "{v}");
    // /status lists the partition that is not OK, with Burrow's fields.
    let (code, status) = burrow(&k, &group, "status");
    assert_eq!(code, 200);
    assert_eq!(status["error"], false);
    assert_eq!(status["message"], "consumer status returned");
    assert_eq!(status["status"]["partitions"][0]["end"]["offset"], 30);
    assert_eq!(status["status"]["maxlag"]["current_lag"], 70);
    let metric = k.metric("kroute_lag_group_status", &[&format!("group=\"{group}\"")]);
    assert_eq!(metric, 3.0, "ERR is 3");
    // The rendered series pass Prometheus' own checks next to the registered ones.
    let text = k.metrics();
    let (ok, out) = promtool(&repo_root(), &["check", "metrics"], Some(&text));
    assert!(
        ok && out.trim().is_empty(),
        "promtool check metrics:\n{out}"
    );
    k.assert_clean_logs(&[]);
}

#[test]
fn a_consumer_committing_the_same_offset_while_lag_grows_is_stall() {
    let k = lag_kroute();
    let (topic, group) = (topic("lag-stall-"), unique("g-stall-"));
    let c = committer(&k, &group);
    for _ in 0..5 {
        produce_seen(&k, &topic, 20);
        commit(&c, &topic, 10);
    }
    let v = wait_statuses(&k, &group, ("ERR", "STALL"), Duration::from_secs(5));
    assert_eq!(v["status"]["partitions"][0]["current_lag"], 90, "{v}");
    k.assert_clean_logs(&[]);
}

#[test]
fn offsets_reset_to_earliest_with_the_kafka_tool_are_rewind() {
    let k = lag_kroute();
    reset_to_earliest_is_rewind(&k);
    assert!(k.metric("kroute_lag_commits_logged_total", &[]) >= 4.0);
    k.assert_clean_logs(&[]);
}

/// Without `__consumer_offsets` (`lag.offsets_log = false`, or a cluster that refuses kroute
/// the topic), commits through kroute are seen passing.
#[test]
fn without_the_offsets_log_commits_through_kroute_are_seen_passing() {
    let k = Kroute::start_with(KrouteOptions {
        extra_toml: format!("{LAG_TOML}offsets_log = false\n"),
        ..KrouteOptions::default()
    });
    reset_to_earliest_is_rewind(&k);
    assert!(k.metric("kroute_lag_commits_observed_total", &[]) >= 4.0);
    assert_eq!(k.metric("kroute_lag_commits_logged_total", &[]), 0.0);
    k.assert_clean_logs(&[]);
}

/// Commits 40, 60, 80, then Apache Kafka's own tool resets the group to the earliest offset
/// through kroute: REWIND.
fn reset_to_earliest_is_rewind(k: &Kroute) {
    let (topic, group) = (topic("lag-rewind-"), unique("g-rewind-"));
    let c = committer(k, &group);
    produce_seen(k, &topic, 100);
    for offset in [40, 60, 80] {
        commit(&c, &topic, offset);
        polls_pass(k, 1);
    }
    drop(c);
    cluster(&[
        "tool",
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        "--bootstrap-server",
        &k.bootstrap,
        "--group",
        &group,
        "--topic",
        &topic,
        "--reset-offsets",
        "--to-earliest",
        "--execute",
    ]);
    let v = wait_statuses_at(k, &group, ("ERR", "REWIND"), 0, Duration::from_secs(10));
    assert_eq!(v["status"]["partitions"][0]["end"]["offset"], 0, "{v}");
}

/// Burrow's topic endpoints, which Telegraf's burrow input reads next to the consumer ones:
/// every topic of the cluster, and a topic's log-end offsets by partition.
#[test]
fn burrows_topic_endpoints_list_every_topic_with_its_log_ends() {
    let k = lag_kroute();
    let topic = unique("lag-topic-");
    create_topic(&topic, 3, &[]);
    let how = Produce {
        partition: Some(1),
        ..Produce::default()
    };
    assert_eq!(produce(&k.bootstrap, &topic, 7, how).len(), 7);
    polls_pass(&k, 2);
    let get = |path: &str| {
        let (code, body) = http_get(&k.admin, path).expect("admin endpoint answers");
        let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}"));
        (code, v)
    };
    let (code, list) = get("/v3/kafka/local/topic");
    assert_eq!(code, 200, "{list}");
    assert_eq!(list["message"], "topic list returned");
    let topics = list["topics"].as_array().expect("topics");
    assert!(topics.iter().any(|t| t == topic.as_str()), "{list}");
    let (code, detail) = get(&format!("/v3/kafka/local/topic/{topic}"));
    assert_eq!(code, 200, "{detail}");
    assert_eq!(detail["error"], false);
    assert_eq!(detail["message"], "topic offsets returned");
    assert_eq!(detail["offsets"], serde_json::json!([0, 7, 0]), "{detail}");
    // Burrow's answers for what it does not know.
    let (code, missing) = get("/v3/kafka/local/topic/no-such-topic-anywhere");
    assert_eq!((code, &missing["error"]), (404, &Value::Bool(true)));
    assert_eq!(missing["message"], "cluster or topic not found");
    assert_eq!(get("/v3/kafka/elsewhere/topic").0, 404);
    k.assert_clean_logs(&[]);
}

#[test]
fn an_unknown_group_is_404_notfound_and_the_cluster_is_listed() {
    let k = lag_kroute();
    let (code, v) = burrow(&k, "no-such-group-anywhere", "status");
    assert_eq!(code, 404, "{v}");
    // Burrow's own shape: 404, but "error": false and the usual message.
    assert_eq!(v["error"], false);
    assert_eq!(v["message"], "consumer status returned");
    assert_eq!(v["status"]["status"], "NOTFOUND");
    assert_eq!(
        v["request"]["url"],
        "/v3/kafka/local/consumer/no-such-group-anywhere/status"
    );
    let (code, body) = http_get(&k.admin, "/v3/kafka").unwrap();
    assert_eq!(code, 200);
    let clusters: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(clusters["clusters"], serde_json::json!(["local"]));
    let (code, _) = http_get(&k.admin, "/v3/kafka/elsewhere/consumer").unwrap();
    assert_eq!(code, 404);
    k.assert_clean_logs(&[]);
}

/// A subscribed consumer that reads everything and commits as it goes, until `stop`.
fn group_consumer(
    bootstrap: &str,
    topic: &str,
    group: &str,
    client_id: &str,
    protocol: &str,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("client.id", client_id)
        .set("group.protocol", protocol)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest");
    if protocol == "classic" {
        config.set("session.timeout.ms", "6000");
    }
    let consumer: BaseConsumer = config.create().expect("group consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    // Commits its position once a second, as auto-commit would (every 5 s by default).
    std::thread::spawn(move || {
        let mut position: Option<(String, i32, i64)> = None;
        let mut committed_at = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(50)) {
                position = Some((m.topic().to_string(), m.partition(), m.offset() + 1));
            }
            if committed_at.elapsed() >= Duration::from_secs(1)
                && let Some((topic, partition, offset)) = &position
            {
                let mut tpl = TopicPartitionList::new();
                let _ = tpl.add_partition_offset(topic, *partition, Offset::Offset(*offset));
                let _ = consumer.commit(&tpl, CommitMode::Sync);
                committed_at = Instant::now();
            }
        }
        consumer.unsubscribe();
    })
}

/// Producers adding a record every 20 ms through kroute until `stop`.
fn steady_producer(k: &Kroute, topic: &str, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    let (bootstrap, topic) = (k.bootstrap.clone(), topic.to_string());
    std::thread::spawn(move || {
        let how = Produce {
            partition: Some(0),
            per_second: Some(50),
            ..Produce::default()
        };
        while !stop.load(Ordering::Relaxed) {
            produce(&bootstrap, &topic, 25, how);
        }
    })
}

fn keeps_up_and_is_ok(protocol: &str) {
    let k = lag_kroute();
    let topic = topic(&format!("lag-ok-{protocol}-"));
    let group = unique(&format!("g-ok-{protocol}-"));
    let client_id = format!("lag-test-{protocol}");
    let stop = Arc::new(AtomicBool::new(false));
    let producer = steady_producer(&k, &topic, stop.clone());
    let consumer = group_consumer(
        &k.bootstrap,
        &topic,
        &group,
        &client_id,
        protocol,
        stop.clone(),
    );
    // A window of five commits and the owner known from the group's description.
    let v = wait_for("an owned, full window", Duration::from_secs(60), || {
        let (_, v) = burrow(&k, &group, "lag");
        let p = &v["status"]["partitions"][0];
        (p["complete"] == 1.0 && p["client_id"] == client_id.as_str()).then_some(v)
    });
    stop.store(true, Ordering::Relaxed);
    producer.join().unwrap();
    consumer.join().unwrap();
    assert_eq!(v["status"]["status"], "OK", "{v}");
    let p = &v["status"]["partitions"][0];
    assert_eq!(p["status"], "OK", "{v}");
    assert!(
        p["owner"].as_str().is_some_and(|o| o.contains("127.0.0.1")),
        "{v}"
    );
    let (_, list) = http_get(&k.admin, "/v3/kafka/local/consumer").unwrap();
    assert!(list.contains(&format!("\"{group}\"")), "{list}");
    k.assert_clean_logs(&[]);
}

/// Looks at `group` every 200 ms, asserting OK at every look, until its window has been full
/// for 5 s. Returns the number of looks.
fn ok_at_every_look(k: &Kroute, group: &str) -> usize {
    let mut looks = 0;
    let mut full_at: Option<Instant> = None;
    while full_at.is_none_or(|t| t.elapsed() < Duration::from_secs(5)) {
        let (code, v) = burrow(k, group, "lag");
        if code == 200 {
            looks += 1;
            assert_eq!(v["status"]["status"], "OK", "look {looks}: {v}");
            if full_at.is_none() && v["status"]["partitions"][0]["complete"] == 1.0 {
                full_at = Some(Instant::now());
            }
        }
        assert!(looks < 1000, "the window never filled");
        std::thread::sleep(Duration::from_millis(200));
    }
    looks
}

fn default_lag_kroute() -> Kroute {
    Kroute::start_with(KrouteOptions {
        extra_toml: "\n[lag]\nenabled = true\n".into(),
        ..KrouteOptions::default()
    })
}

/// At kroute's default lag settings, with the consumer talking straight to the cluster (kroute
/// only reads, as Burrow does), a group that keeps up is OK at every look from the moment it
/// appears: no ERR, STOP or STALL while its window fills (a page at night for nothing).
#[test]
fn a_healthy_group_is_ok_at_every_poll_from_its_start_at_default_settings() {
    let k = default_lag_kroute();
    let topic = topic("lag-healthy-");
    let group = unique("g-healthy-");
    let stop = Arc::new(AtomicBool::new(false));
    let producer = steady_producer(&k, &topic, stop.clone());
    let direct = common::cluster_bootstrap();
    let consumer = group_consumer(&direct, &topic, &group, "healthy", "classic", stop.clone());
    let looks = ok_at_every_look(&k, &group);
    stop.store(true, Ordering::Relaxed);
    producer.join().unwrap();
    consumer.join().unwrap();
    eprintln!("{looks} looks at the group, all OK");
    k.assert_clean_logs(&[]);
}

/// A child process killed (and reaped) on drop.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `consumer` (a command taking the group's consumer to its end) beside a steady
/// producer, and asserts the group OK at every look until its window has been full for 5 s.
fn healthy_group_ok_at_every_look(
    k: &Kroute,
    client: &str,
    consumer: impl FnOnce(&str, &str) -> std::process::Command,
) {
    let topic = topic(&format!("lag-healthy-{client}-"));
    let group = unique(&format!("g-healthy-{client}-"));
    let stop = Arc::new(AtomicBool::new(false));
    let producer = steady_producer(k, &topic, stop.clone());
    let consumer = consumer(&topic, &group)
        .stdout(std::process::Stdio::null())
        .spawn()
        .map(Killed)
        .unwrap_or_else(|e| panic!("start the {client} consumer: {e}"));
    let looks = ok_at_every_look(k, &group);
    drop(consumer);
    stop.store(true, Ordering::Relaxed);
    producer.join().unwrap();
    eprintln!("{looks} looks at the {client} group, all OK");
    k.assert_clean_logs(&[]);
}

/// The same with the Java client through kroute: a group member committing after every poll
/// (commitSync, the Java test client's group-consume), at default settings.
#[test]
fn a_healthy_java_group_through_kroute_is_ok_at_every_poll_at_default_settings() {
    let k = default_lag_kroute();
    healthy_group_ok_at_every_look(&k, "java", |topic, group| {
        let mut java = std::process::Command::new(repo_root().join("tests/java/run.sh"));
        java.args([
            "group-consume",
            "--bootstrap",
            &k.bootstrap,
            "--topic",
            topic,
        ])
        .args(["--group", group, "--members", "1", "--expect", "100000000"])
        .args(["--timeout-ms", "600000"]);
        java
    });
}

/// And with kafka-python straight to the cluster, auto-committing on its own schedule (every
/// second here; its default is 5 s, which only makes the window slower to fill).
#[test]
fn a_healthy_kafka_python_group_is_ok_at_every_poll_at_default_settings() {
    let k = default_lag_kroute();
    healthy_group_ok_at_every_look(&k, "kafka-python", |topic, group| {
        let venv = repo_root().join(common::producers::KAFKA_PYTHON);
        let mut python = std::process::Command::new(venv.join("bin/python3"));
        python
            .arg(repo_root().join("tests/python/consumer.py"))
            .args([
                "--bootstrap",
                &common::cluster_bootstrap(),
                "--topic",
                topic,
            ])
            .args([
                "--group",
                group,
                "--commit-interval-ms",
                "1000",
                "--seconds",
                "600",
            ]);
        python
    });
}

#[test]
fn a_classic_group_that_keeps_up_is_ok_with_its_owner() {
    keeps_up_and_is_ok("classic");
}

#[test]
fn a_kip_848_consumer_group_is_judged_with_its_owner() {
    keeps_up_and_is_ok("consumer");
}

/// The time lag is how long ago the log end stood at the committed offset. The log end moves
/// in steps here, each seen by kroute's polls before the next, so the moment kroute dated the
/// committed offset is bracketed by moments the test saw: every reading of the time lag must
/// lie within what those allow, however slow the machine.
#[test]
fn a_paused_consumer_reports_the_pause_as_time_lag() {
    let k = lag_kroute();
    let (topic, group) = (topic("lag-time-"), unique("g-time-"));
    let c = committer(&k, &group);
    let mut committed = 0;
    let mut caught_up_at = 0;
    // Caught up: the consumer commits every step's log end.
    for _ in 0..3 {
        // kroute's last reading at `committed` comes after this step is in (produce_seen
        // waits for a poll that began after it), and is dated no earlier.
        caught_up_at = produce_seen(&k, &topic, 10);
        committed += 10;
        commit(&c, &topic, committed);
    }
    // Paused: the producer goes on, the consumer does not. kroute's last reading at
    // `committed` is dated before the polls seen after the next step completed.
    produce_seen(&k, &topic, 10);
    let moved_on_by = wall_ms();
    let mut readings = 0;
    let v = wait_for("a time lag of 5 s", Duration::from_secs(60), || {
        let asked = wall_ms();
        let (_, v) = burrow(&k, &group, "lag");
        let answered = wall_ms();
        let p = &v["status"]["partitions"][0];
        assert_eq!(p["end"]["offset"], committed, "{v}");
        let seconds = p["time_lag_seconds"]
            .as_f64()
            .unwrap_or_else(|| panic!("no time lag: {v}"));
        let (low, high) = (asked - moved_on_by, answered - caught_up_at);
        let ms = seconds * 1000.0;
        assert!(
            ms >= low as f64 - 1.0 && ms <= high as f64 + 1.0,
            "time lag {ms:.0} ms, the test saw it must be within {low}..={high} ms: {v}"
        );
        readings += 1;
        (low >= 5_000).then_some(v)
    });
    eprintln!("{readings} readings of the time lag, each within its bounds");
    let seconds = v["status"]["partitions"][0]["time_lag_seconds"]
        .as_f64()
        .unwrap_or_default();
    // Read later: the same moment, or a later one.
    let metric = k.metric(
        "kroute_lag_partition_time_lag_seconds",
        &[&format!("group=\"{group}\"")],
    );
    assert!(metric >= seconds * 0.99, "{metric} < {seconds}");
    k.assert_clean_logs(&[]);
}
