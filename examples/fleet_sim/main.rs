//! The fleet simulator: N kroute sidecars sharing one cluster, with kroute's own routing core
//! (`kroute::balance`) under a virtual clock, against plain-client baselines and the oracle.
//!
//! ```text
//! cargo run --release --example fleet_sim -- --scenarios drop --sidecars 100,1000,10000
//! cargo run --release --example fleet_sim -- --validate
//! cargo run --release --example fleet_sim -- --all --out docs/fleet-sim.md
//! ```
//!
//! Layout after C3's absim: the cluster model (`cluster`), the clients (`fleet`), the event
//! loop (`run`), the measurements (`measure`) and, here, the scenarios and the report.

mod cluster;
mod fleet;
mod measure;
mod run;

use std::fmt::Write as _;
use std::time::Duration;

use clap::Parser;
use kroute::balance::strategy::{Equalize, Rule};

use cluster::{Shape, Wake};
use fleet::{Phases, Policy};
use run::{Pattern, Scenario, Trace};

#[derive(Parser)]
struct Args {
    /// Scenarios to run (see `--list`).
    #[arg(long, value_delimiter = ',', default_value = "drop")]
    scenarios: Vec<String>,
    /// Fleet sizes.
    #[arg(long, value_delimiter = ',', default_value = "100,1000,10000")]
    sidecars: Vec<usize>,
    /// Policies: kroute, linear, uniform, kip794, p2c, oracle.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "kroute,linear,uniform,kip794,p2c,oracle"
    )]
    policies: Vec<String>,
    /// Every scenario.
    #[arg(long)]
    all: bool,
    /// Validate the queue model against M/M/1 and stop.
    #[arg(long)]
    validate: bool,
    /// Print the scenarios and stop.
    #[arg(long)]
    list: bool,
    /// Write the markdown report here too.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Lease of the kroute strategy, ms.
    #[arg(long, default_value_t = 250)]
    lease_ms: u64,
    /// Print every run's 1 s shares of each broker (stderr).
    #[arg(long)]
    series: bool,
    /// Rule parameters of `kroute` (gain,max_step,pull,band,floor), to try others.
    #[arg(long, value_delimiter = ',')]
    rule: Option<Vec<f64>>,
}

/// What a leader behind one of the bench's capped relays takes in at once: the relay's token
/// bucket is 64 KiB deep (`relay/`), and the link carries two follower copies out for each byte
/// the broker leads, so 32 KiB of Produce requests.
const RELAY_BURST: f64 = 32_768.0;

/// Three brokers, RF 3, small requests (so 10,000 sidecars each still send a few a second).
fn three_brokers(leaders: Vec<u32>) -> Shape {
    Shape {
        leaders,
        capacity: 50e6,
        replication: 3,
        repl_cost: 0.3,
        net: 0.000_25,
        fetch_delay: 0.000_5,
        overhead: 0.000_005,
        slow_replicas: false,
        wake: Wake::default(),
        burst: 0.0,
    }
}

