//! Istio's ProxyConfig (`mesh.v1alpha1.ProxyConfig`): how one proxy is run,
//! as far as meshpush applies it.
//!
//! Role: the mesh config's `defaultConfig` is one; `meshpush agent` lays
//! the `PROXY_CONFIG` environment variable and the pod's
//! `proxy.istio.io/config` annotation over it ([`ProxyConfig::over`]),
//! runs Envoy by the result, and sends it to the server as node metadata
//! `PROXY_CONFIG`, whose tracing settings the server applies to that
//! proxy's connection managers (`push::index::telemetry`), with the
//! mesh's `defaultConfig` for a proxy that sends none — as pilot-agent and
//! istiod use it.
//!
//! Merge rule (Istio's `MergeProxyConfig`): a field the upper layer sets
//! replaces the lower one's whole, except `proxyMetadata`, merged key by key.
//!
//! Invariant: a field a document sets is either modelled here or among the
//! paths [`ProxyConfig::parse`] returns; the agent and the server report
//! those, so none is dropped unsaid.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::Duration;
use crate::config::istio::CustomTag;

/// Istio's default upstream of a proxy (`discoveryAddress`).
pub const DEFAULT_DISCOVERY_ADDRESS: &str = "istiod.istio-system.svc:15012";
/// Istio's default `drainDuration`: Envoy's `--drain-time-s`.
pub const DEFAULT_DRAIN_DURATION: std::time::Duration = std::time::Duration::from_secs(45);
/// Istio's default `terminationDrainDuration`: how long the agent lets
/// listeners drain after SIGTERM before it stops Envoy.
pub const DEFAULT_TERMINATION_DRAIN_DURATION: std::time::Duration = std::time::Duration::from_secs(5);
/// pilot-agent's default `fileFlushInterval` (Envoy's own is ten seconds).
pub const DEFAULT_FILE_FLUSH_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);
/// Istio's default `statusPort`: the agent's port for application probes.
pub const DEFAULT_STATUS_PORT: u16 = 15020;
/// The interception modes a ProxyConfig may name, Istio's default first.
pub const INTERCEPTION_MODES: [&str; 3] = ["REDIRECT", "TPROXY", "NONE"];
/// The node metadata key of a proxy's effective ProxyConfig (a JSON object).
pub const PROXY_CONFIG_METADATA: &str = "PROXY_CONFIG";

/// The ProxyConfig fields meshpush applies; `None` (or empty) is unset.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProxyConfig {
    /// The agent's upstream (and CA) address, `HOST:PORT`.
    #[serde(alias = "discovery_address", skip_serializing_if = "Option::is_none")]
    pub discovery_address: Option<String>,
    /// Environment of the proxy; `ISTIO_META_*` keys become node metadata.
    #[serde(alias = "proxy_metadata", default, skip_serializing_if = "BTreeMap::is_empty")]
    pub proxy_metadata: BTreeMap<String, String>,
    /// Envoy's worker threads; 0 or unset: one per hardware thread.
    #[serde(default, deserialize_with = "scalar", skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<i32>,
    /// Envoy's `--drain-time-s`.
    #[serde(alias = "drain_duration", skip_serializing_if = "Option::is_none")]
    pub drain_duration: Option<Duration>,
    /// How long listeners drain after SIGTERM before Envoy is stopped.
    #[serde(alias = "termination_drain_duration", skip_serializing_if = "Option::is_none")]
    pub termination_drain_duration: Option<Duration>,
    /// Envoy's `--file-flush-interval-msec`.
    #[serde(alias = "file_flush_interval", skip_serializing_if = "Option::is_none")]
    pub file_flush_interval: Option<Duration>,
    /// Envoy's `--file-flush-min-size-kb` (when above 0).
    #[serde(alias = "file_flush_min_size_kb", default, deserialize_with = "scalar")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file_flush_min_size_kb: Option<u32>,
    /// The bootstrap's tracer and the legacy tracing settings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tracing: Option<TracingConfig>,
    /// Which of Envoy's stats are kept.
    #[serde(alias = "proxy_stats_matcher", skip_serializing_if = "Option::is_none")]
    pub proxy_stats_matcher: Option<StatsMatcher>,
    /// How the pod's traffic reaches the proxy: `REDIRECT` (Istio's
    /// default), `TPROXY` or `NONE`. The injector captures by it and the
    /// agent runs Envoy by it when `--interception` is not given.
    #[serde(alias = "interception_mode", skip_serializing_if = "Option::is_none")]
    pub interception_mode: Option<String>,
    /// Whether the injector starts the pod's application containers only
    /// once the proxy is ready (the proxy first, with a `postStart` that
    /// waits for it).
    #[serde(alias = "hold_application_until_proxy_starts", default, deserialize_with = "scalar")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hold_application_until_proxy_starts: Option<bool>,
    /// The agent's status port: application probes rewritten by the
    /// injector, and readiness (Istio's 15020).
    #[serde(alias = "status_port", default, deserialize_with = "scalar", skip_serializing_if = "Option::is_none")]
    pub status_port: Option<u16>,
}

