//! A stand-in Consul server: the part of Consul's HTTP API a service
//! registry reads and registrations write, on loopback, with Consul's
//! semantics where a client can tell them apart:
//!
//! - `GET /v1/catalog/services` (a map of service name to its tags) and
//!   `GET /v1/catalog/service/NAME` (its instances, Consul's field names;
//!   an unknown name is `[]`), each with `X-Consul-Index`,
//!   `X-Consul-KnownLeader` and `X-Consul-LastContact`, and as blocking
//!   queries: `?index=N&wait=DURATION` holds the answer until the catalog's
//!   index passes `N` or the wait (Go's duration syntax, a unit required,
//!   at most 10 minutes, 5 by default) ends.
//! - `PUT /v1/catalog/register` and `PUT /v1/catalog/deregister`, their
//!   bodies' keys read without regard to case (as Consul reads them), each
//!   answering `true`; and the agent's `PUT /v1/agent/service/register`
//!   and `/deregister/ID`, on the stand-in's one node.
//! - With a token set, every request must carry it (`X-Consul-Token`,
//!   `Authorization: Bearer`, or `?token=`), else `403 ACL not found`.
//!
//! `tests/protocol/consul.rs` checks it with a real Consul client from
//! PyPI (py-consul), as the Kubernetes stand-in is checked with `kubectl`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::watch;

/// The stand-in's node (where the agent API registers services).
pub const AGENT_NODE: &str = "standin-agent";
/// Its datacenter.
pub const DATACENTER: &str = "dc1";

/// One registered instance.
#[derive(Debug, Clone, PartialEq)]
struct Instance {
    node: String,
    id: String,
    name: String,
    address: String,
    port: u64,
    tags: Vec<String>,
    meta: BTreeMap<String, String>,
}

#[derive(Debug, Default)]
struct Catalog {
    /// Node name → (address, datacenter).
    nodes: BTreeMap<String, (String, String)>,
    instances: Vec<Instance>,
}

#[derive(Clone)]
struct Shared {
    catalog: Arc<Mutex<Catalog>>,
    index: watch::Sender<u64>,
    token: Option<String>,
}

/// The stand-in server. Dropping it stops it.
pub struct ConsulStandIn {
    /// Where it listens (`http://` + this).
    pub addr: SocketAddr,
    shared: Shared,
    task: tokio::task::JoinHandle<()>,
}

impl ConsulStandIn {
    /// Starts a server on a free loopback port; with `token`, every
    /// request must carry it.
    pub async fn start(token: Option<&str>) -> ConsulStandIn {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        ConsulStandIn::start_on(listener, token).await
    }

    /// Starts a server on `listener` (one that went away comes back on its
    /// old port this way), empty.
    pub async fn start_on(listener: tokio::net::TcpListener, token: Option<&str>) -> ConsulStandIn {
        let addr = listener.local_addr().unwrap();
        let (index, _) = watch::channel(1);
        let shared = Shared { catalog: Arc::default(), index, token: token.map(str::to_string) };
        shared.catalog.lock().nodes.insert(AGENT_NODE.into(), ("127.0.0.1".into(), DATACENTER.into()));
        let app = Router::new()
            .route("/v1/catalog/services", get(services))
            .route("/v1/catalog/service/{name}", get(service))
            .route("/v1/catalog/register", put(register))
            .route("/v1/catalog/deregister", put(deregister))
            .route("/v1/agent/service/register", put(agent_register))
            .route("/v1/agent/service/deregister/{id}", put(agent_deregister))
            .layer(axum::middleware::from_fn_with_state(shared.clone(), acl))
            .with_state(shared.clone());
        // Each connection is a task of this one: stopping the server drops
        // them all, as a Consul that goes away drops its clients' queries.
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((tcp, _)) = listener.accept().await {
                let service = hyper_util::service::TowerToHyperService::new(app.clone());
                connections.spawn(async move {
                    let io = hyper_util::rt::TokioIo::new(tcp);
                    drop(hyper::server::conn::http1::Builder::new().serve_connection(io, service).await);
                });
            }
        });
        ConsulStandIn { addr, shared, task }
    }

    /// The address clients are given: `http://IP:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Registers (or replaces) instance `id` of service `name` on `node`
    /// (created at `node_address` in `dc1` if new).
    #[allow(clippy::too_many_arguments, reason = "one registration's fields")]
    pub fn register(
        &self,
        node: &str,
        node_address: &str,
        name: &str,
        id: &str,
        address: &str,
        port: u16,
        tags: &[&str],
        meta: &[(&str, &str)],
    ) {
        let instance = Instance {
            node: node.into(),
            id: id.into(),
            name: name.into(),
            address: address.into(),
            port: port.into(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            meta: meta.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        };
        let mut catalog = self.shared.catalog.lock();
        catalog.nodes.entry(node.into()).or_insert((node_address.into(), DATACENTER.into()));
        upsert(&mut catalog, instance);
        drop(catalog);
        self.shared.index.send_modify(|i| *i += 1);
    }

    /// Deregisters instance `id` of `node`.
    pub fn deregister(&self, node: &str, id: &str) {
        self.shared.catalog.lock().instances.retain(|i| !(i.node == node && i.id == id));
        self.shared.index.send_modify(|i| *i += 1);
    }

    /// The catalog's index now.
    pub fn index(&self) -> u64 {
        *self.shared.index.borrow()
    }
}

