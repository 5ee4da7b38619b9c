//! Routes attached to their parents: the step between the listeners
//! (which say what each admits) and the VirtualServices (which merge the
//! converted rules of each (listener, host) and each (Service, port)).
//!
//! It owns which listeners of a Gateway a route's parent reference
//! attaches to (`sectionName` or `port`, then `allowedRoutes`, then the
//! hostnames), the hosts a route serves on a listener, and each route's
//! status, one entry per parent meshpush serves. Invariant: a route counts
//! as attached to every listener it passes the checks of, served or not,
//! but its rules reach only the served ones, so that the listener status
//! tells the truth about attachment even while the listener is broken.

use std::collections::{BTreeMap, BTreeSet};

use crate::config::gateway_api::{self as api, ParentReference};
use crate::config::{ConfigKey, ConfigKind, ConfigObject};
use crate::model::{StoreSnapshot, host};

use super::grants::Grants;
use super::listeners::{Gateways, ListenerState, WAYPOINT_NOT_SERVED};
use super::mesh::{is_service, mesh_parent};
use super::routes::{Converted, ROUTE_KINDS, Route, convert_route, resolved_condition};
use super::status::{CONTROLLER, Condition, ObjectStatus, RouteParentStatus};
use super::virtual_services::{Binding, RulesByHost};

/// What attaching a route to a parent found.
enum Denied {
    NoMatchingParent(String),
    NotAllowedByListeners(String),
    NoMatchingListenerHostname(String),
}

/// Attaches every route to the parents it names (the listeners of a served
/// Gateway that admit it, or the callers of a Service), converts it once,
/// and records its status; returns the converted rules by what they bind
/// to and host.
pub(super) fn attach_routes(
    store: &StoreSnapshot,
    grants: &Grants<'_>,
    gateways: &mut Gateways<'_>,
    waypoints: &BTreeSet<ConfigKey>,
    status: &mut BTreeMap<ConfigKey, ObjectStatus>,
) -> RulesByHost {
    // Namespace labels, for `allowedRoutes` selectors.
    let namespace_labels = |ns: &str| -> BTreeMap<String, String> {
        match store.get(&ConfigKey::new(ConfigKind::Namespace, "", ns)).map(|s| &*s.object) {
            Some(ConfigObject::Namespace(n)) => n.metadata.labels.clone(),
            // A namespace meshpush has no object for has only the name label.
            _ => BTreeMap::new(),
        }
        .into_iter()
        .chain([("kubernetes.io/metadata.name".to_string(), ns.to_string())])
        .collect()
    };

    // Rules by (what they bind, host): a Gateway listener's Istio
    // Gateway, or (mesh routing) the route's namespace and port.
    let mut per_host = RulesByHost::new();
    let routes = ROUTE_KINDS.into_iter().flat_map(|k| store.kind(k).values());
    for stored in routes {
        let Some(route) = Route::of(&stored.object) else { continue };
        let route_ns = route.metadata().namespace();
        let converted = convert_route(store, route, stored.revision, grants);
        let mut parents = Vec::new();
        for parent in route.parent_refs() {
            if is_service(parent) {
                let accepted = mesh_parent(store, route, parent, &converted, &mut per_host);
                parents.push(parent_status(parent, accepted, &converted));
                continue;
            }
            if parent.group() != api::GROUP || parent.kind() != "Gateway" {
                let accepted = Condition::new(
                    "Accepted",
                    false,
                    "NoMatchingParent",
                    format!(
                        "a parent of kind {} ({}) is not served by meshpush: parentRefs name Gateways or Services",
                        parent.kind(),
                        parent.group()
                    ),
                );
                parents.push(parent_status(parent, accepted, &converted));
                continue;
            }
            let gw_key = ConfigKey::new(ConfigKind::KubernetesGateway, parent.namespace(route_ns), &parent.name);
            let Some(listeners) = gateways.get_mut(&gw_key) else {
                // Not a Gateway of a class meshpush serves: another
                // controller's, a waypoint, or none. Report only when it
                // does not exist or is a waypoint.
                if waypoints.contains(&gw_key) {
                    let accepted = Condition::new("Accepted", false, "NoMatchingParent", WAYPOINT_NOT_SERVED);
                    parents.push(parent_status(parent, accepted, &converted));
                } else if store.get(&gw_key).is_none() {
                    let accepted = Condition::new(
                        "Accepted",
                        false,
                        "NoMatchingParent",
                        format!("Gateway {}/{} does not exist", gw_key.namespace, gw_key.name),
                    );
                    parents.push(parent_status(parent, accepted, &converted));
                }
                continue;
            };
            let attached = attach(route, parent, listeners, &namespace_labels);
            let accepted = match &attached {
                Ok(indices) => {
                    for &i in indices {
                        let l = &mut listeners[i];
                        l.attached += 1;
                        if !l.served() {
                            continue;
                        }
                        if let Ok((rules, _)) = &converted {
                            for h in route_hosts(route.hostnames(), l.listener.hostname.as_deref()) {
                                let binding = Binding::Gateway(l.istio_name.clone());
                                per_host.entry((binding, h)).or_default().push(rules.clone());
                            }
                        }
                    }
                    Condition::new("Accepted", true, "Accepted", "Route was valid")
                }
                Err(Denied::NoMatchingParent(m)) => Condition::new("Accepted", false, "NoMatchingParent", m.clone()),
                Err(Denied::NotAllowedByListeners(m)) => {
                    Condition::new("Accepted", false, "NotAllowedByListeners", m.clone())
                }
                Err(Denied::NoMatchingListenerHostname(m)) => {
                    Condition::new("Accepted", false, "NoMatchingListenerHostname", m.clone())
                }
            };
            parents.push(parent_status(parent, accepted, &converted));
        }
        if !parents.is_empty() {
            status.insert(stored.object.key(), ObjectStatus::Route { parents });
        }
    }
    per_host
}

