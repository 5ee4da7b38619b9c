//! The Kubernetes Gateway API (`gateway.networking.k8s.io`): GatewayClass,
//! Gateway, HTTPRoute, GRPCRoute, TCPRoute, TLSRoute and ReferenceGrant, as
//! their `v1` manifests write them (and the older versions of the same
//! shape: `v1beta1`, and `v1alpha2`/`v1alpha3` of TCPRoute and TLSRoute).
//!
//! Field names follow the API's YAML exactly, so existing manifests parse
//! unchanged. These types only carry what was written; what a Gateway or a
//! route *means* (which listeners accept which routes, where a backend
//! points, the status conditions) is decided on a whole snapshot by
//! `push::index::gateway_api`, which translates them into Istio's Gateway
//! and VirtualService model as istiod does. A `status` written on an object
//! is the controller's report, never input: it is not read.

mod gateway;
mod grpc_route;
mod http_route;
mod reference_grant;
mod stream_route;

use serde::{Deserialize, Serialize};

pub use gateway::*;
pub use grpc_route::*;
pub use http_route::*;
pub use reference_grant::*;
pub use stream_route::*;

/// The API group.
pub const GROUP: &str = "gateway.networking.k8s.io";
/// The versions meshpush reads of some kind, most preferred first (the
/// kube source asks discovery for each kind at the first of these served).
pub const VERSIONS: [&str; 4] = ["v1", "v1beta1", "v1alpha3", "v1alpha2"];

/// The versions of one kind (`kind` as manifests write it) meshpush reads:
/// each has the same shape as `v1` for what is read here.
pub fn versions(kind: &str) -> &'static [&'static str] {
    match kind {
        "GRPCRoute" | "TCPRoute" => &["v1", "v1alpha2"],
        "TLSRoute" => &["v1", "v1alpha3", "v1alpha2"],
        _ => &["v1", "v1beta1"],
    }
}
/// The controller name of Istio's GatewayClasses (`istio`,
/// `istio-remote`): the classes whose Gateways meshpush serves.
pub const ISTIO_CONTROLLER: &str = "istio.io/gateway-controller";
/// The controller name of Istio's waypoint GatewayClass (`istio-waypoint`).
pub const ISTIO_MESH_CONTROLLER: &str = "istio.io/mesh-controller";
/// The label Istio's automated deployment puts on a Gateway's pods.
pub const GATEWAY_NAME_LABEL: &str = "gateway.networking.k8s.io/gateway-name";
/// The older label with the same meaning.
pub const ISTIO_GATEWAY_NAME_LABEL: &str = "istio.io/gateway-name";

/// A reference from a route to its parent (a Gateway, or a Service for
/// mesh routing).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ParentReference {
    /// `gateway.networking.k8s.io` when absent.
    pub group: Option<String>,
    /// `Gateway` when absent.
    pub kind: Option<String>,
    /// The route's own namespace when absent.
    pub namespace: Option<String>,
    /// The parent's name.
    pub name: String,
    /// A listener name (of a Gateway) or port name.
    pub section_name: Option<String>,
    /// A listener port (of a Gateway) or a Service port.
    pub port: Option<u32>,
}

impl ParentReference {
    /// The group, with the API's default.
    pub fn group(&self) -> &str {
        self.group.as_deref().unwrap_or(GROUP)
    }

    /// The kind, with the API's default.
    pub fn kind(&self) -> &str {
        self.kind.as_deref().unwrap_or("Gateway")
    }

    /// The namespace, defaulting to the route's.
    pub fn namespace<'a>(&'a self, route_namespace: &'a str) -> &'a str {
        self.namespace.as_deref().filter(|n| !n.is_empty()).unwrap_or(route_namespace)
    }
}

/// A reference to a backend (a Service, by default).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BackendObjectReference {
    /// `""` (core) when absent.
    pub group: Option<String>,
    /// `Service` when absent.
    pub kind: Option<String>,
    /// The backend's name.
    pub name: String,
    /// The route's namespace when absent; another needs a ReferenceGrant.
    pub namespace: Option<String>,
    /// The port (required for a Service).
    pub port: Option<u32>,
}

impl BackendObjectReference {
    /// The group, with the API's default (core).
    pub fn group(&self) -> &str {
        self.group.as_deref().unwrap_or("")
    }

    /// The kind, with the API's default.
    pub fn kind(&self) -> &str {
        self.kind.as_deref().unwrap_or("Service")
    }

    /// The namespace, defaulting to the route's.
    pub fn namespace<'a>(&'a self, route_namespace: &'a str) -> &'a str {
        self.namespace.as_deref().filter(|n| !n.is_empty()).unwrap_or(route_namespace)
    }
}

/// A reference to a Secret (a listener's certificate).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SecretObjectReference {
    /// `""` (core) when absent.
    pub group: Option<String>,
    /// `Secret` when absent.
    pub kind: Option<String>,
    /// The Secret's name.
    pub name: String,
    /// The Gateway's namespace when absent; another needs a ReferenceGrant.
    pub namespace: Option<String>,
}

impl SecretObjectReference {
    /// The group, with the API's default (core).
    pub fn group(&self) -> &str {
        self.group.as_deref().unwrap_or("")
    }

    /// The kind, with the API's default.
    pub fn kind(&self) -> &str {
        self.kind.as_deref().unwrap_or("Secret")
    }

    /// The namespace, defaulting to the Gateway's.
    pub fn namespace<'a>(&'a self, gateway_namespace: &'a str) -> &'a str {
        self.namespace.as_deref().filter(|n| !n.is_empty()).unwrap_or(gateway_namespace)
    }
}

/// A Kubernetes `LabelSelector` (a listener's `allowedRoutes.namespaces.selector`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LabelSelector {
    /// Labels that must all be present with these values.
    pub match_labels: std::collections::BTreeMap<String, String>,
    /// Expressions that must all hold.
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// One `matchExpressions` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LabelSelectorRequirement {
    /// The label.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    /// The values (for `In` and `NotIn`).
    pub values: Vec<String>,
}

impl LabelSelector {
    /// Whether `labels` satisfy the selector (an empty one selects everything).
    pub fn matches(&self, labels: &std::collections::BTreeMap<String, String>) -> bool {
        self.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|e| {
                let value = labels.get(&e.key);
                match e.operator.as_str() {
                    "In" => value.is_some_and(|v| e.values.contains(v)),
                    "NotIn" => value.is_none_or(|v| !e.values.contains(v)),
                    "Exists" => value.is_some(),
                    "DoesNotExist" => value.is_none(),
                    _ => false,
                }
            })
    }
}

/// Parses a Gateway API duration.
pub fn parse_duration(value: &str) -> Option<std::time::Duration> {
    let mut total = std::time::Duration::ZERO;
    let mut rest = value;
    let mut parts = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 5 {
            return None;
        }
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (unit, len) = if rest.starts_with("ms") {
            (std::time::Duration::from_millis(n), 2)
        } else {
            match rest.bytes().next()? {
                b'h' => (std::time::Duration::from_secs(n * 3600), 1),
                b'm' => (std::time::Duration::from_secs(n * 60), 1),
                b's' => (std::time::Duration::from_secs(n), 1),
                _ => return None,
            }
        };
        total += unit;
        rest = &rest[len..];
        parts += 1;
    }
    (parts > 0 && parts <= 4).then_some(total)
}
