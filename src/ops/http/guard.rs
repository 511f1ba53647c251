//! The endpoint's guard: with `http.bearer_token` set, every route but the
//! status page's static HTML (and, as configured, the probes and the
//! metrics) answers 401 without `Authorization: Bearer <token>`.
//!
//! A bearer token rather than mutual TLS: the probes of Kubernetes and
//! Prometheus' scrapers send a header from a Secret with one line of
//! configuration, a reverse proxy or a service mesh that terminates TLS in
//! front of the endpoint keeps working, and there is no certificate to
//! rotate in the process. The token is compared in constant time and never
//! logged or printed (`config show` redacts it).

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Who may read what.
#[derive(Clone, Default)]
pub struct Guard {
    /// `None`: every route is open.
    token: Option<String>,
    /// `/healthz` and `/readyz` answer without the token.
    open_probes: bool,
    /// `/metrics` answers without the token.
    open_metrics: bool,
}

impl Guard {
    /// A guard requiring `token` (none when empty).
    pub fn new(token: &str, open_probes: bool, open_metrics: bool) -> Self {
        // Trimmed: a token read from a file or a Secret often ends with a newline.
        let token = Some(token.trim().to_string()).filter(|t| !t.is_empty());
        Guard {
            token,
            open_probes,
            open_metrics,
        }
    }

    /// True when a token is required somewhere.
    pub fn is_on(&self) -> bool {
        self.token.is_some()
    }

    /// Whether `path` answers without the token.
    fn is_open(&self, path: &str) -> bool {
        match path {
            // The pages' static HTML holds no data; what they show comes
            // from /api/..., which the token protects.
            "/" | "/dlq" => true,
            "/healthz" | "/readyz" => self.open_probes,
            "/metrics" => self.open_metrics,
            _ => false,
        }
    }

    /// Whether the request carries the token.
    fn admits(&self, headers: &HeaderMap) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        let Some(given) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
        else {
            return false;
        };
        let Some(given) = given
            .strip_prefix("Bearer ")
            .or_else(|| given.strip_prefix("bearer "))
        else {
            return false;
        };
        constant_time_eq(given.trim().as_bytes(), token.as_bytes())
    }
}

/// Compares without returning early on the first differing byte.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The middleware: passes admitted requests on, answers 401 otherwise.
pub(crate) async fn check(State(guard): State<Guard>, request: Request, next: Next) -> Response {
    if guard.is_open(request.uri().path()) || guard.admits(request.headers()) {
        return next.run(request).await;
    }
    let mut response = (
        StatusCode::UNAUTHORIZED,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "this endpoint requires `Authorization: Bearer <token>` (http.bearer_token)\n",
    )
        .into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"orderly\""),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(value).expect("header"),
        );
        headers
    }

    #[test]
    fn without_a_token_everything_is_open() {
        let guard = Guard::new("", false, false);
        assert!(!guard.is_on());
        assert!(guard.admits(&HeaderMap::new()));
    }

    #[test]
    fn the_token_is_required_where_configured() {
        let guard = Guard::new("s3cret-token\n", true, false);
        assert!(guard.is_on());
        assert!(guard.is_open("/") && guard.is_open("/healthz") && guard.is_open("/readyz"));
        assert!(
            !guard.is_open("/metrics")
                && !guard.is_open("/api/status")
                && !guard.is_open("/state/o-1")
        );
        assert!(guard.admits(&headers("Bearer s3cret-token")));
        assert!(!guard.admits(&headers("Bearer s3cret-tokem")));
        assert!(!guard.admits(&headers("Bearer s3cret")));
        assert!(!guard.admits(&headers("Basic czNjcmV0LXRva2Vu")));
        assert!(!guard.admits(&HeaderMap::new()));
        let closed = Guard::new("t", false, true);
        assert!(!closed.is_open("/healthz") && closed.is_open("/metrics"));
    }
}
