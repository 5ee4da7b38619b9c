//! The application's probes, made by the agent for the kubelet, as
//! pilot-agent makes them: the injector pointed each HTTP, TCP and gRPC
//! probe of the pod at the agent's status port
//! (`/app-health/CONTAINER/livez|readyz|startupz`,
//! `/app-lifecycle/CONTAINER/poststartz|prestopz`) and handed the originals
//! over in `ISTIO_KUBE_APP_PROBERS` (`inject::probes`). The agent probes
//! the original in the pod and answers with its outcome:
//! - HTTP(S): a GET of the app's port on the pod's address (`INSTANCE_IP`,
//!   or `localhost` under `REWRITE_PROBE_LEGACY_LOCALHOST_DESTINATION`),
//!   with the kubelet's headers and the probe's own; the app's status code
//!   and up to 10 KiB of its body come back, a redirect counts as success
//!   (as the kubelet counts it), TLS is not verified (as the kubelet does
//!   not), and a failure to connect is a 500;
//! - TCP: 200 when a connection opens, else 500;
//! - gRPC: `grpc.health.v1.Health/Check` of the probe's service; 200 when
//!   it is SERVING, else 500.
//!
//! Each probe has the probe's `timeoutSeconds` (1 s when unset, the
//! kubelet's default). An unknown path is a 400. Invariants: a malformed
//! `ISTIO_KUBE_APP_PROBERS` stops the agent at start, naming the path and
//! what is wrong (pilot-agent refuses to start too); no client string
//! reaches a log or an answer unbounded.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use serde::Deserialize;

use crate::text::Shown;

/// The environment variable the injector fills.
pub const APP_PROBERS_ENV: &str = "ISTIO_KUBE_APP_PROBERS";
/// The most of an application's answer passed back.
const MAX_BODY: usize = 10 * 1024;
/// The kubelet's default probe timeout.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);
/// Request headers not passed on to the application.
const HOP_BY_HOP: [&str; 6] = ["host", "connection", "content-length", "transfer-encoding", "upgrade", "keep-alive"];

