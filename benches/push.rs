//! Push-engine benches on synthetic meshes (`meshpush::testing::synth`).
//!
//! `cargo bench --bench push` runs them at full size (1k and 10k services,
//! 5–10 endpoints each, 100 namespaces, 10,000 streams). `cargo test` runs
//! each once at small sizes, so CI proves they work without timing them.
//! perf.md records full runs against the targets.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use meshpush::config::{ConfigObject, SourceRef};
use meshpush::engine::PushEngine;
use meshpush::envoy_api::json;
use meshpush::generate::cache::ScopedCache;
use meshpush::generate::{cds, eds, lds, rds};
use meshpush::model::store::Write;
use meshpush::model::{ConfigStore, Proxy};
use meshpush::push::{PushContext, PushRequest, ScopeInterner};
use meshpush::resource::EncodedResource;
use meshpush::resource::TypeUrl;
use meshpush::testing::memory::{MemoryClient, node};
use meshpush::testing::synth::MeshSpec;
use meshpush::xds::AdsService;
use meshpush::xds::sotw::{OutgoingResponse, codec};
use meshpush::xds::stream::bodies::BodyCache;
use meshpush::xds::stream::published::Published;

// The server binary's allocator, so the push path is measured as it runs.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Full sizes under `cargo bench`; small ones when run as a test.
fn full_size() -> bool {
    std::env::args().any(|a| a == "--bench")
}

fn sizes() -> Vec<usize> {
    if full_size() { vec![1_000, 10_000] } else { vec![200] }
}

fn source() -> SourceRef {
    SourceRef { file: "synth".into(), doc: 0 }
}

fn store_of(objects: Vec<ConfigObject>) -> ConfigStore {
    let store = ConfigStore::new();
    store.apply(objects.into_iter().map(|o| Write::put(o, source())));
    store
}

fn sidecar(spec: &MeshSpec, k: usize) -> Proxy {
    Proxy::from_node(&node(&spec.sidecar_node_id(k), "NONE", &[])).expect("valid node")
}

/// Work that runs no meshpush code, timed so `scripts/bench-check.sh` can
/// tell a slower machine from a slower commit: the same mix the push path
/// makes (strings formatted and hashed, Envoy protos encoded into `Bytes`,
/// a map of some megabytes built, its keys sorted), on dependencies only.
/// Its figure moves with the machine and with dependency upgrades, never
/// with a change to meshpush.
fn calibration(c: &mut Criterion) {
    use envoy_types::pb::envoy::config::cluster::v3::{Cluster, cluster};
    use envoy_types::pb::envoy::config::core::v3::{AggregatedConfigSource, ConfigSource, config_source};
    use prost::Message;
    let clusters = if full_size() { 10_000 } else { 100 };
    let mut group = c.benchmark_group("calibration");
    group.bench_function(format!("encode_and_index_{clusters}_clusters"), |b| {
        b.iter(|| {
            let mut index = std::collections::HashMap::with_capacity(clusters);
            for i in 0..clusters {
                let name = format!("outbound|8080||svc-{i}.ns-{}.svc.cluster.local", i % 100);
                let cluster = Cluster {
                    name: name.clone(),
                    connect_timeout: Some(envoy_types::pb::google::protobuf::Duration { seconds: 10, nanos: 0 }),
                    cluster_discovery_type: Some(cluster::ClusterDiscoveryType::Type(
                        cluster::DiscoveryType::Eds as i32,
                    )),
                    eds_cluster_config: Some(cluster::EdsClusterConfig {
                        eds_config: Some(ConfigSource {
                            config_source_specifier: Some(config_source::ConfigSourceSpecifier::Ads(
                                AggregatedConfigSource {},
                            )),
                            ..Default::default()
                        }),
                        service_name: name.clone(),
                    }),
                    ..Default::default()
                };
                index.insert(name, bytes::Bytes::from(cluster.encode_to_vec()));
            }
            let mut names: Vec<&String> = index.keys().collect();
            names.sort_unstable();
            names.iter().map(|n| index[*n].len()).sum::<usize>()
        })
    });
    group.finish();
}

