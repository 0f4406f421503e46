//! `proxy.toml`: what kroute listens on, which cluster it fronts, and its limits.
//!
//! Every section and key is optional except `upstream.bootstrap_servers`; unknown keys are
//! errors, so a typo never silently falls back to a default. [`Config::load_with`] returns an
//! error that names the offending key (or the flag that set it) and says what is wrong with it.

pub mod lag;
pub mod overrides;
pub mod security;
mod show;
pub mod skew;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use overrides::{Override, SETTINGS, Setting};
pub use show::REDACTED;

pub use security::{
    ClientAuth, Mechanism, OAuthConfig, SaslConfig, SaslMode, TlsConfig, UpstreamTlsConfig,
};

/// The whole configuration file.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub listen: ListenConfig,
    /// Required in practice (its bootstrap servers), but it may come from an override.
    #[serde(default)]
    pub upstream: UpstreamConfig,
    #[serde(default)]
    pub limits: LimitsConfig,
    #[serde(default)]
    pub admin: AdminConfig,
    #[serde(default)]
    pub routing: RoutingConfig,
    #[serde(default)]
    pub log: LogConfig,
    #[serde(default)]
    pub shutdown: ShutdownConfig,
    /// Consumer lag, judged as Burrow judges it ([`crate::lag`]).
    #[serde(default)]
    pub lag: lag::LagConfig,
    /// The skew report and plan ([`crate::skew`]).
    #[serde(default)]
    pub skew: skew::SkewConfig,
}

/// How kroute logs (the filter is `RUST_LOG`'s).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// `text` (human-readable lines) or `json` (one JSON object per line, for log collectors).
    #[serde(default)]
    pub format: LogFormat,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// What happens on SIGTERM or SIGINT: kroute stops accepting, lets the requests in flight
/// finish and closes every client connection between requests.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ShutdownConfig {
    /// How long requests in flight may take to finish; connections still owed an answer then
    /// are cut. Keep it under the orchestrator's grace period (Kubernetes: 30 s by default).
    #[serde(default = "default_drain_timeout_ms")]
    pub drain_timeout_ms: u64,
}

fn default_drain_timeout_ms() -> u64 {
    10_000
}

impl Default for ShutdownConfig {
    fn default() -> Self {
        Self {
            drain_timeout_ms: default_drain_timeout_ms(),
        }
    }
}

/// How keyless produce batches are re-partitioned.
///
/// A keyless record sent to an explicit partition looks exactly like a sticky-partitioned one
/// on the wire, so routing is opt-in per topic: by default no topic is routed.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RoutingConfig {
    #[serde(default = "default_strategy")]
    pub strategy: Strategy,
    /// Topics whose keyless batches may move (globs: `*` any run, `?` one character).
    #[serde(default)]
    pub include: Vec<String>,
    /// Topics never routed, even if included.
    #[serde(default = "default_exclude")]
    pub exclude: Vec<String>,
    /// How often broker weights are recomputed from the scores.
    #[serde(default = "default_lease_ms")]
    pub lease_ms: u64,
    /// Time constant with which a broker's latency gauge follows faster answers (the cost that
    /// routes is read from the bytes in flight instead: `balance::scores`).
    #[serde(default = "default_score_decay_ms")]
    pub score_decay_ms: u64,
    /// A broker without an answer for this long gets a neutral score.
    #[serde(default = "default_score_stale_ms")]
    pub score_stale_ms: u64,
    /// Whether batches of idempotent producers may move: kroute then renumbers every batch of
    /// the idempotent producers it saw start (InitProducerId) in routed topics.
    #[serde(default = "default_true")]
    pub idempotent: bool,
    /// How long kroute remembers an idle idempotent producer's sequence numbers. Must not be
    /// shorter than the brokers' `producer.id.expiration.ms` (default 1 day), so that a
    /// producer kroute forgot is forgotten by the brokers too.
    #[serde(default = "default_producer_expiry_ms")]
    pub producer_expiry_ms: u64,
    /// Most idempotent producers tracked at once; producers beyond it are not renumbered,
    /// their batches stay where the client put them.
    #[serde(default = "default_max_producers")]
    pub max_producers: usize,
    /// How many unresolved batches an idempotent producer's partition (lane) may hold before
    /// its next batches prefer another broker's idle partitions, even a slower broker's. A
    /// lane moves one batch per broker round trip; 5 (the broker's deduplication window)
    /// turns spilling off.
    #[serde(default = "default_lane_spill_depth")]
    pub lane_spill_depth: u32,
    /// Largest batch kroute builds by joining an idempotent producer's waiting batches for one
    /// partition (bytes; 0: never join). Keep it under the topics' `max.message.bytes`.
    #[serde(default = "default_join_max_bytes")]
    pub join_max_bytes: u32,
    /// Whether compressed batches are joined too (decompressed, joined, compressed again with
    /// their codec): bench/join.sh measured what it gains and costs.
    #[serde(default = "default_join_compressed")]
    pub join_compressed: bool,
}

