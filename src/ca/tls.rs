//! The secure port's TLS: meshpush's own serving certificate, and the
//! verification of client certificates against the mesh root.
//!
//! As istiod's port 15012: the server presents a certificate its own CA
//! issued for the names clients dial (`--server-san`, by default istiod's
//! service name, `localhost` and the loopback addresses), renewed at half
//! its life; it asks every client for a certificate and verifies one that
//! is presented against the mesh roots (chain, validity, client-auth
//! usage), but lets a client without one finish the handshake, since a new
//! workload has no certificate until it asks the CA for one. What each
//! service then demands of the client is decided per request from
//! [`Transport`](crate::xds::stream::peer::Transport).
//!
//! ALPN is `h2` only: every service on the port is gRPC. The webhook port
//! presents the same certificate ([`ServerTls::webhook_acceptor`]).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use rcgen::KeyPair;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use super::authority::CertificateAuthority;
use crate::model::Identity;

/// Names the serving certificate has unless `--server-san` says otherwise:
/// istiod's in-cluster name (what Istio's agents verify), the name and
/// addresses a client on the same host dials.
pub const DEFAULT_SERVER_NAMES: [&str; 4] = ["istiod.istio-system.svc", "localhost", "127.0.0.1", "::1"];

/// Lifetime of the serving certificate; it is renewed at half of it.
pub const SERVING_CERT_TTL: Duration = Duration::from_secs(24 * 3600);

/// The TLS side of the secure port. See the module docs.
#[derive(Debug, Clone)]
pub struct ServerTls {
    config: Arc<rustls::ServerConfig>,
    /// The webhook port's: the same certificate, no client certificate
    /// asked, HTTP/2 or HTTP/1.1.
    webhook: Arc<rustls::ServerConfig>,
    serving: Arc<ServingCert>,
}

/// Why the secure port's TLS could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("setting up the secure port's TLS: {0}")]
pub struct TlsSetupError(String);

impl ServerTls {
    /// TLS for a port serving `names`, certified by `ca`.
    pub fn new(ca: Arc<CertificateAuthority>, names: Vec<String>) -> Result<ServerTls, TlsSetupError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for root in ca.roots() {
            roots.add(root.clone()).map_err(|e| TlsSetupError(format!("a root of root-cert.pem: {e}")))?;
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .allow_unauthenticated()
            .build()
            .map_err(|e| TlsSetupError(e.to_string()))?;
        let serving = Arc::new(ServingCert::issue(ca, names)?);
        let mut config = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsSetupError(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_cert_resolver(serving.clone());
        config.alpn_protocols = vec![b"h2".to_vec()];
        let mut webhook = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsSetupError(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(serving.clone());
        webhook.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(ServerTls { config: Arc::new(config), webhook: Arc::new(webhook), serving })
    }

    /// The acceptor of the webhook port (`admission`): the same
    /// certificate, no client certificate, HTTP/2 or HTTP/1.1.
    pub fn webhook_acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.webhook.clone())
    }

    /// The acceptor handshakes run through.
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.config.clone())
    }

    /// Renews the serving certificate at half its life, for ever.
    pub async fn renew_forever(self) {
        loop {
            let wait = self.serving.renew_at().duration_since(SystemTime::now()).unwrap_or(Duration::from_secs(60));
            tokio::time::sleep(wait).await;
            let serving = self.serving.clone();
            match tokio::task::spawn_blocking(move || serving.renew()).await {
                Ok(Ok(())) => tracing::info!("renewed the secure port's serving certificate"),
                Ok(Err(e)) => {
                    tracing::error!("{e}; retrying in a minute");
                    tokio::time::sleep(Duration::from_secs(60)).await;
                }
                Err(_) => return,
            }
        }
    }
}

/// The serving certificate, swapped whole on renewal.
#[derive(Debug)]
struct ServingCert {
    ca: Arc<CertificateAuthority>,
    names: Vec<String>,
    current: ArcSwap<(Arc<CertifiedKey>, SystemTime)>,
}

impl ServingCert {
    fn issue(ca: Arc<CertificateAuthority>, names: Vec<String>) -> Result<ServingCert, TlsSetupError> {
        let current = certified(&ca, &names)?;
        Ok(ServingCert { ca, names, current: ArcSwap::from_pointee(current) })
    }

    fn renew(&self) -> Result<(), TlsSetupError> {
        self.current.store(Arc::new(certified(&self.ca, &self.names)?));
        Ok(())
    }

    /// Half-way through the current certificate's life.
    fn renew_at(&self) -> SystemTime {
        let not_after = self.current.load().1;
        let left = not_after.duration_since(SystemTime::now()).unwrap_or_default();
        SystemTime::now() + left / 2
    }
}

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load().0.clone())
    }
}

/// A fresh key and a certificate for `names`, with its expiry.
fn certified(ca: &CertificateAuthority, names: &[String]) -> Result<(Arc<CertifiedKey>, SystemTime), TlsSetupError> {
    let key = KeyPair::generate().map_err(|e| TlsSetupError(e.to_string()))?;
    let issued = ca.sign_server(&key, names, SERVING_CERT_TTL).map_err(|e| TlsSetupError(e.to_string()))?;
    // The leaf and any intermediates; the roots are the client's own.
    let chain: Vec<CertificateDer<'static>> = issued.chain[..issued.chain.len() - 1]
        .iter()
        .flat_map(|pem| CertificateDer::pem_slice_iter(pem.as_bytes()).filter_map(Result::ok))
        .collect();
    let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let signing = rustls::crypto::ring::sign::any_supported_type(&der).map_err(|e| TlsSetupError(e.to_string()))?;
    Ok((Arc::new(CertifiedKey::new(chain, signing)), issued.not_after))
}

/// The SPIFFE identities a verified client certificate names (its URI
/// SANs that are identities; other SANs are ignored).
pub fn identities_of(certificate: &CertificateDer<'_>) -> Vec<Identity> {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(certificate) else { return Vec::new() };
    let Ok(Some(sans)) = cert.subject_alternative_name() else { return Vec::new() };
    sans.value
        .general_names
        .iter()
        .filter_map(|name| match name {
            x509_parser::extensions::GeneralName::URI(uri) => uri.parse().ok(),
            _ => None,
        })
        .collect()
}
