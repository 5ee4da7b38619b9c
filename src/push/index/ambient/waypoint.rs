//! Waypoints, and what binds to them (istiod's
//! `pilot/pkg/serviceregistry/ambient/waypoints.go`).
//!
//! A waypoint is a Gateway API `Gateway` of class `istio-waypoint` (or of
//! any class whose controller is `istio.io/mesh-controller`). ztunnel
//! reaches it at its address over HBONE on 15008:
//!
//! - its address is the hostname `NAME.NS.svc.DOMAIN` of the Service of the
//!   Gateway's name in its namespace (what istiod's deployment controller
//!   creates and reports in `status.addresses`), or else the first IP of
//!   its `spec.addresses`. meshpush deploys nothing: until that Service (or
//!   an address) exists the waypoint is not ready, and nothing binds to it;
//! - which traffic it takes is `istio.io/waypoint-for` on the Gateway, else
//!   on its GatewayClass, else `service` (`workload`, `all`, `none`);
//! - who may use it is the `allowedRoutes.namespaces` of its HBONE 15008
//!   listener (its own namespace by default).
//!
//! An object binds with `istio.io/use-waypoint: NAME` (and
//! `istio.io/use-waypoint-namespace`), on itself or else on its namespace;
//! `none` opts out. A Service binds to a waypoint for `service` or `all`
//! traffic, a workload to one for `workload` or `all`. A binding that
//! cannot hold (no such ready waypoint, a namespace not allowed, the wrong
//! traffic type on the object itself) is an error the index reports for
//! the object; a namespace's binding the object cannot take is ignored.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::config::gateway_api::{self as api, Gateway};
use crate::config::{ConfigKey, ConfigKind, ConfigObject, ObjectMeta};
use crate::model::StoreSnapshot;
use crate::workload_api::workload::{GatewayAddress, NamespacedHostname, NetworkAddress, gateway_address};

/// The GatewayClass of Istio's waypoints.
pub const WAYPOINT_CLASS: &str = "istio-waypoint";
/// The label that binds an object, or a namespace's objects, to a waypoint.
pub const USE_WAYPOINT: &str = "istio.io/use-waypoint";
/// The label naming the namespace of that waypoint.
pub const USE_WAYPOINT_NAMESPACE: &str = "istio.io/use-waypoint-namespace";
/// The label that says which traffic a waypoint takes.
pub const WAYPOINT_FOR: &str = "istio.io/waypoint-for";
/// The label Istio puts on what its controllers deploy; a waypoint's own
/// Service (`istio.io-mesh-controller`) never binds to a waypoint.
pub const MANAGED: &str = "gateway.istio.io/managed";
/// The port ztunnel sends a waypoint HBONE on.
pub const HBONE_PORT: u32 = 15008;

/// Which traffic a waypoint takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrafficType {
    /// Traffic to the Services bound to it (the default).
    Service,
    /// Traffic to the workloads bound to it.
    Workload,
    /// Both.
    All,
    /// Neither.
    None,
}

impl TrafficType {
    fn parse(value: &str) -> Option<TrafficType> {
        match value {
            "service" => Some(TrafficType::Service),
            "workload" => Some(TrafficType::Workload),
            "all" => Some(TrafficType::All),
            "none" => Some(TrafficType::None),
            _ => None,
        }
    }

    fn takes(self, kind: Target) -> bool {
        matches!(
            (self, kind),
            (TrafficType::All, _) | (TrafficType::Service, Target::Service) | (TrafficType::Workload, Target::Workload)
        )
    }
}

/// What is binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A Service or ServiceEntry.
    Service,
    /// A Pod, WorkloadEntry or ServiceEntry endpoint.
    Workload,
}

