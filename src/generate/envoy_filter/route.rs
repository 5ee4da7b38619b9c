//! Route patches: ROUTE_CONFIGURATION, VIRTUAL_HOST and HTTP_ROUTE
//! (`docs/envoyfilter.md` §2.5, §3.7, §3.8).
//!
//! Per route configuration: its MERGEs; then per virtual host the
//! VIRTUAL_HOST patches in order (a REMOVE ends there, a REPLACE puts a
//! copy of the value in its place) and, for a host still there, the
//! HTTP_ROUTE patches; then the virtual hosts ADDed. Hosts are removed by
//! name after the ADDs, so an added host of a removed name goes too, as in
//! istiod. Routes: REMOVE and MERGE over the existing routes first, then
//! each ADD or INSERT in the order of the patches.
//!
//! A route configuration is named by its port for a sidecar (`9080`, or
//! `inbound|9080||` inlined on the inbound side), and `http.PORT` or
//! `https.PORT.PORT_NAME.GATEWAY.NAMESPACE` on a gateway, whose port
//! match compares Gateway server numbers ([`GatewayPorts`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use envoy_types::pb::envoy::config::route::v3::{Route, RouteConfiguration, VirtualHost, route::Action};

use super::{Context, Record, is_merge, merge_into, of_kind, value};
use crate::config::istio::envoy_filter::{ApplyTo, Operation, RouteAction, RouteConfigurationMatch};
use crate::push::Scope;
use crate::push::index::envoy_filter::ResolvedPatch;

/// A gateway's bound ports and the Gateway server numbers behind each:
/// what a route configuration match's `portNumber` is compared with.
#[derive(Debug, Default)]
pub struct GatewayPorts(BTreeMap<u32, BTreeSet<u32>>);

impl GatewayPorts {
    /// The ports of a router scope (none for a sidecar's).
    pub fn of(scope: &Scope) -> GatewayPorts {
        let mut map: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
        if scope.key.kind == crate::model::ProxyKind::Router {
            for port in crate::generate::gateway::gateway_ports(scope) {
                map.entry(port.port).or_default().extend(port.servers.iter().map(|(_, s)| s.port));
            }
        }
        GatewayPorts(map)
    }

    fn matches(&self, route_port: u32, wanted: u32) -> bool {
        match self.0.get(&route_port) {
            Some(servers) => servers.contains(&wanted),
            None => route_port == wanted,
        }
    }
}

/// Patches every route configuration of one side of a proxy.
pub fn patch(
    patches: &[Arc<ResolvedPatch>],
    context: Context,
    configs: &mut [RouteConfiguration],
    ports: &GatewayPorts,
    record: &mut Record,
) {
    let kinds = [ApplyTo::RouteConfiguration, ApplyTo::VirtualHost, ApplyTo::HttpRoute];
    let mut any = false;
    for kind in kinds {
        for p in of_kind(patches, kind, context) {
            record.considered(p);
            any = true;
        }
    }
    if any {
        for rc in configs {
            patch_one(patches, context, rc, ports, record);
        }
    }
}

/// Patches one route configuration.
pub fn patch_one(
    patches: &[Arc<ResolvedPatch>],
    context: Context,
    rc: &mut RouteConfiguration,
    ports: &GatewayPorts,
    record: &mut Record,
) {
    let name = rc.name.clone();
    let matching =
        |kind| of_kind(patches, kind, context).filter(|p| config_match(context, &name, p, ports)).collect::<Vec<_>>();
    for p in matching(ApplyTo::RouteConfiguration) {
        record.considered(p);
        if is_merge(p) {
            match merge_into(rc, p) {
                Ok(()) => record.applied(p),
                Err(e) => record.failed(p, &format!("route configuration {}", rc.name), e),
            }
        }
    }
    let hosts = matching(ApplyTo::VirtualHost);
    let routes = matching(ApplyTo::HttpRoute);
    hosts.iter().chain(&routes).for_each(|p| record.considered(p));
    if hosts.is_empty() && routes.is_empty() {
        return;
    }
    let mut removed: Vec<String> = Vec::new();
    for vh in &mut rc.virtual_hosts {
        let mut gone = false;
        for p in &hosts {
            if p.operation == Operation::Add || !vhost_match(vh, p) {
                continue;
            }
            match p.operation {
                Operation::Remove => {
                    removed.push(vh.name.clone());
                    record.applied(p);
                    gone = true;
                    break;
                }
                Operation::Replace => {
                    if let Some(replacement) = value::<VirtualHost>(p) {
                        *vh = replacement;
                        record.applied(p);
                    }
                }
                _ if is_merge(p) => match merge_into(vh, p) {
                    Ok(()) => record.applied(p),
                    Err(e) => record.failed(p, &format!("virtual host {}", vh.name), e),
                },
                _ => {}
            }
        }
        if !gone {
            let mine: Vec<&ResolvedPatch> = routes.iter().copied().filter(|p| vhost_match(vh, p)).collect();
            patch_routes(&mine, vh, record);
        }
    }
    for p in hosts.iter().filter(|p| p.operation == Operation::Add) {
        if let Some(added) = value::<VirtualHost>(p) {
            rc.virtual_hosts.push(added);
            record.applied(p);
        }
    }
    rc.virtual_hosts.retain(|vh| !removed.contains(&vh.name));
}

