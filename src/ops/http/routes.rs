//! The endpoint's routes and what they answer.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use super::context::{html, json_error, owned_key, text, Ctx, HttpContext, StateLookup};
use super::guard::Guard;
use crate::engine::entity::Entity;
use crate::engine::store::Store;
use crate::observe::status::{self, Identity};
use crate::observe::{exposition, GroupOwners, Telemetry};
use crate::partitioner::{Partitioner, UnknownPartitioner};

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
            outbox_delivery: crate::processor::Strategy::delivery_word(config),
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
