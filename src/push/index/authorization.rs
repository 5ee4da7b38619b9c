//! `AuthorizationIndex`: the AuthorizationPolicies that apply to each
//! workload, as Istio selects them (`ListAuthorizationPolicies`): those of
//! the root namespace and of the workload's namespace whose selector is
//! absent or matches the workload's labels. Policies that name targets
//! (`targetRef`, `targetRefs`) apply to no workload: a waypoint applies
//! them, to the Services and ServiceEntries they name
//! ([`AuthorizationIndex::for_waypoint`]), or to all its traffic when they
//! name its Gateway (or, from the root namespace, the GatewayClass
//! `istio-waypoint`). Those naming a Gateway API gateway are not applied;
//! validation says so.
//!
//! A CUSTOM policy carries the external authorizer it names, resolved
//! against the mesh config and the registry (`model::authorizers`), or why
//! it cannot be used: the index is built again when the mesh's services
//! change, as istiod resolves its authorizers on every push.
//!
//! What applies to a workload is part of its inbound key, policies and all
//! ([`AppliedPolicy`], authorizers included), so inbound configuration
//! stays a pure function of the key and an edited policy is a new key.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::Serialize;

use crate::config::istio::{AuthorizationPolicySpec, DRY_RUN_ANNOTATION, WorkloadLabels};
use crate::config::mesh::MeshConfig;
use crate::config::{ConfigKind, ConfigObject};
use crate::model::StoreSnapshot;
use crate::model::authorizers::{Authorizer, Authorizers};

/// One AuthorizationPolicy as a workload's inbound configuration reads it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct AppliedPolicy {
    /// Its namespace (the default namespace of its `serviceAccounts`).
    pub namespace: Arc<str>,
    /// Its name.
    pub name: Arc<str>,
    /// Whether it is a dry run (`istio.io/dry-run: "true"`): shadow rules only.
    pub dry_run: bool,
    /// Its spec.
    #[serde(skip)]
    pub spec: AuthorizationPolicySpec,
    /// For a CUSTOM policy: the authorizer its provider names, or why istiod
    /// cannot use it (its rules then deny).
    pub authorizer: Option<Result<Arc<Authorizer>, Arc<str>>>,
}

impl AppliedPolicy {
    /// Whether its action is CUSTOM (an external authorizer decides).
    pub fn is_custom(&self) -> bool {
        self.spec.action.as_deref() == Some("CUSTOM")
    }
}

/// What a policy's `targetRef(s)` names: (`GROUP/KIND`, the group `core`
/// when empty; namespace, the policy's; name).
type Target = (String, Arc<str>, String);

/// The AuthorizationPolicies of a snapshot, by namespace.
#[derive(Debug, Default)]
pub struct AuthorizationIndex {
    root_namespace: Arc<str>,
    /// Policies without targets, by namespace, in name order.
    by_namespace: HashMap<Arc<str>, Vec<Arc<AppliedPolicy>>>,
    /// Policies with targets: each with what it names.
    targeted: Vec<(Vec<Target>, Arc<AppliedPolicy>)>,
    /// Whether any of them is CUSTOM: its authorizer reads the registry.
    has_custom: bool,
}

impl AuthorizationIndex {
    /// Indexes the AuthorizationPolicies of `store`, resolving the
    /// authorizers of CUSTOM ones against it and `mesh`.
    pub fn build(store: &StoreSnapshot, mesh: &MeshConfig) -> AuthorizationIndex {
        let mut index = AuthorizationIndex { root_namespace: mesh.root_namespace.clone(), ..Default::default() };
        let trust_domains = super::trust_domain::TrustDomains::of(mesh);
        // Resolved only when a CUSTOM policy needs them: it reads every service.
        let mut authorizers: Option<Authorizers> = None;
        for stored in store.kind(ConfigKind::AuthorizationPolicy).values() {
            let ConfigObject::AuthorizationPolicy(policy) = &*stored.object else { continue };
            let spec = &policy.spec;
            let targets: Vec<_> = spec.target_ref.iter().chain(&spec.target_refs).collect();
            let namespace: Arc<str> = policy.metadata.namespace().into();
            let custom = spec.action.as_deref() == Some("CUSTOM");
            let authorizer = spec.provider.as_ref().filter(|_| custom).map(|provider| {
                authorizers.get_or_insert_with(|| Authorizers::resolve(store, mesh)).get(&provider.name)
            });
            index.has_custom |= custom;
            let applied = AppliedPolicy {
                namespace: namespace.clone(),
                name: policy.metadata.name.as_str().into(),
                dry_run: policy.metadata.annotations.get(DRY_RUN_ANNOTATION).is_some_and(|v| v == "true"),
                // Principals of the mesh's trust domains name each of them, as istiod writes them.
                spec: trust_domains.migrate(spec),
                authorizer,
            };
            if targets.is_empty() {
                index.by_namespace.entry(namespace).or_default().push(Arc::new(applied));
            } else {
                let named = targets
                    .iter()
                    .map(|t| {
                        let ns: Arc<str> = t.namespace.as_deref().map_or(namespace.clone(), Arc::from);
                        let group = t.group.as_deref().filter(|g| !g.is_empty()).unwrap_or("core");
                        (format!("{group}/{}", t.kind), ns, t.name.clone())
                    })
                    .collect();
                index.targeted.push((named, Arc::new(applied)));
            }
        }
        index
    }

