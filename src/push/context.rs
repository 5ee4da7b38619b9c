//! `PushContext`: an immutable snapshot of everything generation reads.
//!
//! A `PushContext` is built once, published through `ArcSwap`, and never
//! mutated afterwards (its scope memo only fills in values that are a pure
//! function of the snapshot). [`PushContext::next`] builds the successor for
//! a [`PushRequest`]: it rebuilds only the indexes the changed keys touch,
//! shares the others with the previous snapshot by `Arc`, and reports what
//! changed as [`PushChanges`] — the hosts whose output may differ and the
//! scopes that must be regenerated.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;
use serde::Serialize;

use super::PushRequest;
use super::affected::{affected_hosts, affected_types};
use super::index::ambient::{self, AmbientIndex};
use super::index::envoy_filter::EnvoyFilterIndex;
use super::index::{
    AuthorizationIndex, DestinationRuleIndex, EndpointIndex, GatewayApiIndex, GatewayIndex, IngressIndex, NetworkIndex,
    PeerAuthenticationIndex, RequestAuthenticationIndex, SecretIndex, ServiceIndex, SidecarIndex, TelemetryIndex,
    VirtualServiceIndex, WorkloadIndex,
};
use super::scope::{self, InboundId, InboundKey, Scope, ScopeId, ScopeInterner, ScopeKey};
use crate::config::mesh::MeshConfig;
use crate::config::{ConfigKey, ConfigKind, ConfigObject};
use crate::model::{Hostname, Proxy, StoreSnapshot};
use crate::resource::{TypeSet, TypeUrl};

/// What a new snapshot changed, for cache invalidation and push targeting.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PushChanges {
    /// Hosts whose clusters, endpoints or routes may differ.
    pub dirty_hosts: HashSet<Hostname>,
    /// Hosts whose endpoints really changed.
    pub endpoint_hosts: HashSet<Hostname>,
    /// Kinds that changed.
    pub kinds: BTreeSet<ConfigKind>,
    /// Whether only endpoints moved (no scope needs regenerating).
    pub endpoint_only: bool,
    /// Namespaces whose Sidecars or Services changed: every scope of these
    /// namespaces is regenerated.
    pub namespaces: HashSet<Arc<str>>,
    /// Whether Gateways changed (every router scope is regenerated).
    pub gateways: bool,
    /// Namespaces whose Secrets changed: the router scopes there are
    /// regenerated (a gateway reads the Secrets of its own namespace).
    pub secret_namespaces: HashSet<Arc<str>>,
    /// Whether this is a full rebuild (every scope is regenerated).
    pub full: bool,
    /// The resource types the change can affect: only these are regenerated
    /// and pushed.
    pub types: TypeSet,
    /// Scopes (of the previous snapshot) whose generated output the change
    /// may alter, for the types in `types`.
    #[serde(skip)]
    pub touched: HashSet<ScopeId>,
    /// Whether proxies' scope and inbound keys may have changed (Services,
    /// ServiceEntries, Sidecars or Gateways changed): streams recompute them.
    pub rescope: bool,
    /// Whether PCDS's trust bundle, alike for every proxy, may differ: every scope is touched, none rescoped.
    pub every_scope: bool,
    /// Whether what ztunnel is sent may differ (an input of the ambient
    /// index changed): ztunnel scopes are touched, and only by this.
    pub ambient: bool,
}

impl PushChanges {
    /// Whether a scope of the *previous* or *new* snapshot must be regenerated.
    pub fn touches_scope(&self, scope: &Scope) -> bool {
        if self.full || self.every_scope {
            return true;
        }
        if scope.key.kind == crate::model::ProxyKind::Ztunnel {
            return self.ambient;
        }
        if scope.key.kind == crate::model::ProxyKind::Waypoint {
            // Few proxies, reading much (bindings, routes, policies): any
            // change but a move of endpoints regenerates them.
            return self.ambient || !self.endpoint_only;
        }
        if self.endpoint_only {
            return false;
        }
        let router = scope.key.kind == crate::model::ProxyKind::Router;
        (router && (self.gateways || self.secret_namespaces.contains(&scope.key.namespace)))
            || self.namespaces.contains(&scope.key.namespace)
            || self.dirty_hosts.iter().any(|h| scope.visible_hosts.contains(h))
    }
}

