//! Indexes of the Istio traffic rules: VirtualService, DestinationRule,
//! Gateway and Sidecar, with host names resolved once at build time.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::delegation::{self, Delegates};
use super::gateway_api::{self, GatewayApiIndex};
use super::ingress::{self as ingress_index, IngressIndex};
use crate::config::mesh::MeshConfig;
use crate::config::{ConfigKey, ConfigKind, ConfigObject, istio};
use crate::model::service::ExportTo;
use crate::model::{Hostname, StoreSnapshot, StoredObject, host};

/// A VirtualService with its hosts and gateways resolved.
#[derive(Debug)]
pub struct ResolvedVirtualService {
    /// The rule.
    pub key: ConfigKey,
    /// Hosts as FQDNs or wildcards.
    pub hosts: Vec<Hostname>,
    /// Gateways as `namespace/name`, or `mesh`.
    pub gateways: Vec<Arc<str>>,
    /// Visibility.
    pub export_to: ExportTo,
    /// The stored object (shared with the store, never copied).
    object: Arc<StoredObject>,
    /// The HTTP routes with the delegating ones replaced by the delegates'
    /// routes (see `delegation`); `None` when no route delegates.
    merged_http: Option<Vec<istio::HttpRoute>>,
    /// The delegate VirtualServices its routes hand over to.
    pub delegates: Vec<ConfigKey>,
    /// Whose semantics its routes keep (Istio's `route-semantics`
    /// annotation, which the translations of HTTPRoutes and Ingresses set).
    pub semantics: RouteSemantics,
}

/// Whose rules a VirtualService's routes follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteSemantics {
    /// Istio's VirtualService.
    Istio,
    /// The Gateway API's: path prefixes match whole segments, a backend
    /// that does not resolve answers 500, a prefix replaced by `/` is removed.
    Gateway,
    /// Ingress's: path prefixes match whole segments.
    Ingress,
}

impl RouteSemantics {
    /// Whether a path prefix (other than `/`) matches whole segments only.
    pub fn segment_prefixes(self) -> bool {
        self != RouteSemantics::Istio
    }
}

impl ResolvedVirtualService {
    /// The spec as written.
    pub fn spec(&self) -> &istio::VirtualServiceSpec {
        match &*self.object.object {
            ConfigObject::VirtualService(vs) => &vs.spec,
            _ => unreachable!("a ResolvedVirtualService is built from a VirtualService"),
        }
    }

    /// The HTTP routes as they apply: delegating routes replaced by their
    /// delegates' merged routes.
    pub fn http(&self) -> &[istio::HttpRoute] {
        self.merged_http.as_deref().unwrap_or(&self.spec().http)
    }

    /// Whether the rule binds to `gateway` (`mesh` or `ns/name`).
    pub fn binds(&self, gateway: &str) -> bool {
        self.gateways.iter().any(|g| &**g == gateway)
    }

    /// Whether any of the rule's hosts matches `hostname`.
    pub fn matches_host(&self, hostname: &str) -> bool {
        self.hosts.iter().any(|h| host::matches(h, hostname))
    }
}

/// Resolves a gateway reference of a rule in `namespace` to `ns/name`.
pub fn resolve_gateway_ref(gw: &str, namespace: &str) -> Arc<str> {
    if gw == istio::MESH_GATEWAY || gw.contains('/') {
        return gw.into();
    }
    // `name.namespace` is an older form Istio still accepts.
    if let Some((name, ns)) = gw.split_once('.') {
        return format!("{ns}/{name}").into();
    }
    format!("{namespace}/{gw}").into()
}

/// VirtualServices in key order (the order decides conflicts: the first
/// wins), indexed by exact host so that routing a host does not scan every
/// rule of the mesh.
#[derive(Debug, Default)]
pub struct VirtualServiceIndex {
    all: Vec<Arc<ResolvedVirtualService>>,
    /// Exact host → positions in `all`, ascending.
    by_host: HashMap<Hostname, Vec<usize>>,
    /// Positions of rules with at least one wildcard host, ascending.
    wildcard: Vec<usize>,
    /// Every distinct `sourceLabels` of a match, sorted: a proxy's scope
    /// records which of them its labels satisfy.
    source_selectors: Vec<Labels>,
}

/// A label selector as a rule writes it.
pub type Labels = BTreeMap<String, String>;

