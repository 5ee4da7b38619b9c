//! The ports of a router scope: one listener per port the router binds,
//! with the Gateway servers that share it.
//!
//! LDS (listeners `0.0.0.0_PORT`) and RDS (route configs `http.PORT`, and
//! `https.…` per HTTPS server that terminates TLS) both read this one plan.
//! A server binds its `targetPort` when it has one, else its `number`;
//! servers of every Gateway the router serves that bind the same port share
//! one listener. A port is one of three kinds, as in Istio: plain HTTP
//! (servers merged into one route config), plain TCP, or TLS (HTTPS and TLS
//! servers, one filter chain per server, chosen by SNI). The first server
//! on a port (Gateways in key order, servers in spec order) decides its
//! kind and the address it binds (`bind`, else `0.0.0.0`); a later server
//! of another kind or bind address is left out, and so is a TLS server
//! that repeats a host an earlier one on the port has (Envoy would refuse
//! two chains with one match).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::naming;
use crate::config::istio::{TlsMode, port_conflicts};
use crate::model::service::Location;
use crate::model::{Hostname, Service, host};
use crate::push::index::{GatewayServer, ResolvedGateway, ResolvedVirtualService};
use crate::push::{PushContext, Scope};

pub use crate::config::istio::PortKind;

/// One port a router binds.
#[derive(Debug)]
pub struct GatewayPort<'a> {
    /// The port bound (the servers' `targetPort`, else their `number`).
    pub port: u32,
    /// The address bound: the first server's `bind`, else `0.0.0.0`.
    pub bind: &'a str,
    /// How its connections are handled.
    pub kind: PortKind,
    /// The servers on it, with their Gateway.
    pub servers: Vec<(&'a Arc<ResolvedGateway>, &'a GatewayServer)>,
}

/// The kind of port a server needs (every indexed server can be served).
pub fn kind_of(server: &GatewayServer) -> PortKind {
    server.spec.port_kind().unwrap_or(PortKind::Tcp)
}

/// Whether a server is HTTPS that the router terminates: its own HTTP
/// connection manager and route config.
pub fn terminates_https(server: &GatewayServer) -> bool {
    server.mode.terminates() && &*server.protocol == "HTTPS"
}

/// The route config name of a server: `http.PORT` for a plain HTTP one, a
/// name of its own for an HTTPS one that terminates TLS, `None` for the rest.
pub fn route_name(scope: &Scope, gw: &ResolvedGateway, server: &GatewayServer) -> Option<String> {
    if terminates_https(server) {
        let (namespace, name) = (&*gw.key.namespace, &*gw.key.name);
        return Some(naming::https_gateway_route(server.port, &server.port_name, name, namespace, bind(scope, server)));
    }
    (kind_of(server) == PortKind::Http).then(|| naming::gateway_route(server.bind_port))
}

/// The address a server's listener binds, when not `0.0.0.0`: its `bind`,
/// or (for a Gateway API listener) the Gateway's requested address when the
/// router holds it.
pub fn bind<'a>(scope: &'a Scope, server: &'a GatewayServer) -> Option<&'a str> {
    server.bind.as_deref().or_else(|| server.addresses.iter().find(|a| scope.key.addresses.contains(a)).map(|a| &**a))
}

/// Every port of a router scope, sorted by port. Which servers share a
/// port and which are left out is `config::istio::port_conflicts`'s call,
/// the rule validation and the reference check report by.
pub fn gateway_ports<'a>(scope: &'a Scope) -> Vec<GatewayPort<'a>> {
    let all: Vec<(&'a Arc<ResolvedGateway>, &'a GatewayServer)> =
        scope.gateways.iter().flat_map(|gw| gw.servers.iter().map(move |s| (gw, s))).collect();
    let left_out: BTreeSet<usize> =
        port_conflicts(all.iter().map(|(gw, s)| (gw.name.to_string(), &*s.spec))).into_iter().map(|(i, _)| i).collect();
    let mut ports: BTreeMap<u32, GatewayPort<'a>> = BTreeMap::new();
    for (i, (gw, server)) in all.into_iter().enumerate() {
        let port = server.bind_port;
        if port == 0 || left_out.contains(&i) {
            continue;
        }
        let bind = bind(scope, server).unwrap_or(naming::WILDCARD_ADDRESS);
        let kind = kind_of(server);
        ports
            .entry(port)
            .or_insert_with(|| GatewayPort { port, bind, kind, servers: Vec::new() })
            .servers
            .push((gw, server));
    }
    ports.into_values().collect()
}

