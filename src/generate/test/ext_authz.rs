//! CUSTOM AuthorizationPolicies in generated config: the shadow RBAC
//! filter and the ext_authz filter per provider, ahead of the JWT filter
//! and the other actions' RBAC filters; the network filters of a gRPC
//! authorizer on TCP ports and none for an HTTP one; the DENY istiod
//! fails closed with; a gateway's listeners; the same bytes every time.

use envoy_types::pb::envoy::config::core::v3::{grpc_service, http_uri};
use envoy_types::pb::envoy::config::rbac::v3::rbac::Action;
use envoy_types::pb::envoy::extensions::filters::http::ext_authz::v3::{ExtAuthz as HttpExtAuthz, ext_authz};
use envoy_types::pb::envoy::extensions::filters::http::rbac::v3::Rbac as HttpRbac;
use envoy_types::pb::envoy::extensions::filters::network::ext_authz::v3::ExtAuthz as NetworkExtAuthz;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{HttpFilter, http_filter};
use envoy_types::pb::envoy::extensions::filters::network::rbac::v3::Rbac as NetworkRbac;
use envoy_types::pb::envoy::r#type::matcher::v3::{metadata_matcher::path_segment::Segment, value_matcher};

use super::authz::{WEB, web};
use super::*;
use crate::config::mesh::MeshSettings;

const PROVIDERS: &str = "extensionProviders:
- name: ext-http
  envoyExtAuthzHttp:
    service: ext-authz.auth.svc.cluster.local
    port: \"8000\"
    timeout: 10s
    pathPrefix: /check
    failOpen: true
    statusOnError: \"503\"
    includeRequestHeadersInCheck: [x-custom-id, x-prefix-*, \"*-suffix\"]
    includeAdditionalHeadersInCheck: {x-header-2: value-2, x-header-1: value-1}
    includeRequestBodyInCheck: {maxRequestBytes: 2048, allowPartialMessage: true}
    headersToUpstreamOnAllow: [authorization]
    headersToDownstreamOnDeny: [set-cookie]
    headersToDownstreamOnAllow: [x-allowed-*]
- name: ext-grpc
  envoyExtAuthzGrpc: {service: auth/ext-authz.auth.svc.cluster.local, port: 9000}
- name: gone
  envoyExtAuthzGrpc: {service: gone.auth.svc.cluster.local, port: 9000}
";

const AUTHORIZER: &str = "apiVersion: v1
kind: Service
metadata: {name: ext-authz, namespace: auth}
spec:
  selector: {app: ext-authz}
  ports: [{name: http, port: 8000}, {name: grpc, port: 9000}]
---
";

fn policy(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {{name: {name}, namespace: shop}}\nspec:\n{spec}\n---\n"
    )
}

fn custom(name: &str, provider: &str, paths: &str) -> String {
    policy(
        name,
        &format!(
            "  action: CUSTOM\n  provider: {{name: {provider}}}\n  rules: [{{to: [{{operation: {{paths: [{paths}]}}}}]}}]"
        ),
    )
}

/// bookinfo with `web` of `shop`, the authorizer's service and `yaml`, in
/// a mesh whose authorizers are [`PROVIDERS`].
fn context_with(yaml: &str) -> PushContext {
    let store = ConfigStore::new();
    store.apply(mesh_with(&format!("{WEB}{AUTHORIZER}{yaml}")));
    let mesh = MeshSettings::parse("mesh.yaml", PROVIDERS).unwrap().mesh_config();
    PushContext::build_with(store.snapshot(), 1, Arc::new(ScopeInterner::default()), Arc::new(mesh))
}

fn inbound(yaml: &str) -> Listener {
    let ctx = context_with(yaml);
    listener(&lds::inbound_listeners(&ctx.inbound_for(&web()).1), "virtualInbound").clone()
}

/// The HTTP filters of `web`'s HTTP port, in order.
fn http_filters(l: &Listener) -> Vec<HttpFilter> {
    let chain = l.filter_chains.iter().find(|c| c.name == "inbound|8080||").expect("the HTTP port's chain");
    hcm(&chain.filters[0]).http_filters
}

