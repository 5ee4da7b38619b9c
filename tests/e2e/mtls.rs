//! Mesh mTLS between two real Envoys, each run by `meshpush agent` on a
//! certificate from meshpush's CA: sidecar A reaches sidecar B's service
//! over mutual TLS (B's workload learns A's SPIFFE identity from the
//! `x-forwarded-client-cert` header B's Envoy sets); PERMISSIVE serves a
//! plain-text client too and STRICT refuses it; traffic through a
//! certificate rotation and through a meshpush restart fails no request.
//!
//! B runs with interception NONE: its inbound port comes from a Sidecar
//! `ingress` listener that binds B's own address (127.0.0.2), as a pod's
//! does, and hands requests to the backend at another loopback port.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::support::agent::{Agent, AgentSpec};
use crate::support::backend::Backend;
use crate::support::http;
use crate::support::manifests::sidecar_node;
use crate::support::process::{free_port, wait_until};
use crate::support::scene::MeshDir;
use crate::support::secure::SecureMesh;
use crate::support::traffic::{Request, Traffic};

const DEADLINE: Duration = Duration::from_secs(30);
/// B's pod address: another loopback address than A's, so that B's inbound
/// port and A's outbound listener for the same service can both bind.
pub(super) const B_IP: &str = "127.0.0.2";

