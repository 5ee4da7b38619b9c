//! Generator tests on a bookinfo-like mesh, built from typed objects.
//!
//! Each test asserts what a user would see in `istioctl proxy-config` or in
//! Envoy's behaviour: names, cluster types, policies, endpoints, routes,
//! domains, listener binds. `every_reference_resolves_and_nothing_is_duplicated`
//! checks the cross-resource invariants Envoy enforces on every scope.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use envoy_types::pb::envoy::config::cluster::v3::{
    Cluster,
    cluster::{ClusterDiscoveryType, DiscoveryType, LbConfig, LbPolicy},
};
use envoy_types::pb::envoy::config::core::v3::{HealthStatus, address, socket_address::PortSpecifier};
use envoy_types::pb::envoy::config::endpoint::v3::lb_endpoint::HostIdentifier;
use envoy_types::pb::envoy::config::listener::v3::{Filter, Listener, filter};
use envoy_types::pb::envoy::config::route::v3::{
    Route, RouteConfiguration, VirtualHost,
    header_matcher::HeaderMatchSpecifier,
    redirect_action::{PathRewriteSpecifier, RedirectResponseCode},
    route::Action,
    route_action::{ClusterSpecifier, HostRewriteSpecifier, hash_policy::PolicySpecifier},
    route_match::PathSpecifier,
};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    HttpConnectionManager, http_connection_manager::RouteSpecifier,
};
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::{
    TcpProxy, tcp_proxy::ClusterSpecifier as TcpClusterSpecifier,
};
use envoy_types::pb::envoy::extensions::upstreams::http::v3::{
    HttpProtocolOptions,
    http_protocol_options::{UpstreamProtocolOptions, explicit_http_config::ProtocolConfig},
};
use envoy_types::pb::envoy::r#type::matcher::v3::string_matcher::MatchPattern;
use envoy_types::pb::google::protobuf::{Struct, Value, value::Kind};
use prost::Message;
use serde::de::DeserializeOwned;

use super::{cds, eds, lds, rds};
use crate::config::{ConfigObject, SourceRef};
use crate::model::store::Write;
use crate::model::{ConfigStore, Proxy};
use crate::push::{PushContext, Scope, ScopeInterner};

// ---------------------------------------------------------------- fixture

const REVIEWS: &str = "reviews.default.svc.cluster.local";
const RATINGS: &str = "ratings.default.svc.cluster.local";
const PRODUCTPAGE: &str = "productpage.default.svc.cluster.local";
const MONGODB: &str = "mongodb.default.svc.cluster.local";

fn yaml<T: DeserializeOwned>(text: &str) -> T {
    serde_yaml_ng::from_str(text).unwrap_or_else(|e| panic!("fixture does not parse: {e}\n{text}"))
}

/// A Kubernetes Service: `ports` as `(name, port)`.
fn service(ns: &str, name: &str, ip: &str, ports: &[(&str, u32)], app: &str) -> ConfigObject {
    let ports: Vec<String> = ports.iter().map(|(n, p)| format!("{{name: {n}, port: {p}, targetPort: {p}}}")).collect();
    ConfigObject::Service(yaml(&format!(
        "metadata: {{name: {name}, namespace: {ns}}}\nspec: {{clusterIP: \"{ip}\", selector: {{app: {app}}}, ports: [{}]}}",
        ports.join(", ")
    )))
}

fn pod(ns: &str, name: &str, ip: &str, app: &str, version: &str) -> ConfigObject {
    ConfigObject::Pod(yaml(&format!(
        "metadata: {{name: {name}, namespace: {ns}, labels: {{app: {app}, version: {version}}}}}\nstatus: {{podIP: \"{ip}\", phase: Running}}"
    )))
}

