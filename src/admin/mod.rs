//! The admin HTTP endpoint: readiness, metrics, debug views and a status page.
//!
//! It runs on its own address, off the xDS path: a slow or expensive admin
//! request never competes with the push path for a lock. Handlers read
//! published state only — the snapshot through `ArcSwap`, each stream's
//! status copy, the push history, the metrics — and the one expensive view,
//! `/debug/config_dump`, generates on the blocking pool.
//!
//! | path | what |
//! |---|---|
//! | `/ready` | 200 once the first snapshot is published |
//! | `/metrics` | Prometheus text ([`crate::metrics`]) |
//! | `/debug/syncz` | per stream and type: sent/ACKed nonce and version, sync state, last NACK |
//! | `/debug/config_dump?proxyID=` | what a proxy is sent, as Envoy's config_dump |
//! | `/debug/connections` | connected streams |
//! | `/debug/push_status` | the last push, per-type totals |
//! | `/debug/scopes` | scopes, their members and visible services |
//! | `/debug/configz` | objects with their source file, validation problems |
//! | `/` | the status page |
//!
//! The admin server runs on a runtime of its own (see `serve`). At most
//! [`MAX_CONCURRENT_REQUESTS`] requests are served at once (more are
//! answered 503), and the views that walk every stream or generate config
//! (`/`, `/debug/syncz`, `/debug/config_dump`, `/debug/connections`,
//! `/debug/scopes`, `/debug/configz`) are rate-limited per client address
//! ([`EXPENSIVE_PER_SECOND`], answered 429 beyond): one busy poller cannot
//! take the admin server from the others.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::config::Problem;
use crate::engine::PushEngine;
use crate::source::{ReferenceReport, SourceStatus};
use crate::xds::AdsService;
use crate::xds::stream::status::StreamStatus;

pub mod config_dump;
pub mod debug;
pub mod envoy_json;
pub mod status_page;

/// What the admin handlers read.
#[derive(Debug, Clone)]
pub struct AdminState {
    /// The engine: snapshot, cache, streams, metrics, push history.
    pub engine: Arc<PushEngine>,
    /// The ADS service: each stream's status, the shared response bodies.
    pub ads: AdsService,
    /// The file source's problems, once it is loaded (the admin server
    /// starts before the load so that `/ready` can answer 503 meanwhile).
    source: Arc<OnceLock<SourceStatus>>,
    /// Reference problems of the served store.
    references: ReferenceReport,
}

impl AdminState {
    /// State over the streams of `ads` and its engine, with no source yet.
    pub fn new(ads: AdsService) -> AdminState {
        AdminState {
            engine: ads.engine().clone(),
            ads,
            source: Arc::new(OnceLock::new()),
            references: ReferenceReport::new(),
        }
    }

    /// A copy of stream `id`'s status.
    pub fn status(&self, id: crate::push::ConnId) -> StreamStatus {
        self.ads.statuses().get(id)
    }

    /// Attaches the config source (once; later calls are ignored).
    pub fn set_source(&self, source: SourceStatus) {
        let _ = self.source.set(source);
    }

    /// The reference report the server keeps current (see `serve`).
    pub fn references(&self) -> &ReferenceReport {
        &self.references
    }

    /// The sources' current problems and the served store's reference
    /// problems, sorted by file and document as `meshpush validate` prints them.
    pub fn problems(&self) -> Vec<Problem> {
        let mut problems = self.source.get().map(SourceStatus::problems).unwrap_or_default();
        problems.extend(self.references.problems());
        problems.sort_by(|a, b| {
            (&a.source.file, a.source.doc, a.severity).cmp(&(&b.source.file, b.source.doc, b.severity))
        });
        problems
    }
}

/// Builds the admin router over the streams of `ads`, without a config source.
pub fn router(ads: AdsService) -> Router {
    router_with(AdminState::new(ads))
}

/// Builds the admin router.
pub fn router_with(state: AdminState) -> Router {
    router_limited(state, MAX_CONCURRENT_REQUESTS)
}

/// [`router_with`] serving at most `max_concurrent` requests at once.
pub fn router_limited(state: AdminState, max_concurrent: usize) -> Router {
    router_with_limits(state, max_concurrent, EXPENSIVE_PER_SECOND, EXPENSIVE_BURST)
}

/// [`router_with`] serving at most `max_concurrent` requests at once, and
/// each client at most `per_second` expensive views a second (`burst` at once).
pub fn router_with_limits(state: AdminState, max_concurrent: usize, per_second: u32, burst: u32) -> Router {
    let limit = Arc::new(tokio::sync::Semaphore::new(max_concurrent));
    let quota = governor::Quota::per_second(NonZeroU32::new(per_second).unwrap_or(NonZeroU32::MIN))
        .allow_burst(NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN));
    let clients: Arc<governor::DefaultKeyedRateLimiter<IpAddr>> = Arc::new(governor::RateLimiter::keyed(quota));
    let expensive = Router::new()
        .route("/", get(status_page::page))
        .route("/debug/syncz", get(debug::syncz))
        .route("/debug/config_dump", get(debug::config_dump))
        .route("/debug/connections", get(debug::connections))
        .route("/debug/scopes", get(debug::scopes))
        .route("/debug/configz", get(debug::configz))
        .layer(axum::middleware::from_fn(move |request: axum::extract::Request, next: axum::middleware::Next| {
            let clients = clients.clone();
            async move {
                let client = request
                    .extensions()
                    .get::<axum::extract::ConnectInfo<SocketAddr>>()
                    .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |info| info.0.ip());
                if clients.len() > MAX_TRACKED_CLIENTS {
                    clients.retain_recent();
                }
                match clients.check_key(&client) {
                    Ok(()) => next.run(request).await,
                    Err(_) => (
                        StatusCode::TOO_MANY_REQUESTS,
                        [(header::RETRY_AFTER, "1")],
                        "too many requests for this view from your address; retry in a second\n",
                    )
                        .into_response(),
                }
            }
        }));
    Router::new()
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .route("/debug/push_status", get(debug::push_status))
        .merge(expensive)
        .with_state(state)
        .layer(axum::middleware::from_fn(move |request, next: axum::middleware::Next| {
            let limit = limit.clone();
            async move {
                // Beyond the cap a request is turned away at once rather
                // than queued: a flood of pollers cannot pile up work.
                match limit.try_acquire_owned() {
                    Ok(_permit) => next.run(request).await,
                    Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "too many admin requests at once\n").into_response(),
                }
            }
        }))
}

/// Admin requests served at once at most; more are answered 503.
pub const MAX_CONCURRENT_REQUESTS: usize = 32;

/// Expensive views one client address may ask for per second (then 429).
pub const EXPENSIVE_PER_SECOND: u32 = 20;

/// Expensive views one client may ask for at once after a quiet spell.
pub const EXPENSIVE_BURST: u32 = 40;

/// Client addresses whose rate is tracked before stale ones are forgotten.
const MAX_TRACKED_CLIENTS: usize = 4096;

/// `GET /ready`: 200 once the first snapshot from the sources is published.
async fn ready(State(state): State<AdminState>) -> (StatusCode, &'static str) {
    if state.engine.is_ready() { (StatusCode::OK, "ready\n") } else { (StatusCode::SERVICE_UNAVAILABLE, "not ready\n") }
}

/// `GET /metrics`: Prometheus text format.
async fn metrics(State(state): State<AdminState>) -> impl IntoResponse {
    let body = state.engine.metrics().render(state.engine.readings());
    ([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], body)
}
