//! `PushEngine`: turns push requests into published snapshots and stream pushes.
//!
//! The engine is the one writer of the current [`PushContext`]: it takes a
//! merged [`PushRequest`] from the debouncer's slot, builds the successor
//! snapshot on the blocking pool (rayon inside), brings the
//! [`ScopedCache`] to it, publishes it with one `ArcSwap::store`, and fans
//! the change out through the [`PushQueue`]. Readers (streams, admin) load
//! the snapshot without locking.

use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use tokio::sync::watch;

use super::debounce::PushSlot;
use super::history::{PushHistory, PushOutcome};
use super::queue::PushQueue;
use super::{PushContext, PushRequest, ScopeInterner};
use crate::generate::cache::ScopedCache;
use crate::metrics::{Metrics, PushTrigger};

/// The push engine's shared state.
#[derive(Debug)]
pub struct PushEngine {
    /// The published snapshot.
    pub ctx: ArcSwap<PushContext>,
    /// Generated resources.
    pub cache: ScopedCache,
    /// Connected streams.
    pub queue: PushQueue,
    /// Metrics, shared with every stream task.
    pub metrics: Arc<Metrics>,
    /// Recent pushes (bounded).
    pub history: PushHistory,
    /// Whether the first snapshot built from the sources is published;
    /// streams wait for it before they answer anything.
    ready: watch::Sender<bool>,
    version_tx: watch::Sender<u64>,
}

impl PushEngine {
    /// An engine with an empty snapshot.
    pub fn new() -> Arc<PushEngine> {
        let (version_tx, _) = watch::channel(0);
        Arc::new(PushEngine {
            ctx: ArcSwap::from_pointee(PushContext::empty(Arc::new(ScopeInterner::default()))),
            cache: ScopedCache::new(),
            queue: PushQueue::default(),
            metrics: Arc::new(Metrics::new()),
            history: PushHistory::default(),
            ready: watch::Sender::new(false),
            version_tx,
        })
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
        self.metrics.record_push(&trigger, build);
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
        tracing::debug!(
            version,
            keys = changes.kinds.len(),
            dirty_hosts = changes.dirty_hosts.len(),
            full = changes.full,
            endpoint_only = changes.endpoint_only,
            streams = pushed,
            build_ms = started.elapsed().as_secs_f64() * 1e3,
            "published push context"
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
