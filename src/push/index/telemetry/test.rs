//! The mesh config's access log settings resolved into what each side logs.

use super::*;
use crate::config::mesh::MeshSettings;

fn mesh(text: &str) -> MeshConfig {
    MeshSettings::parse("mesh.yaml", text).unwrap().mesh_config()
}

fn file_logger(applied: &AppliedTelemetry) -> (&str, &LogFormat) {
    match applied.access_logs.as_slice() {
        [AccessLogger::File { path, format }] => (path, format),
        other => panic!("one file logger, got {other:?}"),
    }
}

#[test]
fn without_an_access_log_file_nothing_is_logged_and_every_proxy_shares_one_value() {
    let index = TelemetryIndex::build(&MeshConfig::default());
    assert_eq!(*index.client(), AppliedTelemetry::default());
    assert!(Arc::ptr_eq(&index.client(), &index.server()), "one shared value");
    // A format without a file logs nothing either, as in Istio.
    let index = TelemetryIndex::build(&mesh("accessLogFormat: \"%START_TIME%\"\naccessLogEncoding: JSON\n"));
    assert!(index.client().access_logs.is_empty() && index.server().access_logs.is_empty());
}

#[test]
fn the_demo_profile_logs_istios_default_text_on_both_sides() {
    let index = TelemetryIndex::build(&mesh("accessLogFile: /dev/stdout\n"));
    for side in [index.client(), index.server()] {
        let (path, format) = file_logger(&side);
        assert_eq!(path, "/dev/stdout");
        let LogFormat::Text(text) = format else { panic!("text, got {format:?}") };
        assert!(text.starts_with("[%START_TIME%] \"%REQ(:METHOD)% ") && text.ends_with("%ROUTE_NAME%\n"), "{text}");
        assert!(side.listener_log, "listeners log unrouted connections by default");
    }
}

#[test]
fn a_text_format_gets_its_newline_and_the_listener_log_can_be_disabled() {
    let index = TelemetryIndex::build(&mesh(
        "accessLogFile: /tmp/a.log\naccessLogFormat: \"%RESPONSE_CODE% %REQ(:PATH)%\"\ndisableEnvoyListenerLog: true\n",
    ));
    let side = index.client();
    assert_eq!(file_logger(&side).1, &LogFormat::Text("%RESPONSE_CODE% %REQ(:PATH)%\n".into()));
    assert!(!side.listener_log);
}

#[test]
fn json_encoding_logs_the_given_labels_or_istios_default_ones() {
    let index = TelemetryIndex::build(&mesh(
        "accessLogFile: /dev/stdout\naccessLogEncoding: JSON\naccessLogFormat: '{\"code\": \"%RESPONSE_CODE%\"}'\n",
    ));
    assert_eq!(file_logger(&index.client()).1, &LogFormat::Json("{\"code\":\"%RESPONSE_CODE%\"}".into()));
    for broken in ["'[1, 2]'", "'{not json'", "'{}'", "\"\""] {
        let index = TelemetryIndex::build(&mesh(&format!(
            "accessLogFile: /dev/stdout\naccessLogEncoding: JSON\naccessLogFormat: {broken}\n"
        )));
        let LogFormat::Json(labels) = file_logger(&index.client()).1.clone() else { panic!("JSON") };
        let labels: serde_json::Value = serde_json::from_str(&labels).unwrap();
        assert_eq!(labels["path"], "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%", "{broken}: Istio's defaults");
        assert_eq!(labels.as_object().unwrap().len(), DEFAULT_JSON_LABELS.len());
    }
}
