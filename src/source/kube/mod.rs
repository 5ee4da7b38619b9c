//! `KubeSource`: the mesh from a Kubernetes API server.
//!
//! Role in the data flow: the third source beside the watched directory and
//! the registry API. One watcher per kind (kube-runtime's list-then-watch,
//! with bookmarks and backoff) turns each event into one atomic write of the
//! [`ConfigStore`], whose [`ChangeSet`] goes down the same channel as the
//! other sources' into the debouncer. Every object goes through the same
//! type table, typing and validation as a document of a file
//! ([`parse_json`]); its source is `k8s:KIND/NAMESPACE/NAME@RESOURCEVERSION`,
//! which `/debug/configz` shows.
//!
//! | kind | API | version |
//! |---|---|---|
//! | Service, Pod, Node | core | `v1` |
//! | EndpointSlice | `discovery.k8s.io` | `v1` |
//! | ServiceEntry, WorkloadEntry, VirtualService, DestinationRule, Gateway, Sidecar, WorkloadGroup | `networking.istio.io` | the first the server serves of `v1`, `v1beta1`, `v1alpha3` |
//! | PeerAuthentication, AuthorizationPolicy, RequestAuthentication | `security.istio.io` | the first the server serves of `v1`, `v1beta1` |
//! | Telemetry | `telemetry.istio.io` | the first the server serves of `v1`, `v1alpha1` |
//! | ProxyConfig | `networking.istio.io` | `v1beta1` (the one version Istio serves) |
//! | EnvoyFilter | `networking.istio.io` | `v1alpha3` (the one version Istio serves) |
//! | Namespace (its labels: a Gateway listener's `allowedRoutes` may select by them) | core | `v1` |
//! | GatewayClass, Gateway, HTTPRoute, GRPCRoute, TCPRoute, TLSRoute, ReferenceGrant | `gateway.networking.k8s.io` | the first the server serves of `v1`, `v1beta1`, `v1alpha3`, `v1alpha2` |
//! | Ingress, IngressClass | `networking.k8s.io` | `v1` |
//!
//! Rules:
//! * A (re)list is applied whole when it is complete (`InitDone`): the
//!   objects listed are put, and the objects this watcher had put that the
//!   list no longer has are deleted — an object deleted while the watch was
//!   down (a `410 Gone` forces a relist) is deleted, not kept.
//! * An object that does not parse or validate is a problem on
//!   `/debug/configz` and in the log, and the last good version of it stays
//!   served (as a broken file keeps what it defined); its deletion deletes it.
//! * Nothing of a watch is kept but the objects meshpush models (a Pod's
//!   labels, IP, Node and service account, not its spec; a Node's labels)
//!   and each key's resource version: the watcher's events are parsed as
//!   they arrive.
//! * Namespace selection, as MeshConfig's `discoverySelectors`: with
//!   selectors, a watcher of Namespaces keeps the set of namespaces whose
//!   labels match any of them, and only objects in those namespaces are
//!   read. When the set changes (a namespace relabelled, created, deleted)
//!   every kind's watcher lists again, so a namespace that joins brings
//!   its objects and one that leaves takes them away; nothing of an
//!   unselected namespace is kept (its Namespace object neither). Nodes
//!   belong to no namespace: all are read.
//! * Revisions, as istiod's: a server started with `--revision REV` reads
//!   the Istio and Gateway API objects labelled `istio.io/rev: REV` or not
//!   labelled at all; one relabelled for another revision leaves the store.
//! * [`KubeStatus::wait_synced`] resolves once every watcher's first list is
//!   applied, with the store revision that holds them all: `serve` is not
//!   ready before that is published, as istiod waits for its informers.
//!
//! Invariant: as for every source, an object that failed validation never
//! enters the store, and no served object is removed except because the
//! API server says it is gone.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use futures::StreamExt as _;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use tokio::sync::{mpsc, watch};

use crate::config::parse::{ISTIO_VERSIONS, SECURITY_VERSIONS, TELEMETRY_VERSIONS, parse_json};
use crate::config::{ClusterId, ConfigKey, ConfigKind, Problem, Severity, SourceRef, gateway_api};
use crate::model::store::Write;
use crate::model::{ChangeSet, ConfigStore};
use crate::text::Shown;

pub mod remote;
mod status;

pub use status::KubeStatus;

