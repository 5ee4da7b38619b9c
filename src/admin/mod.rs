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
//! | `/ready` | 200 once the first snapshot is published; until then 503, naming what it waits for |
//! | `/metrics` | Prometheus text ([`crate::metrics`]) |
//! | `/debug/syncz` | per stream and type: sent/ACKed nonce and version, sync state, last NACK |
//! | `/debug/config_dump?proxyID=` | what a proxy is sent, as Envoy's config_dump |
//! | `/debug/connections` | connected streams |
//! | `/debug/push_status` | the last push, per-type totals |
//! | `/debug/scopes` | scopes, their members and visible services |
//! | `/debug/configz` | the mesh config served, the remote clusters read (and the remote secrets' keys that are not), objects with their source file and cluster, validation problems, what ztunnel and proxyless gRPC do not apply of each |
//! | `/` | the status page |
//!
//! The admin server runs on a runtime of its own (see `serve`), and what
//! its clients may take is bounded ([`limits`]): requests at once, the
//! expensive views (`/`, `/debug/syncz`, `/debug/config_dump`,
//! `/debug/connections`, `/debug/scopes`, `/debug/configz`) per client
//! address, and the time all clients together may keep it busy with them.

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
use crate::source::consul::ConsulStatus;
use crate::source::kube::KubeStatus;
use crate::source::kube::remote::RemoteClusters;
use crate::source::mcp::McpStatus;
use crate::source::mesh_config::MeshConfigStatus;
use crate::source::{ReferenceReport, SourceStatus};
use crate::xds::AdsService;
use crate::xds::stream::status::StreamStatus;

pub mod config_dump;
pub mod debug;
pub mod limits;
pub mod status_page;

pub use limits::AdminLimits;

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
    /// The Kubernetes source's problems, when there is one.
    kube: Arc<OnceLock<KubeStatus>>,
    /// The remote clusters read, when Kubernetes is.
    remotes: Arc<OnceLock<RemoteClusters>>,
    /// Reference problems of the served store.
    references: ReferenceReport,
    /// What the mesh config file sets that meshpush does not apply.
    mesh: Arc<OnceLock<MeshConfigStatus>>,
    /// The MCP-over-xDS servers read (`configSources`).
    mcp: Arc<OnceLock<McpStatus>>,
    /// Consul's catalog, when read.
    consul: Arc<OnceLock<ConsulStatus>>,
}