/// The hosts of `vs` a server admits: for each server host whose namespace
/// admits the rule and whose pattern overlaps a rule host, the narrower of
/// the two (`*` and `bookinfo.example.com` give `bookinfo.example.com`).
pub fn server_hosts(server: &GatewayServer, vs: &ResolvedVirtualService) -> BTreeSet<Hostname> {
    let mut out = BTreeSet::new();
    for (ns, pattern) in &server.hosts {
        if &**ns != "*" && **ns != *vs.key.namespace {
            continue;
        }
        for h in &vs.hosts {
            if host::matches(pattern, h) {
                out.insert(h.clone());
            } else if host::matches(h, pattern) {
                out.insert(pattern.clone());
            }
        }
    }
    out
}

/// A cluster an AUTO_PASSTHROUGH server routes to by SNI: a service port,
/// and a subset of its DestinationRule or none.
#[derive(Debug)]
pub struct SniTarget<'a> {
    /// The service.
    pub service: &'a Service,
    /// Its port.
    pub port: u32,
    /// The subset, empty for the whole service.
    pub subset: String,
    /// The cluster, and the SNI that selects it (`outbound_.PORT_.SUBSET_.HOST`).
    pub cluster: String,
}

/// What the AUTO_PASSTHROUGH servers of a router reach, as Istio builds it:
/// every visible service of the mesh (not a ServiceEntry's external one)
/// whose host one of those servers' hosts matches, on each of its ports,
/// and each subset of its DestinationRule. Sorted by cluster name.
pub fn sni_targets<'a>(ctx: &PushContext, scope: &'a Scope) -> Vec<SniTarget<'a>> {
    let ports = gateway_ports(scope);
    let servers: Vec<&GatewayServer> = ports
        .iter()
        .flat_map(|p| p.servers.iter().map(|(_, s)| *s))
        .filter(|s| s.mode == TlsMode::AutoPassthrough)
        .collect();
    sni_targets_of(ctx, scope, &servers)
}

/// What the AUTO_PASSTHROUGH `servers` reach (see [`sni_targets`]).
pub fn sni_targets_of<'a>(ctx: &PushContext, scope: &'a Scope, servers: &[&GatewayServer]) -> Vec<SniTarget<'a>> {
    if servers.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for svc in scope.services.iter().filter(|s| !s.is_alias() && s.location != Location::MeshExternal) {
        let reached = servers.iter().any(|s| {
            s.hosts
                .iter()
                .any(|(ns, pattern)| (&**ns == "*" || **ns == *svc.namespace) && host::matches(pattern, &svc.hostname))
        });
        if !reached {
            continue;
        }
        let rule = ctx.destination_rules.for_host(&scope.key.namespace, &svc.namespace, &svc.hostname);
        let subsets: Vec<String> = rule
            .map(|r| r.spec.subsets.iter().filter(|s| !s.name.is_empty()).map(|s| s.name.clone()).collect())
            .unwrap_or_default();
        for port in &svc.ports {
            for subset in std::iter::once(String::new()).chain(subsets.iter().cloned()) {
                let cluster = naming::sni_dnat_cluster(port.port, &subset, &svc.hostname);
                out.push(SniTarget { service: svc, port: port.port, subset, cluster });
            }
        }
    }
    out.sort_by(|a, b| a.cluster.cmp(&b.cluster));
    out
}