/// `ProxyConfig.tracing`: the tracer the bootstrap starts Envoy with, and
/// how connection managers trace where no Telemetry says.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TracingConfig {
    /// A Zipkin collector.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zipkin: Option<TracerAddress>,
    /// A Datadog agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub datadog: Option<TracerAddress>,
    /// The share of requests traced, in percent (0: unset).
    #[serde(default, deserialize_with = "scalar", skip_serializing_if = "Option::is_none")]
    pub sampling: Option<Percentage>,
    /// Tags added to every span.
    #[serde(alias = "custom_tags", default, skip_serializing_if = "BTreeMap::is_empty")]
    pub custom_tags: BTreeMap<String, CustomTag>,
    /// The longest path tag (0: Envoy's default).
    #[serde(alias = "max_path_tag_length", default, deserialize_with = "scalar")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_path_tag_length: Option<u32>,
    /// Whether Istio's own tags are added (default yes).
    #[serde(alias = "enable_istio_tags", default, deserialize_with = "scalar")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_istio_tags: Option<bool>,
}

impl TracingConfig {
    /// Whether it names a tracer the bootstrap starts Envoy with.
    pub fn has_tracer(&self) -> bool {
        self.zipkin.is_some() || self.datadog.is_some()
    }
}

/// A tracer's collector: `HOST:PORT`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TracerAddress {
    /// The address.
    pub address: String,
}

/// A percentage as a float (hashable by its bits).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Percentage(pub f64);

impl std::str::FromStr for Percentage {
    type Err = std::num::ParseFloatError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse().map(Percentage)
    }
}

/// A number or boolean, or the same written as a string: protobuf's JSON
/// mapping accepts both, and Envoy hands YAML metadata scalars back as
/// strings (`"100.0"`), so a `PROXY_CONFIG` that went through a bootstrap
/// file reads back as it was written.
fn scalar<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + std::str::FromStr,
    T::Err: std::fmt::Display,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either<T> {
        Value(T),
        Text(String),
    }
    match Option::<Either<T>>::deserialize(d)? {
        None => Ok(None),
        Some(Either::Value(v)) => Ok(Some(v)),
        Some(Either::Text(text)) => text
            .trim()
            .parse()
            .map(Some)
            .map_err(|e| serde::de::Error::custom(format!("{text:?} is not a value of this field: {e}"))),
    }
}

impl PartialEq for Percentage {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for Percentage {}

/// `ProxyConfig.proxyStatsMatcher`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct StatsMatcher {
    /// Stat name prefixes kept.
    #[serde(alias = "inclusion_prefixes")]
    pub inclusion_prefixes: Vec<String>,
    /// Stat name suffixes kept.
    #[serde(alias = "inclusion_suffixes")]
    pub inclusion_suffixes: Vec<String>,
    /// Stat name regular expressions (RE2) kept.
    #[serde(alias = "inclusion_regexps")]
    pub inclusion_regexps: Vec<String>,
}

impl ProxyConfig {
    /// Istio's defaults (`DefaultProxyConfig`), as far as modelled.
    pub fn istio_default() -> ProxyConfig {
        ProxyConfig {
            discovery_address: Some(DEFAULT_DISCOVERY_ADDRESS.into()),
            drain_duration: Some(Duration(DEFAULT_DRAIN_DURATION)),
            termination_drain_duration: Some(Duration(DEFAULT_TERMINATION_DRAIN_DURATION)),
            ..ProxyConfig::default()
        }
    }

