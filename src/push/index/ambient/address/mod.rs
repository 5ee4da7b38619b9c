//! Workloads and services as ztunnel is sent them (`istio.workload.Address`),
//! built as istiod's ambient index builds them (`workloads.go`,
//! `services.go`).
//!
//! - **Workloads**: every Pod that has an IP and has not finished (whatever
//!   its data-plane mode: ztunnel needs to know its peers too), every
//!   WorkloadEntry, every endpoint of a ServiceEntry, and every address of
//!   a Service's EndpointSlice that is not a Pod's. Each is named by
//!   its uid (`CLUSTER//Pod/NS/NAME`, `CLUSTER/networking.istio.io/WorkloadEntry/NS/NAME`,
//!   `CLUSTER/networking.istio.io/ServiceEntry/NS/NAME/ADDRESS`).
//!   A Pod speaks HBONE when Istio's CNI captured it
//!   (`ambient.istio.io/redirection: enabled`) or it is an HBONE-capable
//!   sidecar (`networking.istio.io/tunnel: http`, a native tunnel).
//! - **Services**: every Kubernetes Service but ExternalName ones, and each
//!   host of a ServiceEntry, named `NAMESPACE/HOSTNAME`.
//! - A workload lists the services it backs (`NAMESPACE/HOSTNAME` → its
//!   ports): the Services of its namespace whose selector matches it, and
//!   the ServiceEntries of its namespace whose `workloadSelector` does
//!   (a ServiceEntry's own endpoints back all its hosts), and the
//!   Services whose EndpointSlices name the Pod (a selector-less Service). A Service's
//!   named `targetPort` is looked up in the Pod's TCP container ports (and
//!   its native sidecars'); a Pod without it does not back that port.
//! - A workload names the policies ztunnel applies to it beyond the
//!   namespace and mesh ones (`authorization_policies`): the selector
//!   AuthorizationPolicies of its namespace and the root namespace that
//!   match it, then what its PeerAuthentications make of it
//!   ([`super::peer_mtls::workload_keys`]).

mod service;

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use rayon::prelude::*;

use super::peer_mtls;
use super::waypoint::{MANAGED, MESH_CONTROLLER_LABEL, Target, Waypoints};
use crate::config::istio::{PeerAuthentication, ServiceEntry, WorkloadEntrySpec};
use crate::config::k8s::{self, IntOrString, Pod};
use crate::config::mesh::MeshConfig;
use crate::config::{ConfigKind, ConfigObject, ObjectMeta};
use crate::model::StoreSnapshot;
use crate::workload_api::workload::{
    Address, GatewayAddress, Locality, NetworkMode, Port, PortList, Service, TunnelProtocol, Workload, WorkloadStatus,
    WorkloadType, address,
};
use service::{Origin, numeric_target_port, se_ports, select_services};

/// The label of the system namespace that names the local cluster's network.
pub use crate::model::endpoint::NETWORK_LABEL;

/// The label that marks an HBONE-capable sidecar.
const TUNNEL_LABEL: &str = "networking.istio.io/tunnel";

/// Where a selector policy applies: its key and what it selects.
#[derive(Debug, Clone)]
pub struct SelectorPolicy {
    /// `NAMESPACE/NAME`.
    pub key: String,
    /// Its namespace.
    pub namespace: String,
    /// The labels a workload must have.
    pub labels: BTreeMap<String, String>,
}

/// A service workloads can back, with what resolving their ports needs.
struct ServiceInfo {
    /// `NAMESPACE/HOSTNAME`.
    key: String,
    /// The workload labels it selects (empty: none).
    selector: BTreeMap<String, String>,
    /// Whether it comes from a ServiceEntry (ports matched by name).
    service_entry: bool,
    ports: Vec<PortInfo>,
}

struct PortInfo {
    service_port: u32,
    target_port: u32,
    name: String,
    /// A Service's named `targetPort`.
    target_name: Option<String>,
}

