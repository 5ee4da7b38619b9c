//! What the simulated Envoys report to the scenario: counters, sync times,
//! the name lists they watch, and the changes they are waiting to see.
//!
//! A [`Change`] is identified by content, not by version: a token (an
//! endpoint address, a route prefix) that appears as a whole string field in
//! a resource of one type and name only once the change is in it. A stream
//! that receives a response carrying the token, and ACKs it, has converged;
//! its latency is from the change's start (just before the registry call or
//! the trigger command) to that ACK.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;

use crate::wire;

/// The four xDS types, as indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum XdsType {
    /// CDS.
    Cluster = 0,
    /// EDS.
    Endpoint = 1,
    /// LDS.
    Listener = 2,
    /// RDS.
    Route = 3,
}

impl XdsType {
    /// The type of a type URL.
    pub fn from_url(url: &str) -> Option<XdsType> {
        match url {
            wire::CLUSTER => Some(XdsType::Cluster),
            wire::ENDPOINT => Some(XdsType::Endpoint),
            wire::LISTENER => Some(XdsType::Listener),
            wire::ROUTE => Some(XdsType::Route),
            _ => None,
        }
    }

    /// Its type URL.
    pub fn url(self) -> &'static str {
        match self {
            XdsType::Cluster => wire::CLUSTER,
            XdsType::Endpoint => wire::ENDPOINT,
            XdsType::Listener => wire::LISTENER,
            XdsType::Route => wire::ROUTE,
        }
    }

    /// `cds`, `eds`, `lds`, `rds`.
    pub fn short(self) -> &'static str {
        match self {
            XdsType::Cluster => "cds",
            XdsType::Endpoint => "eds",
            XdsType::Listener => "lds",
            XdsType::Route => "rds",
        }
    }

    /// Parses `cds`, `eds`, `lds` or `rds`.
    pub fn parse_short(s: &str) -> Option<XdsType> {
        [XdsType::Cluster, XdsType::Endpoint, XdsType::Listener, XdsType::Route].into_iter().find(|t| t.short() == s)
    }
}

/// Counters every stream adds to.
#[derive(Debug, Default)]
pub struct Stats {
    /// Responses received, by type.
    pub responses: [AtomicU64; 4],
    /// Bytes of responses received (gRPC message payloads).
    pub bytes: AtomicU64,
    /// Requests sent (subscriptions and ACKs).
    pub requests: AtomicU64,
    /// Streams that ended before the harness stopped them.
    pub streams_lost: AtomicU64,
    /// Stream attempts the server refused or could not take (the server
    /// down, a refusal status).
    pub streams_refused: AtomicU64,
    /// Streams opened again after one ended, as Envoy reopens them.
    pub reconnects: AtomicU64,
    /// Resources received that the stream held already with the same
    /// content, by type (counted only when a run measures resends).
    pub unchanged: [AtomicU64; 4],
    /// Resources received, by type (counted only when a run measures resends).
    pub resources: [AtomicU64; 4],
    /// SotW responses whose version is the one the stream held of that type.
    pub same_version: [AtomicU64; 4],
}

/// The resend counters at one moment, by type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Resends {
    /// Resources received.
    pub resources: [u64; 4],
    /// Of those, resources the stream held with the same content.
    pub unchanged: [u64; 4],
    /// SotW responses whose version the stream held already.
    pub same_version: [u64; 4],
}

impl Resends {
    /// What was counted between `earlier` and `self`.
    pub fn since(&self, earlier: &Resends) -> Resends {
        let sub = |a: [u64; 4], b: [u64; 4]| std::array::from_fn(|i| a[i] - b[i]);
        Resends {
            resources: sub(self.resources, earlier.resources),
            unchanged: sub(self.unchanged, earlier.unchanged),
            same_version: sub(self.same_version, earlier.same_version),
        }
    }
}

impl Stats {
    /// The resend counters now.
    pub fn resends(&self) -> Resends {
        let read = |a: &[AtomicU64; 4]| std::array::from_fn(|i| a[i].load(Ordering::Relaxed));
        Resends {
            resources: read(&self.resources),
            unchanged: read(&self.unchanged),
            same_version: read(&self.same_version),
        }
    }

    /// Total responses.
    pub fn responses_total(&self) -> u64 {
        self.responses.iter().map(|r| r.load(Ordering::Relaxed)).sum()
    }
}

/// Streams reaching the synced state: CDS and LDS ACKed, every watched EDS
/// and RDS name received at least once.
#[derive(Debug)]
pub struct SyncState {
    /// When the streams started connecting.
    pub start: Instant,
    synced: watch::Sender<usize>,
    times: Mutex<Vec<(u32, Duration)>>,
}

impl Default for SyncState {
    fn default() -> Self {
        SyncState::new()
    }
}

