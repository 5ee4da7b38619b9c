//! EDS: the ClusterLoadAssignment of a cluster, by name: subsets, localities, weights.

use super::*;

fn addresses(cla: &envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment) -> Vec<(String, u32)> {
    cla.endpoints
        .iter()
        .flat_map(|g| &g.lb_endpoints)
        .map(|e| {
            let Some(HostIdentifier::Endpoint(ep)) = &e.host_identifier else { panic!() };
            let Some(address::Address::SocketAddress(sa)) = ep.address.as_ref().unwrap().address.as_ref() else {
                panic!()
            };
            let Some(PortSpecifier::PortValue(p)) = sa.port_specifier else { panic!() };
            (sa.address.clone(), p)
        })
        .collect()
}

#[test]
fn eds_filters_subset_endpoints_by_labels() {
    let ctx = context(mesh());
    let all = eds::load_assignment(&ctx, &format!("outbound|9080||{CATALOG}")).unwrap();
    assert_eq!(
        addresses(&all),
        vec![("10.0.0.11".into(), 9080), ("10.0.0.12".into(), 9080), ("10.0.0.13".into(), 9080)]
    );
    let v2 = eds::load_assignment(&ctx, &format!("outbound|9080|v2|{CATALOG}")).unwrap();
    assert_eq!(v2.cluster_name, format!("outbound|9080|v2|{CATALOG}"));
    assert_eq!(addresses(&v2), vec![("10.0.0.12".into(), 9080)]);
    let lbe = &v2.endpoints[0].lb_endpoints[0];
    assert_eq!(lbe.health_status, HealthStatus::Healthy as i32);
    assert_eq!(lbe.load_balancing_weight.unwrap().value, 1);
}

#[test]
fn eds_groups_endpoints_by_locality_with_summed_weights() {
    let ctx = context(mesh());
    let cla = eds::load_assignment(&ctx, "outbound|8443||payments.corp.internal").unwrap();
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

    let v1 = eds::load_assignment(&ctx, "outbound|8443|v1|payments.corp.internal").unwrap();
    assert_eq!(addresses(&v1), vec![("10.1.0.3".into(), 8443), ("10.1.0.2".into(), 8443)]);
}

#[test]
fn eds_answers_empty_for_known_clusters_and_nothing_for_unknown_ones() {
    let ctx = context(mesh());
    let undefined_subset = eds::load_assignment(&ctx, &format!("outbound|9080|v9|{CATALOG}")).unwrap();
    assert!(undefined_subset.endpoints.is_empty());
    let no_pods = eds::load_assignment(&ctx, "outbound|7070||grpc-echo.default.svc.cluster.local").unwrap();
    assert!(no_pods.endpoints.is_empty(), "a known cluster without endpoints still gets an answer");
    assert!(eds::load_assignment(&ctx, &format!("outbound|1234||{CATALOG}")).is_none(), "unknown port");
    assert!(eds::load_assignment(&ctx, "outbound|9080||nope.default.svc.cluster.local").is_none());
    assert!(eds::load_assignment(&ctx, "BlackHoleCluster").is_none());
    assert_eq!(eds::host_of(&format!("outbound|9080|v1|{CATALOG}")), Some(CATALOG));
    assert_eq!(eds::host_of("inbound|9080||"), None);
}
