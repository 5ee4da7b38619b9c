//! A client of meshpush's secure port, as a workload's agent is one: gRPC
//! over TLS that trusts the mesh root, with or without a client
//! certificate, and the CSRs it sends to the CA; and a meshpush serving a
//! secure port, its CA and a key set for tokens ([`SecureMesh`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use meshpush::ca::service::proto::istio_certificate_service_client::IstioCertificateServiceClient;
use meshpush::ca::service::proto::{IstioCertificateRequest, IstioCertificateResponse};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use super::meshpush::Meshpush;
use super::process::{free_addr, scratch_dir};
use super::scene::MeshDir;

/// A workload's key and the certificate chain the CA gave it.
pub struct WorkloadCert {
    /// The key (PKCS#8 PEM).
    pub key_pem: String,
    /// The chain the CA returned (leaf first, roots last).
    pub chain: Vec<String>,
}

/// A fresh key and a CSR for it naming `sans` (URIs).
pub fn csr(sans: &[&str]) -> (rcgen::KeyPair, String) {
    let key = rcgen::KeyPair::generate().expect("a P-256 key");
    let mut params = rcgen::CertificateParams::default();
    params.subject_alt_names = sans.iter().map(|s| rcgen::SanType::URI((*s).try_into().expect("a URI"))).collect();
    let csr = params.serialize_request(&key).expect("a CSR").pem().expect("PEM");
    (key, csr)
}

/// A gRPC channel to the secure port at `addr`, trusting `roots_pem`,
/// presenting `client` (chain and key) when given; the server name
/// verified is `localhost`.
pub async fn channel(
    addr: SocketAddr,
    roots_pem: &str,
    client: Option<&WorkloadCert>,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(roots_pem.as_bytes()) {
        roots.add(cert.expect("a PEM root")).expect("a usable root");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots);
    let mut config = match client {
        Some(cert) => {
            // The leaf and intermediates; not the roots (the last entry).
            let chain: Vec<CertificateDer<'static>> = cert.chain[..cert.chain.len() - 1]
                .iter()
                .flat_map(|pem| CertificateDer::pem_slice_iter(pem.as_bytes()).map(|c| c.expect("PEM")))
                .collect();
            let key = PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes()).expect("a PEM key");
            builder.with_client_auth_cert(chain, key).expect("a client certificate")
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    tonic::transport::Endpoint::from_static("http://localhost")
        .connect_with_connector(TlsConnect { addr, connector })
        .await
}

/// Connects TCP, then TLS (a tower service of URIs, as tonic wants).
#[derive(Clone)]
struct TlsConnect {
    addr: SocketAddr,
    connector: tokio_rustls::TlsConnector,
}

impl tower_service::Service<http::Uri> for TlsConnect {
    type Response = hyper_util::rt::TokioIo<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;
    type Error = std::io::Error;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Uri) -> Self::Future {
        let (addr, connector) = (self.addr, self.connector.clone());
        Box::pin(async move {
            let tcp = tokio::net::TcpStream::connect(addr).await?;
            let name = ServerName::try_from("localhost").expect("a name");
            Ok(hyper_util::rt::TokioIo::new(connector.connect(name, tcp).await?))
        })
    }
}

/// Asks the CA for a certificate for `csr`, with `token` as the bearer.
pub async fn create_certificate(
    channel: tonic::transport::Channel,
    csr: &str,
    token: Option<&str>,
) -> Result<IstioCertificateResponse, tonic::Status> {
    create_certificate_for(channel, csr, token, None).await
}

/// As [`create_certificate`], asking for `impersonated` (a SPIFFE URI) in
/// the request's `ImpersonatedIdentity` metadata, as ztunnel asks for the
/// certificates of the workloads on its node.
pub async fn create_certificate_for(
    channel: tonic::transport::Channel,
    csr: &str,
    token: Option<&str>,
    impersonated: Option<&str>,
) -> Result<IstioCertificateResponse, tonic::Status> {
    use prost_types::{Struct, Value, value::Kind};
    let metadata = impersonated.map(|id| Struct {
        fields: [("ImpersonatedIdentity".to_string(), Value { kind: Some(Kind::StringValue(id.into())) })]
            .into_iter()
            .collect(),
    });
    let mut client = IstioCertificateServiceClient::new(channel);
    let mut request =
        tonic::Request::new(IstioCertificateRequest { csr: csr.into(), validity_duration: 3600, metadata });
    if let Some(token) = token {
        request.metadata_mut().insert("authorization", format!("Bearer {token}").parse().expect("ASCII"));
    }
    client.create_certificate(request).await.map(tonic::Response::into_inner)
}

