//! The wire shortcuts against prost: what the harness writes and reads is
//! what Envoy's protos say, for SotW and delta alike; and a delta stream's
//! requests, answer by answer.

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::cluster::v3::cluster::{ClusterDiscoveryType, DiscoveryType, EdsClusterConfig};
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::listener::v3::{Filter, FilterChain, Listener, filter};
use envoy_types::pb::envoy::config::route::v3::{RouteConfiguration, VirtualHost};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    HttpConnectionManager, Rds, http_connection_manager::RouteSpecifier,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse, Resource,
};
use envoy_types::pb::google::protobuf::Any;
use prost::{Message, Name};

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame};

use crate::envoy::Envoy;
use crate::envoy::Sim;
use crate::fleet::{Identity, NodeSending, Protocol, Shared};
use crate::mesh::Shape;
use crate::scenario::Scenario;
use crate::track::{Change, Expect, XdsType};
use crate::wire;

#[test]
fn requests_are_what_prost_encodes_with_node_and_every_name() {
    let own = Scenario::Smoke.shape().node(7);
    let common = bytes::Bytes::from(Shape::node_common(false));
    let node = wire::EncodedNode::new(wire::SOTW_NODE_FIELD, &own, &common);
    let names = ["outbound|9080||a.ns-0.svc.cluster.local", "outbound|9080||b.ns-0.svc.cluster.local"];
    let encoded = wire::encode_request(&node, &wire::encode_names(&names), wire::ENDPOINT, "v1", "n7").to_bytes();
    let mut whole = own.clone();
    whole.extend_from_slice(&common);
    let whole = Node::decode(&whole[..]).unwrap();
    assert_eq!(whole.extensions.len(), 516, "Envoy 1.40's extension list");
    let expected = DiscoveryRequest {
        version_info: "v1".into(),
        node: Some(whole),
        resource_names: names.iter().map(|n| n.to_string()).collect(),
        type_url: wire::ENDPOINT.into(),
        response_nonce: "n7".into(),
        ..Default::default()
    };
    // Byte for byte but for the order of the metadata map's entries, which
    // prost writes in HashMap order.
    assert_eq!(encoded.len(), expected.encoded_len());
    let decoded = DiscoveryRequest::decode(encoded).unwrap();
    assert_eq!(decoded, expected);
    assert!(decoded.node.unwrap().id.starts_with("sidecar~127.1."));
}

#[test]
fn responses_yield_names_eds_clusters_and_route_names() {
    let eds = Cluster {
        name: "outbound|9080||a.ns-0.svc.cluster.local".into(),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32)),
        eds_cluster_config: Some(EdsClusterConfig { service_name: "a-eds".into(), ..Default::default() }),
        ..Default::default()
    };
    let passthrough = Cluster {
        name: "PassthroughCluster".into(),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::OriginalDst as i32)),
        ..Default::default()
    };
    let pack = |type_url: String, value: Vec<u8>| Any { type_url, value };
    let response = DiscoveryResponse {
        version_info: "v3".into(),
        resources: vec![
            pack(Cluster::type_url(), eds.encode_to_vec()),
            pack(Cluster::type_url(), passthrough.encode_to_vec()),
        ],
        type_url: wire::CLUSTER.into(),
        nonce: "abc".into(),
        ..Default::default()
    }
    .encode_to_vec();
    let parsed = wire::Response::parse(&response);
    assert_eq!((parsed.version, parsed.type_url, parsed.nonce), ("v3", wire::CLUSTER, "abc"));
    let names: Vec<_> = parsed.resources.iter().map(|r| wire::resource_name(r)).collect();
    assert_eq!(names, ["outbound|9080||a.ns-0.svc.cluster.local", "PassthroughCluster"]);
    let eds_names: Vec<_> = parsed.resources.iter().filter_map(|r| wire::eds_name(r)).collect();
    assert_eq!(eds_names, ["a-eds"]);

    let listener = rds_listener("0.0.0.0_9080", "9080");
    let mut routes = Vec::new();
    let encoded = listener.encode_to_vec();
    wire::rds_names(&encoded, &mut routes);
    assert_eq!(routes, ["9080"]);
}

