//! `DeltaConnection`: one incremental (delta) ADS stream's protocol state.
//!
//! The delta twin of the SotW `Connection` (`xds::sotw`), served
//! by the same stream task, push queue slot, scopes and cache. Per type it
//! owns what the client subscribed (names, or wildcard) and what the client
//! *has*: resource name → version, where a version is the content hash the
//! resource cache already keeps. It learns what the client has from what it
//! sent, and on a reconnect from `initial_resource_versions`.
//!
//! Rules it keeps (docs/xds-protocol.md, "Delta"):
//! * a response carries exactly the resources whose hash differs from what
//!   the client has, and in `removed_resources` the names the client has
//!   that no longer exist (a wildcard type: any; a named type: those it
//!   subscribed) — plus, at once, newly subscribed names that do not exist;
//! * subscribe and unsubscribe apply even on a stale nonce; a pure
//!   unsubscribe is not answered; wildcard is `*`, or a first request of a
//!   type with both lists empty;
//! * an ACK (latest nonce, no `error_detail`) is recorded; a NACK is
//!   recorded and logged once, and since the client's versions are taken
//!   from what was sent, the rejected content is not sent again — the next
//!   real change is;
//! * make before break, as in SotW: a push sends CDS, EDS, LDS, RDS; a
//!   cluster that changed gets its ClusterLoadAssignment again even if that
//!   did not change; clusters that disappeared are removed only once the
//!   listeners and routes of the push are settled.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use super::codec::{self, DeltaResponse};
use super::held::Held;
use super::request::DeltaRequest;
use crate::model::{Hostname, Proxy};
use crate::push::{PendingPush, Scope};
use crate::resource::{EncodedResource, TypeUrl};
use crate::xds::stream::connection::ConnectionCore;
use crate::xds::stream::published::Published;
use crate::xds::watch::push_plan::Step;

/// Why a response is being built.
#[derive(Debug, Clone, Copy)]
enum Reason<'a> {
    /// A request: answer even with nothing when `first` (the client waits
    /// for its first response of a type).
    Request { first: bool },
    /// A push; `hosts` limits an endpoint-only push to assignments of those hosts.
    Push { hosts: Option<&'a HashSet<Hostname>> },
    /// The delayed removal of clusters, once listeners and routes settled.
    ClusterCleanup,
}

/// Whether assignment `name` is within an endpoint push's `hosts` (any, for
/// a full push).
fn in_reach(name: &str, hosts: Option<&HashSet<Hostname>>) -> bool {
    hosts.is_none_or(|hosts| crate::generate::eds::host_of(name).is_some_and(|h| hosts.contains(h)))
}

/// One delta ADS stream's protocol state: the core both protocols keep
/// (its watches are the same records SotW keeps, so status and metrics
/// read both alike; `version_sent` is the `system_version_info` of the
/// last response), and what the client holds of each type.
#[derive(Debug)]
pub struct DeltaConnection {
    /// Identity, watches, counters, placement and nonces.
    pub core: ConnectionCore,
    held: [Held; TypeUrl::COUNT],
}

impl DeltaConnection {
    /// A new stream for `proxy`.
    pub fn new(id: u64, proxy: Arc<Proxy>) -> DeltaConnection {
        DeltaConnection { core: ConnectionCore::new(id, proxy), held: Default::default() }
    }

    /// Names and versions the client holds of type `t`, as this stream believes.
    pub fn held(&self, t: TypeUrl) -> impl Iterator<Item = (&str, Option<u64>)> {
        self.held[t.index()].iter().map(|(n, h)| (&**n, h))
    }