impl Drop for ConsulStandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn upsert(catalog: &mut Catalog, instance: Instance) {
    match catalog.instances.iter_mut().find(|i| i.node == instance.node && i.id == instance.id) {
        Some(old) => *old = instance,
        None => catalog.instances.push(instance),
    }
}

/// The value of `key` in a JSON object, whatever the case of its key.
fn field<'a>(object: &'a Value, key: &str) -> Option<&'a Value> {
    object.as_object()?.iter().find(|(k, _)| k.eq_ignore_ascii_case(key)).map(|(_, v)| v)
}

fn text(object: &Value, key: &str) -> String {
    field(object, key).and_then(Value::as_str).unwrap_or_default().to_string()
}

/// With a token set, refuses every request that does not carry it, as
/// Consul's ACLs refuse it (`X-Consul-Token`, `Authorization: Bearer`, or
/// the old `?token=`).
async fn acl(State(shared): State<Shared>, request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let Some(want) = shared.token.as_deref() else { return next.run(request).await };
    let headers = request.headers();
    let header = headers.get("x-consul-token").and_then(|v| v.to_str().ok());
    let bearer = headers.get("authorization").and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    let query = request.uri().query().unwrap_or_default();
    let param = query.split('&').find_map(|kv| kv.strip_prefix("token="));
    if header.or(bearer).or(param) == Some(want) {
        next.run(request).await
    } else {
        (StatusCode::FORBIDDEN, "ACL not found").into_response()
    }
}

/// A request body as Consul reads it: JSON, whatever its content type says.
#[allow(clippy::result_large_err, reason = "the error is the response itself, made once per bad request")]
fn json_body(body: &[u8]) -> Result<Value, Response> {
    serde_json::from_slice(body).map_err(|_| (StatusCode::BAD_REQUEST, "Request decode failed").into_response())
}

