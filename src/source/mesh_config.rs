//! The mesh config file, followed while serving: `serve --mesh-config FILE`
//! re-reads the file whenever its directory changes (an editor's save, or a
//! ConfigMap volume swapping its `..data` link) and writes what it gives,
//! with the command line's flags over it, into the store as the one
//! `MeshConfig` object. The engine then builds a fresh snapshot on it and
//! pushes everything, as istiod does on a mesh config change.
//!
//! What cannot change while serving is kept and reported: the trust domain
//! (the CA issues in the one it started with) and the discovery selectors
//! (the Kubernetes watchers select namespaces from the start). A file that
//! does not parse keeps the last good mesh config served, and its error is
//! a problem on `/debug/configz` until the file is mended.
//!
//! Invariant: the store's `MeshConfig` object is always the last good file
//! with the flags over it; [`MeshConfigStatus`] always says what of the
//! current file is not applied.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::config::mesh::{MeshConfig, MeshConfigObject, MeshSettings};
use crate::config::{ConfigObject, Problem, Severity, SourceRef};
use crate::model::store::Write;
use crate::model::{ChangeSet, ConfigStore};

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

/// The mesh config file, the flags laid over it, and what is served.
#[derive(Debug)]
pub struct MeshConfigSource {
    path: PathBuf,
    flags: MeshSettings,
    /// The mesh config served (the startup one, then each applied edit).
    served: MeshConfig,
    /// The file's text last read.
    text: Option<String>,
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
    /// A source for `path`, whose startup reading gave `served`, with
    /// `flags` over the file, for a server that reads Kubernetes when
    /// `kube`; `status` holds the startup problems.
    pub fn new(
        path: PathBuf,
        flags: MeshSettings,
        served: MeshConfig,
        kube: bool,
        status: MeshConfigStatus,
    ) -> MeshConfigSource {
        let file = path.display().to_string();
        let startup = std::fs::read_to_string(&path).ok().and_then(|t| MeshSettings::parse(&file, &t).ok());
        let startup_selectors = startup.as_ref().and_then(selectors_text);
        // No text yet: the first read compares the file with what is served,
        // so an edit made since startup is not missed.
        MeshConfigSource { path, flags, served, text: None, startup_selectors, kube, status }
    }

    /// Follows the file until the task is aborted, writing each change into
    /// `store` and sending it down `changes`.
    pub fn watch(
        mut self,
        store: Arc<ConfigStore>,
        changes: mpsc::Sender<ChangeSet>,
    ) -> std::io::Result<tokio::task::JoinHandle<()>> {
        let (notices, mut queue) = mpsc::channel::<()>(1);
        let mut watcher = notify::recommended_watcher(move |_event: notify::Result<notify::Event>| {
            let _ = notices.try_send(());
        })
        .map_err(std::io::Error::other)?;
        let dir = self.path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf();
        watcher.watch(&dir, RecursiveMode::NonRecursive).map_err(std::io::Error::other)?;
        Ok(tokio::spawn(async move {
            let _watcher = watcher;
            let mut first = true;
            while first || queue.recv().await.is_some() {
                first = false;
                // Let the writer finish: read once the directory is quiet.
                while tokio::time::timeout(SETTLE, queue.recv()).await.is_ok_and(|n| n.is_some()) {}
                let Some(write) = self.reread() else { continue };
                let Ok(permit) = changes.clone().reserve_owned().await else { return };
                store.apply_then([write], move |changes| {
                    permit.send(changes);
                });
            }
        }))
    }

    /// Reads the file again; the store write that serves what changed, if anything did.
    fn reread(&mut self) -> Option<Write> {
        let file = self.path.display().to_string();
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) => {
                self.refuse(&file, format!("cannot read the file: {e}"));
                return None;
            }
        };
        if self.text.as_deref() == Some(&text) {
            return None;
        }
        self.text = Some(text.clone());
        let settings = match MeshSettings::parse(&file, &text) {
            Ok(settings) => settings,
            Err(e) => {
                let message = e.strip_prefix(&format!("{file}: ")).unwrap_or(&e).to_string();
                self.refuse(&file, message);
                return None;
            }
        };
        let (mesh, problems) = self.apply(&file, settings);
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
        Some(Write::Put(
            ConfigObject::MeshConfig(Box::new(MeshConfigObject::new(mesh))),
            SourceRef { file: file.into(), doc: 0 },
        ))
    }

    /// The mesh config `settings` give with the flags over them, keeping
    /// what cannot change while serving; and every problem of the file.
    fn apply(&self, file: &str, settings: MeshSettings) -> (MeshConfig, Vec<Problem>) {
        let selectors_moved = selectors_text(&settings) != self.startup_selectors;
        let settings = if self.kube { settings } else { settings.without_kubernetes(file) };
        let settings = settings.over(self.flags.clone());
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
        (mesh, problems)
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

#[cfg(test)]
mod test;
