//! LDS: sidecar listeners by interception mode, and gateway listeners.

use super::*;

#[test]
fn none_mode_listeners_bind_localhost_and_skip_virtual_listeners() {
    let ctx = context(mesh());
    let scope = productpage(&ctx, "NONE");
    let listeners = lds::listeners(&ctx, &scope);
    let names: Vec<&str> = listeners.iter().map(|l| l.name.as_str()).collect();
    assert!(!names.contains(&"virtualOutbound") && !names.contains(&"virtualInbound"), "{names:?}");

    let http = listener(&listeners, "0.0.0.0_9080");
    assert_eq!(socket(http), ("127.0.0.1".into(), 9080));
    assert!(http.bind_to_port.is_none_or(|b| b.value), "NONE-mode listeners bind");
    let manager = hcm(&http.filter_chains[0].filters[0]);
    assert_eq!(rds_name(&manager), "9080");
    assert_eq!(manager.http_filters.last().unwrap().name, "envoy.filters.http.router");
    assert!(!manager.use_remote_address.unwrap().value);

    let mongo = listener(&listeners, "0.0.0.0_27017");
    assert_eq!(socket(mongo), ("127.0.0.1".into(), 27017));
    let proxy = tcp(&mongo.filter_chains[0].filters[0]);
    assert_eq!(
        tcp_clusters(&proxy),
        [format!("outbound|27017|v1|{MONGODB}"), format!("outbound|27017|v2|{MONGODB}")],
        "the VirtualService's TCP route splits the traffic"
    );
    let Some(TcpClusterSpecifier::WeightedClusters(w)) = &proxy.cluster_specifier else { panic!() };
    assert_eq!(w.clusters.iter().map(|c| c.weight).collect::<Vec<_>>(), [90, 10]);
}

#[test]
fn redirect_mode_has_virtual_listeners_and_unbound_port_listeners() {
    let ctx = context(mesh());
    let scope = productpage(&ctx, "REDIRECT");
    let mut listeners = lds::listeners(&ctx, &scope);
    assert!(listeners.iter().all(|l| l.name != "virtualInbound"), "inbound is per workload, not per scope");
    listeners.extend(lds::inbound_listeners(&productpage_inbound(&ctx, "REDIRECT")));

    let outbound = listener(&listeners, "virtualOutbound");
    assert_eq!(socket(outbound), ("0.0.0.0".into(), 15001));
    assert!(outbound.use_original_dst.unwrap().value);
    assert_eq!(tcp_clusters(&tcp(&outbound.filter_chains[0].filters[0])), ["PassthroughCluster"]);

    let inbound = listener(&listeners, "virtualInbound");
    assert_eq!(socket(inbound), ("0.0.0.0".into(), 15006));
    assert_eq!(inbound.listener_filters[0].name, "envoy.filters.listener.original_dst");
    let chain = inbound
        .filter_chains
        .iter()
        .find(|c| c.filter_chain_match.as_ref().and_then(|m| m.destination_port).is_some_and(|p| p.value == 9080))
        .expect("a chain for the workload's port");
    let manager = hcm(&chain.filters[0]);
    let Some(RouteSpecifier::RouteConfig(inline)) = &manager.route_specifier else { panic!("inline routes expected") };
    assert_eq!(inline.virtual_hosts[0].name, "inbound|http|9080");
    assert_eq!(inline.virtual_hosts[0].domains, ["*"]);
    assert_eq!(single_cluster(&inline.virtual_hosts[0].routes[0]), "inbound|9080||");
    let catch_all = inbound.filter_chains.last().unwrap();
    assert!(catch_all.filter_chain_match.is_none());
    assert_eq!(tcp_clusters(&tcp(&catch_all.filters[0])), ["InboundPassthroughCluster"]);

    let http = listener(&listeners, "0.0.0.0_9080");
    assert_eq!(socket(http), ("0.0.0.0".into(), 9080));
    assert!(!http.bind_to_port.unwrap().value);
    assert_eq!(rds_name(&hcm(&http.filter_chains.last().unwrap().filters[0])), "9080");

    let mongo = listener(&listeners, "0.0.0.0_27017");
    let by_ip = &mongo.filter_chains[0];
    let range = &by_ip.filter_chain_match.as_ref().unwrap().prefix_ranges[0];
    assert_eq!((range.address_prefix.as_str(), range.prefix_len.unwrap().value), ("10.96.0.5", 32));
    assert_eq!(
        mongo.filter_chains.len(),
        2,
        "the IP zz-legacy-db shares with mongodb stays with mongodb; then the default chain"
    );
    assert_eq!(tcp_clusters(&tcp(&by_ip.filters[0]))[0], format!("outbound|27017|v1|{MONGODB}"));
}

