//! `GatewayClass` and `Gateway`: which controller serves a class, and the
//! listeners (port, protocol, hostname, TLS, which routes may attach) of a
//! Gateway.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{LabelSelector, SecretObjectReference};
use crate::config::ObjectMeta;

/// `GatewayClass` (cluster-scoped).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GatewayClass {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: GatewayClassSpec,
}

/// `GatewayClass.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GatewayClassSpec {
    /// The controller that serves the class's Gateways.
    pub controller_name: String,
    /// Free text for people. It configures nothing (in Istio neither), so
    /// it is kept without a report.
    pub description: Option<String>,
}

/// `Gateway` (of the Gateway API; Istio's own is `istio::Gateway`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Gateway {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: GatewaySpec,
}

/// `Gateway.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GatewaySpec {
    /// The GatewayClass.
    pub gateway_class_name: String,
    /// Listeners.
    pub listeners: Vec<Listener>,
    /// Addresses requested for the Gateway.
    pub addresses: Vec<GatewayAddress>,
    /// Labels and annotations for what the controller deploys.
    pub infrastructure: Option<GatewayInfrastructure>,
}

/// `Gateway.spec.infrastructure`: labels and annotations Istio copies to the
/// resources it deploys. meshpush deploys nothing; they are accepted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GatewayInfrastructure {
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
}

/// One `spec.addresses` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GatewayAddress {
    /// `IPAddress` (the default), `Hostname`, or a domain-prefixed type.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// The address.
    pub value: String,
}

/// One listener.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Listener {
    /// Unique within the Gateway; routes name it as `sectionName`.
    pub name: String,
    /// Requests for other hosts are not this listener's (absent: any host).
    pub hostname: Option<String>,
    /// The port.
    pub port: u32,
    /// `HTTP`, `HTTPS`, `TLS`, `TCP` (or a domain-prefixed protocol).
    pub protocol: String,
    /// TLS settings (HTTPS and TLS listeners).
    pub tls: Option<ListenerTls>,
    /// Which routes may attach.
    pub allowed_routes: Option<AllowedRoutes>,
}

/// `listeners[].tls`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ListenerTls {
    /// `Terminate` (the default) or `Passthrough`.
    pub mode: Option<String>,
    /// The certificates (Secrets) the listener serves.
    pub certificate_refs: Vec<SecretObjectReference>,
    /// Implementation-specific options.
    pub options: BTreeMap<String, String>,
}

/// `listeners[].allowedRoutes`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AllowedRoutes {
    /// Namespaces routes may come from (default: the Gateway's own).
    pub namespaces: Option<RouteNamespaces>,
    /// Route kinds (default: those the protocol takes).
    pub kinds: Vec<RouteGroupKind>,
}

/// `allowedRoutes.namespaces`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RouteNamespaces {
    /// `Same` (the default), `All` or `Selector`.
    pub from: Option<String>,
    /// With `Selector`: the namespaces whose labels it matches.
    pub selector: Option<LabelSelector>,
}

/// A route kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RouteGroupKind {
    /// `gateway.networking.k8s.io` when absent.
    pub group: Option<String>,
    /// `HTTPRoute`, `GRPCRoute`, `TLSRoute`, `TCPRoute`.
    pub kind: String,
}

impl Listener {
    /// The TLS mode: `Terminate` unless the listener says `Passthrough`.
    pub fn tls_mode(&self) -> &str {
        self.tls.as_ref().and_then(|t| t.mode.as_deref()).unwrap_or("Terminate")
    }

    /// `allowedRoutes.namespaces.from`, with its default.
    pub fn routes_from(&self) -> &str {
        self.allowed_routes
            .as_ref()
            .and_then(|a| a.namespaces.as_ref())
            .and_then(|n| n.from.as_deref())
            .unwrap_or("Same")
    }
}
