//! AuthorizationPolicies in generated config: the RBAC filters a
//! workload's inbound ports get, in Istio's order, with Istio's matchers,
//! and what a part Envoy cannot check on a port becomes. CUSTOM policies'
//! filters are `generate::test::ext_authz`'s.

use envoy_types::pb::envoy::config::rbac::v3::{Policy, permission, principal, rbac::Action};
use envoy_types::pb::envoy::extensions::filters::http::rbac::v3::Rbac as HttpRbac;
use envoy_types::pb::envoy::extensions::filters::network::rbac::v3::Rbac as NetworkRbac;

use super::*;

/// `web` (namespace `shop`): an HTTP port and a TCP port.
pub(super) const WEB: &str = "\
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  clusterIP: 10.60.0.1
  selector: {app: web}
  ports: [{name: http, port: 8080}, {name: tcp-metrics, port: 9000}]
---
";

pub(super) fn web() -> Proxy {
    proxy("sidecar~10.61.0.1~web-1.shop~shop.svc.cluster.local", "REDIRECT", &[("app", "web")])
}

fn inbound(yaml: &str) -> Listener {
    let ctx = context(mesh_with(&format!("{WEB}{yaml}")));
    let listeners = lds::inbound_listeners(&ctx.inbound_for(&web()).1);
    listener(&listeners, "virtualInbound").clone()
}

/// The RBAC configs of the HTTP port's connection manager, in order.
fn http_rbac(l: &Listener) -> Vec<HttpRbac> {
    let chain = l.filter_chains.iter().find(|c| c.name == "inbound|8080||").expect("the HTTP port's chain");
    hcm(&chain.filters[0])
        .http_filters
        .iter()
        .filter(|f| f.name == "envoy.filters.http.rbac")
        .map(|f| match &f.config_type {
            Some(envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::http_filter::ConfigType::TypedConfig(any)) => {
                HttpRbac::decode(any.value.as_slice()).unwrap()
            }
            _ => panic!("no typed config"),
        })
        .collect()
}

/// The RBAC configs before the TCP port's tcp_proxy.
fn tcp_rbac(l: &Listener) -> Vec<NetworkRbac> {
    let chain = l.filter_chains.iter().find(|c| c.name == "inbound|9000||").expect("the TCP port's chain");
    assert_eq!(chain.filters.last().unwrap().name, "envoy.filters.network.tcp_proxy");
    chain.filters.iter().filter(|f| f.name == "envoy.filters.network.rbac").map(typed).collect()
}

fn policy(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {{name: {name}, namespace: shop}}\nspec:\n{spec}\n---\n"
    )
}

fn policies(rules: &Option<envoy_types::pb::envoy::config::rbac::v3::Rbac>) -> Vec<(String, Policy)> {
    let mut out: Vec<(String, Policy)> =
        rules.as_ref().map(|r| r.policies.clone().into_iter().collect()).unwrap_or_default();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn without_policies_there_is_no_rbac_filter() {
    let l = inbound("");
    assert!(http_rbac(&l).is_empty() && tcp_rbac(&l).is_empty());
}

#[test]
fn deny_runs_before_allow_and_audit_before_both_and_each_rule_is_a_named_policy() {
    let yaml = [
        policy("no-admin", "  action: DENY\n  rules: [{to: [{operation: {paths: [/admin*], methods: [POST]}}]}]"),
        policy("from-shop", "  rules:\n  - from: [{source: {namespaces: [shop]}}, {source: {principals: [cluster.local/ns/ops/sa/admin]}}]\n  - when: [{key: \"request.headers[x-canary]\", values: [\"*\"]}]"),
        policy("watch", "  action: AUDIT\n  rules: [{}]"),
    ]
    .concat();
    let l = inbound(&yaml);
    let filters = http_rbac(&l);
    let actions: Vec<i32> = filters.iter().map(|f| f.rules.as_ref().unwrap().action).collect();
    assert_eq!(actions, [Action::Log as i32, Action::Deny as i32, Action::Allow as i32]);

    let deny = policies(&filters[1].rules);
    assert_eq!(deny.len(), 1);
    assert_eq!(deny[0].0, "ns[shop]-policy[no-admin]-rule[0]");
    let text = format!("{:?}", deny[0].1);
    assert!(text.contains("Prefix(\"/admin\")") && text.contains(":method"), "{text}");

    let allow = policies(&filters[2].rules);
    let names: Vec<&str> = allow.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["ns[shop]-policy[from-shop]-rule[0]", "ns[shop]-policy[from-shop]-rule[1]"]);
    assert_eq!(allow[0].1.principals.len(), 2, "one principal per from");
    let first = format!("{:?}", allow[0].1.principals);
    assert!(first.contains(".*/ns/shop/.*") && first.contains("Authenticated"), "{first}");
    assert!(format!("{:?}", allow[0].1.principals[1]).contains("spiffe://cluster.local/ns/ops/sa/admin"));
    assert!(format!("{:?}", allow[1].1.principals).contains("x-canary"), "a header condition is a principal");
    assert!(matches!(allow[0].1.permissions[0].rule, Some(permission::Rule::Any(true))), "no to: any request");
}

