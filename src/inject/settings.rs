//! The injector's own settings: what Istio keeps in its
//! `istio-sidecar-injector` ConfigMap (`config`: policy and selectors;
//! `values`: the proxy's image, resources, capture defaults, log levels),
//! as one YAML document (`serve --injector-config`, `meshpush inject
//! --injector-config`; the chart renders it from its values).
//!
//! Every key has Istio's default. A key the settings do not have, or a
//! value Istio would refuse, stops the reader with the file and path:
//! nothing set here is dropped unsaid.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::config::gateway_api::LabelSelector;

/// The injector's settings, with Istio's defaults.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct InjectorSettings {
    /// `enabled`: pods get a sidecar unless they opt out; `disabled`: only
    /// those that opt in (`sidecar.istio.io/inject: "true"`).
    pub policy: String,
    /// Pods whose labels one of these selects get no sidecar (unless they
    /// opt in).
    pub never_inject_selector: Vec<LabelSelector>,
    /// Pods whose labels one of these selects get a sidecar (unless they
    /// opt out); never wins over always.
    pub always_inject_selector: Vec<LabelSelector>,
    /// Annotations added to every injected pod.
    pub injected_annotations: BTreeMap<String, String>,
    /// The image of `istio-proxy` and `istio-init` (meshpush, Envoy and
    /// iptables: the `Dockerfile`'s `proxy` target).
    pub proxy_image: String,
    /// Whether the proxy is a native sidecar (an init container with
    /// `restartPolicy: Always`), Istio's `ENABLE_NATIVE_SIDECARS`; a pod's
    /// `sidecar.istio.io/nativeSidecar` annotation decides for itself.
    pub native_sidecars: bool,
    /// Whether application probes go through the agent (Istio's
    /// `rewriteAppHTTPProbe`); a pod's `sidecar.istio.io/rewriteAppHTTPProbers`
    /// decides for itself.
    #[serde(rename = "rewriteAppHTTPProbe")]
    pub rewrite_app_http_probe: bool,
    /// Hold every pod's application until its proxy is ready (Istio's
    /// `values.global.proxy.holdApplicationUntilProxyStarts`; OR-ed with
    /// the ProxyConfig's).
    pub hold_application_until_proxy_starts: bool,
    /// The cluster's id (`ISTIO_META_CLUSTER_ID`).
    pub cluster_id: String,
    /// The network of this cluster's pods (`ISTIO_META_NETWORK`), if any.
    pub network: String,
    /// The cluster's DNS domain.
    pub cluster_domain: String,
    /// The control plane revision this injector serves (`istio.io/rev`).
    pub revision: String,
    /// The proxy's resources when a pod's annotations set none.
    pub resources: Resources,
    /// Outbound ranges captured (`-i`) when the pod does not say.
    #[serde(rename = "includeIPRanges")]
    pub include_ip_ranges: String,
    /// Outbound ranges never captured (`-x`).
    #[serde(rename = "excludeIPRanges")]
    pub exclude_ip_ranges: String,
    /// Inbound ports captured (`-b`).
    pub include_inbound_ports: String,
    /// Inbound ports never captured (`-d`).
    pub exclude_inbound_ports: String,
    /// Outbound ports captured (`-q`), when set.
    pub include_outbound_ports: String,
    /// Outbound ports never captured (`-o`), when set.
    pub exclude_outbound_ports: String,
    /// Envoy's log level.
    pub log_level: String,
    /// Envoy's component log levels.
    pub component_log_level: String,
    /// The proxy's readiness probe: first delay, period, failures.
    pub readiness_initial_delay_seconds: i32,
    /// The readiness probe's period.
    pub readiness_period_seconds: i32,
    /// The readiness probe's failure threshold.
    pub readiness_failure_threshold: i32,
    /// Whether the proxy has a startup probe.
    pub startup_probe: bool,
}

/// The proxy's resources (`requests` and `limits`, `cpu` and `memory`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Resources {
    /// What the scheduler reserves.
    pub requests: BTreeMap<String, String>,
    /// The most the proxy may use.
    pub limits: BTreeMap<String, String>,
}

impl Default for InjectorSettings {
    fn default() -> Self {
        let pair = |cpu: &str, memory: &str| [("cpu".to_string(), cpu.to_string()), ("memory".into(), memory.into())];
        InjectorSettings {
            policy: "enabled".into(),
            never_inject_selector: Vec::new(),
            always_inject_selector: Vec::new(),
            injected_annotations: BTreeMap::new(),
            proxy_image: format!("meshpush/proxy:{}", env!("CARGO_PKG_VERSION")),
            native_sidecars: false,
            rewrite_app_http_probe: true,
            hold_application_until_proxy_starts: false,
            cluster_id: "Kubernetes".into(),
            network: String::new(),
            cluster_domain: "cluster.local".into(),
            revision: String::new(),
            resources: Resources { requests: pair("100m", "128Mi").into(), limits: pair("2000m", "1024Mi").into() },
            include_ip_ranges: "*".into(),
            exclude_ip_ranges: String::new(),
            include_inbound_ports: "*".into(),
            exclude_inbound_ports: String::new(),
            include_outbound_ports: String::new(),
            exclude_outbound_ports: String::new(),
            log_level: "warning".into(),
            component_log_level: "misc:error".into(),
            readiness_initial_delay_seconds: 0,
            readiness_period_seconds: 15,
            readiness_failure_threshold: 4,
            startup_probe: true,
        }
    }
}

impl InjectorSettings {
    /// Reads the settings document at `path`. An unknown key or a value of
    /// the wrong type is an error naming the file and the path.
    pub fn read(path: &std::path::Path) -> Result<InjectorSettings, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
        Self::parse(&path.display().to_string(), &text)
    }

    /// Parses a settings document from `origin`.
    pub fn parse(origin: &str, text: &str) -> Result<InjectorSettings, String> {
        if text.trim().is_empty() {
            return Ok(InjectorSettings::default());
        }
        let document = serde_yaml_ng::Deserializer::from_str(text);
        let settings: InjectorSettings = serde_path_to_error::deserialize(document).map_err(|e| {
            let path = e.path().to_string();
            format!("{origin}: {path}: {}", e.into_inner())
        })?;
        settings.check().map_err(|(path, why)| format!("{origin}: {path}: {why}"))?;
        Ok(settings)
    }

    fn check(&self) -> Result<(), (&'static str, String)> {
        if !matches!(self.policy.as_str(), "enabled" | "disabled") {
            return Err(("policy", format!("{:?} is neither enabled nor disabled", self.policy)));
        }
        if self.proxy_image.is_empty() {
            return Err(("proxyImage", "is empty".into()));
        }
        let lists = [
            ("includeIPRanges", &self.include_ip_ranges, true, true),
            ("excludeIPRanges", &self.exclude_ip_ranges, true, false),
            ("includeInboundPorts", &self.include_inbound_ports, false, true),
            ("excludeInboundPorts", &self.exclude_inbound_ports, false, false),
            ("includeOutboundPorts", &self.include_outbound_ports, false, false),
            ("excludeOutboundPorts", &self.exclude_outbound_ports, false, false),
        ];
        for (path, value, cidrs, star) in lists {
            let checked = if cidrs {
                super::annotations::cidr_list(value, star)
            } else {
                super::annotations::port_list(value, star)
            };
            checked.map_err(|why| (path, why))?;
        }
        for (path, quantity) in
            self.resources.requests.iter().chain(&self.resources.limits).map(|(k, v)| (k.as_str(), v))
        {
            super::annotations::quantity(quantity).map_err(|why| ("resources", format!("{path}: {why}")))?;
        }
        Ok(())
    }
}
