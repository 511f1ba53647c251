//! What every route reads ([`HttpContext`]) and the answers the routes'
//! modules share: errors as JSON, the built-in pages, the key of a
//! `/{route}/{key}` request this member owns.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::future::BoxFuture;
use serde_json::json;

use super::guard::Guard;
use super::key;
use crate::engine::store::Store;
use crate::observe::status::Identity;
use crate::observe::{GroupOwners, Phase, Telemetry};
use crate::ops::explain::Start;
use crate::partitioner::Partitioner;

/// What the routes read.
pub struct HttpContext {
    pub telemetry: Arc<Telemetry>,
    pub store: Store,
    pub identity: Identity,
    pub(crate) partitioner: Partitioner,
    pub owners: Arc<dyn GroupOwners>,
    /// The poll loop may be blocked this long by a revoke's drain and still
    /// be healthy.
    pub(crate) stall_limit: Duration,
    /// Who may read what (`http.bearer_token`).
    pub guard: Guard,
    pub(super) registry: prometheus_client::registry::Registry,
    /// Reads one entity's state as `/state/{key}` shows it.
    pub(super) lookup: StateLookup,
    /// What `/state/{key}`'s answers call the entity and its key
    /// ([`Entity::NAME`], [`Entity::KEY_FIELD`]).
    pub(super) entity: (&'static str, &'static str),
    /// Runs `/explain/{key}` (`None`: a context without a processor's
    /// configuration, as in tests of the other routes).
    pub(super) explain: Option<ExplainFn>,
    /// The processor's configuration, for the dead-letter page's reads and
    /// re-drives (`None`: no processor, as in tests of the other routes).
    pub(super) config: Option<Arc<crate::config::Config>>,
}

impl HttpContext {
    /// The entity's key field, as `/state/{key}` is named for it.
    pub(super) fn key_field(&self) -> &'static str {
        self.entity.1
    }
}

/// One entity's view (JSON) and inbox entries, from a partition's tree.
pub(super) type StateLookup = Arc<
    dyn Fn(
            &crate::engine::store::PartitionStore,
            &str,
        ) -> Result<Option<(serde_json::Value, usize)>, crate::engine::store::StoreError>
        + Send
        + Sync,
>;

/// Explains one key of a partition this member owns: (key, partition,
/// start, max records, the member's store) to the report as JSON, or what
/// went wrong.
pub(crate) type ExplainFn = Arc<
    dyn Fn(
            String,
            i32,
            Start,
            usize,
            Store,
        ) -> BoxFuture<'static, Result<serde_json::Value, String>>
        + Send
        + Sync,
>;

pub(super) type Ctx = State<Arc<HttpContext>>;

pub(super) fn text(status: StatusCode, body: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}

pub(super) fn json_error(status: StatusCode, body: serde_json::Value) -> Response {
    (status, Json(body)).into_response()
}

/// A page built into the binary, never cached (what it shows comes from
/// the API).
pub(super) fn html(body: &'static str) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// The key of a `/{route}/{key}` request and its partition, when this
/// instance owns that partition and has restored it; otherwise the answer
/// to send (400 for a bad key, 421 naming the owner, 503 while not
/// connected or restoring).
pub(super) async fn owned_key(
    ctx: &HttpContext,
    uri: &Uri,
    route: &str,
) -> Result<(String, i32), Response> {
    let segment = uri
        .path()
        .strip_prefix(route)
        .unwrap_or_default()
        .trim_start_matches('/');
    let (name, key_field) = ctx.entity;
    let entity_key = key::parse(segment).map_err(|error| {
        json_error(
            StatusCode::BAD_REQUEST,
            json!({ "error": error.message(key_field) }),
        )
    })?;
    let partitions = ctx.telemetry.input_partitions();
    if partitions == 0 {
        return Err(json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "error": "not connected to the input topic yet" }),
        ));
    }
    let partition = ctx.partitioner.partition(entity_key.as_bytes(), partitions);
    let Some(owned) = ctx.telemetry.partition(partition) else {
        let owners = ctx.owners.clone();
        let owner = tokio::task::spawn_blocking(move || owners.owner(partition)).await;
        let owner = match owner {
            Ok(Ok(member)) => member,
            Ok(Err(error)) => {
                tracing::debug!(%error, "group metadata lookup failed");
                None
            }
            Err(_) => None,
        };
        return Err(json_error(
            StatusCode::MISDIRECTED_REQUEST,
            json!({
                "error": format!("this instance does not own the {name}'s partition"),
                key_field: entity_key,
                "partition": partition,
                "owner": owner,
            }),
        ));
    };
    if owned.phase() == Phase::Restoring {
        let mut response = json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "error": format!("the {name}'s partition is restoring from the changelog; retry shortly"), "partition": partition }),
        );
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return Err(response);
    }
    Ok((entity_key, partition))
}
