//! The ports of a router scope: one listener per port the router binds,
//! with the Gateway servers that share it.
//!
//! LDS (listeners `0.0.0.0_PORT`) and RDS (route configs `http.PORT`) both
//! read this one plan. A server binds its `targetPort` when it has one, else
//! its `number`; servers of every Gateway the router serves that bind the
//! same port share one listener. The first server on a port (Gateways in key
//! order, servers in spec order) decides whether the port is HTTP or TCP
//! and which address it binds (`bind`, else `0.0.0.0`); servers of the
//! other kind or with another bind address on that port are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::naming;
use crate::config::ConfigObject;
use crate::model::{Hostname, host};
use crate::push::index::{GatewayServer, ResolvedGateway, ResolvedVirtualService};
use crate::push::{PushContext, Scope};

/// One port a router binds.
#[derive(Debug)]
pub struct GatewayPort<'a> {
    /// The port bound (the servers' `targetPort`, else their `number`).
    pub port: u32,
    /// The address bound: the first server's `bind`, else `0.0.0.0`.
    pub bind: &'a str,
    /// Whether the port goes through an HTTP connection manager.
    pub http: bool,
    /// The servers on it, with their Gateway.
    pub servers: Vec<(&'a Arc<ResolvedGateway>, &'a GatewayServer)>,
}

/// Whether a Gateway server protocol is served through HTTP routing.
pub fn is_http(protocol: &str) -> bool {
    matches!(protocol, "HTTP" | "HTTP2" | "GRPC")
}

/// Every port of a router scope, sorted by port.
pub fn gateway_ports<'a>(ctx: &PushContext, scope: &'a Scope) -> Vec<GatewayPort<'a>> {
    let mut ports: BTreeMap<u32, GatewayPort<'a>> = BTreeMap::new();
    for gw in &scope.gateways {
        for (i, server) in gw.servers.iter().enumerate() {
            let port = target_port(ctx, gw, i).unwrap_or(server.port);
            if port == 0 {
                continue;
            }
            let http = is_http(&server.protocol);
            let bind = server.bind.as_deref().unwrap_or(naming::WILDCARD_ADDRESS);
            let entry = ports.entry(port).or_insert_with(|| GatewayPort { port, bind, http, servers: Vec::new() });
            if entry.http != http {
                tracing::debug!(gateway = %gw.name, port, protocol = %server.protocol, "server protocol conflicts with an earlier server on the port; skipped");
                continue;
            }
            if entry.bind != bind {
                tracing::debug!(gateway = %gw.name, port, bind, "server bind address conflicts with an earlier server on the port; skipped");
                continue;
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

/// The `targetPort` of server `index`, read from the stored Gateway (the
/// resolved server does not carry it).
fn target_port(ctx: &PushContext, gw: &ResolvedGateway, index: usize) -> Option<u32> {
    match &ctx.store.get(&gw.key)?.object {
        ConfigObject::Gateway(g) => g.spec.servers.get(index)?.port.target_port.filter(|p| *p != 0),
        _ => None,
    }
}
