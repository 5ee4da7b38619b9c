//! CUSTOM AuthorizationPolicies: the filters that hand the requests their
//! rules match to an external authorizer, as istiod builds them
//! (`pilot/pkg/security/authz/builder/builder.go`, the CUSTOM builder).
//!
//! Per provider the workload's CUSTOM policies name (in name order), two
//! filters: an RBAC filter whose *shadow* rules are the policies' rules
//! (action DENY, each named `istio-ext-authz-PROVIDER-ns[NS]-policy[NAME]-rule[I]`,
//! stat prefix `istio_ext_authz_`), which enforces nothing and writes the
//! name of the rule a request matched to its dynamic metadata; then the
//! ext_authz filter (`ext_authz`), enabled only by that metadata, so a
//! request no CUSTOM rule matches is never sent to the authorizer. A dry
//! run policy's rules go into the RBAC filter's *enforced* rules, as istiod
//! puts them, where they deny what they match (validation warns of it).
//! On a TCP port a gRPC provider gets the network filters alike; an HTTP
//! provider gets nothing there, as in istiod.
//!
//! Fail closed, as istiod: with policies naming more than one provider
//! (istiod allows one per workload unless a feature flag, off by default,
//! says otherwise), or a provider it cannot use
//! (`model::authorizers`), the policies' rules become an enforced DENY RBAC
//! filter, each rule named `…-deny-due-to-bad-CUSTOM-action`.

use std::sync::Arc;

use envoy_types::pb::envoy::config::listener::v3::{Filter, filter};
use envoy_types::pb::envoy::config::rbac::v3::rbac::Action;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{HttpFilter, http_filter};

use super::ext_authz::{self, HTTP_EXT_AUTHZ, NETWORK_EXT_AUTHZ, SHADOW_STAT_PREFIX};
use super::{
    HttpRbac, NamedPolicy, NetworkRbac, Peer, RbacRules, TCP_STAT_PREFIX, http_rbac_filter, network_rbac_filter,
};
use crate::generate::proto;
use crate::model::authorizers::Authorizer;
use crate::push::index::AppliedPolicy;

/// The suffix of a rule's name in the DENY filter of a provider istiod
/// cannot use.
const BAD_CUSTOM_SUFFIX: &str = "-deny-due-to-bad-CUSTOM-action";

/// The CUSTOM policies of one provider, and what it resolved to.
struct ProviderRules {
    /// The enforced policies' rules, sorted by name.
    enforced: Vec<NamedPolicy>,
    /// The dry-run policies' rules, sorted by name.
    dry_run: Vec<NamedPolicy>,
    /// The authorizer, or why none can be used.
    authorizer: Result<Arc<Authorizer>, Arc<str>>,
}

/// The HTTP filters of the CUSTOM policies among `policies`, in order.
pub(super) fn http_filters(policies: &[Arc<AppliedPolicy>], peer: Peer) -> Vec<HttpFilter> {
    let enforcing = |rules: RbacRules| http_rbac_filter(&HttpRbac { rules: Some(rules), ..Default::default() });
    filters(policies, false, peer, enforcing, |group| {
        let authorizer = match &group.authorizer {
            Err(_) => return vec![enforcing(bad_custom(&group.enforced))],
            Ok(authorizer) => authorizer,
        };
        let shadow = HttpRbac {
            rules: dry_run_rules(&group.dry_run),
            shadow_rules: Some(deny(group.enforced.clone())),
            shadow_rules_stat_prefix: SHADOW_STAT_PREFIX.to_string(),
        };
        let config = ext_authz::http_config(authorizer);
        let ext_authz = HttpFilter {
            name: HTTP_EXT_AUTHZ.to_string(),
            config_type: Some(http_filter::ConfigType::TypedConfig(proto::any(&config))),
            ..Default::default()
        };
        vec![http_rbac_filter(&shadow), ext_authz]
    })
}

