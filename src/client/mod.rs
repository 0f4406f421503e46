//! Client connections: frames in, ordered replies out.

mod session;

pub use session::{Target, serve};
