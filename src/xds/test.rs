//! The two protocols agree: for the same proxy, the same snapshots and the
//! same changes, a SotW stream and a delta stream end up holding the same
//! resources, and each push delivers the same ones (new or changed content,
//! assignments re-sent for changed clusters, removals).
//!
//! Each client is a small Envoy: CDS and LDS wildcard, EDS and RDS for the
//! names its clusters and listeners ask for, every response ACKed. It
//! drives the protocol state directly, with the engine's own queue
//! delivering the pushes, so a push is decided exactly as a served stream
//! decides it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::listener::v3::Listener;
use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
use envoy_types::pb::envoy::service::discovery::v3::{DeltaDiscoveryResponse, DiscoveryResponse};
use envoy_types::pb::google::protobuf::Any;
use prost::Message;

use super::delta::{DeltaConnection, DeltaRequest, DeltaResponse};
use super::sotw::{Connection, OutgoingResponse, SotwRequest};
use super::stream::bodies::BodyCache;
use super::stream::body::FRAME_HEADER_LEN;
use super::stream::published::Published;
use crate::engine::PushEngine;
use crate::model::ConfigStore;
use crate::model::store::Write;
use crate::push::{ConnectionHandle, PushRequest};
use crate::resource::TypeUrl;
use crate::testing::bookinfo::{self, puts};
use crate::testing::memory::{eds_names, rds_names, sds_names};

/// What a client holds: (type, name) → the resource.
type Held = BTreeMap<(TypeUrl, String), Any>;
/// What one exchange delivered: (type, name) new, changed, re-sent or removed.
type Delivered = BTreeSet<(TypeUrl, String)>;

fn name_of(t: TypeUrl, any: &Any) -> String {
    let bytes = &any.value[..];
    match t {
        TypeUrl::Cluster => Cluster::decode(bytes).expect("a cluster").name,
        TypeUrl::Endpoint => ClusterLoadAssignment::decode(bytes).expect("an assignment").cluster_name,
        TypeUrl::Listener => Listener::decode(bytes).expect("a listener").name,
        TypeUrl::Route => RouteConfiguration::decode(bytes).expect("a route configuration").name,
        TypeUrl::Secret => {
            envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::Secret::decode(bytes)
                .expect("a secret")
                .name
        }
        // The one resource has no name.
        TypeUrl::ProxyConfig => String::new(),
        TypeUrl::ExtensionConfig => {
            envoy_types::pb::envoy::config::core::v3::TypedExtensionConfig::decode(bytes).expect("a config").name
        }
        TypeUrl::Address => {
            use crate::workload_api::workload::{Address, address::Type};
            match Address::decode(bytes).expect("an address").r#type.expect("a workload or a service") {
                Type::Workload(w) => w.uid,
                Type::Service(s) => format!("{}/{}", s.namespace, s.hostname),
            }
        }
        TypeUrl::Authorization => {
            let a = crate::workload_api::security::Authorization::decode(bytes).expect("an authorization");
            format!("{}/{}", a.namespace, a.name)
        }
    }
}

fn of_type(held: &Held, t: TypeUrl) -> Vec<Any> {
    held.iter().filter(|((ht, _), _)| *ht == t).map(|(_, a)| a.clone()).collect()
}

/// The names a client wants of EDS and RDS, from the clusters and listeners it holds.
fn wanted(held: &Held, t: TypeUrl) -> BTreeSet<String> {
    match t {
        TypeUrl::Endpoint => eds_names(&of_type(held, TypeUrl::Cluster)),
        TypeUrl::Route => rds_names(&of_type(held, TypeUrl::Listener)),
        TypeUrl::Secret => sds_names(&of_type(held, TypeUrl::Listener)),
        TypeUrl::ExtensionConfig => crate::testing::memory::ecds_names(&of_type(held, TypeUrl::Listener)),
        TypeUrl::Cluster | TypeUrl::Listener | TypeUrl::ProxyConfig | TypeUrl::Address | TypeUrl::Authorization => {
            BTreeSet::new()
        }
    }
}

