//! `Connection`: one state-of-the-world ADS stream's protocol state.
//!
//! Owns, per resource type, what the client watches, what was sent (nonce,
//! version, and the hash of every resource), what was ACKed and the last
//! NACK. It is pure protocol logic: it takes requests and pushes, reads the
//! published snapshot and the cache, and returns responses to write. The
//! stream task (`xds::server`) owns one and does the I/O.
//!
//! Rules it keeps (docs/xds-protocol.md):
//! * a request whose nonce is not the latest sent for its type is stale and
//!   ignored; an ACK (latest nonce, same names) sends nothing;
//! * a NACK (`error_detail`) is recorded and logged once; the rejected
//!   content is not sent again, the next real change is;
//! * CDS and LDS responses carry the full set; EDS and RDS responses carry
//!   only what the client lacks or what changed; a CDS or LDS subscription
//!   by name that changed is always answered (what it lacks does not exist);
//! * make before break: a push sends CDS, EDS, LDS, RDS in that order;
//!   clusters that disappeared stay until the listeners and routes of the
//!   same push are ACKed, then a second CDS response drops them; a cluster
//!   that changed gets its ClusterLoadAssignment again even if that did not
//!   change, so Envoy's warming cluster does not wait for the fetch timeout.

use std::collections::HashSet;
use std::sync::Arc;

use super::codec::OutgoingResponse;
use super::request::SotwRequest;
use super::sent::{REBASE_AFTER, Sent, mix, sum_version};
use crate::model::Proxy;
use crate::push::{PendingPush, Scope};
use crate::resource::{EncodedResource, ResourceSet, TypeUrl};
use crate::xds::stream::connection::ConnectionCore;
use crate::xds::stream::published::Published;
use crate::xds::watch::name_list::{self, NameList, Resolved};
use crate::xds::watch::push_plan::Step;

/// One SotW ADS stream's protocol state: the core both protocols keep,
/// and what this stream sent of each type.
#[derive(Debug)]
pub struct Connection {
    /// Identity, watches, counters, placement and nonces.
    pub core: ConnectionCore,
    sent: [Sent; TypeUrl::COUNT],
    eds_resend: HashSet<Arc<str>>,
}

/// What a stream should hold of one type now.
enum Current {
    /// CDS and LDS: a whole set, usually the one shared by every proxy of
    /// the scope and workload shape.
    Set(Arc<ResourceSet>),
    /// EDS and RDS: the watched names' resources with their positions, for
    /// EDS shared by every stream that watches the same list.
    Watched(Arc<Resolved>),
}

impl Current {
    fn version(&self) -> &Arc<str> {
        match self {
            Current::Set(set) => &set.version,
            Current::Watched(resolved) => &resolved.version,
        }
    }
}

/// The resources of the watched `names` that `lookup` finds, their
/// positions, and the version of the whole list (the sum of their `mix`es).
fn resolve(names: &NameList, mut lookup: impl FnMut(&str) -> Option<Arc<EncodedResource>>) -> Resolved {
    let (mut resources, mut positions, mut sum) = (Vec::new(), Vec::new(), 0u64);
    for (i, n) in names.names().iter().enumerate() {
        if let Some(r) = lookup(n) {
            sum = sum.wrapping_add(mix(names.key(i), r.hash));
            resources.push(r);
            positions.push(i as u32);
        }
    }
    Resolved { resources, positions, version: sum_version(sum), sum }
}

impl Connection {
    /// A new stream for `proxy`.
    pub fn new(id: u64, proxy: Arc<Proxy>) -> Connection {
        Connection { core: ConnectionCore::new(id, proxy), sent: Default::default(), eds_resend: HashSet::new() }
    }

    /// Whether `req` is an ACK of the last response of `t`: its nonce, and
    /// the names the stream already watches.
    fn is_ack(&self, t: TypeUrl, req: &SotwRequest) -> bool {
        self.core.watches[t.index()].subscribed
            && self.core.is_latest_nonce(t, &req.response_nonce)
            && req.resource_names.hash() == self.sent[t.index()].names_hash
    }

