//! The mesh config, followed while serving, from where istiod reads it
//! ([`MeshOrigin`]): the file `serve --mesh-config FILE` names, re-read
//! whenever its directory changes (an editor's save, or a ConfigMap volume
//! swapping its `..data` link); or, with Kubernetes and no file, the `mesh`
//! key of the `istio` ConfigMap (`istio-REV` for a revision) in
//! `istio-system`, watched through the API server. Each new text is written,
//! with the command line's flags over it, into the store as the one
//! `MeshConfig` object. The engine then builds a fresh snapshot on it and
//! pushes everything, as istiod does on a mesh config change. A ConfigMap
//! that is missing (or loses its `mesh` key) serves Istio's defaults, as
//! istiod does, and says so (in the log; a missing key on `/debug/configz` too).
//!
//! What cannot change while serving is kept and reported: the trust domain
//! (the CA issues in the one it started with) and the discovery selectors
//! (the Kubernetes watchers select namespaces from the start). A file that
//! does not parse keeps the last good mesh config served, and its error is
//! a problem on `/debug/configz` until the file is mended.
//!
//! istiod reads `meshNetworks` the same way, and so does meshpush: from
//! the file `serve --mesh-networks FILE` names (beside `--mesh-config`), or
//! from the ConfigMap's `meshNetworks` key; it is served as the mesh
//! config's `networks`, and an edit of it is a mesh config change.
//!
//! Invariant: the store's `MeshConfig` object is always the last good file
//! with the flags over it; [`MeshConfigStatus`] always says what of the
//! current file is not applied.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::config::mesh::networks::MeshNetworks;
use crate::config::mesh::{MeshConfig, MeshConfigObject, MeshSettings};
use crate::config::{ConfigObject, Problem, Severity, SourceRef};
use crate::model::store::Write;
use crate::model::{ChangeSet, ConfigStore};
use crate::source::kube::KubeAccess;
use crate::text::Shown;

/// The key of Istio's ConfigMap that holds the mesh config.
pub const MESH_KEY: &str = "mesh";
/// The key of Istio's ConfigMap that holds `meshNetworks`.
pub const NETWORKS_KEY: &str = "meshNetworks";

/// Where the mesh config is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MeshOrigin {
    /// Files: the mesh config (`--mesh-config`), and `meshNetworks`
    /// (`--mesh-networks`; none: no networks).
    File {
        /// The mesh config file.
        mesh: PathBuf,
        /// The `meshNetworks` file.
        networks: Option<PathBuf>,
    },
    /// The `mesh` key of a ConfigMap, through the Kubernetes API.
    ConfigMap {
        /// How to reach the API server.
        access: KubeAccess,
        /// The ConfigMap's namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
}

impl MeshOrigin {
    /// The ConfigMap Istio reads for `revision` in `namespace`: `istio`, or
    /// `istio-REV` for a revision other than `default`.
    pub fn istio_configmap(access: KubeAccess, namespace: &str, revision: Option<&str>) -> MeshOrigin {
        let name = match revision.filter(|r| !r.is_empty() && *r != "default") {
            Some(revision) => format!("istio-{revision}"),
            None => "istio".to_string(),
        };
        MeshOrigin::ConfigMap { access, namespace: namespace.to_string(), name }
    }

    /// How problems and the log name it: the file's path, or
    /// `k8s:ConfigMap/NS/NAME` as the Kubernetes source names its objects.
    pub fn name(&self) -> String {
        match self {
            MeshOrigin::File { mesh, .. } => mesh.display().to_string(),
            MeshOrigin::ConfigMap { namespace, name, .. } => format!("k8s:ConfigMap/{namespace}/{name}"),
        }
    }

    /// How problems name where `meshNetworks` is read.
    pub fn networks_name(&self) -> String {
        match self {
            MeshOrigin::File { networks, .. } => {
                networks.as_ref().map_or_else(|| "no meshNetworks".to_string(), |p| p.display().to_string())
            }
            MeshOrigin::ConfigMap { namespace, name, .. } => {
                format!("k8s:ConfigMap/{namespace}/{name}[{NETWORKS_KEY}]")
            }
        }
    }