    /// Handles one request; returns the responses to send, in order.
    pub fn on_request(&mut self, view: &Published<'_>, req: &DeltaRequest) -> Vec<DeltaResponse> {
        let Some(t) = TypeUrl::parse(&req.type_url) else {
            tracing::debug!(conn_id = self.core.id, type_url = %req.type_url, "delta request for a type meshpush does not serve");
            return Vec::new();
        };
        let first = !self.core.watches[t.index()].subscribed;
        let mut acked = false;
        if !req.response_nonce.is_empty() {
            if !self.core.is_latest_nonce(t, &req.response_nonce) {
                // Stale: the (N)ACK is for an older response; the
                // subscription changes below still apply.
                self.core.record_stale();
            } else if let Some(err) = &req.error_detail {
                let kept = self.core.watches[t.index()].version_acked.clone();
                self.core.record_nack(t, &req.response_nonce, kept.as_deref().unwrap_or_default(), &err.message);
            } else {
                self.core.record_ack(t, None);
                acked = true;
            }
        }

        // Subscription changes.
        let (w, held) = (&mut self.core.watches[t.index()], &mut self.held[t.index()]);
        let mut announce: Vec<Arc<str>> = Vec::new();
        let mut wildcard_added = false;
        if first {
            w.subscribed = true;
            if req.resource_names_subscribe.is_empty() && req.resource_names_unsubscribe.is_empty() {
                w.wildcard = true; // the legacy wildcard
                wildcard_added = true;
            }
            *held = Held::from_versions(
                req.initial_resource_versions
                    .iter()
                    .map(|(n, v)| (Arc::from(n.as_str()), codec::parse_resource_version(v))),
            );
        }
        let mut subscribe: Vec<&str> = Vec::new();
        let mut seen: HashSet<&str> = HashSet::new();
        // ztunnel asks again for a key only when its lookup missed: answer.
        let again = |n: &str| t.is_workload_api() && !first && !req.resource_names_subscribe.is_empty() && n != "*";
        for n in &req.resource_names_subscribe {
            if n == "*" {
                wildcard_added |= !w.wildcard;
                w.wildcard = true;
            } else if first || ((!w.names.contains(n) || again(n)) && seen.insert(n)) {
                subscribe.push(n);
                let n: Arc<str> = Arc::from(n.as_str());
                if !first {
                    // The client asks anew: whatever it had, it gets.
                    held.remove(&n);
                }
                announce.push(n);
            }
        }
        let unsubscribe: Vec<&str> = req.resource_names_unsubscribe.iter().map(String::as_str).collect();
        let wildcard_after = w.wildcard && !unsubscribe.contains(&"*");
        if first && !wildcard_after {
            // What a client reports holding it is subscribed to, as istiod
            // takes it (an on-demand ztunnel reconnecting names nothing else).
            subscribe.extend(req.initial_resource_versions.keys().map(String::as_str));
        }
        if !subscribe.is_empty() || !unsubscribe.is_empty() {
            w.names = w.names.edit(&subscribe, &unsubscribe);
        }
        for n in &req.resource_names_unsubscribe {
            if n == "*" {
                w.wildcard = false;
                let names = &w.names;
                held.retain(|h| names.contains(h));
            } else if !w.wildcard {
                // The client drops it; nothing to tell it.
                held.remove(n.as_str());
            }
        }

        let mut out = Vec::new();
        if first || wildcard_added || !announce.is_empty() {
            out.extend(self.respond(view, t, Reason::Request { first }, &announce));
        }
        if acked {
            out.extend(self.after_ack(view));
        }
        out
    }

    /// Follow-ups once a response was ACKed: the delayed cluster removal.
    fn after_ack(&mut self, view: &Published<'_>) -> Vec<DeltaResponse> {
        if self.core.take_cluster_cleanup() {
            return self.respond(view, TypeUrl::Cluster, Reason::ClusterCleanup, &[]).into_iter().collect();
        }
        Vec::new()
    }

    /// Handles a push from the engine; returns the responses, in push order.
    pub fn on_push(&mut self, view: &Published<'_>, push: &PendingPush) -> Vec<DeltaResponse> {
        let mut out = Vec::new();
        for (t, step) in self.core.push_plan(view.ctx, push) {
            let hosts = match step {
                Step::All => None,
                Step::Hosts(hosts) => Some(hosts),
            };
            out.extend(self.respond(view, t, Reason::Push { hosts }, &[]));
        }
        // Nothing outstanding (e.g. only removals were due): remove now.
        out.extend(self.after_ack(view));
        out
    }

