//! Istio's pod annotations for injection: their names, and the checks
//! Istio's injector makes before it injects (`pkg/kube/inject/validate.go`).
//! A bad value stops the injection: every bad one is listed, each as
//! `invalid value 'V' for annotation 'NAME': WHY`, Istio's wording.
//!
//! An annotation Istio's injector reads and meshpush's does not apply is
//! named in a warning with what happens instead.

use std::collections::BTreeMap;

use super::InjectError;
use crate::capture::Cidr;
use crate::config::mesh::proxy_config::{INTERCEPTION_MODES, ProxyConfig};

/// A ProxyConfig for this pod.
pub const PROXY_CONFIG: &str = "proxy.istio.io/config";
/// Whether the pod gets a sidecar (also a label, which wins).
pub const INJECT: &str = "sidecar.istio.io/inject";
/// What an injection added, as JSON.
pub const STATUS: &str = "sidecar.istio.io/status";
/// The interception mode.
pub const INTERCEPTION_MODE: &str = "sidecar.istio.io/interceptionMode";
/// The proxy's CPU request.
pub const PROXY_CPU: &str = "sidecar.istio.io/proxyCPU";
/// The proxy's memory request.
pub const PROXY_MEMORY: &str = "sidecar.istio.io/proxyMemory";
/// The proxy's CPU limit.
pub const PROXY_CPU_LIMIT: &str = "sidecar.istio.io/proxyCPULimit";
/// The proxy's memory limit.
pub const PROXY_MEMORY_LIMIT: &str = "sidecar.istio.io/proxyMemoryLimit";
/// Outbound ranges captured.
pub const INCLUDE_OUTBOUND_IP_RANGES: &str = "traffic.sidecar.istio.io/includeOutboundIPRanges";
/// Outbound ranges not captured.
pub const EXCLUDE_OUTBOUND_IP_RANGES: &str = "traffic.sidecar.istio.io/excludeOutboundIPRanges";
/// Inbound ports captured.
pub const INCLUDE_INBOUND_PORTS: &str = "traffic.sidecar.istio.io/includeInboundPorts";
/// Inbound ports not captured.
pub const EXCLUDE_INBOUND_PORTS: &str = "traffic.sidecar.istio.io/excludeInboundPorts";
/// Outbound ports captured.
pub const INCLUDE_OUTBOUND_PORTS: &str = "traffic.sidecar.istio.io/includeOutboundPorts";
/// Outbound ports not captured.
pub const EXCLUDE_OUTBOUND_PORTS: &str = "traffic.sidecar.istio.io/excludeOutboundPorts";
/// The agent's status port for this pod.
pub const STATUS_PORT: &str = "status.sidecar.istio.io/port";
/// Whether application probes go through the agent.
pub const REWRITE_APP_HTTP_PROBERS: &str = "sidecar.istio.io/rewriteAppHTTPProbers";
/// Whether the proxy is a native sidecar.
pub const NATIVE_SIDECAR: &str = "sidecar.istio.io/nativeSidecar";
/// The proxy's image, when it names a repository (holds a `/`).
pub const PROXY_IMAGE: &str = "sidecar.istio.io/proxyImage";
/// Istio's injection templates the pod asks for (`sidecar`, `gateway`).
pub const TEMPLATES: &str = "inject.istio.io/templates";
/// The templates meshpush's injector has.
const KNOWN_TEMPLATES: [&str; 2] = ["sidecar", "gateway"];
/// Envoy's log level.
pub const LOG_LEVEL: &str = "sidecar.istio.io/logLevel";
/// Envoy's component log levels.
pub const COMPONENT_LOG_LEVEL: &str = "sidecar.istio.io/componentLogLevel";
/// The proxy's readiness probe: its first delay.
pub const READINESS_INITIAL_DELAY: &str = "readiness.status.sidecar.istio.io/initialDelaySeconds";
/// The proxy's readiness probe: its period.
pub const READINESS_PERIOD: &str = "readiness.status.sidecar.istio.io/periodSeconds";
/// The proxy's readiness probe: its failure threshold.
pub const READINESS_FAILURE_THRESHOLD: &str = "readiness.status.sidecar.istio.io/failureThreshold";

/// Annotations Istio's injector reads that meshpush's does not apply,
/// with what happens instead.
const NOT_APPLIED: &[(&str, &str)] = &[
    ("sidecar.istio.io/agentLogLevel", "the agent logs at meshpush's default level"),
    ("sidecar.istio.io/bootstrapOverride", "Envoy runs on the agent's bootstrap alone"),
    ("sidecar.istio.io/userVolume", "no volume is added"),
    ("sidecar.istio.io/userVolumeMount", "no volume is mounted in the proxy"),
    ("sidecar.istio.io/proxyImageType", "the proxy image is the injector's"),
    ("sidecar.istio.io/enableCoreDump", "no core-dump init container is added"),
    ("sidecar.istio.io/capNetBindService", "the proxy gets no NET_BIND_SERVICE"),
    ("proxy.istio.io/overrides", "the proxy container is meshpush's"),
    ("traffic.sidecar.istio.io/kubevirtInterfaces", "no interface is rerouted"),
    ("istio.io/reroute-virtual-interfaces", "no interface is rerouted"),
    ("traffic.sidecar.istio.io/excludeInterfaces", "every interface is captured"),
    ("prometheus.istio.io/merge-metrics", "the app's prometheus.io annotations are left as they are"),
    ("readiness.status.sidecar.istio.io/applicationPorts", "Istio no longer reads it either"),
];

