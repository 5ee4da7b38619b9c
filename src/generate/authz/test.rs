//! The pieces of the RBAC filters that no generated listener shows whole:
//! the mirror messages' encoding and the matchers Istio's wildcards become.
//! Generated filters are tested through listeners in `generate::test::authz`.

use envoy_types::pb::envoy::config::rbac::v3::{Policy, rbac::Action};
use envoy_types::pb::envoy::extensions::filters::http::rbac::v3::Rbac as EnvoyHttpRbac;
use envoy_types::pb::envoy::r#type::matcher::v3::{RegexMatcher, StringMatcher, string_matcher::MatchPattern};
use prost::Message as _;

use super::principals::{namespace_matcher, service_account_regex, spiffe_matcher};
use super::wildcard::string_matcher;
use super::{HttpRbac, NamedPolicy, RbacRules, match_never};
#[test]
fn the_mirror_encoding_decodes_as_envoy_s_rbac_with_every_policy() {
    let config = HttpRbac {
        rules: Some(RbacRules {
            action: Action::Deny as i32,
            policies: vec![
                NamedPolicy { name: "a".into(), policy: Some(match_never()) },
                NamedPolicy { name: "b".into(), policy: Some(Policy::default()) },
            ],
        }),
        shadow_rules: None,
        shadow_rules_stat_prefix: String::new(),
    };
    let decoded = EnvoyHttpRbac::decode(config.encode_to_vec().as_slice()).unwrap();
    let rules = decoded.rules.unwrap();
    assert_eq!(rules.action, Action::Deny as i32);
    assert_eq!(rules.policies.len(), 2);
    assert_eq!(rules.policies["a"], match_never());
}

#[test]
fn wildcards_become_the_matchers_istio_makes() {
    let exact = |m: StringMatcher| m.match_pattern;
    assert_eq!(
        exact(spiffe_matcher("cluster.local/ns/a/sa/b")),
        Some(MatchPattern::Exact("spiffe://cluster.local/ns/a/sa/b".into()))
    );
    assert_eq!(exact(spiffe_matcher("cluster.local/*")), Some(MatchPattern::Prefix("spiffe://cluster.local/".into())));
    assert_eq!(
        exact(spiffe_matcher("*/sa/b")),
        Some(MatchPattern::SafeRegex(RegexMatcher { regex: "spiffe://.*/sa/b".into(), ..Default::default() }))
    );
    assert_eq!(exact(string_matcher("*.example", "")), Some(MatchPattern::Suffix(".example".into())));
    assert_eq!(
        service_account_regex("shop", "web"),
        "spiffe://.+/ns/shop/(.+/|)sa/web(/.+)?",
        "a service account without a namespace is the policy's"
    );
    assert_eq!(
        exact(namespace_matcher("team-*")),
        Some(MatchPattern::SafeRegex(RegexMatcher { regex: ".*/ns/team-.*/.*".into(), ..Default::default() }))
    );
}
