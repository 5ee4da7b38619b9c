//! An HTTPS client for the tests: one POST on a fresh connection, its
//! server checked against a given root, over HTTP/1.1 or HTTP/2 as ALPN
//! settles it (as the API server calls a webhook).

use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls;

/// What came back.
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// The body.
    pub body: String,
    /// The protocol ALPN chose (`h2`, `http/1.1`).
    pub alpn: String,
}

/// POSTs `body` as `content_type` to `https://addr/path`, verifying the
/// server's certificate against `root_pem` for `server_name`, offering the
/// `alpn` protocols.
pub async fn post(
    addr: SocketAddr,
    root_pem: &str,
    server_name: &str,
    alpn: &[&str],
    path: &str,
    content_type: &str,
    body: String,
) -> Result<Answer, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(root_pem.as_bytes()) {
        roots.add(cert.map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    let tcp = tokio::net::TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let name = ServerName::try_from(server_name.to_string()).map_err(|e| e.to_string())?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.map_err(|e| e.to_string())?;
    let alpn = tls.get_ref().1.alpn_protocol().map(|p| String::from_utf8_lossy(p).into_owned()).unwrap_or_default();
    let request = http::Request::post(format!("https://{server_name}{path}"))
        .header("content-type", content_type)
        .body(Full::new(bytes::Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let io = TokioIo::new(tls);
    let response = if alpn == "h2" {
        let (mut sender, connection) = hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        sender.send_request(request).await.map_err(|e| e.to_string())?
    } else {
        let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await.map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        sender.send_request(request).await.map_err(|e| e.to_string())?
    };
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok(Answer { status, body: String::from_utf8_lossy(&body).into_owned(), alpn })
}
