//! `PeerAuthenticationIndex`: which mutual TLS mode each workload port
//! takes, resolved as Istio resolves it (`ComposePeerAuthentication`).
//!
//! Three levels, each overriding the one before unless its mode is
//! `UNSET`: the selector-less policy of the root namespace (mesh-wide),
//! the selector-less policy of the workload's namespace, the policy of the
//! workload's namespace whose selector matches the workload; then the
//! workload policy's `portLevelMtls` per port. With none, PERMISSIVE.
//! A selector policy in the root namespace applies to no workload, as in
//! Istio. Where several policies compete at one level, Istio takes the
//! oldest; a directory has no creation times, so meshpush takes the first
//! by name.
//!
//! Clients read [`PeerAuthenticationIndex::service_mode`] for auto mTLS:
//! like Istio's `BestEffortInferServiceMTLSMode`, it looks at the
//! namespace and mesh levels only (a service does not know which of its
//! workloads a selector policy covers).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::config::istio::{MtlsMode, PeerAuthentication};
use crate::config::mesh::MeshConfig;
use crate::config::{ConfigKind, ConfigObject};
use crate::model::StoreSnapshot;

/// The PeerAuthentications of a snapshot, by level.
#[derive(Debug, Default)]
pub struct PeerAuthenticationIndex {
    /// The mode the mesh-wide policy sets (`None`: no policy, or `UNSET`).
    mesh: Option<MtlsMode>,
    /// The mode each namespace's selector-less policy sets.
    namespaces: HashMap<Arc<str>, Option<MtlsMode>>,
    /// Selector policies by namespace, by name.
    workloads: HashMap<Arc<str>, Vec<Arc<PeerAuthentication>>>,
}

/// The modes of one workload: one for every port, and those its policy sets per port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadMtls {
    /// The mode of a port `ports` does not name.
    pub mode: MtlsMode,
    /// Per-port modes.
    pub ports: BTreeMap<u32, MtlsMode>,
}

impl WorkloadMtls {
    /// The mode of `port`.
    pub fn port(&self, port: u32) -> MtlsMode {
        self.ports.get(&port).copied().unwrap_or(self.mode)
    }
}

impl PeerAuthenticationIndex {
    /// Indexes the PeerAuthentications of `store`, the mesh's root namespace being `mesh`'s.
    pub fn build(store: &StoreSnapshot, mesh: &MeshConfig) -> PeerAuthenticationIndex {
        let mut index = PeerAuthenticationIndex::default();
        let mut mesh_policy_seen = false;
        // The store's map is ordered by key: by namespace, then name.
        for stored in store.kind(ConfigKind::PeerAuthentication).values() {
            let ConfigObject::PeerAuthentication(policy) = &*stored.object else { continue };
            let namespace: Arc<str> = policy.metadata.namespace().into();
            let mode = MtlsMode::of(policy.spec.mtls.as_ref());
            if policy.spec.has_selector() {
                if namespace != mesh.root_namespace {
                    index.workloads.entry(namespace).or_default().push(Arc::new(policy.clone()));
                }
            } else if namespace == mesh.root_namespace {
                if !mesh_policy_seen {
                    mesh_policy_seen = true;
                    index.mesh = mode;
                }
            } else {
                index.namespaces.entry(namespace).or_insert(mode);
            }
        }
        index
    }

    /// The mode of the mesh-wide policy (PERMISSIVE without one).
    fn mesh_mode(&self) -> MtlsMode {
        self.mesh.unwrap_or_default()
    }

    /// The namespace-level mode of `namespace`: its selector-less policy's,
    /// else the mesh's.
    pub fn service_mode(&self, namespace: &str) -> MtlsMode {
        self.namespaces.get(namespace).copied().flatten().unwrap_or_else(|| self.mesh_mode())
    }