/// Drops what a client no longer watches: Envoy lets an assignment or a
/// route configuration go with the cluster or listener that asked for it.
fn forget_unwatched(held: &mut Held) {
    let (eds, rds, sds, ecds) = (
        wanted(held, TypeUrl::Endpoint),
        wanted(held, TypeUrl::Route),
        wanted(held, TypeUrl::Secret),
        wanted(held, TypeUrl::ExtensionConfig),
    );
    held.retain(|(t, name), _| match t {
        TypeUrl::Endpoint => eds.contains(name),
        TypeUrl::Route => rds.contains(name),
        TypeUrl::Secret => sds.contains(name),
        TypeUrl::ExtensionConfig => ecds.contains(name),
        TypeUrl::Cluster | TypeUrl::Listener | TypeUrl::ProxyConfig | TypeUrl::Address | TypeUrl::Authorization => true,
    });
}

/// A state-of-the-world Envoy.
struct SotwClient {
    conn: Connection,
    handle: Arc<ConnectionHandle>,
    held: Held,
    names: [Vec<String>; TypeUrl::COUNT],
}

impl SotwClient {
    fn request(&self, t: TypeUrl, version: &str, nonce: &str) -> SotwRequest {
        SotwRequest {
            version_info: version.into(),
            resource_names: self.names[t.index()].clone().into(),
            type_url: t.as_str().into(),
            response_nonce: nonce.into(),
            error_detail: None,
        }
    }

    /// Handles `responses` and everything they lead to (ACKs, new
    /// subscriptions, follow-ups) until the stream has nothing more to send.
    fn settle(&mut self, view: &Published<'_>, mut responses: Vec<OutgoingResponse>) -> Delivered {
        let mut delivered = Delivered::new();
        while !responses.is_empty() {
            let mut requests = Vec::new();
            for r in responses.drain(..) {
                let mut wire = r.body[FRAME_HEADER_LEN..].to_vec();
                wire.extend_from_slice(&r.tail());
                let r = DiscoveryResponse::decode(&wire[..]).expect("a DiscoveryResponse");
                let t = TypeUrl::parse(&r.type_url).expect("a served type");
                let before = self.held.clone();
                if t.is_wildcard_type() {
                    // The whole state: what is left out is gone.
                    self.held.retain(|(ht, _), _| *ht != t);
                }
                for any in r.resources {
                    let name = name_of(t, &any);
                    if t.is_wildcard_type() && before.get(&(t, name.clone())) == Some(&any) {
                        self.held.insert((t, name), any);
                        continue;
                    }
                    delivered.insert((t, name.clone()));
                    self.held.insert((t, name), any);
                }
                delivered.extend(before.keys().filter(|k| k.0 == t && !self.held.contains_key(*k)).cloned());
                forget_unwatched(&mut self.held);
                requests.push(self.request(t, &r.version_info, &r.nonce));
                for next in [TypeUrl::Endpoint, TypeUrl::Route, TypeUrl::Secret] {
                    let names: Vec<String> = wanted(&self.held, next).into_iter().collect();
                    if names != self.names[next.index()] {
                        self.names[next.index()] = names;
                        requests.push(self.request(next, "", ""));
                    }
                }
            }
            for req in requests {
                // A subscription change repeats the type's last nonce, as Envoy's does.
                let req = if req.response_nonce.is_empty() {
                    let w = &self.conn.core.watches[TypeUrl::parse(&req.type_url).expect("served").index()];
                    SotwRequest {
                        response_nonce: w.nonce_sent.map(|n| n.to_string()).unwrap_or_default(),
                        version_info: w.version_acked.as_deref().unwrap_or_default().to_string(),
                        ..req
                    }
                } else {
                    req
                };
                responses.extend(self.conn.on_request(view, &req));
            }
        }
        delivered
    }
}

