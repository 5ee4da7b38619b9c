//! `Scope`: everything that decides a proxy's generated configuration.
//!
//! Proxies with equal [`ScopeKey`]s get byte-identical outbound
//! configuration, so the key is interned as a small [`ScopeId`] and every
//! outbound resource is cached per scope: ten thousand sidecars in a hundred
//! namespaces are about a hundred scopes, and a full push generates per
//! scope, not per proxy.
//!
//! What depends on the workload itself — the inbound clusters and the
//! `virtualInbound` listener for its own ports — is keyed separately by
//! [`InboundKey`] (interned as [`InboundId`], built in `inbound`): it is a pure function of the
//! workload's ports, their mTLS modes, its interception mode, whether it
//! holds a workload certificate, the AuthorizationPolicies and JWT rules
//! (with their keys) that select it, and the mesh config's defaults its
//! clusters and listeners take ([`InboundDefaults`]), so proxies of
//! different services in one namespace still share every outbound resource.
//!
//! Invariants: an id names the same key for the life of the process (the
//! interner never forgets or reuses ids); a [`Scope`] is computed from one
//! `PushContext` and never changes afterwards.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::Serialize;

mod inbound;

pub use inbound::{InboundDefaults, InboundEndpoint, InboundId, InboundKey, InboundPort, inbound_key};

use super::PushContext;
use super::index::envoy_filter::ResolvedPatch;
use super::index::{AppliedPolicy, AppliedTelemetry, ResolvedGateway, ResolvedJwtRule};
use crate::config::mesh::OutboundTrafficMode;
use crate::config::{ClusterId, ConfigKey, ConfigKind};
use crate::model::endpoint::{CLUSTER_LABEL, NETWORK_LABEL};
use crate::model::{Hostname, InterceptionMode, Locality, Proxy, ProxyKind, Service, XdsClient, host};

/// Interned [`ScopeKey`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ScopeId(pub u32);

/// The inputs that decide a proxy's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ScopeKey {
    /// Sidecar or router.
    pub kind: ProxyKind,
    /// Envoy, or a proxyless gRPC application (a sidecar by kind, served
    /// by `generate::grpc`): the two never share generated resources.
    pub client: XdsClient,
    /// A gRPC client's DNS domain, which its short names expand with
    /// (empty for Envoy, so that Envoy sidecars keep sharing scopes).
    pub dns_domain: Arc<str>,
    /// The proxy's namespace (visibility, rule selection).
    pub namespace: Arc<str>,
    /// Interception mode (listener shapes).
    pub interception: InterceptionMode,
    /// The Sidecar resource that applies, if any.
    pub sidecar: Option<ConfigKey>,
    /// For routers: the Gateways whose selector matches it.
    pub gateways: Vec<ConfigKey>,
    /// For routers: the addresses Gateway API Gateways it serves ask for
    /// that are its own (its listeners for them bind there).
    pub addresses: Vec<Arc<str>>,
    /// The `sourceLabels` selectors of VirtualService matches that the
    /// proxy's labels satisfy, sorted (empty in a mesh without any, so
    /// proxies differing only in labels still share a scope).
    pub source_labels: Vec<BTreeMap<String, String>>,
    /// Whether the proxy holds a workload certificate (over SDS): only
    /// then do its clusters originate mesh mTLS.
    pub mesh_certificates: bool,
    /// For routers: the AuthorizationPolicies that apply to it (their RBAC
    /// filters guard its listeners). Sidecars keep theirs in the inbound key.
    pub authorization: Vec<Arc<AppliedPolicy>>,
    /// For routers: the JWT rules that apply to it, with their keys (the
    /// JWT filter of its HTTP listeners). Sidecars keep theirs in the
    /// inbound key.
    pub jwt_rules: Vec<Arc<ResolvedJwtRule>>,
    /// What its client side logs (outbound listeners; a router's listeners).
    pub telemetry: Arc<AppliedTelemetry>,
    /// The EnvoyFilter patches of its outbound side (a router's: all), in
    /// istiod's order (empty in a mesh without EnvoyFilters).
    pub envoy_filters: Vec<Arc<ResolvedPatch>>,
    /// The proxy's cluster, when some service has other virtual IPs there
    /// than the ones it is served with elsewhere (its listeners and route
    /// domains take that cluster's); `None` otherwise, so that proxies of
    /// every cluster share scopes.
    pub cluster: Option<Arc<str>>,
}

