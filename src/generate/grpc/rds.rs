//! RDS for proxyless gRPC: one route config per service port, named as
//! the cluster of its default subset (`outbound|PORT||FQDN`), which is the
//! name a client listener points at.
//!
//! Each holds the service's one virtual host: the names a sidecar's has
//! (FQDN, the short names of the client's namespace, the virtual IPs), each
//! also with `:PORT`, as gRPC matches the authority it dialled (`foo:8080`)
//! and istiod gives gRPC clients port-qualified domains. Its routes are a
//! sidecar's (the VirtualService's, else the default route), as gRPC
//! applies them ([`unsupported::for_grpc`]). A port that does not carry
//! HTTP has no virtual host: a gRPC call to it fails at the client, as it
//! does under istiod.
//!
//! [`unsupported::for_grpc`]: super::unsupported::for_grpc

use envoy_types::pb::envoy::config::route::v3::{RouteConfiguration, VirtualHost};

use super::unsupported;
use crate::config::istio::MESH_GATEWAY;
use crate::generate::naming;
use crate::generate::rds::sidecar_domains;
use crate::generate::route::RouteTarget;
use crate::model::{Protocol, Service, ServicePort};
use crate::push::{PushContext, Scope};

/// Every route config of a gRPC scope, sorted by name.
pub fn route_configs(ctx: &PushContext, scope: &Scope) -> Vec<RouteConfiguration> {
    let mut out: Vec<RouteConfiguration> = scope
        .services
        .iter()
        .filter(|s| !s.is_alias())
        .flat_map(|svc| svc.ports.iter().map(move |port| route_config(ctx, scope, svc, port)))
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The route config of `port` of `svc`.
fn route_config(ctx: &PushContext, scope: &Scope, svc: &Service, port: &ServicePort) -> RouteConfiguration {
    let name = naming::outbound_cluster(port.port, "", &svc.hostname);
    let carries_http = port.protocol.is_http() || port.protocol == Protocol::Unknown;
    if !carries_http {
        return RouteConfiguration { name, ..Default::default() };
    }
    let namespace = &*scope.key.namespace;
    let target = RouteTarget::new(ctx, scope, port.port, MESH_GATEWAY);
    let rule = ctx.virtual_services.for_host(MESH_GATEWAY, namespace, &svc.hostname);
    let mut routes = rule.map(|vs| target.http_routes(vs)).unwrap_or_default();
    if routes.is_empty() {
        routes.push(target.default_route(&svc.namespace, &svc.hostname, port.port));
    }
    routes.iter_mut().for_each(unsupported::for_grpc);
    let names = sidecar_domains(svc, namespace);
    let mut domains = Vec::with_capacity(names.len() * 2);
    for domain in names {
        domains.push(format!("{domain}:{}", port.port));
        domains.push(domain);
    }
    RouteConfiguration {
        name,
        virtual_hosts: vec![VirtualHost {
            name: naming::virtual_host(&svc.hostname, port.port),
            domains,
            routes,
            ..Default::default()
        }],
        ..Default::default()
    }
}
