//! Istio's ProxyConfig on a real Envoy: a tracer it names becomes the
//! bootstrap's, and with `enableTracing` (Istio's default) every connection
//! manager of that proxy traces with it where no Telemetry configures
//! tracing — the spans reach a Zipkin collector on loopback with the
//! ProxyConfig's sampling and custom tags; `enableTracing: false` in the
//! mesh config turns it off. And `meshpush agent` runs Envoy by the
//! ProxyConfig it layers from the mesh config and the pod's annotation.
//!
//! Service port 18313, addresses 127.0.182.4 (web), .14 (client) and .40
//! (the collector).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use meshpush::config::mesh::proxy_config::ProxyConfig;
use serde_json::Value;

use crate::support;
use support::envoy::Section;
use support::manifests::{docs, pod, service, sidecar_node};
use support::meshpush::Meshpush;
use support::process::wait_until;
use support::scene::Scene;
use support::traffic::Request;
use support::zipkin::Collector;

const PORT: u16 = 18313;
const CONVERGE: Duration = Duration::from_secs(15);

/// The client's outbound connection manager's `tracing`, as Envoy holds it.
fn tracing_block(scene: &Scene) -> Value {
    let listeners = scene.envoy("client").section(Section::Listeners);
    let all = listeners["dynamic_listeners"].as_array().cloned().unwrap_or_default();
    let ours = all.iter().find(|l| l["name"] == format!("0.0.0.0_{PORT}")).cloned().unwrap_or(Value::Null);
    ours["active_state"]["listener"]["filter_chains"][0]["filters"][0]["typed_config"]["tracing"].clone()
}

#[test]
fn a_proxy_config_tracer_traces_where_no_telemetry_does_until_enable_tracing_is_off() {
    let collector = Collector::start(SocketAddr::from(([127, 0, 182, 40], 9411)));
    let dir = tempfile::TempDir::new().unwrap();
    let mesh_file = dir.path().join("mesh");
    std::fs::write(&mesh_file, "accessLogFile: ''\n").unwrap();
    let mesh = docs(&[service("shop", "web", PORT), pod("shop", "web-1", "127.0.182.4", &[("app", "web")], PORT)]);
    let flag = mesh_file.display().to_string();
    let mut scene = Scene::start_with(&[("mesh.yaml", &mesh)], &[("web-1", &format!("127.0.182.4:{PORT}"))], |dir| {
        Meshpush::start_with_flags(dir, &["--mesh-config", &flag])
    });
    let mut opts = scene.sidecar(&sidecar_node("127.0.182.14", "client", "shop"), &[("app", "client")]);
    let (config, unmodelled) = ProxyConfig::parse(
        "test",
        "tracing:\n  zipkin: {address: '127.0.182.40:9411'}\n  sampling: 100\n  \
         customTags: {team: {literal: {value: shop-team}}}\n",
    )
    .unwrap();
    assert!(unmodelled.is_empty());
    opts.proxy_config = Some(config);
    scene.add_envoy("client", &opts);
    let probe = Request::new(SocketAddr::from(([127, 0, 0, 1], PORT)), "web");
    scene.wait(CONVERGE, "web answered through the sidecar", Section::Routes, || probe.send().map(drop));

    let block = tracing_block(&scene);
    assert!(block.is_object(), "Istio's legacy tracing block: {block}");
    assert!(block.get("provider").is_none(), "it names no provider: the bootstrap's tracer traces: {block}");
    assert_eq!(block["random_sampling"]["value"], 100.0, "the ProxyConfig's sampling");
    for i in 0..3 {
        assert_eq!(probe.clone().path(&format!("/legacy/{i}")).send().unwrap(), "web-1");
    }
    let envoy = scene.envoy("client");
    wait_until(Instant::now() + Duration::from_secs(20), "three spans at the collector", &[envoy.process()], || {
        let n = collector.spans().iter().filter(|s| s["tags"]["http.url"].to_string().contains("/legacy/")).count();
        if n >= 3 { Ok(()) } else { Err(format!("{n} spans: {:?}", collector.spans())) }
    });
    let span = collector.spans().into_iter().find(|s| s["tags"]["http.url"].to_string().contains("/legacy/")).unwrap();
    assert_eq!(span["tags"]["team"], "shop-team", "the ProxyConfig's custom tag: {span}");
    assert_eq!(span["tags"]["istio.namespace"], "shop", "Istio's own tag: {span}");
    assert_eq!(span["localEndpoint"]["serviceName"], "client.shop", "the bootstrap tracer's service: {span}");

    // The mesh config turns the legacy path off: no tracing block, no span.
    std::fs::write(&mesh_file, "enableTracing: false\n").unwrap();
    scene.wait(CONVERGE, "the tracing block gone", Section::Listeners, || {
        let block = tracing_block(&scene);
        if block.is_null() { Ok(()) } else { Err(block.to_string()) }
    });
    let sampled = || envoy.stat(&format!("http.outbound_0.0.0.0_{PORT}.tracing.random_sampling")).unwrap_or(0);
    let before = sampled();
    for i in 0..3 {
        assert_eq!(probe.clone().path(&format!("/off/{i}")).send().unwrap(), "web-1");
    }
    assert_eq!(sampled(), before, "no request is sampled without the tracing block");
    scene.assert_nothing_rejected();
}
