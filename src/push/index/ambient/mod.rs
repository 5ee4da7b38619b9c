//! What ambient mode's ztunnel is served, as istiod's ambient index
//! derives it (`pilot/pkg/serviceregistry/ambient`): the mesh's
//! AuthorizationPolicies and PeerAuthentications as
//! `istio.security.Authorization`s.
//!
//! - [`policy`]: an AuthorizationPolicy, its L4 parts only, with what
//!   ztunnel leaves out reported;
//! - [`peer_mtls`]: PeerAuthentications as DENY policies on connections
//!   without a peer identity, and which of them a workload names.

pub mod peer_mtls;
pub mod policy;

#[cfg(test)]
mod test;
