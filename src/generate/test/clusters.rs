//! CDS: outbound, subset, inbound and special clusters, and the policies
//! DestinationRules put on them.

use super::*;

#[test]
fn sidecar_gets_outbound_subset_inbound_and_special_clusters() {
    let ctx = context(mesh());
    let scope = productpage(&ctx, "REDIRECT");
    let mut clusters = cds::clusters(&ctx, &scope);
    let inbound = cds::inbound_clusters(&productpage_inbound(&ctx, "REDIRECT"));
    assert_eq!(
        inbound.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
        ["InboundPassthroughCluster", "inbound|9080||"]
    );
    // Undeclared ports' connections reach the application from 127.0.0.6, which capture lets through.
    let source = inbound[0].upstream_bind_config.as_ref().and_then(|b| b.source_address.as_ref()).unwrap();
    assert_eq!(source.address, "127.0.0.6");
    let none = cds::inbound_clusters(&productpage_inbound(&ctx, "NONE"));
    assert!(none.iter().all(|c| c.name != "InboundPassthroughCluster"), "no capture, no virtualInbound");
    clusters.extend(inbound);
    clusters.sort_by(|a, b| a.name.cmp(&b.name));

    let names: Vec<&str> = clusters.iter().map(|c| c.name.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(names, sorted, "clusters are sorted by name, each once");

    for name in [
        format!("outbound|9080||{CATALOG}"),
        format!("outbound|9080|v1|{CATALOG}"),
        format!("outbound|9080|v2|{CATALOG}"),
        format!("outbound|9080|v3|{CATALOG}"),
        format!("outbound|9080||{INVENTORY}"),
        format!("outbound|27017||{MONGODB}"),
        "outbound|9080||billing.other.svc.cluster.local".to_string(),
        "inbound|9080||".to_string(),
        "BlackHoleCluster".to_string(),
        "PassthroughCluster".to_string(),
    ] {
        assert!(names.contains(&name.as_str()), "missing {name}");
    }

    let reviews = cluster(&clusters, &format!("outbound|9080|v2|{CATALOG}"));
    assert_eq!(discovery_type(reviews), DiscoveryType::Eds);
    let eds = reviews.eds_cluster_config.as_ref().unwrap();
    assert_eq!(eds.service_name, reviews.name, "the EDS resource is named after the cluster");
    assert!(eds.eds_config.as_ref().unwrap().config_source_specifier.is_some(), "EDS comes over ADS");

    // To the original destination, under the mesh's default inbound mode
    // (LOCALHOST: `mesh_traffic`).
    let inbound = cluster(&clusters, "inbound|9080||");
    assert_eq!(discovery_type(inbound), DiscoveryType::OriginalDst);
    assert!(inbound.load_assignment.is_none());

    let blackhole = cluster(&clusters, "BlackHoleCluster");
    assert_eq!(discovery_type(blackhole), DiscoveryType::Static);
    assert!(blackhole.load_assignment.is_none());
    let passthrough = cluster(&clusters, "PassthroughCluster");
    assert_eq!(discovery_type(passthrough), DiscoveryType::OriginalDst);
    assert_eq!(passthrough.lb_policy, LbPolicy::ClusterProvided as i32);
}

#[test]
fn proxies_of_one_scope_and_workload_shape_share_one_merged_cluster_set() {
    use crate::generate::cache::ScopedCache;
    use crate::push::PushChanges;
    use crate::resource::{TypeSet, TypeUrl};

    let ctx = context(mesh());
    let cache = ScopedCache::new();
    let everything = PushChanges { full: true, types: TypeSet::ALL, ..Default::default() };
    cache.invalidate(&ctx, &everything);
    let scope = productpage(&ctx, "REDIRECT");
    let shape = ctx.inbound_for(&proxy(
        "sidecar~10.0.0.1~productpage-v1.default~default.svc.cluster.local",
        "REDIRECT",
        &[("app", "productpage"), ("version", "v1")],
    ));

    let set = cache.proxy_set(&ctx, &scope, &shape, TypeUrl::Cluster);
    let names: Vec<&str> = set.resources.iter().map(|r| &*r.name).collect();
    let mut expected: Vec<String> = cds::clusters(&ctx, &scope).into_iter().map(|c| c.name).collect();
    expected.extend(cds::inbound_clusters(&shape.1).into_iter().map(|c| c.name));
    expected.sort();
    assert_eq!(names, expected, "the scope's clusters and the workload's inbound ones, in name order");

    let again = cache.proxy_set(&ctx, &scope, &shape, TypeUrl::Cluster);
    assert!(Arc::ptr_eq(&set, &again), "a second proxy of the same scope and shape gets the same set");

    cache.invalidate(&ctx, &everything);
    let rebuilt = cache.proxy_set(&ctx, &scope, &shape, TypeUrl::Cluster);
    assert!(!Arc::ptr_eq(&set, &rebuilt), "a change to the scope's clusters drops the merged set");
    assert_eq!(rebuilt.version, set.version, "rebuilt from the same snapshot, it is the same content");
}

#[test]
fn destination_rule_policy_shapes_clusters_and_subsets_override_it() {
    let ctx = context(mesh());
    let scope = productpage(&ctx, "REDIRECT");
    let clusters = cds::clusters(&ctx, &scope);

    let v1 = cluster(&clusters, &format!("outbound|9080|v1|{CATALOG}"));
    assert_eq!(v1.connect_timeout.unwrap().seconds, 2, "tcp.connectTimeout");
    let t = &v1.circuit_breakers.as_ref().unwrap().thresholds[0];
    assert_eq!(t.max_connections.unwrap().value, 100);
    assert_eq!(t.max_pending_requests.unwrap().value, 10);
    assert_eq!(t.max_retries.unwrap().value, 4);
    assert_eq!(t.max_requests.unwrap().value, u32::MAX, "unset limits stay open, as in Istio");
    let opts = protocol_options(v1).expect("maxRequestsPerConnection needs protocol options");
    assert_eq!(opts.common_http_protocol_options.unwrap().max_requests_per_connection.unwrap().value, 5);
    let Some(UpstreamProtocolOptions::ExplicitHttpConfig(explicit)) = opts.upstream_protocol_options else {
        panic!("explicit HTTP config expected")
    };
    assert!(matches!(explicit.protocol_config, Some(ProtocolConfig::HttpProtocolOptions(_))));
    let od = v1.outlier_detection.as_ref().unwrap();
    assert_eq!(od.consecutive_5xx.unwrap().value, 7);
    assert_eq!(od.enforcing_consecutive_5xx.unwrap().value, 100);
    assert_eq!(od.interval.unwrap().seconds, 30);
    assert_eq!(od.base_ejection_time.unwrap().seconds, 60);
    assert_eq!(od.max_ejection_percent.unwrap().value, 50);
    assert_eq!(v1.lb_policy, LbPolicy::LeastRequest as i32, "Istio's default load balancer");
    assert_eq!(
        v1.common_lb_config.as_ref().unwrap().healthy_panic_threshold.as_ref().unwrap().value,
        0.0,
        "with outlier detection, Istio turns the panic threshold off unless minHealthPercent is set"
    );

    let v2 = cluster(&clusters, &format!("outbound|9080|v2|{CATALOG}"));
    assert_eq!(v2.lb_policy, LbPolicy::LeastRequest as i32);
    assert_eq!(v2.connect_timeout.unwrap().seconds, 2, "the subset keeps the rule's connection pool");

    let v3 = cluster(&clusters, &format!("outbound|9080|v3|{CATALOG}"));
    assert_eq!(v3.lb_policy, LbPolicy::RingHash as i32);
    let Some(LbConfig::RingHashLbConfig(ring)) = &v3.lb_config else { panic!("ring hash config expected") };
    assert_eq!(ring.minimum_ring_size.unwrap().value, 2048);

    let ratings = cluster(&clusters, &format!("outbound|9080||{INVENTORY}"));
    assert_eq!(ratings.connect_timeout.unwrap().seconds, 10, "Istio's default connect timeout");
    assert!(ratings.outlier_detection.is_none());
    assert!(protocol_options(ratings).is_none(), "plain HTTP/1.1 needs no protocol options");
    assert_eq!(ratings.circuit_breakers.as_ref().unwrap().thresholds[0].max_connections.unwrap().value, u32::MAX);
}

#[test]
fn grpc_ports_get_http2_upstreams_and_tcp_ports_none() {
    let ctx = context(mesh());
    let clusters = cds::clusters(&ctx, &productpage(&ctx, "REDIRECT"));
    let grpc = cluster(&clusters, "outbound|7070||grpc-echo.default.svc.cluster.local");
    let Some(UpstreamProtocolOptions::ExplicitHttpConfig(explicit)) =
        protocol_options(grpc).unwrap().upstream_protocol_options
    else {
        panic!("explicit HTTP config expected")
    };
    assert!(matches!(explicit.protocol_config, Some(ProtocolConfig::Http2ProtocolOptions(_))));
    assert!(protocol_options(cluster(&clusters, &format!("outbound|27017||{MONGODB}"))).is_none());
}

#[test]
fn service_entry_resolution_picks_the_cluster_type() {
    let ctx = context(mesh());
    let clusters = cds::clusters(&ctx, &productpage(&ctx, "REDIRECT"));

    let dns = cluster(&clusters, "outbound|443||api.example.com");
    assert_eq!(discovery_type(dns), DiscoveryType::StrictDns);
    let cla = dns.load_assignment.as_ref().expect("DNS clusters carry their endpoints inline");
    let Some(HostIdentifier::Endpoint(ep)) = &cla.endpoints[0].lb_endpoints[0].host_identifier else { panic!() };
    let Some(address::Address::SocketAddress(sa)) = ep.address.as_ref().unwrap().address.as_ref() else { panic!() };
    assert_eq!(sa.address, "api.example.com");
    let round_robin = cluster(&clusters, "outbound|80||rr.example.com");
    assert_eq!(discovery_type(round_robin), DiscoveryType::LogicalDns, "DNS_ROUND_ROBIN");

    let passthrough = cluster(&clusters, "outbound|8080||passthrough.example.com");
    assert_eq!(discovery_type(passthrough), DiscoveryType::OriginalDst);
    assert_eq!(passthrough.lb_policy, LbPolicy::ClusterProvided as i32);
    assert!(passthrough.eds_cluster_config.is_none() && passthrough.load_assignment.is_none());

    assert_eq!(discovery_type(cluster(&clusters, "outbound|8443|v1|payments.corp.internal")), DiscoveryType::Eds);
}

/// A router is sent what it routes to, never inbound clusters of its own,
/// even when a Service selects its pod (as one does in front of an ingress
/// gateway); a sidecar selected the same way gets them.
#[test]
fn router_gets_outbound_clusters_but_no_inbound_ones() {
    let ctx = context(mesh_with(
        "apiVersion: v1\nkind: Service\nmetadata: {name: ingress, namespace: default}\nspec:\n  selector: {app: ingress}\n  ports: [{name: http, port: 8080}]\n",
    ));
    let labels = [("app", "ingress"), ("istio", "ingressgateway")];
    let router = proxy("router~10.0.0.100~ingress.default~default.svc.cluster.local", "REDIRECT", &labels);
    let sidecar = proxy("sidecar~10.0.0.101~ingress.default~default.svc.cluster.local", "REDIRECT", &labels);
    let cache = crate::generate::cache::ScopedCache::new();
    let sent = |p: &Proxy| -> Vec<String> {
        let set = cache.proxy_set(&ctx, &ctx.scope_for(p), &ctx.inbound_for(p), crate::resource::TypeUrl::Cluster);
        set.resources.iter().map(|r| r.name.to_string()).collect()
    };
    let to_router = sent(&router);
    assert!(to_router.contains(&format!("outbound|9080||{PRODUCTPAGE}")), "{to_router:?}");
    assert!(to_router.iter().all(|c| !c.starts_with("inbound|")), "{to_router:?}");
    assert!(
        sent(&sidecar).contains(&"inbound|8080||".to_string()),
        "the same selection gives a sidecar its inbound cluster"
    );
}