impl VirtualServiceIndex {
    /// Builds the index: the store's VirtualServices, then those translated
    /// from the Gateway API. A rule that names no `exportTo` (a delegate
    /// too) takes the mesh config's `defaultVirtualServiceExportTo`.
    pub fn build(
        snapshot: &StoreSnapshot,
        gateway_api: &GatewayApiIndex,
        ingress: &IngressIndex,
        mesh: &MeshConfig,
    ) -> VirtualServiceIndex {
        let default_export = &mesh.export_to.virtual_services;
        let derived: Vec<(ConfigKey, &Arc<StoredObject>)> =
            gateway_api.virtual_services.iter().chain(&ingress.virtual_services).map(|s| (s.object.key(), s)).collect();
        let rules: Vec<(&ConfigKey, &Arc<StoredObject>, &istio::VirtualService)> = snapshot
            .kind(ConfigKind::VirtualService)
            .iter()
            .chain(derived.iter().map(|(k, s)| (k, *s)))
            .filter_map(|(key, stored)| match &*stored.object {
                ConfigObject::VirtualService(vs) => Some((key, stored, vs)),
                _ => None,
            })
            .collect();
        // A rule without hosts is a delegate: it routes only through a root.
        let delegates: Delegates<'_> =
            rules.iter().filter(|(_, _, vs)| vs.spec.hosts.is_empty()).map(|(k, _, vs)| ((*k).clone(), *vs)).collect();
        let all = rules
            .iter()
            .filter(|(_, _, vs)| !vs.spec.hosts.is_empty())
            .map(|(_, stored, vs)| {
                let mut resolved = resolve_virtual_service(stored, vs, default_export);
                if vs.spec.http.iter().any(|r| r.delegate.is_some()) {
                    let (http, used) = delegation::merge(vs, &delegates, default_export);
                    resolved.merged_http = Some(http);
                    resolved.delegates = used;
                }
                Arc::new(resolved)
            })
            .collect::<Vec<Arc<ResolvedVirtualService>>>();
        let mut by_host: HashMap<Hostname, Vec<usize>> = HashMap::new();
        let mut wildcard = Vec::new();
        for (i, vs) in all.iter().enumerate() {
            for h in &vs.hosts {
                if h.starts_with('*') {
                    if wildcard.last() != Some(&i) {
                        wildcard.push(i);
                    }
                } else {
                    let list = by_host.entry(h.clone()).or_default();
                    if list.last() != Some(&i) {
                        list.push(i);
                    }
                }
            }
        }
        let mut source_selectors: Vec<Labels> = all
            .iter()
            .flat_map(|vs| {
                let http = vs.http().iter().flat_map(|r| r.matches.iter().map(|m| &m.source_labels));
                let tcp = vs.spec().tcp.iter().flat_map(|r| r.matches.iter().map(|m| &m.source_labels));
                let tls = vs.spec().tls.iter().flat_map(|r| r.matches.iter().map(|m| &m.source_labels));
                http.chain(tcp).chain(tls)
            })
            .filter(|labels| !labels.is_empty())
            .cloned()
            .collect();
        source_selectors.sort();
        source_selectors.dedup();
        VirtualServiceIndex { all, by_host, wildcard, source_selectors }
    }

    /// Every distinct `sourceLabels` selector of the rules' matches, sorted.
    pub fn source_selectors(&self) -> &[Labels] {
        &self.source_selectors
    }

    /// Every rule (delegates are only inside their roots).
    pub fn all(&self) -> &[Arc<ResolvedVirtualService>] {
        &self.all
    }