/// Go's duration syntax, as Consul parses `wait` (a unit required).
fn go_duration(text: &str) -> Option<Duration> {
    let units = [("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0)];
    let (number, scale) = units.iter().find_map(|(u, s)| text.strip_suffix(u).map(|n| (n, *s)))?;
    let value: f64 = number.parse().ok()?;
    Some(Duration::from_secs_f64(value * scale))
}

/// Holds a read until the index passes the one asked for, or the wait
/// ends; `Err` is the 400 Consul answers a bad parameter with.
#[allow(clippy::result_large_err, reason = "the error is the response itself, made once per bad request")]
async fn block(shared: &Shared, query: &BTreeMap<String, String>) -> Result<u64, Response> {
    let bad = |m: &str| (StatusCode::BAD_REQUEST, m.to_string()).into_response();
    let asked = match query.get("index") {
        Some(i) => i.parse::<u64>().map_err(|_| bad("Invalid index"))?,
        None => 0,
    };
    let wait = match query.get("wait") {
        Some(w) => go_duration(w).ok_or_else(|| bad("Invalid wait time"))?,
        None => Duration::from_secs(300),
    };
    let wait = wait.min(Duration::from_secs(600));
    let mut index = shared.index.subscribe();
    if asked > 0 {
        let _ = tokio::time::timeout(wait, index.wait_for(|now| *now > asked)).await;
    }
    Ok(*index.borrow())
}

fn answer(index: u64, body: Value) -> Response {
    let mut response = axum::Json(body).into_response();
    let headers = response.headers_mut();
    headers.insert("X-Consul-Index", index.into());
    headers.insert("X-Consul-KnownLeader", "true".parse().unwrap());
    headers.insert("X-Consul-LastContact", "0".parse().unwrap());
    response
}

async fn services(State(shared): State<Shared>, Query(query): Query<BTreeMap<String, String>>) -> Response {
    let index = match block(&shared, &query).await {
        Ok(index) => index,
        Err(bad) => return bad,
    };
    let mut listed: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for instance in &shared.catalog.lock().instances {
        let tags = listed.entry(instance.name.clone()).or_default();
        for tag in &instance.tags {
            if !tags.contains(tag) {
                tags.push(tag.clone());
            }
        }
    }
    answer(index, json!(listed))
}

async fn service(
    State(shared): State<Shared>,
    Path(name): Path<String>,
    Query(query): Query<BTreeMap<String, String>>,
) -> Response {
    let index = match block(&shared, &query).await {
        Ok(index) => index,
        Err(bad) => return bad,
    };
    let catalog = shared.catalog.lock();
    let instances: Vec<Value> = catalog
        .instances
        .iter()
        .filter(|i| i.name == name)
        .map(|i| {
            let (address, datacenter) = catalog.nodes.get(&i.node).cloned().unwrap_or_default();
            json!({
                "ID": "", "Node": i.node, "Address": address, "Datacenter": datacenter,
                "TaggedAddresses": {"lan": address}, "NodeMeta": {},
                "ServiceKind": "", "ServiceID": i.id, "ServiceName": i.name,
                "ServiceTags": i.tags, "ServiceAddress": i.address, "ServiceMeta": i.meta,
                "ServicePort": i.port, "ServiceWeights": {"Passing": 1, "Warning": 1},
                "ServiceEnableTagOverride": false, "CreateIndex": 1, "ModifyIndex": index,
            })
        })
        .collect();
    answer(index, Value::Array(instances))
}

/// The instance a registration body describes, or the 400 Consul answers.
#[allow(clippy::result_large_err, reason = "the error is the response itself, made once per bad request")]
fn instance_of(node: &str, service: &Value) -> Result<Instance, Response> {
    let name = text(service, "Service");
    let name = if name.is_empty() { text(service, "Name") } else { name };
    if name.is_empty() {
        return Err((StatusCode::BAD_REQUEST, "Missing service name").into_response());
    }
    let id = text(service, "ID");
    let tags = field(service, "Tags").and_then(Value::as_array).into_iter().flatten();
    let meta = field(service, "Meta").and_then(Value::as_object).into_iter().flatten();
    Ok(Instance {
        node: node.into(),
        id: if id.is_empty() { name.clone() } else { id },
        name,
        address: text(service, "Address"),
        port: field(service, "Port").and_then(Value::as_u64).unwrap_or(0),
        tags: tags.filter_map(Value::as_str).map(str::to_string).collect(),
        meta: meta.map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect(),
    })
}

async fn register(State(shared): State<Shared>, body: axum::body::Bytes) -> Response {
    let body = match json_body(&body) {
        Ok(body) => body,
        Err(bad) => return bad,
    };
    let (node, address) = (text(&body, "Node"), text(&body, "Address"));
    if node.is_empty() || address.is_empty() {
        return (StatusCode::BAD_REQUEST, "Must provide node and address").into_response();
    }
    let datacenter = text(&body, "Datacenter");
    let instance = match field(&body, "Service") {
        Some(service) => match instance_of(&node, service) {
            Ok(instance) => Some(instance),
            Err(bad) => return bad,
        },
        None => None,
    };
    let mut catalog = shared.catalog.lock();
    let dc = if datacenter.is_empty() { DATACENTER.to_string() } else { datacenter };
    catalog.nodes.insert(node, (address, dc));
    if let Some(instance) = instance {
        upsert(&mut catalog, instance);
    }
    drop(catalog);
    shared.index.send_modify(|i| *i += 1);
    axum::Json(true).into_response()
}

async fn deregister(State(shared): State<Shared>, body: axum::body::Bytes) -> Response {
    let body = match json_body(&body) {
        Ok(body) => body,
        Err(bad) => return bad,
    };
    let node = text(&body, "Node");
    if node.is_empty() {
        return (StatusCode::BAD_REQUEST, "Must provide node").into_response();
    }
    let service_id = text(&body, "ServiceID");
    let mut catalog = shared.catalog.lock();
    if service_id.is_empty() {
        catalog.nodes.remove(&node);
        catalog.instances.retain(|i| i.node != node);
    } else {
        catalog.instances.retain(|i| !(i.node == node && i.id == service_id));
    }
    drop(catalog);
    shared.index.send_modify(|i| *i += 1);
    axum::Json(true).into_response()
}

async fn agent_register(State(shared): State<Shared>, body: axum::body::Bytes) -> Response {
    let body = match json_body(&body) {
        Ok(body) => body,
        Err(bad) => return bad,
    };
    let instance = match instance_of(AGENT_NODE, &body) {
        Ok(instance) => instance,
        Err(bad) => return bad,
    };
    upsert(&mut shared.catalog.lock(), instance);
    shared.index.send_modify(|i| *i += 1);
    StatusCode::OK.into_response()
}

async fn agent_deregister(State(shared): State<Shared>, Path(id): Path<String>) -> Response {
    shared.catalog.lock().instances.retain(|i| !(i.node == AGENT_NODE && i.id == id));
    shared.index.send_modify(|i| *i += 1);
    StatusCode::OK.into_response()
}