impl SyncState {
    /// Starts counting from now.
    pub fn new() -> SyncState {
        SyncState { start: Instant::now(), synced: watch::Sender::new(0), times: Mutex::new(Vec::new()) }
    }

    /// Records stream `stream` synced now.
    pub fn record(&self, stream: u32) {
        self.times.lock().push((stream, self.start.elapsed()));
        self.synced.send_modify(|n| *n += 1);
    }

    /// Streams synced so far.
    pub fn count(&self) -> usize {
        *self.synced.borrow()
    }

    /// Watches the count.
    pub fn watch(&self) -> watch::Receiver<usize> {
        self.synced.subscribe()
    }

    /// Each synced stream's time from the start, in order of syncing.
    pub fn times(&self) -> Vec<Duration> {
        self.times.lock().iter().map(|(_, t)| *t).collect()
    }

    /// Each synced stream and its time from the start, in order of syncing.
    pub fn stream_times(&self) -> Vec<(u32, Duration)> {
        self.times.lock().clone()
    }
}

/// A distinct list of watched names (EDS or RDS), shared by every stream
/// that watches exactly that list: sidecars of one scope ask for the same
/// names, so ten thousand streams hold about a hundred lists.
#[derive(Debug)]
pub struct NameSet {
    /// The names, sorted.
    pub names: Vec<Box<str>>,
    index: HashMap<Box<str>, u32>,
    /// `resource_names` as encoded in requests.
    pub encoded: Bytes,
    /// Streams watching this list now.
    watchers: AtomicI64,
}

impl NameSet {
    /// The position of `name` in the list.
    pub fn position(&self, name: &str) -> Option<u32> {
        self.index.get(name).copied()
    }

    /// Number of names.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// Interns [`NameSet`]s per type and counts their watchers.
#[derive(Debug, Default)]
pub struct NameSets {
    sets: [Mutex<HashMap<u64, Vec<Arc<NameSet>>>>; 4],
}

impl NameSets {
    /// The shared set for `names` (sorted and deduplicated by the caller).
    pub fn intern(&self, t: XdsType, names: &[&str]) -> Arc<NameSet> {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        names.hash(&mut hasher);
        let hash = hasher.finish();
        let mut sets = self.sets[t as usize].lock();
        let bucket = sets.entry(hash).or_default();
        if let Some(found) = bucket.iter().find(|s| s.names.iter().map(|n| &**n).eq(names.iter().copied())) {
            return found.clone();
        }
        let set = Arc::new(NameSet {
            names: names.iter().map(|n| Box::from(*n)).collect(),
            index: names.iter().enumerate().map(|(i, n)| (Box::from(*n), i as u32)).collect(),
            encoded: wire::encode_names(names),
            watchers: AtomicI64::new(0),
        });
        bucket.push(set.clone());
        set
    }

    /// Moves one stream's watch from `old` to `new`.
    pub fn switch(&self, old: Option<&Arc<NameSet>>, new: &Arc<NameSet>) {
        if let Some(old) = old {
            old.watchers.fetch_sub(1, Ordering::Relaxed);
        }
        new.watchers.fetch_add(1, Ordering::Relaxed);
    }

    /// Ends one stream's watch.
    pub fn release(&self, old: &Arc<NameSet>) {
        old.watchers.fetch_sub(1, Ordering::Relaxed);
    }

    /// How many streams watch `name` of type `t` now.
    pub fn watchers(&self, t: XdsType, name: &str) -> usize {
        let sets = self.sets[t as usize].lock();
        let count: i64 = sets
            .values()
            .flatten()
            .filter(|s| s.position(name).is_some())
            .map(|s| s.watchers.load(Ordering::Relaxed))
            .sum();
        count.max(0) as usize
    }

    /// Distinct lists of type `t`.
    pub fn distinct(&self, t: XdsType) -> usize {
        self.sets[t as usize].lock().values().map(Vec::len).sum()
    }
}

/// Which streams a change must reach.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum Expect {
    /// Every stream.
    All,
    /// Streams whose sidecar lives in one of these namespaces.
    Namespaces(Vec<u32>),
    /// Streams that watch this resource (counted when the change starts).
    Watchers,
}

/// One change being tracked.
#[derive(Debug)]
pub struct Change {
    /// Label for reports.
    pub label: String,
    /// The type of the carrying response.
    pub xds_type: XdsType,
    /// The resource that carries it; empty means any resource of the type.
    pub resource: String,
    /// The token as a protobuf string field encodes it: its length, then its bytes.
    pub token: Vec<u8>,
    /// When the change started.
    pub start: Instant,
    expect: Expect,
    /// Streams that must converge.
    pub expected: usize,
    state: Mutex<ChangeState>,
    converged: watch::Sender<usize>,
}

