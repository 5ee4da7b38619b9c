//! A waypoint: a real Envoy run by `meshpush agent` as a `waypoint~` node,
//! configured by meshpush for the Service bound to it, takes HBONE (HTTP
//! CONNECT over mutual TLS to 15008, as ztunnel sends it) and applies the
//! Service's L7 policy and routes.
//!
//! Everything runs in a network namespace of the test's own (the waypoint
//! listens on 0.0.0.0:15008, as Istio's does): meshpush as the mesh's CA,
//! the agent and its Envoy, and an HTTP server that echoes request headers
//! as the Service's workload. The client is curl, tunnelling through the
//! waypoint with a workload certificate from meshpush's CA, as a ztunnel
//! would with its workload's. (With a ztunnel binary,
//! `tests/e2e/ztunnel_hbone.rs` sends real ztunnels' traffic through a
//! waypoint too.)

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::agent::Agent;
use crate::support::isolated::ECHO_SERVER;
use crate::support::manifests::{DEMO_WAYPOINT_RULES, demo_waypoint, docs};
use crate::support::meshpush::meshpush_in;
use crate::support::netns::NetNs;
use crate::support::process::{ChildGuard, scratch_dir, wait_until};
use crate::support::scene::MeshDir;
use crate::support::secure;

use super::ztunnel::AMBIENT_FLAGS;

/// A namespace whose Services use the waypoint `waypoint` (deployed as
/// istiod would); the Service `server` and its Pod (the echo server, plain
/// TCP: no ztunnel there); its HTTPRoute and a DENY on a path; an ALLOW for
/// one client only.
fn mesh() -> String {
    let own = r#"
apiVersion: v1
kind: Namespace
metadata: {name: demo, labels: {istio.io/dataplane-mode: ambient, istio.io/use-waypoint: waypoint}}
---
apiVersion: v1
kind: Service
metadata: {name: server, namespace: demo}
spec:
  clusterIP: 10.96.0.20
  selector: {app: server}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: server-0, namespace: demo, labels: {app: server}}
spec: {serviceAccountName: server, nodeName: node-a}
status: {phase: Running, podIP: 127.0.0.1, conditions: [{type: Ready, status: "True"}]}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: client-only, namespace: demo}
spec:
  targetRefs: [{kind: Service, group: "", name: server}]
  action: ALLOW
  rules: [{from: [{source: {principals: [cluster.local/ns/demo/sa/client]}}]}]
"#;
    docs(&[own.to_string(), demo_waypoint("10.96.0.15", "10.78.0.1", "node-a"), DEMO_WAYPOINT_RULES.to_string()])
}

/// A workload certificate of `demo/SA` from meshpush's CA, written as
/// `SA.pem` and `SA-key.pem` into `dir`.
fn certificate(ns: &NetNs, root: &str, token: &str, sa: &str, dir: &Path) {
    let identity = format!("spiffe://cluster.local/ns/demo/sa/{sa}");
    let (key, csr) = secure::csr(&[&identity]);
    let issued = ns.within(|| {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
            let channel = secure::channel("127.0.0.1:15012".parse().unwrap(), root, None).await.unwrap();
            secure::create_certificate(channel, &csr, Some(token)).await.expect("a workload certificate")
        })
    });
    std::fs::write(dir.join(format!("{sa}.pem")), issued.cert_chain.concat()).unwrap();
    std::fs::write(dir.join(format!("{sa}-key.pem")), key.serialize_pem()).unwrap();
}

