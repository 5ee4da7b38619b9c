//! Delta protocol tests: an in-process tonic client on
//! `DeltaAggregatedResources`, pinning the rules of the "Delta" section of
//! `docs/xds-protocol.md`.
//!
//! To prove that the server sent *nothing* in answer to a request (an ACK, a
//! NACK, a pure unsubscribe), a test sends a probe — a subscription to a
//! route configuration that does not exist, which the server must answer at
//! once in `removed_resources` — and checks that the very next response is
//! the probe's. The server handles a stream's requests in order, so anything
//! it had sent for the earlier request would have arrived first.

use crate::support;

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DeltaDiscoveryResponse};
use envoy_types::pb::google::rpc::Status as RpcStatus;
use meshpush::config::{ConfigKey, ConfigKind};
use meshpush::resource::TypeUrl;
use meshpush::xds::stream::status::SyncState;
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

const WAIT: Duration = Duration::from_secs(10);
const PRODUCTPAGE: &str = "sidecar~127.0.0.11~productpage-v1.default~default.svc.cluster.local";
const REVIEWS_V1: &str = "outbound|9080|v1|reviews.default.svc.cluster.local";
const REVIEWS_V2: &str = "outbound|9080|v2|reviews.default.svc.cluster.local";
const RATINGS: &str = "outbound|9080||ratings.default.svc.cluster.local";
const RATINGS_V1: &str = "outbound|9080|v1|ratings.default.svc.cluster.local";
const PAYMENTS: &str = "outbound|9080||payments.default.svc.cluster.local";

/// The in-process server over bookinfo, with this file's stream helpers.
struct Harness(support::ads_server::AdsServer);

impl std::ops::Deref for Harness {
    type Target = support::ads_server::AdsServer;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl Harness {
    async fn start() -> Harness {
        Harness(support::ads_server::AdsServer::bookinfo().await)
    }

    /// A stream whose first request is CDS with both lists empty (Envoy's
    /// legacy wildcard).
    async fn stream(&self) -> Stream {
        self.stream_with(DeltaDiscoveryRequest { type_url: TypeUrl::Cluster.as_str().into(), ..Default::default() })
            .await
    }

    async fn stream_with(&self, first: DeltaDiscoveryRequest) -> Stream {
        Stream::open(self.addr, node(PRODUCTPAGE), first).await
    }

    /// The sync state the admin endpoints show for the only connected stream.
    fn sync_state(&self, t: TypeUrl) -> SyncState {
        self.only_stream_status().get(t).sync_state()
    }
}

/// The productpage sidecar's node, NONE mode.
fn node(id: &str) -> Node {
    meshpush::testing::memory::node(id, "NONE", &[("app", "productpage"), ("version", "v1")])
}

/// One delta ADS stream, driven like Envoy drives it.
struct Stream {
    tx: mpsc::Sender<DeltaDiscoveryRequest>,
    rx: Streaming<DeltaDiscoveryResponse>,
    node: Node,
    probes: u32,
}

impl Stream {
    async fn open(addr: std::net::SocketAddr, node: Node, mut first: DeltaDiscoveryRequest) -> Stream {
        let mut client = AggregatedDiscoveryServiceClient::connect(format!("http://{addr}")).await.unwrap();
        let (tx, rx) = mpsc::channel(16);
        first.node = Some(node.clone());
        // Queued before the call: the server reads it to learn the node.
        tx.send(first).await.unwrap();
        let response = tokio::time::timeout(WAIT, client.delta_aggregated_resources(ReceiverStream::new(rx)))
            .await
            .expect("stream opens")
            .expect("stream accepted");
        Stream { tx, rx: response.into_inner(), node, probes: 0 }
    }

    async fn send(&mut self, mut req: DeltaDiscoveryRequest) {
        req.node = Some(self.node.clone());
        self.tx.send(req).await.expect("stream open");
    }

    async fn subscribe(&mut self, t: TypeUrl, names: &[&str], nonce: &str) {
        self.send(DeltaDiscoveryRequest {
            type_url: t.as_str().into(),
            resource_names_subscribe: names.iter().map(|s| s.to_string()).collect(),
            response_nonce: nonce.into(),
            ..Default::default()
        })
        .await;
    }

    async fn ack(&mut self, r: &DeltaDiscoveryResponse) {
        self.send(DeltaDiscoveryRequest {
            type_url: r.type_url.clone(),
            response_nonce: r.nonce.clone(),
            ..Default::default()
        })
        .await;
    }

