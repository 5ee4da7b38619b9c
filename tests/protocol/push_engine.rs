//! The push engine's shape, proven with its counters: generation happens per
//! scope, not per stream; an endpoint change encodes one assignment whatever
//! the number of watchers; a stream that stops reading delays nobody else.
//!
//! Streams are in-memory (`meshpush::testing::memory`): the server's own stream
//! task over channels, driven by clients that behave like Envoy.

use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use meshpush::engine::PushEngine;
use meshpush::generate::cache::CacheStats;
use meshpush::model::ConfigStore;
use meshpush::model::store::Write;
use meshpush::push::PushRequest;
use meshpush::resource::TypeUrl;
use meshpush::testing::memory::{MemoryClient, node};
use meshpush::testing::synth::MeshSpec;
use meshpush::testing::wait::wait_until_async;
use meshpush::xds::AdsService;
use prost::Message;

const DEADLINE: Duration = Duration::from_secs(60);

async fn engine_with(spec: &MeshSpec) -> (AdsService, ConfigStore) {
    let store = ConfigStore::new();
    let source = meshpush::config::SourceRef { file: "synth".into(), doc: 0 };
    let changes = store.apply(spec.objects().into_iter().map(|o| Write::put(o, source.clone())));
    let engine = PushEngine::new();
    engine.push(PushRequest::new(changes)).await;
    engine.set_ready();
    (AdsService::new(engine), store)
}

async fn apply(engine: &Arc<PushEngine>, store: &ConfigStore, objects: Vec<meshpush::config::ConfigObject>) {
    let source = meshpush::config::SourceRef { file: "synth".into(), doc: 0 };
    let changes = store.apply(objects.into_iter().map(|o| Write::put(o, source.clone())));
    assert!(!changes.is_empty());
    engine.push(PushRequest::new(changes)).await;
}

/// Connects and syncs `n` sidecars spread over the spec's namespaces.
async fn synced_clients(ads: &AdsService, spec: &MeshSpec, n: usize) -> Vec<MemoryClient> {
    let mut clients: Vec<MemoryClient> =
        (0..n).map(|k| MemoryClient::connect(ads, node(&spec.sidecar_node_id(k), "NONE", &[]))).collect();
    let syncs = clients.iter_mut().map(|c| c.sync());
    tokio::time::timeout(DEADLINE, futures::future::join_all(syncs)).await.expect("every stream syncs");
    clients
}

