//! The Telemetry API and the mesh config resolved into what each side of a
//! proxy logs and traces, as istiod resolves them.

use super::*;
use crate::config::mesh::MeshSettings;
use crate::model::ConfigStore;
use crate::testing::bookinfo;

/// The mesh config of `text`, with a zipkin, an OTel log and a JSON file
/// provider whose collectors are `zipkin` and `otel` of istio-system.
fn mesh(text: &str) -> MeshConfig {
    MeshSettings::parse("mesh.yaml", text).unwrap().mesh_config()
}

const PROVIDERS: &str = "extensionProviders:
- name: zipkin
  zipkin: {service: zipkin.istio-system.svc.cluster.local, port: 9411}
- name: otel-logs
  envoyOtelAls: {service: istio-system/otel.istio-system.svc.cluster.local, port: 4317}
- name: json
  envoyFileAccessLog: {path: /var/log/json.log, logFormat: {labels: {code: '%RESPONSE_CODE%'}}}
- name: nowhere
  zipkin: {service: nowhere.example.com, port: 9411}
";

const COLLECTORS: &str = "
apiVersion: v1
kind: Service
metadata: {name: zipkin, namespace: istio-system}
spec: {ports: [{name: http, port: 9411}]}
---
apiVersion: v1
kind: Service
metadata: {name: otel, namespace: istio-system}
spec: {ports: [{name: grpc, port: 4317}]}
";

fn telemetry(namespace: &str, name: &str, created: &str, spec: &str) -> String {
    format!(
        "---\napiVersion: telemetry.istio.io/v1\nkind: Telemetry\nmetadata: {{name: {name}, namespace: {namespace}, \
         creationTimestamp: '{created}'}}\nspec:\n{spec}\n"
    )
}

/// The index of bookinfo with the collectors and `yaml`, in a mesh of `mesh_text`.
fn index(mesh_text: &str, yaml: &str) -> TelemetryIndex {
    let store = ConfigStore::new();
    store.apply(bookinfo::writes());
    store.apply(bookinfo::puts(&format!("{COLLECTORS}{yaml}")));
    let snapshot = store.snapshot();
    let mesh = mesh(mesh_text);
    TelemetryIndex::build(&snapshot, &mesh, &ServiceIndex::build(&snapshot, &mesh))
}

fn reviews() -> Proxy {
    bookinfo::proxy(
        "sidecar~10.0.0.5~reviews-v1.default~default.svc.cluster.local",
        "REDIRECT",
        &[("app", "reviews"), ("version", "v1"), ("service.istio.io/canonical-name", "reviews")],
    )
}

fn productpage() -> Proxy {
    bookinfo::productpage_in("REDIRECT")
}

/// The sinks of a side, by their kind and where they write.
fn sinks(applied: &AppliedTelemetry) -> Vec<String> {
    applied
        .access_logs
        .iter()
        .map(|l| {
            let sink = match &l.sink {
                LogSink::File { path, .. } => format!("file {path}"),
                LogSink::Otel { collector, .. } => format!("otel {}:{}", collector.host, collector.port),
                LogSink::HttpGrpc(g) | LogSink::TcpGrpc(g) => format!("grpc {}", g.collector.host),
            };
            match &l.filter {
                Some(f) => format!("{sink} if {f}"),
                None => sink,
            }
        })
        .collect()
}

#[test]
fn without_telemetry_the_mesh_config_decides_and_every_proxy_shares_one_value() {
    let none = index("", "");
    assert_eq!(*none.client(&productpage()), AppliedTelemetry::default());
    assert!(Arc::ptr_eq(&none.client(&productpage()), &none.server(&reviews())), "one shared value");
    let demo = index("accessLogFile: /dev/stdout\n", "");
    for side in [demo.client(&productpage()), demo.server(&reviews())] {
        let [AccessLogger { sink: LogSink::File { path, format: LogFormat::Text(text), .. }, filter: None }] =
            side.access_logs.as_slice()
        else {
            panic!("one text file logger: {side:?}")
        };
        assert_eq!(&**path, "/dev/stdout");
        assert!(text.starts_with("[%START_TIME%] \"%REQ(:METHOD)% ") && text.ends_with("%ROUTE_NAME%\n"), "{text}");
        assert!(side.listener_log, "listeners log unrouted connections by default");
    }
    // A format without a file logs nothing either, as in Istio.
    let format_only = index("accessLogFormat: \"%START_TIME%\"\naccessLogEncoding: JSON\n", "");
    assert!(format_only.client(&productpage()).access_logs.is_empty());
}

