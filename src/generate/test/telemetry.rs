//! The Telemetry API's loggers and tracers as Envoy gets them, provider by
//! provider, against the generated protos.

use envoy_types::pb::envoy::config::accesslog::v3::{AccessLog, access_log, access_log_filter};
use envoy_types::pb::envoy::config::core::v3::{grpc_service, http_uri};
use envoy_types::pb::envoy::config::trace::v3::{
    DatadogConfig, OpenTelemetryConfig, SkyWalkingConfig, ZipkinConfig, tracing::http::ConfigType, zipkin_config,
};
use envoy_types::pb::envoy::extensions::access_loggers::filters::cel::v3::ExpressionFilter;
use envoy_types::pb::envoy::extensions::access_loggers::grpc::v3::HttpGrpcAccessLogConfig;
use envoy_types::pb::envoy::extensions::access_loggers::open_telemetry::v3::OpenTelemetryAccessLogConfig;
use envoy_types::pb::envoy::extensions::request_id::uuid::v3::UuidRequestIdConfig;
use envoy_types::pb::envoy::r#type::tracing::v3::custom_tag;
use envoy_types::pb::google::protobuf::Any;

use super::*;
use crate::config::mesh::MeshSettings;

const PROVIDERS: &str = "extensionProviders:
- name: zipkin
  zipkin: {service: zipkin.istio-system.svc.cluster.local, port: 9411, path: /spans, timeout: 2s, enable64bitTraceId: true,
    traceContextOption: USE_B3_WITH_W3C_PROPAGATION, maxTagLength: 99, headers: [{name: x-team, value: shop}]}
- name: otel-grpc
  opentelemetry: {service: collector.istio-system.svc.cluster.local, port: 4317, grpc: {timeout: 3s}}
- name: otel-http
  opentelemetry: {service: collector.istio-system.svc.cluster.local, port: 4318, http: {path: /v1/traces, timeout: 1s}}
- name: datadog
  datadog: {service: collector.istio-system.svc.cluster.local, port: 8126}
- name: skywalking
  skywalking: {service: collector.istio-system.svc.cluster.local, port: 11800}
- name: als
  envoyHttpAls: {service: collector.istio-system.svc.cluster.local, port: 9000, additionalRequestHeadersToLog: [x-user]}
- name: otel-logs
  envoyOtelAls: {service: collector.istio-system.svc.cluster.local, port: 4317, logFormat: {text: '%RESPONSE_CODE%', labels: {path: '%REQ(:PATH)%'}}}
";

const COLLECTORS: &str = "
apiVersion: v1
kind: Service
metadata: {name: zipkin, namespace: istio-system}
spec: {ports: [{name: http, port: 9411}]}
---
apiVersion: v1
kind: Service
metadata: {name: collector, namespace: istio-system}
spec: {ports: [{name: grpc, port: 4317}, {name: http, port: 4318}]}
---
";

/// bookinfo with the collectors, one Telemetry in the root namespace of `spec`.
fn context_with(spec: &str) -> PushContext {
    let store = ConfigStore::new();
    store.apply(mesh_with(&format!(
        "{COLLECTORS}apiVersion: telemetry.istio.io/v1\nkind: Telemetry\nmetadata: {{name: mesh, namespace: istio-system}}\nspec:\n{spec}\n"
    )));
    let mesh = MeshSettings::parse("mesh.yaml", PROVIDERS).unwrap().mesh_config();
    PushContext::build_with(store.snapshot(), 1, Arc::new(ScopeInterner::default()), Arc::new(mesh))
}

/// The connection manager of productpage's outbound HTTP port 9080.
fn outbound_hcm(ctx: &PushContext) -> HttpConnectionManager {
    let listeners = lds::listeners(ctx, &productpage(ctx, "REDIRECT"));
    let l = listener(&listeners, "0.0.0.0_9080");
    hcm(l.filter_chains.last().unwrap().filters.last().unwrap())
}