    /// The roots that hand routes over to `delegate`.
    pub fn roots_of<'a>(
        &'a self,
        delegate: &'a ConfigKey,
    ) -> impl Iterator<Item = &'a Arc<ResolvedVirtualService>> + 'a {
        self.all.iter().filter(move |vs| vs.delegates.contains(delegate))
    }

    /// The rule that routes `hostname` for proxies of `namespace` bound to
    /// `gateway`: the first visible rule, in key order, naming the host
    /// (a Gateway API route of `namespace` before the others). Exact host
    /// matches win over wildcard ones.
    pub fn for_host(&self, gateway: &str, namespace: &str, hostname: &str) -> Option<&Arc<ResolvedVirtualService>> {
        let visible = |vs: &&Arc<ResolvedVirtualService>| vs.binds(gateway) && vs.export_to.visible_to(namespace);
        let exact = self.by_host.get(hostname).map(Vec::as_slice).unwrap_or(&[]);
        // A Gateway API route of the proxy's own namespace comes first (a
        // consumer's mesh route overrides the Service owner's), as in Istio.
        let own = |vs: &&Arc<ResolvedVirtualService>| {
            vs.semantics == RouteSemantics::Gateway && *vs.key.namespace == *namespace
        };
        let mut first = None;
        for vs in exact.iter().map(|i| &self.all[*i]).filter(visible) {
            if own(&vs) {
                return Some(vs);
            }
            first.get_or_insert(vs);
        }
        first.or_else(|| {
            self.wildcard.iter().map(|i| &self.all[*i]).filter(visible).find(|vs| vs.matches_host(hostname))
        })
    }

    /// Rules bound to `gateway`.
    pub fn for_gateway<'a>(&'a self, gateway: &'a str) -> impl Iterator<Item = &'a Arc<ResolvedVirtualService>> + 'a {
        self.all.iter().filter(move |vs| vs.binds(gateway))
    }
}

/// Resolves one VirtualService (`vs` is `stored`'s object), exported to
/// `default_export` unless it names its own `exportTo`.
fn resolve_virtual_service(
    stored: &Arc<StoredObject>,
    vs: &istio::VirtualService,
    default_export: &[String],
) -> ResolvedVirtualService {
    let ns = vs.metadata.namespace();
    let gateways = if vs.spec.gateways.is_empty() {
        vec![Arc::from(istio::MESH_GATEWAY)]
    } else {
        vs.spec.gateways.iter().map(|g| resolve_gateway_ref(g, ns)).collect()
    };
    ResolvedVirtualService {
        key: ConfigKey::new(ConfigKind::VirtualService, ns, &vs.metadata.name),
        hosts: vs.spec.hosts.iter().map(|h| host::resolve(h, ns)).collect(),
        gateways,
        export_to: ExportTo::or_default(&vs.spec.export_to, default_export, ns),
        object: stored.clone(),
        merged_http: None,
        delegates: Vec::new(),
        semantics: match vs.metadata.annotations.get(gateway_api::ROUTE_SEMANTICS_ANNOTATION).map(String::as_str) {
            Some(gateway_api::GATEWAY_SEMANTICS) => RouteSemantics::Gateway,
            Some(ingress_index::INGRESS_SEMANTICS) => RouteSemantics::Ingress,
            _ => RouteSemantics::Istio,
        },
    }
}

/// A DestinationRule with its host resolved.
#[derive(Debug)]
pub struct ResolvedDestinationRule {
    /// The rule.
    pub key: ConfigKey,
    /// Host (FQDN or wildcard).
    pub host: Hostname,
    /// Visibility.
    pub export_to: ExportTo,
    /// The spec as written.
    pub spec: istio::DestinationRuleSpec,
}

/// DestinationRules by host.
#[derive(Debug, Default)]
pub struct DestinationRuleIndex {
    by_host: HashMap<Hostname, Vec<Arc<ResolvedDestinationRule>>>,
    wildcards: Vec<Arc<ResolvedDestinationRule>>,
    /// Whether any rule can make endpoint assignments depend on the proxy's
    /// locality (outlier detection, or a locality setting anywhere in it).
    locality_aware: bool,
    /// The label names of every `failoverPriority`, sorted and unique.
    failover_labels: Vec<String>,
}

/// The policies of a rule: its own, each port's, each subset's.
fn policies(spec: &istio::DestinationRuleSpec) -> impl Iterator<Item = &istio::TrafficPolicy> {
    spec.traffic_policy.iter().chain(spec.subsets.iter().filter_map(|s| s.traffic_policy.as_ref()))
}

