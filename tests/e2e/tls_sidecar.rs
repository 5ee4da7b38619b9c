//! End to end: a sidecar (NONE interception, its listeners on 127.0.0.1)
//! that originates TLS for a plain-HTTP caller, and tells the services of a
//! TLS port apart by SNI, as Istio's egress examples configure it.
//!
//! * `api.external.test` is a ServiceEntry with an HTTP port 18447 and an
//!   HTTPS port 18446; a VirtualService sends the HTTP port's requests to
//!   the HTTPS port and a DestinationRule originates TLS there (`SIMPLE`,
//!   the test CA), as `samples/bookinfo/networking/egress-rule-google-apis.yaml`
//!   does for www.googleapis.com. The backend terminates TLS itself and
//!   records the SNI it was sent.
//! * `a.tls.test` and `b.tls.test` share TLS port 18448; the client's SNI
//!   picks the backend, and a `tls:` route sends `c.tls.test` to b's.

use crate::support;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use support::envoy::Section;
use support::manifests::{docs, sidecar_node};
use support::scene::Scene;
use support::tls::{TestCa, TlsBackend};

const HTTP_PORT: u16 = 18447;
const HTTPS_PORT: u16 = 18446;
const TLS_PORT: u16 = 18448;

fn entry(name: &str, host: &str, ip: &str, ports: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: {name}, namespace: egress}}\nspec:\n  hosts: [{host}]\n  location: MESH_EXTERNAL\n  resolution: STATIC\n  ports: [{ports}]\n  endpoints: [{{address: {ip}}}]\n"
    )
}

fn mesh(ca_path: &Path) -> String {
    docs(&[
        entry(
            "api",
            "api.external.test",
            "127.0.118.10",
            &format!("{{number: {HTTP_PORT}, name: http, protocol: HTTP}}, {{number: {HTTPS_PORT}, name: https, protocol: HTTPS}}"),
        ),
        format!(
            "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: api, namespace: egress}}\nspec:\n  hosts: [api.external.test]\n  http:\n  - match: [{{port: {HTTP_PORT}}}]\n    route: [{{destination: {{host: api.external.test, port: {{number: {HTTPS_PORT}}}}}}}]\n"
        ),
        format!(
            "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {{name: api, namespace: egress}}\nspec:\n  host: api.external.test\n  trafficPolicy:\n    portLevelSettings:\n    - port: {{number: {HTTPS_PORT}}}\n      tls: {{mode: SIMPLE, caCertificates: {}}}\n",
            ca_path.display()
        ),
        entry("a", "a.tls.test", "127.0.118.11", &format!("{{number: {TLS_PORT}, name: tls, protocol: TLS}}")),
        entry("b", "b.tls.test", "127.0.118.12", &format!("{{number: {TLS_PORT}, name: tls, protocol: TLS}}")),
        entry("c", "c.tls.test", "127.0.118.13", &format!("{{number: {TLS_PORT}, name: tls, protocol: TLS}}")),
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: c, namespace: egress}\nspec:\n  hosts: [c.tls.test]\n  tls:\n  - match: [{sniHosts: [c.tls.test]}]\n    route: [{destination: {host: b.tls.test}}]\n"
            .to_string(),
    ])
}

/// curl `url` (its host resolved to 127.0.0.1 on `port`) with `extra`:
/// the `x-backend` that answered 200, or what went wrong.
fn backend_of(dir: &Path, url: &str, host: &str, port: u16, extra: &[&str]) -> Result<String, String> {
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "5",
            "-D",
            "-",
            "-o",
            "/dev/null",
            "--resolve",
            &format!("{host}:{port}:127.0.0.1"),
        ])
        .args(extra)
        .arg(url)
        .current_dir(dir)
        .output()
        .expect("run curl");
    let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    let backend = head.lines().find_map(|l| l.strip_prefix("x-backend: ")).map(|b| b.trim().to_string());
    match backend {
        Some(b) if head.starts_with("http/1.1 200") || head.starts_with("http/2 200") => Ok(b),
        _ => Err(format!("curl {url}: {} {}", head.trim(), String::from_utf8_lossy(&out.stderr).trim())),
    }
}

#[test]
fn a_sidecar_originates_tls_for_plain_http_and_routes_a_tls_port_by_sni() {
    let work = tempfile::tempdir().expect("a scratch dir");
    let dir = work.path();
    let ca = TestCa::new("meshpush test CA");
    let ca_path = ca.write(dir, "ca.pem");
    let mut scene = Scene::start(&[("mesh.yaml", &mesh(&ca_path))], &[]);
    let api = TlsBackend::start(
        "api-1",
        SocketAddr::from(([127, 0, 118, 10], HTTPS_PORT)),
        &ca.leaf("api", &["api.external.test"]),
    );
    let a = TlsBackend::start("a-1", SocketAddr::from(([127, 0, 118, 11], TLS_PORT)), &ca.leaf("a", &["a.tls.test"]));
    let b = TlsBackend::start("b-1", SocketAddr::from(([127, 0, 118, 12], TLS_PORT)), &ca.leaf("b", &["b.tls.test"]));
    let opts = scene.sidecar(&sidecar_node("127.0.0.1", "client-1", "egress"), &[("app", "client")]);
    scene.add_envoy("client", &opts);

    // Plain HTTP in, TLS out, with the request's host as SNI, checked
    // against the CA the DestinationRule names.
    let url = format!("http://api.external.test:{HTTP_PORT}/v1/things");
    scene.wait(Duration::from_secs(20), "api.external.test over originated TLS", Section::Clusters, || {
        backend_of(dir, &url, "api.external.test", HTTP_PORT, &[])
            .and_then(|b| if b == "api-1" { Ok(()) } else { Err(format!("answered by {b}")) })
    });
    let sni = api.sni_seen();
    assert!(!sni.is_empty() && sni.iter().all(|s| s.as_deref() == Some("api.external.test")), "{sni:?}");

    // One TLS port, two services: the SNI the client sends picks one.
    scene.wait(Duration::from_secs(10), "a.tls.test by SNI", Section::Listeners, || {
        backend_of(dir, &format!("https://a.tls.test:{TLS_PORT}/"), "a.tls.test", TLS_PORT, &["--cacert", "ca.pem"])
            .and_then(|b| if b == "a-1" { Ok(()) } else { Err(format!("answered by {b}")) })
    });
    let answered =
        backend_of(dir, &format!("https://b.tls.test:{TLS_PORT}/"), "b.tls.test", TLS_PORT, &["--cacert", "ca.pem"]);
    assert_eq!(answered.as_deref(), Ok("b-1"));
    // The tls route: c.tls.test goes to b's backend (whose certificate
    // names b, so curl is told not to check the name).
    let routed = backend_of(dir, &format!("https://c.tls.test:{TLS_PORT}/"), "c.tls.test", TLS_PORT, &["-k"]);
    assert_eq!(routed.as_deref(), Ok("b-1"), "c.tls.test is routed to b.tls.test");
    assert!(b.sni_seen().contains(&Some("c.tls.test".into())), "the client's SNI reaches the backend untouched");
    assert!(a.sni_seen().iter().all(|s| s.as_deref() == Some("a.tls.test")), "{:?}", a.sni_seen());
    scene.assert_nothing_rejected();
}
