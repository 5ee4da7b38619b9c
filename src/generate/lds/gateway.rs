//! The listeners of a router: one per port of the gateway plan
//! (`generate::gateway`), named `BIND_PORT`.
//!
//! * A plain HTTP port has one chain: the HTTP connection manager with
//!   route config `http.PORT`.
//! * A plain TCP port has one chain: tcp_proxy to the first TCP route of
//!   a VirtualService bound to one of its servers (`BlackHoleCluster` without).
//! * A TLS port has a chain per server, matched by SNI (the server's hosts,
//!   none for `*`), with a `tls_inspector` to read it, as Istio builds them:
//!   an HTTPS server that terminates TLS gets its TLS context and its own
//!   connection manager and route config (`https.443.NAME.GATEWAY.NS`); a
//!   TLS server that terminates gets its TLS context and tcp_proxy by the
//!   TCP routes bound to it; a PASSTHROUGH server gets a chain per TLS
//!   route match bound to it, by that match's `sniHosts`; an
//!   AUTO_PASSTHROUGH server a chain per cluster it reaches, by the SNI
//!   that names the cluster. An ISTIO_MUTUAL server terminates mesh mTLS
//!   on the router's own workload certificate (`generate::mtls`).
//!
//! Every chain runs the RBAC filters of the AuthorizationPolicies that
//! select the router before its connection manager or tcp_proxy
//! (`generate::authz`), and an HTTP one the JWT filter of the
//! RequestAuthentications that select it before those (`generate::jwt`).
//!
//! A server whose chain cannot be built (a Secret it names is missing, no
//! route is bound to it, an ISTIO_MUTUAL server on a router without a
//! workload certificate) is left out with a warning; the port's other
//! servers are served. A port left with no chain has no listener.

use std::collections::BTreeSet;

use envoy_types::pb::envoy::config::core::v3::TrafficDirection;
use envoy_types::pb::envoy::config::listener::v3::{
    FilterChain, FilterChainMatch, Listener, ListenerFilter, listener_filter,
};
use envoy_types::pb::envoy::extensions::filters::listener::tls_inspector::v3::TlsInspector;

use super::{guarded_http_connection_manager, guarded_tcp_proxy, rds};
use crate::config::istio::TlsMode;
use crate::generate::gateway::{self, GatewayPort, PortKind};
use crate::generate::route::{Backends, RouteTarget};
use crate::generate::{access_log, mtls, naming, proto, tls};
use crate::push::index::{GatewayServer, ResolvedGateway};
use crate::push::{PushContext, Scope};

/// The listener filter that reads SNI and ALPN.
pub const TLS_INSPECTOR: &str = "envoy.filters.listener.tls_inspector";

/// The ALPNs of Istio's mutual TLS between proxies: an AUTO_PASSTHROUGH
/// chain takes only connections that offer one (Istio's `allIstioMtlsALPNs`),
/// so that nothing reaches a cluster through it without mesh mTLS.
pub const ISTIO_MTLS_ALPNS: [&str; 5] =
    ["istio", "istio-peer-exchange", "istio-http/1.0", "istio-http/1.1", "istio-h2"];

/// Every listener of a router scope.
pub fn listeners(ctx: &PushContext, scope: &Scope) -> Vec<Listener> {
    gateway::gateway_ports(scope).iter().filter_map(|p| listener(ctx, scope, p)).collect()
}

fn listener(ctx: &PushContext, scope: &Scope, p: &GatewayPort<'_>) -> Option<Listener> {
    let name = naming::listener(p.bind, p.port);
    let (authz, jwt_rules) = (&scope.key.authorization, &scope.key.jwt_rules);
    let chains = match p.kind {
        PortKind::Http => vec![FilterChain {
            filters: vec![guarded_http_connection_manager(
                format!("outbound_{name}"),
                rds(naming::gateway_route(p.port)),
                authz,
                jwt_rules,
                &scope.key.telemetry,
            )],
            ..Default::default()
        }],
        PortKind::Tcp => {
            let backends = p.servers.iter().find_map(|(gw, server)| tcp_backends(ctx, scope, gw, server));
            let backends = backends.unwrap_or_else(|| Backends::Single(naming::BLACKHOLE_CLUSTER.to_string()));
            vec![FilterChain {
                filters: guarded_tcp_proxy(&format!("outbound_{name}"), backends, authz, &scope.key.telemetry),
                ..Default::default()
            }]
        }
        PortKind::Tls => tls_chains(ctx, scope, p),
    };
    if chains.is_empty() {
        return None;
    }
    let inspects = chains.iter().any(|c| c.transport_socket.is_some() || c.filter_chain_match.is_some());
    Some(Listener {
        name,
        address: Some(proto::socket_address(p.bind, p.port)),
        listener_filters: if inspects { vec![tls_inspector()] } else { Vec::new() },
        filter_chains: chains,
        traffic_direction: TrafficDirection::Outbound as i32,
        access_log: access_log::listener_logs(&scope.key.telemetry),
        ..Default::default()
    })
}

pub(super) fn tls_inspector() -> ListenerFilter {
    ListenerFilter {
        name: TLS_INSPECTOR.to_string(),
        config_type: Some(listener_filter::ConfigType::TypedConfig(proto::any(&TlsInspector::default()))),
        ..Default::default()
    }
}

/// The backends of the first TCP route bound to `server`, if any.
fn tcp_backends(ctx: &PushContext, scope: &Scope, gw: &ResolvedGateway, server: &GatewayServer) -> Option<Backends> {
    let target = RouteTarget::new(ctx, scope, server.port, &gw.name);
    ctx.virtual_services
        .for_gateway(&gw.name)
        .filter(|vs| vs.export_to.visible_to(&scope.key.namespace))
        .filter(|vs| !gateway::server_hosts(server, vs).is_empty())
        .find_map(|vs| target.tcp_backends(vs, &[]))
}

