//! CUSTOM AuthorizationPolicies on a real Envoy, with the mesh config's
//! external authorizers standing in on loopback (`support::ext_authz`):
//! a request a CUSTOM rule matches is decided by the authorizer (allowed,
//! or denied with the authorizer's own answer); a request no CUSTOM rule
//! matches is never sent to it; `failOpen` lets a request through when the
//! authorizer cannot be reached, and without it the request is refused. A
//! gRPC authorizer decides HTTP requests the same way and TCP connections
//! through Envoy's network filter.
//!
//! `web` is a sidecar in NONE mode whose Sidecar ingress listeners bind
//! its own address, so traffic reaches its inbound chains without
//! redirection. Addresses 127.0.184.0/24, ports 18321 to 18335.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use crate::support;
use support::envoy::Section;
use support::ext_authz::{DECISION_HEADER, DENIED_BODY, GrpcAuthorizer, HttpAuthorizer};
use support::http::Response;
use support::manifests::{docs, pod, sidecar_node};
use support::meshpush::Meshpush;
use support::scene::Scene;

const CONVERGE: Duration = Duration::from_secs(15);

/// The Sidecar of `web`: its HTTP port (and a TCP one, when given) bound on
/// `ip`, handed to the applications at 127.0.0.1; it sees only `auth`'s services.
fn web_sidecar(ip: &str, http: (u16, u16), tcp: Option<(u16, u16)>) -> String {
    let tcp = tcp
        .map(|(port, app)| {
            format!(
                "  - port: {{number: {port}, protocol: TCP, name: tcp}}\n    bind: {ip}\n    captureMode: NONE\n    \
                 defaultEndpoint: 127.0.0.1:{app}\n"
            )
        })
        .unwrap_or_default();
    format!(
        "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {{name: web, namespace: shop}}\nspec:\n  \
         workloadSelector: {{labels: {{app: web}}}}\n  ingress:\n  - port: {{number: {port}, protocol: HTTP, name: http}}\n    \
         bind: {ip}\n    captureMode: NONE\n    defaultEndpoint: 127.0.0.1:{app}\n{tcp}  egress:\n  - hosts: [\"auth/*\"]\n",
        port = http.0,
        app = http.1,
    )
}

/// A Service `name` in `auth` with `ports` (name, number), and its Pod at `ip`.
fn authorizer_service(name: &str, ip: &str, ports: &[(&str, u16)]) -> String {
    let listed: String = ports.iter().map(|(n, p)| format!("  - {{name: {n}, port: {p}}}\n")).collect();
    docs(&[
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: auth}}\nspec:\n  selector: {{app: {name}}}\n  \
             ports:\n{listed}"
        ),
        pod("auth", &format!("{name}-1"), ip, &[("app", name)], ports[0].1),
    ])
}

/// A CUSTOM policy for `web` asking `provider` about `rules`.
fn custom_policy(provider: &str, rules: &str) -> String {
    format!(
        "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {{name: ext-authz, namespace: shop}}\nspec:\n  \
         selector: {{matchLabels: {{app: web}}}}\n  action: CUSTOM\n  provider: {{name: {provider}}}\n  rules: {rules}\n"
    )
}

/// meshpush serving `files` with the mesh config `mesh`, the web sidecar
/// Envoy at `ip`, and the applications behind it.
fn scene(mesh: &str, files: &[(&str, &str)], ip: &str, apps: &[(&str, &str)]) -> (Scene, tempfile::TempDir) {
    let dir = tempfile::TempDir::new().unwrap();
    let mesh_file = dir.path().join("mesh");
    std::fs::write(&mesh_file, mesh).unwrap();
    let flag = mesh_file.display().to_string();
    let mut scene =
        Scene::start_with(files, apps, |config: &Path| Meshpush::start_with_flags(config, &["--mesh-config", &flag]));
    let opts = scene.sidecar(&sidecar_node(ip, "web-1", "shop"), &[("app", "web")]);
    scene.add_envoy("web", &opts);
    (scene, dir)
}

