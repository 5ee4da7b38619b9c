//! Services as ztunnel is sent them: each Kubernetes Service (but
//! ExternalName ones) and each host of a ServiceEntry, one per hostname
//! and namespace, one of each hostname marked canonical, as istiod's
//! `constructService`, `constructServiceEntries` and
//! `selectWorkloadServices` build and choose them.

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::super::waypoint::{Target, binds_entry};
use super::{Builder, octets};
use crate::config::istio::ServiceEntry;
use crate::config::k8s::{self, IntOrString};
use crate::config::{ConfigKind, ObjectMeta};
use crate::workload_api::workload::{
    AppProtocol, IpFamilies, LoadBalancing, NetworkAddress, Port, Service, load_balancing,
};

/// Where a service came from, for choosing among services of one hostname.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Origin {
    /// Kubernetes Services win over ServiceEntries.
    kubernetes: bool,
    /// Older wins (objects of files have no creation time: their names decide).
    created: (bool, Option<String>, String),
}

impl Origin {
    pub(super) fn of(meta: &ObjectMeta, kubernetes: bool) -> Origin {
        Origin {
            kubernetes,
            created: (meta.creation_timestamp.is_none(), meta.creation_timestamp.clone(), meta.name.clone()),
        }
    }

    /// Whether `self` beats `other` (istiod: older, and `other` is no Kubernetes Service).
    fn beats(&self, other: &Origin) -> bool {
        self.created < other.created && !other.kubernetes
    }
}

/// One service per hostname and namespace (a Kubernetes Service, else the
/// oldest ServiceEntry), and one of each hostname marked canonical (a
/// Kubernetes Service, else the oldest), as istiod chooses them.
pub(super) fn select_services(services: Vec<(Origin, Service)>) -> Vec<Service> {
    let mut by_host: BTreeMap<String, BTreeMap<String, (Origin, Service)>> = BTreeMap::new();
    for (origin, service) in services {
        let namespaces = by_host.entry(service.hostname.clone()).or_default();
        match namespaces.get(&service.namespace) {
            Some((best, _)) if !(origin.kubernetes || origin.beats(best)) => {}
            _ => {
                namespaces.insert(service.namespace.clone(), (origin, service));
            }
        }
    }
    let mut out = Vec::new();
    for namespaces in by_host.into_values() {
        let mut canonical: Option<(&Origin, &String)> = None;
        for (ns, (origin, _)) in &namespaces {
            if origin.kubernetes || canonical.is_none_or(|(best, _)| origin.beats(best)) {
                canonical = Some((origin, ns));
            }
        }
        let canonical = canonical.map(|(_, ns)| ns.clone());
        for (ns, (_, mut service)) in namespaces {
            service.canonical = canonical.as_ref() == Some(&ns);
            out.push(service);
        }
    }
    out
}

