//! `kroute check-config`: the effective configuration (file, overrides and defaults) as TOML,
//! with secrets redacted.
//!
//! Today the file holds no secret values, only where they are read from (`password_file`,
//! `token_env`, ...); redaction works on key names and URLs anyway, so that a secret-bearing
//! key added later, or a URL with credentials in it, is never printed.

use std::fmt::Write;

use toml::Value;

use super::Effective;

/// What stands in for a redacted value.
pub const REDACTED: &str = "<redacted>";

impl Effective {
    /// The effective configuration as TOML, secrets redacted, after a comment saying where
    /// it came from.
    pub fn to_redacted_toml(&self) -> Result<String, String> {
        let mut value = Value::try_from(&self.config).map_err(|e| e.to_string())?;
        redact(&mut value);
        let body = toml::to_string(&value).map_err(|e| e.to_string())?;
        let mut out = String::new();
        match &self.file {
            Some(path) => writeln!(out, "# effective configuration: {}", path.display()),
            None => writeln!(
                out,
                "# effective configuration: defaults (no configuration file)"
            ),
        }
        .map_err(|e| e.to_string())?;
        for o in &self.overrides {
            writeln!(out, "# {} set by {}", o.setting.key, o.source())
                .map_err(|e| e.to_string())?;
        }
        out.push_str(&body);
        Ok(out)
    }
}

/// Whether a key's value is a secret itself (not where a secret is read from).
fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["password", "secret", "token", "credential", "passphrase"]
        .iter()
        .any(|s| key.contains(s))
        && !["_file", "_env", "_url"].iter().any(|s| key.ends_with(s))
}

/// Replaces secret values in `value`, at any depth.
pub fn redact(value: &mut Value) {
    match value {
        Value::Table(table) => {
            for (key, v) in table.iter_mut() {
                if is_secret_key(key) {
                    *v = Value::String(REDACTED.into());
                } else {
                    redact(v);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact),
        Value::String(s) => {
            if let Some(clean) = redact_url(s) {
                *s = clean;
            }
        }
        _ => {}
    }
}

/// A URL without its user information and query (where credentials hide), if it had any.
fn redact_url(s: &str) -> Option<String> {
    let (scheme, rest) = s.split_once("://")?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    let host = authority.rsplit_once('@').map(|(_, h)| h);
    let (path, query) = match path.split_once('?') {
        Some((p, _)) => (p, Some(REDACTED)),
        None => (path, None),
    };
    if host.is_none() && query.is_none() {
        return None;
    }
    let mut out = format!("{scheme}://");
    if host.is_some() {
        out.push_str(REDACTED);
        out.push('@');
    }
    out.push_str(host.unwrap_or(authority));
    out.push_str(path);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_values_are_redacted_where_they_are_read_from_is_not() {
        let mut v: Value = toml::from_str(
            "[a]\npassword = \"hunter2\"\npassword_file = \"/p\"\nclient_secret = \"s\"\n\
             client_secret_env = \"SECRET\"\ntoken = \"t\"\nusername = \"u\"\n\
             token_endpoint_url = \"https://id:pw@auth.example/token?client_secret=s\"\n\
             [[b]]\nsasl_token = \"t2\"\n",
        )
        .unwrap();
        redact(&mut v);
        let text = toml::to_string(&v).unwrap();
        for secret in [
            "hunter2",
            "\"s\"",
            "\"t\"",
            "t2",
            "id:pw",
            "client_secret=s",
        ] {
            assert!(!text.contains(secret), "{secret} printed:\n{text}");
        }
        for kept in ["/p", "SECRET", "\"u\"", "auth.example/token"] {
            assert!(text.contains(kept), "{kept} lost:\n{text}");
        }
    }

    #[test]
    fn the_effective_config_prints_as_toml_that_loads_back() {
        let text = "[upstream]\nbootstrap_servers = [\"b:1\"]\n[upstream.sasl]\nmode = \"originate\"\n\
                    mechanism = \"OAUTHBEARER\"\n[upstream.sasl.oauth]\n\
                    token_endpoint_url = \"https://auth.example/token\"\nclient_id = \"kroute\"\n\
                    client_secret_env = \"OAUTH_SECRET\"\n[routing]\ninclude = [\"*\"]\n";
        let mut config = crate::config::Config::parse(text, "t").unwrap();
        let json = crate::config::Override::new("log.format", "json", true).unwrap();
        json.apply(&mut config).unwrap();
        let effective = Effective {
            config,
            file: None,
            overrides: vec![json],
        };
        let shown = effective.to_redacted_toml().unwrap();
        assert!(
            shown.contains("# log.format set by KROUTE_LOG_FORMAT"),
            "{shown}"
        );
        assert!(
            shown.contains("client_secret_env = \"OAUTH_SECRET\""),
            "{shown}"
        );
        // Every default is spelt out, and the text is a valid configuration again.
        assert!(shown.contains("drain_timeout_ms = 10000"), "{shown}");
        let again = crate::config::Config::parse(&shown, "shown").unwrap();
        assert_eq!(again.routing.include, ["*"]);
        assert_eq!(again.log.format, crate::config::LogFormat::Json);
    }

    #[test]
    fn plain_urls_and_hosts_are_left_alone() {
        assert_eq!(redact_url("https://auth.example/token"), None);
        assert_eq!(redact_url("broker:9092"), None);
        assert_eq!(
            redact_url("http://u:p@h:1/x").as_deref(),
            Some("http://<redacted>@h:1/x")
        );
    }
}
