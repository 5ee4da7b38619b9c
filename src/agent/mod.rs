//! `meshpush agent`: what runs beside each Envoy, as Istio's pilot-agent.
//!
//! The agent makes the workload's key, has meshpush's CA sign a certificate
//! for its SPIFFE identity (authenticated by the service-account token in
//! `--token-file`), writes Envoy's bootstrap pointing at its own two Unix
//! sockets — `XDS` (ADS, [`ads_proxy`]) and `SDS` (the certificate,
//! [`sds`]) in `--socket-dir` — and runs Envoy ([`envoy`]). Envoy never
//! holds a token and never dials meshpush: the agent proxies its ADS stream
//! to meshpush's secure port over mTLS ([`upstream`]), keeping it open
//! across meshpush restarts ([`subscriptions`]), and renews the certificate
//! half-way through its life, pushing the new one to Envoy over SDS. Its
//! status ports answer Kubernetes' readiness probe and make the
//! application's probes for the kubelet ([`status`], [`app_probe`]).
//!
//! Identity: the namespace is the node's (`--node-id`), the service account
//! the token's subject (`system:serviceaccount:NS:SA`) unless
//! `--service-account` names it; the node carries it as `SERVICE_ACCOUNT`,
//! which meshpush checks against the certificate.
//!
//! For a proxyless gRPC application ([`proxyless`]) it writes gRPC's
//! bootstrap (`--grpc-bootstrap`) and keeps the certificate files gRPC
//! reads (`--output-certs`), with or without an Envoy (`--disable-envoy`).
//!
//! Invariants: Envoy starts only once the agent holds a certificate, so
//! its first SDS request is answered at once; the private key is in memory
//! and in SDS responses on the agent's own socket (mode 0600) only, never
//! in a log, and in a file only where `--output-certs` asks for one (the
//! application's mTLS reads it there, as under Istio); SIGTERM drains
//! Envoy and stops it before the agent exits.

pub mod ads_proxy;
pub mod app_probe;
pub mod certificate;
pub mod envoy;
pub mod proxy_config;
pub mod proxyless;
pub mod sds;
pub mod status;
pub mod subscriptions;
pub mod trust_bundle;
pub mod upstream;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use tokio::sync::watch;
use tokio_stream::wrappers::UnixListenerStream;

use self::certificate::WorkloadCert;
use self::upstream::{DiscoveryAddress, Upstream};
use crate::bootstrap::{BootstrapError, BootstrapOptions};
use crate::config::mesh::proxy_config::ProxyConfig;
use crate::model::Identity;
use crate::text::Shown;

/// The response stream of a gRPC service the agent serves Envoy.
type ResponseStream<T> = std::pin::Pin<Box<dyn futures::Stream<Item = Result<T, tonic::Status>> + Send>>;

/// The ADS socket's file name in the socket directory (Istio's).
pub const XDS_SOCKET: &str = "XDS";

/// The SDS socket's file name in the socket directory.
pub const SDS_SOCKET: &str = "SDS";

/// The bootstrap's file name in the socket directory.
pub const BOOTSTRAP_FILE: &str = "envoy-bootstrap.yaml";

/// The first wait before asking the CA again after a failure; it doubles
/// up to [`MAX_CSR_BACKOFF`].
const FIRST_CSR_BACKOFF: Duration = Duration::from_secs(1);

/// The longest wait between two certificate requests.
const MAX_CSR_BACKOFF: Duration = Duration::from_secs(30);