/// HTTP_ROUTE patches on one virtual host.
fn patch_routes(patches: &[&ResolvedPatch], vh: &mut VirtualHost, record: &mut Record) {
    if patches.is_empty() {
        return;
    }
    let inserts = |p: &&&ResolvedPatch| {
        matches!(
            p.operation,
            Operation::Add | Operation::InsertBefore | Operation::InsertAfter | Operation::InsertFirst
        )
    };
    let mut kept = Vec::with_capacity(vh.routes.len());
    'routes: for mut route in std::mem::take(&mut vh.routes) {
        for p in patches {
            if inserts(&p) || !route_match(&route, p) {
                continue;
            }
            match p.operation {
                Operation::Remove => {
                    record.applied(p);
                    continue 'routes;
                }
                _ if is_merge(p) => match merge_into(&mut route, p) {
                    Ok(()) => record.applied(p),
                    Err(e) => record.failed(p, &format!("route {:?} of {}", route.name, vh.name), e),
                },
                _ => {}
            }
        }
        kept.push(route);
    }
    vh.routes = kept;
    for p in patches.iter().filter(inserts) {
        let Some(route) = value::<Route>(p) else { continue };
        let named = route_of(p).is_some();
        let first = vh.routes.iter().position(|r| route_match(r, p));
        let at = match (p.operation, named, first) {
            (Operation::Add, _, _) | (Operation::InsertAfter, false, _) => Some(vh.routes.len()),
            (Operation::InsertBefore | Operation::InsertFirst, false, _) => Some(0),
            (Operation::InsertAfter, true, Some(i)) => Some(i + 1),
            (Operation::InsertBefore, true, Some(i)) => Some(i),
            (Operation::InsertFirst, true, Some(_)) => Some(0),
            _ => None,
        };
        if let Some(at) = at {
            vh.routes.insert(at, route);
            record.applied(p);
        }
    }
}

fn config_of(p: &ResolvedPatch) -> Option<&RouteConfigurationMatch> {
    p.matches.route_configuration.as_ref()
}

fn route_of(p: &ResolvedPatch) -> Option<&crate::config::istio::envoy_filter::RouteMatch> {
    config_of(p)?.vhost.as_ref()?.route.as_ref()
}

/// istiod's `routeConfigurationMatch`.
fn config_match(context: Context, name: &str, p: &ResolvedPatch, ports: &GatewayPorts) -> bool {
    let Some(m) = config_of(p) else { return true };
    if !m.name.is_empty() && m.name != name {
        return false;
    }
    if context != Context::Gateway {
        return m.port_number == 0 || sidecar_port(name) == m.port_number;
    }
    let (port, port_name, gateway) = gateway_route(name);
    (m.port_name.is_empty() || m.port_name == port_name)
        && (m.gateway.is_empty() || m.gateway == gateway)
        && (m.port_number == 0 || ports.matches(port, m.port_number))
}

/// The port of a sidecar's route configuration: `9080`, or
/// `inbound|9080||`; 0 for any other name.
fn sidecar_port(name: &str) -> u32 {
    if name.starts_with("inbound") {
        return crate::generate::naming::parse_cluster(name).map_or(0, |c| c.port);
    }
    name.parse().unwrap_or(0)
}

/// A gateway route configuration's port, port name and `NAMESPACE/GATEWAY`
/// (`http.PORT`, or `https.PORT.PORT_NAME.GATEWAY.NAMESPACE`; zeros else).
fn gateway_route(name: &str) -> (u32, String, String) {
    let parts: Vec<&str> = name.split('.').collect();
    match parts.as_slice() {
        ["http", port] => (port.parse().unwrap_or(0), String::new(), String::new()),
        ["https", port, port_name, gateway, namespace] => match port.parse() {
            Ok(port) => (port, port_name.to_string(), format!("{namespace}/{gateway}")),
            Err(_) => (0, String::new(), String::new()),
        },
        _ => (0, String::new(), String::new()),
    }
}

/// istiod's `virtualHostMatch`.
fn vhost_match(vh: &VirtualHost, p: &ResolvedPatch) -> bool {
    let Some(m) = config_of(p).and_then(|c| c.vhost.as_ref()) else { return true };
    (m.name.is_empty() || m.name == vh.name) && (m.domain_name.is_empty() || vh.domains.contains(&m.domain_name))
}

/// istiod's `routeMatch`: name, and action (a route of any other action
/// matches every action, as in istiod).
fn route_match(route: &Route, p: &ResolvedPatch) -> bool {
    let Some(m) = route_of(p) else { return true };
    if !m.name.is_empty() && m.name != route.name {
        return false;
    }
    match (m.action, &route.action) {
        (RouteAction::Any, _) => true,
        (RouteAction::Route, Some(Action::Route(_)))
        | (RouteAction::Redirect, Some(Action::Redirect(_)))
        | (RouteAction::DirectResponse, Some(Action::DirectResponse(_))) => true,
        (_, Some(Action::Route(_) | Action::Redirect(_) | Action::DirectResponse(_))) => false,
        (_, _) => true,
    }
}
