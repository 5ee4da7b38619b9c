//! Helpers for meshpush's own tests and benches, not part of the server.
//!
//! Compiled in every build of the library, so that the crate's unit tests,
//! integration tests, benches and examples all reach it without a feature.
//! The server calls none of it, so none of it is linked into the
//! `meshpush` binary. (It was behind a feature the package turned on for
//! itself as a dev-dependency; that made the library's unit tests wait for
//! a whole build of the library before their own could start.)
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
