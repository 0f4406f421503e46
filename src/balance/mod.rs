//! The routing core: live per-broker latency scores ([`scores`]), the choice of the broker
//! that movable batches go to ([`strategy`]), and why a batch does not move ([`keep`]).
//!
//! Scores and strategy know nothing of connections, requests or the proxy: callers report what
//! happened to the requests they sent (`sent`, `answered`, `abandoned`) and ask where the next
//! bytes of a topic should go (`pick`, then `charge`), always passing the current time. The
//! proxy passes the wall clock; the fleet simulator (`examples/fleet_sim`) passes virtual time
//! and runs thousands of these side by side.

pub mod keep;
pub mod scores;
pub mod strategy;