/// Which namespaces are read: every one, or those matching a selector.
pub type Selected = Option<Arc<BTreeSet<String>>>;

/// Parses one discovery selector: a Kubernetes `LabelSelector` as YAML or
/// JSON (`{matchLabels: {istio-discovery: enabled}}`, or with
/// `matchExpressions`), as MeshConfig's `discoverySelectors` holds them.
pub fn parse_discovery_selector(text: &str) -> Result<kube::core::Selector, String> {
    let selector: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector = serde_yaml_ng::from_str(text)
        .map_err(|e| format!("{text:?} is not a LabelSelector ({{matchLabels: {{k: v}}}}, matchExpressions): {e}"))?;
    kube::core::Selector::try_from(selector).map_err(|e| format!("{text:?}: {e}"))
}

/// Where the API server is and how to authenticate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KubeAccess {
    /// A kubeconfig file (its current context).
    Kubeconfig(PathBuf),
    /// The Pod's service account: `KUBERNETES_SERVICE_HOST`/`_PORT`, the
    /// token and CA under `/var/run/secrets/kubernetes.io/serviceaccount`.
    InCluster,
}

/// Why the source could not start.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// The kubeconfig could not be read or used.
    #[error("the kubeconfig {path}: {source}")]
    Kubeconfig {
        /// The file.
        path: String,
        /// What was wrong.
        source: kube::config::KubeconfigError,
    },
    /// Not running in a Pod, or its service account is not mounted.
    #[error("in-cluster config (KUBERNETES_SERVICE_HOST, the service-account token): {0}")]
    InCluster(#[from] kube::config::InClusterError),
    /// The client could not be built, or discovery failed.
    #[error("the Kubernetes API: {0}")]
    Client(#[from] kube::Error),
}

/// A client for `access`.
pub async fn client(access: &KubeAccess) -> Result<kube::Client, KubeError> {
    let config = match access {
        KubeAccess::Kubeconfig(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .map_err(|source| KubeError::Kubeconfig { path: path.display().to_string(), source })?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|source| KubeError::Kubeconfig { path: path.display().to_string(), source })?
        }
        KubeAccess::InCluster => kube::Config::incluster()?,
    };
    Ok(kube::Client::try_from(config)?)
}

/// The API groups whose kinds are found by discovery (Istio's and the
/// Gateway API's come with CRDs that may not be installed), and the
/// versions meshpush reads of each, most preferred first.
const DISCOVERED_GROUPS: [(&str, &[&str]); 5] = [
    ("networking.istio.io", &ISTIO_VERSIONS),
    ("security.istio.io", &SECURITY_VERSIONS),
    ("telemetry.istio.io", &TELEMETRY_VERSIONS),
    (gateway_api::GROUP, &gateway_api::VERSIONS),
    (crate::config::ingress::GROUP, &["v1"]),
];

/// The resources to watch: the core and discovery kinds always, and each
/// Istio kind at the first version the server serves (none when Istio's
/// CRDs are not installed: logged, and those kinds stay empty).
pub async fn resources(client: &kube::Client) -> Result<Vec<(ConfigKind, ApiResource)>, KubeError> {
    let mut resources: Vec<(ConfigKind, ApiResource)> = [
        ConfigKind::Service,
        ConfigKind::Pod,
        ConfigKind::Node,
        ConfigKind::EndpointSlice,
        ConfigKind::Secret,
        ConfigKind::Namespace,
    ]
    .into_iter()
    .map(|kind| (kind, api_resource(kind)))
    .collect();
    for (name, versions) in DISCOVERED_GROUPS {
        let group = match kube::discovery::group(client, name).await {
            Ok(group) => Some(group),
            Err(kube::Error::Discovery(e)) => {
                tracing::warn!("the API server serves no {name} ({e}): its kinds are not read");
                None
            }
            Err(e) => return Err(e.into()),
        };
        for kind in ConfigKind::ALL.into_iter().filter(|kind| kind.api_group() == name) {
            let served = group.as_ref().and_then(|group| {
                versions.iter().find_map(|version| {
                    group
                        .versioned_resources(version)
                        .into_iter()
                        .find(|(r, _)| r.kind == kind.kind_name())
                        .map(|(r, _)| r)
                })
            });
            match served {
                Some(found) => resources.push((kind, found)),
                None if group.is_some() => {
                    let versions = versions.join(", ");
                    tracing::warn!("the API server serves no {kind} in {name} ({versions}): not read");
                }
                None => {}
            }
        }
    }
    Ok(resources)
}

