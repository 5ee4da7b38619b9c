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

mod clusters;
mod endpoints;
mod envoy;
mod invariants;
mod listeners;
mod routes;

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