fn push_context(c: &mut Criterion) {
    let mut group = c.benchmark_group("push_context");
    group.sample_size(10);
    for services in sizes() {
        for scoped in [false, true] {
            let spec = if scoped { MeshSpec::new(services).scoped() } else { MeshSpec::new(services) };
            let label = format!("{services}/{}", if scoped { "scoped" } else { "open" });
            let store = store_of(spec.objects());
            let snapshot = store.snapshot();
            group.bench_function(BenchmarkId::new("build", &label), |b| {
                b.iter_with_large_drop(|| PushContext::build(snapshot.clone(), 1, Arc::new(ScopeInterner::default())))
            });

            let prev = PushContext::build(snapshot.clone(), 1, Arc::new(ScopeInterner::default()));
            // Scopes computed, as after real streams connected.
            for k in 0..spec.namespaces {
                prev.scope_for(&sidecar(&spec, k));
            }
            let vs_change = store.apply([Write::put(spec.virtual_service(spec.namespaces + 1, 50), source())]);
            let vs_request = PushRequest::new(vs_change);
            group.bench_function(BenchmarkId::new("next_after_virtual_service", &label), |b| {
                b.iter_with_large_drop(|| PushContext::next(&prev, vs_request.store.clone(), &vs_request))
            });
            let ep_change = store.apply([Write::put(spec.pod(1, 0, "10.254.0.1"), source())]);
            let ep_request = PushRequest::new(ep_change);
            let prev2 = PushContext::next(&prev, vs_request.store.clone(), &vs_request).0;
            group.bench_function(BenchmarkId::new("next_after_endpoint", &label), |b| {
                b.iter_with_large_drop(|| PushContext::next(&prev2, ep_request.store.clone(), &ep_request))
            });
        }
    }
    // As a cluster's mesh is: each service's endpoints in an EndpointSlice.
    // One slice changes; the successor must not cost in proportion to
    // every slice of the mesh.
    let services = *sizes().last().expect("a size");
    let spec = MeshSpec::new(services);
    let store = store_of(spec.objects().into_iter().chain(spec.slices()).collect());
    let prev = PushContext::build(store.snapshot(), 1, Arc::new(ScopeInterner::default()));
    let moved = [MeshSpec::address(1, 0), "10.254.0.1".to_string()];
    let request = PushRequest::new(store.apply([Write::put(spec.slice(1, &moved), source())]));
    group.bench_function(BenchmarkId::new("next_after_endpoint_slice", format!("{services}/open")), |b| {
        b.iter_with_large_drop(|| PushContext::next(&prev, request.store.clone(), &request))
    });
    group.finish();
}

fn generation(c: &mut Criterion) {
    let mut group = c.benchmark_group("generate_one_scope");
    let services = *sizes().last().expect("a size");
    let spec = MeshSpec::new(services).scoped();
    let store = store_of(spec.objects());
    let ctx = PushContext::build(store.snapshot(), 1, Arc::new(ScopeInterner::default()));
    let scope = ctx.scope_for(&sidecar(&spec, 5));
    let label = format!("{services}/scoped/{}_visible", scope.services.len());
    group.bench_function(BenchmarkId::new("cds", &label), |b| {
        b.iter(|| {
            cds::clusters(&ctx, &scope)
                .iter()
                .map(|c| EncodedResource::encode(TypeUrl::Cluster, c.name.as_str().into(), c))
                .collect::<Vec<_>>()
        })
    });
    let eds_names: Vec<String> =
        cds::clusters(&ctx, &scope).into_iter().filter(|c| c.eds_cluster_config.is_some()).map(|c| c.name).collect();
    group.bench_function(BenchmarkId::new("eds", &label), |b| {
        b.iter(|| {
            eds_names
                .iter()
                .filter_map(|n| eds::load_assignment(&ctx, n, None))
                .map(|cla| EncodedResource::encode(TypeUrl::Endpoint, cla.cluster_name.as_str().into(), &cla))
                .collect::<Vec<_>>()
        })
    });
    group.bench_function(BenchmarkId::new("lds", &label), |b| {
        b.iter(|| {
            lds::listeners(&ctx, &scope)
                .iter()
                .map(|l| EncodedResource::encode(TypeUrl::Listener, l.name.as_str().into(), l))
                .collect::<Vec<_>>()
        })
    });
    group.bench_function(BenchmarkId::new("rds", &label), |b| {
        b.iter(|| {
            rds::route_configs(&ctx, &scope)
                .iter()
                .map(|r| EncodedResource::encode(TypeUrl::Route, r.name.as_str().into(), r))
                .collect::<Vec<_>>()
        })
    });
    group.finish();
}

