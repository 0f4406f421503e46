//! Metrics of the security layer: TLS handshakes toward brokers, SASL, certificate files.
//!
//! None of these is on a per-request path (they move once per connection or per file change),
//! so labels are looked up when they happen; the per-mechanism SASL counters, which move once
//! per upstream connection, are registered up front.

use metrics::{Counter, counter, gauge};

use crate::config::Mechanism;

pub struct SecurityMetrics {
    sasl: [SaslCounters; 4],
}

struct SaslCounters {
    authentications: Counter,
    failures: Counter,
    reauthentications: Counter,
}

fn slot(m: Mechanism) -> usize {
    match m {
        Mechanism::Plain => 0,
        Mechanism::ScramSha256 => 1,
        Mechanism::ScramSha512 => 2,
        Mechanism::OAuthBearer => 3,
    }
}

impl SecurityMetrics {
    pub fn new() -> SecurityMetrics {
        let sasl = [
            Mechanism::Plain,
            Mechanism::ScramSha256,
            Mechanism::ScramSha512,
            Mechanism::OAuthBearer,
        ]
        .map(|m| SaslCounters {
            authentications: counter!("kroute_sasl_authentications_total", "mechanism" => m.name()),
            failures: counter!("kroute_sasl_authentication_failures_total", "mechanism" => m.name()),
            reauthentications: counter!("kroute_sasl_reauthentications_total", "mechanism" => m.name()),
        });
        SecurityMetrics { sasl }
    }

    /// kroute authenticated an upstream connection with `m`.
    pub fn authenticated(&self, m: Mechanism) {
        self.sasl[slot(m)].authentications.increment(1);
    }

    /// A broker refused kroute's credentials (or the exchange broke off).
    pub fn authentication_failed(&self, m: Mechanism) {
        self.sasl[slot(m)].failures.increment(1);
    }

    /// kroute re-authenticated a live connection before its session ran out (KIP-368).
    pub fn reauthenticated(&self, m: Mechanism) {
        self.sasl[slot(m)].reauthentications.increment(1);
    }

    /// A client tried SASL on an originating kroute and was refused.
    pub fn client_sasl_refused(&self) {
        counter!("kroute_client_sasl_refused_total").increment(1);
    }

    /// A TLS handshake with broker `node` (-1: a bootstrap server) failed for `reason`.
    pub fn upstream_handshake_failed(&self, node: i32, reason: &'static str) {
        counter!("kroute_upstream_tls_handshake_failures_total",
            "broker" => node.to_string(), "reason" => reason)
        .increment(1);
    }

    /// Certificate files of `what` were reloaded after a change.
    pub fn reloaded(&self, what: &'static str) {
        counter!("kroute_tls_reloads_total", "what" => what, "result" => "ok").increment(1);
    }

    /// Changed certificate files of `what` could not be loaded; the old ones stay.
    pub fn reload_failed(&self, what: &'static str) {
        counter!("kroute_tls_reloads_total", "what" => what, "result" => "error").increment(1);
    }

    /// When the certificate of `what` expires, in seconds since the Unix epoch.
    pub fn certificate_expiry(&self, what: &'static str, unix_seconds: f64) {
        gauge!("kroute_tls_certificate_expiry_timestamp_seconds", "what" => what).set(unix_seconds);
    }
}

impl Default for SecurityMetrics {
    fn default() -> Self {
        Self::new()
    }
}