/// Generations per type, in `TypeUrl::index` order.
fn generations(engine: &PushEngine) -> [u64; TypeUrl::COUNT] {
    let mut out = [0; TypeUrl::COUNT];
    for t in TypeUrl::PUSH_ORDER {
        out[t.index()] = CacheStats::get(&engine.cache().stats.generations, t);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_push_to_ten_thousand_streams_generates_per_scope() {
    let spec = MeshSpec::new(1000).scoped();
    let (ads, store) = engine_with(&spec).await;
    let engine = ads.engine();
    let clients = synced_clients(&ads, &spec, 10_000).await;
    assert_eq!(engine.queue().scope_count(), 100, "10,000 sidecars in 100 namespaces are 100 scopes");

    // Every stream counts the route configurations it gets, and ACKs
    // everything as Envoy does.
    let received = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut drains = Vec::new();
    for mut c in clients {
        let received = received.clone();
        drains.push(tokio::spawn(async move {
            while let Some(r) = c.recv_raw().await {
                if c.ack(&r).await == TypeUrl::Route {
                    received.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }));
    }

    // A routing change in the shared namespace: every scope sees svc-0.
    let before = generations(engine);
    apply(engine, &store, vec![spec.virtual_service(0, 10)]).await;
    wait_until_async(Instant::now() + DEADLINE, "every stream to get the new routes", || {
        let received = received.load(std::sync::atomic::Ordering::Relaxed);
        async move { if received >= 10_000 { Ok(()) } else { Err(format!("{received} of 10,000")) } }
    })
    .await;
    let after = generations(engine);
    let total: u64 = after.iter().zip(before).map(|(a, b)| a - b).sum();
    assert!(total >= 100, "each of the 100 scopes regenerated its routes: {total}");
    assert!(total <= 400, "at most 100 scopes × 4 types generations, not one per stream: {total}");
    let cds = after[TypeUrl::Cluster.index()] - before[TypeUrl::Cluster.index()];
    assert_eq!(cds, 0, "a routing change regenerates no clusters");
    for d in drains {
        d.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_change_encodes_one_assignment_whatever_the_watchers() {
    let spec = MeshSpec::new(200).scoped();
    let (ads, store) = engine_with(&spec).await;
    let engine = ads.engine();
    let mut clients = synced_clients(&ads, &spec, 500).await;
    let cluster = format!("outbound|{}||svc-0.ns-0.svc.cluster.local", spec.port);
    assert!(clients.iter().all(|c| c.watches[TypeUrl::Endpoint.index()].names.contains(&cluster)));

    let before = CacheStats::get(&engine.cache().stats.generations, TypeUrl::Endpoint);
    apply(engine, &store, vec![spec.pod(0, 0, "10.200.0.1")]).await;
    for c in &mut clients {
        let (r, _) = tokio::time::timeout(DEADLINE, c.recv()).await.expect("pushed").expect("open");
        assert_eq!(r.type_url, TypeUrl::Endpoint.as_str());
        assert_eq!(r.resources.len(), 1, "only the changed assignment");
    }
    let after = CacheStats::get(&engine.cache().stats.generations, TypeUrl::Endpoint);
    assert_eq!(after - before, 1, "one assignment encoded for {} watchers", clients.len());
}

/// A client that stops reading blocks only its own stream: once the
/// responses buffered for it fill up, its task waits on the write and its
/// later pushes merge in its slot, while every other stream converges on
/// every change. Time is paused: a push to a client that has not answered
/// the previous one waits `ANSWER_WAIT`, and advancing the clock past it
/// pushes the stuck stream again until its buffer is full.
#[tokio::test(start_paused = true)]
async fn a_stream_that_never_reads_does_not_delay_the_others() {
    use meshpush::xds::server::{ANSWER_WAIT, STREAM_BUFFER};
    let spec = MeshSpec::new(50);
    let (ads, store) = engine_with(&spec).await;
    let engine = ads.engine();
    let mut clients = synced_clients(&ads, &spec, 20).await;
    let stuck = clients.remove(0);
    let stuck_handle = engine
        .queue()
        .connections()
        .into_iter()
        .find(|c| *c.proxy.id == stuck.node.id)
        .expect("the stuck stream is registered");
    // One push fills one buffered response; one more is held by the
    // blocked write; the next one waits in the slot.
    let rounds = STREAM_BUFFER + 3;
    for round in 0..rounds {
        let address = format!("10.201.0.{}", round + 1);
        apply(engine, &store, vec![spec.pod(0, 0, &address)]).await;
        for c in &mut clients {
            tokio::time::timeout(DEADLINE, async {
                loop {
                    let (r, _) = c.recv().await.expect("open");
                    let carries = r.resources.iter().any(|a| String::from_utf8_lossy(&a.value).contains(&address));
                    c.request(TypeUrl::parse(&r.type_url).unwrap()).await;
                    if carries {
                        break;
                    }
                }
            })
            .await
            .unwrap_or_else(|_| panic!("change {round} did not reach a stream: the stuck peer held it back"));
        }
        // The stuck stream's next push waits for an answer that never comes.
        tokio::time::advance(ANSWER_WAIT).await;
    }
    let unanswered = engine.metrics().unanswered_pushes.get();
    assert!(unanswered >= STREAM_BUFFER as u64, "the stuck stream was pushed into a full buffer: {unanswered} pushes");
    assert!(
        stuck_handle.mailbox.is_pending(),
        "the stuck stream's task waits on its write; its push waits in its slot"
    );
    drop(stuck);
}

/// An Envoy that connects (or reconnects after a restart) while meshpush is
/// still loading its sources must not be answered from the empty snapshot:
/// it would drop every cluster it serves with. Its first response carries
/// the loaded mesh.
#[tokio::test]
async fn a_stream_opened_before_the_first_load_is_answered_from_the_loaded_snapshot() {
    let spec = MeshSpec::new(20);
    let store = ConfigStore::new();
    let ads = AdsService::new(PushEngine::new());
    let engine = ads.engine();
    let mut client = MemoryClient::connect(&ads, node(&spec.sidecar_node_id(0), "NONE", &[]));
    // Give the stream task every chance to take its first request now.
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    let source = meshpush::config::SourceRef { file: "synth".into(), doc: 0 };
    let changes = store.apply(spec.objects().into_iter().map(|o| Write::put(o, source.clone())));
    engine.push(PushRequest::new(changes)).await;
    engine.set_ready();
    let (first, _) = tokio::time::timeout(DEADLINE, client.recv())
        .await
        .expect("the stream is answered once the engine is ready")
        .expect("a response");
    assert_eq!(first.type_url, TypeUrl::Cluster.as_str());
    assert!(
        first.resources.len() >= 20,
        "the first CDS response holds the 20 loaded services' clusters, not the empty snapshot's {}",
        first.resources.len()
    );
}

/// A push is in flight until the client answers it: changes that come
/// meanwhile merge into one push, sent when the ACK arrives; a client that
/// never answers still gets it after `ANSWER_WAIT`. Time is paused: the
/// runtime jumps ahead only when every task waits, so a push that is not
/// held back arrives before any timeout can fire.
#[tokio::test(start_paused = true)]
async fn a_push_waits_for_the_answer_to_the_one_in_flight_and_carries_what_merged_meanwhile() {
    use meshpush::xds::server::ANSWER_WAIT;
    let spec = MeshSpec::new(20);
    let (ads, store) = engine_with(&spec).await;
    let engine = ads.engine();
    let mut client = synced_clients(&ads, &spec, 1).await.remove(0);
    let cla = |i: usize| {
        format!("outbound|{}||{}.{}.svc.cluster.local", spec.port, MeshSpec::service_name(i), spec.namespace_of(i))
    };

    apply(engine, &store, vec![spec.pod(1, 0, "10.202.0.1")]).await;
    let (first, _) = client.recv().await.expect("open");
    assert_eq!(first.resources.len(), 1, "the first change goes out at once");

    // Not answered yet: the next two changes wait, and merge.
    apply(engine, &store, vec![spec.pod(2, 0, "10.202.0.2")]).await;
    apply(engine, &store, vec![spec.pod(3, 0, "10.202.0.3")]).await;
    let early = tokio::time::timeout(ANSWER_WAIT / 2, client.recv()).await;
    let early = early.ok().flatten().map(|(r, _)| (r.type_url, r.resources.len()));
    assert!(early.is_none(), "a push went out before the previous one was answered: {early:?}");

    client.request(TypeUrl::Endpoint).await; // the ACK
    let (merged, _) = tokio::time::timeout(DEADLINE, client.recv()).await.expect("pushed after the ACK").expect("open");
    let names: Vec<String> = merged
        .resources
        .iter()
        .map(|a| ClusterLoadAssignment::decode(&a.value[..]).expect("an assignment").cluster_name)
        .collect();
    assert_eq!(names.len(), 2, "one push carries both waiting changes: {names:?}");
    assert!(names.contains(&cla(2)) && names.contains(&cla(3)), "{names:?}");

    // Never answered: the next push goes out after ANSWER_WAIT, not never.
    assert_eq!(engine.metrics().unanswered_pushes.get(), 0);
    let unanswered_since = tokio::time::Instant::now();
    apply(engine, &store, vec![spec.pod(4, 0, "10.202.0.4")]).await;
    let (late, _) =
        tokio::time::timeout(2 * ANSWER_WAIT, client.recv()).await.expect("pushed after the wait").expect("open");
    assert_eq!(late.resources.len(), 1);
    assert!(unanswered_since.elapsed() >= ANSWER_WAIT, "sent after {:?}", unanswered_since.elapsed());
    assert_eq!(engine.metrics().unanswered_pushes.get(), 1, "counted as a push to a client that did not answer");
}