/// What the descriptor pool costs: decoding it (once per process, at the
/// first config dump or EnvoyFilter), and printing one scope's clusters,
/// listeners and routes as Envoy's JSON (what a config dump of one proxy
/// prints, endpoints aside). Neither is on the push path.
fn envoy_api(c: &mut Criterion) {
    let mut group = c.benchmark_group("envoy_api");
    group.bench_function("decode_pool", |b| b.iter_with_large_drop(meshpush::envoy_api::decode_pool));
    let services = *sizes().last().expect("a size");
    let spec = MeshSpec::new(services).scoped();
    let store = store_of(spec.objects());
    let ctx = PushContext::build(store.snapshot(), 1, Arc::new(ScopeInterner::default()));
    let scope = ctx.scope_for(&sidecar(&spec, 5));
    let (clusters, listeners, routes) =
        (cds::clusters(&ctx, &scope), lds::listeners(&ctx, &scope), rds::route_configs(&ctx, &scope));
    let label = format!("{services}/scoped/{}_visible", scope.services.len());
    group.bench_function(BenchmarkId::new("scope_to_json", &label), |b| {
        b.iter_with_large_drop(|| {
            let mut out = Vec::new();
            out.extend(clusters.iter().map(|c| json::to_json(c).expect("printable")));
            out.extend(listeners.iter().map(|l| json::to_json(l).expect("printable")));
            out.extend(routes.iter().map(|r| json::to_json(r).expect("printable")));
            out
        })
    });
    group.finish();
}

/// Ten mesh-wide EnvoyFilter patches of the kinds production meshes use
/// (a Lua filter before the router, a connection manager and a listener
/// MERGE, virtual host, route and route configuration headers, a timeout
/// on every cluster, an added cluster, HTTP/2 to one service, and an
/// inbound rate limit filter the outbound side passes over), as YAML.
fn ten_mesh_wide_filters(service: &str, port: u32) -> String {
    let patch = |i: usize, body: &str| {
        format!(
            "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {{name: bench-{i}, namespace: istio-system}}\nspec:\n  configPatches:\n{body}---\n"
        )
    };
    let hcm = "    match:\n      listener:\n        filterChain:\n          filter:\n            name: envoy.filters.network.http_connection_manager\n";
    let bodies = [
        format!("  - applyTo: HTTP_FILTER\n{hcm}            subFilter: {{name: envoy.filters.http.router}}\n    patch:\n      operation: INSERT_BEFORE\n      value: {{name: envoy.filters.http.lua, typed_config: {{'@type': type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua, default_source_code: {{inline_string: 'function envoy_on_request(h) end'}}}}}}\n"),
        "  - applyTo: HTTP_FILTER\n    match:\n      context: SIDECAR_INBOUND\n      listener: {filterChain: {filter: {name: envoy.filters.network.http_connection_manager}}}\n    patch:\n      operation: INSERT_FIRST\n      value: {name: envoy.filters.http.local_ratelimit, typed_config: {'@type': type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit, stat_prefix: rl}}\n".to_string(),
        format!("  - applyTo: NETWORK_FILTER\n{hcm}    patch:\n      operation: MERGE\n      value: {{typed_config: {{'@type': type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager, common_http_protocol_options: {{idle_timeout: 30s}}}}}}\n"),
        "  - applyTo: LISTENER\n    patch: {operation: MERGE, value: {per_connection_buffer_limit_bytes: 32768}}\n".to_string(),
        "  - applyTo: VIRTUAL_HOST\n    patch: {operation: MERGE, value: {response_headers_to_add: [{header: {key: x-mesh, value: '1'}}]}}\n".to_string(),
        "  - applyTo: HTTP_ROUTE\n    match: {routeConfiguration: {vhost: {route: {action: ROUTE}}}}\n    patch: {operation: MERGE, value: {route: {idle_timeout: 60s}}}\n".to_string(),
        "  - applyTo: ROUTE_CONFIGURATION\n    patch: {operation: MERGE, value: {request_headers_to_add: [{header: {key: x-rc, value: '1'}}]}}\n".to_string(),
        "  - applyTo: CLUSTER\n    patch: {operation: MERGE, value: {connect_timeout: 3s}}\n".to_string(),
        "  - applyTo: CLUSTER\n    match: {context: SIDECAR_OUTBOUND}\n    patch: {operation: ADD, value: {name: bench-extra, type: STATIC, connect_timeout: 1s}}\n".to_string(),
        format!("  - applyTo: CLUSTER\n    match: {{cluster: {{service: {service}, portNumber: {port}}}}}\n    patch:\n      operation: MERGE\n      value: {{typed_extension_protocol_options: {{envoy.extensions.upstreams.http.v3.HttpProtocolOptions: {{'@type': type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions, explicit_http_config: {{http2_protocol_options: {{}}}}}}}}}}\n"),
    ];
    bodies.iter().enumerate().map(|(i, b)| patch(i, b)).collect()
}

