//! The mesh config's traffic defaults on the generated configuration: each
//! field changes what istiod changes for it, and a DestinationRule or
//! Sidecar that says otherwise still wins.

use envoy_types::pb::envoy::config::core::v3::TcpKeepalive;
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;

use super::*;
use crate::config::mesh::MeshSettings;

/// `writes` served with the mesh config `text`.
fn served(writes: Vec<Write>, text: &str) -> PushContext {
    let store = ConfigStore::new();
    store.apply(writes);
    let mesh = MeshSettings::parse("mesh.yaml", text).unwrap().mesh_config();
    PushContext::build_with(store.snapshot(), 1, Arc::new(ScopeInterner::default()), Arc::new(mesh))
}

/// Every cluster of the productpage sidecar: its scope's and its own inbound ones.
fn sidecar_clusters(ctx: &PushContext) -> Vec<Cluster> {
    let mut out = cds::clusters(ctx, &productpage(ctx, "REDIRECT"));
    out.extend(cds::inbound_clusters(&productpage_inbound(ctx, "REDIRECT")));
    out
}

fn seconds(s: i64) -> Option<ProtoDuration> {
    Some(ProtoDuration { seconds: s, nanos: 0 })
}

fn keepalive(c: &Cluster) -> Option<TcpKeepalive> {
    c.upstream_connection_options.as_ref().and_then(|o| o.tcp_keepalive.clone())
}

#[test]
fn connect_timeout_is_every_cluster_s_unless_its_rule_sets_one() {
    let ctx = served(mesh(), "connectTimeout: 3500ms\n");
    let clusters = sidecar_clusters(&ctx);
    let mesh_timeout = Some(ProtoDuration { seconds: 3, nanos: 500_000_000 });
    for name in [
        format!("outbound|9080||{REVIEWS}"),
        format!("outbound|9080|v1|{REVIEWS}"),
        format!("outbound|9080||{INVENTORY}"),
        "outbound|443||api.example.com".to_string(),
        "inbound|9080||".to_string(),
        "BlackHoleCluster".to_string(),
        "PassthroughCluster".to_string(),
    ] {
        assert_eq!(cluster(&clusters, &name).connect_timeout, mesh_timeout, "{name}");
    }
    assert_eq!(cluster(&clusters, &format!("outbound|9080||{CATALOG}")).connect_timeout, seconds(2), "the rule's");

    let default = sidecar_clusters(&served(mesh(), ""));
    assert_eq!(cluster(&default, "PassthroughCluster").connect_timeout, seconds(10), "Istio's default");
}

#[test]
fn tcp_keepalive_is_every_policy_cluster_s_with_the_rule_s_attributes_over_it() {
    let writes = mesh_with(
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: inventory, namespace: default}\n\
         spec: {host: inventory, trafficPolicy: {connectionPool: {tcp: {tcpKeepalive: {time: 90s}}}}}\n",
    );
    let ctx = served(writes, "tcpKeepalive: {probes: 2, time: 30s}\n");
    let clusters = sidecar_clusters(&ctx);
    let mesh_keepalive = TcpKeepalive {
        keepalive_probes: Some(crate::generate::proto::u32_value(2)),
        keepalive_time: Some(crate::generate::proto::u32_value(30)),
        keepalive_interval: None,
    };
    for name in [format!("outbound|9080||{REVIEWS}"), "inbound|9080||".to_string(), "PassthroughCluster".to_string()] {
        assert_eq!(keepalive(cluster(&clusters, &name)), Some(mesh_keepalive.clone()), "{name}");
    }
    let inventory = keepalive(cluster(&clusters, &format!("outbound|9080||{INVENTORY}"))).unwrap();
    assert_eq!(inventory.keepalive_probes, mesh_keepalive.keepalive_probes, "the mesh's, where the rule sets none");
    assert_eq!(inventory.keepalive_time, Some(crate::generate::proto::u32_value(90)), "the rule's");
    assert_eq!(keepalive(cluster(&clusters, "BlackHoleCluster")), None, "it never connects");

    let default = sidecar_clusters(&served(mesh(), ""));
    assert_eq!(keepalive(cluster(&default, &format!("outbound|9080||{REVIEWS}"))), None, "none unless set");
    let empty = sidecar_clusters(&served(mesh(), "tcpKeepalive: {}\n"));
    assert_eq!(
        keepalive(cluster(&empty, "PassthroughCluster")),
        Some(TcpKeepalive::default()),
        "an empty one turns keepalive on with the OS's settings"
    );
}
