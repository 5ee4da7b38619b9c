//! Routes whose parent is a Service (mesh routing, GAMMA): the branch of
//! attachment that binds a route's rules to the sidecars calling the
//! Service rather than to a Gateway's listener.
//!
//! It owns the checks a Service parent must pass (the Service exists; the
//! port it names by number or by name is one of the Service's). Invariant:
//! a route of the Service's own namespace is bound as the producer's (every
//! client sees it), one of another namespace as that namespace's only, so
//! that a consumer cannot change how others reach the Service.

use crate::config::gateway_api::ParentReference;
use crate::config::{ConfigKey, ConfigKind, ConfigObject};
use crate::model::{StoreSnapshot, host};

use super::routes::{Converted, Route};
use super::status::Condition;
use super::virtual_services::{Binding, RulesByHost};

/// Whether a parent reference names a Service (mesh routing, GAMMA).
pub(super) fn is_service(parent: &ParentReference) -> bool {
    matches!(parent.group.as_deref(), Some("" | "core")) && parent.kind() == "Service"
}

/// Attaches `route` to the sidecars calling the Service `parent` names: its
/// rules go to the Service's host, limited to the port `parent` names (by
/// `port`, or by port name in `sectionName`) when it names one. Returns
/// the `Accepted` condition.
pub(super) fn mesh_parent(
    store: &StoreSnapshot,
    route: Route<'_>,
    parent: &ParentReference,
    converted: &Converted,
    per_host: &mut RulesByHost,
) -> Condition {
    let route_ns = route.metadata().namespace();
    let ns = parent.namespace(route_ns);
    let no_parent = |m: String| Condition::new("Accepted", false, "NoMatchingParent", m);
    let Some(ConfigObject::Service(svc)) =
        store.get(&ConfigKey::new(ConfigKind::Service, ns, &parent.name)).map(|s| &*s.object)
    else {
        return no_parent(format!("Service {ns}/{} does not exist", parent.name));
    };
    let mut port = parent.port;
    if let Some(section) = &parent.section_name {
        // A Service's sections are its named ports.
        match svc.spec.ports.iter().find(|p| p.name.as_deref() == Some(section.as_str())) {
            Some(p) if port.is_none_or(|n| n == p.port) => port = Some(p.port),
            Some(p) => {
                return no_parent(format!(
                    "Service {ns}/{}: port {section} is {}, not {}",
                    parent.name,
                    p.port,
                    port.unwrap_or_default()
                ));
            }
            None => return no_parent(format!("Service {ns}/{} has no port named {section}", parent.name)),
        }
    }
    if let Some(port) = port
        && !svc.spec.ports.iter().any(|p| p.port == port)
    {
        return no_parent(format!("Service {ns}/{} has no port {port}", parent.name));
    }
    if let Ok((rules, _)) = converted {
        let binding = Binding::Mesh { namespace: route_ns.to_string(), port, producer: ns == route_ns };
        let host = host::service_fqdn(&parent.name, ns).to_string();
        per_host.entry((binding, host)).or_default().push(rules.clone());
    }
    Condition::new("Accepted", true, "Accepted", "Route was valid")
}
