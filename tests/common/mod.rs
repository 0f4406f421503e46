//! Shared harness for the integration tests: kroute as a real process in front of the real
//! cluster started by `scripts/cluster.sh`, the Java client, librdkafka, franz-go, raw Kafka
//! requests.
//!
//! Every test starts its own kroute on its own ports and uses its own topics, so tests can run
//! in parallel against one cluster. A kroute that logs an unexpected WARN or ERROR line fails
//! the test that ran it.

#![allow(dead_code)]

pub mod capacity;
pub mod container;
pub mod librdkafka;
pub mod producers;
pub mod prometheus;
pub mod secured;
pub mod shutdown;
pub mod slow;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader};
use kafka_protocol::protocol::{Encodable, StrBytes};

/// The real brokers, as started by `scripts/cluster.sh start`.
pub fn cluster_bootstrap() -> String {
    std::env::var("KROUTE_TEST_CLUSTER")
        .unwrap_or_else(|_| "127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094".into())
}

/// Real broker ports (what must never reach a client through kroute).
pub fn cluster_ports() -> Vec<u16> {
    cluster_bootstrap()
        .split(',')
        .filter_map(|a| a.rsplit_once(':')?.1.parse().ok())
        .collect()
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Polls `check` until it returns Some or `timeout` passes.
pub fn wait_for<T>(what: &str, timeout: Duration, check: impl FnMut() -> Option<T>) -> T {
    wait_for_described(|| what.to_string(), timeout, check)
}

/// [`wait_for`], with what it waited for described only on a timeout (so the description can
/// say how things stood then).
pub fn wait_for_described<T>(
    what: impl Fn() -> String,
    timeout: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {}",
            what()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A name no other test (or earlier run) uses.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}-{}-{}-{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn port_free(host: &str, port: u16) -> bool {
    TcpListener::bind((host, port)).is_ok()
}

/// The first port of the kernel's ephemeral range (32768 by default): test listeners stay
/// below it. A port picked free in that range can be taken as the local port of any outgoing
/// connection (a client's, a broker's) before kroute binds it, and held for as long as that
/// connection lives: it happened, and kroute's listener never came up.
fn ephemeral_start() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .filter(|start| *start > 21_000)
        .unwrap_or(32_768)
}

/// Picks a bootstrap port, an admin port and a broker port base whose ports 1..=3 are free,
/// from 20000 up to the ephemeral range.
pub fn pick_ports(host: &str) -> (u16, u16, u16) {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let seed = std::process::id() % 500;
    let span = (ephemeral_start() - 20_010) / 10 * 10;
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let base = 20_000 + ((seed * 37 + n * 10) % span) as u16;
        let ports = [base, base + 1, base + 2, base + 3, base + 5, base + 6];
        // Free on 127.0.0.1 too: a test may put relays there in front of kroute's ports.
        if ports
            .iter()
            .all(|p| port_free(host, *p) && port_free("127.0.0.1", *p))
        {
            return (base + 5, base + 6, base);
        }
    }
}

/// Options for one kroute process.
#[derive(Clone)]
pub struct KrouteOptions {
    pub bind_host: String,
    pub advertised_host: String,
    /// Keys of `[upstream]` (after bootstrap_servers), then sections of their own.
    pub extra_toml: String,
    /// The brokers kroute fronts (comma-separated); None: [`cluster_bootstrap`].
    pub bootstrap_servers: Option<String>,
}

impl Default for KrouteOptions {
    fn default() -> Self {
        Self {
            bind_host: "127.0.0.1".into(),
            advertised_host: "127.0.0.1".into(),
            extra_toml: String::new(),
            bootstrap_servers: None,
        }
    }
}

