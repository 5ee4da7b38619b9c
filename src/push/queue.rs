//! `PushQueue`: every connected stream's pending push, sharded by connection id.
//!
//! The engine never talks to a stream directly: it merges a [`PendingPush`]
//! into the stream's [`Mailbox`] and wakes it. Each stream serves its slot one push
//! at a time, so
//!
//! * at most one push is in flight per connection, and a push that arrives
//!   meanwhile merges into the pending one (latest snapshot wins, changed
//!   hosts accumulate);
//! * a slow or stuck Envoy only ever delays itself: enqueueing never waits
//!   on a stream, and memory per stream is one slot, whatever the churn.
//!
//! Shards keep registration from contending on one lock when thousands of
//! streams connect at once; the scope index makes fan-out cost
//! O(scopes + streams pushed), not O(streams).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::Mutex;

use super::mailbox::{Mailbox, Merge};
use super::{InboundId, PushChanges, ScopeId};
use crate::model::{Hostname, Proxy};
use crate::resource::TypeSet;

/// Connection id, unique for the life of the server.
pub type ConnId = u64;

/// What a stream should push.
#[derive(Debug, Clone)]
pub struct PendingPush {
    /// Regenerate every type (the stream's scope was touched).
    pub full: bool,
    /// Hosts whose assignments changed (endpoint pushes); shared by every
    /// stream of one fan-out.
    pub hosts: Arc<HashSet<Hostname>>,
    /// Types to regenerate on a full push.
    pub types: TypeSet,
    /// Recompute the stream's scope and inbound keys.
    pub rescope: bool,
    /// Earliest change this push carries (for convergence time).
    pub first_change: Instant,
}

impl Merge for PendingPush {
    fn merge(&mut self, other: PendingPush) {
        self.full |= other.full;
        self.types = self.types.union(other.types);
        self.rescope |= other.rescope;
        if !Arc::ptr_eq(&self.hosts, &other.hosts) && !other.hosts.is_subset(&self.hosts) {
            Arc::make_mut(&mut self.hosts).extend(other.hosts.iter().cloned());
        }
        self.first_change = self.first_change.min(other.first_change);
    }
}

/// The queue's view of one connection.
#[derive(Debug)]
pub struct ConnectionHandle {
    /// Connection id.
    pub id: ConnId,
    /// The proxy.
    pub proxy: Arc<Proxy>,
    /// Its slot: the push it should make next.
    pub mailbox: Mailbox<PendingPush>,
    /// The scope it was last generated for (0 = none yet).
    pub scope: AtomicU32,
    /// The workload shape it was last generated for (0 = none yet).
    pub inbound: AtomicU32,
    /// When it connected.
    pub connected: Instant,
}

const SHARDS: usize = 16;

/// Every connected stream, sharded by id, and indexed by scope so that a
/// change reaches the streams of the scopes it touches without visiting
/// every stream.
#[derive(Debug)]
pub struct PushQueue {
    shards: Vec<Mutex<HashMap<ConnId, Arc<ConnectionHandle>>>>,
    /// Scope → its streams. Scope 0 holds streams not generated for yet.
    by_scope: Mutex<HashMap<ScopeId, HashMap<ConnId, Arc<ConnectionHandle>>>>,
    next_id: AtomicU64,
}

impl Default for PushQueue {
    fn default() -> Self {
        PushQueue {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            by_scope: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
        }
    }
}

impl PushQueue {
    /// Registers a stream.
    pub fn register(&self, proxy: Arc<Proxy>) -> Arc<ConnectionHandle> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let handle = Arc::new(ConnectionHandle {
            id,
            proxy,
            mailbox: Mailbox::default(),
            scope: AtomicU32::new(0),
            inbound: AtomicU32::new(0),
            connected: Instant::now(),
        });
        self.shards[id as usize % SHARDS].lock().insert(id, handle.clone());
        self.by_scope.lock().entry(ScopeId(0)).or_default().insert(id, handle.clone());
        handle
    }

    /// Records the scope and workload shape a stream was last generated for.
    pub fn set_scope(&self, handle: &Arc<ConnectionHandle>, scope: ScopeId, inbound: InboundId) {
        handle.inbound.store(inbound.0, Ordering::Relaxed);
        let old = ScopeId(handle.scope.swap(scope.0, Ordering::Relaxed));
        if old != scope {
            let mut index = self.by_scope.lock();
            if let Some(set) = index.get_mut(&old) {
                set.remove(&handle.id);
                if set.is_empty() {
                    index.remove(&old);
                }
            }
            index.entry(scope).or_default().insert(handle.id, handle.clone());
        }
    }

    /// Removes a stream.
    pub fn unregister(&self, id: ConnId) {
        if let Some(handle) = self.shards[id as usize % SHARDS].lock().remove(&id) {
            let scope = ScopeId(handle.scope.load(Ordering::Relaxed));
            let mut index = self.by_scope.lock();
            if let Some(set) = index.get_mut(&scope) {
                set.remove(&id);
                if set.is_empty() {
                    index.remove(&scope);
                }
            }
        }
    }

    /// Number of scopes with at least one stream.
    pub fn scope_count(&self) -> usize {
        self.by_scope.lock().keys().filter(|s| s.0 != 0).count()
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

    /// Scopes and workload shapes in use by at least one connection.
    pub fn live(&self) -> (HashSet<ScopeId>, HashSet<InboundId>) {
        let mut scopes = HashSet::new();
        let mut inbound = HashSet::new();
        for shard in &self.shards {
            for c in shard.lock().values() {
                scopes.insert(ScopeId(c.scope.load(Ordering::Relaxed)));
                inbound.insert(InboundId(c.inbound.load(Ordering::Relaxed)));
            }
        }
        (scopes, inbound)
    }

    /// Fans a snapshot's changes out to the streams they affect; returns how
    /// many streams were given a push. `scope_sees` answers, from the new
    /// snapshot, whether a scope that was carried over sees any of the
    /// changed hosts; `None` means the scope was not carried over (its
    /// streams regenerate everything). Work is per scope, then per stream of
    /// the scopes concerned: streams of untouched scopes are never visited.
    pub fn enqueue(
        &self,
        changes: &PushChanges,
        first_change: Instant,
        scope_sees: impl Fn(ScopeId) -> Option<bool>,
    ) -> usize {
        let targets: Vec<(bool, Vec<Arc<ConnectionHandle>>)> = {
            let index = self.by_scope.lock();
            index
                .iter()
                .filter_map(|(scope, conns)| {
                    let verdict = if changes.full || scope.0 == 0 { None } else { scope_sees(*scope) };
                    match verdict {
                        None => Some((true, conns.values().cloned().collect())),
                        Some(true) => Some((false, conns.values().cloned().collect())),
                        Some(false) => None,
                    }
                })
                .collect()
        };
        let hosts = Arc::new(changes.dirty_hosts.clone());
        let mut pushed = 0;
        for (full, conns) in targets {
            for conn in conns {
                conn.mailbox.put(PendingPush {
                    full,
                    types: changes.types,
                    rescope: changes.rescope,
                    hosts: hosts.clone(),
                    first_change,
                });
                pushed += 1;
            }
        }
        pushed
    }
}