/// A delta Envoy.
struct DeltaClient {
    conn: DeltaConnection,
    handle: Arc<ConnectionHandle>,
    held: Held,
    subscribed: [BTreeSet<String>; TypeUrl::COUNT],
}

impl DeltaClient {
    fn settle(&mut self, view: &Published<'_>, mut responses: Vec<DeltaResponse>) -> Delivered {
        let mut delivered = Delivered::new();
        while !responses.is_empty() {
            let mut requests = Vec::new();
            for r in responses.drain(..) {
                let r = DeltaDiscoveryResponse::decode(&r.message_bytes()[..]).expect("a DeltaDiscoveryResponse");
                let t = TypeUrl::parse(&r.type_url).expect("a served type");
                for resource in r.resources {
                    let any = resource.resource.expect("a resource");
                    delivered.insert((t, resource.name.clone()));
                    self.held.insert((t, resource.name), any);
                }
                for name in r.removed_resources {
                    if self.held.remove(&(t, name.clone())).is_some() {
                        delivered.insert((t, name));
                    }
                }
                forget_unwatched(&mut self.held);
                requests.push(DeltaRequest {
                    type_url: t.as_str().into(),
                    response_nonce: r.nonce,
                    ..Default::default()
                });
                for next in [TypeUrl::Endpoint, TypeUrl::Route, TypeUrl::Secret] {
                    let want = wanted(&self.held, next);
                    let have = &self.subscribed[next.index()];
                    let subscribe: Vec<String> = want.difference(have).cloned().collect();
                    let unsubscribe: Vec<String> = have.difference(&want).cloned().collect();
                    if !subscribe.is_empty() || !unsubscribe.is_empty() {
                        self.subscribed[next.index()] = want;
                        requests.push(DeltaRequest {
                            type_url: next.as_str().into(),
                            resource_names_subscribe: subscribe,
                            resource_names_unsubscribe: unsubscribe,
                            ..Default::default()
                        });
                    }
                }
            }
            for req in requests {
                responses.extend(self.conn.on_request(view, &req));
            }
        }
        delivered
    }
}

/// Bookinfo, one engine, and a SotW and a delta productpage sidecar, synced.
struct Pair {
    store: ConfigStore,
    engine: Arc<PushEngine>,
    bodies: BodyCache,
    sotw: SotwClient,
    delta: DeltaClient,
}

impl Pair {
    async fn start() -> Pair {
        Pair::start_for(bookinfo::productpage(), Vec::new()).await
    }

    /// Bookinfo plus `extra`, and a pair of streams for `proxy`.
    async fn start_for(proxy: crate::model::Proxy, extra: Vec<Write>) -> Pair {
        let store = ConfigStore::new();
        let engine = PushEngine::new();
        engine.push(PushRequest::new(store.apply(bookinfo::writes()))).await;
        if !extra.is_empty() {
            engine.push(PushRequest::new(store.apply(extra))).await;
        }
        let proxy = Arc::new(proxy);
        let (sh, dh) = (engine.queue().register(proxy.clone()), engine.queue().register(proxy.clone()));
        let sotw = SotwClient {
            conn: Connection::new(sh.id, proxy.clone()),
            handle: sh,
            held: Held::new(),
            names: Default::default(),
        };
        let delta = DeltaClient {
            conn: DeltaConnection::new(dh.id, proxy),
            handle: dh,
            held: Held::new(),
            subscribed: Default::default(),
        };
        let mut pair = Pair { store, engine, bodies: BodyCache::new(), sotw, delta };
        let ctx = pair.engine.snapshot();
        let view = Published { ctx: &ctx, cache: pair.engine.cache(), bodies: &pair.bodies };
        for t in [TypeUrl::Cluster, TypeUrl::Listener] {
            let first = pair.sotw.request(t, "", "");
            let responses = pair.sotw.conn.on_request(&view, &first);
            pair.sotw.settle(&view, responses);
            let first = DeltaRequest { type_url: t.as_str().into(), ..Default::default() };
            let responses = pair.delta.conn.on_request(&view, &first);
            pair.delta.settle(&view, responses);
        }
        drop(ctx);
        pair.place();
        pair
    }