/// One ready waypoint.
#[derive(Debug, Clone, PartialEq)]
pub struct Waypoint {
    /// Its Gateway's namespace.
    pub namespace: String,
    /// Its Gateway's name.
    pub name: String,
    /// Where ztunnel reaches it.
    pub address: GatewayAddress,
    /// Which traffic it takes.
    pub traffic: TrafficType,
    /// Who may bind to it: `None` for all namespaces, else a selector of
    /// namespace labels (`Same` is its own namespace's name label).
    allowed: Option<api::LabelSelector>,
}

/// What one waypoint serves: the hosts of the Services bound to it, and
/// the addresses of the workloads bound to it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bound {
    /// Service hostnames (a ServiceEntry's: each of its hosts), sorted.
    pub hosts: Vec<String>,
    /// Workload IPs, sorted.
    pub workload_ips: Vec<String>,
}

impl Bound {
    /// Adds what `object` (a Service, ServiceEntry, Pod or WorkloadEntry
    /// that binds to waypoint `to`) brings.
    pub(super) fn add(bound: &mut Bound, object: &ConfigObject, to: &Waypoint) {
        match object {
            ConfigObject::Service(svc) => {
                let ns = svc.metadata.namespace();
                bound.hosts.push(crate::model::host::service_fqdn(&svc.metadata.name, ns).to_string());
            }
            ConfigObject::ServiceEntry(se) if binds_entry(se, to) => {
                bound.hosts.extend(se.spec.hosts.iter().cloned());
            }
            ConfigObject::Pod(pod) if pod.metadata.labels.get(MANAGED).is_some_and(|v| v == MESH_CONTROLLER_LABEL) => {}
            ConfigObject::Pod(pod) if !pod.is_terminal() => {
                bound.workload_ips.extend(pod.ips().into_iter().map(str::to_string));
            }
            ConfigObject::WorkloadEntry(we) if we.spec.address.parse::<IpAddr>().is_ok() => {
                bound.workload_ips.push(we.spec.address.clone());
            }
            _ => {}
        }
    }

    /// Sorts and dedups what was added (once, after every object is in).
    pub(super) fn settle(&mut self) {
        self.hosts.sort();
        self.hosts.dedup();
        self.workload_ips.sort();
        self.workload_ips.dedup();
    }
}

/// The waypoints of a snapshot.
#[derive(Debug, Default)]
pub struct Waypoints {
    ready: BTreeMap<(String, String), Waypoint>,
    /// Waypoints that are not ready, and why.
    not_ready: BTreeMap<(String, String), String>,
}

impl Waypoints {
    /// The waypoints of `store`, on `network`.
    pub fn build(store: &StoreSnapshot, network: &str) -> Waypoints {
        let mut classes: BTreeMap<&str, (bool, Option<&str>)> = BTreeMap::new();
        for stored in store.kind(ConfigKind::GatewayClass).values() {
            if let ConfigObject::GatewayClass(c) = &*stored.object {
                let mesh = c.spec.controller_name == api::ISTIO_MESH_CONTROLLER;
                classes.insert(&c.metadata.name, (mesh, c.metadata.labels.get(WAYPOINT_FOR).map(String::as_str)));
            }
        }
        let mut out = Waypoints::default();
        for stored in store.kind(ConfigKind::KubernetesGateway).values() {
            let ConfigObject::KubernetesGateway(gw) = &*stored.object else { continue };
            let class = classes.get(gw.spec.gateway_class_name.as_str());
            let is_waypoint = match class {
                Some((mesh, _)) => *mesh,
                None => gw.spec.gateway_class_name == WAYPOINT_CLASS,
            };
            if !is_waypoint {
                continue;
            }
            let key = (gw.metadata.namespace().to_string(), gw.metadata.name.clone());
            let traffic =
                gw.metadata.labels.get(WAYPOINT_FOR).map(String::as_str).or(class.and_then(|(_, label)| *label));
            let traffic = match traffic.map(|t| (t, TrafficType::parse(t))) {
                None => TrafficType::Service,
                Some((_, Some(t))) => t,
                Some((other, None)) => {
                    let why = format!(
                        "{WAYPOINT_FOR}: {:?} is not a traffic type (service, workload, all or none)",
                        crate::text::shown(other)
                    );
                    out.not_ready.insert(key, why);
                    continue;
                }
            };
            match address(store, gw, network) {
                Ok(address) => {
                    let allowed = allowed(gw);
                    let (namespace, name) = key.clone();
                    out.ready.insert(key, Waypoint { namespace, name, address, traffic, allowed });
                }
                Err(why) => {
                    out.not_ready.insert(key, why);
                }
            }
        }
        out
    }

