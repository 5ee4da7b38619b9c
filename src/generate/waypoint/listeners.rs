//! A waypoint's three listeners (see the module docs of `waypoint`).

use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::{
    CidrRange, DataSource, Http2ProtocolOptions, SubstitutionFormatString, TrafficDirection, data_source,
    substitution_format_string,
};
use envoy_types::pb::envoy::config::listener::v3::{
    Filter, FilterChain, FilterChainMatch, Listener, ListenerFilter, filter,
    listener::{InternalListenerConfig, ListenerSpecifier},
    listener_filter,
};
use envoy_types::pb::envoy::config::route::v3::{
    Route, RouteAction, RouteConfiguration, RouteMatch, VirtualHost,
    route::Action,
    route_action::{ClusterSpecifier, UpgradeConfig as RouteUpgrade, upgrade_config::ConnectConfig},
    route_match::{ConnectMatcher, PathSpecifier},
};
use envoy_types::pb::envoy::extensions::filters::common::set_filter_state::v3::{
    FilterStateValue,
    filter_state_value::{Key, SharedWithUpstream, Value},
};
use envoy_types::pb::envoy::extensions::filters::http::router::v3::Router;
use envoy_types::pb::envoy::extensions::filters::http::set_filter_state::v3::Config as HttpSetFilterState;
use envoy_types::pb::envoy::extensions::filters::listener::http_inspector::v3::HttpInspector;
use envoy_types::pb::envoy::extensions::filters::listener::original_dst::v3::OriginalDst;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    HttpConnectionManager,
    http_connection_manager::{CodecType, RouteSpecifier, UpgradeConfig},
};
use envoy_types::pb::envoy::extensions::filters::network::set_filter_state::v3::Config as NetworkSetFilterState;
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::{
    TcpProxy,
    tcp_proxy::{ClusterSpecifier as TcpClusterSpecifier, TunnelingConfig},
};

use super::{CONNECT_ORIGINATE, CONNECT_TERMINATE, ENCAP, HBONE_PORT, MAIN_INTERNAL};
use super::{bound, bound_workloads, gateway, inbound_vip_cluster};
use crate::config::istio::MESH_GATEWAY;
use crate::generate::lds::{connection_manager, connection_manager_filter, tcp_proxy};
use crate::generate::route::{Backends, RouteTarget};
use crate::generate::{authz, mtls, naming, proto};
use crate::model::{Protocol, Service, ServicePort};
use crate::push::index::{AppliedPolicy, AppliedTelemetry};
use crate::push::{PushContext, Scope};

/// The filter state keys of the original destination and source, which
/// Envoy's `original_dst` listener filter reads on an internal listener.
const LOCAL_IP: &str = "envoy.filters.listener.original_dst.local_ip";
const REMOTE_IP: &str = "envoy.filters.listener.original_dst.remote_ip";
/// Where the waypoint's own identity is kept beside the peer's.
const LOCAL_PRINCIPAL: &str = "io.istio.local_principal";
/// Upstream Envoy's filter state factory of a plain string (istiod uses
/// Istio's `istio.hashable_string`, which upstream Envoy lacks).
const STRING_FACTORY: &str = "envoy.string";
/// The chains (and the route config) of traffic to bound workloads.
const DIRECT_HTTP: &str = "direct-http";
const DIRECT_TCP: &str = "direct-tcp";
/// HTTP/2 streams a ztunnel connection may carry at once (istiod's).
const MAX_CONCURRENT_STREAMS: u32 = 100;
/// What `http_inspector` names a plain-text HTTP connection.
const HTTP_PROTOCOLS: [&str; 2] = ["http/1.1", "h2c"];

