//! `ScopedCache`: generated resources, encoded once, shared by every proxy of a scope.
//!
//! * Scoped sets — CDS, LDS and RDS — are generated once per
//!   `(type, ScopeId)` and kept as a [`ResourceSet`]: every resource encoded
//!   to `Bytes` (an `Any`), sorted by name, with a content hash per resource
//!   and a version for the whole set.
//! * Inbound sets — a workload's own `inbound|PORT||` clusters and its
//!   `virtualInbound` listener — are cached per `(type, InboundId)`; they
//!   depend on nothing but the workload's ports, so no config change
//!   invalidates them.
//! * ClusterLoadAssignments are cached by cluster name, shared by every
//!   scope — or, for a cluster whose DestinationRule turns on locality load
//!   balancing, by cluster name and endpoint view (the proxy's locality and
//!   failover labels), shared by every proxy with that view.
//!
//! * Secrets are cached by SDS name and the namespace (and kind of proxy)
//!   that reads them, encoded once for every scope that names them.
//!
//! Invalidation follows the published snapshot: [`ScopedCache::invalidate`]
//! drops the sets of scopes the change touched (those the new `PushContext`
//! did not carry over) and the assignments of dirty hosts. A generation
//! token (the snapshot version) is checked under the same lock as the
//! insert, so a builder that started on an older snapshot can never store a
//! stale entry after a newer snapshot was published.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;
use prost::Message;

use crate::generate;
use crate::model::XdsClient;
use crate::push::index::secrets::Reader;
use crate::push::scope::EndpointView;
use crate::push::{InboundId, InboundKey, PushChanges, PushContext, Scope, ScopeId};
use crate::resource::{EncodedResource, ResourceSet, TypeUrl};

/// Counters that show the cache doing its job.
#[derive(Debug, Default)]
pub struct CacheStats {
    /// Hits per type (index: `TypeUrl::index`).
    pub hits: [AtomicU64; TypeUrl::COUNT],
    /// Misses per type.
    pub misses: [AtomicU64; TypeUrl::COUNT],
    /// Generations (a scope set or an assignment built) per type.
    pub generations: [AtomicU64; TypeUrl::COUNT],
    /// Resources encoded per type.
    pub encoded: [AtomicU64; TypeUrl::COUNT],
    /// Bytes encoded, all types.
    pub bytes_encoded: AtomicU64,
}

impl CacheStats {
    fn count(counter: &[AtomicU64; TypeUrl::COUNT], t: TypeUrl, n: u64) {
        counter[t.index()].fetch_add(n, Ordering::Relaxed);
    }

    /// Reads a per-type counter.
    pub fn get(counter: &[AtomicU64; TypeUrl::COUNT], t: TypeUrl) -> u64 {
        counter[t.index()].load(Ordering::Relaxed)
    }
}

/// A cache slot, filled once. Streams that miss on the same key at the same
/// time wait for the one that generates (single flight): a full push to
/// thousands of streams of one scope generates that scope once.
type Cell<T> = Arc<OnceLock<T>>;

/// A cached Secret: the namespace that reads it, its reader, its SDS name.
type SecretKey = (Arc<str>, Reader, Arc<str>);

#[derive(Debug, Default)]
struct Maps {
    /// The snapshot version entries must have been built from.
    generation: u64,
    sets: HashMap<(TypeUrl, ScopeId), Cell<Arc<ResourceSet>>>,
    /// CDS and LDS as a proxy gets them: a scope's set and a workload
    /// shape's inbound set together, merged once for every proxy of both.
    proxy_sets: HashMap<(TypeUrl, ScopeId, InboundId), Cell<Arc<ResourceSet>>>,
    inbound: HashMap<(TypeUrl, InboundId), Arc<ResourceSet>>,
    endpoints: HashMap<Arc<str>, Cell<Option<Arc<EncodedResource>>>>,
    /// Reverse index: host → the assignment names cached for it.
    endpoints_by_host: HashMap<Arc<str>, Vec<Arc<str>>>,
    /// Secrets by the namespace that reads them, its reader, and SDS name.
    secrets: HashMap<SecretKey, Cell<Option<Arc<EncodedResource>>>>,
    /// Proxyless gRPC servers' listeners, by workload shape and the name
    /// the server asked for (at most [`GRPC_SERVER_LISTENERS`]).
    grpc_servers: HashMap<(InboundId, Arc<str>), Arc<EncodedResource>>,
}