    /// What the client should have of type `t` now, sorted by name;
    /// `hosts` limits assignments to those hosts.
    fn current(
        &self,
        view: &Published<'_>,
        scope: &Scope,
        t: TypeUrl,
        hosts: Option<&HashSet<Hostname>>,
    ) -> Vec<Arc<EncodedResource>> {
        let w = &self.core.watches[t.index()];
        let mut resources: Vec<Arc<EncodedResource>> = match t {
            TypeUrl::Cluster | TypeUrl::Listener => {
                let inbound = self.core.placement().inbound().expect("set with the scope");
                if w.wildcard {
                    view.proxy_set(scope, inbound, t).resources.clone()
                } else {
                    view.named(scope, inbound, t, w.names.names().iter().map(|n| &**n))
                }
            }
            TypeUrl::Address if !w.wildcard => self.on_demand_addresses(view, scope),
            TypeUrl::Route
            | TypeUrl::Secret
            | TypeUrl::ProxyConfig
            | TypeUrl::ExtensionConfig
            | TypeUrl::Address
            | TypeUrl::Authorization => {
                let set = view.scoped(scope, t);
                if w.wildcard {
                    set.resources.clone()
                } else {
                    w.names.names().iter().filter_map(|n| set.get(n).cloned()).collect()
                }
            }
            TypeUrl::Endpoint => {
                // An endpoint push looks only at the changed hosts' names.
                let mut names: BTreeSet<&str> = match hosts {
                    Some(hosts) => w.names.of_hosts(hosts).map(|(_, n)| &**n).collect(),
                    None => w.names.names().iter().map(|n| &**n).collect(),
                };
                let clusters;
                if w.wildcard {
                    clusters = view.scoped(scope, TypeUrl::Cluster);
                    names.extend(clusters.resources.iter().map(|r| &*r.name).filter(|n| in_reach(n, hosts)));
                }
                let eds_view = self.core.placement().view().map(|v| &**v);
                names.into_iter().filter_map(|n| view.endpoint(n, eds_view)).collect()
            }
        };
        resources.sort_by(|a, b| a.name.cmp(&b.name));
        resources.dedup_by(|a, b| a.name == b.name);
        resources
    }

    /// What an on-demand ztunnel should have (`push::index::ambient::lookup`):
    /// what each key it subscribed resolves to, what it was sent before
    /// (its subscriptions grow with that, as istiod's do), and the
    /// workloads on its node.
    fn on_demand_addresses(&self, view: &Published<'_>, scope: &Scope) -> Vec<Arc<EncodedResource>> {
        let set = view.scoped(scope, TypeUrl::Address);
        let keys = &view.ctx.ambient().keys;
        let mut out = Vec::new();
        let mut add = |name: &str| out.extend(set.get(name).cloned());
        for key in self.core.watches[TypeUrl::Address.index()].names.names() {
            add(key);
            keys.resolve(key).into_iter().for_each(|n| add(n));
        }
        self.held[TypeUrl::Address.index()].names().for_each(|n| add(n));
        if let Some(node) = self.core.proxy.metadata.get("NODE_NAME").filter(|n| !n.is_empty()) {
            keys.on_node(node).iter().for_each(|n| add(n));
        }
        out
    }