#[test]
fn mesh_formats_get_their_newline_or_istios_default_labels() {
    let text = LogFormat::of_mesh(&mesh("accessLogFormat: \"%RESPONSE_CODE%\"\n").access_log);
    assert_eq!(text, LogFormat::Text("%RESPONSE_CODE%\n".into()));
    let labels = LogFormat::of_mesh(
        &mesh("accessLogEncoding: JSON\naccessLogFormat: '{\"c\": \"%RESPONSE_CODE%\"}'\n").access_log,
    );
    assert_eq!(labels, LogFormat::Json("{\"c\":\"%RESPONSE_CODE%\"}".into()));
    for broken in ["'[1, 2]'", "'{not json'", "'{}'", "\"\""] {
        let format =
            LogFormat::of_mesh(&mesh(&format!("accessLogEncoding: JSON\naccessLogFormat: {broken}\n")).access_log);
        let LogFormat::Json(json) = format else { panic!("JSON") };
        let json: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(json["path"], "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%", "{broken}: Istio's defaults");
        assert_eq!(json.as_object().unwrap().len(), DEFAULT_JSON_LABELS.len());
    }
}

#[test]
fn a_namespace_telemetry_overrides_the_root_one_and_a_workload_one_overrides_both() {
    let yaml = [
        telemetry("istio-system", "mesh", "2026-01-01T00:00:00Z", "  accessLogging: [{providers: [{name: envoy}]}]"),
        telemetry("default", "ns", "2026-01-01T00:00:00Z", "  accessLogging: [{providers: [{name: json}]}]"),
        telemetry(
            "default",
            "reviews",
            "2026-01-01T00:00:00Z",
            "  selector: {matchLabels: {app: reviews}}\n  accessLogging:\n  - providers: [{name: otel-logs}]\n    \
             filter: {expression: 'response.code >= 500'}",
        ),
        // Younger than `ns`: only the oldest namespace-wide Telemetry counts.
        telemetry("default", "ns-later", "2026-02-01T00:00:00Z", "  accessLogging: [{providers: [{name: envoy}]}]"),
    ]
    .concat();
    let index = index(PROVIDERS, &yaml);
    assert_eq!(sinks(&index.client(&productpage())), ["file /var/log/json.log"]);
    assert_eq!(
        sinks(&index.client(&reviews())),
        ["otel otel.istio-system.svc.cluster.local:4317 if response.code >= 500"]
    );
    let elsewhere = bookinfo::proxy("sidecar~10.0.9.1~a.other~other.svc.cluster.local", "REDIRECT", &[("app", "a")]);
    assert_eq!(sinks(&index.client(&elsewhere)), ["file /dev/stdout"], "the root namespace's applies mesh-wide");
}

#[test]
fn a_mode_names_one_side_and_disabled_turns_a_logger_off() {
    let yaml = telemetry(
        "default",
        "ns",
        "2026-01-01T00:00:00Z",
        "  accessLogging:\n  - providers: [{name: envoy}]\n    match: {mode: SERVER}\n  - providers: [{name: json}]\n    \
         match: {mode: CLIENT}\n    disabled: true",
    );
    let index = index(&format!("{PROVIDERS}accessLogFile: /tmp/mesh.log\n"), &yaml);
    assert_eq!(sinks(&index.server(&reviews())), ["file /dev/stdout"]);
    let client = index.client(&reviews());
    assert!(client.access_logs.is_empty(), "the client side's logger is disabled, not the mesh's fallback: {client:?}");
}