/// Starts kroute with `config`, copying its log lines to stderr and into `logs`.
fn spawn_kroute(config: &std::path::Path, logs: &Arc<Mutex<Vec<String>>>) -> Child {
    let child = Command::new(env!("CARGO_BIN_EXE_kroute"))
        .arg("--config")
        .arg(config)
        .env(
            "RUST_LOG",
            std::env::var("KROUTE_TEST_LOG").unwrap_or_else(|_| "info".into()),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn kroute");
    copy_logs(child, logs)
}

/// Copies a kroute child's stderr lines to the test's stderr and into `logs`.
pub fn copy_logs(mut child: Child, logs: &Arc<Mutex<Vec<String>>>) -> Child {
    let stderr = child.stderr.take().expect("kroute stderr");
    let sink = logs.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("[kroute] {line}");
            sink.lock().unwrap().push(line);
        }
    });
    child
}

/// kroute running as a child process; killed on drop.
pub struct Kroute {
    child: Child,
    logs: Arc<Mutex<Vec<String>>>,
    pub bootstrap: String,
    pub admin: String,
    pub port_base: u16,
    pub bootstrap_port: u16,
    _config: tempfile_path::TempPath,
}

mod tempfile_path {
    use std::path::PathBuf;
    /// A file deleted on drop.
    pub struct TempPath(pub PathBuf);
    impl Drop for TempPath {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

impl Kroute {
    pub fn start() -> Kroute {
        Self::start_with(KrouteOptions::default())
    }

    pub fn start_with(opts: KrouteOptions) -> Kroute {
        let k = Self::spawn_with(opts);
        k.wait_ready();
        k
    }

    /// Starts kroute without waiting until it is ready (for tests of a kroute that cannot be).
    pub fn spawn_with(opts: KrouteOptions) -> Kroute {
        let (bootstrap_port, admin_port, port_base) = pick_ports(&opts.bind_host);
        let servers: Vec<String> = opts
            .bootstrap_servers
            .clone()
            .unwrap_or_else(cluster_bootstrap)
            .split(',')
            .map(|s| format!("\"{s}\""))
            .collect();
        let toml = format!(
            "[listen]\nbind_host = \"{bind}\"\nadvertised_host = \"{adv}\"\nbootstrap_port = {bootstrap_port}\n\
             broker_port_base = {port_base}\n\n[admin]\nlisten = \"{bind}:{admin_port}\"\n\n\
             [upstream]\nbootstrap_servers = [{servers}]\nmetadata_refresh_ms = 1000\n{extra}\n",
            bind = opts.bind_host,
            adv = opts.advertised_host,
            servers = servers.join(", "),
            extra = opts.extra_toml,
        );
        let path = std::env::temp_dir().join(format!("{}.toml", unique("kroute-test")));
        std::fs::write(&path, toml).expect("write test config");
        let logs = Arc::new(Mutex::new(Vec::new()));
        let child = spawn_kroute(&path, &logs);
        Kroute {
            child,
            logs,
            bootstrap: format!("{}:{bootstrap_port}", opts.advertised_host),
            admin: format!("{}:{admin_port}", opts.bind_host),
            port_base,
            bootstrap_port,
            _config: tempfile_path::TempPath(path),
        }
    }

    /// Kills kroute (SIGKILL: a crash, nothing flushed) and starts it again with the same
    /// configuration and ports; its log lines keep going to the same place.
    pub fn crash_and_restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = spawn_kroute(&self._config.0, &self.logs);
        self.wait_ready();
    }

    /// Stops kroute with SIGTERM (a graceful shutdown, which must end in exit code 0) and starts
    /// it again with the same configuration and ports; its log lines keep going to the same place.
    pub fn terminate_and_restart(&mut self) {
        self.sigterm();
        let status = self.wait_exit(Duration::from_secs(60));
        assert!(
            status.success(),
            "kroute exited with {status} after SIGTERM"
        );
        self.child = spawn_kroute(&self._config.0, &self.logs);
        self.wait_ready();
    }

