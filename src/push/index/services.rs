//! `ServiceIndex`: every routable host, from Kubernetes Services and ServiceEntries.
//!
//! A Kubernetes Service becomes a service as Istio converts it: its cluster
//! IP is its address; a headless one (`clusterIP: None`) is passthrough; an
//! `ExternalName` one is an alias of the host it names, and the index
//! resolves aliases (through chains of them; a loop resolves to nothing, as
//! DNS answers NXDOMAIN) onto the service they end at, which then lists
//! them ([`Service::aliases`]). An alias of a host no service defines has
//! no effect: its clients' DNS leads them out of the mesh's names.
//!
//! Across clusters, the Services of one host are one service, as istiod's
//! aggregate registry merges them: the first by key (the local cluster's,
//! else the first remote cluster's by id) gives its attributes, and the
//! endpoints are every cluster's (`EndpointIndex`). A cluster whose
//! Service has other virtual IPs keeps them: its proxies see a copy of the
//! service with their cluster's addresses ([`ServiceIndex::in_cluster`]),
//! as istiod gives a proxy its own cluster's VIPs.
//!
//! Indexed by host, by namespace, and by selector (each service under its
//! namespace and its selector's first label), so finding the services that
//! select a workload costs the candidates under the workload's own labels,
//! not a scan of its namespace: every sidecar's inbound key asks that.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use crate::config::mesh::MeshConfig;
use crate::config::{ClusterId, ConfigKey, ConfigKind, ConfigObject, istio, k8s};
use crate::model::service::{ExportTo, Location};
use crate::model::{Alias, Hostname, Protocol, Resolution, Service, ServicePort, StoreSnapshot, host};

/// Annotation carrying a Kubernetes Service's `exportTo`.
pub const EXPORT_TO_ANNOTATION: &str = "networking.istio.io/exportTo";

/// All services, by host and in host order.
#[derive(Debug, Default)]
pub struct ServiceIndex {
    by_host: HashMap<Hostname, Arc<Service>>,
    sorted: Vec<Arc<Service>>,
    by_namespace: HashMap<Arc<str>, Vec<Arc<Service>>>,
    /// Services with a selector, under [`selector_slot`] of their namespace
    /// and their selector's first label: a workload can only be selected by
    /// services filed under one of its own labels.
    by_selector: HashMap<u64, Vec<Arc<Service>>>,
    /// Whether any service is an alias.
    has_aliases: bool,
    /// By cluster id: the services whose Service in that cluster has
    /// other virtual IPs than the one that gives their attributes, with
    /// that cluster's.
    cluster_variants: HashMap<Arc<str>, HashMap<Hostname, Arc<Service>>>,
}

/// The longest chain of aliases followed; a longer one is taken as a loop.
const MAX_ALIAS_HOPS: usize = 16;

/// Where a service selecting `key=value` in `namespace` is filed.
fn selector_slot(namespace: &str, key: &str, value: &str) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for part in [namespace, key, value] {
        h.update(part.as_bytes());
        h.update(&[0]);
    }
    h.digest()
}

