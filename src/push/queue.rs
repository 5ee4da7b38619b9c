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

/// Takes one stream off a workload shape's count (0 = not generated for yet).
fn forget_inbound(counts: &mut HashMap<InboundId, usize>, inbound: InboundId) {
    if inbound.0 == 0 {
        return;
    }
    if let Some(n) = counts.get_mut(&inbound) {
        *n -= 1;
        if *n == 0 {
            counts.remove(&inbound);
        }
    }
}

/// Every connected stream, sharded by id, and indexed by scope so that a
/// change reaches the streams of the scopes it touches without visiting
/// every stream.
#[derive(Debug)]
pub struct PushQueue {
    shards: Vec<Mutex<HashMap<ConnId, Arc<ConnectionHandle>>>>,
    /// Scope → its streams. Scope 0 holds streams not generated for yet.
    by_scope: Mutex<HashMap<ScopeId, HashMap<ConnId, Arc<ConnectionHandle>>>>,
    /// Workload shape → how many streams were last generated for it.
    by_inbound: Mutex<HashMap<InboundId, usize>>,
    next_id: AtomicU64,
    /// Woken when a stream registers or unregisters (auto-registration
    /// follows connections with it).
    membership: tokio::sync::Notify,
}

impl Default for PushQueue {
    fn default() -> Self {
        PushQueue {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            by_scope: Mutex::new(HashMap::new()),
            by_inbound: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            membership: tokio::sync::Notify::new(),
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
        self.membership.notify_one();
        handle
    }

    /// Records the scope and workload shape a stream was last generated for.
    pub fn set_scope(&self, handle: &Arc<ConnectionHandle>, scope: ScopeId, inbound: InboundId) {
        let old_inbound = InboundId(handle.inbound.swap(inbound.0, Ordering::Relaxed));
        if old_inbound != inbound {
            let mut counts = self.by_inbound.lock();
            forget_inbound(&mut counts, old_inbound);
            *counts.entry(inbound).or_default() += 1;
        }
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
            forget_inbound(&mut self.by_inbound.lock(), InboundId(handle.inbound.load(Ordering::Relaxed)));
            let scope = ScopeId(handle.scope.load(Ordering::Relaxed));
            let mut index = self.by_scope.lock();
            if let Some(set) = index.get_mut(&scope) {
                set.remove(&id);
                if set.is_empty() {
                    index.remove(&scope);
                }
            }
            drop(index);
            self.membership.notify_one();
        }
    }

    /// Resolves once a stream registered or unregistered since the last
    /// call returned (a change before the first call counts).
    pub async fn membership_changed(&self) {
        self.membership.notified().await;
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

    /// Scopes and workload shapes in use by at least one connection, read
    /// from the indexes: O(scopes + shapes), whatever the number of streams.
    pub fn live(&self) -> (HashSet<ScopeId>, HashSet<InboundId>) {
        let scopes = self.by_scope.lock().keys().copied().collect();
        let inbound = self.by_inbound.lock().keys().copied().collect();
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
        mut scope_sees: impl FnMut(ScopeId) -> Option<bool>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::TypeUrl;
    use crate::testing::memory::node;

    fn proxy(pod: &str) -> Arc<Proxy> {
        let id = format!("sidecar~10.0.0.1~{pod}.default~default.svc.cluster.local");
        Arc::new(Proxy::from_node(&node(&id, "NONE", &[])).expect("a valid node"))
    }

    fn placed(queue: &PushQueue, pod: &str, scope: u32, inbound: u32) -> Arc<ConnectionHandle> {
        let handle = queue.register(proxy(pod));
        queue.set_scope(&handle, ScopeId(scope), InboundId(inbound));
        handle
    }

    #[test]
    fn a_change_reaches_the_streams_of_touched_scopes_and_scopes_that_see_its_hosts_only() {
        let queue = PushQueue::default();
        let touched = placed(&queue, "a", 1, 1);
        let seeing = placed(&queue, "b", 2, 1);
        let untouched = placed(&queue, "c", 3, 1);
        let changes = PushChanges {
            types: TypeSet::of(&[TypeUrl::Route]),
            touched: [ScopeId(1)].into(),
            dirty_hosts: ["reviews.default.svc.cluster.local".into()].into(),
            ..Default::default()
        };
        let mut asked = Vec::new();
        let pushed = queue.enqueue(&changes, Instant::now(), |scope| {
            asked.push(scope);
            if changes.touched.contains(&scope) { None } else { Some(scope == ScopeId(2)) }
        });
        assert_eq!(pushed, 2);
        let full = touched.mailbox.try_take().expect("the touched scope's stream is pushed");
        assert!(full.full, "a touched scope regenerates");
        let partial = seeing.mailbox.try_take().expect("a scope that sees a changed host is pushed");
        assert!(!partial.full, "an untouched scope that sees the hosts gets their endpoints only");
        assert!(untouched.mailbox.try_take().is_none(), "a scope that sees nothing changed is not pushed");
        asked.sort();
        assert_eq!(asked, vec![ScopeId(1), ScopeId(2), ScopeId(3)], "one question per scope, not per stream");
    }

    #[test]
    fn pushes_to_a_busy_stream_merge_into_one() {
        let queue = PushQueue::default();
        let handle = placed(&queue, "a", 1, 1);
        let push = |host: &str, types: &[TypeUrl], full: bool| PushChanges {
            full,
            types: TypeSet::of(types),
            dirty_hosts: [host.into()].into(),
            ..Default::default()
        };
        let first_change = Instant::now();
        queue.enqueue(&push("a.default.svc.cluster.local", &[TypeUrl::Endpoint], false), first_change, |_| Some(true));
        queue.enqueue(&push("b.default.svc.cluster.local", &[TypeUrl::Route], true), Instant::now(), |_| None);
        let merged = handle.mailbox.try_take().expect("one push waits");
        assert!(merged.full);
        assert_eq!(merged.types, TypeSet::of(&[TypeUrl::Endpoint, TypeUrl::Route]));
        assert_eq!(merged.hosts.len(), 2, "the changed hosts accumulate");
        assert_eq!(merged.first_change, first_change, "convergence counts from the earliest change");
        assert!(handle.mailbox.try_take().is_none());
    }

    #[test]
    fn live_scopes_and_shapes_follow_registration_placement_and_departure() {
        let queue = PushQueue::default();
        let a = placed(&queue, "a", 1, 7);
        let b = placed(&queue, "b", 1, 8);
        let (scopes, shapes) = queue.live();
        assert_eq!((scopes, shapes), ([ScopeId(1)].into(), [InboundId(7), InboundId(8)].into()));
        queue.set_scope(&b, ScopeId(2), InboundId(7));
        assert_eq!(queue.live(), ([ScopeId(1), ScopeId(2)].into(), [InboundId(7)].into()));
        assert_eq!(queue.scope_count(), 2);
        queue.unregister(a.id);
        assert_eq!(queue.live(), ([ScopeId(2)].into(), [InboundId(7)].into()));
        queue.unregister(b.id);
        assert_eq!(queue.live(), (HashSet::new(), HashSet::new()));
        assert!(queue.is_empty());
    }
}
