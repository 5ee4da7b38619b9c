//! The real ztunnel against meshpush (runs when `ZTUNNEL_BIN` names a
//! binary; `scripts/build-ztunnel.sh` builds one from istio/ztunnel's
//! source). CI has no ztunnel: there, `tests/e2e/ztunnel.rs` checks the
//! same secure port and CA with the stand-in.
//!
//! Two network namespaces are two nodes. In the first run meshpush (the
//! secure port on the namespace's address) and a dedicated ztunnel for the
//! client Pod; in the second a dedicated ztunnel for the server Pod and an
//! HTTP server. Both ztunnels run as `nobody`, authenticate with their
//! workload's token, and get their certificates from meshpush's CA; the
//! server's asks for workloads on demand (`XDS_ON_DEMAND`). A
//! request from the client's side through ztunnel's SOCKS5 port to the
//! server's Service VIP crosses over HBONE (mTLS, HTTP/2 CONNECT to
//! 15008); an AuthorizationPolicy that denies the client then stops it.

use base64::Engine as _;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject as _;
use serde_json::{Value, json};

use crate::support::agent::Agent;
use crate::support::isolated::ECHO_SERVER;
use crate::support::manifests::{DEMO_WAYPOINT_RULES, demo_waypoint, docs};
use crate::support::meshpush::meshpush_in;
use crate::support::netns::NetNs;
use crate::support::process::{ChildGuard, scratch_dir, wait_until};
use crate::support::scene::MeshDir;
use crate::support::ztunnel::{Dedicated, RealZtunnel, ztunnel_binary};

use super::ztunnel::AMBIENT_FLAGS;

/// The two Pods, each on its own node, and the Service in front of the server.
const MESH: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: demo, labels: {istio.io/dataplane-mode: ambient}}
---
apiVersion: v1
kind: Pod
metadata: {name: client-0, namespace: demo, labels: {app: client}, annotations: {ambient.istio.io/redirection: enabled}}
spec: {serviceAccountName: client, nodeName: node-a}
status: {phase: Running, podIP: 10.77.0.1, conditions: [{type: Ready, status: "True"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: server-0, namespace: demo, labels: {app: server}, annotations: {ambient.istio.io/redirection: enabled}}
spec: {serviceAccountName: server, nodeName: node-b}
status: {phase: Running, podIP: 10.77.0.2, conditions: [{type: Ready, status: "True"}]}
---
apiVersion: v1
kind: Service
metadata: {name: server, namespace: demo}
spec:
  clusterIP: 10.96.0.20
  selector: {app: server}
  ports: [{name: http, port: 80, targetPort: 8080}]
"#;

const DENY_CLIENT: &str = r#"
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-client, namespace: demo}
spec:
  selector: {matchLabels: {app: server}}
  action: DENY
  rules: [{from: [{source: {principals: [cluster.local/ns/demo/sa/client]}}]}]
"#;

/// A policy of the waypoint itself (its `targetRefs` the Gateway): no path
/// under `/secret`, whatever it is for.
const NO_SECRETS: &str = r#"apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: no-secrets, namespace: demo}
spec:
  targetRefs: [{kind: Gateway, group: gateway.networking.k8s.io, name: waypoint}]
  action: DENY
  rules: [{to: [{operation: {paths: ["/secret*"]}}]}]
"#;

/// The secure port, inside the first namespace.
const CONTROL_PLANE: &str = "https://10.77.0.1:15012";

/// One request from the client's namespace, through its ztunnel's SOCKS5
/// port, to the server's Service; the HTTP status (`000`: no response).
fn request(client: &NetNs) -> String {
    request_to(client, "/").0
}

/// `GET path` of the server's Service through the client's ztunnel:
/// `(status, response headers)`.
fn request_to(client: &NetNs, path: &str) -> (String, String) {
    let url = format!("http://10.96.0.20:80{path}");
    let out = client.run("curl", &["-s", "-m", "5", "-D", "-", "-o", "/dev/null", "--socks5", "127.0.0.1:15080", &url]);
    let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    let status = head.split_whitespace().nth(1).unwrap_or("000").to_string();
    (status, head)
}

/// The entries of a config_dump section, by a field of each.
fn by<'a>(dump: &'a Value, section: &str, key: &str) -> std::collections::BTreeMap<String, &'a Value> {
    let entries = dump[section].as_array().unwrap_or_else(|| panic!("config_dump has no {section}: {dump}"));
    entries.iter().map(|e| (e[key].as_str().unwrap_or_default().to_string(), e)).collect()
}

