//! The delta simulator: Envoy 1.40 on `DeltaAggregatedResources`
//! (`api_type: DELTA_GRPC`).
//!
//! Envoy initializes in the same order as on SotW ([`crate::envoy`]); what
//! differs is the wire. CDS and LDS are wildcard (the first request of each
//! has both name lists empty, Envoy's "legacy wildcard"). A delta response
//! carries only the resources added or changed, and names the ones gone in
//! `removed_resources`, so a stream keeps what its clusters and listeners
//! ask for ([`Deps`]: cluster → EDS name, listener → RDS names) and, after
//! the ACK of each CDS or LDS response, subscribes exactly the EDS or RDS
//! names newly needed and unsubscribes the ones no longer needed — only the
//! difference, never the whole list again. Every response is ACKed with its
//! nonce alone (no names). The stream's first request carries the node, as
//! from an Envoy that Istio bootstraps (`set_node_on_first_message_only:
//! true`); with `--node-every-request`, every request does (Envoy's own
//! default).
//!
//! Invariants:
//! * a stream's [`Deps`] is the server's answers so far applied in order,
//!   and the names it has subscribed of EDS (RDS) are exactly its `Deps`'
//!   wanted names, which is the list it watches in [`crate::envoy::Envoy`];
//! * a name the server reports in `removed_resources` counts as received,
//!   as Envoy treats a resource answered as absent as resolved;
//! * [`Deps`] are interned like name lists: streams of one scope share one,
//!   so ten thousand streams keep about a hundred maps, and a response that
//!   changes nothing a stream asks for yields the same map and no request.

use std::sync::Arc;

use bytes::Bytes;

use crate::deps::{Asks, Deps};
use crate::envoy::Envoy;
use crate::fleet::Protocol;
use crate::held::Update;
use crate::track::{NameSet, XdsType};
use crate::wire::{self, DeltaResponse};

/// A cluster's EDS name, if it is an EDS cluster.
fn eds_names<'r>(cluster: &'r [u8], out: &mut Vec<&'r str>) {
    out.extend(wire::eds_name(cluster));
}

/// Names in `new` and not in `old` (to subscribe), and in `old` and not in
/// `new` (to unsubscribe); both lists sorted.
fn diff<'a>(old: &'a [Box<str>], new: &'a [Box<str>]) -> (Vec<&'a str>, Vec<&'a str>) {
    let (mut subscribe, mut unsubscribe) = (Vec::new(), Vec::new());
    let (mut old, mut new) = (old.iter().peekable(), new.iter().peekable());
    loop {
        match (old.peek(), new.peek()) {
            (Some(o), Some(n)) => match o.cmp(n) {
                std::cmp::Ordering::Less => unsubscribe.extend(old.next().map(|o| &**o)),
                std::cmp::Ordering::Greater => subscribe.extend(new.next().map(|n| &**n)),
                std::cmp::Ordering::Equal => {
                    old.next();
                    new.next();
                }
            },
            (Some(_), None) => unsubscribe.extend(old.next().map(|o| &**o)),
            (None, Some(_)) => subscribe.extend(new.next().map(|n| &**n)),
            (None, None) => break,
        }
    }
    (subscribe, unsubscribe)
}

/// One delta stream's protocol state.
pub(crate) struct Sim {
    envoy: Envoy,
    /// Cluster → EDS name, as the CDS responses so far left it.
    clusters: Option<Arc<Deps>>,
    /// Listener → RDS names, as the LDS responses so far left it.
    listeners: Option<Arc<Deps>>,
}

impl crate::envoy::Sim for Sim {
    const PROTOCOL: Protocol = Protocol::Delta;

    fn new(envoy: Envoy) -> Sim {
        Sim { envoy, clusters: None, listeners: None }
    }

    fn envoy(&mut self) -> &mut Envoy {
        &mut self.envoy
    }

