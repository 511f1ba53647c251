//! `GET /explain/{key}?from=&max_records=`: `orderly explain` on the member
//! that owns the key's partition, its stored state read from its own store
//! (see [`crate::ops::explain`]). Behind the bearer token like `/state`.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::context::{json_error, owned_key, Ctx, ExplainFn};
use crate::config::Config;
use crate::engine::entity::Entity;
use crate::ops::explain::Start;

/// Most records of the key one request keeps (the CLI has no such bound).
const MAX_RECORDS: usize = 100_000;

/// The explainer of a processor of `entity` configured by `config`.
pub(super) fn explainer<E: Entity + Clone>(config: Config, entity: E) -> ExplainFn {
    let config = Arc::new(config);
    Arc::new(move |key, partition, start, max_records, store| {
        let (config, entity) = (config.clone(), entity.clone());
        Box::pin(async move {
            let topic = config.kafka.input_topic.clone();
            let read = {
                let key = key.clone();
                tokio::task::spawn_blocking(move || {
                    store.partition(&topic, partition)?.get::<E>(&key)
                })
                .await
                .map_err(|e| format!("the store lookup failed: {e}"))?
            };
            let stored = read
                .map(|state| (state, "this member's store".to_string()))
                .map_err(|e| format!("not read: {e}"));
            let report =
                crate::ops::explain::explain(&config, &entity, &key, start, max_records, stored)
                    .await
                    .map_err(|e| format!("{e:#}"))?;
            serde_json::to_value(&report).map_err(|e| e.to_string())
        })
    })
}

pub(super) async fn explain(State(ctx): Ctx, uri: Uri) -> Response {
    let query: HashMap<&str, String> = uri
        .query()
        .unwrap_or_default()
        .split('&')
        .filter_map(|pair| {
            let (name, value) = pair.split_once('=')?;
            Some((name, super::key::parse(&value.replace('+', " ")).ok()?))
        })
        .collect();
    let Some(run) = ctx.explain.clone() else {
        return json_error(
            StatusCode::NOT_FOUND,
            json!({ "error": "this endpoint does not explain keys" }),
        );
    };
    let start = match query.get("from").map(|f| f.parse::<Start>()) {
        None => Start::Earliest,
        Some(Ok(start)) => start,
        Some(Err(error)) => {
            return json_error(
                StatusCode::BAD_REQUEST,
                json!({ "error": error.replace("--from", "from") }),
            )
        }
    };
    let max_records = match query.get("max_records").map(|n| n.parse::<usize>()) {
        None => 10_000,
        Some(Ok(n)) if (1..=MAX_RECORDS).contains(&n) => n,
        Some(_) => {
            return json_error(
                StatusCode::BAD_REQUEST,
                json!({ "error": format!("max_records is a number from 1 to {MAX_RECORDS}") }),
            )
        }
    };
    let (key, partition) = match owned_key(&ctx, &uri, "/explain").await {
        Ok(found) => found,
        Err(answer) => return answer,
    };
    match run(key, partition, start, max_records, ctx.store.clone()).await {
        Ok(report) => Json(report).into_response(),
        Err(error) => json_error(StatusCode::BAD_GATEWAY, json!({ "error": error })),
    }
}