/// How many gRPC server listeners are kept: their names carry the address
/// a server listens on, a client string; past this many, they are built
/// for each request instead (small and cheap) rather than kept.
const GRPC_SERVER_LISTENERS: usize = 4096;

/// The cache. One per server, shared by every stream.
#[derive(Debug, Default)]
pub struct ScopedCache {
    maps: RwLock<Maps>,
    /// Counters.
    pub stats: CacheStats,
    /// What EnvoyFilter patches did in the generations so far.
    pub patches: generate::envoy_filter::PatchLog,
}

impl ScopedCache {
    /// An empty cache.
    pub fn new() -> ScopedCache {
        ScopedCache::default()
    }

    /// The CDS, LDS or RDS set of `scope`, generated on a miss.
    pub fn scoped(&self, ctx: &PushContext, scope: &Scope, type_url: TypeUrl) -> Arc<ResourceSet> {
        debug_assert!(type_url != TypeUrl::Endpoint, "assignments are cached by name");
        let key = (type_url, scope.id);
        let cell = self.cell(ctx, |m| &m.sets, |m| &mut m.sets, key);
        let mut generated = false;
        let set = cell
            .get_or_init(|| {
                generated = true;
                Arc::new(self.generate(ctx, scope, type_url))
            })
            .clone();
        self.count_lookup(type_url, generated);
        set
    }

    /// The CDS or LDS set of a proxy in `scope` with workload shape
    /// `inbound`: the scope's set and the shape's inbound set in one, built
    /// once for every proxy that shares both (the scope's set itself when
    /// the shape adds nothing).
    pub fn proxy_set(
        &self,
        ctx: &PushContext,
        scope: &Scope,
        inbound: &(InboundId, Arc<InboundKey>),
        type_url: TypeUrl,
    ) -> Arc<ResourceSet> {
        debug_assert!(matches!(type_url, TypeUrl::Cluster | TypeUrl::Listener));
        let (id, key) = inbound;
        let cell = self.cell(ctx, |m| &m.proxy_sets, |m| &mut m.proxy_sets, (type_url, scope.id, *id));
        if let Some(set) = cell.get() {
            CacheStats::count(&self.stats.hits, type_url, 1);
            return set.clone();
        }
        cell.get_or_init(|| {
            let outbound = self.scoped(ctx, scope, type_url);
            let inbound = self.inbound(*id, key, type_url);
            if inbound.resources.is_empty() { outbound } else { Arc::new(ResourceSet::union(&outbound, &inbound)) }
        })
        .clone()
    }

    /// The cell for `key`: the cached one, a new cached one when the cache
    /// is at `ctx`'s generation, else a private one (never stored: `ctx` is
    /// older than what the cache was brought to).
    fn cell<K: std::hash::Hash + Eq, T>(
        &self,
        ctx: &PushContext,
        get: impl Fn(&Maps) -> &HashMap<K, Cell<T>>,
        get_mut: impl Fn(&mut Maps) -> &mut HashMap<K, Cell<T>>,
        key: K,
    ) -> Cell<T> {
        if let Some(cell) = get(&self.maps.read()).get(&key) {
            return cell.clone();
        }
        let mut maps = self.maps.write();
        if maps.generation != ctx.version {
            return Cell::default();
        }
        get_mut(&mut maps).entry(key).or_default().clone()
    }

    /// Records a cached assignment key under its host, so invalidation
    /// finds the assignments of a changed host without scanning them all.
    fn index_endpoint(&self, key: &str, cluster: &str) {
        if let Some(host) = crate::generate::eds::host_of(cluster) {
            let mut maps = self.maps.write();
            if let Some((name, _)) = maps.endpoints.get_key_value(key) {
                let name = name.clone();
                maps.endpoints_by_host.entry(Arc::from(host)).or_default().push(name);
            }
        }
    }

    fn count_lookup(&self, type_url: TypeUrl, generated: bool) {
        if generated {
            CacheStats::count(&self.stats.misses, type_url, 1);
        } else {
            CacheStats::count(&self.stats.hits, type_url, 1);
        }
    }

