//! kroute as a container: the image (docker/Dockerfile, built by scripts/image.sh with podman)
//! run against the real cluster, the sidecar Deployment (docker/k8s/sidecar.yaml) run for real
//! with `podman kube play`, and the static checks: hadolint, kubernetes-validate --strict for
//! Kubernetes 1.29 and `docker-compose config` for docker/compose.yaml.
//!
//! The images are built once per run (scripts/image.sh skips cargo when the static binary is
//! fresh); the container tests run one at a time ([`container::serial`]). Containers use the
//! host network: the cluster's brokers listen on, and advertise, 127.0.0.1. One that needs no
//! network (`--version`, `check-config`) runs with `--network none`: podman's default bridge
//! needs iptables for netavark, which a fresh machine does not have.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::container::{self, Container, images, podman, podman_ok, tool, tool_ok};
use common::secured::Secured;
use common::*;
use serde_json::Value;

const MANIFEST: &str = "docker/k8s/sidecar.yaml";

fn read(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The port of the first address of a `host:port,...` list.
fn first_port(list: &str) -> u16 {
    list.split(',')
        .next()
        .and_then(|a| a.rsplit_once(':'))
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {list:?}"))
}

/// A file under target/tmp for this test, deleted on drop.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn new(name: &str, text: &str) -> TempFile {
        let dir = repo_root().join("target/tmp");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(unique(name));
        std::fs::write(&path, text).unwrap();
        TempFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `-e` options giving a kroute container its ports on the host network.
fn port_env(bootstrap: u16, base: u16, admin: u16) -> Vec<String> {
    [
        "KROUTE_BIND_HOST=127.0.0.1".to_string(),
        "KROUTE_ADVERTISED_HOST=127.0.0.1".to_string(),
        format!("KROUTE_BOOTSTRAP_PORT={bootstrap}"),
        format!("KROUTE_BROKER_PORT_BASE={base}"),
        format!("KROUTE_ADMIN_LISTEN=127.0.0.1:{admin}"),
    ]
    .into_iter()
    .flat_map(|e| ["-e".to_string(), e])
    .collect()
}

/// The demo producer image writes `count` records (ids `<prefix><n>`) to kroute at `bootstrap`
/// and exits; returns its output, after checking that every record was acknowledged.
fn produce_with_demo_producer(bootstrap: &str, topic: &str, count: usize, prefix: &str) -> String {
    let out = podman(&[
        "run",
        "--rm",
        "--network",
        "host",
        "-e",
        &format!("KAFKA_BOOTSTRAP={bootstrap}"),
        "-e",
        &format!("TOPIC={topic}"),
        "-e",
        &format!("RECORDS={count}"),
        "-e",
        &format!("ID_PREFIX={prefix}"),
        "-e",
        "EXIT_WHEN_DONE=true",
        &images().producer,
    ]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && text.contains(&format!("done acked={count} errors=0")),
        "demo producer failed: {}\n{}",
        text.lines().rev().take(10).collect::<Vec<_>>().join("\n"),
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// Every record `<prefix>0 .. <prefix>(count-1)` is in `topic` exactly once.
fn assert_read_back(topic: &str, prefix: &str, count: usize) {
    let ids = container::read_back(topic, count);
    let unique: BTreeSet<&String> = ids.iter().collect();
    let expected: BTreeSet<String> = (0..count).map(|i| format!("{prefix}{i}")).collect();
    assert_eq!(
        unique.len(),
        ids.len(),
        "duplicates in {topic}: {} records, {} distinct",
        ids.len(),
        unique.len()
    );
    assert_eq!(
        unique.into_iter().cloned().collect::<BTreeSet<_>>(),
        expected,
        "the records read back from {topic} are not the ones produced"
    );
}

fn metrics(admin: &str) -> String {
    http_get(admin, "/metrics")
        .map(|(_, body)| body)
        .unwrap_or_default()
}

// -------------------------------------------------------------------------------------------
// The image

#[test]
fn image_is_small_static_non_root_and_documents_its_ports() {
    let _serial = container::serial();
    let images = images();
    let image = container::inspect(&["--type", "image", &images.kroute]);
    let size = image["Size"].as_u64().expect("image size");
    eprintln!("{}: {:.2} MB", images.kroute, size as f64 / 1e6);
    assert!(size < 20_000_000, "image is {size} bytes, over 20 MB");

    let config = &image["Config"];
    assert_eq!(config["User"], "65532:65532", "image user");
    assert_eq!(config["WorkingDir"], "/etc/kroute");
    assert_eq!(
        config["Entrypoint"],
        serde_json::json!(["/usr/local/bin/kroute"])
    );
    let ports: BTreeSet<&str> = config["ExposedPorts"]
        .as_object()
        .expect("exposed ports")
        .keys()
        .map(String::as_str)
        .collect();
    for port in ["9092/tcp", "9101/tcp", "9644/tcp"] {
        assert!(ports.contains(port), "{port} not exposed: {ports:?}");
    }
    let env: Vec<&str> = config["Env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for e in [
        "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
        "KROUTE_CONFIG=/etc/kroute/proxy.toml",
    ] {
        assert!(env.contains(&e), "{e} not set in the image: {env:?}");
    }

    // What is in it: the binary, its configuration, the user, the CA bundle; no shell.
    let created = podman_ok(&["create", &images.kroute]);
    let id = created.trim();
    let tar = repo_root()
        .join("target/tmp")
        .join(unique("kroute-image.tar"));
    std::fs::create_dir_all(tar.parent().unwrap()).unwrap();
    let exported = podman(&["export", "-o", tar.to_str().unwrap(), id]);
    let _ = podman(&["rm", "-f", id]);
    assert!(exported.status.success(), "podman export failed");
    let list = std::process::Command::new("tar")
        .arg("-tf")
        .arg(&tar)
        .output()
        .expect("tar");
    let files: BTreeSet<String> = String::from_utf8_lossy(&list.stdout)
        .lines()
        .map(|l| l.trim_start_matches("./").to_string())
        .collect();
    let file = |path: &str| {
        let out = std::process::Command::new("tar")
            .arg("-xOf")
            .arg(&tar)
            .arg(path)
            .output()
            .expect("tar");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for f in [
        "usr/local/bin/kroute",
        "etc/kroute/proxy.toml",
        "etc/passwd",
        "etc/group",
        "etc/nsswitch.conf",
        "etc/ssl/certs/ca-certificates.crt",
    ] {
        assert!(files.contains(f), "{f} missing from the image: {files:?}");
    }
    assert!(
        !files.iter().any(|f| f.starts_with("bin/") || f == "bin"),
        "the image holds a bin/: {files:?}"
    );
    assert!(file("etc/passwd").contains("kroute:x:65532:65532:"));
    assert!(file("etc/group").contains("kroute:x:65532:"));
    let roots = file("etc/ssl/certs/ca-certificates.crt")
        .matches("BEGIN CERTIFICATE")
        .count();
    assert!(roots > 50, "only {roots} CA certificates in the bundle");
    let _ = std::fs::remove_file(&tar);

    let version = podman_ok_offline(&[&images.kroute, "--version"]);
    assert_eq!(
        version.trim(),
        format!("kroute {}", env!("CARGO_PKG_VERSION"))
    );

    // The image's own configuration, with environment variables and a flag over it.
    let effective = podman_ok_offline(&[
        "-e",
        "KROUTE_BOOTSTRAP_SERVERS=kafka-a.example:9093,kafka-b.example:9093",
        "-e",
        "KROUTE_LOG_FORMAT=json",
        &images.kroute,
        "--admin-listen",
        "0.0.0.0:9700",
        "check-config",
    ]);
    for part in [
        "# effective configuration: /etc/kroute/proxy.toml",
        "# upstream.bootstrap_servers set by KROUTE_BOOTSTRAP_SERVERS",
        "bootstrap_servers = [\"kafka-a.example:9093\", \"kafka-b.example:9093\"]",
        "listen = \"0.0.0.0:9700\"",
        "format = \"json\"",
        // the image's own file underneath
        "bind_host = \"0.0.0.0\"",
        "include = [\"*\"]",
    ] {
        assert!(
            effective.contains(part),
            "check-config in the image does not show {part}:\n{effective}"
        );
    }
}

#[test]
fn image_fronts_a_broker_named_by_host_name() {
    let _serial = container::serial();
    let images = images();
    let (bootstrap, base, admin) = container::free_ports();
    let broker = first_port(&cluster_bootstrap());
    let mut args = vec![
        "--network".to_string(),
        "host".to_string(),
        "--add-host".to_string(),
        "kafka-bootstrap:127.0.0.1".to_string(),
        "-e".to_string(),
        format!("KROUTE_BOOTSTRAP_SERVERS=kafka-bootstrap:{broker}"),
    ];
    args.extend(port_env(bootstrap, base, admin));
    args.push(images.kroute.clone());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let kroute = Container::run(&args);
    let admin = format!("127.0.0.1:{admin}");
    // Ready: its metadata request went to kafka-bootstrap, resolved through /etc/hosts.
    container::wait_ready(&admin, Duration::from_secs(30), &|| kroute.logs());

    let topic = unique("sidecar-image");
    create_topic(&topic, 6, &[]);
    let count = 500;
    produce_with_demo_producer(&format!("127.0.0.1:{bootstrap}"), &topic, count, "img-");
    assert_read_back(&topic, "img-", count);
    let text = metrics(&admin);
    assert!(
        metric_sum(&text, "kroute_requests_total", &["api=\"Produce\""]) > 0.0,
        "no Produce request went through kroute"
    );
    assert_eq!(metric_sum(&text, "kroute_brokers_known", &[]), 3.0);

    let stopped = Instant::now();
    let code = kroute.stop(Duration::from_secs(40));
    eprintln!(
        "kroute container stopped in {:.2} s",
        stopped.elapsed().as_secs_f64()
    );
    assert_eq!(
        code,
        0,
        "kroute's exit code after SIGTERM; logs:\n{}",
        kroute.logs()
    );
}

/// `podman run --rm --network none ARGS`: a container that needs no network (podman's default
/// bridge needs iptables, which a fresh machine does not have).
fn podman_offline(args: &[&str]) -> std::process::Output {
    podman(&offline(args))
}

fn offline<'a>(args: &[&'a str]) -> Vec<&'a str> {
    [&["run", "--rm", "--network", "none"], args].concat()
}

/// [`podman_offline`], failing the test if it fails; its stdout.
fn podman_ok_offline(args: &[&str]) -> String {
    podman_ok(&offline(args))
}

#[test]
fn image_upstream_tls_trusts_its_ca_bundle_and_ssl_cert_file() {
    let _serial = container::serial();
    let images = images();
    let secured = Secured::get();
    let ssl = secured.value("ssl").to_string();
    let servers: Vec<String> = ssl.split(',').map(|a| format!("\"{a}\"")).collect();
    // TLS toward the brokers with no ca_file: the platform roots, i.e. SSL_CERT_FILE.
    let config = TempFile::new(
        "kroute-tls.toml",
        &format!(
            "[upstream]\nbootstrap_servers = [{}]\nmetadata_refresh_ms = 1000\n\n[upstream.tls]\n",
            servers.join(", ")
        ),
    );
    let mount = format!("{}:/etc/kroute/proxy.toml:ro", config.path());
    let ca = format!("{}:/certs/ca.pem:ro", secured.path("ca").display());

    // check-config builds the TLS client: it fails when no CA certificate can be loaded.
    let ok = podman_offline(&["-v", &mount, &images.kroute, "check-config"]);
    assert!(
        ok.status.success(),
        "check-config with the image's CA bundle failed: {}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let missing = podman_offline(&[
        "-v",
        &mount,
        "-e",
        "SSL_CERT_FILE=/nonexistent.pem",
        &images.kroute,
        "check-config",
    ]);
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(
        !missing.status.success() && stderr.contains("upstream.tls"),
        "without a CA bundle check-config must fail naming upstream.tls: {stderr}"
    );

    // The public CAs do not include the test cluster's: every handshake fails as unknown_ca.
    let (bootstrap, base, admin) = container::free_ports();
    let mut args = vec![
        "--network".to_string(),
        "host".into(),
        "-v".into(),
        mount.clone(),
    ];
    args.extend(port_env(bootstrap, base, admin));
    args.push(images.kroute.clone());
    let args_ref: Vec<&str> = args.iter().map(String::as_str).collect();
    let public = Container::run(&args_ref);
    let admin_addr = format!("127.0.0.1:{admin}");
    wait_for(
        "an unknown_ca handshake failure",
        Duration::from_secs(30),
        || {
            (metric_sum(
                &metrics(&admin_addr),
                "kroute_upstream_tls_handshake_failures_total",
                &["reason=\"unknown_ca\""],
            ) > 0.0)
                .then_some(())
        },
    );
    assert_ne!(
        http_get(&admin_addr, "/ready").map(|(s, _)| s),
        Some(200),
        "kroute must not be ready with brokers it cannot trust"
    );
    assert!(public.running(), "kroute exited: {}", public.logs());
    drop(public);

    // SSL_CERT_FILE pointing at the test CA: kroute trusts the brokers and gets ready.
    let (bootstrap, base, admin) = container::free_ports();
    let mut args = vec![
        "--network".to_string(),
        "host".into(),
        "-v".into(),
        mount,
        "-v".into(),
        ca,
        "-e".into(),
        "SSL_CERT_FILE=/certs/ca.pem".into(),
    ];
    args.extend(port_env(bootstrap, base, admin));
    args.push(images.kroute.clone());
    let args_ref: Vec<&str> = args.iter().map(String::as_str).collect();
    let trusted = Container::run(&args_ref);
    container::wait_ready(
        &format!("127.0.0.1:{admin}"),
        Duration::from_secs(30),
        &|| trusted.logs(),
    );
}