/// `GET path` of the Service's VIP, tunnelled through the waypoint as
/// `sa` (HTTP/1.1 CONNECT over mutual TLS); `(status, response headers)`.
fn through_waypoint(ns: &NetNs, certs: &Path, sa: &str, path: &str) -> (String, String) {
    let cert = certs.join(format!("{sa}.pem")).display().to_string();
    let key = certs.join(format!("{sa}-key.pem")).display().to_string();
    let out = ns.run(
        "curl",
        &[
            "-s",
            "-m",
            "5",
            "-D",
            "-",
            "-o",
            "/dev/null",
            "-p",
            "--proxy",
            "https://127.0.0.1:15008",
            // The waypoint's certificate names its SPIFFE identity, not an
            // address: ztunnel checks that; curl cannot.
            "--proxy-insecure",
            "--proxy-cert",
            &cert,
            "--proxy-key",
            &key,
            &format!("http://10.96.0.20:80{path}"),
        ],
    );
    let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    // After the proxy's "200 connection established", the response's own.
    let status = head
        .lines()
        .rfind(|l| l.starts_with("http/"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("000")
        .to_string();
    (status, head)
}

#[test]
fn a_waypoint_takes_hbone_and_applies_its_service_s_l7_policy_and_routes() {
    let ns = NetNs::new("wp", "10.78.0.1/24");
    let dir = MeshDir::new();
    dir.write("mesh.yaml", &mesh());
    let (ca_dir, jwt_dir, certs) = (scratch_dir("ca"), scratch_dir("jwt"), scratch_dir("certs"));
    let (jwt_key, jwks) = meshpush::cli::jwt::keygen(jwt_dir.path()).unwrap();
    let mesh = meshpush_in(
        &ns,
        &dir,
        ca_dir.path(),
        &jwks,
        &[&["--secure-xds-addr", "127.0.0.1:15012"][..], &AMBIENT_FLAGS[..]].concat(),
    );
    let root_path = ca_dir.path().join("root-cert.pem");
    let root = std::fs::read_to_string(&root_path).unwrap();
    let token = |sa: &str| meshpush::cli::jwt::issue(&jwt_key, "demo", sa, Duration::from_secs(3600)).unwrap();
    let backend = ChildGuard::spawn(
        "backend",
        scratch_dir("backend"),
        Path::new("ip"),
        ["netns", "exec", ns.name(), "python3", "-c", ECHO_SERVER, "server", "127.0.0.1", "8080"],
    );
    let waypoint_token = token("waypoint");
    let discovery = "127.0.0.1:15012".parse().unwrap();
    let waypoint = Agent::demo_waypoint_in(&ns, "10.78.0.1", discovery, &root_path, &waypoint_token);
    wait_until(Instant::now() + Duration::from_secs(30), "the waypoint is ready", &[waypoint.process(), &mesh], || {
        waypoint.ready_in(&ns)
    });
    certificate(&ns, &root, &token("client"), "client", certs.path());
    certificate(&ns, &root, &token("other"), "other", certs.path());
    let procs = [waypoint.process(), &mesh, &backend];

    // The client: through the waypoint to the Service's workload, with the
    // HTTPRoute's header added on the way.
    let mut last = (String::new(), String::new());
    wait_until(Instant::now() + Duration::from_secs(20), "a request through the waypoint", &procs, || {
        last = through_waypoint(&ns, certs.path(), "client", "/hello");
        last.0 == "200"
    });
    assert!(last.1.contains("x-backend: server"), "{}", last.1);
    assert!(last.1.contains("x-echo-x-through: waypoint"), "the HTTPRoute's filter applied: {}", last.1);
    // The DENY on a path, and the ALLOW that names only the client.
    assert_eq!(through_waypoint(&ns, certs.path(), "client", "/admin/users").0, "403");
    assert_eq!(through_waypoint(&ns, certs.path(), "other", "/hello").0, "403");

    // The waypoint's config, as Envoy holds it: the three listeners and
    // the Service's clusters.
    let admin = format!("http://{}/config_dump", waypoint.admin_addr());
    let dump = ns.ok("curl", &["-s", &admin]);
    for name in
        ["connect_terminate", "main_internal", "connect_originate", "inbound-vip|80|http|server.demo.svc.cluster.local"]
    {
        assert!(dump.contains(&format!("\"{name}\"")), "{name} in the waypoint's config_dump");
    }
    assert!(!mesh.log_tail(10_000).contains(&waypoint_token[waypoint_token.len() - 20..]), "a token reached the log");
}