fn scenario(name: &str) -> Option<Scenario> {
    let base = Scenario {
        name: name.to_string(),
        shape: three_brokers(vec![12, 12, 12]),
        load: 0.8,
        seconds: 120.0,
        pattern: Pattern::Drop {
            broker: 1,
            at: 40.0,
            until: 80.0,
            factor: 0.5,
        },
        plain: 0.0,
        phases: Phases::Random,
        mean_bytes: 2048.0,
        fixed_size: false,
    };
    let square = |period: f64| Pattern::Square {
        broker: 1,
        period,
        factor: 0.5,
        from: 20.0,
    };
    Some(match name {
        "drop" => base,
        "drop-aligned" => Scenario {
            phases: Phases::Aligned,
            ..base
        },
        "antagonist-1s" => Scenario {
            pattern: square(1.0),
            seconds: 60.0,
            ..base
        },
        "antagonist-5s" => Scenario {
            pattern: square(5.0),
            seconds: 60.0,
            ..base
        },
        "antagonist-20s" => Scenario {
            pattern: square(20.0),
            seconds: 100.0,
            ..base
        },
        "hetero" => Scenario {
            pattern: Pattern::Fixed(vec![1.0, 0.6, 0.8]),
            seconds: 60.0,
            ..base
        },
        "skew-22-10-4" => Scenario {
            shape: three_brokers(vec![22, 10, 4]),
            ..base
        },
        "half-plain" => Scenario { plain: 0.5, ..base },
        "drop-slow-disk" => Scenario {
            shape: Shape {
                slow_replicas: true,
                ..three_brokers(vec![12, 12, 12])
            },
            ..base
        },
        // Requests 8x larger than with 3 brokers, so that a run is as many requests as the
        // 3-broker ones (the cluster's capacity is 10x).
        "brokers30" => Scenario {
            shape: Shape {
                leaders: vec![4; 30],
                ..three_brokers(vec![])
            },
            mean_bytes: 16_384.0,
            pattern: Pattern::DropMany {
                brokers: vec![1, 17],
                at: 40.0,
                until: 80.0,
                factor: 0.5,
            },
            ..base
        },
        // Seed 000's full setup (bench/seed_fleet.sh): every broker binds. Each leads at most
        // 1 MB/s (its capped link also carries the two follower copies out, which the model
        // folds into that capacity), 50/38/20 partitions, 2.7 MB/s offered in 10 KiB requests
        // by a few sidecars: the cluster runs at 90% and queues take long to drain. The links
        // are servers, not the relays' token buckets: with buckets ([`RELAY_BURST`]) kroute's
        // p99 at 3 sidecars fell to 0.66x the real run's (docs/fleet.md, part 3), whose
        // requests (records batched by linger) the model does not have.
        "bind-all" => steady(
            base,
            Shape {
                capacity: 1e6,
                repl_cost: 0.0,
                ..three_brokers(vec![50, 38, 20])
            },
            0.9,
            vec![1.0, 1.0, 1.0],
        ),
        // Part 2's real bench (bench/fleet.sh), to validate the model against: each broker's
        // link capped at 4/1/4 MB/s, which it shares with the two follower copies it sends, so
        // it leads at most 2/0.5/2 MB/s (the model folds the copies into that capacity, as in
        // `bind-all`), through the relays' token buckets; two partitions each; 3 MB/s offered in
        // records of 10,240 bytes, one a request (kroute counted 10.4 KB per Produce request).
        "fleet-bench" => Scenario {
            fixed_size: true,
            ..steady(
                base,
                Shape {
                    capacity: 2e6,
                    repl_cost: 0.0,
                    burst: RELAY_BURST,
                    ..three_brokers(vec![2, 2, 2])
                },
                3.0 / 4.5,
                vec![1.0, 0.25, 1.0],
            )
        },
        // The 2-core test machine's idle penalty (docs/fleet.md, part 4), and the load of the
        // librdkafka recovery test: every broker healthy, 3 MB/s in 10 KiB requests (about 100
        // a second per broker), an idle queue's wake-up up to 2 ms (a broker sent little
        // answered in 6-8 ms against a busy one's 4 on that machine). Does a latency-driven
        // rule pile the traffic onto one broker, as kroute does there?
        "idle-wake" => steady(
            base,
            Shape {
                wake: Wake {
                    max: 0.002,
                    tau: 0.01,
                },
                ..three_brokers(vec![12, 12, 12])
            },
            0.032,
            vec![1.0, 1.0, 1.0],
        ),
        _ => return None,
    })
}

/// 60 s of 10 KiB requests at `load`, the brokers at fixed capacity `factors`: the scenarios
/// that compare the model with a real bench.
fn steady(base: Scenario, shape: Shape, load: f64, factors: Vec<f64>) -> Scenario {
    Scenario {
        shape,
        load,
        seconds: 60.0,
        pattern: Pattern::Fixed(factors),
        mean_bytes: 10_240.0,
        ..base
    }
}

/// The scenarios of `--all` (and `--list`); `fleet-bench` and `idle-wake` are left out: they
/// check the model against real runs (docs/fleet.md, parts 3 and 4) rather than the rule against
/// the goals.
const ALL: &[&str] = &[
    "drop",
    "drop-aligned",
    "antagonist-1s",
    "antagonist-5s",
    "antagonist-20s",
    "hetero",
    "skew-22-10-4",
    "half-plain",
    "brokers30",
    "drop-slow-disk",
    "bind-all",
];

fn policy(name: &str, rule: Rule) -> Option<Policy> {
    Some(match name {
        "kroute" => Policy::Kroute(rule),
        "linear" => Policy::Kroute(Rule::Linear),
        "uniform" => Policy::Uniform,
        "kip794" => Policy::Kip794,
        "p2c" => Policy::TwoChoices,
        "oracle" => Policy::Oracle,
        _ => return None,
    })
}

/// One row of the report.
struct Row {
    policy: &'static str,
    trace: Trace,
}

