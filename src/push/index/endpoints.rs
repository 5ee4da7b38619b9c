//! `EndpointIndex`: the endpoints of every service, by host.
//!
//! Each service's endpoints are one `Arc<ServiceEndpoints>`, so an endpoint
//! change rebuilds only the services it touches and shares every other entry
//! with the previous index.
//!
//! Every endpoint carries its cluster and network (`NetworkIndex`), and a
//! service's endpoints hold one per network and address: two clusters on
//! different networks may reuse each other's Pod addresses.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Bound;
use std::sync::Arc;

use rayon::prelude::*;

use super::{NetworkIndex, ServiceIndex, Workload, WorkloadIndex};
use crate::config::{ConfigKey, ConfigKind, ConfigObject, k8s};
use crate::model::endpoint::has_mesh_mtls;
use crate::model::{Endpoint, Hostname, Service, ServiceEndpoints, StoreSnapshot, StoredObject, no_labels};

/// Endpoints by service host, in a persistent map: the successor of an
/// index after an endpoint change shares every untouched entry (O(1) clone,
/// O(log n) per changed host).
#[derive(Debug, Default, Clone)]
pub struct EndpointIndex {
    by_host: imbl::HashMap<Hostname, Arc<ServiceEndpoints>>,
}

/// EndpointSlices by `(namespace, service name)`.
type SliceMap<'a> = HashMap<(&'a str, &'a str), Vec<&'a k8s::EndpointSlice>>;

fn slices_by_service(snapshot: &StoreSnapshot) -> SliceMap<'_> {
    let mut map: SliceMap<'_> = HashMap::new();
    add_slices(&mut map, snapshot.kind(ConfigKind::EndpointSlice).values());
    map
}

/// [`slices_by_service`] for the services of `namespaces` only: an endpoint
/// update reads the slices of the namespaces it touches (a range of the
/// store's ordered map each), not every slice of the mesh.
fn slices_in<'a>(snapshot: &'a StoreSnapshot, namespaces: &HashSet<&str>) -> SliceMap<'a> {
    let mut map: SliceMap<'_> = HashMap::new();
    let slices = snapshot.kind(ConfigKind::EndpointSlice);
    for namespace in namespaces {
        let key = |namespace: &str| ConfigKey::new(ConfigKind::EndpointSlice, namespace, "");
        // Every key of `namespace` sorts before any of `namespace\0`.
        let range = (Bound::Included(key(namespace)), Bound::Excluded(key(&format!("{namespace}\0"))));
        add_slices(&mut map, slices.range(range).map(|(_, stored)| stored));
    }
    map
}

fn add_slices<'a>(map: &mut SliceMap<'a>, stored: impl Iterator<Item = &'a Arc<StoredObject>>) {
    for stored in stored {
        if let ConfigObject::EndpointSlice(slice) = &*stored.object
            && let Some(svc) = slice.metadata.labels.get(k8s::SERVICE_NAME_LABEL)
        {
            map.entry((slice.metadata.namespace(), svc.as_str())).or_default().push(slice);
        }
    }
}

impl EndpointIndex {
    /// Builds endpoints for every service, in parallel.
    pub fn build(
        snapshot: &StoreSnapshot,
        services: &ServiceIndex,
        workloads: &WorkloadIndex,
        networks: &NetworkIndex,
    ) -> EndpointIndex {
        let slices = slices_by_service(snapshot);
        let inputs = Inputs { snapshot, workloads, networks, slices: &slices };
        let built: Vec<(Hostname, Arc<ServiceEndpoints>)> =
            services.all().par_iter().map(|svc| (svc.hostname.clone(), Arc::new(endpoints_of(svc, &inputs)))).collect();
        EndpointIndex { by_host: built.into_iter().collect() }
    }