    /// This config with each field `over` sets in its place, and `over`'s
    /// `proxyMetadata` keys added to (or replacing) this one's.
    pub fn over(mut self, over: &ProxyConfig) -> ProxyConfig {
        let over = over.clone();
        self.proxy_metadata.extend(over.proxy_metadata);
        ProxyConfig {
            discovery_address: over.discovery_address.or(self.discovery_address),
            proxy_metadata: self.proxy_metadata,
            concurrency: over.concurrency.or(self.concurrency),
            drain_duration: over.drain_duration.or(self.drain_duration),
            termination_drain_duration: over.termination_drain_duration.or(self.termination_drain_duration),
            file_flush_interval: over.file_flush_interval.or(self.file_flush_interval),
            file_flush_min_size_kb: over.file_flush_min_size_kb.or(self.file_flush_min_size_kb),
            tracing: over.tracing.or(self.tracing),
            proxy_stats_matcher: over.proxy_stats_matcher.or(self.proxy_stats_matcher),
            interception_mode: over.interception_mode.or(self.interception_mode),
            hold_application_until_proxy_starts: over
                .hold_application_until_proxy_starts
                .or(self.hold_application_until_proxy_starts),
            status_port: over.status_port.or(self.status_port),
        }
    }

    /// The interception mode, Istio's `REDIRECT` when unset.
    pub fn interception_mode(&self) -> &str {
        self.interception_mode.as_deref().unwrap_or(INTERCEPTION_MODES[0])
    }

    /// The status port, Istio's 15020 when unset.
    pub fn status_port(&self) -> u16 {
        self.status_port.unwrap_or(DEFAULT_STATUS_PORT)
    }

    /// Parses a ProxyConfig document (YAML or JSON) from `origin`: the
    /// config, and the paths of the fields it sets that are not modelled.
    /// A value of the wrong type is an error naming its path.
    pub fn parse(origin: &str, text: &str) -> Result<(ProxyConfig, Vec<String>), String> {
        let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(text).map_err(|e| format!("{origin}: {e}"))?;
        Self::from_value(origin, value)
    }

    /// [`ProxyConfig::parse`] of an already parsed document.
    pub fn from_value(origin: &str, value: serde_yaml_ng::Value) -> Result<(ProxyConfig, Vec<String>), String> {
        let value = match value {
            serde_yaml_ng::Value::Null => return Ok((ProxyConfig::default(), Vec::new())),
            mapping @ serde_yaml_ng::Value::Mapping(_) => mapping,
            _ => return Err(format!("{origin}: a ProxyConfig is a mapping of its fields")),
        };
        let mut ignored = Vec::new();
        let config: ProxyConfig = crate::config::parse::typed(value, &mut ignored)
            .map_err(|e| format!("{origin}: {}: {}", if e.path.is_empty() { "." } else { &e.path }, e.message))?;
        config.check().map_err(|(path, why)| format!("{origin}: {path}: {why}"))?;
        Ok((config, ignored))
    }

    /// Istio's validation of the modelled fields: the path and why.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if let Some(n) = self.concurrency.filter(|n| *n < 0) {
            return Err(("concurrency", format!("{n} is negative: 0 means one worker per hardware thread")));
        }
        if let Some(address) = &self.discovery_address
            && address.rsplit_once(':').is_none_or(|(host, port)| host.is_empty() || port.parse::<u16>().is_err())
        {
            return Err(("discoveryAddress", format!("{address:?} is not HOST:PORT")));
        }
        if let Some(d) = self.drain_duration.filter(|d| d.0.is_zero() || d.0.subsec_nanos() != 0) {
            return Err(("drainDuration", format!("{d} is not a whole number of seconds (Envoy drains in seconds)")));
        }
        if let Some(mode) = self.interception_mode.as_deref().filter(|m| !INTERCEPTION_MODES.contains(m)) {
            return Err(("interceptionMode", format!("{mode:?} is not one of REDIRECT, TPROXY and NONE")));
        }
        if self.status_port == Some(0) {
            return Err(("statusPort", "0 is not a port".to_string()));
        }
        if let Some(tracing) = &self.tracing {
            if let Some(p) = tracing.sampling.filter(|p| !(0.0..=100.0).contains(&p.0)) {
                return Err(("tracing.sampling", format!("{} is not a percentage (0 to 100)", p.0)));
            }
            for (kind, tracer) in [("zipkin", &tracing.zipkin), ("datadog", &tracing.datadog)] {
                if let Some(t) = tracer
                    && t.address.rsplit_once(':').is_none_or(|(h, p)| h.is_empty() || p.parse::<u16>().is_err())
                {
                    let path = if kind == "zipkin" { "tracing.zipkin.address" } else { "tracing.datadog.address" };
                    return Err((path, format!("{:?} is not HOST:PORT", t.address)));
                }
            }
        }
        Ok(())
    }

    /// The node metadata its `ISTIO_META_*` keys give, prefix stripped.
    pub fn node_metadata(&self) -> BTreeMap<String, String> {
        self.proxy_metadata
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix("ISTIO_META_")?.to_string(), v.clone())))
            .filter(|(k, _)| !k.is_empty())
            .collect()
    }
}