/// A parent's entry in a route's status: whether the parent accepted the
/// route, and whether the route's references resolve (the same for every
/// parent: a route is converted once).
fn parent_status(parent: &ParentReference, accepted: Condition, converted: &Converted) -> RouteParentStatus {
    RouteParentStatus {
        parent_ref: parent.clone(),
        controller_name: CONTROLLER,
        conditions: vec![accepted, resolved_condition(converted)],
    }
}

/// Which listeners of a Gateway a route's parent reference attaches to.
fn attach(
    route: Route<'_>,
    parent: &ParentReference,
    listeners: &[ListenerState<'_>],
    namespace_labels: &dyn Fn(&str) -> BTreeMap<String, String>,
) -> Result<Vec<usize>, Denied> {
    let route_ns = route.metadata().namespace();
    let named: Vec<usize> = (0..listeners.len())
        .filter(|&i| {
            let l = listeners[i].listener;
            parent.section_name.as_deref().is_none_or(|s| s == l.name) && parent.port.is_none_or(|p| p == l.port)
        })
        .collect();
    if named.is_empty() {
        let what = match (&parent.section_name, parent.port) {
            (Some(s), Some(p)) => format!("no listener {s} on port {p}"),
            (Some(s), None) => format!("no listener named {s}"),
            (None, Some(p)) => format!("no listener on port {p}"),
            (None, None) => "no listeners".to_string(),
        };
        return Err(Denied::NoMatchingParent(format!("the Gateway has {what}")));
    }
    let allowed: Vec<usize> = named
        .iter()
        .copied()
        .filter(|&i| {
            let l = &listeners[i];
            let namespace_ok = match l.listener.routes_from() {
                "All" => true,
                "Selector" => l
                    .listener
                    .allowed_routes
                    .as_ref()
                    .and_then(|a| a.namespaces.as_ref())
                    .and_then(|n| n.selector.as_ref())
                    .is_some_and(|s| s.matches(&namespace_labels(route_ns))),
                _ => route_ns == l.namespace,
            };
            namespace_ok && l.kinds.contains(&route.kind())
        })
        .collect();
    if allowed.is_empty() {
        return Err(Denied::NotAllowedByListeners(format!(
            "no listener the reference names admits a {} of namespace {route_ns}",
            route.kind()
        )));
    }
    let matching: Vec<usize> = allowed
        .into_iter()
        .filter(|&i| !route_hosts(route.hostnames(), listeners[i].listener.hostname.as_deref()).is_empty())
        .collect();
    if matching.is_empty() {
        return Err(Denied::NoMatchingListenerHostname(
            "no hostname of the route intersects a listener's hostname".to_string(),
        ));
    }
    Ok(matching)
}

/// The hosts a route serves on a listener: its hostnames that intersect the
/// listener's (each the narrower of the two), or the listener's hostname
/// (`*` without one) when the route names none.
pub fn route_hosts(route: &[String], listener: Option<&str>) -> Vec<String> {
    let listener = listener.unwrap_or("*");
    if route.is_empty() {
        return vec![listener.to_string()];
    }
    let mut out: Vec<String> = route
        .iter()
        .filter_map(|h| {
            if host::matches(listener, h) || listener == h {
                Some(h.clone())
            } else if host::matches(h, listener) {
                Some(listener.to_string())
            } else {
                None
            }
        })
        .collect();
    out.sort();
    out.dedup();
    out
}
