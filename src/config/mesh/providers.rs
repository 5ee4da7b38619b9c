//! MeshConfig's `extensionProviders` and `defaultProviders`: the named
//! access loggers, tracers and metrics providers Telemetry objects (and
//! the defaults) refer to.
//!
//! The list a mesh serves is Istio's built-ins (`prometheus`, `stackdriver`,
//! and `envoy`: a file log on `/dev/stdout`) with the mesh config's
//! providers merged in by name, as istiod merges them
//! ([`merge_with_builtins`]): a provider named as a built-in replaces it in
//! place, others follow in order. Names are compared ignoring case when a
//! Telemetry looks one up.
//!
//! The external authorizers CUSTOM AuthorizationPolicies name
//! (`envoyExtAuthzHttp`, `envoyExtAuthzGrpc`) are modelled in
//! `super::ext_authz`. A provider of a kind not modelled at all (`sds`,
//! `opencensus`) parses, keeps its name, and is reported by the file reader
//! with its path like any field meshpush does not apply. A provider is one
//! kind (a oneof in Istio's API): of several, the reader keeps the one
//! istiod keeps ([`ExtensionProvider::keep_one_kind`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::ext_authz::{AuthorizerProvider, GrpcAuthorizerProvider, HttpAuthorizerProvider};
use crate::config::duration::Duration;

/// The name of Istio's built-in file access log provider.
pub const ENVOY_PROVIDER: &str = "envoy";

/// One `extensionProviders` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ExtensionProvider {
    /// The name Telemetry objects and `defaultProviders` use.
    pub name: String,
    /// `envoyFileAccessLog`.
    #[serde(alias = "envoy_file_access_log", skip_serializing_if = "Option::is_none")]
    pub envoy_file_access_log: Option<FileAccessLogProvider>,
    /// `envoyHttpAls`: Envoy's gRPC access log service, HTTP entries.
    #[serde(alias = "envoy_http_als", skip_serializing_if = "Option::is_none")]
    pub envoy_http_als: Option<GrpcLogProvider>,
    /// `envoyTcpAls`: the same, TCP entries.
    #[serde(alias = "envoy_tcp_als", skip_serializing_if = "Option::is_none")]
    pub envoy_tcp_als: Option<GrpcLogProvider>,
    /// `envoyOtelAls`: OpenTelemetry logs over gRPC.
    #[serde(alias = "envoy_otel_als", skip_serializing_if = "Option::is_none")]
    pub envoy_otel_als: Option<OtelLogProvider>,
    /// `zipkin`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zipkin: Option<ZipkinProvider>,
    /// `opentelemetry`: OTLP traces, over gRPC or HTTP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub opentelemetry: Option<OpenTelemetryProvider>,
    /// `datadog`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub datadog: Option<CollectorProvider>,
    /// `skywalking`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skywalking: Option<SkywalkingProvider>,
    /// `lightstep` (deprecated: istiod no longer generates it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lightstep: Option<SkywalkingProvider>,
    /// `prometheus`: Istio's request metrics.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prometheus: Option<Empty>,
    /// `stackdriver` (istiod no longer generates anything for it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stackdriver: Option<serde_json::Value>,
    /// `envoyExtAuthzHttp`: an external authorizer over HTTP.
    #[serde(alias = "envoy_ext_authz_http", skip_serializing_if = "Option::is_none")]
    pub envoy_ext_authz_http: Option<HttpAuthorizerProvider>,
    /// `envoyExtAuthzGrpc`: an external authorizer over gRPC.
    #[serde(alias = "envoy_ext_authz_grpc", skip_serializing_if = "Option::is_none")]
    pub envoy_ext_authz_grpc: Option<GrpcAuthorizerProvider>,
}

/// A message without fields (`prometheus: {}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Empty {}

/// `EnvoyFileAccessLogProvider`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FileAccessLogProvider {
    /// The file; empty: `/dev/stdout`.
    pub path: String,
    /// The format; none: Istio's default text.
    pub log_format: Option<LogFormatSpec>,
    /// Whether empty values are left out of entries.
    #[serde(alias = "omit_empty_values")]
    pub omit_empty_values: bool,
}

/// A provider's `logFormat`: `text`, or JSON `labels`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LogFormatSpec {
    /// A text format with Envoy's command operators.
    pub text: Option<String>,
    /// JSON labels, each value a format.
    pub labels: Option<serde_json::Map<String, serde_json::Value>>,
}

