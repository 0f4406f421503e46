//! Prometheus for the tests: `promtool`, and a real Prometheus server (Debian's `prometheus`
//! package, installed by scripts/test.sh) in a temporary directory on a free 127.0.0.1 port.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use super::*;

/// The files under docker/prometheus and docker/grafana.
pub fn docker_file(path: &str) -> PathBuf {
    repo_root().join("docker").join(path)
}

fn tool(name: &str) -> Command {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
        .unwrap_or(false);
    assert!(
        found,
        "{name} is not installed: scripts/test.sh installs Debian's prometheus package \
         (apt-get install prometheus)"
    );
    Command::new(name)
}

/// Runs `promtool` with `args` (and `stdin`, if given) in `dir`: (success, stdout + stderr).
pub fn promtool(dir: &std::path::Path, args: &[&str], stdin: Option<&str>) -> (bool, String) {
    let mut child = tool("promtool")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    {
        let mut input = child.stdin.take().unwrap();
        if let Some(text) = stdin {
            input.write_all(text.as_bytes()).expect("promtool stdin");
        }
    }
    let out = child.wait_with_output().expect("promtool output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// A Prometheus server of its own; stopped and its directory removed on drop.
pub struct Prometheus {
    child: Child,
    dir: PathBuf,
    /// `127.0.0.1:PORT`
    pub addr: String,
}

/// A free port below the ephemeral range ([`super::pick_ports`]).
fn free_port() -> u16 {
    super::pick_ports("127.0.0.1").0
}

impl Prometheus {
    /// Starts Prometheus with `config` (prometheus.yml text) and waits until it is ready.
    pub fn start(config: &str) -> Prometheus {
        let dir = std::env::temp_dir().join(unique("kroute-prometheus"));
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let config_path = dir.join("prometheus.yml");
        std::fs::write(&config_path, config).unwrap();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let addr = format!("127.0.0.1:{}", free_port());
        let child = tool("prometheus")
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--storage.tsdb.retention.time=1h")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn prometheus");
        let mut p = Prometheus { child, dir, addr };
        wait_for("prometheus /-/ready", Duration::from_secs(60), || {
            if let Ok(Some(status)) = p.child.try_wait() {
                panic!("prometheus exited with {status}:\n{}", p.log());
            }
            http_get(&p.addr, "/-/ready")
                .filter(|(status, _)| *status == 200)
                .map(|_| ())
        });
        p
    }

    /// Prometheus' own log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    /// GET `path` with query parameters: the JSON answer (any status: errors are JSON too).
    pub fn get(&self, path: &str, params: &[(&str, &str)]) -> Value {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(20)))
            .build()
            .into();
        let mut req = agent.get(format!("http://{}{path}", self.addr));
        for (k, v) in params {
            req = req.query(*k, *v);
        }
        let mut resp = req
            .call()
            .unwrap_or_else(|e| panic!("GET {path} {params:?}: {e}"));
        let body = resp.body_mut().read_to_string().expect("prometheus answer");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: not JSON ({e}): {body}"))
    }

    /// An instant query: its result (a vector's samples; a scalar as one element), or the
    /// error Prometheus gave (e.g. `bad_data: 1:5: parse error: ...`).
    pub fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let answer = self.get("/api/v1/query", &[("query", expr)]);
        if answer["status"] != "success" {
            return Err(format!("{}: {}", answer["errorType"], answer["error"]));
        }
        match &answer["data"]["result"] {
            Value::Array(samples) => Ok(samples.clone()),
            scalar => Ok(vec![scalar.clone()]),
        }
    }

    /// The value of a query returning one sample, if it returns exactly one.
    pub fn value(&self, expr: &str) -> Option<f64> {
        match self.query(expr).ok()?.as_slice() {
            [sample] => sample["value"][1].as_str()?.parse().ok(),
            _ => None,
        }
    }

    /// The rules Prometheus loaded (every group's rules: name, query, health, lastError, ...).
    pub fn rules(&self) -> Vec<Value> {
        let answer = self.get("/api/v1/rules", &[]);
        answer["data"]["groups"]
            .as_array()
            .expect("rule groups")
            .iter()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .collect()
    }

    /// The alerts pending or firing now.
    pub fn alerts(&self) -> Vec<Value> {
        let answer = self.get("/api/v1/alerts", &[]);
        answer["data"]["alerts"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Waits until every scrape target is up.
    pub fn wait_targets_up(&self) {
        wait_for("every scrape target up", Duration::from_secs(60), || {
            let answer = self.get("/api/v1/targets", &[]);
            let targets = answer["data"]["activeTargets"].as_array()?.clone();
            (!targets.is_empty() && targets.iter().all(|t| t["health"] == "up")).then_some(())
        });
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- prometheus log ---\n{}", self.log());
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Metric names (and `up`) a PromQL expression reads.
pub fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        if starts_word && (expr[i..].starts_with("kroute_") || expr[i..].starts_with("up{")) {
            let end = expr[i..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(expr.len(), |n| i + n);
            let name = expr[i..end].to_string();
            if !names.contains(&name) {
                names.push(name);
            }
            i = end;
        } else {
            i += 1;
        }
    }
    names
}
