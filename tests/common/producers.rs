//! Producers in other languages, run as real, unmodified clients: franz-go
//! (`tests/go/franz`, built into `target/go/franz-producer` by `tests/go/build.sh`) and
//! kafka-python (`tests/python/producer.py`). Both print the Java client's lines
//! (`ack id=.. partition=..`, `done acked=.. errors=..`), so a run is a [`JavaRun`] and parses
//! the same way. Both produce keyless records of random letters behind the id (franz-go
//! compresses by default, and tests measure brokers' shares in bytes) with the client's
//! defaults: idempotent, acks=all.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use super::{JavaRun, repo_root};

/// franz-go: `count` 1 KiB records, at most `per_second` a second, ids `<prefix><n>`.
pub fn franz(bootstrap: &str, topic: &str, count: u32, per_second: u32, prefix: &str) -> JavaRun {
    franz_with(bootstrap, topic, count, per_second, prefix, &[])
}

/// [`franz`] with more arguments for tests/go/franz (e.g. `--key-every`).
pub fn franz_with(
    bootstrap: &str,
    topic: &str,
    count: u32,
    per_second: u32,
    prefix: &str,
    more: &[&str],
) -> JavaRun {
    let mut command = Command::new(repo_root().join("target/go/franz-producer"));
    command.args(more);
    run(
        "franz-go",
        command,
        (bootstrap, topic, count, per_second, prefix),
    )
}

/// kafka-python: `count` 1 KiB records, at most `per_second` a second, ids `<prefix><n>`.
pub fn kafka_python(
    bootstrap: &str,
    topic: &str,
    count: u32,
    per_second: u32,
    prefix: &str,
) -> JavaRun {
    kafka_python_with(bootstrap, topic, count, per_second, prefix, &[])
}

/// [`kafka_python`] with more arguments for tests/python/producer.py (e.g. `--sasl`).
pub fn kafka_python_with(
    bootstrap: &str,
    topic: &str,
    count: u32,
    per_second: u32,
    prefix: &str,
    more: &[&str],
) -> JavaRun {
    kafka_python_in(
        KAFKA_PYTHON,
        more,
        (bootstrap, topic, count, per_second, prefix),
    )
}

/// kafka-python 3.x, today's client.
pub const KAFKA_PYTHON: &str = "target/python";

/// kafka-python 2.0.2, an old-protocol client: it authenticates with SaslHandshake v0 and raw
/// tokens (before KIP-152), and with `--api-version 0.11` produces with Produce v3. Its
/// defaults: acks=1, no retries, not idempotent.
pub const OLD_KAFKA_PYTHON: &str = "target/python-old";

/// tests/python/producer.py in the pinned virtualenv `venv` ([`KAFKA_PYTHON`],
/// [`OLD_KAFKA_PYTHON`]; set up by tests/python/setup.sh) with more arguments: `count` 1 KiB
/// records to `topic`, at most `per_second` a second, ids `<prefix><n>`.
pub fn kafka_python_in(
    venv: &str,
    more: &[&str],
    (bootstrap, topic, count, per_second, prefix): (&str, &str, u32, u32, &str),
) -> JavaRun {
    let mut command = Command::new(repo_root().join(venv).join("bin/python3"));
    command
        .arg(repo_root().join("tests/python/producer.py"))
        .args(more);
    run(
        "kafka-python",
        command,
        (bootstrap, topic, count, per_second, prefix),
    )
}

/// librdkafka 1.9.2 (tests/rdkafka-1.9, built on first use: 2-3 minutes), asked to be
/// idempotent (1.9's default is not), acks=all: `count` 1 KiB records, at most `per_second` a
/// second, ids `<prefix><n>`.
pub fn librdkafka_1_9(
    bootstrap: &str,
    topic: &str,
    count: u32,
    per_second: u32,
    prefix: &str,
) -> JavaRun {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    let binary = BINARY.get_or_init(|| {
        let out = Command::new(repo_root().join("tests/rdkafka-1.9/build.sh"))
            .stderr(Stdio::inherit())
            .output()
            .expect("run tests/rdkafka-1.9/build.sh");
        assert!(out.status.success(), "tests/rdkafka-1.9/build.sh failed");
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    });
    let mut command = Command::new(binary);
    command.args(["--config", "enable.idempotence=true"]);
    run(
        "librdkafka 1.9",
        command,
        (bootstrap, topic, count, per_second, prefix),
    )
}

fn run(
    client: &'static str,
    mut command: Command,
    (bootstrap, topic, count, per_second, prefix): (&str, &str, u32, u32, &str),
) -> JavaRun {
    let out = command
        .args([
            "--bootstrap",
            bootstrap,
            "--topic",
            topic,
            "--prefix",
            prefix,
        ])
        .args([
            "--count",
            &count.to_string(),
            "--rate",
            &per_second.to_string(),
        ])
        .args(["--size", "1024"])
        .output()
        .unwrap_or_else(|e| panic!("{client} client: cannot run {command:?}: {e}"));
    JavaRun {
        client,
        ok: out.status.success(),
        lines: String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
