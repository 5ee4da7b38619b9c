//! The Telemetry API on a real Envoy with real traffic: an access log CEL
//! filter logs only the requests it matches; a mode names the side that
//! logs (a client sidecar logs under CLIENT, not under SERVER); `disabled`
//! turns a logger off; a Zipkin provider reports spans to a collector on
//! loopback (Zipkin v2 JSON), with the Telemetry's custom tags and Istio's
//! own, at 100 % sampling, and none at 0 %.
//!
//! Service ports 18311 and 18312, addresses 127.0.182.0/24; the collector is
//! `zipkin.istio-system` at 127.0.182.20:9411.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support;
use support::envoy::{Envoy, Section};
use support::manifests::{docs, pod, service, sidecar_node};
use support::meshpush::Meshpush;
use support::process::wait_until;
use support::scene::Scene;
use support::traffic::Request;
use support::zipkin::Collector;

/// The two tests run in parallel: each has its port, backend and client.
const LOG_PORT: u16 = 18311;
const TRACE_PORT: u16 = 18312;
const CONVERGE: Duration = Duration::from_secs(15);

const MESH_CONFIG: &str = "extensionProviders:
- name: zipkin
  zipkin:
    service: zipkin.istio-system.svc.cluster.local
    port: 9411
";

fn outbound(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// `web` in `shop` on `port` (backend `web-1` at 127.0.182.`host`), the
/// Zipkin collector's Service, a NONE-mode client sidecar (127.0.182.`host`+10),
/// and meshpush reading `mesh_file`.
fn scene(mesh_file: &Path, port: u16, host: u8) -> Scene {
    let backend = format!("127.0.182.{host}");
    let mesh = docs(&[
        service("shop", "web", port),
        pod("shop", "web-1", &backend, &[("app", "web")], port),
        service("istio-system", "zipkin", 9411),
        pod("istio-system", "zipkin-1", "127.0.182.20", &[("app", "zipkin")], 9411),
    ]);
    let flag = mesh_file.display().to_string();
    let mut scene = Scene::start_with(&[("mesh.yaml", &mesh)], &[("web-1", &format!("{backend}:{port}"))], |dir| {
        Meshpush::start_with_flags(dir, &["--mesh-config", &flag])
    });
    let client = format!("127.0.182.{}", host + 10);
    let opts = scene.sidecar(&sidecar_node(&client, "client", "shop"), &[("app", "client")]);
    scene.add_envoy("client", &opts);
    let probe = Request::new(outbound(port), "web");
    scene.wait(CONVERGE, "web to be answered through the sidecar", Section::Routes, || probe.send().map(drop));
    scene
}

fn telemetry(namespace: &str, spec: &str) -> String {
    format!(
        "apiVersion: telemetry.istio.io/v1\nkind: Telemetry\nmetadata: {{name: t, namespace: {namespace}}}\nspec:\n{spec}"
    )
}

/// The access log lines Envoy wrote for requests whose path starts with `prefix`.
fn logged(envoy: &Envoy, prefix: &str) -> Vec<String> {
    let log = std::fs::read_to_string(envoy.process().log_path()).unwrap_or_default();
    log.lines().filter(|l| l.contains(&format!("\"GET {prefix}")) && !l.contains("][")).map(str::to_string).collect()
}

/// The outbound connection manager of the client on `port`, as Envoy holds it.
fn connection_manager(envoy: &Envoy, port: u16) -> Value {
    let listeners = envoy.section(Section::Listeners);
    let all = listeners["dynamic_listeners"].as_array().cloned().unwrap_or_default();
    let ours = all.iter().find(|l| l["name"] == format!("0.0.0.0_{port}")).cloned().unwrap_or(Value::Null);
    ours["active_state"]["listener"]["filter_chains"][0]["filters"][0]["typed_config"].clone()
}

/// Waits until Envoy's connection manager on `port` satisfies `check`.
fn wait_for_config(scene: &Scene, port: u16, what: &str, check: impl Fn(&Value) -> bool) {
    let envoy = scene.envoy("client");
    scene.wait(CONVERGE, what, Section::Listeners, || {
        let hcm = connection_manager(envoy, port);
        if check(&hcm) { Ok(()) } else { Err(hcm.to_string()) }
    });
}

fn send(port: u16, path: &str) {
    assert_eq!(Request::new(outbound(port), "web").path(path).send().unwrap(), "web-1", "{path}");
}

#[test]
fn a_cel_filter_logs_only_what_it_matches_and_mode_and_disabled_choose_what_logs() {
    let dir = tempfile::TempDir::new().unwrap();
    let mesh_file = dir.path().join("mesh");
    std::fs::write(&mesh_file, MESH_CONFIG).unwrap();
    let scene = scene(&mesh_file, LOG_PORT, 2);
    let envoy = scene.envoy("client");
    let has_logger = |hcm: &Value| hcm["access_log"].as_array().is_some_and(|l| !l.is_empty());

    scene.dir().write(
        "telemetry.yaml",
        &telemetry(
            "shop",
            "  accessLogging:\n  - providers: [{name: envoy}]\n    filter: {expression: \"request.path.startsWith('/keep')\"}",
        ),
    );
    wait_for_config(&scene, LOG_PORT, "the filtered logger", has_logger);
    for path in ["/drop/1", "/keep/1", "/drop/2", "/keep/2"] {
        send(LOG_PORT, path);
    }
    wait_until(Instant::now() + Duration::from_secs(10), "both kept requests logged", &[envoy.process()], || {
        let n = logged(envoy, "/keep/").len();
        if n == 2 { Ok(()) } else { Err(format!("{n} lines")) }
    });
    // Entries are written in order: the dropped ones, sent between, are not there.
    assert_eq!(logged(envoy, "/drop/"), Vec::<String>::new());

    // SERVER names the inbound side: the client sidecar's outbound logs nothing.
    scene.dir().write(
        "telemetry.yaml",
        &telemetry("shop", "  accessLogging:\n  - providers: [{name: envoy}]\n    match: {mode: SERVER}"),
    );
    wait_for_config(&scene, LOG_PORT, "no outbound logger under SERVER", |hcm| hcm.is_object() && !has_logger(hcm));
    // CLIENT names it: every request is logged.
    scene.dir().write(
        "telemetry.yaml",
        &telemetry("shop", "  accessLogging:\n  - providers: [{name: envoy}]\n    match: {mode: CLIENT}"),
    );
    wait_for_config(&scene, LOG_PORT, "the outbound logger under CLIENT", has_logger);
    send(LOG_PORT, "/client/1");
    wait_until(Instant::now() + Duration::from_secs(10), "the CLIENT request logged", &[envoy.process()], || {
        if logged(envoy, "/client/").len() == 1 { Ok(()) } else { Err("not yet".to_string()) }
    });
    // Disabled: no logger at all.
    scene.dir().write(
        "telemetry.yaml",
        &telemetry("shop", "  accessLogging:\n  - providers: [{name: envoy}]\n    disabled: true"),
    );
    wait_for_config(&scene, LOG_PORT, "the logger disabled", |hcm| hcm.is_object() && !has_logger(hcm));
    scene.assert_nothing_rejected();
}

#[test]
fn a_zipkin_provider_reports_spans_with_custom_tags_at_full_sampling_and_none_at_zero() {
    let collector = Collector::start(SocketAddr::from(([127, 0, 182, 20], 9411)));
    let dir = tempfile::TempDir::new().unwrap();
    let mesh_file = dir.path().join("mesh");
    std::fs::write(&mesh_file, MESH_CONFIG).unwrap();
    let scene = scene(&mesh_file, TRACE_PORT, 3);
    let envoy = scene.envoy("client");
    let tracing = |sampling: u32| {
        telemetry(
            "istio-system",
            &format!(
                "  tracing:\n  - providers: [{{name: zipkin}}]\n    randomSamplingPercentage: {sampling}\n    \
                 customTags:\n      team: {{literal: {{value: shop-team}}}}"
            ),
        )
    };
    scene.dir().write("telemetry.yaml", &tracing(100));
    wait_for_config(&scene, TRACE_PORT, "the Zipkin tracer at 100 %", |hcm| {
        hcm["tracing"]["random_sampling"]["value"] == 100.0
    });
    for i in 0..5 {
        send(TRACE_PORT, &format!("/traced/{i}"));
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    wait_until(deadline, "five spans at the collector", &[envoy.process()], || {
        let traced =
            collector.spans().iter().filter(|s| s["tags"]["http.url"].to_string().contains("/traced/")).count();
        if traced >= 5 { Ok(()) } else { Err(format!("{traced} spans: {:?}", collector.spans())) }
    });
    let span = collector.spans().into_iter().find(|s| s["tags"]["http.url"].to_string().contains("/traced/")).unwrap();
    assert_eq!(span["tags"]["team"], "shop-team", "the custom tag: {span}");
    assert_eq!(span["tags"]["istio.namespace"], "shop", "Istio's tag: {span}");
    assert_eq!(span["tags"]["istio.canonical_service"], "unknown", "Istio's default: {span}");
    assert_eq!(span["kind"], "CLIENT", "{span}");

    // 0 %: not one request is sampled (Envoy counts each as not traceable).
    scene.dir().write("telemetry.yaml", &tracing(0));
    wait_for_config(&scene, TRACE_PORT, "the Zipkin tracer at 0 %", |hcm| {
        hcm["tracing"].is_object() && hcm["tracing"]["random_sampling"]["value"].as_f64().unwrap_or(0.0) == 0.0
    });
    let stat = |name: &str| envoy.stat(&format!("http.outbound_0.0.0.0_{TRACE_PORT}.tracing.{name}")).unwrap_or(0);
    let (sampled, not_traced) = (stat("random_sampling"), stat("not_traceable"));
    for i in 0..10 {
        send(TRACE_PORT, &format!("/untraced/{i}"));
    }
    assert_eq!(stat("random_sampling"), sampled, "no request sampled at 0 %");
    assert_eq!(stat("not_traceable"), not_traced + 10, "each request decided untraced");
    scene.assert_nothing_rejected();
}