/// What of a proxy decides its endpoint assignments, when the mesh makes
/// them depend on the proxy: its locality and the values of the labels the
/// mesh's `failoverPriority` entries compare (when a DestinationRule turns
/// on locality failover or weights); its network and the networks it asks
/// to see (when a network gateway exists, or it asks); its cluster (for
/// cluster-local hosts, when the mesh has several clusters). Proxies with
/// equal views share every assignment; in a mesh where none of these
/// matters there is no view at all and every proxy shares every
/// assignment.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct EndpointView {
    /// The proxy's locality.
    pub locality: Locality,
    /// Values of the failover-priority labels the proxy has.
    pub labels: BTreeMap<String, String>,
    /// The whole view as a key (every part below): streams whose views
    /// have equal keys share what they resolved of a name list.
    pub key: Arc<str>,
    /// The locality part as a cache key: `region/zone/subzone|k=v,…`.
    pub locality_key: Arc<str>,
    /// The proxy's network (`""`: the default network).
    pub network: Arc<str>,
    /// The networks it asks to see (`None`: all).
    pub requested: Option<Vec<Arc<str>>>,
    /// The network part as a cache key, when assignments depend on it:
    /// the network (under split horizon) and the requested networks.
    pub network_key: Option<Arc<str>>,
    /// The id of the proxy's cluster.
    pub cluster: Arc<str>,
}

impl EndpointView {
    /// Whether the proxy sees endpoints of `network` (the default network
    /// is seen by every proxy).
    pub fn sees(&self, network: &str) -> bool {
        network.is_empty() || self.requested.as_ref().is_none_or(|r| r.iter().any(|n| &**n == network))
    }
}

/// The endpoint view of `proxy` in `ctx`; `None` when nothing needs one.
///
/// The proxy's locality is its Pod's (in the proxy's own cluster), as
/// Istio takes it from the registry first (the Pod's Node, or its
/// locality label); Envoy's `node.locality` when the Pod is not known or
/// has none.
pub fn endpoint_view(ctx: &PushContext, proxy: &Proxy) -> Option<Arc<EndpointView>> {
    let requested = proxy.requested_network_view();
    let split_horizon = ctx.networks.split_horizon();
    if !ctx.destination_rules.locality_aware() && !split_horizon && requested.is_none() && !ctx.networks.multi_cluster()
    {
        return None;
    }
    let cluster: Arc<str> = proxy.cluster_id().map_or_else(|| ctx.mesh.cluster_id.clone(), Arc::from);
    let in_cluster = if cluster == ctx.mesh.cluster_id { ClusterId::LOCAL } else { ClusterId::remote(&cluster) };
    let locality = proxy
        .workload
        .split_once('.')
        .and_then(|(pod, namespace)| {
            ctx.workloads.get(&ConfigKey::in_cluster(ConfigKind::Pod, namespace, pod, &in_cluster))
        })
        .filter(|pod| !pod.locality.is_empty())
        .map_or_else(|| proxy.locality.clone(), |pod| Locality::parse(&pod.locality));
    let labels: BTreeMap<String, String> = ctx
        .destination_rules
        .failover_labels()
        .iter()
        .filter_map(|l| topology_label(proxy, &cluster, l).map(|v| (l.clone(), v.to_string())))
        .collect();
    let listed: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let locality_key: Arc<str> = format!("{locality}|{}", listed.join(",")).into();
    let network: Arc<str> = proxy.network().into();
    let requested: Option<Vec<Arc<str>>> = requested.map(|r| r.into_iter().map(Arc::from).collect());
    let network_key = (split_horizon || requested.is_some()).then(|| {
        let seen = requested.as_ref().map(|r| r.join(",")).unwrap_or_default();
        Arc::from(format!("{}|{seen}", if split_horizon { &*network } else { "" }))
    });
    let key = format!("{locality_key}\u{1f}{}\u{1f}{cluster}", network_key.as_deref().unwrap_or(""));
    Some(Arc::new(EndpointView {
        locality,
        labels,
        key: key.into(),
        locality_key,
        network,
        requested,
        network_key,
        cluster,
    }))
}