    /// The modes of a workload of `namespace` with `labels`.
    pub fn workload(&self, namespace: &str, labels: &BTreeMap<String, String>) -> WorkloadMtls {
        let mut mode = self.service_mode(namespace);
        let policy = self.workloads.get(namespace).and_then(|policies| {
            policies.iter().find(|p| {
                let selector = p.spec.selector.as_ref().map(|s| &s.match_labels);
                selector.is_some_and(|s| s.iter().all(|(k, v)| labels.get(k) == Some(v)))
            })
        });
        let Some(policy) = policy else { return WorkloadMtls { mode, ports: BTreeMap::new() } };
        if let Some(own) = MtlsMode::of(policy.spec.mtls.as_ref()) {
            mode = own;
        }
        let ports = policy
            .spec
            .port_level_mtls
            .iter()
            .map(|(port, mtls)| (*port, MtlsMode::of(Some(mtls)).unwrap_or(mode)))
            .collect();
        WorkloadMtls { mode, ports }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ConfigStore;

    fn index(yaml: &str) -> PeerAuthenticationIndex {
        let store = ConfigStore::new();
        let parsed = crate::config::parse::parse_documents("policies.yaml", yaml);
        assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
        store.apply(parsed.objects.into_iter().map(|(o, s)| crate::model::store::Write::put(o, s)).collect::<Vec<_>>());
        PeerAuthenticationIndex::build(&store.snapshot(), &MeshConfig::default())
    }

    fn policy(namespace: &str, name: &str, rest: &str) -> String {
        format!(
            "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {{name: {name}, namespace: {namespace}}}\nspec:\n{rest}\n---\n"
        )
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn without_policies_every_port_is_permissive() {
        let index = index("");
        assert_eq!(index.workload("default", &labels(&[("app", "a")])).port(8080), MtlsMode::Permissive);
        assert_eq!(index.service_mode("default"), MtlsMode::Permissive);
    }

    #[test]
    fn each_level_overrides_the_one_before_unless_unset() {
        let yaml = [
            policy("istio-system", "mesh", "  mtls: {mode: STRICT}"),
            policy("relaxed", "ns", "  mtls: {mode: PERMISSIVE}"),
            policy("unset", "ns", "  mtls: {mode: UNSET}"),
            policy(
                "relaxed",
                "legacy",
                "  selector: {matchLabels: {app: legacy}}\n  mtls: {mode: DISABLE}\n  portLevelMtls:\n    8443: {mode: STRICT}\n    9000: {mode: UNSET}",
            ),
            // Selector policies of the root namespace apply to no workload.
            policy("istio-system", "ignored", "  selector: {matchLabels: {app: legacy}}\n  mtls: {mode: DISABLE}"),
        ]
        .concat();
        let index = index(&yaml);
        let legacy = labels(&[("app", "legacy")]);
        assert_eq!(index.workload("default", &legacy).port(80), MtlsMode::Strict, "the mesh's");
        assert_eq!(index.workload("unset", &legacy).port(80), MtlsMode::Strict, "UNSET inherits the mesh's");
        assert_eq!(index.workload("relaxed", &labels(&[("app", "web")])).port(80), MtlsMode::Permissive);
        let modes = index.workload("relaxed", &legacy);
        assert_eq!(modes.port(80), MtlsMode::Disable, "the workload's own");
        assert_eq!(modes.port(8443), MtlsMode::Strict, "per port");
        assert_eq!(modes.port(9000), MtlsMode::Disable, "an UNSET port takes the workload's mode");
        assert_eq!(index.service_mode("relaxed"), MtlsMode::Permissive);
        assert_eq!(index.service_mode("default"), MtlsMode::Strict);
        assert_eq!(index.workload("istio-system", &legacy).port(80), MtlsMode::Strict);
    }

    #[test]
    fn the_first_policy_by_name_wins_at_one_level() {
        let yaml =
            [policy("default", "b", "  mtls: {mode: DISABLE}"), policy("default", "a", "  mtls: {mode: STRICT}")]
                .concat();
        assert_eq!(index(&yaml).service_mode("default"), MtlsMode::Strict);
    }
}