    async fn on_response(&mut self, message: Bytes) {
        let response = DeltaResponse::parse(&message);
        let Some(t) = self.envoy.count(message.len(), response.type_url) else { return };
        for resource in &response.resources {
            self.envoy.look(t, resource.value, resource.name);
        }
        let received = self.envoy.received(t, response.resources.iter().map(|r| (r.name, r.version, r.value)));
        let held = self.envoy.shared.held.apply(
            t,
            self.envoy.held(t).map(|h| &**h),
            Update::Delta(&received, &response.removed),
        );
        self.envoy.set_held(t, held);
        match t {
            XdsType::Cluster | XdsType::Listener => {
                let (held, asks, next): (_, Asks, _) = match t {
                    XdsType::Cluster => (&mut self.clusters, eds_names, XdsType::Endpoint),
                    _ => (&mut self.listeners, wire::rds_names, XdsType::Route),
                };
                let shared = &self.envoy.shared;
                let deps = shared.deps.apply(&shared.names, t, held.as_deref(), &response, asks);
                let wanted = deps.wanted.clone();
                *held = Some(deps);
                self.ack(t, response.nonce).await;
                self.envoy.acked(t);
                self.subscribe(next, wanted).await;
            }
            XdsType::Endpoint | XdsType::Route => {
                if !self.envoy.synced() {
                    for name in response.resources.iter().map(|r| r.name).chain(response.removed.iter().copied()) {
                        self.envoy.mark(t, name);
                    }
                }
                self.ack(t, response.nonce).await;
            }
        }
        self.envoy.settle().await;
    }

    async fn reconnect(&mut self) {
        self.resubscribe().await;
    }
}

impl Sim {
    /// ACKs a response of `t`: its nonce, no names.
    async fn ack(&mut self, t: XdsType, nonce: &str) {
        let node = self.envoy.node_for_request();
        let request = wire::encode_delta_request::<&str>(&node, t.url(), &Bytes::new(), &[], nonce);
        self.envoy.send(request).await;
    }

    /// Watches `set` for `t` (EDS or RDS), telling the server the difference
    /// from the list watched before.
    async fn subscribe(&mut self, t: XdsType, set: Arc<NameSet>) {
        if self.envoy.watched(t).is_some_and(|old| Arc::ptr_eq(old, &set)) {
            return;
        }
        let old = self.envoy.watch(t, set.clone());
        let old: &[Box<str>] = old.as_ref().map_or(&[], |old| &old.names);
        if old.is_empty() && set.is_empty() {
            return;
        }
        let node = self.envoy.node_for_request();
        let request = if old.is_empty() {
            // Envoy asks only once it has names (a first request without
            // any would be a wildcard, left out above); then for the whole
            // list, whose encoding the interned set keeps.
            wire::encode_delta_request::<&str>(&node, t.url(), &set.encoded, &[], "")
        } else {
            let (subscribe, unsubscribe) = diff(old, &set.names);
            if !unsubscribe.is_empty() {
                // Envoy forgets what it no longer asks for.
                let held =
                    self.envoy.shared.held.apply(t, self.envoy.held(t).map(|h| &**h), Update::Drop(&unsubscribe));
                self.envoy.set_held(t, held);
            }
            wire::encode_delta_request(&node, t.url(), &wire::encode_names(&subscribe), &unsubscribe, "")
        };
        self.envoy.send(request).await;
    }

    /// What Envoy's delta client sends when its stream is opened again:
    /// for each type it subscribed to, in the order it subscribed, the
    /// names it asks for (none for the legacy wildcard CDS and LDS) and
    /// every resource it holds with its version
    /// (`initial_resource_versions`), so the new server sends only what
    /// differs.
    async fn resubscribe(&mut self) {
        for t in [XdsType::Cluster, XdsType::Endpoint, XdsType::Listener, XdsType::Route] {
            if !self.envoy.subscribed(t) {
                continue;
            }
            let subscribe = match t {
                XdsType::Cluster | XdsType::Listener => Bytes::new(),
                XdsType::Endpoint | XdsType::Route => {
                    self.envoy.watched(t).map(|set| set.encoded.clone()).unwrap_or_default()
                }
            };
            let versions = self.envoy.held(t).map(|h| h.encoded_versions().clone()).unwrap_or_default();
            let node = self.envoy.node_for_request();
            self.envoy.send(wire::encode_delta_reconnect(&node, t.url(), &subscribe, &versions)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_names_what_to_subscribe_and_unsubscribe() {
        let list = |names: &[&str]| names.iter().map(|n| Box::from(*n)).collect::<Vec<Box<str>>>();
        let (old, new) = (list(&["a", "b", "d", "f"]), list(&["b", "c", "d", "g", "h"]));
        assert_eq!(diff(&old, &new), (vec!["c", "g", "h"], vec!["a", "f"]));
        assert_eq!(diff(&old, &old), (vec![], vec![]));
        assert_eq!(diff(&[], &new).0.len(), 5);
    }
}
