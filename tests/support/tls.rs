//! Certificates made by the tests (`rcgen`), Kubernetes Secrets holding
//! them, and a TLS backend that terminates TLS itself.
//!
//! A [`TestCa`] signs leaf certificates for host names; [`secret`] writes
//! one as a `kubernetes.io/tls` Secret. A [`TlsBackend`] answers HTTP/1.1
//! over TLS like [`Backend`](super::backend::Backend) does in the clear
//! (`x-backend: NAME`), and records the SNI each handshake named, so a test
//! sees both that TLS reached the workload and which name it asked for.

use std::io::{BufReader, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle};

use parking_lot::Mutex;
use tokio_rustls::rustls;

use super::http::{Head, read_body, read_head};

/// A CA the tests trust.
pub struct TestCa {
    issuer: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
    /// Its certificate, PEM.
    pub pem: String,
}

/// A leaf certificate and its key, PEM.
#[derive(Clone)]
pub struct Leaf {
    /// The certificate.
    pub cert: String,
    /// The private key.
    pub key: String,
}

impl TestCa {
    /// A fresh self-signed CA called `name`.
    pub fn new(name: &str) -> TestCa {
        let key = rcgen::KeyPair::generate().expect("a CA key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.distinguished_name.push(rcgen::DnType::CommonName, name);
        let issuer = rcgen::CertifiedIssuer::self_signed(params, key).expect("the CA certificate");
        let pem = AsRef::<rcgen::Certificate>::as_ref(&issuer).pem();
        TestCa { issuer, pem }
    }

    /// A certificate for `hosts` whose subject is `CN=common_name`.
    pub fn leaf(&self, common_name: &str, hosts: &[&str]) -> Leaf {
        let key = rcgen::KeyPair::generate().expect("a key");
        let mut params =
            rcgen::CertificateParams::new(hosts.iter().map(|h| h.to_string()).collect::<Vec<_>>()).expect("params");
        params.distinguished_name.push(rcgen::DnType::CommonName, common_name);
        let cert = params.signed_by(&key, &self.issuer).expect("the certificate");
        Leaf { cert: cert.pem(), key: key.serialize_pem() }
    }

    /// A workload certificate naming the SPIFFE identity `uri` (its only
    /// subject alternative name), as a mesh CA issues one.
    pub fn workload(&self, uri: &str) -> Leaf {
        let key = rcgen::KeyPair::generate().expect("a key");
        let mut params = rcgen::CertificateParams::default();
        params.subject_alt_names = vec![rcgen::SanType::URI(uri.try_into().expect("a URI"))];
        let cert = params.signed_by(&key, &self.issuer).expect("the certificate");
        Leaf { cert: cert.pem(), key: key.serialize_pem() }
    }

    /// Writes the CA certificate to `dir/name`; returns the path.
    pub fn write(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, &self.pem).expect("write the CA certificate");
        path
    }
}

fn block(key: &str, pem: &str) -> String {
    format!("  {key}: |\n{}", pem.lines().map(|l| format!("    {l}\n")).collect::<String>())
}

/// A `kubernetes.io/tls` Secret holding `leaf`, with `ca.crt` when `ca` is given.
pub fn secret(namespace: &str, name: &str, leaf: &Leaf, ca: Option<&str>) -> String {
    let mut out = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  namespace: {namespace}\ntype: kubernetes.io/tls\nstringData:\n"
    );
    out.push_str(&block("tls.crt", &leaf.cert));
    out.push_str(&block("tls.key", &leaf.key));
    if let Some(ca) = ca {
        out.push_str(&block("ca.crt", ca));
    }
    out
}

/// The lines of a PEM's body, each long enough to be unmistakable: what
/// must never appear in a log or a debug view when the PEM is a key.
pub fn telltales(pem: &str) -> Vec<String> {
    pem.lines().filter(|l| !l.starts_with("-----") && l.len() >= 40).map(str::to_string).collect()
}