#[derive(Debug, Default)]
struct ChangeState {
    seen: HashSet<u32>,
    latencies: Vec<Duration>,
    /// The stream of each latency, in the same order.
    streams: Vec<u32>,
    unexpected: usize,
}

/// What a change's tracking found.
#[derive(Debug, Clone)]
pub struct ChangeOutcome {
    /// Label.
    pub label: String,
    /// Streams expected.
    pub expected: usize,
    /// Each converged expected stream's latency.
    pub latencies: Vec<Duration>,
    /// The stream of each latency, in the same order.
    pub streams: Vec<u32>,
    /// Streams that received it without being expected to.
    pub unexpected: usize,
}

impl Change {
    /// A change starting at `start`, expected at `expected` streams.
    pub fn new(
        label: String,
        xds_type: XdsType,
        resource: String,
        token: &str,
        start: Instant,
        expect: Expect,
        expected: usize,
    ) -> Change {
        Change {
            label,
            xds_type,
            resource,
            token: wire::encoded_string(token),
            start,
            expect,
            expected,
            state: Mutex::new(ChangeState::default()),
            converged: watch::Sender::new(0),
        }
    }

    /// Whether `resource` carries the change.
    pub fn carried_by(&self, resource: &[u8]) -> bool {
        memchr::memmem::find(resource, &self.token).is_some()
    }

    /// Records that stream `stream` (in namespace `namespace`) ACKed a
    /// response carrying the change at `acked`. Repeats are ignored.
    pub fn record(&self, stream: u32, namespace: u32, acked: Instant) {
        let expected = match &self.expect {
            Expect::All | Expect::Watchers => true,
            Expect::Namespaces(list) => list.contains(&namespace),
        };
        let mut state = self.state.lock();
        if !state.seen.insert(stream) {
            return;
        }
        if expected {
            state.latencies.push(acked.saturating_duration_since(self.start));
            state.streams.push(stream);
            let n = state.latencies.len();
            drop(state);
            // Two streams recording at once may publish out of order: keep the larger count.
            self.converged.send_if_modified(|count| {
                let grew = n > *count;
                *count = (*count).max(n);
                grew
            });
        } else {
            state.unexpected += 1;
        }
    }

    /// Waits until every expected stream converged, at most `limit`.
    /// Returns whether they all did.
    pub async fn wait(&self, limit: Duration) -> bool {
        let mut rx = self.converged.subscribe();
        let expected = self.expected;
        tokio::time::timeout(limit, rx.wait_for(|n| *n >= expected)).await.is_ok_and(|r| r.is_ok())
    }

    /// Whether every expected stream converged.
    pub fn complete(&self) -> bool {
        *self.converged.borrow() >= self.expected
    }

    /// Whether stream `stream` has ACKed a response carrying the change.
    pub fn seen_by(&self, stream: u32) -> bool {
        self.state.lock().seen.contains(&stream)
    }

    /// The outcome so far.
    pub fn outcome(&self) -> ChangeOutcome {
        let state = self.state.lock();
        ChangeOutcome {
            label: self.label.clone(),
            expected: self.expected,
            latencies: state.latencies.clone(),
            streams: state.streams.clone(),
            unexpected: state.unexpected,
        }
    }
}

/// Active changes of one type by the name of the resource that carries them.
type ChangesByName = RwLock<HashMap<Box<str>, Vec<Arc<Change>>>>;

/// The changes streams look for, by type and resource name.
#[derive(Debug, Default)]
pub struct Tracker {
    active: [AtomicUsize; 4],
    by_name: [ChangesByName; 4],
}

impl Tracker {
    /// Starts looking for `change`.
    pub fn add(&self, change: Arc<Change>) {
        let t = change.xds_type as usize;
        self.by_name[t].write().entry(change.resource.as_str().into()).or_default().push(change);
        self.active[t].fetch_add(1, Ordering::Release);
    }

    /// Stops looking for `change`.
    pub fn retire(&self, change: &Arc<Change>) {
        let t = change.xds_type as usize;
        let mut map = self.by_name[t].write();
        if let Some(list) = map.get_mut(change.resource.as_str()) {
            let before = list.len();
            list.retain(|c| !Arc::ptr_eq(c, change));
            if list.len() < before {
                self.active[t].fetch_sub(1, Ordering::Release);
            }
            if list.is_empty() {
                map.remove(change.resource.as_str());
            }
        }
    }

    /// Adds to `out` every active change of type `t` that `resource` (named
    /// `name`) carries.
    pub fn carried(&self, t: XdsType, resource: &[u8], name: &str, out: &mut Vec<Arc<Change>>) {
        if self.active[t as usize].load(Ordering::Acquire) == 0 {
            return;
        }
        let map = self.by_name[t as usize].read();
        for key in [name, ""] {
            if let Some(list) = map.get(key) {
                out.extend(list.iter().filter(|c| c.carried_by(resource)).cloned());
            }
        }
    }
}
