//! The mesh config's `caCertificates` with a real Envoy run by `meshpush
//! agent`: under `serve --multi-root-mesh` (istiod's ISTIO_MULTIROOT_MESH)
//! a `pem` root reaches B's agent over PCDS, the agent (asked to by
//! `PROXY_CONFIG_XDS_AGENT` in the mesh's `proxyMetadata`, as Istio's
//! injector passes it) adds it to the `ROOTCA` its Envoy trusts, and B's
//! STRICT port takes a client whose certificate another CA signed. B's
//! sidecar accepts peers of the mesh's trust domain only, until
//! `trustDomains` names another.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::agent::{Agent, AgentSpec, SdsStream, secret_pem};
use crate::support::backend::Backend;
use crate::support::manifests::sidecar_node;
use crate::support::process::{ChildGuard, free_port, wait_until};
use crate::support::scene::MeshDir;
use crate::support::secure::SecureMesh;
use crate::support::tls::{Leaf, TestCa, mutual_get};

// Service `b`, its Pod and its Sidecar (an ingress listener on B's own
// address), as the mesh mTLS tests have them.
use super::mtls::{B_IP, mesh, peer_authentication};

const DEADLINE: Duration = Duration::from_secs(30);

/// The mesh config: agents take PCDS; `ca_certificates` is the YAML list.
fn mesh_config(ca_certificates: &str) -> String {
    format!(
        "defaultConfig:\n  proxyMetadata: {{PROXY_CONFIG_XDS_AGENT: \"true\"}}\ncaCertificates: {ca_certificates}\n"
    )
}

/// A YAML flow string of `pem`.
fn quoted(pem: &str) -> String {
    serde_json::to_string(pem).expect("a JSON string is a YAML flow scalar")
}

/// The number of certificates in the ROOTCA B's agent serves.
fn rootca_certificates(socket: &Path) -> usize {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let mut stream = SdsStream::open(socket, &["ROOTCA"]).await;
        let (_, _, secrets) = stream.next(Duration::from_secs(5)).await;
        secrets.iter().map(|s| secret_pem(s).matches("BEGIN CERTIFICATE").count()).sum()
    })
}

#[test]
fn a_root_of_the_mesh_config_reaches_envoy_over_pcds_and_trust_domains_bound_what_it_signs() {
    roots_and_trust_domains(false);
}

#[test]
fn pcds_reaches_an_agent_that_speaks_delta_xds() {
    roots_and_trust_domains(true);
}

/// The scene of the module docs, with B's Envoy and agent on delta xDS
/// when `delta`.
fn roots_and_trust_domains(delta: bool) {
    let (service_port, pod_port) = (free_port(), free_port());
    let backend = Backend::start("b", SocketAddr::from(([127, 0, 0, 1], free_port())));
    let dir = MeshDir::new();
    dir.write("b.yaml", &mesh(service_port, pod_port, backend.addr()));
    dir.write("strict.yaml", &peer_authentication("STRICT"));
    let files = tempfile::TempDir::new().unwrap();
    let mesh_file = files.path().join("mesh");
    std::fs::write(&mesh_file, mesh_config("[]")).unwrap();
    let flag = mesh_file.display().to_string();
    let secure = SecureMesh::start_with_flags(&dir, &["--mesh-config", &flag, "--multi-root-mesh"]);
    let mut extra = vec!["--label".into(), "app=b".into(), "--mesh-config".into(), flag.clone()];
    if delta {
        extra.push("--delta".into());
    }
    let b = Agent::start(
        if delta { "agent-multi-root-delta" } else { "agent-multi-root-sotw" },
        AgentSpec {
            node_id: sidecar_node(B_IP, "b-1", "default"),
            discovery: secure.secure,
            root_cert: &secure.root,
            token: &secure.token("default", "b"),
            extra,
        },
    );
    let procs: [&ChildGuard; 2] = [b.process(), secure.mesh.process()];
    let inbound = SocketAddr::from(([127, 0, 0, 2], pod_port));
    let listener = format!("listener.{B_IP}_{pod_port}");
    let stat = |name: &str| b.envoy_stat(&format!("{listener}.ssl.{name}")).unwrap_or(0);
    wait_until(Instant::now() + DEADLINE, "B's inbound listener is served", &procs, || {
        b.envoy_stat(&format!("{listener}.downstream_cx_total")).is_some()
    });
    assert_eq!(rootca_certificates(&b.sds_socket()), 1, "only meshpush's root at first");

    // A client whose certificate another root signed, in the mesh's trust domain.
    let other = TestCa::new("another mesh root");
    let x = other.workload("spiffe://cluster.local/ns/default/sa/x");
    let get = |leaf: &Leaf| {
        mutual_get(inbound, leaf, "b", "/")
            .map(|r| (r.status, r.header("x-echo-x-forwarded-client-cert").map(str::to_string)))
    };
    let refused = stat("fail_verify_error");
    assert!(get(&x).is_err(), "a root B does not trust");
    wait_until(Instant::now() + DEADLINE, "B counts the untrusted chain", &procs, || {
        stat("fail_verify_error") > refused
    });

    // The root in the mesh config: PCDS brings it, ROOTCA holds both.
    std::fs::write(&mesh_file, mesh_config(&format!("[{{pem: {}}}]", quoted(&other.pem)))).unwrap();
    wait_until(Instant::now() + DEADLINE, "B takes X's certificate", &procs, || get(&x).is_ok_and(|(s, _)| s == 200));
    let (_, xfcc) = get(&x).unwrap();
    let xfcc = xfcc.unwrap_or_default();
    assert!(xfcc.contains("URI=spiffe://cluster.local/ns/default/sa/x"), "X's identity reaches B's workload: {xfcc:?}");
    assert_eq!(rootca_certificates(&b.sds_socket()), 2, "meshpush's root and the mesh config's");

    // Another trust domain under the trusted root: refused by name, until
    // the entry lists it.
    let y = other.workload("spiffe://other.td/ns/default/sa/y");
    let refused = stat("fail_verify_san");
    assert!(get(&y).is_err(), "a peer of another trust domain");
    wait_until(Instant::now() + DEADLINE, "B counts the foreign trust domain", &procs, || {
        stat("fail_verify_san") > refused
    });
    let both = format!("[{{pem: {}, trustDomains: [other.td]}}]", quoted(&other.pem));
    std::fs::write(&mesh_file, mesh_config(&both)).unwrap();
    wait_until(Instant::now() + DEADLINE, "B takes the listed trust domain", &procs, || {
        get(&y).is_ok_and(|(s, _)| s == 200)
    });

    // The root removed: X is refused again.
    std::fs::write(&mesh_file, mesh_config("[]")).unwrap();
    wait_until(Instant::now() + DEADLINE, "B no longer trusts the removed root", &procs, || get(&x).is_err());
    assert_eq!(rootca_certificates(&b.sds_socket()), 1, "back to meshpush's root alone");
}
