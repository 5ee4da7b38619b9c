//! The floor of meshpush's serving stack: an ADS server that only replays
//! pre-encoded responses, for the loadtest to measure beside meshpush.
//!
//! It generates, once, what meshpush sends the first sidecar of each
//! namespace of a loadtest scenario (the same mesh, the same generators,
//! the same cache and response bodies), then serves every ADS stream from
//! the bytes of its namespace: the first request of each type gets that
//! type's body, and endpoint changes are pushed as meshpush pushes them,
//! one push in flight per stream, the changes that come meanwhile merged
//! into the next one. Requests are read by meshpush's own reader (whole
//! messages, the node read once), responses leave through its own response
//! body and its own connection handling (`serve::connections`), on the same
//! tonic, hyper, h2 and tokio. What is left out is the control plane: no
//! store, no snapshots, no scopes computed per change, no watch state, no
//! versions to compare, no push queue. The gap between this server's
//! figures and meshpush's is what meshpush's own work costs; this server's
//! figures are what the stack costs on the machine.
//!
//! Endpoint changes come two ways:
//! * `GET /change/N` on the admin address moves the first endpoint of
//!   `svc-0.ns-0` to `127.250.x.y` (`N` = x × 256 + y), for the loadtest's
//!   `--trigger`;
//! * the registry API's `Apply` of an `EndpointSlice` (the loadtest's churn
//!   and its other endpoint changes): the service's assignment with the
//!   slice's addresses, in order. Other kinds are refused (`UNIMPLEMENTED`):
//!   the floor replays endpoint changes only.
//!
//! ```text
//! cargo build --release --example replay_floor && cargo build --release -p loadtest
//! target/release/examples/replay_floor --scenario s1 --xds-addr 127.0.0.1:15110 --admin-addr 127.0.0.1:15114 &
//! until curl -s -o /dev/null http://127.0.0.1:15114/; do sleep 0.2; done   # generated, listening
//! target/release/loadtest s1 --target 127.0.0.1:15110 --server-pid $! \
//!     --trigger 'curl -sf http://127.0.0.1:15114/change/%n' \
//!     --expect 'eds:outbound|9080||svc-0.ns-0.svc.cluster.local:127.250.0.%n'
//! kill $!
//!
//! target/release/examples/replay_floor --scenario churn --xds-addr 127.0.0.1:15110 --admin-addr 127.0.0.1:15114 &
//! until curl -s -o /dev/null http://127.0.0.1:15114/; do sleep 0.2; done   # generated, listening
//! target/release/loadtest churn --target 127.0.0.1:15110 --server-pid $! --no-load
//! kill $!
//! ```

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};

use anyhow::Context as _;
use axum::extract::{Path, State};
use bytes::Bytes;
use clap::Parser;
use envoy_types::pb::envoy::config::core::v3::{Node, address};
use envoy_types::pb::envoy::config::endpoint::v3::{ClusterLoadAssignment, LbEndpoint, lb_endpoint::HostIdentifier};
use futures::future::BoxFuture;
use loadtest::mesh::Shape;
use loadtest::scenario::Scenario;
use meshpush::config::k8s::SERVICE_NAME_LABEL;
use meshpush::config::parse::parse_documents;
use meshpush::config::{ConfigObject, Severity};
use meshpush::generate::cache::ScopedCache;
use meshpush::model::store::Write;
use meshpush::model::{ConfigStore, Proxy};
use meshpush::push::{PushChanges, PushContext, ScopeInterner};
use meshpush::resource::TypeUrl;
use meshpush::resource::{EncodedResource, version_of};
use meshpush::serve::connections;
use meshpush::source::registry::REGISTRY_SOURCE;
use meshpush::source::registry::proto::registry_server::{Registry, RegistryServer};
use meshpush::source::registry::proto::{
    ApplyRequest, ApplyResponse, GetVersionRequest, VersionResponse, WaitForRevisionRequest,
};
use meshpush::xds::server::MAX_REQUEST_BYTES;
use meshpush::xds::sotw::OutgoingResponse;
use meshpush::xds::sotw::SotwRequest;
use meshpush::xds::sotw::codec::{self, ResponseBody};
use meshpush::xds::stream::bodies::BodyCache;
use meshpush::xds::stream::body::ResponseStreamBody;
use meshpush::xds::stream::messages::RequestMessages;
use meshpush::xds::stream::published::Published;
use meshpush::xds::stream::request::StreamNode;
use meshpush::xds::watch::nonce::Nonce;
use prost::Message;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};

