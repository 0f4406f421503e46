//! The `kroute` command: run the proxy, or check its configuration.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use tokio::net::TcpListener;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tracing::info;

use kroute::config::{Config, ConfigFile, Effective, LogFormat, overrides};
use kroute::metrics::{LATENCY_BUCKETS, Metrics, UPSTREAM_LATENCY};
use kroute::proxy::{Proxy, refresh_metadata};
use kroute::{admin, listener};

/// jemalloc, not glibc's malloc: after client connections close, glibc kept their buffers'
/// memory, and each new round of as many connections added 56-86% of the first to kroute's RSS
/// (docs/hardening.md, "Load"); jemalloc reuses it. Only Rust's allocations: the C codecs keep
/// the system malloc.
#[cfg(feature = "jemalloc")]
mod allocator {
    #[global_allocator]
    static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

    /// jemalloc's options, read at its start (the `_RJEM_MALLOC_CONF` environment variable is
    /// read after them and wins). Freed pages go back to the OS after 1 s instead of 10: with
    /// the default, rounds of connections opened and closed peaked up to 34% above the first
    /// round's RSS; with 1 s, within 12% over five rounds (docs/hardening.md, "Load").
    #[unsafe(export_name = "_rjem_malloc_conf")]
    static OPTIONS: Options = Options(c"dirty_decay_ms:1000".as_ptr());

    /// A C string pointer jemalloc reads once, before `main`; a thin pointer, as C's
    /// `const char *malloc_conf` is.
    #[repr(transparent)]
    struct Options(*const std::ffi::c_char);

    // SAFETY: the pointer is to a static, immutable C string literal.
    unsafe impl Sync for Options {}
}

/// Read if `--config` and `KROUTE_CONFIG` are not given; kroute runs without it if it is absent.
const DEFAULT_CONFIG: &str = "proxy.toml";

