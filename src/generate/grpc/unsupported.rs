//! What a proxyless gRPC client or server cannot apply, cut from what it is
//! sent and reported per object.
//!
//! gRPC implements a subset of Envoy's routing, cluster and RBAC features
//! (gRFCs A28, A31, A32, A39, A41, A42, A44, A48, A50). Where istiod sends
//! Envoy's full translation and leaves gRPC to ignore or refuse what it
//! does not know, meshpush cuts it from the gRPC resources ([`for_grpc`])
//! and lists it on the object ([`notes`], shown on `/debug/configz` as
//! `proxylessGrpcNotApplied`), each with its field path and what gRPC
//! proxies do instead.

use envoy_types::pb::envoy::config::route::v3::{
    Route,
    route::Action,
    route_action::{ClusterSpecifier, MaxStreamDuration, hash_policy::PolicySpecifier},
};

use crate::config::ConfigObject;
use crate::config::istio::{
    AuthorizationPolicy, DRY_RUN_ANNOTATION, DestinationRule, HttpRoute, MESH_GATEWAY, TrafficPolicy, VirtualService,
};
use crate::generate::proto;

/// `route` as a gRPC client applies it: the timeout as the stream's
/// maximum duration (gRPC reads no other), and without what gRPC does not
/// have: header operations, path and authority rewrites, mirrors, per-route
/// filter configs other than fault injection (CORS), and hash policies
/// other than a header's or the channel's.
pub fn for_grpc(route: &mut Route) {
    route.request_headers_to_add.clear();
    route.request_headers_to_remove.clear();
    route.response_headers_to_add.clear();
    route.response_headers_to_remove.clear();
    route.typed_per_filter_config.retain(|name, _| name == proto::FAULT);
    let Some(Action::Route(action)) = route.action.as_mut() else { return };
    action.max_stream_duration = Some(MaxStreamDuration {
        max_stream_duration: Some(action.timeout.unwrap_or_else(|| proto::seconds(0))),
        ..Default::default()
    });
    action.prefix_rewrite.clear();
    action.regex_rewrite = None;
    action.host_rewrite_specifier = None;
    action.request_mirror_policies.clear();
    action.hash_policy.retain(|h| {
        matches!(h.policy_specifier, Some(PolicySpecifier::Header(_)) | Some(PolicySpecifier::FilterState(_)))
    });
    if let Some(ClusterSpecifier::WeightedClusters(weighted)) = action.cluster_specifier.as_mut() {
        for cluster in &mut weighted.clusters {
            cluster.request_headers_to_add.clear();
            cluster.request_headers_to_remove.clear();
            cluster.response_headers_to_add.clear();
            cluster.response_headers_to_remove.clear();
            cluster.host_rewrite_specifier = None;
        }
    }
}

/// What proxyless gRPC proxies do not apply of `object`, each as
/// `FIELD_PATH: what happens`; empty for kinds gRPC proxies do not read.
pub fn notes(object: &ConfigObject) -> Vec<String> {
    match object {
        ConfigObject::VirtualService(vs) => virtual_service(vs),
        ConfigObject::DestinationRule(dr) => destination_rule(dr),
        ConfigObject::AuthorizationPolicy(policy) => authorization_policy(policy),
        _ => Vec::new(),
    }
}

fn virtual_service(vs: &VirtualService) -> Vec<String> {
    let spec = &vs.spec;
    // Only mesh rules route gRPC clients.
    if !spec.gateways.is_empty() && !spec.gateways.iter().any(|g| g == MESH_GATEWAY) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (i, route) in spec.http.iter().enumerate() {
        http_route(&mut out, &format!("spec.http[{i}]"), route);
    }
    if !spec.tcp.is_empty() {
        out.push("spec.tcp: gRPC clients route by HTTP routes only; not applied".to_string());
    }
    if !spec.tls.is_empty() {
        out.push("spec.tls: gRPC clients route by HTTP routes only; not applied".to_string());
    }
    out
}

