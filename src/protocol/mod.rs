//! The Kafka wire format, as far as kroute reads it.

pub mod encode;
pub mod endpoints;
pub mod frame;
pub mod header;
pub mod produce;
pub mod versions;
