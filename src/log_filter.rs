//! Which log lines are written: the directives in `RUST_LOG`.

use tracing_subscriber::filter::{LevelFilter, Targets};

/// `RUST_LOG` read as comma-separated `target=level` directives plus an optional bare default
/// level (e.g. `info,kroute::route=debug`); `info` when it is unset or cannot be read.
///
/// tracing-subscriber's `Targets`, not its `EnvFilter`: kroute's logs need no span or field
/// filters, and `EnvFilter` brought a regex engine that took 17 s of the 270 s a first build
/// took on 2 cores (docs/benchmarks.md, "First run").
pub fn from_env() -> Targets {
    std::env::var("RUST_LOG")
        .ok()
        .and_then(|directives| directives.parse().ok())
        .unwrap_or_else(|| Targets::new().with_default(LevelFilter::INFO))
}

#[cfg(test)]
mod tests {
    use tracing::Level;

    #[test]
    fn directives_set_the_default_and_per_target_levels() {
        let filter: super::Targets = "warn,kroute::route=debug".parse().unwrap();
        assert!(filter.would_enable("kroute::route::produce", &Level::DEBUG));
        assert!(!filter.would_enable("kroute::route", &Level::TRACE));
        assert!(filter.would_enable("kroute::proxy", &Level::WARN));
        assert!(!filter.would_enable("kroute::proxy", &Level::INFO));
    }
}
