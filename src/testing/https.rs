//! An HTTPS server for tests: an axum app over TLS (HTTP/1.1), presenting
//! a certificate chain the test made, as the servers meshpush fetches from
//! (key sets, SPIFFE bundles) or probes (an application) present theirs.

use std::sync::Arc;

use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Serves `app` on `listener` over TLS with the certificate chain
/// `chain_pem` and its key `key_pem`, until the runtime ends. A client
/// that fails the handshake is dropped; the others are served.
pub fn serve(listener: tokio::net::TcpListener, chain_pem: &str, key_pem: &str, app: axum::Router) {
    let chain = CertificateDer::pem_slice_iter(chain_pem.as_bytes()).collect::<Result<Vec<_>, _>>().expect("PEM chain");
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).expect("a PEM key");
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("the server's identity");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, app) = (acceptor.clone(), app.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let service = hyper_util::service::TowerToHyperService::new(app);
                let io = hyper_util::rt::TokioIo::new(tls);
                drop(hyper::server::conn::http1::Builder::new().serve_connection(io, service).await);
            });
        }
    });
}