/// What `meshpush agent` runs with (its flags).
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// The Envoy node id.
    pub node_id: String,
    /// meshpush's secure port.
    pub discovery_address: DiscoveryAddress,
    /// The name meshpush's serving certificate must carry (default: the
    /// discovery address's host).
    pub discovery_server_name: Option<String>,
    /// The mesh root that meshpush's serving certificate chains to.
    pub root_cert: PathBuf,
    /// The service-account token (re-read for every certificate request).
    pub token_file: PathBuf,
    /// The workload's service account, when not the token's.
    pub service_account: Option<String>,
    /// The mesh's trust domain.
    pub trust_domain: String,
    /// The validity asked of the CA.
    pub cert_ttl: Duration,
    /// The Envoy binary.
    pub envoy_binary: PathBuf,
    /// Workload labels (node metadata `LABELS`).
    pub labels: BTreeMap<String, String>,
    /// More node metadata.
    pub meta: BTreeMap<String, String>,
    /// `REDIRECT`, `TPROXY` or `NONE`.
    pub interception: String,
    /// Delta xDS between Envoy and the agent (and so to meshpush).
    pub delta: bool,
    /// Envoy's admin port (127.0.0.1).
    pub admin_port: u16,
    /// Where the sockets and the bootstrap go.
    pub socket_dir: PathBuf,
    /// The readiness port's address.
    pub status_addr: SocketAddr,
    /// The status port (on the readiness port's address; 0: none):
    /// readiness and the application's probes.
    pub status_port: u16,
    /// The application's probes the agent makes for the kubelet.
    pub app_probers: app_probe::AppProbers,
    /// The ProxyConfig Envoy runs by ([`proxy_config`]): its concurrency,
    /// drain durations, file flushing, tracer, stats matcher and
    /// environment (`proxyMetadata`).
    pub proxy_config: ProxyConfig,
    /// More Envoy arguments.
    pub envoy_args: Vec<String>,
    /// pilot-agent's `PROXY_CONFIG_XDS_AGENT`: ask meshpush for PCDS, and
    /// add the mesh's extra roots it brings to `ROOTCA`.
    pub xds_proxy_config: bool,
    /// Where a proxyless gRPC application's bootstrap is written ([`proxyless`]).
    pub grpc_bootstrap: Option<PathBuf>,
    /// Where the workload's certificate files are kept ([`proxyless`]).
    pub output_certs: Option<PathBuf>,
    /// Whether an Envoy runs (pilot-agent's `DISABLE_ENVOY` turns it off).
    pub envoy: bool,
}