    /// Handles one request; returns the responses to send, in order.
    pub fn on_request(&mut self, view: &Published<'_>, req: &SotwRequest) -> Vec<OutgoingResponse> {
        let Some(t) = TypeUrl::parse(&req.type_url) else {
            tracing::debug!(conn_id = self.core.id, type_url = %req.type_url, "request for a type meshpush does not serve");
            return Vec::new();
        };
        let is_latest_nonce = self.core.is_latest_nonce(t, &req.response_nonce);
        let stale = !req.response_nonce.is_empty() && !is_latest_nonce;

        if let Some(err) = &req.error_detail {
            if stale {
                self.core.record_stale();
                return Vec::new();
            }
            self.core.record_nack(t, &req.response_nonce, &req.version_info, &err.message);
            // The subscription may still have changed.
            return self.apply_names(view, t, req, false);
        }
        if stale {
            self.core.record_stale();
            return Vec::new();
        }
        if self.is_ack(t, req) {
            self.core.record_ack(t, Some(&req.version_info));
            return self.after_ack(view, t);
        }
        if is_latest_nonce {
            self.core.record_ack(t, Some(&req.version_info));
        }
        let reconnect = req.response_nonce.is_empty() && !req.version_info.is_empty();
        let mut out = self.apply_names(view, t, req, reconnect);
        out.extend(self.after_ack(view, t));
        out
    }

    /// Applies the request's names and answers what they call for.
    fn apply_names(
        &mut self,
        view: &Published<'_>,
        t: TypeUrl,
        req: &SotwRequest,
        reconnect: bool,
    ) -> Vec<OutgoingResponse> {
        let hash = req.resource_names.hash();
        let (w, sent) = (&mut self.core.watches[t.index()], &mut self.sent[t.index()]);
        let first = !w.subscribed;
        if !first && hash == sent.names_hash {
            return Vec::new();
        }
        sent.names_hash = hash;
        w.subscribed = true;
        let previous = std::mem::replace(&mut w.names, name_list::intern(hash, req.resource_names.iter()));
        if t.is_wildcard_type() {
            w.wildcard = w.names.has_star() || (req.resource_names.is_empty() && !sent.explicit_ever);
            if !w.names.is_empty() {
                sent.explicit_ever = true;
            }
        }
        if !t.is_wildcard_type() {
            sent.rewatch(&previous, &w.names);
        }
        if reconnect {
            // The client has this version: skip the response only when it is
            // provably the same content.
            let scope = self.core.refresh_scope(view.ctx);
            let current = self.current(view, &scope, t);
            let (w, sent) = (&mut self.core.watches[t.index()], &mut self.sent[t.index()]);
            if current.version().as_ref() == req.version_info {
                w.version_sent = Some(current.version().clone());
                w.version_acked = w.version_sent.clone();
                match current {
                    Current::Set(set) => sent.resources = set,
                    Current::Watched(resolved) => sent.rebase(resolved),
                }
                return Vec::new();
            }
        }
        // A named CDS or LDS subscription that changed is always answered:
        // the client (a gRPC one) learns that a name it added does not
        // exist from its absence in the answer, as xDS has it for these
        // types, instead of waiting out its timer.
        let named_set = t.is_wildcard_type() && !self.core.watches[t.index()].wildcard;
        self.respond(view, t, false, first || named_set).into_iter().collect()
    }

    /// Follow-ups once a response was ACKed: the delayed cluster removal,
    /// and assignments owed after a cluster change.
    fn after_ack(&mut self, view: &Published<'_>, t: TypeUrl) -> Vec<OutgoingResponse> {
        let mut out = Vec::new();
        if t == TypeUrl::Endpoint && !self.eds_resend.is_empty() {
            let watched = &self.core.watches[TypeUrl::Endpoint.index()].names;
            self.eds_resend.retain(|n| watched.contains(n));
        }
        if t == TypeUrl::Endpoint && !self.eds_resend.is_empty() {
            out.extend(self.respond(view, TypeUrl::Endpoint, false, false));
        }
        if self.core.take_cluster_cleanup() {
            out.extend(self.respond(view, TypeUrl::Cluster, true, false));
        }
        out
    }