/// The value of the proxy's label `key`, with the topology labels istiod
/// gives every proxy (its network and cluster) where its own do not set them.
fn topology_label<'p>(proxy: &'p Proxy, cluster: &'p str, key: &str) -> Option<&'p str> {
    match proxy.labels.get(key) {
        Some(v) => Some(v),
        None if key == NETWORK_LABEL && !proxy.network().is_empty() => Some(proxy.network()),
        None if key == CLUSTER_LABEL => Some(cluster),
        None => None,
    }
}

/// Hands out [`ScopeId`]s and [`InboundId`]s, and the one shared copy of
/// each key: every stream keeps its keys, and the streams of one scope or
/// one workload shape keep the same allocation. Shared by every
/// `PushContext` of a server.
#[derive(Debug, Default)]
pub struct ScopeInterner {
    ids: Mutex<HashMap<Arc<ScopeKey>, ScopeId>>,
    inbound: Mutex<HashMap<Arc<InboundKey>, InboundId>>,
}

impl ScopeInterner {
    /// The id for `key`, allocating one the first time, and the key shared.
    pub fn intern(&self, key: ScopeKey) -> (ScopeId, Arc<ScopeKey>) {
        intern_in(&self.ids, key, ScopeId)
    }

    /// The id for an inbound key, allocating one the first time, and the
    /// key shared.
    pub fn intern_inbound(&self, key: InboundKey) -> (InboundId, Arc<InboundKey>) {
        intern_in(&self.inbound, key, InboundId)
    }

    /// Number of scopes ever interned.
    pub fn len(&self) -> usize {
        self.ids.lock().len()
    }

    /// Whether none was interned.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The id of `key` in `ids` and its shared copy; a new key gets the next
/// id, counted from 1.
fn intern_in<K: Eq + std::hash::Hash, I: Copy>(
    ids: &Mutex<HashMap<Arc<K>, I>>,
    key: K,
    id: impl FnOnce(u32) -> I,
) -> (I, Arc<K>) {
    let mut ids = ids.lock();
    if let Some((shared, id)) = ids.get_key_value(&key) {
        return (*id, shared.clone());
    }
    let next = id(ids.len() as u32 + 1);
    let shared = Arc::new(key);
    ids.insert(shared.clone(), next);
    (next, shared)
}

/// How a sidecar handles traffic to destinations it does not know.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum OutboundPolicy {
    /// Forward to the original destination (PassthroughCluster), or to the
    /// Sidecar's `egressProxy` when it names one.
    AllowAny {
        /// The egress proxy: host, port and subset.
        egress_proxy: Option<(Hostname, u32, Arc<str>)>,
    },
    /// Refuse (BlackHoleCluster).
    RegistryOnly,
}

impl OutboundPolicy {
    /// `ALLOW_ANY` to the original destination.
    pub const ALLOW_ANY: OutboundPolicy = OutboundPolicy::AllowAny { egress_proxy: None };
}

/// One egress listener of a scope (the default one when no Sidecar applies).
#[derive(Debug, Clone, Serialize)]
pub struct EgressListener {
    /// Only this port, when set.
    pub port: Option<u32>,
    /// Bind address, when the Sidecar sets one.
    pub bind: Option<Arc<str>>,
    /// Whether outbound listeners bind directly (`captureMode: NONE`, or a
    /// NONE-mode proxy) instead of taking redirected traffic.
    pub capture_none: bool,
    /// Services this listener makes visible, sorted by host.
    pub services: Vec<Arc<Service>>,
}

/// A computed scope: what proxies of one [`ScopeKey`] see.
#[derive(Debug, Serialize)]
pub struct Scope {
    /// Its id.
    pub id: ScopeId,
    /// Its key.
    pub key: ScopeKey,
    /// Every visible service, sorted by host.
    pub services: Vec<Arc<Service>>,
    /// Hosts of `services`, for membership tests.
    #[serde(skip)]
    pub visible_hosts: HashSet<Hostname>,
    /// Egress listeners (sidecars).
    pub egress: Vec<EgressListener>,
    /// Unknown-destination policy (sidecars): the Sidecar's, else the mesh
    /// config's `outboundTrafficPolicy.mode`.
    pub outbound_policy: OutboundPolicy,
    /// Gateways served (routers).
    #[serde(skip)]
    pub gateways: Vec<Arc<ResolvedGateway>>,
}

