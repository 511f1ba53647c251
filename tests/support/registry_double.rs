//! A TEST DOUBLE of a Confluent-compatible schema registry: no Confluent
//! registry can be installed on the test machines, so the suites start this
//! one. It speaks the REST endpoints `schema_registry_converter` calls
//! (register, look up, latest, by version, by id) over real HTTP, keeps
//! schemas in memory, assigns ids from 1, and does no compatibility checks.
//! Tests can make it answer look-ups by id the way a misconfigured
//! deployment would ([`ByIdMode`]), require basic authentication
//! ([`Access::basic_auth`]: 401 without the right credentials, 403 for a
//! user with read access only on a write) and serve HTTPS with a
//! certificate of a CA made for the test ([`TestCa`]). Not for production
//! use.

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

/// What the double asks of its clients.
#[derive(Default)]
pub struct Access {
    /// `(user, password)`: every request must carry them (basic
    /// authentication), or it is answered 401.
    pub basic_auth: Option<(String, String)>,
    /// A user (with the same password) that may read but not register:
    /// writes are answered 403.
    pub read_only_user: Option<String>,
    /// A bearer token that is accepted instead (or, without
    /// `basic_auth`, required).
    pub bearer_token: Option<String>,
    /// Serve HTTPS with this CA's server certificate.
    pub tls: Option<TestCa>,
}

/// A CA and a server certificate for 127.0.0.1 it signed, made with the
/// `openssl` command line (as `kafka/broker --secure` does), in a
/// temporary directory.
pub struct TestCa {
    dir: tempfile::TempDir,
    /// The CA certificate (PEM): what registry.ca_location names.
    pub ca_pem: std::path::PathBuf,
    server_pem: std::path::PathBuf,
    server_key: std::path::PathBuf,
}

impl TestCa {
    pub fn generate() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = |name: &str| dir.path().join(name);
        let openssl = |args: &[&str]| {
            let out = std::process::Command::new("openssl")
                .args(args)
                .current_dir(dir.path())
                .output()
                .expect("the registry TLS tests need the openssl command (.ci/run installs it)");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=orderly registry test CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        ]);
        openssl(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            "server.key.rsa",
            "-out",
            "server.csr",
        ]);
        std::fs::write(
            path("san.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
        )
        .expect("san.ext");
        openssl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "san.ext",
            "-out",
            "server.pem",
        ]);
        openssl(&[
            "pkcs8",
            "-topk8",
            "-nocrypt",
            "-in",
            "server.key.rsa",
            "-out",
            "server.key",
        ]);
        TestCa {
            ca_pem: path("ca.pem"),
            server_pem: path("server.pem"),
            server_key: path("server.key"),
            dir,
        }
    }

    fn acceptor(&self) -> tokio_native_tls::TlsAcceptor {
        let cert = std::fs::read(&self.server_pem).expect("server.pem");
        let key = std::fs::read(&self.server_key).expect("server.key");
        let identity =
            tokio_native_tls::native_tls::Identity::from_pkcs8(&cert, &key).expect("identity");
        tokio_native_tls::native_tls::TlsAcceptor::new(identity)
            .expect("tls acceptor")
            .into()
    }
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
    guard: Arc<Guard>,
    _runtime: tokio::runtime::Runtime,
}

impl RegistryDouble {
    /// Starts on a free loopback port, on its own runtime thread, so
    /// synchronous tests and child processes can use it.
    pub fn start() -> Self {
        Self::start_with(Access::default())
    }