fn decode<T: Message + Default>(f: &HttpFilter) -> T {
    match &f.config_type {
        Some(http_filter::ConfigType::TypedConfig(any)) => T::decode(any.value.as_slice()).unwrap(),
        _ => panic!("{} has no typed config", f.name),
    }
}

/// The filters before the TCP port's tcp_proxy.
fn tcp_filters(l: &Listener) -> Vec<Filter> {
    let chain = l.filter_chains.iter().find(|c| c.name == "inbound|9000||").expect("the TCP port's chain");
    chain.filters[..chain.filters.len() - 1].to_vec()
}

fn names<T: Message + Default>(rules: &Option<T>, policies: impl Fn(&T) -> Vec<String>) -> Vec<String> {
    let mut out = rules.as_ref().map(policies).unwrap_or_default();
    out.sort();
    out
}

fn rbac_names(rules: &Option<envoy_types::pb::envoy::config::rbac::v3::Rbac>) -> Vec<String> {
    names(rules, |r| r.policies.keys().cloned().collect())
}

#[test]
fn an_http_authorizer_is_asked_only_about_what_the_custom_rules_match_before_jwt_and_the_other_actions() {
    let yaml = [
        custom("ext-a", "ext-http", "/private*"),
        custom("ext-b", "ext-http", "/admin"),
        policy("no-debug", "  action: DENY\n  rules: [{to: [{operation: {paths: [/debug]}}]}]"),
        "apiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {name: jwt, namespace: shop}\nspec:\n  jwtRules: [{issuer: https://issuer.example, jwksUri: https://issuer.example/keys}]\n---\n".to_string(),
    ]
    .concat();
    let l = inbound(&yaml);
    let filters = http_filters(&l);
    let order: Vec<&str> = filters.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(
        order,
        [
            "envoy.filters.http.rbac",
            "envoy.filters.http.ext_authz",
            "envoy.filters.http.jwt_authn",
            "envoy.filters.http.rbac",
            "envoy.filters.http.fault",
            "envoy.filters.http.cors",
            "envoy.filters.http.router"
        ]
    );
    let shadow: HttpRbac = decode(&filters[0]);
    assert!(shadow.rules.is_none(), "CUSTOM's RBAC filter enforces nothing");
    assert_eq!(shadow.shadow_rules.as_ref().unwrap().action, Action::Deny as i32);
    assert_eq!(
        rbac_names(&shadow.shadow_rules),
        [
            "istio-ext-authz-ext-http-ns[shop]-policy[ext-a]-rule[0]",
            "istio-ext-authz-ext-http-ns[shop]-policy[ext-b]-rule[0]"
        ]
    );
    assert_eq!(shadow.shadow_rules_stat_prefix, "istio_ext_authz_");
    assert_eq!(rbac_names(&decode::<HttpRbac>(&filters[3]).rules), ["ns[shop]-policy[no-debug]-rule[0]"]);

    let config: HttpExtAuthz = decode(&filters[1]);
    let Some(ext_authz::Services::HttpService(service)) = &config.services else { panic!("an HTTP service") };
    let uri = service.server_uri.as_ref().unwrap();
    assert_eq!(uri.uri, "http://ext-authz.auth.svc.cluster.local");
    assert_eq!(
        uri.http_upstream_type,
        Some(http_uri::HttpUpstreamType::Cluster("outbound|8000||ext-authz.auth.svc.cluster.local".into()))
    );
    assert_eq!(uri.timeout.unwrap().seconds, 10);
    assert_eq!(service.path_prefix, "/check");
    let added: Vec<(&str, &str)> = service
        .authorization_request
        .as_ref()
        .unwrap()
        .headers_to_add
        .iter()
        .map(|h| (h.key.as_str(), h.value.as_str()))
        .collect();
    assert_eq!(added, [("x-header-1", "value-1"), ("x-header-2", "value-2")], "in name order");
    let answer = service.authorization_response.as_ref().unwrap();
    let listed = |m: &Option<envoy_types::pb::envoy::r#type::matcher::v3::ListStringMatcher>| format!("{m:?}");
    assert!(listed(&answer.allowed_upstream_headers).contains("Exact(\"authorization\")"));
    assert!(listed(&answer.allowed_client_headers).contains("Exact(\"set-cookie\")"));
    assert!(listed(&answer.allowed_client_headers_on_success).contains("Prefix(\"x-allowed-\")"));
    let allowed = config.allowed_headers.as_ref().unwrap();
    assert_eq!(allowed.patterns.len(), 3);
    assert!(allowed.patterns.iter().all(|p| p.ignore_case));
    let text = format!("{allowed:?}");
    assert!(
        text.contains("Exact(\"x-custom-id\")")
            && text.contains("Prefix(\"x-prefix-\")")
            && text.contains("Suffix(\"-suffix\")")
    );
    assert!(config.failure_mode_allow);
    assert_eq!(config.status_on_error.unwrap().code, 503);
    assert_eq!(config.transport_api_version, 2, "V3");
    let body = config.with_request_body.unwrap();
    assert_eq!((body.max_request_bytes, body.allow_partial_message, body.pack_as_bytes), (2048, true, false));
    let enabled = config.filter_enabled_metadata.unwrap();
    assert_eq!(enabled.filter, "envoy.filters.http.rbac");
    assert_eq!(enabled.path[0].segment, Some(Segment::Key("istio_ext_authz_shadow_effective_policy_id".into())));
    let Some(value_matcher::MatchPattern::StringMatch(prefix)) = enabled.value.unwrap().match_pattern else {
        panic!("a string match")
    };
    assert_eq!(prefix.match_pattern, Some(MatchPattern::Prefix("istio-ext-authz-ext-http".into())));

    // An HTTP authorizer adds nothing to a TCP port, as in istiod: only the DENY filter is there.
    let tcp = tcp_filters(&l);
    assert_eq!(tcp.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(), ["envoy.filters.network.rbac"]);
    assert_eq!(rbac_names(&typed::<NetworkRbac>(&tcp[0]).rules), ["ns[shop]-policy[no-debug]-rule[0]"]);
}

