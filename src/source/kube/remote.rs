//! Remote clusters: one mesh over several Kubernetes clusters, as istiod
//! reads them (`pkg/kube/multicluster`).
//!
//! A remote secret is a Secret labelled `istio/multiCluster: "true"` in
//! meshpush's own namespace (`--system-namespace`, Istio's `POD_NAMESPACE`),
//! the shape `istioctl create-remote-secret` (and `meshpush
//! create-remote-secret`) writes: each data key is a cluster id, its value a
//! kubeconfig of that cluster. For each cluster this controller runs the
//! Kubernetes source's watchers of its registry — Services, Pods,
//! EndpointSlices, Nodes, Namespaces; Istio's config is read from the local
//! cluster alone — writing objects of that [`ClusterId`] into the same
//! store, so they go through the same push engine.
//!
//! Rules, as istiod's:
//! * A secret added starts its clusters' watchers; a kubeconfig changed
//!   starts new ones, which take over what the old ones held (their first
//!   list deletes what it no longer has); a secret (or key) deleted stops
//!   them and deletes every object of the cluster.
//! * A key naming the local cluster is not read, nor a cluster another
//!   secret named first; both are reported.
//! * A kubeconfig that does not parse, or names what a Secret cannot hold
//!   (an `exec` or auth-provider plugin, files of this machine), is
//!   refused and reported; nothing of it is read.
//! * When a cluster's API server goes away its objects stay, as istiod
//!   keeps its informers' caches, until its secret is deleted; a watch
//!   error that reaches the watchers is shown with the cluster (the client
//!   retries a server that answers 503 itself, which shows in the log only).
//! * Readiness: `/ready` waits for the remote clusters that the first list
//!   of secrets names, each until its watchers have listed or
//!   `--remote-cluster-timeout` passed (Istio's `PILOT_REMOTE_CLUSTER_TIMEOUT`,
//!   30 s; zero waits for ever), whichever comes first; a cluster that
//!   timed out is logged and keeps syncing. A cluster added later never
//!   holds readiness.
//!
//! Invariant: a kubeconfig's text is never logged or shown (it holds the
//! remote cluster's token); only its cluster id, its server and why it was
//! refused are.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use serde::Serialize;
use tokio::sync::{mpsc, watch};

use super::KubeStatus;
use crate::config::{ClusterId, ConfigKind};
use crate::model::store::Write;
use crate::model::{ChangeSet, ConfigStore};
use crate::text::Shown;

/// The label of a remote secret.
pub const MULTICLUSTER_SECRET_LABEL: &str = "istio/multiCluster";

/// The kinds read from a remote cluster: its registry.
pub const REMOTE_KINDS: [ConfigKind; 5] =
    [ConfigKind::Service, ConfigKind::Pod, ConfigKind::Node, ConfigKind::EndpointSlice, ConfigKind::Namespace];

/// How remote clusters are read.
#[derive(Debug, Clone)]
pub struct RemoteOptions {
    /// Where remote secrets are read (meshpush's own namespace).
    pub namespace: String,
    /// The local cluster's id: a key naming it is not read.
    pub local_id: String,
    /// How long readiness waits for a remote cluster's first lists (zero: for ever).
    pub timeout: Duration,
    /// The namespaces read of each cluster (MeshConfig's `discoverySelectors`).
    pub selectors: Vec<kube::core::Selector>,
    /// Where each remote cluster's client is kept for the CA, which
    /// reviews the tokens of that cluster's workloads with it.
    pub clients: crate::ca::authn::ClusterClients,
}

/// Where a remote cluster stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Its watchers have not all listed yet.
    Syncing,
    /// Every watcher has listed.
    Synced,
    /// It did not list within the timeout (it keeps trying).
    Timeout,
    /// Its kubeconfig was refused: nothing of it is read.
    Failed,
}

/// One remote cluster, as `/debug/configz` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterView {
    /// Its id.
    pub id: String,
    /// The secret that names it (`NAMESPACE/NAME`).
    pub secret: String,
    /// Its API server (empty when the kubeconfig was refused before naming one).
    pub server: String,
    /// Where it stands.
    pub phase: Phase,
    /// Why it failed, or its watchers' current errors.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    /// Kinds whose first list has not come.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<ConfigKind>,
}

/// What the controller reports: the clusters it reads, the keys it did
/// not, and whether readiness may go on. Cheap to clone.
#[derive(Debug, Clone)]
pub struct RemoteClusters {
    inner: Arc<parking_lot::Mutex<Reported>>,
    /// `true` once the clusters of the first list of secrets are settled.
    settled: watch::Sender<bool>,
}