    /// [`Self::start`], asking for credentials and/or serving HTTPS.
    pub fn start_with(access: Access) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("registry double runtime");
        let inner: Shared = Arc::default();
        let guard = Arc::new(Guard {
            basic_auth: Mutex::new(access.basic_auth),
            read_only_user: access.read_only_user,
            bearer_token: access.bearer_token,
            inner: inner.clone(),
        });
        let app = Router::new()
            .route("/schemas/ids/{id}", get(by_id))
            .route("/subjects", get(subjects))
            .route("/subjects/{subject}/versions", post(register).get(versions))
            .route("/subjects/{subject}", post(lookup))
            .route("/subjects/{subject}/versions/{version}", get(by_version))
            .with_state(inner.clone())
            .layer(axum::middleware::from_fn_with_state(
                guard.clone(),
                authenticate,
            ));
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(SocketAddr::from((
                [127, 0, 0, 1],
                0,
            ))))
            .expect("bind registry double");
        let addr = listener.local_addr().expect("registry double address");
        let scheme = match access.tls {
            None => {
                runtime.spawn(async move {
                    let _ = axum::serve(listener, app).await;
                });
                "http"
            }
            Some(ca) => {
                let acceptor = Arc::new(ca.acceptor());
                runtime.spawn(async move {
                    // Keeps the certificate files for as long as it serves.
                    let _ca = ca;
                    serve_tls(listener, acceptor, app).await
                });
                "https"
            }
        };
        RegistryDouble {
            url: format!("{scheme}://{addr}"),
            inner,
            guard,
            _runtime: runtime,
        }
    }

    /// Changes the password basic authentication asks for from now on (a
    /// rotated or expired password).
    pub fn set_password(&self, password: &str) {
        if let Ok(mut auth) = self.guard.basic_auth.lock() {
            if let Some((_, current)) = auth.as_mut() {
                *current = password.to_string();
            }
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

/// HTTPS: each accepted connection's TLS handshake, then HTTP/1.1 on it.
/// A failed handshake (a client that does not trust the CA) closes that
/// connection only.
async fn serve_tls(
    listener: tokio::net::TcpListener,
    acceptor: Arc<tokio_native_tls::TlsAcceptor>,
    app: Router,
) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(stream).await else {
                return;
            };
            let service = hyper_util::service::TowerToHyperService::new(app);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                .await;
        });
    }
}

/// Who may ask what.
struct Guard {
    basic_auth: Mutex<Option<(String, String)>>,
    read_only_user: Option<String>,
    bearer_token: Option<String>,
    inner: Shared,
}

/// 401 (with Confluent's error body) without the right basic credentials
/// or bearer token; 403 for the read-only user's writes.
async fn authenticate(
    State(guard): State<Arc<Guard>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let basic = guard.basic_auth.lock().ok().and_then(|a| a.clone());
    let header = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    if basic.is_none() && guard.bearer_token.is_none() {
        return next.run(request).await;
    }
    if let Some(token) = &guard.bearer_token {
        if header.as_deref() == Some(format!("Bearer {token}").as_str()) {
            return next.run(request).await;
        }
    }
    let (user, password) = basic.unwrap_or_default();
    let sent = header
        .as_deref()
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(|b| {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.decode(b).ok()
        })
        .and_then(|raw| String::from_utf8(raw).ok());
    let allowed = |name: &str| sent.as_deref() == Some(format!("{name}:{password}").as_str());
    let count = |kind: &'static str| {
        if let Ok(mut inner) = guard.inner.lock() {
            *inner.requests.entry(kind).or_default() += 1;
        }
    };
    if !user.is_empty() && allowed(&user) {
        return next.run(request).await;
    }
    if let Some(reader) = &guard.read_only_user {
        if allowed(reader) {
            if request.method() == axum::http::Method::GET {
                return next.run(request).await;
            }
            count("forbidden");
            return (
                StatusCode::FORBIDDEN,
                Json(json!({ "error_code": 40301, "message": "User cannot access the resource." })),
            )
                .into_response();
        }
    }
    count("unauthorized");
    (
        StatusCode::UNAUTHORIZED,
        [(
            axum::http::header::WWW_AUTHENTICATE,
            "Basic realm=\"registry\"",
        )],
        Json(json!({ "error_code": 401, "message": "Unauthorized" })),
    )
        .into_response()
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