fn bookinfo() -> Vec<ConfigObject> {
    let mut objects = vec![
        service("default", "productpage", "10.96.0.1", &[("http", 9080)], "productpage"),
        service("default", "reviews", "10.96.0.2", &[("http", 9080)], "reviews"),
        service("default", "ratings", "10.96.0.3", &[("http", 9080)], "ratings"),
        service("default", "details", "10.96.0.4", &[("http", 9080)], "details"),
        service("default", "mongodb", "10.96.0.5", &[("tcp-mongo", 27017)], "mongodb"),
        service("default", "grpc-echo", "10.96.0.6", &[("grpc", 7070)], "grpc-echo"),
        service("other", "billing", "10.96.1.1", &[("http", 9080)], "billing"),
        service("scoped", "local", "10.96.2.1", &[("http", 8000)], "local"),
        pod("default", "productpage-v1", "10.0.0.1", "productpage", "v1"),
        pod("default", "reviews-v1", "10.0.0.11", "reviews", "v1"),
        pod("default", "reviews-v2", "10.0.0.12", "reviews", "v2"),
        pod("default", "reviews-v3", "10.0.0.13", "reviews", "v3"),
        pod("default", "ratings-v1", "10.0.0.21", "ratings", "v1"),
        pod("default", "mongodb-v1", "10.0.0.41", "mongodb", "v1"),
        pod("other", "billing-v1", "10.0.1.1", "billing", "v1"),
    ];
    objects.push(ConfigObject::ServiceEntry(yaml(
        r#"
metadata: {name: payments, namespace: default}
spec:
  hosts: [payments.corp.internal]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 8443, name: http, protocol: HTTP}]
  endpoints:
  - {address: 10.1.0.2, locality: us-east/zone-a, weight: 2, labels: {version: v1}}
  - {address: 10.1.0.1, locality: us-east/zone-a, labels: {version: v2}}
  - {address: 10.1.0.3, locality: eu-west/zone-b/rack-1, labels: {version: v1}}
  - {address: not-an-ip.example.com, locality: us-east/zone-a}
"#,
    )));
    objects.push(ConfigObject::ServiceEntry(yaml(
        r#"
metadata: {name: external, namespace: default}
spec:
  hosts: [api.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{number: 443, name: tls, protocol: TLS}]
"#,
    )));
    objects.push(ConfigObject::ServiceEntry(yaml(
        r#"
metadata: {name: anything, namespace: default}
spec:
  hosts: [passthrough.example.com]
  resolution: NONE
  ports: [{number: 8080, name: http, protocol: HTTP}]
"#,
    )));
    // Virtual IPs that collide with Kubernetes services: Envoy refuses a
    // domain or a filter chain match used twice, so the first host keeps it.
    objects.push(ConfigObject::ServiceEntry(yaml(
        r#"
metadata: {name: legacy-web, namespace: default}
spec:
  hosts: [zz-legacy-web.example.com]
  addresses: [10.96.0.3]
  resolution: STATIC
  ports: [{number: 9080, name: http, protocol: HTTP}]
"#,
    )));
    objects.push(ConfigObject::ServiceEntry(yaml(
        r#"
metadata: {name: legacy-db, namespace: default}
spec:
  hosts: [zz-legacy-db.example.com]
  addresses: [10.96.0.5]
  resolution: STATIC
  ports: [{number: 27017, name: tcp, protocol: TCP}]
"#,
    )));
    objects.push(ConfigObject::DestinationRule(yaml(
        r#"
metadata: {name: reviews, namespace: default}
spec:
  host: reviews
  trafficPolicy:
    connectionPool:
      tcp: {maxConnections: 100, connectTimeout: 2s}
      http: {http1MaxPendingRequests: 10, maxRequestsPerConnection: 5, maxRetries: 4}
    outlierDetection: {consecutive5xxErrors: 7, interval: 30s, baseEjectionTime: 1m, maxEjectionPercent: 50}
  subsets:
  - {name: v1, labels: {version: v1}}
  - name: v2
    labels: {version: v2}
    trafficPolicy: {loadBalancer: {simple: LEAST_REQUEST}}
  - name: v3
    labels: {version: v3}
    trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x-user, minimumRingSize: 2048}}}
"#,
    )));
    objects.push(ConfigObject::DestinationRule(yaml(
        r#"
metadata: {name: payments, namespace: default}
spec:
  host: payments.corp.internal
  subsets:
  - {name: v1, labels: {version: v1}}
"#,
    )));
    objects.push(ConfigObject::VirtualService(yaml(
        r#"
metadata: {name: reviews, namespace: default}
spec:
  hosts: [reviews]
  http:
  - name: jason
    match: [{headers: {end-user: {exact: jason}}}]
    route: [{destination: {host: reviews, subset: v2}}]
  - name: canary
    match: [{headers: {x-canary: {prefix: "yes"}}}]
    route: [{destination: {host: reviews, subset: v3}}]
  - name: elsewhere
    match: [{uri: {prefix: /other-port}, port: 9999}]
    route: [{destination: {host: ratings}}]
  - name: moved
    match: [{uri: {prefix: /old}}]
    redirect: {uri: /new, authority: new.example.com, redirectCode: 302}
  - name: api
    match: [{uri: {prefix: /api}}, {uri: {regex: "/v[0-9]+/api"}}]
    rewrite: {uri: /v2/api, authority: reviews.internal}
    timeout: 3s
    retries: {attempts: 5, retryOn: "5xx,503", perTryTimeout: 1s}
    route:
    - {destination: {host: reviews, subset: v1}, weight: 80}
    - {destination: {host: reviews, subset: v3}, weight: 20}
    - {destination: {host: reviews, subset: v2}}
  - name: rest
    route: [{destination: {host: reviews, subset: v1}}]
"#,
    )));
    objects.push(ConfigObject::VirtualService(yaml(
        r#"
metadata: {name: mongodb, namespace: default}
spec:
  hosts: [mongodb]
  tcp:
  - match: [{port: 27017}]
    route:
    - {destination: {host: mongodb, subset: v1}, weight: 90}
    - {destination: {host: mongodb, subset: v2}, weight: 10}
"#,
    )));
    objects.push(ConfigObject::Gateway(yaml(
        r#"
metadata: {name: bookinfo-gateway, namespace: default}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 8080, name: http, protocol: HTTP}
    hosts: ["*"]
  - port: {number: 80, name: http-alt, protocol: HTTP, targetPort: 8081}
    hosts: ["default/*.bookinfo.example.com"]
  - port: {number: 31400, name: tcp, protocol: TCP}
    hosts: ["*"]
  - port: {number: 9443, name: http-empty, protocol: HTTP}
    hosts: ["nobody/*"]
"#,
    )));
    objects.push(ConfigObject::VirtualService(yaml(
        r#"
metadata: {name: bookinfo, namespace: default}
spec:
  hosts: ["*"]
  gateways: [bookinfo-gateway]
  http:
  - match: [{uri: {exact: /productpage}}, {uri: {prefix: /static}}]
    route: [{destination: {host: productpage, port: {number: 9080}}}]
  - match: [{uri: {prefix: /mesh-only}, gateways: [mesh]}]
    route: [{destination: {host: ratings}}]
  tcp:
  - match: [{port: 31400}]
    route: [{destination: {host: mongodb}}]
"#,
    )));
    objects.push(ConfigObject::VirtualService(yaml(
        r#"
metadata: {name: shop, namespace: default}
spec:
  hosts: [shop.bookinfo.example.com]
  gateways: [default/bookinfo-gateway]
  http:
  - route: [{destination: {host: reviews}}]
"#,
    )));
    objects.push(ConfigObject::Sidecar(yaml(
        r#"
metadata: {name: default, namespace: scoped}
spec:
  egress: [{hosts: ["./*"]}]
  outboundTrafficPolicy: {mode: REGISTRY_ONLY}
"#,
    )));
    objects
}

