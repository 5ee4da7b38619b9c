//! `MeshConfig`: the settings of the whole mesh that Istio keeps in its
//! mesh config rather than in any object, as far as meshpush reads them.
//!
//! Role: `serve` builds one from Istio's mesh config file (`--mesh-config`,
//! read by [`file`]) with its flags laid over it; every `PushContext`
//! carries one, so it is part of what a snapshot means (a
//! PeerAuthentication in `root_namespace` is mesh-wide; a workload's SPIFFE
//! identity is in `trust_domain`; which Ingresses are served, by which
//! routers, is `ingress`; what clusters and listeners default to is
//! `traffic`; which hosts keep to their own cluster's endpoints is
//! `cluster_local_hosts`). An edit of the file reaches the store as the
//! one [`MeshConfigObject`] (`source::mesh_config`), and the snapshot built
//! on it serves it: a snapshot stays a function of its store.

pub mod cluster_local;
pub mod config_sources;
pub mod ext_authz;
pub mod file;
pub mod networks;
pub mod providers;
pub mod proxy_config;
pub mod spiffe_bundle;
pub mod traffic;
pub mod trust_anchors;

use std::sync::Arc;

use serde::Serialize;

pub use file::MeshSettings;
pub use traffic::{ExportToDefaults, H2UpgradePolicy, InboundTrafficMode, OutboundTrafficMode, TrafficSettings};

/// Istio's default root namespace (`meshConfig.rootNamespace`).
pub const DEFAULT_ROOT_NAMESPACE: &str = "istio-system";
/// Istio's default trust domain (`meshConfig.trustDomain`).
pub const DEFAULT_TRUST_DOMAIN: &str = "cluster.local";

/// Istio's default ingress class (`meshConfig.ingressClass`).
pub const DEFAULT_INGRESS_CLASS: &str = "istio";
/// The `istio` label value of the routers that serve Ingresses when the
/// mesh config names neither an ingress selector nor an ingress Service of
/// its own (routers labelled `istio: ingressgateway`).
pub const DEFAULT_INGRESS_SELECTOR: &str = "ingressgateway";
/// Istio's default ingress Service (`meshConfig.ingressService`), in
/// `istio-system`: its addresses are the served Ingresses'.
pub const DEFAULT_INGRESS_SERVICE: &str = "istio-ingressgateway";

/// The mesh-wide settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MeshConfig {
    /// The trust domain of workload identities (`spiffe://TRUST_DOMAIN/ns/NS/sa/SA`).
    pub trust_domain: Arc<str>,
    /// `trustDomainAliases`: trust domains the mesh treats as its own
    /// (authorization principals, the names a client accepts).
    pub trust_domain_aliases: Arc<[Arc<str>]>,
    /// The namespace whose selector-less policies apply to the whole mesh.
    pub root_namespace: Arc<str>,
    /// How Kubernetes Ingresses are served.
    pub ingress: IngressSettings,
    /// The mesh-wide access log (`accessLogFile`, `accessLogFormat`,
    /// `accessLogEncoding`, `disableEnvoyListenerLog`), used where no
    /// Telemetry object configures logging.
    pub access_log: AccessLogSettings,
    /// `extensionProviders`: Istio's built-ins with the mesh's own merged
    /// in by name.
    pub extension_providers: Arc<[providers::ExtensionProvider]>,
    /// `defaultProviders`.
    pub default_providers: providers::DefaultProviders,
    /// The traffic defaults of clusters and listeners (`connectTimeout`,
    /// `tcpKeepalive`, `h2UpgradePolicy`, `protocolDetectionTimeout`,
    /// `dnsRefreshRate`, `inboundTrafficPolicy`, `outboundTrafficPolicy`,
    /// `enableAutoMtls`).
    pub traffic: TrafficSettings,
    /// The `exportTo` of objects that name none.
    pub export_to: ExportToDefaults,
    /// `defaultConfig` over Istio's `DefaultProxyConfig`: the ProxyConfig of
    /// a proxy whose node sends none (metadata `PROXY_CONFIG`).
    pub default_proxy_config: Arc<proxy_config::ProxyConfig>,
    /// `enableTracing`: whether connection managers trace with the
    /// bootstrap's tracer where no Telemetry and no default provider
    /// configures tracing (Istio's default: yes).
    pub enable_tracing: bool,
    /// `localityLbSetting`: locality load balancing for a destination whose
    /// DestinationRule sets none; `None`: Istio's default (on: failover by
    /// locality where outlier detection is set).
    pub locality_lb_setting: Option<crate::config::istio::LocalityLbSetting>,
    /// `caCertificates`, under istiod's `ISTIO_MULTIROOT_MESH` and
    /// `PILOT_SKIP_VALIDATE_TRUST_DOMAIN`: extra roots and trust domains.
    pub trust_anchors: trust_anchors::TrustAnchors,
    /// `serviceSettings` over Istio's defaults: the hosts served with their
    /// own cluster's endpoints only (with one cluster, every endpoint is).
    pub cluster_local_hosts: cluster_local::ClusterLocalHosts,
    /// Ambient mode's switches (istiod's environment, meshpush's flags).
    pub ambient: AmbientSettings,
    /// This cluster's id (istiod's `CLUSTER_ID`, meshpush's `--cluster-id`):
    /// the cluster of every object that is not a remote cluster's.
    pub cluster_id: Arc<str>,
    /// This server's own namespace (istiod's `POD_NAMESPACE`, a flag):
    /// its `topology.istio.io/network` label in each cluster is that
    /// cluster's network.
    pub system_namespace: Arc<str>,
    /// `meshNetworks`, read beside the mesh config (`networks`).
    pub networks: Arc<networks::MeshNetworks>,
    /// `configSources`: the MCP-over-xDS servers config is read from.
    pub config_sources: Arc<[config_sources::McpServer]>,
}