#[test]
fn tproxy_capture_listeners_are_transparent_and_inbound_keeps_the_clients_address() {
    let ctx = context(mesh());
    for (mode, tproxy) in [("REDIRECT", false), ("TPROXY", true)] {
        let mut listeners = lds::listeners(&ctx, &productpage(&ctx, mode));
        listeners.extend(lds::inbound_listeners(&productpage_inbound(&ctx, mode)));
        for name in ["virtualOutbound", "virtualInbound"] {
            let transparent = listener(&listeners, name).transparent.is_some_and(|t| t.value);
            assert_eq!(transparent, tproxy, "{mode}: {name}");
        }
        let filters = &listener(&listeners, "virtualInbound").listener_filters;
        let original_src = filters.iter().find(|f| f.name == "envoy.filters.listener.original_src");
        assert_eq!(original_src.is_some(), tproxy, "{mode}");
        if let Some(filter) = original_src {
            use envoy_types::pb::envoy::config::listener::v3::listener_filter::ConfigType;
            use envoy_types::pb::envoy::extensions::filters::listener::original_src::v3::OriginalSrc;
            let Some(ConfigType::TypedConfig(any)) = &filter.config_type else { panic!() };
            let config = <OriginalSrc as prost::Message>::decode(any.value.as_slice()).unwrap();
            assert_eq!(config.mark, 1337, "the proxy's own mark, which capture routes back");
            assert_eq!(filters[0].name, "envoy.filters.listener.original_dst", "the destination first");
        }
    }
}

#[test]
fn gateway_gets_listeners_and_route_configs_for_its_server_ports() {
    let ctx = context(mesh());
    let scope = ingress(&ctx);
    let listeners = lds::listeners(&ctx, &scope);
    assert_eq!(
        listeners.iter().map(|l| l.name.as_str()).collect::<Vec<_>>(),
        ["0.0.0.0_31400", "0.0.0.0_8080", "0.0.0.0_8081", "0.0.0.0_9443"],
        "one per bound port; targetPort 8081 replaces 80"
    );
    let http = listener(&listeners, "0.0.0.0_8080");
    assert_eq!(socket(http), ("0.0.0.0".into(), 8080));
    assert_eq!(rds_name(&hcm(&http.filter_chains[0].filters[0])), "http.8080");
    let tcp_listener = listener(&listeners, "0.0.0.0_31400");
    assert_eq!(tcp_clusters(&tcp(&tcp_listener.filter_chains[0].filters[0])), [format!("outbound|27017||{MONGODB}")]);

    let configs = rds::route_configs(&ctx, &scope);
    assert_eq!(configs.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["http.8080", "http.8081", "http.9443"]);
    let rc = config(&configs, "http.8080");
    assert_eq!(rc.virtual_hosts.len(), 2, "{:?}", rc.virtual_hosts.iter().map(|v| &v.name).collect::<Vec<_>>());
    let star = vhost(rc, "*:8080");
    assert_eq!(star.domains, ["*"]);
    let paths = |v: &VirtualHost| -> Vec<_> {
        v.routes.iter().map(|r| r.r#match.as_ref().unwrap().path_specifier.clone()).collect()
    };
    assert_eq!(
        paths(star),
        [
            Some(PathSpecifier::Path("/productpage".into())),
            Some(PathSpecifier::Prefix("/static".into())),
            Some(PathSpecifier::Path("/login".into())),
            Some(PathSpecifier::Path("/logout".into())),
            Some(PathSpecifier::Prefix("/api/v1/products".into())),
        ],
        "bookinfo's gateway routes, one per match, in order"
    );
    assert_eq!(single_cluster(&star.routes[0]), format!("outbound|9080||{PRODUCTPAGE}"));
    let shop = vhost(rc, "shop.bookinfo.example.com:8080");
    assert_eq!(shop.domains, ["shop.bookinfo.example.com"], "the host alone: the port is ignored in matching");
    assert!(rc.ignore_port_in_host_matching);

    // Server `default/*.bookinfo.example.com` on 80 → 8081: the `*` rule
    // narrows to the server's host, the shop rule keeps its own.
    let alt = config(&configs, "http.8081");
    let names: Vec<&str> = alt.virtual_hosts.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["*.bookinfo.example.com:80", "shop.bookinfo.example.com:80"]);
    assert_eq!(
        paths(vhost(alt, "*.bookinfo.example.com:80")),
        [Some(PathSpecifier::Prefix("/edge".into()))],
        "the mesh-only match is left out of the gateway"
    );
    assert_eq!(vhost(alt, "shop.bookinfo.example.com:80").domains, ["shop.bookinfo.example.com"]);

    let lookup = rds::route_config(&ctx, &scope, "http.8080").unwrap();
    assert_eq!(&lookup, rc);
    assert!(rds::route_config(&ctx, &scope, "http.31400").is_none(), "TCP ports have no route config");
}