    async fn nack(&mut self, r: &DeltaDiscoveryResponse) {
        self.send(DeltaDiscoveryRequest {
            type_url: r.type_url.clone(),
            response_nonce: r.nonce.clone(),
            error_detail: Some(RpcStatus { code: 13, message: "rejected for the test".into(), details: vec![] }),
            ..Default::default()
        })
        .await;
    }

    async fn recv(&mut self) -> DeltaDiscoveryResponse {
        tokio::time::timeout(WAIT, self.rx.message())
            .await
            .expect("a response within the deadline")
            .expect("no stream error")
            .expect("stream still open")
    }

    async fn recv_type(&mut self, t: TypeUrl) -> DeltaDiscoveryResponse {
        let r = self.recv().await;
        assert_eq!(r.type_url, t.as_str(), "expected a {t} response, got {r:?}");
        r
    }

    /// Proves nothing else was queued for this stream: subscribes to a route
    /// configuration that does not exist and expects its removal next.
    async fn probe_nothing_pending(&mut self) {
        self.probes += 1;
        let name = format!("probe-{}", self.probes);
        self.subscribe(TypeUrl::Route, &[&name], "").await;
        let r = self.recv_type(TypeUrl::Route).await;
        assert!(r.resources.is_empty());
        assert_eq!(r.removed_resources, vec![name], "the probe's answer came first");
        self.ack(&r).await;
    }
}

/// Resource names of a response (asserting they are unique).
fn names(r: &DeltaDiscoveryResponse) -> BTreeSet<String> {
    let set: BTreeSet<String> = r.resources.iter().map(|x| x.name.clone()).collect();
    assert_eq!(set.len(), r.resources.len(), "a resource name appears twice in one response");
    set
}

fn versions(r: &DeltaDiscoveryResponse) -> HashMap<String, String> {
    r.resources.iter().map(|x| (x.name.clone(), x.version.clone())).collect()
}

fn cla(r: &DeltaDiscoveryResponse, name: &str) -> ClusterLoadAssignment {
    let res = r.resources.iter().find(|x| x.name == name).unwrap_or_else(|| panic!("{name} not in the response"));
    ClusterLoadAssignment::decode(&res.resource.as_ref().unwrap().value[..]).unwrap()
}

fn endpoint_count(c: &ClusterLoadAssignment) -> usize {
    c.endpoints.iter().map(|l| l.lb_endpoints.len()).sum()
}

#[tokio::test]
async fn legacy_wildcard_sends_every_cluster_as_named_resources_with_hash_versions() {
    let h = Harness::start().await;
    let mut s = h.stream().await;
    let cds = s.recv_type(TypeUrl::Cluster).await;
    let clusters = names(&cds);
    for expected in [REVIEWS_V1, REVIEWS_V2, RATINGS, "BlackHoleCluster", "PassthroughCluster"] {
        assert!(clusters.contains(expected), "{expected} missing from {clusters:?}");
    }
    assert!(!cds.nonce.is_empty());
    assert!(!cds.system_version_info.is_empty(), "a debug version is set");
    assert!(cds.removed_resources.is_empty());
    for r in &cds.resources {
        let any = r.resource.as_ref().expect("each resource carries its body");
        assert_eq!(any.type_url, TypeUrl::Cluster.as_str(), "every resource matches the response type");
        assert_eq!(Cluster::decode(&any.value[..]).unwrap().name, r.name, "Resource.name is the cluster's name");
        assert!(r.version.len() == 16 && r.version.chars().all(|c| c.is_ascii_hexdigit()), "{}", r.version);
    }

    // `*` in subscribe is the same wildcard.
    let mut star = h
        .stream_with(DeltaDiscoveryRequest {
            type_url: TypeUrl::Cluster.as_str().into(),
            resource_names_subscribe: vec!["*".into()],
            ..Default::default()
        })
        .await;
    let cds2 = star.recv_type(TypeUrl::Cluster).await;
    assert_eq!(versions(&cds2), versions(&cds), "same resources, same versions");
}

#[tokio::test]
async fn every_response_has_a_fresh_nonce() {
    let h = Harness::start().await;
    let mut s = h.stream().await;
    let cds = s.recv_type(TypeUrl::Cluster).await;
    s.ack(&cds).await;
    s.subscribe(TypeUrl::Endpoint, &[REVIEWS_V1], "").await;
    let eds1 = s.recv_type(TypeUrl::Endpoint).await;
    s.ack(&eds1).await;
    s.subscribe(TypeUrl::Endpoint, &[REVIEWS_V2], "").await;
    let eds2 = s.recv_type(TypeUrl::Endpoint).await;
    let nonces: BTreeSet<&str> = [&cds, &eds1, &eds2].iter().map(|r| r.nonce.as_str()).collect();
    assert_eq!(nonces.len(), 3, "{nonces:?}");
}

#[tokio::test]
async fn named_subscription_sends_only_those_and_unknown_names_are_removed_at_once() {
    let h = Harness::start().await;
    let mut s = h.stream().await;
    let cds = s.recv_type(TypeUrl::Cluster).await;
    s.ack(&cds).await;
    s.subscribe(TypeUrl::Endpoint, &[REVIEWS_V1, PAYMENTS], "").await;
    let eds = s.recv_type(TypeUrl::Endpoint).await;
    assert_eq!(names(&eds), [REVIEWS_V1.to_string()].into());
    assert_eq!(eds.removed_resources, vec![PAYMENTS.to_string()], "the name that does not exist, at once");
    assert_eq!(endpoint_count(&cla(&eds, REVIEWS_V1)), 1);
    s.ack(&eds).await;

    // The name that did not exist is sent when it appears.
    h.apply(
        "apiVersion: v1\nkind: Service\nmetadata: {name: payments, namespace: default}\nspec:\n  selector: {app: payments}\n  ports: [{name: http, port: 9080}]\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: payments-1, namespace: default, labels: {app: payments}}\nstatus: {podIP: 127.0.0.40, phase: Running}\n",
    )
    .await;
    let cds2 = s.recv_type(TypeUrl::Cluster).await;
    assert_eq!(names(&cds2), [PAYMENTS.to_string()].into(), "only the new cluster, not every cluster again");
    s.ack(&cds2).await;
    let eds2 = s.recv_type(TypeUrl::Endpoint).await;
    assert_eq!(names(&eds2), [PAYMENTS.to_string()].into());
    assert_eq!(endpoint_count(&cla(&eds2, PAYMENTS)), 1);
}

#[tokio::test]
async fn ack_is_not_answered_and_shows_synced() {
    let h = Harness::start().await;
    let mut s = h.stream().await;
    let cds = s.recv_type(TypeUrl::Cluster).await;
    assert_eq!(h.sync_state(TypeUrl::Cluster), SyncState::Stale);
    s.ack(&cds).await;
    s.probe_nothing_pending().await;
    assert_eq!(h.sync_state(TypeUrl::Cluster), SyncState::Synced);
    assert_eq!(h.sync_state(TypeUrl::Listener), SyncState::NotSent);
}

#[tokio::test]
async fn nack_is_recorded_keeps_the_stream_and_is_not_resent() {
    let h = Harness::start().await;
    let mut s = h.stream().await;
    let cds = s.recv_type(TypeUrl::Cluster).await;
    s.ack(&cds).await;
    s.subscribe(TypeUrl::Endpoint, &[RATINGS_V1], "").await;
    let eds = s.recv_type(TypeUrl::Endpoint).await;
    s.ack(&eds).await;

    // Envoy rejects a cluster change.
    h.apply(
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: ratings, namespace: default}\nspec:\n  host: ratings\n  trafficPolicy: {loadBalancer: {simple: RANDOM}}\n  subsets: [{name: v1, labels: {version: v1}}, {name: v2, labels: {version: v2}}]\n",
    )
    .await;
    let cds2 = s.recv_type(TypeUrl::Cluster).await;
    let eds2 = s.recv_type(TypeUrl::Endpoint).await;
    s.nack(&cds2).await;
    s.ack(&eds2).await;
    s.probe_nothing_pending().await;
    assert_eq!(h.sync_state(TypeUrl::Cluster), SyncState::Error, "the NACK shows");
    let status = h.only_stream_status();
    assert_eq!(status.nacks, 1);
    assert!(status.get(TypeUrl::Cluster).last_nack.as_ref().unwrap().message.contains("rejected for the test"));