fn context(objects: Vec<ConfigObject>) -> PushContext {
    let store = ConfigStore::new();
    store.apply(
        objects.into_iter().enumerate().map(|(i, o)| Write::Put(o, SourceRef { file: "bookinfo.yaml".into(), doc: i })),
    );
    PushContext::build(store.snapshot(), 1, Arc::new(ScopeInterner::default()))
}

fn string(v: &str) -> Value {
    Value { kind: Some(Kind::StringValue(v.into())) }
}

fn proxy(id: &str, mode: &str, labels: &[(&str, &str)]) -> Proxy {
    let labels = Struct { fields: labels.iter().map(|(k, v)| (k.to_string(), string(v))).collect() };
    let node = envoy_types::pb::envoy::config::core::v3::Node {
        id: id.into(),
        metadata: Some(Struct {
            fields: [
                ("INTERCEPTION_MODE".to_string(), string(mode)),
                ("LABELS".to_string(), Value { kind: Some(Kind::StructValue(labels)) }),
            ]
            .into(),
        }),
        ..Default::default()
    };
    Proxy::from_node(&node).expect("valid node")
}

fn productpage(ctx: &PushContext, mode: &str) -> Arc<Scope> {
    ctx.scope_for(&proxy(
        "sidecar~10.0.0.1~productpage-v1.default~default.svc.cluster.local",
        mode,
        &[("app", "productpage"), ("version", "v1")],
    ))
}

/// The inbound key of the productpage workload.
fn productpage_inbound(ctx: &PushContext, mode: &str) -> crate::push::InboundKey {
    ctx.inbound_for(&proxy(
        "sidecar~10.0.0.1~productpage-v1.default~default.svc.cluster.local",
        mode,
        &[("app", "productpage"), ("version", "v1")],
    ))
    .1
}

fn ingress(ctx: &PushContext) -> Arc<Scope> {
    ctx.scope_for(&proxy(
        "router~10.0.0.100~ingress.default~default.svc.cluster.local",
        "REDIRECT",
        &[("istio", "ingressgateway")],
    ))
}

fn scoped(ctx: &PushContext) -> Arc<Scope> {
    ctx.scope_for(&proxy("sidecar~10.0.2.9~client.scoped~scoped.svc.cluster.local", "REDIRECT", &[("app", "client")]))
}

// ---------------------------------------------------------------- lookups

fn cluster<'a>(clusters: &'a [Cluster], name: &str) -> &'a Cluster {
    clusters.iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no cluster {name}"))
}

fn discovery_type(c: &Cluster) -> DiscoveryType {
    match c.cluster_discovery_type {
        Some(ClusterDiscoveryType::Type(t)) => DiscoveryType::try_from(t).unwrap(),
        ref other => panic!("{}: unexpected discovery type {other:?}", c.name),
    }
}

fn protocol_options(c: &Cluster) -> Option<HttpProtocolOptions> {
    c.typed_extension_protocol_options
        .get("envoy.extensions.upstreams.http.v3.HttpProtocolOptions")
        .map(|any| HttpProtocolOptions::decode(any.value.as_slice()).unwrap())
}

fn listener<'a>(listeners: &'a [Listener], name: &str) -> &'a Listener {
    listeners.iter().find(|l| l.name == name).unwrap_or_else(|| panic!("no listener {name}"))
}

fn socket(l: &Listener) -> (String, u32) {
    match l.address.as_ref().and_then(|a| a.address.as_ref()) {
        Some(address::Address::SocketAddress(s)) => match s.port_specifier {
            Some(PortSpecifier::PortValue(p)) => (s.address.clone(), p),
            _ => panic!("no port"),
        },
        _ => panic!("no socket address"),
    }
}

fn typed<T: Message + Default>(f: &Filter) -> T {
    match &f.config_type {
        Some(filter::ConfigType::TypedConfig(any)) => T::decode(any.value.as_slice()).unwrap(),
        _ => panic!("filter {} has no typed config", f.name),
    }
}

fn hcm(f: &Filter) -> HttpConnectionManager {
    assert_eq!(f.name, "envoy.filters.network.http_connection_manager");
    typed(f)
}

fn tcp(f: &Filter) -> TcpProxy {
    assert_eq!(f.name, "envoy.filters.network.tcp_proxy");
    typed(f)
}

fn rds_name(h: &HttpConnectionManager) -> &str {
    match &h.route_specifier {
        Some(RouteSpecifier::Rds(r)) => &r.route_config_name,
        other => panic!("not RDS: {other:?}"),
    }
}

fn vhost<'a>(rc: &'a RouteConfiguration, name: &str) -> &'a VirtualHost {
    rc.virtual_hosts.iter().find(|v| v.name == name).unwrap_or_else(|| panic!("{}: no virtual host {name}", rc.name))
}

