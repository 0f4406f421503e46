//! `[lag]`: which consumer groups kroute watches, how often, and how it judges them.
//!
//! Off by default: watching lag costs a few requests per broker and poll, and kroute's main job
//! is the data path. The defaults are Burrow's where Burrow has one (10 intervals; seed 002's
//! example uses 15), so a Burrow user's thresholds mean the same here.

use serde::{Deserialize, Serialize};

use super::glob_match;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LagConfig {
    /// Whether kroute polls the cluster for consumer groups and judges their lag.
    #[serde(default)]
    pub enabled: bool,
    /// The cluster's name in the Burrow-compatible HTTP API (`/v3/kafka/{cluster}`).
    #[serde(default = "default_cluster")]
    pub cluster: String,
    /// Groups watched (globs: `*` any run, `?` one character).
    #[serde(default = "default_include")]
    pub include: Vec<String>,
    /// Groups never watched, even if included.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// How often groups, committed offsets and log-end offsets are read (Burrow's
    /// `offset-refresh`).
    #[serde(default = "default_poll_interval_ms")]
    pub poll_interval_ms: u64,
    /// Whether commits are read from `__consumer_offsets` (every commit, with the time the
    /// coordinator wrote it, as Burrow reads them). Off: commits come from polling OffsetFetch
    /// and from OffsetCommit requests through kroute, which cannot tell when or how often a
    /// group that commits past kroute committed. Needs Describe and Read on the topic.
    #[serde(default = "default_offsets_log")]
    pub offsets_log: bool,
    /// Commits per partition window (Burrow's `intervals`).
    #[serde(default = "default_intervals")]
    pub intervals: usize,
    /// Commits closer than this to the previous one replace it (Burrow's `min-distance`, ms).
    #[serde(default)]
    pub min_distance_ms: u64,
    /// Lag at or below this counts as caught up (Burrow's `allowed-lag`).
    #[serde(default)]
    pub allowed_lag: u64,
    /// A partition whose window is less full than this is OK whatever it shows (Burrow's
    /// `minimum-complete`, 0..1).
    #[serde(default)]
    pub minimum_complete: f32,
    /// Most groups tracked; groups beyond it are counted and ignored (bounds the metrics).
    #[serde(default = "default_max_groups")]
    pub max_groups: usize,
    /// Most (group, partition) windows tracked in all; beyond it partitions are counted and
    /// ignored.
    #[serde(default = "default_max_partitions")]
    pub max_partitions: usize,
    /// A group no broker lists any more is forgotten after this long (Burrow's
    /// `expire-group`, default 7 days).
    #[serde(default = "default_expire_group_ms")]
    pub expire_group_ms: u64,
    /// Log-end points kept per partition for the time lag (one per poll; 60 = 10 minutes of
    /// history at the default poll interval, more for idle topics, whose points merge).
    #[serde(default = "default_time_lag_points")]
    pub time_lag_points: usize,
}

fn default_cluster() -> String {
    "local".into()
}
fn default_include() -> Vec<String> {
    vec!["*".into()]
}
fn default_poll_interval_ms() -> u64 {
    10_000
}
fn default_offsets_log() -> bool {
    true
}
fn default_intervals() -> usize {
    10
}
fn default_max_groups() -> usize {
    1_000
}
fn default_max_partitions() -> usize {
    100_000
}
fn default_expire_group_ms() -> u64 {
    7 * 24 * 3_600_000
}
fn default_time_lag_points() -> usize {
    60
}

impl Default for LagConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            cluster: default_cluster(),
            include: default_include(),
            exclude: Vec::new(),
            poll_interval_ms: default_poll_interval_ms(),
            offsets_log: default_offsets_log(),
            intervals: default_intervals(),
            min_distance_ms: 0,
            allowed_lag: 0,
            minimum_complete: 0.0,
            max_groups: default_max_groups(),
            max_partitions: default_max_partitions(),
            expire_group_ms: default_expire_group_ms(),
            time_lag_points: default_time_lag_points(),
        }
    }
}

impl LagConfig {
    /// Whether group `group` is watched.
    pub fn watches(&self, group: &str) -> bool {
        self.include.iter().any(|g| glob_match(g, group))
            && !self.exclude.iter().any(|g| glob_match(g, group))
    }

    /// The first key with a value kroute cannot run with, and why.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        let cluster_ok = !self.cluster.is_empty()
            && self
                .cluster
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if !cluster_ok {
            return Err((
                "lag.cluster",
                "must be a non-empty name of letters, digits, '-', '_' or '.' (it is a URL path segment)".into(),
            ));
        }
        if self.poll_interval_ms < 100 {
            return Err(("lag.poll_interval_ms", "must be at least 100".into()));
        }
        if !(1..=1_000).contains(&self.intervals) {
            return Err(("lag.intervals", "must be between 1 and 1000".into()));
        }
        if !(0.0..=1.0).contains(&self.minimum_complete) {
            return Err(("lag.minimum_complete", "must be between 0 and 1".into()));
        }
        if self.max_groups == 0 || self.max_partitions == 0 {
            return Err((
                "lag.max_groups",
                "max_groups and max_partitions must be above 0".into(),
            ));
        }
        if self.time_lag_points < 2 {
            return Err((
                "lag.time_lag_points",
                "must be at least 2 (a time lag needs two points)".into(),
            ));
        }
        for (key, globs) in [
            ("lag.include", &self.include),
            ("lag.exclude", &self.exclude),
        ] {
            if globs.iter().any(|g| g.is_empty()) {
                return Err((key, "an empty glob matches nothing; remove it".into()));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_burrows_and_watch_every_group() {
        let config = LagConfig::default();
        assert!(!config.enabled);
        assert_eq!(config.intervals, 10);
        assert!(config.offsets_log);
        assert!(config.watches("orders-consumer"));
        assert_eq!(config.validate(), Ok(()));
    }

    #[test]
    fn exclude_wins_over_include() {
        let config = LagConfig {
            include: vec!["app-*".into()],
            exclude: vec!["app-test-*".into()],
            ..LagConfig::default()
        };
        assert!(config.watches("app-orders"));
        assert!(!config.watches("app-test-1"));
        assert!(!config.watches("other"));
    }

    #[test]
    fn bad_values_name_their_key() {
        let bad = [
            (
                LagConfig {
                    cluster: "a/b".into(),
                    ..LagConfig::default()
                },
                "lag.cluster",
            ),
            (
                LagConfig {
                    intervals: 0,
                    ..LagConfig::default()
                },
                "lag.intervals",
            ),
            (
                LagConfig {
                    poll_interval_ms: 10,
                    ..LagConfig::default()
                },
                "lag.poll_interval_ms",
            ),
            (
                LagConfig {
                    minimum_complete: 1.5,
                    ..LagConfig::default()
                },
                "lag.minimum_complete",
            ),
        ];
        for (config, key) in bad {
            assert_eq!(config.validate().map_err(|e| e.0), Err(key));
        }
    }
}