/// The network filters of the CUSTOM policies among `policies` for a TCP
/// port, in order.
pub(super) fn network_filters(policies: &[Arc<AppliedPolicy>], peer: Peer) -> Vec<Filter> {
    let enforcing = |rules: RbacRules| {
        let config = NetworkRbac { rules: Some(rules), stat_prefix: TCP_STAT_PREFIX.to_string(), ..Default::default() };
        network_rbac_filter(&config)
    };
    filters(policies, true, peer, enforcing, |group| {
        let authorizer = match &group.authorizer {
            Err(_) => return vec![enforcing(bad_custom(&group.enforced))],
            Ok(authorizer) => authorizer,
        };
        let Some(config) = ext_authz::network_config(authorizer) else { return Vec::new() };
        let shadow = NetworkRbac {
            rules: dry_run_rules(&group.dry_run),
            shadow_rules: Some(deny(group.enforced.clone())),
            stat_prefix: TCP_STAT_PREFIX.to_string(),
            shadow_rules_stat_prefix: SHADOW_STAT_PREFIX.to_string(),
        };
        let ext_authz = Filter {
            name: NETWORK_EXT_AUTHZ.to_string(),
            config_type: Some(filter::ConfigType::TypedConfig(proto::any(&config))),
        };
        vec![network_rbac_filter(&shadow), ext_authz]
    })
}

/// The filters of each provider's group, in provider order: `per_provider`
/// for each, or, when the policies name more than one provider, an
/// enforcing DENY (`enforcing`) of each group's rules, as istiod refuses
/// several providers on one workload.
fn filters<F>(
    policies: &[Arc<AppliedPolicy>],
    tcp: bool,
    peer: Peer,
    enforcing: impl Fn(RbacRules) -> F,
    per_provider: impl Fn(&ProviderRules) -> Vec<F>,
) -> Vec<F> {
    let groups = groups(policies, tcp, peer);
    if groups.len() > 1 {
        return groups.iter().map(|(_, group)| enforcing(bad_custom(&group.enforced))).collect();
    }
    groups.iter().flat_map(|(_, group)| per_provider(group)).collect()
}

/// The CUSTOM policies of `policies` by provider name, in name order.
fn groups(policies: &[Arc<AppliedPolicy>], tcp: bool, peer: Peer) -> Vec<(Arc<str>, ProviderRules)> {
    let mut out: Vec<(Arc<str>, ProviderRules)> = Vec::new();
    for policy in policies.iter().filter(|p| p.is_custom()) {
        let provider: Arc<str> = policy.spec.provider.as_ref().map_or("", |p| p.name.as_str()).into();
        let index = match out.iter().position(|(name, _)| *name == provider) {
            Some(index) => index,
            None => {
                let authorizer = policy.authorizer.clone().unwrap_or_else(|| Err("no provider".into()));
                out.push((provider.clone(), ProviderRules { enforced: Vec::new(), dry_run: Vec::new(), authorizer }));
                out.len() - 1
            }
        };
        let group = &mut out[index].1;
        let prefix = format!("{}-", ext_authz::rule_prefix(&provider));
        let rules = super::rbac_policies(policy, &prefix, false, tcp, peer);
        if policy.dry_run { group.dry_run.extend(rules) } else { group.enforced.extend(rules) }
    }
    for (_, group) in &mut out {
        group.enforced.sort_by(|a, b| a.name.cmp(&b.name));
        group.dry_run.sort_by(|a, b| a.name.cmp(&b.name));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// DENY rules of `policies`.
fn deny(policies: Vec<NamedPolicy>) -> RbacRules {
    RbacRules { action: Action::Deny as i32, policies }
}

/// The enforced rules a dry run gives, as istiod builds them: its rules as
/// DENY, when there are any.
fn dry_run_rules(policies: &[NamedPolicy]) -> Option<RbacRules> {
    (!policies.is_empty()).then(|| deny(policies.to_vec()))
}

/// The DENY rules that stand for a provider that cannot be used: the
/// enforced policies' rules, renamed.
fn bad_custom(policies: &[NamedPolicy]) -> RbacRules {
    let renamed = policies
        .iter()
        .map(|p| NamedPolicy { name: format!("{}{BAD_CUSTOM_SUFFIX}", p.name), policy: p.policy.clone() })
        .collect();
    deny(renamed)
}