/// A backend that terminates TLS with its own certificate.
pub struct TlsBackend {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

struct Shared {
    stopping: AtomicBool,
    /// The SNI of every handshake, in order (`None`: the client sent none).
    sni: Mutex<Vec<Option<String>>>,
    conns: Mutex<Vec<(TcpStream, JoinHandle<()>)>>,
}

impl TlsBackend {
    /// Starts backend `name` on loopback `addr`, presenting `leaf`.
    pub fn start(name: &str, addr: SocketAddr, leaf: &Leaf) -> TlsBackend {
        assert!(addr.ip().is_loopback(), "backends bind loopback only, not {addr}");
        use rustls::pki_types::pem::PemObject;
        let chain = rustls::pki_types::CertificateDer::pem_slice_iter(leaf.cert.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .expect("the certificate PEM");
        let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(leaf.key.as_bytes()).expect("the key PEM");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("the backend's identity");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        let listener = TcpListener::bind(addr).unwrap_or_else(|e| panic!("TLS backend {name}: bind {addr}: {e}"));
        let shared = Arc::new(Shared {
            stopping: AtomicBool::new(false),
            sni: Mutex::new(Vec::new()),
            conns: Mutex::new(Vec::new()),
        });
        let acceptor = {
            let (name, shared) = (name.to_string(), shared.clone());
            thread::Builder::new()
                .name(format!("tls-backend-{name}"))
                .spawn(move || {
                    for stream in listener.incoming() {
                        if shared.stopping.load(Ordering::SeqCst) {
                            return;
                        }
                        let Ok(stream) = stream else { continue };
                        let Ok(side) = stream.try_clone() else { continue };
                        let (name, config, conn_shared) = (name.clone(), config.clone(), shared.clone());
                        let handle = thread::spawn(move || serve(&name, side, config, &conn_shared));
                        shared.conns.lock().push((stream, handle));
                    }
                })
                .expect("spawn the TLS backend thread")
        };
        TlsBackend { addr, shared, acceptor: Some(acceptor) }
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The SNI of every handshake so far.
    pub fn sni_seen(&self) -> Vec<Option<String>> {
        self.shared.sni.lock().clone()
    }
}

impl Drop for TlsBackend {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        for (stream, handle) in std::mem::take(&mut *self.shared.conns.lock()) {
            let _ = stream.shutdown(Shutdown::Both);
            let _ = handle.join();
        }
    }
}

fn serve(name: &str, tcp: TcpStream, config: Arc<rustls::ServerConfig>, shared: &Shared) {
    let Ok(conn) = rustls::ServerConnection::new(config) else { return };
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    // Complete the handshake first, to learn the SNI.
    while tls.conn.is_handshaking() {
        if tls.conn.complete_io(&mut tls.sock).is_err() {
            return;
        }
    }
    shared.sni.lock().push(tls.conn.server_name().map(str::to_string));
    let mut reader = BufReader::new(tls);
    while let Ok(Some(Head { start, headers })) = read_head(&mut reader) {
        if read_body(&mut reader, &headers, false).is_err() {
            return;
        }
        let path = start.split_whitespace().nth(1).unwrap_or_default().to_string();
        let body = format!("{name} over TLS {path}\n");
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nx-backend: {name}\r\nx-request-path: {path}\r\n\r\n{body}",
            body.len()
        );
        if reader.get_mut().write_all(response.as_bytes()).is_err() {
            return;
        }
        let _ = reader.get_mut().flush();
    }
}

/// `GET path` from `addr` over TLS, presenting `client` as the client
/// certificate (and `host` as the Host), as a peer sidecar would. The
/// server's certificate is not checked: these tests look at how the server
/// checks its client. An error is a refused handshake or connection.
pub fn mutual_get(addr: SocketAddr, client: &Leaf, host: &str, path: &str) -> std::io::Result<super::http::Response> {
    use rustls_pki_types::pem::PemObject as _;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = vec![CertificateDer::from_pem_slice(client.cert.as_bytes()).expect("a PEM certificate")];
    let key = PrivateKeyDer::from_pem_slice(client.key.as_bytes()).expect("a PEM key");
    let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(meshpush::agent::app_probe::UnverifiedServer::new(provider)))
        .with_client_auth_cert(chain, key)
        .expect("a client certificate");
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let name = ServerName::IpAddress(addr.ip().into());
    let conn = rustls::ClientConnection::new(Arc::new(config), name).map_err(std::io::Error::other)?;
    let tcp = TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(5))?;
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    super::http::exchange(rustls::StreamOwned::new(conn, tcp), host, "GET", path, &[])
}
