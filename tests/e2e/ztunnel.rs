//! ztunnel against the real binary's secure port, where meshpush is the
//! mesh's CA (`serve --ca-dir --enable-ambient --ca-trusted-node-accounts
//! istio-system/ztunnel`).
//!
//! The stand-in ztunnel (`support::ztunnel`) runs in CI: it proves itself
//! with a Pod-bound service-account token and no client certificate, as
//! ztunnel does; it is served the workload API, or refused when its token
//! proves nothing or another namespace; and it asks the CA for the
//! certificates of the workloads on its node (`ImpersonatedIdentity`),
//! which are issued for its node's workloads only and to a trusted account
//! only. The real ztunnel runs in `real_ztunnel` when `ZTUNNEL_BIN` names
//! a binary (`scripts/build-ztunnel.sh`).

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject as _;

use crate::support::scene::MeshDir;
use crate::support::secure::{self, SecureMesh};
use crate::support::ztunnel::{Open, Ztunnel, decoded, node_of};
use meshpush::workload_api::workload::Address;

/// Ambient workloads on two nodes, ztunnel's own Pod on the first, and a
/// Pod of another istio-system account beside it.
pub(crate) const MESH: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: demo, labels: {istio.io/dataplane-mode: ambient}}
---
apiVersion: v1
kind: Pod
metadata: {name: ztunnel-a, namespace: istio-system, uid: 5d1c-ztunnel-a}
spec: {serviceAccountName: ztunnel, nodeName: node-a}
status: {phase: Running, podIP: 10.1.0.2}
---
apiVersion: v1
kind: Pod
metadata: {name: other-a, namespace: istio-system}
spec: {serviceAccountName: other, nodeName: node-a}
status: {phase: Running, podIP: 10.1.0.3}
---
apiVersion: v1
kind: Pod
metadata: {name: client-0, namespace: demo, annotations: {ambient.istio.io/redirection: enabled}}
spec: {serviceAccountName: client, nodeName: node-a}
status: {phase: Running, podIP: 10.1.0.5, conditions: [{type: Ready, status: "True"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: server-0, namespace: demo, annotations: {ambient.istio.io/redirection: enabled}}
spec: {serviceAccountName: server, nodeName: node-b}
status: {phase: Running, podIP: 10.1.1.6, conditions: [{type: Ready, status: "True"}]}
"#;

const CLIENT: &str = "spiffe://cluster.local/ns/demo/sa/client";
const SERVER: &str = "spiffe://cluster.local/ns/demo/sa/server";

/// The flags that make meshpush serve ztunnel as Istio's chart sets istiod.
pub(crate) const AMBIENT_FLAGS: [&str; 3] = ["--enable-ambient", "--ca-trusted-node-accounts", "istio-system/ztunnel"];

fn ambient_mesh() -> (MeshDir, SecureMesh, String) {
    let dir = MeshDir::new();
    dir.write("mesh.yaml", MESH);
    let mesh = SecureMesh::start_with_flags(&dir, &AMBIENT_FLAGS);
    let root = std::fs::read_to_string(&mesh.root).unwrap();
    (dir, mesh, root)
}

/// The SPIFFE identities of a chain's leaf.
fn leaf_identities(chain: &[String]) -> Vec<String> {
    let leaf = CertificateDer::pem_slice_iter(chain[0].as_bytes()).next().expect("a PEM leaf").expect("PEM");
    meshpush::ca::tls::identities_of(&leaf).iter().map(ToString::to_string).collect()
}

#[test]
fn a_ztunnel_proves_itself_with_its_token_and_is_served_the_workload_api_on_the_secure_port() {
    let (_dir, secure_mesh, root) = ambient_mesh();
    let token = secure_mesh.pod_token("istio-system", "ztunnel", "ztunnel-a", Some("5d1c-ztunnel-a"));
    let node = node_of("ztunnel-a", "10.1.0.2", "node-a");
    let open = |token: Option<String>| Open { node: Some(node.clone()), token, ..Open::default() };
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let channel =
            || async { secure::channel(secure_mesh.secure, &root, None).await.expect("TLS without a certificate") };

        let mut z =
            Ztunnel::open(channel().await, open(Some(token.clone()))).await.expect("a ztunnel's token is accepted");
        let (addresses, _) = z.initial().await;
        let names: Vec<String> = decoded::<Address>(&addresses).into_keys().collect();
        for pod in ["Kubernetes//Pod/demo/client-0", "Kubernetes//Pod/demo/server-0"] {
            assert!(names.iter().any(|n| n == pod), "{pod} in {names:?}");
        }

        // No token and no certificate; a token that verifies against no key;
        // a token of another namespace for ztunnel's node.
        let refused = Ztunnel::refusal(Ztunnel::open(channel().await, open(None)).await).await;
        assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
        assert!(refused.message().contains("Bearer"), "{refused:?}");
        let refused = Ztunnel::refusal(Ztunnel::open(channel().await, open(Some("not-a-jwt".into()))).await).await;
        assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
        assert!(refused.message().starts_with("authentication failure"), "{refused:?}");
        let client_token = secure_mesh.pod_token("demo", "client", "client-0", None);
        let refused = Ztunnel::refusal(Ztunnel::open(channel().await, open(Some(client_token))).await).await;
        assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
        assert!(refused.message().contains("istio-system"), "{refused:?}");
    });
    let log = secure_mesh.mesh.log();
    assert!(!log.contains(&token[token.len() - 20..]), "a token reached the log");
    assert!(log.contains("refused a secure ADS stream"), "{}", secure_mesh.mesh.log_tail(20));
}

