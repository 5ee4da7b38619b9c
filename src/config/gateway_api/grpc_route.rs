//! `GRPCRoute`: gRPC routing rules attached to Gateways (and, for mesh
//! routing, to Services), matched on the gRPC service and method.

use serde::{Deserialize, Serialize};

use super::{BackendObjectReference, HttpHeaderFilter, HttpRequestMirrorFilter, ParentReference};
use crate::config::ObjectMeta;

/// `GRPCRoute`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GrpcRoute {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: GrpcRouteSpec,
}

/// `GRPCRoute.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GrpcRouteSpec {
    /// Where the route attaches.
    pub parent_refs: Vec<ParentReference>,
    /// The hosts it routes (none: every host its listeners take).
    pub hostnames: Vec<String>,
    /// The rules.
    pub rules: Vec<GrpcRouteRule>,
}

/// One rule.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GrpcRouteRule {
    /// A name for the rule (the Envoy route's name).
    pub name: Option<String>,
    /// Conditions, any of which selects the rule (none: every request).
    pub matches: Vec<GrpcRouteMatch>,
    /// Filters applied to the request or response.
    pub filters: Vec<GrpcRouteFilter>,
    /// Where requests go, by weight.
    pub backend_refs: Vec<GrpcBackendRef>,
}

/// One match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GrpcRouteMatch {
    /// The service and method (none: every method).
    pub method: Option<GrpcMethodMatch>,
    /// Headers (metadata) that must all match.
    pub headers: Vec<GrpcHeaderMatch>,
}

/// A method match: the request path is `/SERVICE/METHOD`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GrpcMethodMatch {
    /// `Exact` (the default) or `RegularExpression`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// The fully qualified service (any when absent).
    pub service: Option<String>,
    /// The method (any when absent).
    pub method: Option<String>,
}

impl GrpcMethodMatch {
    /// The match type, with the API's default.
    pub fn kind(&self) -> &str {
        self.kind.as_deref().unwrap_or("Exact")
    }
}

/// A header match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GrpcHeaderMatch {
    /// `Exact` (the default) or `RegularExpression`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// The header name (case-insensitive).
    pub name: String,
    /// The value.
    pub value: String,
}

/// One filter.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GrpcRouteFilter {
    /// `RequestHeaderModifier`, `ResponseHeaderModifier`, `RequestMirror`
    /// or `ExtensionRef`.
    #[serde(rename = "type")]
    pub kind: String,
    /// With `RequestHeaderModifier`.
    pub request_header_modifier: Option<HttpHeaderFilter>,
    /// With `ResponseHeaderModifier`.
    pub response_header_modifier: Option<HttpHeaderFilter>,
    /// With `RequestMirror`.
    pub request_mirror: Option<HttpRequestMirrorFilter>,
}

/// A weighted backend of a rule.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GrpcBackendRef {
    /// The backend.
    #[serde(flatten)]
    pub backend: BackendObjectReference,
    /// Its share (default 1; 0 sends it nothing).
    pub weight: Option<u32>,
    /// Filters applied to requests sent to this backend.
    pub filters: Vec<GrpcRouteFilter>,
}