#[test]
fn on_a_tcp_port_an_allow_rule_with_http_parts_allows_nothing_and_a_deny_rule_denies_without_them() {
    let yaml = [
        policy("http-only", "  rules: [{to: [{operation: {methods: [GET]}}]}]"),
        policy("ports", "  rules: [{to: [{operation: {ports: [\"9000\"]}}]}]"),
        policy("no-posts", "  action: DENY\n  rules: [{from: [{source: {ipBlocks: [10.9.0.0/16]}}], to: [{operation: {methods: [POST]}}]}]"),
    ]
    .concat();
    let l = inbound(&yaml);
    let tcp = tcp_rbac(&l);
    assert_eq!(tcp.len(), 2, "DENY then ALLOW");
    let allow = policies(&tcp[1].rules);
    let names: Vec<&str> = allow.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["ns[shop]-policy[ports]-rule[0]"], "the HTTP-only rule is left out");
    let deny = policies(&tcp[0].rules);
    assert!(matches!(deny[0].1.permissions[0].rule, Some(permission::Rule::Any(true))), "methods dropped");
    assert!(format!("{:?}", deny[0].1.principals).contains("DirectRemoteIp"));
    assert_eq!(tcp[0].stat_prefix, "tcp.");
    // The HTTP port keeps all of it.
    assert_eq!(policies(&http_rbac(&l)[1].rules).len(), 2);
}

#[test]
fn allow_without_rules_allows_nothing_and_a_dry_run_only_shadows() {
    let yaml = [
        policy("allow-nothing", "  {}"),
        policy("blocked", "  action: DENY\n  rules: [{to: [{operation: {paths: [/private]}}]}]"),
        "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: trial, namespace: shop, annotations: {istio.io/dry-run: \"true\"}}\nspec:\n  action: DENY\n  rules: [{}]\n---\n".to_string(),
    ]
    .concat();
    let l = inbound(&yaml);
    let filters = http_rbac(&l);
    let deny = &filters[0];
    let enforced: Vec<String> = policies(&deny.rules).into_iter().map(|(n, _)| n).collect();
    assert_eq!(enforced, ["ns[shop]-policy[blocked]-rule[0]"]);
    let shadow: Vec<String> = policies(&deny.shadow_rules).into_iter().map(|(n, _)| n).collect();
    assert_eq!(shadow, ["ns[shop]-policy[trial]-rule[0]"]);
    assert_eq!(deny.shadow_rules_stat_prefix, "istio_dry_run_deny_");
    let allow = policies(&filters[1].rules);
    assert_eq!(allow.len(), 1);
    assert!(
        matches!(&allow[0].1.principals[0].identifier, Some(principal::Identifier::NotId(_))),
        "no principal matches: nothing is allowed"
    );
}

