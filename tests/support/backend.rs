//! Test backends: tiny HTTP/1.1 servers that say who they are.
//!
//! A [`Backend`] stands in for one workload (one pod) at its loopback address,
//! e.g. `reviews-v2` at 127.0.0.14:9080. It answers every request with 200, a
//! body `NAME METHOD PATH`, and headers telling the test what arrived:
//! `x-backend: NAME`, `x-request-path`, and each request header echoed as
//! `x-echo-<name>`. So a test reads from one response which workload Envoy chose
//! and what Envoy sent it.
//!
//! A websocket upgrade request (`upgrade: websocket`) is answered `101
//! Switching Protocols`, after which the backend echoes every byte back, so
//! a test sees the upgraded connection carry data both ways.
//!
//! Connections are kept alive as Envoy expects of an upstream. Dropping the
//! backend stops accepting, shuts every open connection and joins every thread.

use std::io::{BufReader, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};

use parking_lot::Mutex;

use super::http::{Head, header, read_body, read_head};

/// One running backend.
pub struct Backend {
    name: String,
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

struct Shared {
    stopping: AtomicBool,
    hits: AtomicU64,
    /// Open connections, so drop can shut them and join their threads.
    conns: Mutex<Vec<(TcpStream, JoinHandle<()>)>>,
}

impl Backend {
    /// Starts backend `name` on `addr` (a loopback address). Panics if it cannot bind.
    pub fn start(name: &str, addr: SocketAddr) -> Backend {
        assert!(addr.ip().is_loopback(), "backends bind loopback only, not {addr}");
        let listener = TcpListener::bind(addr)
            .unwrap_or_else(|e| panic!("backend {name}: bind {addr}: {e} (another test run using it?)"));
        let shared = Arc::new(Shared {
            stopping: AtomicBool::new(false),
            hits: AtomicU64::new(0),
            conns: Mutex::new(Vec::new()),
        });
        let acceptor = {
            let (name, shared) = (name.to_string(), shared.clone());
            thread::Builder::new()
                .name(format!("backend-{name}"))
                .spawn(move || accept_loop(&name, listener, &shared))
                .expect("spawn the backend thread")
        };
        Backend { name: name.to_string(), addr, shared, acceptor: Some(acceptor) }
    }

    /// The name it answers with.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Requests answered so far.
    pub fn hits(&self) -> u64 {
        self.shared.hits.load(Ordering::Relaxed)
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Wake the blocking accept; it sees `stopping` and returns.
        let _ = TcpStream::connect(self.addr);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        let conns = std::mem::take(&mut *self.shared.conns.lock());
        for (stream, handle) in conns {
            let _ = stream.shutdown(Shutdown::Both);
            let _ = handle.join();
        }
    }
}

fn accept_loop(name: &str, listener: TcpListener, shared: &Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let Ok(handle_side) = stream.try_clone() else {
            continue;
        };
        let (name, conn_shared) = (name.to_string(), shared.clone());
        let handle = thread::spawn(move || serve(&name, handle_side, &conn_shared));
        shared.conns.lock().push((stream, handle));
    }
}

/// Serves requests on one connection until the peer closes it, asks to close,
/// or the backend stops.
fn serve(name: &str, stream: TcpStream, shared: &Shared) {
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    while let Ok(Some(Head { start: request_line, headers })) = read_head(&mut reader) {
        if read_body(&mut reader, &headers, false).is_err() {
            return;
        }
        let mut parts = request_line.split_whitespace();
        let method = parts.next().unwrap_or_default();
        let path = parts.next().unwrap_or_default();
        let close = header(&headers, "connection").is_some_and(|c| c.eq_ignore_ascii_case("close"));
        if header(&headers, "upgrade").is_some_and(|u| u.eq_ignore_ascii_case("websocket")) {
            shared.hits.fetch_add(1, Ordering::Relaxed);
            // The accept key is not checked by Envoy or by the tests' client.
            let head = format!(
                "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\nx-backend: {name}\r\n\r\n"
            );
            if writer.write_all(head.as_bytes()).is_err() {
                return;
            }
            let _ = std::io::copy(&mut reader, &mut writer);
            return;
        }

        let body = format!("{name} {method} {path}\n");
        let mut response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nx-backend: {name}\r\nx-request-path: {path}\r\n",
            body.len()
        );
        for (n, v) in &headers {
            response.push_str(&format!("x-echo-{n}: {v}\r\n"));
        }
        if close {
            response.push_str("connection: close\r\n");
        }
        response.push_str("\r\n");
        response.push_str(&body);
        shared.hits.fetch_add(1, Ordering::Relaxed);
        if writer.write_all(response.as_bytes()).is_err() || close {
            return;
        }
    }
}
