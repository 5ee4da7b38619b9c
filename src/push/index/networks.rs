//! `NetworkIndex`: which network each cluster's endpoints are on, and the
//! gateways that reach each network from the others.
//!
//! An endpoint's network is, as istiod resolves it
//! (`kube/controller/network.go`): its Pod's `topology.istio.io/network`
//! label (read by the endpoint index, not here); else the label on this
//! server's own namespace (`--system-namespace`) in the endpoint's cluster;
//! else the `meshNetworks` network whose `fromRegistry` names the cluster;
//! else the first whose `fromCidr` holds the address; else the default
//! network, `""`.
//!
//! Network gateways come from `meshNetworks` (`address` entries, and
//! `registryServiceName` entries read in the clusters the network's
//! `fromRegistry` names) and from Services labelled
//! `topology.istio.io/network` in any namespace and cluster. A Service
//! gateway takes mesh mTLS on 15443, or the port its
//! `networking.istio.io/gatewayPort` label names, which it must declare;
//! its addresses are its load balancer's and its `externalIPs`. A
//! gateway known by host name has the addresses `source::gateway_dns`
//! resolved for it (its `ResolvedGatewayHost`), as istiod resolves them;
//! the index lists every such name for that source to resolve.
//!
//! Invariants: gateways are sorted by address and port, each once;
//! [`NetworkIndex::scale`] is the least common multiple of the sizes of
//! the gateway groups by network and by network and cluster (the factor
//! every endpoint weight is multiplied by so that splitting a weight
//! among a group's gateways stays whole, as istiod scales them); what a
//! source sets that gives no gateway is a problem the index keeps, shown
//! on `/debug/configz`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::Serialize;

use crate::config::mesh::MeshConfig;
use crate::config::mesh::networks::{GatewayTarget, NetworkEndpoints, resolved_gateway_host_name};
use crate::config::{ClusterId, ConfigKey, ConfigKind, ConfigObject, k8s};
use crate::model::endpoint::NETWORK_LABEL;
use crate::model::{StoreSnapshot, host};

/// The label of a gateway Service that names its mTLS port.
pub const GATEWAY_PORT_LABEL: &str = "networking.istio.io/gatewayPort";
/// The port a network gateway takes mesh mTLS on unless its label says otherwise.
pub const DEFAULT_GATEWAY_PORT: u32 = 15443;

/// One address (and port) that reaches a network.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct NetworkGateway {
    /// Its address (sorted first: gateways are sent in address order).
    pub address: Arc<str>,
    /// Its port.
    pub port: u32,
    /// The network it reaches.
    pub network: Arc<str>,
    /// The cluster it fronts (`""` for a `meshNetworks` address, which
    /// fronts every cluster of its network).
    pub cluster: Arc<str>,
}

/// Something a network source sets that gives no gateway, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NetworkProblem {
    /// What sets it (`Service/NS/NAME (cluster C)`, or `meshNetworks`).
    pub source: String,
    /// Why.
    pub message: String,
}

/// The networks of a snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkIndex {
    /// The local cluster's id, which its endpoints carry.
    #[serde(skip)]
    local_cluster: Arc<str>,
    /// Networks by cluster id, from the system namespace's label.
    cluster_networks: BTreeMap<Arc<str>, Arc<str>>,
    /// Networks by cluster id, from `meshNetworks` `fromRegistry`.
    registry_networks: BTreeMap<Arc<str>, Arc<str>>,
    /// `meshNetworks` `fromCidr` ranges, in network order.
    cidrs: Vec<(ipnet::IpNet, Arc<str>)>,
    /// Every gateway, sorted.
    gateways: Vec<NetworkGateway>,
    /// Gateway positions by network.
    #[serde(skip)]
    by_network: HashMap<Arc<str>, GatewayGroup>,
    /// The weight scale (1 without gateways).
    scale: u32,
    /// The clusters with Services.
    #[serde(skip)]
    clusters: std::collections::BTreeSet<ClusterId>,
    /// What gives no gateway, and why.
    problems: Vec<NetworkProblem>,
    /// The host names of gateways, which `source::gateway_dns` resolves.
    gateway_hosts: std::collections::BTreeSet<Arc<str>>,
}