    /// Reads the mesh config once (at startup): the settings it gives, or
    /// an error that says where it is broken. A missing ConfigMap gives
    /// Istio's defaults.
    pub async fn read(&self) -> Result<MeshSettings, String> {
        let origin = self.name();
        match self {
            MeshOrigin::File { mesh, networks } => {
                let texts = read_files(mesh, networks.as_deref())?;
                parse_texts(&origin, &self.networks_name(), &texts)
            }
            MeshOrigin::ConfigMap { access, namespace, name } => {
                let client = crate::source::kube::client(access).await.map_err(|e| format!("{origin}: {e}"))?;
                let api: kube::Api<ConfigMap> = kube::Api::namespaced(client, namespace);
                let found = api.get_opt(name).await.map_err(|e| format!("{origin}: {e}"))?;
                let (texts, problem) = configmap_text(&origin, found.as_ref());
                let mut settings = parse_texts(&origin, &self.networks_name(), &texts)?;
                settings.problems.extend(problem);
                Ok(settings)
            }
        }
    }
}

/// What an origin holds: the mesh config text, and the `meshNetworks`
/// text (empty: Istio's defaults, no networks).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Texts {
    mesh: String,
    networks: String,
}

/// Reads the mesh config file and, when one is named, the `meshNetworks`
/// file; an error says which cannot be read.
fn read_files(mesh: &Path, networks: Option<&Path>) -> Result<Texts, String> {
    let read = |path: &Path| std::fs::read_to_string(path).map_err(|e| format!("{}: cannot read: {e}", path.display()));
    Ok(Texts { mesh: read(mesh)?, networks: networks.map(read).transpose()?.unwrap_or_default() })
}

/// The settings `texts` give: the mesh config read from `file`, with the
/// `meshNetworks` read from `networks_file` as its networks.
fn parse_texts(file: &str, networks_file: &str, texts: &Texts) -> Result<MeshSettings, String> {
    let mut settings = MeshSettings::parse(file, &texts.mesh)?;
    let (networks, problems) = MeshNetworks::parse(networks_file, &texts.networks)?;
    settings.networks = Some(Arc::new(networks));
    settings.problems.extend(problems);
    Ok(settings)
}

/// The mesh config and `meshNetworks` texts of a ConfigMap (empty:
/// Istio's defaults), and why the mesh config is empty when its `mesh` key
/// is missing (a missing `meshNetworks` key is no networks, as in Istio).
/// No ConfigMap at all is a mesh on Istio's defaults, as istiod runs one:
/// said in the log (at INFO), no problem.
fn configmap_text(origin: &str, configmap: Option<&ConfigMap>) -> (Texts, Option<Problem>) {
    let defaults = |why: &str| Problem {
        severity: Severity::Warning,
        source: SourceRef { file: origin.into(), doc: 0 },
        object: None,
        path: String::new(),
        message: format!("{why}: Istio's default mesh config is served"),
    };
    let Some(cm) = configmap else {
        tracing::info!("no ConfigMap {origin}: Istio's default mesh config is served");
        return (Texts::default(), None);
    };
    let key = |key: &str| cm.data.as_ref().and_then(|d| d.get(key)).cloned();
    let networks = key(NETWORKS_KEY).unwrap_or_default();
    match key(MESH_KEY) {
        Some(mesh) => (Texts { mesh, networks }, None),
        None => (Texts { mesh: String::new(), networks }, Some(defaults("the ConfigMap has no `mesh` key"))),
    }
}

/// How long the file's directory must be quiet before the file is read
/// again: a writer's several events become one read of the finished file.
const SETTLE: Duration = Duration::from_millis(50);

/// What the current mesh config file sets that meshpush does not apply
/// (or why it is not applied at all). Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct MeshConfigStatus {
    problems: Arc<parking_lot::Mutex<Vec<Problem>>>,
}

impl MeshConfigStatus {
    /// A status holding `problems`.
    pub fn new(problems: Vec<Problem>) -> MeshConfigStatus {
        MeshConfigStatus { problems: Arc::new(parking_lot::Mutex::new(problems)) }
    }

    /// The current problems.
    pub fn problems(&self) -> Vec<Problem> {
        self.problems.lock().clone()
    }

    fn set(&self, problems: Vec<Problem>) {
        *self.problems.lock() = problems;
    }
}

/// The mesh config's origin, the flags laid over it, and what is served.
#[derive(Debug)]
pub struct MeshConfigSource {
    origin: MeshOrigin,
    flags: MeshSettings,
    /// The mesh config served (the startup one, then each applied edit).
    served: MeshConfig,
    /// The texts last read.
    text: Option<Texts>,
    /// Why the text last read is empty, when its ConfigMap or key is missing.
    missing: Option<Problem>,
    /// The discovery selectors the file gave at startup, as text.
    startup_selectors: Option<String>,
    /// Whether the server reads Kubernetes (else selectors select nothing).
    kube: bool,
    status: MeshConfigStatus,
}

