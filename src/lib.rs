//! kroute: a Kafka wire-protocol proxy.
//!
//! The path of one request, one module each:
//! [`listener`] accepts -> [`client`] reads frames and keeps replies in order -> [`route`]
//! decides what the request needs -> [`upstream`] sends it to the broker and matches the answer
//! -> [`rewrite`] replaces broker addresses -> back to [`client`].
//! Shared by all connections: [`cluster`] (the brokers), [`metrics`], [`config`];
//! [`open_files`] raises the descriptor limit connections need; [`log_every`] keeps lines a
//! peer can repeat at will to one per period.
//! [`security`] secures the connections at both ends (TLS, mTLS, SASL).
//! [`lag`] judges consumer groups' lag with Burrow's rules and estimates it in seconds.

pub mod admin;
pub mod ask;
pub mod balance;
pub mod client;
pub mod cluster;
pub mod config;
pub mod lag;
pub mod listener;
pub mod log_every;
pub mod log_filter;
pub mod metrics;
pub mod open_files;
pub mod protocol;
pub mod proxy;
pub mod rewrite;
pub mod route;
pub mod security;
pub mod shutdown;
pub mod skew;
pub mod upstream;
