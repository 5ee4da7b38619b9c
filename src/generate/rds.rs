//! RDS: the route configurations of one scope.
//!
//! Sidecars get one route config per outbound HTTP port, named by the port
//! (`9080`): a virtual host per visible service on the port (`host:port`)
//! with the domains Istio gives it, routes from the service's VirtualService
//! or a default route, and a final catch-all (`allow_any` to
//! `PassthroughCluster`, or `block_all` answering 502 under `REGISTRY_ONLY`).
//! Routers get one per HTTP port they bind (`http.8080`), and one per HTTPS
//! server that terminates TLS (`https.443.PORT_NAME.GATEWAY.NAMESPACE`): a
//! virtual host per host of each VirtualService bound to the servers;
//! `httpsRedirect` servers' virtual hosts answer with a redirect to HTTPS. Both
//! ignore the port in host matching, as Istio's do, so no domain carries a
//! `:port` (a `Host: reviews:9080` matches `reviews`).
//!
//! Invariants: a domain appears at most once per route config (Envoy refuses
//! duplicates; the first virtual host keeps it); output depends only on the
//! context and the scope; configs are sorted by name.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use std::sync::Arc;

use envoy_types::pb::envoy::config::route::v3::{RouteConfiguration, VirtualHost, virtual_host::TlsRequirementType};

use super::gateway::{self, PortKind};
use super::outbound::{self, OutboundPort};
use super::route::{self, RouteTarget};
use super::{naming, proto};
use crate::config::istio::MESH_GATEWAY;
use crate::model::{Hostname, ProxyKind, Service};
use crate::push::index::{GatewayServer, ResolvedGateway};
use crate::push::scope::OutboundPolicy;
use crate::push::{PushContext, Scope};