/// One scope's clusters, listeners and routes with ten mesh-wide
/// EnvoyFilters applied, encoded: against `generate_one_scope/*`, what the
/// patches cost a scope's generation (paid once per scope, then cached).
fn envoy_filters(c: &mut Criterion) {
    use meshpush::generate::envoy_filter::{self, Record};
    let mut group = c.benchmark_group("envoy_filter");
    let services = *sizes().last().expect("a size");
    let spec = MeshSpec::new(services).scoped();
    let store = store_of(spec.objects());
    let scope_probe = PushContext::build(store.snapshot(), 1, Arc::new(ScopeInterner::default()));
    let probe = scope_probe.scope_for(&sidecar(&spec, 5));
    let target = probe.services.first().expect("a visible service");
    let filters = ten_mesh_wide_filters(&target.hostname, target.ports[0].port);
    let parsed = meshpush::config::parse::parse_documents("bench.yaml", &filters);
    assert!(!parsed.has_errors(), "{:?}", parsed.problems);
    store.apply(parsed.objects.into_iter().map(|(o, s)| Write::put(o, s)));
    let ctx = PushContext::build(store.snapshot(), 1, Arc::new(ScopeInterner::default()));
    let scope = ctx.scope_for(&sidecar(&spec, 5));
    assert_eq!(scope.key.envoy_filters.len(), 9, "every outbound patch applies to the scope");
    let label = format!("{services}/scoped/{}_visible", scope.services.len());
    group.bench_function(BenchmarkId::new("cds_10_filters", &label), |b| {
        b.iter(|| {
            envoy_filter::clusters(&ctx, &scope, &mut Record::default())
                .iter()
                .map(|c| EncodedResource::encode(TypeUrl::Cluster, c.name.as_str().into(), c))
                .collect::<Vec<_>>()
        })
    });
    group.bench_function(BenchmarkId::new("lds_10_filters", &label), |b| {
        b.iter(|| {
            envoy_filter::listeners(&ctx, &scope, &mut Record::default())
                .iter()
                .map(|l| EncodedResource::encode(TypeUrl::Listener, l.name.as_str().into(), l))
                .collect::<Vec<_>>()
        })
    });
    group.bench_function(BenchmarkId::new("rds_10_filters", &label), |b| {
        b.iter(|| {
            envoy_filter::route_configs(&ctx, &scope, &mut Record::default())
                .iter()
                .map(|r| EncodedResource::encode(TypeUrl::Route, r.name.as_str().into(), r))
                .collect::<Vec<_>>()
        })
    });
    group.finish();
}