fn http_route(out: &mut Vec<String>, path: &str, route: &HttpRoute) {
    let mut note = |field: &str, what: &str| out.push(format!("{path}.{field}: {what}"));
    if route.mirror.is_some() || !route.mirrors.is_empty() {
        note(if route.mirrors.is_empty() { "mirror" } else { "mirrors" }, "gRPC does not mirror; not applied");
    }
    if route.cors_policy.is_some() {
        note("corsPolicy", "gRPC has no CORS filter; not applied");
    }
    if route.headers.is_some() {
        note("headers", "gRPC does not rewrite headers; not applied");
    }
    for (j, destination) in route.route.iter().enumerate() {
        if destination.headers.is_some() {
            note(&format!("route[{j}].headers"), "gRPC does not rewrite headers; not applied");
        }
    }
    if route.rewrite.is_some() {
        note("rewrite", "gRPC rewrites neither path nor authority; not applied");
    }
    if route.redirect.is_some() {
        note("redirect", "gRPC cannot redirect: its clients fail matching calls UNAVAILABLE");
    }
    if route.direct_response.is_some() {
        note("directResponse", "gRPC cannot answer for a route: its clients fail matching calls UNAVAILABLE");
    }
    for (k, m) in route.matches.iter().enumerate() {
        if !m.query_params.is_empty() {
            note(&format!("match[{k}].queryParams"), "gRPC has no query parameters: its clients skip this match");
        }
    }
}

fn destination_rule(dr: &DestinationRule) -> Vec<String> {
    let mut out = Vec::new();
    let spec = &dr.spec;
    if let Some(policy) = &spec.traffic_policy {
        traffic_policy(&mut out, "spec.trafficPolicy", policy);
    }
    for (i, subset) in spec.subsets.iter().enumerate() {
        if let Some(policy) = &subset.traffic_policy {
            traffic_policy(&mut out, &format!("spec.subsets[{i}].trafficPolicy"), policy);
        }
    }
    out
}

fn traffic_policy(out: &mut Vec<String>, path: &str, policy: &TrafficPolicy) {
    let mut one = |path: &str,
                   lb: Option<&crate::config::istio::LoadBalancerSettings>,
                   pool: Option<&crate::config::istio::ConnectionPoolSettings>,
                   outlier: bool,
                   tls: Option<&crate::config::istio::ClientTls>| {
        if let Some(lb) = lb {
            match lb.simple.as_deref() {
                Some("RANDOM") | Some("PASSTHROUGH") => out.push(format!(
                    "{path}.loadBalancer.simple: gRPC balances by round robin, least request or ring hash; round robin used"
                )),
                Some("LEAST_REQUEST") => out.push(format!(
                    "{path}.loadBalancer.simple: gRPC libraries without least request (C++, Python) balance by round robin"
                )),
                _ => {}
            }
            if lb.warmup.is_some() || lb.warmup_duration_secs.is_some() {
                out.push(format!("{path}.loadBalancer.warmup: gRPC has no slow start; not applied"));
            }
            if let Some(hash) = &lb.consistent_hash {
                if hash.maglev.is_some() {
                    out.push(format!("{path}.loadBalancer.consistentHash.maglev: gRPC has no Maglev; ring hash used"));
                }
                if hash.http_cookie.is_some()
                    || hash.use_source_ip == Some(true)
                    || hash.http_query_parameter_name.is_some()
                {
                    out.push(format!(
                        "{path}.loadBalancer.consistentHash: gRPC hashes by a header only; each call hashes at random"
                    ));
                }
            }
        }
        if let Some(pool) = pool {
            let http = pool.http.as_ref();
            let other_http = http.is_some_and(|h| {
                h.http1_max_pending_requests.is_some()
                    || h.max_requests_per_connection.is_some()
                    || h.max_retries.is_some()
                    || h.idle_timeout.is_some()
                    || h.h2_upgrade_policy.is_some()
                    || h.use_client_protocol.is_some()
                    || h.max_concurrent_streams.is_some()
                    || h.http2_keep_alive.is_some()
            });
            if pool.tcp.is_some() || other_http {
                out.push(format!(
                    "{path}.connectionPool: gRPC limits concurrent requests only (http.http2MaxRequests); the rest is not applied"
                ));
            }
        }
        if outlier {
            out.push(format!(
                "{path}.outlierDetection: gRPC ejects by success rate or failure percentage only (gRFC A50), which Istio's API does not set; not applied"
            ));
        }
        if let Some(mode) = tls.and_then(|t| t.mode.as_deref())
            && (mode.eq_ignore_ascii_case("SIMPLE") || mode.eq_ignore_ascii_case("MUTUAL"))
        {
            out.push(format!("{path}.tls.mode: gRPC clients originate ISTIO_MUTUAL only; plain text used"));
        }
    };
    one(
        path,
        policy.load_balancer.as_ref(),
        policy.connection_pool.as_ref(),
        policy.outlier_detection.is_some(),
        policy.tls.as_ref(),
    );
    for (i, port) in policy.port_level_settings.iter().enumerate() {
        one(
            &format!("{path}.portLevelSettings[{i}]"),
            port.load_balancer.as_ref(),
            port.connection_pool.as_ref(),
            port.outlier_detection.is_some(),
            port.tls.as_ref(),
        );
    }
    if policy.retry_budget.is_some() {
        out.push(format!("{path}.retryBudget: gRPC has no retry budget; not applied"));
    }
}

