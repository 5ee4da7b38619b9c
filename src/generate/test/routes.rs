//! RDS: route configurations and virtual hosts from VirtualServices, and
//! what a Sidecar hides.

use super::*;

#[test]
fn virtual_service_routes_keep_order_matches_and_actions() {
    let ctx = context(mesh());
    let scope = productpage(&ctx, "REDIRECT");
    let configs = rds::route_configs(&ctx, &scope);
    let rc = config(&configs, "9080");
    let routes = &vhost(rc, &format!("{CATALOG}:9080")).routes;
    let names: Vec<&str> = routes.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["jason", "canary", "moved", "api", "api", "rest"], "port-9999 match is left out");

    // Header match → subset v2.
    let m = routes[0].r#match.as_ref().unwrap();
    assert_eq!(m.headers[0].name, "end-user");
    let Some(HeaderMatchSpecifier::StringMatch(sm)) = &m.headers[0].header_match_specifier else { panic!() };
    assert_eq!(sm.match_pattern, Some(MatchPattern::Exact("jason".into())));
    assert_eq!(single_cluster(&routes[0]), format!("outbound|9080|v2|{CATALOG}"));

    // Redirect.
    let Some(Action::Redirect(redirect)) = &routes[2].action else { panic!("redirect expected") };
    assert_eq!(redirect.host_redirect, "new.example.com");
    assert_eq!(redirect.path_rewrite_specifier, Some(PathRewriteSpecifier::PathRedirect("/new".into())));
    assert_eq!(redirect.response_code, RedirectResponseCode::Found as i32);

    // Weighted destinations, rewrite, timeout, retries.
    let api = route_action(&routes[3]);
    let Some(ClusterSpecifier::WeightedClusters(w)) = &api.cluster_specifier else { panic!("weighted expected") };
    let weights: Vec<(&str, u32)> = w.clusters.iter().map(|c| (c.name.as_str(), c.weight.unwrap().value)).collect();
    let (v1, v3) = (format!("outbound|9080|v1|{CATALOG}"), format!("outbound|9080|v3|{CATALOG}"));
    assert_eq!(weights, [(v1.as_str(), 80), (v3.as_str(), 20)], "a destination without a weight gets 0 and is dropped");
    assert_eq!(api.prefix_rewrite, "/v2/api");
    assert_eq!(api.host_rewrite_specifier, Some(HostRewriteSpecifier::HostRewriteLiteral("catalog.internal".into())));
    assert_eq!(api.timeout.unwrap().seconds, 3);
    let retry = api.retry_policy.as_ref().unwrap();
    assert_eq!(retry.num_retries.unwrap().value, 5);
    assert_eq!(retry.retry_on, "5xx,retriable-status-codes");
    assert_eq!(retry.retriable_status_codes, [503]);
    assert_eq!(retry.per_try_timeout.unwrap().seconds, 1);

    // The regex match of the same route: Envoy's prefix rewrite replaces
    // the whole path of a regex match, and Istio relies on it.
    let regex_route = route_action(&routes[4]);
    assert!(matches!(routes[4].r#match.as_ref().unwrap().path_specifier, Some(PathSpecifier::SafeRegex(_))));
    assert_eq!(regex_route.prefix_rewrite, "/v2/api");
    assert!(regex_route.regex_rewrite.is_none());

    // No retries field: Istio's default policy; no timeout: disabled.
    let rest = route_action(&routes[5]);
    assert_eq!(rest.retry_policy.as_ref().unwrap().num_retries.unwrap().value, 2);
    assert_eq!(
        rest.retry_policy.as_ref().unwrap().retry_on,
        "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes"
    );
    assert_eq!(rest.timeout.unwrap().seconds, 0);
}

#[test]
fn consistent_hash_of_the_destination_rule_goes_on_routes() {
    let ctx = context(mesh());
    let configs = rds::route_configs(&ctx, &productpage(&ctx, "REDIRECT"));
    let routes = &vhost(config(&configs, "9080"), &format!("{CATALOG}:9080")).routes;
    let canary = route_action(&routes[1]);
    let Some(PolicySpecifier::Header(h)) = &canary.hash_policy[0].policy_specifier else { panic!("header hash") };
    assert_eq!(h.header_name, "x-user");
    assert!(route_action(&routes[0]).hash_policy.is_empty(), "v2 does not hash");
    assert_eq!(route_action(&routes[3]).hash_policy.len(), 1, "the weighted route hashes as its v3 destination");
}

#[test]
fn hosts_without_virtual_service_get_a_default_route() {
    let ctx = context(mesh());
    let configs = rds::route_configs(&ctx, &productpage(&ctx, "REDIRECT"));
    let routes = &vhost(config(&configs, "9080"), &format!("{INVENTORY}:9080")).routes;
    assert_eq!(routes.len(), 1);
    assert_eq!(routes[0].r#match.as_ref().unwrap().path_specifier, Some(PathSpecifier::Prefix("/".into())));
    assert_eq!(single_cluster(&routes[0]), format!("outbound|9080||{INVENTORY}"));
    let action = route_action(&routes[0]);
    assert_eq!(action.retry_policy.as_ref().unwrap().num_retries.unwrap().value, 2);
    assert_eq!(action.timeout.unwrap().seconds, 0);
}

#[test]
fn virtual_host_domains_follow_istio_without_duplicates() {
    let ctx = context(mesh());
    let configs = rds::route_configs(&ctx, &productpage(&ctx, "REDIRECT"));
    let rc = config(&configs, "9080");
    let domains = |name: &str| vhost(rc, name).domains.clone();

    // As Istio today: no `:port` variants (the route config ignores the
    // port in host matching), the absolute FQDN, Istio's order.
    assert!(rc.ignore_port_in_host_matching);
    let catalog = domains(&format!("{CATALOG}:9080"));
    assert_eq!(
        catalog,
        [CATALOG, &format!("{CATALOG}."), "catalog", "catalog.default.svc", "catalog.default", "10.96.0.2"]
    );
    let inventory = domains(&format!("{INVENTORY}:9080"));
    assert!(inventory.contains(&"10.96.0.3".to_string()), "the first host by name keeps a shared IP");
    let legacy = domains("zz-legacy-web.example.com:9080");
    assert_eq!(legacy, ["zz-legacy-web.example.com", "zz-legacy-web.example.com."]);
    let billing = domains("billing.other.svc.cluster.local:9080");
    assert_eq!(
        billing,
        [
            "billing.other.svc.cluster.local",
            "billing.other.svc.cluster.local.",
            "billing.other",
            "billing.other.svc",
            "10.96.1.1"
        ],
        "short names only for the proxy's own namespace"
    );

    let mut seen = HashSet::new();
    for d in rc.virtual_hosts.iter().flat_map(|v| &v.domains) {
        assert!(seen.insert(d), "domain {d} appears twice in route config 9080");
    }
    let last = rc.virtual_hosts.last().unwrap();
    assert_eq!((last.name.as_str(), last.domains.as_slice()), ("allow_any", ["*".to_string()].as_slice()));
    assert_eq!(single_cluster(&last.routes[0]), "PassthroughCluster");
    assert!(configs.iter().all(|c| c.name != "27017"), "TCP ports have no route config");
}

#[test]
fn sidecar_resource_hides_other_namespaces_and_blocks_unknown_hosts() {
    let ctx = context(mesh());
    let scope = scoped(&ctx);
    let clusters = cds::clusters(&ctx, &scope);
    assert!(clusters.iter().any(|c| c.name == "outbound|8000||local.scoped.svc.cluster.local"));
    assert!(!clusters.iter().any(|c| c.name.ends_with(REVIEWS)), "./* hides the default namespace");

    let configs = rds::route_configs(&ctx, &scope);
    assert_eq!(configs.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["8000"]);
    let last = configs[0].virtual_hosts.last().unwrap();
    assert_eq!(last.name, "block_all");
    let Some(Action::DirectResponse(direct)) = &last.routes[0].action else { panic!("direct response expected") };
    assert_eq!(direct.status, 502);

    let listeners = lds::listeners(&ctx, &scope);
    let outbound = listener(&listeners, "virtualOutbound");
    assert_eq!(tcp_clusters(&tcp(&outbound.filter_chains[0].filters[0])), ["BlackHoleCluster"]);
}

#[test]
fn a_delegate_s_routes_take_the_place_of_the_root_route() {
    let ctx = context(mesh());
    let scope = productpage(&ctx, "REDIRECT");
    let configs = rds::route_configs(&ctx, &scope);
    let routes = &vhost(config(&configs, "9097"), "storefront.default.svc.cluster.local:9097").routes;
    let names: Vec<&str> = routes.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["cart-v2", "cart", ""]);
    let billing = "outbound|9080||billing.other.svc.cluster.local";
    assert_eq!(single_cluster(&routes[0]), billing, "the delegate's short name resolves in its namespace");
    let m = routes[0].r#match.as_ref().unwrap();
    assert_eq!(m.path_specifier, Some(PathSpecifier::Prefix("/cart/v2".into())));
    assert_eq!(m.headers[0].name, "x-beta");
    assert_eq!(route_action(&routes[0]).timeout.unwrap().seconds, 4, "the root's timeout fills in");
    assert_eq!(routes[1].r#match.as_ref().unwrap().path_specifier, Some(PathSpecifier::Prefix("/cart".into())));
    assert_eq!(single_cluster(&routes[2]), "outbound|9097||storefront.default.svc.cluster.local");
}