/// Istio's cluster id when none is set.
pub const DEFAULT_CLUSTER_ID: &str = "Kubernetes";

/// Ambient mode's switches, as istiod reads them from its environment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AmbientSettings {
    /// `PILOT_ENABLE_AMBIENT`: whether ztunnel is served (istiod refuses
    /// it otherwise; Istio's ambient profile turns it on).
    pub enabled: bool,
    /// `AMBIENT_ENABLE_DRY_RUN_AUTHORIZATION_POLICY`: whether dry-run
    /// AuthorizationPolicies are sent to ztunnel as such (ztunnel 1.29 and
    /// later only logs them; an older one would enforce them, so they are
    /// not sent unless this is on).
    pub dry_run_policies: bool,
}

impl Default for MeshConfig {
    fn default() -> Self {
        MeshConfig {
            trust_domain: DEFAULT_TRUST_DOMAIN.into(),
            trust_domain_aliases: Arc::from([]),
            root_namespace: DEFAULT_ROOT_NAMESPACE.into(),
            ingress: IngressSettings::default(),
            access_log: AccessLogSettings::default(),
            extension_providers: providers::merge_with_builtins(&[]),
            default_providers: providers::DefaultProviders::default(),
            traffic: TrafficSettings::default(),
            export_to: ExportToDefaults::default(),
            default_proxy_config: Arc::new(proxy_config::ProxyConfig::istio_default()),
            enable_tracing: true,
            locality_lb_setting: None,
            trust_anchors: trust_anchors::TrustAnchors::default(),
            cluster_local_hosts: cluster_local::ClusterLocalHosts::default(),
            ambient: AmbientSettings::default(),
            cluster_id: DEFAULT_CLUSTER_ID.into(),
            system_namespace: DEFAULT_ROOT_NAMESPACE.into(),
            networks: Arc::default(),
            config_sources: Arc::from([]),
        }
    }
}

/// MeshConfig's access log settings, with Istio's defaults (no log).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AccessLogSettings {
    /// `accessLogFile`: where every proxy logs each request and
    /// connection; empty: no mesh-wide log.
    pub file: Arc<str>,
    /// `accessLogFormat`: the format (text, or a JSON object of labels
    /// under JSON encoding); empty: Istio's default format.
    pub format: Arc<str>,
    /// `accessLogEncoding`.
    pub encoding: AccessLogEncoding,
    /// Whether listeners log the connections no filter chain takes (Envoy's
    /// `NR` flag); `disableEnvoyListenerLog` turns it off.
    pub listener_log: bool,
}

impl Default for AccessLogSettings {
    fn default() -> Self {
        AccessLogSettings { file: "".into(), format: "".into(), encoding: AccessLogEncoding::Text, listener_log: true }
    }
}

/// `meshConfig.accessLogEncoding`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum AccessLogEncoding {
    /// One line of text per entry (Istio's default).
    Text,
    /// One JSON object per line.
    Json,
}

impl std::str::FromStr for AccessLogEncoding {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "TEXT" => Ok(AccessLogEncoding::Text),
            "JSON" => Ok(AccessLogEncoding::Json),
            _ => Err(format!("{s:?} is not an access log encoding: TEXT or JSON")),
        }
    }
}