    /// A copy of `prev` with the endpoints of `hosts` rebuilt (or removed, for
    /// hosts that no longer exist). Returns the index and the hosts whose
    /// endpoints really changed.
    pub fn update(
        prev: &EndpointIndex,
        snapshot: &StoreSnapshot,
        services: &ServiceIndex,
        workloads: &WorkloadIndex,
        networks: &NetworkIndex,
        hosts: &HashSet<Hostname>,
    ) -> (EndpointIndex, HashSet<Hostname>) {
        let namespaces: HashSet<&str> = hosts.iter().filter_map(|h| services.get(h)).map(|s| &*s.namespace).collect();
        let slices = slices_in(snapshot, &namespaces);
        let inputs = Inputs { snapshot, workloads, networks, slices: &slices };
        let mut next = prev.clone();
        let mut changed = HashSet::new();
        for host in hosts {
            match services.get(host) {
                Some(svc) => {
                    let eps = endpoints_of(svc, &inputs);
                    if prev.by_host.get(host).is_none_or(|old| **old != eps) {
                        next.by_host.insert(host.clone(), Arc::new(eps));
                        changed.insert(host.clone());
                    }
                }
                None => {
                    if next.by_host.remove(host).is_some() {
                        changed.insert(host.clone());
                    }
                }
            }
        }
        (next, changed)
    }

    /// Endpoints of a host (empty when the host is unknown).
    pub fn get(&self, host: &str) -> Option<&Arc<ServiceEndpoints>> {
        self.by_host.get(host)
    }

    /// Total endpoints.
    pub fn endpoint_count(&self) -> usize {
        self.by_host.values().map(|e| e.endpoints.len()).sum()
    }
}

/// The port a workload serves a service port on.
fn workload_port(port: &crate::model::ServicePort, w: &Workload) -> Option<u32> {
    if w.is_workload_entry {
        // A WorkloadEntry maps *service* port names to its own ports.
        if let Some(p) = w.named_ports.get(&*port.name) {
            return Some(*p);
        }
        return Some(port.target_port.unwrap_or(port.port));
    }
    match port.target_port {
        Some(p) => Some(p),
        // Named targetPort: look the name up in the pod's container ports.
        None => port.target_port_name.as_deref().and_then(|n| w.named_ports.get(n).copied()),
    }
}

/// What a service's endpoints are computed from.
struct Inputs<'a> {
    snapshot: &'a StoreSnapshot,
    workloads: &'a WorkloadIndex,
    networks: &'a NetworkIndex,
    slices: &'a SliceMap<'a>,
}

fn endpoint_from_workload(svc: &Service, w: &Workload, networks: &NetworkIndex) -> Option<Endpoint> {
    let ports: BTreeMap<u32, u32> =
        svc.ports.iter().filter_map(|p| workload_port(p, w).map(|wp| (p.port, wp))).collect();
    if ports.is_empty() {
        return None;
    }
    let network = match &w.network {
        Some(network) => Some(network.clone()),
        // istiod leaves a WorkloadEntry that names no network on the default one.
        None if w.is_workload_entry => None,
        None => networks.network_of(&w.key.cluster, &w.address),
    };
    Some(Endpoint {
        address: w.address.clone(),
        ports: Arc::new(ports),
        labels: w.labels.clone(),
        locality: w.locality.clone(),
        weight: w.weight,
        service_account: w.service_account.clone(),
        mesh_mtls: has_mesh_mtls(&w.labels),
        network,
        cluster: w.key.cluster.clone(),
    })
}