    // The next real change is pushed as usual, and only it.
    h.apply(
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: ratings, namespace: default}\nspec:\n  host: ratings\n  trafficPolicy: {loadBalancer: {simple: LEAST_REQUEST}}\n  subsets: [{name: v1, labels: {version: v1}}, {name: v2, labels: {version: v2}}]\n",
    )
    .await;
    let cds3 = s.recv_type(TypeUrl::Cluster).await;
    assert!(names(&cds3).iter().all(|n| n.contains("ratings")), "only what changed: {:?}", names(&cds3));
    assert_ne!(versions(&cds3), versions(&cds2));
}

#[tokio::test]
async fn pure_unsubscribe_is_not_answered_and_resubscribe_sends_again() {
    let h = Harness::start().await;
    let mut s = h.stream().await;
    let cds = s.recv_type(TypeUrl::Cluster).await;
    s.ack(&cds).await;
    s.subscribe(TypeUrl::Endpoint, &[REVIEWS_V1, REVIEWS_V2], "").await;
    let eds = s.recv_type(TypeUrl::Endpoint).await;
    assert_eq!(names(&eds).len(), 2);
    s.ack(&eds).await;
    s.send(DeltaDiscoveryRequest {
        type_url: TypeUrl::Endpoint.as_str().into(),
        resource_names_unsubscribe: vec![REVIEWS_V1.into()],
        ..Default::default()
    })
    .await;
    s.probe_nothing_pending().await;

    // A change to the unsubscribed assignment is not pushed.
    h.apply(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: reviews-v1-b, namespace: default, labels: {app: reviews, version: v1}}\nstatus: {podIP: 127.0.0.41, phase: Running}\n",
    )
    .await;
    s.probe_nothing_pending().await;
    // Subscribing again sends it (with both pods).
    s.subscribe(TypeUrl::Endpoint, &[REVIEWS_V1], "").await;
    let again = s.recv_type(TypeUrl::Endpoint).await;
    assert_eq!(names(&again), [REVIEWS_V1.to_string()].into());
    assert_eq!(endpoint_count(&cla(&again, REVIEWS_V1)), 2);
}