fn get(addr: SocketAddr, path: &str, allow: bool) -> Result<Response, String> {
    let headers: &[(&str, &str)] = if allow { &[(DECISION_HEADER, "allow")] } else { &[] };
    support::http::get(addr, path, headers).map_err(|e| e.to_string())
}

/// Waits until `GET path` (with the allowing header when `allow`) is answered `status`.
fn wait_for_status(scene: &Scene, addr: SocketAddr, path: &str, allow: bool, status: u16, what: &str) {
    scene.wait(CONVERGE, what, Section::Listeners, || match get(addr, path, allow) {
        Ok(r) if r.status == status => Ok(()),
        Ok(r) => Err(format!("{} {}", r.status, r.body)),
        Err(e) => Err(e),
    });
}

#[test]
fn an_http_authorizer_decides_what_a_custom_rule_matches_and_is_never_asked_about_the_rest() {
    const PORT: u16 = 18321;
    const APP: u16 = 18322;
    const AUTHZ: u16 = 18323;
    const AUTHZ_DOWN: u16 = 18324;
    let authorizer = HttpAuthorizer::start(SocketAddr::from(([127, 0, 184, 30], AUTHZ)));
    let mesh_config = format!(
        "extensionProviders:\n\
         - name: ext-http\n  envoyExtAuthzHttp:\n    service: ext-authz.auth.svc.cluster.local\n    port: \"{AUTHZ}\"\n    \
           includeRequestHeadersInCheck: [{DECISION_HEADER}]\n\
         - name: ext-open\n  envoyExtAuthzHttp: {{service: ext-authz.auth.svc.cluster.local, port: {AUTHZ_DOWN}, failOpen: true}}\n\
         - name: ext-closed\n  envoyExtAuthzHttp: {{service: ext-authz.auth.svc.cluster.local, port: {AUTHZ_DOWN}}}\n"
    );
    let mesh = docs(&[
        support::manifests::service("shop", "web", PORT),
        web_sidecar("127.0.184.20", (PORT, APP), None),
        authorizer_service("ext-authz", "127.0.184.30", &[("http", AUTHZ), ("http-down", AUTHZ_DOWN)]),
    ]);
    let policy = |provider: &str| custom_policy(provider, "[{to: [{operation: {paths: [\"/private*\"]}}]}]");
    let (scene, _mesh_dir) = scene(
        &mesh_config,
        &[("mesh.yaml", &mesh), ("policy.yaml", &policy("ext-http"))],
        "127.0.184.20",
        &[("web-app", &format!("127.0.0.1:{APP}"))],
    );
    let web = SocketAddr::from(([127, 0, 184, 20], PORT));
    wait_for_status(&scene, web, "/private/1", false, 403, "the authorizer to deny /private without its header");
    let denied = get(web, "/private/2", false).unwrap();
    assert_eq!((denied.status, denied.body.as_str()), (403, DENIED_BODY), "the authorizer's own answer");

    let asked = authorizer.checks().len();
    let public = get(web, "/public", false).unwrap();
    assert_eq!((public.status, public.header("x-backend")), (200, Some("web-app")), "no CUSTOM rule matches /public");
    assert_eq!(authorizer.checks().len(), asked, "a request no CUSTOM rule matches is never sent to the authorizer");

    let allowed = get(web, "/private/3", true).unwrap();
    assert_eq!((allowed.status, allowed.header("x-backend")), (200, Some("web-app")), "the authorizer allows");
    assert_eq!(authorizer.checks().len(), asked + 1);
    assert_eq!(authorizer.checks().last().map(String::as_str), Some("/private/3"));

    // An authorizer that cannot be reached: failOpen lets requests through, else they are refused.
    scene.dir().write("policy.yaml", &policy("ext-open"));
    wait_for_status(&scene, web, "/private/4", false, 200, "failOpen to let /private through");
    scene.dir().write("policy.yaml", &policy("ext-closed"));
    wait_for_status(&scene, web, "/private/5", false, 403, "no failOpen: /private refused");
    assert_ne!(get(web, "/private/6", false).unwrap().body, DENIED_BODY, "Envoy's refusal, not the authorizer's");
    assert_eq!(get(web, "/public", false).unwrap().status, 200);
    scene.assert_nothing_rejected();
}

