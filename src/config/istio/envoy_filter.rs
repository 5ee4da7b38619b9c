//! `EnvoyFilter` (`networking.istio.io/v1alpha3`): patches to the Envoy
//! configuration generated for the proxies it selects — Istio's escape
//! hatch for what its API does not model (Lua, rate limits, ext_proc,
//! connection manager settings, extra clusters).
//!
//! This module is the object as written: its selection, its patches, what
//! each patch matches, and the patch value as the JSON it was written in.
//! The value is read as an Envoy message through `envoy_api` when the
//! object is validated and when it is indexed; how the patches select
//! proxies and apply is `push::index::envoy_filter` and
//! `generate::envoy_filter`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{TargetRef, WorkloadSelector};
use crate::config::ObjectMeta;

/// Istio EnvoyFilter.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EnvoyFilter {
    /// Metadata (its creation time orders filters of equal priority).
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: EnvoyFilterSpec,
}

/// `EnvoyFilter.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EnvoyFilterSpec {
    /// The workloads of its namespace (of the mesh, in the root namespace)
    /// it applies to; absent: all of them.
    pub workload_selector: Option<WorkloadSelector>,
    /// The Gateway API gateways (or, from the root namespace, the
    /// `istio-waypoint` GatewayClass) it applies to, instead of a selector.
    pub target_refs: Vec<TargetRef>,
    /// The patches, applied in this order.
    pub config_patches: Vec<ConfigPatch>,
    /// Lower first; root-namespace filters first among equals, then by
    /// creation time and name.
    pub priority: i32,
}

/// What a patch applies to (`EnvoyFilter.ApplyTo`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ApplyTo {
    /// Unset: refused by validation.
    #[default]
    Invalid,
    /// A listener.
    Listener,
    /// A listener's filter chain.
    FilterChain,
    /// A network filter of a chain.
    NetworkFilter,
    /// An HTTP filter of a connection manager.
    HttpFilter,
    /// A route configuration.
    RouteConfiguration,
    /// A virtual host of a route configuration.
    VirtualHost,
    /// A route of a virtual host.
    HttpRoute,
    /// A cluster.
    Cluster,
    /// An extension config served over ECDS.
    ExtensionConfig,
    /// The bootstrap (which istiod no longer delivers).
    Bootstrap,
    /// A listener filter.
    ListenerFilter,
}

impl ApplyTo {
    /// Istio's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ApplyTo::Invalid => "INVALID",
            ApplyTo::Listener => "LISTENER",
            ApplyTo::FilterChain => "FILTER_CHAIN",
            ApplyTo::NetworkFilter => "NETWORK_FILTER",
            ApplyTo::HttpFilter => "HTTP_FILTER",
            ApplyTo::RouteConfiguration => "ROUTE_CONFIGURATION",
            ApplyTo::VirtualHost => "VIRTUAL_HOST",
            ApplyTo::HttpRoute => "HTTP_ROUTE",
            ApplyTo::Cluster => "CLUSTER",
            ApplyTo::ExtensionConfig => "EXTENSION_CONFIG",
            ApplyTo::Bootstrap => "BOOTSTRAP",
            ApplyTo::ListenerFilter => "LISTENER_FILTER",
        }
    }

    /// The Envoy message a patch value of this kind is read as.
    pub fn value_type(self) -> Option<&'static str> {
        Some(match self {
            ApplyTo::Invalid => return None,
            ApplyTo::Listener => "envoy.config.listener.v3.Listener",
            ApplyTo::FilterChain => "envoy.config.listener.v3.FilterChain",
            ApplyTo::NetworkFilter => "envoy.config.listener.v3.Filter",
            ApplyTo::HttpFilter => "envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter",
            ApplyTo::RouteConfiguration => "envoy.config.route.v3.RouteConfiguration",
            ApplyTo::VirtualHost => "envoy.config.route.v3.VirtualHost",
            ApplyTo::HttpRoute => "envoy.config.route.v3.Route",
            ApplyTo::Cluster => "envoy.config.cluster.v3.Cluster",
            ApplyTo::ExtensionConfig => "envoy.config.core.v3.TypedExtensionConfig",
            ApplyTo::Bootstrap => "envoy.config.bootstrap.v3.Bootstrap",
            ApplyTo::ListenerFilter => "envoy.config.listener.v3.ListenerFilter",
        })
    }
}

/// One patch: what it applies to, where, and how.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConfigPatch {
    /// The kind of object patched.
    pub apply_to: ApplyTo,
    /// Which objects of that kind; absent: every one, in every context.
    #[serde(rename = "match")]
    pub match_: Option<ObjectMatch>,
    /// The operation and its value.
    pub patch: Option<Patch>,
}

/// Where a patch applies (`EnvoyFilter.PatchContext`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PatchContext {
    /// Everywhere.
    #[default]
    Any,
    /// A sidecar's inbound side.
    SidecarInbound,
    /// A sidecar's outbound side.
    SidecarOutbound,
    /// A gateway.
    Gateway,
    /// A waypoint (istiod generates nothing in this context).
    Waypoint,
}