// On the system allocator with meshpush's `system-allocator` feature, as
// meshpush is, so that heaptrack can trace the floor as it traces meshpush.
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Changes a namespace's channel holds for a stream that has not run since
/// they came. A stream takes each change as soon as it runs, push in flight
/// or not, so only a stream starved of CPU for this many changes loses one
/// (and says so).
const CHANGES_HELD: usize = 4096;

/// Longest client text quoted back in an error.
const QUOTED: usize = 64;

/// Replays pre-encoded ADS responses (the floor of meshpush's stack).
#[derive(Debug, Parser)]
struct Args {
    /// The loadtest scenario whose mesh to serve. Each stream is sent what
    /// the first sidecar of its namespace is sent: its namespace's scope,
    /// and that sidecar's inbound listeners.
    #[arg(long, default_value = "s1")]
    scenario: Scenario,
    /// ADS address; the registry API (`Apply` of EndpointSlices) is served
    /// on it too.
    #[arg(long, default_value = "127.0.0.1:15110")]
    xds_addr: SocketAddr,
    /// Admin address (`/change/N`).
    #[arg(long, default_value = "127.0.0.1:15114")]
    admin_addr: SocketAddr,
}

/// What the streams of one namespace are sent.
struct ScopeReplay {
    /// Framed response bodies by `TypeUrl::index`.
    bodies: [Bytes; TypeUrl::COUNT],
    /// The assignments its streams watch, by cluster name.
    watched: HashSet<Arc<str>>,
    /// Changes of those assignments.
    changes: broadcast::Sender<Arc<Change>>,
}

/// One changed assignment, and the body that carries it alone (what a
/// stream sends when no other change merged with it).
struct Change {
    assignment: Arc<EncodedResource>,
    body: Bytes,
}

/// Everything the floor serves.
struct Replay {
    /// One per namespace of the scenario.
    scopes: Vec<ScopeReplay>,
    /// Namespace name → index in `scopes`.
    by_namespace: HashMap<Arc<str>, usize>,
    /// Every assignment as generated, by cluster name: what a change rewrites.
    assignments: HashMap<Arc<str>, Arc<EncodedResource>>,
    /// The cluster `/change/N` moves an endpoint of: `svc-0.ns-0`'s.
    triggered: Arc<str>,
    /// Applies so far: the registry's revision.
    revision: AtomicU64,
    /// Whether a stream has lost changes (said once).
    lagged: AtomicBool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // As `meshpush serve` does: the floor's heap must cost what meshpush's does.
    meshpush::serve::opt_out_of_huge_pages();
    let replay = Arc::new(generate(args.scenario)?);
    tokio::runtime::Runtime::new()?.block_on(serve(args, replay))
}

