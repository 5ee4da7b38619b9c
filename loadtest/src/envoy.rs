//! What a simulated Envoy does alike on either protocol: Envoy's
//! initialization order, the name lists it watches, and the sync and change
//! bookkeeping. The SotW ([`crate::sotw`]) and delta ([`crate::delta`])
//! simulators differ only in what they put on the wire and read off it.
//!
//! Envoy 1.40 initializes in one order whatever its `api_type`: CDS
//! wildcard first; clusters warm until every EDS cluster has its endpoints
//! (or `initial_fetch_timeout`, 15 s, passed); then LDS wildcard; listeners
//! warm until their route configurations arrive. Invariants kept here:
//!
//! * a stream counts in [`SyncState`] once, when CDS and LDS are ACKed and
//!   every watched EDS and RDS name was received at least once;
//! * every EDS and RDS list a stream watches is an interned [`NameSet`]
//!   whose watcher count includes the stream (until the stream ends), so a
//!   change's expected streams ([`NameSets::watchers`]) are counted alike for
//!   both protocols;
//! * a tracked change reaches a stream when the stream has sent the ACK of
//!   a response carrying it: simulators hand every received resource to
//!   [`Envoy::look`] and call [`Envoy::settle`] once the ACK is queued.
//!
//! [`NameSets::watchers`]: crate::track::NameSets::watchers

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::fleet::{Identity, NodeSending, Protocol, Shared};
use crate::held::{Held, Incoming};
use crate::track::{Change, NameSet, XdsType};
use crate::wire;

/// Envoy's `initial_fetch_timeout`: how long it waits for a cluster's
/// endpoints before it initializes without them and asks for listeners.
const INITIAL_FETCH_TIMEOUT: Duration = Duration::from_secs(15);

/// Per-name "received at least once" marks for a watched list, until synced.
#[derive(Debug, Default)]
struct Received {
    marks: Vec<bool>,
    missing: usize,
}

impl Received {
    /// Nothing of `set` received yet.
    fn reset(&mut self, set: &NameSet) {
        self.marks = vec![false; set.len()];
        self.missing = set.len();
    }

    /// Moves the marks from `old` (the list they are for) to `set`: names in
    /// both stay received.
    fn rebase(&mut self, old: Option<&NameSet>, set: &NameSet) {
        let was = |name: &str| {
            old.and_then(|old| old.position(name)).and_then(|i| self.marks.get(i as usize).copied()).unwrap_or(false)
        };
        let marks: Vec<bool> = set.names.iter().map(|name| was(name)).collect();
        self.missing = marks.iter().filter(|seen| !**seen).count();
        self.marks = marks;
    }

    fn mark(&mut self, set: &NameSet, name: &str) {
        if let Some(i) = set.position(name)
            && let Some(seen) = self.marks.get_mut(i as usize)
            && !*seen
        {
            *seen = true;
            self.missing -= 1;
        }
    }
}

/// One watched list (EDS or RDS) and what of it was received.
#[derive(Debug, Default)]
struct Watched {
    set: Option<Arc<NameSet>>,
    received: Received,
}

/// One simulated Envoy's state, whatever its protocol.
#[derive(Debug)]
pub(crate) struct Envoy {
    pub(crate) identity: Identity,
    pub(crate) shared: Arc<Shared>,
    /// The node, encoded as the protocol's request field.
    node: wire::EncodedNode,
    /// Whether a request of this stream carried the node already.
    node_sent: bool,
    protocol: Protocol,
    tx: mpsc::Sender<wire::Request>,
    eds: Watched,
    rds: Watched,
    cds_acked: bool,
    lds_requested: bool,
    lds_acked: bool,
    lds_deadline: Option<Instant>,
    synced: bool,
    carried: Vec<Arc<Change>>,
    /// What it holds of each type (delta always: its versions go back to a
    /// new server; SotW only when the run measures resends).
    held: [Option<Arc<Held>>; 4],
}

impl Envoy {
    /// A new stream's state; requests go into `tx`.
    pub(crate) fn new(
        identity: Identity,
        shared: Arc<Shared>,
        tx: mpsc::Sender<wire::Request>,
        protocol: Protocol,
    ) -> Envoy {
        let node = wire::EncodedNode::new(protocol.node_field(), &identity.node, &shared.node_common);
        Envoy {
            identity,
            shared,
            node,
            node_sent: false,
            protocol,
            tx,
            eds: Watched::default(),
            rds: Watched::default(),
            cds_acked: false,
            lds_requested: false,
            lds_acked: false,
            lds_deadline: None,
            synced: false,
            carried: Vec::new(),
            held: Default::default(),
        }
    }

