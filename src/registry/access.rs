//! How orderly reaches the schema registry: its URL, the request timeout,
//! the credentials (basic authentication or a bearer token) and the CA that
//! verifies an https registry. Every HTTP client orderly has for the
//! registry (the decoder and the encoders through `schema_registry_converter`,
//! the schema guard, `config check`'s probe) is built by
//! [`Endpoint::http_client`], so they carry the same credentials and trust
//! the same CA.
//!
//! The credentials travel as a default `Authorization` header of the client,
//! marked sensitive (hyper and reqwest do not print it), rather than through
//! `SrSettings`' own authorization, whose `Debug` form would show the
//! password; no message built here holds the password or the token.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION};

use crate::config::{RegistryConfig, Secret};
use crate::registry::error::{RegistryError, Who};

/// The registry's address and how orderly proves who it is to it.
#[derive(Clone)]
pub struct Endpoint {
    url: String,
    timeout: Duration,
    auth: Auth,
    ca_location: Option<PathBuf>,
}

/// The credentials sent with every request.
#[derive(Clone)]
enum Auth {
    None,
    Basic { username: String, password: Secret },
    Bearer(Secret),
}

impl Endpoint {
    /// `url` without credentials, trusting the system's CAs.
    pub fn new(url: &str, timeout: Duration) -> Self {
        Endpoint {
            url: url.to_string(),
            timeout,
            auth: Auth::None,
            ca_location: None,
        }
    }

    /// The `[registry]` settings (validated when the configuration loaded:
    /// one kind of credentials, both halves of basic authentication).
    pub fn from_config(config: &RegistryConfig) -> Self {
        let mut endpoint = Endpoint::new(&config.url, Duration::from_millis(config.timeout_ms));
        let token = config.bearer_token.expose().trim();
        if !config.username.trim().is_empty() {
            endpoint = endpoint.with_basic_auth(config.username.trim(), config.password.clone());
        } else if !token.is_empty() {
            endpoint = endpoint.with_bearer_token(Secret::new(token));
        }
        if let Some(path) = config.ca_location() {
            endpoint = endpoint.with_ca_location(path);
        }
        endpoint
    }

    pub fn with_basic_auth(mut self, username: &str, password: Secret) -> Self {
        self.auth = Auth::Basic {
            username: username.to_string(),
            password,
        };
        self
    }

    pub fn with_bearer_token(mut self, token: Secret) -> Self {
        self.auth = Auth::Bearer(token);
        self
    }

    pub fn with_ca_location(mut self, path: &Path) -> Self {
        self.ca_location = Some(path.to_path_buf());
        self
    }

    /// The base URL, as configured (it holds no credentials).
    pub fn url(&self) -> &str {
        &self.url
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Credentials over plain HTTP: anyone on the path can read them.
    pub fn sends_credentials_in_clear_text(&self) -> bool {
        !matches!(self.auth, Auth::None) && self.url.starts_with("http://")
    }

    /// The one constructor of orderly's HTTP clients for the registry: the
    /// timeout, the credentials as a default header, and the CA file as the
    /// only trusted roots when one is set.
    pub(crate) fn http_client(&self) -> Result<reqwest::Client, RegistryError> {
        self.client_builder()?
            .build()
            .map_err(|e| RegistryError::Settings(format!("cannot set up the HTTP client: {e}")))
    }

    /// [`Self::http_client`]'s builder, for `SrSettingsBuilder::build_with`.
    pub(crate) fn client_builder(&self) -> Result<reqwest::ClientBuilder, RegistryError> {
        let mut builder = reqwest::Client::builder().timeout(self.timeout);
        if let Some(value) = self.authorization()? {
            let mut headers = HeaderMap::new();
            headers.insert(AUTHORIZATION, value);
            builder = builder.default_headers(headers);
        }
        if let Some(path) = &self.ca_location {
            builder = builder.tls_certs_only(read_ca(path)?);
        }
        Ok(builder)
    }

    /// The `Authorization` header's value, marked sensitive.
    fn authorization(&self) -> Result<Option<HeaderValue>, RegistryError> {
        let text = match &self.auth {
            Auth::None => return Ok(None),
            Auth::Basic { username, password } => {
                let pair = format!("{username}:{}", password.expose());
                format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(pair)
                )
            }
            Auth::Bearer(token) => format!("Bearer {}", token.expose()),
        };
        let mut value = HeaderValue::from_str(&text).map_err(|_| {
            RegistryError::Settings(match &self.auth {
                Auth::Bearer(_) => {
                    "registry.bearer_token holds characters an HTTP header cannot carry".into()
                }
                _ => "registry.username holds characters an HTTP header cannot carry".into(),
            })
        })?;
        value.set_sensitive(true);
        Ok(Some(value))
    }