/// The routing strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// Pure pass-through: batches stay where the client put them.
    Off,
    /// Astraea's rule: weights `max_cost - cost + shift`, smooth weighted round-robin.
    StrictCost,
}

fn default_strategy() -> Strategy {
    Strategy::StrictCost
}
fn default_exclude() -> Vec<String> {
    vec!["__*".into()]
}
fn default_lease_ms() -> u64 {
    250
}
fn default_score_decay_ms() -> u64 {
    300
}
fn default_score_stale_ms() -> u64 {
    3_000
}
fn default_true() -> bool {
    true
}
fn default_producer_expiry_ms() -> u64 {
    25 * 3_600_000
}
fn default_max_producers() -> usize {
    10_000
}
fn default_lane_spill_depth() -> u32 {
    2
}
fn default_join_max_bytes() -> u32 {
    256 * 1024
}
fn default_join_compressed() -> bool {
    true
}

impl Default for RoutingConfig {
    fn default() -> Self {
        Self {
            strategy: default_strategy(),
            include: Vec::new(),
            exclude: default_exclude(),
            lease_ms: default_lease_ms(),
            score_decay_ms: default_score_decay_ms(),
            score_stale_ms: default_score_stale_ms(),
            idempotent: true,
            producer_expiry_ms: default_producer_expiry_ms(),
            max_producers: default_max_producers(),
            lane_spill_depth: default_lane_spill_depth(),
            join_max_bytes: default_join_max_bytes(),
            join_compressed: default_join_compressed(),
        }
    }
}

impl RoutingConfig {
    /// Whether idempotent producers' batches may be renumbered and moved at all.
    pub fn routes_idempotent(&self) -> bool {
        self.idempotent && self.strategy != Strategy::Off && !self.include.is_empty()
    }

    /// Whether keyless batches of `topic` may move.
    pub fn routes_topic(&self, topic: &str) -> bool {
        self.strategy != Strategy::Off
            && self.include.iter().any(|g| glob_match(g, topic))
            && !self.exclude.iter().any(|g| glob_match(g, topic))
    }
}

/// Matches `name` against a glob of `*` (any run of characters) and `?` (one character).
///
/// Runs per topic of every routed Produce request, so it works on bytes without allocating
/// (Kafka topic names are ASCII).
pub fn glob_match(glob: &str, name: &str) -> bool {
    let (g, n) = (glob.as_bytes(), name.as_bytes());
    let (mut gi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if gi < g.len() && (g[gi] == b'?' || g[gi] == n[ni]) {
            gi += 1;
            ni += 1;
        } else if gi < g.len() && g[gi] == b'*' {
            star = Some((gi, ni));
            gi += 1;
        } else if let Some((sg, sn)) = star {
            gi = sg + 1;
            ni = sn + 1;
            star = Some((sg, sn + 1));
        } else {
            return false;
        }
    }
    g[gi..].iter().all(|c| *c == b'*')
}