/// The secret types no gateway names, left out of the watch as Istio leaves
/// them out: a cluster has one service-account token per service account,
/// and Helm keeps each release in a Secret.
pub const UNREAD_SECRET_TYPES: &str = "type!=kubernetes.io/service-account-token,type!=helm.sh/release.v1";

/// How one kind is watched.
fn watch_config(kind: ConfigKind) -> watcher::Config {
    match kind {
        ConfigKind::Secret => watcher::Config::default().fields(UNREAD_SECRET_TYPES),
        _ => watcher::Config::default(),
    }
}

/// The resource of a kind every API server serves (core and discovery).
fn api_resource(kind: ConfigKind) -> ApiResource {
    match kind {
        ConfigKind::Service => core("Service", "services"),
        ConfigKind::Pod => core("Pod", "pods"),
        ConfigKind::Node => core("Node", "nodes"),
        ConfigKind::EndpointSlice => resource("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices"),
        ConfigKind::Secret => core("Secret", "secrets"),
        ConfigKind::Namespace => core("Namespace", "namespaces"),
        other => unreachable!("{other} is found by discovery"),
    }
}

fn core(kind: &str, plural: &str) -> ApiResource {
    resource("", "v1", kind, plural)
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    let api_version = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    ApiResource { group: group.into(), version: version.into(), api_version, kind: kind.into(), plural: plural.into() }
}

/// Starts one watcher per resource, writing into `store` and sending each
/// change set on `changes`, reading only the namespaces `selectors` pick
/// (any of them; none: every namespace) and, for a server of `revision`,
/// only the Istio objects for it. The watchers run until aborted.
///
/// The objects are of `cluster`. A remote cluster's watcher takes over what
/// the store holds of its kind and cluster: its first list deletes what the
/// list no longer has (what the watchers of a kubeconfig replaced left).
pub fn start(
    client: kube::Client,
    cluster: ClusterId,
    resources: Vec<(ConfigKind, ApiResource)>,
    selectors: Vec<kube::core::Selector>,
    revision: Option<&str>,
    store: Arc<ConfigStore>,
    changes: mpsc::Sender<ChangeSet>,
) -> (KubeStatus, Vec<tokio::task::JoinHandle<()>>) {
    let status = KubeStatus::new(resources.iter().map(|(kind, _)| *kind));
    let mut tasks = Vec::with_capacity(resources.len() + 1);
    let namespaces = if selectors.is_empty() {
        watch::channel(Some(None)).1
    } else {
        let (tx, rx) = watch::channel(None);
        tasks.push(tokio::spawn(watch_namespaces(client.clone(), selectors, tx)));
        rx
    };
    let snapshot = store.snapshot();
    for (kind, resource) in resources {
        // The local cluster's keys are the files' and the registry API's
        // too: only a remote cluster's are all its watchers'.
        let held = match cluster.is_local() {
            true => HashMap::new(),
            false => snapshot
                .kind(kind)
                .iter()
                .filter(|(key, _)| key.cluster == cluster)
                .map(|(key, _)| (key.clone(), Arc::from("")))
                .collect(),
        };
        let watch = KindWatch {
            kind,
            resource,
            cluster: cluster.clone(),
            store: store.clone(),
            changes: changes.clone(),
            status: status.clone(),
            held,
            revision: revision.map(Arc::from),
        };
        tasks.push(tokio::spawn(watch.run(client.clone(), namespaces.clone())));
    }
    (status, tasks)
}

