//! The `kroute` command: run the proxy, or check a configuration file.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use tokio::net::TcpListener;
use tracing::info;

use kroute::config::Config;
use kroute::metrics::{LATENCY_BUCKETS, Metrics, UPSTREAM_LATENCY};
use kroute::proxy::{Proxy, refresh_metadata};
use kroute::{admin, listener};

#[derive(Parser)]
#[command(version, about = "Kafka wire-protocol proxy")]
struct Cli {
    /// Path to proxy.toml.
    #[arg(long, global = true, default_value = "proxy.toml")]
    config: PathBuf,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Validate a configuration file and exit (non-zero, naming the key, if it is wrong).
    CheckConfig,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match Config::load(&cli.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("kroute: invalid configuration: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(Command::CheckConfig) = cli.command {
        println!("{}: ok", cli.config.display());
        return ExitCode::SUCCESS;
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kroute: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("kroute stopped: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(config: Config) -> anyhow::Result<()> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(UPSTREAM_LATENCY.into()), LATENCY_BUCKETS)?
        .install_recorder()
        .context("cannot install the metrics recorder")?;
    let admin_listener = TcpListener::bind(&config.admin.listen)
        .await
        .with_context(|| format!("cannot listen on {} (admin.listen)", config.admin.listen))?;
    info!(address = %admin_listener.local_addr()?, "admin endpoint ready");

    let proxy = Proxy::new(config, Metrics::new()).map_err(|e| anyhow::anyhow!("security: {e}"))?;
    tokio::spawn(admin::serve(admin_listener, handle, proxy.clone()));
    tokio::spawn(refresh_metadata(proxy.clone()));
    tokio::spawn(kroute::route::recovery::read_held_epochs(proxy.clone()));
    tokio::spawn(kroute::route::producers::sweep_forever(proxy.clone()));
    let listening = tokio::spawn(listener::run(proxy));

    tokio::select! {
        result = listening => result.context("listener task failed")?,
        _ = shutdown_signal() => {
            info!("shutting down");
            Ok(())
        }
    }
}

async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
