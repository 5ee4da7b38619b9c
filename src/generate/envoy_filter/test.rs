//! Every applyTo and operation on the bookinfo mesh's generated resources,
//! with istiod's edge cases, the refusals meshpush adds, and idempotence.

use std::sync::Arc;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::listener::v3::{Filter, Listener, filter};
use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::HttpConnectionManager;
use prost::Message;

use super::*;
use crate::model::ConfigStore;
use crate::push::ScopeInterner;
use crate::testing::bookinfo;

/// The bookinfo mesh with the EnvoyFilter `patches` (its `configPatches`
/// list, YAML) in `namespace`.
fn mesh(namespace: &str, patches: &str) -> PushContext {
    let store = ConfigStore::new();
    let mut writes = bookinfo::writes();
    let filter = format!(
        "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {{name: f, namespace: {namespace}}}\nspec:\n  configPatches:\n{patches}"
    );
    writes.extend(bookinfo::puts(&filter));
    store.apply(writes);
    PushContext::build(store.snapshot(), 1, Arc::new(ScopeInterner::default()))
}

/// The productpage sidecar's resources: outbound and inbound listeners,
/// outbound and inbound clusters, routes, and what the patches did.
struct Sidecar {
    listeners: Vec<Listener>,
    inbound_listeners: Vec<Listener>,
    clusters: Vec<Cluster>,
    inbound_clusters: Vec<Cluster>,
    routes: Vec<RouteConfiguration>,
    record: Record,
}

fn sidecar(ctx: &PushContext) -> Sidecar {
    let proxy = bookinfo::productpage_in("REDIRECT");
    let scope = ctx.scope_for(&proxy);
    let (_, inbound) = ctx.inbound_for(&proxy);
    let mut record = Record::default();
    Sidecar {
        listeners: listeners(ctx, &scope, &mut record),
        inbound_listeners: inbound_listeners(&inbound, &mut record),
        clusters: clusters(ctx, &scope, &mut record),
        inbound_clusters: inbound_clusters(&inbound, &mut record),
        routes: route_configs(ctx, &scope, &mut record),
        record,
    }
}

fn named<'a, T>(items: &'a [T], name: &str, of: impl Fn(&T) -> &str) -> Option<&'a T> {
    items.iter().find(|i| of(i) == name)
}

fn listener<'a>(ls: &'a [Listener], name: &str) -> &'a Listener {
    named(ls, name, |l| &l.name).unwrap_or_else(|| panic!("no listener {name}"))
}

fn hcm(f: &Filter) -> HttpConnectionManager {
    let Some(filter::ConfigType::TypedConfig(any)) = &f.config_type else { panic!("no typed config") };
    HttpConnectionManager::decode(any.value.as_slice()).unwrap()
}

/// The HTTP filter names of the first chain of listener `name`.
fn http_filters(ls: &[Listener], name: &str) -> Vec<String> {
    let l = listener(ls, name);
    let chain = l.filter_chains.first().or(l.default_filter_chain.as_ref()).expect("a chain");
    let f = chain.filters.iter().find(|f| f.name == crate::generate::proto::HTTP_CONNECTION_MANAGER).expect("an HCM");
    hcm(f).http_filters.into_iter().map(|f| f.name).collect()
}

const OUTBOUND_HCM: &str = "    match:\n      context: SIDECAR_OUTBOUND\n      listener:\n        portNumber: 9080\n        filterChain:\n          filter:\n            name: envoy.filters.network.http_connection_manager\n";

fn lua(name: &str) -> String {
    format!(
        "      value:\n        name: {name}\n        typed_config:\n          '@type': type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua\n          default_source_code: {{inline_string: 'function envoy_on_request(h) end'}}\n"
    )
}

#[test]
fn a_mesh_without_patches_is_generated_as_before() {
    let plain =
        mesh("default", "  - applyTo: CLUSTER\n    match: {context: GATEWAY}\n    patch: {operation: REMOVE}\n");
    let s = sidecar(&plain);
    let scope = plain.scope_for(&bookinfo::productpage_in("REDIRECT"));
    assert!(scope.key.envoy_filters.is_empty(), "a GATEWAY patch is not a sidecar's");
    assert_eq!(s.clusters, crate::generate::cds::clusters(&plain, &scope));
    assert!(s.record.is_empty());
}