/// The waypoint's listeners, sorted by name.
pub fn listeners(ctx: &PushContext, scope: &Scope) -> Vec<Listener> {
    let mut out = vec![connect_terminate(ctx), main_internal(ctx, scope), connect_originate()];
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// `connect_terminate`: HBONE in (see the module docs).
fn connect_terminate(ctx: &PushContext) -> Listener {
    let route = Route {
        name: "default".to_string(),
        r#match: Some(RouteMatch {
            path_specifier: Some(PathSpecifier::ConnectMatcher(ConnectMatcher::default())),
            ..Default::default()
        }),
        action: Some(Action::Route(RouteAction {
            cluster_specifier: Some(ClusterSpecifier::Cluster(MAIN_INTERNAL.to_string())),
            upgrade_configs: vec![RouteUpgrade {
                upgrade_type: "CONNECT".to_string(),
                connect_config: Some(ConnectConfig::default()),
                ..Default::default()
            }],
            ..Default::default()
        })),
        ..Default::default()
    };
    let routes = RouteConfiguration {
        name: "default".to_string(),
        virtual_hosts: vec![VirtualHost {
            name: "default".to_string(),
            domains: vec!["*".to_string()],
            routes: vec![route],
            ..Default::default()
        }],
        ..Default::default()
    };
    let state = HttpSetFilterState {
        on_request_headers: vec![
            state_value(LOCAL_IP, None, "%REQ(:AUTHORITY)%"),
            state_value(REMOTE_IP, None, "%DOWNSTREAM_REMOTE_ADDRESS%"),
            state_value(authz::PEER_PRINCIPAL, Some(STRING_FACTORY), "%DOWNSTREAM_PEER_URI_SAN%"),
            state_value(LOCAL_PRINCIPAL, Some(STRING_FACTORY), "%DOWNSTREAM_LOCAL_URI_SAN%"),
        ],
        ..Default::default()
    };
    let hcm = HttpConnectionManager {
        codec_type: CodecType::Auto as i32,
        stat_prefix: CONNECT_TERMINATE.to_string(),
        route_specifier: Some(RouteSpecifier::RouteConfig(routes)),
        http_filters: vec![
            proto::http_filter("connect_authority", proto::any(&state)),
            proto::http_filter(proto::ROUTER, proto::any(&Router::default())),
        ],
        http2_protocol_options: Some(Http2ProtocolOptions {
            allow_connect: true,
            max_concurrent_streams: Some(proto::u32_value(MAX_CONCURRENT_STREAMS)),
            ..Default::default()
        }),
        upgrade_configs: vec![UpgradeConfig { upgrade_type: "CONNECT".to_string(), ..Default::default() }],
        // Tunnels live as long as their connections.
        stream_idle_timeout: Some(proto::seconds(0)),
        use_remote_address: Some(proto::bool_value(false)),
        ..Default::default()
    };
    Listener {
        name: CONNECT_TERMINATE.to_string(),
        address: Some(proto::socket_address(naming::WILDCARD_ADDRESS, HBONE_PORT)),
        filter_chains: vec![FilterChain {
            name: "default".to_string(),
            filters: vec![connection_manager_filter(&hcm)],
            transport_socket: Some(mtls::hbone_server_socket(&ctx.mesh.trust_domains_for_validation())),
            ..Default::default()
        }],
        traffic_direction: TrafficDirection::Inbound as i32,
        ..Default::default()
    }
}

/// One filter state value set from `format`, shared with the connection
/// of the next hop (the internal listener) only.
fn state_value(key: &str, factory: Option<&str>, format: &str) -> FilterStateValue {
    FilterStateValue {
        key: Some(Key::ObjectKey(key.to_string())),
        factory_key: factory.unwrap_or_default().to_string(),
        value: Some(Value::FormatString(SubstitutionFormatString {
            format: Some(substitution_format_string::Format::TextFormatSource(DataSource {
                specifier: Some(data_source::Specifier::InlineString(format.to_string())),
                ..Default::default()
            })),
            ..Default::default()
        })),
        shared_with_upstream: SharedWithUpstream::Once as i32,
        ..Default::default()
    }
}

/// An internal listener (no address: reached through `envoy_internal_address`).
fn internal(name: &str, listener_filters: Vec<ListenerFilter>, filter_chains: Vec<FilterChain>) -> Listener {
    Listener {
        name: name.to_string(),
        listener_specifier: Some(ListenerSpecifier::InternalListener(InternalListenerConfig::default())),
        listener_filters,
        filter_chains,
        traffic_direction: TrafficDirection::Inbound as i32,
        ..Default::default()
    }
}

fn listener_filter(name: &str, config: envoy_types::pb::google::protobuf::Any) -> ListenerFilter {
    ListenerFilter {
        name: name.to_string(),
        config_type: Some(listener_filter::ConfigType::TypedConfig(config)),
        ..Default::default()
    }
}

