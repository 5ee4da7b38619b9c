//! The floor of meshpush's serving stack: an ADS server that only replays
//! pre-encoded responses, for the loadtest to measure beside meshpush.
//!
//! It generates, once, what meshpush sends one sidecar of a loadtest
//! scenario (the same mesh, the same generators, the same cache and
//! response bodies), then serves every ADS stream from those bytes: the
//! first request of each type gets that type's body, ACKs get nothing, and
//! `GET /change/N` on the admin address sends every stream one assignment
//! with a new endpoint address. Requests are read by meshpush's own reader
//! (whole messages, the node read once), responses leave through its own
//! response body and its own connection handling (`serve::connections`),
//! on the same tonic, hyper, h2 and tokio. What is left out is the control
//! plane: no scopes, no watch state, no versions to compare, no push queue.
//! The gap between this server's figures and meshpush's is what meshpush's
//! own work costs; this server's figures are what the stack costs on the
//! machine.
//!
//! ```text
//! cargo run --release --example replay_floor -- --scenario s1 --xds-addr 127.0.0.1:15110 --admin-addr 127.0.0.1:15114 &
//! target/release/loadtest s1 --target 127.0.0.1:15110 --server-pid $! \
//!     --trigger 'curl -sf http://127.0.0.1:15114/change/%n' \
//!     --expect 'eds:outbound|9080||svc-0.ns-0.svc.cluster.local:127.250.0.%n'
//! ```
//!
//! Only the endpoint change is replayed: with `--trigger`, the loadtest
//! makes that one change per phase.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};