#[derive(Parser)]
#[command(
    version,
    about = "Kafka wire-protocol proxy",
    after_help = "Each flag but --config overrides its key of the configuration file; each \
                  can also be set with the environment variable shown. Precedence: flag, \
                  environment variable, file, default."
)]
struct Cli {
    /// Path to the configuration file; it must exist. Without it, proxy.toml in the working
    /// directory is read if it is there.
    #[arg(long, global = true, env = "KROUTE_CONFIG", value_name = "PATH")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Print the effective configuration (file, flags, environment variables and defaults;
    /// secrets redacted) as TOML and exit 0, or exit 2 naming the wrong key.
    CheckConfig,
    /// Print a running kroute's skew report (GET /v1/skew) as tables.
    Skew {
        /// The running kroute's admin endpoint (default: admin.listen of the configuration).
        #[arg(long, value_name = "HOST:PORT")]
        admin: Option<String>,
        /// Print the JSON as the endpoint answers it.
        #[arg(long)]
        json: bool,
    },
    /// Ask a running kroute for a plan that evens out the measured load of TOPICS (GET
    /// /v1/plan), print its summary, and write the files Kafka's tools apply. kroute never
    /// applies it itself.
    Plan {
        /// The running kroute's admin endpoint (default: admin.listen of the configuration).
        #[arg(long, value_name = "HOST:PORT")]
        admin: Option<String>,
        /// Topics to plan for, comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        topics: Vec<String>,
        /// Replica moves stop once the most loaded broker is within this fraction of the mean
        /// (leader changes, which copy nothing, go on to half of it).
        #[arg(long, default_value_t = kroute::skew::http::DEFAULT_TOLERANCE)]
        tolerance: f64,
        /// Where to write kafka-reassign-partitions' --reassignment-json-file.
        #[arg(long, value_name = "FILE")]
        reassignment_out: Option<PathBuf>,
        /// Where to write kafka-leader-election's --path-to-json-file.
        #[arg(long, value_name = "FILE")]
        election_out: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let matches = Cli::command().args(overrides::args()).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // `kroute skew|plan --admin` only talk to a running kroute: no configuration needed.
    if let Some(
        command @ (Command::Skew { admin: Some(_), .. } | Command::Plan { admin: Some(_), .. }),
    ) = cli.command
    {
        return ask_admin(command, "");
    }
    let file = match cli.config {
        Some(path) => ConfigFile::Given(path),
        None => ConfigFile::Default(PathBuf::from(DEFAULT_CONFIG)),
    };
    let settings = overrides::from_matches(&matches);
    let effective = match Config::load_with(&file, &settings, kroute::security::check_files) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("kroute: invalid configuration: {e}");
            if matches!(
                cli.command,
                Some(Command::Skew { .. } | Command::Plan { .. })
            ) {
                eprintln!("kroute: (--admin HOST:PORT names the running kroute without one)");
            }
            return ExitCode::from(2);
        }
    };
    match cli.command {
        Some(Command::CheckConfig) => {
            return match effective.to_redacted_toml() {
                Ok(text) => {
                    print!("{text}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("kroute: cannot print the configuration: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Some(command) => return ask_admin(command, &effective.config.admin.listen),
        None => {}
    }
    init_logging(effective.config.log.format);
    log_origin(&effective);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kroute: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run(effective.config));
    // Tasks still running (broker connections, timers) end here; nothing waits on them.
    runtime.shutdown_timeout(Duration::from_millis(500));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("kroute stopped: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `kroute skew` and `kroute plan`: ask a running kroute's admin endpoint.
fn ask_admin(command: Command, configured: &str) -> ExitCode {
    use kroute::skew::cli;
    // A wildcard listen address is reached on loopback.
    let local = configured
        .replace("0.0.0.0:", "127.0.0.1:")
        .replace("[::]:", "[::1]:");
    let result = match command {
        Command::Skew { admin, json } => {
            let admin = admin.unwrap_or(local);
            cli::get(&admin, "/v1/skew").map(|report| {
                if json {
                    format!("{report:#}\n")
                } else {
                    cli::skew_tables(&report)
                }
            })
        }
        Command::Plan {
            admin,
            topics,
            tolerance,
            reassignment_out,
            election_out,
        } => {
            let admin = admin.unwrap_or(local);
            let path = format!("/v1/plan?topics={}&tolerance={tolerance}", topics.join(","));
            cli::get(&admin, &path).and_then(|answer| {
                let files = cli::write_files(
                    &answer,
                    reassignment_out.as_deref(),
                    election_out.as_deref(),
                )?;
                Ok(cli::plan_summary(&answer) + &files)
            })
        }
        Command::CheckConfig => return ExitCode::FAILURE,
    };
    match result {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("kroute: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Logs to stderr, filtered by `RUST_LOG` (default `info`): text lines, or one JSON object
/// per line (the event's fields at the top level).
fn init_logging(format: LogFormat) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let logs = tracing_subscriber::registry().with(kroute::log_filter::from_env());
    let lines = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    match format {
        LogFormat::Text => logs
            .with(lines.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())))
            .init(),
        LogFormat::Json => logs
            .with(
                lines
                    .json()
                    .flatten_event(true)
                    .with_current_span(false)
                    .with_span_list(false),
            )
            .init(),
    }
}

/// Which file and which overrides the configuration came from (names only: values of
/// overrides are addresses and numbers, but a log line never needs them).
fn log_origin(effective: &Effective) {
    let file = match &effective.file {
        Some(path) => path.display().to_string(),
        None => format!("none ({DEFAULT_CONFIG} absent: defaults)"),
    };
    let overridden: Vec<String> = effective
        .overrides
        .iter()
        .map(|o| format!("{} from {}", o.setting.key, o.source()))
        .collect();
    info!(
        file,
        overrides = overridden.join(", "),
        "configuration loaded"
    );
}

async fn run(config: Config) -> anyhow::Result<()> {
    // First: from now on SIGTERM and SIGINT drain instead of killing.
    let mut signals = Signals::new().context("cannot handle SIGTERM and SIGINT")?;
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(UPSTREAM_LATENCY.into()), LATENCY_BUCKETS)?
        .install_recorder()
        .context("cannot install the metrics recorder")?;
    kroute::metrics::describe();
    let admin_listener = TcpListener::bind(&config.admin.listen)
        .await
        .with_context(|| format!("cannot listen on {} (admin.listen)", config.admin.listen))?;
    info!(address = %admin_listener.local_addr()?, "admin endpoint ready");

    kroute::open_files::raise(config.limits.max_connections);
    let proxy = Proxy::new(config, Metrics::new()).map_err(|e| anyhow::anyhow!("security: {e}"))?;
    // The skew sampler's last samples, read by the admin endpoint.
    let samples = Arc::new(kroute::skew::Samples::new(proxy.config.skew.rate_window_ms));
    tokio::spawn(admin::serve(
        admin_listener,
        handle,
        proxy.clone(),
        samples.clone(),
    ));
    tokio::spawn(refresh_metadata(proxy.clone()));
    tokio::spawn(kroute::route::recovery::read_held_epochs(proxy.clone()));
    tokio::spawn(kroute::route::producers::sweep_forever(proxy.clone()));
    if let Some(lag) = &proxy.lag {
        let metrics = &proxy.metrics.lag;
        tokio::spawn(kroute::lag::collect::run(
            proxy.clone(),
            lag.clone(),
            metrics.clone(),
        ));
        tokio::spawn(kroute::lag::tail::run(
            proxy.clone(),
            lag.clone(),
            metrics.clone(),
        ));
    }
    tokio::spawn(kroute::skew::sample::run(proxy.clone(), samples));
    let listening = tokio::spawn(listener::run(proxy.clone()));

    let signal = tokio::select! {
        result = listening => return result.context("listener task failed")?,
        signal = signals.recv() => signal,
    };
    // A second signal cuts what is still draining.
    let hurry = async {
        signals.recv().await;
    };
    proxy
        .shutdown
        .drain(signal, proxy.config.drain_timeout(), hurry)
        .await;
    Ok(())
}

/// SIGTERM (Kubernetes, docker stop) and SIGINT (Ctrl-C).
struct Signals {
    term: Signal,
    int: Signal,
}

impl Signals {
    fn new() -> std::io::Result<Self> {
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Waits for the next one and names it.
    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}