/// As [`create_certificate`], for a caller of cluster `cluster` (the
/// `ClusterID` header pilot-agent sends).
pub async fn create_certificate_in(
    channel: tonic::transport::Channel,
    csr: &str,
    token: &str,
    cluster: Option<&str>,
) -> Result<IstioCertificateResponse, tonic::Status> {
    let mut client = IstioCertificateServiceClient::new(channel);
    let mut request =
        tonic::Request::new(IstioCertificateRequest { csr: csr.into(), validity_duration: 3600, metadata: None });
    request.metadata_mut().insert("authorization", format!("Bearer {token}").parse().expect("ASCII"));
    if let Some(cluster) = cluster {
        request.metadata_mut().insert("clusterid", cluster.parse().expect("ASCII"));
    }
    client.create_certificate(request).await.map(tonic::Response::into_inner)
}

/// A meshpush that is the mesh's CA (a self-signed root in a directory of
/// its own) and takes tokens signed by a key set of its own, serving `dir`.
pub struct SecureMesh {
    /// The server.
    pub mesh: Meshpush,
    /// Its secure port.
    pub secure: std::net::SocketAddr,
    /// Its admission webhooks' HTTPS port.
    pub webhook: std::net::SocketAddr,
    /// The mesh root it created (`CA_DIR/root-cert.pem`).
    pub root: PathBuf,
    jwt_key: PathBuf,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

impl SecureMesh {
    /// Starts meshpush on `dir` with a fresh CA directory and key set, and
    /// waits until it is ready.
    pub fn start(dir: &MeshDir) -> SecureMesh {
        SecureMesh::start_with_flags(dir, &[])
    }

    /// [`SecureMesh::start`] with more `serve` flags.
    pub fn start_with_flags(dir: &MeshDir, extra: &[&str]) -> SecureMesh {
        SecureMesh::start_via(extra, |flags| Meshpush::start_with_flags(&dir.path(), flags))
    }

    /// A secure meshpush reading the mesh from the API server of
    /// `kubeconfig` (a stand-in), with more `serve` flags.
    pub fn start_kube(kubeconfig: &std::path::Path, extra: &[&str]) -> SecureMesh {
        SecureMesh::start_via(extra, |flags| Meshpush::start_kube(kubeconfig, flags))
    }

    fn start_via(extra: &[&str], start: impl FnOnce(&[&str]) -> Meshpush) -> SecureMesh {
        let ca_dir = scratch_dir("ca");
        let jwt_dir = scratch_dir("jwt");
        let (jwt_key, jwks) = meshpush::cli::jwt::keygen(jwt_dir.path()).unwrap();
        let (secure, webhook) = (free_addr(), free_addr());
        let (ca, secure_addr, jwks) =
            (ca_dir.path().display().to_string(), secure.to_string(), jwks.display().to_string());
        let webhook_addr = webhook.to_string();
        let mut flags =
            vec!["--ca-dir", &ca, "--secure-xds-addr", &secure_addr, "--jwks", &jwks, "--webhook-addr", &webhook_addr];
        flags.extend_from_slice(extra);
        let mesh = start(&flags);
        let root = ca_dir.path().join("root-cert.pem");
        SecureMesh { mesh, secure, webhook, root, jwt_key, _dirs: (ca_dir, jwt_dir) }
    }

    /// A token proving `namespace`/`service_account`, valid an hour.
    pub fn token(&self, namespace: &str, service_account: &str) -> String {
        meshpush::cli::jwt::issue(&self.jwt_key, namespace, service_account, Duration::from_secs(3600)).unwrap()
    }

    /// A token as [`SecureMesh::token`], bound to Pod `pod` of the namespace
    /// (with `uid`, if given), as a Pod's projected token is.
    pub fn pod_token(&self, namespace: &str, service_account: &str, pod: &str, uid: Option<&str>) -> String {
        let pod = meshpush::ca::authn::CallerPod { name: pod.into(), uid: uid.map(Into::into) };
        meshpush::cli::jwt::issue_for_pod(
            &self.jwt_key,
            namespace,
            service_account,
            Some(&pod),
            Duration::from_secs(3600),
        )
        .unwrap()
    }
}