fn assembly(c: &mut Criterion) {
    let mut group = c.benchmark_group("response_assembly");
    let services = *sizes().last().expect("a size");
    let spec = MeshSpec::new(services).scoped();
    let store = store_of(spec.objects());
    let ctx = PushContext::build(store.snapshot(), 0, Arc::new(ScopeInterner::default()));
    let cache = ScopedCache::new();
    let bodies = BodyCache::new();
    let scope = ctx.scope_for(&sidecar(&spec, 5));
    let set = cache.scoped(&ctx, &scope, TypeUrl::Cluster);
    let view = Published { ctx: &ctx, cache: &cache, bodies: &bodies };
    // The first stream assembles; every later one hits.
    codec::body(&view, TypeUrl::Cluster, &set.version, &set.resources, false);
    let mut nonce = 0u32;
    group.bench_function("cds_one_stream_cache_hit", |b| {
        b.iter(|| {
            nonce = nonce.wrapping_add(1);
            let set = cache.scoped(&ctx, &scope, TypeUrl::Cluster);
            let body = codec::body(&view, TypeUrl::Cluster, &set.version, &set.resources, false);
            let response = OutgoingResponse { body, nonce };
            (response.tail(), response)
        })
    });
    group.finish();
}

/// The time `iters` changes take to reach every stream: each change from
/// `change` is pushed, and timed until `answered` (counted by the streams'
/// tasks as they ACK) has grown by `streams`.
fn timed_pushes(
    runtime: &tokio::runtime::Runtime,
    engine: &Arc<PushEngine>,
    answered: &AtomicUsize,
    streams: usize,
    iters: u64,
    mut change: impl FnMut() -> meshpush::model::ChangeSet,
) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let change = change();
        let target = answered.load(Ordering::Relaxed) + streams;
        let start = Instant::now();
        runtime.block_on(async {
            engine.push(PushRequest::new(change)).await;
            while answered.load(Ordering::Relaxed) < target {
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
        });
        total += start.elapsed();
    }
    total
}