    /// The inbound CDS or LDS set of a workload shape, generated on a miss.
    pub fn inbound(&self, id: InboundId, key: &InboundKey, type_url: TypeUrl) -> Arc<ResourceSet> {
        if let Some(set) = self.maps.read().inbound.get(&(type_url, id)) {
            CacheStats::count(&self.stats.hits, type_url, 1);
            return set.clone();
        }
        CacheStats::count(&self.stats.misses, type_url, 1);
        CacheStats::count(&self.stats.generations, type_url, 1);
        let mut record = generate::envoy_filter::Record::default();
        let resources: Vec<Arc<EncodedResource>> = match type_url {
            // A gRPC server's listeners are asked for by name
            // (`grpc_server_listener`), and it has no inbound clusters.
            _ if key.client == XdsClient::Grpc => Vec::new(),
            TypeUrl::Cluster => generate::envoy_filter::inbound_clusters(key, &mut record)
                .iter()
                .map(|c| Arc::new(self.encode(type_url, c.name.as_str().into(), c)))
                .collect(),
            TypeUrl::Listener => generate::envoy_filter::inbound_listeners(key, &mut record)
                .iter()
                .map(|l| Arc::new(self.encode(type_url, l.name.as_str().into(), l)))
                .collect(),
            TypeUrl::Route
            | TypeUrl::Endpoint
            | TypeUrl::Secret
            | TypeUrl::ProxyConfig
            | TypeUrl::ExtensionConfig
            | TypeUrl::Address
            | TypeUrl::Authorization => Vec::new(),
        };
        self.patches.add(record);
        let set = Arc::new(ResourceSet::new(resources));
        // A pure function of the key: no generation check needed.
        self.maps.write().inbound.entry((type_url, id)).or_insert(set).clone()
    }

    /// The listener `name` of a proxyless gRPC server of shape `inbound`
    /// (`generate::grpc::lds::server_listener`); `None` when the name is
    /// not one of its server listeners.
    pub fn grpc_server_listener(
        &self,
        inbound: &(InboundId, Arc<InboundKey>),
        name: &str,
    ) -> Option<Arc<EncodedResource>> {
        let (id, key) = inbound;
        if let Some(hit) = self.maps.read().grpc_servers.get(&(*id, Arc::from(name))) {
            CacheStats::count(&self.stats.hits, TypeUrl::Listener, 1);
            return Some(hit.clone());
        }
        CacheStats::count(&self.stats.misses, TypeUrl::Listener, 1);
        let listener = generate::grpc::lds::server_listener(key, name)?;
        CacheStats::count(&self.stats.generations, TypeUrl::Listener, 1);
        let encoded = Arc::new(self.encode(TypeUrl::Listener, name.into(), &listener));
        // A pure function of the key and the name: no generation check needed.
        let mut maps = self.maps.write();
        if maps.grpc_servers.len() < GRPC_SERVER_LISTENERS {
            maps.grpc_servers.insert((*id, encoded.name.clone()), encoded.clone());
        }
        Some(encoded)
    }

    /// The ClusterLoadAssignment for a cluster name as a proxy with endpoint
    /// `view` gets it; `None` when no such cluster exists. Assignments that
    /// do not depend on the view (most: see `eds`) are cached once by name.
    pub fn endpoint(
        &self,
        ctx: &PushContext,
        cluster: &str,
        view: Option<&EndpointView>,
    ) -> Option<Arc<EncodedResource>> {
        let keyed = view.and_then(|v| crate::generate::eds::view_key(ctx, cluster, v));
        let view = view.filter(|_| keyed.is_some());
        let key = keyed.as_deref().unwrap_or(cluster);
        // Hits look up by `&str`: no allocation on the hot path.
        let hit = self.maps.read().endpoints.get(key).cloned();
        let cell = match hit {
            Some(cell) => cell,
            None => self.cell(ctx, |m| &m.endpoints, |m| &mut m.endpoints, Arc::from(key)),
        };
        let mut generated = false;
        let r = cell
            .get_or_init(|| {
                generated = true;
                self.index_endpoint(key, cluster);
                let cla = crate::generate::eds::load_assignment(ctx, cluster, view)?;
                CacheStats::count(&self.stats.generations, TypeUrl::Endpoint, 1);
                Some(Arc::new(self.encode(TypeUrl::Endpoint, cluster.into(), &cla)))
            })
            .clone();
        self.count_lookup(TypeUrl::Endpoint, generated);
        r
    }