// -------------------------------------------------------------------------------------------
// The sidecar Deployment, run with podman kube play

/// Replaces the one occurrence of `from` in `text`; fails the test if there is not exactly one.
fn replace_once(text: &str, from: &str, to: &str) -> String {
    let n = text.matches(from).count();
    assert_eq!(n, 1, "{MANIFEST}: expected one {from:?}, found {n}");
    text.replacen(from, to, 1)
}

/// Replaces every occurrence of `from` (there must be one at least).
fn replace_all(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "{MANIFEST}: no {from:?}");
    text.replace(from, to)
}

/// Replaces the one line whose trimmed text starts with `prefix` by `line` (same indentation).
fn replace_line(text: &str, prefix: &str, line: &str) -> String {
    let mut found = 0;
    let out: Vec<String> = text
        .lines()
        .map(|l| {
            if l.trim_start().starts_with(prefix) {
                found += 1;
                let indent = &l[..l.len() - l.trim_start().len()];
                format!("{indent}{line}")
            } else {
                l.to_string()
            }
        })
        .collect();
    assert_eq!(
        found, 1,
        "{MANIFEST}: expected one line starting {prefix:?}"
    );
    out.join("\n") + "\n"
}

/// Settings of one run of the manifest on this machine.
struct PodRun {
    bootstrap_servers: String,
    topic: String,
    records: usize,
    ports: (u16, u16, u16),
}

