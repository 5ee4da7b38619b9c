//! `EnvoyFilterIndex`: the EnvoyFilters of a snapshot, their patch values
//! read once as Envoy messages, and which patches apply to a proxy, in
//! the order istiod applies them (`PushContext.EnvoyFilters`).
//!
//! - **Which filters:** those of the mesh's root namespace and of the
//!   proxy's own namespace. A filter with `targetRefs` applies only to a
//!   Gateway API proxy (one labelled `gateway.networking.k8s.io/gateway-name`)
//!   whose Gateway it names, or, from the root namespace, to a waypoint
//!   through the `istio-waypoint` GatewayClass; otherwise its
//!   `workloadSelector` must be a subset of the proxy's labels (absent or
//!   empty: every proxy).
//! - **Order:** priority; then, between a root-namespace filter and
//!   another, the root one; then creation time; then `name.namespace`.
//!   Patches keep their order within a filter.
//! - **Per patch:** the proxy match — `proxyVersion`, a regular expression
//!   the node's `ISTIO_VERSION` must match (none matches a node without a
//!   version; a pattern over 1,024 characters matches nothing), and
//!   `metadata`, keys the node must hold with exactly these values.
//! - **Values** are read through Envoy's descriptors when the filter is
//!   indexed, by validation's own reader: a patch whose value does not
//!   read, or that puts in what Envoy would refuse, is left out
//!   (validation has reported it with its path), the filter's other
//!   patches stay. `INSERT_*` on a kind without order (anything but the
//!   three filter kinds and HTTP routes) is an `ADD`, as istiod rewrites it.
//!
//! Invariant: a [`ResolvedPatch`] is immutable and shared by `Arc`; two
//! are equal when they come from the same filter revision and position,
//! so a scope keyed by the patches that apply to it changes exactly when
//! one of them does.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use prost_reflect::DynamicMessage;
use regex::Regex;

use crate::config::istio::envoy_filter::{ApplyTo, EnvoyFilter, ObjectMatch, Operation, PatchContext};
use crate::config::mesh::MeshConfig;
use crate::config::validate::envoy_filter::{MAX_PROXY_VERSION_LEN, read_value};
use crate::config::{ConfigKey, ConfigKind, ConfigObject};
use crate::model::{Proxy, StoreSnapshot};

/// The label that makes a proxy a Gateway API one, naming its Gateway.
pub const GATEWAY_NAME_LABEL: &str = "gateway.networking.k8s.io/gateway-name";
/// The node metadata key that holds a proxy's Istio version.
pub const ISTIO_VERSION: &str = "ISTIO_VERSION";

/// How a patch's `proxyVersion` is matched.
#[derive(Debug, Clone)]
pub enum VersionMatch {
    /// No `proxyVersion`: every proxy.
    Any,
    /// A regular expression the version must match (unanchored).
    Pattern(Regex),
    /// A pattern too long to compile: no proxy.
    Never,
}

/// One patch of one filter, its value read.
#[derive(Debug)]
pub struct ResolvedPatch {
    /// The filter it belongs to.
    pub filter: ConfigKey,
    /// The filter's content hash: with `index`, what the patch is.
    revision: u64,
    /// Its position in `spec.configPatches`.
    pub index: usize,
    /// What it patches.
    pub apply_to: ApplyTo,
    /// How (after istiod's `INSERT_*` to `ADD` rewrite).
    pub operation: Operation,
    /// Where (an absent match is context ANY, matching everything).
    pub matches: ObjectMatch,
    /// The value as the message `apply_to` names (`None` for a REMOVE).
    pub value: Option<DynamicMessage>,
    /// The proxy version it wants.
    pub version: VersionMatch,
    /// A MERGE's value encoded, when protobuf's binary merge of it gives
    /// Istio's merge (no Duration in it): merged without the pool.
    merge_bytes: Option<Vec<u8>>,
}

impl PartialEq for ResolvedPatch {
    fn eq(&self, other: &Self) -> bool {
        self.filter == other.filter && self.revision == other.revision && self.index == other.index
    }
}

impl Eq for ResolvedPatch {}

impl Hash for ResolvedPatch {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (&self.filter, self.revision, self.index).hash(state);
    }
}

impl PartialOrd for ResolvedPatch {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ResolvedPatch {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (&self.filter, self.revision, self.index).cmp(&(&other.filter, other.revision, other.index))
    }
}

