//! Consumer lag, judged as Burrow judges it, plus the time lag Burrow does not have.
//!
//! Offset lag alone does not say whether a consumer is healthy: a lag of 5 000 can be a consumer
//! that keeps up with bursts, or one that died an hour ago. Burrow (linkedin/Burrow) judges
//! each partition over a sliding window of the group's last N commits, each stored with the
//! lag it had when committed: the consumer is OK if it was caught up at some point in the
//! window; it is stuck (STALL) if it commits the same offset again and again while lag stays;
//! slow (WARN) if it commits progress but the lag never goes down; gone (STOP) if it has not
//! committed for longer than the window spans; confused (REWIND) if its offset went backwards.
//! A group is as bad as its worst partition. Operators alert on that status, and tools
//! (Telegraf's burrow input, dashboards, scripts) read it from Burrow's HTTP API.
//!
//! kroute's lag feature is built in layers; this module is the pure core, with no I/O, no
//! clock and no configuration of its own, so every rule is tested exactly:
//! - [`window`]: per group and partition, the bounded window of commits a collector fills
//!   ([`window::CommitWindow::record`]), with the lag at each;
//! - [`log_end`]: per partition, the log-end readings a collector fills
//!   ([`log_end::LogEnd::record`]): the recent ones Burrow's rules use, and the longer history
//!   the time lag is read from;
//! - [`evaluate`]: Burrow's rules ([`evaluate::evaluate_group`]), giving [`status::Status`]
//!   per partition and group, `complete`, `maxlag` and `totallag`, shaped after Burrow's
//!   `/v3/kafka/{cluster}/consumer/{group}/status` and `/lag` answers;
//! - [`time_lag`]: seconds behind, interpolated from the log-end history as kafka-lag-exporter
//!   does.
//!
//!
//! Around it, the parts that touch the world:
//! - [`config`]: the `[lag]` section;
//! - [`store`]: the windows and log ends of every watched group, behind one lock;
//! - [`collect`] (with [`poll`], one function per Kafka request): polls the cluster;
//! - [`observe`] (with [`offset_commit`], a bounded reader): records the OffsetCommit requests
//!   passing through kroute, the data path's only contact with lag;
//! - [`metrics`] and [`http`]: the verdicts in Prometheus and in Burrow's HTTP API.

pub mod collect;
pub mod commit_log;
/// `[lag]` (kept with the rest of proxy.toml's sections in [`crate::config`]).
pub use crate::config::lag as config;
pub mod evaluate;
pub mod http;
pub mod log_end;
pub mod metrics;
pub mod observe;
pub mod offset_commit;
pub mod poll;
pub mod status;
pub mod store;
pub mod tail;
pub mod time_lag;
pub mod window;

pub use config::LagConfig;
pub use store::LagStore;

pub use evaluate::{GroupStatus, Params, PartitionInput, PartitionStatus, evaluate_group};
pub use log_end::LogEnd;
pub use status::Status;
pub use time_lag::TimeLag;
pub use window::{Commit, CommitEntry, CommitWindow};
