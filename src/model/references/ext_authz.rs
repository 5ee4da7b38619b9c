//! The authorizers CUSTOM AuthorizationPolicies name, checked against the
//! mesh config and the registry: a policy whose provider istiod cannot use
//! (no such authorizer, one its builder refuses, a service that is not one
//! of the mesh) denies the requests its rules match, as in istiod, and is
//! reported on `spec.provider.name` with why (`model::authorizers`, the
//! resolution generation reads too). So is a pair of CUSTOM policies with
//! different providers that can select one workload: istiod allows one
//! provider per workload (unless `PILOT_ENABLE_MULTIPLE_CUSTOM_AUTHZ_PROVIDERS`,
//! off by default), and on such a workload both policies' rules deny.

use std::sync::Arc;

use super::problem;
use crate::config::istio::AuthorizationPolicy;
use crate::config::mesh::MeshConfig;
use crate::config::{ConfigKind, ConfigObject, Problem, Severity};
use crate::model::StoreSnapshot;
use crate::model::authorizers::Authorizers;

/// What follows a provider that cannot be used.
const DENIED: &str = "the requests the policy's rules match are denied, as istiod denies them";

/// The authorizer problems of every CUSTOM AuthorizationPolicy of `snapshot`
/// in a mesh configured as `mesh`.
pub fn check_ext_authz(snapshot: &StoreSnapshot, mesh: &MeshConfig) -> Vec<Problem> {
    let custom: Vec<(&crate::model::StoredObject, &AuthorizationPolicy, &str)> = snapshot
        .kind(ConfigKind::AuthorizationPolicy)
        .values()
        .filter_map(|stored| {
            let ConfigObject::AuthorizationPolicy(policy) = &*stored.object else { return None };
            let spec = &policy.spec;
            // Policies with targets apply to no workload (reported by validation).
            let applies = spec.target_ref.is_none() && spec.target_refs.is_empty();
            let provider = spec.provider.as_ref().filter(|_| spec.action.as_deref() == Some("CUSTOM") && applies)?;
            Some((&**stored, &**policy, provider.name.as_str()))
        })
        .collect();
    if custom.is_empty() {
        return Vec::new();
    }
    let authorizers = Authorizers::resolve(snapshot, mesh);
    let mut problems = Vec::new();
    for (i, (stored, policy, provider)) in custom.iter().enumerate() {
        if let Err(why) = authorizers.get(provider) {
            problems.push(problem(stored, Severity::Warning, "spec.provider.name".into(), format!("{why}: {DENIED}")));
        }
        for (j, (_, other, other_provider)) in custom.iter().enumerate() {
            if i != j && provider != other_provider && may_select_together(policy, other, &mesh.root_namespace) {
                let message = format!(
                    "with CUSTOM policy {}/{}, which names provider {other_provider:?}, it can select the same \
                     workloads: istiod allows one authorizer per workload (PILOT_ENABLE_MULTIPLE_CUSTOM_AUTHZ_PROVIDERS \
                     is off by default), so on those workloads the requests either policy's rules match are denied",
                    other.metadata.namespace(),
                    other.metadata.name
                );
                problems.push(problem(stored, Severity::Warning, "spec.provider.name".into(), message));
            }
        }
    }
    problems
}

/// Whether some workload can be selected by both policies: they are of one
/// namespace or one is of the root namespace (whose policies apply in
/// every namespace), and no label their selectors both name has two values.
fn may_select_together(a: &AuthorizationPolicy, b: &AuthorizationPolicy, root: &Arc<str>) -> bool {
    let (ns_a, ns_b) = (a.metadata.namespace(), b.metadata.namespace());
    let namespaces = ns_a == ns_b || ns_a == &**root || ns_b == &**root;
    let labels = |p: &AuthorizationPolicy| p.spec.selector.as_ref().map(|s| s.match_labels.clone()).unwrap_or_default();
    let (labels_a, labels_b) = (labels(a), labels(b));
    namespaces && labels_a.iter().all(|(k, v)| labels_b.get(k).is_none_or(|w| w == v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::mesh::MeshSettings;
    use crate::model::ConfigStore;

    fn policy(namespace: &str, name: &str, provider: &str, selector: &str) -> String {
        format!(
            "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {{name: {name}, namespace: {namespace}}}\n\
             spec:\n  {selector}action: CUSTOM\n  provider: {{name: {provider}}}\n  rules: [{{}}]\n---\n"
        )
    }

    #[test]
    fn an_unusable_provider_and_two_providers_on_one_workload_are_reported_on_the_policy() {
        let store = ConfigStore::new();
        let yaml = [
            "apiVersion: v1\nkind: Service\nmetadata: {name: authz, namespace: auth}\nspec: {ports: [{name: http, port: 80}]}\n---\n"
                .to_string(),
            policy("shop", "good", "ext", "selector: {matchLabels: {app: web}}\n  "),
            policy("shop", "unknown", "opa", "selector: {matchLabels: {app: db}}\n  "),
            policy("istio-system", "mesh-wide", "other", "selector: {matchLabels: {app: web, tier: front}}\n  "),
            policy("shop", "elsewhere", "other", "selector: {matchLabels: {app: api}}\n  "),
        ]
        .concat();
        store.apply(crate::testing::bookinfo::puts(&yaml));
        let mesh = MeshSettings::parse(
            "mesh",
            "extensionProviders:\n- {name: ext, envoyExtAuthzHttp: {service: authz.auth.svc.cluster.local, port: 80}}\n\
             - {name: other, envoyExtAuthzGrpc: {service: gone.example.com, port: 80}}\n",
        )
        .unwrap()
        .mesh_config();
        let found: Vec<(String, String)> = check_ext_authz(&store.snapshot(), &mesh)
            .into_iter()
            .map(|p| (p.object.map(|k| k.name.to_string()).unwrap_or_default(), p.message))
            .collect();
        let about = |name: &str| found.iter().filter(|(n, _)| n == name).map(|(_, m)| m.as_str()).collect::<Vec<_>>();
        assert_eq!(about("good").len(), 1, "{found:#?}");
        assert!(about("good")[0].contains("istio-system/mesh-wide") && about("good")[0].contains("one authorizer"));
        assert!(about("unknown")[0].contains("no envoyExtAuthzHttp or envoyExtAuthzGrpc provider \"opa\""));
        assert!(about("unknown")[0].ends_with(DENIED));
        let elsewhere = about("elsewhere");
        assert_eq!(elsewhere.len(), 1, "app: api meets neither web policy: {elsewhere:#?}");
        assert!(elsewhere[0].contains("\"gone.example.com\" is not a service of the mesh"));
        assert_eq!(about("mesh-wide").len(), 2, "its service, and the shop policy it meets");
    }
}
