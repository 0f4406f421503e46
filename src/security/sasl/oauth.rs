//! OAUTHBEARER tokens from an OAuth 2 token endpoint: the client-credentials grant
//! (RFC 6749 §4.4), as Kafka's own `ClientCredentialsJwtRetriever` does it.
//!
//! kroute POSTs `grant_type=client_credentials` (and the scope, if any) with the client id and
//! secret as HTTP Basic credentials, and keeps the `access_token` it gets until 80% of its
//! `expires_in` has passed, so every upstream login and re-authentication does not cost a
//! round trip to the identity provider. HTTP is ureq's job (blocking, so run on tokio's
//! blocking pool); TLS is rustls with the ring provider, trusting `ca_file` or Mozilla's roots.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use serde::Deserialize;

use crate::config::OAuthConfig;
use crate::security::certs::load_certs;
use crate::security::secret::{Secret, SecretSource};

/// A token is used for this share of its lifetime, then fetched anew.
const USE_FOR: f64 = 0.8;
/// Without `expires_in`, a token is kept this long.
const DEFAULT_LIFETIME: Duration = Duration::from_secs(300);

pub struct TokenEndpoint {
    url: String,
    client_id: String,
    client_secret: SecretSource,
    scope: Option<String>,
    agent: ureq::Agent,
    cached: Mutex<Option<(Secret, Instant)>>,
}

#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    #[serde(default)]
    expires_in: Option<u64>,
}

impl TokenEndpoint {
    pub fn new(c: &OAuthConfig) -> Result<TokenEndpoint, String> {
        let mut tls = ureq::tls::TlsConfig::builder().provider(ureq::tls::TlsProvider::Rustls);
        if let Some(ca) = &c.ca_file {
            let certs: Vec<_> = load_certs(ca)?
                .into_iter()
                .map(|der| ureq::tls::Certificate::from_der(der.as_ref()).to_owned())
                .collect();
            tls = tls.root_certs(ureq::tls::RootCerts::new_with_certs(&certs));
        }
        let agent = ureq::Agent::config_builder()
            .tls_config(tls.build())
            .timeout_global(Some(Duration::from_secs(10)))
            .build()
            .into();
        Ok(TokenEndpoint {
            url: c.token_endpoint_url.clone(),
            client_id: c.client_id.clone(),
            client_secret: SecretSource::from_options(
                c.client_secret_file.as_ref(),
                c.client_secret_env.as_ref(),
            )
            .ok_or("no client secret source")?,
            scope: c.scope.clone(),
            agent,
            cached: Mutex::new(None),
        })
    }

    /// A token valid for a while yet: the cached one, or a fresh one from the endpoint.
    pub async fn token(self: &Arc<Self>) -> Result<Secret, String> {
        if let Ok(cached) = self.cached.lock()
            && let Some((token, until)) = cached.as_ref()
            && Instant::now() < *until
        {
            return Ok(token.clone());
        }
        let endpoint = self.clone();
        let (token, lifetime) = tokio::task::spawn_blocking(move || endpoint.fetch())
            .await
            .map_err(|e| format!("token request task: {e}"))??;
        if let Ok(mut cached) = self.cached.lock() {
            *cached = Some((token.clone(), Instant::now() + lifetime.mul_f64(USE_FOR)));
        }
        Ok(token)
    }

    /// One client-credentials request. Errors name the endpoint and the HTTP outcome, never
    /// the secret or the token.
    fn fetch(&self) -> Result<(Secret, Duration), String> {
        let secret = self.client_secret.read()?;
        let basic = base64::engine::general_purpose::STANDARD.encode(format!(
            "{}:{}",
            self.client_id,
            secret.expose()
        ));
        let mut form = vec![("grant_type", "client_credentials")];
        if let Some(scope) = &self.scope {
            form.push(("scope", scope));
        }
        let mut response = self
            .agent
            .post(&self.url)
            .header("Authorization", &format!("Basic {basic}"))
            .header("Accept", "application/json")
            .send_form(form)
            .map_err(|e| format!("token endpoint {}: {e}", self.url))?;
        let body: TokenResponse = response
            .body_mut()
            .read_json()
            .map_err(|e| format!("token endpoint {}: bad answer: {e}", self.url))?;
        if body.access_token.is_empty() {
            return Err(format!("token endpoint {}: empty access_token", self.url));
        }
        let lifetime = body
            .expires_in
            .map_or(DEFAULT_LIFETIME, Duration::from_secs);
        Ok((Secret::new(body.access_token), lifetime))
    }
}
