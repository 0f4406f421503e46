//! Skew: where the cluster's layout piles load onto some brokers or consumers, and a plan to
//! even it out that operators apply with Kafka's own tools.
//!
//! kroute evens out keyless produce traffic by itself, but keyed records, consumers and
//! replication stay where the layout puts them: partitions of old topics never reach a broker
//! added later, added partitions pile their leaders onto some brokers, leadership moved by a
//! failure does not come back by itself, and an assignor can leave one consumer of a group
//! with far more partitions than another (seed 003).
//!
//! - [`sample`]: every `skew.sample_interval_ms`, the layout (replicas, leaders) and every
//!   partition's log end, and the produce bytes through kroute ([`traffic`], counted on the
//!   data path), kept for `skew.rate_window_ms`: rates are taken over that window;
//! - [`report`]: per broker, topic and consumer group, what the samples show (`/v1/skew`,
//!   gauges, `kroute skew`);
//! - [`plan`]: the fewest leader changes and replica moves that even out the measured load
//!   (`/v1/plan`, `kroute plan`), as kafka-reassign-partitions and kafka-leader-election files;
//! - [`http`] and [`metrics`] serve them; [`cli`] is the commands' side.

pub mod cli;
/// `[skew]` (kept with the rest of proxy.toml's sections in [`crate::config`]).
pub use crate::config::skew as config;
pub mod http;
pub mod layout;
pub mod metrics;
pub mod plan;
pub mod report;
pub mod sample;
pub mod traffic;

pub use config::SkewConfig;
pub use sample::{Sample, Samples};

use crate::cluster::Brokers;
use crate::lag::LagStore;
use traffic::ProduceTraffic;

/// What the sampler and the endpoints read of the running proxy, which provides it
/// ([`crate::proxy`]): the brokers and how to ask them, and the few settings and live figures
/// the report shows.
pub trait Sources: Brokers {
    /// `[skew]`.
    fn settings(&self) -> &SkewConfig;
    /// `upstream.bootstrap_servers`: where to ask for the layout before any broker is known.
    fn bootstrap_servers(&self) -> &[String];
    /// kroute has no connection of its own to the cluster (SASL passthrough without its own
    /// credentials): there is nothing to sample.
    fn learns_brokers_from_clients(&self) -> bool;
    /// The produce bytes through kroute, counted on the data path.
    fn traffic(&self) -> &ProduceTraffic;
    /// Consumer lag, when `[lag]` is on.
    fn lag(&self) -> Option<&LagStore>;
}
