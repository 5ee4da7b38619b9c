//! Helpers for meshpush's own tests and benches, not part of the server.
//!
//! Compiled for the crate's unit tests and, through the `testing` feature,
//! for its integration tests, benches and examples (the package enables
//! the feature for itself as a dev-dependency); a build of the server
//! never has them.
//!
//! * [`bookinfo`]: the bundled example mesh, in a store.
//! * [`synth`]: synthetic meshes of any size.
//! * [`memory`]: in-memory ADS clients that drive the server's own stream task.
//! * [`wait`]: the one way a test waits for a condition, with a deadline.
//! * `certs` (unit tests only): fresh certificates and Secrets.
//! * [`https`]: an HTTPS server of an axum app, for what meshpush fetches or probes.
//! * [`mcp`]: a stand-in MCP-over-xDS server.
//! * [`consul`]: a stand-in Consul server (its catalog API, blocking queries).
//!
//! This module sits outside the layers: it may use any of them, and only
//! test code uses it.

pub mod bookinfo;
#[cfg(test)]
pub mod certs;
pub mod consul;
pub mod https;
pub mod mcp;
pub mod memory;
pub mod synth;
pub mod wait;