/// Why the agent could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The node or metadata flags are wrong.
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The status port could not be bound.
    #[error("--status-addr {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The workload's identity cannot be told, or does not fit the node.
    #[error("{0}")]
    Identity(String),
    /// The upstream could not be set up.
    #[error(transparent)]
    Upstream(#[from] upstream::UpstreamError),
    /// The CA refused the certificate request: no retry would change that.
    #[error("the CA at {address} refused the certificate request for {identity}: {why}")]
    Refused {
        /// The discovery address.
        address: String,
        /// The identity asked for.
        identity: String,
        /// The CA's answer.
        why: String,
    },
    /// Envoy could not be started.
    #[error(transparent)]
    Envoy(#[from] envoy::StartError),
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> AgentError + '_ {
    move |source| AgentError::Io { path: path.display().to_string(), source }
}

/// Runs the agent until SIGTERM or SIGINT (then Envoy is drained and
/// stopped).
pub async fn run(opts: AgentOptions) -> Result<(), AgentError> {
    let mut bootstrap = BootstrapOptions::new(opts.node_id.clone(), format!("unix:{}", socket(&opts, XDS_SOCKET)));
    bootstrap.labels = opts.labels.clone();
    bootstrap.meta = opts.meta.clone();
    bootstrap.interception = opts.interception.clone();
    bootstrap.delta = opts.delta;
    bootstrap.admin_port = opts.admin_port;
    bootstrap.sds_socket = Some(socket(&opts, SDS_SOCKET));
    bootstrap.proxy_config = Some(opts.proxy_config.clone());
    let proxy = crate::bootstrap::proxy(&bootstrap)?;
    let token = read_token(&opts.token_file)?;
    let identity = workload_identity(&opts, &proxy.namespace, &token)?;
    bootstrap.meta.insert("SERVICE_ACCOUNT".into(), identity.service_account().to_string());
    let rendered = crate::bootstrap::render(&bootstrap)?;

    let roots = std::fs::read_to_string(&opts.root_cert).map_err(io_error(&opts.root_cert))?;
    let (holder, current) = watch::channel::<Option<Arc<WorkloadCert>>>(None);
    let server_name =
        opts.discovery_server_name.clone().unwrap_or_else(|| opts.discovery_address.default_server_name());
    let upstream = Upstream::new(opts.discovery_address.clone(), &server_name, &roots, current.clone())?;

    std::fs::create_dir_all(&opts.socket_dir).map_err(io_error(&opts.socket_dir))?;
    let xds_path = opts.socket_dir.join(XDS_SOCKET);
    let sds_path = opts.socket_dir.join(SDS_SOCKET);
    let xds_listener = crate::os::bind_unix(&xds_path).map_err(io_error(&xds_path))?;
    let sds_listener = crate::os::bind_unix(&sds_path).map_err(io_error(&sds_path))?;
    // The SDS socket hands out the workload's key: only this user (Envoy
    // runs as the agent's user) may connect to it. So for the XDS socket,
    // unless a proxyless application (which may run as another user of
    // the pod) dials it: it serves configuration, no secret.
    for (path, mode) in [(&xds_path, if opts.grpc_bootstrap.is_some() { 0o666 } else { 0o600 }), (&sds_path, 0o600)] {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io_error(path))?;
    }
    let _sockets = scopeguard::guard((xds_path.clone(), sds_path.clone()), |(xds, sds)| {
        let _ = std::fs::remove_file(xds);
        let _ = std::fs::remove_file(sds);
    });
    let status_listener = tokio::net::TcpListener::bind(opts.status_addr)
        .await
        .map_err(|source| AgentError::Listen { addr: opts.status_addr, source })?;
    // The status port, unless it is the readiness port itself (then that
    // one serves the probes too).
    let status_port_addr = SocketAddr::new(opts.status_addr.ip(), opts.status_port);
    let probes_listener = match opts.status_port {
        0 => None,
        port if port == opts.status_addr.port() => None,
        _ => Some(
            tokio::net::TcpListener::bind(status_port_addr)
                .await
                .map_err(|source| AgentError::Listen { addr: status_port_addr, source })?,
        ),
    };
    tracing::info!(
        identity = %identity,
        upstream = %opts.discovery_address,
        xds = %xds_path.display(),
        sds = %sds_path.display(),
        status = %opts.status_addr,
        status_port = opts.status_port,
        app_probes = opts.app_probers.len(),
        "meshpush agent starting"
    );

    // One signal future for the agent's whole life: a SIGTERM between two
    // waits is not missed.
    let mut stop = std::pin::pin!(crate::os::shutdown_signal());
    let requester = Requester { upstream: upstream.clone(), identity: identity.clone(), opts: opts.clone() };
    let first = tokio::select! {
        first = requester.first() => first?,
        () = &mut stop => return Ok(()),
    };
    tracing::info!(serial = first.serial(), "obtained the workload certificate for {identity}");
    holder.send_replace(Some(Arc::new(first)));

    let bootstrap_path = opts.socket_dir.join(BOOTSTRAP_FILE);
    if opts.envoy {
        std::fs::write(&bootstrap_path, rendered).map_err(io_error(&bootstrap_path))?;
    }

    let (bundle_holder, bundle) = watch::channel(Arc::new(trust_bundle::TrustBundle::default()));
    // A proxyless application's certificate files first, then its
    // bootstrap: gRPC reads the files the bootstrap names as it starts.
    if let Some(dir) = &opts.output_certs {
        let files = proxyless::CertificateFiles::new(dir).map_err(io_error(dir))?;
        files.write(current.borrow().as_deref(), &bundle.borrow()).map_err(io_error(dir))?;
        tokio::spawn(files.keep_written(current.clone(), bundle.clone()));
    }
    if let Some(path) = &opts.grpc_bootstrap {
        let name = proxyless::xds_socket_name(&opts.socket_dir);
        let listener = crate::os::bind_abstract_unix(&name)
            .map_err(|source| AgentError::Io { path: format!("the abstract socket {name}"), source })?;
        let ads = ads_proxy::AdsProxy::new(upstream.clone());
        tokio::spawn(serve_unix(listener, "gRPC XDS", move |router| router.add_service(ads.into_server())));
        let mut grpc = bootstrap.clone();
        grpc.xds_addrs = vec![format!("unix-abstract:{name}")];
        let certificates = opts.output_certs.as_deref().map(std::path::absolute).transpose().map_err(io_error(path))?;
        let files =
            certificates.as_deref().map(|dir| crate::bootstrap::grpc::CertificateFiles { dir, ttl: opts.cert_ttl });
        let text = crate::bootstrap::grpc::render(&grpc, files)?;
        proxyless::write_file(path, text.as_bytes(), 0o644).map_err(io_error(path))?;
        tracing::info!(bootstrap = %path.display(), "wrote the proxyless gRPC bootstrap");
    }
    let mut ads = ads_proxy::AdsProxy::new(upstream);
    if opts.xds_proxy_config {
        ads = ads.with_trust_bundle(bundle_holder);
    }
    tokio::spawn(serve_unix(xds_listener, "XDS", move |router| router.add_service(ads.into_server())));
    let sds = sds::SdsServer::new(current.clone(), bundle);
    tokio::spawn(serve_unix(sds_listener, "SDS", move |router| router.add_service(sds.into_server())));
    let (shutdown, shutting_down) = watch::channel(false);
    let readiness = status::Readiness {
        current: current.clone(),
        admin_port: opts.admin_port,
        shutdown: shutting_down.clone(),
        drain_all_listeners: matches!(proxy.kind, crate::model::ProxyKind::Router | crate::model::ProxyKind::Waypoint),
        envoy: opts.envoy,
    };
    let probers = Some(opts.app_probers.clone());
    let on_readiness_port = probers.clone().filter(|_| opts.status_port == opts.status_addr.port());
    let ready = readiness.clone();
    tokio::spawn(async move {
        if let Err(e) = status::serve(status_listener, ready, on_readiness_port).await {
            tracing::error!("the readiness port stopped: {e}");
        }
    });
    if let Some(listener) = probes_listener {
        tokio::spawn(async move {
            if let Err(e) = status::serve(listener, readiness, probers).await {
                tracing::error!("the status port stopped: {e}");
            }
        });
    }
    tokio::spawn(requester.renew_forever(holder));

    if !opts.envoy {
        stop.await;
        tracing::info!("meshpush agent stopped");
        return Ok(());
    }
    let command = envoy::EnvoyCommand::new(
        opts.envoy_binary.clone(),
        bootstrap_path,
        opts.admin_port,
        &opts.proxy_config,
        proxy.kind,
        opts.envoy_args.clone(),
    );
    let mut supervisor = tokio::spawn(envoy::supervise(command, shutting_down));
    tokio::select! {
        () = &mut stop => {
            tracing::info!("shutting down: draining Envoy");
            shutdown.send_replace(true);
            if let Ok(result) = supervisor.await {
                result?;
            }
        }
        result = &mut supervisor => {
            if let Ok(result) = result {
                result?;
            }
        }
    }
    tracing::info!("meshpush agent stopped");
    Ok(())
}