/// Every route config of `scope`, sorted by name.
pub fn route_configs(ctx: &PushContext, scope: &Scope) -> Vec<RouteConfiguration> {
    let mut out: Vec<RouteConfiguration> = match scope.key.kind {
        ProxyKind::Sidecar => outbound::outbound_ports(scope)
            .iter()
            .filter(|p| p.is_http())
            .map(|p| sidecar_config(ctx, scope, p))
            .collect(),
        ProxyKind::Router => gateway_configs(ctx, scope),
        // A waypoint's routes are inline in its listeners, as istiod's are.
        ProxyKind::Ztunnel | ProxyKind::Waypoint => Vec::new(),
    };
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The route config called `name` in `scope`, if the scope has one.
pub fn route_config(ctx: &PushContext, scope: &Scope, name: &str) -> Option<RouteConfiguration> {
    match scope.key.kind {
        ProxyKind::Sidecar => {
            let port = naming::parse_sidecar_route(name)?;
            let ports = outbound::outbound_ports(scope);
            let p = ports.iter().find(|p| p.port == port && p.is_http())?;
            Some(sidecar_config(ctx, scope, p))
        }
        ProxyKind::Router => gateway_configs(ctx, scope).into_iter().find(|c| c.name == name),
        ProxyKind::Ztunnel | ProxyKind::Waypoint => None,
    }
}

/// Domains already given to a virtual host of the config being built.
#[derive(Default)]
struct Domains(HashSet<String>);

impl Domains {
    /// Keeps the domains not used yet, and marks them used.
    fn claim(&mut self, mut domains: Vec<String>) -> Vec<String> {
        domains.retain(|d| self.0.insert(d.clone()));
        domains
    }
}

fn sidecar_config(ctx: &PushContext, scope: &Scope, port: &OutboundPort<'_>) -> RouteConfiguration {
    let namespace = &*scope.key.namespace;
    let target = RouteTarget::new(ctx, scope, port.port, MESH_GATEWAY);
    let mut used = Domains::default();
    let mut virtual_hosts = Vec::new();
    let routed = |host: &str| ctx.virtual_services.for_host(MESH_GATEWAY, namespace, host);
    for svc in &port.http {
        let rule = routed(&svc.hostname);
        // An alias's names belong to the service it names, unless a
        // VirtualService of its own routes them (that one wins, as Istio
        // builds VirtualService hosts first).
        if svc.is_alias() && rule.is_none() {
            continue;
        }
        let mut names = sidecar_domains(svc, namespace);
        for alias in &svc.aliases {
            let visible = scope.visible_hosts.contains(&alias.hostname);
            let own_host = port.http.iter().any(|s| s.hostname == alias.hostname) && routed(&alias.hostname).is_some();
            if let Some(alias) = ctx.services.get(&alias.hostname).filter(|_| visible && !own_host) {
                names.extend(sidecar_domains(alias, namespace));
            }
        }
        let domains = used.claim(names);
        if domains.is_empty() {
            continue;
        }
        let mut routes = rule.map(|vs| target.http_routes(vs)).unwrap_or_default();
        if routes.is_empty() {
            routes.push(target.default_route(&svc.namespace, &svc.hostname, port.port));
        }
        virtual_hosts.push(VirtualHost {
            name: naming::virtual_host(&svc.hostname, port.port),
            domains,
            routes,
            ..Default::default()
        });
    }
    if !used.claim(vec!["*".to_string()]).is_empty() {
        virtual_hosts.push(match scope.outbound_policy {
            OutboundPolicy::AllowAny { .. } => VirtualHost {
                name: naming::ALLOW_ANY_VIRTUAL_HOST.to_string(),
                domains: vec!["*".to_string()],
                routes: vec![route::catch_all_route(&naming::unknown_destination_cluster(&scope.outbound_policy))],
                ..Default::default()
            },
            OutboundPolicy::RegistryOnly => VirtualHost {
                name: naming::BLOCK_ALL_VIRTUAL_HOST.to_string(),
                domains: vec!["*".to_string()],
                routes: vec![route::block_all_route()],
                ..Default::default()
            },
        });
    }
    RouteConfiguration {
        name: naming::sidecar_route(port.port),
        virtual_hosts,
        ignore_port_in_host_matching: true,
        ..Default::default()
    }
}

/// The domains Istio gives a service's virtual host on a sidecar, with no
/// `:port` variants (the route config ignores the port in host matching,
/// as Istio's does): the FQDN and the absolute FQDN (`name.ns.svc.cluster.local.`);
/// for a Kubernetes service `name` (from its own namespace),
/// `name.ns.svc` and `name.ns`, in Istio's order; every virtual IP. A
/// headless service's names also match with any prefix (`*.name…`), for
/// its Pods' own names (`web-0.web.ns.svc…`).
pub(crate) fn sidecar_domains(svc: &Service, proxy_namespace: &str) -> Vec<String> {
    let fqdn = &*svc.hostname;
    let mut out: Vec<String> = Vec::with_capacity(6 + svc.addresses.len());
    out.push(fqdn.to_string());
    if !proto::is_ip(fqdn) {
        out.push(format!("{fqdn}."));
    }
    if svc.is_kubernetes() {
        let (name, ns) = (svc.short_name(), &*svc.namespace);
        if ns == proxy_namespace {
            out.push(name.to_string());
            out.push(format!("{name}.{ns}.svc"));
            out.push(format!("{name}.{ns}"));
        } else {
            out.push(format!("{name}.{ns}"));
            out.push(format!("{name}.{ns}.svc"));
        }
    }
    if svc.resolution == crate::model::Resolution::Passthrough && svc.is_kubernetes() {
        let wildcards: Vec<String> = out.iter().map(|d| format!("*.{d}")).collect();
        out.extend(wildcards);
    }
    for address in svc.addresses.iter().filter(|a| proto::is_ip(a)) {
        out.push(if address.contains(':') { format!("[{address}]") } else { address.to_string() });
    }
    out
}

/// A router's route configs: one per plain HTTP port (`http.PORT`, its
/// servers merged), one per HTTPS server that terminates TLS (named for it).
fn gateway_configs(ctx: &PushContext, scope: &Scope) -> Vec<RouteConfiguration> {
    let mut out = Vec::new();
    for p in gateway::gateway_ports(scope) {
        match p.kind {
            PortKind::Http => out.push(gateway_config(ctx, scope, naming::gateway_route(p.port), &p.servers)),
            PortKind::Tls => {
                for (gw, server) in p.servers.iter().filter(|(_, s)| gateway::terminates_https(s)) {
                    let name = gateway::route_name(scope, gw, server).expect("an HTTPS server has a route config");
                    out.push(gateway_config(ctx, scope, name, &[(gw, server)]));
                }
            }
            PortKind::Tcp => {}
        }
    }
    out
}

/// The route config `name` of `servers`: a virtual host per host of each
/// VirtualService bound to one of them. A server with `httpsRedirect`
/// makes its virtual hosts redirect every request to `https://` (Envoy's
/// `require_tls`), with a virtual host of its own for each of its hosts no
/// rule routes, as Istio builds them.
fn gateway_config(
    ctx: &PushContext,
    scope: &Scope,
    name: String,
    servers: &[(&Arc<ResolvedGateway>, &GatewayServer)],
) -> RouteConfiguration {
    let namespace = &*scope.key.namespace;
    // Virtual hosts by name; a host served by several rules gets their routes
    // one after the other, in rule order (as Istio merges them).
    let mut hosts: BTreeMap<String, GatewayHost> = BTreeMap::new();
    let mut seen: BTreeSet<(&crate::config::ConfigKey, String)> = BTreeSet::new();
    for (gw, server) in servers {
        let target = RouteTarget::new(ctx, scope, server.port, &gw.name);
        let redirect = server.https_redirect();
        for vs in ctx.virtual_services.for_gateway(&gw.name).filter(|vs| vs.export_to.visible_to(namespace)) {
            let vhost_hosts = gateway::server_hosts(server, vs);
            if vhost_hosts.is_empty() {
                continue;
            }
            let routes = target.http_routes(vs);
            if routes.is_empty() && !redirect {
                continue;
            }
            for h in vhost_hosts {
                let vhost = naming::virtual_host(&h, server.port);
                if !seen.insert((&vs.key, vhost.clone())) {
                    continue;
                }
                let entry = hosts.entry(vhost).or_insert_with(|| GatewayHost { host: h, ..Default::default() });
                entry.routes.extend(routes.iter().cloned());
                entry.redirect |= redirect;
            }
        }
        if redirect {
            for (_, h) in &server.hosts {
                let host: Hostname = h.to_ascii_lowercase().into();
                let entry = hosts
                    .entry(naming::virtual_host(&host, server.port))
                    .or_insert_with(|| GatewayHost { host, ..Default::default() });
                entry.redirect = true;
            }
        }
    }
    let mut used = Domains::default();
    let virtual_hosts = hosts
        .into_iter()
        .filter_map(|(name, GatewayHost { host, routes, redirect })| {
            let domains = used.claim(gateway_domains(&host));
            (!domains.is_empty()).then(|| VirtualHost {
                name,
                domains,
                routes,
                require_tls: if redirect { TlsRequirementType::All as i32 } else { TlsRequirementType::None as i32 },
                ..Default::default()
            })
        })
        .collect();
    RouteConfiguration { name, virtual_hosts, ignore_port_in_host_matching: true, ..Default::default() }
}

/// A virtual host of a gateway route config, being built.
#[derive(Default)]
struct GatewayHost {
    host: Hostname,
    routes: Vec<envoy_types::pb::envoy::config::route::v3::Route>,
    redirect: bool,
}

/// A gateway virtual host's one domain: its host, as Istio gives it (the
/// route config ignores the port in host matching).
fn gateway_domains(h: &str) -> Vec<String> {
    vec![h.to_ascii_lowercase()]
}