#[test]
fn a_grpc_authorizer_is_asked_on_http_ports_and_through_the_network_filter_on_tcp_ports() {
    let l = inbound(&custom("ext", "ext-grpc", "/private"));
    let filters = http_filters(&l);
    let config: HttpExtAuthz = decode(&filters[1]);
    let Some(ext_authz::Services::GrpcService(grpc)) = &config.services else { panic!("a gRPC service") };
    let Some(grpc_service::TargetSpecifier::EnvoyGrpc(envoy)) = &grpc.target_specifier else { panic!("Envoy's gRPC") };
    assert_eq!(
        (envoy.cluster_name.as_str(), envoy.authority.as_str()),
        ("outbound|9000||ext-authz.auth.svc.cluster.local", "ext-authz.auth.svc.cluster.local")
    );
    assert_eq!(grpc.timeout.unwrap().seconds, 600, "istiod's default");
    assert!(config.allowed_headers.is_none() && !config.failure_mode_allow && config.status_on_error.is_none());

    let tcp = tcp_filters(&l);
    let order: Vec<&str> = tcp.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(order, ["envoy.filters.network.rbac", "envoy.filters.network.ext_authz"]);
    let shadow: NetworkRbac = typed(&tcp[0]);
    assert!(shadow.rules.is_none());
    assert_eq!((shadow.stat_prefix.as_str(), shadow.shadow_rules_stat_prefix.as_str()), ("tcp.", "istio_ext_authz_"));
    assert_eq!(
        rbac_names(&shadow.shadow_rules),
        ["istio-ext-authz-ext-grpc-ns[shop]-policy[ext]-rule[0]"],
        "on TCP the rule is kept without its paths: more connections are asked about"
    );
    let network: NetworkExtAuthz = typed(&tcp[1]);
    assert_eq!(network.stat_prefix, "tcp.");
    assert_eq!(network.filter_enabled_metadata.unwrap().filter, "envoy.filters.network.rbac");
    assert_eq!(network.grpc_service, Some(grpc.clone()));
}

