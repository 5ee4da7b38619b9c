//! The ProxyConfig a new pod of a workload is given: the mesh config's
//! `defaultConfig` with the ProxyConfig objects and the pod's
//! `proxy.istio.io/config` annotation laid over it, as istiod's injector
//! computes it (`pilot/pkg/model/proxy_config.go`).
//!
//! Layers, lowest first: Istio's `DefaultProxyConfig`; the mesh's
//! `defaultConfig`; the root namespace's ProxyConfig without a selector;
//! the pod's namespace's without a selector; and on top the first
//! ProxyConfig of the pod's namespace whose (non-empty) selector its labels
//! match, with the pod's annotation under it. Of several objects in one
//! layer the oldest counts. A ProxyConfig object sets `concurrency` and,
//! as `environmentVariables`, `proxyMetadata`; each layer replaces what it
//! sets and merges `proxyMetadata` by key ([`ProxyConfig::over`]).

use std::collections::BTreeMap;

use crate::config::istio::ProxyConfigObject;
use crate::config::mesh::MeshConfig;
use crate::config::mesh::proxy_config::ProxyConfig;
use crate::config::{ConfigKind, ConfigObject};
use crate::model::StoreSnapshot;

/// The ProxyConfig a pod of `namespace` with `labels` is given, its
/// `proxy.istio.io/config` annotation being `annotation`. A broken
/// annotation is an error naming where.
pub fn effective(
    snapshot: &StoreSnapshot,
    mesh: &MeshConfig,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    annotation: Option<&str>,
) -> Result<ProxyConfig, String> {
    let mut objects: Vec<&ProxyConfigObject> = snapshot
        .kind(ConfigKind::ProxyConfig)
        .values()
        .filter_map(|stored| match &*stored.object {
            ConfigObject::ProxyConfig(o) => Some(&**o),
            _ => None,
        })
        .collect();
    // Oldest first; objects of a file have no timestamp and sort by name.
    objects.sort_by(|a, b| {
        (&a.metadata.creation_timestamp, &a.metadata.name).cmp(&(&b.metadata.creation_timestamp, &b.metadata.name))
    });
    let namespace_wide = |ns: &str| {
        objects.iter().find(|o| {
            o.metadata.namespace() == ns && o.spec.selector.as_ref().is_none_or(|s| s.match_labels.is_empty())
        })
    };
    let mut config = mesh.default_proxy_config.as_ref().clone();
    let root = &*mesh.root_namespace;
    if let Some(o) = namespace_wide(root) {
        config = config.over(&layer(o));
    }
    if namespace != root
        && let Some(o) = namespace_wide(namespace)
    {
        config = config.over(&layer(o));
    }
    if let Some(text) = annotation {
        let (own, _) = ProxyConfig::parse("annotation proxy.istio.io/config", text)?;
        config = config.over(&own);
    }
    let workload = objects.iter().find(|o| {
        o.metadata.namespace() == namespace
            && o.spec.selector.as_ref().is_some_and(|s| {
                !s.match_labels.is_empty() && s.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
            })
    });
    if let Some(o) = workload {
        config = config.over(&layer(o));
    }
    Ok(config)
}

/// What one ProxyConfig object sets, as a ProxyConfig layer.
fn layer(object: &ProxyConfigObject) -> ProxyConfig {
    ProxyConfig {
        concurrency: object.spec.concurrency,
        proxy_metadata: object.spec.environment_variables.clone(),
        ..ProxyConfig::default()
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::config::mesh::MeshSettings;
    use crate::model::ConfigStore;

    fn object(namespace: &str, name: &str, created: &str, spec: &str) -> String {
        format!(
            "---\napiVersion: networking.istio.io/v1beta1\nkind: ProxyConfig\nmetadata: {{name: {name}, \
             namespace: {namespace}, creationTimestamp: '{created}'}}\nspec:\n{spec}\n"
        )
    }

    #[test]
    fn objects_layer_over_the_mesh_default_as_istio_layers_them() {
        let yaml = [
            object(
                "istio-system",
                "mesh",
                "2024-01-01T00:00:00Z",
                "  concurrency: 1\n  environmentVariables: {A: root, B: root}",
            ),
            object("shop", "ns", "2024-01-02T00:00:00Z", "  environmentVariables: {B: ns}"),
            object("shop", "ns-newer", "2024-01-03T00:00:00Z", "  concurrency: 7"),
            object("shop", "web", "2024-01-04T00:00:00Z", "  selector: {matchLabels: {app: web}}\n  concurrency: 4"),
            object("other", "elsewhere", "2024-01-01T00:00:00Z", "  concurrency: 9"),
        ]
        .concat();
        let store = ConfigStore::new();
        store.apply(crate::testing::bookinfo::puts(&yaml));
        let snapshot = store.snapshot();
        let mesh = MeshSettings::parse("mesh", "defaultConfig: {concurrency: 2, proxyMetadata: {M: mesh}}\n")
            .unwrap()
            .mesh_config();
        let labels = |app: &str| [("app".to_string(), app.to_string())].into();
        let plain = effective(&snapshot, &mesh, "shop", &labels("db"), None).unwrap();
        assert_eq!(plain.concurrency, Some(1), "the root's, not the newer namespace object's");
        let metadata: Vec<(&str, &str)> = plain.proxy_metadata.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(metadata, [("A", "root"), ("B", "ns"), ("M", "mesh")]);
        assert_eq!(plain.drain_duration.map(|d| d.0.as_secs()), Some(45), "Istio's defaults underneath");

        let web = effective(&snapshot, &mesh, "shop", &labels("web"), Some("concurrency: 3")).unwrap();
        assert_eq!(web.concurrency, Some(4), "the workload's object over the pod's annotation");
        let annotated = effective(&snapshot, &mesh, "shop", &labels("db"), Some("concurrency: 3")).unwrap();
        assert_eq!(annotated.concurrency, Some(3), "the annotation over the namespace layers");
        assert!(effective(&snapshot, &mesh, "shop", &labels("db"), Some("concurrency: x")).is_err());
    }
}
