//! Extension providers resolved against the registry: a named provider
//! becomes the access logger or tracer the generators render, with its
//! collector found among the mesh's services, as istiod finds it
//! (`service` is `HOST` or `NAMESPACE/HOST`; the cluster is the service's
//! outbound cluster at `port`).
//!
//! A provider meshpush cannot serve resolves to an error saying why (its
//! collector is not a known service; a kind that cannot log or trace);
//! the index logs it once per build, and the proxies get what istiod
//! gives them then: nothing from that provider.

use std::sync::Arc;

use serde::Serialize;

use super::{DEFAULT_TEXT_FORMAT, LogFormat};
use crate::config::mesh::providers::{ExtensionProvider, LogFormatSpec, ProviderHeader, labels_json};
use crate::push::index::ServiceIndex;

/// Istio's default log names of the gRPC access log services.
const HTTP_LOG_NAME: &str = "http_envoy_accesslog";
const TCP_LOG_NAME: &str = "tcp_envoy_accesslog";
const OTEL_LOG_NAME: &str = "otel_envoy_accesslog";
/// The filter state Istio's gRPC loggers send unless told otherwise.
const DEFAULT_FILTER_STATE: [&str; 2] = ["upstream_peer", "downstream_peer"];
/// Zipkin's collector path unless the provider names one.
const ZIPKIN_PATH: &str = "/api/v2/spans";
/// How long a Zipkin report may take unless the provider says.
const ZIPKIN_TIMEOUT_MS: u64 = 5000;

/// A collector: a service of the mesh and the port its provider names.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Collector {
    /// The service's host (the `:authority` of gRPC collectors).
    pub host: Arc<str>,
    /// The port.
    pub port: u32,
}

/// Where an access logger writes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum LogSink {
    /// Envoy's file access logger (`envoy.access_loggers.file`).
    File {
        /// The file (`/dev/stdout` for the proxy's own output).
        path: Arc<str>,
        /// What each entry holds.
        format: LogFormat,
        /// Whether empty values are left out.
        omit_empty_values: bool,
    },
    /// Envoy's gRPC access log service, HTTP entries.
    HttpGrpc(GrpcLog),
    /// Envoy's gRPC access log service, TCP entries.
    TcpGrpc(GrpcLog),
    /// OpenTelemetry logs over gRPC.
    Otel {
        /// The collector.
        collector: Collector,
        /// The log name.
        log_name: Arc<str>,
        /// The record's body format.
        body: Arc<str>,
        /// Its attributes: name and format, sorted by name.
        attributes: Vec<(Arc<str>, Arc<str>)>,
    },
}

/// A gRPC access log service's settings.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct GrpcLog {
    /// The collector.
    pub collector: Collector,
    /// The log name.
    pub log_name: Arc<str>,
    /// The filter state objects sent.
    pub filter_state: Vec<Arc<str>>,
    /// Request headers sent (HTTP).
    pub request_headers: Vec<Arc<str>>,
    /// Response headers sent (HTTP).
    pub response_headers: Vec<Arc<str>>,
    /// Response trailers sent (HTTP).
    pub response_trailers: Vec<Arc<str>>,
}

/// A tracer and where it reports.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Tracer {
    /// Zipkin v2 JSON over HTTP.
    Zipkin {
        /// The collector.
        collector: Collector,
        /// The collector's path.
        path: Arc<str>,
        /// How long a report may take, in milliseconds.
        timeout_ms: u64,
        /// Whether trace ids are 128-bit.
        trace_id_128bit: bool,
        /// Whether W3C trace context is propagated beside B3.
        w3c: bool,
        /// Headers sent with each report.
        headers: Vec<(Arc<str>, Arc<str>)>,
        /// The longest tag value (0: Envoy's default).
        max_tag_length: u32,
    },
    /// OpenTelemetry (OTLP).
    OpenTelemetry {
        /// The collector.
        collector: Collector,
        /// OTLP over HTTP at this path (else gRPC).
        http_path: Option<Arc<str>>,
        /// How long an export may take, in milliseconds (none: Envoy's default).
        timeout_ms: Option<u64>,
        /// Headers (HTTP) or metadata (gRPC) sent with each export.
        headers: Vec<(Arc<str>, Arc<str>)>,
        /// The longest tag value (0: Envoy's default).
        max_tag_length: u32,
    },
    /// Datadog.
    Datadog {
        /// The collector.
        collector: Collector,
        /// The longest tag value (0: Envoy's default).
        max_tag_length: u32,
    },
    /// Apache SkyWalking.
    SkyWalking {
        /// The collector.
        collector: Collector,
    },
    /// The tracer Envoy's bootstrap names (Istio's legacy path: the
    /// connection manager names no provider).
    Bootstrap,
}

