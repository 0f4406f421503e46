//! What routing uses of the running proxy, which provides it ([`crate::proxy`]).

use super::Router;
use crate::upstream;
use crate::upstream::principals::ClientConnections;

/// Everything a broker connection uses (routing opens connections of its own for the
/// idempotent producers it renumbers), and routing's own state.
pub trait Context: upstream::Context {
    /// The strategy, the producers kroute renumbers, what the brokers held at start.
    fn router(&self) -> &Router;
    /// SASL passthrough clients' own connections, by principal and broker: where their moved
    /// batches go out under their own identity.
    fn client_connections(&self) -> &ClientConnections;
}
