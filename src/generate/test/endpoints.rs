//! EDS: the ClusterLoadAssignment of a cluster, by name: subsets, localities, weights.

use super::*;

fn addresses(cla: &envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment) -> Vec<(String, u32)> {
    cla.endpoints.iter().flat_map(|g| &g.lb_endpoints).map(socket_of).collect()
}

#[test]
fn eds_filters_subset_endpoints_by_labels() {
    let ctx = context(mesh());
    let all = eds::load_assignment(&ctx, &format!("outbound|9080||{CATALOG}"), None).unwrap();
    assert_eq!(
        addresses(&all),
        vec![("10.0.0.11".into(), 9080), ("10.0.0.12".into(), 9080), ("10.0.0.13".into(), 9080)]
    );
    let v2 = eds::load_assignment(&ctx, &format!("outbound|9080|v2|{CATALOG}"), None).unwrap();
    assert_eq!(v2.cluster_name, format!("outbound|9080|v2|{CATALOG}"));
    assert_eq!(addresses(&v2), vec![("10.0.0.12".into(), 9080)]);
    let lbe = &v2.endpoints[0].lb_endpoints[0];
    assert_eq!(lbe.health_status, HealthStatus::Healthy as i32);
    assert_eq!(lbe.load_balancing_weight.unwrap().value, 1);
}

#[test]
fn eds_groups_endpoints_by_locality_with_summed_weights() {
    let ctx = context(mesh());
    let cla = eds::load_assignment(&ctx, "outbound|8443||payments.corp.internal", None).unwrap();
    let localities: Vec<(String, String, String)> = cla
        .endpoints
        .iter()
        .map(|g| {
            let l = g.locality.clone().unwrap();
            (l.region, l.zone, l.sub_zone)
        })
        .collect();
    assert_eq!(
        localities,
        vec![("eu-west".into(), "zone-b".into(), "rack-1".into()), ("us-east".into(), "zone-a".into(), String::new())]
    );
    let us = &cla.endpoints[1];
    assert_eq!(us.load_balancing_weight.unwrap().value, 3, "2 + 1");
    assert_eq!(
        addresses(&cla),
        vec![("10.1.0.3".into(), 8443), ("10.1.0.1".into(), 8443), ("10.1.0.2".into(), 8443)],
        "endpoints sorted by address within a locality"
    );
    assert_eq!(us.lb_endpoints[1].load_balancing_weight.unwrap().value, 2);

    let v1 = eds::load_assignment(&ctx, "outbound|8443|v1|payments.corp.internal", None).unwrap();
    assert_eq!(addresses(&v1), vec![("10.1.0.3".into(), 8443), ("10.1.0.2".into(), 8443)]);
}

#[test]
fn eds_answers_empty_for_known_clusters_and_nothing_for_unknown_ones() {
    let ctx = context(mesh());
    let undefined_subset = eds::load_assignment(&ctx, &format!("outbound|9080|v9|{CATALOG}"), None).unwrap();
    assert!(undefined_subset.endpoints.is_empty());
    let no_pods = eds::load_assignment(&ctx, "outbound|7070||grpc-echo.default.svc.cluster.local", None).unwrap();
    assert!(no_pods.endpoints.is_empty(), "a known cluster without endpoints still gets an answer");
    assert!(eds::load_assignment(&ctx, &format!("outbound|1234||{CATALOG}"), None).is_none(), "unknown port");
    assert!(eds::load_assignment(&ctx, "outbound|9080||nope.default.svc.cluster.local", None).is_none());
    assert!(eds::load_assignment(&ctx, "BlackHoleCluster", None).is_none());
    assert_eq!(eds::host_of(&format!("outbound|9080|v1|{CATALOG}")), Some(CATALOG));
    assert_eq!(eds::host_of("inbound|9080||"), None);
}

/// An endpoint view for a proxy at `locality` with `labels`, as a stream computes it.
fn view_at(ctx: &PushContext, locality: &str, labels: &[(&str, &str)]) -> Arc<crate::push::scope::EndpointView> {
    let mut proxy = proxy("sidecar~10.9.9.9~client.default~default.svc.cluster.local", "REDIRECT", labels);
    proxy.locality = crate::model::Locality::parse(locality);
    crate::push::scope::endpoint_view(ctx, &proxy).expect("a locality-aware mesh gives every proxy a view")
}

fn addresses_of(group: &envoy_types::pb::envoy::config::endpoint::v3::LocalityLbEndpoints) -> Vec<(String, u32)> {
    addresses(&envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment {
        endpoints: vec![group.clone()],
        ..Default::default()
    })
}