impl serde::Serialize for ResolvedPatch {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.label())
    }
}

impl ResolvedPatch {
    /// The value's bytes to merge as protobuf merges them, when that is
    /// Istio's merge too (a MERGE whose value holds no Duration).
    pub fn merge_bytes(&self) -> Option<&[u8]> {
        self.merge_bytes.as_deref()
    }

    /// The filter revision (content hash) the patch was read from.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// `NAMESPACE/NAME[INDEX]`: the patch as reports name it.
    pub fn label(&self) -> String {
        format!("{}/{}[{}]", self.filter.namespace, self.filter.name, self.index)
    }

    /// Whether the patch is read in `context` (its own, or ANY).
    pub fn in_context(&self, context: PatchContext) -> bool {
        self.matches.context == PatchContext::Any || self.matches.context == context
    }

    /// Whether the patch wants `proxy`, by version and metadata.
    pub fn wants(&self, proxy: &Proxy) -> bool {
        let version = proxy.metadata.get(ISTIO_VERSION).unwrap_or_default();
        let version_ok = match &self.version {
            VersionMatch::Any => true,
            VersionMatch::Never => false,
            VersionMatch::Pattern(re) => !version.is_empty() && re.is_match(version),
        };
        let metadata = self.matches.proxy.as_ref().map(|p| &p.metadata);
        version_ok && metadata.into_iter().flatten().all(|(k, v)| proxy.metadata.get(k) == Some(v.as_str()))
    }
}

/// One indexed filter.
#[derive(Debug)]
struct IndexedFilter {
    key: ConfigKey,
    revision: u64,
    priority: i32,
    created: String,
    selector: Option<BTreeMap<String, String>>,
    targets: Vec<crate::config::istio::TargetRef>,
    patches: Vec<Arc<ResolvedPatch>>,
}

/// The EnvoyFilters of a snapshot, by namespace.
#[derive(Debug, Default)]
pub struct EnvoyFilterIndex {
    by_namespace: HashMap<Arc<str>, Vec<Arc<IndexedFilter>>>,
    root_namespace: Arc<str>,
}

impl EnvoyFilterIndex {
    /// Indexes the EnvoyFilters of `store`.
    pub fn build(store: &StoreSnapshot, mesh: &MeshConfig) -> EnvoyFilterIndex {
        let mut index = EnvoyFilterIndex { root_namespace: mesh.root_namespace.clone(), ..Default::default() };
        for stored in store.kind(ConfigKind::EnvoyFilter).values() {
            let ConfigObject::EnvoyFilter(filter) = &*stored.object else { continue };
            let indexed = indexed(filter, stored.object.key(), revision(filter));
            index.by_namespace.entry(filter.metadata.namespace().into()).or_default().push(Arc::new(indexed));
        }
        index
    }

    /// The revision of the filter `key` indexed (`None`: not indexed).
    pub fn revision_of(&self, key: &ConfigKey) -> Option<u64> {
        let filters = self.by_namespace.get(&key.namespace)?;
        filters.iter().find(|f| &f.key == key).map(|f| f.revision)
    }

    /// Whether the snapshot has any EnvoyFilter (a mesh without pays nothing).
    pub fn is_empty(&self) -> bool {
        self.by_namespace.is_empty()
    }

    /// The patches that apply to `proxy`, in istiod's order.
    pub fn for_proxy(&self, proxy: &Proxy) -> Vec<Arc<ResolvedPatch>> {
        if self.is_empty() {
            return Vec::new();
        }
        let root = &*self.root_namespace;
        let mut filters: Vec<&Arc<IndexedFilter>> = Vec::new();
        if !root.is_empty() {
            filters.extend(self.by_namespace.get(root).into_iter().flatten());
        }
        if &*proxy.namespace != root {
            filters.extend(self.by_namespace.get(&*proxy.namespace).into_iter().flatten());
        }
        filters.retain(|f| selects(f, proxy, root));
        filters.sort_by(|a, b| {
            let root_first = |f: &IndexedFilter| f.key.namespace.as_ref() != root;
            a.priority
                .cmp(&b.priority)
                .then_with(|| {
                    if a.key.namespace == b.key.namespace {
                        std::cmp::Ordering::Equal
                    } else {
                        root_first(a).cmp(&root_first(b))
                    }
                })
                .then_with(|| a.created.cmp(&b.created))
                .then_with(|| {
                    let full = |f: &IndexedFilter| format!("{}.{}", f.key.name, f.key.namespace);
                    full(a).cmp(&full(b))
                })
        });
        filters.into_iter().flat_map(|f| f.patches.iter()).filter(|p| p.wants(proxy)).cloned().collect()
    }
}