#[test]
fn http_filters_insert_where_istio_inserts_them() {
    let patches = format!(
        "  - applyTo: HTTP_FILTER\n{OUTBOUND_HCM}    patch:\n      operation: INSERT_BEFORE\n{}  - applyTo: HTTP_FILTER\n{OUTBOUND_HCM}            subFilter: {{name: envoy.filters.http.router}}\n    patch:\n      operation: INSERT_BEFORE\n{}  - applyTo: HTTP_FILTER\n{OUTBOUND_HCM}            subFilter: {{name: envoy.filters.http.cors}}\n    patch:\n      operation: INSERT_AFTER\n{}",
        lua("first"),
        lua("before-router"),
        lua("after-cors"),
    );
    let s = sidecar(&mesh("default", &patches));
    // INSERT_BEFORE without a sub-filter prepends (the local rate limit sample's shape).
    assert_eq!(
        http_filters(&s.listeners, "0.0.0.0_9080"),
        [
            "first",
            "envoy.filters.http.fault",
            "envoy.filters.http.cors",
            "after-cors",
            "before-router",
            "envoy.filters.http.router"
        ]
    );
    // Other ports' listeners are not matched; the inbound side is another context.
    assert!(!http_filters(&s.inbound_listeners, "virtualInbound").contains(&"first".to_string()));
    assert_eq!(s.record.applied_labels().len(), 3);
}

#[test]
fn a_filter_after_the_router_or_a_removed_router_is_refused_and_reported() {
    let patches = format!(
        "  - applyTo: HTTP_FILTER\n{OUTBOUND_HCM}    patch:\n      operation: ADD\n{}  - applyTo: HTTP_FILTER\n{OUTBOUND_HCM}            subFilter: {{name: envoy.filters.http.router}}\n    patch: {{operation: REMOVE}}\n  - applyTo: HTTP_FILTER\n{OUTBOUND_HCM}            subFilter: {{name: envoy.filters.http.cors}}\n    patch: {{operation: REMOVE}}\n",
        lua("last")
    );
    let s = sidecar(&mesh("default", &patches));
    assert_eq!(
        http_filters(&s.listeners, "0.0.0.0_9080"),
        ["envoy.filters.http.fault", "envoy.filters.http.router"],
        "the ADD after the router and the router's REMOVE are skipped; the cors REMOVE applies"
    );
    let failures = s.record.failures();
    assert_eq!(failures.len(), 2, "{failures:?}");
    assert!(failures[0].0 == "default/f[0]" && failures[0].1.contains("terminal"), "{failures:?}");
    assert!(failures[1].0 == "default/f[1]" && failures[1].1.contains("removing envoy.filters.http.router"));
    assert_eq!(s.record.applied_labels(), ["default/f[2]"]);
}

#[test]
fn http_filter_replace_merge_and_a_type_mismatch() {
    let patches = format!(
        "  - applyTo: HTTP_FILTER\n{OUTBOUND_HCM}            subFilter: {{name: envoy.filters.http.fault}}\n    patch:\n      operation: REPLACE\n{}  - applyTo: HTTP_FILTER\n{OUTBOUND_HCM}            subFilter: {{name: envoy.filters.http.router}}\n    patch:\n      operation: MERGE\n      value:\n        typed_config:\n          '@type': type.googleapis.com/envoy.extensions.filters.http.router.v3.Router\n          suppress_envoy_headers: true\n  - applyTo: HTTP_FILTER\n{OUTBOUND_HCM}            subFilter: {{name: envoy.filters.http.cors}}\n    patch:\n      operation: MERGE\n      value:\n        typed_config:\n          '@type': type.googleapis.com/envoy.extensions.filters.http.router.v3.Router\n          suppress_envoy_headers: true\n",
        lua("replaced")
    );
    let s = sidecar(&mesh("default", &patches));
    let l = listener(&s.listeners, "0.0.0.0_9080");
    let manager = hcm(&l.filter_chains.first().or(l.default_filter_chain.as_ref()).unwrap().filters[0]);
    let names: Vec<&str> = manager.http_filters.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["replaced", "envoy.filters.http.cors", "envoy.filters.http.router"]);
    let router = manager.http_filters.last().unwrap();
    let Some(envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::http_filter::ConfigType::TypedConfig(any)) = &router.config_type else { panic!() };
    let router =
        envoy_types::pb::envoy::extensions::filters::http::router::v3::Router::decode(any.value.as_slice()).unwrap();
    assert!(router.suppress_envoy_headers);
    let failures = s.record.failures();
    assert_eq!(failures.len(), 1);
    assert!(failures[0].1.contains("cannot merge"), "{failures:?}");
}