/// `DIR/NAME` in the socket directory, as text for the bootstrap.
fn socket(opts: &AgentOptions, name: &str) -> String {
    opts.socket_dir.join(name).display().to_string()
}

/// Serves one gRPC service on a Unix socket until the process ends.
async fn serve_unix<F>(listener: tokio::net::UnixListener, name: &'static str, add: F)
where
    F: FnOnce(&mut tonic::transport::Server) -> tonic::transport::server::Router,
{
    let mut server = tonic::transport::Server::builder();
    if let Err(e) = add(&mut server).serve_with_incoming(UnixListenerStream::new(listener)).await {
        tracing::error!("the {name} socket stopped serving: {e}");
    }
}

/// The token in `path`, trimmed.
fn read_token(path: &Path) -> Result<String, AgentError> {
    let token = std::fs::read_to_string(path).map_err(io_error(path))?;
    let token = token.trim();
    if token.is_empty() {
        return Err(AgentError::Identity(format!("--token-file {}: the file is empty", path.display())));
    }
    Ok(token.to_string())
}

/// The subject (`sub`) of a JWT, read without checking it (the CA checks).
fn token_subject(token: &str) -> Option<String> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    claims.get("sub")?.as_str().map(str::to_string)
}

/// The workload's identity: the node's namespace, and `--service-account`
/// or the token's service account (which must be of that namespace).
fn workload_identity(opts: &AgentOptions, namespace: &str, token: &str) -> Result<Identity, AgentError> {
    let from_token = token_subject(token)
        .and_then(|sub| crate::model::identity::from_service_account_subject(&opts.trust_domain, &sub));
    if let Some(id) = &from_token
        && id.namespace() != namespace
    {
        return Err(AgentError::Identity(format!(
            "the token is for service account {} of namespace {}, but the node is in namespace {}",
            id.service_account(),
            id.namespace(),
            Shown(namespace)
        )));
    }
    let account = match (&opts.service_account, &from_token) {
        (Some(sa), _) => sa.clone(),
        (None, Some(id)) => id.service_account().to_string(),
        (None, None) => {
            return Err(AgentError::Identity(
                "the token's subject is not system:serviceaccount:NAMESPACE:NAME; name the service account with --service-account"
                    .into(),
            ));
        }
    };
    Identity::new(&opts.trust_domain, namespace, &account).map_err(|e| AgentError::Identity(e.to_string()))
}

