//! `TCPRoute` and `TLSRoute`: routes of connections rather than requests.
//! A TCPRoute forwards every connection of a TCP listener (or of a TLS
//! listener that terminates TLS); a TLSRoute picks backends by the SNI of
//! connections a TLS listener passes through.

use serde::{Deserialize, Serialize};

use super::{BackendObjectReference, ParentReference};
use crate::config::ObjectMeta;

/// `TCPRoute`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TcpRoute {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: TcpRouteSpec,
}

/// `TCPRoute.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TcpRouteSpec {
    /// Where the route attaches.
    pub parent_refs: Vec<ParentReference>,
    /// The rules (the API takes one or more; only the first is used, as
    /// Istio uses it, since a connection has nothing to match on).
    pub rules: Vec<StreamRouteRule>,
}

/// `TLSRoute`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TlsRoute {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: TlsRouteSpec,
}

/// `TLSRoute.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TlsRouteSpec {
    /// Where the route attaches.
    pub parent_refs: Vec<ParentReference>,
    /// The SNI names it routes (none: every name its listeners take).
    pub hostnames: Vec<String>,
    /// The rules.
    pub rules: Vec<StreamRouteRule>,
}

/// One rule of a TCPRoute or TLSRoute.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct StreamRouteRule {
    /// A name for the rule, for policies and status to refer to. It routes
    /// nothing: Istio's TCP and TLS routes have no name to carry it, so it
    /// is kept without a report, as Istio keeps it.
    pub name: Option<String>,
    /// Where connections go, by weight.
    pub backend_refs: Vec<BackendRef>,
}

/// A weighted backend.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BackendRef {
    /// The backend.
    #[serde(flatten)]
    pub backend: BackendObjectReference,
    /// Its share (default 1; 0 sends it nothing).
    pub weight: Option<u32>,
}