#[test]
fn a_grpc_authorizer_decides_http_requests_and_tcp_connections_its_rules_match() {
    const PORT: u16 = 18331;
    const APP: u16 = 18332;
    const TCP: u16 = 18333;
    const TCP_APP: u16 = 18334;
    const AUTHZ: u16 = 18335;
    let authorizer = GrpcAuthorizer::start(SocketAddr::from(([127, 0, 184, 41], AUTHZ)));
    let mesh_config = format!(
        "extensionProviders:\n- name: ext-grpc\n  envoyExtAuthzGrpc: {{service: auth/ext-authz-grpc.auth.svc.cluster.local, port: {AUTHZ}}}\n"
    );
    let mesh = docs(&[
        support::manifests::service("shop", "web", PORT),
        web_sidecar("127.0.184.40", (PORT, APP), Some((TCP, TCP_APP))),
        authorizer_service("ext-authz-grpc", "127.0.184.41", &[("grpc", AUTHZ)]),
    ]);
    let rules = format!(
        "[{{to: [{{operation: {{paths: [\"/private*\"]}}}}]}}, {{to: [{{operation: {{ports: [\"{TCP}\"]}}}}]}}]"
    );
    let (scene, _mesh_dir) = scene(
        &mesh_config,
        &[("mesh.yaml", &mesh), ("policy.yaml", &custom_policy("ext-grpc", &rules))],
        "127.0.184.40",
        &[("web-app", &format!("127.0.0.1:{APP}")), ("web-tcp", &format!("127.0.0.1:{TCP_APP}"))],
    );
    let web = SocketAddr::from(([127, 0, 184, 40], PORT));
    wait_for_status(&scene, web, "/private/1", false, 403, "the gRPC authorizer to deny /private without its header");
    assert_eq!(get(web, "/private/2", false).unwrap().body, DENIED_BODY, "the authorizer's own answer");
    let asked = authorizer.http_checks().len();
    assert_eq!(get(web, "/public", false).unwrap().status, 200);
    assert_eq!(authorizer.http_checks().len(), asked, "/public is never sent to the authorizer");
    let allowed = get(web, "/private/3", true).unwrap();
    assert_eq!((allowed.status, allowed.header("x-backend")), (200, Some("web-app")));
    assert_eq!(authorizer.http_checks().last().map(String::as_str), Some("/private/3"));

    // The TCP port: each connection is checked; the bytes reach the application while allowed.
    let tcp = SocketAddr::from(([127, 0, 184, 40], TCP));
    scene.wait(
        CONVERGE,
        "a connection to the TCP port to be checked and let through",
        Section::Listeners,
        || match get(tcp, "/over-tcp", false) {
            Ok(r) if r.status == 200 && r.header("x-backend") == Some("web-tcp") && authorizer.tcp_checks() > 0 => {
                Ok(())
            }
            Ok(r) => {
                Err(format!("{} {:?} after {} TCP checks", r.status, r.header("x-backend"), authorizer.tcp_checks()))
            }
            Err(e) => Err(e),
        },
    );
    let checked = authorizer.tcp_checks();
    assert_eq!(get(tcp, "/over-tcp", false).unwrap().header("x-backend"), Some("web-tcp"));
    assert_eq!(authorizer.tcp_checks(), checked + 1, "one check per connection");
    authorizer.deny_connections();
    assert!(get(tcp, "/over-tcp", false).is_err(), "a denied connection is closed before the application answers");
    assert_eq!(authorizer.tcp_checks(), checked + 2);
    scene.assert_nothing_rejected();
}