#[test]
fn default_providers_log_where_no_telemetry_names_any_and_an_unknown_provider_falls_back() {
    let index_with = |extra: &str, yaml: &str| index(&format!("{PROVIDERS}{extra}"), yaml);
    let defaults = index_with("defaultProviders: {accessLogging: [json]}\n", "");
    assert_eq!(sinks(&defaults.server(&reviews())), ["file /var/log/json.log"]);
    let unknown = index_with(
        "accessLogFile: /tmp/mesh.log\n",
        &telemetry("default", "ns", "2026-01-01T00:00:00Z", "  accessLogging: [{providers: [{name: nosuch}]}]"),
    );
    assert_eq!(sinks(&unknown.client(&reviews())), ["file /tmp/mesh.log"], "nothing resolved: the mesh's log");
}

#[test]
fn a_tracer_of_a_known_collector_traces_with_its_sampling_tags_and_istios_tags() {
    let yaml = telemetry(
        "istio-system",
        "mesh",
        "2026-01-01T00:00:00Z",
        "  tracing:\n  - providers: [{name: zipkin}]\n    randomSamplingPercentage: 100\n    customTags:\n      \
         team: {literal: {value: shop}}\n      user: {header: {name: x-user, defaultValue: none}}",
    );
    let index = index(PROVIDERS, &yaml);
    let tracing = index.client(&reviews()).tracing.clone().expect("traced");
    let Tracer::Zipkin { collector, path, timeout_ms, trace_id_128bit, .. } = &tracing.tracer else { panic!() };
    assert_eq!((&*collector.host, collector.port), ("zipkin.istio-system.svc.cluster.local", 9411));
    assert_eq!((&**path, *timeout_ms, *trace_id_128bit), ("/api/v2/spans", 5000, true), "Istio's defaults");
    assert_eq!(tracing.random_sampling.value(), 100.0);
    let tags: BTreeMap<&str, &TagValue> = tracing.custom_tags.iter().map(|(k, v)| (&**k, v)).collect();
    assert_eq!(tags["team"], &TagValue::Literal("shop".into()));
    assert_eq!(tags["user"], &TagValue::Header("x-user".into(), Some("none".into())));
    assert_eq!(tags["istio.canonical_service"], &TagValue::Literal("reviews".into()));
    assert_eq!(tags["istio.namespace"], &TagValue::Literal("default".into()));
    assert_eq!(tags.len(), 2 + 5 + 4, "the user's, Istio's five literals and four dry-run results");
    assert!(!tracing.spawn_upstream_span, "a sidecar");
}

#[test]
fn tracing_is_off_without_a_provider_with_reporting_disabled_or_with_an_unknown_collector() {
    let traced = |spec: &str, extra: &str| {
        index(&format!("{PROVIDERS}{extra}"), &telemetry("default", "ns", "2026-01-01T00:00:00Z", spec))
            .server(&reviews())
            .tracing
            .clone()
    };
    assert!(traced("  tracing: [{randomSamplingPercentage: 5}]", "").is_none(), "no provider");
    assert!(traced("  tracing: [{disableSpanReporting: true}]", "defaultProviders: {tracing: [zipkin]}\n").is_none());
    assert!(traced("  tracing: [{providers: [{name: nowhere}]}]", "").is_none(), "its collector is no service");
    let defaults = traced("  tracing: [{randomSamplingPercentage: 5}]", "defaultProviders: {tracing: [zipkin]}\n");
    assert_eq!(defaults.expect("the default tracer").random_sampling.value(), 5.0);
    let client_only = index(
        PROVIDERS,
        &telemetry(
            "default",
            "ns",
            "2026-01-01T00:00:00Z",
            "  tracing: [{providers: [{name: zipkin}], match: {mode: CLIENT}}]",
        ),
    );
    assert!(client_only.client(&reviews()).tracing.is_some() && client_only.server(&reviews()).tracing.is_none());
    let problems = client_only.provider_problems();
    assert!(problems.iter().any(|p| p.contains("nowhere.example.com")), "{problems:?}");
}

