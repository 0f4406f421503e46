//! Client connections: frames in, ordered replies out; closed between requests at shutdown.

mod session;
mod shutdown;

pub use session::{Target, serve};
pub use shutdown::{CONNECTIONS_CUT, Drained, Session, Shutdown};