/// The patches a sidecar's inbound side reads (context SIDECAR_INBOUND or
/// ANY), with what their cluster matches need to know of the workload.
/// Part of the workload's inbound key: `None` when no patch applies, so a
/// mesh without EnvoyFilters keys inbound configuration as before.
#[derive(Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct InboundPatches {
    /// The patches, in istiod's order.
    pub patches: Vec<Arc<ResolvedPatch>>,
    /// Per inbound port, the hostnames of the services that select the
    /// workload there: what a cluster match's `service` is compared with
    /// on an `inbound|PORT||` cluster, whose name holds no host.
    pub hosts: BTreeMap<u32, Vec<crate::model::Hostname>>,
}

impl EnvoyFilterIndex {
    /// The patches of `proxy`'s outbound side (a sidecar's SIDECAR_OUTBOUND,
    /// a gateway's GATEWAY, and ANY), and the extension configs (whose
    /// context istiod does not read). BOOTSTRAP patches are left out: the
    /// bootstrap is the agent's, and validation reported them.
    pub fn outbound(&self, proxy: &Proxy) -> Vec<Arc<ResolvedPatch>> {
        let context = match proxy.kind {
            crate::model::ProxyKind::Router => PatchContext::Gateway,
            crate::model::ProxyKind::Sidecar => PatchContext::SidecarOutbound,
            // EnvoyFilters patch Envoy's configuration; ztunnel has none.
            // A waypoint's patches (istiod's WAYPOINT matches and
            // SIDECAR_INBOUND on it) are not applied: README says so.
            crate::model::ProxyKind::Ztunnel | crate::model::ProxyKind::Waypoint => return Vec::new(),
        };
        let mut patches = self.for_proxy(proxy);
        patches.retain(|p| {
            p.apply_to != ApplyTo::Bootstrap && (p.apply_to == ApplyTo::ExtensionConfig || p.in_context(context))
        });
        patches
    }

    /// The patches of a sidecar's inbound side (SIDECAR_INBOUND and ANY;
    /// none for a gateway), extension configs and BOOTSTRAP left out.
    pub fn inbound(&self, proxy: &Proxy) -> Vec<Arc<ResolvedPatch>> {
        if proxy.kind != crate::model::ProxyKind::Sidecar {
            return Vec::new();
        }
        let mut patches = self.for_proxy(proxy);
        patches.retain(|p| {
            !matches!(p.apply_to, ApplyTo::Bootstrap | ApplyTo::ExtensionConfig)
                && p.in_context(PatchContext::SidecarInbound)
        });
        patches
    }
}

/// Whether `filter` selects `proxy` (its namespace already fits).
fn selects(filter: &IndexedFilter, proxy: &Proxy, root: &str) -> bool {
    let gateway = proxy.labels.get(GATEWAY_NAME_LABEL);
    if !filter.targets.is_empty() {
        let Some(gateway) = gateway else { return false };
        let waypoint = proxy.labels.get("gateway.istio.io/managed").is_some_and(|m| m == "istio.io-mesh-controller");
        return filter.targets.iter().any(|t| {
            let group = t.group.as_deref().unwrap_or_default();
            if group != "gateway.networking.k8s.io" {
                return false;
            }
            match t.kind.as_str() {
                "GatewayClass" => {
                    waypoint && &*filter.key.namespace == root && t.name == super::ambient::waypoint::WAYPOINT_CLASS
                }
                "Gateway" => filter.key.namespace == proxy.namespace && &t.name == gateway,
                _ => false,
            }
        });
    }
    match &filter.selector {
        None => true,
        Some(labels) => labels.iter().all(|(k, v)| proxy.labels.get(k) == Some(v)),
    }
}

/// A filter's content hash: a change of any patch changes every patch's identity.
fn revision(filter: &EnvoyFilter) -> u64 {
    let text = serde_json::to_string(&filter.spec).unwrap_or_default();
    xxhash_rust::xxh3::xxh3_64(text.as_bytes())
}

