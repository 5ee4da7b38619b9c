//! ztunnel's workload API: the messages an ambient-mode control plane
//! serves ztunnel over delta ADS, generated from the `.proto` files
//! vendored unchanged from istio/ztunnel (`proto/ztunnel/`, which says
//! from which commit).
//!
//! - [`workload`] (`istio.workload`): `Address`, each a `Workload` or a
//!   `Service` (`resource::TypeUrl::Address`).
//! - [`security`] (`istio.security`): `Authorization`, an
//!   AuthorizationPolicy (or a PeerAuthentication) as ztunnel enforces it,
//!   (`resource::TypeUrl::Authorization`).
//!
//! The names are ztunnel's: its `Rule` and `Clause` are istiod's `Group`
//! and `Rules`, with the same field numbers, so the bytes are the same.

#![allow(missing_docs)] // generated code; the .proto files document each field.
#![allow(clippy::all)]

/// `istio.workload`: workloads, services and the addresses ztunnel reaches them by.
pub mod workload {
    tonic::include_proto!("istio.workload");
}

/// `istio.security`: authorization policies as ztunnel enforces them.
pub mod security {
    tonic::include_proto!("istio.security");
}