/// Where clients reach kroute.
///
/// The bootstrap port is what clients put in `bootstrap.servers`. Every broker of the cluster gets
/// its own port, `broker_port_base + node_id`, so a node id always maps to the same kroute
/// address and clients can cache it across kroute restarts.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ListenConfig {
    /// Interface the listeners bind to.
    #[serde(default = "default_bind_host")]
    pub bind_host: String,
    /// Host written into every response that carries a broker address (what clients dial).
    #[serde(default = "default_advertised_host")]
    pub advertised_host: String,
    #[serde(default = "default_bootstrap_port")]
    pub bootstrap_port: u16,
    #[serde(default = "default_broker_port_base")]
    pub broker_port_base: u16,
    /// TLS for clients; absent: plaintext.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
}

/// The real cluster behind kroute.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// `host:port` of one or more brokers, used to learn the cluster.
    #[serde(default)]
    pub bootstrap_servers: Vec<String>,
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// How long a broker may take to answer a request once it could start on it (its own wait
    /// on top for requests that park, e.g. a Fetch's max_wait_ms); 0: no limit.
    #[serde(default = "default_request_timeout_ms")]
    pub request_timeout_ms: u64,
    /// How often kroute refreshes its own view of the brokers.
    #[serde(default = "default_metadata_refresh_ms")]
    pub metadata_refresh_ms: u64,
    /// TLS on every connection to a broker; absent: plaintext.
    #[serde(default)]
    pub tls: Option<UpstreamTlsConfig>,
    /// SASL toward the brokers; absent: kroute never authenticates (clients may, passed through).
    #[serde(default)]
    pub sasl: Option<SaslConfig>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// Largest frame accepted from a client or a broker (Kafka's socket.request.max.bytes).
    #[serde(default = "default_max_frame_bytes")]
    pub max_frame_bytes: usize,
    /// Requests one client connection may have in flight before kroute stops reading from it.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight_per_connection: usize,
    /// Client connections open at once (0: no limit); more are accepted and closed at once.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Client connections open at once from one IP address (0: no limit), as Kafka's
    /// `max.connections.per.ip`.
    #[serde(default)]
    pub max_connections_per_ip: usize,
    /// Bytes one client connection may hold (requests read and not yet answered, replies not
    /// yet written) before kroute stops reading from it ([`crate::client::limits`]).
    #[serde(default = "default_max_buffered_bytes_per_connection")]
    pub max_buffered_bytes_per_connection: usize,
    /// Bytes all client connections together may hold before kroute stops reading from those
    /// that hold any.
    #[serde(default = "default_max_buffered_bytes")]
    pub max_buffered_bytes: usize,
    /// Longest time from a request's first byte to its last (0: no limit); a client that
    /// starts a frame and stalls (slowloris) is closed then.
    #[serde(default = "default_partial_frame_timeout_ms")]
    pub partial_frame_timeout_ms: u64,
    /// A client connection with no bytes moving either way and no request waiting for a
    /// broker is closed after this long (0: never), as Kafka's `connections.max.idle.ms`.
    #[serde(default = "default_idle_timeout_ms")]
    pub idle_timeout_ms: u64,
}

impl LimitsConfig {
    /// The client-side limits' own checks: (key, problem).
    fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.max_buffered_bytes_per_connection == 0 {
            return Err((
                "limits.max_buffered_bytes_per_connection",
                "must be above 0".into(),
            ));
        }
        if self.max_buffered_bytes < self.max_buffered_bytes_per_connection {
            return Err((
                "limits.max_buffered_bytes",
                "must be at least limits.max_buffered_bytes_per_connection".into(),
            ));
        }
        for (key, ms) in [
            (
                "limits.partial_frame_timeout_ms",
                self.partial_frame_timeout_ms,
            ),
            ("limits.idle_timeout_ms", self.idle_timeout_ms),
        ] {
            if (1..100).contains(&ms) {
                return Err((key, "must be 0 (no limit) or at least 100".into()));
            }
        }
        Ok(())
    }

    /// `partial_frame_timeout_ms`; None: off.
    pub fn partial_frame_timeout(&self) -> Option<Duration> {
        (self.partial_frame_timeout_ms > 0)
            .then(|| Duration::from_millis(self.partial_frame_timeout_ms))
    }

    /// `idle_timeout_ms`; None: off.
    pub fn idle_timeout(&self) -> Option<Duration> {
        (self.idle_timeout_ms > 0).then(|| Duration::from_millis(self.idle_timeout_ms))
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// `host:port` of the HTTP endpoint serving /metrics, /health and /ready.
    #[serde(default = "default_admin_listen")]
    pub listen: String,
}

