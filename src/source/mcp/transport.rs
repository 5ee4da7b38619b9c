//! The connection to one MCP server: gRPC over TCP, in plaintext or TLS
//! as its `tlsSettings` say (`config::mesh::config_sources`).
//!
//! - The server is verified against `caCertificates` (inline PEM, or a
//!   file as in a DestinationRule), the `credentialName` Secret's CA (a
//!   Secret of meshpush's own namespace, as istiod reads it), the mesh
//!   roots (ISTIO_MUTUAL), or else the system's roots; `caCrl` revokes.
//!   Its certificate must carry one of `subjectAltNames` (DNS or IP), or
//!   else the `sni`, or else the host dialled. `insecureSkipVerify`
//!   accepts any.
//! - MUTUAL presents `clientCertificate` and `privateKey` (or the
//!   Secret's pair); ISTIO_MUTUAL presents meshpush's own mesh
//!   certificate ([`MeshIdentity`]), issued by its CA for each connection.
//!
//! Every material is read when a connection is made, so a rotated file
//! or Secret is what the next connection uses. A key's bytes are never
//! shown: errors name the file or Secret only.

use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use rustls_pki_types::pem::PemObject as _;

use crate::ca::CertificateAuthority;
use crate::config::mesh::config_sources::{McpServer, McpTlsMode};
use crate::model::{Identity, StoreSnapshot};

/// How long a connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Lifetime of the certificate meshpush issues itself for ISTIO_MUTUAL.
const OWN_CERT_TTL: Duration = Duration::from_secs(24 * 3600);

/// meshpush's own mesh identity, which its CA certifies for ISTIO_MUTUAL.
#[derive(Clone)]
pub struct MeshIdentity {
    /// The CA.
    pub ca: Arc<CertificateAuthority>,
    /// Who meshpush is (`spiffe://TD/ns/SYSTEM_NS/sa/SA`).
    pub identity: Identity,
}

impl std::fmt::Debug for MeshIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeshIdentity").field("identity", &self.identity.to_string()).finish()
    }
}

impl MeshIdentity {
    /// A fresh certificate and key for the identity.
    fn certified(&self) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
        let key = rcgen::KeyPair::generate().map_err(|e| format!("making a key: {e}"))?;
        let mut params = rcgen::CertificateParams::default();
        let uri = self.identity.to_string().try_into().map_err(|e: rcgen::Error| e.to_string())?;
        params.subject_alt_names = vec![rcgen::SanType::URI(uri)];
        let csr = params.serialize_request(&key).map_err(|e| format!("making a CSR: {e}"))?;
        let csr_pem = csr.pem().map_err(|e| format!("making a CSR: {e}"))?;
        let issued = self
            .ca
            .sign_workload(&csr_pem, std::slice::from_ref(&self.identity), OWN_CERT_TTL)
            .map_err(|e| format!("issuing meshpush's own certificate: {e}"))?;
        let chain = issued.chain[..issued.chain.len() - 1].join("");
        let certs = pem_certs(chain.as_bytes()).map_err(|e| format!("its certificate: {e}"))?;
        let key = PrivateKeyDer::try_from(key.serialize_der()).map_err(|e| e.to_string())?;
        Ok((certs, key))
    }
}

/// What a connection needs beyond the server's settings.
#[derive(Debug, Clone, Default)]
pub struct TransportContext {
    /// meshpush's identity and CA, when it is the mesh's CA.
    pub mesh: Option<MeshIdentity>,
    /// meshpush's own namespace, where `credentialName` Secrets are read.
    pub system_namespace: Arc<str>,
}

/// Opens a connection to `server`; `store` holds the Secrets.
pub async fn connect(
    server: &McpServer,
    context: &TransportContext,
    store: &StoreSnapshot,
) -> Result<tonic::transport::Channel, String> {
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{}", server.authority))
        .map_err(|e| format!("address: {e}"))?
        .connect_timeout(CONNECT_TIMEOUT)
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(10));
    if server.tls.mode == McpTlsMode::Disable {
        return endpoint.connect().await.map_err(|e| crate::text::error_chain(&e));
    }
    let config = client_config(server, context, store)?;
    let name = server.tls.sni.clone().unwrap_or_else(|| server.host.to_string());
    let server_name = ServerName::try_from(name.clone()).map_err(|_| format!("{name:?} is not a server name"))?;
    let connect = Connect {
        authority: server.authority.clone(),
        server_name,
        tls: tokio_rustls::TlsConnector::from(Arc::new(config)),
    };
    endpoint.connect_with_connector(connect).await.map_err(|e| crate::text::error_chain(&e))
}