/// `EnvoyHttpGrpcV3LogProvider` and `EnvoyTcpGrpcV3LogProvider`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GrpcLogProvider {
    /// The collector's service: `HOST` or `NAMESPACE/HOST`.
    pub service: String,
    /// Its port.
    pub port: u32,
    /// The log name the collector sees; empty: Istio's default for the kind.
    #[serde(alias = "log_name")]
    pub log_name: String,
    /// Filter state objects to log; empty: Istio's defaults.
    #[serde(alias = "filter_state_objects_to_log")]
    pub filter_state_objects_to_log: Vec<String>,
    /// Request headers to log (HTTP only).
    #[serde(alias = "additional_request_headers_to_log")]
    pub additional_request_headers_to_log: Vec<String>,
    /// Response headers to log (HTTP only).
    #[serde(alias = "additional_response_headers_to_log")]
    pub additional_response_headers_to_log: Vec<String>,
    /// Response trailers to log (HTTP only).
    #[serde(alias = "additional_response_trailers_to_log")]
    pub additional_response_trailers_to_log: Vec<String>,
}

/// `EnvoyOpenTelemetryLogProvider`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OtelLogProvider {
    /// The collector's service.
    pub service: String,
    /// Its port.
    pub port: u32,
    /// The log name; empty: `otel_envoy_accesslog`.
    #[serde(alias = "log_name")]
    pub log_name: String,
    /// The body (`text`) and attributes (`labels`) of each record.
    #[serde(alias = "log_format")]
    pub log_format: Option<LogFormatSpec>,
}

/// `ZipkinTracingProvider`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ZipkinProvider {
    /// The collector's service.
    pub service: String,
    /// Its port.
    pub port: u32,
    /// The longest tag value sent (0: Envoy's default).
    #[serde(alias = "max_tag_length")]
    pub max_tag_length: u32,
    /// Whether trace ids are 64-bit (else 128-bit).
    #[serde(alias = "enable_64bit_trace_id", rename = "enable64bitTraceId")]
    pub enable_64bit_trace_id: bool,
    /// The collector's path; empty: `/api/v2/spans`.
    pub path: String,
    /// `USE_B3` (default) or `USE_B3_WITH_W3C_PROPAGATION`.
    #[serde(alias = "trace_context_option")]
    pub trace_context_option: Option<String>,
    /// How long a report may take; none: 5 s.
    pub timeout: Option<Duration>,
    /// Headers sent with each report.
    pub headers: Vec<ProviderHeader>,
}

/// A header a provider sends: a value, or an environment variable's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ProviderHeader {
    /// Its name.
    pub name: String,
    /// Its value.
    pub value: Option<String>,
    /// The environment variable (of the control plane, as Istio reads it)
    /// whose value it takes.
    #[serde(alias = "env_name")]
    pub env_name: Option<String>,
}

/// `OpenTelemetryTracingProvider`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OpenTelemetryProvider {
    /// The collector's service.
    pub service: String,
    /// Its port.
    pub port: u32,
    /// The longest tag value sent (0: Envoy's default).
    #[serde(alias = "max_tag_length")]
    pub max_tag_length: u32,
    /// OTLP over HTTP (else gRPC).
    pub http: Option<OtelHttp>,
    /// OTLP over gRPC settings.
    pub grpc: Option<OtelGrpc>,
}

/// `OpenTelemetryTracingProvider.http`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OtelHttp {
    /// The path, e.g. `/v1/traces`.
    pub path: String,
    /// How long an export may take.
    pub timeout: Option<Duration>,
    /// Headers sent with each export.
    pub headers: Vec<ProviderHeader>,
}

/// `OpenTelemetryTracingProvider.grpc`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OtelGrpc {
    /// How long an export may take.
    pub timeout: Option<Duration>,
    /// gRPC metadata sent with each export.
    #[serde(alias = "initial_metadata")]
    pub initial_metadata: Vec<ProviderHeader>,
}

/// A tracer that only needs its collector (`datadog`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct CollectorProvider {
    /// The collector's service.
    pub service: String,
    /// Its port.
    pub port: u32,
    /// The longest tag value sent (0: Envoy's default).
    #[serde(alias = "max_tag_length")]
    pub max_tag_length: u32,
}

/// `SkyWalkingTracingProvider` (and the deprecated `lightstep`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SkywalkingProvider {
    /// The collector's service.
    pub service: String,
    /// Its port.
    pub port: u32,
    /// The token (Istio does not send it).
    #[serde(alias = "access_token")]
    pub access_token: Option<String>,
    /// The longest tag value sent.
    #[serde(alias = "max_tag_length")]
    pub max_tag_length: u32,
}

/// MeshConfig's `defaultProviders`: what applies where no Telemetry object
/// names providers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DefaultProviders {
    /// Tracing providers (the first is used).
    pub tracing: Vec<String>,
    /// Metrics providers.
    pub metrics: Vec<String>,
    /// Access log providers.
    #[serde(alias = "access_logging")]
    pub access_logging: Vec<String>,
}

