//! PCDS: the one `istio.mesh.v1alpha1.ProxyConfig` istiod sends an agent,
//! which carries the mesh's trust bundle (`caCertificatesPem`).
//!
//! Role: under `ISTIO_MULTIROOT_MESH` (`serve --multi-root-mesh`) the mesh
//! config's `caCertificates` roots reach each agent this way, and the agent
//! adds them to the `ROOTCA` it serves its Envoy (pilot-agent does so with
//! `PROXY_CONFIG_XDS_AGENT=true`, `meshpush agent` likewise). Envoy never
//! asks for this type; nothing of Envoy's configuration changes with it.
//!
//! Invariant: the resource depends only on the mesh config and the SPIFFE
//! bundles fetched for its URLs (`FetchedTrustBundle`), so a change of
//! anything else never re-sends it; without the feature there is none (an
//! agent's request is answered with no resource, which agents ignore;
//! istiod does not answer at all).

use crate::config::mesh::spiffe_bundle::fetched_trust_bundle_name;
use crate::config::mesh::trust_anchors;
use crate::config::{ConfigKey, ConfigKind, ConfigObject};
use crate::push::PushContext;

/// The code generated from `proto/istio/mesh/v1alpha1/proxy_config.proto`.
mod wire {
    #![allow(missing_docs)]
    tonic::include_proto!("istio.mesh.v1alpha1");
}

pub use wire::ProxyConfig;

/// The PCDS resource of snapshot `ctx`, or none without the feature: the
/// `pem` roots and those fetched from the bundle URLs the mesh config
/// lists (a bundle of a URL it no longer lists is left out, even before
/// its fetcher deletes it).
///
/// istiod's bundle also holds its own CA root; an agent already has that
/// root (the last certificate of its signed chain) and merges the two
/// without repeats, so meshpush sends only the roots it adds.
pub fn proxy_config(ctx: &PushContext) -> Option<ProxyConfig> {
    let anchors = &ctx.mesh.trust_anchors;
    if !anchors.multi_root {
        return None;
    }
    let fetched = anchors.bundle_urls.iter().filter_map(|url| {
        let key = ConfigKey::new(ConfigKind::FetchedTrustBundle, "", &fetched_trust_bundle_name(url));
        match ctx.store.get(&key).map(|s| &*s.object) {
            Some(ConfigObject::FetchedTrustBundle(f)) if *f.url == **url => Some(&f.roots),
            _ => None,
        }
    });
    let roots = anchors.roots.iter().map(|r| &**r).chain(fetched.flatten().map(String::as_str));
    Some(ProxyConfig { ca_certificates_pem: trust_anchors::bundle(roots) })
}

#[cfg(test)]
mod test {
    use std::sync::Arc;

    use super::*;
    use crate::config::mesh::MeshSettings;
    use crate::config::mesh::spiffe_bundle::FetchedTrustBundle;
    use crate::config::{ObjectMeta, SourceRef};
    use crate::model::ConfigStore;
    use crate::model::store::Write;
    use crate::push::ScopeInterner;

    fn root() -> String {
        crate::testing::certs::ca("root").0
    }

    fn served(roots: &[&str], multi_root: bool) -> PushContext {
        let entries: Vec<String> =
            roots.iter().map(|r| format!("{{pem: {}}}", serde_json::to_string(r).unwrap())).collect();
        let text = format!("caCertificates: [{}]\n", entries.join(", "));
        let flags = MeshSettings { multi_root_mesh: Some(multi_root), ..Default::default() };
        let mesh = MeshSettings::parse("mesh", &text).unwrap().over(flags).finish("mesh").unwrap().mesh_config();
        PushContext::build_with(ConfigStore::new().snapshot(), 1, Arc::new(ScopeInterner::default()), Arc::new(mesh))
    }

    #[test]
    fn the_bundle_is_the_roots_sorted_once_each_and_only_under_the_feature() {
        let (a, b) = (root(), root());
        let config = proxy_config(&served(&[&b, &a, &b], true)).expect("a resource under the feature");
        let mut expected = vec![a.clone(), b.clone()];
        expected.sort();
        assert_eq!(config.ca_certificates_pem, expected);
        assert_eq!(proxy_config(&served(&[&a], false)), None, "istiod sends nothing without the feature");
    }

    /// The bundle of `url` holding `roots`, as `source::spiffe_bundle` writes it.
    fn fetched(url: &str, roots: &[&str]) -> Write {
        let object = FetchedTrustBundle {
            metadata: ObjectMeta { name: fetched_trust_bundle_name(url), ..Default::default() },
            url: url.into(),
            roots: roots.iter().map(|r| r.to_string()).collect(),
            ..Default::default()
        };
        Write::put(ConfigObject::FetchedTrustBundle(Box::new(object)), SourceRef { file: "test".into(), doc: 0 })
    }

    #[test]
    fn fetched_roots_join_the_bundle_for_the_urls_the_mesh_config_lists_only() {
        let (pem, b, x) = (root(), root(), root());
        let store = ConfigStore::new();
        store.apply(vec![
            fetched("https://listed.example/b", &[&b, &pem]),
            fetched("https://unlisted.example/b", &[&x]),
        ]);
        let text = format!(
            "caCertificates:\n- {{pem: {}}}\n- {{spiffeBundleUrl: listed.example/b}}\n\
             - {{spiffeBundleUrl: https://none-yet.example/b}}\n",
            serde_json::to_string(&pem).unwrap()
        );
        let served = |multi_root: bool| {
            let flags = MeshSettings { multi_root_mesh: Some(multi_root), ..Default::default() };
            let mesh = MeshSettings::parse("mesh", &text).unwrap().over(flags).finish("mesh").unwrap().mesh_config();
            PushContext::build_with(store.snapshot(), 1, Arc::new(ScopeInterner::default()), Arc::new(mesh))
        };
        let config = proxy_config(&served(true)).expect("a resource under the feature");
        let mut expected = vec![pem.clone(), b.clone()];
        expected.sort();
        assert_eq!(config.ca_certificates_pem, expected, "the pem root and the listed URL's, once each; not x");
        assert_eq!(proxy_config(&served(false)), None, "istiod fetches nothing without the feature");
    }

    #[test]
    fn the_roots_travel_in_field_34_as_pilot_agent_reads_them() {
        use prost::Message as _;
        let config = ProxyConfig { ca_certificates_pem: vec!["R".into()] };
        // Field 34, wire type 2 (length-delimited): tag varint 0x112 = [0x92, 0x02].
        assert_eq!(config.encode_to_vec(), [0x92, 0x02, 0x01, b'R']);
    }
}
