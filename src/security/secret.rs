//! Secrets (passwords, tokens) and where they come from.
//!
//! A [`Secret`] never prints its value: its `Debug` and `Display` say `<redacted>`, so a secret
//! that ends up in a log line or an error message by accident leaks nothing.

use std::fmt;
use std::path::PathBuf;

/// A password or token. Read it with [`Secret::expose`], only where it is sent.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Where a secret is read from. Read on every use, so a rotated file takes effect on the next
/// authentication without a restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    File(PathBuf),
    Env(String),
}

impl SecretSource {
    /// The first of `file` and `env` that is set.
    pub fn from_options(file: Option<&PathBuf>, env: Option<&String>) -> Option<SecretSource> {
        file.map(|f| SecretSource::File(f.clone()))
            .or_else(|| env.map(|e| SecretSource::Env(e.clone())))
    }

    /// Reads the secret; the error names the source, never the value. Trailing line breaks
    /// (as `echo` and Kubernetes secret files leave them) are not part of the secret.
    pub fn read(&self) -> Result<Secret, String> {
        let raw = match self {
            SecretSource::File(path) => std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?,
            SecretSource::Env(name) => std::env::var(name)
                .map_err(|_| format!("environment variable {name} is not set"))?,
        };
        let value = raw.trim_end_matches(['\r', '\n']);
        if value.is_empty() {
            return Err(format!("{} is empty", self.describe()));
        }
        Ok(Secret::new(value))
    }

    fn describe(&self) -> String {
        match self {
            SecretSource::File(p) => p.display().to_string(),
            SecretSource::Env(n) => format!("environment variable {n}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_never_prints() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?} {s}"), "<redacted> <redacted>");
        assert_eq!(s.expose(), "hunter2");
    }

    #[test]
    fn sources_trim_line_breaks_and_name_themselves_on_error() {
        let dir = std::env::temp_dir().join(format!("kroute-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("pw");
        std::fs::write(&file, "s3cret\n").unwrap();
        let source = SecretSource::File(file.clone());
        assert_eq!(source.read().unwrap().expose(), "s3cret");
        std::fs::write(&file, "\n").unwrap();
        assert!(source.read().unwrap_err().contains("is empty"));
        let missing = SecretSource::Env("KROUTE_TEST_NO_SUCH_VARIABLE".into());
        assert!(
            missing
                .read()
                .unwrap_err()
                .contains("KROUTE_TEST_NO_SUCH_VARIABLE")
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
