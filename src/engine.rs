//! `PushEngine`: turns push requests into published snapshots and stream pushes.
//!
//! The engine is the one writer of the current [`PushContext`]: it takes a
//! merged [`PushRequest`] from the debouncer's slot, builds the successor
//! snapshot on the blocking pool (rayon inside), brings the
//! [`ScopedCache`] to it, publishes it with one `ArcSwap::store`, and fans
//! the change out through the [`PushQueue`]. Readers (streams, admin) load
//! the snapshot without locking.
//!
//! It is the layer that joins the push side (snapshots, scopes, the queue)
//! to generation (the cache): both sit below it, and the xDS streams,
//! which read all three through it, sit above.
//!
//! Invariant: the cache is brought to a snapshot before that snapshot is
//! published, so no stream reads a new snapshot against an old cache.

use std::sync::Arc;
use std::time::Instant;

use arc_swap::{ArcSwap, Guard};
use tokio::sync::watch;

use crate::config::mesh::MeshConfig;
use crate::generate::cache::ScopedCache;
use crate::metrics::{Metrics, Readings};
use crate::push::history::{PushHistory, PushOutcome};
use crate::push::{PushContext, PushQueue, PushRequest, PushSlot, PushTrigger, ScopeInterner};

/// The push engine's shared state.
#[derive(Debug)]
pub struct PushEngine {
    ctx: ArcSwap<PushContext>,
    cache: ScopedCache,
    queue: PushQueue,
    metrics: Arc<Metrics>,
    history: PushHistory,
    /// Whether the first snapshot built from the sources is published;
    /// streams wait for it before they answer anything.
    ready: watch::Sender<bool>,
    version_tx: watch::Sender<u64>,
}

impl PushEngine {
    /// An engine with an empty snapshot of a mesh with Istio's default settings.
    pub fn new() -> Arc<PushEngine> {
        PushEngine::for_mesh(MeshConfig::default())
    }

    /// An engine with an empty snapshot of a mesh configured as `mesh`.
    pub fn for_mesh(mesh: MeshConfig) -> Arc<PushEngine> {
        let (version_tx, _) = watch::channel(0);
        Arc::new(PushEngine {
            ctx: ArcSwap::from_pointee(PushContext::empty(Arc::new(ScopeInterner::default()), Arc::new(mesh))),
            cache: ScopedCache::new(),
            queue: PushQueue::default(),
            metrics: Arc::new(Metrics::new()),
            history: PushHistory::default(),
            ready: watch::Sender::new(false),
            version_tx,
        })
    }

    /// The published snapshot (a lock-free load).
    pub fn snapshot(&self) -> Guard<Arc<PushContext>> {
        self.ctx.load()
    }

    /// Generated resources, at the published snapshot.
    pub fn cache(&self) -> &ScopedCache {
        &self.cache
    }

    /// Connected streams and their pending pushes.
    pub fn queue(&self) -> &PushQueue {
        &self.queue
    }

    /// The server's metrics, shared with every stream task.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Recent pushes (bounded).
    pub fn history(&self) -> &PushHistory {
        &self.history
    }

    /// What the metrics read at scrape time: connections, scopes, the
    /// cache's counters.
    pub fn readings(&self) -> Readings {
        let ctx = self.ctx.load();
        let stats = &self.cache.stats;
        let (sets, assignments) = self.cache.len();
        let connections = self.queue.connections();
        let per_type = |c: &[std::sync::atomic::AtomicU64; crate::resource::TypeUrl::COUNT]| {
            std::array::from_fn(|i| c[i].load(std::sync::atomic::Ordering::Relaxed))
        };
        Readings {
            connections: connections.len() as i64,
            services: ctx.services.len() as i64,
            scopes: ctx.scopes().len() as i64,
            queue_depth: connections.iter().filter(|c| c.mailbox.is_pending()).count() as i64,
            snapshot_version: ctx.version as i64,
            cache_sets: sets as i64,
            cache_assignments: assignments as i64,
            hits: per_type(&stats.hits),
            misses: per_type(&stats.misses),
            generations: per_type(&stats.generations),
            encoded: per_type(&stats.encoded),
            bytes_encoded: stats.bytes_encoded.load(std::sync::atomic::Ordering::Relaxed),
            envoy_filters: self.cache.patches.counts(),
        }
    }

    /// Whether the first snapshot built from the sources has been published.
    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// Marks the engine ready (after the initial load, even if it was empty).
    pub fn set_ready(&self) {
        self.ready.send_replace(true);
    }