impl DefaultProviders {
    /// `over`'s lists where it sets them (a list present replaces this one), as istiod merges them.
    pub fn over(&self, over: &DefaultProvidersPatch) -> DefaultProviders {
        DefaultProviders {
            tracing: over.tracing.clone().unwrap_or_else(|| self.tracing.clone()),
            metrics: over.metrics.clone().unwrap_or_else(|| self.metrics.clone()),
            access_logging: over.access_logging.clone().unwrap_or_else(|| self.access_logging.clone()),
        }
    }
}

/// `defaultProviders` as a document writes it: each list may be absent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DefaultProvidersPatch {
    /// `tracing`.
    pub tracing: Option<Vec<String>>,
    /// `metrics`.
    pub metrics: Option<Vec<String>>,
    /// `accessLogging`.
    #[serde(alias = "access_logging")]
    pub access_logging: Option<Vec<String>>,
}

/// Istio's built-in providers: `prometheus`, `stackdriver`, and `envoy`
/// (a file log on `/dev/stdout`).
pub fn builtins() -> Vec<ExtensionProvider> {
    vec![
        ExtensionProvider { name: "prometheus".into(), prometheus: Some(Empty {}), ..Default::default() },
        ExtensionProvider {
            name: "stackdriver".into(),
            stackdriver: Some(serde_json::Value::Object(Default::default())),
            ..Default::default()
        },
        ExtensionProvider {
            name: ENVOY_PROVIDER.into(),
            envoy_file_access_log: Some(FileAccessLogProvider { path: "/dev/stdout".into(), ..Default::default() }),
            ..Default::default()
        },
    ]
}

/// The built-ins with `providers` merged in by name, as istiod merges them:
/// one of the same name replaces the earlier in place, others follow.
pub fn merge_with_builtins(providers: &[ExtensionProvider]) -> Arc<[ExtensionProvider]> {
    let mut out = builtins();
    for provider in providers {
        match out.iter_mut().find(|p| p.name == provider.name) {
            Some(slot) => *slot = provider.clone(),
            None => out.push(provider.clone()),
        }
    }
    out.into()
}

/// A provider by name (ignoring case, as istiod looks them up).
pub fn find<'a>(providers: &'a [ExtensionProvider], name: &str) -> Option<&'a ExtensionProvider> {
    providers.iter().find(|p| p.name.eq_ignore_ascii_case(name))
}

/// What a user of Istio's request metrics gets instead (the `prometheus`
/// provider, a Telemetry's `metrics`, `defaultProviders.metrics`).
pub const METRICS_INSTEAD: &str = "Istio's request metrics (istio_requests_total, …) come from the istio.stats \
filter of Istio's own Envoy build, which upstream Envoy 1.40 does not have: nothing of this is applied, and each \
proxy's own per-cluster and per-listener statistics on its admin /stats/prometheus are what is served instead";

/// Why the provider `name` gives nothing where it is wanted as `wanted`,
/// among the providers a mesh serves (`all`), if it does not: no provider
/// has the name, it is of another kind, or it is Lightstep, which istiod
/// no longer generates a tracer for. Whether its collector is a service of
/// the mesh is the registry's to say.
pub fn unusable(all: &[ExtensionProvider], name: &str, wanted: ProviderUse) -> Option<String> {
    let Some(provider) = find(all, name) else {
        return Some(format!("the mesh config defines no extension provider {name:?}"));
    };
    if provider.used_for() != wanted {
        return Some(format!("provider {name:?} is not a {} provider", wanted.as_str()));
    }
    if provider.lightstep.is_some() {
        return Some(format!("provider {name:?} is Lightstep, which Istio no longer generates a tracer for"));
    }
    None
}

/// What an extension provider is for, as its kind says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderUse {
    /// It writes access logs.
    AccessLog,
    /// It collects traces.
    Tracing,
    /// It gives Istio's request metrics.
    Metrics,
    /// It decides requests for CUSTOM AuthorizationPolicies.
    Authorization,
    /// Something else (or nothing meshpush models).
    Other,
}

impl ProviderUse {
    /// The use in words (`access log`), as messages name it.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderUse::Tracing => "tracing",
            ProviderUse::AccessLog => "access log",
            ProviderUse::Metrics => "metrics",
            ProviderUse::Authorization => "authorization",
            ProviderUse::Other => "matching",
        }
    }
}