fn client_config(
    server: &McpServer,
    context: &TransportContext,
    store: &StoreSnapshot,
) -> Result<rustls::ClientConfig, String> {
    let tls = &server.tls;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let secret = match &tls.credential_name {
        Some(name) => Some(secret_material(store, &context.system_namespace, name)?),
        None => None,
    };
    let mesh = || context.mesh.as_ref().ok_or("ISTIO_MUTUAL needs meshpush to be the mesh's CA (--secure-xds-addr)");
    // The roots the server is checked against.
    let mut roots = rustls::RootCertStore::empty();
    let root_certs = match (tls.mode, &tls.ca_certificates, secret.as_ref().and_then(|m| m.ca.clone())) {
        (McpTlsMode::IstioMutual, ..) => mesh()?.ca.roots().to_vec(),
        (_, Some(ca), _) => pem_certs(&material(ca, "caCertificates")?).map_err(|e| format!("caCertificates: {e}"))?,
        (_, None, Some(ca)) => pem_certs(&ca).map_err(|e| format!("credentialName's CA: {e}"))?,
        (_, None, None) => rustls_native_certs::load_native_certs().certs,
    };
    for cert in root_certs {
        roots.add(cert).map_err(|e| format!("a root certificate: {e}"))?;
    }
    if roots.is_empty() && !tls.insecure_skip_verify {
        return Err("no root certificate to verify the server with".into());
    }
    let crls = match (&tls.ca_crl, secret.as_ref().and_then(|m| m.crl.clone())) {
        (Some(crl), _) => crls(&material(crl, "caCrl")?)?,
        (None, Some(crl)) => crls(&crl)?,
        (None, None) => Vec::new(),
    };
    let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .with_crls(crls)
        .build();
    let verifier: Arc<dyn ServerCertVerifier> = match (tls.insecure_skip_verify, webpki) {
        (true, _) => Arc::new(AcceptAny(provider.clone())),
        (false, Ok(inner)) => Arc::new(AnyOfNames { inner, names: tls.subject_alt_names.clone() }),
        (false, Err(e)) => return Err(format!("the server's verifier: {e}")),
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports TLS 1.2 and 1.3")
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut config = match tls.mode {
        McpTlsMode::IstioMutual => {
            let (certs, key) = mesh()?.certified()?;
            builder.with_client_auth_cert(certs, key).map_err(|e| format!("meshpush's own certificate: {e}"))?
        }
        McpTlsMode::Mutual => {
            let (cert, key) = match (&tls.client_certificate, &tls.private_key, secret.and_then(|m| m.identity)) {
                (Some(cert), Some(key), _) => (material(cert, "clientCertificate")?, material(key, "privateKey")?),
                (_, _, Some((cert, key))) => (cert.to_vec(), key.to_vec()),
                _ => return Err("MUTUAL: the credentialName Secret holds no certificate and key".into()),
            };
            let certs = pem_certs(&cert).map_err(|e| format!("clientCertificate: {e}"))?;
            let key = PrivateKeyDer::from_pem_slice(&key).map_err(|_| "privateKey holds no PEM private key")?;
            builder.with_client_auth_cert(certs, key).map_err(|e| format!("the client certificate: {e}"))?
        }
        _ => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// The bytes a setting names: its own text when it is PEM (as istiod
/// reads `caCertificates`), else the file it names.
fn material(setting: &str, field: &str) -> Result<Vec<u8>, String> {
    if setting.contains("-----BEGIN") {
        return Ok(setting.as_bytes().to_vec());
    }
    std::fs::read(setting).map_err(|e| format!("{field}: cannot read {}: {e}", crate::text::shown(setting)))
}

fn pem_certs(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem).collect::<Result<Vec<_>, _>>().map_err(|e| e.to_string())?;
    if certs.is_empty() {
        return Err("no PEM certificate in it".into());
    }
    Ok(certs)
}

fn crls(bytes: &[u8]) -> Result<Vec<CertificateRevocationListDer<'static>>, String> {
    let pem = CertificateRevocationListDer::pem_slice_iter(bytes).collect::<Result<Vec<_>, _>>();
    match pem {
        Ok(list) if !list.is_empty() => Ok(list),
        // istiod reads a DER list too.
        _ => Ok(vec![CertificateRevocationListDer::from(bytes.to_vec())]),
    }
}

fn secret_material(
    store: &StoreSnapshot,
    namespace: &str,
    name: &str,
) -> Result<crate::config::secret::TlsMaterial, String> {
    let key = crate::config::ConfigKey::new(crate::config::ConfigKind::Secret, namespace, name);
    match store.get(&key).map(|s| &*s.object) {
        Some(crate::config::ConfigObject::Secret(secret)) => Ok(secret.material()),
        _ => Err(format!("credentialName: no Secret {namespace}/{} is read", crate::text::shown(name))),
    }
}

/// Checks the chain with the inner verifier, and the name against any one
/// of `names` (none: the name dialled).
#[derive(Debug)]
struct AnyOfNames {
    inner: Arc<rustls::client::WebPkiServerVerifier>,
    names: Vec<String>,
}

impl ServerCertVerifier for AnyOfNames {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if self.names.is_empty() {
            return self.inner.verify_server_cert(end_entity, intermediates, server_name, ocsp, now);
        }
        let mut last = rustls::Error::General("no subjectAltNames".into());
        for name in &self.names {
            let Ok(name) = ServerName::try_from(name.as_str()) else { continue };
            match self.inner.verify_server_cert(end_entity, intermediates, &name, ocsp, now) {
                Ok(verified) => return Ok(verified),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// `insecureSkipVerify`: any certificate, its handshake signature still checked.
#[derive(Debug)]
struct AcceptAny(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Dials TCP, then TLS (a tower service of URIs, as tonic wants).
#[derive(Clone)]
struct Connect {
    authority: Arc<str>,
    server_name: ServerName<'static>,
    tls: tokio_rustls::TlsConnector,
}

type Io = hyper_util::rt::TokioIo<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;

impl tower_service::Service<http::Uri> for Connect {
    type Response = Io;
    type Error = std::io::Error;
    type Future = futures::future::BoxFuture<'static, Result<Io, std::io::Error>>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let tcp = tokio::net::TcpStream::connect(&*this.authority).await?;
            tcp.set_nodelay(true)?;
            Ok(hyper_util::rt::TokioIo::new(this.tls.connect(this.server_name, tcp).await?))
        })
    }
}
