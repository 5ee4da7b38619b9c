//! Istio's mesh config as its file spells it: the YAML of the `mesh` key of
//! the `istio` ConfigMap, which istiod reads through `--meshConfig`.
//!
//! Role: `serve --mesh-config FILE` reads one at startup; [`MeshSettings`]
//! holds the fields meshpush applies (`trustDomain`, `rootNamespace`, the
//! ingress settings, `discoverySelectors`, `serviceSettings` (resolved by
//! `super::cluster_local`), the access log settings, the
//! extension and default providers, the traffic defaults of
//! `super::traffic`), and the command line's flags
//! are laid over them ([`MeshSettings::over`]) before they become the
//! server's [`MeshConfig`]. Every other field the file sets is reported
//! with its path, by istio/api's table (`config::istio::api`): a field
//! meshpush does not apply yet, one Istio removed, or no field of
//! MeshConfig at all. Keys are read in camelCase or in the protos'
//! snake_case, as istiod reads them.
//!
//! Invariant: a field the file sets is either in [`MeshSettings`] or in its
//! problems, never dropped unsaid.

use std::path::Path;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::Deserialize;

use super::cluster_local::{self, ServiceSettings};
use super::ext_authz;
use super::providers::{self, DefaultProvidersPatch, ExtensionProvider};
use super::proxy_config::ProxyConfig;
use super::traffic::{
    self, ExportToDefaults, H2UpgradePolicy, InboundTrafficMode, OutboundTrafficMode, TrafficSettings,
};
use super::trust_anchors::{CaCertificate, TrustAnchors, check_trust_domain};
use super::{
    AccessLogEncoding, AccessLogSettings, AmbientSettings, IngressControllerMode, IngressSettings, MeshConfig,
    json_labels,
};
use crate::config::Duration;
use crate::config::istio::api::{self, ApiField};
use crate::config::istio::{LocalityLbSetting, TcpKeepalive};
use crate::config::{Problem, Severity, SourceRef};

