//! Access loggers as Envoy takes them: what a side of a proxy logs
//! ([`AppliedTelemetry`]) as the `access_log` entries of its HTTP
//! connection managers, TCP proxies and listeners, as Istio writes them:
//! Envoy's file logger, its gRPC access log services (HTTP and TCP), and
//! its OpenTelemetry logger, each behind its Telemetry CEL filter.
//!
//! A connection manager or TCP proxy logs every request or connection; a
//! listener logs only the connections no filter chain takes (response flag
//! `NR`), and only when the mesh keeps listener logs on.
//!
//! Invariant: a side that logs nothing gives empty lists, so a mesh
//! without access logs generates exactly what it did before they existed.

use envoy_types::pb::envoy::config::accesslog::v3::{
    AccessLog, AccessLogFilter, AndFilter, ExtensionFilter, ResponseFlagFilter, access_log, access_log_filter,
    extension_filter,
};
use envoy_types::pb::envoy::config::core::v3::{
    ApiVersion, DataSource, GrpcService, SubstitutionFormatString, TypedExtensionConfig, data_source, grpc_service,
    substitution_format_string,
};
use envoy_types::pb::envoy::extensions::access_loggers::file::v3::{FileAccessLog, file_access_log};
use envoy_types::pb::envoy::extensions::access_loggers::filters::cel::v3::ExpressionFilter;
use envoy_types::pb::envoy::extensions::access_loggers::grpc::v3::{
    CommonGrpcAccessLogConfig, HttpGrpcAccessLogConfig, TcpGrpcAccessLogConfig,
};
use envoy_types::pb::envoy::extensions::access_loggers::open_telemetry::v3::OpenTelemetryAccessLogConfig;
use envoy_types::pb::envoy::extensions::formatter::req_without_query::v3::ReqWithoutQuery;
use envoy_types::pb::google::protobuf::{ListValue, Struct, Value, value::Kind};
use envoy_types::pb::opentelemetry::proto::common::v1::{AnyValue, KeyValue, KeyValueList, any_value};

use super::{naming, proto};
use crate::push::index::telemetry::{Collector, GrpcLog, LogSink};
use crate::push::index::{AccessLogger, AppliedTelemetry, LogFormat};

/// Envoy's file access logger.
pub const FILE_ACCESS_LOG: &str = "envoy.access_loggers.file";
/// Envoy's gRPC access loggers (HTTP, TCP) and OpenTelemetry logger, by
/// the names Istio gives them.
const HTTP_GRPC_ACCESS_LOG: &str = "envoy.access_loggers.http_grpc";
const TCP_GRPC_ACCESS_LOG: &str = "envoy.tcp_grpc_access_log";
const OTEL_ACCESS_LOG: &str = "envoy.access_loggers.open_telemetry";
/// The access log filter extension that evaluates a CEL expression.
pub const CEL_FILTER: &str = "envoy.access_loggers.extension_filters.cel";
/// The formatter that gives Envoy the `%REQ_WITHOUT_QUERY(…)%` operator.
const REQ_WITHOUT_QUERY_FORMATTER: &str = "envoy.formatter.req_without_query";
/// The response flag of a connection no filter chain took.
const NO_ROUTE: &str = "NR";

/// The loggers of the connection managers and TCP proxies of a side.
pub fn connection_logs(applied: &AppliedTelemetry) -> Vec<AccessLog> {
    applied.access_logs.iter().map(|logger| access_log(logger, None)).collect()
}

/// The loggers of the listeners of a side: the same loggers, for the
/// connections no filter chain takes.
pub fn listener_logs(applied: &AppliedTelemetry) -> Vec<AccessLog> {
    if !applied.listener_log {
        return Vec::new();
    }
    let no_route = AccessLogFilter {
        filter_specifier: Some(access_log_filter::FilterSpecifier::ResponseFlagFilter(ResponseFlagFilter {
            flags: vec![NO_ROUTE.to_string()],
        })),
    };
    applied.access_logs.iter().map(|logger| access_log(logger, Some(no_route.clone()))).collect()
}