impl Tracer {
    /// The longest tag value the provider sets (0: none).
    pub fn max_tag_length(&self) -> u32 {
        match self {
            Tracer::Zipkin { max_tag_length, .. }
            | Tracer::OpenTelemetry { max_tag_length, .. }
            | Tracer::Datadog { max_tag_length, .. } => *max_tag_length,
            Tracer::SkyWalking { .. } | Tracer::Bootstrap => 0,
        }
    }
}

/// The access logger `provider` gives, or why none.
pub fn log_sink(provider: &ExtensionProvider, services: &ServiceIndex) -> Result<LogSink, String> {
    if let Some(file) = &provider.envoy_file_access_log {
        let path = if file.path.is_empty() { "/dev/stdout" } else { &file.path };
        return Ok(LogSink::File {
            path: path.into(),
            format: file_format(file.log_format.as_ref()),
            omit_empty_values: file.omit_empty_values,
        });
    }
    let grpc = |p: &crate::config::mesh::providers::GrpcLogProvider, default_name: &str| {
        Ok::<_, String>(GrpcLog {
            collector: collector(&p.service, p.port, services)?,
            log_name: or_default(&p.log_name, default_name),
            filter_state: if p.filter_state_objects_to_log.is_empty() {
                DEFAULT_FILTER_STATE.iter().map(|s| Arc::from(*s)).collect()
            } else {
                p.filter_state_objects_to_log.iter().map(|s| Arc::from(s.as_str())).collect()
            },
            request_headers: p.additional_request_headers_to_log.iter().map(|s| Arc::from(s.as_str())).collect(),
            response_headers: p.additional_response_headers_to_log.iter().map(|s| Arc::from(s.as_str())).collect(),
            response_trailers: p.additional_response_trailers_to_log.iter().map(|s| Arc::from(s.as_str())).collect(),
        })
    };
    if let Some(http) = &provider.envoy_http_als {
        return grpc(http, HTTP_LOG_NAME).map(LogSink::HttpGrpc);
    }
    if let Some(tcp) = &provider.envoy_tcp_als {
        return grpc(tcp, TCP_LOG_NAME).map(LogSink::TcpGrpc);
    }
    if let Some(otel) = &provider.envoy_otel_als {
        let format = otel.log_format.as_ref();
        let body = format.and_then(|f| f.text.as_deref()).filter(|t| !t.is_empty()).unwrap_or(DEFAULT_TEXT_FORMAT);
        let mut attributes: Vec<(Arc<str>, Arc<str>)> = format
            .and_then(|f| f.labels.as_ref())
            .map(|labels| {
                labels.iter().map(|(k, v)| (Arc::from(k.as_str()), Arc::from(v.as_str().unwrap_or_default()))).collect()
            })
            .unwrap_or_default();
        attributes.sort();
        return Ok(LogSink::Otel {
            collector: collector(&otel.service, otel.port, services)?,
            log_name: or_default(&otel.log_name, OTEL_LOG_NAME),
            body: body.into(),
            attributes,
        });
    }
    Err(format!("provider {:?} does not write access logs", provider.name))
}

