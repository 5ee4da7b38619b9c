//! Access logs as the mesh config sets them, written by a real Envoy for
//! real requests: Istio's demo profile (`accessLogFile: /dev/stdout`)
//! gives one line per request in Istio's default format on the proxy's
//! output, and an edit to JSON encoding reaches the running Envoy within a
//! second.
//!
//! The demo profile's mesh config is Istio's own file
//! (`tests/data/istio/manifests/helm-profiles/demo.yaml`, its `meshConfig`).

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

const PORT: u16 = 18301;
const CONVERGE: Duration = Duration::from_secs(15);
const CLUSTER: &str = "outbound|18301||web.shop.svc.cluster.local";

/// The `meshConfig` of Istio's demo profile, as the `mesh` file istiod reads.
fn demo_profile_mesh_config() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/istio/manifests/helm-profiles/demo.yaml");
    let values: serde_yaml_ng::Value = serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    serde_yaml_ng::to_string(&values["meshConfig"]).unwrap()
}

/// The lines of Envoy's output that are access log entries of requests for `path_prefix`.
fn entries(envoy: &Envoy, path_prefix: &str) -> Vec<String> {
    let log = std::fs::read_to_string(envoy.process().log_path()).unwrap_or_default();
    log.lines().filter(|l| l.contains(path_prefix) && !l.contains("][")).map(str::to_string).collect()
}

/// A scene of one service `web` (backend `web-1`) and a NONE-mode client
/// sidecar, meshpush reading the mesh config file `mesh_file`.
fn scene(mesh_file: &Path) -> Scene {
    let mesh = docs(&[service("shop", "web", PORT), pod("shop", "web-1", "127.0.181.2", &[("app", "web")], PORT)]);
    let flag = mesh_file.display().to_string();
    let mut scene = Scene::start_with(&[("mesh.yaml", &mesh)], &[("web-1", "127.0.181.2:18301")], |dir| {
        Meshpush::start_with_flags(dir, &["--mesh-config", &flag])
    });
    let opts = scene.sidecar(&sidecar_node("127.0.181.9", "client", "shop"), &[("app", "client")]);
    scene.add_envoy("client", &opts);
    let probe = Request::new(outbound(), "web");
    scene.wait(CONVERGE, "web to be answered through the sidecar", Section::Routes, || probe.send().map(drop));
    scene
}

fn outbound() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], PORT))
}

#[test]
fn the_demo_profile_logs_each_request_once_in_istios_format_and_an_edit_reaches_envoy_within_a_second() {
    let dir = tempfile::TempDir::new().unwrap();
    let mesh_file = dir.path().join("mesh");
    let demo = demo_profile_mesh_config();
    assert!(demo.contains("accessLogFile: /dev/stdout"), "{demo}");
    std::fs::write(&mesh_file, &demo).unwrap();
    let scene = scene(&mesh_file);
    let envoy = scene.envoy("client");

    for i in 0..5 {
        let request =
            Request::new(outbound(), "web").path(&format!("/logged/{i}")).header("x-request-id", &format!("req-{i}"));
        assert_eq!(request.send().unwrap(), "web-1");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    wait_until(deadline, "five access log lines", &[envoy.process()], || {
        let n = entries(envoy, "/logged/").len();
        if n >= 5 { Ok(()) } else { Err(format!("{n} lines")) }
    });
    let lines = entries(envoy, "/logged/");
    assert_eq!(lines.len(), 5, "one line per request: {lines:#?}");
    for (i, line) in lines.iter().enumerate() {
        // Istio's default format, field by field.
        let (time, rest) = line.strip_prefix('[').and_then(|l| l.split_once("] ")).expect(line);
        assert!(time.len() >= 20 && time.contains('T'), "the start time: {line}");
        let rest =
            rest.strip_prefix(&format!("\"GET /logged/{i} HTTP/1.1\" 200 - via_upstream - \"-\" 0 ")).expect(line);
        let quoted: Vec<&str> = rest.split('"').collect();
        assert_eq!(quoted[1], "-", "no x-forwarded-for: {line}");
        assert_eq!(quoted[5], format!("req-{i}"), "the request id: {line}");
        assert_eq!(quoted[7], "web", "the authority: {line}");
        assert_eq!(quoted[9], "127.0.181.2:18301", "the upstream host: {line}");
        let tail: Vec<&str> = quoted[10].split_whitespace().collect();
        assert_eq!(tail[0], CLUSTER, "the upstream cluster: {line}");
        assert_eq!(tail[2], format!("127.0.0.1:{PORT}"), "the downstream local address: {line}");
        assert_eq!(tail.len(), 6, "the remote address, SNI and route name follow: {line}");
    }

    // The same mesh config, logging JSON: the running Envoy gets it.
    std::fs::write(dir.path().join(".mesh.tmp"), format!("{demo}accessLogEncoding: JSON\n")).unwrap();
    let edited = Instant::now();
    std::fs::rename(dir.path().join(".mesh.tmp"), &mesh_file).unwrap();
    let deadline = edited + Duration::from_secs(10);
    wait_until(deadline, "the JSON log format in Envoy's listener", &[envoy.process()], || {
        let listeners = envoy.section(Section::Listeners).to_string();
        if listeners.contains("json_format") { Ok(()) } else { Err("still text".to_string()) }
    });
    let took = edited.elapsed();
    assert!(took < Duration::from_secs(1), "the edit reached Envoy after {took:?}");
    Request::new(outbound(), "web").path("/json/0").send().unwrap();
    let line = wait_for_entry(envoy, "/json/0");
    let json: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(
        (&json["method"], &json["response_code"], &json["upstream_cluster"]),
        (&"GET".into(), &200.into(), &CLUSTER.into())
    );
    assert_eq!(json.as_object().unwrap().len(), 24, "Istio's default labels: {json}");
    assert!(scene.mesh().log().contains("mesh config changed"), "{}", scene.mesh().log_tail(20));
    scene.assert_nothing_rejected();
}

/// The access log line of the one request for `path`, once Envoy wrote it.
fn wait_for_entry(envoy: &Envoy, path: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut line = String::new();
    wait_until(deadline, &format!("the entry of {path}"), &[envoy.process()], || {
        match entries(envoy, &format!("{path}\"")).pop().or_else(|| entries(envoy, &format!("{path} ")).pop()) {
            Some(l) => {
                line = l;
                Ok(())
            }
            None => Err("not yet".to_string()),
        }
    });
    line
}
