//! What a bootstrap takes from the proxy's ProxyConfig to trace and to
//! count: the tracer Envoy starts with (`tracing.zipkin` or
//! `tracing.datadog`, with the static cluster that reaches its collector)
//! and the stats matcher (`proxyStatsMatcher`), as Istio's bootstrap
//! template renders them.
//!
//! Without `proxyStatsMatcher` meshpush keeps every stat Envoy makes:
//! Istio's build of Envoy reports requests through its own `istio.stats`
//! filter and so keeps only a short list, while upstream Envoy's per-cluster
//! stats are what an operator of meshpush reads instead.

use serde_json::{Value, json};

use crate::config::mesh::proxy_config::{StatsMatcher, TracingConfig};

/// The Zipkin collector's static cluster (Istio's name).
pub const ZIPKIN_CLUSTER: &str = "zipkin";
/// The Datadog agent's static cluster (Istio's name).
pub const DATADOG_CLUSTER: &str = "datadog_agent";

/// Stat prefixes Istio's bootstrap always keeps.
const REQUIRED_PREFIXES: [&str; 5] = ["cluster_manager", "listener_manager", "server", "cluster.xds-grpc", "wasm"];
/// Stat suffixes Istio's bootstrap always keeps (the authorization counters).
const REQUIRED_SUFFIXES: [&str; 4] = ["rbac.allowed", "rbac.denied", "shadow_allowed", "shadow_denied"];
/// Stat patterns Istio's bootstrap always keeps (per-route stats).
const REQUIRED_REGEXPS: [&str; 1] = [r"vhost\..*\.route\..*"];

/// The static cluster and the bootstrap's `tracing` block of the tracer
/// `tracing` names, if any; `service` is the node's cluster (Datadog's
/// service name).
pub fn tracer(tracing: &TracingConfig, service: &str) -> Option<(Value, Value)> {
    if let Some(zipkin) = &tracing.zipkin {
        let cluster = collector_cluster(ZIPKIN_CLUSTER, &zipkin.address)?;
        let config = json!({
            "name": "envoy.tracers.zipkin",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.config.trace.v3.ZipkinConfig",
                "collector_cluster": ZIPKIN_CLUSTER,
                "collector_endpoint": "/api/v2/spans",
                "collector_endpoint_version": "HTTP_JSON",
                "trace_id_128bit": true,
                "shared_span_context": false,
            },
        });
        return Some((cluster, json!({ "http": config })));
    }
    if let Some(datadog) = &tracing.datadog {
        let cluster = collector_cluster(DATADOG_CLUSTER, &datadog.address)?;
        let config = json!({
            "name": "envoy.tracers.datadog",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.config.trace.v3.DatadogConfig",
                "collector_cluster": DATADOG_CLUSTER,
                "service_name": service,
            },
        });
        return Some((cluster, json!({ "http": config })));
    }
    None
}

/// A collector's cluster at `HOST:PORT`, resolved as Istio's bootstrap
/// resolves it (every 30 s, IPv4, the record's TTL respected).
fn collector_cluster(name: &str, address: &str) -> Option<Value> {
    let (host, port) = address.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    Some(json!({
        "name": name,
        "alt_stat_name": format!("{name};"),
        "type": "STRICT_DNS",
        "respect_dns_ttl": true,
        "dns_lookup_family": "V4_ONLY",
        "dns_refresh_rate": "30s",
        "connect_timeout": "1s",
        "lb_policy": "ROUND_ROBIN",
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [{ "lb_endpoints": [{ "endpoint": { "address": {
                "socket_address": { "address": host.trim_start_matches('[').trim_end_matches(']'), "port_value": port },
            } } }] }],
        },
    }))
}