/// The tracer `provider` gives, or why none.
pub fn tracer(provider: &ExtensionProvider, services: &ServiceIndex) -> Result<Tracer, String> {
    if let Some(z) = &provider.zipkin {
        let path = if z.path.is_empty() { ZIPKIN_PATH } else { &z.path };
        return Ok(Tracer::Zipkin {
            collector: collector(&z.service, z.port, services)?,
            path: path.into(),
            timeout_ms: z.timeout.map_or(ZIPKIN_TIMEOUT_MS, |t| t.0.as_millis() as u64),
            trace_id_128bit: !z.enable_64bit_trace_id,
            w3c: z.trace_context_option.as_deref() == Some("USE_B3_WITH_W3C_PROPAGATION"),
            headers: headers(&z.headers),
            max_tag_length: z.max_tag_length,
        });
    }
    if let Some(o) = &provider.opentelemetry {
        let (http_path, timeout, headers) = match (&o.http, &o.grpc) {
            (Some(http), _) => (Some(Arc::from(http.path.as_str())), http.timeout, headers(&http.headers)),
            (None, Some(grpc)) => (None, grpc.timeout, headers(&grpc.initial_metadata)),
            (None, None) => (None, None, Vec::new()),
        };
        return Ok(Tracer::OpenTelemetry {
            collector: collector(&o.service, o.port, services)?,
            http_path,
            timeout_ms: timeout.map(|t| t.0.as_millis() as u64),
            headers,
            max_tag_length: o.max_tag_length,
        });
    }
    if let Some(d) = &provider.datadog {
        return Ok(Tracer::Datadog {
            collector: collector(&d.service, d.port, services)?,
            max_tag_length: d.max_tag_length,
        });
    }
    if let Some(s) = &provider.skywalking {
        return Ok(Tracer::SkyWalking { collector: collector(&s.service, s.port, services)? });
    }
    if provider.lightstep.is_some() {
        return Err(format!("provider {:?} is Lightstep, which Istio no longer generates a tracer for", provider.name));
    }
    Err(format!("provider {:?} does not trace", provider.name))
}

/// The format of a file provider's `logFormat`: its labels (empty: Istio's
/// default ones), else its text (empty: Istio's default), with a newline.
fn file_format(spec: Option<&LogFormatSpec>) -> LogFormat {
    match spec {
        Some(LogFormatSpec { labels: Some(labels), .. }) if !labels.is_empty() => {
            LogFormat::Json(labels_json(labels).into())
        }
        Some(LogFormatSpec { labels: Some(_), .. }) => LogFormat::default_json(),
        Some(LogFormatSpec { text: Some(text), .. }) if !text.is_empty() => LogFormat::text(text),
        _ => LogFormat::Text(DEFAULT_TEXT_FORMAT.into()),
    }
}

/// The collector at `service` (`HOST` or `NAMESPACE/HOST`) and `port`.
fn collector(service: &str, port: u32, services: &ServiceIndex) -> Result<Collector, String> {
    let (namespace, host) = match service.split_once('/') {
        Some((ns, host)) => (Some(ns), host),
        None => (None, service),
    };
    match services.get(host) {
        Some(svc) if namespace.is_none_or(|ns| *svc.namespace == *ns) => {
            Ok(Collector { host: Arc::from(svc.hostname.to_string()), port })
        }
        _ => Err(format!("its collector {service:?} is not a service of the mesh")),
    }
}

fn or_default(value: &str, default: &str) -> Arc<str> {
    Arc::from(if value.is_empty() { default } else { value })
}

/// Headers as sent: a value, or the environment variable's, read here as
/// istiod reads it in its own environment (unset, the header is sent empty,
/// as istiod sends it).
fn headers(headers: &[ProviderHeader]) -> Vec<(Arc<str>, Arc<str>)> {
    headers
        .iter()
        .map(|h| {
            let value = match (&h.value, &h.env_name) {
                (Some(v), _) => v.clone(),
                (None, Some(env)) => std::env::var(env).unwrap_or_default(),
                (None, None) => String::new(),
            };
            (Arc::from(h.name.as_str()), Arc::from(value))
        })
        .collect()
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn a_header_from_an_unset_variable_is_sent_empty_as_istiod_sends_it() {
        let header = |value: Option<&str>, env: Option<&str>| ProviderHeader {
            name: "x-h".into(),
            value: value.map(Into::into),
            env_name: env.map(Into::into),
        };
        let sent = headers(&[
            header(Some("v"), None),
            header(None, Some("MESHPUSH_TEST_VARIABLE_NOBODY_SETS")),
            header(None, Some("PATH")),
        ]);
        let values: Vec<&str> = sent.iter().map(|(_, v)| &**v).collect();
        assert_eq!(values[..2], ["v", ""]);
        assert_eq!(values[2], std::env::var("PATH").unwrap(), "istiod's own environment");
    }
}
