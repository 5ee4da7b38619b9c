//! The state-of-the-world simulator: Envoy 1.40 on `StreamAggregatedResources`
//! (`api_type: GRPC`).
//!
//! Each stream subscribes the way Envoy does: CDS wildcard first; on each
//! CDS response, the CDS ACK and then an EDS request naming the EDS
//! clusters; once every cluster has its endpoints (or 15 s have passed,
//! Envoy's `initial_fetch_timeout`), LDS wildcard; on each LDS response, the
//! LDS ACK and then an RDS request naming the route configurations the
//! listeners use. Every response is ACKed with its version and nonce. The
//! stream's first request carries the node (every request does with
//! `--node-every-request`, Envoy's own default); every request carries the
//! full `resource_names` list of its type, as Envoy's SotW client sends
//! them: the list is the stream's interned
//! [`NameSet`](crate::track::NameSet), encoded once.

use std::sync::Arc;

use bytes::Bytes;

use crate::envoy::Envoy;
use crate::fleet::Protocol;
use crate::held::Update;
use crate::track::XdsType;
use crate::wire::{self, Response};

/// Last received version and nonce of one type (what its next request ACKs).
#[derive(Debug, Default)]
struct TypeState {
    version: String,
    nonce: String,
}

/// One SotW stream's protocol state.
pub(crate) struct Sim {
    envoy: Envoy,
    types: [TypeState; 4],
}

impl crate::envoy::Sim for Sim {
    const PROTOCOL: Protocol = Protocol::Sotw;

    fn new(envoy: Envoy) -> Sim {
        Sim { envoy, types: Default::default() }
    }

    fn envoy(&mut self) -> &mut Envoy {
        &mut self.envoy
    }

    async fn on_response(&mut self, message: Bytes) {
        let response = Response::parse(&message);
        let Some(t) = self.envoy.count(message.len(), response.type_url) else { return };
        let state = &mut self.types[t as usize];
        if !state.version.is_empty() && state.version == response.version {
            self.envoy.shared.stats.same_version[t as usize].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        *state = TypeState { version: response.version.into(), nonce: response.nonce.into() };
        if self.envoy.shared.measure_resends {
            let received = self.envoy.received(t, response.resources.iter().map(|r| (wire::resource_name(r), "", *r)));
            let update = match t {
                XdsType::Cluster | XdsType::Listener => Update::Replace(&received),
                XdsType::Endpoint | XdsType::Route => Update::Merge(&received, self.envoy.watched(t).map(|s| &**s)),
            };
            let held = self.envoy.shared.held.apply(t, self.envoy.held(t).map(|h| &**h), update);
            self.envoy.set_held(t, held);
        }
        for resource in &response.resources {
            self.envoy.look(t, resource, wire::resource_name(resource));
        }
        match t {
            XdsType::Cluster => {
                let names = response.resources.iter().filter_map(|r| wire::eds_name(r)).collect();
                self.ack_and_follow(t, XdsType::Endpoint, names).await;
            }
            XdsType::Listener => {
                let mut names = Vec::new();
                for listener in &response.resources {
                    wire::rds_names(listener, &mut names);
                }
                self.ack_and_follow(t, XdsType::Route, names).await;
            }
            XdsType::Endpoint | XdsType::Route => {
                if !self.envoy.synced() {
                    for resource in &response.resources {
                        self.envoy.mark(t, wire::resource_name(resource));
                    }
                }
                self.ack(t).await;
            }
        }
        self.envoy.settle().await;
    }

    async fn reconnect(&mut self) {
        self.resubscribe().await;
    }
}

impl Sim {
    /// What Envoy's SotW client sends when its stream is opened again: for
    /// each type it subscribed to, in the order it subscribed, a request
    /// with the version it last accepted and its names, and no nonce (a
    /// nonce belongs to the stream that ended).
    async fn resubscribe(&mut self) {
        for t in [XdsType::Cluster, XdsType::Endpoint, XdsType::Listener, XdsType::Route] {
            if !self.envoy.subscribed(t) {
                continue;
            }
            self.types[t as usize].nonce.clear();
            self.ack(t).await;
        }
    }

    /// ACKs a CDS (LDS) response whose resources ask for `names` of `next`
    /// (EDS, RDS) and, when that list changed, requests it.
    async fn ack_and_follow(&mut self, t: XdsType, next: XdsType, mut names: Vec<&str>) {
        names.sort_unstable();
        names.dedup();
        let set = self.envoy.shared.names.intern(next, &names);
        self.ack(t).await;
        self.envoy.acked(t);
        if self.envoy.watched(next).is_none_or(|old| !Arc::ptr_eq(old, &set)) {
            let old = self.envoy.watch(next, set.clone());
            // Envoy asks for endpoints (routes) only once something names them.
            if old.is_some() || !set.names.is_empty() {
                self.ack(next).await;
            }
        }
    }

    /// ACKs the last response of `t`, with the type's full name list.
    async fn ack(&mut self, t: XdsType) {
        let names = self.envoy.watched(t).map(|s| s.encoded.clone()).unwrap_or_default();
        let node = self.envoy.node_for_request();
        let state = &self.types[t as usize];
        let request = wire::encode_request(&node, &names, t.url(), &state.version, &state.nonce);
        self.envoy.send(request).await;
    }
}
