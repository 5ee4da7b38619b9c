//! `Sidecar`: limits what a sidecar proxy sees and how its listeners bind.

use serde::{Deserialize, Serialize};

use super::{ConnectionPoolSettings, Destination, WorkloadSelector};
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
    /// Inbound listeners: when set, they replace the ports the workload's
    /// Services give it.
    pub ingress: Vec<IstioIngressListener>,
    /// Egress listeners.
    pub egress: Vec<IstioEgressListener>,
    /// Connection pool of every inbound cluster (an ingress listener's own wins).
    pub inbound_connection_pool: Option<ConnectionPoolSettings>,
    /// What happens to traffic for unknown destinations.
    pub outbound_traffic_policy: Option<OutboundTrafficPolicy>,
}

/// One ingress listener of a Sidecar: a port the workload receives traffic
/// on, and where the sidecar forwards it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct IstioIngressListener {
    /// The port traffic arrives on.
    pub port: SidecarPort,
    /// Bind address of the listener (captureMode NONE); the instance IP when absent.
    pub bind: Option<String>,
    /// `DEFAULT`, `IPTABLES` or `NONE`.
    pub capture_mode: Option<String>,
    /// Where to forward: `127.0.0.1:PORT`, `[::1]:PORT`, `0.0.0.0:PORT`,
    /// `[::]:PORT` (the instance IP) or `unix:///path`; the same port on
    /// 127.0.0.1 when absent.
    pub default_endpoint: Option<String>,
    /// Connection pool of the listener's inbound cluster.
    pub connection_pool: Option<ConnectionPoolSettings>,
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
    /// With `ALLOW_ANY`: send traffic for unknown destinations here instead
    /// of to its original destination.
    pub egress_proxy: Option<Destination>,
}