/// docker/k8s/sidecar.yaml with this machine's values, and as podman can run it:
/// - the brokers (the cluster's SASL_PLAINTEXT listeners, by host name), user and password of
///   the test cluster, the topic and record count, free ports on the host network;
/// - podman (4.3 and later) rejects init containers with probes and does not know native
///   sidecars, so the kroute init container becomes the pod's first container (the test starts
///   it first and waits for /ready, as the kubelet does with the startupProbe);
/// - `hostNetwork: true`, since the brokers listen on and advertise 127.0.0.1.
fn podman_variant(manifest: &str, run: &PodRun) -> String {
    let (bootstrap, base, admin) = run.ports;
    let servers: Vec<String> = run
        .bootstrap_servers
        .split(',')
        .map(|s| format!("\"{s}\""))
        .collect();
    let mut m = replace_line(
        manifest,
        "bootstrap_servers = ",
        &format!("bootstrap_servers = [{}]", servers.join(", ")),
    );
    m = replace_line(&m, "username = ", "username = \"kroute\"");
    m = replace_line(&m, "password: ", "password: kroute-secret");
    m = replace_all(&m, "9092", &bootstrap.to_string());
    m = replace_all(&m, "9100", &base.to_string());
    m = replace_all(&m, "9644", &admin.to_string());
    m = replace_once(&m, "value: orders\n", &format!("value: {}\n", run.topic));
    m = replace_once(
        &m,
        "value: \"1000\"\n",
        &format!("value: \"{}\"\n", run.records),
    );
    // The native sidecar becomes the first app container.
    m = replace_once(
        &m,
        "      containers:\n        - name: app",
        "        - name: app",
    );
    m = replace_once(&m, "      initContainers:\n", "      containers:\n");
    m = replace_once(&m, "          restartPolicy: Always\n", "");
    replace_once(&m, "    spec:\n", "    spec:\n      hostNetwork: true\n")
}