fn default_bind_host() -> String {
    "127.0.0.1".into()
}
fn default_advertised_host() -> String {
    "127.0.0.1".into()
}
fn default_bootstrap_port() -> u16 {
    9092
}
fn default_broker_port_base() -> u16 {
    9100
}
fn default_connect_timeout_ms() -> u64 {
    5_000
}
fn default_request_timeout_ms() -> u64 {
    60_000
}
fn default_metadata_refresh_ms() -> u64 {
    10_000
}
fn default_max_frame_bytes() -> usize {
    100 * 1024 * 1024
}
fn default_max_in_flight() -> usize {
    1024
}
/// Kafka has no total limit (`max.connections` is unbounded by default). Each client connection
/// costs kroute two file descriptors (the client's and its broker's), so 20000 leaves room under
/// the common 65536 descriptor limit for side connections and kroute's own, while being twice
/// what the load goal (10000 mostly idle connections plus 1000 producers) needs.
fn default_max_connections() -> usize {
    20_000
}
/// 32 MiB: 32 produce requests of Kafka's default 1 MiB `max.request.size` in flight (a Java
/// producer has at most 5); a larger fetch answer (`fetch.max.bytes` is 50 MiB) passes, one
/// at a time.
fn default_max_buffered_bytes_per_connection() -> usize {
    32 * 1024 * 1024
}
/// 1 GiB: a limit against running out of memory rather than a tuning knob; set it to about
/// half the memory kroute may use (e.g. a container's limit).
fn default_max_buffered_bytes() -> usize {
    1024 * 1024 * 1024
}
/// 30 s: a 100 MiB request (`max_frame_bytes`) needs 3.5 MB/s to arrive in time; Kafka's
/// clients send whole requests at once.
fn default_partial_frame_timeout_ms() -> u64 {
    30_000
}
/// Kafka's `connections.max.idle.ms` (10 minutes); its clients close idle connections after 9.
fn default_idle_timeout_ms() -> u64 {
    600_000
}
fn default_admin_listen() -> String {
    "127.0.0.1:9644".into()
}

impl Default for ListenConfig {
    fn default() -> Self {
        Self {
            bind_host: default_bind_host(),
            advertised_host: default_advertised_host(),
            bootstrap_port: default_bootstrap_port(),
            broker_port_base: default_broker_port_base(),
            tls: None,
        }
    }
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        Self {
            bootstrap_servers: Vec::new(),
            connect_timeout_ms: default_connect_timeout_ms(),
            request_timeout_ms: default_request_timeout_ms(),
            metadata_refresh_ms: default_metadata_refresh_ms(),
            tls: None,
            sasl: None,
        }
    }
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_frame_bytes: default_max_frame_bytes(),
            max_in_flight_per_connection: default_max_in_flight(),
            max_connections: default_max_connections(),
            max_connections_per_ip: 0,
            max_buffered_bytes_per_connection: default_max_buffered_bytes_per_connection(),
            max_buffered_bytes: default_max_buffered_bytes(),
            partial_frame_timeout_ms: default_partial_frame_timeout_ms(),
            idle_timeout_ms: default_idle_timeout_ms(),
        }
    }
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            listen: default_admin_listen(),
        }
    }
}

/// A configuration problem, phrased for the person editing the file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("{path}: key `{key}`: {problem}")]
    Invalid {
        path: String,
        key: &'static str,
        problem: String,
    },
    /// A flag or environment variable ([`Override`]) with a bad value.
    #[error("{source_name}: {problem} (key `{key}`)")]
    Override {
        source_name: String,
        key: &'static str,
        problem: String,
    },
}

/// Where the configuration file is.
#[derive(Debug, Clone)]
pub enum ConfigFile {
    /// Named with `--config` or `KROUTE_CONFIG`: it must exist.
    Given(PathBuf),
    /// The default path: if there is no file there, kroute runs on the defaults and the
    /// overrides (which must then name the bootstrap servers).
    Default(PathBuf),
}