fn authorization_policy(policy: &AuthorizationPolicy) -> Vec<String> {
    let spec = &policy.spec;
    let mut out = Vec::new();
    match spec.action.as_deref() {
        Some("AUDIT") => out.push("spec.action: gRPC servers have no AUDIT action; not applied".to_string()),
        Some("CUSTOM") => out.push("spec.action: gRPC servers have no CUSTOM action; not applied".to_string()),
        _ => {}
    }
    if policy.metadata.annotations.get(DRY_RUN_ANNOTATION).is_some_and(|v| v == "true") {
        out.push(format!(
            "metadata.annotations[{DRY_RUN_ANNOTATION}]: gRPC servers have no dry run; the policy is not applied to them"
        ));
    }
    let deny = spec.action.as_deref() == Some("DENY");
    let outcome = if deny { "the rule denies without it" } else { "the rule allows nothing" };
    for (i, rule) in spec.rules.iter().enumerate() {
        for (j, from) in rule.from.iter().enumerate() {
            let Some(source) = &from.source else { continue };
            if !source.request_principals.is_empty() || !source.not_request_principals.is_empty() {
                out.push(format!(
                    "spec.rules[{i}].from[{j}].source.requestPrincipals: gRPC servers verify no JWT; {outcome}"
                ));
            }
        }
        for (j, to) in rule.to.iter().enumerate() {
            let Some(operation) = &to.operation else { continue };
            let templated = |v: &String| {
                v.contains(crate::config::istio::ONE_SEGMENT) || v.contains(crate::config::istio::ANY_SEGMENTS)
            };
            if operation.paths.iter().chain(&operation.not_paths).any(templated) {
                out.push(format!("spec.rules[{i}].to[{j}].operation.paths: gRPC has no path templates; {outcome}"));
            }
        }
        for (k, condition) in rule.when.iter().enumerate() {
            let key = condition.key.as_str();
            let why = if key.starts_with("request.auth.") {
                "gRPC servers verify no JWT"
            } else if key.starts_with("experimental.") {
                "gRPC servers have no filter metadata"
            } else if key == "connection.sni" {
                "gRPC servers see no SNI"
            } else {
                continue;
            };
            out.push(format!("spec.rules[{i}].when[{k}] ({key}): {why}; {outcome}"));
        }
    }
    out
}