/// A listener whose HTTP connection manager asks RDS for `route`.
fn rds_listener(name: &str, route: &str) -> Listener {
    let hcm = HttpConnectionManager {
        route_specifier: Some(RouteSpecifier::Rds(Rds { route_config_name: route.into(), ..Default::default() })),
        ..Default::default()
    };
    Listener {
        name: name.into(),
        filter_chains: vec![FilterChain {
            filters: vec![Filter {
                name: "envoy.filters.network.http_connection_manager".into(),
                config_type: Some(filter::ConfigType::TypedConfig(Any {
                    type_url: HttpConnectionManager::type_url(),
                    value: hcm.encode_to_vec(),
                })),
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[test]
fn a_token_is_found_only_as_a_whole_string_field() {
    let cla = envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment {
        cluster_name: "127.200.0.12".into(),
        ..Default::default()
    }
    .encode_to_vec();
    assert!(memchr::memmem::find(&cla, &wire::encoded_string("127.200.0.12")).is_some());
    assert!(memchr::memmem::find(&cla, &wire::encoded_string("127.200.0.1")).is_none());
}

#[test]
fn placements_cover_every_namespace_and_service() {
    let shape: Shape = Scenario::S2.shape();
    assert_eq!(shape.streams(), 10_000);
    assert_eq!(shape.endpoints(), 100_000);
    let last = shape.placement(9_999);
    assert_eq!((last.namespace, last.service), (99, 99));
    assert_eq!(shape.endpoint_ip(99, 99, 9).to_string(), "127.2.134.159");
    let smoke = Scenario::Smoke.shape();
    assert_eq!(smoke.placement(49).pod, 1, "two sidecars per service in smoke");
}

/// The node a stream of smoke sends, encoded for `field`, and as prost decodes it.
fn smoke_node(stream: u32, field: u32) -> (wire::EncodedNode, Node, Vec<u8>, bytes::Bytes) {
    let own = Scenario::Smoke.shape().node(stream);
    let common = bytes::Bytes::from(Shape::node_common(false));
    let node = wire::EncodedNode::new(field, &own, &common);
    let mut whole = own.clone();
    whole.extend_from_slice(&common);
    (node, Node::decode(&whole[..]).unwrap(), own, common)
}

/// A request decoded by prost, after checking its size is what prost would encode.
fn decoded_delta(request: &wire::Request, expected: &DeltaDiscoveryRequest) -> DeltaDiscoveryRequest {
    let bytes = request.to_bytes();
    assert_eq!(bytes.len(), expected.encoded_len());
    DeltaDiscoveryRequest::decode(bytes).unwrap()
}

#[test]
fn delta_requests_are_what_prost_encodes_with_node_and_name_lists() {
    let (node, whole, _, _) = smoke_node(7, wire::DELTA_NODE_FIELD);
    let expected = |type_url: &str, subscribe: &[&str], unsubscribe: &[&str], nonce: &str| DeltaDiscoveryRequest {
        node: Some(whole.clone()),
        type_url: type_url.into(),
        resource_names_subscribe: subscribe.iter().map(|n| n.to_string()).collect(),
        resource_names_unsubscribe: unsubscribe.iter().map(|n| n.to_string()).collect(),
        response_nonce: nonce.into(),
        ..Default::default()
    };

    // The legacy wildcard: no names, no nonce.
    let wildcard = wire::encode_delta_request::<&str>(&node, wire::CLUSTER, &bytes::Bytes::new(), &[], "");
    let want = expected(wire::CLUSTER, &[], &[], "");
    assert_eq!(decoded_delta(&wildcard, &want), want);
    assert_eq!(want.node.as_ref().unwrap().extensions.len(), 516, "Envoy 1.40's extension list");

    // A subscription change: what to add, what to drop.
    let subscribe = ["outbound|9080||c.ns-0.svc.cluster.local", "outbound|9080||d.ns-0.svc.cluster.local"];
    let unsubscribe = ["outbound|9080||a.ns-0.svc.cluster.local"];
    let change = wire::encode_delta_request(&node, wire::ENDPOINT, &wire::encode_names(&subscribe), &unsubscribe, "");
    let want = expected(wire::ENDPOINT, &subscribe, &unsubscribe, "");
    assert_eq!(decoded_delta(&change, &want), want);

    // An ACK: the nonce alone, and still the node.
    let ack = wire::encode_delta_request::<&str>(&node, wire::ROUTE, &bytes::Bytes::new(), &[], "0000002a");
    let want = expected(wire::ROUTE, &[], &[], "0000002a");
    let decoded = decoded_delta(&ack, &want);
    assert_eq!(decoded, want);
    assert!(decoded.node.unwrap().id.starts_with("sidecar~127.1."));
}

/// A `DeltaDiscoveryResponse.resources` entry, as a server sends it.
fn delta_resource(name: &str, type_url: String, value: Vec<u8>) -> Resource {
    Resource {
        name: name.into(),
        version: format!("v-{name}"),
        resource: Some(Any { type_url, value }),
        ..Default::default()
    }
}

fn eds_cluster(name: &str, service_name: &str) -> Cluster {
    Cluster {
        name: name.into(),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32)),
        eds_cluster_config: Some(EdsClusterConfig { service_name: service_name.into(), ..Default::default() }),
        ..Default::default()
    }
}

#[test]
fn delta_responses_yield_resources_names_and_removals() {
    let a = eds_cluster("outbound|9080||a.ns-0.svc.cluster.local", "a-eds");
    let passthrough = Cluster {
        name: "PassthroughCluster".into(),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::OriginalDst as i32)),
        ..Default::default()
    };
    let mut unnamed = delta_resource("", Cluster::type_url(), passthrough.encode_to_vec());
    unnamed.version.clear();
    let response = DeltaDiscoveryResponse {
        system_version_info: "7".into(),
        resources: vec![delta_resource(&a.name, Cluster::type_url(), a.encode_to_vec()), unnamed],
        type_url: wire::CLUSTER.into(),
        nonce: "00000003".into(),
        removed_resources: vec!["outbound|9080||gone.ns-0.svc.cluster.local".into(), "other".into()],
        ..Default::default()
    }
    .encode_to_vec();
    let parsed = wire::DeltaResponse::parse(&response);
    assert_eq!((parsed.type_url, parsed.nonce), (wire::CLUSTER, "00000003"));
    let names: Vec<_> = parsed.resources.iter().map(|r| r.name).collect();
    // A resource without `Resource.name` is named by its own name field.
    assert_eq!(names, ["outbound|9080||a.ns-0.svc.cluster.local", "PassthroughCluster"]);
    assert_eq!(parsed.resources[0].value, &a.encode_to_vec()[..]);
    assert_eq!(parsed.resources[1].value, &passthrough.encode_to_vec()[..]);
    let eds: Vec<_> = parsed.resources.iter().filter_map(|r| wire::eds_name(r.value)).collect();
    assert_eq!(eds, ["a-eds"]);
    assert_eq!(parsed.removed, ["outbound|9080||gone.ns-0.svc.cluster.local", "other"]);
}

/// A delta stream's simulator fed prost-encoded responses; its requests
/// decoded by prost.
struct DeltaHarness {
    sim: crate::delta::Sim,
    rx: tokio::sync::mpsc::Receiver<wire::Request>,
    shared: std::sync::Arc<Shared>,
    node: Node,
    nonce: u32,
    /// Requests decoded so far.
    decoded: usize,
}

impl DeltaHarness {
    fn new(node_sending: NodeSending) -> DeltaHarness {
        let (_, node, own, common) = smoke_node(3, wire::DELTA_NODE_FIELD);
        let shared = Shared::new(common, node_sending, false);
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        let identity = Identity { id: 3, namespace: 0, node: own };
        let sim = <crate::delta::Sim as Sim>::new(Envoy::new(identity, shared.clone(), tx, Protocol::Delta));
        DeltaHarness { sim, rx, shared, node, nonce: 0, decoded: 0 }
    }

    /// Sends a response of `type_url`; returns its nonce.
    async fn respond(&mut self, type_url: &str, resources: Vec<Resource>, removed: &[&str]) -> String {
        self.nonce += 1;
        let nonce = format!("{:08x}", self.nonce);
        let response = DeltaDiscoveryResponse {
            system_version_info: self.nonce.to_string(),
            resources,
            type_url: type_url.into(),
            nonce: nonce.clone(),
            removed_resources: removed.iter().map(|n| n.to_string()).collect(),
            ..Default::default()
        };
        self.sim.on_response(response.encode_to_vec().into()).await;
        nonce
    }

    /// The requests sent since the last call, decoded.
    fn requests(&mut self) -> Vec<DeltaDiscoveryRequest> {
        let mut out = Vec::new();
        while let Ok(request) = self.rx.try_recv() {
            let decoded = DeltaDiscoveryRequest::decode(request.to_bytes()).unwrap();
            if self.decoded == 0 || self.shared.node_sending == NodeSending::EveryRequest {
                assert_eq!(decoded.node.as_ref(), Some(&self.node), "request {} carries the node", self.decoded);
            } else {
                assert_eq!(decoded.node, None, "request {} carries the node, as only the first should", self.decoded);
            }
            self.decoded += 1;
            out.push(decoded);
        }
        out
    }

    fn request(
        type_url: &str,
        subscribe: &[&str],
        unsubscribe: &[&str],
        nonce: &str,
    ) -> (String, Vec<String>, Vec<String>, String) {
        let strings = |names: &[&str]| names.iter().map(|n| n.to_string()).collect();
        (type_url.into(), strings(subscribe), strings(unsubscribe), nonce.into())
    }

    /// The requests sent since the last call, as (type, subscribe, unsubscribe, nonce).
    fn sent(&mut self) -> Vec<(String, Vec<String>, Vec<String>, String)> {
        self.requests()
            .into_iter()
            .map(|r| (r.type_url, r.resource_names_subscribe, r.resource_names_unsubscribe, r.response_nonce))
            .collect()
    }
}

/// With the node on the first request only, as from an Envoy Istio bootstraps.
#[tokio::test]
async fn a_delta_stream_acks_every_response_and_subscribes_only_the_difference() {
    delta_stream_acks_and_subscribes(NodeSending::FirstRequest).await;
}

/// With the node on every request (Envoy's own default).
#[tokio::test]
async fn a_delta_stream_sending_the_node_every_time_does_the_same() {
    delta_stream_acks_and_subscribes(NodeSending::EveryRequest).await;
}

async fn delta_stream_acks_and_subscribes(node_sending: NodeSending) {
    let req = DeltaHarness::request;
    let mut h = DeltaHarness::new(node_sending);
    let cluster = |name: &str| {
        let c = eds_cluster(name, "");
        delta_resource(name, Cluster::type_url(), c.encode_to_vec())
    };
    let cla = |name: &str| {
        let cla = ClusterLoadAssignment { cluster_name: name.into(), ..Default::default() };
        delta_resource(name, ClusterLoadAssignment::type_url(), cla.encode_to_vec())
    };

    // Clusters a and b: ACK, then subscribe both EDS names.
    let nonce = h.respond(wire::CLUSTER, vec![cluster("a"), cluster("b")], &[]).await;
    assert_eq!(h.sent(), [req(wire::CLUSTER, &[], &[], &nonce), req(wire::ENDPOINT, &["a", "b"], &[], "")]);
    assert_eq!(h.shared.names.watchers(XdsType::Endpoint, "a"), 1);

    // a's endpoints: ACK; b is still warming, so no listeners yet.
    let nonce = h.respond(wire::ENDPOINT, vec![cla("a")], &[]).await;
    assert_eq!(h.sent(), [req(wire::ENDPOINT, &[], &[], &nonce)]);

    // b answered as absent counts as received: clusters are warm, LDS wildcard.
    let nonce = h.respond(wire::ENDPOINT, vec![], &["b"]).await;
    assert_eq!(h.sent(), [req(wire::ENDPOINT, &[], &[], &nonce), req(wire::LISTENER, &[], &[], "")]);

    // Cluster c added, a removed: only the difference goes out.
    let nonce = h.respond(wire::CLUSTER, vec![cluster("c")], &["a"]).await;
    assert_eq!(h.sent(), [req(wire::CLUSTER, &[], &[], &nonce), req(wire::ENDPOINT, &["c"], &["a"], "")]);
    assert_eq!(h.shared.names.watchers(XdsType::Endpoint, "a"), 0);
    assert_eq!(h.shared.names.watchers(XdsType::Endpoint, "c"), 1);

    // A changed cluster that asks for the same name: ACK only.
    let nonce = h.respond(wire::CLUSTER, vec![cluster("b")], &[]).await;
    assert_eq!(h.sent(), [req(wire::CLUSTER, &[], &[], &nonce)]);

    // A listener using route configuration 9080: ACK, subscribe it.
    let listener = rds_listener("0.0.0.0_9080", "9080");
    let listeners = vec![delta_resource(&listener.name, Listener::type_url(), listener.encode_to_vec())];
    let nonce = h.respond(wire::LISTENER, listeners, &[]).await;
    assert_eq!(h.sent(), [req(wire::LISTENER, &[], &[], &nonce), req(wire::ROUTE, &["9080"], &[], "")]);
    assert_eq!(h.shared.sync.count(), 0, "not synced before its routes arrive");

    // The route configuration, carrying a tracked change: ACK, synced, converged.
    let change = std::sync::Arc::new(Change::new(
        "route".into(),
        XdsType::Route,
        "9080".into(),
        "/loadtest-change-1",
        std::time::Instant::now(),
        Expect::All,
        1,
    ));
    h.shared.tracker.add(change.clone());
    let route = RouteConfiguration {
        name: "9080".into(),
        virtual_hosts: vec![VirtualHost { name: "/loadtest-change-1".into(), ..Default::default() }],
        ..Default::default()
    };
    let nonce = h
        .respond(wire::ROUTE, vec![delta_resource("9080", RouteConfiguration::type_url(), route.encode_to_vec())], &[])
        .await;
    assert_eq!(h.sent(), [req(wire::ROUTE, &[], &[], &nonce)]);
    assert_eq!(h.shared.sync.count(), 1);
    assert!(change.seen_by(3) && change.complete());

    // The listener gone: unsubscribe its route configuration.
    let nonce = h.respond(wire::LISTENER, vec![], &["0.0.0.0_9080"]).await;
    assert_eq!(h.sent(), [req(wire::LISTENER, &[], &[], &nonce), req(wire::ROUTE, &[], &["9080"], "")]);
    assert_eq!(h.shared.stats.requests.load(std::sync::atomic::Ordering::Relaxed), 13);
}

/// An ADS server that refuses every stream, as a server does a node it
/// cannot use: a trailers-only response with the status in its headers.
#[derive(Clone)]
struct Refuser;

impl tonic::server::NamedService for Refuser {
    const NAME: &'static str = "envoy.service.discovery.v3.AggregatedDiscoveryService";
}

impl tower_service::Service<http::Request<tonic::body::Body>> for Refuser {
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Request<tonic::body::Body>) -> Self::Future {
        std::future::ready(Ok(tonic::Status::invalid_argument("no usable node").into_http()))
    }
}

/// A refused stream is tried again after Envoy's backoff (below 500 ms,
/// then below 1.5 s), counted refused each time and never lost.
#[tokio::test]
async fn a_refused_stream_is_retried_after_a_backoff_and_counted_refused_not_lost() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(Refuser)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let channel = crate::ads::connect(addr, None).await.unwrap();
    let (_, _, own, common) = smoke_node(0, wire::SOTW_NODE_FIELD);
    let shared = Shared::new(common, NodeSending::FirstRequest, false);
    let identity = Identity { id: 0, namespace: 0, node: own };
    let stream = tokio::spawn(crate::ads::run_stream(channel, identity, shared.clone(), Protocol::Sotw));
    let stats = &shared.stats;
    let refused = || stats.streams_refused.load(std::sync::atomic::Ordering::Relaxed);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while refused() < 3 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(refused() >= 3, "refused {} times within 10 s: not retried", refused());
    assert!(stats.reconnects.load(std::sync::atomic::Ordering::Relaxed) >= 2);
    shared.stop.send_replace(true);
    let ended = tokio::time::timeout(std::time::Duration::from_secs(5), stream).await;
    server.abort();
    assert!(ended.is_ok(), "the stream ends when the harness stops it");
    assert_eq!(stats.streams_lost.load(std::sync::atomic::Ordering::Relaxed), 0);
}