/// `main_internal`: a chain per bound Service port, and for the bound
/// workloads (see the module docs).
fn main_internal(ctx: &PushContext, scope: &Scope) -> Listener {
    let waypoint = gateway(scope).unwrap_or(("", ""));
    let everything = ctx.authorization.for_waypoint(waypoint, None);
    let mut chains = Vec::new();
    let mut sniffs = false;
    for svc in bound(scope) {
        let vips: Vec<_> = svc.addresses.iter().filter_map(|a| proto::cidr_range(a)).collect();
        if vips.is_empty() {
            continue; // a headless Service: reached through its workloads
        }
        let entry = svc.source.kind == crate::config::ConfigKind::ServiceEntry;
        let source_name = &*svc.source.name;
        let policies = ctx.authorization.for_waypoint(waypoint, Some((&svc.namespace, source_name, entry)));
        for port in &svc.ports {
            let on = |application_protocols: Vec<String>| FilterChainMatch {
                prefix_ranges: vips.clone(),
                destination_port: Some(proto::u32_value(port.port)),
                application_protocols,
                ..Default::default()
            };
            match port.protocol {
                p if p.is_http() => chains.push(http_chain(ctx, scope, svc, port, on(Vec::new()), &policies)),
                Protocol::Unknown => {
                    sniffs = true;
                    let http = HTTP_PROTOCOLS.map(str::to_string).to_vec();
                    chains.push(http_chain(ctx, scope, svc, port, on(http), &policies));
                    chains.push(tcp_chain(svc, port, on(Vec::new()), &policies));
                }
                _ => chains.push(tcp_chain(svc, port, on(Vec::new()), &policies)),
            }
        }
    }
    let workloads: Vec<_> = bound_workloads(ctx, scope).iter().filter_map(|ip| proto::cidr_range(ip)).collect();
    if !workloads.is_empty() {
        sniffs = true;
        chains.extend(direct_chains(workloads, &everything));
    }
    let mut listener_filters = vec![listener_filter(proto::ORIGINAL_DST, proto::any(&OriginalDst::default()))];
    if sniffs {
        listener_filters
            .push(listener_filter("envoy.filters.listener.http_inspector", proto::any(&HttpInspector::default())));
    }
    internal(MAIN_INTERNAL, listener_filters, chains)
}

/// The chain of an HTTP port of a bound Service: its policies, its routes.
fn http_chain(
    ctx: &PushContext,
    scope: &Scope,
    svc: &Service,
    port: &ServicePort,
    on: FilterChainMatch,
    policies: &[Arc<AppliedPolicy>],
) -> FilterChain {
    let cluster = inbound_vip_cluster(port.port, true, "", &svc.hostname);
    let target = RouteTarget::new(ctx, scope, port.port, MESH_GATEWAY);
    let routed = ctx.virtual_services.for_host(MESH_GATEWAY, &svc.namespace, &svc.hostname);
    let mut routes = match routed {
        Some(vs) => target.http_routes(vs),
        None => vec![target.default_route(&svc.namespace, &svc.hostname, port.port)],
    };
    for route in &mut routes {
        to_inbound_vip(route, scope);
    }
    let route_config = RouteConfiguration {
        name: cluster.clone(),
        virtual_hosts: vec![VirtualHost {
            name: format!("inbound|http|{}", port.port),
            domains: vec!["*".to_string()],
            routes,
            ..Default::default()
        }],
        validate_clusters: Some(proto::bool_value(false)),
        ..Default::default()
    };
    let mut hcm =
        connection_manager(cluster.clone(), RouteSpecifier::RouteConfig(route_config), &AppliedTelemetry::default());
    let mut filters = authz::waypoint_http_filters(policies);
    filters.append(&mut hcm.http_filters);
    hcm.http_filters = filters;
    FilterChain {
        name: cluster,
        filter_chain_match: Some(on),
        filters: vec![connection_manager_filter(&hcm)],
        ..Default::default()
    }
}

/// Routes to a bound Service's `outbound|PORT|SUBSET|HOST` go to its
/// `inbound-vip` cluster instead: the waypoint is that Service's last hop.
fn to_inbound_vip(route: &mut Route, scope: &Scope) {
    let Some(Action::Route(action)) = &mut route.action else { return };
    let rename = |name: &mut String| {
        if let Some(c) = naming::parse_cluster(name)
            && c.direction == naming::Direction::Outbound
            && scope.visible_hosts.contains(c.host)
        {
            *name = inbound_vip_cluster(c.port, true, c.subset, c.host);
        }
    };
    match &mut action.cluster_specifier {
        Some(ClusterSpecifier::Cluster(name)) => rename(name),
        Some(ClusterSpecifier::WeightedClusters(weighted)) => {
            weighted.clusters.iter_mut().for_each(|c| rename(&mut c.name))
        }
        _ => {}
    }
}