#[test]
fn user_providers_merge_into_istios_builtins_by_name() {
    let mesh = mesh(
        "extensionProviders:\n- name: envoy\n  envoyFileAccessLog: {path: /tmp/envoy.log}\n- name: z\n  zipkin: {service: z, port: 1}\n",
    );
    let names: Vec<&str> = mesh.extension_providers.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["prometheus", "stackdriver", "envoy", "z"], "the built-in replaced in place, the new one after");
    assert_eq!(mesh.extension_providers[2].envoy_file_access_log.as_ref().unwrap().path, "/tmp/envoy.log");
}

/// `reviews` whose agent sends `config` as its node's ProxyConfig.
fn reviews_running(config: &str) -> Proxy {
    let (config, _) = ProxyConfig::parse("PROXY_CONFIG", config).unwrap();
    Proxy { proxy_config: Some(Arc::new(config)), ..reviews() }
}

#[test]
fn legacy_tracing_uses_the_bootstrap_tracer_of_a_proxy_config_that_names_one() {
    let zipkin = "tracing: {zipkin: {address: 'zipkin:9411'}, sampling: 25, maxPathTagLength: 99, \
                  customTags: {team: {literal: {value: bookinfo}}}}";
    let traced = index("", "").client(&reviews_running(zipkin));
    let tracing = traced.tracing.as_ref().expect("enableTracing is on by default");
    assert_eq!(tracing.tracer, Tracer::Bootstrap);
    assert_eq!(tracing.random_sampling.value(), 25.0);
    assert_eq!(tracing.max_path_tag_length, 99);
    let names: Vec<&str> = tracing.custom_tags.iter().map(|(n, _)| &**n).collect();
    assert!(names.contains(&"team") && names.contains(&"istio.canonical_service"), "{names:?}");
    assert!(!tracing.spawn_upstream_span, "the legacy block sets no upstream span");

    // Off with enableTracing false, and for a proxy with no tracer (its own or the mesh's).
    assert!(index("enableTracing: false", "").client(&reviews_running(zipkin)).tracing.is_none());
    assert!(index("", "").client(&reviews_running("tracing: {sampling: 25}")).tracing.is_none());
    assert!(index("", "").client(&reviews()).tracing.is_none());
    // The mesh's defaultConfig is the ProxyConfig of a node that sends none; a node's own replaces it.
    let mesh_tracer = "defaultConfig: {tracing: {datadog: {address: '$(HOST_IP):8126'}, enableIstioTags: false}}";
    let from_mesh = index(mesh_tracer, "").client(&reviews());
    let tracing = from_mesh.tracing.as_ref().expect("the mesh's defaultConfig names a tracer");
    assert_eq!(tracing.random_sampling.value(), DEFAULT_SAMPLING, "no sampling: PILOT_TRACE_SAMPLING's default");
    assert!(tracing.custom_tags.is_empty(), "Istio's tags turned off");
    assert!(index(mesh_tracer, "").client(&reviews_running("concurrency: 2")).tracing.is_none());
}

#[test]
fn a_telemetry_tracer_takes_sampling_tags_and_path_length_from_the_proxy_config_it_does_not_set() {
    let tracer =
        telemetry("istio-system", "mesh", "2024-01-01T00:00:00Z", "  tracing: [{providers: [{name: zipkin}]}]");
    let own = "tracing: {sampling: 7, maxPathTagLength: 64, customTags: {team: {literal: {value: bookinfo}}}}";
    let applied = index(PROVIDERS, &tracer).client(&reviews_running(own));
    let tracing = applied.tracing.as_ref().unwrap();
    assert!(matches!(tracing.tracer, Tracer::Zipkin { .. }));
    assert_eq!(tracing.random_sampling.value(), 7.0);
    assert_eq!(tracing.max_path_tag_length, 64);
    assert!(tracing.custom_tags.iter().any(|(n, _)| &**n == "team"));
    // A sampling above 100 reads as Istio reads it: 1 %.
    let over = ProxyConfig {
        tracing: Some(TracingConfig {
            sampling: Some(crate::config::mesh::proxy_config::Percentage(150.0)),
            ..Default::default()
        }),
        ..Default::default()
    };
    let proxy = Proxy { proxy_config: Some(Arc::new(over)), ..reviews() };
    assert_eq!(index(PROVIDERS, &tracer).client(&proxy).tracing.as_ref().unwrap().random_sampling.value(), 1.0);
}
