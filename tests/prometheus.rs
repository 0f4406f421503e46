//! Monitoring kroute: `promtool check metrics` on a live kroute's /metrics, the alert rules
//! (docker/prometheus: promtool checks and unit tests), and a real Prometheus server scraping
//! kroute during a real produce run, against which every alert expression and every query of
//! the Grafana dashboard (docker/grafana) must parse and, where the traffic makes data, return
//! data. No Grafana server is available, so the dashboard JSON is checked structurally.

mod common;

use std::collections::HashSet;
use std::io::Write;
use std::time::Duration;

use common::prometheus::{Prometheus, docker_file, metric_names, promtool};
use common::*;
use serde_json::Value;

/// Metrics that only appear when something happens that the load test does not cause; a query
/// reading nothing else may come back empty.
const EVENT_ONLY: &[&str] = &[
    // a TLS handshake with a broker failed (the test cluster is reached over plaintext)
    "kroute_upstream_tls_handshake_failures_total",
    // certificate files changed after start
    "kroute_tls_reloads_total",
    // a client tried SASL on a kroute that authenticates upstream itself
    "kroute_client_sasl_refused_total",
    // per consumer group: this test runs no consumer group
    "kroute_lag_group_status",
    "kroute_lag_group_messages",
    "kroute_lag_group_time_lag_seconds",
];