#[test]
fn network_filters_and_the_connection_manager_merge() {
    let patches = "  - applyTo: NETWORK_FILTER\n    match:\n      context: SIDECAR_OUTBOUND\n      listener:\n        portNumber: 9080\n        filterChain: {filter: {name: envoy.filters.network.http_connection_manager}}\n    patch:\n      operation: MERGE\n      value:\n        typed_config:\n          '@type': type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager\n          server_name: patched\n          common_http_protocol_options: {idle_timeout: 30s}\n  - applyTo: NETWORK_FILTER\n    match:\n      context: SIDECAR_OUTBOUND\n      listener: {portNumber: 9080}\n    patch:\n      operation: INSERT_FIRST\n      value:\n        name: envoy.filters.network.connection_limit\n        typed_config:\n          '@type': type.googleapis.com/envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit\n          stat_prefix: limit\n          max_connections: 10\n  - applyTo: NETWORK_FILTER\n    match:\n      context: SIDECAR_OUTBOUND\n      listener:\n        portNumber: 9080\n        filterChain: {filter: {name: envoy.filters.network.http_connection_manager}}\n    patch: {operation: REMOVE}\n";
    let s = sidecar(&mesh("istio-system", patches));
    let l = listener(&s.listeners, "0.0.0.0_9080");
    let chain = l.filter_chains.first().or(l.default_filter_chain.as_ref()).unwrap();
    let names: Vec<&str> = chain.filters.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["envoy.filters.network.connection_limit", "envoy.filters.network.http_connection_manager"]);
    let manager = hcm(&chain.filters[1]);
    assert_eq!(manager.server_name, "patched");
    assert_eq!(manager.common_http_protocol_options.unwrap().idle_timeout.unwrap().seconds, 30);
    assert_eq!(manager.http_filters.len(), 3, "the merge keeps Istio's filters");
    let failures = s.record.failures();
    assert_eq!(failures.len(), 1, "the HCM's REMOVE is refused: {failures:?}");
}

#[test]
fn listeners_merge_remove_and_add_by_context() {
    let patches = "  - applyTo: LISTENER\n    match: {context: SIDECAR_OUTBOUND, listener: {portNumber: 9080}}\n    patch:\n      operation: MERGE\n      value: {per_connection_buffer_limit_bytes: 1024}\n  - applyTo: LISTENER\n    match: {listener: {name: virtualOutbound}}\n    patch: {operation: REMOVE}\n  - applyTo: LISTENER\n    patch:\n      operation: ADD\n      value:\n        name: extra\n        address: {socket_address: {address: 127.0.0.1, port_value: 7777}}\n  - applyTo: LISTENER\n    match: {context: SIDECAR_INBOUND}\n    patch:\n      operation: INSERT_FIRST\n      value:\n        name: inbound-extra\n        address: {socket_address: {address: 127.0.0.1, port_value: 7778}}\n";
    let s = sidecar(&mesh("default", patches));
    assert_eq!(listener(&s.listeners, "0.0.0.0_9080").per_connection_buffer_limit_bytes.unwrap().value, 1024);
    assert!(named(&s.listeners, "virtualOutbound", |l| &l.name).is_none());
    assert!(named(&s.inbound_listeners, "virtualInbound", |l| &l.name).is_some(), "removed by name only");
    assert!(named(&s.listeners, "extra", |l| &l.name).is_some(), "ANY adds on the outbound side");
    assert!(named(&s.inbound_listeners, "extra", |l| &l.name).is_none(), "…not on the inbound side");
    assert!(named(&s.inbound_listeners, "inbound-extra", |l| &l.name).is_some(), "SIDECAR_INBOUND adds there");
    assert!(named(&s.listeners, "inbound-extra", |l| &l.name).is_none());
}