#[test]
fn the_ca_issues_a_ztunnel_the_certificates_of_its_node_s_workloads_and_nothing_else() {
    let (_dir, secure_mesh, root) = ambient_mesh();
    let ztunnel = secure_mesh.pod_token("istio-system", "ztunnel", "ztunnel-a", Some("5d1c-ztunnel-a"));
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let channel = || async { secure::channel(secure_mesh.secure, &root, None).await.unwrap() };
        let ask = |token: String, identity: &'static str| {
            let channel = channel();
            async move {
                let (_, csr) = secure::csr(&[identity]);
                secure::create_certificate_for(channel.await, &csr, Some(&token), Some(identity)).await
            }
        };

        // A workload on ztunnel's node: its identity, and only that.
        let issued = ask(ztunnel.clone(), CLIENT).await.expect("the client Pod runs on node-a");
        assert_eq!(leaf_identities(&issued.cert_chain), [CLIENT]);
        assert_eq!(issued.cert_chain.last().unwrap(), &root);

        // A workload on another node; a trusted account's token bound to a
        // Pod that is not ztunnel's; an untrusted account on the same node;
        // a workload asking for its neighbour's identity.
        let denied = |r: Result<_, tonic::Status>, says: &str| {
            let status = r.expect_err("refused");
            assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
            assert!(status.message().contains(says), "{says:?} in {status:?}");
        };
        denied(ask(ztunnel.clone(), SERVER).await, "node-a");
        let stale = secure_mesh.pod_token("istio-system", "ztunnel", "ztunnel-a", Some("an-older-uid"));
        denied(ask(stale, CLIENT).await, "another UID");
        let other = secure_mesh.pod_token("istio-system", "other", "other-a", None);
        denied(ask(other, CLIENT).await, "not a trusted node account");
        let client = secure_mesh.pod_token("demo", "client", "client-0", None);
        denied(ask(client, SERVER).await, "not a trusted node account");

        // Without the metadata, ztunnel's token is its own identity, as any caller's.
        let (_, csr) = secure::csr(&["spiffe://cluster.local/ns/istio-system/sa/ztunnel"]);
        secure::create_certificate(channel().await, &csr, Some(&ztunnel)).await.expect("its own identity");
    });
    let log = secure_mesh.mesh.log();
    assert!(log.contains("CA: refused an impersonation"), "{}", secure_mesh.mesh.log_tail(20));
    assert!(!log.contains(&ztunnel[ztunnel.len() - 20..]), "a token reached the log");
}

/// On Kubernetes the token is reviewed by the API server, whose review
/// names the token's Pod in its extras; the Pods (and their UIDs) come
/// from the cluster (the stand-in, which `kubectl` checks in `kube_source`).
#[test]
fn on_kubernetes_the_reviewed_token_s_pod_places_the_ztunnel_on_its_node() {
    use crate::support::meshpush::Meshpush;
    use crate::support::process::{free_addr, scratch_dir};
    let api = crate::support::kube_api::KubeApi::start();
    for doc in MESH.split("\n---\n") {
        api.put(doc);
    }
    api.accept_pod_token("ztunnel-token", "istio-system", "ztunnel", "ztunnel-a", "5d1c-ztunnel-a");
    api.accept_pod_token("reborn-token", "istio-system", "ztunnel", "ztunnel-a", "a-newer-uid");
    let kubeconfig = scratch_dir("kubeconfig");
    let kubeconfig = kubeconfig.path().join("config");
    std::fs::write(&kubeconfig, api.kubeconfig()).unwrap();
    let ca_dir = scratch_dir("ca");
    let (secure_addr, ca) = (free_addr(), ca_dir.path().display().to_string());
    let secure_flag = secure_addr.to_string();
    let mut flags = vec!["--ca-dir", &ca, "--secure-xds-addr", &secure_flag, "--webhook-addr", "off"];
    flags.extend(AMBIENT_FLAGS);
    let mesh = Meshpush::start_kube(&kubeconfig, &flags);
    let root = std::fs::read_to_string(ca_dir.path().join("root-cert.pem")).unwrap();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let ask = |token: &'static str| {
            let root = root.clone();
            async move {
                let (_, csr) = secure::csr(&[CLIENT]);
                let channel = secure::channel(secure_addr, &root, None).await.unwrap();
                secure::create_certificate_for(channel, &csr, Some(token), Some(CLIENT)).await
            }
        };
        // The Pods arrive through the watch: ask until they are known.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let issued = loop {
            match ask("ztunnel-token").await {
                Ok(issued) => break issued,
                Err(status) if std::time::Instant::now() < deadline => {
                    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                Err(status) => panic!("ztunnel-a was never placed on node-a: {status:?}\n{}", mesh.log_tail(30)),
            }
        };
        assert_eq!(leaf_identities(&issued.cert_chain), [CLIENT]);
        let refused = ask("reborn-token").await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
        assert!(refused.message().contains("another UID"), "{refused:?}");
    });
    assert!(!mesh.log().contains("ztunnel-token"), "a token reached the log");
}