    /// The registry answered 401 or 403 to these credentials. `detail` is
    /// what it said (the password and token scrubbed from it).
    pub(crate) fn refused(&self, status: u16, detail: &str) -> RegistryError {
        let who = match &self.auth {
            Auth::None => Who::Nobody,
            Auth::Basic { username, .. } => Who::User(username.clone()),
            Auth::Bearer(_) => Who::Token,
        };
        RegistryError::AccessRefused {
            url: self.url.clone(),
            status,
            who,
            detail: self.scrub(detail),
        }
    }

    /// The registry's TLS certificate did not verify.
    pub(crate) fn tls_failure(&self, detail: &str) -> RegistryError {
        RegistryError::TlsVerification {
            url: self.url.clone(),
            ca_location: self.ca_location.clone(),
            detail: self.scrub(detail),
        }
    }

    /// `text` with the password and the token replaced, in case a registry
    /// or a proxy echoes them back.
    pub(crate) fn scrub(&self, text: &str) -> String {
        let secret = match &self.auth {
            Auth::None => return text.to_string(),
            Auth::Basic { password, .. } => password.expose(),
            Auth::Bearer(token) => token.expose(),
        };
        if secret.is_empty() {
            text.to_string()
        } else {
            text.replace(secret, crate::config::REDACTED)
        }
    }
}

/// The certificates of a PEM file, or an error naming the path.
fn read_ca(path: &Path) -> Result<Vec<reqwest::Certificate>, RegistryError> {
    let failed = |message: String| RegistryError::CaFile {
        path: path.to_path_buf(),
        message,
    };
    let pem = std::fs::read(path).map_err(|e| failed(format!("cannot read it: {e}")))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem)
        .map_err(|e| failed(format!("not a PEM certificate file: {e}")))?;
    if certs.is_empty() {
        return Err(failed(
            "holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into(),
        ));
    }
    Ok(certs)
}

/// True when `error` (or one of its causes) is a failed TLS certificate
/// verification: OpenSSL's "certificate verify failed", which a wrong CA, a
/// self-signed certificate, an expired one and a host name the certificate
/// does not name all end in.
pub(crate) fn is_tls_verification(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if e.to_string().contains("certificate verify failed") {
            return true;
        }
        cause = e.source();
    }
    false
}

/// `error` and its causes on one line, each stated once.
pub(crate) fn chain_text(error: &(dyn std::error::Error + 'static)) -> String {
    crate::error_chain::error_text(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> RegistryConfig {
        let vars = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        crate::config::Config::from_layers(None, vars)
            .expect("config")
            .registry
    }

    #[test]
    fn basic_credentials_become_one_sensitive_header() {
        let endpoint = Endpoint::from_config(&config(&[
            ("ORDERLY_REGISTRY__USERNAME", "bob"),
            ("ORDERLY_REGISTRY__PASSWORD", "pw-secret"),
        ]));
        let value = endpoint.authorization().unwrap().expect("a header");
        assert!(value.is_sensitive());
        // base64("bob:pw-secret")
        assert_eq!(value.to_str().unwrap(), "Basic Ym9iOnB3LXNlY3JldA==");
        assert!(endpoint.sends_credentials_in_clear_text());
        let token = Endpoint::from_config(&config(&[("ORDERLY_REGISTRY__BEARER_TOKEN", " tok\n")]));
        assert_eq!(
            token.authorization().unwrap().unwrap().to_str().unwrap(),
            "Bearer tok"
        );
        let none = Endpoint::from_config(&config(&[]));
        assert!(none.authorization().unwrap().is_none());
        assert!(!none.sends_credentials_in_clear_text());
    }

    #[test]
    fn refusals_name_the_url_and_user_never_the_password() {
        let endpoint = Endpoint::from_config(&config(&[
            ("ORDERLY_REGISTRY__URL", "https://registry:8081"),
            ("ORDERLY_REGISTRY__USERNAME", "bob"),
            ("ORDERLY_REGISTRY__PASSWORD", "pw-secret"),
        ]));
        let text = endpoint.refused(401, "bad password pw-secret").to_string();
        assert!(
            text.contains("https://registry:8081")
                && text.contains("`bob`")
                && text.contains("401")
                && !text.contains("pw-secret"),
            "{text}"
        );
        let text = endpoint.refused(403, "").to_string();
        assert!(text.contains("denied user `bob`"), "{text}");
    }

    #[test]
    fn an_unreadable_or_empty_ca_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("absent.pem");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        for path in [&missing, &empty] {
            let endpoint = Endpoint::new("https://registry:8081", Duration::from_secs(1))
                .with_ca_location(path);
            match endpoint.http_client() {
                Err(e @ RegistryError::CaFile { .. }) => {
                    let text = e.to_string();
                    assert!(
                        text.contains("registry.ca_location")
                            && text.contains(&path.display().to_string()),
                        "{text}"
                    );
                }
                other => panic!("{}: {:?}", path.display(), other.err()),
            }
        }
    }
}
