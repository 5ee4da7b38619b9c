//! The indexes a [`PushContext`](super::PushContext) is made of.
//!
//! Each index is built from a [`StoreSnapshot`](crate::model::StoreSnapshot)
//! and held behind its own `Arc`, so `PushContext::next` can share every index
//! a change did not touch with the previous snapshot.

pub mod ambient;
pub mod authorization;
mod delegation;
mod endpoints;
pub mod envoy_filter;
pub mod gateway_api;
pub mod ingress;
pub mod networks;
pub mod peer_authentication;
pub mod request_authentication;
mod rules;
pub mod secrets;
mod services;
pub mod telemetry;
pub mod trust_domain;
mod workloads;

pub use authorization::{AppliedPolicy, AuthorizationIndex};
pub use endpoints::EndpointIndex;
pub use gateway_api::GatewayApiIndex;
pub use ingress::IngressIndex;
pub use networks::NetworkIndex;
pub use peer_authentication::{PeerAuthenticationIndex, WorkloadMtls};
pub use request_authentication::{RequestAuthenticationIndex, ResolvedJwtRule};
pub use rules::{
    DestinationRuleIndex, GatewayIndex, GatewaySelector, GatewayServer, ResolvedGateway, ResolvedVirtualService,
    RouteSemantics, SidecarIndex, VirtualServiceIndex, resolve_gateway_ref,
};
pub use secrets::SecretIndex;
pub use services::ServiceIndex;
pub use telemetry::{AccessLogger, AppliedTelemetry, LogFormat, TelemetryIndex};
pub use workloads::{Workload, WorkloadIndex};
