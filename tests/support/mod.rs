//! The harness for integration tests that run real processes: Envoy, the meshpush
//! binary, and the HTTP backends traffic ends at.
//!
//! Included by each test binary (`tests/protocol`, `tests/e2e`) with
//! `#[path = "../support/mod.rs"] mod support;`. Every process it starts is
//! owned by a guard that kills its whole process group on drop, panics included;
//! every address it binds is on loopback; every wait has a deadline and fails with
//! the logs of the processes involved.
//!
//! * [`ads_server`]: an in-process ADS server for protocol tests.
//! * [`process`]: [`process::ChildGuard`], free ports, [`process::wait_until`].
//! * [`envoy`]: getting the Envoy binary, and [`envoy::Envoy`] with admin helpers.
//! * [`meshpush`]: [`meshpush::Meshpush`], the real binary serving a config dir.
//! * [`backend`]: [`backend::Backend`], tiny HTTP servers that say who they are.
//! * [`browser`]: headless Chromium, installed on first use, for page tests.
//! * [`isolated`]: a backend and a client inside an isolated Envoy's network namespace.
//! * [`http`]: the minimal HTTP/1.1 client and parser the others share.
//! * [`grpc`]: a gRPC backend that says who it is, and calls through tonic.
//! * [`kube_api`]: a stand-in Kubernetes API server (lists, watches, 410 Gone).
//! * [`traffic`]: requests through Envoy, single or as steady background traffic.
//! * [`agent`]: [`agent::Agent`], `meshpush agent` beside a real Envoy, and SDS streams to it.
//! * [`secure`]: a client of the secure port (TLS channels, CSRs to the CA).
//! * [`tls`]: test CAs and certificates, Secrets holding them, a backend that terminates TLS.
//! * [`dump`]: meshpush's config_dump held against a real Envoy's, resource for resource.
//! * [`conformance`]: the Gateway API conformance suite's HTTP tests, against meshpush and real Envoys.
//! * [`scene`]: one scenario's mesh directory, processes and failure report.
//! * [`manifests`]: the YAML of Services, Pods, Istio rules for scenario meshes.
//! * [`zipkin`]: a Zipkin collector (v2 JSON) that keeps the spans Envoy reports.
//! * [`ext_authz`]: external authorizers (HTTP and gRPC) that decide by a header and count their checks.
//! * [`proxyless`]: gRPC's own xDS client and server (Python grpcio), with their bootstraps.
//! * [`ztunnel`]: a stand-in ztunnel (delta ADS of the workload API, as ztunnel speaks it), and the real one's binary.

// Each test binary uses a different part of the harness.
#![allow(dead_code)]

pub mod ads_server;
pub mod agent;
pub mod backend;
pub mod browser;
pub mod conformance;
pub mod dump;
pub mod envoy;
pub mod ext_authz;
pub mod grpc;
pub mod http;
pub mod https;
pub mod isolated;
pub mod kube_api;
pub mod manifests;
pub mod meshpush;
pub mod netns;
pub mod process;
pub mod proxyless;
pub mod scene;
pub mod secure;
pub mod tls;
pub mod traffic;
pub mod zipkin;
pub mod ztunnel;