fn read(path: &str) -> String {
    std::fs::read_to_string(docker_file(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The alert names in alerts.yml, in order (a name may appear twice, once per severity).
fn alert_names() -> Vec<String> {
    read("prometheus/alerts.yml")
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert:"))
        .map(|n| n.trim().to_string())
        .collect()
}

/// The datasource uid Grafana is provisioned with.
fn provisioned_uid() -> String {
    read("grafana/provisioning/datasources/prometheus.yaml")
        .lines()
        .find_map(|l| l.trim().strip_prefix("uid:"))
        .map(|u| u.trim().trim_matches('"').to_string())
        .expect("a datasource uid in provisioning/datasources/prometheus.yaml")
}

fn dashboard() -> Value {
    serde_json::from_str(&read("grafana/dashboards/kroute.json")).expect("dashboard JSON")
}

/// Every (panel title, refId, expr) of the dashboard.
fn dashboard_queries(d: &Value) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for panel in d["panels"].as_array().unwrap() {
        for t in panel["targets"].as_array().into_iter().flatten() {
            out.push((
                panel["title"].as_str().unwrap_or_default().to_string(),
                t["refId"].as_str().unwrap_or_default().to_string(),
                t["expr"].as_str().unwrap_or_default().to_string(),
            ));
        }
    }
    out
}

/// The metric and label of a `label_values(metric, label)` variable query.
fn label_values(query: &str) -> (String, String) {
    let inner = query
        .trim()
        .strip_prefix("label_values(")
        .and_then(|q| q.strip_suffix(')'))
        .unwrap_or_else(|| panic!("variable query {query:?} is not label_values(metric, label)"));
    let (metric, label) = inner.split_once(',').expect("label_values(metric, label)");
    (metric.trim().to_string(), label.trim().to_string())
}

/// A dashboard query with Grafana's variables replaced by concrete values.
fn concrete(expr: &str, instance: &str) -> String {
    let e = [
        ("${__rate_interval}", "1m"),
        ("$__rate_interval", "1m"),
        ("${__interval}", "15s"),
        ("$__interval", "15s"),
        ("${instance}", instance),
        ("$instance", instance),
    ]
    .iter()
    .fold(expr.to_string(), |e, (var, value)| e.replace(var, value));
    assert!(!e.contains('$'), "unknown variable left in {e}");
    e
}

#[test]
fn alert_rules_pass_promtool_checks_and_unit_tests() {
    let dir = docker_file("prometheus");
    for args in [
        &["check", "config", "prometheus.yml"][..],
        &["check", "rules", "alerts.yml"],
        &["test", "rules", "alerts_test.yml"],
    ] {
        let (ok, out) = promtool(&dir, args, None);
        assert!(ok, "promtool {args:?} failed:\n{out}");
    }
    // Every alert has unit tests where it fires.
    let tests = read("prometheus/alerts_test.yml");
    for name in alert_names() {
        assert!(
            tests.contains(&format!(
                "alertname: {name}\n        exp_alerts:\n          - "
            )),
            "alerts_test.yml has no test in which {name} fires"
        );
    }
    // prometheus.yml is what the compose file needs: job kroute on kroute:9644, these rules.
    let config = read("prometheus/prometheus.yml");
    for needed in ["job_name: kroute", "\"kroute:9644\"", "- alerts.yml"] {
        assert!(config.contains(needed), "prometheus.yml lacks {needed}");
    }
}

#[test]
fn dashboard_json_is_generated_and_well_formed() {
    let generated = std::process::Command::new("python3")
        .arg(docker_file("grafana/dashboard.py"))
        .arg("--check")
        .output()
        .expect("run python3 docker/grafana/dashboard.py --check");
    assert!(
        generated.status.success(),
        "{}",
        String::from_utf8_lossy(&generated.stderr)
    );

    let uid = provisioned_uid();
    assert_eq!(uid, "prometheus");
    let provider = read("grafana/provisioning/dashboards/kroute.yaml");
    assert!(provider.contains("path: /var/lib/grafana/dashboards"));

    let d = dashboard();
    assert!(
        d["uid"].as_str().is_some_and(|u| !u.is_empty()),
        "dashboard uid"
    );
    assert!(
        d["title"].as_str().is_some_and(|t| !t.is_empty()),
        "dashboard title"
    );
    assert!(d["schemaVersion"].as_u64().is_some(), "schemaVersion");
    let panels = d["panels"].as_array().expect("panels");
    assert!(panels.len() > 10, "only {} panels", panels.len());

    let mut ids = HashSet::new();
    let mut boxes: Vec<(String, [i64; 4])> = Vec::new();
    for p in panels {
        let title = p["title"].as_str().unwrap_or_default().to_string();
        assert!(!title.is_empty(), "a panel without a title: {p}");
        let id = p["id"].as_u64().unwrap_or_else(|| panic!("{title}: no id"));
        assert!(ids.insert(id), "{title}: panel id {id} is used twice");
        let g = &p["gridPos"];
        let [x, y, w, h] = ["x", "y", "w", "h"].map(|k| {
            g[k].as_i64()
                .unwrap_or_else(|| panic!("{title}: gridPos.{k}"))
        });
        assert!(
            w > 0 && h > 0 && x >= 0 && y >= 0 && x + w <= 24,
            "{title}: gridPos {g}"
        );
        for (other, [ox, oy, ow, oh]) in &boxes {
            let apart = x + w <= *ox || *ox + ow <= x || y + h <= *oy || *oy + oh <= y;
            assert!(apart, "{title} overlaps {other}");
        }
        boxes.push((title.clone(), [x, y, w, h]));

        if p["type"] == "row" {
            assert!(p.get("targets").is_none(), "{title}: a row with queries");
            continue;
        }
        assert!(
            ["timeseries", "stat"].contains(&p["type"].as_str().unwrap_or_default()),
            "{title}: type {}",
            p["type"]
        );
        assert_eq!(p["datasource"]["uid"], uid.as_str(), "{title}: datasource");
        assert_eq!(p["datasource"]["type"], "prometheus", "{title}: datasource");
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}: no queries");
        let mut refs = HashSet::new();
        for t in targets {
            let r = t["refId"].as_str().unwrap_or_default();
            assert!(!r.is_empty(), "{title}: a query without refId");
            assert!(refs.insert(r.to_string()), "{title}: refId {r} twice");
            let expr = t["expr"].as_str().unwrap_or_default();
            assert!(!expr.trim().is_empty(), "{title} {r}: empty expr");
            assert_eq!(
                t["datasource"]["uid"],
                uid.as_str(),
                "{title} {r}: datasource"
            );
        }
        assert!(
            p["fieldConfig"]["defaults"]["unit"].is_string(),
            "{title}: no unit"
        );
    }
    for v in d["templating"]["list"].as_array().expect("templating") {
        assert_eq!(
            v["datasource"]["uid"],
            uid.as_str(),
            "variable {}",
            v["name"]
        );
        label_values(v["query"]["query"].as_str().expect("variable query"));
    }
}

/// kroute with TLS on its listeners (so the certificate expiry gauge exists) routing `prom-*`.
struct TlsKroute {
    kroute: Kroute,
    cert_pem: String,
    _dir: TempDir,
}

struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tls_kroute() -> TlsKroute {
    let dir = TempDir(std::env::temp_dir().join(unique("kroute-prom-tls")));
    std::fs::create_dir_all(&dir.0).unwrap();
    let generated =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .unwrap();
    let cert = dir.0.join("cert.pem");
    let key = dir.0.join("key.pem");
    std::fs::write(&cert, generated.cert.pem()).unwrap();
    std::fs::write(&key, generated.signing_key.serialize_pem()).unwrap();
    let kroute = Kroute::start_with(KrouteOptions {
        extra_toml: format!(
            "[listen.tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n\n\
             [routing]\nstrategy = \"strict-cost\"\ninclude = [\"prom-*\"]\n\n\
             [lag]\nenabled = true\npoll_interval_ms = 1000\n",
            cert.display(),
            key.display()
        ),
        ..Default::default()
    });
    TlsKroute {
        kroute,
        cert_pem: generated.cert.pem(),
        _dir: dir,
    }
}

/// Sends a frame of negative size to kroute over TLS: a client protocol error.
fn send_negative_frame(addr: &str, cert_pem: &str) {
    let mut tls = common::secured::tls_stream(addr, cert_pem, None);
    tls.write_all(&(-1i32).to_be_bytes()).unwrap();
    tls.flush().unwrap();
    let mut buf = [0u8; 64];
    // kroute closes the connection (EOF or an error): nothing is answered.
    assert!(matches!(
        std::io::Read::read(&mut tls, &mut buf),
        Ok(0) | Err(_)
    ));
}

/// The alert `name` in state `state` whose labels include `labels`, if Prometheus has it.
fn alert_in_state(p: &Prometheus, name: &str, state: &str, labels: &[(&str, &str)]) -> Option<()> {
    p.alerts()
        .iter()
        .any(|a| {
            a["labels"]["alertname"] == name
                && a["state"] == state
                && labels.iter().all(|(k, v)| a["labels"][*k] == *v)
        })
        .then_some(())
}

#[test]
fn prometheus_scrapes_kroute_under_load_and_every_alert_and_panel_query_works() {
    let TlsKroute {
        kroute,
        cert_pem,
        _dir,
    } = tls_kroute();

    // The shipped prometheus.yml, pointed at this kroute, scraping and evaluating every second.
    let shipped = read("prometheus/prometheus.yml");
    let rules = docker_file("prometheus/alerts.yml");
    let config = [
        ("scrape_interval: 15s", "scrape_interval: 1s".to_string()),
        (
            "evaluation_interval: 15s",
            "evaluation_interval: 1s".to_string(),
        ),
        ("kroute:9644", kroute.admin.clone()),
        ("- alerts.yml", format!("- {}", rules.display())),
    ]
    .iter()
    .fold(shipped, |text, (from, to)| {
        assert!(text.contains(from), "prometheus.yml has no {from:?}");
        text.replace(from, to)
    });
    let p = Prometheus::start(&config);
    p.wait_targets_up();

    // A real produce run through kroute: the Java default (idempotent) producer over TLS,
    // keyless records in a routed topic, paced so that it spans several scrapes.
    let topic = unique("prom");
    create_topic_two_per_broker(&topic);
    let trust = format!(
        "ssl.truststore.location={}",
        _dir.0.join("cert.pem").display()
    );
    let produced = java_on(
        "produce",
        &kroute.bootstrap,
        &topic,
        &[
            "--count",
            "6000",
            "--per-second",
            "1500",
            "--client-config",
            "security.protocol=SSL",
            "--client-config",
            "ssl.truststore.type=PEM",
            "--client-config",
            &trust,
        ],
    );
    assert_eq!(produced.count("produced"), 6000);
    assert_eq!(produced.count("errors"), 0);

    // Prometheus has scraped kroute since the run ended.
    let produce_requests = kroute.metric("kroute_requests_total", &["api=\"Produce\""]);
    assert!(produce_requests > 0.0);
    wait_for(
        "prometheus to scrape the end of the run",
        Duration::from_secs(30),
        || {
            (p.value("sum(kroute_requests_total{api=\"Produce\"})") == Some(produce_requests))
                .then_some(())
        },
    );

    // promtool is clean on the /metrics of a kroute that has carried traffic.
    let text = kroute.metrics();
    assert!(
        text.contains("kroute_batches_moved_total{"),
        "no batch moved:\n{text}"
    );
    let (ok, out) = promtool(&repo_root(), &["check", "metrics"], Some(&text));
    assert!(
        ok && out.trim().is_empty(),
        "promtool check metrics:\n{out}"
    );

    // Prometheus loaded every alert of alerts.yml and evaluated each without error.
    let names = alert_names();
    let loaded = wait_for("every rule evaluated", Duration::from_secs(30), || {
        let rules = p.rules();
        rules
            .iter()
            .all(|r| {
                r["lastEvaluation"]
                    .as_str()
                    .is_some_and(|t| !t.starts_with("0001"))
            })
            .then_some(rules)
    });
    let loaded_names: Vec<&str> = loaded.iter().filter_map(|r| r["name"].as_str()).collect();
    assert_eq!(loaded_names, names, "rules loaded");
    for r in &loaded {
        assert_eq!(
            r["health"], "ok",
            "rule {} failed: {}",
            r["name"], r["lastError"]
        );
    }
    // Every alert expression parses, and every series it reads exists.
    for r in &loaded {
        let (name, query) = (r["name"].as_str().unwrap(), r["query"].as_str().unwrap());
        p.query(query)
            .unwrap_or_else(|e| panic!("alert {name}: {query}: {e}"));
        for metric in metric_names(query) {
            if EVENT_ONLY.contains(&metric.as_str()) {
                continue;
            }
            let series = p.query(&metric).unwrap();
            assert!(!series.is_empty(), "alert {name}: no series of {metric}");
        }
    }
    // A healthy run fires nothing.
    let firing: Vec<Value> = p
        .alerts()
        .into_iter()
        .filter(|a| a["state"] == "firing")
        .collect();
    assert!(
        firing.is_empty(),
        "alerts firing in a healthy run: {firing:?}"
    );

    // Every dashboard query parses, and returns data unless it reads only EVENT_ONLY metrics.
    let d = dashboard();
    let variables = d["templating"]["list"].as_array().unwrap();
    let mut instance = None;
    for v in variables {
        let (metric, label) = label_values(v["query"]["query"].as_str().unwrap());
        let values = p.query(&format!("count by ({label}) ({metric})")).unwrap();
        assert!(!values.is_empty(), "variable {}: no values", v["name"]);
        if v["name"] == "instance" {
            instance = values[0]["metric"][label.as_str()]
                .as_str()
                .map(str::to_string);
        }
    }
    let instance = instance.expect("the instance variable has a value");
    assert_eq!(instance, kroute.admin);
    for (title, ref_id, expr) in dashboard_queries(&d) {
        let query = concrete(&expr, &instance);
        let result = p
            .query(&query)
            .unwrap_or_else(|e| panic!("panel {title:?} {ref_id}: {query}: {e}"));
        let may_be_empty = metric_names(&query)
            .iter()
            .all(|m| EVENT_ONLY.contains(&m.as_str()));
        assert!(
            may_be_empty || !result.is_empty(),
            "panel {title:?} {ref_id}: no data for {query}"
        );
    }
    // Prometheus saw the batches kroute moved. (Not the panel's increase(): a series scraped
    // first after every move has a single value, from which increase() counts nothing; on a
    // loaded machine the first scrape can come that late.)
    let moved = p
        .value(&concrete(
            "sum(kroute_batches_moved_total{instance=~\"$instance\"})",
            &instance,
        ))
        .unwrap();
    assert!(moved > 0.0, "moved {moved}");
    assert_eq!(moved, kroute.metric("kroute_batches_moved_total", &[]));

    // Alerts work end to end: a bad frame fires KrouteClientProtocolErrors for its reason ...
    send_negative_frame(&kroute.bootstrap, &cert_pem);
    wait_for(
        "KrouteClientProtocolErrors firing",
        Duration::from_secs(30),
        || {
            alert_in_state(
                &p,
                "KrouteClientProtocolErrors",
                "firing",
                &[("reason", "negative_size"), ("job", "kroute")],
            )
        },
    );
    kroute.assert_clean_logs(&[
        "TLS handshake failed",
        "closing client connection: frame size -1 is negative",
    ]);
    // ... and a kroute that is gone is KrouteDown (pending for its first minute).
    let admin = kroute.admin.clone();
    drop(kroute);
    wait_for("KrouteDown pending", Duration::from_secs(30), || {
        alert_in_state(&p, "KrouteDown", "pending", &[("instance", &admin)])
    });
}