    /// Handles a push from the engine; returns the responses, in push order.
    pub fn on_push(&mut self, view: &Published<'_>, push: &PendingPush) -> Vec<OutgoingResponse> {
        let mut out = Vec::new();
        for (t, step) in self.core.push_plan(view.ctx, push) {
            match step {
                Step::All => out.extend(self.respond(view, t, false, false)),
                Step::Hosts(hosts) => {
                    // Only the assignments of the changed hosts can differ.
                    let w = &self.core.watches[t.index()];
                    let positions: Vec<u32> = w.names.of_hosts(hosts.iter()).map(|(i, _)| i as u32).collect();
                    if !positions.is_empty() {
                        out.extend(self.respond_endpoints(view, &positions));
                    }
                }
            }
        }
        out
    }

    /// What the client should have of type `t` now, with its version.
    fn current(&mut self, view: &Published<'_>, scope: &Scope, t: TypeUrl) -> Current {
        let w = &self.core.watches[t.index()];
        let placement = self.core.placement();
        match t {
            TypeUrl::Cluster | TypeUrl::Listener => {
                let inbound = placement.inbound().expect("set with the scope");
                if w.wildcard {
                    return Current::Set(view.proxy_set(scope, inbound, t));
                }
                let named = view.named(scope, inbound, t, w.names.names().iter().map(|n| &**n));
                Current::Set(Arc::new(ResourceSet::new(named)))
            }
            TypeUrl::Endpoint => {
                // Streams watching the same list share one resolution (and
                // its version) per snapshot.
                let eds_view = placement.view();
                let key = eds_view.map_or("", |v| &*v.key);
                Current::Watched(
                    w.names.endpoints(view.ctx.id, key, |names| {
                        resolve(names, |n| view.endpoint(n, eds_view.map(|v| &**v)))
                    }),
                )
            }
            TypeUrl::Route | TypeUrl::Secret | TypeUrl::ExtensionConfig => {
                let set = view.scoped(scope, t);
                Current::Watched(Arc::new(resolve(&w.names, |n| set.get(n).cloned())))
            }
            // ztunnel's types over SotW (istiod serves them so too): the
            // whole set, or the names asked for.
            TypeUrl::Address | TypeUrl::Authorization => {
                let set = view.scoped(scope, t);
                if w.wildcard {
                    return Current::Set(set);
                }
                Current::Watched(Arc::new(resolve(&w.names, |n| set.get(n).cloned())))
            }
            // The agent asks for the one unnamed resource, as a wildcard.
            TypeUrl::ProxyConfig => Current::Set(view.scoped(scope, t)),
        }
    }

    /// An endpoint push: looks up only the watched assignments at
    /// `positions` (those of the changed hosts), sends those that differ
    /// from what the client has, and moves the version by their difference —
    /// O(changed), however many clusters the stream watches.
    fn respond_endpoints(&mut self, view: &Published<'_>, positions: &[u32]) -> Option<OutgoingResponse> {
        let t = TypeUrl::Endpoint;
        let mut changed: Vec<Arc<EncodedResource>> = Vec::new();
        let (w, sent) = (&self.core.watches[t.index()], &mut self.sent[t.index()]);
        let eds_view = self.core.placement().view().map(|v| &**v);
        for &i in positions {
            let i = i as usize;
            match view.endpoint(&w.names.names()[i], eds_view) {
                Some(r) => {
                    if sent.sent_hash(i) != Some(r.hash) || self.eds_resend.contains(&r.name) {
                        sent.record(&w.names, i, Some(r.hash));
                        changed.push(r);
                    }
                }
                None => sent.record(&w.names, i, None),
            }
        }
        let version = sum_version(sent.sum);
        if sent.changes() > REBASE_AFTER {
            // Pushes pile changes on the base; once the client holds the
            // list's current resolution (shared with the streams watching
            // the same list), that becomes the base and the changes go.
            let key = eds_view.map_or("", |v| &*v.key);
            let current = w.names.endpoints(view.ctx.id, key, |names| resolve(names, |n| view.endpoint(n, eds_view)));
            if sent.holds(&current) {
                sent.rebase(current);
            }
        }
        if changed.is_empty() {
            return None;
        }
        if !self.eds_resend.is_empty() {
            for r in &changed {
                self.eds_resend.remove(&r.name);
            }
        }
        let body = super::codec::body(view, t, &version, &changed, true);
        let nonce = self.core.record_sent(t, version);
        Some(OutgoingResponse { body, nonce })
    }