impl ServiceIndex {
    /// Builds the index. A host defined twice keeps the Kubernetes Service,
    /// then the first ServiceEntry by key (Istio keeps the oldest; meshpush
    /// has no creation time, so the order is by kind and key — stable).
    /// A service that names no `exportTo` takes the mesh config's
    /// `defaultServiceExportTo`.
    pub fn build(snapshot: &StoreSnapshot, mesh: &MeshConfig) -> ServiceIndex {
        let default_export = &mesh.export_to.services;
        let mut services: HashMap<Hostname, Service> = HashMap::new();
        // The Services of one host are adjacent in key order (by name,
        // then cluster): the first gives its attributes; the other
        // clusters' addresses are kept.
        let mut others: Vec<(Hostname, ClusterId, Vec<Arc<str>>)> = Vec::new();
        let mut first: Option<&ConfigKey> = None;
        for (key, stored) in snapshot.kind(ConfigKind::Service).iter() {
            if let ConfigObject::Service(svc) = &*stored.object {
                let s = from_kubernetes(svc, default_export);
                match first {
                    Some(f) if f.namespace == key.namespace && f.name == key.name => {
                        others.push((s.hostname, key.cluster.clone(), s.addresses));
                    }
                    _ => {
                        first = Some(key);
                        services.entry(s.hostname.clone()).or_insert(s);
                    }
                }
            }
        }
        for stored in snapshot.kind(ConfigKind::ServiceEntry).values() {
            if let ConfigObject::ServiceEntry(se) = &*stored.object {
                for s in from_service_entry(se, default_export) {
                    services.entry(s.hostname.clone()).or_insert(s);
                }
            }
        }
        resolve_aliases(&mut services);
        let by_host: HashMap<Hostname, Arc<Service>> = services.into_iter().map(|(h, s)| (h, Arc::new(s))).collect();
        let mut sorted: Vec<Arc<Service>> = by_host.values().cloned().collect();
        sorted.sort_by(|a, b| a.hostname.cmp(&b.hostname));
        let mut by_namespace: HashMap<Arc<str>, Vec<Arc<Service>>> = HashMap::new();
        let mut by_selector: HashMap<u64, Vec<Arc<Service>>> = HashMap::new();
        for s in &sorted {
            by_namespace.entry(s.namespace.clone()).or_default().push(s.clone());
            if let Some((key, value)) = s.selector.iter().next() {
                by_selector.entry(selector_slot(&s.namespace, key, value)).or_default().push(s.clone());
            }
        }
        let has_aliases = sorted.iter().any(|s| s.is_alias());
        let mut cluster_variants: HashMap<Arc<str>, HashMap<Hostname, Arc<Service>>> = HashMap::new();
        for (host, cluster, addresses) in others {
            let Some(base) = by_host.get(&host) else { continue };
            if base.addresses != addresses && base.is_kubernetes() {
                let variant = Service { addresses, ..(**base).clone() };
                let cluster: Arc<str> = cluster.remote_id().map_or_else(|| mesh.cluster_id.clone(), Arc::from);
                cluster_variants.entry(cluster).or_default().insert(host, Arc::new(variant));
            }
        }
        ServiceIndex { by_host, sorted, by_namespace, by_selector, has_aliases, cluster_variants }
    }

    /// The service for an FQDN.
    pub fn get(&self, host: &str) -> Option<&Arc<Service>> {
        self.by_host.get(host)
    }

    /// Whether some service has other virtual IPs in cluster `cluster`.
    pub fn has_variants_in(&self, cluster: &str) -> bool {
        self.cluster_variants.contains_key(cluster)
    }

    /// `svc` as proxies of `cluster` see it: with that cluster's virtual
    /// IPs when its Service there has others.
    pub fn in_cluster(&self, cluster: &str, svc: &Arc<Service>) -> Arc<Service> {
        let variant = self.cluster_variants.get(cluster).and_then(|v| v.get(&svc.hostname));
        variant.unwrap_or(svc).clone()
    }

    /// The services defined in `namespace`, sorted by host.
    pub fn in_namespace(&self, namespace: &str) -> &[Arc<Service>] {
        self.by_namespace.get(namespace).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The services of `namespace` whose (non-empty) selector matches
    /// `labels`, sorted by host. Costs the candidates filed under the
    /// workload's labels, not the namespace's size.
    pub fn selecting(&self, namespace: &str, labels: &BTreeMap<String, String>) -> Vec<&Arc<Service>> {
        let mut out: Vec<&Arc<Service>> = labels
            .iter()
            .flat_map(|(key, value)| {
                let filed = self.by_selector.get(&selector_slot(namespace, key, value));
                filed.into_iter().flatten().filter(move |s| {
                    &*s.namespace == namespace
                        && s.selector.iter().next() == Some((key, value))
                        && s.selector.iter().all(|(k, v)| labels.get(k) == Some(v))
                })
            })
            .collect();
        out.sort_by(|a, b| a.hostname.cmp(&b.hostname));
        out
    }

    /// The host traffic for `host` goes to: `host` itself, or, for an alias,
    /// the service its chain of aliases ends at (a chain that loops or ends
    /// at no service leaves `host` as it is).
    pub fn concrete<'a>(&'a self, host: &'a str) -> &'a str {
        // Most meshes have no alias: no lookup then (this is asked for
        // every route destination of every route config generated).
        if !self.has_aliases {
            return host;
        }
        let mut at = host;
        for _ in 0..MAX_ALIAS_HOPS {
            match self.by_host.get(at).filter(|s| s.is_alias()).and_then(|s| s.external_name.as_deref()) {
                Some(next) => at = next,
                None => break,
            }
        }
        if self.by_host.get(at).is_some_and(|s| !s.is_alias()) { at } else { host }
    }

    /// Every service, sorted by host.
    pub fn all(&self) -> &[Arc<Service>] {
        &self.sorted
    }

    /// Number of services.
    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }
}

