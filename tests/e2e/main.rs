//! End-to-end tests: the meshpush binary of this build, real Envoy 1.40
//! processes (installed into `.envoy/` when missing), small HTTP backends
//! on loopback, the loadtest harness, headless Chromium. Every process is
//! started with `setsid` and killed with its process group when its guard
//! drops, panics included. `tests/README.md` says what each module covers.

#[path = "../support/mod.rs"]
mod support;

mod access_log;
mod agent;
mod app_probe;
mod bad_input;
mod bookinfo;
mod bookinfo_example;
mod capture;
mod consul;
mod endpoints;
mod envoy_filter;
mod envoy_install;
mod ext_authz;
mod failure;
mod gateway;
mod gateway_api;
mod generated;
mod ingress;
mod istio_manifests;
mod istio_sidecar;
mod jwt;
mod kubernetes;
mod many;
mod mcp;
mod mesh_config;
mod mtls;
mod multi_root;
mod multicluster;
mod operate;
mod proxy_config;
mod proxyless_grpc;
mod redirect;
mod routing;
mod scoping;
mod secure_xds;
mod spiffe_bundle;
mod telemetry;
mod tls_gateway;
mod tls_sidecar;
mod traffic_rules;
mod waypoint;
mod webhook;
mod ztunnel;
mod ztunnel_hbone;
