//! The secure xDS port of the real binary (`serve --ca-dir`): the CA
//! issues certificates for the identity a token proves and nothing else,
//! renews them for a caller presenting its current one, and ADS serves a
//! stream only a node its client certificate names.

use std::time::Duration;

use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;

use crate::support::manifests::sidecar_node;
use crate::support::meshpush::Meshpush;
use crate::support::process::{free_addr, scratch_dir};
use crate::support::scene::MeshDir;
use crate::support::secure::{self, SecureMesh, WorkloadCert};

const SLEEP: &str = "spiffe://cluster.local/ns/default/sa/sleep";

/// Opens an ADS stream for `node_id` over `channel`; the first response, or the refusal.
async fn first_cds(channel: tonic::transport::Channel, node_id: &str) -> Result<(), tonic::Status> {
    let mut client = AggregatedDiscoveryServiceClient::new(channel);
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(DiscoveryRequest {
        type_url: meshpush::resource::TypeUrl::Cluster.as_str().into(),
        node: Some(meshpush::testing::memory::node(node_id, "REDIRECT", &[])),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut stream =
        client.stream_aggregated_resources(tokio_stream::wrappers::ReceiverStream::new(rx)).await?.into_inner();
    let first = tokio::time::timeout(Duration::from_secs(10), stream.message()).await.expect("an answer in time")?;
    assert!(first.is_some(), "the stream ended without a response");
    Ok(())
}

#[test]
fn the_ca_issues_only_proven_identities_and_ads_serves_only_the_certificates_node() {
    let dir = MeshDir::new();
    let secure_mesh = SecureMesh::start(&dir);
    let (mesh, secure_addr) = (&secure_mesh.mesh, secure_mesh.secure);
    assert!(mesh.log().contains("created a self-signed root CA"), "{}", mesh.log_tail(20));
    let root = std::fs::read_to_string(&secure_mesh.root).unwrap();
    let token = secure_mesh.token("default", "sleep");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let anonymous = || secure::channel(secure_addr, &root, None);

        // A token proves default/sleep: a CSR for it is signed, for another refused.
        let (key, csr) = secure::csr(&[SLEEP]);
        let issued = secure::create_certificate(anonymous().await.unwrap(), &csr, Some(&token)).await.unwrap();
        assert_eq!(issued.cert_chain.len(), 2, "leaf and root");
        assert_eq!(issued.cert_chain[1], root);
        let (_, other) = secure::csr(&["spiffe://cluster.local/ns/istio-system/sa/istiod"]);
        let refused = secure::create_certificate(anonymous().await.unwrap(), &other, Some(&token)).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
        let refused = secure::create_certificate(anonymous().await.unwrap(), &csr, None).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");

        // Renewal: the current certificate alone is the credential.
        let sleep = WorkloadCert { key_pem: key.serialize_pem(), chain: issued.cert_chain };
        let (_, renewal) = secure::csr(&[SLEEP]);
        let with_cert = secure::channel(secure_addr, &root, Some(&sleep)).await.unwrap();
        secure::create_certificate(with_cert.clone(), &renewal, None).await.expect("a renewal by certificate");

        // ADS: no certificate, another namespace's node, then its own node.
        let status = first_cds(anonymous().await.unwrap(), &sidecar_node("10.0.0.1", "sleep-1", "default")).await;
        assert_eq!(status.unwrap_err().code(), tonic::Code::Unauthenticated);
        let status = first_cds(with_cert.clone(), &sidecar_node("10.0.0.1", "istiod-1", "istio-system")).await;
        let status = status.unwrap_err();
        assert_eq!(status.code(), tonic::Code::PermissionDenied);
        assert!(
            status.message().contains("claims namespace istio-system") && status.message().contains(SLEEP),
            "{status:?}"
        );
        first_cds(with_cert, &sidecar_node("10.0.0.1", "sleep-1", "default")).await.expect("its own node is served");

        // A client certificate from another CA does not get through the handshake.
        let stranger_dir = scratch_dir("other-ca");
        let stranger_ca = meshpush::ca::CertificateAuthority::open(
            stranger_dir.path(),
            "cluster.local",
            meshpush::ca::Lifetimes::default(),
        )
        .unwrap();
        let (stranger_key, stranger_csr) = secure::csr(&[SLEEP]);
        let held: meshpush::model::Identity = SLEEP.parse().unwrap();
        let forged = stranger_ca.sign_workload(&stranger_csr, &[held], Duration::ZERO).unwrap();
        let stranger = WorkloadCert { key_pem: stranger_key.serialize_pem(), chain: forged.chain };
        let refused = match secure::channel(secure_addr, &root, Some(&stranger)).await {
            Err(_) => true,
            Ok(channel) => first_cds(channel, &sidecar_node("10.0.0.1", "sleep-1", "default")).await.is_err(),
        };
        assert!(refused, "a certificate of another CA was served");
    });
    let log = mesh.log();
    assert!(!log.contains("PRIVATE KEY") && !log.contains(&token), "key or token in the log:\n{log}");
    assert!(mesh.metric("citadel_server_success_cert_issuance") >= 2.0);
    assert!(mesh.metric("meshpush_xds_streams_refused_total") >= 2.0);
}