/// The result of a check that passed.
#[derive(Debug, Default)]
pub struct Checked {
    /// Annotations set and not applied, each with what happens instead.
    pub warnings: Vec<String>,
}

/// Checks a pod's annotations as Istio's injector does.
pub fn check(annotations: &BTreeMap<String, String>) -> Result<Checked, InjectError> {
    let mut problems = Vec::new();
    for (name, value) in annotations {
        let verdict = match name.as_str() {
            PROXY_CPU | PROXY_MEMORY | PROXY_CPU_LIMIT | PROXY_MEMORY_LIMIT => quantity(value),
            INTERCEPTION_MODE => match INTERCEPTION_MODES.contains(&value.as_str()) {
                true => Ok(()),
                false => Err("interceptionMode invalid, use REDIRECT, TPROXY or NONE".into()),
            },
            INCLUDE_OUTBOUND_IP_RANGES => cidr_list(value, true).map_err(|e| format!("includeIPRanges invalid: {e}")),
            EXCLUDE_OUTBOUND_IP_RANGES => cidr_list(value, false).map_err(|e| format!("excludeIPRanges invalid: {e}")),
            INCLUDE_INBOUND_PORTS => port_list(value, true).map_err(|e| format!("includeInboundPorts invalid: {e}")),
            EXCLUDE_INBOUND_PORTS => port_list(value, false).map_err(|e| format!("excludeInboundPorts invalid: {e}")),
            INCLUDE_OUTBOUND_PORTS => port_list(value, false).map_err(|e| format!("includeOutboundPorts invalid: {e}")),
            EXCLUDE_OUTBOUND_PORTS => port_list(value, false).map_err(|e| format!("excludeOutboundPorts invalid: {e}")),
            STATUS_PORT => value.parse::<u16>().map(drop).map_err(|_| format!("{value:?} is not a port (0 to 65535)")),
            READINESS_INITIAL_DELAY | READINESS_PERIOD | READINESS_FAILURE_THRESHOLD => {
                value.parse::<u32>().map(drop).map_err(|_| format!("{value:?} is not a whole number"))
            }
            NATIVE_SIDECAR => crate::os::parse_switch(value).map(drop),
            PROXY_CONFIG => proxy_config(value),
            _ => Ok(()),
        };
        if let Err(why) = verdict {
            problems.push(format!("invalid value '{value}' for annotation '{name}': {why}"));
        }
    }
    if !problems.is_empty() {
        return Err(InjectError::Annotations(problems));
    }
    let mut warnings: Vec<String> = NOT_APPLIED
        .iter()
        .filter(|(name, _)| annotations.contains_key(*name))
        .map(|(name, instead)| format!("annotation {name}: not applied by meshpush's injector: {instead}"))
        .collect();
    let templates = annotations.get(TEMPLATES).into_iter().flat_map(|t| t.split(',')).map(str::trim);
    for unknown in templates.filter(|t| !t.is_empty() && !KNOWN_TEMPLATES.contains(t)) {
        warnings.push(format!(
            "annotation {TEMPLATES}: meshpush's injector has no template \"{}\": the sidecar template is used",
            crate::text::Shown(unknown)
        ));
    }
    Ok(Checked { warnings })
}

/// A ProxyConfig annotation: it must parse, and hold only fields meshpush
/// applies or reports.
fn proxy_config(value: &str) -> Result<(), String> {
    ProxyConfig::parse(PROXY_CONFIG, value).map(drop)
}

/// A Kubernetes resource quantity (`100m`, `1.5Gi`, `2e3`).
pub fn quantity(value: &str) -> Result<(), String> {
    static QUANTITY: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")
            .expect("the quantity pattern compiles")
    });
    match QUANTITY.is_match(value) {
        true => Ok(()),
        false => Err(format!("{value:?} is not a quantity (as 100m, 128Mi, 2)")),
    }
}

/// A comma-separated CIDR list; `*` too when `star` (empty: none).
/// Items are taken as written: a space makes one invalid, as in Istio.
pub fn cidr_list(value: &str, star: bool) -> Result<(), String> {
    if value.is_empty() || (star && value == "*") {
        return Ok(());
    }
    for item in value.split(',') {
        item.parse::<Cidr>().map_err(|e| format!("failed parsing cidr '{item}': {e}"))?;
    }
    Ok(())
}

/// A comma-separated port list; `*` too when `star` (empty: none).
pub fn port_list(value: &str, star: bool) -> Result<(), String> {
    if value.trim().is_empty() || (star && value.trim() == "*") {
        return Ok(());
    }
    for item in value.split(',') {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        item.parse::<u16>().map_err(|_| format!("{item:?} is not a port (0 to 65535)"))?;
    }
    Ok(())
}
