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
    /// Routes for TLS traffic that is not terminated (HTTPS and TLS ports
    /// of sidecars, PASSTHROUGH gateway servers), by SNI; first match wins.
    pub tls: Vec<TlsRoute>,
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
    /// A fixed response instead of a route.
    pub direct_response: Option<HttpDirectResponse>,
    /// Hand the route over to another VirtualService (delegation).
    pub delegate: Option<Delegate>,
    /// Request timeout.
    pub timeout: Option<Duration>,
    /// Retry policy.
    pub retries: Option<HttpRetry>,
    /// Faults injected into matching requests.
    pub fault: Option<HttpFaultInjection>,
    /// One destination requests are copied to (answers are dropped).
    pub mirror: Option<Destination>,
    /// Share of requests copied to `mirror` (default 100).
    pub mirror_percentage: Option<Percent>,
    /// The same as a whole number (deprecated by Istio).
    pub mirror_percent: Option<u32>,
    /// Destinations requests are copied to, each with its own share.
    pub mirrors: Vec<HttpMirrorPolicy>,
    /// Cross-origin resource sharing.
    pub cors_policy: Option<CorsPolicy>,
    /// Header changes on requests and responses.
    pub headers: Option<Headers>,
}

/// Header operations on requests and responses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Headers {
    /// On the request, before it is forwarded.
    pub request: Option<HeaderOperations>,
    /// On the response, before it is returned.
    pub response: Option<HeaderOperations>,
}

/// Set, add and remove headers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HeaderOperations {
    /// Overwrite (or add) these headers.
    pub set: BTreeMap<String, String>,
    /// Append these values.
    pub add: BTreeMap<String, String>,
    /// Remove these headers.
    pub remove: Vec<String>,
}

/// A fixed response.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpDirectResponse {
    /// Status code.
    pub status: u32,
    /// Body.
    pub body: Option<HttpBody>,
}

/// A response body: text, or bytes (base64 in YAML, as protobuf's JSON mapping writes them).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpBody {
    /// Text.
    pub string: Option<String>,
    /// Base64 of the bytes.
    pub bytes: Option<String>,
}

/// Delegation of a route to another VirtualService.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Delegate {
    /// Name of the delegate VirtualService.
    pub name: String,
    /// Its namespace (the root's when empty).
    pub namespace: Option<String>,
}

/// A percentage, 0–100 with fractions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Percent {
    /// The percentage.
    pub value: f64,
}

/// Faults injected into requests.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpFaultInjection {
    /// Delay before forwarding.
    pub delay: Option<FaultDelay>,
    /// Answer with an error instead of forwarding.
    pub abort: Option<FaultAbort>,
}

/// An injected delay.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FaultDelay {
    /// The delay.
    pub fixed_delay: Option<Duration>,
    /// Exponential delay (Istio does not implement it).
    pub exponential_delay: Option<Duration>,
    /// Share of requests delayed (default 100).
    pub percentage: Option<Percent>,
    /// The same as a whole number (deprecated by Istio).
    pub percent: Option<i32>,
}

/// An injected error.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FaultAbort {
    /// HTTP status to answer with.
    pub http_status: Option<i32>,
    /// gRPC status name (`UNAVAILABLE`) to answer with.
    pub grpc_status: Option<String>,
    /// HTTP/2 error (Istio does not implement it).
    pub http2_error: Option<String>,
    /// Share of requests aborted (default 100).
    pub percentage: Option<Percent>,
}

/// A mirror destination with its share.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpMirrorPolicy {
    /// Where copies go.
    pub destination: Destination,
    /// Share of requests copied (default 100).
    pub percentage: Option<Percent>,
}

/// Cross-origin resource sharing policy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct CorsPolicy {
    /// Exact origins (deprecated by Istio for `allowOrigins`).
    pub allow_origin: Vec<String>,
    /// Origin matches.
    pub allow_origins: Vec<StringMatch>,
    /// `Access-Control-Allow-Methods`.
    pub allow_methods: Vec<String>,
    /// `Access-Control-Allow-Headers`.
    pub allow_headers: Vec<String>,
    /// `Access-Control-Expose-Headers`.
    pub expose_headers: Vec<String>,
    /// `Access-Control-Max-Age`.
    pub max_age: Option<Duration>,
    /// `Access-Control-Allow-Credentials`.
    pub allow_credentials: Option<bool>,
    /// `FORWARD` (default) or `IGNORE` preflights whose origin does not match.
    pub unmatched_preflights: Option<String>,
}