/// Asks the CA for the workload's certificates.
struct Requester {
    upstream: Upstream,
    identity: Identity,
    opts: AgentOptions,
}

/// A failed certificate request.
enum Failure {
    /// Refused for what the request is: asking again will not help.
    Refused(String),
    /// The CA could not be reached or failed.
    Transient(String),
}

impl Requester {
    /// One request: a new key, a CSR, the CA's chain checked.
    async fn request(&self) -> Result<WorkloadCert, Failure> {
        let (key, csr) = certificate::key_and_csr(&self.identity).map_err(|e| Failure::Transient(e.to_string()))?;
        // The token may have been rotated since; a renewal without one
        // is authenticated by the current certificate.
        let token = read_token(&self.opts.token_file).ok();
        let channel = self.upstream.channel().await.map_err(|e| Failure::Transient(e.to_string()))?;
        let cluster = self.opts.meta.get("CLUSTER_ID").map(String::as_str);
        let chain = certificate::create_certificate(channel, csr, token.as_deref(), cluster, self.opts.cert_ttl)
            .await
            .map_err(|status| {
                let why = format!("{:?}: {}", status.code(), Shown(status.message()));
                match status.code() {
                    tonic::Code::Unauthenticated | tonic::Code::PermissionDenied | tonic::Code::InvalidArgument => {
                        Failure::Refused(why)
                    }
                    _ => Failure::Transient(why),
                }
            })?;
        certificate::accept(&self.identity, &key, &chain).map_err(|e| Failure::Transient(e.to_string()))
    }