/// A chain match on SNI names; `None` for a chain that takes any.
fn sni_match(names: Vec<String>, alpn: &[&str]) -> Option<FilterChainMatch> {
    (!names.is_empty() || !alpn.is_empty()).then(|| FilterChainMatch {
        server_names: names,
        application_protocols: alpn.iter().map(|a| a.to_string()).collect(),
        ..Default::default()
    })
}

/// The chains of a TLS port, server by server.
fn tls_chains(ctx: &PushContext, scope: &Scope, p: &GatewayPort<'_>) -> Vec<FilterChain> {
    let (authz, jwt_rules) = (&scope.key.authorization, &scope.key.jwt_rules);
    let mut chains: Vec<FilterChain> = Vec::new();
    // SNI names already matched by a chain of this listener: a repeated
    // match would make Envoy refuse the listener, so the later one is left out.
    let mut claimed: BTreeSet<String> = BTreeSet::new();
    let mut claim = |names: &[String]| {
        let key = if names.is_empty() { vec!["*".to_string()] } else { names.to_vec() };
        if key.iter().any(|n| claimed.contains(n)) {
            return false;
        }
        claimed.extend(key);
        true
    };
    for (gw, server) in &p.servers {
        let at = format!("{} spec.servers[{}]", gw.key, server.index);
        match server.mode {
            TlsMode::Simple | TlsMode::Mutual | TlsMode::OptionalMutual | TlsMode::IstioMutual => {
                let socket = if server.mode == TlsMode::IstioMutual {
                    // The router's own certificate, from its agent.
                    if !scope.key.mesh_certificates {
                        tracing::warn!(server = %at, "gateway server not served: ISTIO_MUTUAL needs the gateway's workload certificate (run it with `meshpush agent`)");
                        continue;
                    }
                    let Some(settings) = server.tls() else { continue };
                    mtls::gateway_server_socket(settings, gateway::terminates_https(server))
                } else {
                    match tls::server_context(&ctx.secrets, &scope.key.namespace, server) {
                        Ok(context) => tls::downstream_socket(&context),
                        Err(reason) => {
                            tracing::warn!(server = %at, "gateway server not served: {reason}");
                            continue;
                        }
                    }
                };
                let filters = if gateway::terminates_https(server) {
                    let route = gateway::route_name(scope, gw, server).expect("an HTTPS server has a route config");
                    let stat_prefix = server.name.as_deref().map_or_else(|| route.clone(), str::to_string);
                    vec![guarded_http_connection_manager(
                        stat_prefix,
                        rds(route),
                        authz,
                        jwt_rules,
                        &scope.key.telemetry,
                    )]
                } else {
                    let Some(backends) = tcp_backends(ctx, scope, gw, server) else {
                        tracing::warn!(server = %at, "gateway server not served: no TCP route of a VirtualService bound to it");
                        continue;
                    };
                    guarded_tcp_proxy(
                        &format!("outbound_{}", naming::listener(p.bind, p.port)),
                        backends,
                        authz,
                        &scope.key.telemetry,
                    )
                };
                let names = server.sni_hosts();
                if !claim(&names) {
                    continue;
                }
                chains.push(FilterChain {
                    name: format!("{}.{}", gw.name, server.port_name),
                    filter_chain_match: sni_match(names, &[]),
                    transport_socket: Some(socket),
                    filters,
                    ..Default::default()
                });
            }
            TlsMode::Passthrough => {
                let target = RouteTarget::new(ctx, scope, server.port, &gw.name);
                let bound = ctx
                    .virtual_services
                    .for_gateway(&gw.name)
                    .filter(|vs| vs.export_to.visible_to(&scope.key.namespace))
                    .filter(|vs| !gateway::server_hosts(server, vs).is_empty());
                for vs in bound {
                    for (sni, backends) in target.tls_routes(vs) {
                        let mut names: Vec<String> = sni.iter().map(|h| h.to_ascii_lowercase()).collect();
                        names.sort();
                        names.dedup();
                        if names.iter().any(|n| n == "*") {
                            names.clear();
                        }
                        if !claim(&names) {
                            tracing::debug!(server = %at, rule = %vs.key, "TLS route repeats SNI hosts of an earlier one on the port; skipped");
                            continue;
                        }
                        let cluster = match &backends {
                            Backends::Single(c) => c.clone(),
                            Backends::Weighted(w) => w.first().map(|(c, _)| c.clone()).unwrap_or_default(),
                        };
                        chains.push(FilterChain {
                            name: format!("{}.{}.{cluster}", gw.name, server.port_name),
                            filter_chain_match: sni_match(names, &[]),
                            filters: guarded_tcp_proxy(&cluster, backends, authz, &scope.key.telemetry),
                            ..Default::default()
                        });
                    }
                }
            }
            TlsMode::AutoPassthrough => {
                for target in gateway::sni_targets_of(ctx, scope, &[server]) {
                    let names = vec![target.cluster.clone()];
                    if !claim(&names) {
                        continue;
                    }
                    chains.push(FilterChain {
                        name: target.cluster.clone(),
                        filter_chain_match: sni_match(names, &ISTIO_MTLS_ALPNS),
                        filters: guarded_tcp_proxy(
                            &target.cluster,
                            Backends::Single(target.cluster.clone()),
                            authz,
                            &scope.key.telemetry,
                        ),
                        ..Default::default()
                    });
                }
            }
            TlsMode::Plain => {}
        }
    }
    chains
}