fn main() {
    let args = Args::parse();
    if args.list {
        println!("{}", ALL.join("\n"));
        return;
    }
    if args.validate {
        print!("{}", validate());
        return;
    }
    let rule = match args.rule.as_deref() {
        Some([gain, max_step, pull, band, floor]) => Rule::Equalize(Equalize {
            gain: *gain,
            max_step: *max_step,
            pull: *pull,
            band: *band,
            floor: *floor,
        }),
        Some(_) => {
            eprintln!("--rule takes gain,max_step,pull,band,floor");
            std::process::exit(2);
        }
        None => Rule::DEFAULT,
    };
    let names: Vec<String> = if args.all {
        ALL.iter().map(|s| s.to_string()).collect()
    } else {
        args.scenarios.clone()
    };
    let lease = Duration::from_millis(args.lease_ms);
    let mut report = format!(
        "Command: `cargo run --release --example fleet_sim -- {}`\n\nRule: {rule:?}, lease {} ms\n",
        std::env::args().skip(1).collect::<Vec<_>>().join(" "),
        args.lease_ms
    );
    for name in &names {
        let Some(sc) = scenario(name) else {
            eprintln!("unknown scenario {name}; --list shows them");
            std::process::exit(2);
        };
        for &n in &args.sidecars {
            let mut rows = Vec::new();
            for p in &args.policies {
                let Some(policy) = policy(p, rule) else {
                    eprintln!("unknown policy {p}");
                    std::process::exit(2);
                };
                let trace = run::run(&sc, n, policy, args.seed, lease);
                eprintln!(
                    "{name} N={n} {}: {} requests in {:.1} s",
                    policy.name(),
                    trace.requests,
                    trace.wall.as_secs_f64()
                );
                if args.series {
                    for sec in 0..sc.seconds as usize {
                        let sh = trace.shares(sec as f64, sec as f64 + 1.0);
                        let line: Vec<String> = sh.iter().take(4).map(|x| pts(*x)).collect();
                        eprintln!("  t={sec} {}", line.join(" "));
                    }
                }
                rows.push(Row {
                    policy: policy.name(),
                    trace,
                });
            }
            let table = table(&sc, n, &rows);
            print!("{table}");
            report.push_str(&table);
        }
    }
    if let Some(out) = args.out
        && let Err(e) = std::fs::write(&out, &report)
    {
        eprintln!("cannot write {}: {e}", out.display());
        std::process::exit(1);
    }
}

fn pts(x: f64) -> String {
    format!("{:.1}", x * 100.0)
}

fn opt_s(x: Option<f64>) -> String {
    x.map_or("never".into(), |s| format!("{s:.1}"))
}

/// The report of one scenario and fleet size: a row per policy, and the goals for kroute.
fn table(sc: &Scenario, n: usize, rows: &[Row]) -> String {
    let watched = match &sc.pattern {
        Pattern::Drop { broker, .. } | Pattern::Square { broker, .. } => *broker,
        Pattern::DropMany { brokers, .. } => brokers[0],
        Pattern::Fixed(f) => (0..f.len())
            .min_by(|a, b| f[*a].total_cmp(&f[*b]))
            .unwrap_or(0),
    };
    let end = sc.seconds;
    let (at, until) = sc.pattern.step().unwrap_or((end, end));
    let mut s = format!(
        "\n### {} — N = {n}, {} brokers, load {:.0}%{}\n\n",
        sc.name,
        sc.shape.brokers(),
        sc.load * 100.0,
        if sc.plain > 0.0 {
            ", half the fleet plain (KIP-794)"
        } else {
            ""
        }
    );
    if sc.pattern.step().is_some() {
        s.push_str("| policy | broker share before / degraded / after (oracle) | 1 s p-p max | mean 1 s change | converge s | recover s | overshoot | p99 ms steady | p99 5 s after drop | p99 degraded | wall s |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    } else {
        s.push_str("| policy | broker share (oracle) | 1 s p-p max | mean 1 s change | p99 ms | wall s |\n|---|---|---|---|---|---|\n");
    }
    let goal_rows = goals(sc, rows, watched);
    for r in rows {
        let t = &r.trace;
        if sc.pattern.step().is_some() {
            let before = t.shares(10.0, at)[watched];
            let during = t.shares(at + 10.0, until)[watched];
            let after = t.shares(until + 10.0, end)[watched];
            let o = t.oracle_share(watched, at + 10.0, until);
            let step = t.step(watched, at, until, end);
            let change = t.mean_change(watched, at + 10.0, until);
            let _ = writeln!(
                s,
                "| {} | {} / {} / {} ({}) | {} | {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.1} |",
                r.policy,
                pts(before),
                pts(during),
                pts(after),
                pts(o),
                pts(step.peak_to_peak),
                pts(change),
                opt_s(step.converge),
                opt_s(step.recover),
                pts(step.overshoot),
                t.percentile(0.99, 10.0, at)
                    .max(t.percentile(0.99, at + 10.0, until)),
                t.percentile(0.99, at, at + 5.0),
                t.percentile(0.99, at, until),
                t.wall.as_secs_f64()
            );
        } else {
            let from = sc.pattern.steady_from();
            let share = t.shares(from, end)[watched];
            let o = t.oracle_mean(watched, from, end);
            let _ = writeln!(
                s,
                "| {} | {} ({}) | {} | {} | {:.2} | {:.1} |",
                r.policy,
                pts(share),
                pts(o),
                pts(t.peak_to_peak(from, end)),
                pts(t.mean_change(watched, from, end)),
                t.percentile(0.99, from, end),
                t.wall.as_secs_f64()
            );
        }
    }
    s.push_str(&goal_rows);
    s
}

fn mark(ok: bool) -> &'static str {
    if ok { "met" } else { "**missed**" }
}