/// The labels of a JSON access log format: a JSON object, as Istio reads
/// `accessLogFormat` under JSON encoding.
pub fn json_labels(format: &str) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    match serde_json::from_str::<serde_json::Value>(format) {
        Ok(serde_json::Value::Object(labels)) => Ok(labels),
        Ok(_) => Err("not a JSON object of labels".into()),
        Err(e) => Err(format!("not a JSON object of labels: {e}")),
    }
}

/// MeshConfig's ingress settings (`ingressClass`, `ingressControllerMode`,
/// `ingressSelector`, `ingressService`), with Istio's defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IngressSettings {
    /// The `kubernetes.io/ingress.class` annotation value that is served
    /// (and the IngressClass name that counts as Istio's without an object).
    pub class: Arc<str>,
    /// Which Ingresses without a class are served.
    pub mode: IngressControllerMode,
    /// The `istio` label value of the routers that serve Ingresses; empty
    /// (Istio's default): [`IngressSettings::router_label`] decides.
    pub selector: Arc<str>,
    /// The Service of `istio-system` whose addresses served Ingresses report.
    pub service: Arc<str>,
}

impl Default for IngressSettings {
    fn default() -> Self {
        IngressSettings {
            class: DEFAULT_INGRESS_CLASS.into(),
            mode: IngressControllerMode::Strict,
            // Unset, as in Istio's defaults: `ingressService` can then name the routers.
            selector: "".into(),
            service: DEFAULT_INGRESS_SERVICE.into(),
        }
    }
}

impl IngressSettings {
    /// The `istio` label value of the routers that serve Ingresses: the
    /// selector, else a Service other than the default's name, else
    /// `ingressgateway` (Istio's rule).
    pub fn router_label(&self) -> &str {
        if !self.selector.is_empty() {
            &self.selector
        } else if !self.service.is_empty() && *self.service != *DEFAULT_INGRESS_SERVICE {
            &self.service
        } else {
            DEFAULT_INGRESS_SELECTOR
        }
    }
}

/// `meshConfig.ingressControllerMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum IngressControllerMode {
    /// No Ingress is served.
    Off,
    /// Ingresses of Istio's class, and those that name no class at all.
    Default,
    /// Only Ingresses of Istio's class (Istio's default).
    Strict,
}

impl std::str::FromStr for IngressControllerMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_uppercase().as_str() {
            "OFF" => Ok(IngressControllerMode::Off),
            "DEFAULT" => Ok(IngressControllerMode::Default),
            "STRICT" => Ok(IngressControllerMode::Strict),
            _ => Err(format!("{s:?} is not an ingress controller mode: OFF, DEFAULT or STRICT")),
        }
    }
}

/// The name of the one [`MeshConfigObject`] of a store.
pub const MESH_CONFIG_NAME: &str = "mesh";

/// The mesh config as a store object (kind `MeshConfig`, cluster-scoped,
/// named [`MESH_CONFIG_NAME`]): `source::mesh_config` writes it when the
/// mesh config file changes, so a snapshot stays a function of its store
/// and an edit is pushed as any change is.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MeshConfigObject {
    /// Its name.
    pub metadata: crate::config::ObjectMeta,
    /// The settings.
    pub mesh: Arc<MeshConfig>,
}

impl MeshConfigObject {
    /// The object of `mesh`.
    pub fn new(mesh: MeshConfig) -> MeshConfigObject {
        MeshConfigObject {
            metadata: crate::config::ObjectMeta { name: MESH_CONFIG_NAME.into(), ..Default::default() },
            mesh: Arc::new(mesh),
        }
    }
}

impl MeshConfig {
    /// The SPIFFE identity of service account `service_account` in `namespace`.
    pub fn spiffe_id(&self, namespace: &str, service_account: &str) -> String {
        format!("spiffe://{}/ns/{namespace}/sa/{service_account}", self.trust_domain)
    }

    /// The trust domains a sidecar accepts a peer's certificate in, as
    /// Istio's `TrustDomainsForValidation`: the mesh's, its aliases, and
    /// `caCertificates[].trustDomains`, each once; none (any trust domain)
    /// with `PILOT_SKIP_VALIDATE_TRUST_DOMAIN`.
    pub fn trust_domains_for_validation(&self) -> Vec<Arc<str>> {
        if self.trust_anchors.skip_validate_trust_domain {
            return Vec::new();
        }
        let mut out: Vec<Arc<str>> = Vec::new();
        let all = std::iter::once(&self.trust_domain)
            .chain(self.trust_domain_aliases.iter())
            .chain(self.trust_anchors.trust_domains.iter());
        for domain in all.filter(|d| !d.is_empty()) {
            if !out.contains(domain) {
                out.push(domain.clone());
            }
        }
        out
    }
}
