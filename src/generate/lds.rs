//! LDS: the listeners of one scope.
//!
//! Sidecars, per outbound port (the plan in `gen/outbound.rs`, shared with RDS):
//! * a port whose egress listener captures nothing (`INTERCEPTION_MODE:
//!   NONE`, or a Sidecar egress with `captureMode: NONE`) gets a listener
//!   that binds `127.0.0.1:PORT` (or the egress `bind`). It keeps Istio's
//!   name `0.0.0.0_PORT` when it binds 127.0.0.1, so tools and tests find
//!   the port's listener under one name in every mode; another bind address
//!   gives `BIND_PORT`.
//! * any other port gets `0.0.0.0_PORT` with `bind_to_port: false`, reached
//!   through `virtualOutbound` (0.0.0.0:15001, `use_original_dst`). TCP
//!   services with a virtual IP get a filter chain matching it, headless
//!   ones a chain matching their endpoints' addresses (so their listeners
//!   change with their endpoints); the default chain is the HTTP
//!   connection manager, or the port's first TCP service.
//! * unless the proxy is in NONE mode: `virtualOutbound`, and
//!   `virtualInbound` (0.0.0.0:15006) with a chain per workload port and a
//!   catch-all to `PassthroughCluster`.
//!
//! Routers: one listener `BIND_PORT` (`0.0.0.0_8080` unless the server sets
//! `bind`) per port bound by their Gateway servers (the plan in
//! `gen/gateway.rs`, shared with RDS), built by `lds::gateway`: one chain
//! for a plain HTTP or TCP port, one per server (by SNI) for a TLS port.
//!
//! HTTP listeners use RDS (route config `PORT` or `http.PORT`) with the
//! router filter last; TCP listeners use tcp_proxy. Invariants: output
//! depends only on the context and the scope; listeners are sorted by name,
//! each name once; no listener has two filter chains with the same match.

use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::{CidrRange, TrafficDirection};
use envoy_types::pb::envoy::config::listener::v3::{
    Filter, FilterChain, FilterChainMatch, Listener, ListenerFilter, filter, listener_filter,
};
use envoy_types::pb::envoy::config::route::v3::{
    Route, RouteAction, RouteConfiguration, VirtualHost, route::Action, route_action::ClusterSpecifier,
};
use envoy_types::pb::envoy::extensions::filters::http::cors::v3::Cors;
use envoy_types::pb::envoy::extensions::filters::http::fault::v3::HttpFault;
use envoy_types::pb::envoy::extensions::filters::http::router::v3::Router;
use envoy_types::pb::envoy::extensions::filters::listener::original_dst::v3::OriginalDst;
use envoy_types::pb::envoy::extensions::filters::listener::original_src::v3::OriginalSrc;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    HttpConnectionManager, HttpFilter, Rds,
    http_connection_manager::{
        CodecType, ForwardClientCertDetails, RouteSpecifier, SetCurrentClientCertDetails, UpgradeConfig,
    },
};
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::{
    TcpProxy,
    tcp_proxy::{self, ClusterSpecifier as TcpClusterSpecifier},
};

use super::jwt::{self, JwtPlacement};
use super::outbound::{self, OutboundPort};
use super::route::{self, Backends, RouteTarget};
use super::{access_log, authz, mtls, naming, proto, trace};
use crate::config::istio::MESH_GATEWAY;
use crate::model::{InterceptionMode, ProxyKind, Service};
use crate::push::index::{AppliedPolicy, AppliedTelemetry, ResolvedJwtRule};
use crate::push::scope::InboundPort;
use crate::push::{InboundKey, PushContext, Scope};

mod gateway;

/// The upgrade type every HTTP connection manager allows, as Istio's do.
pub const WEBSOCKET: &str = "websocket";

