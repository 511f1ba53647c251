//! A TEST DOUBLE of a Confluent-compatible schema registry: no Confluent
//! registry can be installed on the test machines, so the suites start this
//! one. It speaks the REST endpoints `schema_registry_converter` calls
//! (register, look up, latest, by version, by id) over real HTTP, keeps
//! schemas in memory, assigns ids from 1, and does no compatibility checks.
//! Tests can make it answer look-ups by id the way a misconfigured
//! deployment would ([`ByIdMode`]). Not for production use.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

/// How the double answers `GET /schemas/ids/{id}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ByIdMode {
    /// As a Confluent registry does: the schema, or 404 with error code
    /// 40403 ("schema not found").
    #[default]
    Normal,
    /// 404 with a registry error body of another code (40401 is "subject
    /// not found"), for every id.
    NotFoundWithCode(u32),
    /// 404 with a plain HTML page, as an ingress or a wrong base path
    /// answers, for every id.
    HtmlNotFound,
}

#[derive(Default)]
struct Inner {
    mode: ByIdMode,
    /// id -> schema text
    by_id: HashMap<u32, String>,
    /// subject -> versions (schema text, id), version n at index n-1
    subjects: HashMap<String, Vec<(String, u32)>>,
    /// Requests answered, by kind, so tests can see the cache work.
    requests: HashMap<&'static str, u64>,
}

type Shared = Arc<Mutex<Inner>>;

/// A running registry double; stops when dropped.
pub struct RegistryDouble {
    pub url: String,
    inner: Shared,
    _runtime: tokio::runtime::Runtime,
}

impl RegistryDouble {
    /// Starts on a free loopback port, on its own runtime thread, so
    /// synchronous tests and child processes can use it.
    pub fn start() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("registry double runtime");
        let inner: Shared = Arc::default();
        let app = Router::new()
            .route("/schemas/ids/{id}", get(by_id))
            .route("/subjects", get(subjects))
            .route("/subjects/{subject}/versions", post(register).get(versions))
            .route("/subjects/{subject}", post(lookup))
            .route("/subjects/{subject}/versions/{version}", get(by_version))
            .with_state(inner.clone());
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(SocketAddr::from((
                [127, 0, 0, 1],
                0,
            ))))
            .expect("bind registry double");
        let addr = listener.local_addr().expect("registry double address");
        runtime.spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        RegistryDouble {
            url: format!("http://{addr}"),
            inner,
            _runtime: runtime,
        }
    }

    /// Changes how look-ups by id are answered from now on.
    pub fn set_by_id_mode(&self, mode: ByIdMode) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.mode = mode;
        }
    }

    /// How many requests of `kind` ("by_id", "register", ...) were answered.
    pub fn requests(&self, kind: &str) -> u64 {
        self.inner
            .lock()
            .map(|i| i.requests.get(kind).copied().unwrap_or(0))
            .unwrap_or(0)
    }
}

fn not_found(code: u32, message: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({ "error_code": code, "message": message })),
    )
        .into_response()
}

async fn by_id(State(inner): State<Shared>, Path(id): Path<u32>) -> Response {
    let mut inner = inner.lock().expect("registry double lock");
    *inner.requests.entry("by_id").or_default() += 1;
    match inner.mode {
        ByIdMode::Normal => {}
        ByIdMode::NotFoundWithCode(code) => return not_found(code, "Subject not found"),
        ByIdMode::HtmlNotFound => {
            let page = "<html><head><title>404 Not Found</title></head><body><h1>404 Not Found</h1><hr>nginx</body></html>";
            return (
                StatusCode::NOT_FOUND,
                [(axum::http::header::CONTENT_TYPE, "text/html")],
                page,
            )
                .into_response();
        }
    }
    match inner.by_id.get(&id) {
        Some(schema) => Json(json!({ "schema": schema, "schemaType": "AVRO" })).into_response(),
        None => not_found(40403, "Schema not found"),
    }
}

async fn register(
    State(inner): State<Shared>,
    Path(subject): Path<String>,
    Json(body): Json<Value>,
) -> Response {
    let Some(schema) = body
        .get("schema")
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        return (
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(json!({ "error_code": 42201, "message": "no schema" })),
        )
            .into_response();
    };
    let mut inner = inner.lock().expect("registry double lock");
    *inner.requests.entry("register").or_default() += 1;
    let existing = inner
        .subjects
        .get(&subject)
        .and_then(|v| v.iter().find(|(s, _)| *s == schema).map(|(_, id)| *id));
    let id = match existing.or_else(|| {
        inner
            .by_id
            .iter()
            .find(|(_, s)| **s == schema)
            .map(|(id, _)| *id)
    }) {
        Some(id) => id,
        None => {
            let id = inner.by_id.len() as u32 + 1;
            inner.by_id.insert(id, schema.clone());
            id
        }
    };
    let versions = inner.subjects.entry(subject).or_default();
    if !versions.iter().any(|(_, v)| *v == id) {
        versions.push((schema, id));
    }
    Json(json!({ "id": id })).into_response()
}

/// `GET /subjects`: the subject names.
async fn subjects(State(inner): State<Shared>) -> Response {
    let inner = inner.lock().expect("registry double lock");
    let mut names: Vec<&String> = inner.subjects.keys().collect();
    names.sort();
    Json(json!(names)).into_response()
}

/// `GET /subjects/{subject}/versions`: the version numbers, or 40401.
async fn versions(State(inner): State<Shared>, Path(subject): Path<String>) -> Response {
    let mut inner = inner.lock().expect("registry double lock");
    *inner.requests.entry("versions").or_default() += 1;
    match inner.subjects.get(&subject) {
        Some(versions) => Json(json!((1..=versions.len()).collect::<Vec<_>>())).into_response(),
        None => not_found(40401, "Subject not found"),
    }
}

async fn lookup(
    State(inner): State<Shared>,
    Path(subject): Path<String>,
    Json(body): Json<Value>,
) -> Response {
    let schema = body
        .get("schema")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut inner = inner.lock().expect("registry double lock");
    *inner.requests.entry("lookup").or_default() += 1;
    let found = inner.subjects.get(&subject).and_then(|v| {
        v.iter()
            .enumerate()
            .find(|(_, (s, _))| s == schema)
            .map(|(i, (s, id))| (i + 1, s.clone(), *id))
    });
    match found {
        Some((version, schema, id)) => {
            Json(json!({ "subject": subject, "version": version, "id": id, "schema": schema }))
                .into_response()
        }
        None => not_found(40403, "Schema not found"),
    }
}

async fn by_version(
    State(inner): State<Shared>,
    Path((subject, version)): Path<(String, String)>,
) -> Response {
    let mut inner = inner.lock().expect("registry double lock");
    *inner.requests.entry("by_version").or_default() += 1;
    let Some(versions) = inner.subjects.get(&subject) else {
        return not_found(40401, "Subject not found");
    };
    let index = if version == "latest" {
        versions.len()
    } else {
        version.parse().unwrap_or(0)
    };
    match index.checked_sub(1).and_then(|i| versions.get(i)) {
        Some((schema, id)) => {
            Json(json!({ "subject": subject, "version": index, "id": id, "schema": schema }))
                .into_response()
        }
        None => not_found(40402, "Version not found"),
    }
}