#[test]
fn listener_filters_and_filter_chains_on_the_inbound_side() {
    let patches = "  - applyTo: LISTENER_FILTER\n    match: {context: SIDECAR_INBOUND, listener: {name: virtualInbound}}\n    patch:\n      operation: INSERT_FIRST\n      value:\n        name: envoy.filters.listener.proxy_protocol\n        typed_config: {'@type': type.googleapis.com/envoy.extensions.filters.listener.proxy_protocol.v3.ProxyProtocol}\n  - applyTo: LISTENER_FILTER\n    match: {context: SIDECAR_INBOUND, listener: {name: virtualInbound, listenerFilter: envoy.filters.listener.original_dst}}\n    patch: {operation: REMOVE}\n  - applyTo: FILTER_CHAIN\n    match: {context: SIDECAR_INBOUND, listener: {portNumber: 9080}}\n    patch:\n      operation: MERGE\n      value: {name: patched-chain}\n  - applyTo: FILTER_CHAIN\n    match: {context: SIDECAR_INBOUND, listener: {name: virtualInbound}}\n    patch:\n      operation: ADD\n      value:\n        name: added-chain\n        filter_chain_match: {destination_port: 7000}\n        filters:\n        - name: envoy.filters.network.tcp_proxy\n          typed_config: {'@type': type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: x, cluster: InboundPassthroughCluster}\n";
    let s = sidecar(&mesh("default", patches));
    let inbound = listener(&s.inbound_listeners, "virtualInbound");
    let filters: Vec<&str> = inbound.listener_filters.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(filters.first(), Some(&"envoy.filters.listener.proxy_protocol"));
    assert!(!filters.contains(&"envoy.filters.listener.original_dst"));
    let port = |c: &envoy_types::pb::envoy::config::listener::v3::FilterChain| {
        c.filter_chain_match.as_ref().and_then(|m| m.destination_port.as_ref()).map(|p| p.value)
    };
    let chains: Vec<(&str, Option<u32>)> = inbound.filter_chains.iter().map(|c| (c.name.as_str(), port(c))).collect();
    assert!(chains.iter().filter(|(_, p)| *p == Some(9080)).all(|(n, _)| *n == "patched-chain"), "{chains:?}");
    assert!(chains.iter().any(|(_, p)| *p == Some(9080)));
    assert!(chains.iter().filter(|(_, p)| *p != Some(9080)).all(|(n, _)| *n != "patched-chain"));
    assert_eq!(chains.last().unwrap().0, "added-chain");
}