    /// Builds the response for `t` if the client lacks anything or holds
    /// something gone; records what the client now holds. `announce` are
    /// newly subscribed names: those that do not exist are removed at once.
    fn respond(
        &mut self,
        view: &Published<'_>,
        t: TypeUrl,
        reason: Reason<'_>,
        announce: &[Arc<str>],
    ) -> Option<DeltaResponse> {
        let scope = self.core.refresh_scope(view.ctx);
        let hosts = match reason {
            Reason::Push { hosts } if t == TypeUrl::Endpoint => hosts,
            _ => None,
        };
        let current = self.current(view, &scope, t, hosts);
        let exists = |n: &str| current.binary_search_by(|r| (*r.name).cmp(n)).is_ok();
        let held = &self.held[t.index()];
        let changed = held.differing(&current);
        let w = &self.core.watches[t.index()];
        let mut removed: Vec<Arc<str>> = match hosts {
            // An endpoint push: only the changed hosts' assignments can be gone.
            Some(hosts) if !w.wildcard => {
                w.names.of_hosts(hosts).map(|(_, n)| n).filter(|n| held.contains(n) && !exists(n)).cloned().collect()
            }
            _ => held.names().filter(|n| in_reach(n, hosts) && !exists(n)).cloned().collect(),
        };
        if t == TypeUrl::Endpoint {
            // An assignment goes with its cluster, which may be kept a while
            // (make before break): Envoy unsubscribes when the cluster goes.
            let clusters = &self.held[TypeUrl::Cluster.index()];
            removed.retain(|n| !clusters.contains(n));
        }
        if t == TypeUrl::Cluster && matches!(reason, Reason::Push { .. }) && !removed.is_empty() {
            // Make before break: remove once listeners and routes settled.
            self.core.hold_removed_clusters();
            removed.clear();
        }
        removed.extend(announce.iter().filter(|n| !exists(n) && !held.contains(n)).cloned());
        removed.sort();
        removed.dedup();
        let first = matches!(reason, Reason::Request { first: true });
        if changed.is_empty() && removed.is_empty() && !(first && held.is_empty()) {
            return None;
        }

        self.held[t.index()].record(&changed, &removed);
        if t == TypeUrl::Cluster {
            // A changed cluster warms again until its assignment arrives:
            // forget the assignment so the EDS step sends it even if unchanged.
            let endpoints = &mut self.held[TypeUrl::Endpoint.index()];
            if !endpoints.is_empty() {
                let names: Vec<Arc<str>> = changed.iter().map(|r| r.name.clone()).collect();
                endpoints.record(&[], &names);
            }
        }

        let system_version: Arc<str> = Arc::from(format!("{:x}", view.ctx.version));
        let which = {
            let mut h = xxhash_rust::xxh3::Xxh3::new();
            for r in &changed {
                h.update(r.name.as_bytes());
                h.update(&r.hash.to_le_bytes());
            }
            h.update(&[0xff]);
            for n in &removed {
                h.update(n.as_bytes());
                h.update(&[0]);
            }
            h.digest()
        };
        let tail_len = codec::tail_len(&removed);
        let body = view.body((t, Arc::from(format!("delta:{system_version}")), which), || {
            codec::assemble(t, &system_version, &changed, tail_len)
        });
        let nonce = self.core.record_sent(t, system_version);
        let tail = codec::tail(nonce, &removed);
        Some(DeltaResponse { body, tail })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryResponse;
    use prost::Message;

    use super::*;
    use crate::testing::bookinfo::{self, engine};
    use crate::xds::stream::bodies::BodyCache;

    const REVIEWS_V1: &str = "outbound|9080|v1|reviews.default.svc.cluster.local";

    fn connection(id: u64) -> DeltaConnection {
        DeltaConnection::new(id, Arc::new(bookinfo::productpage()))
    }

    fn decoded(r: &DeltaResponse) -> DeltaDiscoveryResponse {
        DeltaDiscoveryResponse::decode(&r.message_bytes()[..]).expect("a DeltaDiscoveryResponse")
    }

    #[tokio::test]
    async fn what_the_client_holds_is_what_was_sent_and_unknown_names_are_removed_at_once() {
        let (engine, bodies) = (engine().await, BodyCache::new());
        let ctx = engine.snapshot();
        let view = Published { ctx: &ctx, cache: engine.cache(), bodies: &bodies };
        let mut conn = connection(1);
        let subscribe = DeltaRequest {
            type_url: TypeUrl::Endpoint.as_str().into(),
            resource_names_subscribe: vec![REVIEWS_V1.into(), "outbound|1||nowhere.default.svc.cluster.local".into()],
            ..Default::default()
        };
        let sent = decoded(&conn.on_request(&view, &subscribe)[0]);
        assert_eq!(sent.resources.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), vec![REVIEWS_V1]);
        assert_eq!(sent.removed_resources, vec!["outbound|1||nowhere.default.svc.cluster.local"]);
        let held: Vec<(&str, Option<u64>)> = conn.held(TypeUrl::Endpoint).collect();
        let version = codec::parse_resource_version(&sent.resources[0].version);
        assert_eq!(held, vec![(REVIEWS_V1, version)], "the client holds what it was sent, under its version");
    }

    #[tokio::test]
    async fn a_reconnect_is_sent_only_what_differs_from_its_initial_versions() {
        let (engine, bodies) = (engine().await, BodyCache::new());
        let ctx = engine.snapshot();
        let view = Published { ctx: &ctx, cache: engine.cache(), bodies: &bodies };
        let wildcard = DeltaRequest { type_url: TypeUrl::Cluster.as_str().into(), ..Default::default() };
        let first = decoded(&connection(1).on_request(&view, &wildcard)[0]);
        let mut versions: BTreeMap<String, String> =
            first.resources.iter().map(|r| (r.name.clone(), r.version.clone())).collect();
        let stale = first.resources[0].name.clone();
        versions.insert(stale.clone(), "0000000000000001".into());
        let reconnect = DeltaRequest { initial_resource_versions: versions.into_iter().collect(), ..wildcard.clone() };
        let again = decoded(&connection(2).on_request(&view, &reconnect)[0]);
        assert_eq!(again.resources.iter().map(|r| &r.name).collect::<Vec<_>>(), vec![&stale]);
        assert!(again.removed_resources.is_empty());
    }
}