    /// The ready waypoint `namespace/name`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<&Waypoint> {
        self.ready.get(&(namespace.to_string(), name.to_string()))
    }

    /// Every ready waypoint.
    pub fn all(&self) -> impl Iterator<Item = &Waypoint> {
        self.ready.values()
    }

    /// Why each waypoint that is not ready is not.
    pub fn not_ready(&self) -> impl Iterator<Item = (&(String, String), &String)> {
        self.not_ready.iter()
    }

    /// The waypoint an object (of `meta`, of kind `target`) binds to:
    /// `Ok(None)` for none, `Err` for a binding that cannot hold.
    pub fn bind(&self, store: &StoreSnapshot, meta: &ObjectMeta, target: Target) -> Result<Option<&Waypoint>, String> {
        if target == Target::Service && meta.labels.contains_key(MANAGED) {
            return Ok(None); // a waypoint's or gateway's own Service
        }
        let namespace = meta.namespace();
        let namespace_labels = || match store.get(&ConfigKey::new(ConfigKind::Namespace, "", namespace)) {
            Some(stored) => stored.object.meta().labels.clone(),
            None => BTreeMap::from([(NAME_LABEL.to_string(), namespace.to_string())]),
        };
        let (named, explicit) = match use_waypoint(&meta.labels, namespace) {
            Some(None) => return Ok(None),
            Some(Some(named)) => (named, true),
            None => match use_waypoint(&namespace_labels(), namespace) {
                Some(Some(named)) => (named, false),
                _ => return Ok(None),
            },
        };
        let Some(waypoint) = self.ready.get(&named) else {
            let why = self
                .not_ready
                .get(&named)
                .map(|w| format!(": {w}"))
                .unwrap_or_else(|| format!(": no Gateway {}/{} of class {WAYPOINT_CLASS}", named.0, named.1));
            return Err(format!("{USE_WAYPOINT}: waypoint {}/{} is not ready{why}", named.0, named.1));
        };
        if let Some(selector) = &waypoint.allowed {
            let mut labels = namespace_labels();
            labels.entry(NAME_LABEL.to_string()).or_insert_with(|| namespace.to_string());
            if !selector.matches(&labels) {
                return Err(format!(
                    "{USE_WAYPOINT}: waypoint {}/{} does not allow namespace {namespace} (its HBONE listener's \
                     allowedRoutes)",
                    waypoint.namespace, waypoint.name
                ));
            }
        }
        if !waypoint.traffic.takes(target) {
            if !explicit {
                return Ok(None); // the namespace's waypoint is for the other kind
            }
            let kind = if target == Target::Service { "service" } else { "workload" };
            return Err(format!(
                "{USE_WAYPOINT}: waypoint {}/{} does not take {kind} traffic ({WAYPOINT_FOR})",
                waypoint.namespace, waypoint.name
            ));
        }
        Ok(Some(waypoint))
    }
}

/// The value of [`MANAGED`] on what Istio deploys for a waypoint.
pub const MESH_CONTROLLER_LABEL: &str = "istio.io-mesh-controller";

/// Whether a ServiceEntry may use waypoint `to`: one seen only in its own
/// namespace (`exportTo: ["."]`) binds to no waypoint of another (that
/// would show it there), as istiod refuses it.
pub fn binds_entry(se: &crate::config::istio::ServiceEntry, to: &Waypoint) -> bool {
    let own_namespace = !se.spec.export_to.is_empty() && se.spec.export_to.iter().all(|e| e == ".");
    !own_namespace || to.namespace == se.metadata.namespace()
}