#[tokio::test]
async fn subscription_changes_apply_even_on_a_stale_nonce() {
    let h = Harness::start().await;
    let mut s = h.stream().await;
    let cds = s.recv_type(TypeUrl::Cluster).await;
    s.ack(&cds).await;
    s.subscribe(TypeUrl::Endpoint, &[REVIEWS_V1], "").await;
    let eds1 = s.recv_type(TypeUrl::Endpoint).await;
    s.subscribe(TypeUrl::Endpoint, &[REVIEWS_V2], &eds1.nonce).await;
    let eds2 = s.recv_type(TypeUrl::Endpoint).await;
    // Answers eds1's nonce, which is no longer the latest: still applied.
    s.subscribe(TypeUrl::Endpoint, &[RATINGS], &eds1.nonce).await;
    let eds3 = s.recv_type(TypeUrl::Endpoint).await;
    assert_eq!(names(&eds3), [RATINGS.to_string()].into());
    assert_ne!(eds3.nonce, eds2.nonce);
    let status = h.only_stream_status();
    assert_eq!(status.stale, 1, "the stale nonce is counted");
}

#[tokio::test]
async fn reconnect_with_initial_versions_sends_only_what_differs() {
    let h = Harness::start().await;
    let mut s = h.stream().await;
    let cds = s.recv_type(TypeUrl::Cluster).await;
    drop(s);
    let held = versions(&cds);

    // Everything current: nothing to send.
    let mut s2 = h
        .stream_with(DeltaDiscoveryRequest {
            type_url: TypeUrl::Cluster.as_str().into(),
            initial_resource_versions: held.clone(),
            ..Default::default()
        })
        .await;
    s2.probe_nothing_pending().await;
    drop(s2);

    // One outdated version, one cluster that no longer exists.
    let mut initial = held.clone();
    initial.insert(REVIEWS_V1.into(), "0000000000000000".into());
    initial.insert("outbound|9080||gone.default.svc.cluster.local".into(), "0000000000000001".into());
    let mut s3 = h
        .stream_with(DeltaDiscoveryRequest {
            type_url: TypeUrl::Cluster.as_str().into(),
            initial_resource_versions: initial,
            ..Default::default()
        })
        .await;
    let r = s3.recv_type(TypeUrl::Cluster).await;
    assert_eq!(names(&r), [REVIEWS_V1.to_string()].into());
    assert_eq!(versions(&r)[REVIEWS_V1], held[REVIEWS_V1]);
    assert_eq!(r.removed_resources, vec!["outbound|9080||gone.default.svc.cluster.local".to_string()]);

    // Named types too: EDS subscribed with what the client already has.
    s3.ack(&r).await;
    s3.subscribe(TypeUrl::Endpoint, &[REVIEWS_V2], "").await;
    let eds = s3.recv_type(TypeUrl::Endpoint).await;
    drop(s3);
    let mut s4 = h
        .stream_with(DeltaDiscoveryRequest {
            type_url: TypeUrl::Endpoint.as_str().into(),
            resource_names_subscribe: vec![REVIEWS_V2.into()],
            initial_resource_versions: versions(&eds),
            ..Default::default()
        })
        .await;
    s4.probe_nothing_pending().await;
}

