//! What each MCP server is doing, for `/debug/configz` (`configSources`)
//! and for readiness: its connection's state and last error, the objects
//! each type URL listed, and the problems of its resources.
//!
//! Invariants: every text shown was cut to a safe length where it came
//! from a server; a server's problems are those of its last response of
//! each type URL, so a mended resource's problem goes; a new problem is
//! logged once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::Serialize;

use crate::config::Problem;

/// Every MCP server's report. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct McpStatus {
    servers: Arc<Mutex<BTreeMap<Arc<str>, ServerReport>>>,
    /// Bumped on every change, for waiters.
    changed: Arc<tokio::sync::watch::Sender<u64>>,
}

/// One server's report.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerReport {
    /// `connecting`, `connected` or `unreachable`.
    pub state: &'static str,
    /// Why the last connection ended, if it did.
    pub error: Option<String>,
    /// The type URLs subscribed to.
    pub subscribed: usize,
    /// Objects listed by each type URL that answered.
    pub objects: BTreeMap<String, usize>,
    /// Whether every type URL has answered once since the server was listed.
    pub synced: bool,
    /// The problems of its resources, as text.
    pub problems: Vec<String>,
    #[serde(skip)]
    problems_by_type: BTreeMap<String, Vec<Problem>>,
}

impl McpStatus {
    /// A report for `address`, starting fresh.
    pub(super) fn server(&self, address: Arc<str>) -> ServerStatus {
        self.servers.lock().insert(address.clone(), ServerReport { state: "connecting", ..Default::default() });
        self.bump();
        ServerStatus { board: self.clone(), address }
    }

    /// Forgets a server no longer listed.
    pub(super) fn remove(&self, address: &str) {
        self.servers.lock().remove(address);
        self.bump();
    }

    /// Every server's report, by address.
    pub fn reports(&self) -> BTreeMap<Arc<str>, ServerReport> {
        self.servers.lock().clone()
    }

    /// Waits until every server listed has answered every type URL once.
    pub async fn wait_synced(&self) {
        let mut changed = self.changed.subscribe();
        loop {
            if self.servers.lock().values().all(|r| r.synced) {
                return;
            }
            if changed.changed().await.is_err() {
                return;
            }
        }
    }

    /// The servers not yet synced, for `/ready`'s answer.
    pub fn pending(&self) -> Vec<Arc<str>> {
        self.servers.lock().iter().filter(|(_, r)| !r.synced).map(|(a, _)| a.clone()).collect()
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    fn update(&self, address: &str, f: impl FnOnce(&mut ServerReport)) {
        if let Some(report) = self.servers.lock().get_mut(address) {
            f(report);
        }
        self.bump();
    }
}

/// One server's handle on the board.
#[derive(Debug, Clone)]
pub(super) struct ServerStatus {
    board: McpStatus,
    address: Arc<str>,
}

impl ServerStatus {
    pub(super) fn connecting(&self) {
        self.board.update(&self.address, |r| r.state = "connecting");
    }

    pub(super) fn subscribed(&self, type_urls: usize) {
        self.board.update(&self.address, |r| r.subscribed = type_urls);
    }

    pub(super) fn connected(&self) {
        self.board.update(&self.address, |r| {
            r.state = "connected";
            r.error = None;
        });
    }

    pub(super) fn failed(&self, error: String) {
        tracing::warn!(server = %self.address, "MCP config source: {error}; its objects are kept, reconnecting");
        self.board.update(&self.address, |r| {
            r.state = "unreachable";
            r.error = Some(error);
        });
    }

    /// A response of `type_url` listed `objects`, with `problems`.
    pub(super) fn responded(&self, type_url: &str, objects: usize, problems: Vec<Problem>) {
        self.board.update(&self.address, |r| {
            let known: BTreeSet<String> =
                r.problems_by_type.get(type_url).into_iter().flatten().map(|p| p.to_string()).collect();
            for problem in &problems {
                let text = problem.to_string();
                if !known.contains(&text) {
                    tracing::warn!("MCP config source {}: {text}", problem.severity);
                }
            }
            r.objects.insert(type_url.to_string(), objects);
            r.problems_by_type.insert(type_url.to_string(), problems);
            r.problems = r.problems_by_type.values().flatten().map(|p| format!("{}: {p}", p.severity)).collect();
            r.synced = r.synced || r.objects.len() >= r.subscribed;
        });
    }
}
