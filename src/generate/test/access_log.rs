//! The mesh config's access log on the generated listeners: every HTTP
//! connection manager and TCP proxy logs, the listeners log the
//! connections no chain takes, and a mesh without a log generates none.

use envoy_types::pb::envoy::config::accesslog::v3::{AccessLog, access_log, access_log_filter};
use envoy_types::pb::envoy::config::core::v3::{data_source, substitution_format_string};
use envoy_types::pb::envoy::extensions::access_loggers::file::v3::{FileAccessLog, file_access_log};
use envoy_types::pb::google::protobuf::value::Kind;

use super::*;
use crate::config::mesh::MeshSettings;
use crate::generate::access_log::FILE_ACCESS_LOG;

/// The bookinfo mesh served with the mesh config `text`.
fn context_with_mesh(text: &str) -> PushContext {
    let store = ConfigStore::new();
    store.apply(mesh());
    let mesh = MeshSettings::parse("mesh.yaml", text).unwrap().mesh_config();
    PushContext::build_with(store.snapshot(), 1, Arc::new(ScopeInterner::default()), Arc::new(mesh))
}

/// Every listener of the productpage sidecar (outbound and inbound) and of the ingress router.
fn all_listeners(ctx: &PushContext) -> Vec<Listener> {
    let mut out = lds::listeners(ctx, &productpage(ctx, "REDIRECT"));
    out.extend(lds::inbound_listeners(&productpage_inbound(ctx, "REDIRECT")));
    out.extend(lds::listeners(ctx, &ingress(ctx)));
    out
}

/// The access logs of every connection manager and TCP proxy of `listeners`.
fn filter_logs(listeners: &[Listener]) -> Vec<(String, Vec<AccessLog>)> {
    let mut out = Vec::new();
    for l in listeners {
        for f in l.filter_chains.iter().flat_map(|c| &c.filters) {
            let logs = match f.name.as_str() {
                "envoy.filters.network.http_connection_manager" => hcm(f).access_log,
                "envoy.filters.network.tcp_proxy" => tcp(f).access_log,
                _ => continue,
            };
            out.push((l.name.clone(), logs));
        }
    }
    out
}

fn file_log(log: &AccessLog) -> FileAccessLog {
    assert_eq!(log.name, FILE_ACCESS_LOG);
    match &log.config_type {
        Some(access_log::ConfigType::TypedConfig(any)) => FileAccessLog::decode(any.value.as_slice()).unwrap(),
        None => panic!("no config"),
    }
}

fn text_format(file: &FileAccessLog) -> String {
    let Some(file_access_log::AccessLogFormat::LogFormat(format)) = &file.access_log_format else { panic!() };
    match &format.format {
        Some(substitution_format_string::Format::TextFormatSource(source)) => match &source.specifier {
            Some(data_source::Specifier::InlineString(text)) => text.clone(),
            other => panic!("{other:?}"),
        },
        other => panic!("not text: {other:?}"),
    }
}

#[test]
fn a_mesh_without_an_access_log_file_generates_no_logger() {
    let ctx = context_with_mesh("accessLogEncoding: JSON\n");
    let listeners = all_listeners(&ctx);
    assert!(filter_logs(&listeners).iter().all(|(_, logs)| logs.is_empty()));
    assert!(listeners.iter().all(|l| l.access_log.is_empty()));
}

#[test]
fn the_demo_profile_logs_every_request_and_connection_in_istios_format() {
    let ctx = context_with_mesh("accessLogFile: /dev/stdout\n");
    let listeners = all_listeners(&ctx);
    let logs = filter_logs(&listeners);
    let names: HashSet<&str> = logs.iter().map(|(l, _)| l.as_str()).collect();
    for expected in ["virtualOutbound", "virtualInbound", "0.0.0.0_9080", "0.0.0.0_27017", "0.0.0.0_8080"] {
        assert!(names.contains(expected), "{expected} among {names:?}");
    }
    for (listener, filter_logs) in &logs {
        let [log] = filter_logs.as_slice() else { panic!("{listener}: one logger, got {filter_logs:?}") };
        assert!(log.filter.is_none(), "{listener}: every request");
        let file = file_log(log);
        assert_eq!(file.path, "/dev/stdout");
        let text = text_format(&file);
        assert!(text.starts_with("[%START_TIME%] ") && text.ends_with(" %ROUTE_NAME%\n"), "{text}");
    }
    // The listeners that take connections log those no chain takes.
    let router = lds::listeners(&ctx, &ingress(&ctx));
    for l in [listener(&listeners, "virtualOutbound"), listener(&listeners, "virtualInbound"), &router[0]] {
        let name = &l.name;
        let [log] = l.access_log.as_slice() else { panic!("{name}: one listener logger") };
        let Some(access_log_filter::FilterSpecifier::ResponseFlagFilter(flags)) =
            log.filter.as_ref().and_then(|f| f.filter_specifier.as_ref())
        else {
            panic!("{name}: a response flag filter")
        };
        assert_eq!(flags.flags, ["NR"]);
    }
    // Listeners that virtualOutbound hands connections to are not entered by themselves.
    assert!(listener(&listeners, "0.0.0.0_9080").access_log.is_empty());
}

#[test]
fn the_listener_log_can_be_disabled_and_a_custom_text_format_gets_a_newline() {
    let ctx = context_with_mesh(
        "accessLogFile: /var/log/a.log\naccessLogFormat: \"%REQ_WITHOUT_QUERY(:PATH)% %RESPONSE_CODE%\"\n\
         disableEnvoyListenerLog: true\n",
    );
    let listeners = all_listeners(&ctx);
    assert!(listeners.iter().all(|l| l.access_log.is_empty()));
    let (_, logs) = &filter_logs(&listeners)[0];
    let file = file_log(&logs[0]);
    assert_eq!(text_format(&file), "%REQ_WITHOUT_QUERY(:PATH)% %RESPONSE_CODE%\n");
    let Some(file_access_log::AccessLogFormat::LogFormat(format)) = &file.access_log_format else { panic!() };
    let formatters: Vec<&str> = format.formatters.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(formatters, ["envoy.formatter.req_without_query"], "the operator's extension, as Istio adds it");
}

#[test]
fn json_encoding_gives_envoy_the_labels() {
    let ctx = context_with_mesh(
        "accessLogFile: /dev/stdout\naccessLogEncoding: JSON\n\
         accessLogFormat: '{\"code\": \"%RESPONSE_CODE%\", \"n\": 1, \"nested\": {\"up\": \"%UPSTREAM_HOST%\"}}'\n",
    );
    let listeners = all_listeners(&ctx);
    let (_, logs) = &filter_logs(&listeners)[0];
    let file = file_log(&logs[0]);
    let Some(file_access_log::AccessLogFormat::LogFormat(format)) = &file.access_log_format else { panic!() };
    let Some(substitution_format_string::Format::JsonFormat(labels)) = &format.format else { panic!("JSON") };
    let kind = |name: &str| labels.fields[name].kind.clone().unwrap();
    assert_eq!(kind("code"), Kind::StringValue("%RESPONSE_CODE%".into()));
    assert_eq!(kind("n"), Kind::NumberValue(1.0));
    let Kind::StructValue(nested) = kind("nested") else { panic!("nested object") };
    assert_eq!(nested.fields["up"].kind, Some(Kind::StringValue("%UPSTREAM_HOST%".into())));
}