/// The configuration kroute runs with, and where it came from.
#[derive(Debug, Clone)]
pub struct Effective {
    pub config: Config,
    /// The file read; None when the default file is absent.
    pub file: Option<PathBuf>,
    /// The flags and environment variables applied over it.
    pub overrides: Vec<Override>,
}

impl Config {
    /// Reads the file (if any), puts the overrides over it and validates the result, then runs
    /// `check_files` over it (kroute passes [`crate::security::check_files`]: the TLS files
    /// load, so a bad one is named before kroute starts). An invalid value an override set is
    /// reported naming the flag or variable.
    pub fn load_with(
        file: &ConfigFile,
        overrides: &[Override],
        check_files: impl FnOnce(&Config) -> Result<(), security::Invalid>,
    ) -> Result<Effective, ConfigError> {
        let (path, must_exist) = match file {
            ConfigFile::Given(p) => (p, true),
            ConfigFile::Default(p) => (p, false),
        };
        let shown = path.display().to_string();
        let (mut config, origin, read) = match std::fs::read_to_string(path) {
            Ok(text) => (Self::unvalidated(&text, &shown)?, shown, Some(path.clone())),
            Err(e) if !must_exist && e.kind() == std::io::ErrorKind::NotFound => (
                Self::unvalidated("", "defaults")?,
                format!("defaults (no {shown})"),
                None,
            ),
            Err(source) => {
                return Err(ConfigError::Read {
                    path: shown,
                    source,
                });
            }
        };
        for o in overrides {
            o.apply(&mut config)?;
        }
        let checked = config.validate(&origin).and_then(|()| {
            check_files(&config).map_err(|(key, problem)| ConfigError::Invalid {
                path: origin.clone(),
                key,
                problem,
            })
        });
        checked.map_err(|e| match e {
            ConfigError::Invalid { key, problem, .. }
                if let Some(o) = overrides.iter().rev().find(|o| o.setting.key == key) =>
            {
                ConfigError::Override {
                    source_name: o.source(),
                    key,
                    problem,
                }
            }
            e => e,
        })?;
        Ok(Effective {
            config,
            file: read,
            overrides: overrides.to_vec(),
        })
    }

