//! The endpoint's routes and what they answer.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use super::guard::Guard;
use super::key;
use crate::engine::entity::Entity;
use crate::engine::store::Store;
use crate::observe::status::{self, Identity};
use crate::observe::{exposition, GroupOwners, Phase, Telemetry};
use crate::partitioner::{Partitioner, UnknownPartitioner};

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
    registry: prometheus_client::registry::Registry,
    /// Reads one entity's state as `/state/{key}` shows it.
    lookup: StateLookup,
    /// What `/state/{key}`'s answers call the entity and its key
    /// ([`Entity::NAME`], [`Entity::KEY_FIELD`]).
    pub(super) entity: (&'static str, &'static str),
    /// Runs `/explain/{key}` (`None`: a context without a processor's
    /// configuration, as in tests of the other routes).
    pub(super) explain: Option<super::explain::ExplainFn>,
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
type StateLookup = Arc<
    dyn Fn(
            &crate::engine::store::PartitionStore,
            &str,
        ) -> Result<Option<(serde_json::Value, usize)>, crate::engine::store::StoreError>
        + Send
        + Sync,
>;

fn lookup<E: Entity>(entity: E) -> StateLookup {
    Arc::new(move |tree, key| {
        Ok(tree.get::<E>(key)?.map(|state| {
            (
                serde_json::to_value(entity.view(&state)).unwrap_or_default(),
                state.inbox.len(),
            )
        }))
    })
}

fn entity_words<E: Entity>() -> (&'static str, &'static str) {
    (E::NAME, E::KEY_FIELD)
}

impl HttpContext {
    pub fn new(
        telemetry: Arc<Telemetry>,
        store: Store,
        identity: Identity,
        partitioner: Partitioner,
        owners: Arc<dyn GroupOwners>,
        stall_limit: Duration,
    ) -> Self {
        let registry = exposition::registry(telemetry.clone());
        HttpContext {
            telemetry,
            store,
            identity,
            partitioner,
            owners,
            stall_limit,
            guard: Guard::default(),
            registry,
            lookup: lookup(crate::domains::orders::Orders),
            entity: entity_words::<crate::domains::orders::Orders>(),
            explain: None,
            config: None,
        }
    }

    /// The same context reading `entity`'s states.
    fn of_entity<E: Entity>(self, entity: E) -> Self {
        HttpContext {
            lookup: lookup(entity),
            entity: entity_words::<E>(),
            ..self
        }
    }

    /// The same context answering `/explain/{key}` and the dead-letter
    /// page for a processor of `entity` configured by `config`.
    fn operating<E: Entity + Clone>(self, config: &crate::config::Config, entity: E) -> Self {
        HttpContext {
            explain: Some(super::explain::explainer(config.clone(), entity)),
            config: Some(Arc::new(config.clone())),
            ..self
        }
    }

    /// The same context behind `guard`.
    pub fn guarded(self, guard: Guard) -> Self {
        HttpContext { guard, ..self }
    }

    /// What the routes read of `processor`, whose telemetry and owners fill
    /// in as it runs.
    pub fn of<E: Entity>(
        processor: &crate::processor::Processor<E>,
    ) -> Result<Self, UnknownPartitioner> {
        let config = processor.config();
        // Validated with the configuration; checked again, as the routes depend on it.
        let partitioner = Partitioner::named(&config.kafka.input_partitioner)?;
        let identity = Identity {
            group: config.kafka.group_id.clone(),
            topic: config.kafka.input_topic.clone(),
            instance: format!("{}/{}", crate::kafka::hostname(), std::process::id()),
            outbox_enabled: config.output_topic().is_some(),
            outbox_delivery: if config.status_in_write_outs() {
                "write_out"
            } else {
                "relay"
            },
        };
        // A revoke blocks the poll loop for up to the shutdown deadline.
        let stall_limit =
            Duration::from_millis(config.processing.shutdown_timeout_ms) + Duration::from_secs(10);
        let guard = Guard::new(
            &config.http.bearer_token,
            config.http.open_probes,
            config.http.open_metrics,
        );
        Ok(HttpContext::new(
            processor.telemetry(),
            processor.store().clone(),
            identity,
            partitioner,
            processor.owners(),
            stall_limit,
        )
        .of_entity(processor.entity().clone())
        .operating(config, processor.entity().clone())
        .guarded(guard))
    }
}