impl DestinationRuleIndex {
    /// Builds the index. A rule that names no `exportTo` is private to its
    /// namespace when the mesh config's `defaultDestinationRuleExportTo`
    /// holds `.`, else public.
    pub fn build(snapshot: &StoreSnapshot, mesh: &MeshConfig) -> DestinationRuleIndex {
        let default_export = &mesh.export_to.destination_rules;
        let mut index = DestinationRuleIndex::default();
        for stored in snapshot.kind(ConfigKind::DestinationRule).values() {
            if let ConfigObject::DestinationRule(dr) = &*stored.object {
                let ns = dr.metadata.namespace();
                let rule = Arc::new(ResolvedDestinationRule {
                    key: ConfigKey::new(ConfigKind::DestinationRule, ns, &dr.metadata.name),
                    host: host::resolve(&dr.spec.host, ns),
                    export_to: ExportTo::of_destination_rule(&dr.spec.export_to, default_export, ns),
                    spec: dr.spec.clone(),
                });
                for policy in policies(&rule.spec) {
                    let lbs = policy
                        .load_balancer
                        .iter()
                        .chain(policy.port_level_settings.iter().filter_map(|p| p.load_balancer.as_ref()));
                    let ods = policy.outlier_detection.is_some()
                        || policy.port_level_settings.iter().any(|p| p.outlier_detection.is_some());
                    let mut aware = ods;
                    for lb in lbs {
                        if let Some(locality) = &lb.locality_lb_setting {
                            aware = true;
                            index.failover_labels.extend(
                                locality
                                    .failover_priority
                                    .iter()
                                    .map(|l| l.split('=').next().unwrap_or("").to_string()),
                            );
                        }
                    }
                    index.locality_aware |= aware;
                }
                if rule.host.starts_with('*') {
                    index.wildcards.push(rule);
                } else {
                    index.by_host.entry(rule.host.clone()).or_default().push(rule);
                }
            }
        }
        // The mesh's setting applies where a rule sets none: its `distribute`
        // to every destination, its failover to those with outlier detection.
        if let Some(locality) = mesh.locality_lb_setting.as_ref().filter(|l| l.enabled != Some(false)) {
            index.locality_aware |= !locality.distribute.is_empty();
            index
                .failover_labels
                .extend(locality.failover_priority.iter().map(|l| l.split('=').next().unwrap_or("").to_string()));
        }
        index.failover_labels.sort();
        index.failover_labels.dedup();
        index
    }

    /// Whether any rule can make endpoint assignments depend on the proxy
    /// (when none does, every proxy shares every assignment).
    pub fn locality_aware(&self) -> bool {
        self.locality_aware
    }

    /// The label names `failoverPriority` entries compare, sorted.
    pub fn failover_labels(&self) -> &[String] {
        &self.failover_labels
    }

    /// The rule that applies to `hostname` (a service of `service_namespace`)
    /// for a proxy in `proxy_namespace`, as Istio picks it: a visible rule in
    /// the proxy's namespace, then one in the service's namespace, then any
    /// other visible rule; exact hosts before wildcards.
    pub fn for_host(
        &self,
        proxy_namespace: &str,
        service_namespace: &str,
        hostname: &str,
    ) -> Option<&Arc<ResolvedDestinationRule>> {
        let exact = self.by_host.get(hostname).map(Vec::as_slice).unwrap_or(&[]);
        let wild = self.wildcards.iter().filter(|r| host::matches(&r.host, hostname));
        let candidates: Vec<&Arc<ResolvedDestinationRule>> =
            exact.iter().chain(wild).filter(|r| r.export_to.visible_to(proxy_namespace)).collect();
        candidates
            .iter()
            .find(|r| &*r.key.namespace == proxy_namespace)
            .or_else(|| candidates.iter().find(|r| &*r.key.namespace == service_namespace))
            .or_else(|| candidates.first())
            .copied()
    }

    /// Every rule naming `hostname` exactly (for reverse lookups).
    pub fn exact(&self, hostname: &str) -> &[Arc<ResolvedDestinationRule>] {
        self.by_host.get(hostname).map(Vec::as_slice).unwrap_or(&[])
    }
}

/// A Gateway server that can be served, with its hosts split into
/// namespace and host. Servers that cannot be served
/// ([`istio::Server::unservable`]) are not in the index; validation
/// reported them.
#[derive(Debug, Clone)]
pub struct GatewayServer {
    /// Its position in `spec.servers` (for messages).
    pub index: usize,
    /// Port number the server is reached on (`spec.servers[].port.number`).
    pub port: u32,
    /// The port the router binds for it: `targetPort` when set, else `port`.
    pub bind_port: u32,
    /// Protocol (upper case).
    pub protocol: Arc<str>,
    /// Port name.
    pub port_name: Arc<str>,
    /// Server name (`spec.servers[].name`).
    pub name: Option<Arc<str>>,
    /// `(namespace or "*", host pattern)`.
    pub hosts: Vec<(Arc<str>, Hostname)>,
    /// The address the listener binds (`spec.servers[].bind`); `None` means `0.0.0.0`.
    pub bind: Option<Arc<str>>,
    /// What the server does with TLS.
    pub mode: istio::TlsMode,
    /// For a Gateway API listener: the addresses its Gateway asks for
    /// (`spec.addresses` of type IPAddress); a router holding one binds it.
    pub addresses: Vec<Arc<str>>,
    /// The server as written (validated).
    pub spec: Arc<istio::Server>,
}