    /// A new stream replaces the one that ended: requests go into `tx`, and
    /// its first request carries the node again. Everything held, watched
    /// and synced stays, as in an Envoy whose xDS stream was cut.
    pub(crate) fn attach(&mut self, tx: mpsc::Sender<wire::Request>) {
        self.tx = tx;
        self.node_sent = false;
    }

    /// Whether the stream has subscribed to `t`: CDS from the start, LDS
    /// once requested, EDS and RDS once something named a resource of them.
    pub(crate) fn subscribed(&self, t: XdsType) -> bool {
        match t {
            XdsType::Cluster => true,
            XdsType::Listener => self.lds_requested,
            XdsType::Endpoint | XdsType::Route => self.watched(t).is_some_and(|set| !set.is_empty()),
        }
    }

    /// What it holds of `t`.
    pub(crate) fn held(&self, t: XdsType) -> Option<&Arc<Held>> {
        self.held[t as usize].as_ref()
    }

    /// The received resources of a response of `t` as held entries, sorted
    /// by name, counting (when the run measures resends) each one already
    /// held with the same content. `resources` are `(name, version, value)`.
    pub(crate) fn received<'a>(
        &self,
        t: XdsType,
        resources: impl Iterator<Item = (&'a str, &'a str, &'a [u8])>,
    ) -> Vec<Incoming<'a>> {
        let measure = self.shared.measure_resends;
        let held = self.held(t);
        let mut unchanged = 0;
        let mut list: Vec<Incoming<'a>> = resources
            .map(|(name, version, value)| {
                let content = if measure { xxhash_rust::xxh3::xxh3_64(value) } else { 0 };
                if measure && held.and_then(|h| h.content(name)) == Some(content) {
                    unchanged += 1;
                }
                Incoming { name, version, content }
            })
            .collect();
        if measure {
            let stats = &self.shared.stats;
            stats.resources[t as usize].fetch_add(list.len() as u64, Ordering::Relaxed);
            stats.unchanged[t as usize].fetch_add(unchanged, Ordering::Relaxed);
        }
        list.sort_unstable_by(|a, b| a.name.cmp(b.name));
        list
    }

    /// Records what it holds of `t` now (from [`HeldTable::apply`]).
    ///
    /// [`HeldTable::apply`]: crate::held::HeldTable::apply
    pub(crate) fn set_held(&mut self, t: XdsType, held: Arc<Held>) {
        self.held[t as usize] = Some(held);
    }

    /// The node for the request about to be built: the whole node on the
    /// stream's first request (and on every one with
    /// [`NodeSending::EveryRequest`]), none after it.
    pub(crate) fn node_for_request(&mut self) -> wire::EncodedNode {
        if self.node_sent && self.shared.node_sending == NodeSending::FirstRequest {
            return wire::EncodedNode::absent();
        }
        self.node_sent = true;
        self.node.clone()
    }

    /// Queues a request.
    pub(crate) async fn send(&mut self, request: wire::Request) {
        self.shared.stats.requests.fetch_add(1, Ordering::Relaxed);
        // A closed channel means the stream is gone; the response loop sees that too.
        let _ = self.tx.send(request).await;
    }

    /// The first request of a wildcard type (CDS, LDS): no names, no nonce
    /// (in delta, Envoy's "legacy wildcard": both name lists empty).
    pub(crate) fn wildcard(&mut self, t: XdsType) -> wire::Request {
        let node = self.node_for_request();
        match self.protocol {
            Protocol::Sotw => wire::encode_request(&node, &Bytes::new(), t.url(), "", ""),
            Protocol::Delta => wire::encode_delta_request::<&str>(&node, t.url(), &Bytes::new(), &[], ""),
        }
    }

    /// Counts a received message of `bytes` bytes and `type_url`; returns
    /// its type, if it is one of the four.
    pub(crate) fn count(&self, bytes: usize, type_url: &str) -> Option<XdsType> {
        let stats = &self.shared.stats;
        stats.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        let t = XdsType::from_url(type_url)?;
        stats.responses[t as usize].fetch_add(1, Ordering::Relaxed);
        Some(t)
    }

    /// Looks for tracked changes in a received resource of type `t` named `name`.
    pub(crate) fn look(&mut self, t: XdsType, resource: &[u8], name: &str) {
        self.shared.tracker.carried(t, resource, name, &mut self.carried);
    }

    /// The list of `t` (EDS or RDS) watched now.
    pub(crate) fn watched(&self, t: XdsType) -> Option<&Arc<NameSet>> {
        self.watch_of(t).and_then(|w| w.set.as_ref())
    }

    /// Watches `set` for `t` (EDS or RDS) instead of the list before, which
    /// it returns. While the type is still warming (EDS: until LDS is
    /// requested; RDS: until synced), names of `set` must be received: a
    /// SotW server answers a new list with every name in it, so all of
    /// them; a delta server only with the names added, so names already
    /// received stay received.
    pub(crate) fn watch(&mut self, t: XdsType, set: Arc<NameSet>) -> Option<Arc<NameSet>> {
        let warming = match t {
            XdsType::Endpoint => !self.lds_requested,
            _ => !self.synced,
        };
        let (protocol, shared) = (self.protocol, self.shared.clone());
        let watched = self.watch_of_mut(t)?;
        shared.names.switch(watched.set.as_ref(), &set);
        if warming {
            match protocol {
                Protocol::Sotw => watched.received.reset(&set),
                Protocol::Delta => watched.received.rebase(watched.set.as_deref(), &set),
            }
        }
        watched.set.replace(set)
    }

    /// Records `name` of `t` (EDS or RDS) as received, until synced.
    pub(crate) fn mark(&mut self, t: XdsType, name: &str) {
        if self.synced {
            return;
        }
        if let Some(Watched { set: Some(set), received }) = self.watch_of_mut(t) {
            received.mark(set, name);
        }
    }

    /// Whether marks still matter.
    pub(crate) fn synced(&self) -> bool {
        self.synced
    }

    fn watch_of(&self, t: XdsType) -> Option<&Watched> {
        match t {
            XdsType::Endpoint => Some(&self.eds),
            XdsType::Route => Some(&self.rds),
            XdsType::Cluster | XdsType::Listener => None,
        }
    }

    fn watch_of_mut(&mut self, t: XdsType) -> Option<&mut Watched> {
        match t {
            XdsType::Endpoint => Some(&mut self.eds),
            XdsType::Route => Some(&mut self.rds),
            XdsType::Cluster | XdsType::Listener => None,
        }
    }

    /// The response of a wildcard type (CDS or LDS) was ACKed. After CDS,
    /// Envoy waits for endpoints at most its `initial_fetch_timeout` before
    /// it asks for listeners.
    pub(crate) fn acked(&mut self, t: XdsType) {
        if t == XdsType::Cluster {
            self.cds_acked = true;
            if !self.lds_requested && self.lds_deadline.is_none() {
                self.lds_deadline = Some(Instant::now() + INITIAL_FETCH_TIMEOUT);
            }
        } else {
            self.lds_acked = true;
        }
    }

    /// When clusters stop warming without their endpoints, if they are warming.
    pub(crate) fn lds_deadline(&self) -> Option<Instant> {
        self.lds_deadline
    }

    /// The first LDS request: after cluster warming, as Envoy's init manager orders it.
    pub(crate) async fn request_listeners(&mut self) {
        self.lds_deadline = None;
        if !self.lds_requested {
            self.lds_requested = true;
            let request = self.wildcard(XdsType::Listener);
            self.send(request).await;
        }
    }

    /// After a response was handled and ACKed: records the changes it
    /// carried, asks for listeners once clusters are warm, and counts the
    /// stream synced once everything watched was received.
    pub(crate) async fn settle(&mut self) {
        if !self.carried.is_empty() {
            let acked = Instant::now();
            for change in self.carried.drain(..) {
                change.record(self.identity.id, self.identity.namespace, acked);
            }
        }
        if !self.lds_requested && self.cds_acked && self.eds.received.missing == 0 {
            self.request_listeners().await;
        }
        if !self.synced && self.lds_acked && self.eds.received.missing == 0 && self.rds.received.missing == 0 {
            self.synced = true;
            self.shared.sync.record(self.identity.id);
        }
    }
}

impl Drop for Envoy {
    /// The stream's watches end with it.
    fn drop(&mut self) {
        for set in [self.eds.set.take(), self.rds.set.take()].into_iter().flatten() {
            self.shared.names.release(&set);
        }
    }
}

/// One protocol's simulator: what a stream says on the wire, around the
/// [`Envoy`] state both protocols keep. The stream task (`ads::run_stream`)
/// drives it.
pub(crate) trait Sim: Send + Sized {
    /// Its protocol.
    const PROTOCOL: Protocol;
    /// A simulator around a new stream's state.
    fn new(envoy: Envoy) -> Self;
    /// The stream's state.
    fn envoy(&mut self) -> &mut Envoy;
    /// Handles one response message: ACKs it, follows up with subscriptions,
    /// then [`Envoy::settle`].
    fn on_response(&mut self, message: Bytes) -> impl Future<Output = ()> + Send;
    /// Queues what Envoy sends first on a new stream after one ended (the
    /// stream is [`Envoy::attach`]ed already): one request per subscribed
    /// type, saying what it holds.
    fn reconnect(&mut self) -> impl Future<Output = ()> + Send;
}