/// An immutable snapshot of the mesh, ready for generation.
#[derive(Debug)]
pub struct PushContext {
    /// Monotonic snapshot version; cache entries carry the version they were built for.
    pub version: u64,
    /// Unique among all snapshots of the process (of every engine): the key
    /// of memos that outlive one engine's view, such as a shared name list's
    /// resolved assignments.
    pub id: u64,
    /// The store contents this snapshot was built from.
    pub store: StoreSnapshot,
    /// Services by host.
    pub services: Arc<ServiceIndex>,
    /// Pods and WorkloadEntries.
    pub workloads: Arc<WorkloadIndex>,
    /// Endpoints by host.
    pub endpoints: Arc<EndpointIndex>,
    /// Networks: of clusters, and their gateways.
    pub networks: Arc<NetworkIndex>,
    /// VirtualServices.
    pub virtual_services: Arc<VirtualServiceIndex>,
    /// DestinationRules.
    pub destination_rules: Arc<DestinationRuleIndex>,
    /// Gateways (Istio's, and those derived from the Gateway API).
    pub gateways: Arc<GatewayIndex>,
    /// The Gateway API, translated, with its objects' status.
    pub gateway_api: Arc<GatewayApiIndex>,
    /// Ingresses, translated.
    pub ingress: Arc<IngressIndex>,
    /// Sidecars.
    pub sidecars: Arc<SidecarIndex>,
    /// Secrets' TLS material.
    pub secrets: Arc<SecretIndex>,
    /// PeerAuthentications, resolved per workload port.
    pub peer_authentications: Arc<PeerAuthenticationIndex>,
    /// AuthorizationPolicies, by the workloads they apply to.
    pub authorization: Arc<AuthorizationIndex>,
    /// RequestAuthentications' JWT rules with their key sets, by the
    /// workloads they apply to.
    pub request_authentication: Arc<RequestAuthenticationIndex>,
    /// What proxies log.
    pub telemetry: Arc<TelemetryIndex>,
    /// EnvoyFilters, their patch values read.
    pub envoy_filters: Arc<EnvoyFilterIndex>,
    /// What ztunnel is sent, built when first asked for
    /// ([`PushContext::ambient`]).
    ambient: OnceLock<Arc<AmbientIndex>>,
    /// The mesh-wide settings: the store's `MeshConfig` object, else the
    /// server's startup settings.
    pub mesh: Arc<MeshConfig>,
    interner: Arc<ScopeInterner>,
    scopes: RwLock<HashMap<ScopeId, Arc<Scope>>>,
}