fn config<'a>(configs: &'a [RouteConfiguration], name: &str) -> &'a RouteConfiguration {
    configs.iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no route config {name}"))
}

fn route_action(r: &Route) -> &envoy_types::pb::envoy::config::route::v3::RouteAction {
    match &r.action {
        Some(Action::Route(a)) => a,
        other => panic!("route {} is not a route action: {other:?}", r.name),
    }
}

fn single_cluster(r: &Route) -> &str {
    match &route_action(r).cluster_specifier {
        Some(ClusterSpecifier::Cluster(c)) => c,
        other => panic!("route {} has no single cluster: {other:?}", r.name),
    }
}

/// Cluster names a listener's filters send traffic to directly (tcp_proxy).
fn tcp_clusters(f: &TcpProxy) -> Vec<String> {
    match &f.cluster_specifier {
        Some(TcpClusterSpecifier::Cluster(c)) => vec![c.clone()],
        Some(TcpClusterSpecifier::WeightedClusters(w)) => w.clusters.iter().map(|c| c.name.clone()).collect(),
        None => panic!("tcp_proxy without a cluster"),
    }
}

fn route_clusters(r: &Route) -> Vec<String> {
    match &r.action {
        Some(Action::Route(a)) => match &a.cluster_specifier {
            Some(ClusterSpecifier::Cluster(c)) => vec![c.clone()],
            Some(ClusterSpecifier::WeightedClusters(w)) => w.clusters.iter().map(|c| c.name.clone()).collect(),
            other => panic!("unexpected cluster specifier {other:?}"),
        },
        _ => Vec::new(),
    }
}

// ---------------------------------------------------------------- CDS

#[test]
fn sidecar_gets_outbound_subset_inbound_and_special_clusters() {
    let ctx = context(bookinfo());
    let scope = productpage(&ctx, "REDIRECT");
    let mut clusters = cds::clusters(&ctx, &scope);
    let inbound = cds::inbound_clusters(&productpage_inbound(&ctx, "REDIRECT"));
    assert_eq!(inbound.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["inbound|9080||"]);
    clusters.extend(inbound);
    clusters.sort_by(|a, b| a.name.cmp(&b.name));

    let names: Vec<&str> = clusters.iter().map(|c| c.name.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(names, sorted, "clusters are sorted by name, each once");

    for name in [
        format!("outbound|9080||{REVIEWS}"),
        format!("outbound|9080|v1|{REVIEWS}"),
        format!("outbound|9080|v2|{REVIEWS}"),
        format!("outbound|9080|v3|{REVIEWS}"),
        format!("outbound|9080||{RATINGS}"),
        format!("outbound|27017||{MONGODB}"),
        "outbound|9080||billing.other.svc.cluster.local".to_string(),
        "inbound|9080||".to_string(),
        "BlackHoleCluster".to_string(),
        "PassthroughCluster".to_string(),
    ] {
        assert!(names.contains(&name.as_str()), "missing {name}");
    }

    let reviews = cluster(&clusters, &format!("outbound|9080|v2|{REVIEWS}"));
    assert_eq!(discovery_type(reviews), DiscoveryType::Eds);
    let eds = reviews.eds_cluster_config.as_ref().unwrap();
    assert_eq!(eds.service_name, reviews.name, "the EDS resource is named after the cluster");
    assert!(eds.eds_config.as_ref().unwrap().config_source_specifier.is_some(), "EDS comes over ADS");

    let inbound = cluster(&clusters, "inbound|9080||");
    assert_eq!(discovery_type(inbound), DiscoveryType::Static);
    let lbe = &inbound.load_assignment.as_ref().unwrap().endpoints[0].lb_endpoints[0];
    let Some(HostIdentifier::Endpoint(ep)) = &lbe.host_identifier else { panic!("no endpoint") };
    let Some(address::Address::SocketAddress(sa)) = ep.address.as_ref().unwrap().address.as_ref() else { panic!() };
    assert_eq!((sa.address.as_str(), sa.port_specifier.clone()), ("127.0.0.1", Some(PortSpecifier::PortValue(9080))));

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

    let ctx = context(bookinfo());
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
    let ctx = context(bookinfo());
    let scope = productpage(&ctx, "REDIRECT");
    let clusters = cds::clusters(&ctx, &scope);

    let v1 = cluster(&clusters, &format!("outbound|9080|v1|{REVIEWS}"));
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
    assert_eq!(v1.lb_policy, LbPolicy::RoundRobin as i32);

    let v2 = cluster(&clusters, &format!("outbound|9080|v2|{REVIEWS}"));
    assert_eq!(v2.lb_policy, LbPolicy::LeastRequest as i32);
    assert_eq!(v2.connect_timeout.unwrap().seconds, 2, "the subset keeps the rule's connection pool");

    let v3 = cluster(&clusters, &format!("outbound|9080|v3|{REVIEWS}"));
    assert_eq!(v3.lb_policy, LbPolicy::RingHash as i32);
    let Some(LbConfig::RingHashLbConfig(ring)) = &v3.lb_config else { panic!("ring hash config expected") };
    assert_eq!(ring.minimum_ring_size.unwrap().value, 2048);

    let ratings = cluster(&clusters, &format!("outbound|9080||{RATINGS}"));
    assert_eq!(ratings.connect_timeout.unwrap().seconds, 10, "Istio's default connect timeout");
    assert!(ratings.outlier_detection.is_none());
    assert!(protocol_options(ratings).is_none(), "plain HTTP/1.1 needs no protocol options");
    assert_eq!(ratings.circuit_breakers.as_ref().unwrap().thresholds[0].max_connections.unwrap().value, u32::MAX);
}

#[test]
fn grpc_ports_get_http2_upstreams_and_tcp_ports_none() {
    let ctx = context(bookinfo());
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
    let ctx = context(bookinfo());
    let clusters = cds::clusters(&ctx, &productpage(&ctx, "REDIRECT"));

    let dns = cluster(&clusters, "outbound|443||api.example.com");
    assert_eq!(discovery_type(dns), DiscoveryType::StrictDns);
    let cla = dns.load_assignment.as_ref().expect("DNS clusters carry their endpoints inline");
    let Some(HostIdentifier::Endpoint(ep)) = &cla.endpoints[0].lb_endpoints[0].host_identifier else { panic!() };
    let Some(address::Address::SocketAddress(sa)) = ep.address.as_ref().unwrap().address.as_ref() else { panic!() };
    assert_eq!(sa.address, "api.example.com");

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
    let mut mesh = bookinfo();
    mesh.push(service("default", "ingress", "10.96.9.1", &[("http", 8080)], "ingress"));
    let ctx = context(mesh);
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

// ---------------------------------------------------------------- EDS

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
    let ctx = context(bookinfo());
    let all = eds::load_assignment(&ctx, &format!("outbound|9080||{REVIEWS}")).unwrap();
    assert_eq!(
        addresses(&all),
        vec![("10.0.0.11".into(), 9080), ("10.0.0.12".into(), 9080), ("10.0.0.13".into(), 9080)]
    );
    let v2 = eds::load_assignment(&ctx, &format!("outbound|9080|v2|{REVIEWS}")).unwrap();
    assert_eq!(v2.cluster_name, format!("outbound|9080|v2|{REVIEWS}"));
    assert_eq!(addresses(&v2), vec![("10.0.0.12".into(), 9080)]);
    let lbe = &v2.endpoints[0].lb_endpoints[0];
    assert_eq!(lbe.health_status, HealthStatus::Healthy as i32);
    assert_eq!(lbe.load_balancing_weight.unwrap().value, 1);
}

#[test]
fn eds_groups_endpoints_by_locality_with_summed_weights() {
    let ctx = context(bookinfo());
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
        "endpoints sorted by address within a locality; host names are left out of EDS"
    );
    assert_eq!(us.lb_endpoints[1].load_balancing_weight.unwrap().value, 2);

    let v1 = eds::load_assignment(&ctx, "outbound|8443|v1|payments.corp.internal").unwrap();
    assert_eq!(addresses(&v1), vec![("10.1.0.3".into(), 8443), ("10.1.0.2".into(), 8443)]);
}

