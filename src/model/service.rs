//! `Service`: one host the mesh can route to, from a Kubernetes Service or a ServiceEntry host.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

use super::Hostname;
use crate::config::ConfigKey;
pub use crate::config::protocol::Protocol;

/// One port of a service.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct ServicePort {
    /// Port name (`http`, `grpc-api`…; may be empty for a single unnamed port).
    pub name: Arc<str>,
    /// The service port (what clients connect to).
    pub port: u32,
    /// Protocol.
    pub protocol: Protocol,
    /// The port on the workload, when the service names one explicitly by number.
    pub target_port: Option<u32>,
    /// The container port name, when `targetPort` is a name (resolved per Pod).
    pub target_port_name: Option<Arc<str>>,
}

/// How endpoints of a service are found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Resolution {
    /// Endpoints are known IPs, delivered by EDS.
    Static,
    /// Endpoints are DNS names Envoy resolves itself, using every address
    /// (STRICT_DNS cluster).
    Dns,
    /// One DNS name Envoy resolves, connecting to one address at a time
    /// (LOGICAL_DNS cluster: ServiceEntry `DNS_ROUND_ROBIN`).
    DnsRoundRobin,
    /// No endpoints: traffic goes to the original destination (ORIGINAL_DST
    /// cluster). A headless Kubernetes Service (`clusterIP: None`), whose
    /// clients resolve Pod addresses by DNS; a router, which has no original
    /// destination, gets its endpoints over EDS (as in Istio).
    Passthrough,
    /// Another name of the service it names (a Kubernetes `ExternalName`
    /// Service, as Istio ≥ 1.21 treats it): it has no cluster and no
    /// listener of its own; the named service's routes answer to its names
    /// too, and a route to it goes to the named service's cluster.
    Alias,
}

impl Resolution {
    /// Whether Envoy resolves the endpoints by DNS.
    pub fn is_dns(self) -> bool {
        matches!(self, Resolution::Dns | Resolution::DnsRoundRobin)
    }
}

/// Where a service lives relative to the mesh.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Location {
    /// Inside the mesh (Kubernetes services, MESH_INTERNAL entries).
    MeshInternal,
    /// Outside the mesh.
    MeshExternal,
}

/// Namespaces a service (or rule) is visible to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub enum ExportTo {
    /// Every namespace (`*`, the default).
    All,
    /// Only these namespaces (`.` already resolved to the owner's namespace).
    Namespaces(Vec<Arc<str>>),
}

impl ExportTo {
    /// Parses Istio's `exportTo` list for an object in `namespace`.
    pub fn parse(list: &[String], namespace: &str) -> ExportTo {
        if list.is_empty() || list.iter().any(|e| e == "*") {
            return ExportTo::All;
        }
        let mut out: Vec<Arc<str>> =
            list.iter().map(|e| if e == "." { namespace.into() } else { Arc::<str>::from(e.as_str()) }).collect();
        out.sort();
        out.dedup();
        ExportTo::Namespaces(out)
    }

    /// The `exportTo` of a Service, ServiceEntry or VirtualService of
    /// `namespace` that names `list`: `default` (the mesh config's for its
    /// kind) when it names none, `.` in either being its own namespace.
    pub fn or_default(list: &[String], default: &[String], namespace: &str) -> ExportTo {
        ExportTo::parse(if list.is_empty() { default } else { list }, namespace)
    }

    /// The `exportTo` of a DestinationRule of `namespace`, as Istio reads
    /// the mesh config's `default` for one that names none: only `.` counts
    /// (private to its namespace); without it such a rule is public.
    pub fn of_destination_rule(list: &[String], default: &[String], namespace: &str) -> ExportTo {
        if list.is_empty() && default.iter().any(|e| e == ".") {
            ExportTo::Namespaces(vec![namespace.into()])
        } else {
            ExportTo::parse(list, namespace)
        }
    }

    /// Whether a proxy in `namespace` may see the object.
    pub fn visible_to(&self, namespace: &str) -> bool {
        match self {
            ExportTo::All => true,
            ExportTo::Namespaces(list) => list.iter().any(|n| &**n == namespace),
        }
    }
}

/// One routable host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Service {
    /// Fully qualified host name.
    pub hostname: Hostname,
    /// Namespace of the object that defined it.
    pub namespace: Arc<str>,
    /// The object that defined it (Service or ServiceEntry).
    pub source: ConfigKey,
    /// Ports, sorted by port number.
    pub ports: Vec<ServicePort>,
    /// Virtual IPs (cluster IP or ServiceEntry addresses); used as route domains.
    pub addresses: Vec<Arc<str>>,
    /// How endpoints are found.
    pub resolution: Resolution,
    /// Inside or outside the mesh.
    pub location: Location,
    /// Namespaces it is exported to.
    pub export_to: ExportTo,
    /// Workload selector (Kubernetes `spec.selector` or ServiceEntry `workloadSelector`).
    pub selector: BTreeMap<String, String>,
    /// For an alias (an `ExternalName` Service): the host it names.
    pub external_name: Option<Hostname>,
    /// The aliases that end at this service (through chains of aliases),
    /// sorted by namespace then host.
    pub aliases: Vec<Alias>,
}

/// An `ExternalName` Service naming another service.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Alias {
    /// The alias's host (`name.namespace.svc.cluster.local`).
    pub hostname: Hostname,
    /// The alias's namespace.
    pub namespace: Arc<str>,
}

impl Service {
    /// The port with this number.
    pub fn port(&self, number: u32) -> Option<&ServicePort> {
        self.ports.iter().find(|p| p.port == number)
    }

    /// Short name (first label) of the host: `reviews` for `reviews.default.svc.cluster.local`.
    pub fn short_name(&self) -> &str {
        self.hostname.split('.').next().unwrap_or(&self.hostname)
    }

    /// Whether this is a Kubernetes service (so `name` and `name.namespace` are route domains).
    pub fn is_kubernetes(&self) -> bool {
        self.source.kind == crate::config::ConfigKind::Service
    }

    /// Whether this is another name of a service: it gets no cluster, no
    /// listener and no virtual host of its own.
    pub fn is_alias(&self) -> bool {
        self.resolution == Resolution::Alias
    }

    /// Whether this is a headless Kubernetes Service (no virtual IP): its
    /// TCP ports are told apart by the addresses of its endpoints.
    pub fn is_headless(&self) -> bool {
        self.resolution == Resolution::Passthrough && self.is_kubernetes() && self.addresses.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn export_to_dot_means_own_namespace() {
        let e = ExportTo::parse(&[".".into()], "a");
        assert!(e.visible_to("a"));
        assert!(!e.visible_to("b"));
        assert!(ExportTo::parse(&[], "a").visible_to("b"));
    }
}
