//! Simulated Envoys for meshpush (or any xDS server): convergence, CPU and
//! memory under load.
//!
//! Role: this crate sizes the control plane. It starts meshpush on a
//! generated mesh (or reaches a server already running), opens thousands of
//! ADS streams that behave like Envoy 1.40 on the wire ([`ads`]; SotW by
//! default, delta xDS with `--delta`; Envoy's HTTP/2 windows and 16 KB DATA
//! frames, `frames`; gRPC framing without per-stream codec buffers, `grpc`), makes
//! changes through meshpush's registry API ([`registry`]), as edits of the
//! config directory of the meshpush it started, or with a trigger command,
//! and measures how long each change takes to reach each stream that
//! should see it ([`track`]), plus the server's CPU and memory
//! ([`server`]). [`scenario`] holds the scenarios, [`run()`] carries one
//! out, [`report`] makes the table, JSON and plot.
//!
//! Invariants: it only talks to loopback addresses; every wait is bounded
//! and the run stops by itself; it never takes a shortcut a real Envoy would
//! not (the node on each stream's first request, as from an Envoy that
//! Istio bootstraps, or on every request with `--node-every-request`; full
//! `resource_names` on every SotW request; every response ACKed; an HTTP/2
//! connection per Envoy unless `--streams-per-connection` or the open-file
//! limit says otherwise; a failed stream opened again after Envoy's backoff,
//! saying what it holds).

pub mod ads;
mod delta;
mod deps;
mod envoy;
pub mod fleet;
mod frames;
mod grpc;
mod held;
pub mod mesh;
pub mod registry;
pub mod report;
mod run;
pub mod scenario;
pub mod server;
mod sotw;
pub mod track;
mod wire;

#[cfg(test)]
mod test;

pub use fleet::{NodeSending, Protocol};
pub use registry::ChangesVia;
pub use report::Report;
pub use run::run;
pub use scenario::{ExpectSpec, Options, Scenario};
