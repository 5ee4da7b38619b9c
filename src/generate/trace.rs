//! Tracing as Envoy takes it: how a side of a proxy traces
//! ([`AppliedTracing`]) as the `tracing` block of its HTTP connection
//! managers, the tracer in it reporting to its collector's outbound
//! cluster, as Istio writes it (`pilot/pkg/networking/core/tracing.go`).
//!
//! Sampling: every client-forced and overall request (100 %), and the
//! configured share of the rest (`random_sampling`). Tags: the user's,
//! then Istio's own (canonical service and revision, namespace, mesh and
//! cluster ids as literals; the dry-run authorization results from the
//! RBAC filter's request metadata), sorted by name.
//!
//! Invariant: a side without tracing gives no block and no request id
//! extension, so a mesh that does not trace generates what it did before.

use envoy_types::pb::envoy::config::core::v3::{
    HeaderValue, HeaderValueOption, HttpService, HttpUri, header_value_option::HeaderAppendAction, http_uri,
};
use envoy_types::pb::envoy::config::trace::v3::{
    DatadogConfig, OpenTelemetryConfig, SkyWalkingConfig, ZipkinConfig, tracing as trace, zipkin_config,
};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    RequestIdExtension, http_connection_manager::Tracing,
};
use envoy_types::pb::envoy::extensions::request_id::uuid::v3::UuidRequestIdConfig;
use envoy_types::pb::envoy::r#type::metadata::v3::{
    MetadataKey, MetadataKind, metadata_key::PathSegment, metadata_key::path_segment::Segment, metadata_kind,
};
use envoy_types::pb::envoy::r#type::tracing::v3::{CustomTag, custom_tag};
use envoy_types::pb::envoy::r#type::v3::Percent;
use envoy_types::pb::google::protobuf::Any;

use super::access_log::{collector_cluster, envoy_grpc};
use super::proto;
use crate::push::index::telemetry::{AppliedTracing, TagValue, Tracer};

/// Envoy's tracers, by the names Istio gives them.
const ZIPKIN: &str = "envoy.tracers.zipkin";
const OPENTELEMETRY: &str = "envoy.tracers.opentelemetry";
const DATADOG: &str = "envoy.tracers.datadog";
const SKYWALKING: &str = "envoy.tracers.skywalking";

/// The `tracing` block of a connection manager of a side that traces.
pub fn hcm_tracing(applied: &AppliedTracing) -> Tracing {
    let percent = |value: f64| Some(Percent { value });
    let max_tag_length = applied.max_path_tag_length;
    let skywalking = matches!(applied.tracer, Tracer::SkyWalking { .. });
    Tracing {
        client_sampling: percent(100.0),
        random_sampling: percent(applied.random_sampling.value()),
        overall_sampling: percent(100.0),
        max_path_tag_length: (max_tag_length > 0).then(|| proto::u32_value(max_tag_length)),
        custom_tags: applied.custom_tags.iter().map(|(name, value)| custom_tag(name, value)).collect(),
        // The legacy path names none: Envoy traces with its bootstrap's tracer.
        provider: tracer_config(applied).map(|(name, config)| trace::Http {
            name: name.to_string(),
            config_type: Some(trace::http::ConfigType::TypedConfig(config)),
        }),
        spawn_upstream_span: (applied.spawn_upstream_span || skywalking).then(|| proto::bool_value(true)),
        no_context_propagation: applied.disable_context_propagation,
        ..Default::default()
    }
}

/// The request id extension a side that traces needs: only when the
/// request id must not decide sampling (Envoy's default is that it does).
pub fn request_id_extension(applied: &AppliedTracing) -> Option<RequestIdExtension> {
    (!applied.use_request_id_for_trace_sampling).then(|| RequestIdExtension {
        typed_config: Some(proto::any(&UuidRequestIdConfig {
            use_request_id_for_trace_sampling: Some(proto::bool_value(false)),
            ..Default::default()
        })),
    })
}