    /// The first certificate: retried while the CA cannot be reached, an
    /// error when it refuses.
    async fn first(&self) -> Result<WorkloadCert, AgentError> {
        let mut backoff = FIRST_CSR_BACKOFF;
        loop {
            match self.request().await {
                Ok(cert) => return Ok(cert),
                Err(Failure::Refused(why)) => {
                    return Err(AgentError::Refused {
                        address: self.upstream.address().to_string(),
                        identity: self.identity.to_string(),
                        why,
                    });
                }
                Err(Failure::Transient(why)) => {
                    tracing::warn!("asking the CA for a certificate failed ({why}); asking again in {backoff:?}");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_CSR_BACKOFF);
                }
            }
        }
    }

    /// Renews half-way through each certificate's life, for ever; a failed
    /// renewal is retried with backoff while the certificate lasts (and
    /// after: the workload needs one).
    async fn renew_forever(self, holder: watch::Sender<Option<Arc<WorkloadCert>>>) {
        let mut backoff = FIRST_CSR_BACKOFF;
        loop {
            let renew_at = holder.borrow().as_ref().map_or_else(SystemTime::now, |c| c.renew_at());
            if let Ok(wait) = renew_at.duration_since(SystemTime::now()) {
                tokio::time::sleep(wait).await;
            }
            match self.request().await {
                Ok(cert) => {
                    tracing::info!(serial = cert.serial(), "renewed the workload certificate");
                    holder.send_replace(Some(Arc::new(cert)));
                    backoff = FIRST_CSR_BACKOFF;
                }
                Err(Failure::Refused(why) | Failure::Transient(why)) => {
                    let left =
                        holder.borrow().as_ref().and_then(|c| c.not_after().duration_since(SystemTime::now()).ok());
                    tracing::error!(
                        "renewing the workload certificate failed ({why}); the current one expires in {:?}; asking again in {backoff:?}",
                        left.unwrap_or_default()
                    );
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_CSR_BACKOFF);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> AgentOptions {
        AgentOptions {
            node_id: "sidecar~10.0.0.1~sleep-1.default~default.svc.cluster.local".into(),
            discovery_address: DiscoveryAddress::parse("127.0.0.1:15012").unwrap(),
            discovery_server_name: None,
            root_cert: "root-cert.pem".into(),
            token_file: "token".into(),
            service_account: None,
            trust_domain: "cluster.local".into(),
            cert_ttl: Duration::from_secs(3600),
            envoy_binary: "envoy".into(),
            labels: BTreeMap::new(),
            meta: BTreeMap::new(),
            interception: "NONE".into(),
            delta: false,
            admin_port: 15000,
            socket_dir: "sockets".into(),
            status_addr: status::DEFAULT_STATUS_ADDR,
            status_port: 0,
            app_probers: app_probe::AppProbers::default(),
            proxy_config: ProxyConfig::istio_default(),
            envoy_args: Vec::new(),
            xds_proxy_config: false,
            grpc_bootstrap: None,
            output_certs: None,
            envoy: true,
        }
    }

    /// An unsigned JWT with `sub` (the agent does not check signatures).
    fn token(sub: &str) -> String {
        let b64 = |v: serde_json::Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        format!("{}.{}.c2ln", b64(serde_json::json!({"alg": "RS256"})), b64(serde_json::json!({"sub": sub})))
    }

    #[test]
    fn the_identity_is_the_nodes_namespace_and_the_tokens_service_account() {
        let opts = options();
        let id = workload_identity(&opts, "default", &token("system:serviceaccount:default:sleep")).unwrap();
        assert_eq!(id.to_string(), "spiffe://cluster.local/ns/default/sa/sleep");
        let err = workload_identity(&opts, "default", &token("system:serviceaccount:prod:sleep")).unwrap_err();
        assert!(err.to_string().contains("namespace prod") && err.to_string().contains("namespace default"), "{err}");
        // A token that names no service account needs the flag.
        assert!(workload_identity(&opts, "default", "opaque-token").is_err());
        let named = AgentOptions { service_account: Some("sleep".into()), ..opts };
        let id = workload_identity(&named, "default", "opaque-token").unwrap();
        assert_eq!(id.to_string(), "spiffe://cluster.local/ns/default/sa/sleep");
    }
}