impl ExtensionProvider {
    /// The kinds it sets, by their field names, in the order of Istio's
    /// API (its `provider` oneof).
    pub fn kinds(&self) -> Vec<&'static str> {
        [
            ("envoyExtAuthzHttp", self.envoy_ext_authz_http.is_some()),
            ("envoyExtAuthzGrpc", self.envoy_ext_authz_grpc.is_some()),
            ("zipkin", self.zipkin.is_some()),
            ("lightstep", self.lightstep.is_some()),
            ("datadog", self.datadog.is_some()),
            ("stackdriver", self.stackdriver.is_some()),
            ("skywalking", self.skywalking.is_some()),
            ("opentelemetry", self.opentelemetry.is_some()),
            ("prometheus", self.prometheus.is_some()),
            ("envoyFileAccessLog", self.envoy_file_access_log.is_some()),
            ("envoyHttpAls", self.envoy_http_als.is_some()),
            ("envoyTcpAls", self.envoy_tcp_als.is_some()),
            ("envoyOtelAls", self.envoy_otel_als.is_some()),
        ]
        .into_iter()
        .filter_map(|(kind, set)| set.then_some(kind))
        .collect()
    }

    /// Keeps the one kind Istio keeps of a provider that sets several: its
    /// `provider` is a oneof, and istiod's reader keeps the last kind in
    /// the API's order. Returns the kinds dropped.
    pub fn keep_one_kind(&mut self) -> Vec<&'static str> {
        let kinds = self.kinds();
        let Some((_, dropped)) = kinds.split_last() else { return Vec::new() };
        for kind in dropped {
            match *kind {
                "envoyExtAuthzHttp" => self.envoy_ext_authz_http = None,
                "envoyExtAuthzGrpc" => self.envoy_ext_authz_grpc = None,
                "zipkin" => self.zipkin = None,
                "lightstep" => self.lightstep = None,
                "datadog" => self.datadog = None,
                "stackdriver" => self.stackdriver = None,
                "skywalking" => self.skywalking = None,
                "opentelemetry" => self.opentelemetry = None,
                "prometheus" => self.prometheus = None,
                "envoyFileAccessLog" => self.envoy_file_access_log = None,
                "envoyHttpAls" => self.envoy_http_als = None,
                "envoyTcpAls" => self.envoy_tcp_als = None,
                _ => self.envoy_otel_als = None,
            }
        }
        dropped.to_vec()
    }

    /// What the provider is for.
    pub fn used_for(&self) -> ProviderUse {
        if self.envoy_file_access_log.is_some()
            || self.envoy_http_als.is_some()
            || self.envoy_tcp_als.is_some()
            || self.envoy_otel_als.is_some()
        {
            ProviderUse::AccessLog
        } else if self.zipkin.is_some()
            || self.opentelemetry.is_some()
            || self.datadog.is_some()
            || self.skywalking.is_some()
            || self.lightstep.is_some()
        {
            ProviderUse::Tracing
        } else if self.prometheus.is_some() {
            ProviderUse::Metrics
        } else if self.authorizer().is_some() {
            ProviderUse::Authorization
        } else {
            ProviderUse::Other
        }
    }

    /// The external authorizer the provider is, if it is one (the HTTP kind
    /// first, should a provider set both).
    pub fn authorizer(&self) -> Option<AuthorizerProvider<'_>> {
        match (&self.envoy_ext_authz_http, &self.envoy_ext_authz_grpc) {
            (Some(http), _) => Some(AuthorizerProvider::Http(http)),
            (None, Some(grpc)) => Some(AuthorizerProvider::Grpc(grpc)),
            (None, None) => None,
        }
    }

    /// The collector service and port the provider sends to, if it has one.
    pub fn collector(&self) -> Option<(&str, u32)> {
        let pairs = [
            self.envoy_http_als.as_ref().map(|p| (p.service.as_str(), p.port)),
            self.envoy_tcp_als.as_ref().map(|p| (p.service.as_str(), p.port)),
            self.envoy_otel_als.as_ref().map(|p| (p.service.as_str(), p.port)),
            self.zipkin.as_ref().map(|p| (p.service.as_str(), p.port)),
            self.opentelemetry.as_ref().map(|p| (p.service.as_str(), p.port)),
            self.datadog.as_ref().map(|p| (p.service.as_str(), p.port)),
            self.skywalking.as_ref().map(|p| (p.service.as_str(), p.port)),
            self.lightstep.as_ref().map(|p| (p.service.as_str(), p.port)),
        ];
        pairs.into_iter().flatten().next()
    }
}

/// Labels as the JSON text a `LogFormat` holds.
pub fn labels_json(labels: &serde_json::Map<String, serde_json::Value>) -> String {
    serde_json::Value::Object(labels.clone()).to_string()
}

/// A `BTreeMap` of label names to formats, for providers whose labels are flat strings.
pub fn string_labels(labels: &serde_json::Map<String, serde_json::Value>) -> BTreeMap<String, String> {
    labels.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect()
}