/// Service `b` (port `service_port`, target `pod_port`), its Pod (with a
/// sidecar: `security.istio.io/tlsMode: istio`; service account `b`), and
/// the Sidecar of B: its ingress listener hands requests to `backend`, and
/// it sees no other service (its outbound listeners would take A's ports).
pub(super) fn mesh(service_port: u16, pod_port: u16, backend: SocketAddr) -> String {
    format!(
        "apiVersion: v1
kind: Service
metadata: {{name: b, namespace: default}}
spec:
  selector: {{app: b}}
  ports: [{{name: http, port: {service_port}, targetPort: {pod_port}}}]
---
apiVersion: v1
kind: Pod
metadata:
  name: b-1
  namespace: default
  labels: {{app: b, security.istio.io/tlsMode: istio}}
spec: {{serviceAccountName: b}}
status: {{podIP: {B_IP}, phase: Running}}
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {{name: b, namespace: default}}
spec:
  workloadSelector: {{labels: {{app: b}}}}
  ingress:
  - port: {{number: {pod_port}, protocol: HTTP, name: http}}
    defaultEndpoint: {backend}
  egress:
  - hosts: [\"istio-system/*\"]
"
    )
}

pub(super) fn peer_authentication(mode: &str) -> String {
    format!(
        "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {{name: b, namespace: default}}\nspec:\n  selector: {{matchLabels: {{app: b}}}}\n  mtls: {{mode: {mode}}}\n"
    )
}

#[test]
fn sidecars_talk_mutual_tls_with_workload_identities_and_peer_authentication_decides_plain_text() {
    let (service_port, pod_port) = (free_port(), free_port());
    let backend = Backend::start("b", SocketAddr::from(([127, 0, 0, 1], free_port())));
    let dir = MeshDir::new();
    dir.write("b.yaml", &mesh(service_port, pod_port, backend.addr()));
    let mut secure = SecureMesh::start(&dir);
    // Short-lived certificates: each agent renews every ~5 s during the test.
    let ttl = vec!["--cert-ttl".to_string(), "10s".to_string()];
    let (token_a, token_b) = (secure.token("default", "a"), secure.token("default", "b"));
    let b = Agent::start(
        "agent-b",
        AgentSpec {
            node_id: sidecar_node(B_IP, "b-1", "default"),
            discovery: secure.secure,
            root_cert: &secure.root,
            token: &token_b,
            extra: [ttl.clone(), vec!["--label".into(), "app=b".into()]].concat(),
        },
    );
    let a = Agent::start(
        "agent-a",
        AgentSpec {
            node_id: sidecar_node("127.0.0.1", "a-1", "default"),
            discovery: secure.secure,
            root_cert: &secure.root,
            token: &token_a,
            extra: [ttl, vec!["--label".into(), "app=a".into()]].concat(),
        },
    );
    let b_inbound = SocketAddr::from(([127, 0, 0, 2], pod_port));
    let through_a = Request::new(SocketAddr::from(([127, 0, 0, 1], service_port)), "b.default.svc.cluster.local");
    let procs = [a.process(), b.process(), secure.mesh.process()];
    wait_until(Instant::now() + DEADLINE, "A reaches B's backend through both sidecars", &procs, || {
        through_a.send().map(drop)
    });

    // Over mutual TLS: B's Envoy tells the backend who called and who it is.
    let headers = [("host", "b.default.svc.cluster.local")];
    let answer = http::get(through_a.target, "/", &headers).expect("A answers");
    assert_eq!(answer.status, 200, "{}", answer.body);
    let xfcc = answer.header("x-echo-x-forwarded-client-cert").unwrap_or_default().to_string();
    assert!(xfcc.contains("URI=spiffe://cluster.local/ns/default/sa/a"), "A's identity reaches B: {xfcc:?}");
    assert!(xfcc.contains("By=spiffe://cluster.local/ns/default/sa/b"), "B's own identity: {xfcc:?}");
    let handshakes = format!("cluster.outbound|{service_port}||b.default.svc.cluster.local.ssl.handshake");
    assert!(a.envoy_stat(&handshakes).is_some_and(|n| n >= 1), "A's cluster to B shook hands over TLS");

    // PERMISSIVE (no policy): a plain-text client is served on the same port.
    let plain = |path: &str| http::get(b_inbound, path, &[("host", "b")]);
    let answer = plain("/plain").expect("PERMISSIVE takes plain text");
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("x-echo-x-forwarded-client-cert"), None, "no client certificate, no identity");

    // STRICT: plain text is refused; A, over mTLS, is still served.
    dir.write("strict.yaml", &peer_authentication("STRICT"));
    wait_until(Instant::now() + DEADLINE, "B refuses plain text", &procs, || plain("/plain").is_err());
    through_a.send().expect("mTLS is still served under STRICT");

    // Steady traffic from A while both certificates are renewed, then
    // while meshpush is killed and restarted: no request fails.
    let issued = |mesh: &SecureMesh| mesh.mesh.metric("citadel_server_success_cert_issuance");
    let before = issued(&secure);
    let traffic = Traffic::start(through_a.clone());
    wait_until(Instant::now() + DEADLINE, "both agents renew their certificates", &procs, || {
        issued(&secure) >= before + 2.0
    });
    let sent = traffic.sent();
    wait_until(Instant::now() + DEADLINE, "traffic flows on the renewed certificates", &procs, || {
        traffic.sent() > sent + 50
    });
    secure.mesh.kill_hard();
    let sent = traffic.sent();
    wait_until(Instant::now() + DEADLINE, "traffic flows while meshpush is down", &[a.process(), b.process()], || {
        traffic.sent() > sent + 50
    });
    secure.mesh.restart();
    dir.write("permissive.yaml", &peer_authentication("PERMISSIVE"));
    dir.remove("strict.yaml");
    let procs = [a.process(), b.process(), secure.mesh.process()];
    wait_until(Instant::now() + DEADLINE, "the restarted meshpush serves B a PERMISSIVE port", &procs, || {
        plain("/plain").is_ok_and(|r| r.status == 200)
    });
    let tally = traffic.stop();
    assert!(tally.sent > 150, "{tally:?}");
    assert_eq!(tally.failed, 0, "{tally:?}");
    assert_eq!(tally.answered_by("b"), tally.sent);

    // Authorization: /admin is denied to everyone; the rest only to A's
    // identity, so the plain-text client (no identity) is refused too.
    let authz = "apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: no-admin, namespace: default}
spec:
  selector: {matchLabels: {app: b}}
  action: DENY
  rules: [{to: [{operation: {paths: [/admin*]}}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: only-a, namespace: default}
spec:
  selector: {matchLabels: {app: b}}
  rules: [{from: [{source: {principals: [cluster.local/ns/default/sa/a]}}]}]
";
    dir.write("authz.yaml", authz);
    let status_via_a = |path: &str| http::get(through_a.target, path, &headers).map(|r| r.status).unwrap_or(0);
    wait_until(Instant::now() + DEADLINE, "B's sidecar denies /admin", &procs, || status_via_a("/admin/users") == 403);
    assert_eq!(status_via_a("/orders"), 200, "A's identity is allowed the rest");
    let refused = plain("/orders").expect("the plain-text client gets an answer");
    assert_eq!(refused.status, 403, "no identity, not allowed: {}", refused.body);
    let denied = b.envoy_stat(&format!("http.inbound_0.0.0.0_{pod_port}.rbac.denied"));
    assert!(denied.is_some_and(|n| n >= 2), "B's RBAC filters counted both refusals: {denied:?}");

    // No key reaches a log.
    for log in [a.log(), b.log(), secure.mesh.log(), secure.mesh.previous_logs()] {
        assert!(!log.contains("PRIVATE KEY"), "a key in a log");
        assert!(!log.contains(&token_a) && !log.contains(&token_b), "a token in a log");
    }
}

/// A gateway that terminates mesh mTLS (`tls.mode: ISTIO_MUTUAL`) on its
/// own workload certificate, as an east-west gateway does: sidecar A
/// reaches it over mTLS (auto mTLS to a ServiceEntry endpoint labelled as
/// a sidecar's), and it routes to a plain workload; a plain-text client is
/// refused.
#[test]
fn an_istio_mutual_gateway_takes_mesh_mtls_from_sidecars_only() {
    let (gateway_port, entry_port, web_port, pod_port) = (free_port(), free_port(), free_port(), free_port());
    let backend = Backend::start("web", SocketAddr::from(([127, 0, 0, 3], pod_port)));
    let dir = MeshDir::new();
    dir.write(
        "edge.yaml",
        &format!(
            "apiVersion: v1
kind: Service
metadata: {{name: web, namespace: default}}
spec:
  selector: {{app: web}}
  ports: [{{name: http, port: {web_port}, targetPort: {pod_port}}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: web-1, namespace: default, labels: {{app: web}}}}
status: {{podIP: 127.0.0.3, phase: Running}}
---
apiVersion: v1
kind: Pod
metadata: {{name: eastwest-1, namespace: default, labels: {{istio: eastwest}}}}
spec: {{serviceAccountName: eastwest}}
status: {{podIP: 127.0.0.1, phase: Running}}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: eastwest, namespace: default}}
spec:
  selector: {{istio: eastwest}}
  servers:
  - port: {{number: {gateway_port}, name: https-mesh, protocol: HTTPS}}
    bind: 127.0.0.1
    hosts: [\"*\"]
    tls: {{mode: ISTIO_MUTUAL, subjectAltNames: [spiffe://cluster.local/ns/default/sa/a]}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: eastwest, namespace: default}}
spec:
  hosts: [\"*\"]
  gateways: [eastwest]
  http: [{{route: [{{destination: {{host: web, port: {{number: {web_port}}}}}}}]}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: mesh-edge, namespace: default}}
spec:
  hosts: [mesh-edge.example]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{number: {entry_port}, name: http, protocol: HTTP, targetPort: {gateway_port}}}]
  endpoints: [{{address: 127.0.0.1, labels: {{security.istio.io/tlsMode: istio}}}}]
  subjectAltNames: [spiffe://cluster.local/ns/default/sa/eastwest]
"
        ),
    );
    let secure = SecureMesh::start(&dir);
    let (token_a, token_gw) = (secure.token("default", "a"), secure.token("default", "eastwest"));
    let gateway = Agent::start(
        "agent-eastwest",
        AgentSpec {
            node_id: crate::support::manifests::router_node("127.0.0.1", "eastwest-1", "default"),
            discovery: secure.secure,
            root_cert: &secure.root,
            token: &token_gw,
            extra: vec!["--label".into(), "istio=eastwest".into()],
        },
    );
    let a = Agent::start(
        "agent-a",
        AgentSpec {
            node_id: sidecar_node("127.0.0.1", "a-1", "default"),
            discovery: secure.secure,
            root_cert: &secure.root,
            token: &token_a,
            extra: vec!["--label".into(), "app=a".into()],
        },
    );
    let through_a = Request::new(SocketAddr::from(([127, 0, 0, 1], entry_port)), "mesh-edge.example");
    let procs = [a.process(), gateway.process(), secure.mesh.process()];
    wait_until(Instant::now() + DEADLINE, "A reaches web through the gateway", &procs, || through_a.send().map(drop));
    through_a.all_answered_by(5, &["web"]).expect("every request reaches web");
    let handshakes = format!("listener.127.0.0.1_{gateway_port}.ssl.handshake");
    assert!(gateway.envoy_stat(&handshakes).is_some_and(|n| n >= 1), "the gateway terminated TLS");
    let entry_handshakes = format!("cluster.outbound|{entry_port}||mesh-edge.example.ssl.handshake");
    assert!(a.envoy_stat(&entry_handshakes).is_some_and(|n| n >= 1), "A originated mesh mTLS to it");

    // A client without a mesh certificate (plain text here) is refused.
    let direct = SocketAddr::from(([127, 0, 0, 1], gateway_port));
    let plain = http::get(direct, "/", &[("host", "web")]);
    assert!(plain.as_ref().map_or(true, |r| r.status != 200), "plain text is not served: {plain:?}");
    let before = backend.hits();
    let _ = http::get(direct, "/", &[("host", "web")]);
    assert_eq!(backend.hits(), before, "nothing reached web without mTLS");
    for log in [a.log(), gateway.log(), secure.mesh.log()] {
        assert!(!log.contains("PRIVATE KEY") && !log.contains(&token_gw), "a key or token in a log");
    }
}

/// A mesh of trust domain `example.org` with the alias `old.example`, set
/// in the mesh config that meshpush and both agents read: certificates
/// carry `example.org`, and a policy written for `cluster.local` (as
/// Istio's samples write them) allows A, as istiod rewrites it.
#[test]
fn a_policy_written_for_cluster_local_holds_in_a_mesh_of_another_trust_domain() {
    let (service_port, pod_port) = (free_port(), free_port());
    let backend = Backend::start("b", SocketAddr::from(([127, 0, 0, 1], free_port())));
    let dir = MeshDir::new();
    dir.write("b.yaml", &mesh(service_port, pod_port, backend.addr()));
    dir.write(
        "authz.yaml",
        "apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: only-a, namespace: default}
spec:
  selector: {matchLabels: {app: b}}
  rules: [{from: [{source: {principals: [cluster.local/ns/default/sa/a]}}]}]
",
    );
    let files = tempfile::TempDir::new().unwrap();
    let mesh_file = files.path().join("mesh");
    std::fs::write(&mesh_file, "trustDomain: example.org\ntrustDomainAliases: [old.example]\n").unwrap();
    let flag = mesh_file.display().to_string();
    let secure = SecureMesh::start_with_flags(&dir, &["--mesh-config", &flag]);
    let agent = |name: &str, ip: &str, account: &str, app: &str| {
        Agent::start(
            name,
            AgentSpec {
                node_id: sidecar_node(ip, &format!("{account}-1"), "default"),
                discovery: secure.secure,
                root_cert: &secure.root,
                token: &secure.token("default", account),
                extra: vec!["--label".into(), format!("app={app}"), "--mesh-config".into(), flag.clone()],
            },
        )
    };
    let b = agent("agent-td-b", B_IP, "b", "b");
    let a = agent("agent-td-a", "127.0.0.1", "a", "a");
    let through_a = Request::new(SocketAddr::from(([127, 0, 0, 1], service_port)), "b.default.svc.cluster.local");
    let procs = [a.process(), b.process(), secure.mesh.process()];
    wait_until(Instant::now() + DEADLINE, "A is allowed to B through both sidecars", &procs, || {
        through_a.send().map(drop)
    });
    let answer = http::get(through_a.target, "/", &[("host", "b.default.svc.cluster.local")]).unwrap();
    assert_eq!(answer.status, 200, "{}", answer.body);
    let xfcc = answer.header("x-echo-x-forwarded-client-cert").unwrap_or_default().to_string();
    assert!(xfcc.contains("URI=spiffe://example.org/ns/default/sa/a"), "the mesh's trust domain: {xfcc:?}");
    // The identity A checks on B's certificate is B's under each trust domain of the mesh.
    let clusters = a.envoy_admin("/config_dump?resource=dynamic_active_clusters").unwrap().body;
    assert!(clusters.contains("spiffe://old.example/ns/default/sa/b"), "the alias among B's accepted names");
    // The plain-text client has no identity: refused.
    let plain = http::get(SocketAddr::from(([127, 0, 0, 2], pod_port)), "/", &[("host", "b")]).unwrap();
    assert_eq!(plain.status, 403, "{}", plain.body);
}
