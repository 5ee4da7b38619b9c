//! `Telemetry` (`telemetry.istio.io` v1 and v1alpha1, one schema): what the
//! proxies of the mesh, a namespace or some workloads log, trace and count,
//! by the mesh config's extension providers.
//!
//! This module is the object as written. Which Telemetries apply to a
//! workload, and how their layers (root namespace, namespace, workload)
//! merge, is `push::index::telemetry`; the generators turn the result into
//! Envoy's access loggers and tracers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{TargetRef, WorkloadLabels};
use crate::config::ObjectMeta;
use crate::config::duration::Duration;

/// The workload modes a log or trace selector names.
pub const WORKLOAD_MODES: [&str; 3] = ["CLIENT_AND_SERVER", "CLIENT", "SERVER"];

/// The metrics of Istio's `istio.stats` filter a metrics override names.
pub const METRICS: [&str; 11] = [
    "ALL_METRICS",
    "REQUEST_COUNT",
    "REQUEST_DURATION",
    "REQUEST_SIZE",
    "RESPONSE_SIZE",
    "TCP_OPENED_CONNECTIONS",
    "TCP_CLOSED_CONNECTIONS",
    "TCP_SENT_BYTES",
    "TCP_RECEIVED_BYTES",
    "GRPC_REQUEST_MESSAGES",
    "GRPC_RESPONSE_MESSAGES",
];

/// Istio Telemetry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Telemetry {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: TelemetrySpec,
}

/// `Telemetry.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TelemetrySpec {
    /// The workloads of its namespace it applies to; absent: the namespace
    /// (the mesh, in the root namespace).
    pub selector: Option<WorkloadLabels>,
    /// A Gateway API gateway or waypoint it applies to instead.
    pub target_ref: Option<TargetRef>,
    /// The same, several.
    pub target_refs: Vec<TargetRef>,
    /// Tracing.
    pub tracing: Vec<Tracing>,
    /// Metrics.
    pub metrics: Vec<Metrics>,
    /// Access logging.
    pub access_logging: Vec<AccessLogging>,
}

/// `ProviderRef`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProviderRef {
    /// An `extensionProviders` name.
    pub name: String,
}

/// `WorkloadSelector` of logs and traces: which side of a proxy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ModeSelector {
    /// `CLIENT_AND_SERVER` (absent), `CLIENT` or `SERVER`.
    pub mode: Option<String>,
}

/// `Tracing`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Tracing {
    /// Which side it configures.
    #[serde(rename = "match")]
    pub match_: Option<ModeSelector>,
    /// The tracer (the first is used).
    pub providers: Vec<ProviderRef>,
    /// The share of requests traced, 0–100.
    pub random_sampling_percentage: Option<f64>,
    /// Whether spans are not reported at all.
    pub disable_span_reporting: Option<bool>,
    /// Tags added to every span.
    pub custom_tags: BTreeMap<String, CustomTag>,
    /// Whether the request id decides sampling.
    pub use_request_id_for_trace_sampling: Option<bool>,
    /// Whether Istio's own tags are added.
    pub enable_istio_tags: Option<bool>,
    /// Whether trace context is not propagated.
    pub disable_context_propagation: Option<bool>,
}

/// A custom tag's value: one of its kinds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct CustomTag {
    /// A fixed value.
    pub literal: Option<LiteralTag>,
    /// An environment variable of the proxy.
    pub environment: Option<NamedTag>,
    /// A request header.
    pub header: Option<NamedTag>,
    /// A format string (Envoy's command operators).
    pub formatter: Option<LiteralTag>,
}

/// `Literal` / `Formatter`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(default)]
pub struct LiteralTag {
    /// The value.
    pub value: String,
}

/// `Environment` / `RequestHeader`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NamedTag {
    /// The variable or header.
    pub name: String,
    /// The value when it is absent.
    pub default_value: Option<String>,
}

/// `Metrics`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Metrics {
    /// The metrics providers.
    pub providers: Vec<ProviderRef>,
    /// Per-metric changes.
    pub overrides: Vec<MetricsOverride>,
    /// How often TCP metrics are reported.
    pub reporting_interval: Option<Duration>,
}

/// `MetricsOverrides`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MetricsOverride {
    /// Which metric, on which side.
    #[serde(rename = "match")]
    pub match_: Option<MetricSelector>,
    /// Whether it is not reported.
    pub disabled: Option<bool>,
    /// Tags changed, by name.
    pub tag_overrides: BTreeMap<String, TagOverride>,
}

/// `MetricSelector`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MetricSelector {
    /// One of [`METRICS`].
    pub metric: Option<String>,
    /// A metric by its name.
    pub custom_metric: Option<String>,
    /// `CLIENT_AND_SERVER` (absent), `CLIENT` or `SERVER`.
    pub mode: Option<String>,
}

/// `TagOverride`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TagOverride {
    /// `UPSERT` (absent) or `REMOVE`.
    pub operation: Option<String>,
    /// The value (a CEL expression), for `UPSERT`.
    pub value: Option<String>,
}

/// `AccessLogging`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AccessLogging {
    /// Which side it configures.
    #[serde(rename = "match")]
    pub match_: Option<ModeSelector>,
    /// The loggers (none: those of the layer below).
    pub providers: Vec<ProviderRef>,
    /// Whether the loggers are turned off.
    pub disabled: Option<bool>,
    /// Which entries are written: a CEL expression.
    pub filter: Option<LogFilter>,
}

/// `AccessLogging.Filter`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LogFilter {
    /// A CEL expression over Envoy's attributes.
    pub expression: String,
}

/// A side of a proxy a selector names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Outbound (and a gateway's listeners).
    Client,
    /// Inbound.
    Server,
}

impl ModeSelector {
    /// Whether a selector (absent: both sides) names `side`.
    pub fn names(selector: Option<&ModeSelector>, side: Side) -> bool {
        match selector.and_then(|s| s.mode.as_deref()) {
            Some("CLIENT") => side == Side::Client,
            Some("SERVER") => side == Side::Server,
            _ => true,
        }
    }
}
