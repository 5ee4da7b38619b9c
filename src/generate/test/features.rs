//! Every traffic field meshpush translates, found in the generated protos:
//! the `features` VirtualService and DestinationRule of
//! `tests/data/mesh-cases.yaml` set each of them once.

use envoy_types::pb::envoy::config::core::v3::{data_source::Specifier, header_value_option::HeaderAppendAction};
use envoy_types::pb::envoy::config::route::v3::{
    query_parameter_matcher::QueryParameterMatchSpecifier, redirect_action::SchemeRewriteSpecifier,
};
use envoy_types::pb::envoy::extensions::filters::common::fault::v3::fault_delay::FaultDelaySecifier;
use envoy_types::pb::envoy::extensions::filters::http::cors::v3::CorsPolicy;
use envoy_types::pb::envoy::extensions::filters::http::fault::v3::{HttpFault, fault_abort::ErrorType};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::HttpFilter;

use super::*;
use crate::generate::proto;

const FEATURES: &str = "features.default.svc.cluster.local";

fn features_routes(ctx: &PushContext) -> Vec<Route> {
    let scope = productpage(ctx, "REDIRECT");
    let configs = rds::route_configs(ctx, &scope);
    vhost(config(&configs, "9095"), &format!("{FEATURES}:9095")).routes.clone()
}

fn named<'r>(routes: &'r [Route], name: &str) -> &'r Route {
    routes.iter().find(|r| r.name == name).unwrap_or_else(|| panic!("no route {name}"))
}

fn decode<T: Message + Default>(route: &Route, filter: &str) -> T {
    let any = route.typed_per_filter_config.get(filter).unwrap_or_else(|| panic!("{}: no {filter} config", route.name));
    T::decode(any.value.as_slice()).unwrap()
}

#[test]
fn every_http_match_field_is_a_matcher() {
    let ctx = context(mesh());
    let routes = features_routes(&ctx);
    let route = named(&routes, "matched.every");
    assert_eq!(route.stat_prefix, "matched_route");
    let m = route.r#match.as_ref().unwrap();
    assert_eq!(m.path_specifier, Some(PathSpecifier::Prefix("/Match".into())));
    assert_eq!(m.case_sensitive.as_ref().map(|b| b.value), Some(false), "ignoreUriCase");
    let names: Vec<&str> = m.headers.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(names, ["x-debug", "x-present", "x-user", ":method", ":authority", ":scheme"]);
    assert!(m.headers[0].invert_match, "withoutHeaders inverts");
    assert_eq!(m.headers[1].header_match_specifier, Some(HeaderMatchSpecifier::PresentMatch(true)));
    let params: Vec<(&str, bool)> = m
        .query_parameters
        .iter()
        .map(|q| {
            (
                q.name.as_str(),
                matches!(q.query_parameter_match_specifier, Some(QueryParameterMatchSpecifier::PresentMatch(true))),
            )
        })
        .collect();
    assert_eq!(params, [("flag", true), ("id", false)]);
}

#[test]
fn direct_responses_redirects_and_cors_are_translated() {
    let ctx = context(mesh());
    let routes = features_routes(&ctx);
    let Some(Action::DirectResponse(health)) = &named(&routes, "answered").action else { panic!("direct response") };
    assert_eq!(health.status, 299);
    assert_eq!(
        health.body.as_ref().and_then(|b| b.specifier.clone()),
        Some(Specifier::InlineString("features are healthy".into()))
    );
    let Some(Action::DirectResponse(bytes)) = &named(&routes, "bytes").action else { panic!("direct response") };
    assert_eq!(bytes.body.as_ref().and_then(|b| b.specifier.clone()), Some(Specifier::InlineBytes(b"hello".to_vec())));

    let cors: CorsPolicy = decode(named(&routes, "answered"), proto::CORS);
    assert_eq!(cors.allow_methods, "GET");
    assert_eq!(cors.expose_headers, "x-version");
    assert_eq!(cors.max_age, "600");
    assert_eq!(cors.allow_credentials.map(|b| b.value), Some(true));
    assert_eq!(cors.forward_not_matching_preflights.map(|b| b.value), Some(false), "unmatchedPreflights: IGNORE");
    assert!(matches!(cors.allow_origin_string_match[0].match_pattern, Some(MatchPattern::SafeRegex(_))));

    let Some(Action::Redirect(moved)) = &named(&routes, "moved").action else { panic!("redirect") };
    assert_eq!(moved.path_rewrite_specifier, Some(PathRewriteSpecifier::PrefixRewrite("/new".into())));
    assert_eq!(moved.scheme_rewrite_specifier, Some(SchemeRewriteSpecifier::SchemeRedirect("https".into())));
    assert_eq!(moved.port_redirect, 8443);
    assert_eq!(moved.response_code, RedirectResponseCode::PermanentRedirect as i32);
    let Some(Action::Redirect(same)) = &named(&routes, "same-port").action else { panic!("redirect") };
    assert_eq!((same.host_redirect.as_str(), same.port_redirect), ("other.example", 9095), "FROM_REQUEST_PORT");
}