fn full_push(c: &mut Criterion) {
    let (services, streams) = if full_size() { (10_000, 10_000) } else { (200, 200) };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let spec = MeshSpec::new(services).scoped();
    let store = store_of(Vec::new());
    let ads = AdsService::new(PushEngine::new());
    let engine = ads.engine();
    let changes = store.apply(spec.objects().into_iter().map(|o| Write::put(o, source())));
    let routes = Arc::new(AtomicUsize::new(0));
    let bytes = Arc::new(AtomicUsize::new(0));
    runtime.block_on(async {
        engine.push(PushRequest::new(changes)).await;
        engine.set_ready();
        let mut clients: Vec<MemoryClient> =
            (0..streams).map(|k| MemoryClient::connect(&ads, node(&spec.sidecar_node_id(k), "NONE", &[]))).collect();
        for chunk in clients.chunks_mut(500) {
            futures::future::join_all(chunk.iter_mut().map(|c| c.sync())).await;
        }
        // From here on, streams count what reaches them and ACK it, as
        // Envoy does (a push waits for the answer to the previous one), but
        // decode nothing.
        for mut client in clients {
            let routes = routes.clone();
            let bytes = bytes.clone();
            tokio::spawn(async move {
                while let Some(r) = client.recv_raw().await {
                    bytes.fetch_add(r.wire_len(), Ordering::Relaxed);
                    if client.ack(&r).await == TypeUrl::Route {
                        routes.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let mut group = c.benchmark_group("full_push");
    group.sample_size(10);
    let mut weight = 0;
    group.bench_function(format!("{streams}_streams_100_scopes_route_change"), |b| {
        b.iter_custom(|iters| {
            timed_pushes(&runtime, engine, &routes, streams, iters, || {
                weight = (weight + 7) % 100;
                store.apply([Write::put(spec.virtual_service(0, weight), source())])
            })
        })
    });
    group.finish();
}

/// A `kubernetes.io/tls` Secret `shop-cert` in `istio-system` with a fresh
/// certificate (rcgen), as YAML.
fn shop_secret(issuer: &rcgen::CertifiedIssuer<'static, rcgen::KeyPair>) -> String {
    let key = rcgen::KeyPair::generate().expect("a key");
    let cert = rcgen::CertificateParams::new(vec!["shop.example.test".to_string()])
        .expect("params")
        .signed_by(&key, issuer)
        .expect("a certificate");
    let block =
        |k: &str, pem: &str| format!("  {k}: |\n{}", pem.lines().map(|l| format!("    {l}\n")).collect::<String>());
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: shop-cert, namespace: istio-system}}\ntype: kubernetes.io/tls\nstringData:\n{}{}",
        block("tls.crt", &cert.pem()),
        block("tls.key", &key.serialize_pem())
    )
}

/// A certificate rotated under gateway streams: the Secret of an HTTPS
/// Gateway changes, and every gateway stream (1,000 at full size, one
/// scope) gets the new Secret and ACKs it. What it costs: the engine's push
/// (the Secret index rebuilt, the one namespace's Secrets dropped from the
/// cache), one encoding, one body, and a response per stream.
fn secret_rotation(c: &mut Criterion) {
    let streams = if full_size() { 1_000 } else { 50 };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let ca_key = rcgen::KeyPair::generate().expect("a CA key");
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let issuer = rcgen::CertifiedIssuer::self_signed(ca, ca_key).expect("a CA");
    let secrets: Vec<ConfigObject> = (0..2)
        .map(|_| {
            let parsed = meshpush::config::parse::parse_documents("bench", &shop_secret(&issuer));
            assert!(!parsed.has_errors(), "{:?}", parsed.problems);
            parsed.objects.into_iter().next().expect("the Secret").0
        })
        .collect();
    let gateway = meshpush::config::parse::parse_documents(
        "bench",
        "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: shop, namespace: istio-system}\nspec:\n  selector: {istio: ingressgateway}\n  servers:\n  - port: {number: 443, name: https, protocol: HTTPS}\n    hosts: [shop.example.test]\n    tls: {mode: SIMPLE, credentialName: shop-cert}\n",
    );
    let store = store_of(Vec::new());
    let ads = AdsService::new(PushEngine::new());
    let engine = ads.engine();
    let mut writes: Vec<Write> = gateway.objects.into_iter().map(|(o, s)| Write::put(o, s)).collect();
    writes.push(Write::put(secrets[0].clone(), source()));
    let changes = store.apply(writes);
    let received = Arc::new(AtomicUsize::new(0));
    runtime.block_on(async {
        engine.push(PushRequest::new(changes)).await;
        engine.set_ready();
        let mut clients: Vec<MemoryClient> = (0..streams)
            .map(|k| {
                let id =
                    format!("router~10.1.{}.{}~gw-{k}.istio-system~istio-system.svc.cluster.local", k / 250, k % 250);
                MemoryClient::connect(&ads, node(&id, "REDIRECT", &[("istio", "ingressgateway")]))
            })
            .collect();
        for chunk in clients.chunks_mut(250) {
            futures::future::join_all(chunk.iter_mut().map(|c| c.sync())).await;
        }
        for mut client in clients {
            let received = received.clone();
            tokio::spawn(async move {
                while let Some(r) = client.recv_raw().await {
                    if client.ack(&r).await == TypeUrl::Secret {
                        received.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let mut group = c.benchmark_group("secret_rotation");
    group.sample_size(10);
    let mut which = 0;
    group.bench_function(format!("{streams}_gateway_streams"), |b| {
        b.iter_custom(|iters| {
            timed_pushes(&runtime, engine, &received, streams, iters, || {
                which = 1 - which;
                store.apply([Write::put(secrets[which].clone(), source())])
            })
        })
    });
    group.finish();
}

criterion_group!(
    benches,
    calibration,
    push_context,
    generation,
    envoy_filters,
    envoy_api,
    assembly,
    full_push,
    secret_rotation
);
criterion_main!(benches);