    /// The Secret `name` as a proxy of `namespace` reads it, encoded once
    /// for every scope that names it; `None` when it does not resolve.
    fn secret(&self, ctx: &PushContext, namespace: &str, reader: Reader, name: &str) -> Option<Arc<EncodedResource>> {
        let key = (Arc::from(namespace), reader, Arc::from(name));
        let cell = self.cell(ctx, |m| &m.secrets, |m| &mut m.secrets, key);
        cell.get_or_init(|| {
            let Some(secret) = crate::generate::sds::secret(ctx, namespace, reader, name) else {
                // Gateway servers without their Secret are left out; what
                // remains is a DestinationRule's credentialName.
                tracing::warn!(
                    namespace,
                    secret = name,
                    "TLS origination names a Secret this namespace does not have (or may not read): connections wait for it, then fail"
                );
                return None;
            };
            CacheStats::count(&self.stats.generations, TypeUrl::Secret, 1);
            Some(Arc::new(self.encode(TypeUrl::Secret, name.into(), &secret)))
        })
        .clone()
    }

    fn encode<M: Message>(&self, type_url: TypeUrl, name: Arc<str>, message: &M) -> EncodedResource {
        let r = EncodedResource::encode(type_url, name, message);
        CacheStats::count(&self.stats.encoded, type_url, 1);
        self.stats.bytes_encoded.fetch_add(r.bytes.len() as u64, Ordering::Relaxed);
        r
    }

    fn generate(&self, ctx: &PushContext, scope: &Scope, type_url: TypeUrl) -> ResourceSet {
        CacheStats::count(&self.stats.generations, type_url, 1);
        let mut record = generate::envoy_filter::Record::default();
        let grpc = scope.key.client == XdsClient::Grpc;
        let resources: Vec<Arc<EncodedResource>> = match type_url {
            // Proxyless gRPC: its own generator, and no EnvoyFilter.
            TypeUrl::Cluster if grpc => generate::grpc::cds::clusters(ctx, scope)
                .iter()
                .map(|c| Arc::new(self.encode(type_url, c.name.as_str().into(), c)))
                .collect(),
            TypeUrl::Listener if grpc => generate::grpc::lds::listeners(ctx, scope)
                .iter()
                .map(|l| Arc::new(self.encode(type_url, l.name.as_str().into(), l)))
                .collect(),
            TypeUrl::Route if grpc => generate::grpc::rds::route_configs(ctx, scope)
                .iter()
                .map(|r| Arc::new(self.encode(type_url, r.name.as_str().into(), r)))
                .collect(),
            TypeUrl::Cluster => generate::envoy_filter::clusters(ctx, scope, &mut record)
                .iter()
                .map(|c| Arc::new(self.encode(type_url, c.name.as_str().into(), c)))
                .collect(),
            TypeUrl::Listener => generate::envoy_filter::listeners(ctx, scope, &mut record)
                .iter()
                .map(|l| Arc::new(self.encode(type_url, l.name.as_str().into(), l)))
                .collect(),
            TypeUrl::Route => generate::envoy_filter::route_configs(ctx, scope, &mut record)
                .iter()
                .map(|r| Arc::new(self.encode(type_url, r.name.as_str().into(), r)))
                .collect(),
            TypeUrl::Secret => {
                let reader = crate::generate::sds::reader(scope);
                crate::generate::sds::secret_names(ctx, scope)
                    .iter()
                    .filter_map(|name| self.secret(ctx, &scope.key.namespace, reader, name))
                    .collect()
            }
            TypeUrl::ProxyConfig => crate::generate::pcds::proxy_config(ctx)
                .map(|config| Arc::new(self.encode(type_url, "".into(), &config)))
                .into_iter()
                .collect(),
            TypeUrl::ExtensionConfig => generate::envoy_filter::extension_configs(scope, &mut record)
                .iter()
                .map(|c| Arc::new(self.encode(type_url, c.name.as_str().into(), c)))
                .collect(),
            // One set for every ztunnel, encoded once by the snapshot's index.
            TypeUrl::Address => ctx.ambient().addresses.clone(),
            TypeUrl::Authorization => ctx.ambient().authorizations.clone(),
            TypeUrl::Endpoint => Vec::new(),
        };
        self.patches.add(record);
        ResourceSet::new(resources)
    }