/// Generates what meshpush sends the first sidecar of each namespace.
fn generate(scenario: Scenario) -> anyhow::Result<Replay> {
    let shape = scenario.shape();
    let store = ConfigStore::new();
    for (file, text) in shape.files() {
        let parsed = parse_documents(&file, &text);
        anyhow::ensure!(!parsed.has_errors(), "{file}: {:?}", parsed.problems);
        store.apply(parsed.objects.into_iter().map(|(object, source)| Write::put(object, source)));
    }
    let ctx = PushContext::build(store.snapshot(), 1, Arc::new(ScopeInterner::default()));
    let cache = ScopedCache::new();
    cache.invalidate(&ctx, &PushChanges { full: true, types: meshpush::resource::TypeSet::ALL, ..Default::default() });
    let assembled = BodyCache::new();
    let view = Published { ctx: &ctx, cache: &cache, bodies: &assembled };
    let body = |t: TypeUrl, resources: &[Arc<EncodedResource>]| {
        let version = version_of(resources.iter().map(|r| (&*r.name, r.hash)));
        codec::body(&view, t, &version, resources, false)
    };
    let mut scopes = Vec::new();
    let mut by_namespace = HashMap::new();
    let mut assignments = HashMap::new();
    for namespace in 0..shape.namespaces {
        let mut node = Node::decode(&shape.node(namespace * shape.sidecars_per_namespace)[..])?;
        node.merge(&Shape::node_common(false)[..])?;
        let proxy = Proxy::from_node(&node).context("a sidecar's node")?;
        let scope = ctx.scope_for(&proxy);
        let inbound = ctx.inbound_for(&proxy);
        let clusters = cache.proxy_set(&ctx, &scope, &inbound, TypeUrl::Cluster);
        let listeners = cache.proxy_set(&ctx, &scope, &inbound, TypeUrl::Listener);
        let routes = cache.scoped(&ctx, &scope, TypeUrl::Route);
        let eds: Vec<Arc<EncodedResource>> =
            clusters.resources.iter().filter_map(|c| cache.endpoint(&ctx, &c.name, None)).collect();
        let mut bodies: [Bytes; TypeUrl::COUNT] = Default::default();
        bodies[TypeUrl::Cluster.index()] = body(TypeUrl::Cluster, &clusters.resources);
        bodies[TypeUrl::Endpoint.index()] = body(TypeUrl::Endpoint, &eds);
        bodies[TypeUrl::Listener.index()] = body(TypeUrl::Listener, &listeners.resources);
        bodies[TypeUrl::Route.index()] = body(TypeUrl::Route, &routes.resources);
        if namespace == 0 {
            eprintln!(
                "replay_floor: ns-0's sidecar: {} clusters, {} assignments, {} listeners, {} route configs; {} bytes",
                clusters.resources.len(),
                eds.len(),
                listeners.resources.len(),
                routes.resources.len(),
                bodies.iter().map(Bytes::len).sum::<usize>()
            );
        }
        let watched = eds.iter().map(|r| r.name.clone()).collect();
        for assignment in eds {
            assignments.entry(assignment.name.clone()).or_insert(assignment);
        }
        by_namespace.insert(proxy.namespace.clone(), scopes.len());
        scopes.push(ScopeReplay { bodies, watched, changes: broadcast::channel(CHANGES_HELD).0 });
    }
    let triggered: Arc<str> = shape.cluster(0, 0).into();
    anyhow::ensure!(assignments.contains_key(&triggered), "no assignment for {triggered}");
    eprintln!("replay_floor: {} namespaces, {} assignments", scopes.len(), assignments.len());
    Ok(Replay {
        scopes,
        by_namespace,
        assignments,
        triggered,
        revision: AtomicU64::new(1),
        lagged: AtomicBool::new(false),
    })
}

impl Replay {
    /// The namespace a stream's node is in, as an index in `scopes`.
    fn scope_of(&self, node: StreamNode) -> Option<usize> {
        let proxy = Proxy::from_node(&Node::from(node)).ok()?;
        self.by_namespace.get(&proxy.namespace).copied()
    }