impl Builder<'_> {
    /// The traffic distribution a namespace's annotation sets for its services.
    fn namespace_traffic_distribution(&self, namespace: &str) -> Option<String> {
        let stored = self.store.get(&crate::config::ConfigKey::new(ConfigKind::Namespace, "", namespace))?;
        stored.object.meta().annotations.get(k8s::TRAFFIC_DISTRIBUTION).cloned()
    }

    /// A Kubernetes Service, or `None` for an ExternalName one.
    pub(super) fn kubernetes_service(&self, svc: &k8s::Service) -> Option<Service> {
        if svc.spec.service_type.as_deref() == Some("ExternalName") {
            return None;
        }
        let ns = svc.metadata.namespace();
        let cluster_ips: Vec<&str> = if svc.spec.cluster_ips.is_empty() {
            svc.spec.cluster_ip.as_deref().into_iter().collect()
        } else {
            svc.spec.cluster_ips.iter().map(String::as_str).collect()
        };
        let addresses = cluster_ips
            .into_iter()
            .filter(|ip| !ip.is_empty() && *ip != "None")
            .filter_map(|ip| ip.parse::<IpAddr>().ok())
            .map(|ip| NetworkAddress { network: self.network.clone(), address: octets(ip), length: None })
            .collect();
        let ports = svc
            .spec
            .ports
            .iter()
            .map(|p| Port {
                service_port: p.port,
                target_port: numeric_target_port(p),
                app_protocol: kubernetes_app_protocol(p) as i32,
            })
            .collect();
        let namespace_distribution = self.namespace_traffic_distribution(ns);
        let mut load_balancing = if svc.spec.internal_traffic_policy.as_deref() == Some("Local") {
            Some(LoadBalancing {
                routing_preference: vec![load_balancing::Scope::Node as i32],
                mode: load_balancing::Mode::Strict as i32,
                health_policy: 0,
            })
        } else {
            traffic_distribution(
                svc.spec.traffic_distribution.as_deref(),
                svc.metadata.annotations.get(k8s::TRAFFIC_DISTRIBUTION).map(String::as_str),
                namespace_distribution.as_deref(),
            )
        };
        if svc.spec.publish_not_ready_addresses {
            load_balancing.get_or_insert_with(LoadBalancing::default).health_policy =
                load_balancing::HealthPolicy::AllowAll as i32;
        }
        let ip_families = match svc.spec.ip_families.as_slice() {
            [_, _] => IpFamilies::Dual,
            [family] if family == "IPv4" => IpFamilies::Ipv4Only,
            [_] => IpFamilies::Ipv6Only,
            _ => IpFamilies::Automatic,
        };
        Some(Service {
            name: svc.metadata.name.clone(),
            namespace: ns.to_string(),
            hostname: crate::model::host::service_fqdn(&svc.metadata.name, ns).to_string(),
            addresses,
            ports,
            load_balancing,
            ip_families: ip_families as i32,
            waypoint: self.waypoint(&svc.metadata, Target::Service),
            ..Service::default()
        })
    }

    /// The Services of a ServiceEntry, one per host.
    pub(super) fn service_entry(&self, se: &ServiceEntry) -> Vec<Service> {
        let ns = se.metadata.namespace();
        let addresses: Option<Vec<NetworkAddress>> =
            se.spec.addresses.iter().map(|a| network_address(a, &self.network)).collect();
        // An address that does not parse makes istiod leave the whole entry out.
        let Some(addresses) = addresses else {
            return Vec::new();
        };
        let load_balancing = if se.spec.resolution.as_deref() == Some("NONE") {
            Some(LoadBalancing {
                routing_preference: Vec::new(),
                mode: load_balancing::Mode::Passthrough as i32,
                health_policy: load_balancing::HealthPolicy::AllowAll as i32,
            })
        } else {
            let namespace_distribution = self.namespace_traffic_distribution(ns);
            traffic_distribution(
                None,
                se.metadata.annotations.get(k8s::TRAFFIC_DISTRIBUTION).map(String::as_str),
                namespace_distribution.as_deref(),
            )
        };
        let waypoint = self
            .inputs
            .waypoints
            .bind(self.store, &se.metadata, Target::Service)
            .ok()
            .flatten()
            .filter(|w| binds_entry(se, w))
            .map(|w| w.address.clone());
        se.spec
            .hosts
            .iter()
            .map(|host| Service {
                name: se.metadata.name.clone(),
                namespace: ns.to_string(),
                hostname: host.clone(),
                addresses: addresses.clone(),
                ports: se_ports(se),
                subject_alt_names: se.spec.subject_alt_names.clone(),
                load_balancing: load_balancing.clone(),
                waypoint: waypoint.clone(),
                ..Service::default()
            })
            .collect()
    }
}

/// The ports of a ServiceEntry's Services.
pub(super) fn se_ports(se: &ServiceEntry) -> Vec<Port> {
    se.spec
        .ports
        .iter()
        .map(|p| Port {
            service_port: p.number,
            target_port: p.target_port.filter(|t| *t != 0).unwrap_or(p.number),
            app_protocol: app_protocol_named(p.protocol.as_deref().unwrap_or("")) as i32,
        })
        .collect()
}