    /// Brings the cache to snapshot `ctx` (call before publishing it): drops
    /// the sets of every scope `ctx` did not carry over and the assignments
    /// of the hosts `changes` names.
    pub fn invalidate(&self, ctx: &PushContext, changes: &PushChanges) {
        let mut maps = self.maps.write();
        maps.generation = ctx.version;
        // A set survives if its scope was carried over, or if the change
        // cannot affect its type (a routing change keeps every scope's clusters).
        let stale = |t: TypeUrl, scope: ScopeId| {
            changes.types.contains(t)
                && (changes.full || changes.touched.contains(&scope) || ctx.scope(scope).is_none())
        };
        maps.sets.retain(|(t, scope), _| !stale(*t, *scope));
        maps.proxy_sets.retain(|(t, scope, _), _| !stale(*t, *scope));
        if changes.full {
            maps.endpoints.clear();
            maps.endpoints_by_host.clear();
            maps.secrets.clear();
        } else {
            maps.secrets.retain(|(namespace, _, _), _| !changes.secret_namespaces.contains(namespace));
            for host in &changes.dirty_hosts {
                for name in maps.endpoints_by_host.remove(&**host).unwrap_or_default() {
                    maps.endpoints.remove(&name);
                }
            }
        }
    }

    /// Drops the sets of scopes and workload shapes no connection uses any
    /// more (bounded memory).
    pub fn retain_live(&self, scopes: &HashSet<ScopeId>, inbound: &HashSet<InboundId>) {
        let mut maps = self.maps.write();
        maps.sets.retain(|(_, scope), _| scopes.contains(scope));
        maps.proxy_sets.retain(|(_, scope, id), _| scopes.contains(scope) && inbound.contains(id));
        maps.inbound.retain(|(_, id), _| inbound.contains(id));
        maps.grpc_servers.retain(|(id, _), _| inbound.contains(id));
    }

    /// Number of cached scope sets and assignments.
    pub fn len(&self) -> (usize, usize) {
        let maps = self.maps.read();
        (maps.sets.len(), maps.endpoints.len())
    }

    /// Whether the cache holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == (0, 0)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::push::{PushRequest, ScopeInterner};
    use crate::testing::bookinfo;

    fn productpage(ctx: &PushContext) -> Arc<Scope> {
        ctx.scope_for(&bookinfo::productpage())
    }

    fn generations(cache: &ScopedCache, t: TypeUrl) -> u64 {
        CacheStats::get(&cache.stats.generations, t)
    }

    /// A snapshot of the bookinfo mesh, version `version`, and the cache brought to it.
    fn cache_at(version: u64) -> (PushContext, ScopedCache) {
        let ctx = PushContext::build(bookinfo::store().snapshot(), version, Arc::new(ScopeInterner::default()));
        let cache = ScopedCache::new();
        cache.invalidate(&ctx, &PushChanges { full: true, types: crate::resource::TypeSet::ALL, ..Default::default() });
        (ctx, cache)
    }

    #[test]
    fn a_scope_set_is_generated_once_and_shared() {
        let (ctx, cache) = cache_at(1);
        let scope = productpage(&ctx);
        let first = cache.scoped(&ctx, &scope, TypeUrl::Cluster);
        let again = cache.scoped(&ctx, &scope, TypeUrl::Cluster);
        assert!(Arc::ptr_eq(&first, &again), "the same set, not a copy");
        assert_eq!(generations(&cache, TypeUrl::Cluster), 1);
        assert!(!first.resources.is_empty());
    }

