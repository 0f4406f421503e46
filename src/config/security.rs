//! The security sections of `proxy.toml`: TLS on the client listeners (`[listen.tls]`), TLS
//! toward the brokers (`[upstream.tls]`) and SASL toward the brokers (`[upstream.sasl]`).
//!
//! Secrets are never written in the file itself: a password or token names a file or an
//! environment variable it is read from, when kroute authenticates (so a rotated file is
//! picked up by the next connection). [`validate`] rejects inconsistent combinations and names
//! the key, as the rest of the config does.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Certificate and key (PEM files) for TLS on every client listener, and optionally the CA
/// that client certificates must chain to (mTLS).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    /// CA bundle (PEM) client certificates are checked against.
    #[serde(default)]
    pub client_ca_file: Option<PathBuf>,
    /// Whether clients must present a certificate: `none`, `optional` or `required`.
    #[serde(default)]
    pub client_auth: ClientAuth,
    /// How often the files are checked for changes (ms; 0: never re-read).
    #[serde(default = "default_reload_ms")]
    pub reload_ms: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientAuth {
    #[default]
    None,
    Optional,
    Required,
}

/// TLS on every connection kroute opens to a broker.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamTlsConfig {
    /// CA bundle (PEM) broker certificates must chain to; absent: the platform's roots.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Client certificate chain (PEM) for brokers that require mTLS; needs `key_file`.
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    /// Private key (PEM: PKCS#8, PKCS#1 or SEC1) of `cert_file`.
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// Accept any broker certificate. For tests only: kroute warns at start.
    #[serde(default)]
    pub insecure_skip_verify: bool,
    /// How often the files are checked for changes (ms; 0: never re-read).
    #[serde(default = "default_reload_ms")]
    pub reload_ms: u64,
}

/// SASL toward the brokers.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SaslConfig {
    /// `originate`: kroute authenticates every upstream connection itself and clients connect
    /// without SASL. `passthrough`: clients authenticate themselves over their own connection;
    /// kroute's credentials serve only its own connections (moved batches, metadata).
    pub mode: SaslMode,
    /// PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER: kroute's own credentials. Only
    /// passthrough may go without: kroute then opens no connection of its own (no moved
    /// batches for SASL clients, no metadata refresh: it learns the brokers from clients).
    #[serde(default)]
    pub mechanism: Option<Mechanism>,
    /// User name (PLAIN and SCRAM).
    #[serde(default)]
    pub username: Option<String>,
    /// File holding the password (PLAIN and SCRAM); trailing newlines are ignored.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// Environment variable holding the password (PLAIN and SCRAM).
    #[serde(default)]
    pub password_env: Option<String>,
    /// File holding the OAUTHBEARER token, re-read whenever kroute authenticates.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// Environment variable holding the OAUTHBEARER token.
    #[serde(default)]
    pub token_env: Option<String>,
    /// OAUTHBEARER tokens from an OAuth 2 token endpoint instead (client credentials).
    #[serde(default)]
    pub oauth: Option<OAuthConfig>,
}

/// An OAuth 2 token endpoint kroute gets OAUTHBEARER tokens from (client-credentials grant).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthConfig {
    pub token_endpoint_url: String,
    pub client_id: String,
    #[serde(default)]
    pub client_secret_file: Option<PathBuf>,
    #[serde(default)]
    pub client_secret_env: Option<String>,
    #[serde(default)]
    pub scope: Option<String>,
    /// CA bundle (PEM) for the endpoint's certificate; absent: Mozilla's roots.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SaslMode {
    Originate,
    Passthrough,
}

/// A SASL mechanism kroute can run as a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum Mechanism {
    #[serde(rename = "PLAIN")]
    Plain,
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
    #[serde(rename = "OAUTHBEARER")]
    OAuthBearer,
}

impl Mechanism {
    /// The name Kafka uses in SaslHandshake.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
            Mechanism::OAuthBearer => "OAUTHBEARER",
        }
    }
}

fn default_reload_ms() -> u64 {
    10_000
}

