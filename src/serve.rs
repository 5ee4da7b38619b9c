//! `meshpush serve`: wires the sources, the push engine, ADS and admin together.
//!
//! Start-up order keeps `/ready` honest: the directory is loaded and the
//! first snapshot published before the ready flag is set; only then does
//! the watcher feed the debouncer. The xDS listener is bound before the
//! load, so Envoys that connect early wait on an empty but valid snapshot
//! and get pushed the real one as soon as it exists.
//!
//! ADS listens on TCP or on a Unix domain socket ([`ListenAddr`]): the
//! socket lets an Envoy in another network namespace (no route to the
//! host's loopback) reach meshpush through the filesystem. Its connections
//! are served by [`connections`]: kept alive, capped in streams, drained
//! at their maximum age and at shutdown.

pub mod connections;
mod secure;

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::mpsc;

use crate::engine::PushEngine;
use crate::model::ConfigStore;
use crate::push::{DebounceConfig, Debouncer, PushRequest, PushSlot};
use crate::source::RegistryService;
use crate::source::autoregistration::{self, AutoRegistration};
use crate::source::file::FileSource;
use crate::source::jwks::JwksFetcher;
use crate::source::mesh_config::{MeshConfigSource, MeshConfigStatus, MeshOrigin};
use crate::source::spiffe_bundle::SpiffeBundleFetcher;
use crate::xds::AdsService;
use crate::xds::server::StreamLimits;
use connections::{ConnectionPolicy, XdsListener};
use secure::SecurePort;

/// Options of `meshpush serve`.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Directory of YAML (none: only the other sources).
    pub config_dir: Option<PathBuf>,
    /// A Kubernetes API server to read the mesh from.
    pub kube: Option<crate::source::kube::KubeAccess>,
    /// The namespaces read from it: those matching any (none: all), as
    /// MeshConfig's `discoverySelectors`.
    pub discovery_selectors: Vec<kube::core::Selector>,
    /// The Istio revision served (`istio.io/rev`): objects read from
    /// Kubernetes that are labelled for another revision are not.
    pub revision: Option<String>,
    /// This cluster's id (Istio's `CLUSTER_ID`).
    pub cluster_id: String,
    /// meshpush's own namespace: where remote secrets are read.
    pub system_namespace: String,
    /// The service account meshpush runs as: the mesh identity it gives
    /// itself (`ISTIO_MUTUAL` config sources) names it.
    pub service_account: String,
    /// The node meshpush's MCP clients introduce themselves as.
    pub mcp_node: envoy_types::pb::envoy::config::core::v3::Node,
    /// Consul's catalog, read as a service registry.
    pub consul: Option<crate::source::consul::ConsulOptions>,
    /// How long readiness waits for a remote cluster (zero: for ever).
    pub remote_cluster_timeout: Duration,
    /// ADS address.
    pub xds_addr: ListenAddr,
    /// Admin address.
    pub admin_addr: SocketAddr,
    /// Debounce timing.
    pub debounce: DebounceConfig,
    /// How the xDS port treats its connections.
    pub connections: ConnectionPolicy,
    /// What the ADS streams may take.
    pub limits: StreamLimits,
    /// What the admin port's clients may take.
    pub admin_limits: crate::admin::AdminLimits,
    /// Config files larger than this are not read.
    pub max_file_bytes: u64,
    /// The CA and the secure xDS port, when meshpush is the mesh's CA.
    pub secure: Option<SecureXds>,
    /// The mesh-wide settings (trust domain, root namespace).
    pub mesh: crate::config::mesh::MeshConfig,
    /// What the mesh config file set that meshpush does not apply, each
    /// with its path: logged at startup and listed on `/debug/configz`.
    pub mesh_problems: Vec<crate::config::Problem>,
    /// The mesh config to follow while serving (a file, or Istio's
    /// ConfigMap), with the flags that stay over it.
    pub mesh_source: Option<MeshSource>,
    /// How often fetched JWKS are fetched again.
    pub jwks_refresh: Duration,
    /// How often the mesh config's SPIFFE bundles are fetched again.
    pub spiffe_bundle_refresh: Duration,
}

/// Istio's mesh config (`--mesh-config FILE`, or the `istio` ConfigMap),
/// followed while serving.
#[derive(Debug, Clone)]
pub struct MeshSource {
    /// Where it is read.
    pub origin: MeshOrigin,
    /// The settings the command line lays over it.
    pub flags: crate::config::mesh::MeshSettings,
    /// What it gave at startup, with the flags over it.
    pub startup: crate::config::mesh::MeshSettings,
}