    /// `cluster`'s assignment as generated, with one endpoint per address
    /// of `addresses`, each like its first endpoint.
    fn with_addresses(&self, cluster: &str, addresses: &[String]) -> anyhow::Result<Arc<Change>> {
        let generated = self.assignments.get(cluster).with_context(|| format!("no assignment named {cluster}"))?;
        let mut cla = ClusterLoadAssignment::decode(&generated.to_any().value[..])?;
        cla.endpoints.truncate(1);
        let locality = cla.endpoints.first_mut().context("an assignment without endpoints")?;
        let template = locality.lb_endpoints.first().cloned().context("an assignment without endpoints")?;
        locality.lb_endpoints = addresses.iter().map(|a| at_address(&template, a)).collect();
        let assignment = Arc::new(EncodedResource::encode(TypeUrl::Endpoint, generated.name.clone(), &cla));
        let version = version_of([(&*assignment.name, assignment.hash)]);
        // Each change is new content: meshpush assembles its body once, too.
        let body = ResponseBody::assemble(TypeUrl::Endpoint, &version, [&*assignment]).bytes;
        Ok(Arc::new(Change { assignment, body }))
    }

    /// Change `n` of `/change/N`: `svc-0.ns-0`'s first endpoint moved to
    /// `127.250.x.y` (`n` = x × 256 + y).
    fn triggered_change(&self, n: u16) -> anyhow::Result<Arc<Change>> {
        let generated = &self.assignments[&self.triggered];
        let cla = ClusterLoadAssignment::decode(&generated.to_any().value[..])?;
        let mut addresses: Vec<String> =
            cla.endpoints.iter().flat_map(|l| &l.lb_endpoints).filter_map(address_of).map(str::to_owned).collect();
        let [hi, lo] = n.to_be_bytes();
        *addresses.first_mut().context("an assignment without endpoints")? = format!("127.250.{hi}.{lo}");
        self.with_addresses(&self.triggered, &addresses)
    }

    /// Hands a change to the streams of every namespace that watches it.
    fn publish(&self, change: &Arc<Change>) {
        for scope in &self.scopes {
            if scope.watched.contains(&change.assignment.name) {
                let _ = scope.changes.send(change.clone());
            }
        }
    }
}

/// `template` with its address replaced by `ip`.
fn at_address(template: &LbEndpoint, ip: &str) -> LbEndpoint {
    let mut endpoint = template.clone();
    if let Some(HostIdentifier::Endpoint(ep)) = endpoint.host_identifier.as_mut()
        && let Some(address::Address::SocketAddress(sa)) = ep.address.as_mut().and_then(|a| a.address.as_mut())
    {
        ip.clone_into(&mut sa.address);
    }
    endpoint
}

/// An endpoint's IP address.
fn address_of(endpoint: &LbEndpoint) -> Option<&str> {
    match endpoint.host_identifier.as_ref()? {
        HostIdentifier::Endpoint(ep) => match ep.address.as_ref()?.address.as_ref()? {
            address::Address::SocketAddress(sa) => Some(&sa.address),
            _ => None,
        },
        _ => None,
    }
}

async fn serve(args: Args, replay: Arc<Replay>) -> anyhow::Result<()> {
    // The ADS listener first: once the admin address answers, ADS
    // connections are queued too.
    let listener = connections::XdsListener::bind_tcp(args.xds_addr)?;
    let admin = axum::Router::new()
        .route(
            "/change/{n}",
            axum::routing::get(|State(replay): State<Arc<Replay>>, Path(n): Path<u16>| async move {
                match replay.triggered_change(n) {
                    Ok(change) => {
                        replay.publish(&change);
                        "sent\n".to_string()
                    }
                    Err(e) => format!("not sent: {e:#}\n"),
                }
            }),
        )
        .with_state(replay.clone());
    let admin_listener = tokio::net::TcpListener::bind(args.admin_addr).await?;
    tokio::spawn(async move { axum::serve(admin_listener, admin).await });
    eprintln!("replay_floor: serving ADS and the registry API on {} (pid {})", args.xds_addr, std::process::id());
    // Served as meshpush serves its xDS port: the same connection handling
    // (its accept queue, hyper, keepalive), so the floor moves with the stack.
    let routes = tonic::service::Routes::new(ReplayService(replay.clone()))
        .add_service(RegistryServer::new(FloorRegistry(replay)));
    let (_shutdown, shutdown_rx) = tokio::sync::watch::channel(false);
    connections::serve(
        listener,
        routes,
        connections::ConnectionPolicy::default(),
        Arc::new(meshpush::metrics::Metrics::new()),
        shutdown_rx,
        None,
        Arc::new(meshpush::xds::stream::admission::Admission::unlimited()),
    )
    .await;
    Ok(())
}