    #[test]
    fn grpc_clients_of_a_namespace_share_one_generation_apart_from_envoys() {
        let (ctx, cache) = cache_at(1);
        let grpc = |id: &str| {
            crate::model::Proxy::from_node(&crate::testing::memory::grpc_node(id, &[("app", "productpage")])).unwrap()
        };
        let first = ctx.scope_for(&grpc("sidecar~10.0.0.1~productpage-v1.default~default.svc.cluster.local"));
        let second = ctx.scope_for(&grpc("sidecar~10.0.0.2~productpage-v2.default~default.svc.cluster.local"));
        assert_eq!(first.id, second.id);
        let set = cache.scoped(&ctx, &first, TypeUrl::Listener);
        assert!(Arc::ptr_eq(&set, &cache.scoped(&ctx, &second, TypeUrl::Listener)));
        assert_eq!(generations(&cache, TypeUrl::Listener), 1, "one generation for the namespace's gRPC clients");
        assert!(set.get("reviews:9080").is_some(), "gRPC's listeners, by dialled name");
        let envoy = cache.scoped(&ctx, &productpage(&ctx), TypeUrl::Listener);
        assert!(envoy.get("reviews:9080").is_none(), "the sidecar's own set");

        // A server's listener, by the address it listens on: built once.
        let server = grpc("sidecar~10.0.0.1~productpage-v1.default~default.svc.cluster.local");
        let inbound = ctx.inbound_for(&server);
        let name = "xds.istio.io/grpc/lds/inbound/0.0.0.0:9080";
        let before = generations(&cache, TypeUrl::Listener);
        let listener = cache.grpc_server_listener(&inbound, name).expect("productpage's port");
        assert!(Arc::ptr_eq(&listener, &cache.grpc_server_listener(&inbound, name).unwrap()));
        assert_eq!(generations(&cache, TypeUrl::Listener) - before, 1);
        assert!(cache.grpc_server_listener(&inbound, "xds.istio.io/grpc/lds/inbound/0.0.0.0:1").is_none());
    }

    #[test]
    fn a_builder_on_an_older_snapshot_never_stores_its_output() {
        let (ctx, cache) = cache_at(2);
        let older = PushContext::build(bookinfo::store().snapshot(), 1, ctx.interner().clone());
        let scope = productpage(&older);
        cache.scoped(&older, &scope, TypeUrl::Route);
        cache.scoped(&older, &scope, TypeUrl::Route);
        assert_eq!(generations(&cache, TypeUrl::Route), 2, "output of an older snapshot is not kept");
        assert_eq!(cache.len().0, 0);
        cache.scoped(&ctx, &productpage(&ctx), TypeUrl::Route);
        assert_eq!(cache.len().0, 1, "output of the cache's own snapshot is");
    }

    #[test]
    fn an_endpoint_change_drops_only_its_hosts_assignments() {
        let store = bookinfo::store();
        let prev = PushContext::build(store.snapshot(), 1, Arc::new(ScopeInterner::default()));
        let cache = ScopedCache::new();
        cache
            .invalidate(&prev, &PushChanges { full: true, types: crate::resource::TypeSet::ALL, ..Default::default() });
        let reviews = "outbound|9080|v1|reviews.default.svc.cluster.local";
        let ratings = "outbound|9080||ratings.default.svc.cluster.local";
        let old_reviews = cache.endpoint(&prev, reviews, None).expect("an assignment");
        cache.endpoint(&prev, ratings, None).expect("an assignment");
        let changes = store.apply(bookinfo::puts(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: reviews-v1, namespace: default, labels: {app: reviews, version: v1}}\nstatus: {podIP: 127.0.0.43, phase: Running}\n",
        ));
        let (next, pushed) = PushContext::next(&prev, changes.snapshot.clone(), &PushRequest::new(changes));
        cache.invalidate(&next, &pushed);
        let before = generations(&cache, TypeUrl::Endpoint);
        let new_reviews = cache.endpoint(&next, reviews, None).expect("an assignment");
        cache.endpoint(&next, ratings, None).expect("an assignment");
        assert_eq!(generations(&cache, TypeUrl::Endpoint) - before, 1, "only the changed host's assignment is rebuilt");
        assert_ne!(old_reviews.hash, new_reviews.hash);
        assert!(cache.stats.hits[TypeUrl::Endpoint.index()].load(Ordering::Relaxed) >= 1);
    }
}
