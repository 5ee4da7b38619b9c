//! The `/debug/*` endpoints: JSON views of what the control plane holds.
//!
//! Every handler reads published state only — the snapshot through
//! `ArcSwap`, each stream's [`StreamStatus`] copy, the push history, the
//! source's problems — so a debug request never waits on a stream or the
//! engine, and a stream never waits on it.

use crate::text::shown;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::AdminState;
use crate::config::Problem;
use crate::generate::cache::CacheStats;
use crate::push::history::{PushRecord, unix_millis};
use crate::push::queue::ConnectionHandle;
use crate::resource::TypeUrl;
use crate::xds::stream::status::{StreamStatus, SyncState, TypeStatus};

/// meshpush's version, shown where Istio shows istiod's.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Types in `istioctl proxy-status` column order: Envoy's (PCDS, which
/// only agents ask for, is not a column, as in istiod's syncz).
const STATUS_ORDER: [TypeUrl; 5] =
    [TypeUrl::Cluster, TypeUrl::Listener, TypeUrl::Endpoint, TypeUrl::Route, TypeUrl::Secret];

/// One type of one stream in `/debug/syncz`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TypeSync {
    /// `cds`, `lds`, `eds`, `rds`.
    #[serde(rename = "type")]
    pub type_short: String,
    /// `SYNCED`, `NOT SENT`, `STALE` or `ERROR`.
    pub status: String,
    /// Last nonce sent.
    pub nonce_sent: Option<String>,
    /// Last nonce ACKed.
    pub nonce_acked: Option<String>,
    /// Version of the last response sent.
    pub version_sent: Option<String>,
    /// Version last ACKed.
    pub version_acked: Option<String>,
    /// The last NACK's message, if the last response was rejected or an earlier one was.
    pub last_nack: Option<String>,
    /// Nonce of that NACK.
    pub last_nack_nonce: Option<String>,
    /// Responses sent.
    pub responses: u64,
}

/// One stream in `/debug/syncz` (what `proxy-status` prints).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProxySync {
    /// Node id.
    pub proxy: String,
    /// Connection id.
    pub conn_id: u64,
    /// Envoy's `node.cluster`.
    pub cluster: String,
    /// The Kubernetes cluster the proxy runs in: its `CLUSTER_ID` metadata,
    /// else meshpush's own `--cluster-id` (as istiod defaults it).
    #[serde(default)]
    pub cluster_id: String,
    /// The proxy's `ISTIO_VERSION` metadata, if any.
    pub proxy_version: Option<String>,
    /// meshpush's version (Istio's ISTIOD column).
    pub meshpush_version: String,
    /// Per type, in proxy-status order (cds, lds, eds, rds).
    pub types: Vec<TypeSync>,
}

impl ProxySync {
    /// The entry for `t` (`cds`…).
    pub fn state(&self, short: &str) -> Option<&TypeSync> {
        self.types.iter().find(|t| t.type_short == short)
    }
}

fn type_sync(t: TypeUrl, s: &TypeStatus) -> TypeSync {
    TypeSync {
        type_short: t.short().to_string(),
        status: s.sync_state().as_str().to_string(),
        nonce_sent: s.nonce_sent.map(|n| n.to_string()),
        nonce_acked: s.nonce_acked.map(|n| n.to_string()),
        version_sent: s.version_sent.as_deref().map(str::to_string),
        version_acked: s.version_acked.as_deref().map(str::to_string),
        last_nack: s.last_nack.as_ref().map(|n| n.message.clone()),
        last_nack_nonce: s.last_nack.as_ref().map(|n| n.nonce.map(|n| n.to_string()).unwrap_or_default()),
        responses: s.responses,
    }
}

/// Connections sorted by proxy id, then by connection id.
pub fn sorted_connections(state: &AdminState) -> Vec<Arc<ConnectionHandle>> {
    let mut conns = state.engine.queue().connections();
    conns.sort_by(|a, b| a.proxy.id.cmp(&b.proxy.id).then(a.id.cmp(&b.id)));
    conns
}