/// The mesh's CA and the port that serves ADS, the CA and the registry
/// API over mutual TLS (istiod's 15012).
#[derive(Debug, Clone)]
pub struct SecureXds {
    /// Where it listens.
    pub addr: ListenAddr,
    /// The CA's key material (plug-in layout, or where a self-signed root is made).
    pub ca_dir: PathBuf,
    /// The trust domain identities are issued in.
    pub trust_domain: String,
    /// A JWKS that certificate requests' tokens may be signed by.
    pub jwks: Option<PathBuf>,
    /// The names the port's own certificate carries.
    pub server_names: Vec<String>,
    /// Identities that may use the registry API on this port.
    pub registry_writers: Vec<crate::model::Identity>,
    /// The `(namespace, service account)` pairs trusted as node agents
    /// (ztunnel): the CA issues them their node's workloads' certificates.
    pub trusted_node_accounts: std::collections::BTreeSet<(String, String)>,
    /// Workload certificate lifetimes.
    pub lifetimes: crate::ca::Lifetimes,
    /// Where the admission webhooks listen (HTTPS, with the secure port's
    /// certificate), if anywhere.
    pub webhook_addr: Option<SocketAddr>,
    /// The sidecar injector's settings.
    pub injector: crate::inject::InjectorSettings,
    /// On Kubernetes, the Secret (`namespace`, `name`) that keeps the
    /// self-signed root when `ca_dir` holds no plug-in CA.
    pub ca_secret: Option<(String, String)>,
}

/// Where a server listens: `IP:PORT`, or `unix:/path/to.sock`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddr {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A Unix domain socket path.
    Unix(PathBuf),
}

/// A listen address that is neither `IP:PORT` nor `unix:PATH`.
#[derive(Debug, thiserror::Error)]
#[error("{0:?}: expected IP:PORT (127.0.0.1:15010) or unix:PATH (unix:/run/meshpush/xds.sock)")]
pub struct ListenAddrError(String);

impl FromStr for ListenAddr {
    type Err = ListenAddrError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.strip_prefix("unix:") {
            Some(path) if !path.is_empty() => Ok(ListenAddr::Unix(PathBuf::from(path))),
            Some(_) => Err(ListenAddrError(s.to_string())),
            None => s.parse().map(ListenAddr::Tcp).map_err(|_| ListenAddrError(s.to_string())),
        }
    }
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddr::Tcp(addr) => addr.fmt(f),
            ListenAddr::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// Binds an xDS address.
fn bind_xds(addr: &ListenAddr) -> io::Result<XdsListener> {
    match addr {
        ListenAddr::Tcp(addr) => XdsListener::bind_tcp(*addr),
        ListenAddr::Unix(path) => crate::os::bind_unix(path).map(XdsListener::Unix),
    }
}

/// Worker threads of the admin runtime.
const ADMIN_WORKERS: usize = 1;
/// Blocking threads of the admin runtime (config dumps are built on them).
const ADMIN_BLOCKING_THREADS: usize = 2;

/// How long readiness waits for the MCP config sources listed at startup
/// to send their first full state, and for Consul's first catalog.
const SOURCE_SYNC_TIMEOUT: Duration = Duration::from_secs(30);

/// Change sets buffered between the sources and the debouncer.
const CHANGE_QUEUE: usize = 1024;

/// Turns transparent huge pages off for this process. mimalloc asks for
/// them on its arenas (`MADV_HUGEPAGE`), and it returns freed memory to the
/// kernel; each time such memory is used again the kernel faults in and
/// zeroes a whole 2 MiB page. A control plane's heap is many small
/// allocations with short lives (request buffers, per-stream tables), so
/// that zeroing was half of the server's CPU in the loadtest's s1 sync, and
/// 2 MiB pages that are barely used inflated its resident memory.
pub fn opt_out_of_huge_pages() {
    if let Err(e) = rustix::thread::disable_transparent_huge_pages(true) {
        tracing::warn!("could not turn transparent huge pages off for meshpush (prctl PR_SET_THP_DISABLE): {e}");
    }
}

