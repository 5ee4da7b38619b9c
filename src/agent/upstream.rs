//! The agent's connections to meshpush's secure port: gRPC over TLS that
//! trusts the mesh root (`--root-cert`), verifies the server's name, and
//! presents the workload certificate once there is one.
//!
//! Each [`Upstream::channel`] is a new connection with the certificate held
//! at that moment, so a renewed certificate is what the next ADS stream and
//! the next CSR present; a stream already open keeps the connection it has.

use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject as _;

use super::sds::CurrentCert;
use crate::config::mesh::proxy_config::{DEFAULT_DISCOVERY_ADDRESS, ProxyConfig};

/// Where meshpush's secure port is: `HOST:PORT` or `unix:PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiscoveryAddress {
    /// A TCP address, by name or IP.
    Tcp(String),
    /// A Unix socket.
    Unix(std::path::PathBuf),
}

impl DiscoveryAddress {
    /// Parses `HOST:PORT` or `unix:PATH`.
    pub fn parse(s: &str) -> Result<DiscoveryAddress, String> {
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(format!("{s:?}: unix: needs a path"));
            }
            return Ok(DiscoveryAddress::Unix(path.into()));
        }
        match s.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p != 0) => {
                Ok(DiscoveryAddress::Tcp(s.to_string()))
            }
            _ => Err(format!("{s:?}: expected HOST:PORT (istiod.istio-system.svc:15012) or unix:PATH")),
        }
    }

    /// The upstream `config` names (`discoveryAddress`), Istio's default
    /// when it names none.
    pub fn of(config: &ProxyConfig) -> Result<DiscoveryAddress, String> {
        DiscoveryAddress::parse(config.discovery_address.as_deref().unwrap_or(DEFAULT_DISCOVERY_ADDRESS))
    }

    /// The name the server's certificate must carry when none is given:
    /// the host of `HOST:PORT` (an IP is checked as an IP SAN), and for a
    /// socket the name meshpush's certificate always has.
    pub fn default_server_name(&self) -> String {
        match self {
            DiscoveryAddress::Tcp(addr) => {
                let host = addr.rsplit_once(':').map_or(addr.as_str(), |(h, _)| h);
                host.trim_start_matches('[').trim_end_matches(']').to_string()
            }
            DiscoveryAddress::Unix(_) => crate::ca::tls::DEFAULT_SERVER_NAMES[0].to_string(),
        }
    }
}

impl std::fmt::Display for DiscoveryAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DiscoveryAddress::Tcp(addr) => f.write_str(addr),
            DiscoveryAddress::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// Why the upstream cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The root certificate file holds no usable certificate.
    #[error("--root-cert: {0}")]
    Roots(String),
    /// The server name is not a DNS name or IP address.
    #[error("--discovery-server-name {0:?}: not a DNS name or IP address")]
    ServerName(String),
}

/// meshpush's secure port, as the agent reaches it.
#[derive(Clone)]
pub struct Upstream {
    address: DiscoveryAddress,
    server_name: ServerName<'static>,
    roots: Arc<rustls::RootCertStore>,
    current: CurrentCert,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream").field("address", &self.address).field("server_name", &self.server_name).finish()
    }
}

impl Upstream {
    /// The secure port at `address`, its certificate checked against
    /// `roots_pem` for `server_name`; `current` is the workload certificate
    /// presented (none before the first is issued).
    pub fn new(
        address: DiscoveryAddress,
        server_name: &str,
        roots_pem: &str,
        current: CurrentCert,
    ) -> Result<Upstream, UpstreamError> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(roots_pem.as_bytes()) {
            let cert = cert.map_err(|e| UpstreamError::Roots(e.to_string()))?;
            roots.add(cert).map_err(|e| UpstreamError::Roots(e.to_string()))?;
        }
        if roots.is_empty() {
            return Err(UpstreamError::Roots("no PEM certificate in it".into()));
        }
        let server_name =
            ServerName::try_from(server_name.to_string()).map_err(|_| UpstreamError::ServerName(server_name.into()))?;
        Ok(Upstream { address, server_name, roots: Arc::new(roots), current })
    }

    /// The address dialled.
    pub fn address(&self) -> &DiscoveryAddress {
        &self.address
    }

    /// A new connection, presenting the workload certificate held now.
    pub async fn channel(&self) -> Result<tonic::transport::Channel, tonic::transport::Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("ring supports TLS 1.2 and 1.3")
            .with_root_certificates(self.roots.clone());
        let held = self.current.borrow().clone();
        let mut config = match held {
            Some(cert) => builder.with_client_cert_resolver(Arc::new(Present(cert.certified_key()))),
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"h2".to_vec()];
        let connect = Connect {
            address: self.address.clone(),
            server_name: self.server_name.clone(),
            tls: tokio_rustls::TlsConnector::from(Arc::new(config)),
        };
        // The URI only names the authority gRPC sends; the connector dials.
        tonic::transport::Endpoint::from_static("https://meshpush.secure-xds")
            .connect_timeout(std::time::Duration::from_secs(10))
            .connect_with_connector(connect)
            .await
    }
}

/// One client certificate, always presented.
#[derive(Debug)]
struct Present(Arc<rustls::sign::CertifiedKey>);

impl rustls::client::ResolvesClientCert for Present {
    fn resolve(&self, _: &[&[u8]], _: &[rustls::SignatureScheme]) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// Dials TCP or a Unix socket, then TLS (a tower service of URIs, as tonic wants).
#[derive(Clone)]
struct Connect {
    address: DiscoveryAddress,
    server_name: ServerName<'static>,
    tls: tokio_rustls::TlsConnector,
}

/// A TCP or Unix stream, for the TLS layer above it.
type Io = hyper_util::rt::TokioIo<tokio_rustls::client::TlsStream<Box<dyn Transport>>>;

/// The byte streams the agent dials.
trait Transport: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin> Transport for T {}

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
            let stream: Box<dyn Transport> = match &this.address {
                DiscoveryAddress::Tcp(addr) => {
                    let tcp = tokio::net::TcpStream::connect(addr.as_str()).await?;
                    tcp.set_nodelay(true)?;
                    Box::new(tcp)
                }
                DiscoveryAddress::Unix(path) => Box::new(tokio::net::UnixStream::connect(path).await?),
            };
            Ok(hyper_util::rt::TokioIo::new(this.tls.connect(this.server_name, stream).await?))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_addresses_parse_and_name_their_server() {
        let tcp = DiscoveryAddress::parse("istiod.istio-system.svc:15012").unwrap();
        assert_eq!(tcp.default_server_name(), "istiod.istio-system.svc");
        assert_eq!(DiscoveryAddress::parse("127.0.0.1:15012").unwrap().default_server_name(), "127.0.0.1");
        assert_eq!(DiscoveryAddress::parse("[::1]:15012").unwrap().default_server_name(), "::1");
        let unix = DiscoveryAddress::parse("unix:/run/meshpush/secure.sock").unwrap();
        assert_eq!(unix, DiscoveryAddress::Unix("/run/meshpush/secure.sock".into()));
        assert_eq!(unix.default_server_name(), "istiod.istio-system.svc");
        for bad in ["", "unix:", "meshpush", "meshpush:", ":15012", "meshpush:0", "meshpush:http"] {
            assert!(DiscoveryAddress::parse(bad).is_err(), "{bad:?}");
        }
    }
}
