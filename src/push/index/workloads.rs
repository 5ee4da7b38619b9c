//! `WorkloadIndex`: Pods and WorkloadEntries as one kind of thing — an address
//! with labels — indexed by namespace and label so that selecting the
//! workloads of a service does not scan every workload of the mesh, and
//! Pods by Node, so that a Node's new labels re-localise exactly its Pods.
//!
//! Locality, as Istio gives it: a workload's own `topology.istio.io/locality`
//! (or `istio-locality`) label first; then a WorkloadEntry's `locality`
//! field, or a Pod's Node's region, zone and subzone labels. A Pod whose
//! Node is not known has none.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::{ConfigKey, ConfigKind, ConfigObject, k8s};
use crate::model::endpoint::NETWORK_LABEL;
use crate::model::{Labels, StoreSnapshot};

/// One workload instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    /// The Pod or WorkloadEntry.
    pub key: ConfigKey,
    /// Namespace.
    pub namespace: Arc<str>,
    /// Address (Pod IP, or the WorkloadEntry address).
    pub address: Arc<str>,
    /// Labels (shared with this workload's endpoints).
    pub labels: Labels,
    /// Named ports (container ports for Pods, `ports` for WorkloadEntries).
    pub named_ports: BTreeMap<String, u32>,
    /// Locality `region/zone/subzone` (empty when unknown).
    pub locality: Arc<str>,
    /// The Node a Pod runs on.
    pub node: Option<Arc<str>>,
    /// Weight (≥ 1).
    pub weight: u32,
    /// Service account.
    pub service_account: Option<Arc<str>>,
    /// Whether this is a WorkloadEntry (whose `ports` map is by *service* port name).
    pub is_workload_entry: bool,
    /// The network it names itself: a Pod's `topology.istio.io/network`
    /// label, a WorkloadEntry's `network`. A Pod without one is on its
    /// cluster's network (`NetworkIndex::network_of`); a WorkloadEntry
    /// without one is on the default network, as istiod places it.
    pub network: Option<Arc<str>>,
}

impl Workload {
    /// Whether every selector label matches.
    pub fn matches(&self, selector: &BTreeMap<String, String>) -> bool {
        selector.iter().all(|(k, v)| self.labels.get(k) == Some(v))
    }

    /// Builds a workload from a Pod or WorkloadEntry, a Pod's locality from
    /// its Node in `snapshot`; `None` for other kinds, for Pods without an
    /// IP and for Pods that finished.
    pub fn from_object(object: &ConfigObject, snapshot: &StoreSnapshot) -> Option<Workload> {
        match object {
            ConfigObject::Pod(pod) => from_pod(pod, snapshot),
            ConfigObject::WorkloadEntry(we) => {
                let ns = we.metadata.namespace();
                let locality = we.spec.locality.clone().filter(|l| !l.is_empty());
                let locality = locality.or_else(|| k8s::locality_label(&we.spec.labels)).unwrap_or_default();
                Some(Workload {
                    key: ConfigKey::new(ConfigKind::WorkloadEntry, ns, &we.metadata.name),
                    namespace: ns.into(),
                    address: we.spec.address.as_str().into(),
                    labels: Arc::new(merged_labels(&we.metadata.labels, &we.spec.labels)),
                    named_ports: we.spec.ports.clone(),
                    locality: locality.into(),
                    node: None,
                    weight: we.spec.weight.unwrap_or(1).max(1),
                    service_account: we.spec.service_account.as_deref().map(Arc::from),
                    is_workload_entry: true,
                    network: we.spec.network.as_deref().filter(|n| !n.is_empty()).map(Arc::from),
                })
            }
            _ => None,
        }
    }
}

/// Istio selects WorkloadEntries by `spec.labels`; metadata labels are used
/// too when the spec has none of its own for that key.
fn merged_labels(meta: &BTreeMap<String, String>, spec: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut out = meta.clone();
    out.extend(spec.iter().map(|(k, v)| (k.clone(), v.clone())));
    out
}

fn from_pod(pod: &k8s::Pod, snapshot: &StoreSnapshot) -> Option<Workload> {
    let ip = pod.status.pod_ip.as_deref().filter(|ip| !ip.is_empty())?;
    if matches!(pod.status.phase.as_deref(), Some("Succeeded") | Some("Failed")) {
        return None;
    }
    let ns = pod.metadata.namespace();
    let named_ports = pod
        .spec
        .containers
        .iter()
        .flat_map(|c| c.ports.iter())
        .filter_map(|p| p.name.clone().map(|n| (n, p.container_port)))
        .collect();
    let node = pod.spec.node_name.as_deref().filter(|n| !n.is_empty());
    let locality = k8s::locality_label(&pod.metadata.labels).unwrap_or_else(|| {
        // A Node of the Pod's own cluster.
        let node = node
            .and_then(|name| snapshot.get(&ConfigKey::in_cluster(ConfigKind::Node, "", name, &pod.metadata.cluster)));
        match node.map(|stored| &*stored.object) {
            Some(ConfigObject::Node(node)) => node.locality(),
            _ => String::new(),
        }
    });
    Some(Workload {
        key: ConfigKey::in_cluster(ConfigKind::Pod, ns, &pod.metadata.name, &pod.metadata.cluster),
        namespace: ns.into(),
        address: ip.into(),
        labels: Arc::new(pod.metadata.labels.clone()),
        named_ports,
        locality: locality.into(),
        node: node.map(Arc::from),
        weight: 1,
        // The API server gives a Pod that names none the namespace's `default`.
        service_account: Some(Arc::from(pod.spec.service_account_name.as_deref().unwrap_or("default"))),
        is_workload_entry: false,
        network: pod.metadata.labels.get(NETWORK_LABEL).filter(|n| !n.is_empty()).map(|n| Arc::from(n.as_str())),
    })
}