#[test]
fn many_policies_encode_to_the_same_bytes_every_time() {
    let yaml: String = (0..12).map(|i| policy(&format!("p{i}"), "  rules: [{}, {}]")).collect();
    let key = |yaml: &str| {
        let ctx = context(mesh_with(&format!("{WEB}{yaml}")));
        lds::inbound_listeners(&ctx.inbound_for(&web()).1).iter().map(|l| l.encode_to_vec()).collect::<Vec<_>>()
    };
    let first = key(&yaml);
    for _ in 0..3 {
        assert_eq!(key(&yaml), first, "the policies map is encoded in name order");
    }
}

#[test]
fn a_policy_selecting_a_gateway_guards_its_listeners() {
    let yaml = "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: edge, namespace: default}\nspec:\n  selector: {matchLabels: {istio: ingressgateway}}\n  action: DENY\n  rules: [{from: [{source: {ipBlocks: [192.0.2.0/24]}}]}]\n";
    let ctx = context(mesh_with(yaml));
    let listeners = lds::listeners(&ctx, &ingress(&ctx));
    let managers = connection_managers(&listeners);
    assert!(!managers.is_empty());
    for manager in managers {
        assert_eq!(manager.http_filters[0].name, "envoy.filters.http.rbac", "{}", manager.stat_prefix);
    }
    // Sidecars of the namespace are not selected.
    let sidecar = productpage_inbound(&ctx, "REDIRECT");
    assert!(sidecar.authorization.is_empty());
    let without = context(mesh());
    assert_ne!(ingress(&ctx).key, ingress(&without).key, "the gateway's policies are part of its scope");
}

#[test]
fn path_templates_and_envoy_filter_metadata_become_envoy_s_matchers() {
    use envoy_types::pb::envoy::extensions::path::r#match::uri_template::v3::UriTemplateMatchConfig;
    let yaml = [
        policy("allow-template", "  rules: [{to: [{operation: {paths: [\"/users/{*}/profile\", /plain]}}]}]"),
        policy(
            "deny-some",
            "  action: DENY\n  rules:\n  - to: [{operation: {notPaths: [\"/users/{**}\"]}}]\n    when:\n    - {key: \"experimental.envoy.filters.network.mysql_proxy[db.table]\", values: [\"[update]\", select], notValues: [drop]}",
        ),
    ]
    .concat();
    let l = inbound(&yaml);
    let filters = http_rbac(&l);
    let templates = |p: &Policy| -> Vec<String> {
        let mut out = Vec::new();
        let mut stack: Vec<&envoy_types::pb::envoy::config::rbac::v3::Permission> = p.permissions.iter().collect();
        while let Some(perm) = stack.pop() {
            match &perm.rule {
                Some(permission::Rule::UriTemplate(config)) => {
                    assert_eq!(config.name, "uri-template");
                    let any = config.typed_config.as_ref().unwrap();
                    out.push(UriTemplateMatchConfig::decode(any.value.as_slice()).unwrap().path_template);
                }
                Some(permission::Rule::AndRules(set) | permission::Rule::OrRules(set)) => stack.extend(&set.rules),
                Some(permission::Rule::NotRule(inner)) => stack.push(inner),
                _ => {}
            }
        }
        out
    };
    let allow = policies(&filters[1].rules);
    assert_eq!(templates(&allow[0].1), ["/users/*/profile"], "{{*}} is one segment");
    assert!(format!("{:?}", allow[0].1.permissions).contains("/plain"), "a plain path stays a path matcher");
    let deny = policies(&filters[0].rules);
    assert_eq!(templates(&deny[0].1), ["/users/**"], "{{**}} is the rest");
    let text = format!("{:?}", deny[0].1.permissions);
    for expected in
        ["envoy.filters.network.mysql_proxy", "db.table", "ListMatch", "update", "select", "drop", "NotRule"]
    {
        assert!(text.contains(expected), "{expected} missing from {text}");
    }
    // The metadata condition holds on TCP ports too.
    let tcp = policies(&tcp_rbac(&l)[0].rules);
    assert!(format!("{:?}", tcp[0].1.permissions).contains("mysql_proxy"));
}