/// What building the addresses reads besides the store.
pub struct Inputs<'a> {
    /// The mesh settings (trust domain, root namespace).
    pub mesh: &'a MeshConfig,
    /// The selector AuthorizationPolicies ztunnel is sent.
    pub selector_policies: &'a [SelectorPolicy],
    /// Every PeerAuthentication, each in its namespace.
    pub peer_authentications: &'a [PeerAuthentication],
    /// The ready waypoints, which Services and workloads bind to.
    pub waypoints: &'a Waypoints,
}

/// The local cluster's network: the `topology.istio.io/network` label of
/// this server's own namespace (`--system-namespace`), else the default
/// network (`""`), as istiod reads it.
pub fn network(store: &StoreSnapshot, mesh: &MeshConfig) -> String {
    let system = &*mesh.system_namespace;
    store
        .get(&crate::config::ConfigKey::new(ConfigKind::Namespace, "", system))
        .and_then(|s| s.object.meta().labels.get(NETWORK_LABEL).cloned())
        .unwrap_or_default()
}

/// Every workload and service of `store`, each with its resource name.
pub fn addresses(store: &StoreSnapshot, inputs: &Inputs<'_>) -> Vec<(String, Address)> {
    let builder = Builder::new(store, inputs);
    let mut services = Vec::new();
    // Pods are most of a mesh: built in parallel.
    let pods: Vec<&Pod> = store
        .kind(ConfigKind::Pod)
        .values()
        .filter_map(|s| match &*s.object {
            ConfigObject::Pod(pod) => Some(pod),
            _ => None,
        })
        .collect();
    let mut out: Vec<(String, Address)> =
        pods.par_iter().filter_map(|pod| builder.pod(pod)).map(|w| (w.uid.clone(), wrap_workload(w))).collect();
    for stored in store.kind(ConfigKind::EndpointSlice).values() {
        if let ConfigObject::EndpointSlice(slice) = &*stored.object {
            out.extend(builder.slice_endpoints(slice).into_iter().map(|w| (w.uid.clone(), wrap_workload(w))));
        }
    }
    for stored in store.kind(ConfigKind::WorkloadEntry).values() {
        if let ConfigObject::WorkloadEntry(we) = &*stored.object {
            let uid = format!(
                "{}/networking.istio.io/WorkloadEntry/{}/{}",
                builder.cluster(&we.metadata),
                we.metadata.namespace(),
                we.metadata.name
            );
            let w = builder.entry(&we.metadata, &we.spec, uid, None);
            out.push((w.uid.clone(), wrap_workload(w)));
        }
    }
    for stored in store.kind(ConfigKind::ServiceEntry).values() {
        if let ConfigObject::ServiceEntry(se) = &*stored.object {
            for (endpoint, hosts) in service_entry_endpoints(se) {
                let uid = format!(
                    "{}/networking.istio.io/ServiceEntry/{}/{}/{}",
                    builder.cluster(&se.metadata),
                    se.metadata.namespace(),
                    se.metadata.name,
                    endpoint.address
                );
                let w = builder.entry(&se.metadata, &endpoint, uid, Some(&hosts));
                out.push((w.uid.clone(), wrap_workload(w)));
            }
            let origin = Origin::of(&se.metadata, false);
            services.extend(builder.service_entry(se).into_iter().map(|s| (origin.clone(), s)));
        }
    }
    for stored in store.kind(ConfigKind::Service).values() {
        if let ConfigObject::Service(svc) = &*stored.object
            && let Some(service) = builder.kubernetes_service(svc)
        {
            services.push((Origin::of(&svc.metadata, true), service));
        }
    }
    for service in select_services(services) {
        out.push((format!("{}/{}", service.namespace, service.hostname), wrap_service(service)));
    }
    out
}