/// The gateways of one network, by position in the sorted list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct GatewayGroup {
    /// All of them.
    all: Vec<u32>,
    /// Those of each cluster.
    by_cluster: HashMap<Arc<str>, Vec<u32>>,
}

/// `registryServiceName` gateways: (host, cluster) → (network, port).
type RegistryGateways = HashMap<(Arc<str>, Arc<str>), (Arc<str>, u32)>;

/// The default network, shared.
fn no_network() -> Arc<str> {
    crate::text::empty()
}

impl NetworkIndex {
    /// Indexes the networks of `store` under `mesh`.
    pub fn build(store: &StoreSnapshot, mesh: &MeshConfig) -> NetworkIndex {
        let mut index = NetworkIndex { local_cluster: mesh.cluster_id.clone(), scale: 1, ..Default::default() };
        for stored in store.kind(ConfigKind::Namespace).values() {
            let meta = stored.object.meta();
            if meta.name == *mesh.system_namespace
                && let Some(network) = meta.labels.get(NETWORK_LABEL).filter(|n| !n.is_empty())
            {
                index.cluster_networks.insert(index.cluster_name(&meta.cluster), network.as_str().into());
            }
        }
        let mut registry_gateways: RegistryGateways = HashMap::new();
        for (name, network) in &mesh.networks.networks {
            let mut registries: Vec<Arc<str>> = Vec::new();
            for endpoints in &network.endpoints {
                match endpoints {
                    NetworkEndpoints::FromCidr(cidr) => index.cidrs.push((*cidr, name.clone())),
                    NetworkEndpoints::FromRegistry(cluster) => {
                        registries.push(cluster.clone());
                        if let Some(first) = index.registry_networks.get(cluster) {
                            index.problem(
                                "meshNetworks",
                                format!("cluster {cluster} is in networks {first} and {name} (fromRegistry): {first} applies"),
                            );
                            continue;
                        }
                        index.registry_networks.insert(cluster.clone(), name.clone());
                    }
                }
            }
            for gateway in &network.gateways {
                match &gateway.target {
                    GatewayTarget::Address(address) if address.parse::<std::net::IpAddr>().is_ok() => {
                        index.gateways.push(NetworkGateway {
                            address: address.clone(),
                            port: gateway.port,
                            network: name.clone(),
                            cluster: no_network(),
                        });
                    }
                    GatewayTarget::Address(host) => {
                        let source = format!("meshNetworks gateway {host} of network {name}");
                        for address in index.resolve(store, host, &source) {
                            index.gateways.push(NetworkGateway {
                                address,
                                port: gateway.port,
                                network: name.clone(),
                                cluster: no_network(),
                            });
                        }
                    }
                    GatewayTarget::RegistryServiceName(host) => {
                        for cluster in &registries {
                            registry_gateways.insert((host.clone(), cluster.clone()), (name.clone(), gateway.port));
                        }
                    }
                }
            }
        }
        for stored in store.kind(ConfigKind::Service).values() {
            let ConfigObject::Service(svc) = &*stored.object else { continue };
            if !index.clusters.contains(&svc.metadata.cluster) {
                index.clusters.insert(svc.metadata.cluster.clone());
            }
            let labelled = svc.metadata.labels.get(NETWORK_LABEL).filter(|n| !n.is_empty());
            if labelled.is_none() && registry_gateways.is_empty() {
                continue;
            }
            let cluster = index.cluster_name(&svc.metadata.cluster);
            let (network, port) = match labelled {
                Some(network) => (Arc::from(network.as_str()), index.labelled_port(svc, &stored.object)),
                None => {
                    let fqdn = host::service_fqdn(&svc.metadata.name, svc.metadata.namespace());
                    match registry_gateways.get(&(Arc::from(&*fqdn), cluster.clone())) {
                        Some((network, port)) => (network.clone(), Some(*port)),
                        None => continue,
                    }
                }
            };
            let Some(port) = port else { continue };
            let source = stored.object.key().to_string();
            let mut found = false;
            let ips = svc.status.load_balancer.ingress.iter().map(|i| (i.ip.as_deref(), i.hostname.as_deref()));
            let external = svc.spec.external_ips.iter().map(|ip| (Some(ip.as_str()), None));
            for (ip, hostname) in ips.chain(external) {
                let addresses: Vec<Arc<str>> =
                    match (ip.filter(|ip| !ip.is_empty()), hostname.filter(|h| !h.is_empty())) {
                        (Some(ip), _) => vec![ip.into()],
                        (None, Some(hostname)) => index.resolve(store, hostname, &source),
                        (None, None) => Vec::new(),
                    };
                for address in addresses {
                    found = true;
                    index.gateways.push(NetworkGateway {
                        address,
                        port,
                        network: network.clone(),
                        cluster: cluster.clone(),
                    });
                }
            }
            let named = !svc.status.load_balancer.ingress.is_empty() || !svc.spec.external_ips.is_empty();
            if !found && !named {
                index.problem(
                    &source,
                    format!(
                        "gateway of network {network}, but it has no load balancer address or externalIPs (yet): \
                         it is no gateway until it has one"
                    ),
                );
            }
        }
        // istiod also takes a network-labelled Gateway API Gateway's
        // addresses and auto-passthrough listeners as gateways; meshpush
        // takes its Service's (labelled alike), and says so.
        for stored in store.kind(ConfigKind::KubernetesGateway).values() {
            let meta = stored.object.meta();
            if let Some(network) = meta.labels.get(NETWORK_LABEL).filter(|n| !n.is_empty()) {
                index.problem(
                    &stored.object.key().to_string(),
                    format!(
                        "a Gateway API Gateway labelled for network {network} is not read as a network gateway: \
                         label its Service topology.istio.io/network={network} (with the gateway port) instead"
                    ),
                );
            }
        }
        index.gateways.sort();
        index.gateways.dedup();
        index.group();
        index
    }