impl GatewayServer {
    /// The host names a TLS client's SNI is matched against: the hosts
    /// without their namespace, sorted, each once (as Istio's
    /// `GetSNIHostsForServer`); empty when one of them is `*` (any name).
    pub fn sni_hosts(&self) -> Vec<String> {
        let mut out: Vec<String> = self.hosts.iter().map(|(_, h)| h.to_string()).collect();
        if out.iter().any(|h| h == "*") {
            return Vec::new();
        }
        out.sort();
        out.dedup();
        out
    }

    /// Its TLS settings, as written.
    pub fn tls(&self) -> Option<&istio::ServerTls> {
        self.spec.tls.as_ref()
    }

    /// Whether a plain HTTP server redirects to HTTPS.
    pub fn https_redirect(&self) -> bool {
        self.spec.https_redirect()
    }
}

/// Which routers serve a Gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GatewaySelector {
    /// Istio's: routers of any namespace whose labels include these (an
    /// empty selector selects none: Istio requires one).
    Labels(BTreeMap<String, String>),
    /// A Gateway API Gateway's: the routers of its namespace labelled with
    /// its name (`gateway.networking.k8s.io/gateway-name` or
    /// `istio.io/gateway-name`), as Istio's automated deployment labels them.
    Deployment {
        /// The Gateway's namespace.
        namespace: Arc<str>,
        /// The Gateway's name.
        name: Arc<str>,
    },
}

impl GatewaySelector {
    /// Whether a router of `namespace` with `labels` serves the Gateway.
    pub fn selects(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        match self {
            GatewaySelector::Labels(selector) => {
                !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
            }
            GatewaySelector::Deployment { namespace: ns, name } => {
                **ns == *namespace
                    && [
                        crate::config::gateway_api::GATEWAY_NAME_LABEL,
                        crate::config::gateway_api::ISTIO_GATEWAY_NAME_LABEL,
                    ]
                    .iter()
                    .any(|label| labels.get(*label).is_some_and(|v| **v == **name))
            }
        }
    }
}

/// A Gateway, resolved.
#[derive(Debug)]
pub struct ResolvedGateway {
    /// The object (for one translated from a Gateway API listener, the key
    /// of the Istio Gateway it became).
    pub key: ConfigKey,
    /// `namespace/name`, as VirtualServices refer to it.
    pub name: Arc<str>,
    /// The routers it applies to.
    pub selector: GatewaySelector,
    /// Servers.
    pub servers: Vec<GatewayServer>,
}

/// Gateways in key order.
#[derive(Debug, Default)]
pub struct GatewayIndex {
    all: Vec<Arc<ResolvedGateway>>,
}

impl GatewayIndex {
    /// Builds the index: the store's Gateways, then those translated from
    /// the Gateway API and from Ingresses.
    pub fn build(snapshot: &StoreSnapshot, gateway_api: &GatewayApiIndex, ingress: &IngressIndex) -> GatewayIndex {
        let own = snapshot.kind(ConfigKind::Gateway).values().filter_map(|stored| match &*stored.object {
            ConfigObject::Gateway(gw) => {
                Some(resolve_gateway(gw, GatewaySelector::Labels(gw.spec.selector.clone()), &[]))
            }
            _ => None,
        });
        let derived = gateway_api.gateways.iter().map(|d| {
            let selector = GatewaySelector::Deployment { namespace: d.namespace.clone(), name: d.deployment.clone() };
            resolve_gateway(&d.gateway, selector, &d.addresses)
        });
        let ingresses = ingress
            .gateways
            .iter()
            .map(|gw| resolve_gateway(gw, GatewaySelector::Labels(gw.spec.selector.clone()), &[]));
        GatewayIndex { all: own.chain(derived).chain(ingresses).collect() }
    }

