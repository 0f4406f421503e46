//! What a client connection uses of the running proxy, which provides it ([`crate::proxy`]).

use std::sync::Arc;

use crate::lag::LagStore;
use crate::route;
use crate::shutdown::Shutdown;

/// Everything routing uses (a client's requests are planned and sent on from its connection),
/// plus what only a client connection watches: graceful shutdown, and the consumer lag its
/// groups' commits feed.
pub trait Context: route::Context {
    /// Stops the listeners from taking connections, and the sessions from taking requests.
    fn shutdown(&self) -> &Shutdown;
    /// Consumer lag, when `[lag]` is enabled: accepted OffsetCommits are recorded there.
    fn lag_store(&self) -> Option<&Arc<LagStore>>;
}