impl AdminState {
    /// State over the streams of `ads` and its engine, with no source yet.
    pub fn new(ads: AdsService) -> AdminState {
        AdminState {
            engine: ads.engine().clone(),
            ads,
            source: Arc::new(OnceLock::new()),
            kube: Arc::new(OnceLock::new()),
            remotes: Arc::new(OnceLock::new()),
            references: ReferenceReport::new(),
            mesh: Arc::new(OnceLock::new()),
            mcp: Arc::new(OnceLock::new()),
            consul: Arc::new(OnceLock::new()),
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

    /// Attaches the Kubernetes source (once; later calls are ignored).
    pub fn set_kube(&self, kube: KubeStatus) {
        let _ = self.kube.set(kube);
    }

    /// Attaches the remote clusters' controller (once; later calls are ignored).
    pub fn set_remote_clusters(&self, remotes: RemoteClusters) {
        let _ = self.remotes.set(remotes);
    }

    /// Attaches the MCP config sources' reports (once; later calls are ignored).
    pub fn set_mcp(&self, status: McpStatus) {
        let _ = self.mcp.set(status);
    }

    /// The MCP config sources' reports, when serving.
    pub fn mcp(&self) -> Option<&McpStatus> {
        self.mcp.get()
    }

    /// Attaches Consul's catalog state (once; later calls are ignored).
    pub fn set_consul(&self, status: ConsulStatus) {
        let _ = self.consul.set(status);
    }

    /// Consul's catalog state, when it is read.
    pub fn consul(&self) -> Option<&ConsulStatus> {
        self.consul.get()
    }

    /// meshpush's own cluster id (`--cluster-id`), as the served mesh says it.
    pub fn cluster_id(&self) -> String {
        self.engine.snapshot().mesh.cluster_id.to_string()
    }

    /// The remote clusters' controller, when Kubernetes is read.
    pub fn remote_clusters(&self) -> Option<&RemoteClusters> {
        self.remotes.get()
    }

    /// What the server waits for before it is ready, or `None` once it is:
    /// the files not yet read whole and why, the Kubernetes kinds not yet
    /// listed, or else the first snapshot of the sources.
    pub fn waiting_for(&self) -> Option<String> {
        if self.engine.is_ready() {
            return None;
        }
        let mut waits = Vec::new();
        if let Some(unread) = self.source.get().map(SourceStatus::unread_files).filter(|u| !u.is_empty()) {
            waits.push(unread_files_text(&unread));
        }
        if let Some(kube) = self.kube.get() {
            let pending = kube.pending();
            waits.push(match pending.len() {
                0 => "the snapshot that holds the Kubernetes watchers' first lists to be published".to_string(),
                n => format!(
                    "the first list of {n} Kubernetes kind{}: {}",
                    if n == 1 { "" } else { "s" },
                    pending.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", ")
                ),
            });
        }
        if let Some(remotes) = self.remotes.get() {
            let waiting = remotes.waiting();
            if !waiting.is_empty() {
                waits
                    .push(format!("the remote clusters (each up to --remote-cluster-timeout): {}", waiting.join(", ")));
            }
        }
        if let Some(pending) = self.mcp.get().map(McpStatus::pending).filter(|p| !p.is_empty()) {
            let servers: Vec<String> = pending.iter().map(|a| a.to_string()).collect();
            waits.push(format!(
                "the first full state of the MCP config sources (each up to 30 s): {}",
                servers.join(", ")
            ));
        }
        if let Some(consul) = self.consul.get().map(ConsulStatus::report).filter(|r| !r.synced_once) {
            waits.push(format!("Consul's first catalog (up to 30 s) from {}", consul.address));
        }
        if waits.is_empty() {
            waits.push("the first snapshot of the sources to be published".to_string());
        }
        Some(waits.join("; and for "))
    }

    /// Attaches the mesh config file's status (once; later calls are ignored).
    pub fn set_mesh(&self, status: MeshConfigStatus) {
        let _ = self.mesh.set(status);
    }

    /// The reference report the server keeps current (see `serve`).
    pub fn references(&self) -> &ReferenceReport {
        &self.references
    }

    /// The sources' current problems and the served store's reference
    /// problems, sorted by file and document as `meshpush validate` prints them.
    pub fn problems(&self) -> Vec<Problem> {
        let mut problems = self.mesh.get().map(MeshConfigStatus::problems).unwrap_or_default();
        problems.extend(self.source.get().map(SourceStatus::problems).unwrap_or_default());
        problems.extend(self.kube.get().map(KubeStatus::problems).unwrap_or_default());
        problems.extend(self.references.problems());
        problems.sort_by(|a, b| {
            (&a.source.file, a.source.doc, a.severity).cmp(&(&b.source.file, b.source.doc, b.severity))
        });
        problems
    }
}

/// How many unread files `/ready` names; the rest are counted
/// (`/debug/configz` lists them all).
const UNREAD_FILES_NAMED: usize = 5;

/// "the first read of 2 files: a.yaml: …, b.yaml: …".
fn unread_files_text(unread: &[crate::source::UnreadFile]) -> String {
    let n = unread.len();
    let mut text = format!("the first read of {n} file{}: ", if n == 1 { "" } else { "s" });
    let named: Vec<String> = unread.iter().take(UNREAD_FILES_NAMED).map(|f| f.to_string()).collect();
    text.push_str(&named.join(", "));
    if n > UNREAD_FILES_NAMED {
        text.push_str(&format!(", and {} more (see /debug/configz)", n - UNREAD_FILES_NAMED));
    }
    text
}

/// Builds the admin router over the streams of `ads`, without a config source.
pub fn router(ads: AdsService) -> Router {
    router_with(AdminState::new(ads))
}

/// Builds the admin router with the default [`AdminLimits`].
pub fn router_with(state: AdminState) -> Router {
    router_with_limits(state, AdminLimits::default())
}

/// Builds the admin router, its clients bounded by `limits`.
pub fn router_with_limits(state: AdminState, limits: AdminLimits) -> Router {
    let at_once = Arc::new(tokio::sync::Semaphore::new(limits.max_concurrent));
    let quota = governor::Quota::per_second(NonZeroU32::new(limits.per_client_per_second).unwrap_or(NonZeroU32::MIN))
        .allow_burst(NonZeroU32::new(limits.per_client_burst).unwrap_or(NonZeroU32::MIN));
    let clients: Arc<governor::DefaultKeyedRateLimiter<IpAddr>> = Arc::new(governor::RateLimiter::keyed(quota));
    let budget = Arc::new(limits::RenderBudget::new(limits.render_time_per_second));
    let per_client_limited = limits.per_client_per_second > 0;
    // The cap on requests at once covers the work of answering only, not
    // the wait of a refused request (below), so that refused pollers cannot
    // hold the permits.
    let at_once = axum::middleware::from_fn(move |request: axum::extract::Request, next: axum::middleware::Next| {
        let at_once = at_once.clone();
        async move {
            match at_once.try_acquire_owned() {
                Ok(_permit) => next.run(request).await,
                Err(_) => {
                    refuse(StatusCode::SERVICE_UNAVAILABLE, REFUSAL_WAIT_AT_ONCE, "too many admin requests at once")
                        .await
                }
            }
        }
    });
    let expensive = Router::new()
        .route("/", get(status_page::page))
        .route("/debug/syncz", get(debug::syncz))
        .route("/debug/config_dump", get(debug::config_dump))
        .route("/debug/connections", get(debug::connections))
        .route("/debug/scopes", get(debug::scopes))
        .route("/debug/configz", get(debug::configz))
        .layer(at_once.clone())
        .layer(axum::middleware::from_fn(move |request: axum::extract::Request, next: axum::middleware::Next| {
            let clients = clients.clone();
            let budget = budget.clone();
            async move {
                let client = request
                    .extensions()
                    .get::<axum::extract::ConnectInfo<SocketAddr>>()
                    .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |info| info.0.ip());
                if clients.len() > MAX_TRACKED_CLIENTS {
                    clients.retain_recent();
                }
                if per_client_limited && clients.check_key(&client).is_err() {
                    let text = "too many requests for this view from your address";
                    return refuse(StatusCode::TOO_MANY_REQUESTS, REFUSAL_WAIT_MAX, text).await;
                }
                let start = std::time::Instant::now();
                if let Err(wait) = budget.admit(start) {
                    let text = "the admin port's time for expensive views is spent for now (--admin-render-budget)";
                    return refuse(StatusCode::SERVICE_UNAVAILABLE, wait.min(REFUSAL_WAIT_MAX), text).await;
                }
                let response = next.run(request).await;
                budget.spend(start.elapsed(), std::time::Instant::now());
                response
            }
        }));
    Router::new()
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .route("/debug/push_status", get(debug::push_status))
        .layer(at_once)
        .merge(expensive)
        .with_state(state)
}