#[test]
fn two_real_ztunnels_carry_a_request_over_hbone_with_meshpush_s_config_and_certificates_and_obey_a_deny() {
    let Some(binary) = ztunnel_binary() else {
        eprintln!("not run: ZTUNNEL_BIN is not set (scripts/build-ztunnel.sh builds ztunnel from its source)");
        return;
    };
    let (_hub, nodes) = NetNs::lan("zt", &["10.77.0.1/24", "10.77.0.2/24", "10.77.0.3/24"]);
    let [node_a, node_b, node_c] = &nodes[..] else { unreachable!() };
    let dir = MeshDir::new();
    dir.write("mesh.yaml", MESH);
    let (ca_dir, jwt_dir) = (scratch_dir("ca"), scratch_dir("jwt"));
    let (jwt_key, jwks) = meshpush::cli::jwt::keygen(jwt_dir.path()).unwrap();
    let flags = ["--secure-xds-addr", "10.77.0.1:15012", "--server-san", "10.77.0.1"];
    let mesh = meshpush_in(node_a, &dir, ca_dir.path(), &jwks, &[&flags[..], &AMBIENT_FLAGS[..]].concat());
    let root = std::fs::read_to_string(ca_dir.path().join("root-cert.pem")).unwrap();
    let token = |sa: &str, pod: &str| {
        let pod = meshpush::ca::authn::CallerPod { name: pod.into(), uid: None };
        meshpush::cli::jwt::issue_for_pod(&jwt_key, "demo", sa, Some(&pod), std::time::Duration::from_secs(3600))
            .unwrap()
    };
    let backend = ChildGuard::spawn(
        "backend",
        scratch_dir("backend"),
        std::path::Path::new("ip"),
        ["netns", "exec", node_b.name(), "python3", "-c", ECHO_SERVER, "server", "10.77.0.2", "8080"],
    );
    let client_token = token("client", "client-0");
    let client = RealZtunnel::start(
        &binary,
        node_a,
        &Dedicated {
            workload: ("demo", "client-0", "client"),
            ip: "10.77.0.1",
            node: "node-a",
            control_plane: CONTROL_PLANE,
            root_pem: &root,
            token: &client_token,
            on_demand: false,
        },
    );
    let server_token = token("server", "server-0");
    let server = RealZtunnel::start(
        &binary,
        node_b,
        &Dedicated {
            workload: ("demo", "server-0", "server"),
            ip: "10.77.0.2",
            node: "node-b",
            control_plane: CONTROL_PLANE,
            root_pem: &root,
            token: &server_token,
            on_demand: true,
        },
    );
    let procs = [&mesh, &client.process, &server.process, &backend];
    let deadline = || std::time::Instant::now() + std::time::Duration::from_secs(20);

    // What the client's ztunnel holds: both workloads and the Service, as
    // istiod would build them.
    let dump = RealZtunnel::config_dump(node_a);
    let workloads = by(&dump, "workloads", "uid");
    assert_eq!(
        workloads.keys().collect::<Vec<_>>(),
        ["Kubernetes//Pod/demo/client-0", "Kubernetes//Pod/demo/server-0"]
    );
    let server_workload = workloads["Kubernetes//Pod/demo/server-0"];
    for (field, want) in [
        ("name", json!("server-0")),
        ("namespace", json!("demo")),
        ("serviceAccount", json!("server")),
        ("trustDomain", json!("cluster.local")),
        ("node", json!("node-b")),
        ("workloadIps", json!(["10.77.0.2"])),
        ("protocol", json!("HBONE")),
        ("status", json!("Healthy")),
        ("workloadType", json!("pod")),
        ("canonicalName", json!("server")),
        ("canonicalRevision", json!("latest")),
        ("clusterId", json!("Kubernetes")),
    ] {
        assert_eq!(server_workload[field], want, "{field} of {server_workload}");
    }
    let services = by(&dump, "services", "hostname");
    let service = services.get("server.demo.svc.cluster.local").unwrap_or_else(|| panic!("{dump}"));
    assert_eq!((&service["vips"], &service["ports"]), (&json!(["/10.96.0.20"]), &json!({"80": 8080})));

    // The server's ztunnel asks on demand: it holds its own node's workload only.
    let on_demand = RealZtunnel::config_dump(node_b);
    assert_eq!(by(&on_demand, "workloads", "uid").keys().collect::<Vec<_>>(), ["Kubernetes//Pod/demo/server-0"]);

    // A request crosses over HBONE, each side with its certificate from
    // meshpush's CA; the server's ztunnel looks the client up by its
    // address (`/10.77.0.1`), which meshpush answers.
    wait_until(deadline(), "a request reaches the server through both ztunnels", &procs, || request(node_a) == "200");
    let identities_of_certificate = |dump: &Value, identity: &str| {
        let certs = by(dump, "certificates", "identity");
        let cert = certs.get(identity).unwrap_or_else(|| panic!("no certificate of {identity}: {dump}"));
        let pem = |v: &Value| {
            String::from_utf8(base64::engine::general_purpose::STANDARD.decode(v["pem"].as_str().unwrap()).unwrap())
                .unwrap()
        };
        let der = |pem: &str| CertificateDer::pem_slice_iter(pem.as_bytes()).next().unwrap().unwrap();
        // The same certificate (ztunnel prints it wrapped at other widths).
        assert_eq!(der(&pem(&cert["rootCerts"][0])), der(&root), "the certificate chains to meshpush's root");
        let leaf = pem(&cert["certChain"][0]);
        meshpush::ca::tls::identities_of(&der(&leaf)).iter().map(ToString::to_string).collect::<Vec<_>>()
    };
    let client_spiffe = "spiffe://cluster.local/ns/demo/sa/client";
    let server_spiffe = "spiffe://cluster.local/ns/demo/sa/server";
    assert_eq!(identities_of_certificate(&RealZtunnel::config_dump(node_a), client_spiffe), [client_spiffe]);
    let server_dump = RealZtunnel::config_dump(node_b);
    assert_eq!(identities_of_certificate(&server_dump, server_spiffe), [server_spiffe]);
    assert!(by(&server_dump, "workloads", "uid").contains_key("Kubernetes//Pod/demo/client-0"), "{server_dump}");

    // A DENY policy reaches the server's ztunnel, which refuses the client.
    dir.write("deny.yaml", DENY_CLIENT);
    wait_until(deadline(), "the server's ztunnel holds the policy", &procs, || {
        by(&RealZtunnel::config_dump(node_b), "policies", "name").contains_key("deny-client")
    });
    assert_ne!(request(node_a), "200", "a denied request got through");
    wait_until(deadline(), "the server's ztunnel says why", &procs, || {
        std::fs::read_to_string(server.process.log_path())
            .is_ok_and(|log| log.contains("explicitly denied by: demo/deny-client"))
    });

    // A waypoint on a third node takes the Service's traffic: ztunnel sends
    // it there over HBONE, it applies the HTTPRoute and the L7 policy, and
    // sends it on over HBONE to the server's ztunnel.
    dir.remove("deny.yaml");
    dir.write(
        "waypoint.yaml",
        &docs(&[demo_waypoint("10.96.0.15", "10.77.0.3", "node-c"), DEMO_WAYPOINT_RULES.into()]),
    );
    let bound = "metadata: {name: server, namespace: demo, labels: {istio.io/use-waypoint: waypoint}}";
    dir.write("mesh.yaml", &MESH.replace("metadata: {name: server, namespace: demo}", bound));
    let root_path = ca_dir.path().join("root-cert.pem");
    let waypoint_token = token("waypoint", "waypoint-0");
    let discovery = "10.77.0.1:15012".parse().unwrap();
    let waypoint = Agent::demo_waypoint_in(node_c, "10.77.0.3", discovery, &root_path, &waypoint_token);
    let procs = [&mesh, &client.process, &server.process, &backend, waypoint.process()];
    wait_until(deadline(), "the waypoint is ready", &procs, || waypoint.ready_in(node_c));
    let mut last = (String::new(), String::new());
    wait_until(deadline(), "a request passes through the waypoint", &procs, || {
        last = request_to(node_a, "/hello");
        last.0 == "200" && last.1.contains("x-echo-x-through: waypoint")
    });
    assert_eq!(request_to(node_a, "/admin/users").0, "403", "the waypoint's L7 policy");
    let client_dump = RealZtunnel::config_dump(node_a);
    let services = by(&client_dump, "services", "hostname");
    let server_service = services["server.demo.svc.cluster.local"];
    assert!(server_service["waypoint"].to_string().contains("waypoint.demo.svc.cluster.local"), "{server_service}");

    // The waypoint takes workload traffic too: the server Pod binds to it,
    // a request to the Pod's own address passes it, and a policy naming
    // the waypoint's Gateway applies there.
    let all = demo_waypoint("10.96.0.15", "10.77.0.3", "node-c").replace(
        "metadata: {name: waypoint, namespace: demo}\n",
        "metadata: {name: waypoint, namespace: demo, labels: {istio.io/waypoint-for: all}}\n",
    );
    dir.write("waypoint.yaml", &docs(&[all, DEMO_WAYPOINT_RULES.into(), NO_SECRETS.into()]));
    let bound_pod = MESH.replace(
        "labels: {app: server}, annotations",
        "labels: {app: server, istio.io/use-waypoint: waypoint}, annotations",
    );
    dir.write("mesh.yaml", &bound_pod.replace("metadata: {name: server, namespace: demo}", bound));
    let direct = |path: &str| {
        let url = format!("http://10.77.0.2:8080{path}");
        let out = node_a.run(
            "curl",
            &["-s", "-m", "5", "-o", "/dev/null", "-w", "%{http_code}", "--socks5", "127.0.0.1:15080", &url],
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    wait_until(deadline(), "the waypoint's Gateway policy applies to the Pod's traffic", &procs, || {
        direct("/secret") == "403"
    });
    assert_eq!(direct("/hello"), "200", "the Pod is reached through the waypoint");
    let workloads = by(&RealZtunnel::config_dump(node_a), "workloads", "uid")["Kubernetes//Pod/demo/server-0"].clone();
    assert!(workloads["waypoint"].to_string().contains("waypoint.demo.svc.cluster.local"), "{workloads}");
    assert!(!mesh.log_tail(10_000).contains(&client_token[client_token.len() - 20..]), "a token reached the log");
}