/// Discovery selectors as comparable text.
fn selectors_text(settings: &MeshSettings) -> Option<String> {
    settings.discovery_selectors.as_ref().map(|all| all.iter().map(|s| format!("{s}; ")).collect())
}

impl MeshConfigSource {
    /// A source for `origin`, whose startup reading gave `startup` (with
    /// `flags` over it) and `served`, for a server that reads Kubernetes
    /// when `kube`; `status` holds the startup problems.
    pub fn new(
        origin: MeshOrigin,
        flags: MeshSettings,
        startup: &MeshSettings,
        served: MeshConfig,
        kube: bool,
        status: MeshConfigStatus,
    ) -> MeshConfigSource {
        let startup_selectors = selectors_text(startup);
        // No text yet: the first read compares the text with what is served,
        // so an edit made since startup is not missed.
        MeshConfigSource { origin, flags, served, text: None, missing: None, startup_selectors, kube, status }
    }

    /// Follows the origin until the task is aborted, writing each change
    /// into `store` and sending it down `changes`.
    pub fn watch(
        self,
        store: Arc<ConfigStore>,
        changes: mpsc::Sender<ChangeSet>,
    ) -> std::io::Result<tokio::task::JoinHandle<()>> {
        match self.origin.clone() {
            MeshOrigin::File { mesh, networks } => self.watch_file(mesh, networks, store, changes),
            MeshOrigin::ConfigMap { access, namespace, name } => {
                Ok(tokio::spawn(self.watch_configmap(access, namespace, name, store, changes)))
            }
        }
    }

    fn watch_file(
        mut self,
        path: PathBuf,
        networks: Option<PathBuf>,
        store: Arc<ConfigStore>,
        changes: mpsc::Sender<ChangeSet>,
    ) -> std::io::Result<tokio::task::JoinHandle<()>> {
        let (notices, mut queue) = mpsc::channel::<()>(1);
        let mut watcher = notify::recommended_watcher(move |_event: notify::Result<notify::Event>| {
            let _ = notices.try_send(());
        })
        .map_err(std::io::Error::other)?;
        let dir_of =
            |p: &Path| p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf();
        let mut dirs = vec![dir_of(&path)];
        dirs.extend(networks.as_deref().map(dir_of));
        dirs.dedup();
        for dir in &dirs {
            watcher.watch(dir, RecursiveMode::NonRecursive).map_err(std::io::Error::other)?;
        }
        Ok(tokio::spawn(async move {
            let _watcher = watcher;
            let mut first = true;
            while first || queue.recv().await.is_some() {
                first = false;
                // Let the writer finish: read once the directory is quiet.
                while tokio::time::timeout(SETTLE, queue.recv()).await.is_ok_and(|n| n.is_some()) {}
                let Some(write) = self.reread(&path, networks.as_deref()) else { continue };
                if !write_through(&store, &changes, write).await {
                    return;
                }
            }
        }))
    }

    /// Follows the ConfigMap `namespace/name` until the task is aborted.
    async fn watch_configmap(
        mut self,
        access: KubeAccess,
        namespace: String,
        name: String,
        store: Arc<ConfigStore>,
        changes: mpsc::Sender<ChangeSet>,
    ) {
        use futures::StreamExt as _;
        use kube::runtime::WatchStreamExt as _;
        use kube::runtime::watcher::{self, Event};
        let origin = self.origin.name();
        let client = match crate::source::kube::client(&access).await {
            Ok(client) => client,
            Err(e) => {
                self.refuse(&origin, format!("cannot reach the API server: {e}"));
                return;
            }
        };
        let api: kube::Api<ConfigMap> = kube::Api::namespaced(client, &namespace);
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let mut events = std::pin::pin!(watcher::watcher(api, config).default_backoff());
        let mut listed: Option<ConfigMap> = None;
        while let Some(event) = events.next().await {
            let current = match event {
                Ok(Event::Init) => {
                    listed = None;
                    continue;
                }
                Ok(Event::InitApply(cm)) => {
                    listed = Some(cm);
                    continue;
                }
                Ok(Event::InitDone) => listed.take(),
                Ok(Event::Apply(cm)) => Some(cm),
                Ok(Event::Delete(_)) => None,
                Err(e) => {
                    let text = e.to_string();
                    tracing::warn!("watching the mesh config {origin}: {}; retrying", Shown(&text));
                    continue;
                }
            };
            let (texts, missing) = configmap_text(&origin, current.as_ref());
            self.missing = missing;
            let Some(write) = self.take(&origin, texts) else { continue };
            if !write_through(&store, &changes, write).await {
                return;
            }
        }
    }