/// Computes one service's endpoints from every source Kubernetes and Istio use.
fn endpoints_of(svc: &Service, inputs: &Inputs<'_>) -> ServiceEndpoints {
    let Inputs { snapshot, workloads, networks, slices } = *inputs;
    let mut out: Vec<Endpoint> = Vec::new();
    // One endpoint per network and address: the first pushed (a stable
    // sort keeps it first among its equals, below).
    let push = |e: Endpoint, out: &mut Vec<Endpoint>| out.push(e);

    // A Service with EndpointSlices takes its Pods' endpoints from them,
    // readiness included, as Istio does; a directory mesh that lists Pods
    // but no slices (no controller writes them) gets the Pods its selector
    // picks. WorkloadEntries it selects are endpoints either way.
    let sliced = svc.source.kind == ConfigKind::Service
        && slices.get(&(&*svc.namespace, &*svc.source.name)).is_some_and(|list| !list.is_empty());
    for w in workloads.select(&svc.namespace, &svc.selector) {
        if sliced && !w.is_workload_entry {
            continue;
        }
        if let Some(e) = endpoint_from_workload(svc, w, networks) {
            push(e, &mut out);
        }
    }

    match svc.source.kind {
        ConfigKind::Service => {
            if let Some(list) = slices.get(&(&*svc.namespace, &*svc.source.name)) {
                for slice in list {
                    // The slice's ports are every one of its endpoints':
                    // computed once, and held once for all of them.
                    let ports: Arc<BTreeMap<u32, u32>> = Arc::new(
                        svc.ports
                            .iter()
                            .filter_map(|sp| {
                                slice
                                    .ports
                                    .iter()
                                    .find(|p| p.name.as_deref().unwrap_or("") == &*sp.name || slice.ports.len() == 1)
                                    .and_then(|p| p.port)
                                    .map(|wp| (sp.port, wp))
                            })
                            .collect(),
                    );
                    if ports.is_empty() {
                        continue;
                    }
                    for ep in &slice.endpoints {
                        if ep.conditions.ready == Some(false) {
                            continue;
                        }
                        let Some(addr) = ep.addresses.first() else { continue };
                        // A slice endpoint backed by a Pod carries that Pod's
                        // labels and service account.
                        let pod = ep
                            .target_ref
                            .as_ref()
                            .filter(|r| r.kind.as_deref() == Some("Pod"))
                            .and_then(|r| r.name.as_deref())
                            .and_then(|name| {
                                let ns = ep
                                    .target_ref
                                    .as_ref()
                                    .and_then(|r| r.namespace.as_deref())
                                    .unwrap_or(&svc.namespace);
                                // The Pod of the slice's own cluster.
                                let cluster = &slice.metadata.cluster;
                                workloads.get(&crate::config::ConfigKey::in_cluster(ConfigKind::Pod, ns, name, cluster))
                            });
                        let labels = pod.map_or_else(no_labels, |w| w.labels.clone());
                        let service_account = pod.and_then(|w| w.service_account.clone());
                        // Istio takes the locality from the Pod (its Node), not the slice's zone.
                        let locality = pod.map_or_else(crate::text::empty, |w| w.locality.clone());
                        let cluster = slice.metadata.cluster.clone();
                        let network = match pod.and_then(|w| w.network.clone()) {
                            Some(network) => Some(network),
                            None => networks.network_of(&cluster, addr),
                        };
                        push(
                            Endpoint {
                                address: addr.as_str().into(),
                                ports: ports.clone(),
                                mesh_mtls: has_mesh_mtls(&labels),
                                labels,
                                locality,
                                weight: 1,
                                service_account,
                                network,
                                cluster,
                            },
                            &mut out,
                        );
                    }
                }
            }
        }
        ConfigKind::ServiceEntry => {
            if let Some(stored) = snapshot.get(&svc.source)
                && let ConfigObject::ServiceEntry(se) = &*stored.object
            {
                for e in inline_endpoints(svc, se) {
                    push(e, &mut out);
                }
            }
        }
        _ => {}
    }
    out.sort_by(|a, b| a.address.cmp(&b.address).then_with(|| a.network.cmp(&b.network)));
    out.dedup_by(|later, first| later.address == first.address && later.network == first.network);
    // Held for the snapshot's life: without the room pushing left (a
    // service of ten endpoints had room for sixteen).
    out.shrink_to_fit();
    ServiceEndpoints { endpoints: out }
}

