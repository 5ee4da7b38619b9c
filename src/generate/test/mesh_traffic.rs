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
    c.upstream_connection_options.as_ref().and_then(|o| o.tcp_keepalive)
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
        assert_eq!(keepalive(cluster(&clusters, &name)), Some(mesh_keepalive), "{name}");
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

/// Whether a cluster speaks HTTP/2 upstream (explicitly, not the client's protocol).
fn upstream_http2(c: &Cluster) -> bool {
    matches!(
        protocol_options(c).and_then(|o| o.upstream_protocol_options),
        Some(UpstreamProtocolOptions::ExplicitHttpConfig(e))
            if matches!(e.protocol_config, Some(ProtocolConfig::Http2ProtocolOptions(_)))
    )
}

#[test]
fn h2_upgrade_policy_upgrades_http1_service_clusters_a_rule_leaves_alone() {
    let writes = mesh_with(
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: inventory, namespace: default}\n\
         spec: {host: inventory, trafficPolicy: {connectionPool: {http: {h2UpgradePolicy: DO_NOT_UPGRADE}}}}\n",
    );
    let ctx = served(writes.clone(), "h2UpgradePolicy: UPGRADE\n");
    let clusters = sidecar_clusters(&ctx);
    assert!(upstream_http2(cluster(&clusters, &format!("outbound|9080||{REVIEWS}"))), "an HTTP port, no rule policy");
    assert!(upstream_http2(cluster(&clusters, &format!("outbound|9080|v2|{REVIEWS}"))), "its subsets too");
    assert!(!upstream_http2(cluster(&clusters, &format!("outbound|9080||{INVENTORY}"))), "the rule says no");
    assert!(
        !upstream_http2(cluster(&clusters, "outbound|9096||features.default.svc.cluster.local")),
        "useClientProtocol keeps the client's"
    );
    assert!(protocol_options(cluster(&clusters, &format!("outbound|27017||{MONGODB}"))).is_none(), "a TCP port");
    assert!(!upstream_http2(cluster(&clusters, "inbound|9080||")), "inbound is never upgraded");

    let default = sidecar_clusters(&served(writes, ""));
    assert!(!upstream_http2(cluster(&default, &format!("outbound|9080||{REVIEWS}"))), "Istio's default");
    assert!(upstream_http2(cluster(&default, "outbound|9095||features.default.svc.cluster.local")), "the rule's");
}

#[test]
fn enable_auto_mtls_false_leaves_clusters_without_rule_tls_in_plain_text() {
    let writes = mesh_with(
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: inventory, namespace: default}\n\
         spec: {host: inventory, trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}}\n",
    );
    let mut proxy = crate::testing::bookinfo::productpage_in("REDIRECT");
    proxy.mesh_certificates = true;
    let clusters = |text: &str| {
        let ctx = served(writes.clone(), text);
        cds::clusters(&ctx, &ctx.scope_for(&proxy))
    };
    let reviews = format!("outbound|9080||{REVIEWS}");
    let auto = clusters("");
    assert!(!cluster(&auto, &reviews).transport_socket_matches.is_empty(), "auto mTLS by default");

    let off = clusters("enableAutoMtls: false\n");
    let plain = cluster(&off, &reviews);
    assert!(plain.transport_socket_matches.is_empty() && plain.transport_socket.is_none(), "{plain:?}");
    assert!(
        cluster(&off, &format!("outbound|9080||{INVENTORY}")).transport_socket.is_some(),
        "a rule's ISTIO_MUTUAL still applies"
    );
}

#[test]
#[allow(deprecated)] // Istio sets Envoy's deprecated DNS refresh fields, and so does meshpush.
fn dns_refresh_rate_is_every_dns_cluster_s() {
    let clusters = sidecar_clusters(&served(mesh(), "dnsRefreshRate: 5s\n"));
    for name in ["outbound|443||api.example.com", "outbound|80||rr.example.com"] {
        let c = cluster(&clusters, name);
        assert_eq!((c.dns_refresh_rate, c.respect_dns_ttl), (seconds(5), true), "{name}");
    }
    assert_eq!(cluster(&clusters, &format!("outbound|9080||{REVIEWS}")).dns_refresh_rate, None, "EDS resolves nothing");
    let default = sidecar_clusters(&served(mesh(), ""));
    assert_eq!(cluster(&default, "outbound|443||api.example.com").dns_refresh_rate, seconds(60), "Istio's default");
}