fn indexed(filter: &EnvoyFilter, key: ConfigKey, revision: u64) -> IndexedFilter {
    let spec = &filter.spec;
    let patches = spec
        .config_patches
        .iter()
        .enumerate()
        .filter_map(|(index, patch)| {
            let body = patch.patch.as_ref()?;
            let operation = match body.operation {
                Operation::Invalid => return None,
                Operation::InsertBefore | Operation::InsertAfter | Operation::InsertFirst
                    if !matches!(
                        patch.apply_to,
                        ApplyTo::HttpFilter | ApplyTo::NetworkFilter | ApplyTo::HttpRoute | ApplyTo::ListenerFilter
                    ) =>
                {
                    Operation::Add
                }
                op => op,
            };
            let value = match (&body.value, patch.apply_to.value_type()) {
                (_, None) => return None,
                (None, _) if operation == Operation::Remove => None,
                (None, _) => return None,
                (Some(v), Some(_)) => Some(read_value(patch.apply_to, operation, v).ok()?),
            };
            let matches = patch.match_.clone().unwrap_or_default();
            let version = match matches.proxy.as_ref().map(|p| p.proxy_version.as_str()).unwrap_or_default() {
                "" => VersionMatch::Any,
                long if long.len() > MAX_PROXY_VERSION_LEN => VersionMatch::Never,
                pattern => VersionMatch::Pattern(Regex::new(pattern).ok()?),
            };
            let merge_bytes = value
                .as_ref()
                .filter(|v| operation == Operation::Merge && !holds_duration(v))
                .map(prost::Message::encode_to_vec);
            Some(Arc::new(ResolvedPatch {
                filter: key.clone(),
                revision,
                index,
                apply_to: patch.apply_to,
                operation,
                matches,
                value,
                version,
                merge_bytes,
            }))
        })
        .collect();
    IndexedFilter {
        key,
        revision,
        priority: spec.priority,
        created: filter.metadata.creation_timestamp.clone().unwrap_or_default(),
        selector: spec.workload_selector.as_ref().map(|s| s.labels.clone()),
        targets: spec.target_refs.clone(),
        patches,
    }
}

