//! `VirtualService`: how requests for a set of hosts are routed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::{Duration, ObjectMeta};

/// Istio VirtualService.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct VirtualService {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: VirtualServiceSpec,
}

/// `VirtualService.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct VirtualServiceSpec {
    /// Hosts: short names (resolved in the rule's namespace), FQDNs or wildcards (`*.example.com`).
    pub hosts: Vec<String>,
    /// Gateways the rule binds to (`ns/name` or `name`); empty means `mesh`.
    pub gateways: Vec<String>,
    /// HTTP routes, first match wins.
    pub http: Vec<HttpRoute>,
    /// TCP routes, first match wins.
    pub tcp: Vec<TcpRoute>,
    /// Namespaces the rule is visible to.
    pub export_to: Vec<String>,
}

/// One HTTP route.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRoute {
    /// Route name (for display).
    pub name: Option<String>,
    /// Match conditions: the route applies when any one matches (all when empty).
    #[serde(rename = "match")]
    pub matches: Vec<HttpMatchRequest>,
    /// Weighted destinations.
    pub route: Vec<HttpRouteDestination>,
    /// A redirect instead of a route.
    pub redirect: Option<HttpRedirect>,
    /// Rewrite of the path or authority before forwarding.
    pub rewrite: Option<HttpRewrite>,
    /// Request timeout.
    pub timeout: Option<Duration>,
    /// Retry policy.
    pub retries: Option<HttpRetry>,
}

/// One HTTP match condition: all its fields must match.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpMatchRequest {
    /// Match name (for display).
    pub name: Option<String>,
    /// Path match.
    pub uri: Option<StringMatch>,
    /// Header matches (names lower-case).
    pub headers: BTreeMap<String, StringMatch>,
    /// Port the request arrived on.
    pub port: Option<u32>,
    /// Gateways this match is limited to.
    pub gateways: Vec<String>,
}

/// Exact, prefix or regex string match (exactly one is set).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct StringMatch {
    /// Exact value.
    pub exact: Option<String>,
    /// Prefix.
    pub prefix: Option<String>,
    /// RE2 regular expression, matched against the whole value.
    pub regex: Option<String>,
}

/// A weighted HTTP destination.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRouteDestination {
    /// The destination.
    pub destination: Destination,
    /// Weight; when every weight is absent the destinations share equally.
    pub weight: Option<i64>,
}

/// A destination service, optionally a subset and port.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Destination {
    /// Host: short name (resolved in the rule's namespace) or FQDN.
    pub host: String,
    /// Subset defined by a DestinationRule.
    pub subset: Option<String>,
    /// Port; needed when the service has more than one.
    pub port: Option<PortSelector>,
}

/// A port by number.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PortSelector {
    /// Port number.
    pub number: u32,
}

/// HTTP redirect.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRedirect {
    /// Replacement path.
    pub uri: Option<String>,
    /// Replacement authority.
    pub authority: Option<String>,
    /// Status code (301 when absent).
    pub redirect_code: Option<u32>,
}

/// HTTP rewrite before forwarding.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRewrite {
    /// Replaces the matched path prefix (or the whole path on exact match).
    pub uri: Option<String>,
    /// Replaces the Host/authority header.
    pub authority: Option<String>,
}

/// HTTP retry policy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRetry {
    /// Number of retries.
    pub attempts: i64,
    /// Timeout per try.
    pub per_try_timeout: Option<Duration>,
    /// Envoy retry conditions, comma separated (`5xx,connect-failure`).
    pub retry_on: Option<String>,
}

/// One TCP route.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TcpRoute {
    /// Match conditions (any).
    #[serde(rename = "match")]
    pub matches: Vec<L4MatchAttributes>,
    /// Weighted destinations.
    pub route: Vec<RouteDestination>,
}

/// TCP match conditions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct L4MatchAttributes {
    /// Destination port.
    pub port: Option<u32>,
    /// Gateways this match is limited to.
    pub gateways: Vec<String>,
}

/// A weighted TCP destination.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RouteDestination {
    /// The destination.
    pub destination: Destination,
    /// Weight.
    pub weight: Option<i64>,
}