#[test]
fn inbound_traffic_policy_passthrough_sends_to_the_original_destination_and_localhost_to_loopback() {
    let inbound = |text: &str| {
        let ctx = served(mesh(), text);
        let clusters = cds::inbound_clusters(&productpage_inbound(&ctx, "REDIRECT"));
        clusters.into_iter().find(|c| c.name == "inbound|9080||").expect("the port's inbound cluster")
    };
    let passthrough = inbound("");
    assert_eq!(passthrough.name, "inbound|9080||");
    assert_eq!(discovery_type(&passthrough), DiscoveryType::OriginalDst, "Istio's default: PASSTHROUGH");
    assert_eq!(passthrough.lb_policy, LbPolicy::ClusterProvided as i32);
    assert!(passthrough.load_assignment.is_none());
    let source = passthrough.upstream_bind_config.as_ref().and_then(|b| b.source_address.as_ref()).unwrap();
    assert_eq!(source.address, "127.0.0.6", "the source Istio's iptables rules let through to the application");

    let localhost = inbound("inboundTrafficPolicy: {mode: LOCALHOST}\n");
    assert_eq!(discovery_type(&localhost), DiscoveryType::Static);
    assert!(localhost.upstream_bind_config.is_none());
    let lbe = &localhost.load_assignment.as_ref().unwrap().endpoints[0].lb_endpoints[0];
    let Some(HostIdentifier::Endpoint(ep)) = &lbe.host_identifier else { panic!("no endpoint") };
    let Some(address::Address::SocketAddress(sa)) = ep.address.as_ref().unwrap().address.as_ref() else { panic!() };
    assert_eq!((sa.address.as_str(), sa.port_specifier.clone()), ("127.0.0.1", Some(PortSpecifier::PortValue(9080))));
}

#[test]
fn protocol_detection_timeout_bounds_the_inbound_listener_filters() {
    let virtual_inbound = |text: &str| {
        let ctx = served(mesh(), text);
        let listeners = lds::inbound_listeners(&productpage_inbound(&ctx, "REDIRECT"));
        listener(&listeners, "virtualInbound").clone()
    };
    let bounded = virtual_inbound("protocolDetectionTimeout: 250ms\n");
    assert_eq!(bounded.listener_filters_timeout, Some(ProtoDuration { seconds: 0, nanos: 250_000_000 }));
    assert!(bounded.continue_on_listener_filters_timeout, "a connection goes on without what the filters wait for");
    let default = virtual_inbound("");
    assert_eq!(default.listener_filters_timeout, seconds(0), "Istio's default: no limit, not Envoy's 15s");
    assert!(default.continue_on_listener_filters_timeout);
}

#[test]
fn outbound_traffic_policy_is_the_default_of_sidecars_whose_sidecar_sets_none() {
    let catch_all = |ctx: &PushContext, scope: &Scope| {
        let listeners = lds::listeners(ctx, scope);
        let chain = &listener(&listeners, "virtualOutbound").filter_chains[0];
        tcp_clusters(&tcp(&chain.filters[0]))
    };
    let fallback_host = |ctx: &PushContext| {
        let configs = rds::route_configs(ctx, &productpage(ctx, "REDIRECT"));
        let names: Vec<String> = config(&configs, "9080").virtual_hosts.iter().map(|v| v.name.clone()).collect();
        names.into_iter().filter(|n| n == "allow_any" || n == "block_all").collect::<Vec<_>>()
    };
    let allowed_sidecar = "apiVersion: networking.istio.io/v1\nkind: Sidecar\n\
                           metadata: {name: default, namespace: default}\n\
                           spec: {outboundTrafficPolicy: {mode: ALLOW_ANY}}\n";

    let registry_only = served(mesh(), "outboundTrafficPolicy: {mode: REGISTRY_ONLY}\n");
    assert_eq!(catch_all(&registry_only, &productpage(&registry_only, "REDIRECT")), ["BlackHoleCluster"]);
    assert_eq!(fallback_host(&registry_only), ["block_all"]);
    let empty = served(mesh(), "outboundTrafficPolicy: {}\n");
    assert_eq!(catch_all(&empty, &productpage(&empty, "REDIRECT")), ["BlackHoleCluster"], "{{}} is enum value 0");
    let sidecar_says = served(mesh_with(allowed_sidecar), "outboundTrafficPolicy: {mode: REGISTRY_ONLY}\n");
    assert_eq!(catch_all(&sidecar_says, &productpage(&sidecar_says, "REDIRECT")), ["PassthroughCluster"]);

    let default = served(mesh(), "");
    assert_eq!(catch_all(&default, &productpage(&default, "REDIRECT")), ["PassthroughCluster"], "Istio's default");
    assert_eq!(fallback_host(&default), ["allow_any"]);
}

