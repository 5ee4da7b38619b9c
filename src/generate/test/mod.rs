//! Generator tests on `examples/bookinfo` with the cases it lacks on top
//! (`tests/data/mesh-cases.yaml`).
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
use prost::Message;

use super::{cds, eds, lds, rds};

use crate::model::store::Write;
use crate::model::{ConfigStore, Proxy};
use crate::push::{PushContext, Scope, ScopeInterner};

mod access_log;
mod authz;
mod clusters;
mod coverage;
mod endpoints;
mod ext_authz;
mod features;
mod gateway_api;
mod invariants;
mod jwt;
mod listeners;
mod mesh_traffic;
mod mtls;
mod networks;
mod routes;
mod service_shapes;
mod telemetry;
mod tls;

// ---------------------------------------------------------------- fixture

/// bookinfo's reviews, and the services of `tests/data/mesh-cases.yaml`
/// the tests look at most.
const REVIEWS: &str = "reviews.default.svc.cluster.local";
const CATALOG: &str = "catalog.default.svc.cluster.local";
const INVENTORY: &str = "inventory.default.svc.cluster.local";
const PRODUCTPAGE: &str = "productpage.default.svc.cluster.local";
const MONGODB: &str = "mongodb.default.svc.cluster.local";

/// The test mesh: `examples/bookinfo` and the cases it lacks
/// (`testing::bookinfo::with_cases`).
fn mesh() -> Vec<Write> {
    crate::testing::bookinfo::with_cases()
}

/// The mesh with more objects (YAML documents) on top.
fn mesh_with(yaml: &str) -> Vec<Write> {
    let mut writes = mesh();
    writes.extend(crate::testing::bookinfo::puts(yaml));
    writes
}

fn context(writes: Vec<Write>) -> PushContext {
    let store = ConfigStore::new();
    store.apply(writes);
    PushContext::build(store.snapshot(), 1, Arc::new(ScopeInterner::default()))
}

use crate::testing::bookinfo::proxy;

/// An endpoint's socket address: `(address, port)`.
fn socket_of(e: &envoy_types::pb::envoy::config::endpoint::v3::LbEndpoint) -> (String, u32) {
    let Some(HostIdentifier::Endpoint(ep)) = &e.host_identifier else { panic!("an endpoint") };
    let Some(address::Address::SocketAddress(sa)) = ep.address.as_ref().unwrap().address.as_ref() else {
        panic!("a socket address")
    };
    let Some(PortSpecifier::PortValue(p)) = sa.port_specifier else { panic!("a port") };
    (sa.address.clone(), p)
}

fn productpage(ctx: &PushContext, mode: &str) -> Arc<Scope> {
    ctx.scope_for(&crate::testing::bookinfo::productpage_in(mode))
}

/// The inbound key of the productpage workload.
fn productpage_inbound(ctx: &PushContext, mode: &str) -> crate::push::InboundKey {
    (*ctx.inbound_for(&crate::testing::bookinfo::productpage_in(mode)).1).clone()
}

fn ingress(ctx: &PushContext) -> Arc<Scope> {
    ctx.scope_for(&crate::testing::bookinfo::ingress())
}

fn scoped(ctx: &PushContext) -> Arc<Scope> {
    ctx.scope_for(&crate::testing::bookinfo::scoped_client())
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

/// Every HTTP connection manager of `listeners`, chain by chain.
fn connection_managers(listeners: &[Listener]) -> Vec<HttpConnectionManager> {
    listeners
        .iter()
        .flat_map(|l| &l.filter_chains)
        .flat_map(|c| &c.filters)
        .filter(|f| f.name == "envoy.filters.network.http_connection_manager")
        .map(hcm)
        .collect()
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