/// What `podman kube play` made of the manifest; removed on drop (also left-overs of an earlier
/// run, before playing).
struct PlayedPod {
    pod: String,
    volumes: Vec<String>,
    secrets: Vec<String>,
}

impl PlayedPod {
    fn remove(&self) {
        let _ = podman(&["pod", "rm", "-f", "-t", "0", &self.pod]);
        for v in &self.volumes {
            let _ = podman(&["volume", "rm", "-f", v]);
        }
        for s in &self.secrets {
            let _ = podman(&["secret", "rm", s]);
        }
    }

    fn container(&self, name: &str) -> String {
        format!("{}-{name}", self.pod)
    }

    fn logs(&self, name: &str) -> String {
        let out = podman(&["logs", &self.container(name)]);
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }
}

impl Drop for PlayedPod {
    fn drop(&mut self) {
        self.remove();
    }
}

fn kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("{MANIFEST}: no {kind}"))
}

#[test]
fn sidecar_deployment_runs_with_podman_kube_play() {
    let _serial = container::serial();
    let images = images();
    let manifest = read(MANIFEST);
    let docs = container::yaml_documents(&manifest);
    let deployment = kind(&docs, "Deployment");
    let spec = &deployment["spec"]["template"]["spec"];
    assert_eq!(spec["initContainers"][0]["image"], images.kroute.as_str());
    assert_eq!(spec["containers"][0]["image"], images.producer.as_str());

    let sasl = Secured::get().value("sasl_plaintext").to_string();
    let run = PodRun {
        // By host name: the pod's /etc/hosts names 127.0.0.1 localhost.
        bootstrap_servers: format!("localhost:{}", first_port(&sasl)),
        topic: unique("sidecar-pod"),
        records: 2000,
        ports: container::free_ports(),
    };
    create_topic(&run.topic, 6, &[]);
    let variant = podman_variant(&manifest, &run);
    let file = TempFile::new("sidecar-pod.yaml", &variant);
    let played = PlayedPod {
        pod: format!("{}-pod-0", deployment["metadata"]["name"].as_str().unwrap()),
        volumes: vec![
            kind(&docs, "ConfigMap")["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_string(),
            kind(&docs, "Secret")["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_string(),
        ],
        secrets: vec![
            kind(&docs, "Secret")["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_string(),
        ],
    };
    played.remove();
    let started = Instant::now();
    podman_ok(&["kube", "play", "--start=false", file.path()]);

    // The Secret's files in its volume. podman 4.3 (Debian 12) writes only `data` entries, and
    // those base64-encoded; Kubernetes writes every entry decoded. Put them as Kubernetes does.
    let secret_docs = container::yaml_documents(&variant);
    let secret = kind(&secret_docs, "Secret");
    let volume = &played.volumes[1];
    let mountpoint = podman_ok(&["volume", "inspect", "--format", "{{.Mountpoint}}", volume]);
    for (key, value) in secret["stringData"].as_object().expect("stringData") {
        let path = std::path::Path::new(mountpoint.trim()).join(key);
        let value = value.as_str().unwrap();
        if std::fs::read_to_string(&path).ok().as_deref() != Some(value) {
            eprintln!("podman left {key} of the Secret out of its volume: written by the test");
            std::fs::write(&path, value).unwrap();
        }
    }

    // The sidecar first; the application once the startupProbe's /ready answers 200.
    let admin = format!("127.0.0.1:{}", run.ports.2);
    let kroute_name = played.container("kroute");
    podman_ok(&["start", &kroute_name]);
    container::wait_ready(&admin, Duration::from_secs(60), &|| played.logs("kroute"));
    assert_eq!(http_get(&admin, "/health").map(|(s, _)| s), Some(200));
    podman_ok(&["start", &played.container("app")]);

    let done = format!("done acked={} errors=0", run.records);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let logs = played.logs("app");
        if logs.contains(&done) {
            break;
        }
        assert!(
            !logs.contains("done acked=") && Instant::now() < deadline,
            "the producer did not get every record acknowledged:\n{}\n--- kroute ---\n{}",
            logs.lines().rev().take(20).collect::<Vec<_>>().join("\n"),
            played.logs("kroute")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "pod played, {} records acknowledged through the sidecar in {:.1} s",
        run.records,
        started.elapsed().as_secs_f64()
    );
    assert_read_back(&run.topic, "app-", run.records);

    // The traffic went through kroute, which authenticated with the Secret's password.
    let text = metrics(&admin);
    assert!(
        metric_sum(&text, "kroute_requests_total", &["api=\"Produce\""]) > 0.0,
        "no Produce request went through the sidecar:\n{text}"
    );
    assert!(
        metric_sum(
            &text,
            "kroute_sasl_authentications_total",
            &["mechanism=\"SCRAM-SHA-512\""]
        ) > 0.0,
        "kroute did not log in to the brokers with SCRAM-SHA-512"
    );
    assert_eq!(
        metric_sum(&text, "kroute_sasl_authentication_failures_total", &[]),
        0.0
    );

    // The container runs as the manifest's securityContext says.
    let inspected = container::inspect(&[&kroute_name]);
    assert_eq!(inspected["HostConfig"]["ReadonlyRootfs"], true);
    assert_eq!(inspected["Config"]["User"], "65532:65532");
    assert!(
        inspected["EffectiveCaps"]
            .as_array()
            .is_none_or(|c| c.is_empty()),
        "capabilities left: {}",
        inspected["EffectiveCaps"]
    );
    assert_eq!(inspected["HostConfig"]["Memory"], 256 * 1024 * 1024);

    // KROUTE_LOG_FORMAT=json from the manifest: every log line is a JSON object, none a warning.
    let logs = played.logs("kroute");
    for line in logs.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("kroute log line is not JSON ({e}): {line}"));
        let level = v["level"].as_str().unwrap_or("");
        assert!(level != "WARN" && level != "ERROR", "kroute logged: {line}");
    }

    // Shutdown as Kubernetes does it: the application first, then the sidecar (SIGTERM).
    podman_ok(&["stop", "-t", "10", &played.container("app")]);
    let stopping = Instant::now();
    podman_ok(&["stop", "-t", "45", &kroute_name]);
    let code = container::inspect(&[&kroute_name])["State"]["ExitCode"].as_i64();
    eprintln!(
        "kroute sidecar stopped in {:.2} s",
        stopping.elapsed().as_secs_f64()
    );
    assert_eq!(code, Some(0), "kroute exit code after SIGTERM:\n{logs}");
}

// -------------------------------------------------------------------------------------------
// Static checks

#[test]
fn dockerfiles_pass_hadolint() {
    let out = tool_ok(
        "hadolint",
        &["docker/Dockerfile", "docker/producer/Dockerfile"],
    );
    assert!(out.trim().is_empty(), "hadolint: {out}");
}

#[test]
fn sidecar_manifest_is_valid_for_kubernetes_1_29() {
    let out = tool_ok(
        "kubernetes-validate",
        &["--strict", "-k", "1.29.0", MANIFEST],
    );
    for what in [
        "configmap/kroute-config",
        "secret/kroute-sasl",
        "deployment/orders-producer",
    ] {
        assert!(
            out.contains(&format!("passed for resource {what}")),
            "{out}"
        );
    }
    // --strict catches a misspelled key (it is what makes the check worth having).
    let manifest = read(MANIFEST);
    let typo = TempFile::new(
        "sidecar-typo.yaml",
        &manifest.replacen("readOnlyRootFilesystem", "readOnlyRootFileSystem", 1),
    );
    let out = tool(
        "kubernetes-validate",
        &["--strict", "-k", "1.29.0", typo.path()],
    );
    assert!(!out.status.success(), "a misspelled key passed validation");

    // What the manifest must hold, beyond the schema.
    let docs = container::yaml_documents(&manifest);
    let config = kind(&docs, "ConfigMap")["data"]["proxy.toml"]
        .as_str()
        .expect("proxy.toml in the ConfigMap");
    let admin_port: u64 = config
        .lines()
        .find_map(|l| l.trim().strip_prefix("listen = \""))
        .and_then(|l| l.split('"').next()?.rsplit_once(':')?.1.parse().ok())
        .expect("admin.listen in proxy.toml");
    let password_file = config
        .lines()
        .find_map(|l| l.trim().strip_prefix("password_file = \""))
        .and_then(|l| l.split('"').next())
        .expect("upstream.sasl.password_file in proxy.toml");
    let spec = &kind(&docs, "Deployment")["spec"]["template"]["spec"];
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    let sidecar = &spec["initContainers"][0];
    assert_eq!(sidecar["name"], "kroute");
    assert_eq!(
        sidecar["restartPolicy"], "Always",
        "kroute is a native sidecar"
    );
    for (probe, path) in [
        ("startupProbe", "/ready"),
        ("readinessProbe", "/ready"),
        ("livenessProbe", "/health"),
    ] {
        assert_eq!(sidecar[probe]["httpGet"]["path"], path, "{probe}");
        assert_eq!(sidecar[probe]["httpGet"]["port"], admin_port, "{probe}");
    }
    let app = &spec["containers"][0];
    for c in [sidecar, app] {
        for r in ["requests", "limits"] {
            for what in ["cpu", "memory"] {
                assert!(
                    c["resources"][r][what].is_string(),
                    "{} has no {r}.{what}",
                    c["name"]
                );
            }
        }
        let sc = &c["securityContext"];
        assert_eq!(sc["readOnlyRootFilesystem"], true, "{}", c["name"]);
        assert_eq!(sc["runAsNonRoot"], true, "{}", c["name"]);
        assert_eq!(sc["allowPrivilegeEscalation"], false, "{}", c["name"]);
        assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
    }
    // The ConfigMap is kroute's config path, the Secret the directory of password_file.
    let mounts: Vec<(&str, &str)> = sidecar["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap(),
                m["mountPath"].as_str().unwrap(),
            )
        })
        .collect();
    let volume_of = |name: &str| {
        spec["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no volume {name}"))
    };
    let config_mount = mounts
        .iter()
        .find(|(n, _)| volume_of(n)["configMap"]["name"] == "kroute-config")
        .expect("the ConfigMap is mounted");
    assert_eq!(config_mount.1, "/etc/kroute");
    let secret_mount = mounts
        .iter()
        .find(|(n, _)| volume_of(n)["secret"]["secretName"] == "kroute-sasl")
        .expect("the Secret is mounted");
    assert_eq!(
        format!("{}/password", secret_mount.1),
        password_file,
        "password_file is the Secret's password"
    );
    let bootstrap_port = config
        .lines()
        .find_map(|l| l.trim().strip_prefix("bootstrap_port = "))
        .and_then(|l| l.split_whitespace().next())
        .expect("listen.bootstrap_port");
    let app_bootstrap = app["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "KAFKA_BOOTSTRAP")
        .expect("KAFKA_BOOTSTRAP")["value"]
        .clone();
    assert_eq!(app_bootstrap, format!("127.0.0.1:{bootstrap_port}"));
}