#[test]
fn routes_virtual_hosts_and_route_configurations() {
    let patches = "  - applyTo: ROUTE_CONFIGURATION\n    match: {context: SIDECAR_OUTBOUND, routeConfiguration: {portNumber: 9080}}\n    patch:\n      operation: MERGE\n      value: {request_headers_to_add: [{header: {key: x-rc, value: '1'}}]}\n  - applyTo: VIRTUAL_HOST\n    match: {context: SIDECAR_OUTBOUND, routeConfiguration: {vhost: {name: 'reviews.default.svc.cluster.local:9080'}}}\n    patch:\n      operation: MERGE\n      value: {response_headers_to_add: [{header: {key: x-vhost, value: reviews}}]}\n  - applyTo: VIRTUAL_HOST\n    match: {context: SIDECAR_OUTBOUND, routeConfiguration: {vhost: {name: 'ratings.default.svc.cluster.local:9080'}}}\n    patch: {operation: REMOVE}\n  - applyTo: VIRTUAL_HOST\n    match: {context: SIDECAR_OUTBOUND, routeConfiguration: {portNumber: 9080}}\n    patch:\n      operation: ADD\n      value: {name: added, domains: [added.example]}\n  - applyTo: HTTP_ROUTE\n    match: {context: SIDECAR_OUTBOUND, routeConfiguration: {vhost: {name: 'reviews.default.svc.cluster.local:9080'}}}\n    patch:\n      operation: INSERT_FIRST\n      value: {name: first, match: {prefix: /first}, direct_response: {status: 204}}\n  - applyTo: ROUTE_CONFIGURATION\n    match: {context: SIDECAR_INBOUND, routeConfiguration: {portNumber: 9080}}\n    patch:\n      operation: MERGE\n      value: {request_headers_to_add: [{header: {key: x-inbound, value: '1'}}]}\n";
    let s = sidecar(&mesh("default", patches));
    let rc = named(&s.routes, "9080", |r| &r.name).expect("route 9080");
    assert_eq!(rc.request_headers_to_add[0].header.as_ref().unwrap().key, "x-rc");
    let vhosts: Vec<&str> = rc.virtual_hosts.iter().map(|v| v.name.as_str()).collect();
    assert!(!vhosts.iter().any(|v| v.starts_with("ratings.")), "{vhosts:?}");
    assert_eq!(vhosts.last(), Some(&"added"));
    let reviews = rc.virtual_hosts.iter().find(|v| v.name == "reviews.default.svc.cluster.local:9080").unwrap();
    assert_eq!(reviews.response_headers_to_add[0].header.as_ref().unwrap().key, "x-vhost");
    assert_eq!(reviews.routes[0].name, "first");
    let others: Vec<&str> = rc
        .virtual_hosts
        .iter()
        .filter(|v| v.name != reviews.name)
        .flat_map(|v| &v.routes)
        .map(|r| r.name.as_str())
        .collect();
    assert!(!others.contains(&"first"));
    // The inbound side's inline route configuration is patched in its context.
    let inbound = listener(&s.inbound_listeners, "virtualInbound");
    let inline = inbound
        .filter_chains
        .iter()
        .flat_map(|c| &c.filters)
        .filter(|f| f.name == crate::generate::proto::HTTP_CONNECTION_MANAGER)
        .filter_map(|f| match hcm(f).route_specifier {
            Some(envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::http_connection_manager::RouteSpecifier::RouteConfig(rc)) => Some(rc),
            _ => None,
        })
        .find(|rc| rc.name == "inbound|9080||")
        .expect("an inline route config");
    assert_eq!(inline.request_headers_to_add[0].header.as_ref().unwrap().key, "x-inbound");
}

#[test]
fn clusters_merge_remove_and_add() {
    let patches = "  - applyTo: CLUSTER\n    match: {context: SIDECAR_OUTBOUND, cluster: {service: reviews.default.svc.cluster.local, portNumber: 9080, subset: v1}}\n    patch:\n      operation: MERGE\n      value:\n        typed_extension_protocol_options:\n          envoy.extensions.upstreams.http.v3.HttpProtocolOptions:\n            '@type': type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions\n            explicit_http_config: {http2_protocol_options: {}}\n  - applyTo: CLUSTER\n    match: {cluster: {name: 'outbound|9080||ratings.default.svc.cluster.local'}}\n    patch: {operation: REMOVE}\n  - applyTo: CLUSTER\n    match: {cluster: {service: nothing.example}}\n    patch:\n      operation: ADD\n      value: {name: added, type: STATIC, connect_timeout: 1s}\n  - applyTo: CLUSTER\n    match: {context: SIDECAR_INBOUND, cluster: {service: productpage.default.svc.cluster.local, portNumber: 9080}}\n    patch:\n      operation: MERGE\n      value: {connect_timeout: 7s}\n";
    let s = sidecar(&mesh("default", patches));
    let v1 = named(&s.clusters, "outbound|9080|v1|reviews.default.svc.cluster.local", |c| &c.name).unwrap();
    let options = &v1.typed_extension_protocol_options["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"];
    let options =
        envoy_types::pb::envoy::extensions::upstreams::http::v3::HttpProtocolOptions::decode(options.value.as_slice())
            .unwrap();
    assert!(format!("{options:?}").contains("Http2ProtocolOptions"), "{options:?}");
    let v2 = named(&s.clusters, "outbound|9080|v2|reviews.default.svc.cluster.local", |c| &c.name).unwrap();
    assert!(
        !v2.typed_extension_protocol_options.contains_key("envoy.extensions.upstreams.http.v3.HttpProtocolOptions")
            || v2 != v1
    );
    assert!(named(&s.clusters, "outbound|9080||ratings.default.svc.cluster.local", |c| &c.name).is_none());
    assert!(named(&s.clusters, "added", |c| &c.name).is_some(), "an ADD ignores its cluster match");
    assert!(named(&s.inbound_clusters, "added", |c| &c.name).is_none(), "ANY adds on the outbound side only");
    let inbound = named(&s.inbound_clusters, "inbound|9080||", |c| &c.name).unwrap();
    assert_eq!(inbound.connect_timeout.unwrap().seconds, 7, "an inbound cluster matches by its services");
}

