//! The admin HTTP endpoint: readiness now, metrics and debug views as they land.
//!
//! It runs on its own address, off the xDS path: a slow or expensive admin
//! request never competes with the push path for a lock (it only loads the
//! published snapshot).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

use crate::push::PushEngine;

/// Builds the admin router.
pub fn router(engine: Arc<PushEngine>) -> Router {
    Router::new().route("/ready", get(ready)).with_state(engine)
}

/// `GET /ready`: 200 once the first snapshot from the sources is published.
async fn ready(State(engine): State<Arc<PushEngine>>) -> (StatusCode, &'static str) {
    if engine.is_ready() { (StatusCode::OK, "ready\n") } else { (StatusCode::SERVICE_UNAVAILABLE, "not ready\n") }
}