    /// Files each stream under the scope it was generated for, as the stream task does.
    fn place(&self) {
        let queue = self.engine.queue();
        if let (Some(scope), Some(inbound)) = (self.sotw.conn.core.scope(), self.sotw.conn.core.inbound()) {
            queue.set_scope(&self.sotw.handle, scope.id, inbound);
        }
        if let (Some(scope), Some(inbound)) = (self.delta.conn.core.scope(), self.delta.conn.core.inbound()) {
            queue.set_scope(&self.delta.handle, scope.id, inbound);
        }
    }

    /// Applies YAML (puts) or deletes, pushes, and lets both streams take
    /// their pushes: what each delivered.
    async fn change(&mut self, writes: Vec<Write>) -> (Delivered, Delivered) {
        let changes = self.store.apply(writes);
        assert!(!changes.is_empty(), "the edit changed something");
        self.engine.push(PushRequest::new(changes)).await;
        let ctx = self.engine.snapshot();
        let view = Published { ctx: &ctx, cache: self.engine.cache(), bodies: &self.bodies };
        let sotw = match self.sotw.handle.mailbox.try_take() {
            Some(push) => {
                let responses = self.sotw.conn.on_push(&view, &push);
                self.sotw.settle(&view, responses)
            }
            None => Delivered::new(),
        };
        let delta = match self.delta.handle.mailbox.try_take() {
            Some(push) => {
                let responses = self.delta.conn.on_push(&view, &push);
                self.delta.settle(&view, responses)
            }
            None => Delivered::new(),
        };
        drop(ctx);
        self.place();
        (sotw, delta)
    }

    fn assert_same_holdings(&self, after: &str) {
        assert!(!self.sotw.held.is_empty(), "{after}: the SotW client holds nothing");
        let keys = |h: &Held| h.keys().cloned().collect::<Vec<_>>();
        assert_eq!(keys(&self.sotw.held), keys(&self.delta.held), "{after}: the clients hold different names");
        for (key, any) in &self.sotw.held {
            assert_eq!(Some(any), self.delta.held.get(key), "{after}: {key:?} differs");
        }
    }
}

#[tokio::test]
async fn both_protocols_push_the_same_resources_for_the_same_change() {
    let mut pair = Pair::start().await;
    pair.assert_same_holdings("the initial sync");
    // A sidecar's listeners name no Secrets nor extension configs, and
    // Envoy asks for no PCDS nor ztunnel's types: every other type is there.
    let unasked =
        [TypeUrl::Secret, TypeUrl::ProxyConfig, TypeUrl::ExtensionConfig, TypeUrl::Address, TypeUrl::Authorization];
    for t in TypeUrl::PUSH_ORDER.into_iter().filter(|t| !unasked.contains(t)) {
        assert!(pair.sotw.held.keys().any(|(ht, _)| *ht == t), "the sync delivered no {t}");
    }

    let changes: [(&str, Vec<Write>); 5] = [
        (
            "a route change",
            puts(
                "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: reviews, namespace: default}\nspec:\n  hosts: [reviews]\n  http:\n  - route:\n    - {destination: {host: reviews, subset: v1}, weight: 90}\n    - {destination: {host: reviews, subset: v3}, weight: 10}\n",
            ),
        ),
        (
            "a cluster policy change",
            puts(
                "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: reviews, namespace: default}\nspec:\n  host: reviews\n  trafficPolicy: {loadBalancer: {simple: RANDOM}}\n  subsets:\n  - {name: v1, labels: {version: v1}}\n  - {name: v3, labels: {version: v3}}\n",
            ),
        ),
        (
            "an endpoint change",
            puts(
                "apiVersion: v1\nkind: Pod\nmetadata: {name: reviews-v1, namespace: default, labels: {app: reviews, version: v1}}\nstatus: {podIP: 127.0.0.43, phase: Running}\n",
            ),
        ),
        (
            "a new service",
            puts(
                "apiVersion: v1\nkind: Service\nmetadata: {name: payments, namespace: default}\nspec:\n  selector: {app: payments}\n  ports: [{name: http, port: 9080}]\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: payments-1, namespace: default, labels: {app: payments}}\nstatus: {podIP: 127.0.0.40, phase: Running}\n",
            ),
        ),
        (
            "a Sidecar that narrows what the namespace sees",
            puts(
                "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: default, namespace: default}\nspec:\n  egress: [{hosts: [./reviews.default.svc.cluster.local]}]\n",
            ),
        ),
    ];
    for (what, writes) in changes {
        let (sotw, delta) = pair.change(writes).await;
        assert!(!sotw.is_empty(), "{what}: nothing was pushed");
        assert_eq!(sotw, delta, "{what}: the protocols pushed different resources");
        pair.assert_same_holdings(what);
    }
}