/// After its stream ends, a delta stream's first requests on the new one
/// carry the node (on the first only), the names it asks for (none for
/// the wildcard types) and every resource it holds with the version the
/// server gave it: `initial_resource_versions`, as Envoy sends them.
#[tokio::test]
async fn a_reconnected_delta_stream_says_what_it_holds_with_each_version() {
    let req = DeltaHarness::request;
    let mut h = DeltaHarness::new(NodeSending::FirstRequest);
    let cluster = |name: &str| delta_resource(name, Cluster::type_url(), eds_cluster(name, "").encode_to_vec());
    let cla = |name: &str| {
        let cla = ClusterLoadAssignment { cluster_name: name.into(), ..Default::default() };
        delta_resource(name, ClusterLoadAssignment::type_url(), cla.encode_to_vec())
    };
    h.respond(wire::CLUSTER, vec![cluster("a"), cluster("b")], &[]).await;
    h.respond(wire::ENDPOINT, vec![cla("a"), cla("b")], &[]).await;
    let listener = rds_listener("0.0.0.0_9080", "9080");
    let listeners = vec![delta_resource(&listener.name, Listener::type_url(), listener.encode_to_vec())];
    h.respond(wire::LISTENER, listeners, &[]).await;
    // b gone, then its endpoints unsubscribed: neither is held any more.
    h.respond(wire::CLUSTER, vec![], &["b"]).await;
    let before = h.sent();
    assert_eq!(before.last(), Some(&req(wire::ENDPOINT, &[], &["b"], "")));

    let (tx, rx) = tokio::sync::mpsc::channel(64);
    h.rx = rx;
    h.decoded = 0;
    h.sim.envoy().attach(tx);
    h.sim.reconnect().await;
    let sent = h.requests();
    let versions = |r: &DeltaDiscoveryRequest| {
        let mut v: Vec<(String, String)> = r.initial_resource_versions.clone().into_iter().collect();
        v.sort();
        v
    };
    let pair = |name: &str| (name.to_string(), format!("v-{name}"));
    assert_eq!(sent.len(), 4, "CDS, EDS, LDS and RDS: {sent:?}");
    let types: Vec<&str> = sent.iter().map(|r| r.type_url.as_str()).collect();
    assert_eq!(types, [wire::CLUSTER, wire::ENDPOINT, wire::LISTENER, wire::ROUTE]);
    assert!(sent.iter().all(|r| r.response_nonce.is_empty()), "a new stream has no nonce to answer");
    assert_eq!((sent[0].resource_names_subscribe.len(), versions(&sent[0])), (0, vec![pair("a")]));
    assert_eq!(
        (sent[1].resource_names_subscribe.clone(), versions(&sent[1])),
        (vec!["a".to_string()], vec![pair("a")])
    );
    assert_eq!(versions(&sent[2]), vec![pair("0.0.0.0_9080")]);
    assert_eq!((sent[3].resource_names_subscribe.clone(), versions(&sent[3])), (vec!["9080".to_string()], vec![]));
}