    /// Builds the response for `t` if the client lacks anything; records it as sent.
    /// `final_cleanup` sends CDS without the clusters kept for make-before-break.
    fn respond(
        &mut self,
        view: &Published<'_>,
        t: TypeUrl,
        final_cleanup: bool,
        first: bool,
    ) -> Option<OutgoingResponse> {
        let scope = self.core.refresh_scope(view.ctx);
        let current = self.current(view, &scope, t);
        let (body, version) = match current {
            Current::Set(mut set) => {
                let (w, sent) = (&self.core.watches[t.index()], &self.sent[t.index()]);
                if !first
                    && !final_cleanup
                    && w.version_sent.as_ref() == Some(&set.version)
                    && !sent.resources.resources.is_empty()
                {
                    return None;
                }
                if t == TypeUrl::Cluster && !final_cleanup && !first {
                    // Make before break: keep clusters the client still has
                    // until the listeners and routes of this push are ACKed.
                    let kept: Vec<&Arc<EncodedResource>> =
                        sent.resources.resources.iter().filter(|old| set.get(&old.name).is_none()).collect();
                    if !kept.is_empty() {
                        let mut resources = set.resources.clone();
                        resources.extend(kept.into_iter().cloned());
                        set = Arc::new(ResourceSet::new(resources));
                        self.core.hold_removed_clusters();
                    }
                }
                if t == TypeUrl::Cluster {
                    // Every cluster that changed needs its assignment again, even an
                    // unchanged one the client holds (one it lacks is sent anyway).
                    let clusters = &self.sent[t.index()];
                    let (watched, endpoints) =
                        (&self.core.watches[TypeUrl::Endpoint.index()].names, &self.sent[TypeUrl::Endpoint.index()]);
                    if endpoints.holds_any() {
                        for r in &set.resources {
                            if clusters.resource_hash(&r.name) != Some(r.hash)
                                && endpoints.hash(watched, &r.name).is_some()
                            {
                                self.eds_resend.insert(r.name.clone());
                            }
                        }
                    }
                }
                let body = super::codec::body(view, t, &set.version, &set.resources, false);
                let version = set.version.clone();
                self.sent[t.index()].resources = set;
                (body, version)
            }
            Current::Watched(resolved) => {
                let sent = &self.sent[t.index()];
                let resend = |r: &EncodedResource| t == TypeUrl::Endpoint && self.eds_resend.contains(&r.name);
                // Indices into `resolved` of what the client lacks (none
                // when it holds this very resolution, the usual case).
                let changed: Vec<usize> = if sent.is_based_on(&resolved) && self.eds_resend.is_empty() {
                    Vec::new()
                } else {
                    (0..resolved.resources.len())
                        .filter(|&k| {
                            let r = &resolved.resources[k];
                            sent.sent_hash(resolved.positions[k] as usize) != Some(r.hash) || resend(r)
                        })
                        .collect()
                };
                if changed.is_empty() && !first {
                    // It holds all of it: this resolution becomes its base.
                    self.sent[t.index()].rebase(resolved);
                    return None;
                }
                let partial = changed.len() != resolved.resources.len();
                let subset: Vec<Arc<EncodedResource>>;
                let out: &[Arc<EncodedResource>] = if partial {
                    subset = changed.iter().map(|&k| resolved.resources[k].clone()).collect();
                    &subset
                } else {
                    &resolved.resources
                };
                // (A removal hashes the name even from an empty set.)
                if t == TypeUrl::Endpoint && !self.eds_resend.is_empty() {
                    for r in out {
                        self.eds_resend.remove(&r.name);
                    }
                }
                let body = super::codec::body(view, t, &resolved.version, out, partial);
                let version = resolved.version.clone();
                // The client now holds the whole resolution, shared with
                // every stream that holds it too.
                self.sent[t.index()].rebase(resolved);
                (body, version)
            }
        };
        let nonce = self.core.record_sent(t, version);
        Some(OutgoingResponse { body, nonce })
    }
}

#[cfg(test)]
mod test;