/// One original probe.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Action {
    Http { https: bool, port: u16, path: String, host: Option<String>, headers: Vec<(String, String)> },
    Tcp { port: u16 },
    Grpc { port: u16, service: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Prober {
    action: Action,
    timeout: Duration,
}

/// The probes the agent makes, by path.
#[derive(Debug, Clone, Default)]
pub struct AppProbers {
    probers: Arc<BTreeMap<String, Prober>>,
    target: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Raw {
    http_get: Option<RawHttp>,
    tcp_socket: Option<RawPort>,
    grpc: Option<RawGrpc>,
    timeout_seconds: Option<u64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawHttp {
    path: Option<String>,
    port: u16,
    scheme: Option<String>,
    host: Option<String>,
    #[serde(default)]
    http_headers: Vec<RawHeader>,
}

#[derive(Deserialize)]
struct RawHeader {
    name: String,
    value: String,
}

#[derive(Deserialize)]
struct RawPort {
    port: u16,
}

#[derive(Deserialize)]
struct RawGrpc {
    port: u16,
    service: Option<String>,
}

impl AppProbers {
    /// Reads `ISTIO_KUBE_APP_PROBERS`; probes go to `target` (the pod's
    /// address, or `localhost`).
    pub fn parse(text: &str, target: &str) -> Result<AppProbers, String> {
        static PATH: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
            regex::Regex::new(r"^/(app-health|app-lifecycle)/[^/]+/(livez|readyz|startupz|prestopz|poststartz)$")
                .expect("the path pattern compiles")
        });
        let raw: BTreeMap<String, Raw> =
            serde_json::from_str(text).map_err(|e| format!("{APP_PROBERS_ENV} is not Istio's JSON of probes: {e}"))?;
        let mut probers = BTreeMap::new();
        for (path, raw) in raw {
            let bad = |why: &str| format!("{APP_PROBERS_ENV}: {:?}: {why}", Shown(&path).to_string());
            if !PATH.is_match(&path) {
                return Err(bad("not an /app-health/ or /app-lifecycle/ path of a container"));
            }
            let action = match (raw.http_get, raw.tcp_socket, raw.grpc) {
                (Some(h), None, None) => Action::Http {
                    https: match h.scheme.as_deref() {
                        None | Some("HTTP") | Some("http") => false,
                        Some("HTTPS") | Some("https") => true,
                        Some(_) => return Err(bad("the scheme is neither HTTP nor HTTPS")),
                    },
                    port: h.port,
                    path: h.path.unwrap_or_default(),
                    host: h.host.filter(|h| !h.is_empty()),
                    headers: h.http_headers.into_iter().map(|h| (h.name, h.value)).collect(),
                },
                (None, Some(t), None) => Action::Tcp { port: t.port },
                (None, None, Some(g)) => Action::Grpc { port: g.port, service: g.service.unwrap_or_default() },
                _ => return Err(bad("a probe has exactly one of httpGet, tcpSocket and grpc")),
            };
            let timeout = raw.timeout_seconds.filter(|t| *t > 0).map_or(DEFAULT_TIMEOUT, Duration::from_secs);
            probers.insert(path, Prober { action, timeout });
        }
        let target = match target.parse::<IpAddr>() {
            Ok(IpAddr::V6(v6)) => format!("[{v6}]"),
            _ => target.to_string(),
        };
        Ok(AppProbers { probers: Arc::new(probers), target })
    }

    /// How many probes it holds.
    pub fn len(&self) -> usize {
        self.probers.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.probers.is_empty()
    }

    /// Makes the probe of `path` with the kubelet's `headers`.
    pub async fn probe(&self, path: &str, headers: &HeaderMap) -> (StatusCode, String) {
        let Some(prober) = self.probers.get(path) else {
            return (StatusCode::BAD_REQUEST, format!("no probe at {}\n", Shown(path)));
        };
        let outcome = tokio::time::timeout(prober.timeout, self.run(&prober.action, headers)).await;
        match outcome {
            Ok(Ok(answer)) => answer,
            Ok(Err(why)) => (StatusCode::INTERNAL_SERVER_ERROR, format!("probe failed: {why}\n")),
            Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, format!("probe timed out after {:?}\n", prober.timeout)),
        }
    }

    async fn run(&self, action: &Action, headers: &HeaderMap) -> Result<(StatusCode, String), String> {
        match action {
            Action::Tcp { port } => {
                tokio::net::TcpStream::connect(format!("{}:{port}", self.target)).await.map_err(|e| e.to_string())?;
                Ok((StatusCode::OK, String::new()))
            }
            Action::Grpc { port, service } => self.grpc(*port, service).await,
            Action::Http { https, port, path, host, headers: own } => {
                self.http(*https, *port, path, host.as_deref(), own, headers).await
            }
        }
    }

    async fn grpc(&self, port: u16, service: &str) -> Result<(StatusCode, String), String> {
        use tonic_health::pb::health_check_response::ServingStatus;
        use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}:{port}", self.target))
            .map_err(|e| e.to_string())?
            .connect()
            .await
            .map_err(|e| e.to_string())?;
        let answer = HealthClient::new(channel)
            .check(HealthCheckRequest { service: service.to_string() })
            .await
            .map_err(|s| format!("{:?}: {}", s.code(), Shown(s.message())))?;
        match answer.into_inner().status() {
            ServingStatus::Serving => Ok((StatusCode::OK, String::new())),
            other => Ok((StatusCode::INTERNAL_SERVER_ERROR, format!("the service is {}\n", other.as_str_name()))),
        }
    }

    async fn http(
        &self,
        https: bool,
        port: u16,
        path: &str,
        host: Option<&str>,
        own: &[(String, String)],
        kubelet: &HeaderMap,
    ) -> Result<(StatusCode, String), String> {
        let address = format!("{}:{port}", host.unwrap_or(&self.target));
        let path = if path.starts_with('/') { path.to_string() } else { format!("/{path}") };
        let mut request = Request::get(&path);
        for (name, value) in kubelet.iter().filter(|(n, _)| !HOP_BY_HOP.contains(&n.as_str())) {
            request = request.header(name, value);
        }
        for (name, value) in own {
            request = request.header(name.as_str(), value.as_str());
        }
        if !own.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
            request = request.header("host", &address);
        }
        let request = request.body(Full::<bytes::Bytes>::default()).map_err(|e| e.to_string())?;
        let tcp = tokio::net::TcpStream::connect(&address).await.map_err(|e| e.to_string())?;
        let response = if https {
            let name = rustls_pki_types::ServerName::try_from(host.unwrap_or("localhost").to_string())
                .map_err(|e| e.to_string())?;
            let tls =
                tokio_rustls::TlsConnector::from(insecure_tls()).connect(name, tcp).await.map_err(|e| e.to_string())?;
            send(TokioIo::new(tls), request).await?
        } else {
            send(TokioIo::new(tcp), request).await?
        };
        let status = response.status();
        let mut body = Vec::new();
        let mut incoming = response.into_body();
        while body.len() < MAX_BODY {
            match incoming.frame().await {
                Some(Ok(frame)) => body.extend(frame.into_data().unwrap_or_default()),
                _ => break,
            }
        }
        body.truncate(MAX_BODY);
        let status = if status.is_redirection() { StatusCode::OK } else { status };
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }
}

/// One request on a fresh HTTP/1.1 connection (no keep-alive, as
/// pilot-agent probes).
async fn send<T>(
    io: TokioIo<T>,
    request: Request<Full<bytes::Bytes>>,
) -> Result<hyper::Response<hyper::body::Incoming>, String>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await.map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    sender.send_request(request).await.map_err(|e| e.to_string())
}

/// The kubelet does not verify an HTTPS probe's certificate, and nor does
/// the agent: the probe is of the app's own port, inside the pod.
fn insecure_tls() -> Arc<rustls::ClientConfig> {
    static CONFIG: std::sync::LazyLock<Arc<rustls::ClientConfig>> = std::sync::LazyLock::new(|| {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("ring supports the default versions")
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(UnverifiedServer(provider)))
            .with_no_client_auth();
        Arc::new(config)
    });
    CONFIG.clone()
}

/// Accepts any server certificate, checking only that the handshake is
/// signed by the key it presents: for the kubelet's kind of probe, and
/// for tests that talk to a server whose name they do not check.
#[derive(Debug)]
pub struct UnverifiedServer(Arc<rustls::crypto::CryptoProvider>);

impl UnverifiedServer {
    /// The verifier, checking handshake signatures with `provider`'s algorithms.
    pub fn new(provider: Arc<rustls::crypto::CryptoProvider>) -> UnverifiedServer {
        UnverifiedServer(provider)
    }
}

impl rustls::client::danger::ServerCertVerifier for UnverifiedServer {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls_pki_types::CertificateDer<'_>,
        _intermediates: &[rustls_pki_types::CertificateDer<'_>],
        _server_name: &rustls_pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The axum handler of `/app-health/…` and `/app-lifecycle/…`.
pub async fn handle(probers: AppProbers, request: Request<Body>) -> (StatusCode, String) {
    let path = request.uri().path().to_string();
    probers.probe(&path, request.headers()).await
}

#[cfg(test)]
mod test;
