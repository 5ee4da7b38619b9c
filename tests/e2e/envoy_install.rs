//! Smoke tests for the Envoy the end-to-end tests rely on, runnable without a
//! meshpush server: the installer yields a working Envoy 1.40, and that Envoy
//! accepts the bootstrap `meshpush::bootstrap::render` produces — node, metadata,
//! the `xds-grpc` cluster — and dials the xDS address over HTTP/2.

use crate::support;

use std::io::{ErrorKind, Read};
use std::net::{Ipv4Addr, TcpListener};
use std::process::Command;
use std::time::{Duration, Instant};

use meshpush::bootstrap::{BootstrapOptions, XDS_CLUSTER};
use serde_json::Value;
use support::envoy::{Envoy, envoy_binary};
use support::process::{free_port, wait_until};

const NODE_ID: &str = "sidecar~127.0.0.20~productpage-v1.default~default.svc.cluster.local";

/// What every HTTP/2 client sends first.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn sidecar_options(xds_port: u16, delta: bool) -> BootstrapOptions {
    let mut opts = BootstrapOptions::new(NODE_ID, format!("127.0.0.1:{xds_port}"));
    opts.admin_port = free_port();
    opts.labels = [("app".into(), "productpage".into()), ("version".into(), "v1".into())].into();
    opts.meta.insert("CLUSTER_ID".into(), "Kubernetes".into());
    opts.interception = "NONE".into();
    opts.delta = delta;
    opts
}

#[test]
fn installed_envoy_is_version_1_40() {
    let out = Command::new(envoy_binary()).arg("--version").output().expect("run envoy --version");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "envoy --version failed: {}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("/1.40."), "expected Envoy 1.40, got {text:?}");
}

/// Envoy starts from the rendered bootstrap, reports our node and metadata, and
/// dials the configured xDS address speaking HTTP/2. Nothing answers there, which
/// is fine: the bootstrap alone must be accepted.
fn envoy_accepts_bootstrap_and_dials_xds(delta: bool) {
    let xds = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a stand-in xDS port");
    xds.set_nonblocking(true).expect("nonblocking listener");
    let opts = sidecar_options(xds.local_addr().unwrap().port(), delta);
    let envoy = Envoy::start(&opts);

    let bootstrap = envoy.config_section("BootstrapConfigDump");
    let node = &bootstrap["bootstrap"]["node"];
    assert_eq!(node["id"], NODE_ID, "config_dump bootstrap: {bootstrap:#}");
    assert_eq!(node["cluster"], "productpage.default");
    assert_eq!(node["metadata"]["NAMESPACE"], "default");
    assert_eq!(node["metadata"]["INTERCEPTION_MODE"], "NONE");
    assert_eq!(node["metadata"]["LABELS"]["version"], "v1");
    assert_eq!(node["metadata"]["CLUSTER_ID"], "Kubernetes");
    let api_type = &bootstrap["bootstrap"]["dynamic_resources"]["ads_config"]["api_type"];
    assert_eq!(api_type, if delta { "DELTA_GRPC" } else { "GRPC" });

    let clusters = envoy.config_section("ClustersConfigDump");
    let statics: Vec<&Value> = clusters["static_clusters"].as_array().into_iter().flatten().collect();
    assert!(
        statics.iter().any(|c| c["cluster"]["name"] == XDS_CLUSTER),
        "no static {XDS_CLUSTER} cluster in {clusters:#}"
    );

    // The ADS stream must reach the configured address, as HTTP/2.
    let mut preface = Vec::new();
    wait_until(Instant::now() + Duration::from_secs(10), "Envoy to dial the xDS address", &[envoy.process()], || {
        match xds.accept() {
            Ok((mut conn, _)) => {
                conn.set_nonblocking(false).unwrap();
                conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                preface.resize(H2_PREFACE.len(), 0);
                conn.read_exact(&mut preface).is_ok()
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => false,
            Err(e) => panic!("accept on the stand-in xDS port: {e}"),
        }
    });
    assert_eq!(preface, H2_PREFACE, "Envoy's xDS connection does not start with the HTTP/2 preface");

    // The bootstrap was accepted without complaint.
    let log = envoy.log_tail(400);
    assert!(!log.contains("[critical]"), "Envoy logged critical errors:\n{log}");
}

#[test]
fn envoy_accepts_the_sotw_bootstrap_and_dials_xds_over_http2() {
    envoy_accepts_bootstrap_and_dials_xds(false);
}

#[test]
fn envoy_accepts_the_delta_bootstrap_and_dials_xds_over_http2() {
    envoy_accepts_bootstrap_and_dials_xds(true);
}
