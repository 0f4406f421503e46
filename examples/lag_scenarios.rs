//! The consumer-lag scenarios of tests/lag.rs, run against kroute and Burrow side by side
//! (bench/burrow.sh starts both and runs this).
//!
//! ```text
//! cargo build --release --example lag_scenarios
//! target/release/examples/lag_scenarios KROUTE_BOOTSTRAP KROUTE_ADMIN BURROW_HTTP CLUSTER_BOOTSTRAP
//! ```
//!
//! Every scenario has its own one-partition topic and group. The consumers commit through kroute
//! (KROUTE_BOOTSTRAP), or with LAG_CONSUMERS=direct straight to the brokers; both kroute and
//! Burrow read the commits from `__consumer_offsets`. The scenarios run in parallel threads; each one, once set up, polls
//! `/v3/kafka/local/consumer/<group>/status` on both (every 250 ms) until each has reached the
//! expected verdict or the timeout, and records the first time each reached it (seconds after
//! the scenario's last action), the statuses each showed on the way, and `/lag` at that moment
//! (partition status, totallag, owner, client id, the window's start and end lag).
//!
//! Before its commits, a scenario waits until both have seen its topic's log end: two completed
//! kroute polls (`kroute_lag_polls_total`) and Burrow's `/v3/kafka/local/topic/<topic>` showing
//! the offset. Environment: LAG_SCENARIOS (names, space separated; default all), LAG_TIMEOUT_S
//! (per scenario, default 90), LAG_PREFIX (topic and group name prefix, default `lagcmp-<pid>-`).
//! Output: a Markdown table on stdout, progress on stderr.

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use serde_json::Value;

#[derive(Clone)]
struct Env {
    kroute_bootstrap: String,
    /// Where the consumers connect: kroute (LAG_CONSUMERS=kroute, the default) or the brokers
    /// themselves (LAG_CONSUMERS=direct: kroute only reads, as Burrow does).
    consumers: String,
    kroute_admin: String,
    burrow: String,
    prefix: String,
    timeout: Duration,
}

/// What the two answered for one scenario.
#[derive(Default, Clone)]
struct Side {
    /// The first time (s after the scenario's last action) the expected verdict was shown.
    reached_s: Option<f64>,
    /// The distinct group/partition statuses shown, in order, with when and the window then.
    seen: Vec<String>,
    last_label: Option<String>,
    /// group/partition status, totallag and details when reached (or at the timeout).
    verdict: String,
    total_lag: String,
    detail: String,
}

struct Outcome {
    name: &'static str,
    expected: String,
    kroute: Side,
    burrow: Side,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [kroute_bootstrap, kroute_admin, burrow, _cluster] = &args[..] else {
        eprintln!(
            "usage: lag_scenarios KROUTE_BOOTSTRAP KROUTE_ADMIN BURROW_HTTP CLUSTER_BOOTSTRAP"
        );
        std::process::exit(2);
    };
    let consumers = match std::env::var("LAG_CONSUMERS").as_deref() {
        Ok("direct") => cluster_bootstrap(),
        Ok("kroute") | Err(_) => kroute_bootstrap.clone(),
        Ok(other) => {
            eprintln!("LAG_CONSUMERS must be kroute or direct, not {other}");
            std::process::exit(2);
        }
    };
    let env = Env {
        kroute_bootstrap: kroute_bootstrap.clone(),
        consumers,
        kroute_admin: kroute_admin.clone(),
        burrow: burrow.clone(),
        prefix: std::env::var("LAG_PREFIX")
            .unwrap_or_else(|_| format!("lagcmp-{}-", std::process::id())),
        timeout: Duration::from_secs(
            std::env::var("LAG_TIMEOUT_S")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(90),
        ),
    };
    let all = [
        "ok-classic",
        "ok-kip848",
        "warn",
        "stop",
        "stall",
        "stall-direct",
        "rewind",
        "notfound",
        "warn-fast",
        "stop-caught-up",
    ];
    let wanted: Vec<&'static str> = match std::env::var("LAG_SCENARIOS") {
        Ok(list) if !list.trim().is_empty() => all
            .iter()
            .copied()
            .filter(|s| list.split_whitespace().any(|w| w == *s))
            .collect(),
        _ => all.to_vec(),
    };
    let started = Instant::now();
    let handles: Vec<JoinHandle<Outcome>> = wanted
        .iter()
        .map(|&name| {
            let env = env.clone();
            thread::spawn(move || run(&env, name))
        })
        .collect();
    let outcomes: Vec<Outcome> = handles
        .into_iter()
        .map(|h| h.join().expect("scenario thread"))
        .collect();
    eprintln!(
        "lag_scenarios: done in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    print_table(&outcomes);
    print_group_lists(&env);
    print_topic_offsets(&env);
}

