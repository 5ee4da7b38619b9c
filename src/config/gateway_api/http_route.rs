//! `HTTPRoute`: HTTP routing rules attached to Gateways (and, for mesh
//! routing, to Services).

use serde::{Deserialize, Serialize};

use super::{BackendObjectReference, ParentReference};
use crate::config::ObjectMeta;

/// `HTTPRoute`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRoute {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: HttpRouteSpec,
}

/// `HTTPRoute.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRouteSpec {
    /// Where the route attaches.
    pub parent_refs: Vec<ParentReference>,
    /// The hosts it routes (none: every host its listeners take).
    pub hostnames: Vec<String>,
    /// The rules (none: one rule sending every request nowhere).
    pub rules: Vec<HttpRouteRule>,
}

/// One rule.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRouteRule {
    /// A name for the rule (the Envoy route's name).
    pub name: Option<String>,
    /// Conditions, any of which selects the rule (none: every request).
    pub matches: Vec<HttpRouteMatch>,
    /// Filters applied to the request or response.
    pub filters: Vec<HttpRouteFilter>,
    /// Where requests go, by weight.
    pub backend_refs: Vec<HttpBackendRef>,
    /// Timeouts.
    pub timeouts: Option<HttpRouteTimeouts>,
    /// Retries.
    pub retry: Option<HttpRouteRetry>,
}

/// One match.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRouteMatch {
    /// The path (default: prefix `/`).
    pub path: Option<HttpPathMatch>,
    /// Headers that must all match.
    pub headers: Vec<HttpHeaderMatch>,
    /// Query parameters that must all match.
    pub query_params: Vec<HttpQueryParamMatch>,
    /// The method.
    pub method: Option<String>,
}

/// A path match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpPathMatch {
    /// `Exact`, `PathPrefix` (the default) or `RegularExpression`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// The path (default `/`).
    pub value: Option<String>,
}

impl HttpPathMatch {
    /// The match type, with the API's default.
    pub fn kind(&self) -> &str {
        self.kind.as_deref().unwrap_or("PathPrefix")
    }

    /// The value, with the API's default.
    pub fn value(&self) -> &str {
        self.value.as_deref().unwrap_or("/")
    }
}

/// A header match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpHeaderMatch {
    /// `Exact` (the default) or `RegularExpression`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// The header name (case-insensitive).
    pub name: String,
    /// The value.
    pub value: String,
}

/// A query parameter match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpQueryParamMatch {
    /// `Exact` (the default) or `RegularExpression`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// The parameter name (case-sensitive).
    pub name: String,
    /// The value.
    pub value: String,
}

/// One filter.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRouteFilter {
    /// `RequestHeaderModifier`, `ResponseHeaderModifier`, `RequestMirror`,
    /// `RequestRedirect`, `URLRewrite`, `CORS` or `ExtensionRef`.
    #[serde(rename = "type")]
    pub kind: String,
    /// With `RequestHeaderModifier`.
    pub request_header_modifier: Option<HttpHeaderFilter>,
    /// With `ResponseHeaderModifier`.
    pub response_header_modifier: Option<HttpHeaderFilter>,
    /// With `RequestMirror`.
    pub request_mirror: Option<HttpRequestMirrorFilter>,
    /// With `RequestRedirect`.
    pub request_redirect: Option<HttpRequestRedirectFilter>,
    /// With `URLRewrite`.
    #[serde(rename = "urlRewrite")]
    pub url_rewrite: Option<HttpUrlRewriteFilter>,
    /// With `CORS`.
    pub cors: Option<HttpCorsFilter>,
}

/// A CORS policy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpCorsFilter {
    /// Origins allowed: exact, `*`, or with `*` wildcards.
    pub allow_origins: Vec<String>,
    /// Whether credentials are allowed.
    pub allow_credentials: Option<bool>,
    /// Methods allowed (`*`: any).
    pub allow_methods: Vec<String>,
    /// Request headers allowed (`*`: any).
    pub allow_headers: Vec<String>,
    /// Response headers the client may read.
    pub expose_headers: Vec<String>,
    /// Seconds a preflight answer may be cached (the API's default: 5).
    pub max_age: Option<u32>,
}

/// A header modifier.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpHeaderFilter {
    /// Headers set (replacing any value).
    pub set: Vec<HttpHeader>,
    /// Headers added (beside any value).
    pub add: Vec<HttpHeader>,
    /// Headers removed.
    pub remove: Vec<String>,
}

/// A header name and value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpHeader {
    /// The name.
    pub name: String,
    /// The value.
    pub value: String,
}

/// A request mirror.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRequestMirrorFilter {
    /// Where copies go.
    pub backend_ref: BackendObjectReference,
    /// The share of requests mirrored, in percent.
    pub percent: Option<u32>,
    /// The share of requests mirrored, as a fraction.
    pub fraction: Option<Fraction>,
}

/// A fraction (`denominator` defaults to 100).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Fraction {
    /// Numerator.
    pub numerator: u32,
    /// Denominator.
    pub denominator: Option<u32>,
}

/// A redirect.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRequestRedirectFilter {
    /// `http` or `https`.
    pub scheme: Option<String>,
    /// The host of the `Location`.
    pub hostname: Option<String>,
    /// The path of the `Location`.
    pub path: Option<HttpPathModifier>,
    /// The port of the `Location`.
    pub port: Option<u32>,
    /// 301 (the default), 302, 303, 307 or 308.
    pub status_code: Option<u32>,
}

/// A path modification (redirects and rewrites).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpPathModifier {
    /// `ReplaceFullPath` or `ReplacePrefixMatch`.
    #[serde(rename = "type")]
    pub kind: String,
    /// With `ReplaceFullPath`.
    pub replace_full_path: Option<String>,
    /// With `ReplacePrefixMatch`.
    pub replace_prefix_match: Option<String>,
}

/// A rewrite.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpUrlRewriteFilter {
    /// The host (authority) sent upstream.
    pub hostname: Option<String>,
    /// The path sent upstream.
    pub path: Option<HttpPathModifier>,
}

/// A weighted backend of a rule.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpBackendRef {
    /// The backend.
    #[serde(flatten)]
    pub backend: BackendObjectReference,
    /// Its share (default 1; 0 sends it nothing).
    pub weight: Option<u32>,
    /// Filters applied to requests sent to this backend.
    pub filters: Vec<HttpRouteFilter>,
}

/// `rules[].timeouts`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRouteTimeouts {
    /// The whole request, as the client sees it (Gateway API duration).
    pub request: Option<String>,
    /// Each request to a backend.
    pub backend_request: Option<String>,
}

/// `rules[].retry`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpRouteRetry {
    /// Status codes retried.
    pub codes: Vec<u32>,
    /// Attempts (default 2).
    pub attempts: Option<u32>,
    /// Wait between attempts (Gateway API duration).
    pub backoff: Option<String>,
}
