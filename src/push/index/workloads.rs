//! `WorkloadIndex`: Pods and WorkloadEntries as one kind of thing — an address
//! with labels — indexed by namespace and label so that selecting the
//! workloads of a service does not scan every workload of the mesh.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::{ConfigKey, ConfigKind, ConfigObject, k8s};
use crate::model::StoreSnapshot;

/// One workload instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    /// The Pod or WorkloadEntry.
    pub key: ConfigKey,
    /// Namespace.
    pub namespace: Arc<str>,
    /// Address (Pod IP, or the WorkloadEntry address).
    pub address: Arc<str>,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Named ports (container ports for Pods, `ports` for WorkloadEntries).
    pub named_ports: BTreeMap<String, u32>,
    /// Locality.
    pub locality: Arc<str>,
    /// Weight (≥ 1).
    pub weight: u32,
    /// Service account.
    pub service_account: Option<Arc<str>>,
    /// Whether this is a WorkloadEntry (whose `ports` map is by *service* port name).
    pub is_workload_entry: bool,
}

impl Workload {
    /// Whether every selector label matches.
    pub fn matches(&self, selector: &BTreeMap<String, String>) -> bool {
        selector.iter().all(|(k, v)| self.labels.get(k) == Some(v))
    }

    /// Builds a workload from a Pod or WorkloadEntry; `None` for other kinds,
    /// for Pods without an IP and for Pods that finished.
    pub fn from_object(object: &ConfigObject) -> Option<Workload> {
        match object {
            ConfigObject::Pod(pod) => from_pod(pod),
            ConfigObject::WorkloadEntry(we) => {
                let ns = we.metadata.namespace();
                Some(Workload {
                    key: ConfigKey::new(ConfigKind::WorkloadEntry, ns, &we.metadata.name),
                    namespace: ns.into(),
                    address: we.spec.address.as_str().into(),
                    labels: merged_labels(&we.metadata.labels, &we.spec.labels),
                    named_ports: we.spec.ports.clone(),
                    locality: we.spec.locality.clone().unwrap_or_default().into(),
                    weight: we.spec.weight.unwrap_or(1).max(1),
                    service_account: we.spec.service_account.as_deref().map(Arc::from),
                    is_workload_entry: true,
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

fn from_pod(pod: &k8s::Pod) -> Option<Workload> {
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
    Some(Workload {
        key: ConfigKey::new(ConfigKind::Pod, ns, &pod.metadata.name),
        namespace: ns.into(),
        address: ip.into(),
        labels: pod.metadata.labels.clone(),
        named_ports,
        locality: Arc::from(""),
        weight: 1,
        service_account: pod.spec.service_account_name.as_deref().map(Arc::from),
        is_workload_entry: false,
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
}

impl WorkloadIndex {
    /// Builds the index from every Pod and WorkloadEntry.
    pub fn build(snapshot: &StoreSnapshot) -> WorkloadIndex {
        let mut index = WorkloadIndex::default();
        for kind in [ConfigKind::Pod, ConfigKind::WorkloadEntry] {
            for stored in snapshot.kind(kind).values() {
                if let Some(w) = Workload::from_object(&stored.object) {
                    index.insert(Arc::new(w));
                }
            }
        }
        index
    }

    /// A copy of `self` with the workloads of `keys` re-read from `snapshot`.
    pub fn update<'a>(&self, snapshot: &StoreSnapshot, keys: impl IntoIterator<Item = &'a ConfigKey>) -> WorkloadIndex {
        let mut next = self.clone();
        for key in keys {
            if !matches!(key.kind, ConfigKind::Pod | ConfigKind::WorkloadEntry) {
                continue;
            }
            next.remove(key);
            if let Some(w) = snapshot.get(key).and_then(|s| Workload::from_object(&s.object)) {
                next.insert(Arc::new(w));
            }
        }
        next
    }

    fn insert(&mut self, w: Arc<Workload>) {
        for (k, v) in &w.labels {
            self.by_label
                .entry((w.namespace.clone(), format!("{k}={v}")))
                .or_default()
                .insert(w.key.clone(), w.clone());
        }
        self.by_key.insert(w.key.clone(), w);
    }

    fn remove(&mut self, key: &ConfigKey) {
        let Some(old) = self.by_key.remove(key) else { return };
        for (k, v) in &old.labels {
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