use anyhow::Context as _;
use axum::extract::{Path, State};
use bytes::Bytes;
use clap::Parser;
use envoy_types::pb::envoy::config::core::v3::{Node, address};
use envoy_types::pb::envoy::config::endpoint::v3::{ClusterLoadAssignment, lb_endpoint::HostIdentifier};
use futures::future::BoxFuture;
use loadtest::scenario::Scenario;
use meshpush::config::parse::parse_documents;
use meshpush::generate::cache::ScopedCache;
use meshpush::model::store::Write;
use meshpush::model::{ConfigStore, Proxy};
use meshpush::push::{PushChanges, PushContext, ScopeInterner};
use meshpush::resource::TypeUrl;
use meshpush::resource::{EncodedResource, version_of};
use meshpush::serve::connections;
use meshpush::xds::server::MAX_REQUEST_BYTES;
use meshpush::xds::sotw::OutgoingResponse;
use meshpush::xds::sotw::SotwRequest;
use meshpush::xds::sotw::codec::{self, ResponseBody};
use meshpush::xds::stream::bodies::BodyCache;
use meshpush::xds::stream::body::ResponseStreamBody;
use meshpush::xds::stream::messages::RequestMessages;
use meshpush::xds::stream::published::Published;
use prost::Message;
use tokio::sync::{broadcast, mpsc};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Replays pre-encoded ADS responses (the floor of meshpush's stack).
#[derive(Debug, Parser)]
struct Args {
    /// The loadtest scenario whose mesh to serve. Every stream is sent what
    /// the scenario's first sidecar is sent: what every sidecar of s1 is
    /// sent (one scope, one workload shape), not so in s2 or smoke.
    #[arg(long, default_value = "s1")]
    scenario: Scenario,
    /// ADS address.
    #[arg(long, default_value = "127.0.0.1:15110")]
    xds_addr: SocketAddr,
    /// Admin address (`/change/N`).
    #[arg(long, default_value = "127.0.0.1:15114")]
    admin_addr: SocketAddr,
}

/// What every stream is sent.
struct Replay {
    /// Framed response bodies by `TypeUrl::index`.
    bodies: [Bytes; TypeUrl::COUNT],
    /// The assignment changes replace an endpoint of.
    changed: ClusterLoadAssignment,
    changes: broadcast::Sender<Bytes>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // As `meshpush serve` does: the floor's heap must cost what meshpush's does.
    meshpush::serve::opt_out_of_huge_pages();
    let replay = Arc::new(generate(args.scenario)?);
    tokio::runtime::Runtime::new()?.block_on(serve(args, replay))
}

/// Generates what meshpush sends the scenario's first sidecar.
fn generate(scenario: Scenario) -> anyhow::Result<Replay> {
    let shape = scenario.shape();
    let store = ConfigStore::new();
    for (file, text) in shape.files() {
        let parsed = parse_documents(&file, &text);
        anyhow::ensure!(!parsed.has_errors(), "{file}: {:?}", parsed.problems);
        store.apply(parsed.objects.into_iter().map(|(object, source)| Write::Put(object, source)));
    }
    let ctx = PushContext::build(store.snapshot(), 1, Arc::new(ScopeInterner::default()));
    let cache = ScopedCache::new();
    cache.invalidate(&ctx, &PushChanges { full: true, types: meshpush::resource::TypeSet::ALL, ..Default::default() });
    let mut node = Node::decode(&shape.node(0)[..])?;
    node.merge(&loadtest::mesh::Shape::node_common(false)[..])?;
    let proxy = Proxy::from_node(&node).context("the sidecar's node")?;
    let scope = ctx.scope_for(&proxy);
    let inbound = ctx.inbound_for(&proxy);

    let assembled = BodyCache::new();
    let view = Published { ctx: &ctx, cache: &cache, bodies: &assembled };
    let body = |t: TypeUrl, resources: &[Arc<EncodedResource>]| {
        let version = version_of(resources.iter().map(|r| (&*r.name, r.hash)));
        codec::body(&view, t, &version, resources, false)
    };
    let clusters = cache.proxy_set(&ctx, &scope, &inbound, TypeUrl::Cluster);
    let listeners = cache.proxy_set(&ctx, &scope, &inbound, TypeUrl::Listener);
    let routes = cache.scoped(&ctx, &scope, TypeUrl::Route);
    let assignments: Vec<Arc<EncodedResource>> =
        clusters.resources.iter().filter_map(|c| cache.endpoint(&ctx, &c.name, None)).collect();
    let first = shape.cluster(0, 0);
    let changed = cache.endpoint(&ctx, &first, None).with_context(|| format!("no assignment for {first}"))?;
    let changed = ClusterLoadAssignment::decode(&changed.to_any().value[..])?;
    let mut bodies: [Bytes; TypeUrl::COUNT] = Default::default();
    bodies[TypeUrl::Cluster.index()] = body(TypeUrl::Cluster, &clusters.resources);
    bodies[TypeUrl::Endpoint.index()] = body(TypeUrl::Endpoint, &assignments);
    bodies[TypeUrl::Listener.index()] = body(TypeUrl::Listener, &listeners.resources);
    bodies[TypeUrl::Route.index()] = body(TypeUrl::Route, &routes.resources);
    eprintln!(
        "replay_floor: {} clusters, {} assignments, {} listeners, {} route configs; {} bytes per sidecar",
        clusters.resources.len(),
        assignments.len(),
        listeners.resources.len(),
        routes.resources.len(),
        bodies.iter().map(Bytes::len).sum::<usize>()
    );
    Ok(Replay { bodies, changed, changes: broadcast::channel(16).0 })
}

impl Replay {
    /// The body of change `n`: the assignment with its first endpoint moved
    /// to `127.250.x.y` (`n` = x * 256 + y).
    fn change(&self, n: u16) -> Bytes {
        let mut cla = self.changed.clone();
        let [hi, lo] = n.to_be_bytes();
        let first = cla.endpoints.first_mut().and_then(|l| l.lb_endpoints.first_mut());
        if let Some(HostIdentifier::Endpoint(ep)) = first.and_then(|e| e.host_identifier.as_mut())
            && let Some(address::Address::SocketAddress(sa)) = ep.address.as_mut().and_then(|a| a.address.as_mut())
        {
            sa.address = format!("127.250.{hi}.{lo}");
        }
        let resource = Arc::new(EncodedResource::encode(TypeUrl::Endpoint, cla.cluster_name.as_str().into(), &cla));
        let version = version_of([(&*resource.name, resource.hash)]);
        // Each change is new content: meshpush assembles its body once, too.
        ResponseBody::assemble(TypeUrl::Endpoint, &version, [&*resource]).bytes
    }
}

async fn serve(args: Args, replay: Arc<Replay>) -> anyhow::Result<()> {
    let admin = axum::Router::new()
        .route(
            "/change/{n}",
            axum::routing::get(|State(replay): State<Arc<Replay>>, Path(n): Path<u16>| async move {
                let _ = replay.changes.send(replay.change(n));
                "sent\n"
            }),
        )
        .with_state(replay.clone());
    let admin_listener = tokio::net::TcpListener::bind(args.admin_addr).await?;
    tokio::spawn(async move { axum::serve(admin_listener, admin).await });
    let listener = connections::XdsListener::bind_tcp(args.xds_addr)?;
    eprintln!("replay_floor: serving ADS on {} (pid {})", args.xds_addr, std::process::id());
    // Served as meshpush serves its xDS port: the same connection handling
    // (its accept queue, hyper, keepalive), so the floor moves with the stack.
    let routes = tonic::service::Routes::new(ReplayService(replay));
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

/// The ADS service: every stream replays [`Replay`].
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

/// One stream: each type's body on its first request, a change's body on
/// each change; ACKs read and dropped.
async fn stream(
    replay: Arc<Replay>,
    mut requests: RequestMessages<tonic::body::Body>,
    responses: mpsc::Sender<OutgoingResponse>,
) {
    let mut changes = replay.changes.subscribe();
    let mut answered = [false; TypeUrl::COUNT];
    let mut nonce = 0u32;
    let mut first = true;
    loop {
        let body = tokio::select! {
            message = futures::StreamExt::next(&mut requests) => {
                let Some(Ok(message)) = message else { return };
                let Ok((request, _)) = SotwRequest::read(message, first) else { return };
                if first {
                    requests.leave_out(2);
                    first = false;
                }
                match TypeUrl::parse(&request.type_url) {
                    Some(t) if !answered[t.index()] => {
                        answered[t.index()] = true;
                        replay.bodies[t.index()].clone()
                    }
                    _ => continue,
                }
            }
            change = changes.recv() => match change {
                Ok(body) => body,
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return,
            },
        };
        nonce += 1;
        if responses.send(OutgoingResponse { body, nonce }).await.is_err() {
            return;
        }
    }
}