#[test]
fn faults_retries_rewrites_and_mirrors_are_translated() {
    let ctx = context(mesh());
    let routes = features_routes(&ctx);
    let route = named(&routes, "rewritten");
    let fault: HttpFault = decode(route, proto::FAULT);
    let delay = fault.delay.unwrap();
    assert!(matches!(delay.fault_delay_secifier, Some(FaultDelaySecifier::FixedDelay(d)) if d.seconds == 2));
    assert_eq!(delay.percentage.unwrap().numerator, 125_000, "12.5% per million");
    let abort = fault.abort.unwrap();
    assert_eq!(abort.error_type, Some(ErrorType::GrpcStatus(14)));
    assert_eq!(abort.percentage.unwrap().numerator, 5_000);

    let action = route_action(route);
    let rewrite = action.regex_rewrite.as_ref().unwrap();
    assert_eq!(
        (rewrite.pattern.as_ref().unwrap().regex.as_str(), rewrite.substitution.as_str()),
        ("^/v1/(.*)$", "/v2/\\1")
    );
    let retry = action.retry_policy.as_ref().unwrap();
    assert_eq!(retry.num_retries.unwrap().value, 3);
    assert_eq!(retry.retriable_status_codes, [503]);
    assert!(retry.retry_host_predicate.is_empty(), "retryIgnorePreviousHosts: false");
    assert_eq!(retry.retry_priority.as_ref().unwrap().name, proto::PREVIOUS_PRIORITIES);
    assert_eq!(retry.retry_back_off.as_ref().unwrap().base_interval.unwrap().nanos, 100_000_000);
    let mirrors: Vec<(&str, u32)> = action
        .request_mirror_policies
        .iter()
        .map(|m| (m.cluster.as_str(), m.runtime_fraction.as_ref().unwrap().default_value.unwrap().numerator))
        .collect();
    assert_eq!(
        mirrors,
        [
            (format!("outbound|9080||{CATALOG}").as_str(), 250_000),
            (format!("outbound|9080||{INVENTORY}").as_str(), 100)
        ]
    );
    // The subset's query-parameter hash goes on the route.
    assert!(matches!(
        action.hash_policy[0].policy_specifier,
        Some(PolicySpecifier::QueryParameter(ref q)) if q.name == "user"
    ));
}