/// An address or CIDR range of a ServiceEntry (a range keeps its length).
fn network_address(value: &str, network: &str) -> Option<NetworkAddress> {
    let (ip, length) = match value.split_once('/') {
        Some((ip, len)) => (ip.parse::<IpAddr>().ok()?, Some(len.parse::<u32>().ok()?)),
        None => (value.parse::<IpAddr>().ok()?, None),
    };
    Some(NetworkAddress { network: network.to_string(), address: octets(ip), length })
}

/// A Service's traffic distribution: its spec, else its annotation, else its namespace's.
fn traffic_distribution(spec: Option<&str>, service: Option<&str>, namespace: Option<&str>) -> Option<LoadBalancing> {
    use load_balancing::Scope;
    let zone = || LoadBalancing {
        routing_preference: vec![Scope::Network as i32, Scope::Region as i32, Scope::Zone as i32],
        mode: load_balancing::Mode::Failover as i32,
        health_policy: 0,
    };
    let node = || LoadBalancing {
        routing_preference: [Scope::Network, Scope::Region, Scope::Zone, Scope::Subzone, Scope::Node]
            .map(|s| s as i32)
            .to_vec(),
        mode: load_balancing::Mode::Failover as i32,
        health_policy: 0,
    };
    match spec {
        Some("PreferSameZone" | "PreferClose") => return Some(zone()),
        Some("PreferSameNode") => return Some(node()),
        _ => {}
    }
    let value = service.filter(|v| !v.is_empty()).or(namespace.filter(|v| !v.is_empty()))?;
    match value.to_ascii_lowercase().as_str() {
        "preferclose" | "prefersamezone" => Some(zone()),
        "prefersamenode" => Some(node()),
        _ => None,
    }
}

/// A Kubernetes Service port's protocol as ztunnel names it: what Istio
/// infers from `appProtocol` or the port name, where it is HTTP, HTTP/2,
/// gRPC, TLS or TCP; anything else (Mongo, UDP, undeclared) is UNKNOWN.
fn kubernetes_app_protocol(port: &k8s::ServicePort) -> AppProtocol {
    if port.protocol.as_deref().is_some_and(|p| p != "TCP") {
        return AppProtocol::Unknown;
    }
    let declared = match port.app_protocol.as_deref() {
        Some("kubernetes.io/h2c") => return AppProtocol::Http2,
        Some("kubernetes.io/ws") => return AppProtocol::Http11,
        Some("kubernetes.io/wss") => return AppProtocol::Tls,
        Some(app) => app.to_string(),
        None => port.name.clone().unwrap_or_default(),
    };
    if declared.len() >= 8 && declared[..8].eq_ignore_ascii_case("grpc-web") {
        return AppProtocol::Unknown; // gRPC-Web is a protocol of its own to Istio
    }
    let prefix = declared.split('-').next().unwrap_or("");
    match app_protocol_named(prefix) {
        // Ports Istio takes for TCP when nothing declares theirs.
        AppProtocol::Unknown if !is_named_protocol(prefix) && [25, 53, 3306, 27017].contains(&port.port) => {
            AppProtocol::Tcp
        }
        p => p,
    }
}

/// Whether Istio knows `name` as a protocol (one ztunnel may not name).
fn is_named_protocol(name: &str) -> bool {
    crate::config::protocol::Protocol::parse(name).is_some() || name.eq_ignore_ascii_case("udp")
}

/// The protocol a name declares, as ztunnel names it.
fn app_protocol_named(name: &str) -> AppProtocol {
    match name.to_ascii_lowercase().as_str() {
        "http" => AppProtocol::Http11,
        "http2" => AppProtocol::Http2,
        "grpc" => AppProtocol::Grpc,
        "tls" | "https" => AppProtocol::Tls,
        "tcp" => AppProtocol::Tcp,
        _ => AppProtocol::Unknown,
    }
}

/// A Service port's numeric target port: its number, 0 for a named one
/// (resolved per workload), the port itself when absent (the API server's default).
pub(super) fn numeric_target_port(port: &k8s::ServicePort) -> u32 {
    match &port.target_port {
        Some(IntOrString::Int(n)) => *n,
        Some(IntOrString::String(_)) => 0,
        None => port.port,
    }
}
