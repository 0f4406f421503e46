//! franz-go (the Go client) as a real, unmodified producer: `tests/go/franz`, built into
//! `target/go/franz-producer` by `tests/go/build.sh`. Its output lines have the Java client's
//! format (`ack id=.. partition=..`), so a run is a [`JavaRun`] and parses the same way.

use std::process::Command;

use super::{JavaRun, repo_root};

/// Produces `count` keyless 1 KiB records with franz-go's defaults (idempotent, acks=all),
/// at most `per_second` a second, ids `<prefix><n>`.
pub fn produce(bootstrap: &str, topic: &str, count: u32, per_second: u32, prefix: &str) -> JavaRun {
    let binary = repo_root().join("target/go/franz-producer");
    let out = Command::new(&binary)
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
        .unwrap_or_else(|e| panic!("run {} (tests/go/build.sh): {e}", binary.display()));
    JavaRun {
        ok: out.status.success(),
        lines: String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