    /// Reads the file at `path` (and the `meshNetworks` file) again; the
    /// store write that serves what changed, if anything did.
    fn reread(&mut self, path: &Path, networks: Option<&Path>) -> Option<Write> {
        let file = path.display().to_string();
        let texts = match read_files(path, networks) {
            Ok(texts) => texts,
            Err(e) => {
                self.refuse(&file, e);
                return None;
            }
        };
        self.take(&file, texts)
    }

    /// Takes the text read from the origin (named `file` in problems); the
    /// store write that serves what changed, if anything did.
    fn take(&mut self, file: &str, texts: Texts) -> Option<Write> {
        if self.text.as_ref() == Some(&texts) {
            return None;
        }
        let settings = parse_texts(file, &self.origin.networks_name(), &texts);
        self.text = Some(texts);
        let settings = match settings {
            Ok(settings) => settings,
            Err(e) => {
                let message = e.strip_prefix(&format!("{file}: ")).unwrap_or(&e).to_string();
                self.refuse(file, message);
                return None;
            }
        };
        let (mesh, mut problems) = match self.apply(file, settings) {
            Ok(applied) => applied,
            Err(e) => {
                let message = e.strip_prefix(&format!("{file}: ")).unwrap_or(&e).to_string();
                self.refuse(file, message);
                return None;
            }
        };
        problems.extend(self.missing.clone());
        let known = self.status.problems();
        for problem in problems.iter().filter(|p| !known.contains(p)) {
            tracing::warn!("mesh config {problem}");
        }
        self.status.set(problems);
        if mesh == self.served {
            return None;
        }
        tracing::info!(file, "mesh config changed: a full push follows");
        self.served = mesh.clone();
        Some(Write::put(
            ConfigObject::MeshConfig(Box::new(MeshConfigObject::new(mesh))),
            SourceRef { file: file.into(), doc: 0 },
        ))
    }

    /// The mesh config `settings` give with the flags over them, keeping
    /// what cannot change while serving; and every problem of the file.
    /// An error refuses the settings (a root that is not a CA).
    fn apply(&self, file: &str, settings: MeshSettings) -> Result<(MeshConfig, Vec<Problem>), String> {
        let selectors_moved = selectors_text(&settings) != self.startup_selectors;
        let settings = if self.kube { settings } else { settings.without_kubernetes(file) };
        let settings = settings.over(self.flags.clone()).finish(file)?;
        let mut mesh = settings.mesh_config();
        let mut problems = settings.problems;
        let kept = |path: &str, message: String| Problem {
            severity: Severity::Warning,
            source: SourceRef { file: file.into(), doc: 0 },
            object: None,
            path: path.into(),
            message,
        };
        if mesh.trust_domain != self.served.trust_domain {
            problems.push(kept(
                "trustDomain",
                format!(
                    "{:?} applies at the next start: the CA issues in {:?}, which stays served",
                    &*mesh.trust_domain, &*self.served.trust_domain
                ),
            ));
            mesh.trust_domain = self.served.trust_domain.clone();
        }
        if self.kube && selectors_moved && self.flags.discovery_selectors.is_none() {
            problems.push(kept(
                "discoverySelectors",
                "applies at the next start: the Kubernetes watchers keep the namespaces they selected".into(),
            ));
        }
        Ok((mesh, problems))
    }

    /// Keeps the mesh config served and reports why the file is not applied.
    fn refuse(&self, file: &str, message: String) {
        tracing::warn!(file, "mesh config not applied, the last good one stays served: {message}");
        self.status.set(vec![Problem {
            severity: Severity::Error,
            source: SourceRef { file: file.into(), doc: 0 },
            object: None,
            path: String::new(),
            message: format!("{message}; the last good mesh config stays served"),
        }]);
    }
}

/// Writes `write` into `store` and sends its change set down `changes`;
/// false when the engine is gone.
async fn write_through(store: &ConfigStore, changes: &mpsc::Sender<ChangeSet>, write: Write) -> bool {
    let Ok(permit) = changes.clone().reserve_owned().await else { return false };
    store.apply_then([write], move |changes| {
        permit.send(changes);
    });
    true
}

#[cfg(test)]
mod test;
