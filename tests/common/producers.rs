//! Producers in other languages, run as real, unmodified clients: franz-go
//! (`tests/go/franz`, built into `target/go/franz-producer` by `tests/go/build.sh`) and
//! kafka-python (`tests/python/producer.py`). Both print the Java client's lines
//! (`ack id=.. partition=..`, `done acked=.. errors=..`), so a run is a [`JavaRun`] and parses
//! the same way. Both produce keyless records of random letters behind the id (franz-go
//! compresses by default, and tests measure brokers' shares in bytes) with the client's
//! defaults: idempotent, acks=all.

use std::process::Command;

use super::{JavaRun, repo_root};

/// franz-go: `count` 1 KiB records, at most `per_second` a second, ids `<prefix><n>`.
pub fn franz(bootstrap: &str, topic: &str, count: u32, per_second: u32, prefix: &str) -> JavaRun {
    run(
        "franz-go",
        Command::new(repo_root().join("target/go/franz-producer")),
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
    // The pinned virtualenv scripts/test.sh sets up (tests/python/setup.sh).
    let mut command = Command::new(repo_root().join("target/python/bin/python3"));
    command
        .arg(repo_root().join("tests/python/producer.py"))
        .args(more);
    run(
        "kafka-python",
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