/// What happens to the ProxyConfig field at `path` that a document sets
/// and meshpush does not model, by istio/api's table.
pub fn unapplied_message(path: &str) -> String {
    use crate::config::istio::api::{self, ApiField};
    match api::classify_mesh_config(&format!("defaultConfig.{path}")) {
        ApiField::Unsupported | ApiField::Inert => {
            "not applied by meshpush yet: the proxy runs as if it were unset (Istio's default)".to_string()
        }
        ApiField::Removed(instead) => format!("Istio removed this field and ignores it ({instead})"),
        ApiField::Unknown => "not a field of Istio's ProxyConfig: ignored".to_string(),
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn an_upper_layer_replaces_fields_whole_and_merges_proxy_metadata_by_key() {
        let (mesh, _) = ProxyConfig::parse(
            "mesh",
            "concurrency: 2\nproxyMetadata: {A: a, B: b}\ntracing: {zipkin: {address: z:9411}, sampling: 5}\n",
        )
        .unwrap();
        let (env, _) =
            ProxyConfig::parse("env", "proxyMetadata: {B: env}\ntracing: {sampling: 50}\ndrainDuration: 10s\n")
                .unwrap();
        let merged = ProxyConfig::istio_default().over(&mesh).over(&env);
        assert_eq!(merged.concurrency, Some(2), "kept from below");
        assert_eq!(merged.drain_duration, Some(Duration(std::time::Duration::from_secs(10))));
        assert_eq!(merged.termination_drain_duration, Some(Duration(DEFAULT_TERMINATION_DRAIN_DURATION)));
        assert_eq!(merged.proxy_metadata, [("A".into(), "a".into()), ("B".into(), "env".into())].into());
        let tracing = merged.tracing.unwrap();
        assert_eq!(tracing.zipkin, None, "tracing is replaced whole, as Istio merges it");
        assert_eq!(tracing.sampling, Some(Percentage(50.0)));
    }

    #[test]
    fn unmodelled_fields_come_back_with_their_paths_and_bad_values_are_errors() {
        let (_, ignored) =
            ProxyConfig::parse("env", "{\"runtimeValues\": {}, \"tracing\": {\"lightstep\": {}}}").unwrap();
        assert_eq!(ignored, ["runtimeValues", "tracing.lightstep"]);
        for (text, path) in [
            ("concurrency: -1", "concurrency"),
            ("concurrency: two", "concurrency"),
            ("discoveryAddress: nohost", "discoveryAddress"),
            ("drainDuration: 1500ms", "drainDuration"),
            ("tracing: {sampling: 101}", "tracing.sampling"),
            ("tracing: {zipkin: {address: zipkin}}", "tracing.zipkin.address"),
        ] {
            let err = ProxyConfig::parse("env", text).unwrap_err();
            assert!(err.starts_with(&format!("env: {path}: ")), "{text}: {err}");
        }
        assert!(ProxyConfig::parse("env", "[1]").is_err());
    }

    #[test]
    fn scalars_written_as_strings_read_as_their_values() {
        let json = serde_json::json!({"concurrency": "2", "tracing": {"sampling": "100.0", "enableIstioTags": "false",
            "maxPathTagLength": 64}});
        let config: ProxyConfig = serde_json::from_value(json).unwrap();
        assert_eq!(config.concurrency, Some(2));
        let tracing = config.tracing.unwrap();
        assert_eq!(tracing.sampling, Some(Percentage(100.0)));
        assert_eq!(tracing.enable_istio_tags, Some(false));
        assert_eq!(tracing.max_path_tag_length, Some(64));
        assert!(serde_json::from_value::<ProxyConfig>(serde_json::json!({"concurrency": "two"})).is_err());
    }

    #[test]
    fn istio_meta_keys_become_node_metadata_without_the_prefix() {
        let config = ProxyConfig {
            proxy_metadata: [
                ("ISTIO_META_DNS_CAPTURE".into(), "true".into()),
                ("PLAIN".into(), "x".into()),
                ("ISTIO_META_".into(), "empty key".into()),
            ]
            .into(),
            ..ProxyConfig::default()
        };
        assert_eq!(config.node_metadata(), [("DNS_CAPTURE".into(), "true".into())].into());
    }
}
