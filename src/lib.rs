//! meshpush: an xDS control plane for Envoy service meshes.
//!
//! Data flows one way: [`source`] → [`model::ConfigStore`] → [`push::Debouncer`]
//! → [`push::PushContext`] → [`gen`] (cached, pre-encoded) → [`xds`] streams.
//! ARCHITECTURE.md at the repository root walks through it.

pub mod config;
pub mod model;