/// What is wrong with a security section: the key, and why.
pub type Invalid = (&'static str, String);

/// Checks the security sections for combinations that cannot work.
pub fn validate(
    listen: Option<&TlsConfig>,
    tls: Option<&UpstreamTlsConfig>,
    sasl: Option<&SaslConfig>,
) -> Result<(), Invalid> {
    if let Some(l) = listen
        && l.client_auth != ClientAuth::None
        && l.client_ca_file.is_none()
    {
        return Err((
            "listen.tls.client_ca_file",
            format!(
                "client_auth = \"{:?}\" needs a CA to check client certificates against",
                l.client_auth
            )
            .to_lowercase(),
        ));
    }
    if let Some(l) = listen
        && l.client_ca_file.is_some()
        && l.client_auth == ClientAuth::None
    {
        return Err((
            "listen.tls.client_auth",
            "a client_ca_file is set: say \"required\" or \"optional\"".into(),
        ));
    }
    if let Some(t) = tls {
        match (&t.cert_file, &t.key_file) {
            (Some(_), None) => {
                return Err(("upstream.tls.key_file", "cert_file needs its key".into()));
            }
            (None, Some(_)) => {
                return Err((
                    "upstream.tls.cert_file",
                    "key_file needs its certificate".into(),
                ));
            }
            _ => {}
        }
        if t.insecure_skip_verify && t.ca_file.is_some() {
            return Err((
                "upstream.tls.insecure_skip_verify",
                "a ca_file is set but would not be used; drop one of them".into(),
            ));
        }
    }
    if let Some(s) = sasl {
        validate_sasl(s)?;
    }
    Ok(())
}

fn validate_sasl(s: &SaslConfig) -> Result<(), Invalid> {
    let password = s.password_file.is_some() as u8 + s.password_env.is_some() as u8;
    let token =
        s.token_file.is_some() as u8 + s.token_env.is_some() as u8 + s.oauth.is_some() as u8;
    let Some(mechanism) = s.mechanism else {
        if s.mode == SaslMode::Originate {
            return Err((
                "upstream.sasl.mechanism",
                "originate needs kroute's own credentials: a mechanism".into(),
            ));
        }
        if password + token > 0 || s.username.is_some() {
            return Err((
                "upstream.sasl.mechanism",
                "credentials are given but no mechanism to use them with".into(),
            ));
        }
        return Ok(());
    };
    if mechanism == Mechanism::OAuthBearer {
        if token != 1 {
            return Err((
                "upstream.sasl.token_file",
                "OAUTHBEARER needs exactly one token source: token_file, token_env or [upstream.sasl.oauth]".into(),
            ));
        }
        if let Some(o) = &s.oauth {
            let secrets =
                o.client_secret_file.is_some() as u8 + o.client_secret_env.is_some() as u8;
            if secrets != 1 {
                return Err((
                    "upstream.sasl.oauth.client_secret_file",
                    "needs exactly one client secret source: client_secret_file or client_secret_env".into(),
                ));
            }
            if !o.token_endpoint_url.starts_with("https://")
                && !o.token_endpoint_url.starts_with("http://")
            {
                return Err((
                    "upstream.sasl.oauth.token_endpoint_url",
                    "must be an http:// or https:// URL".into(),
                ));
            }
        }
        if password > 0 || s.username.is_some() {
            return Err((
                "upstream.sasl.username",
                "OAUTHBEARER takes a token, not a user name or password".into(),
            ));
        }
        return Ok(());
    }
    let mech = mechanism.name();
    if s.username.as_deref().is_none_or(str::is_empty) {
        return Err((
            "upstream.sasl.username",
            format!("{mech} needs a user name"),
        ));
    }
    if password != 1 {
        return Err((
            "upstream.sasl.password_file",
            format!("{mech} needs exactly one password source: password_file or password_env"),
        ));
    }
    if token > 0 {
        return Err((
            "upstream.sasl.token_file",
            format!("{mech} takes a password, not a token"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, ConfigError};

    /// The key a configuration is refused for, as kroute loads it: validated, then its TLS
    /// files loaded ([`crate::security::check_files`]).
    fn key_of(extra: &str) -> String {
        let text = format!("[upstream]\nbootstrap_servers = [\"b:9092\"]\n{extra}");
        match Config::parse(&text, "t").map(|config| crate::security::check_files(&config)) {
            Err(ConfigError::Invalid { key, .. }) | Ok(Err((key, _))) => key.to_string(),
            Err(e) => format!("other error: {e}"),
            Ok(Ok(())) => "accepted".into(),
        }
    }

    #[test]
    fn inconsistent_security_settings_name_their_key() {
        let sasl = "[upstream.sasl]\nmode = \"originate\"\n";
        assert_eq!(
            key_of(&format!(
                "{sasl}mechanism = \"SCRAM-SHA-256\"\nusername = \"u\"\n"
            )),
            "upstream.sasl.password_file"
        );
        assert_eq!(
            key_of(&format!(
                "{sasl}mechanism = \"PLAIN\"\npassword_env = \"P\"\n"
            )),
            "upstream.sasl.username"
        );
        assert_eq!(
            key_of(&format!(
                "{sasl}mechanism = \"PLAIN\"\nusername = \"u\"\npassword_env = \"P\"\npassword_file = \"/p\"\n"
            )),
            "upstream.sasl.password_file"
        );
        assert_eq!(
            key_of(&format!(
                "{sasl}mechanism = \"OAUTHBEARER\"\npassword_env = \"P\"\n"
            )),
            "upstream.sasl.token_file"
        );
        assert_eq!(
            key_of(&format!(
                "{sasl}mechanism = \"PLAIN\"\nusername = \"u\"\npassword_env = \"P\"\n"
            )),
            "accepted"
        );
        assert_eq!(
            key_of("[upstream.tls]\ncert_file = \"/c\"\n"),
            "upstream.tls.key_file"
        );
        assert_eq!(
            key_of("[upstream.tls]\nca_file = \"/nonexistent/ca.pem\"\n"),
            "upstream.tls"
        );
        assert_eq!(key_of(sasl), "upstream.sasl.mechanism");
        assert_eq!(
            key_of("[upstream.sasl]\nmode = \"passthrough\"\nusername = \"u\"\n"),
            "upstream.sasl.mechanism"
        );
        assert_eq!(
            key_of("[upstream.sasl]\nmode = \"passthrough\"\n"),
            "accepted"
        );
        let listen = "[listen.tls]\ncert_file = \"/c\"\nkey_file = \"/k\"\n";
        assert_eq!(
            key_of(&format!("{listen}client_auth = \"required\"\n")),
            "listen.tls.client_ca_file"
        );
        assert_eq!(
            key_of(&format!("{listen}client_ca_file = \"/ca\"\n")),
            "listen.tls.client_auth"
        );
    }
}