    /// Parses and validates config text; `origin` names it in errors. The files it names are not
    /// read (the TLS ones are, by [`Config::load_with`]).
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let config = Self::unvalidated(text, origin)?;
        config.validate(origin)?;
        Ok(config)
    }

    fn unvalidated(text: &str, origin: &str) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: origin.to_string(),
            // toml's message already names the key, the line and what was expected.
            message: e.to_string().trim_end().to_string(),
        })
    }

    fn validate(&self, origin: &str) -> Result<(), ConfigError> {
        let invalid = |key: &'static str, problem: String| ConfigError::Invalid {
            path: origin.to_string(),
            key,
            problem,
        };
        security::validate(
            self.listen.tls.as_ref(),
            self.upstream.tls.as_ref(),
            self.upstream.sasl.as_ref(),
        )
        .map_err(|(key, problem)| invalid(key, problem))?;
        self.lag
            .validate()
            .map_err(|(key, problem)| invalid(key, problem))?;
        self.skew
            .validate()
            .map_err(|(key, problem)| invalid(key, problem))?;
        let passthrough_only = self.upstream.sasl.as_ref().is_some_and(|s| {
            s.mode == crate::config::SaslMode::Passthrough && s.mechanism.is_none()
        });
        if self.lag.enabled && passthrough_only {
            return Err(invalid(
                "lag.enabled",
                "lag polls the cluster over kroute's own connections, which need kroute's credentials: set upstream.sasl.mechanism and its credentials (passthrough mode keeps clients' own logins)".into(),
            ));
        }
        if self.upstream.bootstrap_servers.is_empty() {
            return Err(invalid(
                "upstream.bootstrap_servers",
                "needs at least one host:port (or --bootstrap-servers / KROUTE_BOOTSTRAP_SERVERS)"
                    .into(),
            ));
        }
        for server in &self.upstream.bootstrap_servers {
            if split_host_port(server).is_none() {
                return Err(invalid(
                    "upstream.bootstrap_servers",
                    format!("`{server}` is not host:port"),
                ));
            }
        }
        if self.listen.advertised_host.trim().is_empty() {
            return Err(invalid(
                "listen.advertised_host",
                "must not be empty".into(),
            ));
        }
        if self.listen.bind_host.trim().is_empty() {
            return Err(invalid("listen.bind_host", "must not be empty".into()));
        }
        if self.listen.broker_port_base == 0 {
            return Err(invalid(
                "listen.broker_port_base",
                "must be a port number above 0".into(),
            ));
        }
        if self.upstream.connect_timeout_ms == 0 {
            return Err(invalid(
                "upstream.connect_timeout_ms",
                "must be above 0".into(),
            ));
        }
        if (1..100).contains(&self.upstream.request_timeout_ms) {
            return Err(invalid(
                "upstream.request_timeout_ms",
                "must be 0 (no limit) or at least 100".into(),
            ));
        }
        if self.upstream.metadata_refresh_ms < 100 {
            return Err(invalid(
                "upstream.metadata_refresh_ms",
                "must be at least 100".into(),
            ));
        }
        if self.limits.max_frame_bytes < 1024 || self.limits.max_frame_bytes > i32::MAX as usize {
            return Err(invalid(
                "limits.max_frame_bytes",
                format!("must be between 1024 and {}", i32::MAX),
            ));
        }
        if !(1..=1_000_000).contains(&self.limits.max_in_flight_per_connection) {
            return Err(invalid(
                "limits.max_in_flight_per_connection",
                "must be between 1 and 1000000".into(),
            ));
        }
        self.limits
            .validate()
            .map_err(|(key, problem)| invalid(key, problem))?;
        for (key, globs) in [
            ("routing.include", &self.routing.include),
            ("routing.exclude", &self.routing.exclude),
        ] {
            if globs.iter().any(|g| g.is_empty()) {
                return Err(invalid(key, "an empty pattern matches no topic".into()));
            }
        }
        for (key, value) in [
            ("routing.lease_ms", self.routing.lease_ms),
            ("routing.score_decay_ms", self.routing.score_decay_ms),
            ("routing.score_stale_ms", self.routing.score_stale_ms),
            (
                "routing.producer_expiry_ms",
                self.routing.producer_expiry_ms,
            ),
            ("routing.max_producers", self.routing.max_producers as u64),
            (
                "routing.lane_spill_depth",
                u64::from(self.routing.lane_spill_depth),
            ),
        ] {
            if value == 0 {
                return Err(invalid(key, "must be above 0".into()));
            }
        }
        if self.shutdown.drain_timeout_ms > MAX_DRAIN_TIMEOUT_MS {
            return Err(invalid(
                "shutdown.drain_timeout_ms",
                format!("must be at most {MAX_DRAIN_TIMEOUT_MS} (10 minutes)"),
            ));
        }
        if self.admin.listen.parse::<SocketAddr>().is_err() {
            return Err(invalid(
                "admin.listen",
                format!("`{}` is not an ip:port socket address", self.admin.listen),
            ));
        }
        Ok(())
    }

    pub fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.upstream.connect_timeout_ms)
    }

    /// How long a broker may take to answer a request; None: no limit.
    pub fn request_timeout(&self) -> Option<Duration> {
        let ms = self.upstream.request_timeout_ms;
        (ms > 0).then(|| Duration::from_millis(ms))
    }

    pub fn metadata_refresh(&self) -> Duration {
        Duration::from_millis(self.upstream.metadata_refresh_ms)
    }

    pub fn drain_timeout(&self) -> Duration {
        Duration::from_millis(self.shutdown.drain_timeout_ms)
    }
}

/// The longest drain at shutdown that is accepted (a typo guard: ten minutes).
const MAX_DRAIN_TIMEOUT_MS: u64 = 600_000;