#[test]
fn header_operations_go_on_the_route_and_the_weighted_clusters() {
    let ctx = context(mesh());
    let routes = features_routes(&ctx);
    let route = named(&routes, "split");
    let added: Vec<(&str, i32)> = route
        .request_headers_to_add
        .iter()
        .map(|h| (h.header.as_ref().unwrap().key.as_str(), h.append_action))
        .collect();
    let (set, add) =
        (HeaderAppendAction::OverwriteIfExistsOrAdd as i32, HeaderAppendAction::AppendIfExistsOrAdd as i32);
    assert_eq!(added, [("x-route", set), ("x-trace", add)]);
    assert_eq!(route.request_headers_to_remove, ["x-drop"]);
    assert_eq!(route.response_headers_to_add[0].header.as_ref().unwrap().key, "x-served");
    assert_eq!(route.response_headers_to_remove, ["server"]);
    let action = route_action(route);
    let Some(ClusterSpecifier::WeightedClusters(w)) = &action.cluster_specifier else { panic!("weighted") };
    let v1 = &w.clusters[0];
    assert_eq!(v1.name, format!("outbound|9095|v1|{FEATURES}"));
    assert!(v1.request_headers_to_add.is_empty(), "a host header becomes the authority rewrite, not a header");
    assert_eq!(
        v1.host_rewrite_specifier,
        Some(envoy_types::pb::envoy::config::route::v3::weighted_cluster::cluster_weight::HostRewriteSpecifier::HostRewriteLiteral(
            "v1.features.internal".into()
        ))
    );
    assert_eq!(v1.response_headers_to_add[0].header.as_ref().unwrap().key, "x-subset");
    let mirror = &action.request_mirror_policies[0];
    assert_eq!(
        mirror.runtime_fraction.as_ref().unwrap().default_value.unwrap().numerator,
        10,
        "mirrorPercent: 10 of 100"
    );
}

#[test]
fn http_connection_managers_carry_fault_cors_and_websocket_upgrades() {
    let ctx = context(mesh());
    let scope = productpage(&ctx, "REDIRECT");
    let listeners = lds::listeners(&ctx, &scope);
    let listener = listeners.iter().find(|l| l.name == "0.0.0.0_9095").expect("the port's listener");
    let hcm = listener
        .filter_chains
        .iter()
        .flat_map(|c| &c.filters)
        .find_map(|f| match &f.config_type {
            Some(filter::ConfigType::TypedConfig(any)) if f.name == proto::HTTP_CONNECTION_MANAGER => {
                HttpConnectionManager::decode(any.value.as_slice()).ok()
            }
            _ => None,
        })
        .expect("an HTTP connection manager");
    let filters: Vec<&str> = hcm.http_filters.iter().map(|f: &HttpFilter| f.name.as_str()).collect();
    assert_eq!(filters, [proto::FAULT, proto::CORS, proto::ROUTER]);
    assert_eq!(hcm.upgrade_configs.iter().map(|u| u.upgrade_type.as_str()).collect::<Vec<_>>(), ["websocket"]);
}