    /// Waits until /ready answers 200 and all three broker listeners accept.
    fn wait_ready(&self) {
        wait_for("kroute /ready", Duration::from_secs(30), || {
            http_get(&self.admin, "/ready")
                .filter(|(status, _)| *status == 200)
                .map(|_| ())
        });
        let host = self.admin.rsplit_once(':').unwrap().0.to_string();
        for node in 1..=3 {
            let addr = format!("{host}:{}", self.port_base + node);
            wait_for(&format!("listener {addr}"), Duration::from_secs(30), || {
                TcpStream::connect(&addr).ok().map(|_| ())
            });
        }
    }

    pub fn metrics(&self) -> String {
        http_get(&self.admin, "/metrics")
            .map(|(_, body)| body)
            .unwrap_or_default()
    }

    /// Sum of every sample of `name` whose labels contain all of `labels` (`key="value"`).
    pub fn metric(&self, name: &str, labels: &[&str]) -> f64 {
        metric_sum(&self.metrics(), name, labels)
    }

    /// Waits until kroute logged a line containing every one of `parts`, and returns it.
    pub fn wait_for_log(&self, parts: &[&str], timeout: Duration) -> String {
        // Whether kroute still runs says whether the line is late or can never come.
        wait_for_described(
            || {
                format!(
                    "a kroute log line with {parts:?} (kroute {})",
                    self.process_state()
                )
            },
            timeout,
            || {
                self.logs()
                    .into_iter()
                    .find(|l| parts.iter().all(|p| l.contains(p)))
            },
        )
    }

    /// "runs", "has exited" or "is gone", from /proc (the child cannot be waited on here).
    fn process_state(&self) -> String {
        let pid = self.child.id();
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => match stat.rsplit_once(") ").and_then(|(_, s)| s.chars().next()) {
                Some('Z') => format!("pid {pid} has exited"),
                Some(state) => format!("pid {pid} runs, state {state}"),
                None => format!("pid {pid}: unreadable state"),
            },
            Err(_) => format!("pid {pid} is gone"),
        }
    }

    pub fn logs(&self) -> Vec<String> {
        self.logs.lock().unwrap().clone()
    }

    /// Fails if kroute logged a WARN or ERROR line that matches none of `allowed`.
    pub fn assert_clean_logs(&self, allowed: &[&str]) {
        let bad: Vec<String> = self
            .logs()
            .into_iter()
            .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
            .filter(|l| !allowed.iter().any(|a| l.contains(a)))
            .collect();
        assert!(
            bad.is_empty(),
            "unexpected kroute warnings/errors:\n{}",
            bad.join("\n")
        );
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// Resident memory of process `pid` (VmRSS), in bytes; 0 if it cannot be read.
pub fn rss_bytes(pid: u32) -> u64 {
    status_bytes(pid, "VmRSS:")
}

/// The most memory the process has had at once (VmHWM), in bytes.
pub fn peak_rss_bytes(pid: u32) -> u64 {
    status_bytes(pid, "VmHWM:")
}

/// A kB field of /proc/<pid>/status, in bytes (0 if unreadable).
fn status_bytes(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with(field))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kib| kib * 1024)
}