/// Replicas of one control plane, each with its own engine over the same
/// config, write the same versions: a client that moves from one to the
/// other (its replica died) is sent nothing it already holds, of any type.
#[tokio::test]
async fn a_replica_sends_a_client_moving_from_another_nothing_it_holds() {
    let a = Harness::start().await;
    let b = Harness::start().await;
    let mut s = a.stream().await;
    let cds = s.recv_type(TypeUrl::Cluster).await;
    s.ack(&cds).await;
    s.subscribe(TypeUrl::Listener, &[], "").await;
    let lds = s.recv_type(TypeUrl::Listener).await;
    s.ack(&lds).await;
    s.subscribe(TypeUrl::Endpoint, &[REVIEWS_V1, REVIEWS_V2, RATINGS], "").await;
    let eds = s.recv_type(TypeUrl::Endpoint).await;
    s.ack(&eds).await;
    drop(s);
    assert!(names(&cds).len() > 3 && !names(&lds).is_empty(), "a mesh to hold: {:?} {:?}", names(&cds), names(&lds));

    for (t, held, subscribe) in [
        (TypeUrl::Cluster, versions(&cds), vec![]),
        (TypeUrl::Listener, versions(&lds), vec![]),
        (TypeUrl::Endpoint, versions(&eds), vec![REVIEWS_V1.into(), REVIEWS_V2.into(), RATINGS.into()]),
    ] {
        let mut moved = b
            .stream_with(DeltaDiscoveryRequest {
                type_url: t.as_str().into(),
                resource_names_subscribe: subscribe,
                initial_resource_versions: held,
                ..Default::default()
            })
            .await;
        moved.probe_nothing_pending().await;
    }
}

#[tokio::test]
async fn endpoint_change_sends_only_the_changed_assignment() {
    let h = Harness::start().await;
    let mut s = h.stream().await;
    let cds = s.recv_type(TypeUrl::Cluster).await;
    s.ack(&cds).await;
    s.subscribe(TypeUrl::Endpoint, &[REVIEWS_V1, RATINGS], "").await;
    let eds = s.recv_type(TypeUrl::Endpoint).await;
    s.ack(&eds).await;

    h.apply(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: reviews-v1-b, namespace: default, labels: {app: reviews, version: v1}}\nstatus: {podIP: 127.0.0.41, phase: Running}\n",
    )
    .await;
    let pushed = s.recv_type(TypeUrl::Endpoint).await;
    assert_eq!(names(&pushed), [REVIEWS_V1.to_string()].into(), "only the changed assignment");
    assert_eq!(endpoint_count(&cla(&pushed, REVIEWS_V1)), 2);
    assert_ne!(versions(&pushed)[REVIEWS_V1], versions(&eds)[REVIEWS_V1]);
    s.ack(&pushed).await;
    s.probe_nothing_pending().await;
}