    /// The mTLS port a `topology.istio.io/network`-labelled Service takes,
    /// if it declares it; a problem says why not.
    fn labelled_port(&mut self, svc: &k8s::Service, object: &ConfigObject) -> Option<u32> {
        let source = object.key().to_string();
        let port = match svc.metadata.labels.get(GATEWAY_PORT_LABEL) {
            None => DEFAULT_GATEWAY_PORT,
            Some(text) => match text.parse::<u32>().ok().filter(|p| (1..=65535).contains(p)) {
                Some(port) => port,
                None => {
                    // istiod logs it and takes the default.
                    self.problem(&source, format!("{GATEWAY_PORT_LABEL} {text:?} is not a port: 15443 applies"));
                    DEFAULT_GATEWAY_PORT
                }
            },
        };
        if svc.spec.ports.iter().any(|p| p.port == port) {
            return Some(port);
        }
        self.problem(&source, format!("gateway Service without port {port}: not a network gateway"));
        None
    }

    /// The addresses resolved for gateway host name `host` (named by
    /// `source`); a problem says why there are none.
    fn resolve(&mut self, store: &StoreSnapshot, host: &str, source: &str) -> Vec<Arc<str>> {
        self.gateway_hosts.insert(host.to_ascii_lowercase().into());
        let key = ConfigKey::new(ConfigKind::ResolvedGatewayHost, "", &resolved_gateway_host_name(host));
        let resolved = match store.get(&key).map(|s| &*s.object) {
            Some(ConfigObject::ResolvedGatewayHost(r)) => Some(r),
            _ => None,
        };
        let addresses: Vec<Arc<str>> =
            resolved.map(|r| r.addresses.iter().map(|a| Arc::from(a.as_str())).collect()).unwrap_or_default();
        if addresses.is_empty() {
            let why = resolved.and_then(|r| r.error.as_deref()).unwrap_or("not resolved yet");
            self.problem(source, format!("host name {host} has no address ({why}): not a gateway address"));
        }
        addresses
    }

