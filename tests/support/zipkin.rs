//! A Zipkin collector on loopback: it takes what Envoy's Zipkin tracer
//! sends (`POST /api/v2/spans`, a JSON array of Zipkin v2 spans) and keeps
//! every span, for a test to look at.
//!
//! The protocol is Zipkin's own v2 JSON API, the one a real Zipkin server
//! answers on the same path; Envoy is the real client.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use serde_json::Value;

/// A running collector; it stops when dropped.
pub struct Collector {
    addr: SocketAddr,
    spans: Arc<Mutex<Vec<Value>>>,
    _runtime: tokio::runtime::Runtime,
}

impl Collector {
    /// Starts a collector listening on `addr`.
    pub fn start(addr: SocketAddr) -> Collector {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime for the Zipkin collector");
        let spans: Arc<Mutex<Vec<Value>>> = Arc::default();
        let router = Router::new().route("/api/v2/spans", post(take)).with_state(spans.clone());
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(addr))
            .unwrap_or_else(|e| panic!("bind the Zipkin collector on {addr}: {e}"));
        runtime.spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Collector { addr, spans, _runtime: runtime }
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Value> {
        self.spans.lock().unwrap().clone()
    }
}

/// Keeps the spans of one report: Zipkin answers 202.
async fn take(State(spans): State<Arc<Mutex<Vec<Value>>>>, body: String) -> StatusCode {
    match serde_json::from_str::<Value>(&body) {
        Ok(Value::Array(items)) => {
            spans.lock().unwrap().extend(items);
            StatusCode::ACCEPTED
        }
        _ => StatusCode::BAD_REQUEST,
    }
}