/// `text` cut to [`QUOTED`] characters, to quote a client's text back.
fn quoted(text: &str) -> String {
    text.chars().take(QUOTED).collect()
}

/// The change an `EndpointSlice` document makes, read by meshpush's own
/// parser and checks.
fn slice_change(replay: &Replay, document: &str) -> Result<Arc<Change>, Status> {
    let parsed = parse_documents(REGISTRY_SOURCE, document);
    if let Some(problem) = parsed.problems.iter().find(|p| p.severity == Severity::Error) {
        return Err(Status::invalid_argument(quoted(&problem.to_string())));
    }
    let [(object, _)] = parsed.objects.as_slice() else {
        return Err(Status::invalid_argument("each put is one object"));
    };
    let ConfigObject::EndpointSlice(slice) = object else {
        let kind = object.kind();
        return Err(Status::unimplemented(format!("the replay floor replays endpoint changes only, not a {kind}")));
    };
    let service = slice
        .metadata
        .labels
        .get(SERVICE_NAME_LABEL)
        .ok_or_else(|| Status::invalid_argument(format!("an EndpointSlice without {SERVICE_NAME_LABEL}")))?;
    let port = slice
        .ports
        .first()
        .and_then(|p| p.port)
        .ok_or_else(|| Status::invalid_argument("an EndpointSlice without a port"))?;
    let cluster = format!("outbound|{port}||{service}.{}.svc.cluster.local", slice.metadata.namespace());
    let addresses: Vec<String> = slice.endpoints.iter().filter_map(|e| e.addresses.first().cloned()).collect();
    replay.with_addresses(&cluster, &addresses).map_err(|e| Status::not_found(quoted(&format!("{e:#}"))))
}

/// The registry API, as far as endpoint changes go.
struct FloorRegistry(Arc<Replay>);

impl FloorRegistry {
    fn version(&self) -> VersionResponse {
        let revision = self.0.revision.load(Ordering::Relaxed);
        VersionResponse { version: revision, instance_id: "replay_floor".into(), revision, ready: true }
    }
}

#[tonic::async_trait]
impl Registry for FloorRegistry {
    async fn apply(&self, request: Request<ApplyRequest>) -> Result<Response<ApplyResponse>, Status> {
        let request = request.into_inner();
        if !request.deletes.is_empty() {
            return Err(Status::unimplemented("the replay floor replays endpoint changes only, not deletes"));
        }
        let changes =
            request.puts.iter().map(|put| slice_change(&self.0, &put.document)).collect::<Result<Vec<_>, _>>()?;
        for change in &changes {
            self.0.publish(change);
        }
        let revision = self.0.revision.fetch_add(1, Ordering::Relaxed) + 1;
        Ok(Response::new(ApplyResponse {
            revision,
            changed: changes.len() as u32,
            warnings: Vec::new(),
            instance_id: "replay_floor".into(),
        }))
    }

    async fn get_version(&self, _: Request<GetVersionRequest>) -> Result<Response<VersionResponse>, Status> {
        Ok(Response::new(self.version()))
    }

    /// Every change is handed to the streams before `Apply` answers.
    async fn wait_for_revision(&self, _: Request<WaitForRevisionRequest>) -> Result<Response<VersionResponse>, Status> {
        Ok(Response::new(self.version()))
    }
}

/// The ADS service: every stream replays its namespace's bodies.
#[derive(Clone)]
struct ReplayService(Arc<Replay>);

impl tonic::server::NamedService for ReplayService {
    const NAME: &'static str = "envoy.service.discovery.v3.AggregatedDiscoveryService";
}