/// The mesh config fields meshpush applies, as a file or the command line
/// sets them (`None`: not set, Istio's default), and what else the file set.
#[derive(Debug, Clone, Default)]
pub struct MeshSettings {
    /// `trustDomain`.
    pub trust_domain: Option<String>,
    /// `trustDomainAliases`.
    pub trust_domain_aliases: Option<Vec<String>>,
    /// `rootNamespace`.
    pub root_namespace: Option<String>,
    /// `ingressClass`.
    pub ingress_class: Option<String>,
    /// `ingressControllerMode`.
    pub ingress_controller_mode: Option<IngressControllerMode>,
    /// `ingressSelector`.
    pub ingress_selector: Option<String>,
    /// `ingressService`.
    pub ingress_service: Option<String>,
    /// `discoverySelectors`: the namespaces read from Kubernetes.
    pub discovery_selectors: Option<Vec<kube::core::Selector>>,
    /// `accessLogFile`.
    pub access_log_file: Option<String>,
    /// `accessLogFormat`.
    pub access_log_format: Option<String>,
    /// `accessLogEncoding`.
    pub access_log_encoding: Option<AccessLogEncoding>,
    /// `disableEnvoyListenerLog`.
    pub disable_envoy_listener_log: Option<bool>,
    /// `extensionProviders` (merged into Istio's built-ins by name).
    pub extension_providers: Option<Vec<ExtensionProvider>>,
    /// `defaultProviders` (each list replaces Istio's when present).
    pub default_providers: Option<DefaultProvidersPatch>,
    /// `connectTimeout`.
    pub connect_timeout: Option<Duration>,
    /// `tcpKeepalive`.
    pub tcp_keepalive: Option<TcpKeepalive>,
    /// `h2UpgradePolicy`.
    pub h2_upgrade_policy: Option<H2UpgradePolicy>,
    /// `dnsRefreshRate`.
    pub dns_refresh_rate: Option<Duration>,
    /// `enableAutoMtls`.
    pub enable_auto_mtls: Option<bool>,
    /// `protocolDetectionTimeout`.
    pub protocol_detection_timeout: Option<Duration>,
    /// `inboundTrafficPolicy.mode`.
    pub inbound_traffic_policy: Option<InboundTrafficMode>,
    /// `outboundTrafficPolicy.mode`.
    pub outbound_traffic_policy: Option<OutboundTrafficMode>,
    /// `defaultServiceExportTo`.
    pub default_service_export_to: Option<Vec<String>>,
    /// `defaultVirtualServiceExportTo`.
    pub default_virtual_service_export_to: Option<Vec<String>>,
    /// `defaultDestinationRuleExportTo`.
    pub default_destination_rule_export_to: Option<Vec<String>>,
    /// `localityLbSetting`: locality load balancing where no
    /// DestinationRule sets it.
    pub locality_lb_setting: Option<LocalityLbSetting>,
    /// `serviceSettings`: which hosts are cluster-local.
    pub service_settings: Option<Vec<ServiceSettings>>,
    /// `defaultConfig`: the fields of Istio's ProxyConfig it sets.
    pub default_config: Option<ProxyConfig>,
    /// `enableTracing`.
    pub enable_tracing: Option<bool>,
    /// `caCertificates`.
    pub ca_certificates: Option<Vec<CaCertificate>>,
    /// `configSources`: the MCP-over-xDS servers it names.
    pub config_sources: Option<Vec<super::config_sources::McpServer>>,
    /// istiod's `ISTIO_MULTIROOT_MESH` (a flag, never the file).
    pub multi_root_mesh: Option<bool>,
    /// istiod's `PILOT_SKIP_VALIDATE_TRUST_DOMAIN` (a flag, never the file).
    pub skip_validate_trust_domain: Option<bool>,
    /// istiod's `PILOT_ENABLE_AMBIENT` (a flag, never the file).
    pub enable_ambient: Option<bool>,
    /// istiod's `AMBIENT_ENABLE_DRY_RUN_AUTHORIZATION_POLICY` (a flag, never the file).
    pub ambient_dry_run_policies: Option<bool>,
    /// istiod's `CLUSTER_ID` (a flag, never the file).
    pub cluster_id: Option<String>,
    /// istiod's `POD_NAMESPACE` (a flag, never the file).
    pub system_namespace: Option<String>,
    /// `meshNetworks`, read from its own document (never the mesh file's).
    pub networks: Option<Arc<super::networks::MeshNetworks>>,
    /// The fields set that meshpush does not apply, each with its path.
    pub problems: Vec<Problem>,
}

/// The document, with the keys Istio accepts for each applied field.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Document {
    #[serde(alias = "trust_domain")]
    trust_domain: Option<String>,
    #[serde(alias = "trust_domain_aliases")]
    trust_domain_aliases: Option<Vec<String>>,
    #[serde(alias = "root_namespace")]
    root_namespace: Option<String>,
    #[serde(alias = "ingress_class")]
    ingress_class: Option<String>,
    #[serde(alias = "ingress_controller_mode")]
    ingress_controller_mode: Option<String>,
    #[serde(alias = "ingress_selector")]
    ingress_selector: Option<String>,
    #[serde(alias = "ingress_service")]
    ingress_service: Option<String>,
    #[serde(alias = "discovery_selectors")]
    discovery_selectors: Option<Vec<LabelSelector>>,
    #[serde(alias = "access_log_file")]
    access_log_file: Option<String>,
    #[serde(alias = "access_log_format")]
    access_log_format: Option<String>,
    #[serde(alias = "access_log_encoding")]
    access_log_encoding: Option<String>,
    #[serde(alias = "disable_envoy_listener_log")]
    disable_envoy_listener_log: Option<bool>,
    #[serde(alias = "extension_providers")]
    extension_providers: Option<Vec<ExtensionProvider>>,
    #[serde(alias = "default_providers")]
    default_providers: Option<DefaultProvidersPatch>,
    #[serde(alias = "connect_timeout")]
    connect_timeout: Option<Duration>,
    #[serde(alias = "tcp_keepalive")]
    tcp_keepalive: Option<TcpKeepalive>,
    #[serde(alias = "h2_upgrade_policy")]
    h2_upgrade_policy: Option<String>,
    #[serde(alias = "dns_refresh_rate")]
    dns_refresh_rate: Option<Duration>,
    #[serde(alias = "enable_auto_mtls")]
    enable_auto_mtls: Option<bool>,
    #[serde(alias = "protocol_detection_timeout")]
    protocol_detection_timeout: Option<Duration>,
    #[serde(alias = "inbound_traffic_policy")]
    inbound_traffic_policy: Option<TrafficPolicyDocument>,
    #[serde(alias = "outbound_traffic_policy")]
    outbound_traffic_policy: Option<TrafficPolicyDocument>,
    #[serde(alias = "default_service_export_to")]
    default_service_export_to: Option<Vec<String>>,
    #[serde(alias = "default_virtual_service_export_to")]
    default_virtual_service_export_to: Option<Vec<String>>,
    #[serde(alias = "default_destination_rule_export_to")]
    default_destination_rule_export_to: Option<Vec<String>>,
    #[serde(alias = "default_config")]
    default_config: Option<ProxyConfig>,
    #[serde(alias = "locality_lb_setting")]
    locality_lb_setting: Option<LocalityLbSetting>,
    #[serde(alias = "service_settings")]
    service_settings: Option<Vec<ServiceSettings>>,
    #[serde(alias = "enable_tracing")]
    enable_tracing: Option<bool>,
    #[serde(alias = "ca_certificates")]
    ca_certificates: Option<Vec<CaCertificate>>,
    #[serde(alias = "config_sources")]
    config_sources: Option<Vec<super::config_sources::ConfigSourceEntry>>,
}