#[test]
fn repeated_generations_never_apply_a_merge_twice() {
    let patches = "  - applyTo: VIRTUAL_HOST\n    match: {context: SIDECAR_OUTBOUND}\n    patch:\n      operation: MERGE\n      value: {response_headers_to_add: [{header: {key: x-once, value: '1'}}]}\n";
    let ctx = mesh("default", patches);
    let first = sidecar(&ctx);
    let second = sidecar(&ctx);
    assert_eq!(first.routes, second.routes);
    let rc = named(&first.routes, "9080", |r| &r.name).unwrap();
    assert!(rc.virtual_hosts.iter().all(|v| v.response_headers_to_add.len() == 1));
}

#[test]
fn gateway_routes_match_by_server_port_and_gateway() {
    let patches = "  - applyTo: VIRTUAL_HOST\n    match: {context: GATEWAY, routeConfiguration: {portNumber: 8080}}\n    patch:\n      operation: MERGE\n      value: {response_headers_to_add: [{header: {key: x-gw, value: '1'}}]}\n  - applyTo: VIRTUAL_HOST\n    match: {context: GATEWAY, routeConfiguration: {portNumber: 9999}}\n    patch:\n      operation: MERGE\n      value: {response_headers_to_add: [{header: {key: x-never, value: '1'}}]}\n";
    let ctx = mesh("default", patches);
    let scope = ctx.scope_for(&bookinfo::ingress());
    let mut record = Record::default();
    let routes = route_configs(&ctx, &scope, &mut record);
    let rc = named(&routes, "http.8080", |r| &r.name).expect("http.8080");
    let keys: Vec<&str> = rc
        .virtual_hosts
        .iter()
        .flat_map(|v| &v.response_headers_to_add)
        .map(|h| h.header.as_ref().unwrap().key.as_str())
        .collect();
    assert!(!keys.is_empty() && keys.iter().all(|k| *k == "x-gw"), "{keys:?}");
    let mut log = PatchLog::default();
    log.add(record);
    let counts = log.counts();
    assert!(counts.contains(&("default/f".to_string(), "vhost", "applied", 1)), "{counts:?}");
    assert!(counts.contains(&("default/f".to_string(), "vhost", "skipped", 1)), "{counts:?}");
    let _ = &mut log;
}