/// The chain of a TCP port of a bound Service: its policies, then to its
/// `inbound-vip` TCP cluster.
fn tcp_chain(svc: &Service, port: &ServicePort, on: FilterChainMatch, policies: &[Arc<AppliedPolicy>]) -> FilterChain {
    let cluster = inbound_vip_cluster(port.port, false, "", &svc.hostname);
    let mut filters = authz::waypoint_network_filters(policies);
    filters.push(tcp_proxy(&cluster, Backends::Single(cluster.clone()), &AppliedTelemetry::default()));
    FilterChain { name: cluster, filter_chain_match: Some(on), filters, ..Default::default() }
}

/// Traffic to a bound workload: the waypoint's own policies, then on as it
/// is, its destination handed to `connect_originate` in filter state. HTTP
/// (found by `http_inspector`) goes through a connection manager, so that
/// policies with HTTP attributes apply (`direct-http`); the rest through
/// tcp_proxy (`direct-tcp`).
fn direct_chains(workloads: Vec<CidrRange>, policies: &[Arc<AppliedPolicy>]) -> Vec<FilterChain> {
    let state = NetworkSetFilterState {
        on_new_connection: vec![state_value(LOCAL_IP, None, "%DOWNSTREAM_LOCAL_ADDRESS%")],
        ..Default::default()
    };
    let authority = Filter {
        name: "connect_authority".to_string(),
        config_type: Some(filter::ConfigType::TypedConfig(proto::any(&state))),
    };
    let on = |application_protocols: Vec<String>| FilterChainMatch {
        prefix_ranges: workloads.clone(),
        application_protocols,
        ..Default::default()
    };

    let routes = RouteConfiguration {
        name: DIRECT_HTTP.to_string(),
        virtual_hosts: vec![VirtualHost {
            name: DIRECT_HTTP.to_string(),
            domains: vec!["*".to_string()],
            routes: vec![Route {
                name: "default".to_string(),
                r#match: Some(crate::generate::route::prefix_match("/")),
                action: Some(Action::Route(RouteAction {
                    cluster_specifier: Some(ClusterSpecifier::Cluster(ENCAP.to_string())),
                    timeout: Some(proto::seconds(0)),
                    ..Default::default()
                })),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let mut hcm =
        connection_manager(DIRECT_HTTP.to_string(), RouteSpecifier::RouteConfig(routes), &AppliedTelemetry::default());
    let mut filters = authz::waypoint_http_filters(policies);
    filters.append(&mut hcm.http_filters);
    hcm.http_filters = filters;
    let http = FilterChain {
        name: DIRECT_HTTP.to_string(),
        filter_chain_match: Some(on(HTTP_PROTOCOLS.map(str::to_string).to_vec())),
        filters: vec![authority.clone(), connection_manager_filter(&hcm)],
        ..Default::default()
    };

    let mut filters = vec![authority];
    filters.extend(authz::waypoint_network_filters(policies));
    filters.push(tcp_proxy(DIRECT_TCP, Backends::Single(ENCAP.to_string()), &AppliedTelemetry::default()));
    let tcp = FilterChain {
        name: DIRECT_TCP.to_string(),
        filter_chain_match: Some(on(Vec::new())),
        filters,
        ..Default::default()
    };
    vec![http, tcp]
}

/// `connect_originate`: every connection tunnelled on as HBONE to its
/// original destination's port 15008.
fn connect_originate() -> Listener {
    let tunnel = TcpProxy {
        stat_prefix: CONNECT_ORIGINATE.to_string(),
        cluster_specifier: Some(TcpClusterSpecifier::Cluster(CONNECT_ORIGINATE.to_string())),
        tunneling_config: Some(TunnelingConfig {
            hostname: "%DOWNSTREAM_LOCAL_ADDRESS%".to_string(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let chain = FilterChain {
        name: CONNECT_ORIGINATE.to_string(),
        filters: vec![Filter {
            name: proto::TCP_PROXY.to_string(),
            config_type: Some(filter::ConfigType::TypedConfig(proto::any(&tunnel))),
        }],
        ..Default::default()
    };
    internal(
        CONNECT_ORIGINATE,
        vec![listener_filter(proto::ORIGINAL_DST, proto::any(&OriginalDst::default()))],
        vec![chain],
    )
}
