//! A TCP proxy a test can cut: one member's way to the broker (its
//! consumer, its transactional producers, its admin and reader clients all
//! bootstrap at the proxy, and the broker's proxy listener advertises the
//! proxy's address, so every connection they make runs through it).
//!
//! [`CutProxy::cut`] is a network partition as the member sees it, not a
//! closed connection: no byte is forwarded in either direction, but every
//! socket stays open (no FIN, no RST), so only the clients' own timeouts
//! tell them. A connection opened during the cut is accepted and held, its
//! upstream connection made only at the heal. Bytes read while cut are held,
//! not dropped (a stream cannot lose bytes in the middle and still be Kafka's
//! protocol; TCP retransmits what a partition swallowed once it heals):
//! [`CutProxy::heal`] forwards what was held, in order, then everything
//! else, on the same connections, and connections a client closed meanwhile
//! deliver what they sent before their close, like TCP's retransmission of
//! a closed socket's unacknowledged data.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

#[derive(Default)]
struct Shared {
    cut: Mutex<bool>,
    changed: Condvar,
    closed: AtomicBool,
    /// Every socket of every connection, so dropping the proxy closes them.
    sockets: Mutex<Vec<TcpStream>>,
    connections: AtomicU64,
    /// Bytes from the member to the broker that a cut held back (forwarded
    /// at the heal).
    held_upstream: AtomicU64,
}

impl Shared {
    /// Waits while the proxy is cut; false once it is closed.
    fn pass(&self) -> bool {
        let mut cut = self.cut.lock().expect("proxy lock");
        while *cut && !self.closed.load(Ordering::SeqCst) {
            cut = self.changed.wait(cut).expect("proxy lock");
        }
        !self.closed.load(Ordering::SeqCst)
    }

    fn is_cut(&self) -> bool {
        *self.cut.lock().expect("proxy lock")
    }

    fn keep(&self, socket: &TcpStream) {
        if let (Ok(clone), Ok(mut sockets)) = (socket.try_clone(), self.sockets.lock()) {
            sockets.push(clone);
        }
    }
}

/// See the module doc.
pub struct CutProxy {
    /// Where it listens (`host:port`).
    pub address: String,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl CutProxy {
    /// Listens at `listen` and forwards each connection to `upstream`.
    pub fn start(listen: &str, upstream: &str) -> Self {
        let listener = TcpListener::bind(listen)
            .unwrap_or_else(|e| panic!("the cut proxy cannot listen at {listen}: {e}"));
        let address = listener.local_addr().expect("proxy address").to_string();
        let shared = Arc::new(Shared::default());
        let accept = {
            let shared = shared.clone();
            let upstream = upstream.to_string();
            std::thread::spawn(move || {
                for client in listener.incoming() {
                    if shared.closed.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(client) = client else { continue };
                    shared.connections.fetch_add(1, Ordering::Relaxed);
                    let shared = shared.clone();
                    let upstream = upstream.clone();
                    std::thread::spawn(move || connect(shared, client, &upstream));
                }
            })
        };
        CutProxy {
            address,
            shared,
            accept: Some(accept),
        }
    }

    /// Stops forwarding in both directions, every socket left open.
    pub fn cut(&self) {
        *self.shared.cut.lock().expect("proxy lock") = true;
        self.shared.changed.notify_all();
    }

    /// Forwards again, what was held first.
    pub fn heal(&self) {
        *self.shared.cut.lock().expect("proxy lock") = false;
        self.shared.changed.notify_all();
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::Relaxed)
    }

    /// Bytes from the member that a cut held back.
    pub fn held_upstream(&self) -> u64 {
        self.shared.held_upstream.load(Ordering::Relaxed)
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::SeqCst);
        self.shared.changed.notify_all();
        if let Ok(sockets) = self.shared.sockets.lock() {
            for socket in sockets.iter() {
                let _ = socket.shutdown(Shutdown::Both);
            }
        }
        // Wakes the accepting thread, which then sees `closed`.
        let _ = TcpStream::connect_timeout(
            &self.address.parse().expect("proxy address"),
            Duration::from_secs(1),
        );
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

/// One client connection: its upstream connection once the proxy is not
/// cut, then a pump each way.
fn connect(shared: Arc<Shared>, client: TcpStream, upstream: &str) {
    shared.keep(&client);
    if !shared.pass() {
        return;
    }
    let Ok(server) = TcpStream::connect(upstream) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    shared.keep(&server);
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (Ok(client_read), Ok(server_read)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let up = {
        let shared = shared.clone();
        std::thread::spawn(move || pump(&shared, client_read, server, true))
    };
    pump(&shared, server_read, client, false);
    let _ = up.join();
}

/// Copies `from` to `to` while the proxy is not cut; holds what it read
/// while it is.
fn pump(shared: &Shared, mut from: TcpStream, mut to: TcpStream, upstream: bool) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if !shared.pass() {
            return;
        }
        let n = from.read(&mut buf).unwrap_or(0);
        if upstream && n > 0 && shared.is_cut() {
            shared.held_upstream.fetch_add(n as u64, Ordering::Relaxed);
        }
        if !shared.pass() {
            return;
        }
        if n == 0 {
            // The sender closed (or reset): close this direction, and the
            // other once its sender sees it.
            let _ = to.shutdown(Shutdown::Write);
            let _ = from.shutdown(Shutdown::Read);
            return;
        }
        if to.write_all(&buf[..n]).is_err() {
            let _ = from.shutdown(Shutdown::Both);
            let _ = to.shutdown(Shutdown::Both);
            return;
        }
    }
}
