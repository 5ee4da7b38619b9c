//! The providers Telemetry objects name, checked against the mesh config
//! and the registry: a name the mesh config does not define, a provider of
//! the wrong kind for the entry (a logger named for tracing), or one whose
//! collector is not a service of the mesh gives nothing, as in istiod, and
//! is reported on the object with its field path.

use super::{Registry, problem};
use crate::config::istio::Telemetry;
use crate::config::mesh::MeshConfig;
use crate::config::mesh::providers::{self, ProviderUse};
use crate::config::{ConfigKind, ConfigObject, Problem, Severity};
use crate::model::StoreSnapshot;
use crate::model::host::Hostname;

/// The provider problems of every Telemetry of `snapshot` in a mesh
/// configured as `mesh`.
pub fn check_telemetry(snapshot: &StoreSnapshot, mesh: &MeshConfig) -> Vec<Problem> {
    let registry = Registry::new(snapshot);
    let mut problems = Vec::new();
    for stored in snapshot.kind(ConfigKind::Telemetry).values() {
        let ConfigObject::Telemetry(telemetry) = &*stored.object else { continue };
        for (path, name, wanted) in named_providers(telemetry) {
            if let Some(message) = provider_problem(mesh, &registry, &name, wanted) {
                problems.push(problem(stored, Severity::Warning, path, message));
            }
        }
    }
    problems
}

/// Every provider a Telemetry names: its field path, the name, and what the entry wants of it.
fn named_providers(telemetry: &Telemetry) -> Vec<(String, String, ProviderUse)> {
    let spec = &telemetry.spec;
    let mut out = Vec::new();
    for (i, t) in spec.tracing.iter().enumerate() {
        for (j, p) in t.providers.iter().enumerate().take(1) {
            out.push((format!("spec.tracing[{i}].providers[{j}].name"), p.name.clone(), ProviderUse::Tracing));
        }
    }
    for (i, l) in spec.access_logging.iter().enumerate() {
        for (j, p) in l.providers.iter().enumerate() {
            out.push((format!("spec.accessLogging[{i}].providers[{j}].name"), p.name.clone(), ProviderUse::AccessLog));
        }
    }
    for (i, m) in spec.metrics.iter().enumerate() {
        for (j, p) in m.providers.iter().enumerate() {
            out.push((format!("spec.metrics[{i}].providers[{j}].name"), p.name.clone(), ProviderUse::Metrics));
        }
    }
    out
}

/// Why the provider `name` gives nothing where it is wanted as `wanted`, if it does not.
fn provider_problem(mesh: &MeshConfig, registry: &Registry, name: &str, wanted: ProviderUse) -> Option<String> {
    let what = match wanted {
        ProviderUse::Tracing => "no spans are reported by this entry",
        ProviderUse::AccessLog => "nothing is logged by it",
        _ => "it gives nothing",
    };
    if let Some(why) = providers::unusable(&mesh.extension_providers, name, wanted) {
        return Some(format!("{why}: {what}"));
    }
    let (service, _) = providers::find(&mesh.extension_providers, name)?.collector()?;
    let host = service.split_once('/').map_or(service, |(_, host)| host);
    if !registry.hosts.contains(&Hostname::from(host)) {
        return Some(format!("the collector {service:?} of provider {name:?} is not a service of the mesh: {what}"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::mesh::MeshSettings;
    use crate::model::ConfigStore;

    #[test]
    fn a_provider_the_mesh_lacks_of_the_wrong_kind_or_without_its_collector_is_reported_where_named() {
        let store = ConfigStore::new();
        store.apply(crate::testing::bookinfo::puts(
            "apiVersion: telemetry.istio.io/v1\nkind: Telemetry\nmetadata: {name: t, namespace: shop}\nspec:\n  \
             tracing: [{providers: [{name: envoy}]}]\n  accessLogging: [{providers: [{name: nosuch}, {name: ENVOY}, {name: als}]}]\n",
        ));
        let mesh = MeshSettings::parse(
            "mesh",
            "extensionProviders:\n- name: als\n  envoyHttpAls: {service: gone.shop.svc.cluster.local, port: 9}\n",
        )
        .unwrap()
        .mesh_config();
        let found: Vec<(String, String)> =
            check_telemetry(&store.snapshot(), &mesh).into_iter().map(|p| (p.path, p.message)).collect();
        assert_eq!(found.len(), 3, "{found:#?}");
        assert!(found[0].0 == "spec.tracing[0].providers[0].name" && found[0].1.contains("is not a tracing provider"));
        assert!(
            found[1].0 == "spec.accessLogging[0].providers[0].name"
                && found[1].1.contains("no extension provider \"nosuch\"")
        );
        assert!(
            found[2].0 == "spec.accessLogging[0].providers[2].name"
                && found[2].1.contains("is not a service of the mesh")
        );
    }
}