/// Keeps `selected` at the namespaces whose labels match any of `selectors`
/// (`None` until the first list of Namespaces is complete).
async fn watch_namespaces(
    client: kube::Client,
    selectors: Vec<kube::core::Selector>,
    selected: watch::Sender<Option<Selected>>,
) {
    use kube::core::SelectorExt as _;
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client);
    let mut events = std::pin::pin!(watcher::watcher(api, watcher::Config::default()).default_backoff());
    let mut labels: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut listing: Option<BTreeMap<String, BTreeMap<String, String>>> = None;
    let mut listed = false;
    while let Some(event) = events.next().await {
        let name_labels = |ns: k8s_openapi::api::core::v1::Namespace| {
            (ns.metadata.name.unwrap_or_default(), ns.metadata.labels.unwrap_or_default())
        };
        match event {
            Ok(Event::Init) => listing = Some(BTreeMap::new()),
            Ok(Event::InitApply(ns)) => {
                let (name, l) = name_labels(ns);
                listing.get_or_insert_with(BTreeMap::new).insert(name, l);
            }
            Ok(Event::InitDone) => {
                labels = listing.take().unwrap_or_default();
                listed = true;
            }
            Ok(Event::Apply(ns)) => {
                let (name, l) = name_labels(ns);
                labels.insert(name, l);
            }
            Ok(Event::Delete(ns)) => {
                labels.remove(&name_labels(ns).0);
            }
            Err(e) => {
                let text = e.to_string();
                tracing::warn!("watching the Kubernetes API's Namespaces: {}; retrying", Shown(&text));
                continue;
            }
        }
        if !listed {
            continue;
        }
        let now: BTreeSet<String> = labels
            .iter()
            .filter(|(_, l)| selectors.iter().any(|selector| selector.matches(l)))
            .map(|(name, _)| name.clone())
            .collect();
        selected.send_if_modified(|current| {
            if current.as_ref().and_then(|s| s.as_deref()) == Some(&now) {
                return false;
            }
            tracing::info!(
                namespaces = %now.iter().map(String::as_str).collect::<Vec<_>>().join(","),
                "the discovery selectors pick these namespaces"
            );
            *current = Some(Some(Arc::new(now.clone())));
            true
        });
    }
}

/// One kind's watcher and what it has put in the store.
struct KindWatch {
    kind: ConfigKind,
    resource: ApiResource,
    /// The cluster the objects are read from.
    cluster: ClusterId,
    store: Arc<ConfigStore>,
    changes: mpsc::Sender<ChangeSet>,
    status: KubeStatus,
    /// Keys this watcher put in the store, with the resource version that
    /// was last seen of each (valid or not).
    held: HashMap<ConfigKey, Arc<str>>,
    /// The Istio revision of this server (`--revision`).
    revision: Option<Arc<str>>,
}

/// The API groups whose objects istiod reads only for its revision.
const REVISIONED_GROUPS: [&str; 4] =
    ["networking.istio.io", "security.istio.io", "telemetry.istio.io", gateway_api::GROUP];

/// Whether an object with `labels` is for `revision`, as istiod decides
/// (`istio.io/rev`): an object without the label is for every revision, one
/// with it for that revision alone; a server without a revision reads all.
pub fn in_revision(revision: Option<&str>, labels: Option<&BTreeMap<String, String>>) -> bool {
    match (revision, labels.and_then(|l| l.get(REVISION_LABEL))) {
        (Some(revision), Some(label)) => label == revision,
        _ => true,
    }
}

/// The label naming the Istio revision an object is for.
pub const REVISION_LABEL: &str = "istio.io/rev";

/// One object of an event, parsed.
struct Parsed {
    key: ConfigKey,
    resource_version: Arc<str>,
    /// The write, when it parsed and validated.
    put: Option<Write>,
    problems: Vec<Problem>,
}

