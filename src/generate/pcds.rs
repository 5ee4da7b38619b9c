//! PCDS: the one `istio.mesh.v1alpha1.ProxyConfig` istiod sends an agent,
//! which carries the mesh's trust bundle (`caCertificatesPem`).
//!
//! Role: under `ISTIO_MULTIROOT_MESH` (`serve --multi-root-mesh`) the mesh
//! config's `caCertificates` roots reach each agent this way, and the agent
//! adds them to the `ROOTCA` it serves its Envoy (pilot-agent does so with
//! `PROXY_CONFIG_XDS_AGENT=true`, `meshpush agent` likewise). Envoy never
//! asks for this type; nothing of Envoy's configuration changes with it.
//!
//! Invariant: the resource depends only on the mesh config, so a change of
//! anything else never re-sends it; without the feature there is none (an
//! agent's request is answered with no resource, which agents ignore;
//! istiod does not answer at all).

use crate::config::mesh::trust_anchors;
use crate::push::PushContext;

/// The code generated from `proto/istio/mesh/v1alpha1/proxy_config.proto`.
mod wire {
    #![allow(missing_docs)]
    tonic::include_proto!("istio.mesh.v1alpha1");
}

pub use wire::ProxyConfig;

/// The PCDS resource of snapshot `ctx`, or none without the feature.
///
/// istiod's bundle also holds its own CA root; an agent already has that
/// root (the last certificate of its signed chain) and merges the two
/// without repeats, so meshpush sends only the roots it adds.
pub fn proxy_config(ctx: &PushContext) -> Option<ProxyConfig> {
    let anchors = &ctx.mesh.trust_anchors;
    anchors
        .multi_root
        .then(|| ProxyConfig { ca_certificates_pem: trust_anchors::bundle(anchors.roots.iter().map(|r| &**r)) })
}