/// The issue's goals for the kroute row of a drop scenario, against the oracle and KIP-794
/// rows of the same run (empty when any of the three is missing).
fn goals(sc: &Scenario, rows: &[Row], watched: usize) -> String {
    let Some((at, until)) = sc.pattern.step() else {
        return String::new();
    };
    let find = |name: &str| rows.iter().find(|r| r.policy == name).map(|r| &r.trace);
    let (Some(k), Some(o), Some(p)) = (find("kroute"), find("oracle"), find("kip-794")) else {
        return String::new();
    };
    let step = k.step(watched, at, until, sc.seconds);
    let steady = |t: &Trace| {
        t.percentile(0.99, 10.0, at)
            .max(t.percentile(0.99, at + 10.0, until))
    };
    let p99_steady = steady(k) / steady(o);
    let p99_change = k.percentile(0.99, at, at + 5.0) / o.percentile(0.99, at, at + 5.0);
    let p99_degraded = k.percentile(0.99, at, until) / p.percentile(0.99, at, until);
    format!(
        "\nGoals (kroute): converge to the oracle's share ±3 pts within 2 s and stay ±5: {} ({}); \
         1 s peak-to-peak <= 4 pts: {} ({}); recover to equal ±3 pts within 3 s: {} ({}); \
         overshoot <= 5 pts: {} ({}); p99 <= 1.25x oracle in steady state: {} ({:.2}x); \
         <= 2x for 5 s after the drop: {} ({:.2}x); <= 0.5x KIP-794 while degraded: {} ({:.2}x)\n",
        mark(step.converge.is_some_and(|c| c <= 2.0)),
        opt_s(step.converge),
        mark(step.peak_to_peak <= 0.04),
        pts(step.peak_to_peak),
        mark(step.recover.is_some_and(|r| r <= 3.0)),
        opt_s(step.recover),
        mark(step.overshoot <= 0.05),
        pts(step.overshoot),
        mark(p99_steady <= 1.25),
        p99_steady,
        mark(p99_change <= 2.0),
        p99_change,
        mark(p99_degraded <= 0.5),
        p99_degraded,
    )
}

/// The queue model against M/M/1: one broker, no replication, no network, exponential sizes.
fn validate() -> String {
    let mut s =
        String::from("| load | mean ms (sim / M/M/1) | p99 ms (sim / M/M/1) |\n|---|---|---|\n");
    for rho in [0.5, 0.8, 0.9] {
        let sc = Scenario {
            name: "mm1".into(),
            shape: Shape {
                leaders: vec![1],
                capacity: 10e6,
                replication: 1,
                repl_cost: 0.0,
                net: 0.0,
                fetch_delay: 0.0,
                overhead: 0.0,
                slow_replicas: false,
                wake: Wake::default(),
                burst: 0.0,
            },
            load: rho,
            seconds: 200.0,
            pattern: Pattern::Fixed(vec![1.0]),
            plain: 0.0,
            phases: Phases::Random,
            mean_bytes: 10_000.0,
            fixed_size: false,
        };
        let t = run::run(&sc, 10, Policy::Uniform, 7, Duration::from_millis(250));
        let mu = sc.shape.capacity / sc.mean_bytes;
        let lambda = rho * mu;
        let mean = 1000.0 / (mu - lambda);
        let p99 = 1000.0 * (100.0f64).ln() / (mu - lambda);
        let sim_mean = t.percentile(0.5, 10.0, 200.0) / (2.0f64).ln() * 1.0;
        let _ = writeln!(
            s,
            "| {rho} | {:.2} / {mean:.2} (from the median) | {:.2} / {p99:.2} |",
            sim_mean,
            t.percentile(0.99, 10.0, 200.0)
        );
    }
    s
}