fn priorities(cla: &envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment) -> Vec<(String, u32)> {
    cla.endpoints.iter().map(|g| (g.locality.clone().unwrap_or_default().region, g.priority)).collect()
}

#[test]
fn outlier_detection_turns_on_locality_failover_as_in_istio() {
    let rule = "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: payments, namespace: default}\n\
                spec:\n  host: payments.corp.internal\n  trafficPolicy: {outlierDetection: {consecutive5xxErrors: 1}}\n";
    let ctx = context(mesh_with(rule));
    let cluster = "outbound|8443||payments.corp.internal";
    assert!(eds::depends_on_view(&ctx, cluster));
    assert!(!eds::depends_on_view(&ctx, &format!("outbound|9080||{INVENTORY}")), "no outlier detection: shared");
    let near_us = eds::load_assignment(&ctx, cluster, Some(&view_at(&ctx, "us-east/zone-a/rack-9", &[]))).unwrap();
    assert_eq!(priorities(&near_us), vec![("eu-west".into(), 1), ("us-east".into(), 0)], "the caller's zone first");
    let near_eu = eds::load_assignment(&ctx, cluster, Some(&view_at(&ctx, "eu-west/zone-b/rack-1", &[]))).unwrap();
    assert_eq!(priorities(&near_eu), vec![("eu-west".into(), 0), ("us-east".into(), 1)]);
    // Without a view (no locality-aware rule would give none) every locality is at priority 0.
    let shared = eds::load_assignment(&ctx, cluster, None).unwrap();
    assert_eq!(priorities(&shared), vec![("eu-west".into(), 0), ("us-east".into(), 0)]);
    let clusters = cds::clusters(&ctx, &productpage(&ctx, "REDIRECT"));
    assert!(
        super::cluster(&clusters, cluster).common_lb_config.as_ref().unwrap().locality_config_specifier.is_none(),
        "the mesh default needs no locality weights"
    );
}

#[test]
fn a_proxy_is_where_its_pod_is_before_what_its_envoy_says() {
    // As Istio: the registry's locality (the Pod's Node) first, the
    // bootstrap's node.locality only when the registry has none.
    let rule = "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: payments, namespace: default}\n\
                spec:\n  host: payments.corp.internal\n  trafficPolicy: {outlierDetection: {consecutive5xxErrors: 1}}\n---\n\
                apiVersion: v1\nkind: Node\nmetadata: {name: worker-eu, labels: {topology.kubernetes.io/region: eu-west, \
                topology.kubernetes.io/zone: zone-b}}\n---\n\
                apiVersion: v1\nkind: Pod\nmetadata: {name: client, namespace: default, labels: {app: client}}\n\
                spec: {nodeName: worker-eu}\nstatus: {podIP: 10.9.9.9}\n";
    let ctx = context(mesh_with(rule));
    let view = view_at(&ctx, "us-east/zone-a/rack-9", &[]);
    assert_eq!(view.locality, crate::model::Locality::parse("eu-west/zone-b"), "the Pod's Node, not node.locality");
    let cla = eds::load_assignment(&ctx, "outbound|8443||payments.corp.internal", Some(&view)).unwrap();
    assert_eq!(priorities(&cla), vec![("eu-west".into(), 0), ("us-east".into(), 1)]);
    // A proxy whose Pod is not known keeps its Envoy's locality.
    let mut stranger = proxy("sidecar~10.9.9.8~stranger.default~default.svc.cluster.local", "REDIRECT", &[]);
    stranger.locality = crate::model::Locality::parse("us-east/zone-a");
    let view = crate::push::scope::endpoint_view(&ctx, &stranger).unwrap();
    assert_eq!(view.locality, crate::model::Locality::parse("us-east/zone-a"));
}

