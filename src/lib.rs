//! meshpush: an xDS control plane for Envoy service meshes.
//!
//! Data flows one way: [`source`] → [`model::ConfigStore`] → [`push::Debouncer`]
//! → [`engine::PushEngine`] (publishes [`push::PushContext`]) → [`generate`]
//! (cached, pre-encoded) → [`xds`] streams; [`ca`] is the mesh's certificate
//! authority and secures the port those streams come on. The modules are layered along
//! that flow, base types ([`resource`], [`text`]) at the bottom, and no module uses
//! one above it; ARCHITECTURE.md at the repository root walks through both.

pub mod admin;
pub mod admission;
pub mod agent;
pub mod bootstrap;
pub mod ca;
pub mod capture;
pub mod cli;
pub mod config;
pub mod engine;
pub mod envoy_api;
pub mod generate;
pub mod inject;
pub mod istio_api;
pub mod metrics;
pub mod model;
pub mod os;
pub mod push;
pub mod resource;
pub mod serve;
pub mod source;
pub mod testing;
pub mod text;
pub mod workload_api;
pub mod xds;