fn run(env: &Env, name: &'static str) -> Outcome {
    eprintln!("[{name}] start");
    let outcome = match name {
        "ok-classic" => keeps_up(env, name, "classic"),
        "ok-kip848" => keeps_up(env, name, "consumer"),
        "warn" => warn(env, name),
        "stop" => stop(env, name),
        "stall" => stall(env, name, true),
        "stall-direct" => stall(env, name, false),
        "rewind" => rewind(env, name),
        "notfound" => notfound(env, name),
        "warn-fast" => warn_fast(env, name),
        "stop-caught-up" => stop_caught_up(env, name),
        other => panic!("unknown scenario {other}"),
    };
    eprintln!(
        "[{name}] kroute {} in {:?}, burrow {} in {:?}",
        outcome.kroute.verdict,
        outcome.kroute.reached_s,
        outcome.burrow.verdict,
        outcome.burrow.reached_s
    );
    outcome
}

// ------------------------------------------------------------------------------------------
// scenarios

/// A subscribed consumer reading everything and committing its position every second, with a
/// producer adding 50 records a second; both until both APIs show OK with a full window.
fn keeps_up(env: &Env, name: &'static str, protocol: &str) -> Outcome {
    let (topic, group) = names(env, name);
    create_topic(&topic);
    wait_log_end_seen(env, &topic, 0);
    let stop = Arc::new(AtomicBool::new(false));
    let producer = steady_producer(env, &topic, stop.clone());
    let client_id = format!("{name}-client");
    let consumer = group_consumer(env, &topic, &group, &client_id, protocol, stop.clone());
    let t0 = Instant::now();
    let want = |v: &Value| {
        v["status"]["status"] == "OK"
            && v["status"]["partitions"][0]["status"] == "OK"
            && v["status"]["partitions"][0]["complete"] == 1.0
    };
    let (kroute, burrow) = watch(env, &group, t0, &want);
    stop.store(true, Ordering::Relaxed);
    producer.join().expect("producer");
    consumer.join().expect("consumer");
    Outcome {
        name,
        expected: "OK / OK, full window".into(),
        kroute,
        burrow,
    }
}

/// Each round the producer adds 50 and the consumer commits 10 more: lag grows at every commit.
fn warn(env: &Env, name: &'static str) -> Outcome {
    let (topic, group) = names(env, name);
    create_topic(&topic);
    let c = committer(&env.consumers, &group);
    let mut end = 0;
    for round in 1..=5 {
        end += produce(env, &topic, 50);
        wait_log_end_seen(env, &topic, end);
        commit(&c, &topic, 10 * round);
    }
    let t0 = Instant::now();
    let (kroute, burrow) = watch(env, &group, t0, &is("WARN", "WARN"));
    Outcome {
        name,
        expected: "WARN / WARN".into(),
        kroute,
        burrow,
    }
}

/// 100 records, commits 10, 20, 30 (two polls apart), then silence.
fn stop(env: &Env, name: &'static str) -> Outcome {
    let (topic, group) = names(env, name);
    create_topic(&topic);
    let c = committer(&env.consumers, &group);
    let end = produce(env, &topic, 100);
    wait_log_end_seen(env, &topic, end);
    for offset in [10, 20, 30] {
        commit(&c, &topic, offset);
        wait_log_end_seen(env, &topic, end);
    }
    let t0 = Instant::now();
    let (kroute, burrow) = watch(env, &group, t0, &is("ERR", "STOP"));
    Outcome {
        name,
        expected: "ERR / STOP".into(),
        kroute,
        burrow,
    }
}

/// Five times: the producer adds 20, the consumer commits offset 10 again. With `through_kroute`
/// false the commits go straight to the brokers: kroute only polls them.
fn stall(env: &Env, name: &'static str, through_kroute: bool) -> Outcome {
    let (topic, group) = names(env, name);
    create_topic(&topic);
    let bootstrap = if through_kroute {
        env.consumers.clone()
    } else {
        cluster_bootstrap()
    };
    let c = committer(&bootstrap, &group);
    let mut end = 0;
    for _ in 0..5 {
        end += produce(env, &topic, 20);
        wait_log_end_seen(env, &topic, end);
        commit(&c, &topic, 10);
    }
    let t0 = Instant::now();
    let (kroute, burrow) = watch(env, &group, t0, &is("ERR", "STALL"));
    Outcome {
        name,
        expected: if through_kroute {
            "ERR / STALL".into()
        } else {
            "ERR / STALL (commits straight to the brokers)".into()
        },
        kroute,
        burrow,
    }
}