/// A fresh [`PushContext::id`].
fn next_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl PushContext {
    /// An empty snapshot (version 0) of a mesh configured as `mesh`, before the first build.
    pub fn empty(interner: Arc<ScopeInterner>, mesh: Arc<MeshConfig>) -> PushContext {
        PushContext::build_with(StoreSnapshot::default(), 0, interner, mesh)
    }

    /// Builds a snapshot from scratch, of a mesh with Istio's default mesh settings.
    pub fn build(store: StoreSnapshot, version: u64, interner: Arc<ScopeInterner>) -> PushContext {
        PushContext::build_with(store, version, interner, Arc::new(MeshConfig::default()))
    }

    /// Builds a snapshot from scratch; independent indexes build in parallel.
    /// The store's mesh config object, when it holds one, is the mesh
    /// config; else `mesh`.
    pub fn build_with(
        store: StoreSnapshot,
        version: u64,
        interner: Arc<ScopeInterner>,
        mesh: Arc<MeshConfig>,
    ) -> PushContext {
        let mesh = store.mesh_config().unwrap_or(mesh);
        let gateway_api = GatewayApiIndex::build(&store);
        let ingress = IngressIndex::build(&store, &mesh.ingress);
        let ((services, workloads), ((vs, dr), (gw, sc))) = rayon::join(
            || rayon::join(|| ServiceIndex::build(&store, &mesh), || WorkloadIndex::build(&store)),
            || {
                rayon::join(
                    || {
                        rayon::join(
                            || VirtualServiceIndex::build(&store, &gateway_api, &ingress, &mesh),
                            || DestinationRuleIndex::build(&store, &mesh),
                        )
                    },
                    || {
                        rayon::join(
                            || GatewayIndex::build(&store, &gateway_api, &ingress),
                            || SidecarIndex::build(&store),
                        )
                    },
                )
            },
        );
        let networks = NetworkIndex::build(&store, &mesh);
        let endpoints = EndpointIndex::build(&store, &services, &workloads, &networks);
        let secrets = SecretIndex::build(&store);
        let peer_authentications = PeerAuthenticationIndex::build(&store, &mesh);
        let authorization = AuthorizationIndex::build(&store, &mesh);
        let request_authentication = RequestAuthenticationIndex::build(&store, &mesh);
        let telemetry = TelemetryIndex::build(&store, &mesh, &services);
        let envoy_filters = EnvoyFilterIndex::build(&store, &mesh);
        PushContext {
            version,
            id: next_id(),
            store,
            services: Arc::new(services),
            workloads: Arc::new(workloads),
            endpoints: Arc::new(endpoints),
            networks: Arc::new(networks),
            virtual_services: Arc::new(vs),
            destination_rules: Arc::new(dr),
            gateways: Arc::new(gw),
            gateway_api: Arc::new(gateway_api),
            ingress: Arc::new(ingress),
            sidecars: Arc::new(sc),
            secrets: Arc::new(secrets),
            peer_authentications: Arc::new(peer_authentications),
            authorization: Arc::new(authorization),
            request_authentication: Arc::new(request_authentication),
            telemetry: Arc::new(telemetry),
            envoy_filters: Arc::new(envoy_filters),
            ambient: OnceLock::new(),
            mesh,
            interner,
            scopes: RwLock::new(HashMap::new()),
        }
    }

    /// Builds the successor of `prev` for `request`, rebuilding only what the
    /// changed keys touch.
    pub fn next(prev: &PushContext, store: StoreSnapshot, request: &PushRequest) -> (PushContext, PushChanges) {
        if prev.version == 0 {
            // The first snapshot: build every index in parallel; there is no
            // previous output to compare with, so every scope regenerates.
            let kinds = request.keys.iter().map(|k| k.kind).collect();
            let next = PushContext::build_with(store, 1, prev.interner.clone(), prev.mesh.clone());
            let changes = PushChanges { kinds, full: true, types: TypeSet::ALL, rescope: true, ..Default::default() };
            return (next, changes);
        }
        let kinds: BTreeSet<ConfigKind> = request.keys.iter().map(|k| k.kind).collect();
        if kinds.contains(&ConfigKind::MeshConfig) {
            // Every index may read the mesh config (istiod pushes everything
            // on a mesh config change too): build afresh, regenerate all.
            let next = PushContext::build_with(store, prev.version + 1, prev.interner.clone(), prev.mesh.clone());
            let changes = PushChanges { kinds, full: true, types: TypeSet::ALL, rescope: true, ..Default::default() };
            return (next, changes);
        }
        let changed = |k: ConfigKind| kinds.contains(&k);
        let services_changed = changed(ConfigKind::Service) || changed(ConfigKind::ServiceEntry);
        let workloads_changed =
            changed(ConfigKind::Pod) || changed(ConfigKind::WorkloadEntry) || changed(ConfigKind::Node);

        let services =
            if services_changed { Arc::new(ServiceIndex::build(&store, &prev.mesh)) } else { prev.services.clone() };
        let workloads = if workloads_changed {
            Arc::new(prev.workloads.update(&store, &request.keys))
        } else {
            prev.workloads.clone()
        };
        let rebuild = |k: ConfigKind| changed(k);
        // The Gateway API's translation reads its own kinds, Namespaces'
        // labels, and whether the Services and Secrets it names exist.
        let gateway_api_inputs = [
            ConfigKind::GatewayClass,
            ConfigKind::KubernetesGateway,
            ConfigKind::HttpRoute,
            ConfigKind::GrpcRoute,
            ConfigKind::TcpRoute,
            ConfigKind::TlsRoute,
            ConfigKind::ReferenceGrant,
            ConfigKind::Namespace,
        ];
        let gateway_api = if gateway_api_inputs.into_iter().any(changed)
            || (GatewayApiIndex::has_objects(&prev.store) && (services_changed || changed(ConfigKind::Secret)))
        {
            Arc::new(GatewayApiIndex::build(&store))
        } else {
            prev.gateway_api.clone()
        };
        let ingress_inputs = [ConfigKind::Ingress, ConfigKind::IngressClass];
        let ingress = if ingress_inputs.into_iter().any(changed)
            || (IngressIndex::has_objects(&prev.store) && services_changed)
        {
            Arc::new(IngressIndex::build(&store, &prev.mesh.ingress))
        } else {
            prev.ingress.clone()
        };
        // Whether what the Kubernetes routing APIs translate to changed.
        let gateway_api_moved = !gateway_api.same_output(&prev.gateway_api) || !ingress.same_output(&prev.ingress);
        let virtual_services = if rebuild(ConfigKind::VirtualService) || gateway_api_moved {
            Arc::new(VirtualServiceIndex::build(&store, &gateway_api, &ingress, &prev.mesh))
        } else {
            prev.virtual_services.clone()
        };
        let destination_rules = if rebuild(ConfigKind::DestinationRule) {
            Arc::new(DestinationRuleIndex::build(&store, &prev.mesh))
        } else {
            prev.destination_rules.clone()
        };
        let gateways = if rebuild(ConfigKind::Gateway) || gateway_api_moved {
            Arc::new(GatewayIndex::build(&store, &gateway_api, &ingress))
        } else {
            prev.gateways.clone()
        };
        let sidecars =
            if rebuild(ConfigKind::Sidecar) { Arc::new(SidecarIndex::build(&store)) } else { prev.sidecars.clone() };
        let secrets = if rebuild(ConfigKind::Secret) || rebuild(ConfigKind::ReferenceGrant) {
            Arc::new(SecretIndex::build(&store))
        } else {
            prev.secrets.clone()
        };
        let peer_authentications = if rebuild(ConfigKind::PeerAuthentication) {
            Arc::new(PeerAuthenticationIndex::build(&store, &prev.mesh))
        } else {
            prev.peer_authentications.clone()
        };
        // A CUSTOM policy's authorizer is a service: a service change may find (or lose) it.
        let authorizers_checked = services_changed && prev.authorization.has_custom();
        let authorization = if rebuild(ConfigKind::AuthorizationPolicy) || authorizers_checked {
            Arc::new(AuthorizationIndex::build(&store, &prev.mesh))
        } else {
            prev.authorization.clone()
        };
        let authorizers_moved = authorizers_checked && !authorization.same_policies(&prev.authorization);
        let request_authentication = if rebuild(ConfigKind::RequestAuthentication) || rebuild(ConfigKind::FetchedJwks) {
            Arc::new(RequestAuthenticationIndex::build(&store, &prev.mesh))
        } else {
            prev.request_authentication.clone()
        };

        // Providers send to services: a service change may find (or lose) one's cluster.
        let telemetry = if rebuild(ConfigKind::Telemetry) || services_changed {
            Arc::new(TelemetryIndex::build(&store, &prev.mesh, &services))
        } else {
            prev.telemetry.clone()
        };
        let envoy_filters = if rebuild(ConfigKind::EnvoyFilter) {
            Arc::new(EnvoyFilterIndex::build(&store, &prev.mesh))
        } else {
            prev.envoy_filters.clone()
        };

        // Mesh routes (GAMMA, translated from HTTPRoutes whose parent is a
        // Service) route the sidecars calling their hosts: those hosts are dirty.
        let mut mesh_route_hosts: HashSet<Hostname> = HashSet::new();
        if gateway_api_moved {
            for index in [&prev.gateway_api, &gateway_api] {
                for stored in &index.virtual_services {
                    if let ConfigObject::VirtualService(vs) = &*stored.object
                        && vs.spec.gateways.iter().any(|g| g == crate::config::istio::MESH_GATEWAY)
                    {
                        mesh_route_hosts.extend(vs.spec.hosts.iter().map(|h| Hostname::from(h.as_str())));
                    }
                }
            }
        }
        let mut changes = PushChanges {
            kinds: kinds.clone(),
            endpoint_only: request.is_endpoint_only(),
            gateways: changed(ConfigKind::Gateway) || gateway_api_moved,
            dirty_hosts: mesh_route_hosts,
            every_scope: changed(ConfigKind::FetchedTrustBundle),
            ..Default::default()
        };
        for key in &request.keys {
            let old = prev.store.get(key).map(|s| &*s.object);
            let new = store.get(key).map(|s| &*s.object);
            for object in [old, new].into_iter().flatten() {
                affected_hosts(object, &prev.store, &prev.services, &services, &mut changes.dirty_hosts);
            }
            // A Node moves the endpoints of the services selecting its Pods.
            if key.kind == ConfigKind::Node {
                for pod in prev.workloads.on_node(&key.name).filter_map(|k| prev.workloads.get(k)) {
                    for index in [&prev.services, &services] {
                        let selecting = index.selecting(&pod.namespace, &pod.labels);
                        changes.dirty_hosts.extend(selecting.into_iter().map(|s| s.hostname.clone()));
                    }
                }
            }
            // A delegate has no hosts: its roots' hosts are what changed.
            let is_delegate = |o: Option<&ConfigObject>| matches!(o, Some(ConfigObject::VirtualService(vs)) if vs.spec.hosts.is_empty());
            if is_delegate(old) || is_delegate(new) {
                for index in [&prev.virtual_services, &virtual_services] {
                    for root in index.roots_of(key) {
                        if root.gateways.iter().any(|g| &**g != crate::config::istio::MESH_GATEWAY) {
                            changes.gateways = true;
                        }
                        for h in &root.hosts {
                            if h.starts_with('*') {
                                changes.full = true;
                            } else {
                                changes.dirty_hosts.insert(h.clone());
                            }
                        }
                    }
                }
            }
            if matches!(key.kind, ConfigKind::Sidecar | ConfigKind::Service | ConfigKind::ServiceEntry) {
                changes.namespaces.insert(key.namespace.clone());
            }
            if key.kind == ConfigKind::Secret {
                changes.secret_namespaces.insert(key.namespace.clone());
            }
            // An EnvoyFilter reaches the proxies of its namespace, or, from
            // the root namespace, every proxy (istiod's push scoping).
            if key.kind == ConfigKind::EnvoyFilter {
                if key.namespace == prev.mesh.root_namespace {
                    changes.full = true;
                } else {
                    changes.namespaces.insert(key.namespace.clone());
                }
            }
            // A rule bound to a gateway changes router output whatever its hosts.
            let binds_gateway = |o: Option<&ConfigObject>| {
                matches!(o, Some(ConfigObject::VirtualService(vs))
                    if vs.spec.gateways.iter().any(|g| g != crate::config::istio::MESH_GATEWAY))
            };
            if binds_gateway(old) || binds_gateway(new) {
                changes.gateways = true;
            }
        }
        // A host that appeared or disappeared changes what scopes see: every
        // scope is regenerated (adding a service is rare next to endpoint churn).
        if services_changed
            && (services.len() != prev.services.len()
                || changes.dirty_hosts.iter().any(|h| services.get(h).is_some() != prev.services.get(h).is_some()))
        {
            changes.full = true;
        }
        if prev.version == 0 {
            changes.full = true;
        }
        // Which `sourceLabels` a proxy satisfies is part of its scope key: a
        // new or gone selector moves proxies between scopes (rare: a rule
        // edit that adds or drops one), so every key is recomputed.
        if virtual_services.source_selectors() != prev.virtual_services.source_selectors() {
            changes.full = true;
        }
        // A PeerAuthentication moves the inbound keys of the workloads it
        // selects and, namespace-wide, the auto mTLS of every client of the
        // namespace's services; an AuthorizationPolicy the inbound keys of
        // the workloads it selects, wherever they are; a RequestAuthentication
        // (or a key set fetched for one) the inbound keys of the workloads
        // and the scopes of the gateways it selects; a Telemetry both keys
        // of the workloads it selects; a service change that finds or loses
        // a CUSTOM policy's authorizer the inbound keys of the workloads
        // the policy selects. All are rare enough to push to every proxy
        // (as Istio does).
        if [
            ConfigKind::PeerAuthentication,
            ConfigKind::AuthorizationPolicy,
            ConfigKind::RequestAuthentication,
            ConfigKind::FetchedJwks,
            ConfigKind::Telemetry,
        ]
        .into_iter()
        .any(changed)
            || authorizers_moved
        {
            changes.full = true;
        }
        changes.rescope = changes.full
            || gateway_api_moved
            || [
                ConfigKind::Service,
                ConfigKind::ServiceEntry,
                ConfigKind::Sidecar,
                ConfigKind::Gateway,
                ConfigKind::EnvoyFilter,
            ]
            .iter()
            .any(|k| kinds.contains(k));
        changes.types = if changes.full {
            TypeSet::ALL
        } else {
            // The Gateway API's kinds affect output only through what they
            // translate to.
            let own = kinds
                .iter()
                .filter(|k| !gateway_api_inputs.contains(k) && !ingress_inputs.contains(k))
                .fold(TypeSet::EMPTY, |set, k| set.union(affected_types(*k)));
            if gateway_api_moved { own.union(affected_types(ConfigKind::Gateway)) } else { own }
        };

        // Networks: which network each cluster is on and the gateways that
        // reach them. When they move, every endpoint's network and every
        // assignment may: rebuilt, and pushed to every proxy (as istiod
        // pushes in full on a network change).
        let networks = if changed(ConfigKind::Service)
            || changed(ConfigKind::Namespace)
            || changed(ConfigKind::ResolvedGatewayHost)
        {
            let next = NetworkIndex::build(&store, &prev.mesh);
            if next == *prev.networks { prev.networks.clone() } else { Arc::new(next) }
        } else {
            prev.networks.clone()
        };
        let networks_moved = !Arc::ptr_eq(&networks, &prev.networks);
        if networks_moved {
            changes.full = true;
            changes.types = TypeSet::ALL;
        }

        // Endpoints: rebuild the dirty hosts only (a service change can move
        // its endpoints too: new selector, new ports).
        let endpoints = if networks_moved {
            Arc::new(EndpointIndex::build(&store, &services, &workloads, &networks))
        } else if services_changed || workloads_changed || changed(ConfigKind::EndpointSlice) {
            let (index, moved) =
                EndpointIndex::update(&prev.endpoints, &store, &services, &workloads, &networks, &changes.dirty_hosts);
            // A headless service's TCP chains match its endpoints' addresses:
            // when they move, so do the listeners of the scopes that see it
            // (Istio pushes in full for a headless service's endpoints).
            let headless_tcp = |host: &Hostname| {
                services.get(host).is_some_and(|s| s.is_headless() && s.ports.iter().any(|p| !p.protocol.is_http()))
            };
            if moved.iter().any(headless_tcp) {
                changes.endpoint_only = false;
                changes.types = changes.types.union(TypeSet::of(&[TypeUrl::Listener]));
            }
            // Mesh mTLS clients check a destination's certificates for its
            // service accounts, which its clusters carry: a new or gone
            // account regenerates them, as Istio pushes in full for it.
            let accounts = |index: &EndpointIndex, host: &Hostname| index.get(host).map(|e| e.service_accounts());
            if moved.iter().any(|h| accounts(&prev.endpoints, h) != accounts(&index, h)) {
                changes.endpoint_only = false;
                changes.types = changes.types.union(TypeSet::of(&[TypeUrl::Cluster]));
            }
            changes.endpoint_hosts = moved;
            Arc::new(index)
        } else {
            prev.endpoints.clone()
        };

        // ztunnel's index: carried over when none of its inputs changed
        // (and only if some ztunnel had it built).
        changes.ambient = ambient::INPUTS.into_iter().any(changed);
        let ambient = OnceLock::new();
        if changes.ambient {
            changes.types = changes.types.union(TypeSet::of(&[TypeUrl::Address, TypeUrl::Authorization]));
            // A waypoint's listeners and clusters follow what binds to it
            // (a Pod's label can bind it): its scopes regenerate those too.
            if ambient::waypoint::any_declared(&store) {
                changes.types =
                    changes.types.union(TypeSet::of(&[TypeUrl::Listener, TypeUrl::Cluster, TypeUrl::Endpoint]));
            }
        } else if let Some(index) = prev.ambient.get() {
            let _ = ambient.set(index.clone());
        }

        let next = PushContext {
            version: prev.version + 1,
            id: next_id(),
            store,
            services,
            workloads,
            endpoints,
            networks,
            virtual_services,
            destination_rules,
            gateways,
            gateway_api,
            ingress,
            sidecars,
            secrets,
            peer_authentications,
            authorization,
            request_authentication,
            telemetry,
            envoy_filters,
            ambient,
            mesh: prev.mesh.clone(),
            interner: prev.interner.clone(),
            scopes: RwLock::new(HashMap::new()),
        };
        // Scopes the change touches must regenerate the affected types; their
        // content (what they see) is recomputed only when scope inputs
        // changed — a routing change keeps every scope object.
        {
            let prev_scopes = prev.scopes.read();
            let mut scopes = next.scopes.write();
            for (id, scope) in prev_scopes.iter() {
                let touched = changes.touches_scope(scope);
                if touched {
                    changes.touched.insert(*id);
                }
                if !(touched && changes.rescope) {
                    scopes.insert(*id, scope.clone());
                }
            }
        }
        (next, changes)
    }

    /// What ztunnel is sent in this snapshot, built on first use.
    pub fn ambient(&self) -> &Arc<AmbientIndex> {
        self.ambient.get_or_init(|| Arc::new(AmbientIndex::build(&self.store, &self.mesh)))
    }

    /// The scope key of a proxy in this snapshot.
    pub fn scope_key(&self, proxy: &Proxy) -> ScopeKey {
        scope::scope_key(self, proxy)
    }

    /// The scope of a proxy in this snapshot (computed once per scope).
    pub fn scope_for(&self, proxy: &Proxy) -> Arc<Scope> {
        let (id, key) = self.scope_key_for(proxy);
        self.scope_of(id, &key)
    }

    /// The scope of an interned key in this snapshot (computed once per scope).
    pub fn scope_of(&self, id: ScopeId, key: &ScopeKey) -> Arc<Scope> {
        if let Some(scope) = self.scopes.read().get(&id) {
            return scope.clone();
        }
        let scope = Arc::new(scope::compute(self, id, key.clone()));
        self.scopes.write().entry(id).or_insert(scope).clone()
    }

    /// The scope key of a proxy in this snapshot, interned: its id and the
    /// shared key.
    pub fn scope_key_for(&self, proxy: &Proxy) -> (ScopeId, Arc<ScopeKey>) {
        self.interner.intern(self.scope_key(proxy))
    }

    /// The inbound key of a proxy in this snapshot, interned: its id and
    /// the shared key.
    pub fn inbound_for(&self, proxy: &Proxy) -> (InboundId, Arc<InboundKey>) {
        self.interner.intern_inbound(scope::inbound_key(self, proxy))
    }

    /// A scope already computed in this snapshot.
    pub fn scope(&self, id: ScopeId) -> Option<Arc<Scope>> {
        self.scopes.read().get(&id).cloned()
    }

    /// Scopes computed in this snapshot so far.
    pub fn scopes(&self) -> Vec<Arc<Scope>> {
        self.scopes.read().values().cloned().collect()
    }

    /// The shared interner.
    pub fn interner(&self) -> &Arc<ScopeInterner> {
        &self.interner
    }
}

/// Keys of every object in a snapshot (a from-scratch request).
pub fn all_keys(store: &StoreSnapshot) -> Vec<ConfigKey> {
    store.iter().map(|s| s.object.key()).collect()
}

#[cfg(test)]
mod test;