impl Scope {
    /// The egress listener that serves `port`: a port-specific one, else the catch-all.
    pub fn egress_for(&self, port: u32) -> Option<&EgressListener> {
        self.egress.iter().find(|e| e.port == Some(port)).or_else(|| self.egress.iter().find(|e| e.port.is_none()))
    }
}

/// Computes the key for a proxy against a snapshot.
pub fn scope_key(ctx: &PushContext, proxy: &Proxy) -> ScopeKey {
    let source_labels: Vec<BTreeMap<String, String>> = ctx
        .virtual_services
        .source_selectors()
        .iter()
        .filter(|selector| selector.iter().all(|(k, v)| proxy.labels.get(k) == Some(v)))
        .cloned()
        .collect();
    let cluster = proxy.cluster_id().filter(|c| ctx.services.has_variants_in(c)).map(Arc::from);
    match proxy.kind {
        ProxyKind::Router => {
            let gateways = ctx.gateways.matching(&proxy.namespace, &proxy.labels);
            ScopeKey {
                kind: ProxyKind::Router,
                client: XdsClient::Envoy,
                dns_domain: Arc::from(""),
                namespace: proxy.namespace.clone(),
                interception: proxy.interception,
                sidecar: None,
                addresses: crate::push::index::GatewayIndex::held_addresses(&gateways, &proxy.ip),
                gateways: gateways.iter().map(|g| g.key.clone()).collect(),
                source_labels,
                mesh_certificates: proxy.mesh_certificates,
                authorization: ctx.authorization.for_workload(&proxy.namespace, &proxy.labels),
                jwt_rules: ctx.request_authentication.for_workload(&proxy.namespace, &proxy.labels),
                telemetry: ctx.telemetry.client(proxy),
                envoy_filters: ctx.envoy_filters.outbound(proxy),
                cluster,
            }
        }
        ProxyKind::Sidecar if proxy.client == XdsClient::Grpc => ScopeKey {
            kind: ProxyKind::Sidecar,
            client: XdsClient::Grpc,
            dns_domain: proxy.dns_domain.clone(),
            namespace: proxy.namespace.clone(),
            // A gRPC client dials its targets itself: nothing is captured.
            interception: InterceptionMode::None,
            sidecar: ctx.sidecars.for_workload(&proxy.namespace, &proxy.labels).map(|(k, _)| k.clone()),
            gateways: Vec::new(),
            addresses: Vec::new(),
            source_labels,
            // Its certificates come from its bootstrap's certificate
            // provider, used where a DestinationRule says ISTIO_MUTUAL.
            mesh_certificates: false,
            authorization: Vec::new(),
            jwt_rules: Vec::new(),
            // gRPC has no access log or tracing filters, and istiod applies
            // no EnvoyFilter to it.
            telemetry: Arc::default(),
            envoy_filters: Vec::new(),
            cluster,
        },
        ProxyKind::Sidecar => ScopeKey {
            kind: ProxyKind::Sidecar,
            client: XdsClient::Envoy,
            dns_domain: Arc::from(""),
            namespace: proxy.namespace.clone(),
            interception: proxy.interception,
            sidecar: ctx.sidecars.for_workload(&proxy.namespace, &proxy.labels).map(|(k, _)| k.clone()),
            gateways: Vec::new(),
            addresses: Vec::new(),
            source_labels,
            mesh_certificates: proxy.mesh_certificates,
            authorization: Vec::new(),
            jwt_rules: Vec::new(),
            telemetry: ctx.telemetry.client(proxy),
            envoy_filters: ctx.envoy_filters.outbound(proxy),
            cluster,
        },
        // A waypoint serves what binds to its Gateway (named by the label
        // Istio's waypoint template puts on its pods).
        ProxyKind::Waypoint => ScopeKey {
            kind: ProxyKind::Waypoint,
            client: XdsClient::Envoy,
            dns_domain: Arc::from(""),
            namespace: proxy.namespace.clone(),
            interception: proxy.interception,
            sidecar: None,
            gateways: waypoint_gateway(proxy).into_iter().collect(),
            addresses: Vec::new(),
            source_labels: Vec::new(),
            mesh_certificates: proxy.mesh_certificates,
            authorization: Vec::new(),
            jwt_rules: Vec::new(),
            telemetry: Arc::default(),
            envoy_filters: Vec::new(),
            cluster: None,
        },
        // ztunnel is sent the workload API only, alike for every ztunnel:
        // nothing of the proxy's own decides it.
        ProxyKind::Ztunnel => ScopeKey {
            kind: ProxyKind::Ztunnel,
            client: XdsClient::Envoy,
            dns_domain: Arc::from(""),
            namespace: proxy.namespace.clone(),
            interception: proxy.interception,
            sidecar: None,
            gateways: Vec::new(),
            addresses: Vec::new(),
            source_labels: Vec::new(),
            mesh_certificates: false,
            authorization: Vec::new(),
            jwt_rules: Vec::new(),
            telemetry: Arc::default(),
            envoy_filters: Vec::new(),
            cluster: None,
        },
    }
}