/// After its stream ends, a SotW stream asks again for each type it
/// subscribed to, in order, with the version it last accepted, its names
/// and no nonce; the node rides on the first request.
#[tokio::test]
async fn a_reconnected_sotw_stream_asks_again_with_the_versions_it_holds() {
    let (_, node, own, common) = smoke_node(4, wire::SOTW_NODE_FIELD);
    let shared = Shared::new(common, NodeSending::FirstRequest, false);
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let identity = Identity { id: 4, namespace: 0, node: own };
    let mut sim = <crate::sotw::Sim as Sim>::new(Envoy::new(identity, shared.clone(), tx, Protocol::Sotw));
    let respond = |type_url: &str, version: &str, resources: Vec<Any>| {
        DiscoveryResponse {
            version_info: version.into(),
            resources,
            type_url: type_url.into(),
            nonce: format!("n-{version}"),
            ..Default::default()
        }
        .encode_to_vec()
    };
    let any = |type_url: String, value: Vec<u8>| Any { type_url, value };
    let clusters = vec![any(Cluster::type_url(), eds_cluster("a", "").encode_to_vec())];
    sim.on_response(respond(wire::CLUSTER, "c1", clusters).into()).await;
    let cla = ClusterLoadAssignment { cluster_name: "a".into(), ..Default::default() };
    sim.on_response(
        respond(wire::ENDPOINT, "e1", vec![any(ClusterLoadAssignment::type_url(), cla.encode_to_vec())]).into(),
    )
    .await;
    while rx.try_recv().is_ok() {}

    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    sim.envoy().attach(tx);
    sim.reconnect().await;
    let mut sent = Vec::new();
    while let Ok(request) = rx.try_recv() {
        sent.push(DiscoveryRequest::decode(request.to_bytes()).unwrap());
    }
    let summary: Vec<(&str, &str, Vec<String>, &str)> = sent
        .iter()
        .map(|r| (r.type_url.as_str(), r.version_info.as_str(), r.resource_names.clone(), r.response_nonce.as_str()))
        .collect();
    // LDS was asked for once the endpoints arrived; nothing was accepted of it yet.
    assert_eq!(
        summary,
        [
            (wire::CLUSTER, "c1", vec![], ""),
            (wire::ENDPOINT, "e1", vec!["a".to_string()], ""),
            (wire::LISTENER, "", vec![], ""),
        ]
    );
    assert_eq!(sent[0].node.as_ref(), Some(&node));
    assert!(sent[1..].iter().all(|r| r.node.is_none()), "only the new stream's first request carries the node");
}

