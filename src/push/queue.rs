//! `PushQueue`: every connected stream's pending push, sharded by connection id.
//!
//! The engine never talks to a stream directly: it merges a [`PendingPush`]
//! into the stream's slot and wakes it. Each stream serves its slot one push
//! at a time, so
//!
//! * at most one push is in flight per connection, and a push that arrives
//!   meanwhile merges into the pending one (latest snapshot wins, changed
//!   hosts accumulate);
//! * a slow or stuck Envoy only ever delays itself: enqueueing never waits
//!   on a stream, and memory per stream is one slot, whatever the churn.
//!
//! Shards keep registration and fan-out from contending on one lock when
//! thousands of streams connect at once.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::{PushChanges, ScopeId};
use crate::model::{Hostname, Proxy};

/// Connection id, unique for the life of the server.
pub type ConnId = u64;

/// What a stream should push.
#[derive(Debug, Clone)]
pub struct PendingPush {
    /// Regenerate every type (the stream's scope was touched).
    pub full: bool,
    /// Hosts whose assignments changed (endpoint pushes).
    pub hosts: HashSet<Hostname>,
    /// Earliest change this push carries (for convergence time).
    pub first_change: Instant,
}

impl PendingPush {
    fn merge(&mut self, other: PendingPush) {
        self.full |= other.full;
        self.hosts.extend(other.hosts);
        self.first_change = self.first_change.min(other.first_change);
    }
}

/// One stream's slot.
#[derive(Debug, Default)]
pub struct PushSignal {
    pending: Mutex<Option<PendingPush>>,
    notify: Notify,
}

impl PushSignal {
    /// Merges a push into the slot and wakes the stream.
    pub fn put(&self, push: PendingPush) {
        let mut pending = self.pending.lock();
        match pending.as_mut() {
            Some(p) => p.merge(push),
            None => *pending = Some(push),
        }
        drop(pending);
        self.notify.notify_one();
    }

    /// Takes the pending push, if any.
    pub fn take(&self) -> Option<PendingPush> {
        self.pending.lock().take()
    }

    /// Waits until a push is put (returns at once if one is pending).
    pub async fn notified(&self) {
        if self.pending.lock().is_some() {
            return;
        }
        self.notify.notified().await;
    }
}

/// The queue's view of one connection.
#[derive(Debug)]
pub struct ConnectionHandle {
    /// Connection id.
    pub id: ConnId,
    /// The proxy.
    pub proxy: Arc<Proxy>,
    /// Its slot.
    pub signal: Arc<PushSignal>,
    /// The scope it was last generated for (0 = none yet).
    pub scope: AtomicU32,
    /// When it connected.
    pub connected: Instant,
}

const SHARDS: usize = 16;

/// Every connected stream, sharded by id.
#[derive(Debug)]
pub struct PushQueue {
    shards: Vec<Mutex<HashMap<ConnId, Arc<ConnectionHandle>>>>,
    next_id: AtomicU64,
}

impl Default for PushQueue {
    fn default() -> Self {
        PushQueue { shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(), next_id: AtomicU64::new(1) }
    }
}

impl PushQueue {
    /// Registers a stream.
    pub fn register(&self, proxy: Arc<Proxy>) -> Arc<ConnectionHandle> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let handle = Arc::new(ConnectionHandle {
            id,
            proxy,
            signal: Arc::new(PushSignal::default()),
            scope: AtomicU32::new(0),
            connected: Instant::now(),
        });
        self.shards[id as usize % SHARDS].lock().insert(id, handle.clone());
        handle
    }

    /// Removes a stream.
    pub fn unregister(&self, id: ConnId) {
        self.shards[id as usize % SHARDS].lock().remove(&id);
    }

    /// Every connection (a copy of the handles).
    pub fn connections(&self) -> Vec<Arc<ConnectionHandle>> {
        self.shards.iter().flat_map(|s| s.lock().values().cloned().collect::<Vec<_>>()).collect()
    }

    /// Number of connections.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    /// Whether no stream is connected.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Scopes in use by at least one connection.
    pub fn live_scopes(&self) -> HashSet<ScopeId> {
        self.shards
            .iter()
            .flat_map(|s| s.lock().values().map(|c| ScopeId(c.scope.load(Ordering::Relaxed))).collect::<Vec<_>>())
            .collect()
    }

    /// Fans a snapshot's changes out to the streams they affect; returns how
    /// many streams were given a push. `sees` answers, from the new snapshot,
    /// whether a scope that was carried over sees any of the changed hosts;
    /// `None` means the scope was not carried over (regenerate everything).
    pub fn enqueue(
        &self,
        changes: &PushChanges,
        first_change: Instant,
        scope_sees: impl Fn(ScopeId) -> Option<bool>,
    ) -> usize {
        let mut pushed = 0;
        let mut memo: HashMap<ScopeId, Option<bool>> = HashMap::new();
        for shard in &self.shards {
            let conns: Vec<Arc<ConnectionHandle>> = shard.lock().values().cloned().collect();
            for conn in conns {
                let scope = ScopeId(conn.scope.load(Ordering::Relaxed));
                let verdict = if changes.full || scope.0 == 0 {
                    None
                } else {
                    *memo.entry(scope).or_insert_with(|| scope_sees(scope))
                };
                let push = match verdict {
                    None => PendingPush { full: true, hosts: changes.dirty_hosts.clone(), first_change },
                    Some(true) => PendingPush { full: false, hosts: changes.dirty_hosts.clone(), first_change },
                    Some(false) => continue,
                };
                conn.signal.put(push);
                pushed += 1;
            }
        }
        pushed
    }
}
