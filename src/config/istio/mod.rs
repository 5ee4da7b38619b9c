//! Istio's `networking.istio.io` kinds (v1, v1beta1 and v1alpha3 share one
//! shape) and `security.istio.io` kinds (v1 and v1beta1).
//!
//! Field names follow Istio's YAML exactly (camelCase), so existing manifests
//! parse unchanged. Matching fields Istio has but meshpush does not act on are
//! accepted and reported as ignored by the parser.

pub mod api;
mod authorization_policy;
mod destination_rule;
pub mod envoy_filter;
mod gateway;
mod peer_authentication;
mod proxy_config;
mod request_authentication;
mod service_entry;
mod sidecar;
mod telemetry;
mod virtual_service;

pub use authorization_policy::*;
pub use destination_rule::*;
pub use envoy_filter::EnvoyFilter;
pub use gateway::*;
pub use peer_authentication::*;
pub use proxy_config::*;
pub use request_authentication::*;
pub use service_entry::*;
pub use sidecar::*;
pub use telemetry::*;
pub use virtual_service::*;

/// The `exportTo` value meaning "every namespace".
pub const EXPORT_ALL: &str = "*";
/// The `exportTo` value meaning "only the object's own namespace".
pub const EXPORT_SAME_NAMESPACE: &str = ".";
/// The reserved gateway name for sidecars.
pub const MESH_GATEWAY: &str = "mesh";