#[test]
fn eds_answers_empty_for_known_clusters_and_nothing_for_unknown_ones() {
    let ctx = context(bookinfo());
    let undefined_subset = eds::load_assignment(&ctx, &format!("outbound|9080|v9|{REVIEWS}")).unwrap();
    assert!(undefined_subset.endpoints.is_empty());
    let no_pods = eds::load_assignment(&ctx, "outbound|9080||details.default.svc.cluster.local").unwrap();
    assert!(no_pods.endpoints.is_empty(), "a known cluster without endpoints still gets an answer");
    assert!(eds::load_assignment(&ctx, &format!("outbound|1234||{REVIEWS}")).is_none(), "unknown port");
    assert!(eds::load_assignment(&ctx, "outbound|9080||nope.default.svc.cluster.local").is_none());
    assert!(eds::load_assignment(&ctx, "BlackHoleCluster").is_none());
    assert_eq!(eds::host_of(&format!("outbound|9080|v1|{REVIEWS}")), Some(REVIEWS));
    assert_eq!(eds::host_of("inbound|9080||"), None);
}

// ---------------------------------------------------------------- RDS

#[test]
fn virtual_service_routes_keep_order_matches_and_actions() {
    let ctx = context(bookinfo());
    let scope = productpage(&ctx, "REDIRECT");
    let configs = rds::route_configs(&ctx, &scope);
    let rc = config(&configs, "9080");
    let routes = &vhost(rc, &format!("{REVIEWS}:9080")).routes;
    let names: Vec<&str> = routes.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["jason", "canary", "moved", "api", "api", "rest"], "port-9999 match is left out");

    // Header match → subset v2.
    let m = routes[0].r#match.as_ref().unwrap();
    assert_eq!(m.headers[0].name, "end-user");
    let Some(HeaderMatchSpecifier::StringMatch(sm)) = &m.headers[0].header_match_specifier else { panic!() };
    assert_eq!(sm.match_pattern, Some(MatchPattern::Exact("jason".into())));
    assert_eq!(single_cluster(&routes[0]), format!("outbound|9080|v2|{REVIEWS}"));

    // Redirect.
    let Some(Action::Redirect(redirect)) = &routes[2].action else { panic!("redirect expected") };
    assert_eq!(redirect.host_redirect, "new.example.com");
    assert_eq!(redirect.path_rewrite_specifier, Some(PathRewriteSpecifier::PathRedirect("/new".into())));
    assert_eq!(redirect.response_code, RedirectResponseCode::Found as i32);

    // Weighted destinations, rewrite, timeout, retries.
    let api = route_action(&routes[3]);
    let Some(ClusterSpecifier::WeightedClusters(w)) = &api.cluster_specifier else { panic!("weighted expected") };
    let weights: Vec<(&str, u32)> = w.clusters.iter().map(|c| (c.name.as_str(), c.weight.unwrap().value)).collect();
    let (v1, v3) = (format!("outbound|9080|v1|{REVIEWS}"), format!("outbound|9080|v3|{REVIEWS}"));
    assert_eq!(weights, [(v1.as_str(), 80), (v3.as_str(), 20)], "a destination without a weight gets 0 and is dropped");
    assert_eq!(api.prefix_rewrite, "/v2/api");
    assert_eq!(api.host_rewrite_specifier, Some(HostRewriteSpecifier::HostRewriteLiteral("reviews.internal".into())));
    assert_eq!(api.timeout.unwrap().seconds, 3);
    let retry = api.retry_policy.as_ref().unwrap();
    assert_eq!(retry.num_retries.unwrap().value, 5);
    assert_eq!(retry.retry_on, "5xx,retriable-status-codes");
    assert_eq!(retry.retriable_status_codes, [503]);
    assert_eq!(retry.per_try_timeout.unwrap().seconds, 1);

    // The regex match of the same route rewrites the whole path.
    let regex_route = route_action(&routes[4]);
    assert!(matches!(routes[4].r#match.as_ref().unwrap().path_specifier, Some(PathSpecifier::SafeRegex(_))));
    assert_eq!(regex_route.prefix_rewrite, "");
    assert_eq!(regex_route.regex_rewrite.as_ref().unwrap().substitution, "/v2/api");

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
    let ctx = context(bookinfo());
    let configs = rds::route_configs(&ctx, &productpage(&ctx, "REDIRECT"));
    let routes = &vhost(config(&configs, "9080"), &format!("{REVIEWS}:9080")).routes;
    let canary = route_action(&routes[1]);
    let Some(PolicySpecifier::Header(h)) = &canary.hash_policy[0].policy_specifier else { panic!("header hash") };
    assert_eq!(h.header_name, "x-user");
    assert!(route_action(&routes[0]).hash_policy.is_empty(), "v2 does not hash");
    assert_eq!(route_action(&routes[3]).hash_policy.len(), 1, "the weighted route hashes as its v3 destination");
}

#[test]
fn hosts_without_virtual_service_get_a_default_route() {
    let ctx = context(bookinfo());
    let configs = rds::route_configs(&ctx, &productpage(&ctx, "REDIRECT"));
    let routes = &vhost(config(&configs, "9080"), &format!("{RATINGS}:9080")).routes;
    assert_eq!(routes.len(), 1);
    assert_eq!(routes[0].r#match.as_ref().unwrap().path_specifier, Some(PathSpecifier::Prefix("/".into())));
    assert_eq!(single_cluster(&routes[0]), format!("outbound|9080||{RATINGS}"));
    let action = route_action(&routes[0]);
    assert_eq!(action.retry_policy.as_ref().unwrap().num_retries.unwrap().value, 2);
    assert_eq!(action.timeout.unwrap().seconds, 0);
}

#[test]
fn virtual_host_domains_follow_istio_without_duplicates() {
    let ctx = context(bookinfo());
    let configs = rds::route_configs(&ctx, &productpage(&ctx, "REDIRECT"));
    let rc = config(&configs, "9080");
    let domains = |name: &str| vhost(rc, name).domains.clone();

    let reviews = domains(&format!("{REVIEWS}:9080"));
    for d in [
        REVIEWS,
        &format!("{REVIEWS}:9080"),
        "reviews",
        "reviews:9080",
        "reviews.default",
        "reviews.default:9080",
        "reviews.default.svc",
        "10.96.0.2",
        "10.96.0.2:9080",
    ] {
        assert!(reviews.contains(&d.to_string()), "reviews lacks {d}: {reviews:?}");
    }
    let ratings = domains(&format!("{RATINGS}:9080"));
    assert!(ratings.contains(&"10.96.0.3".to_string()), "the first host by name keeps a shared IP");
    let legacy = domains("zz-legacy-web.example.com:9080");
    assert_eq!(legacy, ["zz-legacy-web.example.com", "zz-legacy-web.example.com:9080"]);
    let billing = domains("billing.other.svc.cluster.local:9080");
    assert!(billing.contains(&"billing.other".to_string()) && billing.contains(&"billing.other:9080".to_string()));
    assert!(!billing.contains(&"billing".to_string()), "short names only for the proxy's own namespace");

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
    let ctx = context(bookinfo());
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

// ---------------------------------------------------------------- LDS

#[test]
fn none_mode_listeners_bind_localhost_and_skip_virtual_listeners() {
    let ctx = context(bookinfo());
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
    let ctx = context(bookinfo());
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
    assert_eq!(tcp_clusters(&tcp(&catch_all.filters[0])), ["PassthroughCluster"]);

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
fn gateway_gets_listeners_and_route_configs_for_its_server_ports() {
    let ctx = context(bookinfo());
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
    let paths: Vec<_> = star.routes.iter().map(|r| r.r#match.as_ref().unwrap().path_specifier.clone()).collect();
    assert_eq!(
        paths,
        [Some(PathSpecifier::Path("/productpage".into())), Some(PathSpecifier::Prefix("/static".into()))],
        "the mesh-only match is left out of the gateway"
    );
    assert_eq!(single_cluster(&star.routes[0]), format!("outbound|9080||{PRODUCTPAGE}"));
    let shop = vhost(rc, "shop.bookinfo.example.com:8080");
    assert_eq!(shop.domains, ["shop.bookinfo.example.com", "shop.bookinfo.example.com:8080"]);

    // Server `default/*.bookinfo.example.com` on 80 → 8081: the `*` rule
    // narrows to the server's host, the shop rule keeps its own.
    let alt = config(&configs, "http.8081");
    let names: Vec<&str> = alt.virtual_hosts.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["*.bookinfo.example.com:80", "shop.bookinfo.example.com:80"]);
    assert!(vhost(alt, "shop.bookinfo.example.com:80").domains.contains(&"shop.bookinfo.example.com:8081".to_string()));

    let lookup = rds::route_config(&ctx, &scope, "http.8080").unwrap();
    assert_eq!(&lookup, rc);
    assert!(rds::route_config(&ctx, &scope, "http.31400").is_none(), "TCP ports have no route config");
}

#[test]
fn gateway_port_without_bound_rules_serves_an_empty_route_config() {
    let ctx = context(bookinfo());
    let configs = rds::route_configs(&ctx, &ingress(&ctx));
    let empty = config(&configs, "http.9443");
    assert!(empty.virtual_hosts.is_empty(), "Envoy answers 404 rather than waiting for a missing config");
}

#[test]
fn gateway_server_bind_sets_the_listener_address() {
    let mut objects = bookinfo();
    objects.push(ConfigObject::Gateway(yaml(
        r#"
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
    )));
    let ctx = context(objects);
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
    let ctx = context(bookinfo());
    for scope in [productpage(&ctx, "REDIRECT"), productpage(&ctx, "NONE"), ingress(&ctx), scoped(&ctx)] {
        for rc in rds::route_configs(&ctx, &scope) {
            assert_eq!(rds::route_config(&ctx, &scope, &rc.name).as_ref(), Some(&rc));
        }
        assert!(rds::route_config(&ctx, &scope, "4242").is_none());
        assert!(rds::route_config(&ctx, &scope, "http.4242").is_none());
    }
}

// ---------------------------------------------------------------- invariants

#[test]
fn every_reference_resolves_and_nothing_is_duplicated() {
    let ctx = context(bookinfo());
    for scope in [productpage(&ctx, "REDIRECT"), productpage(&ctx, "NONE"), ingress(&ctx), scoped(&ctx)] {
        let clusters: HashSet<String> = cds::clusters(&ctx, &scope).into_iter().map(|c| c.name).collect();
        let configs = rds::route_configs(&ctx, &scope);
        let config_names: HashSet<&str> = configs.iter().map(|c| c.name.as_str()).collect();
        let listeners = lds::listeners(&ctx, &scope);

        let mut addresses = HashSet::new();
        for l in &listeners {
            assert!(addresses.insert(socket(l)), "{}: address used twice", l.name);
            let mut matches = HashSet::new();
            for chain in &l.filter_chains {
                let key = chain.filter_chain_match.as_ref().map(|m| m.encode_to_vec()).unwrap_or_default();
                assert!(matches.insert(key), "{}: two filter chains with the same match", l.name);
                for f in &chain.filters {
                    if f.name.ends_with("http_connection_manager") {
                        if let Some(RouteSpecifier::Rds(r)) = hcm(f).route_specifier {
                            assert!(
                                config_names.contains(r.route_config_name.as_str()),
                                "{}: no route config {}",
                                l.name,
                                r.route_config_name
                            );
                        }
                    } else {
                        for c in tcp_clusters(&tcp(f)) {
                            // Weighted TCP routes may name subsets no rule defines (Envoy then refuses
                            // those connections, as in Istio); everything else must exist.
                            assert!(clusters.contains(&c) || c.contains("|v"), "{}: no cluster {c}", l.name);
                        }
                    }
                }
            }
        }
        for rc in &configs {
            let mut domains = HashSet::new();
            let mut vhost_names = HashSet::new();
            for v in &rc.virtual_hosts {
                assert!(vhost_names.insert(&v.name), "{}: virtual host {} twice", rc.name, v.name);
                assert!(!v.domains.is_empty(), "{}: {} has no domains", rc.name, v.name);
                for d in &v.domains {
                    assert!(domains.insert(d), "{}: domain {d} twice", rc.name);
                }
                for c in v.routes.iter().flat_map(route_clusters) {
                    assert!(clusters.contains(&c), "{}/{}: no cluster {c}", rc.name, v.name);
                }
            }
        }
    }
}

#[test]
fn output_is_deterministic_across_builds_and_input_order() {
    let encode_all = |objects: Vec<ConfigObject>| {
        let ctx = context(objects);
        let mut bytes: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        for (label, scope) in
            [("redirect", productpage(&ctx, "REDIRECT")), ("none", productpage(&ctx, "NONE")), ("gw", ingress(&ctx))]
        {
            for c in cds::clusters(&ctx, &scope) {
                if let Some(cla) = eds::load_assignment(&ctx, &c.name) {
                    bytes.insert(format!("eds {}", c.name), cla.encode_to_vec());
                }
                bytes.insert(format!("{label} cds {}", c.name), c.encode_to_vec());
            }
            for l in lds::listeners(&ctx, &scope) {
                bytes.insert(format!("{label} lds {}", l.name), l.encode_to_vec());
            }
            for r in rds::route_configs(&ctx, &scope) {
                bytes.insert(format!("{label} rds {}", r.name), r.encode_to_vec());
            }
        }
        bytes
    };
    let first = encode_all(bookinfo());
    let second = encode_all(bookinfo());
    let mut reversed = bookinfo();
    reversed.reverse();
    let third = encode_all(reversed);
    assert!(first.len() > 40, "fixture produces a real configuration");
    assert_eq!(first, second, "two builds encode identically");
    assert_eq!(first, third, "input order does not leak into the output");
}

// ---------------------------------------------------------------- real Envoy

/// Runs `envoy --mode validate` on a bootstrap holding everything generated
/// for each scope: listeners and clusters as static resources, every route
/// config inline in a listener of its own (so Envoy also checks that routed
/// clusters exist), and every EDS assignment as a static cluster's
/// endpoints. Installs Envoy through `scripts/install-envoy.sh` when missing.
#[test]
fn envoy_accepts_everything_generated() {
    use envoy_types::pb::envoy::config::bootstrap::v3::{
        Bootstrap,
        bootstrap::{DynamicResources, StaticResources},
    };
    use envoy_types::pb::envoy::config::core::v3::{
        ApiConfigSource, ApiVersion, GrpcService, Node,
        api_config_source::ApiType,
        grpc_service::{EnvoyGrpc, TargetSpecifier},
    };
    use envoy_types::pb::envoy::extensions::filters::http::router::v3::Router;
    use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{HttpFilter, http_filter};

    // The one recipe for getting Envoy: scripts/install-envoy.sh prints its path.
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/install-envoy.sh");
    let out = std::process::Command::new("bash").arg(&script).output().expect("running install-envoy.sh");
    assert!(out.status.success(), "install-envoy.sh failed: {}", String::from_utf8_lossy(&out.stderr));
    let envoy = std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim().to_string());
    let ctx = context(bookinfo());
    let dir = tempfile::tempdir().unwrap();
    // The ADS cluster the `ads: {}` config sources point at.
    let mut xds = cds::clusters(&ctx, &productpage(&ctx, "REDIRECT"))
        .into_iter()
        .find(|c| c.name.starts_with("outbound|7070|"))
        .expect("the gRPC cluster carries HTTP/2 options");
    xds.name = "xds".into();
    xds.cluster_discovery_type = Some(ClusterDiscoveryType::Type(DiscoveryType::Static as i32));
    xds.eds_cluster_config = None;
    xds.load_assignment = Some(envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment {
        cluster_name: "xds".into(),
        ..Default::default()
    });
    for (label, scope, inbound) in [
        ("redirect", productpage(&ctx, "REDIRECT"), Some(productpage_inbound(&ctx, "REDIRECT"))),
        ("none", productpage(&ctx, "NONE"), Some(productpage_inbound(&ctx, "NONE"))),
        ("gateway", ingress(&ctx), None),
        ("scoped", scoped(&ctx), None),
    ] {
        let mut clusters = cds::clusters(&ctx, &scope);
        clusters.extend(inbound.iter().flat_map(cds::inbound_clusters));
        // EDS clusters only: DNS clusters carry their (host name) endpoints inline.
        let assignments: Vec<_> = clusters
            .iter()
            .filter(|c| c.eds_cluster_config.is_some())
            .filter_map(|c| eds::load_assignment(&ctx, &c.name))
            .collect();
        for (i, mut cla) in assignments.into_iter().enumerate() {
            let name = format!("eds-check-{i}");
            cla.cluster_name = name.clone();
            clusters.push(Cluster {
                name,
                connect_timeout: Some(envoy_types::pb::google::protobuf::Duration { seconds: 1, nanos: 0 }),
                cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Static as i32)),
                load_assignment: Some(cla),
                ..Default::default()
            });
        }
        clusters.push(xds.clone());

        let mut listeners = lds::listeners(&ctx, &scope);
        listeners.extend(inbound.iter().flat_map(lds::inbound_listeners));
        for (i, rc) in rds::route_configs(&ctx, &scope).into_iter().enumerate() {
            let mut manager = HttpConnectionManager {
                stat_prefix: format!("rds_check_{i}"),
                route_specifier: Some(RouteSpecifier::RouteConfig(rc)),
                ..Default::default()
            };
            manager.http_filters = vec![HttpFilter {
                name: "envoy.filters.http.router".into(),
                config_type: Some(http_filter::ConfigType::TypedConfig(super::proto::any(&Router::default()))),
                ..Default::default()
            }];
            listeners.push(Listener {
                name: format!("rds-check-{i}"),
                address: Some(super::proto::socket_address("127.0.0.2", 20000 + i as u32)),
                filter_chains: vec![envoy_types::pb::envoy::config::listener::v3::FilterChain {
                    filters: vec![Filter {
                        name: "envoy.filters.network.http_connection_manager".into(),
                        config_type: Some(filter::ConfigType::TypedConfig(super::proto::any(&manager))),
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            });
        }

        let bootstrap = Bootstrap {
            node: Some(Node { id: format!("{label}~check"), cluster: "check".into(), ..Default::default() }),
            static_resources: Some(StaticResources { listeners, clusters, ..Default::default() }),
            dynamic_resources: Some(DynamicResources {
                ads_config: Some(ApiConfigSource {
                    api_type: ApiType::Grpc as i32,
                    transport_api_version: ApiVersion::V3 as i32,
                    grpc_services: vec![GrpcService {
                        target_specifier: Some(TargetSpecifier::EnvoyGrpc(EnvoyGrpc {
                            cluster_name: "xds".into(),
                            ..Default::default()
                        })),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let path = dir.path().join(format!("{label}.pb"));
        std::fs::write(&path, bootstrap.encode_to_vec()).unwrap();
        let out = std::process::Command::new(&envoy)
            .args(["--mode", "validate", "--log-level", "warn", "-c"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{label}: Envoy refused the configuration:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