#[tokio::test]
async fn removed_cluster_goes_only_after_listeners_and_routes() {
    let h = Harness::start().await;
    let mut s = h.stream().await;
    let cds = s.recv_type(TypeUrl::Cluster).await;
    s.ack(&cds).await;
    s.send(DeltaDiscoveryRequest { type_url: TypeUrl::Listener.as_str().into(), ..Default::default() }).await;
    let lds = s.recv_type(TypeUrl::Listener).await;
    s.ack(&lds).await;
    s.subscribe(TypeUrl::Route, &["9080"], "").await;
    let rds = s.recv_type(TypeUrl::Route).await;
    s.ack(&rds).await;
    assert!(names(&cds).contains(RATINGS));

    h.delete(vec![
        ConfigKey::new(ConfigKind::Service, "default", "ratings"),
        ConfigKey::new(ConfigKind::VirtualService, "default", "ratings"),
    ])
    .await;
    // Routes change first; the clusters wait until they are ACKed.
    let mut removal = None;
    for _ in 0..6 {
        let r = s.recv().await;
        if r.type_url == TypeUrl::Cluster.as_str() && !r.removed_resources.is_empty() {
            removal = Some(r);
            break;
        }
        s.ack(&r).await;
    }
    let removal = removal.expect("the clusters are removed in the end");
    assert!(removal.removed_resources.contains(&RATINGS.to_string()), "{:?}", removal.removed_resources);
    assert!(removal.resources.is_empty(), "a removal only");
    let status = h.only_stream_status();
    for t in [TypeUrl::Listener, TypeUrl::Route] {
        assert_eq!(status.get(t).sync_state(), SyncState::Synced, "{t} was settled before the removal");
    }
}

#[tokio::test]
async fn assignment_is_sent_again_after_its_cluster_changes() {
    let h = Harness::start().await;
    let mut s = h.stream().await;
    let cds = s.recv_type(TypeUrl::Cluster).await;
    s.ack(&cds).await;
    s.subscribe(TypeUrl::Endpoint, &[RATINGS_V1], "").await;
    let eds = s.recv_type(TypeUrl::Endpoint).await;
    s.ack(&eds).await;

    // Change only the cluster (its load balancer), not the endpoints.
    h.apply(
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: ratings, namespace: default}\nspec:\n  host: ratings\n  trafficPolicy: {loadBalancer: {simple: RANDOM}}\n  subsets: [{name: v1, labels: {version: v1}}, {name: v2, labels: {version: v2}}]\n",
    )
    .await;
    let cds2 = s.recv_type(TypeUrl::Cluster).await;
    assert!(names(&cds2).contains(RATINGS_V1));
    let eds2 = s.recv_type(TypeUrl::Endpoint).await;
    assert_eq!(names(&eds2), [RATINGS_V1.to_string()].into(), "the unchanged assignment is sent again");
    assert_eq!(versions(&eds2), versions(&eds), "same content, same version");
}

#[tokio::test]
async fn wildcard_listeners_send_only_what_a_virtual_service_change_touched() {
    let h = Harness::start().await;
    let mut s = h.stream().await;
    let cds = s.recv_type(TypeUrl::Cluster).await;
    s.ack(&cds).await;
    s.send(DeltaDiscoveryRequest { type_url: TypeUrl::Listener.as_str().into(), ..Default::default() }).await;
    let lds = s.recv_type(TypeUrl::Listener).await;
    s.ack(&lds).await;
    s.subscribe(TypeUrl::Route, &["9080"], "").await;
    let rds = s.recv_type(TypeUrl::Route).await;
    s.ack(&rds).await;

    h.apply(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: ratings, namespace: default}\nspec:\n  hosts: [ratings]\n  http:\n  - route:\n    - destination: {host: ratings, subset: v1}\n      weight: 100\n    timeout: 3s\n",
    )
    .await;
    // Clusters do not change: the first response is the route config.
    let r = s.recv().await;
    assert_eq!(r.type_url, TypeUrl::Route.as_str(), "nothing but the route config changed: {r:?}");
    assert_eq!(names(&r), ["9080".to_string()].into());
    assert_ne!(versions(&r)["9080"], versions(&rds)["9080"]);
}

#[tokio::test]
async fn sotw_and_delta_streams_share_one_engine() {
    let h = Harness::start().await;
    let mut s = h.stream().await;
    let cds = s.recv_type(TypeUrl::Cluster).await;
    assert_eq!(h.engine.queue().len(), 1, "a delta stream registers in the push queue");
    s.ack(&cds).await;
    let encoded = |t| meshpush::generate::cache::CacheStats::get(&h.engine.cache().stats.generations, t);
    let before = encoded(TypeUrl::Cluster);
    // A second delta stream of the same scope reuses the cached clusters.
    let mut s2 = h.stream().await;
    let cds2 = s2.recv_type(TypeUrl::Cluster).await;
    assert_eq!(versions(&cds2), versions(&cds));
    assert_eq!(encoded(TypeUrl::Cluster), before, "no second generation");
}