#[test]
fn every_destination_rule_field_shapes_the_clusters() {
    use envoy_types::pb::envoy::extensions::upstreams::http::v3::http_protocol_options::UpstreamProtocolOptions;
    let ctx = context(mesh());
    let scope = productpage(&ctx, "REDIRECT");
    let clusters = cds::clusters(&ctx, &scope);
    let main = cluster(&clusters, &format!("outbound|9095||{FEATURES}"));
    assert_eq!(main.lb_policy, LbPolicy::RoundRobin as i32);
    let Some(LbConfig::RoundRobinLbConfig(rr)) = &main.lb_config else { panic!("round robin config") };
    let slow = rr.slow_start_config.as_ref().unwrap();
    assert_eq!(slow.slow_start_window.unwrap().seconds, 30);
    assert_eq!(slow.aggression.as_ref().unwrap().default_value, 2.0);
    assert_eq!(slow.min_weight_percent.unwrap().value, 20.0);
    let t = &main.circuit_breakers.as_ref().unwrap().thresholds[0];
    assert_eq!(t.max_connections.unwrap().value, 50);
    let budget = t.retry_budget.as_ref().unwrap();
    assert_eq!((budget.budget_percent.unwrap().value, budget.min_retry_concurrency.unwrap().value), (35.0, 6));
    assert_eq!(main.connect_timeout.unwrap().seconds, 3);
    let keepalive = main.upstream_connection_options.as_ref().unwrap().tcp_keepalive.as_ref().unwrap();
    assert_eq!(
        (
            keepalive.keepalive_probes.unwrap().value,
            keepalive.keepalive_time.unwrap().value,
            keepalive.keepalive_interval.unwrap().value
        ),
        (4, 600, 75)
    );
    let od = main.outlier_detection.as_ref().unwrap();
    assert_eq!(
        (od.consecutive_gateway_failure.unwrap().value, od.enforcing_consecutive_gateway_failure.unwrap().value),
        (3, 100)
    );
    assert!(od.split_external_local_origin_errors);
    assert_eq!(od.consecutive_local_origin_failure.unwrap().value, 4);
    assert_eq!(main.common_lb_config.as_ref().unwrap().healthy_panic_threshold.unwrap().value, 25.0);
    let opts = protocol_options(main).expect("HTTP options");
    let common = opts.common_http_protocol_options.as_ref().unwrap();
    assert_eq!(common.idle_timeout.unwrap().seconds, 120, "the HTTP idle timeout wins over the TCP one");
    assert_eq!(common.max_connection_duration.unwrap().seconds, 3600);
    let Some(UpstreamProtocolOptions::ExplicitHttpConfig(explicit)) = &opts.upstream_protocol_options else { panic!() };
    let Some(ProtocolConfig::Http2ProtocolOptions(h2)) = &explicit.protocol_config else {
        panic!("h2UpgradePolicy: UPGRADE")
    };
    assert_eq!(h2.max_concurrent_streams.unwrap().value, 77);
    assert_eq!(h2.connection_keepalive.as_ref().unwrap().interval.unwrap().seconds, 30);

    // Port 9096: the port-level settings replace the policy there.
    let admin = cluster(&clusters, &format!("outbound|9096||{FEATURES}"));
    assert_eq!(admin.lb_policy, LbPolicy::Maglev as i32);
    let Some(LbConfig::MaglevLbConfig(maglev)) = &admin.lb_config else { panic!("maglev config") };
    assert_eq!(maglev.table_size.unwrap().value, 1021);
    assert!(admin.outlier_detection.is_none(), "a port-level entry does not inherit the rule's outlier detection");
    let opts = protocol_options(admin).expect("HTTP options");
    assert!(matches!(opts.upstream_protocol_options, Some(UpstreamProtocolOptions::UseDownstreamProtocolConfig(_))));

    // The subset: ring hash with its size, the rest from the rule.
    let v1 = cluster(&clusters, &format!("outbound|9095|v1|{FEATURES}"));
    assert_eq!(v1.lb_policy, LbPolicy::RingHash as i32);
    let Some(LbConfig::RingHashLbConfig(ring)) = &v1.lb_config else { panic!("ring hash config") };
    assert_eq!(ring.minimum_ring_size.unwrap().value, 4096);
    assert_eq!(v1.connect_timeout.unwrap().seconds, 3);
}

#[test]
fn the_cookie_hash_of_a_port_goes_on_routes_to_that_port() {
    let ctx = context(mesh());
    let scope = productpage(&ctx, "REDIRECT");
    let configs = rds::route_configs(&ctx, &scope);
    let routes = &vhost(config(&configs, "9096"), &format!("{FEATURES}:9096")).routes;
    // The destination names no port: on this virtual host it is 9096.
    let action = route_action(named(routes, "matched.every"));
    assert_eq!(single_cluster(named(routes, "matched.every")), format!("outbound|9096||{FEATURES}"));
    let Some(PolicySpecifier::Cookie(cookie)) = &action.hash_policy[0].policy_specifier else {
        panic!("cookie hash expected: {:?}", action.hash_policy)
    };
    assert_eq!((cookie.name.as_str(), cookie.path.as_str(), cookie.ttl.unwrap().seconds), ("session", "/", 60));
    assert_eq!(cookie.attributes[0].name, "SameSite");
    // A lone hashed destination: retries must not move to another host.
    assert!(action.retry_policy.as_ref().unwrap().retry_host_predicate.is_empty());
    // On 9095 the same route has no hash, and keeps the previous-hosts predicate.
    let on_9095 = features_routes(&ctx);
    let plain = route_action(named(&on_9095, "matched.every"));
    assert!(plain.hash_policy.is_empty());
    assert_eq!(plain.retry_policy.as_ref().unwrap().retry_host_predicate.len(), 1);
}