/// Lists each alias on the service it ends at. An alias naming another
/// alias is followed to the end of the chain; a chain that loops ends
/// nowhere.
fn resolve_aliases(services: &mut HashMap<Hostname, Service>) {
    let named: HashMap<Hostname, Hostname> = services
        .values()
        .filter_map(|s| s.external_name.as_ref().filter(|_| s.is_alias()).map(|to| (s.hostname.clone(), to.clone())))
        .collect();
    let mut ends: HashMap<Hostname, Vec<Alias>> = HashMap::new();
    for (alias, first) in &named {
        let mut target = first;
        let mut seen: HashSet<&Hostname> = HashSet::from([alias]);
        while let Some(next) = named.get(target) {
            if !seen.insert(target) {
                break;
            }
            target = next;
        }
        if named.contains_key(target) {
            tracing::debug!(alias = %alias, "an ExternalName chain loops: the alias names nothing");
            continue;
        }
        let namespace = services[alias].namespace.clone();
        ends.entry(target.clone()).or_default().push(Alias { hostname: alias.clone(), namespace });
    }
    for (concrete, mut aliases) in ends {
        if let Some(service) = services.get_mut(&concrete) {
            aliases.sort_by(|a, b| (&a.namespace, &a.hostname).cmp(&(&b.namespace, &b.hostname)));
            service.aliases = aliases;
        }
    }
}

/// A Kubernetes Service as a mesh service, exported to `default_export`
/// unless its `networking.istio.io/exportTo` annotation says.
pub fn from_kubernetes(svc: &k8s::Service, default_export: &[String]) -> Service {
    let namespace = svc.metadata.namespace();
    let mut ports: Vec<ServicePort> = svc
        .spec
        .ports
        .iter()
        .filter(|p| p.protocol.as_deref().is_none_or(|p| p.eq_ignore_ascii_case("TCP")))
        .map(|p| ServicePort {
            name: p.name.clone().unwrap_or_default().into(),
            port: p.port,
            protocol: Protocol::of_kubernetes_port(p.port, p.name.as_deref(), p.app_protocol.as_deref()),
            target_port: match &p.target_port {
                None => Some(p.port),
                Some(k8s::IntOrString::Int(n)) => Some(*n),
                Some(k8s::IntOrString::String(_)) => None,
            },
            target_port_name: match &p.target_port {
                Some(k8s::IntOrString::String(name)) => Some(name.as_str().into()),
                _ => None,
            },
        })
        .collect();
    ports.sort_by_key(|p| p.port);
    let headless = matches!(svc.spec.cluster_ip.as_deref(), Some("None"));
    let external_name = svc
        .spec
        .external_name
        .as_deref()
        .filter(|name| !name.is_empty() && svc.spec.service_type.as_deref() == Some("ExternalName"))
        .map(|name| Hostname::from(name.trim_end_matches('.').to_ascii_lowercase().as_str()));
    // As Istio: an ExternalName Service is an alias; a headless one
    // (whether or not it selects Pods) is passthrough.
    let resolution = match &external_name {
        Some(_) => Resolution::Alias,
        None if headless => Resolution::Passthrough,
        None => Resolution::Static,
    };
    let addresses = match svc.spec.cluster_ip.as_deref() {
        Some(ip) if !ip.is_empty() && ip != "None" => vec![Arc::from(ip)],
        _ => Vec::new(),
    };
    let export = svc
        .metadata
        .annotations
        .get(EXPORT_TO_ANNOTATION)
        .map(|v| v.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect::<Vec<_>>())
        .unwrap_or_default();
    Service {
        hostname: host::service_fqdn(&svc.metadata.name, namespace),
        namespace: namespace.into(),
        source: crate::config::ConfigKey::new(ConfigKind::Service, namespace, &svc.metadata.name),
        ports,
        addresses,
        resolution,
        location: Location::MeshInternal,
        export_to: ExportTo::or_default(&export, default_export, namespace),
        selector: svc.spec.selector.clone(),
        external_name,
        aliases: Vec::new(),
    }
}