#[test]
fn replace_list_merges_replacements_inserts_by_route_and_transport_sockets() {
    let ctx = mesh(
        "default",
        "  - applyTo: ROUTE_CONFIGURATION\n    match: {context: SIDECAR_OUTBOUND, routeConfiguration: {name: '9080'}}\n    patch:\n      operation: MERGE_AND_REPLACE_LIST\n      value: {virtual_hosts: [{name: only, domains: ['*'], routes: [{name: a, match: {prefix: /}, direct_response: {status: 200}}, {name: b, match: {prefix: /b}, redirect: {host_redirect: b.example}}]}]}\n  - applyTo: HTTP_ROUTE\n    match: {context: SIDECAR_OUTBOUND, routeConfiguration: {vhost: {name: only, route: {action: REDIRECT}}}}\n    patch:\n      operation: INSERT_BEFORE\n      value: {name: before-b, match: {prefix: /x}, direct_response: {status: 201}}\n  - applyTo: HTTP_ROUTE\n    match: {context: SIDECAR_OUTBOUND, routeConfiguration: {vhost: {name: only, route: {name: a}}}}\n    patch:\n      operation: INSERT_AFTER\n      value: {name: after-a, match: {prefix: /y}, direct_response: {status: 202}}\n  - applyTo: VIRTUAL_HOST\n    match: {context: SIDECAR_OUTBOUND, routeConfiguration: {vhost: {name: only}}}\n    patch:\n      operation: REPLACE\n      value: {name: only, domains: ['*'], routes: [{name: a, match: {prefix: /}, direct_response: {status: 200}}, {name: b, match: {prefix: /b}, redirect: {host_redirect: b.example}}]}\n  - applyTo: CLUSTER\n    match: {context: SIDECAR_OUTBOUND, cluster: {service: ratings.default.svc.cluster.local}}\n    patch:\n      operation: MERGE\n      value:\n        connect_timeout: 99s\n        transport_socket:\n          name: envoy.transport_sockets.tls\n          typed_config: {'@type': type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext, sni: ratings.example}\n",
    );
    let s = sidecar(&ctx);
    let rc = named(&s.routes, "9080", |r| &r.name).unwrap();
    // The list replaced, then the host replaced (a REPLACE's copy is what
    // the route patches see), then routes inserted around the matches.
    assert_eq!(rc.virtual_hosts.len(), 1);
    let routes: Vec<&str> = rc.virtual_hosts[0].routes.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(routes, ["a", "after-a", "before-b", "b"]);
    let ratings = named(&s.clusters, "outbound|9080||ratings.default.svc.cluster.local", |c| &c.name).unwrap();
    assert_eq!(ratings.transport_socket.as_ref().unwrap().name, "envoy.transport_sockets.tls");
    assert_ne!(ratings.connect_timeout.unwrap().seconds, 99, "with a transport socket, only the socket is merged");
}

#[test]
fn listener_filter_merge_and_named_network_filter_inserts() {
    let ctx = mesh(
        "default",
        "  - applyTo: LISTENER_FILTER\n    match: {context: SIDECAR_INBOUND, listener: {name: virtualInbound, listenerFilter: envoy.filters.listener.original_dst}}\n    patch:\n      operation: MERGE\n      value: {name: ignored, typed_config: {'@type': type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector, enable_ja3_fingerprinting: true}}\n  - applyTo: NETWORK_FILTER\n    match: {context: SIDECAR_OUTBOUND, listener: {portNumber: 9080, filterChain: {filter: {name: envoy.filters.network.http_connection_manager}}}}\n    patch:\n      operation: INSERT_BEFORE\n      value: {name: envoy.filters.network.connection_limit, typed_config: {'@type': type.googleapis.com/envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit, stat_prefix: l, max_connections: 1}}\n  - applyTo: NETWORK_FILTER\n    match: {context: SIDECAR_OUTBOUND, listener: {portNumber: 9080, filterChain: {filter: {name: envoy.filters.network.http_connection_manager}}}}\n    patch:\n      operation: INSERT_AFTER\n      value: {name: after-hcm, typed_config: {'@type': type.googleapis.com/envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit, stat_prefix: m, max_connections: 1}}\n",
    );
    let s = sidecar(&ctx);
    // A sidecar with a workload certificate: its inbound side inspects TLS.
    let mut holder = bookinfo::productpage_in("REDIRECT");
    holder.mesh_certificates = true;
    let inbound_listeners = inbound_listeners(&ctx.inbound_for(&holder).1, &mut Record::default());
    let inbound = listener(&inbound_listeners, "virtualInbound");
    // The merge reaches the listener filters of its type (tls_inspector)
    // and passes over the others; no filter is renamed by it.
    let names: Vec<&str> = inbound.listener_filters.iter().map(|f| f.name.as_str()).collect();
    assert!(names.contains(&"envoy.filters.listener.original_dst") && !names.contains(&"ignored"), "{names:?}");
    let inspector =
        named(&inbound.listener_filters, "envoy.filters.listener.tls_inspector", |f| &f.name).expect("a TLS inspector");
    let Some(envoy_types::pb::envoy::config::listener::v3::listener_filter::ConfigType::TypedConfig(any)) =
        &inspector.config_type
    else {
        panic!()
    };
    let config = envoy_types::pb::envoy::extensions::filters::listener::tls_inspector::v3::TlsInspector::decode(
        any.value.as_slice(),
    )
    .unwrap();
    assert_eq!(config.enable_ja3_fingerprinting, Some(envoy_types::pb::google::protobuf::BoolValue { value: true }));
    let l = listener(&s.listeners, "0.0.0.0_9080");
    let chain = l.filter_chains.first().or(l.default_filter_chain.as_ref()).unwrap();
    let names: Vec<&str> = chain.filters.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["envoy.filters.network.connection_limit", "envoy.filters.network.http_connection_manager"]);
    let failures = s.record.failures();
    assert!(failures.iter().any(|(p, why)| p == "default/f[2]" && why.contains("terminal")), "{failures:?}");
}