/// `billing` (namespace `other`) with a VirtualService and a
/// DestinationRule there that name no `exportTo`, and a ServiceEntry there
/// that names `*`.
const OTHER_NAMESPACE: &str = "\
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: billing, namespace: other}
spec:
  hosts: [billing]
  http: [{name: from-other, route: [{destination: {host: billing}}]}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: billing, namespace: other}
spec:
  host: billing
  trafficPolicy: {connectionPool: {tcp: {connectTimeout: 7s}}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ledger, namespace: other}
spec:
  hosts: [ledger.example.com]
  exportTo: ['*']
  resolution: STATIC
  ports: [{number: 8080, name: http, protocol: HTTP}]
  endpoints: [{address: 10.3.0.1}]
";

const BILLING: &str = "billing.other.svc.cluster.local";

#[test]
fn default_export_to_is_what_objects_that_name_none_are_exported_to() {
    let billing_cluster = format!("outbound|9080||{BILLING}");
    let seen = |text: &str| {
        let ctx = served(mesh_with(OTHER_NAMESPACE), text);
        let scope = productpage(&ctx, "REDIRECT");
        let clusters = cds::clusters(&ctx, &scope);
        let names: Vec<String> = clusters.iter().map(|c| c.name.clone()).collect();
        let timeout = clusters.iter().find(|c| c.name == billing_cluster).and_then(|c| c.connect_timeout);
        let configs = rds::route_configs(&ctx, &scope);
        let routes: Vec<String> = configs
            .iter()
            .flat_map(|c| &c.virtual_hosts)
            .filter(|v| v.name == format!("{BILLING}:9080"))
            .flat_map(|v| v.routes.iter().map(|r| r.name.clone()))
            .collect();
        (names, timeout, routes)
    };

    let (names, timeout, routes) = seen("");
    assert!(names.contains(&billing_cluster), "Istio's default: every service everywhere");
    assert_eq!((timeout, routes), (seconds(7), vec!["from-other".to_string()]), "every rule too");

    let (names, ..) = seen("defaultServiceExportTo: [.]\n");
    assert!(!names.contains(&billing_cluster), "a service of another namespace is private to it");
    assert!(names.contains(&"outbound|8080||ledger.example.com".to_string()), "unless it names its own exportTo");
    assert!(names.contains(&format!("outbound|9080||{REVIEWS}")), "the proxy's own namespace's");
    let (names, ..) = seen("defaultServiceExportTo: [default]\n");
    assert!(names.contains(&billing_cluster), "exported to the proxy's namespace by name");

    let (_, _, routes) = seen("defaultVirtualServiceExportTo: [.]\n");
    assert!(!routes.contains(&"from-other".to_string()), "another namespace's VirtualService: {routes:?}");
    let (_, timeout, _) = seen("defaultDestinationRuleExportTo: [.]\n");
    assert_eq!(timeout, seconds(10), "another namespace's DestinationRule is private to it");
    let (_, timeout, _) = seen("defaultDestinationRuleExportTo: [istio-system]\n");
    assert_eq!(timeout, seconds(7), "for a DestinationRule only `.` counts: public otherwise, as in Istio");
}