/// An HTTPS Gateway whose certificate is Secret `shop-cert` (made with
/// `cert`), for the bookinfo ingress router.
fn tls_gateway(cert: &(String, String)) -> Vec<Write> {
    let gateway = "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: shop, namespace: default}\nspec:\n  selector: {istio: ingressgateway}\n  servers:\n  - port: {number: 443, name: https, protocol: HTTPS}\n    hosts: [shop.example.test]\n    tls: {mode: SIMPLE, credentialName: shop-cert}\n";
    let secret = crate::testing::certs::tls_secret("default", "shop-cert", &cert.0, &cert.1, None);
    puts(&format!("{gateway}---\n{secret}"))
}

#[tokio::test]
async fn both_protocols_serve_a_gateway_its_secret_and_push_only_the_secret_when_it_rotates() {
    let (_, issuer) = crate::testing::certs::ca("test CA");
    let first = crate::testing::certs::leaf(&issuer, &["shop.example.test"]);
    let mut pair = Pair::start_for(bookinfo::ingress(), tls_gateway(&first)).await;
    pair.assert_same_holdings("the initial sync");
    let secrets: Vec<&String> = pair.sotw.held.keys().filter(|(t, _)| *t == TypeUrl::Secret).map(|(_, n)| n).collect();
    assert_eq!(secrets, ["kubernetes://shop-cert"], "the router holds the Secret its listener names");

    let rotated = crate::testing::certs::leaf(&issuer, &["shop.example.test"]);
    let secret = crate::testing::certs::tls_secret("default", "shop-cert", &rotated.0, &rotated.1, None);
    let (sotw, delta) = pair.change(puts(&secret)).await;
    let only_the_secret: Delivered = [(TypeUrl::Secret, "kubernetes://shop-cert".to_string())].into();
    assert_eq!(sotw, only_the_secret, "SotW: a rotation pushes the Secret and nothing else");
    assert_eq!(delta, only_the_secret, "delta: a rotation pushes the Secret and nothing else");
    pair.assert_same_holdings("the rotation");
    let held = &pair.sotw.held[&(TypeUrl::Secret, "kubernetes://shop-cert".to_string())];
    let secret =
        envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::Secret::decode(&held.value[..]).unwrap();
    let Some(envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::secret::Type::TlsCertificate(cert)) =
        secret.r#type
    else {
        panic!("a certificate")
    };
    let chain = cert.certificate_chain.and_then(|d| d.specifier);
    assert_eq!(
        chain,
        Some(envoy_types::pb::envoy::config::core::v3::data_source::Specifier::InlineBytes(rotated.0.into_bytes())),
        "the rotated certificate"
    );

    // A Secret of another namespace changes nothing for this router.
    let elsewhere = crate::testing::certs::tls_secret("other", "shop-cert", &first.0, &first.1, None);
    let (sotw, delta) = pair.change(puts(&elsewhere)).await;
    assert!(sotw.is_empty() && delta.is_empty(), "{sotw:?} {delta:?}");
}
