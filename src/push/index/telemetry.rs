//! What each proxy logs: the access loggers of its client side (a
//! sidecar's outbound listeners, a router's listeners; Istio's `CLIENT`
//! mode) and of its server side (a sidecar's inbound listeners; `SERVER`).
//!
//! Role: the generators attach what [`AppliedTelemetry`] lists to every
//! HTTP connection manager and TCP proxy of that side, and to its
//! listeners for the connections no chain takes. The scope key carries the
//! client side's and the inbound key the server side's, so proxies that log
//! alike share their generated resources, and a mesh that logs nothing
//! carries one shared empty value.
//!
//! Today the mesh config decides it (`accessLogFile`, `accessLogFormat`,
//! `accessLogEncoding`, `disableEnvoyListenerLog`), as istiod does where
//! no Telemetry object configures logging: one file logger on both sides.
//!
//! Invariant: a format here is the one Envoy is given: an empty mesh
//! format is already Istio's default, and a text format ends in a newline.

use std::sync::Arc;

use serde::Serialize;

use crate::config::mesh::{AccessLogEncoding, AccessLogSettings, MeshConfig, file::json_labels};

/// Istio's default text access log format (its `EnvoyTextLogFormat`): one
/// line per request or connection.
pub const DEFAULT_TEXT_FORMAT: &str = "[%START_TIME%] \"%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%\" \
%RESPONSE_CODE% %RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS% %CONNECTION_TERMINATION_DETAILS% \
\"%UPSTREAM_TRANSPORT_FAILURE_REASON%\" %BYTES_RECEIVED% %BYTES_SENT% %DURATION% \
%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% \"%REQ(X-FORWARDED-FOR)%\" \"%REQ(USER-AGENT)%\" \"%REQ(X-REQUEST-ID)%\" \
\"%REQ(:AUTHORITY)%\" \"%UPSTREAM_HOST%\" %UPSTREAM_CLUSTER_RAW% %UPSTREAM_LOCAL_ADDRESS% \
%DOWNSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_REMOTE_ADDRESS% %REQUESTED_SERVER_NAME% %ROUTE_NAME%\n";

/// Istio's default JSON access log labels, each the command operator its
/// text format logs in that place.
pub const DEFAULT_JSON_LABELS: [(&str, &str); 24] = [
    ("start_time", "%START_TIME%"),
    ("route_name", "%ROUTE_NAME%"),
    ("method", "%REQ(:METHOD)%"),
    ("path", "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%"),
    ("protocol", "%PROTOCOL%"),
    ("response_code", "%RESPONSE_CODE%"),
    ("response_flags", "%RESPONSE_FLAGS%"),
    ("response_code_details", "%RESPONSE_CODE_DETAILS%"),
    ("connection_termination_details", "%CONNECTION_TERMINATION_DETAILS%"),
    ("bytes_received", "%BYTES_RECEIVED%"),
    ("bytes_sent", "%BYTES_SENT%"),
    ("duration", "%DURATION%"),
    ("upstream_service_time", "%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)%"),
    ("x_forwarded_for", "%REQ(X-FORWARDED-FOR)%"),
    ("user_agent", "%REQ(USER-AGENT)%"),
    ("request_id", "%REQ(X-REQUEST-ID)%"),
    ("authority", "%REQ(:AUTHORITY)%"),
    ("upstream_host", "%UPSTREAM_HOST%"),
    ("upstream_cluster", "%UPSTREAM_CLUSTER_RAW%"),
    ("upstream_local_address", "%UPSTREAM_LOCAL_ADDRESS%"),
    ("downstream_local_address", "%DOWNSTREAM_LOCAL_ADDRESS%"),
    ("downstream_remote_address", "%DOWNSTREAM_REMOTE_ADDRESS%"),
    ("requested_server_name", "%REQUESTED_SERVER_NAME%"),
    ("upstream_transport_failure_reason", "%UPSTREAM_TRANSPORT_FAILURE_REASON%"),
];

/// What one side of a proxy logs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct AppliedTelemetry {
    /// The access loggers of its connection managers and TCP proxies.
    pub access_logs: Vec<AccessLogger>,
    /// Whether its listeners log, with the same loggers, the connections
    /// no filter chain takes (Envoy's `NR` response flag).
    pub listener_log: bool,
}

/// One access logger.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum AccessLogger {
    /// Envoy's file access logger (`envoy.access_loggers.file`).
    File {
        /// The file (`/dev/stdout` for the proxy's own output).
        path: Arc<str>,
        /// What each entry holds.
        format: LogFormat,
    },
}

/// The format of an access log entry, as Envoy is given it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum LogFormat {
    /// A line of text with Envoy's command operators, ending in a newline.
    Text(Arc<str>),
    /// A JSON object per entry: the labels, as JSON text of an object whose
    /// values hold command operators.
    Json(Arc<str>),
}

impl LogFormat {
    /// The format of the mesh config's settings: Istio's default where the
    /// mesh sets none (or, for JSON, none that is an object of labels); a
    /// text format gets its newline, as Istio adds it.
    pub fn of_mesh(settings: &AccessLogSettings) -> LogFormat {
        match settings.encoding {
            AccessLogEncoding::Text if settings.format.is_empty() => LogFormat::Text(DEFAULT_TEXT_FORMAT.into()),
            AccessLogEncoding::Text if settings.format.ends_with('\n') => LogFormat::Text(settings.format.clone()),
            AccessLogEncoding::Text => LogFormat::Text(format!("{}\n", settings.format).into()),
            AccessLogEncoding::Json => match json_labels(&settings.format) {
                Ok(labels) if !labels.is_empty() => {
                    LogFormat::Json(serde_json::Value::Object(labels).to_string().into())
                }
                _ => LogFormat::default_json(),
            },
        }
    }

    /// Istio's default JSON labels.
    pub fn default_json() -> LogFormat {
        let labels: serde_json::Map<String, serde_json::Value> =
            DEFAULT_JSON_LABELS.iter().map(|(k, v)| (k.to_string(), serde_json::Value::from(*v))).collect();
        LogFormat::Json(serde_json::Value::Object(labels).to_string().into())
    }
}

/// What every proxy of the mesh logs, on each side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelemetryIndex {
    client: Arc<AppliedTelemetry>,
    server: Arc<AppliedTelemetry>,
}

impl TelemetryIndex {
    /// The index of a mesh configured as `mesh`.
    pub fn build(mesh: &MeshConfig) -> TelemetryIndex {
        let settings = &mesh.access_log;
        let applied = if settings.file.is_empty() {
            AppliedTelemetry::default()
        } else {
            AppliedTelemetry {
                access_logs: vec![AccessLogger::File {
                    path: settings.file.clone(),
                    format: LogFormat::of_mesh(settings),
                }],
                listener_log: settings.listener_log,
            }
        };
        let applied = Arc::new(applied);
        TelemetryIndex { client: applied.clone(), server: applied }
    }

    /// What the client side of a proxy logs (a sidecar's outbound
    /// listeners, every listener of a router).
    pub fn client(&self) -> Arc<AppliedTelemetry> {
        self.client.clone()
    }

    /// What the server side of a proxy logs (a sidecar's inbound listeners).
    pub fn server(&self) -> Arc<AppliedTelemetry> {
        self.server.clone()
    }
}

#[cfg(test)]
mod test;