/// The Services bound to the waypoint of `key`, by hostname.
fn waypoint_services(ctx: &PushContext, key: &ScopeKey) -> Vec<Arc<Service>> {
    let Some(gateway) = key.gateways.first() else { return Vec::new() };
    let ambient = ctx.ambient();
    let Some(bound) = ambient.bound.get(&(gateway.namespace.to_string(), gateway.name.to_string())) else {
        return Vec::new();
    };
    bound.hosts.iter().filter_map(|h| ctx.services.get(h).cloned()).collect()
}

/// The Gateway a waypoint proxy stands for: its pods' Gateway name label
/// (Istio's `gateway.networking.k8s.io/gateway-name`, or the older
/// `istio.io/gateway-name`), in its namespace.
fn waypoint_gateway(proxy: &Proxy) -> Option<ConfigKey> {
    use crate::config::gateway_api::{GATEWAY_NAME_LABEL, ISTIO_GATEWAY_NAME_LABEL};
    let name = proxy.labels.get(GATEWAY_NAME_LABEL).or_else(|| proxy.labels.get(ISTIO_GATEWAY_NAME_LABEL))?;
    Some(ConfigKey::new(ConfigKind::KubernetesGateway, &proxy.namespace, name))
}

/// Whether a Sidecar egress host pattern (`ns/host`) admits `svc` for a proxy in `namespace`.
fn egress_admits(pattern: &str, namespace: &str, svc: &Service) -> bool {
    let (ns, h) = pattern.split_once('/').unwrap_or(("*", pattern));
    let ns_ok = match ns {
        "*" => true,
        "." => &*svc.namespace == namespace,
        "~" => false,
        other => &*svc.namespace == other,
    };
    ns_ok && (h == "*" || host::matches(h, &svc.hostname))
}

/// The services an egress listener admits, in host order. Patterns naming a
/// namespace (`./*`, `ns/*`, `ns/host`) read that namespace's services only,
/// so a scope costs what it sees, not the size of the mesh.
fn egress_services(ctx: &PushContext, namespace: &str, hosts: &[String]) -> Vec<Arc<Service>> {
    let mut out: Vec<Arc<Service>> = Vec::new();
    for pattern in hosts {
        let (ns, _) = pattern.split_once('/').unwrap_or(("*", pattern));
        let candidates: &[Arc<Service>] = match ns {
            "*" => ctx.services.all(),
            "~" => &[],
            "." => ctx.services.in_namespace(namespace),
            other => ctx.services.in_namespace(other),
        };
        out.extend(
            candidates
                .iter()
                .filter(|s| s.export_to.visible_to(namespace) && egress_admits(pattern, namespace, s))
                .cloned(),
        );
    }
    if hosts.len() > 1 {
        out.sort_by(|a, b| a.hostname.cmp(&b.hostname));
        out.dedup_by(|a, b| a.hostname == b.hostname);
    }
    out
}