/// Splits `host:port` (IPv6 hosts in brackets) into its parts.
pub fn split_host_port(s: &str) -> Option<(&str, u16)> {
    let (host, port) = s.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() || port == 0 {
        return None;
    }
    Some((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "[upstream]\nbootstrap_servers = [\"127.0.0.1:19092\"]\n";

    #[test]
    fn skew_section_is_read_and_checked() {
        let c = Config::parse(MINIMAL, "t").unwrap();
        assert!(c.skew.enabled, "on by default");
        assert_eq!(c.skew.sample_interval_ms, 10_000);
        let c = Config::parse(&format!("{MINIMAL}\n[skew]\nmember_margin = 1.0\n"), "t").unwrap();
        assert_eq!(c.skew.member_margin, 1.0);
        for (bad, key) in [
            ("sample_interval_ms = 0", "skew.sample_interval_ms"),
            ("member_margin = -1.0", "skew.member_margin"),
        ] {
            match Config::parse(&format!("{MINIMAL}\n[skew]\n{bad}\n"), "t") {
                Err(ConfigError::Invalid { key: k, .. }) => assert_eq!(k, key),
                other => panic!("expected {key} to be refused, got {other:?}"),
            }
        }
    }

    #[test]
    fn lag_section_is_read_and_needs_kroutes_own_credentials() {
        let c = Config::parse(
            &format!("{MINIMAL}\n[lag]\nenabled = true\nintervals = 10\n"),
            "t",
        )
        .unwrap();
        assert!(c.lag.enabled);
        assert_eq!(c.lag.intervals, 10);
        let passthrough = format!(
            "{MINIMAL}\n[upstream.sasl]\nmode = \"passthrough\"\n\n[lag]\nenabled = true\n"
        );
        match Config::parse(&passthrough, "t") {
            Err(ConfigError::Invalid { key, .. }) => assert_eq!(key, "lag.enabled"),
            other => panic!("expected lag.enabled to be refused, got {other:?}"),
        }
        let bad = format!("{MINIMAL}\n[lag]\nintervals = 0\n");
        match Config::parse(&bad, "t") {
            Err(ConfigError::Invalid { key, .. }) => assert_eq!(key, "lag.intervals"),
            other => panic!("expected lag.intervals to be refused, got {other:?}"),
        }
    }

    #[test]
    fn minimal_config_takes_defaults() {
        let c = Config::parse(MINIMAL, "t").unwrap();
        assert_eq!(c.listen.bootstrap_port, 9092);
        assert_eq!(c.limits.max_frame_bytes, 100 * 1024 * 1024);
        assert_eq!(c.request_timeout(), Some(Duration::from_secs(60)));
    }

    #[test]
    fn request_timeout_is_off_at_zero_and_not_tiny() {
        let c = Config::parse(
            &format!(
                "{MINIMAL}request_timeout_ms = 0
"
            ),
            "t",
        )
        .unwrap();
        assert_eq!(c.request_timeout(), None);
        let c = Config::parse(
            &format!(
                "{MINIMAL}request_timeout_ms = 2500
"
            ),
            "t",
        )
        .unwrap();
        assert_eq!(c.request_timeout(), Some(Duration::from_millis(2500)));
        let err = Config::parse(
            &format!(
                "{MINIMAL}request_timeout_ms = 50
"
            ),
            "t",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("upstream.request_timeout_ms"), "{err}");
    }

    #[test]
    fn client_limits_have_kafka_like_defaults_and_name_their_keys() {
        let c = Config::parse(MINIMAL, "t").unwrap();
        assert_eq!(c.limits.max_connections, 20_000);
        assert_eq!(c.limits.max_connections_per_ip, 0);
        assert_eq!(c.limits.idle_timeout(), Some(Duration::from_secs(600)));
        assert_eq!(
            c.limits.partial_frame_timeout(),
            Some(Duration::from_secs(30))
        );
        let off = format!("{MINIMAL}[limits]\nidle_timeout_ms = 0\npartial_frame_timeout_ms = 0\n");
        let c = Config::parse(&off, "t").unwrap();
        assert_eq!(
            (c.limits.idle_timeout(), c.limits.partial_frame_timeout()),
            (None, None)
        );
        for (text, key) in [
            (
                "max_buffered_bytes_per_connection = 0",
                "limits.max_buffered_bytes_per_connection",
            ),
            (
                "max_buffered_bytes_per_connection = 2048\nmax_buffered_bytes = 1024",
                "limits.max_buffered_bytes",
            ),
            ("idle_timeout_ms = 5", "limits.idle_timeout_ms"),
            (
                "partial_frame_timeout_ms = 99",
                "limits.partial_frame_timeout_ms",
            ),
        ] {
            let err = Config::parse(&format!("{MINIMAL}[limits]\n{text}\n"), "t")
                .unwrap_err()
                .to_string();
            assert!(err.contains(key), "expected {key} in: {err}");
        }
    }

    #[test]
    fn unknown_key_is_named() {
        let text = format!("{MINIMAL}[listen]\nbootstrap_prot = 1\n");
        let err = Config::parse(&text, "t").unwrap_err().to_string();
        assert!(err.contains("bootstrap_prot"), "{err}");
    }

    #[test]
    fn bad_values_name_their_key() {
        let cases = [
            (
                "[upstream]\nbootstrap_servers = []\n",
                "upstream.bootstrap_servers",
            ),
            (
                "[upstream]\nbootstrap_servers = [\"nohost\"]\n",
                "upstream.bootstrap_servers",
            ),
            (
                &format!("{MINIMAL}[limits]\nmax_frame_bytes = 10\n"),
                "limits.max_frame_bytes",
            ),
            (
                &format!("{MINIMAL}[admin]\nlisten = \"localhost\"\n"),
                "admin.listen",
            ),
        ];
        for (text, key) in cases {
            let err = Config::parse(text, "t").unwrap_err().to_string();
            assert!(err.contains(key), "expected {key} in: {err}");
        }
    }

    #[test]
    fn wrong_type_is_reported_with_key() {
        let text = format!("{MINIMAL}[listen]\nbootstrap_port = \"x\"\n");
        let err = Config::parse(&text, "t").unwrap_err().to_string();
        assert!(err.contains("bootstrap_port"), "{err}");
    }

    #[test]
    fn routing_policy_is_opt_in() {
        let c = Config::parse(MINIMAL, "t").unwrap();
        assert!(
            !c.routing.routes_topic("orders"),
            "nothing routed by default"
        );
        let text = format!(
            "{MINIMAL}[routing]\ninclude = [\"logs-*\", \"metrics\"]\nexclude = [\"logs-audit*\"]\n"
        );
        let c = Config::parse(&text, "t").unwrap();
        assert!(c.routing.routes_topic("logs-web"));
        assert!(c.routing.routes_topic("metrics"));
        assert!(!c.routing.routes_topic("logs-audit-1"));
        assert!(!c.routing.routes_topic("metrics2"));
        let off = format!("{MINIMAL}[routing]\nstrategy = \"off\"\ninclude = [\"*\"]\n");
        assert!(!Config::parse(&off, "t").unwrap().routing.routes_topic("x"));
        let bad = format!("{MINIMAL}[routing]\nstrategy = \"fastest\"\n");
        let err = Config::parse(&bad, "t").unwrap_err().to_string();
        assert!(
            err.contains("strategy") && err.contains("strict-cost"),
            "{err}"
        );
    }

    #[test]
    fn globs() {
        assert!(glob_match("*", "anything"));
        assert!(glob_match("a*c", "abbbc"));
        assert!(glob_match("a?c", "abc"));
        assert!(!glob_match("a?c", "abbc"));
        assert!(glob_match("__*", "__consumer_offsets"));
        assert!(!glob_match("__*", "_x"));
        assert!(glob_match("*-*-x", "a-b-c-x"));
    }

    #[test]
    fn host_port_split() {
        assert_eq!(split_host_port("a:1"), Some(("a", 1)));
        assert_eq!(split_host_port("[::1]:9"), Some(("::1", 9)));
        assert_eq!(split_host_port("a"), None);
        assert_eq!(split_host_port(":5"), None);
    }
}