#[test]
fn distribute_reweighs_localities_and_failover_priority_ranks_by_labels() {
    let rule = concat!(
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: payments, namespace: default}\n",
        "spec:\n  host: payments.corp.internal\n  trafficPolicy:\n    loadBalancer:\n      localityLbSetting:\n",
        "        distribute: [{from: us-east/*, to: {\"us-east/*\": 80, \"eu-west/*\": 20}}]\n",
    );
    let ctx = context(mesh_with(rule));
    let cluster = "outbound|8443||payments.corp.internal";
    let cla = eds::load_assignment(&ctx, cluster, Some(&view_at(&ctx, "us-east/zone-a", &[]))).unwrap();
    let weights: Vec<(String, u32)> = cla
        .endpoints
        .iter()
        .map(|g| (g.locality.clone().unwrap().region, g.load_balancing_weight.unwrap().value))
        .collect();
    assert_eq!(weights, vec![("eu-west".into(), 20), ("us-east".into(), 80)]);
    let clusters = cds::clusters(&ctx, &productpage(&ctx, "REDIRECT"));
    assert!(super::cluster(&clusters, cluster).common_lb_config.as_ref().unwrap().locality_config_specifier.is_some());
    // A proxy no `from` matches keeps the plain weights.
    let other = eds::load_assignment(&ctx, cluster, Some(&view_at(&ctx, "ap-south/zone-x", &[]))).unwrap();
    assert_eq!(other.endpoints[1].load_balancing_weight.unwrap().value, 3);

    let rule = concat!(
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: payments, namespace: default}\n",
        "spec:\n  host: payments.corp.internal\n  trafficPolicy:\n    outlierDetection: {consecutive5xxErrors: 1}\n",
        "    loadBalancer: {localityLbSetting: {failoverPriority: [version]}}\n",
    );
    let ctx = context(mesh_with(rule));
    let v2 = eds::load_assignment(&ctx, cluster, Some(&view_at(&ctx, "", &[("version", "v2")]))).unwrap();
    let ranked: Vec<(u32, Vec<(String, u32)>)> = v2.endpoints.iter().map(|g| (g.priority, addresses_of(g))).collect();
    assert_eq!(
        ranked,
        vec![
            (1, vec![("10.1.0.3".into(), 8443)]),
            (0, vec![("10.1.0.1".into(), 8443)]),
            (1, vec![("10.1.0.2".into(), 8443)]),
        ],
        "endpoints with the caller's version first"
    );
}

#[test]
fn the_mesh_locality_setting_applies_where_no_rule_sets_one() {
    let mesh_config = |text: &str| {
        let mesh = crate::config::mesh::MeshSettings::parse("mesh", text).unwrap().mesh_config();
        let store = ConfigStore::new();
        store.apply(mesh_with(
            "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: payments, namespace: default}\n\
             spec:\n  host: payments.corp.internal\n  trafficPolicy: {outlierDetection: {consecutive5xxErrors: 1}}\n",
        ));
        PushContext::build_with(store.snapshot(), 1, Arc::new(ScopeInterner::default()), Arc::new(mesh))
    };
    let cluster = "outbound|8443||payments.corp.internal";
    // distribute reweighs every destination's localities, with or without outlier detection.
    let ctx = mesh_config(
        "localityLbSetting:\n  distribute: [{from: us-east/*, to: {\"us-east/*\": 90, \"eu-west/*\": 10}}]\n",
    );
    let cla = eds::load_assignment(&ctx, cluster, Some(&view_at(&ctx, "us-east/zone-a", &[]))).unwrap();
    let weights: Vec<u32> = cla.endpoints.iter().map(|g| g.load_balancing_weight.unwrap().value).collect();
    assert_eq!(weights, [10, 90]);
    let clusters = cds::clusters(&ctx, &productpage(&ctx, "REDIRECT"));
    assert!(super::cluster(&clusters, cluster).common_lb_config.as_ref().unwrap().locality_config_specifier.is_some());
    // enabled: false turns off the failover outlier detection would give.
    let ctx = mesh_config("localityLbSetting: {enabled: false}\n");
    let cla = eds::load_assignment(&ctx, cluster, Some(&view_at(&ctx, "us-east/zone-a", &[]))).unwrap();
    assert_eq!(priorities(&cla), vec![("eu-west".into(), 0), ("us-east".into(), 0)], "no locality priorities");
    // A bad setting refuses the mesh config, as Istio's validation does.
    let err = crate::config::mesh::MeshSettings::parse("mesh", "localityLbSetting: {failover: [{from: a, to: a}]}")
        .unwrap_err();
    assert!(err.starts_with("mesh: localityLbSetting.failover[0]: "), "{err}");
}

#[test]
fn a_unix_socket_endpoint_is_a_pipe_address() {
    let ctx = context(mesh());
    let cla = eds::load_assignment(&ctx, "outbound|80||socket.local.example", None).unwrap();
    let Some(HostIdentifier::Endpoint(ep)) = &cla.endpoints[0].lb_endpoints[0].host_identifier else { panic!() };
    let Some(address::Address::Pipe(pipe)) = ep.address.as_ref().unwrap().address.as_ref() else {
        panic!("a pipe address: {ep:?}")
    };
    assert_eq!(pipe.path, "/var/run/example/socket");
}
