//! `[skew]`: how kroute samples the cluster's layout and load for the skew report and plan.
//!
//! On by default: one Metadata request and one ListOffsets request per broker per sample is
//! less than a single client's metadata refresh, and the report is what an operator asks for
//! when keyed records or consumers pile onto one broker.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SkewConfig {
    /// Whether kroute samples layouts and log ends for `/v1/skew` and `/v1/plan`.
    #[serde(default = "default_enabled")]
    pub enabled: bool,
    /// How often the cluster's layout and every partition's log end are read. Rates are taken
    /// between the last two samples.
    #[serde(default = "default_sample_interval_ms")]
    pub sample_interval_ms: u64,
    /// Rates (records/s per partition, produce bytes/s) are taken over this long: the oldest
    /// sample kept is the newest one at least this old. Long enough for a partition's count
    /// to be more than noise; the report and the plan say the window they used.
    #[serde(default = "default_rate_window_ms")]
    pub rate_window_ms: u64,
    /// A group member carrying more than this fraction above the group's mean partitions (or
    /// lag) is flagged overloaded (0.5: more than 1.5x the mean).
    #[serde(default = "default_member_margin")]
    pub member_margin: f64,
}

fn default_enabled() -> bool {
    true
}
fn default_sample_interval_ms() -> u64 {
    10_000
}
fn default_rate_window_ms() -> u64 {
    120_000
}
fn default_member_margin() -> f64 {
    0.5
}

impl Default for SkewConfig {
    fn default() -> Self {
        Self {
            enabled: default_enabled(),
            sample_interval_ms: default_sample_interval_ms(),
            rate_window_ms: default_rate_window_ms(),
            member_margin: default_member_margin(),
        }
    }
}

impl SkewConfig {
    /// The first key with a value kroute cannot run with, and why.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if !(100..=3_600_000).contains(&self.sample_interval_ms) {
            return Err((
                "skew.sample_interval_ms",
                format!("must be 100..=3600000 ms (got {})", self.sample_interval_ms),
            ));
        }
        if self.rate_window_ms < self.sample_interval_ms || self.rate_window_ms > 86_400_000 {
            return Err((
                "skew.rate_window_ms",
                format!(
                    "must be at least skew.sample_interval_ms ({}) and at most 86400000 (got {})",
                    self.sample_interval_ms, self.rate_window_ms
                ),
            ));
        }
        if !(self.member_margin.is_finite() && self.member_margin >= 0.0) {
            return Err((
                "skew.member_margin",
                format!("must be a number >= 0 (got {})", self.member_margin),
            ));
        }
        Ok(())
    }
}
