//! `Sidecar`: limits what a sidecar proxy sees and how its listeners bind.

use serde::{Deserialize, Serialize};

use super::WorkloadSelector;
use crate::config::ObjectMeta;

/// Istio Sidecar.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Sidecar {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: SidecarSpec,
}

/// `Sidecar.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SidecarSpec {
    /// Which workloads of the namespace it applies to; absent means all
    /// (at most one such Sidecar per namespace).
    pub workload_selector: Option<WorkloadSelector>,
    /// Egress listeners.
    pub egress: Vec<IstioEgressListener>,
    /// What happens to traffic for unknown destinations.
    pub outbound_traffic_policy: Option<OutboundTrafficPolicy>,
}

/// One egress listener of a Sidecar.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct IstioEgressListener {
    /// Limit to this port (all ports when absent).
    pub port: Option<SidecarPort>,
    /// Bind address for the listener.
    pub bind: Option<String>,
    /// `DEFAULT`, `IPTABLES` or `NONE`.
    pub capture_mode: Option<String>,
    /// Visible hosts in `namespace/host` form: `./*`, `*/*`, `istio-system/*`, `ns/reviews.ns.svc.cluster.local`.
    pub hosts: Vec<String>,
}

/// Port of a Sidecar egress listener.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SidecarPort {
    /// Port number.
    pub number: u32,
    /// Protocol.
    pub protocol: Option<String>,
    /// Name.
    pub name: Option<String>,
}

/// Outbound traffic policy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OutboundTrafficPolicy {
    /// `ALLOW_ANY` (default) or `REGISTRY_ONLY`.
    pub mode: Option<String>,
}