    /// The addresses of the Gateway API Gateways this router serves that are
    /// its own `ip` (its listeners bind there).
    pub fn held_addresses(gateways: &[Arc<ResolvedGateway>], ip: &str) -> Vec<Arc<str>> {
        let mut out: Vec<Arc<str>> = gateways
            .iter()
            .flat_map(|g| g.servers.iter().flat_map(|s| s.addresses.iter()))
            .filter(|a| ***a == *ip)
            .cloned()
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Gateways a router of `namespace` with `labels` serves.
    pub fn matching(&self, namespace: &str, labels: &BTreeMap<String, String>) -> Vec<Arc<ResolvedGateway>> {
        self.all.iter().filter(|g| g.selector.selects(namespace, labels)).cloned().collect()
    }

    /// A gateway by `namespace/name`.
    pub fn get(&self, name: &str) -> Option<&Arc<ResolvedGateway>> {
        self.all.iter().find(|g| &*g.name == name)
    }

    /// Every gateway.
    pub fn all(&self) -> &[Arc<ResolvedGateway>] {
        &self.all
    }
}

/// One Gateway, resolved; its servers that cannot be served are left out.
fn resolve_gateway(gw: &istio::Gateway, selector: GatewaySelector, addresses: &[Arc<str>]) -> Arc<ResolvedGateway> {
    let ns = gw.metadata.namespace();
    Arc::new(ResolvedGateway {
        key: ConfigKey::new(ConfigKind::Gateway, ns, &gw.metadata.name),
        name: format!("{ns}/{}", gw.metadata.name).into(),
        selector,
        servers: gw
            .spec
            .servers
            .iter()
            .enumerate()
            .filter(|(_, s)| s.unservable().is_none())
            .filter_map(|(index, s)| {
                Some(GatewayServer {
                    index,
                    port: s.port.number,
                    bind_port: s.port.target_port.filter(|p| *p != 0).unwrap_or(s.port.number),
                    protocol: s.protocol().into(),
                    port_name: s.port.name.as_str().into(),
                    name: s.name.as_deref().filter(|n| !n.is_empty()).map(Arc::from),
                    bind: s.bind.as_deref().filter(|b| !b.is_empty()).map(Arc::from),
                    hosts: s
                        .hosts
                        .iter()
                        .map(|h| match h.split_once('/') {
                            Some((n, hst)) => (Arc::from(if n == "." { ns } else { n }), Arc::from(hst)),
                            None => (Arc::from("*"), Arc::from(h.as_str())),
                        })
                        .collect(),
                    mode: s.tls_mode()?,
                    addresses: addresses.to_vec(),
                    spec: Arc::new(s.clone()),
                })
            })
            .collect(),
    })
}

/// Sidecars by namespace, in key order.
#[derive(Debug, Default)]
pub struct SidecarIndex {
    by_namespace: HashMap<Arc<str>, Vec<(ConfigKey, Arc<istio::Sidecar>)>>,
}

impl SidecarIndex {
    /// Builds the index.
    pub fn build(snapshot: &StoreSnapshot) -> SidecarIndex {
        let mut index = SidecarIndex::default();
        for stored in snapshot.kind(ConfigKind::Sidecar).values() {
            if let ConfigObject::Sidecar(sc) = &*stored.object {
                let key = stored.object.key();
                index.by_namespace.entry(key.namespace.clone()).or_default().push((key, Arc::new((**sc).clone())));
            }
        }
        index
    }

    /// A Sidecar by key.
    pub fn get(&self, key: &ConfigKey) -> Option<&Arc<istio::Sidecar>> {
        self.by_namespace.get(&key.namespace)?.iter().find(|(k, _)| k == key).map(|(_, sc)| sc)
    }

    /// The Sidecar that applies to a workload: one whose selector matches its
    /// labels, else the namespace's selector-less one.
    pub fn for_workload(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> Option<&(ConfigKey, Arc<istio::Sidecar>)> {
        let list = self.by_namespace.get(namespace)?;
        list.iter()
            .find(|(_, sc)| {
                sc.spec.workload_selector.as_ref().is_some_and(|sel| {
                    !sel.labels.is_empty() && sel.labels.iter().all(|(k, v)| labels.get(k) == Some(v))
                })
            })
            .or_else(|| {
                list.iter().find(|(_, sc)| sc.spec.workload_selector.as_ref().is_none_or(|s| s.labels.is_empty()))
            })
    }
}