/// One logger, writing only what `builtin` and its own CEL filter both let
/// through (Envoy's `and_filter` when there are two).
fn access_log(logger: &AccessLogger, builtin: Option<AccessLogFilter>) -> AccessLog {
    let cel = logger.filter.as_ref().map(|expression| AccessLogFilter {
        filter_specifier: Some(access_log_filter::FilterSpecifier::ExtensionFilter(ExtensionFilter {
            name: CEL_FILTER.to_string(),
            config_type: Some(extension_filter::ConfigType::TypedConfig(proto::any(&ExpressionFilter {
                expression: expression.to_string(),
                ..Default::default()
            }))),
        })),
    });
    let filter = match (builtin, cel) {
        (Some(a), Some(b)) => Some(AccessLogFilter {
            filter_specifier: Some(access_log_filter::FilterSpecifier::AndFilter(AndFilter { filters: vec![a, b] })),
        }),
        (a, b) => a.or(b),
    };
    let (name, config) = match &logger.sink {
        LogSink::File { path, format, omit_empty_values } => {
            let mut format = substitution_format(format);
            format.omit_empty_values = *omit_empty_values;
            let config = FileAccessLog {
                path: path.to_string(),
                access_log_format: Some(file_access_log::AccessLogFormat::LogFormat(format)),
            };
            (FILE_ACCESS_LOG, proto::any(&config))
        }
        LogSink::HttpGrpc(grpc) => {
            let config = HttpGrpcAccessLogConfig {
                common_config: Some(common_grpc(grpc)),
                additional_request_headers_to_log: grpc.request_headers.iter().map(|h| h.to_string()).collect(),
                additional_response_headers_to_log: grpc.response_headers.iter().map(|h| h.to_string()).collect(),
                additional_response_trailers_to_log: grpc.response_trailers.iter().map(|h| h.to_string()).collect(),
            };
            (HTTP_GRPC_ACCESS_LOG, proto::any(&config))
        }
        LogSink::TcpGrpc(grpc) => {
            (TCP_GRPC_ACCESS_LOG, proto::any(&TcpGrpcAccessLogConfig { common_config: Some(common_grpc(grpc)) }))
        }
        LogSink::Otel { collector, log_name, body, attributes } => {
            let string = |s: &str| AnyValue { value: Some(any_value::Value::StringValue(s.to_string())) };
            let uses_req_without_query =
                body.contains("%REQ_WITHOUT_QUERY") || attributes.iter().any(|(_, v)| v.contains("%REQ_WITHOUT_QUERY"));
            let config = OpenTelemetryAccessLogConfig {
                // Istio sets these in `common_config`, which Envoy 1.40
                // deprecates for these fields of the logger's own.
                log_name: log_name.to_string(),
                grpc_service: Some(envoy_grpc(collector)),
                filter_state_objects_to_log: OTEL_FILTER_STATE.iter().map(|s| s.to_string()).collect(),
                disable_builtin_labels: true,
                body: Some(string(body)),
                attributes: (!attributes.is_empty()).then(|| KeyValueList {
                    values: attributes
                        .iter()
                        .map(|(k, v)| KeyValue { key: k.to_string(), value: Some(string(v)), ..Default::default() })
                        .collect(),
                }),
                formatters: if uses_req_without_query { vec![req_without_query()] } else { Vec::new() },
                ..Default::default()
            };
            (OTEL_ACCESS_LOG, proto::any(&config))
        }
    };
    AccessLog { name: name.to_string(), filter, config_type: Some(access_log::ConfigType::TypedConfig(config)) }
}

/// The filter state Istio's OpenTelemetry logger sends.
const OTEL_FILTER_STATE: [&str; 6] = [
    "upstream_peer",
    "downstream_peer",
    "wasm.upstream_peer",
    "wasm.upstream_peer_id",
    "wasm.downstream_peer",
    "wasm.downstream_peer_id",
];

fn common_grpc(grpc: &GrpcLog) -> CommonGrpcAccessLogConfig {
    CommonGrpcAccessLogConfig {
        log_name: grpc.log_name.to_string(),
        grpc_service: Some(envoy_grpc(&grpc.collector)),
        transport_api_version: ApiVersion::V3 as i32,
        filter_state_objects_to_log: grpc.filter_state.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

/// A gRPC service on a collector's outbound cluster, its host the authority.
pub fn envoy_grpc(collector: &Collector) -> GrpcService {
    GrpcService {
        target_specifier: Some(grpc_service::TargetSpecifier::EnvoyGrpc(grpc_service::EnvoyGrpc {
            cluster_name: collector_cluster(collector),
            authority: collector.host.to_string(),
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// The outbound cluster of a collector.
pub fn collector_cluster(collector: &Collector) -> String {
    naming::outbound_cluster(collector.port, "", &collector.host)
}

fn req_without_query() -> TypedExtensionConfig {
    TypedExtensionConfig {
        name: REQ_WITHOUT_QUERY_FORMATTER.to_string(),
        typed_config: Some(proto::any(&ReqWithoutQuery {})),
    }
}

/// A format as Envoy's substitution format string, with the formatter
/// extensions its operators need (as Istio adds them).
fn substitution_format(format: &LogFormat) -> SubstitutionFormatString {
    // Istio also sets `json_format_options.sort_properties: false`: Envoy's
    // default, and deprecated there, so it is left unset here.
    let (format, text) = match format {
        LogFormat::Text(text) => (
            substitution_format_string::Format::TextFormatSource(DataSource {
                specifier: Some(data_source::Specifier::InlineString(text.to_string())),
                ..Default::default()
            }),
            text,
        ),
        LogFormat::Json(raw) => {
            let labels = match serde_json::from_str::<serde_json::Value>(raw) {
                Ok(serde_json::Value::Object(map)) => map,
                // The index writes the labels; anything else is not an object of them.
                _ => serde_json::Map::new(),
            };
            (substitution_format_string::Format::JsonFormat(json_struct(labels)), raw)
        }
    };
    let formatters = if text.contains("%REQ_WITHOUT_QUERY") { vec![req_without_query()] } else { Vec::new() };
    SubstitutionFormatString { format: Some(format), formatters, ..Default::default() }
}

/// A JSON object as a protobuf `Struct`.
pub fn json_struct(map: serde_json::Map<String, serde_json::Value>) -> Struct {
    Struct { fields: map.into_iter().map(|(k, v)| (k, json_value(v))).collect() }
}

fn json_value(value: serde_json::Value) -> Value {
    let kind = match value {
        serde_json::Value::Null => Kind::NullValue(0),
        serde_json::Value::Bool(b) => Kind::BoolValue(b),
        serde_json::Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or_default()),
        serde_json::Value::String(s) => Kind::StringValue(s),
        serde_json::Value::Array(items) => {
            Kind::ListValue(ListValue { values: items.into_iter().map(json_value).collect() })
        }
        serde_json::Value::Object(map) => Kind::StructValue(json_struct(map)),
    };
    Value { kind: Some(kind) }
}