/// `inboundTrafficPolicy` and `outboundTrafficPolicy`: a mode of Istio's
/// enum, whose value 0 an empty policy (`{}`) means.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct TrafficPolicyDocument {
    mode: Option<String>,
}

impl MeshSettings {
    /// Reads the mesh config file at `path`.
    pub fn read(path: &Path) -> Result<MeshSettings, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
        MeshSettings::parse(&path.display().to_string(), &text)
    }

    /// Parses a mesh config document read from `file`. An error says where
    /// (the line of a syntax error, the path of a bad value) and refuses
    /// the whole document, as istiod refuses an invalid mesh config.
    pub fn parse(file: &str, text: &str) -> Result<MeshSettings, String> {
        let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(text).map_err(|e| format!("{file}: {e}"))?;
        let value = match value {
            serde_yaml_ng::Value::Null => serde_yaml_ng::Value::Mapping(Default::default()),
            mapping @ serde_yaml_ng::Value::Mapping(_) => mapping,
            _ => return Err(format!("{file}: a mesh config is a mapping of MeshConfig's fields")),
        };
        let mut ignored = Vec::new();
        let mut doc: Document = crate::config::parse::typed(value, &mut ignored)
            .map_err(|e| format!("{file}: {}: {}", if e.path.is_empty() { "." } else { &e.path }, e.message))?;
        let mut problems: Vec<Problem> = ignored.iter().map(|path| reported(file, path)).collect();
        let mode = doc
            .ingress_controller_mode
            .map(|m| m.parse::<IngressControllerMode>().map_err(|e| format!("{file}: ingressControllerMode: {e}")))
            .transpose()?;
        if let Some(domain) = &doc.trust_domain {
            check_trust_domain(domain).map_err(|e| format!("{file}: trustDomain: {e}"))?;
        }
        for (i, alias) in doc.trust_domain_aliases.iter().flatten().enumerate() {
            check_trust_domain(alias).map_err(|e| format!("{file}: trustDomainAliases[{i}]: {e}"))?;
        }
        let selectors = doc
            .discovery_selectors
            .map(|all| {
                all.into_iter()
                    .enumerate()
                    .map(|(i, s)| {
                        kube::core::Selector::try_from(s).map_err(|e| format!("{file}: discoverySelectors[{i}]: {e}"))
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?;
        let encoding = doc
            .access_log_encoding
            .map(|e| e.parse::<AccessLogEncoding>().map_err(|e| format!("{file}: accessLogEncoding: {e}")))
            .transpose()?;
        if let (Some(AccessLogEncoding::Json), Some(format)) =
            (encoding, doc.access_log_format.as_deref().filter(|f| !f.is_empty()))
            && let Err(e) = json_labels(format)
        {
            // istiod logs this and serves its default labels; so does meshpush, and says so.
            problems.push(warning(
                file,
                "accessLogFormat",
                format!("{e}: Istio's default JSON labels are logged instead"),
            ));
        }
        for (i, provider) in doc.extension_providers.iter_mut().flatten().enumerate() {
            let kept = provider.kinds().last().copied().unwrap_or_default();
            for kind in provider.keep_one_kind() {
                let message =
                    format!("is ignored: the provider also sets {kept}, the kind Istio keeps (a provider is one kind)");
                problems.push(warning(file, &format!("extensionProviders[{i}].{kind}"), message));
            }
        }
        if let Some(all) = &doc.extension_providers {
            problems.extend(provider_checks::provider_problems(file, all));
        }
        if let Some(defaults) = &doc.default_providers {
            let all = providers::merge_with_builtins(doc.extension_providers.as_deref().unwrap_or_default());
            problems.extend(provider_checks::default_provider_problems(file, defaults, &all));
        }
        if mode == Some(IngressControllerMode::Off) {
            for (path, set) in [
                ("ingressClass", doc.ingress_class.is_some()),
                ("ingressSelector", doc.ingress_selector.is_some()),
                ("ingressService", doc.ingress_service.is_some()),
            ] {
                if set {
                    let message = "has no effect: ingressControllerMode is OFF, so no Ingress is served".into();
                    problems.push(warning(file, path, message));
                }
            }
        }
        if let Some(timeout) = doc.connect_timeout {
            traffic::check_connect_timeout(timeout).map_err(|e| format!("{file}: connectTimeout: {e}"))?;
        }
        let h2_upgrade_policy = doc
            .h2_upgrade_policy
            .map(|p| p.parse::<H2UpgradePolicy>().map_err(|e| format!("{file}: h2UpgradePolicy: {e}")))
            .transpose()?;
        if let Some(timeout) = doc.protocol_detection_timeout {
            traffic::check_protocol_detection_timeout(timeout)
                .map_err(|e| format!("{file}: protocolDetectionTimeout: {e}"))?;
        }
        let inbound_traffic_policy = doc
            .inbound_traffic_policy
            .map(|p| match p.mode {
                None => Ok(InboundTrafficMode::Passthrough),
                Some(mode) => mode.parse().map_err(|e| format!("{file}: inboundTrafficPolicy.mode: {e}")),
            })
            .transpose()?;
        let outbound_traffic_policy = doc
            .outbound_traffic_policy
            .map(|p| match p.mode.as_deref() {
                None => Ok(OutboundTrafficMode::RegistryOnly),
                Some(traffic::ALLOW_ANY_DYNAMIC_DNS) => {
                    let message = format!(
                        "{} is not applied by meshpush yet: served as ALLOW_ANY (unknown destinations pass \
                         through, without the dynamic forward proxy)",
                        traffic::ALLOW_ANY_DYNAMIC_DNS
                    );
                    problems.push(warning(file, "outboundTrafficPolicy.mode", message));
                    Ok(OutboundTrafficMode::AllowAny)
                }
                Some(mode) => mode.parse().map_err(|e| format!("{file}: outboundTrafficPolicy.mode: {e}")),
            })
            .transpose()?;
        if let Some(locality) = &doc.locality_lb_setting
            && let Some((path, why)) = crate::config::validate::locality_problems(locality).into_iter().next()
        {
            return Err(format!("{file}: localityLbSetting{path}: {why}"));
        }
        if let Some(config) = &doc.default_config {
            config.check().map_err(|(path, why)| format!("{file}: defaultConfig.{path}: {why}"))?;
        }
        if let Some(entries) = doc.service_settings.as_deref().filter(|e| !e.is_empty()) {
            cluster_local::check(entries).map_err(|(path, why)| format!("{file}: {path}: {why}"))?;
        }
        let config_sources = doc.config_sources.as_deref().map(|entries| {
            let (servers, unused) = super::config_sources::resolve(entries);
            problems.extend(unused.into_iter().map(|(path, message)| warning(file, &path, message)));
            servers
        });
        let dns_refresh_rate = doc.dns_refresh_rate.filter(|rate| match traffic::check_dns_refresh_rate(*rate) {
            Ok(()) => true,
            Err(e) => {
                // istiod takes it, and every DNS cluster is then refused: serve the default instead, and say so.
                let message = format!("{e}: Istio's default ({}) is served", traffic::DEFAULT_DNS_REFRESH_RATE);
                problems.push(warning(file, "dnsRefreshRate", message));
                false
            }
        });
        Ok(MeshSettings {
            trust_domain: doc.trust_domain,
            trust_domain_aliases: doc.trust_domain_aliases,
            root_namespace: doc.root_namespace,
            ingress_class: doc.ingress_class,
            ingress_controller_mode: mode,
            ingress_selector: doc.ingress_selector,
            ingress_service: doc.ingress_service,
            discovery_selectors: selectors,
            access_log_file: doc.access_log_file,
            access_log_format: doc.access_log_format,
            access_log_encoding: encoding,
            disable_envoy_listener_log: doc.disable_envoy_listener_log,
            extension_providers: doc.extension_providers,
            default_providers: doc.default_providers,
            connect_timeout: doc.connect_timeout,
            tcp_keepalive: doc.tcp_keepalive,
            h2_upgrade_policy,
            dns_refresh_rate,
            enable_auto_mtls: doc.enable_auto_mtls,
            protocol_detection_timeout: doc.protocol_detection_timeout,
            inbound_traffic_policy,
            outbound_traffic_policy,
            service_settings: doc.service_settings,
            default_service_export_to: doc.default_service_export_to,
            default_virtual_service_export_to: doc.default_virtual_service_export_to,
            default_destination_rule_export_to: doc.default_destination_rule_export_to,
            default_config: doc.default_config,
            enable_tracing: doc.enable_tracing,
            locality_lb_setting: doc.locality_lb_setting,
            ca_certificates: doc.ca_certificates,
            config_sources,
            multi_root_mesh: None,
            skip_validate_trust_domain: None,
            enable_ambient: None,
            ambient_dry_run_policies: None,
            cluster_id: None,
            system_namespace: None,
            networks: None,
            problems,
        })
    }

    /// These settings with each one `over` sets in its place (the command
    /// line over the file).
    pub fn over(self, over: MeshSettings) -> MeshSettings {
        MeshSettings {
            trust_domain: over.trust_domain.or(self.trust_domain),
            trust_domain_aliases: over.trust_domain_aliases.or(self.trust_domain_aliases),
            root_namespace: over.root_namespace.or(self.root_namespace),
            ingress_class: over.ingress_class.or(self.ingress_class),
            ingress_controller_mode: over.ingress_controller_mode.or(self.ingress_controller_mode),
            ingress_selector: over.ingress_selector.or(self.ingress_selector),
            ingress_service: over.ingress_service.or(self.ingress_service),
            discovery_selectors: over.discovery_selectors.or(self.discovery_selectors),
            access_log_file: over.access_log_file.or(self.access_log_file),
            access_log_format: over.access_log_format.or(self.access_log_format),
            access_log_encoding: over.access_log_encoding.or(self.access_log_encoding),
            disable_envoy_listener_log: over.disable_envoy_listener_log.or(self.disable_envoy_listener_log),
            extension_providers: over.extension_providers.or(self.extension_providers),
            default_providers: over.default_providers.or(self.default_providers),
            connect_timeout: over.connect_timeout.or(self.connect_timeout),
            tcp_keepalive: over.tcp_keepalive.or(self.tcp_keepalive),
            h2_upgrade_policy: over.h2_upgrade_policy.or(self.h2_upgrade_policy),
            dns_refresh_rate: over.dns_refresh_rate.or(self.dns_refresh_rate),
            enable_auto_mtls: over.enable_auto_mtls.or(self.enable_auto_mtls),
            protocol_detection_timeout: over.protocol_detection_timeout.or(self.protocol_detection_timeout),
            inbound_traffic_policy: over.inbound_traffic_policy.or(self.inbound_traffic_policy),
            outbound_traffic_policy: over.outbound_traffic_policy.or(self.outbound_traffic_policy),
            service_settings: over.service_settings.or(self.service_settings),
            default_service_export_to: over.default_service_export_to.or(self.default_service_export_to),
            default_virtual_service_export_to: over
                .default_virtual_service_export_to
                .or(self.default_virtual_service_export_to),
            default_destination_rule_export_to: over
                .default_destination_rule_export_to
                .or(self.default_destination_rule_export_to),
            default_config: over.default_config.or(self.default_config),
            enable_tracing: over.enable_tracing.or(self.enable_tracing),
            locality_lb_setting: over.locality_lb_setting.or(self.locality_lb_setting),
            ca_certificates: over.ca_certificates.or(self.ca_certificates),
            config_sources: over.config_sources.or(self.config_sources),
            multi_root_mesh: over.multi_root_mesh.or(self.multi_root_mesh),
            skip_validate_trust_domain: over.skip_validate_trust_domain.or(self.skip_validate_trust_domain),
            enable_ambient: over.enable_ambient.or(self.enable_ambient),
            ambient_dry_run_policies: over.ambient_dry_run_policies.or(self.ambient_dry_run_policies),
            cluster_id: over.cluster_id.or(self.cluster_id),
            system_namespace: over.system_namespace.or(self.system_namespace),
            networks: over.networks.or(self.networks),
            problems: self.problems.into_iter().chain(over.problems).collect(),
        }
    }

    /// These settings as served, once the flags are over the file's (`file`
    /// names it in problems): what depends on a flag is checked and
    /// reported here. Under `--multi-root-mesh` a `caCertificates` root
    /// that is not a CA certificate refuses the mesh config, as it stops
    /// istiod; without it the roots are reported unapplied.
    pub fn finish(mut self, file: &str) -> Result<MeshSettings, String> {
        let entries = self.ca_certificates.as_deref().unwrap_or_default();
        let anchors = self.trust_anchors().map_err(|(path, why)| format!("{file}: {path}: {why}"))?;
        for (path, message) in anchors.unapplied(entries) {
            self.problems.push(warning(file, &path, message));
        }
        Ok(self)
    }

    /// The roots and trust domains `caCertificates` gives under the flags;
    /// an error names a root that is not a CA certificate.
    fn trust_anchors(&self) -> Result<TrustAnchors, (String, String)> {
        TrustAnchors::of(
            self.ca_certificates.as_deref().unwrap_or_default(),
            self.multi_root_mesh.unwrap_or(false),
            self.skip_validate_trust_domain.unwrap_or(false),
        )
    }

    /// These settings for a server that reads nothing from Kubernetes: the
    /// discovery selectors the mesh config `file` set have nothing to
    /// select, and are reported so.
    pub fn without_kubernetes(mut self, file: &str) -> MeshSettings {
        if self.discovery_selectors.take().is_some() {
            self.problems.push(warning(
                file,
                "discoverySelectors",
                "selects the namespaces read from Kubernetes: no effect without --kubeconfig or --in-cluster".into(),
            ));
        }
        self
    }

    /// The mesh config these settings give, Istio's defaults where unset.
    pub fn mesh_config(&self) -> MeshConfig {
        let default = MeshConfig::default();
        let text = |set: &Option<String>, default: Arc<str>| set.as_deref().map_or(default, Arc::from);
        // istiod reads an empty list as none: `*`.
        let export = |set: &Option<Vec<String>>, default: Vec<String>| {
            set.clone().filter(|list| !list.is_empty()).unwrap_or(default)
        };
        MeshConfig {
            trust_domain: text(&self.trust_domain, default.trust_domain),
            trust_domain_aliases: match &self.trust_domain_aliases {
                Some(aliases) => aliases.iter().map(|a| Arc::from(a.as_str())).collect(),
                None => default.trust_domain_aliases,
            },
            root_namespace: text(&self.root_namespace, default.root_namespace),
            ingress: IngressSettings {
                class: text(&self.ingress_class, default.ingress.class),
                mode: self.ingress_controller_mode.unwrap_or(default.ingress.mode),
                selector: text(&self.ingress_selector, default.ingress.selector),
                service: text(&self.ingress_service, default.ingress.service),
            },
            access_log: AccessLogSettings {
                file: text(&self.access_log_file, default.access_log.file),
                format: text(&self.access_log_format, default.access_log.format),
                encoding: self.access_log_encoding.unwrap_or(default.access_log.encoding),
                listener_log: !self.disable_envoy_listener_log.unwrap_or(!default.access_log.listener_log),
            },
            extension_providers: providers::merge_with_builtins(
                self.extension_providers.as_deref().unwrap_or_default(),
            ),
            default_providers: match &self.default_providers {
                Some(patch) => default.default_providers.over(patch),
                None => default.default_providers,
            },
            traffic: TrafficSettings {
                connect_timeout: self.connect_timeout.unwrap_or(default.traffic.connect_timeout),
                tcp_keepalive: self.tcp_keepalive.clone().or(default.traffic.tcp_keepalive),
                h2_upgrade: self.h2_upgrade_policy.unwrap_or(default.traffic.h2_upgrade),
                protocol_detection_timeout: self
                    .protocol_detection_timeout
                    .unwrap_or(default.traffic.protocol_detection_timeout),
                dns_refresh_rate: self.dns_refresh_rate.unwrap_or(default.traffic.dns_refresh_rate),
                inbound: self.inbound_traffic_policy.unwrap_or(default.traffic.inbound),
                outbound: self.outbound_traffic_policy.unwrap_or(default.traffic.outbound),
                auto_mtls: self.enable_auto_mtls.unwrap_or(default.traffic.auto_mtls),
            },
            export_to: ExportToDefaults {
                services: export(&self.default_service_export_to, default.export_to.services),
                virtual_services: export(&self.default_virtual_service_export_to, default.export_to.virtual_services),
                destination_rules: export(
                    &self.default_destination_rule_export_to,
                    default.export_to.destination_rules,
                ),
            },
            default_proxy_config: match &self.default_config {
                Some(config) => Arc::new(ProxyConfig::istio_default().over(config)),
                None => default.default_proxy_config,
            },
            enable_tracing: self.enable_tracing.unwrap_or(default.enable_tracing),
            locality_lb_setting: self.locality_lb_setting.clone().or(default.locality_lb_setting),
            trust_anchors: self.trust_anchors().unwrap_or_else(|_| {
                // `finish` refuses a bad root: settings it did not check trust none of theirs.
                let entries = self.ca_certificates.as_deref().unwrap_or_default();
                let skip = self.skip_validate_trust_domain.unwrap_or(false);
                let anchors = TrustAnchors::of(entries, false, skip).expect("no root is read without multi_root");
                TrustAnchors { multi_root: true, ..anchors }
            }),
            cluster_local_hosts: cluster_local::ClusterLocalHosts::resolve(
                self.service_settings.as_deref().unwrap_or_default(),
                self.default_config.as_ref().and_then(|c| c.discovery_address.as_deref()),
            ),
            ambient: AmbientSettings {
                enabled: self.enable_ambient.unwrap_or(false),
                dry_run_policies: self.ambient_dry_run_policies.unwrap_or(false),
            },
            cluster_id: self.cluster_id.as_deref().map_or(default.cluster_id, Arc::from),
            system_namespace: self.system_namespace.as_deref().map_or(default.system_namespace, Arc::from),
            networks: self.networks.clone().unwrap_or(default.networks),
            config_sources: self.config_sources.as_deref().map_or(default.config_sources, Arc::from),
        }
    }
}

/// The report of a field the file sets that [`Document`] does not model.
fn reported(file: &str, path: &str) -> Problem {
    let message = match api::classify_mesh_config(&camel_path(path)) {
        ApiField::Unsupported | ApiField::Inert => {
            "not applied by meshpush yet: served as if it were unset (Istio's default)".to_string()
        }
        ApiField::Removed(instead) => format!("Istio removed this field and ignores it ({instead})"),
        ApiField::Unknown => "not a field of Istio's MeshConfig: ignored".to_string(),
    };
    warning(file, path, message)
}

/// A warning about the field at `path` of the mesh config `file`.
fn warning(file: &str, path: &str, message: String) -> Problem {
    Problem {
        severity: Severity::Warning,
        source: SourceRef { file: file.into(), doc: 0 },
        object: None,
        path: path.to_string(),
        message,
    }
}

/// A path with each snake_case key written as the table writes it
/// (`default_config.proxy_metadata` → `defaultConfig.proxyMetadata`).
fn camel_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut upper = false;
    for c in path.chars() {
        match c {
            '_' => upper = true,
            c if upper => {
                out.extend(c.to_uppercase());
                upper = false;
            }
            c => out.push(c),
        }
    }
    out
}

mod provider_checks;
#[cfg(test)]
mod test;