/// The provider's extension name and config; none for the bootstrap's tracer.
fn tracer_config(applied: &AppliedTracing) -> Option<(&'static str, Any)> {
    let config = match &applied.tracer {
        Tracer::Zipkin { collector, path, timeout_ms, trace_id_128bit, w3c, headers, .. } => {
            let option = if *w3c {
                zipkin_config::TraceContextOption::UseB3WithW3cPropagation
            } else {
                zipkin_config::TraceContextOption::UseB3
            };
            (
                ZIPKIN,
                proto::any(&ZipkinConfig {
                    collector_endpoint_version: zipkin_config::CollectorEndpointVersion::HttpJson as i32,
                    trace_id_128bit: *trace_id_128bit,
                    shared_span_context: Some(proto::bool_value(false)),
                    trace_context_option: option as i32,
                    collector_service: Some(http_service(
                        format!("http://{}{}", collector.host, path),
                        collector_cluster(collector),
                        Some(*timeout_ms),
                        headers,
                    )),
                    ..Default::default()
                }),
            )
        }
        Tracer::OpenTelemetry { collector, http_path, timeout_ms, headers, .. } => {
            let mut config =
                OpenTelemetryConfig { service_name: applied.service_name.to_string(), ..Default::default() };
            match http_path {
                Some(path) => {
                    // Istio joins host and path without a scheme; Envoy takes it so.
                    let uri = format!("{}/{}", collector.host, path.trim_start_matches('/'));
                    config.http_service = Some(http_service(uri, collector_cluster(collector), *timeout_ms, headers));
                }
                None => {
                    let mut grpc = envoy_grpc(collector);
                    grpc.timeout = timeout_ms.map(proto::millis);
                    grpc.initial_metadata = headers
                        .iter()
                        .map(|(k, v)| HeaderValue { key: k.to_string(), value: v.to_string(), ..Default::default() })
                        .collect();
                    config.grpc_service = Some(grpc);
                }
            }
            (OPENTELEMETRY, proto::any(&config))
        }
        Tracer::Datadog { collector, .. } => (
            DATADOG,
            proto::any(&DatadogConfig {
                collector_cluster: collector_cluster(collector),
                collector_hostname: collector.host.to_string(),
                service_name: applied.service_name.to_string(),
                ..Default::default()
            }),
        ),
        Tracer::SkyWalking { collector } => (
            SKYWALKING,
            proto::any(&SkyWalkingConfig { grpc_service: Some(envoy_grpc(collector)), ..Default::default() }),
        ),
        Tracer::Bootstrap => return None,
    };
    Some(config)
}

/// An HTTP service at `uri` on `cluster`, sending `headers` (each replacing
/// one the request has).
fn http_service(
    uri: String,
    cluster: String,
    timeout_ms: Option<u64>,
    headers: &[(std::sync::Arc<str>, std::sync::Arc<str>)],
) -> HttpService {
    HttpService {
        http_uri: Some(HttpUri {
            uri,
            timeout: timeout_ms.map(proto::millis),
            http_upstream_type: Some(http_uri::HttpUpstreamType::Cluster(cluster)),
        }),
        request_headers_to_add: headers
            .iter()
            .map(|(k, v)| HeaderValueOption {
                header: Some(HeaderValue { key: k.to_string(), value: v.to_string(), ..Default::default() }),
                append_action: HeaderAppendAction::OverwriteIfExistsOrAdd as i32,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn custom_tag(name: &str, value: &TagValue) -> CustomTag {
    let r#type = match value {
        TagValue::Literal(value) => custom_tag::Type::Literal(custom_tag::Literal { value: value.to_string() }),
        TagValue::Environment(name, default) => custom_tag::Type::Environment(custom_tag::Environment {
            name: name.to_string(),
            default_value: default.as_deref().unwrap_or_default().to_string(),
        }),
        TagValue::Header(name, default) => custom_tag::Type::RequestHeader(custom_tag::Header {
            name: name.to_string(),
            default_value: default.as_deref().unwrap_or_default().to_string(),
        }),
        TagValue::Formatter(format) => custom_tag::Type::Value(format.to_string()),
        TagValue::RequestMetadata(filter, key) => custom_tag::Type::Metadata(custom_tag::Metadata {
            kind: Some(MetadataKind { kind: Some(metadata_kind::Kind::Request(metadata_kind::Request {})) }),
            metadata_key: Some(MetadataKey {
                key: filter.to_string(),
                path: vec![PathSegment { segment: Some(Segment::Key(key.to_string())) }],
            }),
            default_value: String::new(),
        }),
    };
    CustomTag { tag: name.to_string(), r#type: Some(r#type) }
}