/// A ServiceEntry's endpoints, each with the hosts it backs: every host;
/// or, for a DNS entry without endpoints or a selector, one implicit
/// endpoint per host, at that host's name (istiod's implicit endpoints).
fn service_entry_endpoints(se: &ServiceEntry) -> Vec<(WorkloadEntrySpec, Vec<String>)> {
    let dns = matches!(se.spec.resolution.as_deref(), Some("DNS" | "DYNAMIC_DNS" | "DNS_ROUND_ROBIN"));
    if se.spec.endpoints.is_empty() && dns && se.spec.workload_selector.is_none() {
        let implicit = |host: &String| WorkloadEntrySpec { address: host.clone(), ..WorkloadEntrySpec::default() };
        return se.spec.hosts.iter().map(|h| (implicit(h), vec![h.clone()])).collect();
    }
    se.spec.endpoints.iter().map(|e| (e.clone(), se.spec.hosts.clone())).collect()
}

fn wrap_workload(w: Workload) -> Address {
    Address { r#type: Some(address::Type::Workload(w)) }
}

fn wrap_service(s: Service) -> Address {
    Address { r#type: Some(address::Type::Service(s)) }
}

struct Builder<'a> {
    store: &'a StoreSnapshot,
    inputs: &'a Inputs<'a>,
    network: String,
    trust_domain: String,
    /// The services workloads can back, by namespace.
    services: HashMap<String, Vec<ServiceInfo>>,
    /// PeerAuthentications by namespace.
    peer_authentications: HashMap<String, Vec<&'a PeerAuthentication>>,
    /// The services whose EndpointSlices name a Pod, by the Pod's
    /// namespace and name (how a selector-less Service reaches its Pods).
    sliced: HashMap<(String, String), Vec<String>>,
}

impl<'a> Builder<'a> {
    /// The cluster an object was read from, by id: a remote one's, else
    /// this cluster's (`--cluster-id`), as workload uids name it.
    fn cluster<'m>(&'m self, meta: &'m ObjectMeta) -> &'m str {
        meta.cluster.remote_id().unwrap_or(&self.inputs.mesh.cluster_id)
    }

    fn new(store: &'a StoreSnapshot, inputs: &'a Inputs<'a>) -> Builder<'a> {
        let network = network(store, inputs.mesh);
        let trust_domain = match &*inputs.mesh.trust_domain {
            crate::config::mesh::DEFAULT_TRUST_DOMAIN => String::new(),
            other => other.to_string(),
        };
        let mut services: HashMap<String, Vec<ServiceInfo>> = HashMap::new();
        for stored in store.kind(ConfigKind::Service).values() {
            if let ConfigObject::Service(svc) = &*stored.object {
                if svc.spec.service_type.as_deref() == Some("ExternalName") {
                    continue;
                }
                let ns = svc.metadata.namespace();
                let host = crate::model::host::service_fqdn(&svc.metadata.name, ns);
                let ports = svc
                    .spec
                    .ports
                    .iter()
                    .map(|p| PortInfo {
                        service_port: p.port,
                        target_port: numeric_target_port(p),
                        name: p.name.clone().unwrap_or_default(),
                        target_name: match &p.target_port {
                            Some(IntOrString::String(name)) => Some(name.clone()),
                            _ => None,
                        },
                    })
                    .collect();
                services.entry(ns.to_string()).or_default().push(ServiceInfo {
                    key: format!("{ns}/{host}"),
                    selector: svc.spec.selector.clone(),
                    service_entry: false,
                    ports,
                });
            }
        }
        for stored in store.kind(ConfigKind::ServiceEntry).values() {
            if let ConfigObject::ServiceEntry(se) = &*stored.object {
                let ns = se.metadata.namespace();
                let selector = se.spec.workload_selector.as_ref().map(|s| s.labels.clone()).unwrap_or_default();
                for host in &se.spec.hosts {
                    services.entry(ns.to_string()).or_default().push(ServiceInfo {
                        key: format!("{ns}/{host}"),
                        selector: selector.clone(),
                        service_entry: true,
                        ports: se_ports(se)
                            .into_iter()
                            .zip(&se.spec.ports)
                            .map(|(port, p)| PortInfo {
                                service_port: port.service_port,
                                target_port: p.target_port.unwrap_or(0),
                                name: p.name.clone(),
                                target_name: None,
                            })
                            .collect(),
                    });
                }
            }
        }
        let mut peer_authentications: HashMap<String, Vec<&PeerAuthentication>> = HashMap::new();
        for pa in inputs.peer_authentications {
            peer_authentications.entry(pa.metadata.namespace.clone()).or_default().push(pa);
        }
        let mut sliced: HashMap<(String, String), Vec<String>> = HashMap::new();
        for stored in store.kind(ConfigKind::EndpointSlice).values() {
            let ConfigObject::EndpointSlice(slice) = &*stored.object else { continue };
            let Some(service) = slice.metadata.labels.get(k8s::SERVICE_NAME_LABEL) else { continue };
            let ns = slice.metadata.namespace();
            let key = format!("{ns}/{}", crate::model::host::service_fqdn(service, ns));
            for r in slice.endpoints.iter().filter_map(|e| e.target_ref.as_ref()) {
                if r.kind.as_deref() == Some("Pod")
                    && let Some(name) = &r.name
                {
                    let pod = (r.namespace.clone().unwrap_or_else(|| ns.to_string()), name.clone());
                    sliced.entry(pod).or_default().push(key.clone());
                }
            }
        }
        Builder { store, inputs, network, trust_domain, services, peer_authentications, sliced }
    }

    /// The address of the waypoint an object binds to, if it binds to a
    /// ready one (what cannot bind is reported by the index).
    fn waypoint(&self, meta: &ObjectMeta, target: Target) -> Option<GatewayAddress> {
        self.inputs.waypoints.bind(self.store, meta, target).ok().flatten().map(|w| w.address.clone())
    }

    /// The Workload of a Pod, or `None` for a Pod without an IP or one that finished.
    fn pod(&self, pod: &Pod) -> Option<Workload> {
        if pod.is_terminal() {
            return None;
        }
        let addresses = ip_bytes(pod.ips())?;
        let ns = pod.metadata.namespace();
        let labels = &pod.metadata.labels;
        let workload_name = workload_name(pod);
        let (canonical_name, canonical_revision) = canonical(labels, &workload_name);
        let mut services = BTreeMap::new();
        let in_namespace = || self.services.get(ns).into_iter().flatten();
        let mut backs: Vec<&ServiceInfo> = in_namespace().filter(|s| selects(&s.selector, labels)).collect();
        // A Service whose EndpointSlice names the Pod backs it too (a
        // selector-less Service's Pods).
        for key in self.sliced.get(&(ns.to_string(), pod.metadata.name.clone())).into_iter().flatten() {
            if !backs.iter().any(|b| &b.key == key)
                && let Some((service_ns, _)) = key.split_once('/')
                && let Some(info) =
                    self.services.get(service_ns).into_iter().flatten().find(|s| !s.service_entry && &s.key == key)
            {
                backs.push(info);
            }
        }
        for info in backs {
            let mut ports = Vec::new();
            for port in &info.ports {
                let target_port = if let Some(name) = &port.target_name {
                    match find_port(pod, name) {
                        Some(p) => p,
                        None => continue, // this Pod does not back that port
                    }
                } else if info.service_entry && !port.name.is_empty() {
                    find_port(pod, &port.name).unwrap_or(if port.target_port == 0 {
                        port.service_port
                    } else {
                        port.target_port
                    })
                } else {
                    port.target_port
                };
                ports.push(Port { service_port: port.service_port, target_port, app_protocol: 0 });
            }
            services.insert(info.key.clone(), PortList { ports });
        }
        let mut w = Workload {
            uid: format!("{}//Pod/{ns}/{}", self.cluster(&pod.metadata), pod.metadata.name),
            name: pod.metadata.name.clone(),
            namespace: ns.to_string(),
            addresses,
            network: self.network.clone(),
            service_account: pod.spec.service_account_name.clone().unwrap_or_default(),
            node: pod.spec.node_name.clone().unwrap_or_default(),
            status: if pod.is_ready() && pod.metadata.deletion_timestamp.is_none() {
                WorkloadStatus::Healthy as i32
            } else {
                WorkloadStatus::Unhealthy as i32
            },
            trust_domain: self.trust_domain.clone(),
            cluster_id: self.cluster(&pod.metadata).to_string(),
            locality: pod.spec.node_name.as_deref().and_then(|n| self.node_locality(n, &pod.metadata.cluster)),
            workload_name,
            workload_type: WorkloadType::Pod as i32,
            canonical_name,
            canonical_revision,
            services: services.into_iter().collect(),
            authorization_policies: self.policies(ns, labels),
            ..Workload::default()
        };
        if pod.spec.host_network {
            w.network_mode = NetworkMode::HostNetwork as i32;
        }
        if !is_waypoint_pod(labels) {
            w.waypoint = self.waypoint(&pod.metadata, Target::Workload);
        }
        set_tunnel(&mut w, labels, &pod.metadata.annotations);
        Some(w)
    }

    /// The Workload of a WorkloadEntry, or of an endpoint of `service_entry`.
    /// The Workload of a WorkloadEntry, or (`hosts` given) of an endpoint
    /// of a ServiceEntry backing those of its hosts.
    fn entry(&self, meta: &ObjectMeta, spec: &WorkloadEntrySpec, uid: String, hosts: Option<&[String]>) -> Workload {
        let ns = meta.namespace();
        // A WorkloadEntry's labels are its spec's over its metadata's; an
        // endpoint is known by its ServiceEntry's labels (istiod's policies
        // and canonical names read those).
        let mut labels = meta.labels.clone();
        if hosts.is_none() {
            labels.extend(spec.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        let (addresses, hostname) = match spec.address.parse::<IpAddr>() {
            Ok(ip) => (vec![octets(ip)], String::new()),
            Err(_) => (Vec::new(), spec.address.clone()),
        };
        let mut services = BTreeMap::new();
        let backs: Vec<&ServiceInfo> = match hosts {
            Some(hosts) => {
                let keys: Vec<String> = hosts.iter().map(|h| format!("{ns}/{h}")).collect();
                self.services
                    .get(ns)
                    .into_iter()
                    .flatten()
                    .filter(|s| s.service_entry && keys.contains(&s.key))
                    .collect()
            }
            None => self.services.get(ns).into_iter().flatten().filter(|s| selects(&s.selector, &labels)).collect(),
        };
        for info in backs {
            let mut ports = Vec::new();
            for port in &info.ports {
                let target_port = if info.service_entry {
                    match spec.ports.get(&port.name) {
                        Some(p) => *p,
                        None if port.target_port == 0 => port.service_port,
                        None => port.target_port,
                    }
                } else if let Some(name) = &port.target_name {
                    match spec.ports.get(name) {
                        Some(p) => *p,
                        None => continue,
                    }
                } else {
                    spec.ports.get(&port.name).copied().unwrap_or(port.target_port)
                };
                ports.push(Port { service_port: port.service_port, target_port, app_protocol: 0 });
            }
            services.insert(info.key.clone(), PortList { ports });
        }
        let name = meta.name.clone();
        let (canonical_name, canonical_revision) = canonical(&labels, &name);
        let locality = spec.locality.as_deref().and_then(split_locality);
        let mut w = Workload {
            uid,
            name: name.clone(),
            namespace: ns.to_string(),
            addresses,
            hostname,
            network: spec.network.clone().unwrap_or_else(|| self.network.clone()),
            service_account: spec.service_account.clone().unwrap_or_default(),
            trust_domain: self.trust_domain.clone(),
            cluster_id: self.cluster(meta).to_string(),
            locality,
            workload_name: name,
            workload_type: WorkloadType::Pod as i32,
            canonical_name,
            canonical_revision,
            services: services.into_iter().collect(),
            authorization_policies: self.policies(ns, &labels),
            capacity: spec.weight.filter(|w| *w > 0),
            status: WorkloadStatus::Healthy as i32,
            waypoint: self.waypoint(meta, Target::Workload),
            ..Workload::default()
        };
        set_tunnel(&mut w, &labels, &meta.annotations);
        w
    }

    /// The workloads of a Service's EndpointSlice that are not Pods (a
    /// selector-less Service's addresses): known only by their address, so
    /// sent as sharing it (`HOST_NETWORK`), with no identity and no policy.
    fn slice_endpoints(&self, slice: &k8s::EndpointSlice) -> Vec<Workload> {
        let Some(service) = slice.metadata.labels.get(k8s::SERVICE_NAME_LABEL) else { return Vec::new() };
        if slice.address_type.as_deref() == Some("FQDN") {
            return Vec::new();
        }
        let ns = slice.metadata.namespace();
        let key = format!("{ns}/{}", crate::model::host::service_fqdn(service, ns));
        let Some(info) = self.services.get(ns).into_iter().flatten().find(|s| !s.service_entry && s.key == key) else {
            return Vec::new();
        };
        let mut ports = Vec::new();
        for p in &slice.ports {
            let (name, Some(port)) = (p.name.as_deref().unwrap_or(""), p.port) else { continue };
            if p.protocol.as_deref().is_some_and(|proto| proto != "TCP") {
                continue;
            }
            if let Some(service_port) = info.ports.iter().find(|sp| sp.name == name) {
                ports.push(Port { service_port: service_port.service_port, target_port: port, app_protocol: 0 });
            }
        }
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for endpoint in &slice.endpoints {
            if endpoint.target_ref.as_ref().is_some_and(|r| r.kind.as_deref() == Some("Pod")) {
                continue; // a Pod is a workload of its own, with all it carries
            }
            let Some(first) = endpoint.addresses.first() else { continue };
            if !seen.insert(first.clone()) {
                continue;
            }
            let Some(addresses) = ip_bytes(endpoint.addresses.iter().map(String::as_str).collect()) else { continue };
            out.push(Workload {
                uid: format!(
                    "{}/discovery.k8s.io/EndpointSlice/{ns}/{}/{first}",
                    self.cluster(&slice.metadata),
                    slice.metadata.name
                ),
                name: slice.metadata.name.clone(),
                namespace: ns.to_string(),
                addresses,
                network: self.network.clone(),
                trust_domain: self.trust_domain.clone(),
                services: [(key.clone(), PortList { ports: ports.clone() })].into(),
                status: if endpoint.conditions.ready.unwrap_or(true) {
                    WorkloadStatus::Healthy as i32
                } else {
                    WorkloadStatus::Unhealthy as i32
                },
                cluster_id: self.cluster(&slice.metadata).to_string(),
                network_mode: NetworkMode::HostNetwork as i32,
                ..Workload::default()
            });
        }
        out
    }

    /// The locality of a Node, from its topology labels.
    fn node_locality(&self, node: &str, cluster: &crate::config::ClusterId) -> Option<Locality> {
        let stored = self.store.get(&crate::config::ConfigKey::in_cluster(ConfigKind::Node, "", node, cluster))?;
        let labels = &stored.object.meta().labels;
        let get = |label: &str, beta: Option<&str>| {
            labels.get(label).or_else(|| beta.and_then(|b| labels.get(b))).cloned().unwrap_or_default()
        };
        Some(Locality {
            region: get(k8s::REGION_LABEL, Some(k8s::REGION_LABEL_BETA)),
            zone: get(k8s::ZONE_LABEL, Some(k8s::ZONE_LABEL_BETA)),
            subzone: get(k8s::SUBZONE_LABEL, None),
        })
    }

    /// The policies a workload of `namespace` with `labels` names.
    fn policies(&self, namespace: &str, labels: &BTreeMap<String, String>) -> Vec<String> {
        let root = &*self.inputs.mesh.root_namespace;
        let mut keys: Vec<String> = self
            .inputs
            .selector_policies
            .iter()
            .filter(|p| (p.namespace == namespace || p.namespace == root) && selects_all(&p.labels, labels))
            .map(|p| p.key.clone())
            .collect();
        keys.sort();
        let mut applying: Vec<&PeerAuthentication> = self
            .peer_authentications
            .get(namespace)
            .into_iter()
            .flatten()
            .copied()
            .filter(|pa| pa.spec.selector.as_ref().is_none_or(|s| selects_all(&s.match_labels, labels)))
            .collect();
        if namespace != root {
            applying.extend(
                self.peer_authentications
                    .get(root)
                    .into_iter()
                    .flatten()
                    .copied()
                    .filter(|pa| pa.spec.selector.is_none()),
            );
        }
        keys.extend(peer_mtls::workload_keys(&applying, root));
        keys
    }
}

/// HBONE where Istio's CNI captured the workload, HBONE natively where it
/// is an HBONE-capable sidecar (istiod's `setTunnelProtocol`).
fn set_tunnel(w: &mut Workload, labels: &BTreeMap<String, String>, annotations: &BTreeMap<String, String>) {
    if annotations.get(k8s::AMBIENT_REDIRECTION).is_some_and(|v| v == "enabled") {
        w.tunnel_protocol = TunnelProtocol::Hbone as i32;
    }
    if labels.get(TUNNEL_LABEL).is_some_and(|v| v == "http") {
        w.tunnel_protocol = TunnelProtocol::Hbone as i32;
        w.native_tunnel = true;
    }
}

/// Whether a Service's (non-empty) selector selects `labels`.
/// Whether a Pod is a waypoint's own (Istio's waypoint template labels
/// it): it never binds to a waypoint.
fn is_waypoint_pod(labels: &BTreeMap<String, String>) -> bool {
    labels.get(MANAGED).is_some_and(|v| v == MESH_CONTROLLER_LABEL)
}

fn selects(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    !selector.is_empty() && selects_all(selector, labels)
}

/// Whether every label of `selector` is in `labels` (an empty selector selects all).
fn selects_all(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// A container port of `pod` by name (TCP only), native sidecars' too.
fn find_port(pod: &Pod, name: &str) -> Option<u32> {
    let sidecars = pod.spec.init_containers.iter().filter(|c| c.restart_policy.as_deref() == Some("Always"));
    pod.spec
        .containers
        .iter()
        .chain(sidecars)
        .flat_map(|c| &c.ports)
        .find(|p| p.name.as_deref() == Some(name) && p.is_tcp())
        .map(|p| p.container_port)
}

/// The workload a Pod belongs to, as istiod derives it: the label
/// `service.istio.io/workload-name`, else (for a Pod with a generated
/// name) its controller's name (a ReplicaSet's without the template hash:
/// its Deployment's; a Job's without a CronJob's timestamp), else its own.
pub fn workload_name(pod: &Pod) -> String {
    if let Some(name) = pod.metadata.labels.get("service.istio.io/workload-name") {
        return name.clone();
    }
    let meta = &pod.metadata;
    let controller =
        meta.owner_references.iter().find(|o| o.controller == Some(true)).map(|o| {
            crate::model::workload_name::Controller { kind: &o.kind, api_version: &o.api_version, name: &o.name }
        });
    crate::model::workload_name::of_pod(&meta.name, meta.generate_name.as_deref(), &meta.labels, controller).name
}

/// Istio's canonical service name and revision (`model::canonical`).
fn canonical(labels: &BTreeMap<String, String>, workload_name: &str) -> (String, String) {
    use crate::model::canonical::{name, revision};
    (name(labels, workload_name).to_string(), revision(labels).to_string())
}

/// `region/zone/subzone`.
fn split_locality(locality: &str) -> Option<Locality> {
    let mut parts = locality.splitn(3, '/');
    let l = Locality {
        region: parts.next().unwrap_or_default().to_string(),
        zone: parts.next().unwrap_or_default().to_string(),
        subzone: parts.next().unwrap_or_default().to_string(),
    };
    (l != Locality::default()).then_some(l)
}

/// The raw octets of each IP; `None` when there is none or one does not parse.
fn ip_bytes(ips: Vec<&str>) -> Option<Vec<Vec<u8>>> {
    if ips.is_empty() {
        return None;
    }
    ips.into_iter().map(|ip| ip.parse::<IpAddr>().ok().map(octets)).collect()
}

fn octets(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    }
}