#[test]
fn compose_file_is_valid_and_mounts_the_monitoring_files() {
    tool_ok(
        "docker-compose",
        &["-f", "docker/compose.yaml", "config", "-q"],
    );
    let json = tool_ok(
        "docker-compose",
        &[
            "-f",
            "docker/compose.yaml",
            "--profile",
            "demo",
            "config",
            "--format",
            "json",
        ],
    );
    let config: Value = serde_json::from_str(&json).expect("compose config JSON");
    let services = config["services"].as_object().expect("services");
    for s in ["kafka", "kroute", "prometheus", "grafana", "producer"] {
        assert!(services.contains_key(s), "no service {s}");
    }
    assert_eq!(
        services["kroute"]["image"],
        format!("localhost/kroute:{}", env!("CARGO_PKG_VERSION"))
    );
    // Every bind mount exists in the repository, at the paths the images read.
    let mut targets = BTreeSet::new();
    for (name, service) in services {
        for v in service["volumes"].as_array().into_iter().flatten() {
            if v["type"] == "bind" {
                let source = v["source"].as_str().unwrap();
                assert!(
                    std::path::Path::new(source).exists(),
                    "{name} mounts {source}, which does not exist"
                );
                targets.insert(v["target"].as_str().unwrap().to_string());
            }
        }
    }
    for t in [
        "/etc/prometheus",
        "/etc/grafana/provisioning",
        "/var/lib/grafana/dashboards",
    ] {
        assert!(targets.contains(t), "nothing mounted at {t}: {targets:?}");
    }
    for f in [
        "docker/prometheus/prometheus.yml",
        "docker/prometheus/alerts.yml",
        "docker/grafana/provisioning/datasources/prometheus.yaml",
        "docker/grafana/provisioning/dashboards/kroute.yaml",
        "docker/grafana/dashboards/kroute.json",
    ] {
        assert!(repo_root().join(f).exists(), "{f} is missing");
    }
    // Prometheus scrapes kroute's admin endpoint where compose puts it.
    let admin = services["kroute"]["environment"]["KROUTE_ADMIN_LISTEN"]
        .as_str()
        .expect("KROUTE_ADMIN_LISTEN");
    let port = admin.rsplit_once(':').unwrap().1;
    assert!(
        read("docker/prometheus/prometheus.yml").contains(&format!("kroute:{port}")),
        "prometheus.yml does not scrape kroute:{port}"
    );
}