/// The bootstrap's `stats_config` keeping what `matcher` names and what
/// Istio always keeps, in Istio's order; `{pod_ip}` in a pattern stands
/// for each of `ips`.
pub fn stats_config(matcher: &StatsMatcher, ips: &[&str]) -> Value {
    let expand = |user: &[String], required: &[&str]| -> Vec<String> {
        let all = user.iter().map(String::as_str).chain(required.iter().copied());
        all.flat_map(|p| {
            if p.contains("{pod_ip}") {
                ips.iter().map(|ip| p.replace("{pod_ip}", ip)).collect()
            } else {
                vec![p.to_string()]
            }
        })
        .collect()
    };
    let mut patterns = vec![json!({ "prefix": "reporter=" })];
    patterns
        .extend(expand(&matcher.inclusion_prefixes, &REQUIRED_PREFIXES).into_iter().map(|p| json!({ "prefix": p })));
    patterns
        .extend(expand(&matcher.inclusion_suffixes, &REQUIRED_SUFFIXES).into_iter().map(|s| json!({ "suffix": s })));
    patterns.extend(
        expand(&matcher.inclusion_regexps, &REQUIRED_REGEXPS)
            .into_iter()
            .map(|r| json!({ "safe_regex": { "regex": r } })),
    );
    patterns.push(json!({ "prefix": "component" }));
    patterns.push(json!({ "prefix": "istio" }));
    json!({ "stats_matcher": { "inclusion_list": { "patterns": patterns } } })
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::config::mesh::proxy_config::TracerAddress;

    #[test]
    fn a_zipkin_tracer_gets_istios_cluster_and_config_and_datadog_the_service_name() {
        let zipkin = TracingConfig {
            zipkin: Some(TracerAddress { address: "zipkin.istio-system:9411".into() }),
            ..Default::default()
        };
        let (cluster, tracing) = tracer(&zipkin, "reviews.default").unwrap();
        assert_eq!(cluster["name"], "zipkin");
        assert_eq!(cluster["type"], "STRICT_DNS");
        let address = &cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"];
        assert_eq!(address["socket_address"], json!({"address": "zipkin.istio-system", "port_value": 9411}));
        assert_eq!(tracing["http"]["name"], "envoy.tracers.zipkin");
        assert_eq!(tracing["http"]["typed_config"]["collector_endpoint"], "/api/v2/spans");
        assert_eq!(tracing["http"]["typed_config"]["trace_id_128bit"], true);

        let datadog =
            TracingConfig { datadog: Some(TracerAddress { address: "10.0.0.9:8126".into() }), ..Default::default() };
        let (cluster, tracing) = tracer(&datadog, "reviews.default").unwrap();
        assert_eq!(cluster["name"], "datadog_agent");
        assert_eq!(tracing["http"]["typed_config"]["service_name"], "reviews.default");
        assert!(tracer(&TracingConfig::default(), "x").is_none(), "no tracer named: none");
    }

    #[test]
    fn the_stats_matcher_keeps_the_users_patterns_among_istios_in_istios_order() {
        let matcher = StatsMatcher {
            inclusion_prefixes: vec!["http.{pod_ip}_".into()],
            inclusion_suffixes: vec!["upstream_rq_timeout".into()],
            inclusion_regexps: vec![r".*outlier_detection.*".into()],
        };
        let config = stats_config(&matcher, &["10.0.0.5"]);
        let patterns = config["stats_matcher"]["inclusion_list"]["patterns"].as_array().unwrap();
        let shown: Vec<String> = patterns
            .iter()
            .map(|p| {
                let (kind, value) = p.as_object().unwrap().iter().next().unwrap();
                let value = if kind == "safe_regex" { value["regex"].clone() } else { value.clone() };
                format!("{kind}:{}", value.as_str().unwrap())
            })
            .collect();
        assert_eq!(
            shown,
            [
                "prefix:reporter=",
                "prefix:http.10.0.0.5_",
                "prefix:cluster_manager",
                "prefix:listener_manager",
                "prefix:server",
                "prefix:cluster.xds-grpc",
                "prefix:wasm",
                "suffix:upstream_rq_timeout",
                "suffix:rbac.allowed",
                "suffix:rbac.denied",
                "suffix:shadow_allowed",
                "suffix:shadow_denied",
                "safe_regex:.*outlier_detection.*",
                r"safe_regex:vhost\..*\.route\..*",
                "prefix:component",
                "prefix:istio",
            ]
        );
    }
}
