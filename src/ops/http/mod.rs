//! The `run` process's HTTP endpoint: `/metrics`, `/healthz`, `/readyz`,
//! `/state/{key}`, the status page at `/` and its JSON at
//! `/api/status` (see `routes`).
//!
//! It runs on a thread of its own with a single-threaded runtime, so a
//! burst of requests competes with the pipeline for one thread at most and
//! never queues behind partition tasks. Connections are bounded
//! (`MAX_CONNECTIONS`; more wait in the listen backlog of
//! `LISTEN_BACKLOG`), a client gets
//! `HEADER_TIMEOUT` to send its request headers (a slow client cannot hold
//! a connection open), request heads are capped at `MAX_HEAD_BYTES`, and a
//! connection is closed gracefully after `CONNECTION_LIFETIME`.

mod context;
mod dlq;
mod explain;
pub(crate) mod guard;
mod key;
pub(crate) mod routes;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::sync::{watch, Semaphore};
use tracing::{debug, info, warn};

pub(crate) use context::HttpContext;

/// Connections served at once.
pub(crate) const MAX_CONNECTIONS: usize = 256;
/// Time a client has to send a request's headers.
pub(crate) const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection (keep-alive included) is closed after this long.
pub(crate) const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);
/// Largest request head (request line and headers) read.
pub(crate) const MAX_HEAD_BYTES: usize = 16 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("cannot listen on {address} (http.address): {source}; choose another address or set it to \"\" to turn the endpoint off")]
    Bind {
        address: String,
        source: std::io::Error,
    },
    #[error("cannot start the http thread: {0}")]
    Thread(std::io::Error),
    #[error("cannot set up the http endpoint: kafka.input_partitioner {0}")]
    Partitioner(#[from] crate::partitioner::UnknownPartitioner),
}

/// Connections the kernel queues for accept (the standard library's 128
/// overflows under a burst of clients, whose retries then wait a second).
pub(crate) const LISTEN_BACKLOG: i32 = 1024;

/// Binds `address` (at start-up, so a taken port fails fast).
pub fn bind(address: SocketAddr) -> Result<std::net::TcpListener, HttpError> {
    use socket2::{Domain, Socket, Type};
    let bound = (|| {
        let socket = Socket::new(Domain::for_address(address), Type::STREAM, None)?;
        // A restarted process can bind while the old one's connections linger.
        socket.set_reuse_address(true)?;
        socket.bind(&address.into())?;
        socket.listen(LISTEN_BACKLOG)?;
        Ok::<_, std::io::Error>(std::net::TcpListener::from(socket))
    })();
    bound.map_err(|source| HttpError::Bind {
        address: address.to_string(),
        source,
    })
}

/// Serves `processor`'s endpoint on `listener`: start it before
/// [`crate::processor::Processor::run`], stop it after.
pub fn serve<E: crate::engine::entity::Entity>(
    listener: std::net::TcpListener,
    processor: &crate::processor::Processor<E>,
) -> Result<Server, HttpError> {
    let context = HttpContext::of(processor)?;
    let bound = listener.local_addr().map_err(HttpError::Thread)?;
    if !bound.ip().is_loopback() && !context.guard.is_on() {
        warn!(
            address = %bound,
            "the http endpoint listens beyond loopback without http.bearer_token: anyone who can reach it reads every \
             order's state (/state/...) and the status API; set http.bearer_token (ORDERLY_HTTP__BEARER_TOKEN) or bind \
             127.0.0.1"
        );
    }
    Server::start(listener, context)
}

/// A running endpoint; [`Server::stop`] ends it.
pub struct Server {
    address: SocketAddr,
    stop: watch::Sender<bool>,
    thread: std::thread::JoinHandle<()>,
}

impl Server {
    pub fn start(
        listener: std::net::TcpListener,
        context: HttpContext,
    ) -> Result<Server, HttpError> {
        let address = listener.local_addr().map_err(HttpError::Thread)?;
        listener.set_nonblocking(true).map_err(HttpError::Thread)?;
        let (stop, stopped) = watch::channel(false);
        let key_field = context.key_field();
        let thread = std::thread::Builder::new()
            .name("orderly-http".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(error) => {
                        warn!(%error, "cannot start the http runtime; the endpoint is off");
                        return;
                    }
                };
                runtime.block_on(accept_loop(listener, Arc::new(context), stopped));
                // Connections still open are dropped with the runtime.
                runtime.shutdown_timeout(Duration::from_secs(1));
            })
            .map_err(HttpError::Thread)?;
        info!(%address, "http endpoint listening (/metrics, /healthz, /readyz, /state/{{{key_field}}}, /)");
        Ok(Server {
            address,
            stop,
            thread,
        })
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Stops accepting, closes connections and waits for the thread (at
    /// most a few seconds).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let thread = self.thread;
        let joined = tokio::time::timeout(
            Duration::from_secs(5),
            tokio::task::spawn_blocking(move || thread.join()),
        )
        .await;
        if joined.is_err() {
            warn!("the http thread did not stop in time");
        }
    }
}

async fn accept_loop(
    listener: std::net::TcpListener,
    context: Arc<HttpContext>,
    mut stopped: watch::Receiver<bool>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(error) => {
            warn!(%error, "cannot use the http listener; the endpoint is off");
            return;
        }
    };
    let router = routes::router(context);
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = tokio::select! {
            _ = stopped.changed() => return,
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
        };
        let (stream, peer) = tokio::select! {
            _ = stopped.changed() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: back off, go on.
                    debug!(%error, "http accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let service = TowerToHyperService::new(router.clone());
        let mut stopped = stopped.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .max_buf_size(MAX_HEAD_BYTES)
                .keep_alive(true);
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            let result = tokio::select! {
                result = connection.as_mut() => result,
                _ = tokio::time::sleep(CONNECTION_LIFETIME) => {
                    connection.as_mut().graceful_shutdown();
                    tokio::time::timeout(HEADER_TIMEOUT, connection.as_mut()).await.unwrap_or(Ok(()))
                }
                _ = stopped.changed() => {
                    connection.as_mut().graceful_shutdown();
                    tokio::time::timeout(Duration::from_secs(1), connection.as_mut()).await.unwrap_or(Ok(()))
                }
            };
            if let Err(error) = result {
                debug!(%peer, %error, "http connection ended with an error");
            }
        });
    }
}