fn tracer<T: Message + Default>(ctx: &PushContext, name: &str) -> T {
    let tracing = outbound_hcm(ctx).tracing.expect("traced");
    let provider = tracing.provider.expect("a tracer");
    assert_eq!(provider.name, name);
    let Some(ConfigType::TypedConfig(any)) = provider.config_type else { panic!("typed") };
    T::decode(any.value.as_slice()).unwrap()
}

fn typed_config<T: Message + Default>(log: &AccessLog) -> T {
    let Some(access_log::ConfigType::TypedConfig(Any { value, .. })) = &log.config_type else { panic!() };
    T::decode(value.as_slice()).unwrap()
}

fn tracing(provider: &str) -> String {
    format!("  tracing: [{{providers: [{{name: {provider}}}], randomSamplingPercentage: 12.5}}]")
}

#[test]
fn zipkin_reports_to_its_collector_service_as_istio_configures_it() {
    let ctx = context_with(&tracing("zipkin"));
    let hcm = outbound_hcm(&ctx);
    let t = hcm.tracing.clone().unwrap();
    assert_eq!(t.random_sampling.unwrap().value, 12.5);
    assert_eq!((t.client_sampling.unwrap().value, t.overall_sampling.unwrap().value), (100.0, 100.0));
    assert_eq!(t.max_path_tag_length.unwrap().value, 99);
    assert!(t.spawn_upstream_span.is_none(), "a sidecar does not spawn upstream spans");
    let z: ZipkinConfig = tracer(&ctx, "envoy.tracers.zipkin");
    assert_eq!(z.collector_endpoint_version, zipkin_config::CollectorEndpointVersion::HttpJson as i32);
    assert!(!z.shared_span_context.unwrap().value);
    assert!(!z.trace_id_128bit, "enable64bitTraceId");
    assert_eq!(z.trace_context_option, zipkin_config::TraceContextOption::UseB3WithW3cPropagation as i32);
    let service = z.collector_service.unwrap();
    let uri = service.http_uri.unwrap();
    assert_eq!(uri.uri, "http://zipkin.istio-system.svc.cluster.local/spans");
    assert_eq!(uri.timeout.unwrap().seconds, 2);
    let Some(http_uri::HttpUpstreamType::Cluster(cluster)) = uri.http_upstream_type else { panic!() };
    assert_eq!(cluster, "outbound|9411||zipkin.istio-system.svc.cluster.local");
    assert_eq!(service.request_headers_to_add[0].header.as_ref().unwrap().key, "x-team");
    // Istio's tags are on, sorted by name, the dry-run results from the RBAC filter's metadata.
    let tags: Vec<&str> = t.custom_tags.iter().map(|t| t.tag.as_str()).collect();
    assert!(tags.windows(2).all(|w| w[0] < w[1]), "{tags:?}");
    let dry_run = t.custom_tags.iter().find(|t| t.tag == "istio.authorization.dry_run.deny_policy.name").unwrap();
    let Some(custom_tag::Type::Metadata(m)) = &dry_run.r#type else { panic!("{dry_run:?}") };
    assert_eq!(m.metadata_key.as_ref().unwrap().key, "envoy.filters.http.rbac");
    assert!(hcm.request_id_extension.is_none(), "the request id decides sampling, Envoy's default");
}

#[test]
fn opentelemetry_exports_over_grpc_or_http_and_names_the_proxys_service() {
    let grpc: OpenTelemetryConfig = tracer(&context_with(&tracing("otel-grpc")), "envoy.tracers.opentelemetry");
    let service = grpc.grpc_service.unwrap();
    assert_eq!(service.timeout.unwrap().seconds, 3);
    let Some(grpc_service::TargetSpecifier::EnvoyGrpc(envoy)) = service.target_specifier else { panic!() };
    assert_eq!(envoy.cluster_name, "outbound|4317||collector.istio-system.svc.cluster.local");
    assert_eq!(envoy.authority, "collector.istio-system.svc.cluster.local");
    assert_eq!(grpc.service_name, "productpage.default", "the proxy's cluster, as Istio names the service");
    let http: OpenTelemetryConfig = tracer(&context_with(&tracing("otel-http")), "envoy.tracers.opentelemetry");
    let uri = http.http_service.unwrap().http_uri.unwrap();
    assert_eq!(uri.uri, "collector.istio-system.svc.cluster.local/v1/traces", "joined without a scheme, as Istio does");
}