/// With a cluster, the CA has a token reviewed by its API server (here the
/// stand-in, whose TokenReviews `kubectl` checks in `kube_source`).
#[test]
fn with_kubernetes_a_token_the_cluster_reviews_proves_its_service_account() {
    let api = crate::support::kube_api::KubeApi::start();
    api.accept_token("sleep-token", "default", "sleep");
    let kubeconfig = scratch_dir("kubeconfig");
    let kubeconfig = kubeconfig.path().join("config");
    std::fs::write(&kubeconfig, api.kubeconfig()).unwrap();
    let ca_dir = scratch_dir("ca");
    let secure_addr = free_addr();
    let mesh = Meshpush::start_kube(
        &kubeconfig,
        &[
            "--ca-dir",
            &ca_dir.path().display().to_string(),
            "--secure-xds-addr",
            &secure_addr.to_string(),
            "--webhook-addr",
            "off",
        ],
    );
    let root = std::fs::read_to_string(ca_dir.path().join("root-cert.pem")).unwrap();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let (_, csr) = secure::csr(&[SLEEP]);
        let channel = || secure::channel(secure_addr, &root, None);
        let issued = secure::create_certificate(channel().await.unwrap(), &csr, Some("sleep-token")).await;
        assert_eq!(issued.expect("a reviewed token is accepted").cert_chain.len(), 2);
        let refused = secure::create_certificate(channel().await.unwrap(), &csr, Some("stolen")).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
        assert!(refused.message().contains("TokenReview"), "{refused:?}");
    });
    assert!(!mesh.log().contains("sleep-token"), "a token reached the log");
}

#[test]
fn on_kubernetes_replicas_share_one_self_signed_root_kept_in_a_secret() {
    use std::time::Instant;
    let api = crate::support::kube_api::KubeApi::start();
    api.put("apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n");
    let kubeconfig = scratch_dir("kubeconfig");
    let kubeconfig = kubeconfig.path().join("config");
    std::fs::write(&kubeconfig, api.kubeconfig()).unwrap();
    let replica = || {
        let (ca_dir, secure_addr) = (scratch_dir("ca"), free_addr());
        let flags = [
            "--ca-dir",
            &ca_dir.path().display().to_string(),
            "--ca-secret",
            "istio-system/istio-ca-secret",
            "--secure-xds-addr",
            &secure_addr.to_string(),
            "--webhook-addr",
            "off",
        ]
        .map(String::from);
        let mesh = Meshpush::start_kube(&kubeconfig, &flags.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(std::fs::read_dir(ca_dir.path()).unwrap().next().is_none(), "the key stays out of the directory");
        (mesh, secure_addr)
    };
    let (first, first_addr) = replica();
    let secret = api.get("Secret", "istio-system", "istio-ca-secret").expect("the first replica keeps its root there");
    assert_eq!(secret["type"], "istio.io/ca-root");
    use base64::Engine as _;
    let root = String::from_utf8(
        base64::engine::general_purpose::STANDARD.decode(secret["data"]["root-cert.pem"].as_str().unwrap()).unwrap(),
    )
    .unwrap();
    let (second, second_addr) = replica();
    crate::support::process::wait_until(
        Instant::now() + Duration::from_secs(30),
        "the root is published",
        &[first.process(), second.process()],
        || {
            api.get("ConfigMap", "shop", "istio-ca-root-cert")
                .is_some_and(|cm| cm["data"]["root-cert.pem"].as_str() == Some(root.as_str()))
        },
    );
    // Both replicas serve with certificates of that one root.
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        for addr in [first_addr, second_addr] {
            let (_, csr) = secure::csr(&[]);
            let channel = secure::channel(addr, &root, None).await.expect("the port's certificate chains to the root");
            let refused = secure::create_certificate(channel, &csr, None).await.unwrap_err();
            // Past TLS (verified against the shared root), the CA itself says no.
            assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
        }
    });
}
