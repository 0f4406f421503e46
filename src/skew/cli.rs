//! `kroute skew` and `kroute plan`: the report and the plan of a running kroute, asked of its
//! admin endpoint, for a person (tables) or for Kafka's tools (the plan's two files).

use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

/// GETs `path` of the admin endpoint at `admin` (host:port) and parses the JSON; an answer
/// with an error status says its `error`.
pub fn get(admin: &str, path: &str) -> anyhow::Result<Value> {
    let url = format!("http://{admin}{path}");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut response = agent
        .get(&url)
        .call()
        .map_err(|e| anyhow::anyhow!("cannot reach kroute's admin endpoint {admin}: {e}"))?;
    let status = response.status();
    let body: Value = response
        .body_mut()
        .read_json()
        .map_err(|e| anyhow::anyhow!("{url}: answer is not JSON ({e})"))?;
    if !status.is_success() {
        let why = body["error"].as_str().unwrap_or("no reason given");
        anyhow::bail!("{url}: {status}: {why}");
    }
    Ok(body)
}

/// The report as tables.
pub fn skew_tables(report: &Value) -> String {
    let mut out = String::new();
    let window = report["window_s"]
        .as_f64()
        .map_or("one sample: no rates yet".to_string(), |w| {
            format!("rates over {w:.1} s")
        });
    let _ = writeln!(out, "Brokers ({window})");
    let _ = writeln!(
        out,
        "{:>6} {:>5} {:>8} {:>10} {:>6} {:>12} {:>12} {:>12} {:>9} {:>9}",
        "broker",
        "led",
        "replicas",
        "records/s",
        "share",
        "keyed B/s",
        "moved B/s",
        "kept B/s",
        "unmovable",
        "cost ms"
    );
    for b in report["brokers"].as_array().into_iter().flatten() {
        let bytes = |class: &str| num(&b["produce_bytes_per_s"][class], 0);
        let _ = writeln!(
            out,
            "{:>6} {:>5} {:>8} {:>10} {:>6} {:>12} {:>12} {:>12} {:>9} {:>9}",
            b["id"].to_string(),
            b["partitions_led"].to_string(),
            b["replicas"].to_string(),
            num(&b["records_per_s"], 1),
            num(&b["records_share"], 2),
            bytes("keyed"),
            bytes("moved_out"),
            bytes("kept"),
            num(&b["unmovable_share"], 2),
            num(&b["cost_ms"], 1)
        );
    }
    let _ = writeln!(out, "\nTopics (leaders per broker; even spread)");
    for t in report["topics"].as_array().into_iter().flatten() {
        let leaders: Vec<String> = t["leaders"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(b, n)| format!("{b}:{n}"))
            .collect();
        let _ = writeln!(
            out,
            "  {:<30} {:>4} partitions  {:<24} even {:<5} max/even {}",
            t["topic"].as_str().unwrap_or(""),
            t["partitions"].to_string(),
            leaders.join(" "),
            num(&t["even"], 1),
            num(&t["max_over_even"], 2)
        );
    }
    let groups = report["groups"]
        .as_array()
        .map_or(&[][..], |g| g.as_slice());
    if !groups.is_empty() {
        let _ = writeln!(out, "\nConsumer groups (partitions and lag per member)");
    }
    for g in groups {
        let flag = if g["skewed"] == true { "  SKEWED" } else { "" };
        let _ = writeln!(
            out,
            "  {} [{}] mean {} partitions{flag}",
            g["group"].as_str().unwrap_or(""),
            g["status"].as_str().unwrap_or(""),
            num(&g["mean_partitions"], 1)
        );
        for m in g["members"].as_array().into_iter().flatten() {
            let over = if m["overloaded"] == true {
                "  overloaded"
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "    {:<40} {:>4} partitions {:>10} lag{over}",
                format!(
                    "{} {}",
                    m["client_id"].as_str().unwrap_or(""),
                    m["owner"].as_str().unwrap_or("")
                ),
                m["partitions"].to_string(),
                m["lag"].to_string()
            );
        }
    }
    out
}

/// A summary of the plan for a person.
pub fn plan_summary(answer: &Value) -> String {
    let s = &answer["plan"]["summary"];
    let counts = |v: &Value, decimals: usize| {
        v.as_object()
            .into_iter()
            .flatten()
            .map(|(b, n)| format!("{b}:{}", num(n, decimals)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut out = String::new();
    let over = s["load_window_s"]
        .as_f64()
        .map_or(String::new(), |w| format!(" over {w:.0} s"));
    let _ = writeln!(
        out,
        "{} partitions, weighted by {}{over}",
        s["partitions"],
        s["weighted_by"].as_str().unwrap_or("")
    );
    let _ = writeln!(out, "leaders before  {}", counts(&s["leaders_before"], 0));
    let _ = writeln!(out, "leaders after   {}", counts(&s["leaders_after"], 0));
    let _ = writeln!(out, "load before     {}", counts(&s["load_before"], 1));
    let _ = writeln!(out, "load after      {}", counts(&s["load_after"], 1));
    let _ = writeln!(
        out,
        "max/mean load   {} -> {}",
        num(&s["max_over_mean_before"], 2),
        num(&s["max_over_mean_after"], 2)
    );
    let sizes = if s["sizes_known"] == true {
        ""
    } else {
        " (some sizes unknown)"
    };
    let _ = writeln!(
        out,
        "changes         {} leader changes, {} replica moves, {} bytes to copy{sizes}",
        s["leader_changes"], s["replica_moves"], s["bytes_to_copy"]
    );
    for skipped in s["skipped"].as_array().into_iter().flatten() {
        let _ = writeln!(out, "left alone      {}", skipped.as_str().unwrap_or(""));
    }
    out
}

/// Writes the plan's files where asked; says what it wrote.
pub fn write_files(
    answer: &Value,
    reassignment: Option<&Path>,
    election: Option<&Path>,
) -> anyhow::Result<String> {
    let mut said = String::new();
    let files = [
        (
            reassignment,
            "reassignment_file",
            "kafka-reassign-partitions --execute --reassignment-json-file",
        ),
        (
            election,
            "election_file",
            "kafka-leader-election --election-type PREFERRED --path-to-json-file",
        ),
    ];
    for (path, key, tool) in files {
        let Some(path) = path else { continue };
        let file = &answer[key];
        let n = file["partitions"].as_array().map_or(0, Vec::len);
        let text = serde_json::to_string_pretty(file)?;
        std::fs::write(path, text + "\n")
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
        let _ = writeln!(
            said,
            "wrote {} ({n} partitions): {tool} {}",
            path.display(),
            path.display()
        );
    }
    Ok(said)
}

fn num(v: &Value, decimals: usize) -> String {
    match v.as_f64() {
        Some(x) => format!("{x:.decimals$}"),
        None => "-".into(),
    }
}