impl KindWatch {
    async fn run(mut self, client: kube::Client, mut namespaces: watch::Receiver<Option<Selected>>) {
        // Each pass watches with one set of namespaces; a new set starts a
        // new watch, whose first list puts what joined and deletes what left.
        loop {
            let selected = match namespaces.wait_for(Option::is_some).await {
                Ok(selected) => selected.clone().flatten(),
                Err(_) => return,
            };
            namespaces.mark_unchanged();
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &self.resource);
            let events = watcher::watcher(api, watch_config(self.kind)).default_backoff();
            // Without selectors the set is fixed (its sender is gone).
            let fixed = namespaces.has_changed().is_err();
            tokio::select! {
                () = self.follow(events, selected.as_deref()) => return,
                changed = namespaces.changed(), if !fixed => if changed.is_err() { return },
            }
            tracing::info!(kind = %self.kind, "the selected namespaces changed: listing again");
        }
    }

    /// Applies the events of one watch, of objects in `selected` namespaces
    /// (`None`: all), until the stream ends.
    async fn follow(
        &mut self,
        events: impl futures::Stream<Item = Result<Event<DynamicObject>, watcher::Error>>,
        selected: Option<&BTreeSet<String>>,
    ) {
        let mut events = std::pin::pin!(events);
        let cluster_scoped = self.kind.is_cluster_scoped();
        let is_namespace = self.kind == ConfigKind::Namespace;
        // Istio's and the Gateway API's objects labelled for another
        // revision are another istiod's, as istiod leaves them.
        let revisioned = self.revision.is_some() && REVISIONED_GROUPS.contains(&self.kind.api_group());
        let revision = self.revision.clone();
        // A Namespace belongs to itself: only the selected ones are read.
        let wanted = |object: &DynamicObject| {
            if revisioned && !in_revision(revision.as_deref(), object.metadata.labels.as_ref()) {
                return false;
            }
            let in_selected = |ns: Option<&String>| selected.is_none_or(|set| ns.is_some_and(|ns| set.contains(ns)));
            if is_namespace {
                in_selected(object.metadata.name.as_ref())
            } else {
                cluster_scoped || in_selected(object.metadata.namespace.as_ref())
            }
        };
        // The objects of a list in progress, applied together at its end.
        let mut listing: Option<Vec<Parsed>> = None;
        // Whether the last event was an error (shown until the next event).
        let mut failing = false;
        while let Some(event) = events.next().await {
            let event = match event {
                Ok(Event::InitApply(object)) if !wanted(&object) => continue,
                // An object that left what is read (relabelled for another
                // revision) leaves the store; a list drops it by itself.
                Ok(Event::Apply(object)) if !wanted(&object) => Ok(Event::Delete(object)),
                other => other,
            };
            match event {
                Ok(Event::Init) => listing = Some(Vec::new()),
                Ok(Event::InitApply(object)) => {
                    let parsed = self.parse(object);
                    listing.get_or_insert_with(Vec::new).push(parsed);
                }
                Ok(Event::InitDone) => {
                    let listed = listing.take().unwrap_or_default();
                    let revision = self.apply_list(listed).await;
                    self.status.listed(self.kind, revision);
                }
                Ok(Event::Apply(object)) => {
                    let parsed = self.parse(object);
                    self.apply_one(parsed).await;
                }
                Ok(Event::Delete(object)) => {
                    let key = self.key_of(&object);
                    self.status.set_problems(&key, Vec::new());
                    if self.held.remove(&key).is_some() {
                        self.write(vec![Write::Delete(key)]).await;
                    }
                }
                Err(e) => {
                    // The backoff retries; a relist follows a watch that
                    // cannot resume (410 Gone).
                    let text = e.to_string();
                    let cluster = self.cluster.remote_id().unwrap_or("local");
                    tracing::warn!(kind = %self.kind, cluster, "watching the Kubernetes API: {}; retrying", Shown(&text));
                    self.status.set_error(self.kind, Some(Shown(&text).to_string()));
                    failing = true;
                    continue;
                }
            }
            // Cleared by the first event after an error (not a lock per event).
            if std::mem::take(&mut failing) {
                self.status.set_error(self.kind, None);
            }
        }
    }

    fn key_of(&self, object: &DynamicObject) -> ConfigKey {
        let namespace = object.metadata.namespace.as_deref().filter(|n| !n.is_empty()).unwrap_or("default");
        let namespace = if self.kind.is_cluster_scoped() { "" } else { namespace };
        ConfigKey::in_cluster(self.kind, namespace, object.metadata.name.as_deref().unwrap_or_default(), &self.cluster)
    }

    fn parse(&self, mut object: DynamicObject) -> Parsed {
        let key = self.key_of(&object);
        let resource_version: Arc<str> = object.metadata.resource_version.as_deref().unwrap_or_default().into();
        let cluster = self.cluster.remote_id().map(|c| format!("{c}/")).unwrap_or_default();
        let label = if key.namespace.is_empty() {
            format!("k8s:{cluster}{}/{}@{}", self.kind, key.name, resource_version)
        } else {
            format!("k8s:{cluster}{}/{}/{}@{}", self.kind, key.namespace, key.name, resource_version)
        };
        // List items carry no apiVersion and kind: the resource says them.
        object.types = Some(kube::api::TypeMeta {
            api_version: self.resource.api_version.clone(),
            kind: self.resource.kind.clone(),
        });
        let json = match serde_json::to_value(&object) {
            Ok(json) => json,
            Err(e) => {
                let problem = Problem {
                    severity: Severity::Error,
                    source: SourceRef { file: label.into(), doc: 0 },
                    object: Some(key.clone()),
                    path: String::new(),
                    message: format!("cannot be read: {e}"),
                };
                return Parsed { key, resource_version, put: None, problems: vec![problem] };
            }
        };
        drop(object);
        let mut parsed = parse_json(&label, &json);
        let refused = parsed.has_errors();
        for problem in &mut parsed.problems {
            if let Some(object) = &mut problem.object {
                object.cluster = self.cluster.clone();
            }
        }
        let put = parsed
            .objects
            .into_iter()
            .map(|(mut object, source)| {
                object.meta_mut().cluster = self.cluster.clone();
                (object, source)
            })
            .find(|(o, _)| o.key() == key)
            .filter(|_| !refused)
            .map(|(object, source)| Write::put(object, source));
        Parsed { key, resource_version, put, problems: parsed.problems }
    }

    /// Applies a complete list: what it holds is put, what this watcher put
    /// before and the list no longer holds is deleted. Returns the store
    /// revision after it.
    async fn apply_list(&mut self, listed: Vec<Parsed>) -> u64 {
        let mut writes = Vec::with_capacity(listed.len());
        let mut seen: HashMap<ConfigKey, Arc<str>> = HashMap::with_capacity(listed.len());
        for Parsed { key, resource_version, put, problems } in listed {
            self.report(&key, problems);
            if let Some(put) = put {
                writes.push(put);
                seen.insert(key, resource_version);
            } else if self.held.contains_key(&key) {
                // Broken now: the last good version stays.
                seen.insert(key, resource_version);
            }
        }
        let gone: Vec<ConfigKey> = self.held.keys().filter(|key| !seen.contains_key(*key)).cloned().collect();
        for key in &gone {
            self.status.set_problems(key, Vec::new());
        }
        if !gone.is_empty() {
            tracing::info!(kind = %self.kind, deleted = gone.len(), "objects gone from a relist are deleted");
        }
        writes.extend(gone.into_iter().map(Write::Delete));
        self.held = seen;
        self.write(writes).await
    }

    async fn apply_one(&mut self, Parsed { key, resource_version, put, problems }: Parsed) {
        self.report(&key, problems);
        match put {
            Some(put) => {
                self.held.insert(key, resource_version);
                self.write(vec![put]).await;
            }
            None => {
                if let Some(version) = self.held.get_mut(&key) {
                    *version = resource_version;
                }
            }
        }
    }

    /// Logs an object's problems and makes them its current ones.
    fn report(&self, key: &ConfigKey, problems: Vec<Problem>) {
        for problem in &problems {
            match problem.severity {
                Severity::Error => tracing::warn!("{problem}; the last good version stays served"),
                Severity::Warning => tracing::info!("{problem}"),
            }
        }
        self.status.set_problems(key, problems);
    }

    /// One atomic write; its change set goes down the channel in store
    /// order (the slot is reserved first). Returns the store revision.
    async fn write(&self, writes: Vec<Write>) -> u64 {
        let Ok(permit) = self.changes.clone().reserve_owned().await else {
            // The server is shutting down.
            return self.store.snapshot().revision();
        };
        let changes = self.store.apply_then(writes, move |changes| {
            permit.send(changes);
        });
        changes.revision
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn wait_synced_resolves_once_every_kind_has_listed_with_the_highest_revision() {
        let status = KubeStatus::new([ConfigKind::Service, ConfigKind::Pod]);
        status.listed(ConfigKind::Service, 7);
        assert_eq!(status.pending(), [ConfigKind::Pod]);
        let waiting = tokio::spawn({
            let status = status.clone();
            async move { status.wait_synced().await }
        });
        status.listed(ConfigKind::Pod, 5);
        assert_eq!(waiting.await.unwrap(), 7);
        assert!(status.pending().is_empty());
    }

    #[test]
    fn an_object_is_for_its_revision_or_for_all_when_unlabelled() {
        let labels = |rev: &str| BTreeMap::from([(REVISION_LABEL.to_string(), rev.to_string())]);
        assert!(in_revision(Some("canary"), None), "no labels: every revision's");
        assert!(in_revision(Some("canary"), Some(&BTreeMap::new())));
        assert!(in_revision(Some("canary"), Some(&labels("canary"))));
        assert!(!in_revision(Some("canary"), Some(&labels("stable"))));
        assert!(in_revision(None, Some(&labels("stable"))), "a server without a revision reads all");
    }
}