/// The sync view of one connection.
pub fn proxy_sync(conn: &ConnectionHandle, status: &StreamStatus, own_cluster: &str) -> ProxySync {
    // What a client sent is shown bounded (`text::Shown`): one client's
    // megabyte of node id must not become a megabyte of every answer.
    let cluster_id = conn.proxy.cluster_id().unwrap_or(own_cluster);
    ProxySync {
        proxy: shown(&conn.proxy.id).into_owned(),
        conn_id: conn.id,
        cluster: shown(&conn.proxy.cluster).into_owned(),
        cluster_id: shown(cluster_id).into_owned(),
        proxy_version: conn.proxy.metadata.get("ISTIO_VERSION").map(|v| shown(v).into_owned()),
        meshpush_version: VERSION.to_string(),
        types: STATUS_ORDER.iter().map(|t| type_sync(*t, status.get(*t))).collect(),
    }
}

/// `GET /debug/syncz`: per connection and type, sent and ACKed nonce and
/// version, the sync state and the last NACK.
pub async fn syncz(State(state): State<AdminState>) -> Json<Vec<ProxySync>> {
    let own = state.cluster_id();
    Json(sorted_connections(&state).iter().map(|c| proxy_sync(c, &state.status(c.id), &own)).collect())
}

/// One entry of `/debug/connections`.
#[derive(Debug, Serialize)]
struct ConnectionView {
    conn_id: u64,
    proxy: String,
    kind: String,
    cluster: String,
    namespace: String,
    ip: String,
    labels: BTreeMap<String, String>,
    interception: String,
    proxy_version: Option<String>,
    #[serde(serialize_with = "unix_millis")]
    connected_at: SystemTime,
    connected_seconds: f64,
    scope: u32,
    subscribed: Vec<&'static str>,
    watched: BTreeMap<&'static str, usize>,
    acks: u64,
    nacks: u64,
    stale_nonces: u64,
    push_pending: bool,
}

/// `GET /debug/connections`: every connected stream.
pub async fn connections(State(state): State<AdminState>) -> Json<Vec<Value>> {
    let views = sorted_connections(&state)
        .iter()
        .map(|c| {
            let status = state.status(c.id);
            let age = c.connected.elapsed();
            let view = ConnectionView {
                conn_id: c.id,
                proxy: shown(&c.proxy.id).into_owned(),
                kind: format!("{:?}", c.proxy.kind),
                cluster: shown(&c.proxy.cluster).into_owned(),
                namespace: shown(&c.proxy.namespace).into_owned(),
                ip: shown(&c.proxy.ip).into_owned(),
                labels: c.proxy.labels.iter().map(|(k, v)| (shown(k).into_owned(), shown(v).into_owned())).collect(),
                interception: format!("{:?}", c.proxy.interception),
                proxy_version: c.proxy.metadata.get("ISTIO_VERSION").map(|v| shown(v).into_owned()),
                connected_at: SystemTime::now().checked_sub(age).unwrap_or(SystemTime::UNIX_EPOCH),
                connected_seconds: age.as_secs_f64(),
                scope: c.scope.load(Ordering::Relaxed),
                subscribed: STATUS_ORDER.iter().filter(|t| status.get(**t).subscribed).map(|t| t.short()).collect(),
                watched: STATUS_ORDER.iter().map(|t| (t.short(), status.get(*t).watched)).collect(),
                acks: status.acks,
                nacks: status.nacks,
                stale_nonces: status.stale,
                push_pending: c.mailbox.is_pending(),
            };
            serde_json::to_value(view).unwrap_or(Value::Null)
        })
        .collect();
    Json(views)
}

/// The `proxyID` query parameter.
#[derive(Debug, Deserialize)]
pub struct ProxyQuery {
    /// A node id, or `POD.NAMESPACE` (the middle of a sidecar id), or a pod name when unique.
    #[serde(rename = "proxyID")]
    pub proxy_id: Option<String>,
}

