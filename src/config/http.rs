//! `[http]`: the HTTP endpoint.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// Where `orderly run` serves `/metrics`, `/healthz`, `/readyz`,
    /// `/state/{order_id}` and the status page; `""` is off.
    pub address: String,
    /// With a value, every route but the status page's HTML (and the
    /// probes and metrics, as configured below) requires
    /// `Authorization: Bearer <token>`; `""` is none.
    pub bearer_token: String,
    /// `/healthz` and `/readyz` answer without the token.
    pub open_probes: bool,
    /// `/metrics` answers without the token.
    pub open_metrics: bool,
}