    /// Whether a CUSTOM policy is indexed: its authorizer must be resolved
    /// again when the registry changes.
    pub fn has_custom(&self) -> bool {
        self.has_custom
    }

    /// Whether `other` indexes the same policies (authorizers included).
    pub fn same_policies(&self, other: &AuthorizationIndex) -> bool {
        self.by_namespace == other.by_namespace && self.targeted == other.targeted
    }

    /// The policies waypoint `gateway` (namespace, name) applies to traffic
    /// for `service` (its namespace, its name, and whether it is a
    /// ServiceEntry; `None`: to all its traffic only): those naming the
    /// Service (or ServiceEntry), those naming the Gateway, and the root
    /// namespace's naming the GatewayClass `istio-waypoint`. By namespace
    /// then name.
    pub fn for_waypoint(&self, gateway: (&str, &str), service: Option<(&str, &str, bool)>) -> Vec<Arc<AppliedPolicy>> {
        let names = |kind: &str, ns: &str, name: &str| -> bool {
            match kind {
                "gateway.networking.k8s.io/Gateway" => (ns, name) == gateway,
                "gateway.networking.k8s.io/GatewayClass" => {
                    ns == &*self.root_namespace && name == super::ambient::waypoint::WAYPOINT_CLASS
                }
                "core/Service" => service.is_some_and(|(sns, sname, entry)| !entry && (ns, name) == (sns, sname)),
                "networking.istio.io/ServiceEntry" => {
                    service.is_some_and(|(sns, sname, entry)| entry && (ns, name) == (sns, sname))
                }
                _ => false,
            }
        };
        let mut out: Vec<Arc<AppliedPolicy>> = self
            .targeted
            .iter()
            .filter(|(targets, _)| targets.iter().any(|(kind, ns, name)| names(kind, ns, name)))
            .map(|(_, p)| p.clone())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// The policies that apply to a workload of `namespace` with `labels`,
    /// by namespace then name.
    pub fn for_workload(&self, namespace: &str, labels: &BTreeMap<String, String>) -> Vec<Arc<AppliedPolicy>> {
        let mut out = select_for_workload(&self.by_namespace, &self.root_namespace, namespace, labels, |p| {
            p.spec.selector.as_ref()
        });
        out.sort();
        out.dedup();
        out
    }
}

/// The policies of `by_namespace` that apply to a workload of `namespace`
/// with `labels`, as Istio selects workload policies: the root namespace's
/// and the workload namespace's, each when its selector is absent or all
/// its labels match (root namespace's first, each namespace's in its order).
pub(super) fn select_for_workload<T>(
    by_namespace: &HashMap<Arc<str>, Vec<Arc<T>>>,
    root_namespace: &str,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    selector: impl Fn(&T) -> Option<&WorkloadLabels>,
) -> Vec<Arc<T>> {
    let selects =
        |p: &&Arc<T>| selector(p).is_none_or(|s| s.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v)));
    let mut out: Vec<Arc<T>> = Vec::new();
    for ns in [root_namespace, namespace] {
        out.extend(by_namespace.get(ns).into_iter().flatten().filter(selects).cloned());
        if ns == namespace {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ConfigStore;

    fn policy(namespace: &str, name: &str, rest: &str) -> String {
        format!(
            "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {{name: {name}, namespace: {namespace}}}\nspec:\n{rest}\n---\n"
        )
    }

    #[test]
    fn the_root_namespace_s_policies_and_the_workload_namespace_s_apply_when_they_select_it() {
        let yaml = [
            policy("istio-system", "mesh", "  action: DENY\n  rules: [{to: [{operation: {paths: [/admin]}}]}]"),
            policy("istio-system", "mesh-web", "  selector: {matchLabels: {app: web}}\n  rules: [{}]"),
            policy("shop", "ns", "  rules: [{}]"),
            policy("shop", "db", "  selector: {matchLabels: {app: db}}\n  rules: [{}]"),
            policy("other", "elsewhere", "  rules: [{}]"),
            policy("shop", "waypoint", "  targetRefs: [{kind: Service, name: web}]\n  rules: [{}]"),
        ]
        .concat();
        let store = ConfigStore::new();
        let parsed = crate::config::parse::parse_documents("authz.yaml", &yaml);
        store.apply(parsed.objects.into_iter().map(|(o, s)| crate::model::store::Write::put(o, s)).collect::<Vec<_>>());
        let index = AuthorizationIndex::build(&store.snapshot(), &MeshConfig::default());
        let names = |ns: &str, app: &str| -> Vec<String> {
            let labels = [("app".to_string(), app.to_string())].into();
            index.for_workload(ns, &labels).iter().map(|p| format!("{}/{}", p.namespace, p.name)).collect()
        };
        assert_eq!(names("shop", "web"), ["istio-system/mesh", "istio-system/mesh-web", "shop/ns"]);
        assert_eq!(names("shop", "db"), ["istio-system/mesh", "shop/db", "shop/ns"]);
        assert_eq!(names("istio-system", "db"), ["istio-system/mesh"]);
    }
}