/// `EnvoyFilter.EnvoyConfigObjectMatch`: at most one object match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ObjectMatch {
    /// The context.
    pub context: PatchContext,
    /// The proxies, by version and metadata.
    pub proxy: Option<ProxyMatch>,
    /// A listener and what is in it.
    pub listener: Option<ListenerMatch>,
    /// A route configuration and what is in it.
    pub route_configuration: Option<RouteConfigurationMatch>,
    /// A cluster.
    pub cluster: Option<ClusterMatch>,
    /// A waypoint's parts (read by no istiod code).
    pub waypoint: Option<WaypointMatch>,
}

/// `EnvoyFilter.ProxyMatch`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ProxyMatch {
    /// A regular expression the node's `ISTIO_VERSION` must match.
    pub proxy_version: String,
    /// Node metadata keys that must hold exactly these strings.
    pub metadata: BTreeMap<String, String>,
}

/// `EnvoyFilter.ListenerMatch`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ListenerMatch {
    /// The listener's port (a chain's destination port on the virtual listeners).
    pub port_number: u32,
    /// Documented "not implemented" by Istio: reported.
    pub port_name: String,
    /// A filter chain and its filters.
    pub filter_chain: Option<FilterChainMatch>,
    /// A listener filter's name.
    pub listener_filter: String,
    /// The listener's name.
    pub name: String,
}

/// `EnvoyFilter.ListenerMatch.FilterChainMatch`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FilterChainMatch {
    /// The chain's name.
    pub name: String,
    /// A server name the chain matches.
    pub sni: String,
    /// The chain's transport protocol (`tls`, `raw_buffer`).
    pub transport_protocol: String,
    /// Comma-separated application protocols the chain must all match.
    pub application_protocols: String,
    /// A network filter, and within a connection manager an HTTP filter.
    pub filter: Option<FilterMatch>,
    /// The chain's destination port.
    pub destination_port: u32,
}

/// `EnvoyFilter.ListenerMatch.FilterMatch`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FilterMatch {
    /// The network filter's name.
    pub name: String,
    /// An HTTP filter of that (connection manager) filter.
    pub sub_filter: Option<SubFilterMatch>,
}

/// `EnvoyFilter.ListenerMatch.SubFilterMatch`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SubFilterMatch {
    /// The HTTP filter's name.
    pub name: String,
}

/// `EnvoyFilter.RouteConfigurationMatch`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RouteConfigurationMatch {
    /// The port the route configuration serves.
    pub port_number: u32,
    /// A gateway server's port name.
    pub port_name: String,
    /// A gateway, as `namespace/name`.
    pub gateway: String,
    /// A virtual host and its routes.
    pub vhost: Option<VirtualHostMatch>,
    /// The route configuration's name.
    pub name: String,
}

/// `EnvoyFilter.RouteConfigurationMatch.VirtualHostMatch`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct VirtualHostMatch {
    /// The virtual host's name.
    pub name: String,
    /// A domain the virtual host serves.
    pub domain_name: String,
    /// A route of it.
    pub route: Option<RouteMatch>,
}

/// `EnvoyFilter.RouteConfigurationMatch.RouteMatch`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RouteMatch {
    /// The route's name.
    pub name: String,
    /// What the route does.
    pub action: RouteAction,
}

/// `EnvoyFilter.RouteConfigurationMatch.RouteMatch.Action`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RouteAction {
    /// Any route.
    #[default]
    Any,
    /// A route to clusters.
    Route,
    /// A redirect.
    Redirect,
    /// A direct response.
    DirectResponse,
}

/// `EnvoyFilter.ClusterMatch`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterMatch {
    /// The service port (the target port, inbound).
    pub port_number: u32,
    /// The service's hostname.
    pub service: String,
    /// The DestinationRule subset.
    pub subset: String,
    /// The cluster's name; when set, the other fields are not read.
    pub name: String,
}

/// `EnvoyFilter.WaypointMatch`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WaypointMatch {
    /// A waypoint port.
    pub port_number: u32,
    /// A route, by name.
    pub route: Option<SubFilterMatch>,
    /// A filter, and an HTTP filter in it.
    pub filter: Option<FilterMatch>,
}

/// `EnvoyFilter.Patch`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Patch {
    /// How the value is applied.
    pub operation: Operation,
    /// The Envoy message (or part of one), in proto3 JSON as written.
    pub value: Option<serde_json::Value>,
    /// Istio ignores it: reported.
    pub filter_class: Option<String>,
}

/// `EnvoyFilter.Patch.Operation`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Operation {
    /// Unset: refused by validation.
    #[default]
    Invalid,
    /// Merge the value into the object.
    Merge,
    /// Add the value to the list of such objects.
    Add,
    /// Remove the object.
    Remove,
    /// Insert before the matched object.
    InsertBefore,
    /// Insert after the matched object.
    InsertAfter,
    /// Insert first.
    InsertFirst,
    /// Replace the object.
    Replace,
    /// Merge, a list in the value replacing the object's list.
    MergeAndReplaceList,
}

impl Operation {
    /// Istio's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Invalid => "INVALID",
            Operation::Merge => "MERGE",
            Operation::Add => "ADD",
            Operation::Remove => "REMOVE",
            Operation::InsertBefore => "INSERT_BEFORE",
            Operation::InsertAfter => "INSERT_AFTER",
            Operation::InsertFirst => "INSERT_FIRST",
            Operation::Replace => "REPLACE",
            Operation::MergeAndReplaceList => "MERGE_AND_REPLACE_LIST",
        }
    }
}