pub(super) type Ctx = State<Arc<HttpContext>>;

const STATUS_PAGE: &str = include_str!("status.html");

pub(crate) fn router(context: Arc<HttpContext>) -> Router {
    let guard = context.guard.clone();
    Router::new()
        .route("/", get(page))
        .route("/api/status", get(api_status))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/state", get(state))
        .route("/state/", get(state))
        .route("/state/{*rest}", get(state))
        .route("/dlq", get(super::dlq::page))
        .route("/api/dlq", get(super::dlq::list))
        .route("/api/dlq/letter/{*rest}", get(super::dlq::letter))
        .route("/api/dlq/redrive", axum::routing::post(super::dlq::redrive))
        .route("/explain", get(super::explain::explain))
        .route("/explain/", get(super::explain::explain))
        .route("/explain/{*rest}", get(super::explain::explain))
        .fallback(not_found)
        .with_state(context)
        .layer(axum::middleware::from_fn_with_state(
            guard,
            super::guard::check,
        ))
}

fn text(status: StatusCode, body: String) -> Response {
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

async fn not_found(State(ctx): Ctx, uri: Uri) -> Response {
    let (_, key_field) = ctx.entity;
    text(
        StatusCode::NOT_FOUND,
        format!(
            "no such page: {}\nendpoints: / /dlq /api/status /api/dlq /metrics /healthz /readyz /state/{{{key_field}}} /explain/{{{key_field}}}\n",
            uri.path()
        ),
    )
}

async fn page() -> Response {
    html(STATUS_PAGE)
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

async fn api_status(State(ctx): Ctx) -> Response {
    let mut response = Json(status::snapshot(&ctx.telemetry, &ctx.identity)).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

async fn metrics(State(ctx): Ctx) -> Response {
    match exposition::render(&ctx.registry) {
        Ok(body) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, exposition::CONTENT_TYPE)],
            body,
        )
            .into_response(),
        Err(_) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "cannot encode the metrics\n".into(),
        ),
    }
}

async fn healthz(State(ctx): Ctx) -> Response {
    let stalled = ctx.telemetry.since_poll();
    if stalled > ctx.stall_limit {
        return text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the poll loop has not turned for {:.1} s (limit {:.1} s)\n",
                stalled.as_secs_f64(),
                ctx.stall_limit.as_secs_f64()
            ),
        );
    }
    text(StatusCode::OK, "ok\n".into())
}

async fn readyz(State(ctx): Ctx) -> Response {
    match status::not_ready(&ctx.telemetry) {
        Some(reason) => text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}\n"),
        ),
        None => text(
            StatusCode::OK,
            format!(
                "ready: {} partitions consuming\n",
                ctx.telemetry.partitions().len()
            ),
        ),
    }
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

/// `GET /state/{key}`: see `config/default.toml`, `[http]`.
async fn state(State(ctx): Ctx, uri: Uri) -> Response {
    let (name, key_field) = ctx.entity;
    let (entity_key, partition) = match owned_key(&ctx, &uri, "/state").await {
        Ok(found) => found,
        Err(answer) => return answer,
    };
    let (store, topic, id) = (
        ctx.store.clone(),
        ctx.identity.topic.clone(),
        entity_key.clone(),
    );
    let read = ctx.lookup.clone();
    let found =
        tokio::task::spawn_blocking(move || read(&store.partition(&topic, partition)?, &id)).await;
    match found {
        Ok(Ok(Some((mut body, inbox_entries)))) => {
            if let Some(object) = body.as_object_mut() {
                object.insert("partition".into(), json!(partition));
                object.insert("inbox_entries".into(), json!(inbox_entries));
            }
            Json(body).into_response()
        }
        Ok(Ok(None)) => json_error(
            StatusCode::NOT_FOUND,
            json!({ "error": format!("no such {name} in this instance's store"), key_field: entity_key, "partition": partition }),
        ),
        Ok(Err(error)) => json_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({ "error": format!("store: {error}") }),
        ),
        Err(_) => json_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({ "error": "the store lookup failed" }),
        ),
    }
}
