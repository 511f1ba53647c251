//! The operator surface of the `orderly` binary (issue 12): environment
//! overrides typed by their key, `config show` and `config check`, read-only
//! commands that never create a store, errors that state their cause once,
//! distinct exit codes, and the demo's processing rate apart from the join.
//!
//! Every test runs the built binary as a child process with a clean
//! `ORDERLY_*` environment; Kafka is librdkafka's mock cluster in this process
//! (the child reaches it over TCP), the registry a few-line HTTP server.

mod support;

#[path = "cli/commands.rs"]
mod commands;
#[path = "cli/config.rs"]
mod config;

use std::net::{SocketAddr, TcpListener};
use std::process::{Command, Output, Stdio};

use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use support::text;

/// The exit codes `--help` documents.
const EXIT_NOT_FOUND: i32 = 3;
const EXIT_CHECK_FAILED: i32 = 4;
const EXIT_CONFIG: i32 = 5;
const EXIT_NO_STORE: i32 = 6;

/// `orderly <args>` with no `ORDERLY_*` variable inherited from the caller.
fn orderly(args: &[&str]) -> Command {
    let mut cmd = Command::new(support::orderly_bin());
    cmd.args(args).stdin(Stdio::null());
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("ORDERLY_") {
            cmd.env_remove(name);
        }
    }
    cmd
}

fn code(out: &Output) -> i32 {
    out.status
        .code()
        .unwrap_or_else(|| panic!("killed by a signal: {out:?}"))
}

/// A loopback port nothing listens on (bound, then released).
fn unused_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// An HTTP server answering `GET /subjects` with `status` and `body`, on its
/// own runtime; stops when dropped.
struct Http {
    url: String,
    _runtime: tokio::runtime::Runtime,
}

fn http_subjects(status: StatusCode, body: &'static str) -> Http {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let app = Router::new().route("/subjects", get(move || async move { (status, body) }));
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind(SocketAddr::from((
            [127, 0, 0, 1],
            0,
        ))))
        .expect("bind http");
    let addr = listener.local_addr().expect("addr");
    runtime.spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Http {
        url: format!("http://{addr}"),
        _runtime: runtime,
    }
}
