//! The wire shortcuts against prost: what the harness writes and reads is
//! what Envoy's protos say.

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::cluster::v3::cluster::{ClusterDiscoveryType, DiscoveryType, EdsClusterConfig};
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::config::listener::v3::{Filter, FilterChain, Listener, filter};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    HttpConnectionManager, Rds, http_connection_manager::RouteSpecifier,
};
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::protobuf::Any;
use prost::{Message, Name};

use crate::mesh::Shape;
use crate::scenario::Scenario;
use crate::wire;

#[test]
fn requests_are_what_prost_encodes_with_node_and_every_name() {
    let own = Scenario::Smoke.shape().node(7);
    let common = bytes::Bytes::from(Shape::node_common(false));
    let node = wire::EncodedNode::new(&own, &common);
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

    let hcm = HttpConnectionManager {
        route_specifier: Some(RouteSpecifier::Rds(Rds { route_config_name: "9080".into(), ..Default::default() })),
        ..Default::default()
    };
    let listener = Listener {
        name: "0.0.0.0_9080".into(),
        filter_chains: vec![FilterChain {
            filters: vec![Filter {
                name: "envoy.filters.network.http_connection_manager".into(),
                config_type: Some(filter::ConfigType::TypedConfig(pack(
                    HttpConnectionManager::type_url(),
                    hcm.encode_to_vec(),
                ))),
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let mut routes = Vec::new();
    let encoded = listener.encode_to_vec();
    wire::rds_names(&encoded, &mut routes);
    assert_eq!(routes, ["9080"]);
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