/// A ServiceEntry as one mesh service per host, exported to
/// `default_export` unless it names its own `exportTo`.
pub fn from_service_entry(se: &istio::ServiceEntry, default_export: &[String]) -> Vec<Service> {
    let namespace = se.metadata.namespace();
    let spec = &se.spec;
    let mut ports: Vec<ServicePort> = spec
        .ports
        .iter()
        // Istio serves no UDP.
        .filter(|p| !p.protocol.as_deref().is_some_and(|p| p.eq_ignore_ascii_case("UDP")))
        .map(|p| ServicePort {
            name: p.name.as_str().into(),
            port: p.number,
            protocol: p.protocol.as_deref().map_or(Protocol::Unknown, Protocol::from_name),
            target_port: p.target_port,
            target_port_name: None,
        })
        .collect();
    ports.sort_by_key(|p| p.port);
    let resolution = match spec.resolution.as_deref() {
        Some("STATIC") => Resolution::Static,
        Some("DNS") => Resolution::Dns,
        Some("DNS_ROUND_ROBIN") => Resolution::DnsRoundRobin,
        _ => Resolution::Passthrough,
    };
    let location = match spec.location.as_deref() {
        Some("MESH_EXTERNAL") => Location::MeshExternal,
        _ => Location::MeshInternal,
    };
    let selector: BTreeMap<String, String> =
        spec.workload_selector.as_ref().map(|w| w.labels.clone()).unwrap_or_default();
    let key = crate::config::ConfigKey::new(ConfigKind::ServiceEntry, namespace, &se.metadata.name);
    spec.hosts
        .iter()
        .map(|h| Service {
            hostname: h.as_str().into(),
            namespace: namespace.into(),
            source: key.clone(),
            ports: ports.clone(),
            addresses: spec.addresses.iter().map(|a| Arc::from(a.as_str())).collect(),
            resolution,
            location,
            export_to: ExportTo::or_default(&spec.export_to, default_export, namespace),
            selector: selector.clone(),
            external_name: None,
            aliases: Vec::new(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::ServiceIndex;
    use crate::config::{ConfigObject, SourceRef};
    use crate::model::ConfigStore;
    use crate::model::store::Write;

    fn service(ns: &str, name: &str, selector: &str) -> ConfigObject {
        let text = format!(
            "metadata: {{name: {name}, namespace: {ns}}}\nspec: {{selector: {selector}, ports: [{{port: 80}}]}}"
        );
        ConfigObject::Service(serde_yaml_ng::from_str(&text).expect("fixture parses"))
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn selecting_finds_exactly_the_services_whose_whole_selector_matches_in_the_namespace() {
        let store = ConfigStore::new();
        let objects = [
            service("shop", "cart", "{app: cart}"),
            service("shop", "cart-v2", "{app: cart, version: v2}"),
            service("shop", "by-tier", "{tier: web}"),
            service("shop", "everything", "{}"),
            service("other", "cart", "{app: cart}"),
        ];
        store.apply(
            objects.into_iter().enumerate().map(|(doc, o)| Write::put(o, SourceRef { file: "t.yaml".into(), doc })),
        );
        let index = ServiceIndex::build(&store.snapshot(), &Default::default());
        let hosts = |ns: &str, pairs: &[(&str, &str)]| -> Vec<String> {
            index.selecting(ns, &labels(pairs)).iter().map(|s| s.hostname.to_string()).collect()
        };

        assert_eq!(
            hosts("shop", &[("app", "cart"), ("tier", "web"), ("version", "v2")]),
            ["by-tier.shop.svc.cluster.local", "cart-v2.shop.svc.cluster.local", "cart.shop.svc.cluster.local"],
            "every matching service once, in host order; none from another namespace, none without a selector"
        );
        assert_eq!(hosts("shop", &[("app", "cart"), ("version", "v1")]), ["cart.shop.svc.cluster.local"]);
        assert_eq!(hosts("shop", &[("version", "v2")]), Vec::<String>::new(), "a partial match selects nothing");
        assert_eq!(hosts("other", &[("app", "cart")]), ["cart.other.svc.cluster.local"]);
        assert_eq!(hosts("none", &[("app", "cart")]), Vec::<String>::new());
    }
}