/// One HTTP match condition: all its fields must match.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpMatchRequest {
    /// Match name (for display).
    pub name: Option<String>,
    /// Path match.
    pub uri: Option<StringMatch>,
    /// Scheme match (`http`, `https`).
    pub scheme: Option<StringMatch>,
    /// Method match.
    pub method: Option<StringMatch>,
    /// Authority (Host) match.
    pub authority: Option<StringMatch>,
    /// Header matches (names lower-case).
    pub headers: BTreeMap<String, StringMatch>,
    /// Port the request arrived on.
    pub port: Option<u32>,
    /// Labels the calling workload must have.
    pub source_labels: BTreeMap<String, String>,
    /// Gateways this match is limited to.
    pub gateways: Vec<String>,
    /// Query parameter matches.
    pub query_params: BTreeMap<String, StringMatch>,
    /// Match the path without regard to case.
    pub ignore_uri_case: Option<bool>,
    /// Headers that must not match.
    pub without_headers: BTreeMap<String, StringMatch>,
    /// Namespace the calling workload must be in.
    pub source_namespace: Option<String>,
    /// Prefix of the route's statistics.
    pub stat_prefix: Option<String>,
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
    /// Header changes for requests sent to this destination.
    pub headers: Option<Headers>,
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
    /// Port of the new location.
    pub port: Option<u32>,
    /// `FROM_PROTOCOL_DEFAULT` or `FROM_REQUEST_PORT`.
    pub derive_port: Option<String>,
    /// Scheme of the new location.
    pub scheme: Option<String>,
    /// Status code (301 when absent).
    pub redirect_code: Option<u32>,
    /// Replaces the matched path prefix in the new location.
    pub prefix_rewrite: Option<String>,
}

/// HTTP rewrite before forwarding.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRewrite {
    /// Replaces the matched path prefix (or the whole path on exact match).
    pub uri: Option<String>,
    /// Replaces the Host/authority header.
    pub authority: Option<String>,
    /// Rewrites the path with a regular expression.
    pub uri_regex_rewrite: Option<RegexRewrite>,
}

/// A regular-expression path rewrite.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RegexRewrite {
    /// RE2 pattern.
    #[serde(rename = "match")]
    pub pattern: String,
    /// Substitution (`\1` refers to a group).
    pub rewrite: String,
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
    /// Retry in other localities.
    pub retry_remote_localities: Option<bool>,
    /// Prefer hosts not tried yet (default true).
    pub retry_ignore_previous_hosts: Option<bool>,
    /// Base interval between retries.
    pub backoff: Option<Duration>,
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

/// A route for TLS traffic passed through, chosen by the SNI the client sends.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TlsRoute {
    /// Match conditions (any); each names the SNI hosts it takes.
    #[serde(rename = "match")]
    pub matches: Vec<TlsMatchAttributes>,
    /// Weighted destinations.
    pub route: Vec<RouteDestination>,
}

/// TLS match conditions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TlsMatchAttributes {
    /// SNI names (wildcards allowed) this condition takes; required.
    pub sni_hosts: Vec<String>,
    /// Destination IP ranges.
    pub destination_subnets: Vec<String>,
    /// Destination port.
    pub port: Option<u32>,
    /// Labels the calling workload must have.
    pub source_labels: BTreeMap<String, String>,
    /// Gateways this match is limited to.
    pub gateways: Vec<String>,
    /// Namespace the calling workload must be in.
    pub source_namespace: Option<String>,
}

/// TCP match conditions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct L4MatchAttributes {
    /// Destination IP ranges.
    pub destination_subnets: Vec<String>,
    /// Destination port.
    pub port: Option<u32>,
    /// Source IP range.
    pub source_subnet: Option<String>,
    /// Labels the calling workload must have.
    pub source_labels: BTreeMap<String, String>,
    /// Gateways this match is limited to.
    pub gateways: Vec<String>,
    /// Namespace the calling workload must be in.
    pub source_namespace: Option<String>,
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

/// gRPC status codes by the names Istio's `grpcStatus` takes.
const GRPC_STATUS: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// The code of a gRPC status name (`UNAVAILABLE` → 14).
pub fn grpc_status_code(name: &str) -> Option<u32> {
    GRPC_STATUS.iter().position(|n| *n == name).map(|i| i as u32)
}

/// Every gRPC status name, in code order.
pub fn grpc_status_names() -> &'static [&'static str] {
    &GRPC_STATUS
}
