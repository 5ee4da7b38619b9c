//! `caCertificates[].spiffeBundleUrl` with the real server: under `serve
//! --multi-root-mesh`, meshpush fetches the SPIFFE bundle this test serves
//! over HTTPS (its CA trusted through `SSL_CERT_FILE` in meshpush's
//! environment, as istiod trusts the system's roots), and a client
//! subscribed to PCDS, as an agent is, is sent the bundle's root. When the
//! server swaps roots, the next refresh (`--spiffe-bundle-refresh 1s`)
//! sends the new root instead of the old one.

use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use meshpush::generate::pcds::ProxyConfig;
use parking_lot::Mutex;
use prost::Message as _;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject as _;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::support::meshpush::Meshpush;
use crate::support::scene::MeshDir;
use crate::support::tls::TestCa;

const DEADLINE: Duration = Duration::from_secs(30);
const PCDS: &str = meshpush::resource::TypeUrl::ProxyConfig.as_str();

/// A certificate's DER, from its PEM.
fn der(pem: &str) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem.as_bytes()).expect("a PEM certificate").to_vec()
}

/// A SPIFFE bundle (a JWK Set) holding `root` as its one x509-svid key.
fn bundle(root: &[u8]) -> String {
    use base64::Engine as _;
    let x5c = base64::engine::general_purpose::STANDARD.encode(root);
    serde_json::json!({"keys": [{"use": "x509-svid", "kty": "EC", "crv": "P-256", "x5c": [x5c]}]}).to_string()
}

/// Serves `bundle`'s current text at `/bundle` over HTTPS on `listener`,
/// presenting a certificate for 127.0.0.1 that `ca` signed.
async fn serve_bundle(listener: tokio::net::TcpListener, ca: &TestCa, bundle: Arc<Mutex<String>>) {
    let leaf = ca.leaf("bundle server", &["127.0.0.1"]);
    let app =
        axum::Router::new().route("/bundle", axum::routing::get(move || std::future::ready(bundle.lock().clone())));
    meshpush::testing::https::serve(listener, &leaf.cert, &leaf.key, app);
}

/// The roots (DER) of PCDS responses on `stream`, ACKing each, until
/// `want` holds of them; panics at the deadline with what came last.
async fn await_roots(
    stream: &mut tonic::Streaming<DiscoveryResponse>,
    requests: &mpsc::Sender<DiscoveryRequest>,
    want: impl Fn(&[Vec<u8>]) -> bool,
    what: &str,
    mesh: &Meshpush,
) -> Vec<Vec<u8>> {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let mut last = None;
    loop {
        let response = match tokio::time::timeout_at(deadline, stream.message()).await {
            Ok(Ok(Some(response))) => response,
            Ok(other) => panic!("the PCDS stream ended ({other:?}) waiting for {what}\n{}", mesh.log_tail(30)),
            Err(_) => panic!("timed out waiting for {what}; last PCDS roots: {last:?}\n{}", mesh.log_tail(30)),
        };
        requests
            .send(DiscoveryRequest {
                type_url: PCDS.into(),
                version_info: response.version_info.clone(),
                response_nonce: response.nonce.clone(),
                ..Default::default()
            })
            .await
            .expect("the ACK is sent");
        let [resource] = response.resources.as_slice() else {
            panic!("PCDS sends one resource under --multi-root-mesh: {response:?}");
        };
        let config = ProxyConfig::decode(resource.value.as_slice()).expect("an istio.mesh.v1alpha1.ProxyConfig");
        let roots: Vec<Vec<u8>> = config.ca_certificates_pem.iter().map(|pem| der(pem)).collect();
        if want(&roots) {
            return roots;
        }
        last = Some(roots.len());
    }
}

#[test]
fn a_spiffe_bundle_s_root_reaches_pcds_and_a_swapped_root_replaces_it() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let work = tempfile::TempDir::new().unwrap();
    let server_ca = TestCa::new("bundle server CA");
    let ssl_cert_file = server_ca.write(work.path(), "bundle-server-ca.pem");
    let (b, c) = (der(&TestCa::new("root B").pem), der(&TestCa::new("root C").pem));
    let served = Arc::new(Mutex::new(bundle(&b)));
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap();
    rt.block_on(serve_bundle(listener, &server_ca, served.clone()));

    // No scheme: fetched over https, as istiod prepends it.
    let mesh_config = work.path().join("mesh");
    std::fs::write(&mesh_config, format!("caCertificates:\n- spiffeBundleUrl: {addr}/bundle\n")).unwrap();
    let dir = MeshDir::new();
    dir.write("mesh.yaml", &crate::support::manifests::service("shop", "web", 18211));
    let mesh_arg = mesh_config.display().to_string();
    let mesh = Meshpush::start_with_env(
        &dir.path(),
        &["--mesh-config", &mesh_arg, "--multi-root-mesh", "--spiffe-bundle-refresh", "1s"],
        &[("SSL_CERT_FILE", &ssl_cert_file.display().to_string())],
    );

    let xds = mesh.xds_addr().to_string();
    rt.block_on(async {
        let mut client = AggregatedDiscoveryServiceClient::connect(format!("http://{xds}")).await.unwrap();
        let (tx, rx) = mpsc::channel(4);
        tx.send(DiscoveryRequest {
            type_url: PCDS.into(),
            node: Some(Node {
                id: "sidecar~127.0.0.9~agent-1.shop~shop.svc.cluster.local".into(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap();
        let mut stream = client
            .stream_aggregated_resources(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();

        let roots = await_roots(&mut stream, &tx, |r| r.contains(&b), "root B over PCDS", &mesh).await;
        assert_eq!(roots, vec![b.clone()], "the bundle's root, alone");

        *served.lock() = bundle(&c);
        let roots = await_roots(&mut stream, &tx, |r| r.contains(&c), "root C after a refresh", &mesh).await;
        assert_eq!(roots, vec![c.clone()], "the swapped root replaces the old one");
    });

    let configz: Value = serde_json::from_str(&mesh.admin("/debug/configz").body).expect("JSON");
    let fetched: Vec<&Value> =
        configz["objects"].as_array().unwrap().iter().filter(|o| o["kind"] == "FetchedTrustBundle").collect();
    assert_eq!(fetched.len(), 1, "{fetched:?}");
    assert_eq!(fetched[0]["object"]["url"], format!("https://{addr}/bundle"));
    assert_eq!(fetched[0]["object"]["error"], Value::Null);
    let reported =
        configz["problems"].as_array().unwrap().iter().any(|p| p["path"] == "caCertificates[0].spiffeBundleUrl");
    assert!(!reported, "a fetched URL is applied, not reported: {}", configz["problems"]);
}