/// Finds the connection of a proxy: exact node id first, then
/// `POD.NAMESPACE`, then a pod name if only one proxy has it. The newest
/// connection wins when a proxy reconnected.
pub fn find_proxy(state: &AdminState, wanted: &str) -> Result<Arc<ConnectionHandle>, String> {
    let conns = sorted_connections(state);
    let newest = |matches: Vec<&Arc<ConnectionHandle>>| matches.into_iter().max_by_key(|c| c.id).cloned();
    if let Some(c) = newest(conns.iter().filter(|c| &*c.proxy.id == wanted).collect()) {
        return Ok(c);
    }
    if let Some(c) = newest(conns.iter().filter(|c| &*c.proxy.workload == wanted).collect()) {
        return Ok(c);
    }
    let by_pod: Vec<&Arc<ConnectionHandle>> =
        conns.iter().filter(|c| c.proxy.workload.split('.').next() == Some(wanted)).collect();
    let mut ids: Vec<&str> = by_pod.iter().map(|c| &*c.proxy.id).collect();
    ids.dedup();
    match ids.len() {
        0 => Err(format!("no connected proxy is {wanted:?} (see /debug/syncz for the connected ones)")),
        1 => Ok(newest(by_pod).expect("one match")),
        _ => Err(format!("{wanted:?} names several proxies: {}", ids.join(", "))),
    }
}

fn error(status: StatusCode, message: String) -> Response {
    (status, Json(json!({ "error": message }))).into_response()
}

/// `GET /debug/config_dump?proxyID=ID`: what that proxy is sent, as Envoy's config_dump.
pub async fn config_dump(State(state): State<AdminState>, Query(q): Query<ProxyQuery>) -> Response {
    let Some(wanted) = q.proxy_id.filter(|p| !p.is_empty()) else {
        return error(StatusCode::BAD_REQUEST, "proxyID is required: /debug/config_dump?proxyID=NODE_ID".into());
    };
    let conn = match find_proxy(&state, &wanted) {
        Ok(c) => c,
        Err(e) => return error(StatusCode::NOT_FOUND, e),
    };
    let ads = state.ads.clone();
    let proxy = conn.proxy.clone();
    // Generation on a miss is CPU work: keep it off the async workers.
    match tokio::task::spawn_blocking(move || super::config_dump::config_dump(&ads, &proxy)).await {
        Ok(Ok(dump)) => Json(dump).into_response(),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("printing the config dump failed: {e}")),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("building the config dump failed: {e}")),
    }
}

/// `GET /debug/push_status`: the last push and totals.
pub async fn push_status(State(state): State<AdminState>) -> Json<Value> {
    let engine = &state.engine;
    let m = &engine.metrics();
    let per_type: BTreeMap<&str, Value> = STATUS_ORDER
        .iter()
        .map(|t| {
            let stats = &engine.cache().stats;
            (
                t.short(),
                json!({
                    "pushes": m.xds_pushes.get(*t).get(),
                    "rejects": m.xds_rejects.get(*t).get(),
                    "cache_generations": CacheStats::get(&stats.generations, *t),
                    "cache_hits": CacheStats::get(&stats.hits, *t),
                    "cache_misses": CacheStats::get(&stats.misses, *t),
                }),
            )
        })
        .collect();
    let last: Option<PushRecord> = engine.history().last();
    let recent = engine.history().since(Duration::from_secs(300));
    Json(json!({
        "version": engine.snapshot().version,
        "last_push": last,
        "pushes_last_5m": recent.len(),
        "proxies": engine.queue().len(),
        "per_type": per_type,
    }))
}

/// `GET /debug/scopes`: every scope of the published snapshot, its members
/// and the services it sees.
pub async fn scopes(State(state): State<AdminState>) -> Json<Vec<Value>> {
    let ctx = state.engine.snapshot();
    let mut members: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for c in state.engine.queue().connections() {
        members.entry(c.scope.load(Ordering::Relaxed)).or_default().push(shown(&c.proxy.id).into_owned());
    }
    let mut scopes = ctx.scopes();
    scopes.sort_by_key(|s| s.id);
    let views = scopes
        .iter()
        .map(|s| {
            let mut proxies = members.get(&s.id.0).cloned().unwrap_or_default();
            proxies.sort();
            json!({
                "id": s.id.0,
                "key": s.key,
                "members": proxies.len(),
                "proxies": proxies,
                "visible_services": s.services.iter().map(|svc| svc.hostname.to_string()).collect::<Vec<_>>(),
                "outbound_policy": s.outbound_policy,
            })
        })
        .collect();
    Json(views)
}