/// Whether `store` declares any waypoint (a Gateway of class
/// `istio-waypoint`, or of a class naming Istio's mesh controller): only
/// then can an ambient change alter a waypoint proxy's configuration.
pub fn any_declared(store: &StoreSnapshot) -> bool {
    let mesh_classes: Vec<&str> = store
        .kind(ConfigKind::GatewayClass)
        .values()
        .filter_map(|s| match &*s.object {
            ConfigObject::GatewayClass(c) if c.spec.controller_name == api::ISTIO_MESH_CONTROLLER => {
                Some(c.metadata.name.as_str())
            }
            _ => None,
        })
        .collect();
    store.kind(ConfigKind::KubernetesGateway).values().any(|s| {
        matches!(&*s.object, ConfigObject::KubernetesGateway(gw)
            if gw.spec.gateway_class_name == WAYPOINT_CLASS || mesh_classes.contains(&gw.spec.gateway_class_name.as_str()))
    })
}

/// The label every namespace carries with its own name.
const NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// `istio.io/use-waypoint` of `labels`: `None` without it, `Some(None)` for
/// `none`, else the waypoint's (namespace, name).
fn use_waypoint(labels: &BTreeMap<String, String>, namespace: &str) -> Option<Option<(String, String)>> {
    let name = labels.get(USE_WAYPOINT)?;
    if name == "none" {
        return Some(None);
    }
    let namespace = labels.get(USE_WAYPOINT_NAMESPACE).map_or(namespace, String::as_str);
    Some(Some((namespace.to_string(), name.clone())))
}

/// Where ztunnel reaches a waypoint (see the module docs).
fn address(store: &StoreSnapshot, gw: &Gateway, network: &str) -> Result<GatewayAddress, String> {
    let namespace = gw.metadata.namespace();
    let service = ConfigKey::new(ConfigKind::Service, namespace, &gw.metadata.name);
    let destination = if store.get(&service).is_some() {
        gateway_address::Destination::Hostname(NamespacedHostname {
            namespace: namespace.to_string(),
            hostname: crate::model::host::service_fqdn(&gw.metadata.name, namespace).to_string(),
        })
    } else if let Some(ip) = gw
        .spec
        .addresses
        .iter()
        .filter(|a| a.kind.as_deref().is_none_or(|k| k == "IPAddress"))
        .find_map(|a| a.value.parse::<IpAddr>().ok())
    {
        let address = match ip {
            IpAddr::V4(v4) => v4.octets().to_vec(),
            IpAddr::V6(v6) => v6.octets().to_vec(),
        };
        gateway_address::Destination::Address(NetworkAddress { network: network.to_string(), address, length: None })
    } else {
        return Err(format!(
            "no Service {namespace}/{} and no IP in spec.addresses: meshpush deploys no waypoint, so its Deployment \
             and Service must exist as istiod would create them",
            gw.metadata.name
        ));
    };
    Ok(GatewayAddress { destination: Some(destination), hbone_mtls_port: HBONE_PORT })
}

/// Who may bind to `gw`: its HBONE 15008 listener's allowed namespaces
/// (its own namespace when it says nothing, or has no such listener).
fn allowed(gw: &Gateway) -> Option<api::LabelSelector> {
    let same = || {
        Some(api::LabelSelector {
            match_labels: BTreeMap::from([(NAME_LABEL.to_string(), gw.metadata.namespace().to_string())]),
            ..Default::default()
        })
    };
    let listener = gw.spec.listeners.iter().find(|l| l.protocol == "HBONE" && l.port == HBONE_PORT);
    let Some(namespaces) = listener.and_then(|l| l.allowed_routes.as_ref()).and_then(|a| a.namespaces.as_ref()) else {
        return same();
    };
    match namespaces.from.as_deref().unwrap_or("Same") {
        "All" => None,
        "Selector" => Some(namespaces.selector.clone().unwrap_or_default()),
        _ => same(),
    }
}