/// Runs the server until Ctrl-C or SIGTERM.
pub async fn run(options: ServeOptions) -> anyhow::Result<()> {
    let engine = PushEngine::for_mesh(options.mesh.clone());
    let store = Arc::new(ConfigStore::new());
    // Both sources (the directory watcher and the registry API) feed the debouncer through this.
    let (changes_tx, changes_rx) = mpsc::channel(CHANGE_QUEUE);

    let xds_listener =
        bind_xds(&options.xds_addr).with_context(|| format!("binding the xDS address {}", options.xds_addr))?;
    if let ListenAddr::Tcp(addr) = &options.xds_addr
        && !addr.ip().is_loopback()
    {
        tracing::warn!(
            xds = %options.xds_addr,
            "the plaintext xDS port listens beyond loopback: it is meant for local development, and any client \
             that reaches it can claim to be any proxy and write the registry; serve the mesh on --secure-xds-addr"
        );
    }
    // The kube client serves both the watchers and the CA's TokenReviews.
    let kube_client = match &options.kube {
        Some(access) => Some(crate::source::kube::client(access).await.context("connecting to the Kubernetes API")?),
        None => None,
    };
    // The remote clusters' clients, which the CA reviews their workloads' tokens with.
    let remote_clients = crate::ca::authn::ClusterClients::default();
    let mut own_identity = None;
    let secure = match &options.secure {
        Some(secure) => {
            let kube = kube_client.clone().map(|c| (c, options.cluster_id.as_str(), remote_clients.clone()));
            let port = SecurePort::open(secure, kube, engine.clone()).await?;
            let identity =
                crate::model::Identity::new(&secure.trust_domain, &options.system_namespace, &options.service_account)
                    .map_err(|e| anyhow::anyhow!("--service-account: {e}"))?;
            own_identity = Some(crate::source::mcp::MeshIdentity { ca: port.authority.clone(), identity });
            Some(port)
        }
        None => None,
    };
    let admin_listener = std::net::TcpListener::bind(options.admin_addr)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .with_context(|| format!("binding the admin address {}", options.admin_addr))?;
    // The admin endpoints run on a runtime of their own (one worker, a
    // small blocking pool), as ztunnel keeps its admin off the data path:
    // however hard they are polled, they never take an xDS worker, and at
    // a lower priority they yield the cores to the xDS workers.
    let admin_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(ADMIN_WORKERS)
        .max_blocking_threads(ADMIN_BLOCKING_THREADS)
        .thread_name("meshpush-admin")
        .on_thread_start(lower_this_threads_priority)
        .enable_all()
        .build()
        .context("starting the admin runtime")?;

    let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
    let shutdown = {
        let shutdown_rx = shutdown_rx.clone();
        move || {
            let mut rx = shutdown_rx.clone();
            async move {
                let _ = rx.wait_for(|stop| *stop).await;
            }
        }
    };

    let ads_service = AdsService::with_limits(engine.clone(), options.limits);
    let registry = RegistryService::new(store.clone(), engine.clone(), changes_tx.clone());
    let routes = tonic::service::Routes::new(ads_service.clone()).add_service(registry.clone().into_server());
    let ads = tokio::spawn(connections::serve(
        xds_listener,
        routes,
        options.connections,
        engine.metrics().clone(),
        shutdown_rx.clone(),
        None,
        ads_service.admission(),
    ));
    let secure_ads = secure.map(|mut port| {
        // On Kubernetes, the mesh root goes where pods and the API server
        // look for it: every namespace's istio-ca-root-cert and the
        // webhook configurations' caBundle.
        if let Some(client) = &kube_client {
            use crate::source::ca_bundle::{patch_webhooks, publish_root};
            tokio::spawn(publish_root(client.clone(), port.roots_pem.clone()));
            let revision = options.revision.clone().filter(|r| !r.is_empty()).unwrap_or_else(|| "default".into());
            tokio::spawn(patch_webhooks(client.clone(), port.roots_pem.clone(), revision));
        }
        if let (Some(listener), Some(options)) = (port.webhook.take(), &options.secure) {
            let hooks = crate::admission::Webhooks::new(engine.clone(), options.injector.clone());
            tokio::spawn(crate::admission::serve(
                listener,
                port.tls.webhook_acceptor(),
                hooks.router(),
                shutdown_rx.clone(),
            ));
        }
        let routes = tonic::service::Routes::new(ads_service.clone())
            .add_service(registry.with_writers(port.registry_writers).into_server())
            .add_service(port.ca.into_server());
        tokio::spawn(port.tls.clone().renew_forever());
        tokio::spawn(connections::serve(
            port.listener,
            routes,
            options.connections,
            engine.metrics().clone(),
            shutdown_rx.clone(),
            Some(connections::SecureTransport {
                acceptor: port.tls.acceptor(),
                tokens: Some(port.tokens.clone()).filter(|t| t.accepts_tokens()).map(|t| t as _),
            }),
            ads_service.admission(),
        ))
    });
    let admin_state = crate::admin::AdminState::new(ads_service);
    for problem in &options.mesh_problems {
        tracing::warn!("mesh config {problem}");
    }
    let mesh_status = MeshConfigStatus::new(options.mesh_problems.clone());
    admin_state.set_mesh(mesh_status.clone());
    let admin = admin_runtime.spawn({
        let router = crate::admin::router_with_limits(admin_state.clone(), options.admin_limits);
        let shutdown = shutdown();
        async move {
            let listener = tokio::net::TcpListener::from_std(admin_listener)?;
            // With each client's address: the expensive views are rate-limited per client.
            axum::serve(listener, router.into_make_service_with_connect_info::<SocketAddr>())
                .with_graceful_shutdown(shutdown)
                .await
        }
    });
    match &options.secure {
        Some(secure) => tracing::info!(
            xds = %options.xds_addr,
            secure_xds = %secure.addr,
            webhooks = %secure.webhook_addr.map_or("off".to_string(), |a| a.to_string()),
            admin = %options.admin_addr,
            "listening"
        ),
        None => tracing::info!(xds = %options.xds_addr, admin = %options.admin_addr, "listening"),
    }

    // Initial load: the directory in one batch, one snapshot; then the
    // Kubernetes watchers' first lists; then ready.
    let (source, changes) = match options.config_dir.clone() {
        Some(dir) => {
            let load_store = store.clone();
            let max_file_bytes = options.max_file_bytes;
            let (source, report) =
                tokio::task::spawn_blocking(move || FileSource::load_limited(&dir, &load_store, max_file_bytes))
                    .await
                    .context("loading the config directory")??;
            admin_state.set_source(source.status());
            (Some(source), report.changes)
        }
        None => (None, store.apply(Vec::new())),
    };
    let version = engine.push(PushRequest::new(changes)).await;
    // The reference checks `meshpush validate` makes, on what is served.
    let references = admin_state.references().clone();
    let snapshot = engine.snapshot();
    let initial = references.clone();
    tokio::task::spawn_blocking(move || initial.refresh(&snapshot.store, &snapshot.mesh, true))
        .await
        .context("checking references")?;
    let (kube, kube_watchers) = match kube_client {
        Some(client) => {
            let resources =
                crate::source::kube::resources(&client).await.context("discovering the Kubernetes API's kinds")?;
            let remote_client = client.clone();
            let status_writer =
                crate::source::gateway_status::GatewayStatusWriter::new(engine.clone(), client.clone(), &resources);
            let (status, watchers) = crate::source::kube::start(
                client,
                crate::config::ClusterId::LOCAL,
                resources,
                options.discovery_selectors.clone(),
                options.revision.as_deref(),
                store.clone(),
                changes_tx.clone(),
            );
            admin_state.set_kube(status.clone());
            let mut watchers = watchers;
            watchers.push(tokio::spawn(status_writer.run()));
            let remote = crate::source::kube::remote::RemoteOptions {
                namespace: options.system_namespace.clone(),
                local_id: options.cluster_id.clone(),
                timeout: options.remote_cluster_timeout,
                selectors: options.discovery_selectors.clone(),
                clients: remote_clients.clone(),
            };
            let (remotes, controller) =
                crate::source::kube::remote::start(remote_client, remote, store.clone(), changes_tx.clone());
            admin_state.set_remote_clusters(remotes.clone());
            watchers.push(controller);
            (Some((status, remotes)), watchers)
        }
        None => (None, Vec::new()),
    };
    // The MCP-over-xDS servers of the mesh config (`configSources`): those
    // listed at startup are connected now, so that readiness can wait for them.
    let mut mcp = crate::source::mcp::McpSources::new(
        store.clone(),
        engine.clone(),
        changes_tx.clone(),
        crate::source::mcp::McpOptions {
            transport: crate::source::mcp::TransportContext {
                mesh: own_identity,
                system_namespace: options.system_namespace.as_str().into(),
            },
            revision: options.revision.as_deref().filter(|r| !r.is_empty()).map(Arc::from),
            node: options.mcp_node.clone(),
        },
    );
    mcp.reconcile(&options.mesh.config_sources).await;
    let mcp_status = mcp.status();
    admin_state.set_mcp(mcp_status.clone());
    let mcp = tokio::spawn(mcp.run());
    let mcp_listed = !options.mesh.config_sources.is_empty();
    // Consul's catalog, when asked for.
    let consul = options.consul.clone().map(|consul| {
        let source = crate::source::consul::ConsulSource::new(consul, store.clone(), changes_tx.clone());
        admin_state.set_consul(source.status());
        (source.status(), tokio::spawn(source.run()))
    });
    let consul_status = consul.as_ref().map(|(status, _)| status.clone());
    let unread = source.as_ref().map(|s| s.status().unread_files()).unwrap_or_default();
    let readiness = if unread.is_empty() && kube.is_none() && !mcp_listed && consul_status.is_none() {
        announce_ready(&engine, version);
        None
    } else {
        if !unread.is_empty() {
            // Serving a mesh with a file's objects missing would push every
            // proxy a config without them: wait until every file was read once.
            tracing::error!(
                files = %unread.iter().map(|f| f.name.to_string()).collect::<Vec<_>>().join(", "),
                "not ready: these config files cannot be read (see /debug/configz); ready once each was read"
            );
        }
        let status = source.as_ref().map(FileSource::status);
        let engine = engine.clone();
        let store_revision = store.clone();
        Some(tokio::spawn(async move {
            if let Some(status) = status {
                while !status.unread_files().is_empty() {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
            if mcp_listed || consul_status.is_some() {
                // As istiod waits for its config sources to sync, but not
                // for ever: a server that is down at startup keeps being
                // retried (its state is on /debug/configz).
                if mcp_listed && tokio::time::timeout(SOURCE_SYNC_TIMEOUT, mcp_status.wait_synced()).await.is_err() {
                    tracing::warn!(
                        servers = %mcp_status.pending().iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", "),
                        "MCP config sources not synced after {SOURCE_SYNC_TIMEOUT:?}: ready without their config"
                    );
                }
                if let Some(consul) = &consul_status
                    && tokio::time::timeout(SOURCE_SYNC_TIMEOUT, consul.wait_synced()).await.is_err()
                {
                    tracing::warn!("Consul's catalog not read after {SOURCE_SYNC_TIMEOUT:?}: ready without it");
                }
                let revision = store_revision.snapshot().revision();
                let mut versions = engine.versions();
                while engine.snapshot().store.revision() < revision {
                    if versions.changed().await.is_err() {
                        return;
                    }
                }
            }
            if let Some((kube, remotes)) = kube {
                // As istiod waits for its informers: ready once what every
                // watcher listed first is in a published snapshot, the
                // remote clusters' included (each up to its timeout).
                let mut revision = kube.wait_synced().await;
                remotes.wait_settled().await;
                revision = revision.max(store_revision.snapshot().revision());
                let mut versions = engine.versions();
                while engine.snapshot().store.revision() < revision {
                    if versions.changed().await.is_err() {
                        return;
                    }
                }
            }
            announce_ready(&engine, *engine.versions().borrow());
        }))
    };

    let slot = Arc::new(PushSlot::default());
    let watcher = match source {
        Some(source) => Some(source.watch(store.clone(), changes_tx.clone()).context("watching the config directory")?),
        None => None,
    };
    let mesh_watcher = match options.mesh_source.clone() {
        Some(mesh) => {
            let kube_read = options.kube.is_some();
            let origin = mesh.origin.name();
            let source = MeshConfigSource::new(
                mesh.origin,
                mesh.flags,
                &mesh.startup,
                options.mesh.clone(),
                kube_read,
                mesh_status,
            );
            Some(source.watch(store.clone(), changes_tx.clone()).with_context(|| format!("watching {origin}"))?)
        }
        None => None,
    };
    let debouncer = tokio::spawn(Debouncer::new(options.debounce, slot.clone()).run(changes_rx));
    let pusher = tokio::spawn(engine.clone().run(slot));
    let checker = tokio::spawn(check_references_of_each_version(engine.clone(), references));
    let registration = tokio::spawn(
        AutoRegistration::new(store.clone(), engine.clone(), changes_tx.clone(), autoregistration::DEFAULT_GRACE).run(),
    );

    let jwks =
        tokio::spawn(JwksFetcher::new(store.clone(), engine.clone(), changes_tx.clone(), options.jwks_refresh).run());
    // Bundle URLs are read only under ISTIO_MULTIROOT_MESH, a flag: without
    // it no mesh config edit can list one.
    let spiffe_bundles = options.mesh.trust_anchors.multi_root.then(|| {
        let fetcher =
            SpiffeBundleFetcher::new(store.clone(), engine.clone(), changes_tx.clone(), options.spiffe_bundle_refresh);
        tokio::spawn(fetcher.run())
    });

    // Network gateways known by host name (idle while there are none).
    let gateway_dns = tokio::spawn(
        crate::source::gateway_dns::GatewayResolver::new(
            store.clone(),
            engine.clone(),
            changes_tx.clone(),
            crate::source::gateway_dns::REFRESH,
        )
        .run(),
    );

    crate::os::shutdown_signal().await;
    tracing::info!("shutting down");
    let _ = shutdown_tx.send(true);
    if let Some(watcher) = watcher {
        watcher.abort();
    }
    if let Some(watcher) = mesh_watcher {
        watcher.abort();
    }
    for watcher in kube_watchers {
        watcher.abort();
    }
    debouncer.abort();
    pusher.abort();
    checker.abort();
    registration.abort();
    mcp.abort();
    if let Some((_, consul)) = consul {
        consul.abort();
    }
    jwks.abort();
    gateway_dns.abort();
    if let Some(spiffe_bundles) = spiffe_bundles {
        spiffe_bundles.abort();
    }
    if let Some(readiness) = readiness {
        readiness.abort();
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        let _ = ads.await;
        if let Some(secure_ads) = secure_ads {
            let _ = secure_ads.await;
        }
        let _ = admin.await;
    })
    .await;
    for addr in std::iter::once(&options.xds_addr).chain(options.secure.as_ref().map(|s| &s.addr)) {
        if let ListenAddr::Unix(path) = addr {
            let _ = std::fs::remove_file(path);
        }
    }
    admin_runtime.shutdown_background();
    Ok(())
}