#[test]
fn what_envoy_would_refuse_is_skipped_and_the_filter_s_other_patches_apply() {
    let ctx = mesh(
        "default",
        "  - applyTo: CLUSTER\n    match: {cluster: {service: ratings.default.svc.cluster.local}}\n    patch: {operation: MERGE, value: {connect_timeout: 0s}}\n  - applyTo: CLUSTER\n    match: {context: SIDECAR_OUTBOUND}\n    patch: {operation: ADD, value: {connect_timeout: 1s}}\n  - applyTo: CLUSTER\n    match: {cluster: {service: ratings.default.svc.cluster.local}}\n    patch: {operation: MERGE, value: {per_connection_buffer_limit_bytes: 4096}}\n",
    );
    let s = sidecar(&ctx);
    let ratings = named(&s.clusters, "outbound|9080||ratings.default.svc.cluster.local", |c| &c.name).unwrap();
    assert_ne!(ratings.connect_timeout.unwrap().seconds, 0, "a zero connect timeout is not merged");
    assert_eq!(ratings.per_connection_buffer_limit_bytes.unwrap().value, 4096, "the third patch applies");
    assert!(named(&s.clusters, "", |c| &c.name).is_none(), "a cluster without a name is not added");
    let scope = ctx.scope_for(&bookinfo::productpage_in("REDIRECT"));
    let indexes: Vec<usize> = scope.key.envoy_filters.iter().map(|p| p.index).collect();
    assert_eq!(indexes, [2], "the two patches Envoy would refuse are not indexed");
}

#[test]
fn protobuf_s_merge_of_a_value_without_durations_is_istio_s_merge() {
    use crate::envoy_api::json::from_json;
    use crate::envoy_api::merge::{Lists, dynamic, merge, typed};
    let target: Cluster = typed(
        &from_json(
            "envoy.config.cluster.v3.Cluster",
            &serde_json::json!({"name": "c", "type": "EDS", "connect_timeout": "2.5s", "metadata": {"filter_metadata": {"a": {"x": 1}, "b": {"y": 2}}}, "dns_lookup_family": "V4_ONLY", "health_checks": [{"timeout": "1s", "interval": "1s", "tcp_health_check": {}}]}),
        )
        .unwrap(),
    );
    for value in [
        serde_json::json!({"metadata": {"filter_metadata": {"a": {"z": 3}}}, "per_connection_buffer_limit_bytes": 7}),
        serde_json::json!({"type": "STATIC", "health_checks": [{"timeout": "2s", "interval": "2s", "http_health_check": {"path": "/h"}}]}),
        serde_json::json!({"cluster_type": {"name": "envoy.clusters.aggregate"}, "circuit_breakers": {"thresholds": [{"max_connections": 5}]}}),
    ] {
        let patch = from_json("envoy.config.cluster.v3.Cluster", &value).unwrap();
        let mut istio = dynamic(&target);
        merge(&mut istio, &patch, Lists::Append).unwrap();
        let mut binary = target.clone();
        binary.merge(prost::Message::encode_to_vec(&patch).as_slice()).unwrap();
        assert_eq!(typed::<Cluster>(&istio), binary, "{value}");
    }
}