/// Inline endpoints of a ServiceEntry host, and the host itself for DNS
/// entries without endpoints.
fn inline_endpoints(svc: &Service, se: &crate::config::istio::ServiceEntry) -> Vec<Endpoint> {
    // A ServiceEntry is config: of the config (local) cluster.
    let cluster = crate::config::ClusterId::LOCAL;
    let mut out: Vec<Endpoint> = se
        .spec
        .endpoints
        .iter()
        .map(|e| Endpoint {
            address: e.address.as_str().into(),
            ports: Arc::new(
                svc.ports
                    .iter()
                    .map(|p| (p.port, e.ports.get(&*p.name).copied().unwrap_or(p.target_port.unwrap_or(p.port))))
                    .collect(),
            ),
            labels: if e.labels.is_empty() { no_labels() } else { Arc::new(e.labels.clone()) },
            locality: e.locality.clone().unwrap_or_default().into(),
            weight: e.weight.unwrap_or(1).max(1),
            service_account: e.service_account.as_deref().map(Arc::from),
            mesh_mtls: has_mesh_mtls(&e.labels),
            // As a WorkloadEntry: the network it names, else the default one.
            network: e.network.as_deref().filter(|n| !n.is_empty()).map(Arc::from),
            cluster: cluster.clone(),
        })
        .collect();
    if out.is_empty() && svc.resolution.is_dns() && !svc.hostname.starts_with('*') {
        out.push(Endpoint {
            address: svc.hostname.clone(),
            ports: Arc::new(svc.ports.iter().map(|p| (p.port, p.target_port.unwrap_or(p.port))).collect()),
            labels: no_labels(),
            locality: crate::text::empty(),
            weight: 1,
            service_account: None,
            mesh_mtls: false,
            network: None,
            cluster,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ConfigStore;
    use crate::testing::bookinfo::puts;

    const MESH: &str = "\
apiVersion: v1
kind: Service
metadata: {name: ledger, namespace: shop}
spec: {selector: {app: ledger}, ports: [{name: http, port: 9080}]}
---
apiVersion: v1
kind: Pod
metadata: {name: ledger-v1, namespace: shop, labels: {app: ledger, version: v1}}
spec: {serviceAccountName: ledger}
status: {podIP: 10.0.0.1, phase: Running}
---
apiVersion: v1
kind: Pod
metadata: {name: ledger-v2, namespace: shop, labels: {app: ledger, version: v2}}
status: {podIP: 10.0.0.2, phase: Running}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: ledger-vm, namespace: shop}
spec: {address: 10.0.9.9, labels: {app: ledger}}
";

    fn addresses(store: &ConfigStore) -> Vec<(String, String, Option<String>)> {
        let snapshot = store.snapshot();
        let services = ServiceIndex::build(&snapshot, &Default::default());
        let workloads = WorkloadIndex::build(&snapshot);
        let index = EndpointIndex::build(&snapshot, &services, &workloads, &NetworkIndex::default());
        let endpoints = index.get("ledger.shop.svc.cluster.local").expect("ledger has endpoints");
        endpoints
            .endpoints
            .iter()
            .map(|e| {
                let version = e.labels.get("version").cloned().unwrap_or_default();
                (e.address.to_string(), version, e.service_account.as_deref().map(str::to_string))
            })
            .collect()
    }

    #[test]
    fn a_service_with_endpoint_slices_takes_its_pods_readiness_from_them() {
        let store = ConfigStore::new();
        store.apply(puts(MESH));
        // No slice (a directory mesh): the Pods the selector picks, and the WorkloadEntry.
        let all: Vec<&str> = vec!["10.0.0.1", "10.0.0.2", "10.0.9.9"];
        assert_eq!(addresses(&store).iter().map(|a| a.0.as_str()).collect::<Vec<_>>(), all);
        // A slice naming ledger-v2 not ready (still serving, terminating: as
        // Istio by default, not sent): ledger-v2 is no endpoint, though the
        // selector picks its Pod; ledger-v1 carries its Pod's labels and
        // service account.
        store.apply(puts(
            "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
             metadata: {name: ledger-abc, namespace: shop, labels: {kubernetes.io/service-name: ledger}}\n\
             addressType: IPv4\nports: [{name: http, port: 9080}]\nendpoints:\n\
             - {addresses: [10.0.0.1], conditions: {ready: true}, targetRef: {kind: Pod, name: ledger-v1, namespace: shop}}\n\
             - {addresses: [10.0.0.2], conditions: {ready: false, serving: true, terminating: true}, targetRef: {kind: Pod, name: ledger-v2, namespace: shop}}\n",
        ));
        assert_eq!(
            addresses(&store),
            [
                ("10.0.0.1".to_string(), "v1".to_string(), Some("ledger".to_string())),
                ("10.0.9.9".to_string(), String::new(), None),
            ]
        );
    }

    /// At s2's 100,000 endpoints, a port map each was 19 MB: the endpoints
    /// of one slice hold its map once.
    #[test]
    fn the_endpoints_of_one_slice_share_its_ports_and_hold_no_spare_room() {
        let store = ConfigStore::new();
        let slice = |name: &str, port: u32, ips: &[&str]| {
            let endpoints: String =
                ips.iter().map(|ip| format!("- {{addresses: [{ip}], conditions: {{ready: true}}}}\n")).collect();
            format!(
                "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
                 metadata: {{name: {name}, namespace: shop, labels: {{kubernetes.io/service-name: ledger}}}}\n\
                 addressType: IPv4\nports: [{{name: http, port: {port}}}]\nendpoints:\n{endpoints}---\n"
            )
        };
        store.apply(puts(&format!(
            "{MESH}---\n{}{}",
            slice("ledger-a", 8080, &["10.0.0.1", "10.0.0.2", "10.0.0.3"]),
            slice("ledger-b", 8081, &["10.0.0.4", "10.0.0.5"])
        )));
        let snapshot = store.snapshot();
        let services = ServiceIndex::build(&snapshot, &Default::default());
        let workloads = WorkloadIndex::build(&snapshot);
        let index = EndpointIndex::build(&snapshot, &services, &workloads, &NetworkIndex::default());
        let endpoints = &index.get("ledger.shop.svc.cluster.local").expect("ledger has endpoints").endpoints;
        let of = |ip: &str| endpoints.iter().find(|e| &*e.address == ip).expect(ip);
        let (a, b) = (of("10.0.0.1"), of("10.0.0.4"));
        assert_eq!(*a.ports, BTreeMap::from([(9080, 8080)]));
        assert_eq!(*b.ports, BTreeMap::from([(9080, 8081)]));
        for ip in ["10.0.0.2", "10.0.0.3"] {
            assert!(Arc::ptr_eq(&a.ports, &of(ip).ports), "{ip} holds its slice's map");
        }
        assert!(!Arc::ptr_eq(&a.ports, &b.ports));
        // Slice endpoints without a Pod have no locality, and share its empty text.
        for ip in ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"] {
            assert!(Arc::ptr_eq(&of(ip).locality, &crate::text::empty()), "{ip}");
        }
        // Six endpoints (the five and MESH's WorkloadEntry), pushed one by
        // one, had room for eight.
        assert_eq!((endpoints.len(), endpoints.capacity()), (6, 6), "held without spare room");
    }

    /// An update reads only the slices of the namespaces it touches; what
    /// it builds is what a build of the whole index gives, also for
    /// namespaces whose names extend one another.
    #[test]
    fn an_update_reads_the_touched_namespaces_slices_and_equals_a_build() {
        let mesh = |ip: &str| {
            ["sho", "shop", "shop-2"]
                .iter()
                .enumerate()
                .map(|(i, ns)| {
                    let ip = if *ns == "shop" { ip.to_string() } else { format!("10.1.{i}.1") };
                    format!(
                        "apiVersion: v1\nkind: Service\nmetadata: {{name: ledger, namespace: {ns}}}\n\
                         spec: {{ports: [{{name: http, port: 9080}}]}}\n---\n\
                         apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
                         metadata: {{name: ledger-a, namespace: {ns}, labels: {{kubernetes.io/service-name: ledger}}}}\n\
                         addressType: IPv4\nports: [{{name: http, port: 9080}}]\n\
                         endpoints: [{{addresses: [{ip}], conditions: {{ready: true}}}}]\n---\n"
                    )
                })
                .collect::<String>()
        };
        let store = ConfigStore::new();
        store.apply(puts(&mesh("10.0.0.1")));
        let build = |store: &ConfigStore| {
            let snapshot = store.snapshot();
            let services = ServiceIndex::build(&snapshot, &Default::default());
            let workloads = WorkloadIndex::build(&snapshot);
            (
                EndpointIndex::build(&snapshot, &services, &workloads, &NetworkIndex::default()),
                snapshot,
                services,
                workloads,
            )
        };
        let (before, ..) = build(&store);
        store.apply(puts(&mesh("10.0.0.2")));
        let (rebuilt, snapshot, services, workloads) = build(&store);
        let hosts: HashSet<Hostname> =
            ["ledger.shop.svc.cluster.local", "ledger.sho.svc.cluster.local"].into_iter().map(Hostname::from).collect();
        let (updated, changed) =
            EndpointIndex::update(&before, &snapshot, &services, &workloads, &NetworkIndex::default(), &hosts);
        let changed: Vec<&str> = changed.iter().map(|h| &**h).collect();
        assert_eq!(changed, ["ledger.shop.svc.cluster.local"]);
        for ns in ["sho", "shop", "shop-2"] {
            let host = format!("ledger.{ns}.svc.cluster.local");
            assert_eq!(updated.get(&host), rebuilt.get(&host), "{host}");
            assert_eq!(updated.get(&host).map(|e| e.endpoints.len()), Some(1), "{host}");
        }
    }
}