/// 100 records, commits 40, 60, 80, then kafka-consumer-groups --reset-offsets --to-earliest
/// through kroute.
fn rewind(env: &Env, name: &'static str) -> Outcome {
    let (topic, group) = names(env, name);
    create_topic(&topic);
    let c = committer(&env.consumers, &group);
    let end = produce(env, &topic, 100);
    wait_log_end_seen(env, &topic, end);
    for offset in [40, 60, 80] {
        commit(&c, &topic, offset);
        wait_log_end_seen(env, &topic, end);
    }
    drop(c);
    let one = TOOL.lock().unwrap_or_else(|e| e.into_inner());
    let out = Command::new("scripts/cluster.sh")
        .args([
            "tool",
            "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
            "--bootstrap-server",
            &env.consumers,
            "--group",
            &group,
            "--topic",
            &topic,
            "--reset-offsets",
            "--to-earliest",
            "--execute",
        ])
        .output()
        .expect("scripts/cluster.sh tool");
    drop(one);
    assert!(
        out.status.success(),
        "reset-offsets: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t0 = Instant::now();
    let (kroute, burrow) = watch(env, &group, t0, &is("ERR", "REWIND"));
    Outcome {
        name,
        expected: "ERR / REWIND".into(),
        kroute,
        burrow,
    }
}

/// A consumer committing 10 more every 250 ms (40/s) while the producer adds 100/s: truly
/// falling behind, but each commit's lag is taken against a log end up to one refresh old, so
/// between refreshes the recorded lag goes down. Watched for 20 s while both run.
fn warn_fast(env: &Env, name: &'static str) -> Outcome {
    let (topic, group) = names(env, name);
    create_topic(&topic);
    wait_log_end_seen(env, &topic, 0);
    let stop = Arc::new(AtomicBool::new(false));
    let producer = steady_producer_at(env, &topic, 100, stop.clone());
    let committing = {
        let (stop, bootstrap, topic, group) = (
            stop.clone(),
            env.consumers.clone(),
            topic.clone(),
            group.clone(),
        );
        thread::spawn(move || {
            let c = committer(&bootstrap, &group);
            let mut offset = 0;
            while !stop.load(Ordering::Relaxed) {
                offset += 10;
                commit(&c, &topic, offset);
                thread::sleep(Duration::from_millis(250));
            }
        })
    };
    let t0 = Instant::now();
    let (kroute, burrow) = watch_for(
        env,
        &group,
        t0,
        Duration::from_secs(20),
        &is("WARN", "WARN"),
    );
    stop.store(true, Ordering::Relaxed);
    producer.join().expect("producer");
    committing.join().expect("committer");
    Outcome {
        name,
        expected: "WARN / WARN (truly behind; watched 20 s)".into(),
        kroute,
        burrow,
    }
}

/// A consumer that commits the log end (caught up) once a second five times, then stops while
/// the producer goes on (50/s).
fn stop_caught_up(env: &Env, name: &'static str) -> Outcome {
    let (topic, group) = names(env, name);
    create_topic(&topic);
    wait_log_end_seen(env, &topic, 0);
    let stop = Arc::new(AtomicBool::new(false));
    let producer = steady_producer_at(env, &topic, 50, stop.clone());
    let c = committer(&env.consumers, &group);
    for _ in 0..5 {
        let (_, high) = c
            .fetch_watermarks(&topic, 0, Duration::from_secs(10))
            .expect("log end");
        commit(&c, &topic, high);
        thread::sleep(Duration::from_secs(1));
    }
    let t0 = Instant::now();
    let (kroute, burrow) = watch(env, &group, t0, &is("ERR", "STOP"));
    stop.store(true, Ordering::Relaxed);
    producer.join().expect("producer");
    Outcome {
        name,
        expected: "ERR / STOP (had kept up)".into(),
        kroute,
        burrow,
    }
}

fn notfound(env: &Env, name: &'static str) -> Outcome {
    let group = format!("{}never-committed", env.prefix);
    let side = |base: &str| {
        let (code, v) = get(base, &format!("/v3/kafka/local/consumer/{group}/status"));
        Side {
            reached_s: (code == 404 && v["status"]["status"] == "NOTFOUND").then_some(0.0),
            verdict: format!(
                "HTTP {code}, {}",
                v["status"]["status"].as_str().unwrap_or("-")
            ),
            total_lag: "-".into(),
            detail: format!(
                "body: error {}, message \"{}\", status {}",
                v["error"],
                v["message"].as_str().unwrap_or(""),
                v["status"]
            ),
            ..Side::default()
        }
    };
    Outcome {
        name,
        expected: "HTTP 404, NOTFOUND".into(),
        kroute: side(&env.kroute_admin),
        burrow: side(&env.burrow),
    }
}

// ------------------------------------------------------------------------------------------
// watching both APIs

fn is(group: &'static str, partition: &'static str) -> impl Fn(&Value) -> bool {
    move |v: &Value| {
        v["status"]["status"] == group && v["status"]["partitions"][0]["status"] == partition
    }
}

/// Polls `/lag` of both until each matched `want` or the timeout; the scenario's clock starts
/// at `t0`.
fn watch(env: &Env, group: &str, t0: Instant, want: &dyn Fn(&Value) -> bool) -> (Side, Side) {
    watch_for(env, group, t0, env.timeout, want)
}

fn watch_for(
    env: &Env,
    group: &str,
    t0: Instant,
    timeout: Duration,
    want: &dyn Fn(&Value) -> bool,
) -> (Side, Side) {
    let path_status = format!("/v3/kafka/local/consumer/{group}/status");
    let path_lag = format!("/v3/kafka/local/consumer/{group}/lag");
    let mut sides = [Side::default(), Side::default()];
    let bases = [env.kroute_admin.as_str(), env.burrow.as_str()];
    let mut last: [Value; 2] = [Value::Null, Value::Null];
    loop {
        for i in 0..2 {
            if sides[i].reached_s.is_some() {
                continue;
            }
            // /status decides the group status (what Telegraf and alerts read); /lag, the
            // same evaluation with every partition listed, gives the partition's status.
            let (code, status) = get(bases[i], &path_status);
            let (_, lag) = get(bases[i], &path_lag);
            let label = if code == 404 {
                "404".to_string()
            } else {
                format!(
                    "{}/{}",
                    status["status"]["status"].as_str().unwrap_or("?"),
                    lag["status"]["partitions"][0]["status"]
                        .as_str()
                        .unwrap_or("-")
                )
            };
            if sides[i].last_label.as_ref() != Some(&label) {
                sides[i].seen.push(format!(
                    "{label} at {:.1} s{}",
                    t0.elapsed().as_secs_f64(),
                    window_note(&lag)
                ));
                sides[i].last_label = Some(label);
            }
            let agree = lag["status"]["status"] == status["status"]["status"];
            if agree && want(&lag) {
                sides[i].reached_s = Some(t0.elapsed().as_secs_f64());
                fill(&mut sides[i], &lag);
            }
            last[i] = lag;
        }
        if sides.iter().all(|s| s.reached_s.is_some()) || t0.elapsed() > timeout {
            break;
        }
        thread::sleep(Duration::from_millis(250));
    }
    for i in 0..2 {
        if sides[i].reached_s.is_none() {
            fill(&mut sides[i], &last[i]);
        }
    }
    let [k, b] = sides;
    (k, b)
}

/// The window's commits as kroute or Burrow shows them: count-free, so its span (newest minus
/// oldest commit time) and the newest commit's age, which decide STOP.
fn window_note(lag: &Value) -> String {
    let p = &lag["status"]["partitions"][0];
    let (Some(first), Some(last)) = (
        p["start"]["timestamp"].as_i64(),
        p["end"]["timestamp"].as_i64(),
    ) else {
        return String::new();
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    format!(
        " (span {} ms, newest commit {} ms old, offsets {}..{}, complete {})",
        last - first,
        now - last,
        p["start"]["offset"],
        p["end"]["offset"],
        p["complete"]
    )
}

fn fill(side: &mut Side, lag: &Value) {
    let s = &lag["status"];
    let p = &s["partitions"][0];
    side.verdict = format!(
        "{} / {}",
        s["status"].as_str().unwrap_or("-"),
        p["status"].as_str().unwrap_or("-")
    );
    side.total_lag = s["totallag"].to_string();
    let lag_of = |c: &Value| match &c["lag"] {
        Value::Null => "null".to_string(),
        Value::Object(o) => o.get("value").map(|v| v.to_string()).unwrap_or_default(),
        other => other.to_string(),
    };
    side.detail = format!(
        "window {}..{} (lag {}..{}), complete {}, owner \"{}\", client \"{}\"",
        p["start"]["offset"],
        p["end"]["offset"],
        lag_of(&p["start"]),
        lag_of(&p["end"]),
        p["complete"],
        p["owner"].as_str().unwrap_or(""),
        p["client_id"].as_str().unwrap_or("")
    );
}

fn print_table(outcomes: &[Outcome]) {
    let time = |s: &Side| match s.reached_s {
        Some(t) => format!("{t:.1} s"),
        None => "not reached".into(),
    };
    println!(
        "| scenario | expected | kroute: group / partition | kroute totallag | kroute time | Burrow: group / partition | Burrow totallag | Burrow time |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for o in outcomes {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            o.name,
            o.expected,
            o.kroute.verdict,
            o.kroute.total_lag,
            time(&o.kroute),
            o.burrow.verdict,
            o.burrow.total_lag,
            time(&o.burrow)
        );
    }
    println!();
    println!("Details (statuses seen on the way, group/partition; the partition when reached):");
    println!();
    for o in outcomes {
        for (who, s) in [("kroute", &o.kroute), ("Burrow", &o.burrow)] {
            println!(
                "- {} {who}: seen {}; {}",
                o.name,
                if s.seen.is_empty() {
                    "-".into()
                } else {
                    s.seen.join(" → ")
                },
                s.detail
            );
        }
    }
}

/// The groups each lists, compared (only the differences not made by this run's groups).
fn print_group_lists(env: &Env) {
    let list = |base: &str| -> BTreeSet<String> {
        let (_, v) = get(base, "/v3/kafka/local/consumer");
        v["consumers"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|g| g.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (k, b) = (list(&env.kroute_admin), list(&env.burrow));
    let only_burrow: Vec<&String> = b.difference(&k).collect();
    let only_kroute: Vec<&String> = k.difference(&b).collect();
    println!();
    println!(
        "Consumer lists: kroute {} groups, Burrow {}; only in Burrow's: {:?}; only in kroute's: {} (first 10: {:?})",
        k.len(),
        b.len(),
        only_burrow,
        only_kroute.len(),
        only_kroute.iter().take(10).collect::<Vec<_>>()
    );
}

/// Burrow's topic endpoints on both: the run's topics in each list, and each one's offsets
/// (`/v3/kafka/local/topic/<topic>`) compared. The producers have stopped, but each tool shows
/// the log ends of its last refresh, so both are read again until they agree or 3 refreshes
/// pass.
fn print_topic_offsets(env: &Env) {
    let ours = |base: &str| -> BTreeSet<String> {
        let (_, v) = get(base, "/v3/kafka/local/topic");
        v["topics"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|t| t.as_str())
                    .filter(|t| t.starts_with(&env.prefix))
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    let (k, b) = (ours(&env.kroute_admin), ours(&env.burrow));
    let mut differ = Vec::new();
    for topic in k.intersection(&b) {
        let path = format!("/v3/kafka/local/topic/{topic}");
        let deadline = Instant::now() + Duration::from_secs(35);
        loop {
            let (kc, kv) = get(&env.kroute_admin, &path);
            let (bc, bv) = get(&env.burrow, &path);
            if (kc, &kv["offsets"]) == (bc, &bv["offsets"]) {
                break;
            }
            if Instant::now() > deadline {
                differ.push(format!(
                    "{topic}: kroute {kc} {} / Burrow {bc} {}",
                    kv["offsets"], bv["offsets"]
                ));
                break;
            }
            thread::sleep(Duration::from_secs(1));
        }
    }
    println!();
    println!(
        "Topic endpoints: the run's topics listed by kroute {}, by Burrow {}; offsets compared for {}, equal for {}{}",
        k.len(),
        b.len(),
        k.intersection(&b).count(),
        k.intersection(&b).count() - differ.len(),
        if differ.is_empty() {
            String::new()
        } else {
            format!("; different: {differ:?}")
        }
    );
}

// ------------------------------------------------------------------------------------------
// Kafka and HTTP helpers

fn names(env: &Env, name: &str) -> (String, String) {
    (
        format!("{}{name}", env.prefix),
        format!("{}g-{name}", env.prefix),
    )
}

fn cluster_bootstrap() -> String {
    let out = Command::new("scripts/cluster.sh")
        .arg("bootstrap")
        .output()
        .expect("scripts/cluster.sh bootstrap");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// One JVM at a time on a 2-core machine.
static TOOL: Mutex<()> = Mutex::new(());

fn create_topic(topic: &str) {
    let _one = TOOL.lock().unwrap_or_else(|e| e.into_inner());
    let out = Command::new("scripts/cluster.sh")
        .args([
            "create-topic",
            topic,
            "--partitions",
            "1",
            "--replication-factor",
            "3",
        ])
        .output()
        .expect("scripts/cluster.sh create-topic");
    assert!(
        out.status.success(),
        "create-topic {topic}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Produces `n` records to partition 0 through kroute; returns `n`.
fn produce(env: &Env, topic: &str, n: i64) -> i64 {
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &env.kroute_bootstrap)
        .set("acks", "all")
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    let value = "v".repeat(100);
    for _ in 0..n {
        let mut record = BaseRecord::<(), str>::to(topic)
            .payload(&value)
            .partition(0);
        loop {
            match p.send(record) {
                Ok(()) => break,
                Err((_, back)) => {
                    p.poll(Duration::from_millis(10));
                    record = back;
                }
            }
        }
    }
    p.flush(Duration::from_secs(60)).expect("flush");
    n
}

fn steady_producer(env: &Env, topic: &str, stop: Arc<AtomicBool>) -> JoinHandle<()> {
    steady_producer_at(env, topic, 50, stop)
}

/// A producer adding `per_second` records a second through kroute until `stop`.
fn steady_producer_at(
    env: &Env,
    topic: &str,
    per_second: u64,
    stop: Arc<AtomicBool>,
) -> JoinHandle<()> {
    let (env, topic) = (env.clone(), topic.to_string());
    thread::spawn(move || {
        let p: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &env.kroute_bootstrap)
            .set("acks", "all")
            .set("linger.ms", "5")
            .create()
            .expect("producer");
        let value = "v".repeat(100);
        let (start, mut sent) = (Instant::now(), 0u64);
        while !stop.load(Ordering::Relaxed) {
            let due = start.elapsed().as_millis() as u64 * per_second / 1000;
            while sent < due {
                let record = BaseRecord::<(), str>::to(&topic)
                    .payload(&value)
                    .partition(0);
                if p.send(record).is_err() {
                    break;
                }
                sent += 1;
            }
            p.poll(Duration::from_millis(10));
        }
        let _ = p.flush(Duration::from_secs(30));
    })
}

/// A consumer of `group` that only commits (no subscription).
fn committer(bootstrap: &str, group: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer")
}

fn commit(c: &BaseConsumer, topic: &str, offset: i64) {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Offset(offset))
        .expect("partition offset");
    c.commit(&tpl, CommitMode::Sync).expect("commit");
}

fn group_consumer(
    env: &Env,
    topic: &str,
    group: &str,
    client_id: &str,
    protocol: &str,
    stop: Arc<AtomicBool>,
) -> JoinHandle<()> {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &env.consumers)
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
    thread::spawn(move || {
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

/// Waits until kroute completed two polls and Burrow's topic detail shows a log end >= `end`
/// (60 s at most).
fn wait_log_end_seen(env: &Env, topic: &str, end: i64) {
    let polls = || kroute_polls(&env.kroute_admin);
    let start = polls();
    let deadline = Instant::now() + Duration::from_secs(60);
    let burrow_sees = || {
        let (code, v) = get(&env.burrow, &format!("/v3/kafka/local/topic/{topic}"));
        code == 200 && v["offsets"][0].as_i64().is_some_and(|o| o >= end)
    };
    while !(polls() >= start + 2.0 && burrow_sees()) {
        assert!(
            Instant::now() < deadline,
            "log end {end} of {topic} not seen by both within 60 s"
        );
        thread::sleep(Duration::from_millis(100));
    }
}

fn kroute_polls(admin: &str) -> f64 {
    let out = Command::new("curl")
        .args([
            "-fsS",
            "--max-time",
            "5",
            &format!("http://{admin}/metrics"),
        ])
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.starts_with("kroute_lag_polls_total{") && l.contains("outcome=\"ok\""))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// GET http://BASE/PATH with curl: (status code, JSON body or Null).
fn get(base: &str, path: &str) -> (u16, Value) {
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "5",
            "-w",
            "\n%{http_code}",
            &format!("http://{base}{path}"),
        ])
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout);
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (
        code.trim().parse().unwrap_or(0),
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}
