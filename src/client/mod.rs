//! Client connections: frames in, ordered replies out, within limits; closed between requests
//! at shutdown.

mod authenticated;
mod context;
mod intake;
pub mod limits;
mod replies;
mod session;

pub use context::Context;
pub use limits::{Admitted, Limits};
pub use session::{Target, serve};
