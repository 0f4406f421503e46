//! Containers in tests: podman with the project's own settings and storage (`scripts/image.sh
//! podman`, see docker/containers.conf), the images built once per test binary by
//! `scripts/image.sh all`, and the pinned container tooling (hadolint, kubernetes-validate,
//! docker-compose) from `docker/tools/setup.sh`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::*;

/// Container tests run one at a time: they share podman's storage, the host network and two
/// CPU cores.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn output_text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs the project's podman with `args`.
pub fn podman(args: &[&str]) -> Output {
    Command::new(repo_root().join("scripts/image.sh"))
        .arg("podman")
        .args(args)
        .output()
        .expect("run scripts/image.sh podman")
}

/// Runs the project's podman with `args`, fails the test if it fails, returns its stdout.
pub fn podman_ok(args: &[&str]) -> String {
    let out = podman(args);
    assert!(
        out.status.success(),
        "podman {args:?} failed: {}",
        output_text(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `podman inspect` of one container or image, as JSON.
pub fn inspect(what: &[&str]) -> Value {
    let mut args = vec!["inspect"];
    args.extend_from_slice(what);
    let text = podman_ok(&args);
    let v: Value = serde_json::from_str(&text).expect("podman inspect JSON");
    v[0].clone()
}

/// The images `scripts/image.sh all` built (with podman), and how long the build took.
pub struct Images {
    pub kroute: String,
    pub producer: String,
    pub build_time: Duration,
}

/// Builds both images once per test binary: the static kroute binary (cargo skips it when
/// nothing changed) and the demo producer, then the images.
pub fn images() -> &'static Images {
    static IMAGES: OnceLock<Images> = OnceLock::new();
    IMAGES.get_or_init(|| {
        let start = Instant::now();
        let out = Command::new(repo_root().join("scripts/image.sh"))
            .arg("all")
            .env("KROUTE_IMAGE_ENGINE", "podman")
            .output()
            .expect("run scripts/image.sh all");
        assert!(
            out.status.success(),
            "scripts/image.sh all failed: {}",
            output_text(&out)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let names: Vec<&str> = stdout.lines().collect();
        assert_eq!(names.len(), 2, "image.sh all prints two images: {stdout}");
        let images = Images {
            kroute: names[0].to_string(),
            producer: names[1].to_string(),
            build_time: start.elapsed(),
        };
        eprintln!(
            "scripts/image.sh all: {} and {} in {:.1} s",
            images.kroute,
            images.producer,
            images.build_time.as_secs_f64()
        );
        images
    })
}

/// The bin directory of the pinned container tooling's virtualenv.
pub fn tools() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let out = Command::new(repo_root().join("docker/tools/setup.sh"))
            .output()
            .expect("run docker/tools/setup.sh");
        assert!(
            out.status.success(),
            "docker/tools/setup.sh failed: {}",
            output_text(&out)
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
}

/// Runs a tool of the container tooling with `args` (in the repository root).
pub fn tool(name: &str, args: &[&str]) -> Output {
    Command::new(tools().join(name))
        .args(args)
        .current_dir(repo_root())
        .output()
        .unwrap_or_else(|e| panic!("run {name}: {e}"))
}

/// Runs a tool and fails the test, with its output, unless it exits 0.
pub fn tool_ok(name: &str, args: &[&str]) -> String {
    let out = tool(name, args);
    assert!(
        out.status.success(),
        "{name} {args:?} failed: {}",
        output_text(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every document of a YAML text, as JSON (PyYAML of the tooling's virtualenv).
pub fn yaml_documents(text: &str) -> Vec<Value> {
    let mut child = Command::new(tools().join("python3"))
        .args([
            "-c",
            "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(sys.stdin))))",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run python3 of the container tooling");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "YAML: {}", output_text(&out));
    let docs: Value = serde_json::from_slice(&out.stdout).expect("YAML as JSON");
    docs.as_array().unwrap().clone()
}

/// Ports for one kroute on the host network: (bootstrap, broker port base, admin), with the
/// bootstrap, admin and broker ports 1..=3 free on 127.0.0.1.
pub fn free_ports() -> (u16, u16, u16) {
    let (bootstrap, admin, base) = super::pick_ports("127.0.0.1");
    (bootstrap, base, admin)
}

/// A container started by a test; removed (`podman rm -f`) on drop.
pub struct Container {
    pub name: String,
}

impl Container {
    /// `podman run -d --name <unique> ARGS` (ARGS end with the image and its arguments).
    pub fn run(args: &[&str]) -> Container {
        let name = unique("kroute-test");
        let mut all = vec!["run", "-d", "--name", &name];
        all.extend_from_slice(args);
        podman_ok(&all);
        Container { name }
    }

    pub fn logs(&self) -> String {
        output_text(&podman(&["logs", &self.name]))
    }

    pub fn inspect(&self) -> Value {
        inspect(&[&self.name])
    }

    pub fn running(&self) -> bool {
        self.inspect()["State"]["Running"].as_bool() == Some(true)
    }

    /// `podman stop` (SIGTERM, then SIGKILL after `grace`); returns the exit code.
    pub fn stop(&self, grace: Duration) -> i64 {
        podman_ok(&["stop", "-t", &grace.as_secs().to_string(), &self.name]);
        self.inspect()["State"]["ExitCode"]
            .as_i64()
            .expect("exit code")
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = podman(&["rm", "-f", "-t", "0", &self.name]);
    }
}

/// kroute's admin endpoint at `admin` answers /ready with 200 within `timeout`; else the test
/// fails with `logs()` (the kroute container's log).
pub fn wait_ready(admin: &str, timeout: Duration, logs: &dyn Fn() -> String) {
    let deadline = Instant::now() + timeout;
    while http_get(admin, "/ready").is_none_or(|(status, _)| status != 200) {
        assert!(
            Instant::now() < deadline,
            "kroute not ready on {admin} after {timeout:?}; its log:\n{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The ids of every record of `topic` read back from the real cluster (directly, not through
/// kroute) with the Java consumer, which stops after `expect` records plus 1 s for extras.
pub fn read_back(topic: &str, expect: usize) -> Vec<String> {
    let run = java_on(
        "consume",
        &cluster_bootstrap(),
        topic,
        &[
            "--expect",
            &expect.to_string(),
            "--extra-wait-ms",
            "1000",
            "--timeout-ms",
            "60000",
        ],
    );
    run.records("rec")
        .into_iter()
        .map(|r| r["id"].clone())
        .collect()
}