/// An HTTP body of the given chunks, for the framing tests.
pub(crate) struct Chunks(pub VecDeque<Bytes>);

impl Chunks {
    /// `wire` cut into chunks of `size` bytes.
    pub(crate) fn cut(wire: &[u8], size: usize) -> Chunks {
        Chunks(wire.chunks(size).map(Bytes::copy_from_slice).collect())
    }
}

impl Body for Chunks {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Poll::Ready(self.0.pop_front().map(|chunk| Ok(Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_empty()
    }
}

/// `message` with its gRPC header.
pub(crate) fn framed(message: &[u8]) -> Vec<u8> {
    let mut out = vec![0];
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out
}

/// Connections to a loopback server come from a new source address every
/// 16,384 connections, so that no address runs out of ephemeral ports;
/// another server's connections use the system's choice.
#[test]
fn connections_spread_over_loopback_source_addresses() {
    use crate::ads::source_address;
    let server: std::net::SocketAddr = "127.0.0.1:15010".parse().unwrap();
    let at = |c| source_address(server, c).unwrap().to_string();
    assert_eq!(at(0), "127.1.0.1");
    assert_eq!(at(16_383), "127.1.0.1");
    assert_eq!(at(16_384), "127.1.0.2");
    assert_eq!(at(99_999), "127.1.0.7");
    let distinct: std::collections::BTreeSet<String> = (0..100_000).step_by(1000).map(at).collect();
    assert_eq!(distinct.len(), 7, "100,000 connections from 7 addresses: {distinct:?}");
    assert_eq!(source_address("10.0.0.1:15010".parse().unwrap(), 5), None);
}
