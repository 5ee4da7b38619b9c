//! `MeshConfig`: the settings of the whole mesh that Istio keeps in its
//! mesh config rather than in any object, as far as meshpush reads them.
//!
//! Role: `serve` builds one from its flags; every `PushContext` of the
//! server carries it unchanged, so it is part of what a snapshot means
//! (a PeerAuthentication in `root_namespace` is mesh-wide; a workload's
//! SPIFFE identity is in `trust_domain`). It never changes while a server
//! runs.

use std::sync::Arc;

use serde::Serialize;

/// Istio's default root namespace (`meshConfig.rootNamespace`).
pub const DEFAULT_ROOT_NAMESPACE: &str = "istio-system";
/// Istio's default trust domain (`meshConfig.trustDomain`).
pub const DEFAULT_TRUST_DOMAIN: &str = "cluster.local";

/// The mesh-wide settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MeshConfig {
    /// The trust domain of workload identities (`spiffe://TRUST_DOMAIN/ns/NS/sa/SA`).
    pub trust_domain: Arc<str>,
    /// The namespace whose selector-less policies apply to the whole mesh.
    pub root_namespace: Arc<str>,
}

impl Default for MeshConfig {
    fn default() -> Self {
        MeshConfig { trust_domain: DEFAULT_TRUST_DOMAIN.into(), root_namespace: DEFAULT_ROOT_NAMESPACE.into() }
    }
}

impl MeshConfig {
    /// The SPIFFE identity of service account `service_account` in `namespace`.
    pub fn spiffe_id(&self, namespace: &str, service_account: &str) -> String {
        format!("spiffe://{}/ns/{namespace}/sa/{service_account}", self.trust_domain)
    }
}