/// `GET /debug/configz`: every object in the published snapshot with its
/// source file, and the validation problems of the sources.
pub async fn configz(State(state): State<AdminState>) -> Json<Value> {
    let ctx = state.engine.snapshot();
    let problems: Vec<Problem> = state.problems();
    let skipped = skipped_patches(&state);
    // What ztunnel does not enforce of each AuthorizationPolicy, where
    // ztunnel is served.
    let ambient = ctx.mesh.ambient.enabled.then(|| ctx.ambient().clone());
    let objects: Vec<Value> = ctx
        .store
        .iter()
        .map(|stored| {
            let key = stored.object.key();
            let errors: Vec<String> = problems
                .iter()
                .filter(|p| p.object.as_ref() == Some(&key))
                .map(|p| format!("{}: {p}", p.severity))
                .collect();
            let mut view = json!({
                "kind": key.kind.as_str(),
                "namespace": key.namespace,
                "name": key.name,
                "source": { "file": stored.source.file, "doc": stored.source.doc },
                "revision": stored.revision,
                "errors": errors,
                "object": stored.object,
                "status": ctx.gateway_api.status.get(&key),
                "patchesSkipped": skipped.iter().filter(|f| f.filter == key).collect::<Vec<_>>(),
            });
            if let Some(cluster) = key.cluster.remote_id() {
                view["cluster"] = json!(cluster);
            }
            if let Some(notes) = ambient.as_ref().and_then(|a| a.notes.get(&key)) {
                view["ztunnelNotEnforced"] = json!(notes);
            }
            if let Some(why) = ambient.as_ref().and_then(|a| a.bindings.get(&key)) {
                view["waypoint"] = json!(why);
            }
            // What proxyless gRPC applications do not apply of it.
            let grpc = crate::generate::grpc::unsupported::notes(&stored.object);
            if !grpc.is_empty() {
                view["proxylessGrpcNotApplied"] = json!(grpc);
            }
            view
        })
        .collect();
    // What the Gateway API became: Istio Gateways and VirtualServices.
    let gateway_api = json!({
        "gateways": ctx.gateway_api.gateways.iter().map(|g| json!({
            "gateway": g.gateway,
            "servedBy": format!("{}/{}", g.namespace, g.deployment),
            "addresses": g.addresses,
        })).collect::<Vec<Value>>(),
        "virtualServices": ctx.gateway_api.virtual_services.iter().map(|s| &s.object).collect::<Vec<_>>(),
    });
    let problems: Vec<Value> = problems
        .iter()
        .map(|p| {
            json!({
                "severity": p.severity.to_string(),
                "file": p.source.file,
                "doc": p.source.doc,
                "object": p.object.as_ref().map(ToString::to_string),
                "path": p.path,
                "message": p.message,
                "text": p.to_string(),
            })
        })
        .collect();
    // The remote clusters read, and the keys of remote secrets that are not.
    let remote_clusters = state.remote_clusters().map(|r| {
        json!({
            "clusters": r.clusters(),
            "notRead": r.skipped(),
        })
    });
    // The MCP-over-xDS servers read: each one's connection, objects and problems.
    let config_sources = state.mcp().map(|m| m.reports());
    Json(json!({
        "revision": ctx.store.revision(),
        "mesh": ctx.mesh,
        "remoteClusters": remote_clusters,
        "configSources": config_sources,
        // Consul's catalog: its state, index, services and what is not used.
        "consul": state.consul().map(|c| c.report()),
        // Each cluster's network, the network gateways, and what gives none.
        "networks": ctx.networks,
        "objects": objects,
        "gatewayApi": gateway_api,
        "problems": problems,
        "envoyFilterPatchesSkipped": skipped,
    }))
}

/// The EnvoyFilter patches generation skipped somewhere, and why, for the
/// filters of the published snapshot (a mended or deleted filter's go).
pub fn skipped_patches(state: &AdminState) -> Vec<crate::generate::envoy_filter::record::Failure> {
    let ctx = state.engine.snapshot();
    state.engine.cache().patches.failures(|key| ctx.envoy_filters.revision_of(key))
}

/// The sync state of a stream's type, for the status page.
pub fn sync_state(state: &AdminState, conn: &ConnectionHandle, t: TypeUrl) -> SyncState {
    state.status(conn.id).get(t).sync_state()
}
