//! What a broker connection uses of the running proxy, which provides it ([`crate::proxy`]).
//! The scores and the cluster view come with [`Brokers`].

use std::time::Instant;

use crate::cluster::Brokers;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::rewrite::AddressMap;
use crate::security::UpstreamSecurity;

/// The settings, metrics and shared state a connection to a broker reads and feeds: its
/// broker's score, the cluster view its answers teach, and the address map their rewrites use.
pub trait Context: Brokers {
    fn config(&self) -> &Config;
    fn metrics(&self) -> &Metrics;
    /// How connections to the brokers are secured (TLS, SASL).
    fn security(&self) -> &UpstreamSecurity;
    /// Real broker addresses to kroute's, for the answers that carry them.
    fn addresses(&self) -> &AddressMap;
    /// An idempotent producer id was just handed out through kroute, which may now take over
    /// its numbering ([`crate::route::producers`]).
    fn own_producer(&self, producer_id: i64, now: Instant);
}
