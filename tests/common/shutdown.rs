//! Graceful shutdown and configuration overrides: SIGTERM to a kroute process and its exit
//! status, kroute configured by flags and environment variables only (no file), `kroute
//! check-config` runs, a long-poll Fetch the broker holds, the Java producer in the background.

use std::path::{Path, PathBuf};
use std::process::ExitStatus;

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{FetchRequest, FetchResponse, ResponseHeader, TopicName};
use kafka_protocol::protocol::Decodable;

use super::*;

/// Every variable kroute reads its configuration from, so that none leaks in from the
/// environment the tests run in.
fn kroute_variables() -> impl Iterator<Item = &'static str> {
    kroute::config::SETTINGS
        .iter()
        .map(|s| s.env)
        .chain(["KROUTE_CONFIG"])
}

impl Kroute {
    /// Sends SIGTERM, as Kubernetes and `docker stop` do.
    pub fn sigterm(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM failed");
    }

    /// Waits until the process has exited, and returns how.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let child = &mut self.child;
        wait_for("kroute to exit", timeout, || {
            child.try_wait().ok().flatten()
        })
    }

    /// Starts kroute configured by flags and environment variables only: no configuration
    /// file (it runs in an empty directory), its ports and the cluster given as `KROUTE_*`
    /// variables, then `args` and `env` (which may override those). Waits until it is ready.
    pub fn start_without_file(args: &[&str], env: &[(&str, &str)]) -> Kroute {
        let (bootstrap_port, admin_port, port_base) = pick_ports("127.0.0.1");
        let dir = empty_dir("kroute-nofile");
        let logs = Arc::new(Mutex::new(Vec::new()));
        let mut command = Command::new(env!("CARGO_BIN_EXE_kroute"));
        for var in kroute_variables() {
            command.env_remove(var);
        }
        let child = command
            .current_dir(&dir)
            .args(args)
            .env(
                "RUST_LOG",
                std::env::var("KROUTE_TEST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .env("KROUTE_BOOTSTRAP_SERVERS", cluster_bootstrap())
            .env("KROUTE_BOOTSTRAP_PORT", bootstrap_port.to_string())
            .env("KROUTE_BROKER_PORT_BASE", port_base.to_string())
            .env("KROUTE_ADMIN_LISTEN", format!("127.0.0.1:{admin_port}"))
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn kroute");
        let kroute = Kroute {
            child: copy_logs(child, &logs),
            logs,
            bootstrap: format!("127.0.0.1:{bootstrap_port}"),
            admin: format!("127.0.0.1:{admin_port}"),
            port_base,
            bootstrap_port,
            _config: tempfile_path::TempPath(dir.join("no-config-file")),
        };
        kroute.wait_ready();
        kroute
    }
}

/// A new empty directory under the system's temporary directory.
pub fn empty_dir(prefix: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(unique(prefix));
    std::fs::create_dir_all(&dir).expect("create a temporary directory");
    dir
}

/// What one `kroute check-config` run printed.
pub struct CheckConfig {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `kroute check-config` in `dir` with `args` and only the `KROUTE_*` variables of `env`.
pub fn check_config(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> CheckConfig {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kroute"));
    for var in kroute_variables() {
        command.env_remove(var);
    }
    let out = command
        .current_dir(dir)
        .arg("check-config")
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run kroute check-config");
    CheckConfig {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A Fetch (v12, by topic name) of partition 0 of `topic` from `offset`: with nothing to read
/// there, the broker holds it for `max_wait_ms` before answering.
pub fn long_poll_fetch(topic: &str, offset: i64, max_wait_ms: i32, correlation_id: i32) -> Bytes {
    let partition = FetchPartition::default()
        .with_partition(0)
        .with_current_leader_epoch(-1)
        .with_fetch_offset(offset)
        .with_last_fetched_epoch(-1)
        .with_log_start_offset(-1)
        .with_partition_max_bytes(1 << 20);
    let body = FetchRequest::default()
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_topics(vec![
            FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partitions(vec![partition]),
        ]);
    request_frame(ApiKey::Fetch, 12, correlation_id, &body)
}

/// The correlation id and partition 0's error code of a Fetch v12 response payload.
pub fn fetch_answer(payload: &[u8]) -> (i32, i16) {
    let mut buf = Bytes::copy_from_slice(payload);
    let header = ResponseHeader::decode(&mut buf, ApiKey::Fetch.response_header_version(12))
        .expect("Fetch response header");
    let body = FetchResponse::decode(&mut buf, 12).expect("Fetch response");
    let error = body
        .responses
        .first()
        .and_then(|t| t.partitions.first())
        .map(|p| p.error_code)
        .expect("partition 0 in the Fetch response");
    (header.correlation_id, error.max(body.error_code))
}

/// True once a TCP connection to `addr` is refused (nothing listens there any more).
pub fn refused(addr: &str) -> bool {
    matches!(
        TcpStream::connect(addr),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused
    )
}

/// The numbers of kroute's first `count` "shutdown complete" log lines, once there are that
/// many (the last may come through the pipe after the process exited): (drained, cut) of each.
pub fn drain_outcomes(kroute: &Kroute, count: usize) -> Vec<(u64, u64)> {
    let outcomes = || -> Vec<(u64, u64)> {
        kroute
            .logs()
            .iter()
            .filter(|l| l.contains("shutdown complete"))
            .filter_map(|l| {
                let number = |key: &str| -> Option<u64> {
                    l.split_whitespace()
                        .find_map(|kv| kv.strip_prefix(key))?
                        .trim_matches('"')
                        .parse()
                        .ok()
                };
                Some((number("drained=")?, number("cut=")?))
            })
            .collect()
    };
    wait_for(
        &format!("{count} shutdown complete log lines"),
        Duration::from_secs(10),
        || Some(outcomes()).filter(|o| o.len() >= count),
    );
    outcomes()
}