/// A refusal, answered after `wait`: a poller that ignores `Retry-After`
/// and asks again at once would otherwise turn refusals into a busy loop
/// on both sides. The wait holds a timer, no permit and no thread.
async fn refuse(status: StatusCode, wait: std::time::Duration, text: &str) -> axum::response::Response {
    tokio::time::sleep(wait).await;
    let retry_after = wait.as_secs().max(1).to_string();
    (status, [(header::RETRY_AFTER, retry_after)], format!("{text}; retry in a moment\n")).into_response()
}

/// The longest a refused request is held before its answer.
const REFUSAL_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(1);

/// How long a request beyond the cap on requests at once is held.
const REFUSAL_WAIT_AT_ONCE: std::time::Duration = std::time::Duration::from_millis(100);

/// Client addresses whose rate is tracked before stale ones are forgotten.
const MAX_TRACKED_CLIENTS: usize = 4096;

/// `GET /ready`: 200 once the first snapshot from the sources is published;
/// until then 503 with what the server waits for.
async fn ready(State(state): State<AdminState>) -> (StatusCode, String) {
    match state.waiting_for() {
        None => (StatusCode::OK, "ready\n".to_string()),
        Some(what) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: waiting for {what}\n")),
    }
}

/// `GET /metrics`: Prometheus text format.
async fn metrics(State(state): State<AdminState>) -> impl IntoResponse {
    let body = state.engine.metrics().render(state.engine.readings());
    ([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], body)
}

#[cfg(test)]
mod test;