#[test]
fn datadog_and_skywalking_report_to_their_collectors() {
    let dd: DatadogConfig = tracer(&context_with(&tracing("datadog")), "envoy.tracers.datadog");
    assert_eq!(dd.collector_cluster, "outbound|8126||collector.istio-system.svc.cluster.local");
    assert_eq!(dd.collector_hostname, "collector.istio-system.svc.cluster.local");
    let ctx = context_with(&tracing("skywalking"));
    let sw: SkyWalkingConfig = tracer(&ctx, "envoy.tracers.skywalking");
    assert!(sw.grpc_service.is_some());
    assert!(outbound_hcm(&ctx).tracing.unwrap().spawn_upstream_span.unwrap().value, "as Istio for SkyWalking");
}

#[test]
fn not_using_the_request_id_for_sampling_sets_the_uuid_extension() {
    let ctx = context_with("  tracing: [{providers: [{name: zipkin}], useRequestIdForTraceSampling: false}]");
    let extension = outbound_hcm(&ctx).request_id_extension.expect("the UUID extension");
    let uuid = UuidRequestIdConfig::decode(extension.typed_config.unwrap().value.as_slice()).unwrap();
    assert!(!uuid.use_request_id_for_trace_sampling.unwrap().value);
}

#[test]
fn grpc_loggers_and_the_cel_filter_are_on_every_connection_manager_and_listener() {
    let ctx = context_with(
        "  accessLogging:\n  - providers: [{name: als}, {name: otel-logs}]\n    filter: {expression: 'response.code >= 500'}",
    );
    let hcm = outbound_hcm(&ctx);
    let names: Vec<&str> = hcm.access_log.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["envoy.access_loggers.http_grpc", "envoy.access_loggers.open_telemetry"], "by provider name");
    let als: HttpGrpcAccessLogConfig = typed_config(&hcm.access_log[0]);
    let common = als.common_config.unwrap();
    assert_eq!((common.log_name.as_str(), common.filter_state_objects_to_log.len()), ("http_envoy_accesslog", 2));
    assert_eq!(als.additional_request_headers_to_log, ["x-user"]);
    let otel: OpenTelemetryAccessLogConfig = typed_config(&hcm.access_log[1]);
    assert!(otel.disable_builtin_labels);
    assert_eq!(otel.log_name, "otel_envoy_accesslog");
    assert_eq!(otel.attributes.unwrap().values[0].key, "path");
    let Some(access_log_filter::FilterSpecifier::ExtensionFilter(cel)) =
        hcm.access_log[0].filter.as_ref().and_then(|f| f.filter_specifier.clone())
    else {
        panic!("a CEL filter")
    };
    assert_eq!(cel.name, "envoy.access_loggers.extension_filters.cel");
    let Some(envoy_types::pb::envoy::config::accesslog::v3::extension_filter::ConfigType::TypedConfig(any)) =
        cel.config_type
    else {
        panic!()
    };
    assert_eq!(ExpressionFilter::decode(any.value.as_slice()).unwrap().expression, "response.code >= 500");
    // The listener logs unrouted connections: NR and the CEL filter, both.
    let listeners = lds::listeners(&ctx, &productpage(&ctx, "REDIRECT"));
    let outbound = listener(&listeners, "virtualOutbound");
    let Some(access_log_filter::FilterSpecifier::AndFilter(and)) =
        outbound.access_log[0].filter.as_ref().and_then(|f| f.filter_specifier.clone())
    else {
        panic!("an and filter")
    };
    assert_eq!(and.filters.len(), 2);
}

#[test]
fn a_mesh_without_telemetry_generates_no_tracing_and_no_logger() {
    let store = ConfigStore::new();
    store.apply(mesh());
    let ctx = PushContext::build(store.snapshot(), 1, Arc::new(ScopeInterner::default()));
    let hcm = outbound_hcm(&ctx);
    assert!(hcm.tracing.is_none() && hcm.access_log.is_empty() && hcm.request_id_extension.is_none());
}