#[test]
fn an_authorizer_istiod_cannot_use_or_two_on_one_workload_deny_what_the_rules_match() {
    // Two providers, both usable: each one's rules as an enforced DENY, in provider order.
    let two = inbound(&[custom("by-http", "ext-http", "/private"), custom("by-grpc", "ext-grpc", "/api")].concat());
    let filters = http_filters(&two);
    assert!(filters.iter().all(|f| f.name != "envoy.filters.http.ext_authz"));
    let denies: Vec<Vec<String>> = filters
        .iter()
        .filter(|f| f.name == "envoy.filters.http.rbac")
        .map(|f| rbac_names(&decode::<HttpRbac>(f).rules))
        .collect();
    assert_eq!(
        denies,
        [
            ["istio-ext-authz-ext-grpc-ns[shop]-policy[by-grpc]-rule[0]-deny-due-to-bad-CUSTOM-action"],
            ["istio-ext-authz-ext-http-ns[shop]-policy[by-http]-rule[0]-deny-due-to-bad-CUSTOM-action"]
        ]
    );

    // One provider the mesh config lacks: the same, on HTTP and TCP ports alike.
    let l = inbound(&custom("ext", "opa", "/private"));
    let filters = http_filters(&l);
    let rbac: HttpRbac = decode(&filters[0]);
    assert_eq!(rbac.rules.as_ref().unwrap().action, Action::Deny as i32);
    assert_eq!(
        rbac_names(&rbac.rules),
        ["istio-ext-authz-opa-ns[shop]-policy[ext]-rule[0]-deny-due-to-bad-CUSTOM-action"]
    );
    assert!(rbac.shadow_rules.is_none());
    assert_eq!(filters[1].name, "envoy.filters.http.fault", "no ext_authz filter");
    let tcp = tcp_filters(&l);
    assert_eq!(tcp.len(), 1);
    assert_eq!(rbac_names(&typed::<NetworkRbac>(&tcp[0]).rules).len(), 1);

    // An authorizer whose service is no service of the mesh: the same.
    let gone = http_filters(&inbound(&custom("ext", "gone", "/private")));
    assert!(rbac_names(&decode::<HttpRbac>(&gone[0]).rules)[0].ends_with("-deny-due-to-bad-CUSTOM-action"));
}

#[test]
fn a_dry_run_custom_policy_is_built_as_istiod_builds_it_into_the_enforced_rules() {
    let dry_run = "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: trial, namespace: shop, annotations: {istio.io/dry-run: \"true\"}}\nspec:\n  action: CUSTOM\n  provider: {name: ext-http}\n  rules: [{to: [{operation: {paths: [/trial]}}]}]\n---\n";
    let l = inbound(&[custom("ext", "ext-http", "/private"), dry_run.to_string()].concat());
    let rbac: HttpRbac = decode(&http_filters(&l)[0]);
    assert_eq!(rbac_names(&rbac.rules), ["istio-ext-authz-ext-http-ns[shop]-policy[trial]-rule[0]"]);
    assert_eq!(rbac.rules.unwrap().action, Action::Deny as i32);
    assert_eq!(rbac_names(&rbac.shadow_rules), ["istio-ext-authz-ext-http-ns[shop]-policy[ext]-rule[0]"]);
}

#[test]
fn a_gateway_a_custom_policy_selects_asks_the_authorizer_on_its_listeners() {
    let policy = "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: edge, namespace: default}\nspec:\n  selector: {matchLabels: {istio: ingressgateway}}\n  action: CUSTOM\n  provider: {name: ext-http}\n  rules: [{to: [{operation: {hosts: [\"*.internal\"]}}]}]\n";
    let ctx = context_with(policy);
    let managers = connection_managers(&lds::listeners(&ctx, &ingress(&ctx)));
    assert!(!managers.is_empty());
    for manager in managers {
        let names: Vec<&str> = manager.http_filters.iter().take(2).map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["envoy.filters.http.rbac", "envoy.filters.http.ext_authz"], "{}", manager.stat_prefix);
    }
}

#[test]
fn custom_filters_encode_to_the_same_bytes_every_time() {
    let yaml: String = (0..8).map(|i| custom(&format!("p{i}"), "ext-grpc", "/a, /b")).collect();
    let bytes = || lds::inbound_listeners(&context_with(&yaml).inbound_for(&web()).1)[0].encode_to_vec();
    let first = bytes();
    for _ in 0..3 {
        assert_eq!(bytes(), first);
    }
}