#[test]
fn gateway_port_without_bound_rules_serves_an_empty_route_config() {
    let ctx = context(mesh());
    let configs = rds::route_configs(&ctx, &ingress(&ctx));
    let empty = config(&configs, "http.9443");
    assert!(empty.virtual_hosts.is_empty(), "Envoy answers 404 rather than waiting for a missing config");
}

#[test]
fn gateway_server_bind_sets_the_listener_address() {
    let ctx = context(mesh_with(
        r#"
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: local, namespace: default}
spec:
  selector: {istio: local}
  servers:
  - port: {number: 8080, name: http, protocol: HTTP}
    hosts: ["*"]
    bind: 127.0.0.1
  - port: {number: 8080, name: http-elsewhere, protocol: HTTP}
    hosts: ["*"]
    bind: 127.0.0.2
"#,
    ));
    let local = ctx.scope_for(&proxy(
        "router~127.0.0.1~local-1.default~default.svc.cluster.local",
        "REDIRECT",
        &[("istio", "local")],
    ));
    let listeners = lds::listeners(&ctx, &local);
    assert_eq!(
        listeners.iter().map(|l| l.name.as_str()).collect::<Vec<_>>(),
        ["127.0.0.1_8080"],
        "one listener per port, bound where the first server says; the other bind address is left out"
    );
    assert_eq!(socket(&listeners[0]), ("127.0.0.1".into(), 8080));
    assert_eq!(rds_name(&hcm(&listeners[0].filter_chains[0].filters[0])), "http.8080");
    assert!(rds::route_config(&ctx, &local, "http.8080").is_some());

    // Without `bind`, a gateway listener binds every address.
    let listeners = lds::listeners(&ctx, &ingress(&ctx));
    assert_eq!(socket(listener(&listeners, "0.0.0.0_8080")), ("0.0.0.0".into(), 8080));
}

#[test]
fn route_config_lookup_agrees_with_the_full_list() {
    let ctx = context(mesh());
    for scope in [productpage(&ctx, "REDIRECT"), productpage(&ctx, "NONE"), ingress(&ctx), scoped(&ctx)] {
        for rc in rds::route_configs(&ctx, &scope) {
            assert_eq!(rds::route_config(&ctx, &scope, &rc.name).as_ref(), Some(&rc));
        }
        assert!(rds::route_config(&ctx, &scope, "4242").is_none());
        assert!(rds::route_config(&ctx, &scope, "http.4242").is_none());
    }
}

#[test]
fn tcp_routes_with_destination_subnets_get_chains_of_their_own() {
    let extra = concat!(
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: warehouse, namespace: default}\n",
        "spec:\n  hosts: [warehouse.corp.internal]\n  resolution: NONE\n  ports: [{number: 7000, name: tcp, protocol: TCP}]\n",
        "---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: warehouse, namespace: default}\n",
        "spec:\n  hosts: [warehouse.corp.internal]\n  tcp:\n",
        "  - match: [{destinationSubnets: [10.70.0.0/16]}]\n",
        "    route: [{destination: {host: inventory, port: {number: 9080}}}]\n",
        "  - route: [{destination: {host: warehouse.corp.internal}}]\n",
    );
    let ctx = context(mesh_with(extra));
    let listeners = lds::listeners(&ctx, &productpage(&ctx, "REDIRECT"));
    let port = listener(&listeners, "0.0.0.0_7000");
    let subnet = port
        .filter_chains
        .iter()
        .find(|c| c.filter_chain_match.as_ref().is_some_and(|m| !m.prefix_ranges.is_empty()))
        .expect("a chain for the subnets");
    let range = &subnet.filter_chain_match.as_ref().unwrap().prefix_ranges[0];
    assert_eq!((range.address_prefix.as_str(), range.prefix_len.unwrap().value), ("10.70.0.0", 16));
    assert!(
        matches!(tcp(&subnet.filters[0]).cluster_specifier, Some(TcpClusterSpecifier::Cluster(ref c)) if c == &format!("outbound|9080||{INVENTORY}"))
    );
    let default = port.filter_chains.last().unwrap();
    assert!(
        matches!(tcp(&default.filters[0]).cluster_specifier, Some(TcpClusterSpecifier::Cluster(ref c)) if c == "outbound|7000||warehouse.corp.internal"),
        "other destinations take the next route"
    );
}