/// Whether a Duration is set anywhere in `message` outside an `Any` (an
/// `Any` is replaced whole by either merge).
fn holds_duration(message: &DynamicMessage) -> bool {
    use prost_reflect::{ReflectMessage, Value};
    fn value(v: &Value) -> bool {
        match v {
            Value::Message(m) => holds_duration(m),
            Value::List(items) => items.iter().any(value),
            Value::Map(entries) => entries.values().any(value),
            _ => false,
        }
    }
    match message.descriptor().full_name() {
        "google.protobuf.Duration" => true,
        "google.protobuf.Any" => false,
        _ => message.fields().any(|(_, v)| value(v)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ConfigStore;

    fn index(yaml: &str) -> EnvoyFilterIndex {
        let store = ConfigStore::new();
        let parsed = crate::config::parse::parse_documents("filters.yaml", yaml);
        assert!(parsed.problems.iter().all(|p| !p.is_error()), "{:#?}", parsed.problems);
        store.apply(parsed.objects.into_iter().map(|(o, s)| crate::model::store::Write::put(o, s)).collect::<Vec<_>>());
        EnvoyFilterIndex::build(&store.snapshot(), &MeshConfig::default())
    }

    /// A filter with one CLUSTER REMOVE patch per name in `clusters`.
    fn filter(namespace: &str, name: &str, extra: &str, clusters: &[&str]) -> String {
        let patches: String = clusters
            .iter()
            .map(|c| {
                format!(
                    "  - applyTo: CLUSTER\n    match: {{cluster: {{name: {c}}}}}\n    patch: {{operation: REMOVE}}\n"
                )
            })
            .collect();
        format!(
            "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {{name: {name}, namespace: {namespace}}}\nspec:\n{extra}  configPatches:\n{patches}---\n"
        )
    }

    fn proxy(namespace: &str, labels: &[(&str, &str)], metadata: &[(&str, &str)]) -> Proxy {
        let mut p = crate::testing::bookinfo::proxy(
            &format!("sidecar~10.0.0.1~p.{namespace}~{namespace}.svc.cluster.local"),
            "REDIRECT",
            labels,
        );
        p.namespace = namespace.into();
        p.metadata = metadata.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        p
    }

    /// The cluster names of the patches that apply to `p`, in order.
    fn applied(index: &EnvoyFilterIndex, p: &Proxy) -> Vec<String> {
        index.for_proxy(p).iter().map(|patch| patch.matches.cluster.as_ref().unwrap().name.clone()).collect()
    }

    #[test]
    fn root_and_own_namespace_filters_apply_in_istio_s_order() {
        let yaml = [
            filter("shop", "b-local", "", &["shop-b"]),
            filter("shop", "a-local", "", &["shop-a"]),
            filter("istio-system", "mesh", "", &["mesh"]),
            filter("shop", "early", "  priority: -1\n", &["early"]),
            filter("other", "elsewhere", "", &["other"]),
        ]
        .concat();
        let index = index(&yaml);
        // Priority first; among equals the root namespace first, then (no
        // creation times in files) by name.
        assert_eq!(applied(&index, &proxy("shop", &[], &[])), ["early", "mesh", "shop-a", "shop-b"]);
        assert_eq!(applied(&index, &proxy("istio-system", &[], &[])), ["mesh"], "the root's filters once");
        assert!(EnvoyFilterIndex::default().for_proxy(&proxy("shop", &[], &[])).is_empty());
    }

    #[test]
    fn selectors_target_refs_versions_and_metadata_pick_proxies() {
        let yaml = [
            filter("shop", "selected", "  workloadSelector: {labels: {app: web}}\n", &["web"]),
            filter("istio-system", "everywhere-web", "  workloadSelector: {labels: {app: web}}\n", &["mesh-web"]),
            filter("shop", "gateway", "  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]\n", &["gw"]),
            "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {name: versioned, namespace: shop}\nspec:\n  configPatches:\n  - applyTo: CLUSTER\n    match: {proxy: {proxyVersion: '^1\\.2[0-9]', metadata: {TEAM: a}}, cluster: {name: v}}\n    patch: {operation: REMOVE}\n---\n".into(),
        ]
        .concat();
        let index = index(&yaml);
        assert_eq!(applied(&index, &proxy("shop", &[("app", "web")], &[])), ["mesh-web", "web"]);
        assert!(applied(&index, &proxy("shop", &[("app", "db")], &[])).is_empty());
        // targetRefs: only the Gateway API proxy of that Gateway.
        let gw = proxy("shop", &[(GATEWAY_NAME_LABEL, "gw")], &[]);
        assert_eq!(applied(&index, &gw), ["gw"]);
        assert!(applied(&index, &proxy("shop", &[(GATEWAY_NAME_LABEL, "other")], &[])).is_empty());
        // Version and metadata: both must hold; no version, no match.
        assert_eq!(applied(&index, &proxy("shop", &[], &[(ISTIO_VERSION, "1.24.0"), ("TEAM", "a")])), ["v"]);
        assert!(applied(&index, &proxy("shop", &[], &[(ISTIO_VERSION, "1.19.0"), ("TEAM", "a")])).is_empty());
        assert!(applied(&index, &proxy("shop", &[], &[(ISTIO_VERSION, "1.24.0")])).is_empty());
        assert!(applied(&index, &proxy("shop", &[], &[("TEAM", "a")])).is_empty());
    }

    #[test]
    fn values_are_read_once_and_an_edit_makes_new_patches() {
        let lua = "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {name: lua, namespace: shop}\nspec:\n  configPatches:\n  - applyTo: HTTP_FILTER\n    patch:\n      operation: INSERT_BEFORE\n      value: {name: envoy.filters.http.lua, typed_config: {'@type': type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua, default_source_code: {inline_string: X}}}\n  - applyTo: CLUSTER\n    patch: {operation: INSERT_FIRST, value: {name: added}}\n";
        let first = index(lua).for_proxy(&proxy("shop", &[], &[]));
        assert_eq!(first.len(), 2);
        assert!(first[0].value.is_some());
        assert_eq!(first[0].operation, Operation::InsertBefore, "HTTP filters keep their place");
        assert_eq!(first[1].operation, Operation::Add, "a cluster has no place: INSERT_FIRST is an ADD");
        let again = index(lua).for_proxy(&proxy("shop", &[], &[]));
        assert_eq!(first, again, "the same revision is the same patch");
        let edited = index(&lua.replace("inline_string: X", "inline_string: Y")).for_proxy(&proxy("shop", &[], &[]));
        assert_ne!(first[0], edited[0]);
    }
}
