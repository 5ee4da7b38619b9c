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
use crate::config::istio::TlsMode;
use crate::model::service::Location;
use crate::model::{Hostname, Service, host};
use crate::push::index::{GatewayServer, ResolvedGateway, ResolvedVirtualService};
use crate::push::{PushContext, Scope};

/// How a port's connections are handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortKind {
    /// Plain HTTP: one HTTP connection manager, route config `http.PORT`.
    Http,
    /// Plain TCP: tcp_proxy.
    Tcp,
    /// TLS: a filter chain per server, chosen by SNI.
    Tls,
}

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

/// Whether a Gateway server protocol is served through HTTP routing.
pub fn is_http(protocol: &str) -> bool {
    matches!(protocol, "HTTP" | "HTTP2" | "GRPC" | "GRPC-WEB")
}

/// The kind of port a server needs.
pub fn kind_of(server: &GatewayServer) -> PortKind {
    match server.mode {
        TlsMode::Plain if is_http(&server.protocol) => PortKind::Http,
        TlsMode::Plain => PortKind::Tcp,
        _ => PortKind::Tls,
    }
}

/// Whether a server is HTTPS that the router terminates: its own HTTP
/// connection manager and route config.
pub fn terminates_https(server: &GatewayServer) -> bool {
    server.mode.terminates() && &*server.protocol == "HTTPS"
}

/// The route config name of a server: `http.PORT` for a plain HTTP one, a
/// name of its own for an HTTPS one that terminates TLS, `None` for the rest.
pub fn route_name(gw: &ResolvedGateway, server: &GatewayServer) -> Option<String> {
    if terminates_https(server) {
        let (namespace, name) = (&*gw.key.namespace, &*gw.key.name);
        return Some(naming::https_gateway_route(
            server.port,
            &server.port_name,
            name,
            namespace,
            server.bind.as_deref(),
        ));
    }
    (kind_of(server) == PortKind::Http).then(|| naming::gateway_route(server.bind_port))
}

/// Every port of a router scope, sorted by port.
pub fn gateway_ports<'a>(_ctx: &PushContext, scope: &'a Scope) -> Vec<GatewayPort<'a>> {
    let mut ports: BTreeMap<u32, GatewayPort<'a>> = BTreeMap::new();
    // TLS hosts claimed per port: a repeated one would repeat a chain match.
    let mut tls_hosts: BTreeMap<u32, BTreeSet<&'a str>> = BTreeMap::new();
    for gw in &scope.gateways {
        for server in &gw.servers {
            let port = server.bind_port;
            if port == 0 {
                continue;
            }
            let kind = kind_of(server);
            let bind = server.bind.as_deref().unwrap_or(naming::WILDCARD_ADDRESS);
            let entry = ports.entry(port).or_insert_with(|| GatewayPort { port, bind, kind, servers: Vec::new() });
            if entry.kind != kind {
                tracing::debug!(gateway = %gw.name, port, protocol = %server.protocol, "server kind conflicts with an earlier server on the port; skipped");
                continue;
            }
            if entry.bind != bind {
                tracing::debug!(gateway = %gw.name, port, bind, "server bind address conflicts with an earlier server on the port; skipped");
                continue;
            }
            if kind == PortKind::Tls {
                let claimed = tls_hosts.entry(port).or_default();
                if server.hosts.iter().any(|(_, h)| claimed.contains(&**h)) {
                    tracing::debug!(gateway = %gw.name, port, "TLS server repeats a host of an earlier server on the port; skipped");
                    continue;
                }
                claimed.extend(server.hosts.iter().map(|(_, h)| &**h));
            }
            entry.servers.push((gw, server));
        }
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
    let ports = gateway_ports(ctx, scope);
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