impl Drop for Kroute {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn metric_sum(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter(|l| labels.iter().all(|lab| l.contains(lab)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A minimal HTTP GET: (status, body).
pub fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n")?.1.to_string();
    Some((status, body))
}

// ---------------------------------------------------------------------------------------------
// The Java client (tests/java): the real Apache Kafka client.

/// Output of one Java client run (or of a Go client's, which prints the same lines).
pub struct JavaRun {
    /// Which client ran ("java", "franz-go", "kafka-python"), named when it fails.
    pub client: &'static str,
    pub ok: bool,
    pub lines: Vec<String>,
    pub stderr: String,
}

impl JavaRun {
    /// Lines starting with `kind ` parsed into key=value maps.
    pub fn records(&self, kind: &str) -> Vec<BTreeMap<String, String>> {
        let prefix = format!("{kind} ");
        self.lines
            .iter()
            .filter_map(|l| l.strip_prefix(&prefix))
            .map(parse_kv)
            .collect()
    }

    /// The value of `key` in the last line that has it.
    pub fn value(&self, key: &str) -> Option<String> {
        self.lines
            .iter()
            .rev()
            .find_map(|l| parse_kv(l).remove(key))
    }

    /// (id, partition) of every acknowledged record of a `produce` run.
    pub fn acks(&self) -> Vec<(String, i32)> {
        self.records("ack")
            .into_iter()
            .filter_map(|r| Some((r.get("id")?.clone(), r.get("partition")?.parse().ok()?)))
            .collect()
    }

    /// Fails the test, with the end of the client's output, if the run failed.
    pub fn assert_ok(&self) {
        assert!(
            self.ok,
            "{} client failed:\n{}\n--- stderr ---\n{}",
            self.client,
            self.lines
                .iter()
                .rev()
                .take(20)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n"),
            self.stderr
        );
    }

    pub fn count(&self, key: &str) -> usize {
        self.value(key)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| {
                panic!(
                    "no {key}= in {} output:\n{}",
                    self.client,
                    self.lines.join("\n")
                )
            })
    }
}

fn parse_kv(line: &str) -> BTreeMap<String, String> {
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn java_classpath() -> &'static str {
    static CP: OnceLock<String> = OnceLock::new();
    CP.get_or_init(|| {
        let out = Command::new(repo_root().join("tests/java/build.sh"))
            .output()
            .expect("run tests/java/build.sh");
        assert!(
            out.status.success(),
            "java client build failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
        std::fs::read_to_string(PathBuf::from(dir).join("classpath"))
            .expect("classpath file")
            .trim()
            .to_string()
    })
}

/// Runs the Java client with `args` (a subcommand and its flags).
pub fn java(args: &[&str]) -> JavaRun {
    let out = Command::new("java")
        .args([
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-cp",
        ])
        .arg(java_classpath())
        .arg("KrouteClient")
        .args(args)
        .output()
        .expect("run java client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    JavaRun {
        client: "java",
        ok: out.status.success(),
        lines: stdout.lines().map(str::to_string).collect(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs a Java client subcommand against `bootstrap` and `topic`, with more `flags`, and fails
/// the test with its output if it failed.
pub fn java_on(command: &str, bootstrap: &str, topic: &str, flags: &[&str]) -> JavaRun {
    let mut args = vec![command, "--bootstrap", bootstrap, "--topic", topic];
    args.extend_from_slice(flags);
    java_ok(&args)
}

/// Runs the Java producer with its defaults (idempotent, acks=all, 5 in flight) through
/// `bootstrap` in the background: `count` records of 1 KiB at `per_second`, ids `prefix` + n.
pub fn java_produce_in_background(
    bootstrap: &str,
    topic: &str,
    count: u32,
    per_second: u32,
    prefix: &str,
) -> std::thread::JoinHandle<JavaRun> {
    java_produce_in_background_with(bootstrap, topic, (count, per_second), prefix, &[])
}

/// [`java_produce_in_background`] with more flags for the client (e.g. `--key-every 3`).
pub fn java_produce_in_background_with(
    bootstrap: &str,
    topic: &str,
    (count, per_second): (u32, u32),
    prefix: &str,
    more: &[&str],
) -> std::thread::JoinHandle<JavaRun> {
    let args: Vec<String> = [
        "produce",
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--count",
        &count.to_string(),
        "--per-second",
        &per_second.to_string(),
        "--record-size",
        "1024",
        "--id-prefix",
        prefix,
        "--timeout-ms",
        "120000",
    ]
    .iter()
    .chain(more)
    .map(|s| s.to_string())
    .collect();
    std::thread::spawn(move || java(&args.iter().map(String::as_str).collect::<Vec<_>>()))
}

/// Runs the Java client and fails the test with its output if it failed.
pub fn java_ok(args: &[&str]) -> JavaRun {
    let run = java(args);
    assert!(
        run.ok,
        "java client {args:?} failed:\n{}\n--- stderr ---\n{}",
        run.lines.join("\n"),
        run.stderr
    );
    run
}

// ---------------------------------------------------------------------------------------------
// Topics, created on the real cluster directly.

/// Runs `scripts/cluster.sh` with `args` and fails the test if it fails.
/// The test cluster's Kafka version as (major, minor), from `cluster.sh status` ("kafka 4.1.2 kraft").
pub fn kafka_version() -> (u32, u32) {
    let status = cluster(&["status"]);
    let version = status
        .lines()
        .find_map(|l| l.strip_prefix("kafka "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no 'kafka VERSION' line in cluster.sh status: {status}"));
    let mut parts = version.split('.').map(|p| p.parse::<u32>());
    match (parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor))) => (major, minor),
        _ => panic!("cannot read the Kafka version from '{version}'"),
    }
}

/// The version of the Java test client the tests run (`KROUTE_JAVA_CLIENT_VERSION`, else the
/// cluster script's default version; tests/java/build.sh picks the same) as (major, minor).
pub fn java_client_version() -> (u32, u32) {
    let version = std::env::var("KROUTE_JAVA_CLIENT_VERSION")
        .ok()
        .filter(|v| !v.is_empty() && v != "default")
        .unwrap_or_else(|| cluster(&["default-version"]).trim().to_string());
    let mut parts = version.split('.').map(|p| p.parse::<u32>());
    match (parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor))) => (major, minor),
        _ => panic!("cannot read the Java client version from '{version}'"),
    }
}

pub fn cluster(args: &[&str]) -> String {
    let out = Command::new(repo_root().join("scripts/cluster.sh"))
        .args(args)
        .output()
        .expect("run scripts/cluster.sh");
    assert!(
        out.status.success(),
        "cluster.sh {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Creates a topic with RF 3 and six partitions led by brokers 1, 1, 2, 2, 3, 3.
pub fn create_topic_two_per_broker(name: &str) {
    cluster(&[
        "create-topic",
        name,
        "--replica-assignment",
        "1:2:3,1:3:2,2:3:1,2:1:3,3:1:2,3:2:1",
        "--config",
        "min.insync.replicas=2",
    ]);
}

/// Creates a topic with `partitions` partitions and replication factor 3.
pub fn create_topic(name: &str, partitions: u32, configs: &[&str]) {
    let mut cmd = Command::new(repo_root().join("scripts/cluster.sh"));
    cmd.args(["create-topic", name, "--partitions"])
        .arg(partitions.to_string())
        .args(["--replication-factor", "3"]);
    for c in configs {
        cmd.args(["--config", c]);
    }
    let out = cmd.output().expect("run scripts/cluster.sh create-topic");
    assert!(
        out.status.success(),
        "create-topic {name} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---------------------------------------------------------------------------------------------
// Raw Kafka requests, for what no client library will send (pipelining depth, bad frames).

/// Encodes a request frame (with its size prefix).
pub fn request_frame<T: Encodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &T,
) -> Bytes {
    let header = RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("kroute-test")));
    let mut payload = BytesMut::new();
    header
        .encode(&mut payload, api.request_header_version(version))
        .expect("encode header");
    body.encode(&mut payload, version).expect("encode body");
    let mut frame = BytesMut::with_capacity(payload.len() + 4);
    frame.put_i32(payload.len() as i32);
    frame.extend_from_slice(&payload);
    frame.freeze()
}

/// Reads one response frame payload (without size prefix); None on EOF or error.
pub fn read_frame(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut size = [0u8; 4];
    s.read_exact(&mut size).ok()?;
    let mut payload = vec![0u8; i32::from_be_bytes(size) as usize];
    s.read_exact(&mut payload).ok()?;
    Some(payload)
}

/// True if the peer closes the connection (EOF or reset) within `timeout`.
pub fn closed_within(s: &mut TcpStream, timeout: Duration) -> bool {
    s.set_read_timeout(Some(timeout)).ok();
    let mut buf = [0u8; 1024];
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                return false;
            }
            Err(_) => return true,
        }
    }
    false
}
