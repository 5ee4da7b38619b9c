//! MCP-over-xDS config sources: the servers the mesh config's
//! `configSources` names (`xds://HOST:PORT`), each read as istiod reads
//! one (`client`), over the connection its `tlsSettings` ask for
//! (`transport`), with its state on `/debug/configz` (`status`).
//!
//! Role in the data flow: a source like the others, writing the store and
//! sending change sets down the shared channel. [`McpSources`] follows the
//! engine's published snapshots: a server newly listed gets a client, one
//! no longer listed is stopped and its objects withdrawn, one whose
//! settings changed is restarted (its objects stay until the new stream's
//! full state replaces them).
//!
//! Invariants: objects from a server are named `mcp:ADDRESS/KIND/NS/NAME`
//! and coexist with every other source's (the last writer of a key wins;
//! a server withdraws only what it still holds); a server that goes away
//! keeps its objects.

mod client;
mod status;
pub mod transport;

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::mpsc;

pub use client::node;
pub use status::{McpStatus, ServerReport};
pub use transport::{MeshIdentity, TransportContext};

use crate::config::mesh::config_sources::McpServer;
use crate::engine::PushEngine;
use crate::model::store::Write;
use crate::model::{ChangeSet, ConfigStore};

/// Runs a client for each MCP server the served mesh config lists.
#[derive(Debug)]
pub struct McpSources {
    engine: Arc<PushEngine>,
    context: client::ClientContext,
    status: McpStatus,
    running: HashMap<Arc<str>, Running>,
}

#[derive(Debug)]
struct Running {
    server: McpServer,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the sources need beyond the engine and the store.
#[derive(Debug, Clone)]
pub struct McpOptions {
    /// What connections need (meshpush's CA, its namespace).
    pub transport: TransportContext,
    /// The revision served (`istio.io/rev`).
    pub revision: Option<Arc<str>>,
    /// The node the clients introduce themselves as ([`node`]).
    pub node: envoy_types::pb::envoy::config::core::v3::Node,
}

impl McpSources {
    /// Sources writing `store`, following `engine`, sending on `changes`.
    pub fn new(
        store: Arc<ConfigStore>,
        engine: Arc<PushEngine>,
        changes: mpsc::Sender<ChangeSet>,
        options: McpOptions,
    ) -> McpSources {
        let context = client::ClientContext {
            store,
            changes,
            transport: options.transport,
            revision: options.revision,
            node: options.node,
        };
        McpSources { engine, context, status: McpStatus::default(), running: HashMap::new() }
    }

    /// The servers' reports (for `/debug/configz` and readiness).
    pub fn status(&self) -> McpStatus {
        self.status.clone()
    }

    /// Starts the clients the current snapshot lists (so that readiness
    /// can wait for them), then follows the snapshots until the changes
    /// channel closes.
    pub async fn run(mut self) {
        let mut versions = self.engine.versions();
        loop {
            let listed = self.engine.snapshot().mesh.config_sources.clone();
            if !self.reconcile(&listed).await {
                return;
            }
            tokio::select! {
                changed = versions.changed() => if changed.is_err() { return },
                () = self.context.changes.closed() => return,
            }
        }
    }

    /// Starts what `listed` adds and stops what it drops; false when the
    /// changes channel is closed.
    pub async fn reconcile(&mut self, listed: &[McpServer]) -> bool {
        let gone: Vec<Arc<str>> =
            self.running.keys().filter(|a| !listed.iter().any(|s| s.address == **a)).cloned().collect();
        for address in gone {
            self.running.remove(&address);
            self.status.remove(&address);
            if !self.withdraw_all(&address).await {
                return false;
            }
            tracing::info!(server = %address, "MCP config source no longer listed: its objects are withdrawn");
        }
        for server in listed {
            if self.running.get(&server.address).is_some_and(|r| r.server == *server) {
                continue;
            }
            let status = self.status.server(server.address.clone());
            let task = tokio::spawn(client::run(server.clone(), self.context.clone(), status));
            tracing::info!(server = %server.address, tls = ?server.tls.mode, "reading MCP config source");
            self.running.insert(server.address.clone(), Running { server: server.clone(), task });
        }
        true
    }

    /// Withdraws every object `address` wrote.
    async fn withdraw_all(&self, address: &str) -> bool {
        let prefix = format!("mcp:{address}/");
        let store = self.context.store.snapshot();
        let writes: Vec<Write> = store
            .iter()
            .filter(|stored| stored.source.file.starts_with(&prefix))
            .map(|stored| Write::Withdraw(stored.object.key(), stored.source.file.clone()))
            .collect();
        drop(store);
        if writes.is_empty() {
            return true;
        }
        let Ok(permit) = self.context.changes.clone().reserve_owned().await else {
            return false;
        };
        self.context.store.apply_then(writes, move |changes| {
            permit.send(changes);
        });
        true
    }
}

#[cfg(test)]
mod test;