/// Niceness of the admin threads: when they compete for a core with the
/// xDS workers (at 0), the kernel gives them a small share of it.
const ADMIN_NICENESS: i32 = 10;

/// Lowers the calling thread's scheduling priority to [`ADMIN_NICENESS`]
/// (Linux schedules threads, and `setpriority` on a thread id affects that
/// thread only). Admin requests then wait for the xDS workers, not the
/// other way round, when the cores are busy.
fn lower_this_threads_priority() {
    let tid = rustix::thread::gettid();
    if let Err(e) = rustix::process::setpriority_process(Some(tid), ADMIN_NICENESS) {
        tracing::debug!("could not lower an admin thread's priority: {e}");
    }
}

/// Marks the engine ready (streams are answered, `/ready` says 200).
fn announce_ready(engine: &PushEngine, version: u64) {
    engine.set_ready();
    let ctx = engine.snapshot();
    tracing::info!(
        version,
        services = ctx.services.len(),
        endpoints = ctx.endpoints.endpoint_count(),
        "first snapshot published; ready"
    );
}

/// Re-checks references whenever a new snapshot is published (a revision
/// checked already is skipped, so endpoint churn costs a comparison).
async fn check_references_of_each_version(engine: Arc<PushEngine>, report: crate::source::ReferenceReport) {
    let mut versions = engine.versions();
    while versions.changed().await.is_ok() {
        let snapshot = engine.snapshot();
        let report = report.clone();
        if tokio::task::spawn_blocking(move || report.refresh(&snapshot.store, &snapshot.mesh, true)).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addr_is_tcp_or_a_unix_path() {
        assert_eq!("127.0.0.1:15010".parse::<ListenAddr>().unwrap(), ListenAddr::Tcp(([127, 0, 0, 1], 15010).into()));
        let unix: ListenAddr = "unix:/run/meshpush/xds.sock".parse().unwrap();
        assert_eq!(unix, ListenAddr::Unix("/run/meshpush/xds.sock".into()));
        assert_eq!(unix.to_string(), "unix:/run/meshpush/xds.sock");
        for bad in ["unix:", "localhost:15010", "127.0.0.1", ""] {
            let err = bad.parse::<ListenAddr>().unwrap_err();
            assert!(err.to_string().contains("expected IP:PORT"), "{bad}: {err}");
        }
    }
}