#[derive(Debug, Default)]
struct Reported {
    clusters: BTreeMap<String, Reporting>,
    /// Keys not read, and why.
    skipped: Vec<String>,
}

#[derive(Debug)]
struct Reporting {
    secret: String,
    server: String,
    phase: Phase,
    failure: Option<String>,
    status: Option<KubeStatus>,
}

impl RemoteClusters {
    fn new() -> RemoteClusters {
        RemoteClusters { inner: Arc::default(), settled: watch::Sender::new(false) }
    }

    /// Every remote cluster, by id.
    pub fn clusters(&self) -> Vec<ClusterView> {
        let inner = self.inner.lock();
        inner
            .clusters
            .iter()
            .map(|(id, r)| {
                let mut errors: Vec<String> = r.failure.iter().cloned().collect();
                errors.extend(r.status.as_ref().map(KubeStatus::watch_errors).unwrap_or_default());
                ClusterView {
                    id: id.clone(),
                    secret: r.secret.clone(),
                    server: r.server.clone(),
                    phase: r.phase,
                    errors,
                    pending: r.status.as_ref().map(KubeStatus::pending).unwrap_or_default(),
                }
            })
            .collect()
    }

    /// The keys of remote secrets that are not read, each with why.
    pub fn skipped(&self) -> Vec<String> {
        self.inner.lock().skipped.clone()
    }

    /// The remote clusters readiness still waits for.
    pub fn waiting(&self) -> Vec<String> {
        if *self.settled.borrow() {
            return Vec::new();
        }
        let inner = self.inner.lock();
        let mut waiting: Vec<String> =
            inner.clusters.iter().filter(|(_, r)| r.phase == Phase::Syncing).map(|(id, _)| id.clone()).collect();
        if waiting.is_empty() {
            waiting.push("the first list of remote secrets".to_string());
        }
        waiting
    }

    /// Waits until the clusters the first list of secrets names have each
    /// listed, timed out or failed.
    pub async fn wait_settled(&self) {
        let _ = self.settled.subscribe().wait_for(|settled| *settled).await;
    }

    fn set_phase(&self, id: &str, phase: Phase) {
        if let Some(r) = self.inner.lock().clusters.get_mut(id) {
            r.phase = phase;
        }
    }
}