/// Computes the scope for `key` in `ctx`.
pub fn compute(ctx: &PushContext, id: ScopeId, key: ScopeKey) -> Scope {
    if key.kind == ProxyKind::Ztunnel {
        // It sees no Envoy services: only the ambient index moves its output.
        let outbound_policy = OutboundPolicy::ALLOW_ANY;
        let (services, visible_hosts, egress, gateways) = Default::default();
        return Scope { id, key, services, visible_hosts, egress, outbound_policy, gateways };
    }
    if key.kind == ProxyKind::Waypoint {
        // It serves the Services bound to its Gateway, and has no outbound
        // listeners of its own.
        let services = waypoint_services(ctx, &key);
        let visible_hosts = services.iter().map(|s| s.hostname.clone()).collect();
        let (egress, gateways) = Default::default();
        let outbound_policy = OutboundPolicy::ALLOW_ANY;
        return Scope { id, key, services, visible_hosts, egress, outbound_policy, gateways };
    }
    let exported = || -> Vec<Arc<Service>> {
        ctx.services.all().iter().filter(|s| s.export_to.visible_to(&key.namespace)).cloned().collect()
    };
    let none_mode = key.interception == InterceptionMode::None;
    let sidecar = key.sidecar.as_ref().and_then(|k| ctx.sidecars.get(k)).cloned();
    // Where no Sidecar sets a policy, the mesh's mode (as Istio copies only
    // the mode into the sidecar scope: an egress proxy is the Sidecar's).
    let mesh_policy = match ctx.mesh.traffic.outbound {
        OutboundTrafficMode::AllowAny => OutboundPolicy::ALLOW_ANY,
        OutboundTrafficMode::RegistryOnly => OutboundPolicy::RegistryOnly,
    };

    let (egress, outbound_policy) = match (&key.kind, sidecar) {
        (ProxyKind::Sidecar, Some(sc)) => {
            let listeners = if sc.spec.egress.is_empty() {
                vec![EgressListener { port: None, bind: None, capture_none: none_mode, services: exported() }]
            } else {
                sc.spec
                    .egress
                    .iter()
                    .map(|e| EgressListener {
                        port: e.port.as_ref().map(|p| p.number),
                        bind: e.bind.as_deref().map(Arc::from),
                        capture_none: none_mode || e.capture_mode.as_deref() == Some("NONE"),
                        services: egress_services(ctx, &key.namespace, &e.hosts)
                            .into_iter()
                            .filter(|s| e.port.as_ref().is_none_or(|p| s.port(p.number).is_some()))
                            .collect(),
                    })
                    .collect()
            };
            let traffic_policy = sc.spec.outbound_traffic_policy.as_ref();
            let policy = match traffic_policy.map(|p| p.mode.as_deref()) {
                None => mesh_policy,
                Some(Some("REGISTRY_ONLY")) => OutboundPolicy::RegistryOnly,
                Some(_) => OutboundPolicy::AllowAny {
                    egress_proxy: traffic_policy.and_then(|p| p.egress_proxy.as_ref()).map(|d| {
                        let host = host::resolve(&d.host, sc.metadata.namespace());
                        let port = d.port.as_ref().map(|p| p.number).unwrap_or(0);
                        (host, port, Arc::from(d.subset.as_deref().unwrap_or("")))
                    }),
                },
            };
            (listeners, policy)
        }
        _ => (
            vec![EgressListener { port: None, bind: None, capture_none: none_mode, services: exported() }],
            mesh_policy,
        ),
    };

    // A proxy of a cluster whose Services have other virtual IPs sees them.
    let mut egress = egress;
    if let Some(cluster) = &key.cluster {
        for listener in &mut egress {
            for svc in &mut listener.services {
                *svc = ctx.services.in_cluster(cluster, svc);
            }
        }
    }
    let mut services: Vec<Arc<Service>> = egress.iter().flat_map(|e| e.services.iter().cloned()).collect();
    services.sort_by(|a, b| a.hostname.cmp(&b.hostname));
    services.dedup_by(|a, b| a.hostname == b.hostname);
    let visible_hosts = services.iter().map(|s| s.hostname.clone()).collect();
    let gateways =
        key.gateways.iter().filter_map(|k| ctx.gateways.all().iter().find(|g| &g.key == k).cloned()).collect();
    Scope { id, key, services, visible_hosts, egress, outbound_policy, gateways }
}