/// Labels are indexed as `(namespace, "key=value")`.
type LabelKey = (Arc<str>, String);

/// Workloads by key and by `(namespace, label=value)`, in persistent maps:
/// cloning the index is O(1) and one workload update is O(log n), so an
/// endpoint change does not copy the other hundred thousand workloads.
#[derive(Debug, Default, Clone)]
pub struct WorkloadIndex {
    by_label: imbl::HashMap<LabelKey, imbl::OrdMap<ConfigKey, Arc<Workload>>>,
    by_key: imbl::OrdMap<ConfigKey, Arc<Workload>>,
    /// Pods by the name of their Node.
    by_node: imbl::HashMap<Arc<str>, imbl::OrdSet<ConfigKey>>,
}

impl WorkloadIndex {
    /// Builds the index from every Pod and WorkloadEntry.
    pub fn build(snapshot: &StoreSnapshot) -> WorkloadIndex {
        let mut index = WorkloadIndex::default();
        for kind in [ConfigKind::Pod, ConfigKind::WorkloadEntry] {
            for stored in snapshot.kind(kind).values() {
                if let Some(w) = Workload::from_object(&stored.object, snapshot) {
                    index.insert(Arc::new(w));
                }
            }
        }
        index
    }

    /// A copy of `self` with the workloads of `keys` re-read from `snapshot`:
    /// the Pods and WorkloadEntries named, and the Pods on the Nodes named.
    pub fn update<'a>(&self, snapshot: &StoreSnapshot, keys: impl IntoIterator<Item = &'a ConfigKey>) -> WorkloadIndex {
        let mut next = self.clone();
        let mut reread: Vec<ConfigKey> = Vec::new();
        for key in keys {
            match key.kind {
                ConfigKind::Pod | ConfigKind::WorkloadEntry => reread.push(key.clone()),
                ConfigKind::Node => reread.extend(self.on_node(&key.name).cloned()),
                _ => {}
            }
        }
        for key in &reread {
            next.remove(key);
            if let Some(w) = snapshot.get(key).and_then(|s| Workload::from_object(&s.object, snapshot)) {
                next.insert(Arc::new(w));
            }
        }
        next
    }

    /// The keys of the Pods on the Node `name`.
    pub fn on_node<'a>(&'a self, name: &str) -> impl Iterator<Item = &'a ConfigKey> + 'a {
        self.by_node.get(name).into_iter().flatten()
    }

    fn insert(&mut self, w: Arc<Workload>) {
        if let Some(node) = &w.node {
            self.by_node.entry(node.clone()).or_default().insert(w.key.clone());
        }
        for (k, v) in w.labels.iter() {
            self.by_label
                .entry((w.namespace.clone(), format!("{k}={v}")))
                .or_default()
                .insert(w.key.clone(), w.clone());
        }
        self.by_key.insert(w.key.clone(), w);
    }

    fn remove(&mut self, key: &ConfigKey) {
        let Some(old) = self.by_key.remove(key) else { return };
        if let Some(node) = &old.node
            && let Some(pods) = self.by_node.get_mut(node)
        {
            pods.remove(key);
            if pods.is_empty() {
                self.by_node.remove(node);
            }
        }
        for (k, v) in old.labels.iter() {
            let label = (old.namespace.clone(), format!("{k}={v}"));
            if let Some(set) = self.by_label.get_mut(&label) {
                set.remove(key);
                if set.is_empty() {
                    self.by_label.remove(&label);
                }
            }
        }
    }

    /// Workloads of `namespace` matching every label of `selector`, in key order.
    /// An empty selector selects nothing (as for a Kubernetes Service).
    pub fn select<'a>(
        &'a self,
        namespace: &str,
        selector: &'a BTreeMap<String, String>,
    ) -> impl Iterator<Item = &'a Arc<Workload>> + 'a {
        let candidates =
            selector.iter().next().and_then(|(k, v)| self.by_label.get(&(Arc::from(namespace), format!("{k}={v}"))));
        candidates.into_iter().flat_map(|set| set.values()).filter(move |w| w.matches(selector))
    }

    /// A workload by its Pod or WorkloadEntry key.
    pub fn get(&self, key: &ConfigKey) -> Option<&Arc<Workload>> {
        self.by_key.get(key)
    }

    /// Number of workloads.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}