impl tower_service::Service<http::Request<tonic::body::Body>> for ReplayService {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let replay = self.0.clone();
        Box::pin(async move {
            let (tx, rx) = mpsc::channel(8);
            tokio::spawn(stream(replay, RequestMessages::new(request.into_body(), MAX_REQUEST_BYTES), tx));
            let mut response =
                http::Response::new(tonic::body::Body::new(ResponseStreamBody::new(rx, Default::default())));
            response
                .headers_mut()
                .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/grpc"));
            Ok(response)
        })
    }
}

/// The next change for a stream that knows its namespace; none before.
async fn next_change(changes: &mut Option<broadcast::Receiver<Arc<Change>>>) -> Result<Arc<Change>, RecvError> {
    match changes {
        Some(changes) => changes.recv().await,
        None => std::future::pending().await,
    }
}

/// One stream: each type's body on its first request; endpoint changes as
/// meshpush pushes them, one response in flight until the client answers
/// it, the changes that come meanwhile merged into the next response.
async fn stream(
    replay: Arc<Replay>,
    mut requests: RequestMessages<tonic::body::Body>,
    responses: mpsc::Sender<Box<OutgoingResponse>>,
) {
    let mut scope = None;
    let mut changes = None;
    let mut answered = [false; TypeUrl::COUNT];
    let mut nonce = 0u32;
    let mut in_flight: Option<Nonce> = None;
    let mut merged: Vec<Arc<Change>> = Vec::new();
    loop {
        let body = tokio::select! {
            message = futures::StreamExt::next(&mut requests) => {
                let Some(Ok(message)) = message else { return };
                let Ok((request, node)) = SotwRequest::read(message, scope.is_none()) else { return };
                let s = match scope {
                    Some(s) => s,
                    None => {
                        requests.leave_out(2);
                        // A node of no namespace the scenario has: nothing to replay.
                        let Some(s) = node.and_then(|node| replay.scope_of(node)) else { return };
                        changes = Some(replay.scopes[s].changes.subscribe());
                        *scope.insert(s)
                    }
                };
                if in_flight.is_some() && Nonce::parse(&request.response_nonce) == in_flight {
                    in_flight = None;
                }
                match TypeUrl::parse(&request.type_url) {
                    Some(t) if !answered[t.index()] => {
                        answered[t.index()] = true;
                        replay.scopes[s].bodies[t.index()].clone()
                    }
                    _ if in_flight.is_none() && !merged.is_empty() => take_merged(&mut merged),
                    _ => continue,
                }
            }
            change = next_change(&mut changes) => match change {
                Ok(change) => {
                    match merged.iter_mut().find(|m| m.assignment.name == change.assignment.name) {
                        Some(older) => *older = change,
                        None => merged.push(change),
                    }
                    if in_flight.is_some() || !answered[TypeUrl::Endpoint.index()] {
                        continue;
                    }
                    take_merged(&mut merged)
                }
                Err(RecvError::Lagged(_)) => {
                    if !replay.lagged.swap(true, Ordering::Relaxed) {
                        eprintln!("replay_floor: a stream lost changes: it did not run for {CHANGES_HELD} of them");
                    }
                    continue;
                }
                Err(RecvError::Closed) => return,
            },
        };
        nonce += 1;
        in_flight = Some(Nonce(nonce));
        if responses.send(Box::new(OutgoingResponse { body, nonce })).await.is_err() {
            return;
        }
    }
}

/// The body of the merged changes (a change's own body when alone), and
/// none merged after.
fn take_merged(merged: &mut Vec<Arc<Change>>) -> Bytes {
    let body = match merged.as_slice() {
        [alone] => alone.body.clone(),
        all => {
            let version = version_of(all.iter().map(|c| (&*c.assignment.name, c.assignment.hash)));
            ResponseBody::assemble(TypeUrl::Endpoint, &version, all.iter().map(|c| &*c.assignment)).bytes
        }
    };
    merged.clear();
    body
}
