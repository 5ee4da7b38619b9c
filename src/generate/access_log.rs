//! Access loggers as Envoy takes them: what a side of a proxy logs
//! ([`AppliedTelemetry`]) as the `access_log` entries of its HTTP
//! connection managers, TCP proxies and listeners, as Istio writes them.
//!
//! A connection manager or TCP proxy logs every request or connection; a
//! listener logs only the connections no filter chain takes (response flag
//! `NR`), and only when the mesh keeps listener logs on.
//!
//! Invariant: a side that logs nothing gives empty lists, so a mesh
//! without access logs generates exactly what it did before they existed.

use envoy_types::pb::envoy::config::accesslog::v3::{
    AccessLog, AccessLogFilter, ResponseFlagFilter, access_log, access_log_filter,
};
use envoy_types::pb::envoy::config::core::v3::{
    DataSource, SubstitutionFormatString, TypedExtensionConfig, data_source, substitution_format_string,
};
use envoy_types::pb::envoy::extensions::access_loggers::file::v3::{FileAccessLog, file_access_log};
use envoy_types::pb::envoy::extensions::formatter::req_without_query::v3::ReqWithoutQuery;
use envoy_types::pb::google::protobuf::{ListValue, Struct, Value, value::Kind};

use super::proto;
use crate::push::index::{AccessLogger, AppliedTelemetry, LogFormat};

/// Envoy's file access logger.
pub const FILE_ACCESS_LOG: &str = "envoy.access_loggers.file";
/// The formatter that gives Envoy the `%REQ_WITHOUT_QUERY(…)%` operator.
const REQ_WITHOUT_QUERY_FORMATTER: &str = "envoy.formatter.req_without_query";
/// The response flag of a connection no filter chain took.
const NO_ROUTE: &str = "NR";

/// The loggers of the connection managers and TCP proxies of a side.
pub fn connection_logs(applied: &AppliedTelemetry) -> Vec<AccessLog> {
    applied.access_logs.iter().map(access_log).collect()
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
    applied
        .access_logs
        .iter()
        .map(|logger| AccessLog { filter: Some(no_route.clone()), ..access_log(logger) })
        .collect()
}

fn access_log(logger: &AccessLogger) -> AccessLog {
    match logger {
        AccessLogger::File { path, format } => {
            let config = FileAccessLog {
                path: path.to_string(),
                access_log_format: Some(file_access_log::AccessLogFormat::LogFormat(substitution_format(format))),
            };
            AccessLog {
                name: FILE_ACCESS_LOG.to_string(),
                filter: None,
                config_type: Some(access_log::ConfigType::TypedConfig(proto::any(&config))),
            }
        }
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
    let formatters = if text.contains("%REQ_WITHOUT_QUERY") {
        vec![TypedExtensionConfig {
            name: REQ_WITHOUT_QUERY_FORMATTER.to_string(),
            typed_config: Some(proto::any(&ReqWithoutQuery {})),
        }]
    } else {
        Vec::new()
    };
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
