//! In-process tests of the server: the real ADS service on a loopback port,
//! or its stream task over in-memory channels, against the real engine. The
//! only other processes are the real clients that check the stand-ins
//! (`kubectl`, py-consul). `tests/README.md` says what each module covers.

#[path = "../support/mod.rs"]
mod support;

mod admin_endpoints;
mod ads_delta;
mod ads_protocol;
mod connections;
mod consul;
mod delta_bytes;
mod kube_source;
mod multicluster;
mod push_engine;
mod request_limits;
mod ztunnel;