/// Every listener of `scope`, sorted by name.
pub fn listeners(ctx: &PushContext, scope: &Scope) -> Vec<Listener> {
    let mut out = match scope.key.kind {
        ProxyKind::Sidecar => sidecar_listeners(ctx, scope),
        ProxyKind::Router => gateway::listeners(ctx, scope),
        ProxyKind::Ztunnel => Vec::new(),
        ProxyKind::Waypoint => super::waypoint::listeners(ctx, scope),
    };
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out.dedup_by(|a, b| a.name == b.name);
    out
}

fn sidecar_listeners(ctx: &PushContext, scope: &Scope) -> Vec<Listener> {
    let mut out: Vec<Listener> = outbound::outbound_ports(scope)
        .iter()
        .map(|p| if p.egress.capture_none { bound_listener(ctx, scope, p) } else { redirected_listener(ctx, scope, p) })
        .collect();
    if scope.key.interception != InterceptionMode::None {
        out.push(virtual_outbound(scope));
    }
    out
}

/// The inbound listeners of a workload: `virtualInbound` for redirected
/// sidecars, with a chain per redirected port; a listener of its own
/// (`BIND_PORT`) for each port that is not redirected (a Sidecar ingress
/// listener with `captureMode: NONE`, or any ingress listener of a
/// NONE-mode proxy). Without ingress listeners a NONE-mode proxy has none
/// (the application owns its ports); routers have none.
pub fn inbound_listeners(key: &InboundKey) -> Vec<Listener> {
    if key.kind != ProxyKind::Sidecar {
        return Vec::new();
    }
    let mut out: Vec<Listener> = key
        .ports
        .iter()
        .filter_map(|p| {
            let bind = p.bind.as_deref()?;
            let chains = inbound_chains(p, key);
            Some(Listener {
                name: naming::listener(bind, p.port),
                address: Some(proto::socket_address(bind, p.port)),
                listener_filters: tls_inspector_for(&chains),
                filter_chains: chains,
                traffic_direction: TrafficDirection::Inbound as i32,
                access_log: access_log::listener_logs(&key.telemetry),
                ..inbound_filter_timeout(key)
            })
        })
        .collect();
    if key.interception != InterceptionMode::None {
        let redirected: Vec<&InboundPort> = key.ports.iter().filter(|p| p.bind.is_none()).collect();
        out.push(virtual_inbound(key, &redirected));
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The chains of one inbound port, to `inbound|PORT||` over HTTP or TCP:
/// one per way its PeerAuthentication mode lets a connection in (plain
/// text, mesh mTLS, a client's own TLS; `mtls::inbound_chains`).
/// The key says whether the proxy holds a workload certificate; its
/// AuthorizationPolicies and JWT rules guard the port.
fn inbound_chains(p: &InboundPort, key: &InboundKey) -> Vec<FilterChain> {
    let (certificates, authorization) = (key.mesh_certificates, &key.authorization);
    let cluster = naming::inbound_cluster(p.port);
    mtls::inbound_chains(p.mtls, p.protocol.is_http(), certificates, &key.defaults.trust_domains)
        .into_iter()
        .map(|chain| {
            let filter = if chain.refuse {
                let blackhole = naming::BLACKHOLE_CLUSTER.to_string();
                tcp_proxy(&blackhole, Backends::Single(blackhole.clone()), &key.telemetry)
            } else if p.protocol.is_http() {
                inbound_http_connection_manager(p.port, authorization, &key.jwt_rules, &key.telemetry)
            } else {
                tcp_proxy(&cluster, Backends::Single(cluster.clone()), &key.telemetry)
            };
            let mut filters =
                if p.protocol.is_http() || chain.refuse { Vec::new() } else { authz::network_filters(authorization) };
            filters.push(filter);
            let mut filter_match =
                FilterChainMatch { destination_port: Some(proto::u32_value(p.port)), ..Default::default() };
            chain.apply(&mut filter_match);
            FilterChain {
                name: format!("{cluster}{}", chain.suffix),
                filter_chain_match: Some(filter_match),
                filters,
                transport_socket: chain.socket,
                ..Default::default()
            }
        })
        .collect()
}

/// The TLS inspector, when a chain matches on what it finds.
fn tls_inspector_for(chains: &[FilterChain]) -> Vec<ListenerFilter> {
    let inspects = chains
        .iter()
        .filter_map(|c| c.filter_chain_match.as_ref())
        .any(|m| !m.transport_protocol.is_empty() || !m.application_protocols.is_empty() || !m.server_names.is_empty());
    if inspects { vec![gateway::tls_inspector()] } else { Vec::new() }
}

/// A listener the application connects to directly (NONE capture).
fn bound_listener(ctx: &PushContext, scope: &Scope, port: &OutboundPort<'_>) -> Listener {
    let bind = port.egress.bind.as_deref().unwrap_or(naming::LOCALHOST);
    let name_ip = if bind == naming::LOCALHOST { naming::WILDCARD_ADDRESS } else { bind };
    let name = naming::listener(name_ip, port.port);
    if !port.is_http() && is_tls_port(port) {
        // SNI tells the services of a TLS port apart, bound or not.
        let chains = tls_port_chains(ctx, scope, port, false);
        return Listener {
            name,
            address: Some(proto::socket_address(bind, port.port)),
            listener_filters: vec![gateway::tls_inspector()],
            filter_chains: chains,
            traffic_direction: TrafficDirection::Outbound as i32,
            ..Default::default()
        };
    }
    let filter = if port.is_http() {
        http_connection_manager(format!("outbound_{name}"), rds(naming::sidecar_route(port.port)), &scope.key.telemetry)
    } else {
        // With a bound address there is no original destination IP to tell
        // TCP services apart: the first one by host takes the port.
        if port.tcp.len() > 1 {
            tracing::debug!(port = port.port, chosen = %port.tcp[0].hostname, "several TCP services share a bound port; the first by host takes it");
        }
        tcp_service_proxy(ctx, scope, port.tcp[0], port.port, &[])
    };
    if port.is_http() && !port.tcp.is_empty() {
        tracing::debug!(
            port = port.port,
            "TCP services share an HTTP port on a bound listener; they are unreachable there"
        );
    }
    Listener {
        name,
        address: Some(proto::socket_address(bind, port.port)),
        filter_chains: vec![FilterChain { filters: vec![filter], ..Default::default() }],
        traffic_direction: TrafficDirection::Outbound as i32,
        ..Default::default()
    }
}

/// A listener for redirected traffic, handed over by `virtualOutbound`.
fn redirected_listener(ctx: &PushContext, scope: &Scope, port: &OutboundPort<'_>) -> Listener {
    let bind = port.egress.bind.as_deref().unwrap_or(naming::WILDCARD_ADDRESS);
    let name = naming::listener(bind, port.port);
    if !port.is_http() && is_tls_port(port) {
        return Listener {
            name,
            address: Some(proto::socket_address(bind, port.port)),
            listener_filters: vec![gateway::tls_inspector()],
            filter_chains: tls_port_chains(ctx, scope, port, true),
            bind_to_port: Some(proto::bool_value(false)),
            traffic_direction: TrafficDirection::Outbound as i32,
            ..Default::default()
        };
    }
    let mut chains = Vec::new();
    let mut claimed: Vec<String> = Vec::new();
    for svc in &port.tcp {
        // A headless service has no virtual IP: its clients connect to its
        // Pods' own addresses (from DNS), so those are what the chain
        // matches, one range each (as Istio's per-Pod CIDR chains).
        let destination: Vec<Arc<str>> =
            if svc.is_headless() { endpoint_addresses(ctx, svc, port.port) } else { svc.addresses.clone() };
        let ranges = unclaimed(destination.iter().filter_map(|a| proto::cidr_range(a)), &mut claimed);
        if ranges.is_empty() {
            continue;
        }
        chains.push(FilterChain {
            name: naming::outbound_cluster(port.port, "", &svc.hostname),
            filter_chain_match: Some(FilterChainMatch { prefix_ranges: ranges, ..Default::default() }),
            filters: vec![tcp_service_proxy(ctx, scope, svc, port.port, &destination)],
            ..Default::default()
        });
    }
    let default = if port.is_http() {
        http_connection_manager(format!("outbound_{name}"), rds(naming::sidecar_route(port.port)), &scope.key.telemetry)
    } else {
        chains.extend(subnet_chains(ctx, scope, port.tcp[0], port.port, &mut claimed));
        tcp_service_proxy(ctx, scope, port.tcp[0], port.port, &[])
    };
    chains.push(FilterChain { name: "default".to_string(), filters: vec![default], ..Default::default() });
    Listener {
        name,
        address: Some(proto::socket_address(bind, port.port)),
        filter_chains: chains,
        bind_to_port: Some(proto::bool_value(false)),
        traffic_direction: TrafficDirection::Outbound as i32,
        ..Default::default()
    }
}

/// Whether a non-HTTP port carries TLS (Istio's `HTTPS` and `TLS` ports):
/// its services are told apart by SNI.
fn is_tls_port(port: &OutboundPort<'_>) -> bool {
    port.tcp.iter().any(|s| s.port(port.port).is_some_and(|p| p.protocol == crate::model::Protocol::Tls))
}

/// The chains of a sidecar's TLS port, as Istio builds them
/// (`buildSidecarOutboundTLSFilterChainOpts`): a chain per match of a
/// VirtualService `tls:` route that applies (its `sniHosts`, and its
/// `destinationSubnets` or the service's virtual IP); for a service no TLS
/// route matched, a chain by its virtual IP (`by_address`: redirected
/// traffic has its original destination) or, without one, by its host
/// name as SNI; then a catch-all for SNI no chain takes, as the outbound
/// traffic policy says (`PassthroughCluster`, or `BlackHoleCluster` under
/// `REGISTRY_ONLY`).
fn tls_port_chains(ctx: &PushContext, scope: &Scope, port: &OutboundPort<'_>, by_address: bool) -> Vec<FilterChain> {
    let target = RouteTarget::new(ctx, scope, port.port, MESH_GATEWAY);
    let mut chains: Vec<FilterChain> = Vec::new();
    // Matches already given to a chain: Envoy refuses a listener with two equal ones.
    let mut claimed: Vec<(Vec<String>, Vec<String>)> = Vec::new();
    let mut push =
        |chains: &mut Vec<FilterChain>, name: String, sni: Vec<String>, ranges: Vec<String>, filter: Filter| {
            let key = (sni.clone(), ranges.clone());
            if claimed.contains(&key) {
                return;
            }
            claimed.push(key);
            chains.push(FilterChain {
                name,
                filter_chain_match: Some(FilterChainMatch {
                    server_names: sni,
                    prefix_ranges: ranges.iter().filter_map(|r| proto::cidr_range(r)).collect(),
                    ..Default::default()
                }),
                filters: vec![filter],
                ..Default::default()
            });
        };
    for svc in &port.tcp {
        let cluster = naming::outbound_cluster(port.port, "", &svc.hostname);
        let vip: Vec<String> = if by_address && !svc.is_headless() {
            svc.addresses.iter().filter(|a| proto::cidr_range(a).is_some()).map(|a| a.to_string()).collect()
        } else {
            Vec::new()
        };
        let mut matched = false;
        if let Some(vs) = ctx.virtual_services.for_host(MESH_GATEWAY, &scope.key.namespace, &svc.hostname) {
            for (m, backends) in target.tls_matches(vs) {
                let mut sni: Vec<String> = m.sni_hosts.iter().map(|h| h.to_ascii_lowercase()).collect();
                sni.sort();
                sni.dedup();
                let ranges = if by_address && !m.destination_subnets.is_empty() {
                    m.destination_subnets.clone()
                } else {
                    vip.clone()
                };
                matched = true;
                push(
                    &mut chains,
                    format!("{cluster}-tls-{}", sni.join(",")),
                    sni,
                    ranges,
                    tcp_proxy(&cluster, backends, &scope.key.telemetry),
                );
            }
        }
        if matched {
            continue;
        }
        let sni = if vip.is_empty() { vec![svc.hostname.to_string()] } else { Vec::new() };
        let filter = tcp_proxy(&cluster, Backends::Single(cluster.clone()), &scope.key.telemetry);
        push(&mut chains, cluster.clone(), sni, vip, filter);
    }
    let fallthrough = naming::unknown_destination_cluster(&scope.outbound_policy);
    chains.push(FilterChain {
        name: "default".to_string(),
        filters: vec![tcp_proxy(&fallthrough, Backends::Single(fallthrough.clone()), &scope.key.telemetry)],
        ..Default::default()
    });
    chains
}

/// The IP addresses of the endpoints of `svc` that serve `port`, sorted.
fn endpoint_addresses(ctx: &PushContext, svc: &Service, port: u32) -> Vec<Arc<str>> {
    let endpoints = ctx.endpoints.get(&svc.hostname);
    let mut out: Vec<Arc<str>> = endpoints
        .map(|e| e.endpoints.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|e| e.ports.contains_key(&port) && proto::is_ip(&e.address))
        .map(|e| e.address.clone())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// `virtualOutbound`: takes every redirected outbound connection, hands it
/// to the listener of its original destination, and sends the rest to
/// `PassthroughCluster` (or `BlackHoleCluster` under `REGISTRY_ONLY`).
fn virtual_outbound(scope: &Scope) -> Listener {
    let cluster = naming::unknown_destination_cluster(&scope.outbound_policy);
    let cluster = cluster.as_str();
    Listener {
        name: naming::VIRTUAL_OUTBOUND.to_string(),
        address: Some(proto::socket_address(naming::WILDCARD_ADDRESS, naming::VIRTUAL_OUTBOUND_PORT)),
        use_original_dst: Some(proto::bool_value(true)),
        transparent: transparent(scope.key.interception),
        filter_chains: vec![FilterChain {
            name: "virtualOutbound-catchall-tcp".to_string(),
            filters: vec![tcp_proxy(cluster, Backends::Single(cluster.to_string()), &scope.key.telemetry)],
            ..Default::default()
        }],
        traffic_direction: TrafficDirection::Outbound as i32,
        access_log: access_log::listener_logs(&scope.key.telemetry),
        ..Default::default()
    }
}

/// `virtualInbound`: redirected inbound connections, one chain per workload
/// port to `inbound|PORT||`, the rest to `InboundPassthroughCluster`.
///
/// It restores the original destination with the `original_dst` listener
/// filter instead of `use_original_dst`: handing inbound connections over
/// would deliver a connection for the workload's port 9080 to the outbound
/// listener `0.0.0.0_9080`.
///
/// A connection to a port the workload does not declare takes the catch-all
/// chains of the workload's own mTLS mode (as Istio's passthrough chains
/// do): under STRICT, an undeclared port takes no plain text either.
fn virtual_inbound(key: &InboundKey, ports: &[&InboundPort]) -> Listener {
    let (certificates, authorization) = (key.mesh_certificates, &key.authorization);
    let mut chains: Vec<FilterChain> = ports.iter().flat_map(|p| inbound_chains(p, key)).collect();
    for chain in mtls::inbound_chains(key.mtls, false, certificates, &key.defaults.trust_domains) {
        let (cluster, mut filters) = if chain.refuse {
            (naming::BLACKHOLE_CLUSTER, Vec::new())
        } else {
            (naming::INBOUND_PASSTHROUGH_CLUSTER, authz::network_filters(authorization))
        };
        filters.push(tcp_proxy(cluster, Backends::Single(cluster.to_string()), &key.telemetry));
        let mut filter_match = FilterChainMatch::default();
        chain.apply(&mut filter_match);
        chains.push(FilterChain {
            name: format!("virtualInbound-catchall-tcp{}", chain.suffix),
            filter_chain_match: (filter_match != FilterChainMatch::default()).then_some(filter_match),
            filters,
            transport_socket: chain.socket,
            ..Default::default()
        });
    }
    let mut listener_filters = vec![ListenerFilter {
        name: proto::ORIGINAL_DST.to_string(),
        config_type: Some(listener_filter::ConfigType::TypedConfig(proto::any(&OriginalDst {}))),
        ..Default::default()
    }];
    // Under TPROXY the app sees the client's own address: Envoy's
    // connection to it takes the original source, marked for the proxy.
    if key.interception == InterceptionMode::Tproxy {
        listener_filters.push(ListenerFilter {
            name: proto::ORIGINAL_SRC.to_string(),
            config_type: Some(listener_filter::ConfigType::TypedConfig(proto::any(&OriginalSrc {
                mark: proto::PROXY_MARK,
                ..Default::default()
            }))),
            ..Default::default()
        });
    }
    // After the original destination: chains match its port first.
    listener_filters.extend(tls_inspector_for(&chains));
    Listener {
        name: naming::VIRTUAL_INBOUND.to_string(),
        address: Some(proto::socket_address(naming::WILDCARD_ADDRESS, naming::VIRTUAL_INBOUND_PORT)),
        transparent: transparent(key.interception),
        listener_filters,
        filter_chains: chains,
        traffic_direction: TrafficDirection::Inbound as i32,
        access_log: access_log::listener_logs(&key.telemetry),
        ..inbound_filter_timeout(key)
    }
}

/// Whether a capture listener is transparent: under TPROXY, connections
/// arrive with their original addresses, which only a transparent socket
/// may accept (as Istio sets it).
fn transparent(interception: InterceptionMode) -> Option<envoy_types::pb::google::protobuf::BoolValue> {
    (interception == InterceptionMode::Tproxy).then(|| proto::bool_value(true))
}

/// How long an inbound listener's filters may wait for the client's first
/// bytes: the mesh's `protocolDetectionTimeout` (zero: no limit, where
/// Envoy's own default would close a server-first protocol's connection
/// after 15s), after which the connection goes on without them, as Istio
/// sets every inbound listener.
fn inbound_filter_timeout(key: &InboundKey) -> Listener {
    Listener {
        listener_filters_timeout: Some(key.defaults.protocol_detection_timeout.to_proto()),
        continue_on_listener_filters_timeout: true,
        ..Default::default()
    }
}

/// The inline route config of an inbound HTTP port: everything to the workload.
fn inbound_route_config(port: u32) -> RouteConfiguration {
    let cluster = naming::inbound_cluster(port);
    RouteConfiguration {
        name: cluster.clone(),
        ignore_port_in_host_matching: true,
        virtual_hosts: vec![VirtualHost {
            name: naming::inbound_virtual_host(port),
            domains: vec!["*".to_string()],
            routes: vec![Route {
                name: "default".to_string(),
                r#match: Some(route::prefix_match("/")),
                action: Some(Action::Route(RouteAction {
                    cluster_specifier: Some(ClusterSpecifier::Cluster(cluster)),
                    timeout: Some(proto::seconds(0)),
                    ..Default::default()
                })),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// tcp_proxy for one TCP service port: its VirtualService's TCP route when
/// one applies, else the service's cluster.
/// `destination`: the addresses the chain matches (the service's virtual
/// IPs), empty for a chain that matches any.
fn tcp_service_proxy(ctx: &PushContext, scope: &Scope, svc: &Service, port: u32, destination: &[Arc<str>]) -> Filter {
    let cluster = naming::outbound_cluster(port, "", &svc.hostname);
    let target = RouteTarget::new(ctx, scope, port, MESH_GATEWAY);
    let backends = ctx
        .virtual_services
        .for_host(MESH_GATEWAY, &scope.key.namespace, &svc.hostname)
        .and_then(|vs| target.tcp_backends(vs, destination))
        .unwrap_or_else(|| Backends::Single(cluster.clone()));
    tcp_proxy(&cluster, backends, &scope.key.telemetry)
}

/// The ranges no earlier chain of the listener claimed, now claimed: a
/// range two chains would match goes to the first, as identical matches
/// would make Envoy refuse the listener.
fn unclaimed(ranges: impl Iterator<Item = CidrRange>, claimed: &mut Vec<String>) -> Vec<CidrRange> {
    ranges
        .filter(|r| {
            let key = format!("{}/{}", r.address_prefix, r.prefix_len.as_ref().map_or(0, |l| l.value));
            !claimed.contains(&key) && {
                claimed.push(key);
                true
            }
        })
        .collect()
}

/// Chains for the `destinationSubnets` routes of a TCP service matched by
/// no address of its own (the port's default chain), as Istio builds them:
/// one per route, matching its subnets.
fn subnet_chains(
    ctx: &PushContext,
    scope: &Scope,
    svc: &Service,
    port: u32,
    claimed: &mut Vec<String>,
) -> Vec<FilterChain> {
    let target = RouteTarget::new(ctx, scope, port, MESH_GATEWAY);
    let Some(vs) = ctx.virtual_services.for_host(MESH_GATEWAY, &scope.key.namespace, &svc.hostname) else {
        return Vec::new();
    };
    let cluster = naming::outbound_cluster(port, "", &svc.hostname);
    target
        .tcp_subnet_routes(vs)
        .into_iter()
        .enumerate()
        .filter_map(|(i, (subnets, backends))| {
            let ranges = unclaimed(subnets.iter().filter_map(|s| proto::cidr_range(s)), claimed);
            (!ranges.is_empty()).then(|| FilterChain {
                name: format!("{cluster}-subnets-{i}"),
                filter_chain_match: Some(FilterChainMatch { prefix_ranges: ranges, ..Default::default() }),
                filters: vec![tcp_proxy(&cluster, backends, &scope.key.telemetry)],
                ..Default::default()
            })
        })
        .collect()
}

/// tcp_proxy to `backends`, logging as `telemetry` says.
pub(super) fn tcp_proxy(stat_prefix: &str, backends: Backends, telemetry: &AppliedTelemetry) -> Filter {
    let specifier = match backends {
        Backends::Single(cluster) => TcpClusterSpecifier::Cluster(cluster),
        Backends::Weighted(clusters) => TcpClusterSpecifier::WeightedClusters(tcp_proxy::WeightedCluster {
            clusters: clusters
                .into_iter()
                .map(|(name, weight)| tcp_proxy::weighted_cluster::ClusterWeight { name, weight, ..Default::default() })
                .collect(),
        }),
    };
    let config = TcpProxy {
        stat_prefix: stat_prefix.to_string(),
        cluster_specifier: Some(specifier),
        access_log: access_log::connection_logs(telemetry),
        ..Default::default()
    };
    Filter {
        name: proto::TCP_PROXY.to_string(),
        config_type: Some(filter::ConfigType::TypedConfig(proto::any(&config))),
    }
}

fn rds(route_config_name: String) -> RouteSpecifier {
    RouteSpecifier::Rds(Rds { config_source: Some(proto::ads_config_source()), route_config_name })
}

/// The connection manager of an inbound HTTP port: everything to the
/// workload, which learns a mesh mTLS client's identity from the
/// `x-forwarded-client-cert` header (its subject, URI and DNS names), as
/// Istio's sidecars tell it; the JWT filter of `jwt_rules` and the RBAC
/// filters of `authorization` run first.
fn inbound_http_connection_manager(
    port: u32,
    authorization: &[Arc<AppliedPolicy>],
    jwt_rules: &[Arc<ResolvedJwtRule>],
    telemetry: &AppliedTelemetry,
) -> Filter {
    let mut hcm = connection_manager(
        format!("inbound_{}", naming::listener(naming::WILDCARD_ADDRESS, port)),
        RouteSpecifier::RouteConfig(inbound_route_config(port)),
        telemetry,
    );
    let mut filters = guard_filters(authorization, jwt_rules, JwtPlacement::Inbound);
    filters.append(&mut hcm.http_filters);
    hcm.http_filters = filters;
    hcm.forward_client_cert_details = ForwardClientCertDetails::AppendForward as i32;
    hcm.set_current_client_cert_details = Some(SetCurrentClientCertDetails {
        subject: Some(proto::bool_value(true)),
        uri: true,
        dns: true,
        ..Default::default()
    });
    connection_manager_filter(&hcm)
}

/// An HTTP connection manager as Istio builds one: the fault and CORS
/// filters (which routes configure through `typed_per_filter_config`), then
/// the router; websocket upgrades allowed.
fn http_connection_manager(stat_prefix: String, routes: RouteSpecifier, telemetry: &AppliedTelemetry) -> Filter {
    guarded_http_connection_manager(stat_prefix, routes, &[], &[], telemetry)
}

/// [`http_connection_manager`] of a gateway, with the JWT filter of
/// `jwt_rules` and the RBAC filters of `authorization` first.
fn guarded_http_connection_manager(
    stat_prefix: String,
    routes: RouteSpecifier,
    authorization: &[Arc<AppliedPolicy>],
    jwt_rules: &[Arc<ResolvedJwtRule>],
    telemetry: &AppliedTelemetry,
) -> Filter {
    let mut hcm = connection_manager(stat_prefix, routes, telemetry);
    let mut filters = guard_filters(authorization, jwt_rules, JwtPlacement::Gateway);
    filters.append(&mut hcm.http_filters);
    hcm.http_filters = filters;
    connection_manager_filter(&hcm)
}

/// The HTTP filters that run before routing: CUSTOM authorization, the
/// JWT filter (it verifies tokens and leaves their payload for RBAC to
/// match), then RBAC, in the order `authz` keeps.
fn guard_filters(
    authorization: &[Arc<AppliedPolicy>],
    jwt_rules: &[Arc<ResolvedJwtRule>],
    placement: JwtPlacement,
) -> Vec<HttpFilter> {
    authz::http_filters(authorization, jwt::http_filter(jwt_rules, placement))
}

/// tcp_proxy to `backends`, after the authorization filters of `authorization`.
fn guarded_tcp_proxy(
    stat_prefix: &str,
    backends: Backends,
    authorization: &[Arc<AppliedPolicy>],
    telemetry: &AppliedTelemetry,
) -> Vec<Filter> {
    let mut filters = authz::network_filters(authorization);
    filters.push(tcp_proxy(stat_prefix, backends, telemetry));
    filters
}

pub(super) fn connection_manager_filter(hcm: &HttpConnectionManager) -> Filter {
    Filter {
        name: proto::HTTP_CONNECTION_MANAGER.to_string(),
        config_type: Some(filter::ConfigType::TypedConfig(proto::any(hcm))),
    }
}

pub(super) fn connection_manager(
    stat_prefix: String,
    routes: RouteSpecifier,
    telemetry: &AppliedTelemetry,
) -> HttpConnectionManager {
    let filter = proto::http_filter;
    HttpConnectionManager {
        codec_type: CodecType::Auto as i32,
        stat_prefix,
        route_specifier: Some(routes),
        http_filters: vec![
            filter(proto::FAULT, proto::any(&HttpFault::default())),
            filter(proto::CORS, proto::any(&Cors::default())),
            filter(proto::ROUTER, proto::any(&Router::default())),
        ],
        upgrade_configs: vec![UpgradeConfig { upgrade_type: WEBSOCKET.to_string(), ..Default::default() }],
        use_remote_address: Some(proto::bool_value(false)),
        access_log: access_log::connection_logs(telemetry),
        tracing: telemetry.tracing.as_deref().map(trace::hcm_tracing),
        request_id_extension: telemetry.tracing.as_deref().and_then(trace::request_id_extension),
        ..Default::default()
    }
}
