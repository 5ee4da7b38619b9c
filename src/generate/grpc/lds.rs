//! LDS for proxyless gRPC: client listeners by the names applications
//! dial, and a server's listeners by the addresses it listens on.
//!
//! A client listener is an `api_listener`: gRPC takes no bytes through it,
//! only its connection manager's filters and where its routes come from
//! (`outbound|PORT||FQDN` over ADS). Its name echoes how the application
//! dialled the service: the FQDN, or a short name Istio's `tryFindFQDN`
//! expands with the node's DNS domain — `NAME` and, when the domain begins
//! with them, `NAME.NAMESPACE` and `NAME.NAMESPACE.svc` of the client's own
//! namespace. A scope's set holds every such name of every visible service
//! port; a client is sent those it asked for.
//!
//! A server listener (`xds.istio.io/grpc/lds/inbound/IP:PORT`) is named by
//! the address the server listens on, which only the server knows; it is
//! built per name from the workload's inbound key ([`server_listener`]).

use envoy_types::pb::envoy::config::listener::v3::{
    AdditionalAddress, ApiListener, Filter, FilterChain, Listener, filter,
};
use envoy_types::pb::envoy::config::route::v3::{
    NonForwardingAction, Route, RouteConfiguration, VirtualHost, route::Action,
};
use envoy_types::pb::envoy::extensions::filters::http::fault::v3::HttpFault;
use envoy_types::pb::envoy::extensions::filters::http::router::v3::Router;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    HttpConnectionManager, Rds, http_connection_manager::RouteSpecifier,
};

use super::{SERVER_LISTENER_PREFIX, tls};
use crate::config::istio::MtlsMode;
use crate::generate::{authz, naming, proto, route};
use crate::model::Service;
use crate::push::{InboundKey, PushContext, Scope};

/// The address of a client listener of a service without a virtual IP.
const NO_ADDRESS: &str = "0.0.0.0";

/// Every client listener of a gRPC scope, sorted by name.
pub fn listeners(_ctx: &PushContext, scope: &Scope) -> Vec<Listener> {
    let mut out = Vec::new();
    for svc in scope.services.iter().filter(|s| !s.is_alias()) {
        let spellings = host_spellings(&svc.hostname, &scope.key.namespace, &scope.key.dns_domain);
        for port in &svc.ports {
            for host in &spellings {
                out.push(client_listener(svc, host, port.port));
            }
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out.dedup_by(|a, b| a.name == b.name);
    out
}

/// The names a client of `namespace` whose DNS domain is `dns_domain` may
/// dial `host` by: the host itself, and the short names Istio expands
/// (`tryFindFQDN`): `NAME` (one label) when `host` is `NAME.DOMAIN`, and
/// `NAME.NAMESPACE`, `NAME.NAMESPACE.svc` when the domain begins with those.
pub fn host_spellings(host: &str, namespace: &str, dns_domain: &str) -> Vec<String> {
    let mut out = vec![host.to_string()];
    let short = host.strip_suffix(dns_domain).and_then(|h| h.strip_suffix('.')).filter(|s| !s.is_empty());
    let Some(short) = short.filter(|_| !dns_domain.is_empty()) else { return out };
    if !short.contains('.') {
        out.push(short.to_string());
    }
    for suffix in [namespace.to_string(), format!("{namespace}.svc")] {
        if dns_domain.starts_with(&suffix) {
            out.push(format!("{short}.{suffix}"));
        }
    }
    out
}

/// The client listener `HOST:PORT` of `svc`.
fn client_listener(svc: &Service, host: &str, port: u32) -> Listener {
    let mut addresses = svc.addresses.iter().filter(|a| proto::is_ip(a));
    let address = addresses.next().map_or(NO_ADDRESS, |a| &**a);
    let manager = HttpConnectionManager {
        http_filters: vec![
            proto::http_filter(proto::FAULT, proto::any(&HttpFault::default())),
            proto::http_filter(proto::ROUTER, proto::any(&Router::default())),
        ],
        route_specifier: Some(RouteSpecifier::Rds(Rds {
            config_source: Some(proto::ads_config_source()),
            route_config_name: naming::outbound_cluster(port, "", &svc.hostname),
        })),
        ..Default::default()
    };
    Listener {
        name: format!("{host}:{port}"),
        address: Some(proto::socket_address(address, port)),
        additional_addresses: addresses
            .map(|a| AdditionalAddress { address: Some(proto::socket_address(a, port)), ..Default::default() })
            .collect(),
        api_listener: Some(ApiListener { api_listener: Some(proto::any(&manager)) }),
        ..Default::default()
    }
}

/// The server listener `name` (`xds.istio.io/grpc/lds/inbound/IP:PORT`)
/// of a workload of shape `key`; `None` when the name is not of that form
/// or its port is not one of the workload's (istiod sends none either:
/// the server then does not serve on it).
///
/// One filter chain, by the port's mTLS mode as istiod picks it: STRICT
/// (or PERMISSIVE on a pod labelled `security.istio.io/tlsMode: istio`)
/// takes mTLS only (`inbound-mtls`), anything else plain text only
/// (`inbound-plaintext`): gRPC cannot tell the two apart on one port.
pub fn server_listener(key: &InboundKey, name: &str) -> Option<Listener> {
    let (ip, port) = split_host_port(name.strip_prefix(SERVER_LISTENER_PREFIX)?)?;
    let inbound = key.ports.iter().find(|p| p.port == port)?;
    let mtls = match inbound.mtls {
        MtlsMode::Strict => true,
        MtlsMode::Permissive => key.tls_mode_istio,
        MtlsMode::Disable => false,
    };
    let suffix = if mtls { "mtls" } else { "plaintext" };
    let mut http_filters = authz::grpc_http_filters(&key.authorization);
    http_filters.push(proto::http_filter(proto::ROUTER, proto::any(&Router::default())));
    let manager = HttpConnectionManager {
        route_specifier: Some(RouteSpecifier::RouteConfig(RouteConfiguration {
            name: "inbound".to_string(),
            virtual_hosts: vec![VirtualHost {
                domains: vec!["*".to_string()],
                routes: vec![Route {
                    r#match: Some(route::prefix_match("/")),
                    action: Some(Action::NonForwardingAction(NonForwardingAction {})),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        })),
        http_filters,
        ..Default::default()
    };
    let chain = FilterChain {
        name: format!("inbound-{suffix}"),
        filters: vec![Filter {
            name: format!("inbound-hcm{suffix}"),
            config_type: Some(filter::ConfigType::TypedConfig(proto::any(&manager))),
        }],
        transport_socket: mtls.then(tls::server_socket),
        ..Default::default()
    };
    Some(Listener {
        name: name.to_string(),
        address: Some(proto::socket_address(ip, port)),
        filter_chains: vec![chain],
        ..Default::default()
    })
}

/// `IP:PORT` or `[IPv6]:PORT` → the address (unbracketed) and the port;
/// `None` for anything else (a gRPC server names the address it bound).
fn split_host_port(text: &str) -> Option<(&str, u32)> {
    let (host, port) = text.rsplit_once(':')?;
    let host = match host.strip_prefix('[') {
        Some(inner) => inner.strip_suffix(']')?,
        None if host.contains(':') => return None,
        None => host,
    };
    let port: u32 = port.parse().ok().filter(|p| (1..=65535).contains(p))?;
    proto::is_ip(host).then_some((host, port))
}