    /// The host names of gateways, to resolve.
    pub fn gateway_hosts(&self) -> impl Iterator<Item = &Arc<str>> {
        self.gateway_hosts.iter()
    }

    fn problem(&mut self, source: &str, message: String) {
        self.problems.push(NetworkProblem { source: source.to_string(), message });
    }

    /// Groups the sorted gateways and computes the weight scale.
    fn group(&mut self) {
        for (i, g) in self.gateways.iter().enumerate() {
            let group = self.by_network.entry(g.network.clone()).or_default();
            group.all.push(i as u32);
            group.by_cluster.entry(g.cluster.clone()).or_default().push(i as u32);
        }
        let sizes = self.by_network.values().flat_map(|g| std::iter::once(&g.all).chain(g.by_cluster.values()));
        let sizes = sizes.map(|positions| positions.len() as u64);
        let lcm = sizes.fold(1u64, |acc, n| acc / gcd(acc, n) * n);
        self.scale = u32::try_from(lcm).unwrap_or(u32::MAX).max(1);
    }

    /// The id of `cluster` (the local one's is the mesh's cluster id).
    pub fn cluster_name(&self, cluster: &ClusterId) -> Arc<str> {
        cluster.remote_id().map_or_else(|| self.local_cluster.clone(), Arc::from)
    }

    /// The network of an endpoint at `address` in `cluster` that has no
    /// label saying it (`None`: the default network).
    pub fn network_of(&self, cluster: &ClusterId, address: &str) -> Option<Arc<str>> {
        if self.cluster_networks.is_empty() && self.registry_networks.is_empty() && self.cidrs.is_empty() {
            return None;
        }
        let cluster = cluster.remote_id().unwrap_or(&self.local_cluster);
        if let Some(network) = self.cluster_networks.get(cluster).or_else(|| self.registry_networks.get(cluster)) {
            return Some(network.clone());
        }
        let ip = address.parse::<std::net::IpAddr>().ok()?;
        self.cidrs.iter().find(|(cidr, _)| cidr.contains(&ip)).map(|(_, network)| network.clone())
    }

    /// The local cluster's id.
    pub fn local_cluster(&self) -> &str {
        &self.local_cluster
    }

    /// Whether any gateway exists: only then are endpoints of other
    /// networks replaced by gateways (Istio's split horizon).
    pub fn split_horizon(&self) -> bool {
        !self.gateways.is_empty()
    }

    /// Whether Services of more than one cluster are read.
    pub fn multi_cluster(&self) -> bool {
        self.clusters.len() > 1
    }

    /// The factor every endpoint weight is multiplied by under split horizon.
    pub fn scale(&self) -> u32 {
        self.scale
    }

    /// The gateways that reach endpoints of `network` in `cluster`: that
    /// cluster's, else every gateway of the network.
    pub fn gateways_for(&self, network: &str, cluster: &str) -> impl Iterator<Item = &NetworkGateway> {
        let positions = self.by_network.get(network).map(|g| g.by_cluster.get(cluster).unwrap_or(&g.all));
        positions.into_iter().flatten().map(|&i| &self.gateways[i as usize])
    }

    /// Every gateway.
    pub fn gateways(&self) -> &[NetworkGateway] {
        &self.gateways
    }

    /// What gives no gateway.
    pub fn problems(&self) -> &[NetworkProblem] {
        &self.problems
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}