    /// Resolves once the engine is ready. An Envoy that connects (or
    /// reconnects, after a restart) while the first load is still running
    /// would otherwise be answered from the empty snapshot, and drop every
    /// cluster and listener it was serving with.
    pub async fn wait_ready(&self) {
        let _ = self.ready.subscribe().wait_for(|ready| *ready).await;
    }

    /// Watches the published snapshot version.
    pub fn versions(&self) -> watch::Receiver<u64> {
        self.version_tx.subscribe()
    }

    /// Builds, publishes and fans out one request. Returns the new version.
    pub async fn push(self: &Arc<Self>, request: PushRequest) -> u64 {
        let started = Instant::now();
        let prev = self.ctx.load_full();
        let first_change = request.first_change;
        let trigger = PushTrigger::of(&request);
        let (next, changes) =
            tokio::task::spawn_blocking(move || PushContext::next(&prev, request.store.clone(), &request))
                .await
                .expect("building a PushContext never panics");
        let build = started.elapsed();
        let version = next.version;
        self.cache.invalidate(&next, &changes);
        let next = Arc::new(next);
        self.ctx.store(next.clone());
        let pushed = self.queue.enqueue(&changes, first_change, |id| {
            if changes.touched.contains(&id) {
                return None;
            }
            next.scope(id).map(|scope| changes.dirty_hosts.iter().any(|h| scope.visible_hosts.contains(h)))
        });
        let (scopes, inbound) = self.queue.live();
        self.cache.retain_live(&scopes, &inbound);
        self.version_tx.send_replace(version);
        self.metrics.record_push(&trigger.reading(build));
        self.history.record(PushOutcome {
            version,
            trigger: &trigger,
            build,
            total: started.elapsed(),
            proxies: pushed,
            full: changes.full,
            endpoint_only: changes.endpoint_only,
            dirty_hosts: changes.dirty_hosts.len(),
        });
        // One line per applied change, so an operator sees an edit land.
        tracing::info!(
            version,
            proxies = pushed,
            full = changes.full,
            build_ms = (build.as_secs_f64() * 1e4).round() / 10.0,
            "applied {}",
            trigger.summary()
        );
        version
    }

    /// Serves the debouncer's slot until the task is dropped.
    pub async fn run(self: Arc<Self>, slot: Arc<PushSlot>) {
        loop {
            let request = slot.take().await;
            self.push(request).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ConfigStore;
    use crate::push::Mailbox;
    use crate::resource::TypeUrl;
    use crate::testing::bookinfo;

    #[tokio::test]
    async fn a_push_publishes_a_snapshot_the_cache_is_already_at() {
        let engine = PushEngine::new();
        let store = ConfigStore::new();
        assert!(!engine.is_ready());
        let version = engine.push(PushRequest::new(store.apply(bookinfo::writes()))).await;
        assert_eq!(engine.snapshot().version, version);
        assert_eq!(*engine.versions().borrow(), version);
        // A set generated from the published snapshot is kept: the cache was
        // brought to it before it was published.
        let ctx = engine.snapshot();
        let scope = ctx.scope_for(&bookinfo::productpage());
        let first = engine.cache().scoped(&ctx, &scope, TypeUrl::Cluster);
        let again = engine.cache().scoped(&ctx, &scope, TypeUrl::Cluster);
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(engine.readings().snapshot_version, version as i64);
        assert_eq!(engine.metrics().pushes.get(), 1);
        assert_eq!(engine.history().last().map(|r| r.version), Some(version));
    }

    #[tokio::test]
    async fn the_engine_serves_its_slot_in_order_and_merges_what_waits() {
        let engine = PushEngine::new();
        let store = ConfigStore::new();
        let slot = Arc::new(Mailbox::default());
        slot.put(PushRequest::new(store.apply(bookinfo::writes())));
        slot.put(PushRequest::new(store.apply(bookinfo::puts(
            "apiVersion: v1\nkind: Service\nmetadata: {name: payments, namespace: default}\nspec:\n  ports: [{name: http, port: 9080}]\n",
        ))));
        let mut versions = engine.versions();
        let task = tokio::spawn(engine.clone().run(slot));
        tokio::time::timeout(std::time::Duration::from_secs(10), versions.changed()).await.expect("a push").unwrap();
        assert_eq!(*versions.borrow(), 1, "two requests that waited together are one push");
        assert!(engine.snapshot().services.get("payments.default.svc.cluster.local").is_some());
        task.abort();
    }
}
