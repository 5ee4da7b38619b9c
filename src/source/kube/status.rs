//! [`KubeStatus`]: what one cluster's watchers report — each object's
//! problems, each kind's current watch error, and which kinds have not had
//! their first list applied yet (readiness waits on it).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use tokio::sync::watch;

use crate::config::{ConfigKey, ConfigKind, Problem};

/// What the watchers report: each object's problems, and which kinds have
/// not had their first list applied yet. Cheap to clone.
#[derive(Debug, Clone)]
pub struct KubeStatus {
    inner: Arc<parking_lot::Mutex<StatusInner>>,
    synced: watch::Sender<Option<u64>>,
}

#[derive(Debug, Default)]
struct StatusInner {
    /// The current problems of each object that has any.
    problems: HashMap<ConfigKey, Vec<Problem>>,
    /// Kinds still waiting for their first complete list.
    pending: BTreeSet<ConfigKind>,
    /// The highest store revision written by a first list so far.
    revision: u64,
    /// Each kind's current watch error (cleared by its next event).
    errors: BTreeMap<ConfigKind, String>,
}

impl KubeStatus {
    /// A status whose watchers of `kinds` have not listed yet.
    pub(crate) fn new(kinds: impl IntoIterator<Item = ConfigKind>) -> KubeStatus {
        let pending: BTreeSet<ConfigKind> = kinds.into_iter().collect();
        let synced = watch::Sender::new(pending.is_empty().then_some(0));
        KubeStatus { inner: Arc::new(parking_lot::Mutex::new(StatusInner { pending, ..Default::default() })), synced }
    }

    /// Every object's current problems, sorted by source.
    pub fn problems(&self) -> Vec<Problem> {
        let mut problems: Vec<Problem> = self.inner.lock().problems.values().flatten().cloned().collect();
        problems.sort_by(|a, b| (&a.source.file, a.severity).cmp(&(&b.source.file, b.severity)));
        problems
    }

    /// The watchers' current errors (an API server that went away), each
    /// with its kind.
    pub fn watch_errors(&self) -> Vec<String> {
        self.inner.lock().errors.iter().map(|(kind, e)| format!("watching {kind}: {e}")).collect()
    }

    pub(super) fn set_error(&self, kind: ConfigKind, error: Option<String>) {
        let mut inner = self.inner.lock();
        match error {
            Some(e) => {
                inner.errors.insert(kind, e);
            }
            None => {
                inner.errors.remove(&kind);
            }
        }
    }

    /// Kinds whose first list has not been applied yet.
    pub fn pending(&self) -> Vec<ConfigKind> {
        self.inner.lock().pending.iter().copied().collect()
    }

    /// Waits until every kind's first list is applied; the store revision
    /// that holds them all.
    pub async fn wait_synced(&self) -> u64 {
        let mut rx = self.synced.subscribe();
        match rx.wait_for(Option::is_some).await {
            Ok(revision) => revision.unwrap_or(0),
            // The sender lives in `self`: it cannot be gone while we wait.
            Err(_) => 0,
        }
    }

    pub(super) fn set_problems(&self, key: &ConfigKey, problems: Vec<Problem>) {
        let mut inner = self.inner.lock();
        if problems.is_empty() {
            inner.problems.remove(key);
        } else {
            inner.problems.insert(key.clone(), problems);
        }
    }

    pub(super) fn listed(&self, kind: ConfigKind, revision: u64) {
        let mut inner = self.inner.lock();
        inner.revision = inner.revision.max(revision);
        if inner.pending.remove(&kind) && inner.pending.is_empty() {
            let revision = inner.revision;
            drop(inner);
            tracing::info!(revision, "every Kubernetes watcher's first list is applied");
            self.synced.send_replace(Some(revision));
        }
    }
}