/// A running remote cluster.
struct Running {
    /// What it was started from: its secret and a hash of its kubeconfig.
    secret: String,
    hash: u64,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Starts the controller: it watches remote secrets with `client` (the
/// local cluster's) and runs each remote cluster's watchers, writing into
/// `store` and sending change sets on `changes`, until aborted.
pub fn start(
    client: kube::Client,
    options: RemoteOptions,
    store: Arc<ConfigStore>,
    changes: mpsc::Sender<ChangeSet>,
) -> (RemoteClusters, tokio::task::JoinHandle<()>) {
    let reported = RemoteClusters::new();
    let controller = Controller { options, store, changes, reported: reported.clone(), running: HashMap::new() };
    (reported, tokio::spawn(controller.run(client)))
}

struct Controller {
    options: RemoteOptions,
    store: Arc<ConfigStore>,
    changes: mpsc::Sender<ChangeSet>,
    reported: RemoteClusters,
    running: HashMap<String, Running>,
}

/// A remote secret's clusters: id → kubeconfig text.
type Clusters = BTreeMap<String, String>;

impl Controller {
    async fn run(mut self, client: kube::Client) {
        let api: Api<Secret> = Api::namespaced(client, &self.options.namespace);
        let config = watcher::Config::default().labels(&format!("{MULTICLUSTER_SECRET_LABEL}=true"));
        let mut events = std::pin::pin!(watcher::watcher(api, config).default_backoff());
        let mut secrets: BTreeMap<String, Clusters> = BTreeMap::new();
        let mut listing: Option<BTreeMap<String, Clusters>> = None;
        let mut first = true;
        while let Some(event) = events.next().await {
            match event {
                Ok(Event::Init) => listing = Some(BTreeMap::new()),
                Ok(Event::InitApply(secret)) => {
                    let (name, clusters) = read_secret(&secret);
                    listing.get_or_insert_with(BTreeMap::new).insert(name, clusters);
                }
                Ok(Event::InitDone) => {
                    secrets = listing.take().unwrap_or_default();
                    self.reconcile(&secrets).await;
                    if first {
                        first = false;
                        tokio::spawn(settle(self.reported.clone(), self.options.timeout));
                    }
                }
                Ok(Event::Apply(secret)) => {
                    let (name, clusters) = read_secret(&secret);
                    secrets.insert(name, clusters);
                    self.reconcile(&secrets).await;
                }
                Ok(Event::Delete(secret)) => {
                    secrets.remove(&read_secret(&secret).0);
                    self.reconcile(&secrets).await;
                }
                Err(e) => {
                    let text = e.to_string();
                    tracing::warn!("watching the remote secrets: {}; retrying", Shown(&text));
                }
            }
        }
    }

    /// Brings the running clusters to what `secrets` name.
    async fn reconcile(&mut self, secrets: &BTreeMap<String, Clusters>) {
        let namespace = &self.options.namespace;
        // Which secret each cluster is read from: the one already reading
        // it while it still names it, else the first by name.
        let mut wanted: BTreeMap<String, (String, &String)> = BTreeMap::new();
        let mut skipped = Vec::new();
        let owner = |id: &str| self.running.get(id).map(|r| r.secret.clone());
        let mut ordered: Vec<(&String, &Clusters)> = secrets.iter().collect();
        ordered.sort_by_key(|(name, clusters)| {
            let owns = clusters.keys().any(|id| owner(id).as_deref() == Some(&format!("{namespace}/{name}")));
            (!owns, name.to_string())
        });
        for (name, clusters) in ordered {
            let secret = format!("{namespace}/{name}");
            for (id, kubeconfig) in clusters {
                if id == &self.options.local_id {
                    skipped.push(format!("{secret}: key {id} names the local cluster: not read"));
                } else if let Some((other, _)) = wanted.get(id) {
                    skipped.push(format!("{secret}: cluster {id} is read from {other} already: not read"));
                } else {
                    wanted.insert(id.clone(), (secret.clone(), kubeconfig));
                }
            }
        }
        for line in &skipped {
            tracing::warn!("remote secret {line}");
        }
        self.reported.inner.lock().skipped = skipped;

        let gone: Vec<String> = self.running.keys().filter(|id| !wanted.contains_key(*id)).cloned().collect();
        for id in gone {
            self.stop(&id).await;
        }
        for (id, (secret, kubeconfig)) in wanted {
            let hash = xxhash_rust::xxh3::xxh3_64(kubeconfig.as_bytes());
            if self.running.get(&id).is_some_and(|r| r.hash == hash && r.secret == secret) {
                continue;
            }
            // New, or a new kubeconfig: the new watchers take over what the
            // old ones held (see `super::start`).
            self.running.remove(&id);
            self.begin(&id, &secret, kubeconfig, hash).await;
        }
    }

    /// Starts reading cluster `id` from `kubeconfig`.
    async fn begin(&mut self, id: &str, secret: &str, kubeconfig: &str, hash: u64) {
        let cluster = ClusterId::remote(id);
        let mut reporting = Reporting {
            secret: secret.to_string(),
            server: String::new(),
            phase: Phase::Syncing,
            failure: None,
            status: None,
        };
        match client_of(kubeconfig).await {
            Err(why) => {
                tracing::error!(cluster = id, secret, "remote cluster not read: {why}");
                self.options.clients.set(id, None);
                reporting.phase = Phase::Failed;
                reporting.failure = Some(why);
                self.running.insert(id.to_string(), Running { secret: secret.to_string(), hash, tasks: Vec::new() });
            }
            Ok((client, server)) => {
                tracing::info!(cluster = id, secret, server = %server, "reading remote cluster");
                reporting.server = server;
                self.options.clients.set(id, Some(client.clone()));
                let resources = REMOTE_KINDS.iter().map(|kind| (*kind, super::api_resource(*kind))).collect();
                let (status, mut tasks) = super::start(
                    client,
                    cluster,
                    resources,
                    self.options.selectors.clone(),
                    None,
                    self.store.clone(),
                    self.changes.clone(),
                );
                reporting.status = Some(status.clone());
                let reported = self.reported.clone();
                let timeout = self.options.timeout;
                let cluster_id = id.to_string();
                tasks.push(tokio::spawn(async move {
                    let synced = status.wait_synced();
                    let timed_out = async {
                        match timeout.is_zero() {
                            true => std::future::pending().await,
                            false => tokio::time::sleep(timeout).await,
                        }
                    };
                    tokio::select! {
                        _ = status.wait_synced() => {}
                        () = timed_out => {
                            tracing::warn!(
                                cluster = %cluster_id,
                                "remote cluster not synced within {timeout:?} (--remote-cluster-timeout): serving without waiting for it; it keeps syncing"
                            );
                            reported.set_phase(&cluster_id, Phase::Timeout);
                            synced.await;
                        }
                    }
                    tracing::info!(cluster = %cluster_id, "remote cluster synced");
                    reported.set_phase(&cluster_id, Phase::Synced);
                }));
                self.running.insert(id.to_string(), Running { secret: secret.to_string(), hash, tasks });
            }
        }
        self.reported.inner.lock().clusters.insert(id.to_string(), reporting);
    }

    /// Stops reading cluster `id` and deletes every object of it.
    async fn stop(&mut self, id: &str) {
        self.running.remove(id);
        self.options.clients.set(id, None);
        self.reported.inner.lock().clusters.remove(id);
        let cluster = ClusterId::remote(id);
        let snapshot = self.store.snapshot();
        let gone: Vec<Write> = REMOTE_KINDS
            .iter()
            .flat_map(|kind| snapshot.kind(*kind).keys().filter(|key| key.cluster == cluster).cloned())
            .map(Write::Delete)
            .collect();
        tracing::info!(cluster = id, deleted = gone.len(), "remote cluster removed: its objects are deleted");
        if gone.is_empty() {
            return;
        }
        let Ok(permit) = self.changes.clone().reserve_owned().await else { return };
        self.store.apply_then(gone, move |changes| {
            permit.send(changes);
        });
    }
}

/// Marks the first list's clusters settled once each has synced, timed
/// out or failed.
async fn settle(reported: RemoteClusters, timeout: Duration) {
    let statuses: Vec<KubeStatus> = reported.inner.lock().clusters.values().filter_map(|r| r.status.clone()).collect();
    let all = futures::future::join_all(statuses.iter().map(KubeStatus::wait_synced));
    if timeout.is_zero() {
        all.await;
    } else {
        let _ = tokio::time::timeout(timeout, all).await;
    }
    reported.settled.send_replace(true);
}

/// A secret's name and its clusters (data keys whose values are text;
/// `stringData` as a client may write it).
fn read_secret(secret: &Secret) -> (String, Clusters) {
    let name = secret.metadata.name.clone().unwrap_or_default();
    let mut clusters = Clusters::new();
    for (key, value) in secret.data.iter().flatten() {
        if let Ok(text) = String::from_utf8(value.0.clone()) {
            clusters.insert(key.clone(), text);
        }
    }
    for (key, value) in secret.string_data.iter().flatten() {
        clusters.insert(key.clone(), value.clone());
    }
    (name, clusters)
}

/// A client of the kubeconfig `text` (its current context) and its
/// server; why not, in words that never quote the kubeconfig.
async fn client_of(text: &str) -> Result<(kube::Client, String), String> {
    // Parse errors quote the text they stop at: say only where.
    if let Err(e) = serde_yaml_ng::from_str::<serde_yaml_ng::Value>(text) {
        let at = e.location().map(|l| format!(" (line {}, column {})", l.line(), l.column())).unwrap_or_default();
        return Err(format!("the kubeconfig does not parse as YAML{at}"));
    }
    let kubeconfig = kube::config::Kubeconfig::from_yaml(text)
        .map_err(|_| "the kubeconfig does not parse: it is not a kubeconfig (clusters, contexts, users)".to_string())?;
    for user in kubeconfig.auth_infos.iter().filter_map(|u| u.auth_info.as_ref()) {
        if user.exec.is_some() || user.auth_provider.is_some() {
            return Err(
                "the kubeconfig runs a credential plugin (exec or auth-provider), which a secret may not".into()
            );
        }
        if user.token_file.is_some() || user.client_certificate.is_some() || user.client_key.is_some() {
            return Err("the kubeconfig names files of this machine (tokenFile, client-certificate, client-key)".into());
        }
    }
    if kubeconfig.clusters.iter().filter_map(|c| c.cluster.as_ref()).any(|c| c.certificate_authority.is_some()) {
        return Err("the kubeconfig names a file of this machine (certificate-authority)".into());
    }
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(|e| format!("the kubeconfig cannot be used: {}", Shown(&e.to_string())))?;
    let server = config.cluster_url.to_string();
    let client = kube::Client::try_from(config).map_err(|e| format!("no client for {server}: {e}"))?;
    Ok((client, server))
}
