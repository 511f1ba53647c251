//! The dead-letter page and its API: `GET /dlq` (the page's HTML, open like
//! the status page's), `GET /api/dlq` (a page of letters, newest first,
//! filtered by kind, source partition and pending), `GET
//! /api/dlq/letter/{partition}/{offset}` (one letter whole, its body as
//! JSON where the registry knows its schema) and `POST /api/dlq/redrive`
//! (`{"sources": ["P:O", ...]}`: re-drives those letters' records through
//! `orderly dlq replay`'s own path). A re-drive writes to the input topic,
//! so it needs `http.bearer_token` set (and sent): without a token the
//! endpoint answers 403 rather than let any page a browser has open post
//! to it.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::context::{json_error, Ctx};
use crate::ops::redrive::browse::{self, Filter, PER_PAGE};
use crate::ops::redrive::{ReplayRequest, Selection, SourcePos};

const DLQ_PAGE: &str = include_str!("dlq.html");

/// Letters one re-drive request may name.
const MAX_REDRIVE: usize = 1_000;

pub(super) async fn page() -> Response {
    super::context::html(DLQ_PAGE)
}

/// The answer of an endpoint without a processor's configuration.
fn no_config() -> Response {
    json_error(
        StatusCode::NOT_FOUND,
        json!({ "error": "this endpoint has no dead-letter topic to show" }),
    )
}

/// The query's `name=value` pairs, percent-decoded.
fn query(uri: &Uri) -> HashMap<&str, String> {
    uri.query()
        .unwrap_or_default()
        .split('&')
        .filter_map(|pair| {
            let (name, value) = pair.split_once('=')?;
            Some((name, super::key::parse(&value.replace('+', " ")).ok()?))
        })
        .collect()
}

pub(super) async fn list(State(ctx): Ctx, uri: Uri) -> Response {
    let Some(config) = ctx.config.clone() else {
        return no_config();
    };
    let q = query(&uri);
    let number = |name: &str| q.get(name).map(|v| v.parse::<usize>());
    let filter = Filter {
        kind: q.get("kind").filter(|k| !k.is_empty()).cloned(),
        partition: match q
            .get("partition")
            .filter(|p| !p.is_empty())
            .map(|p| p.parse())
        {
            None => None,
            Some(Ok(p)) => Some(p),
            Some(Err(_)) => {
                return json_error(
                    StatusCode::BAD_REQUEST,
                    json!({ "error": "partition is a number" }),
                )
            }
        },
        pending: q.get("pending").is_some_and(|v| v == "1" || v == "true"),
        page: match number("page") {
            None => 0,
            Some(Ok(n)) => n,
            Some(Err(_)) => {
                return json_error(
                    StatusCode::BAD_REQUEST,
                    json!({ "error": "page is a number" }),
                )
            }
        },
        per_page: match number("per_page") {
            None => PER_PAGE,
            Some(Ok(n)) if n > 0 => n,
            Some(_) => {
                return json_error(
                    StatusCode::BAD_REQUEST,
                    json!({ "error": "per_page is a number above 0" }),
                )
            }
        },
    };
    let listed =
        tokio::task::spawn_blocking(move || crate::ops::redrive::list(&config, None)).await;
    match listed {
        Ok(Ok(listing)) => no_store(Json(browse::page(listing, &filter)).into_response()),
        Ok(Err(error)) => json_error(
            StatusCode::BAD_GATEWAY,
            json!({ "error": format!("reading the dead-letter topic: {error}") }),
        ),
        Err(_) => json_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({ "error": "the dead-letter read failed" }),
        ),
    }
}

pub(super) async fn letter(State(ctx): Ctx, uri: Uri) -> Response {
    let Some(config) = ctx.config.clone() else {
        return no_config();
    };
    let position = uri
        .path()
        .strip_prefix("/api/dlq/letter/")
        .and_then(|rest| rest.split_once('/'))
        .and_then(|(p, o)| Some((p.parse::<i32>().ok()?, o.parse::<i64>().ok()?)));
    let Some((partition, offset)) = position else {
        return json_error(
            StatusCode::BAD_REQUEST,
            json!({ "error": "use /api/dlq/letter/{dlq_partition}/{dlq_offset}" }),
        );
    };
    let read = {
        let config = config.clone();
        tokio::task::spawn_blocking(move || browse::read_one(&config, partition, offset)).await
    };
    let (mut detail, payload) = match read {
        Ok(Ok(Some(found))) => found,
        Ok(Ok(None)) => {
            return json_error(
                StatusCode::NOT_FOUND,
                json!({ "error": format!("no dead letter at {partition}:{offset}") }),
            )
        }
        Ok(Err(error)) => {
            return json_error(
                StatusCode::BAD_GATEWAY,
                json!({ "error": format!("reading the dead-letter topic: {error}") }),
            )
        }
        Err(_) => {
            return json_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                json!({ "error": "the dead-letter read failed" }),
            )
        }
    };
    match crate::registry::Registry::from_config(&config.registry) {
        Ok(registry) => match browse::body_as_json(&registry, payload.as_deref()).await {
            Ok(body) => detail.body = Some(body),
            Err(why) => detail.body_error = Some(why),
        },
        Err(error) => detail.body_error = Some(format!("no registry client: {error}")),
    }
    no_store(Json(detail).into_response())
}

#[derive(serde::Deserialize)]
struct RedriveBody {
    sources: Vec<String>,
}

pub(super) async fn redrive(State(ctx): Ctx, body: Bytes) -> Response {
    let Some(config) = ctx.config.clone() else {
        return no_config();
    };
    if !ctx.guard.is_on() {
        return json_error(
            StatusCode::FORBIDDEN,
            json!({ "error": "re-driving from the page writes to the input topic: set http.bearer_token (and send it) to allow it, or use `orderly dlq replay --source P:O`" }),
        );
    }
    let asked: RedriveBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => {
            return json_error(
                StatusCode::BAD_REQUEST,
                json!({ "error": format!("the body is {{\"sources\": [\"P:O\", ...]}}: {e}") }),
            )
        }
    };
    if asked.sources.is_empty() || asked.sources.len() > MAX_REDRIVE {
        return json_error(
            StatusCode::BAD_REQUEST,
            json!({ "error": format!("name 1 to {MAX_REDRIVE} sources") }),
        );
    }
    let mut sources = Vec::with_capacity(asked.sources.len());
    for text in &asked.sources {
        match text.parse::<SourcePos>() {
            Ok(source) => sources.push(source),
            Err(e) => {
                return json_error(
                    StatusCode::BAD_REQUEST,
                    json!({ "error": format!("{text}: {e}") }),
                )
            }
        }
    }
    let request = ReplayRequest {
        selection: Selection::Sources(sources),
        dry_run: false,
        max_redrives: crate::ops::redrive::DEFAULT_MAX_REDRIVES,
    };
    tracing::info!(
        letters = request_len(&request),
        "re-driving dead letters from the page"
    );
    let done =
        tokio::task::spawn_blocking(move || crate::ops::redrive::replay(&config, &request)).await;
    match done {
        Ok(Ok(report)) => Json(report).into_response(),
        Ok(Err(error)) => json_error(
            StatusCode::BAD_GATEWAY,
            json!({ "error": format!("re-drive: {error}") }),
        ),
        Err(_) => json_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({ "error": "the re-drive failed" }),
        ),
    }
}

fn request_len(request: &ReplayRequest) -> usize {
    match &request.selection {
        Selection::Sources(s) => s.len(),
        Selection::All => 0,
    }
}

fn no_store(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
