//! AuthorizationPolicy → Envoy's RBAC and ext_authz filters on a
//! workload's inbound chains (a gateway's: each chain of its listeners),
//! as Istio builds them (`pilot/pkg/security/authz`).
//!
//! In the order they run: CUSTOM first (`custom`: per provider a shadow
//! RBAC filter that marks the requests its rules match, then the ext_authz
//! filter that asks the external authorizer about those only), then — on
//! an HTTP port after the JWT filter, which istiod places between — one
//! RBAC filter per action: AUDIT (RBAC `LOG`), DENY, ALLOW. So a request
//! the authorizer refuses or any DENY rule matches is refused whatever an
//! ALLOW rule says, and with any ALLOW policy a request no ALLOW rule
//! matches is refused too. Each rule is one RBAC policy
//! `ns[NS]-policy[NAME]-rule[I]`: any of its `from` (their fields all
//! matching, values of one field any) and any of its `to`, and every
//! `when`. A policy without rules matches nothing (an ALLOW without rules
//! allows nothing). Dry-run policies go into the filter's shadow rules:
//! evaluated and counted, not enforced.
//!
//! JWT attributes (`requestPrincipals`, `request.auth.*`) match the payload
//! the `jwt_authn` filter (`generate::jwt`) leaves in the request's dynamic
//! metadata; a request without a verified token has none, so it matches no
//! such value (and every `not` one).
//!
//! Path templates (`{*}`, `{**}`) become Envoy's URI template matcher,
//! `experimental.envoy.filters.*` conditions matchers on that filter's
//! dynamic metadata, as Istio makes them.
//!
//! A part Envoy cannot check here — an HTTP attribute (JWT ones included)
//! on a TCP port — fails closed,
//! as Istio treats HTTP attributes on TCP ports: an ALLOW rule with it is
//! left out (it allows nothing), a DENY (or CUSTOM) rule is kept without
//! it (it denies, or asks the authorizer about, more).
//!
//! The parts of a rule, each in its file: `principals` (the `from` side:
//! peer identities, namespaces, IP blocks, request principals),
//! `permissions` (the `to` side: hosts, ports, methods, paths and path
//! templates), `conditions` (the `when` keys, JWT claims and
//! `experimental.envoy.filters.*` metadata among them); `wildcard` turns
//! Istio's wildcard strings into Envoy's matchers for all three. This
//! module puts each rule together from them and the rules into filters;
//! `custom` and `ext_authz` make the CUSTOM filters.
//!
//! Invariant: the filters' bytes are a function of the policies (and the
//! authorizers CUSTOM ones resolved to) only. The RBAC proto keeps its
//! policies in a map, which prost encodes in hash order; so the filter
//! configs are encoded from mirror messages of the same wire shape with
//! the policies sorted by name.

use std::sync::Arc;

use envoy_types::pb::envoy::config::listener::v3::{Filter, filter};
use envoy_types::pb::envoy::config::rbac::v3::{Permission, Policy, Principal, permission, principal, rbac::Action};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{HttpFilter, http_filter};
use envoy_types::pb::google::protobuf::Any;

pub use self::grpc::{GRPC_HTTP_RBAC_DENY, grpc_http_filters};
use self::permissions::permission_and;
use self::principals::principal_and;
use crate::config::istio::AuthorizationRule;
use crate::push::index::AppliedPolicy;

mod conditions;
mod custom;
pub mod ext_authz;
mod grpc;
mod permissions;
mod principals;
#[cfg(test)]
mod test;
mod wildcard;

/// Envoy's HTTP RBAC filter.
pub const HTTP_RBAC: &str = "envoy.filters.http.rbac";
/// Envoy's network RBAC filter.
pub const NETWORK_RBAC: &str = "envoy.filters.network.rbac";
/// The stat prefix of the network filter, as Istio sets it.
const TCP_STAT_PREFIX: &str = "tcp.";
/// Stat prefixes of dry-run rules, as Istio sets them.
const DRY_RUN_ALLOW: &str = "istio_dry_run_allow_";
const DRY_RUN_DENY: &str = "istio_dry_run_deny_";

/// The HTTP filters `policies` make, in the order they run, with the JWT
/// filter `authentication` where istiod puts it: after the CUSTOM filters,
/// before the RBAC filters of the other actions.
pub fn http_filters(policies: &[Arc<AppliedPolicy>], authentication: Option<HttpFilter>) -> Vec<HttpFilter> {
    http_filters_of(policies, authentication, Peer::Certificate)
}

/// [`http_filters`] of a waypoint: the peer's identity is the filter state
/// its HBONE listener recorded ([`PEER_PRINCIPAL`]), the TLS having ended
/// there.
pub fn waypoint_http_filters(policies: &[Arc<AppliedPolicy>]) -> Vec<HttpFilter> {
    http_filters_of(policies, None, Peer::FilterState)
}

fn http_filters_of(policies: &[Arc<AppliedPolicy>], authentication: Option<HttpFilter>, peer: Peer) -> Vec<HttpFilter> {
    let mut filters = custom::http_filters(policies, peer);
    filters.extend(authentication);
    filters.extend(groups(policies, false, peer).into_iter().map(|(rules, shadow, prefix)| {
        http_rbac_filter(&HttpRbac { rules, shadow_rules: shadow, shadow_rules_stat_prefix: prefix })
    }));
    filters
}

/// The network filters `policies` make for a TCP port, in order: CUSTOM's,
/// then the RBAC filters of the other actions.
pub fn network_filters(policies: &[Arc<AppliedPolicy>]) -> Vec<Filter> {
    network_filters_of(policies, Peer::Certificate)
}

/// [`network_filters`] of a waypoint (see [`waypoint_http_filters`]).
pub fn waypoint_network_filters(policies: &[Arc<AppliedPolicy>]) -> Vec<Filter> {
    network_filters_of(policies, Peer::FilterState)
}

fn network_filters_of(policies: &[Arc<AppliedPolicy>], peer: Peer) -> Vec<Filter> {
    let mut filters = custom::network_filters(policies, peer);
    filters.extend(groups(policies, true, peer).into_iter().map(|(rules, shadow, prefix)| {
        network_rbac_filter(&NetworkRbac {
            rules,
            shadow_rules: shadow,
            stat_prefix: TCP_STAT_PREFIX.to_string(),
            shadow_rules_stat_prefix: prefix,
        })
    }));
    filters
}

/// The HTTP RBAC filter of `config`.
fn http_rbac_filter(config: &HttpRbac) -> HttpFilter {
    HttpFilter {
        name: HTTP_RBAC.to_string(),
        config_type: Some(http_filter::ConfigType::TypedConfig(packed(
            "envoy.extensions.filters.http.rbac.v3.RBAC",
            config,
        ))),
        ..Default::default()
    }
}

/// The network RBAC filter of `config`.
fn network_rbac_filter(config: &NetworkRbac) -> Filter {
    Filter {
        name: NETWORK_RBAC.to_string(),
        config_type: Some(filter::ConfigType::TypedConfig(packed(
            "envoy.extensions.filters.network.rbac.v3.RBAC",
            config,
        ))),
    }
}

/// `message` packed as an `Any` of type `name`.
fn packed(name: &str, message: &impl prost::Message) -> Any {
    Any { type_url: format!("type.googleapis.com/{name}"), value: message.encode_to_vec() }
}

/// What a policy's action makes of its rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Audit,
    Deny,
    Allow,
    /// Built apart (`custom`).
    Custom,
}

/// The kind of a policy.
fn kind_of(policy: &AppliedPolicy) -> Kind {
    match policy.spec.action.as_deref().unwrap_or("ALLOW") {
        "AUDIT" => Kind::Audit,
        "DENY" => Kind::Deny,
        "CUSTOM" => Kind::Custom,
        _ => Kind::Allow,
    }
}

/// The filter state key where a waypoint's HBONE listener keeps the peer's
/// SPIFFE identity (Istio's name), for its RBAC filters to match.
pub const PEER_PRINCIPAL: &str = "io.istio.peer_principal";

/// Who checks a rule, which decides where it reads the peer's identity from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Peer {
    /// Envoy, from the peer certificate of the connection (a sidecar's, a gateway's).
    Certificate,
    /// Envoy, from the filter state [`PEER_PRINCIPAL`] (a waypoint's inner listeners).
    FilterState,
    /// A proxyless gRPC server, from the peer certificate, with only the
    /// matchers gRPC has (gRFC A41: no JWT, no filter metadata, no path
    /// templates, no SNI), see `grpc`.
    Grpc,
}

/// Per action present, in order: `(rules, shadow rules, shadow stat prefix)`.
fn groups(
    policies: &[Arc<AppliedPolicy>],
    tcp: bool,
    peer: Peer,
) -> Vec<(Option<RbacRules>, Option<RbacRules>, String)> {
    let mut out = Vec::new();
    for (kind, action) in [(Kind::Audit, Action::Log), (Kind::Deny, Action::Deny), (Kind::Allow, Action::Allow)] {
        let of_kind: Vec<&Arc<AppliedPolicy>> = policies.iter().filter(|p| kind_of(p) == kind).collect();
        if of_kind.is_empty() {
            continue;
        }
        let rules = |dry_run: bool| {
            let chosen: Vec<&&Arc<AppliedPolicy>> = of_kind.iter().filter(|p| p.dry_run == dry_run).collect();
            if chosen.is_empty() {
                return None;
            }
            let strict = kind == Kind::Allow;
            let mut policies: Vec<NamedPolicy> =
                chosen.iter().flat_map(|p| rbac_policies(p, "", strict, tcp, peer)).collect();
            policies.sort_by(|a, b| a.name.cmp(&b.name));
            Some(RbacRules { action: action as i32, policies })
        };
        let prefix = match (kind, rules(true).is_some()) {
            (Kind::Allow, true) => DRY_RUN_ALLOW,
            (Kind::Deny, true) => DRY_RUN_DENY,
            _ => "",
        };
        out.push((rules(false), rules(true), prefix.to_string()));
    }
    out
}

/// The RBAC policies of one AuthorizationPolicy, named as Istio names them
/// (after `prefix`, CUSTOM's); `strict` (ALLOW) leaves out a rule with a
/// part Envoy cannot check here, else the part is left out.
fn rbac_policies(policy: &AppliedPolicy, prefix: &str, strict: bool, tcp: bool, peer: Peer) -> Vec<NamedPolicy> {
    let name = |i: usize| format!("{prefix}ns[{}]-policy[{}]-rule[{i}]", policy.namespace, policy.name);
    if policy.spec.rules.is_empty() {
        return vec![NamedPolicy { name: name(0), policy: Some(match_never()) }];
    }
    policy
        .spec
        .rules
        .iter()
        .enumerate()
        .filter_map(|(i, rule)| {
            let built = RuleBuilder { namespace: &policy.namespace, tcp, strict, peer }.rule(rule)?;
            Some(NamedPolicy { name: name(i), policy: Some(built) })
        })
        .collect()
}

/// Nothing matches it: Istio's policy for an ALLOW (or DENY) without rules.
fn match_never() -> Policy {
    Policy {
        permissions: vec![Permission {
            rule: Some(permission::Rule::NotRule(Box::new(Permission { rule: Some(permission::Rule::Any(true)) }))),
        }],
        principals: vec![Principal {
            identifier: Some(principal::Identifier::NotId(Box::new(Principal {
                identifier: Some(principal::Identifier::Any(true)),
            }))),
        }],
        ..Default::default()
    }
}

/// Builds the RBAC policy of one rule.
struct RuleBuilder<'a> {
    /// The policy's namespace (`serviceAccounts` without one are in it).
    namespace: &'a str,
    /// For a TCP port: HTTP attributes cannot be checked.
    tcp: bool,
    /// An ALLOW rule: a part that cannot be checked leaves the rule out
    /// (else the part is left out).
    strict: bool,
    /// Where the peer's identity is read.
    peer: Peer,
}

/// A part of a rule Envoy cannot check here.
struct Unchecked;

/// What a rule's parts are built of: RBAC principals (who sends the
/// request) and permissions (what it asks for), which combine alike.
trait RbacMatcher: Sized {
    /// Matches when any of `matchers` does.
    fn any_of(matchers: Vec<Self>) -> Self;
    /// Matches when `self` does not.
    fn negated(self) -> Self;
}

/// Appends "any of `values`" and "none of `not`", each value as `f` makes
/// it (a value `f` cannot make is left out): one field of a `from`, a `to`
/// or a `when`, the same way on either side.
fn one_of_none_of<M: RbacMatcher>(and: &mut Vec<M>, values: &[String], not: &[String], f: impl Fn(&str) -> Option<M>) {
    let any: Vec<M> = values.iter().filter_map(|v| f(v)).collect();
    if !any.is_empty() {
        and.push(M::any_of(any));
    }
    let none: Vec<M> = not.iter().filter_map(|v| f(v)).collect();
    if !none.is_empty() {
        and.push(M::any_of(none).negated());
    }
}

impl RuleBuilder<'_> {
    /// A part of a rule that cannot be checked here: an ALLOW rule is left
    /// out (`Err`), any other rule is kept without the part (`Ok`).
    fn unchecked(&self) -> Result<(), Unchecked> {
        if self.strict { Err(Unchecked) } else { Ok(()) }
    }

    /// The RBAC policy of `rule`; `None` when it is an ALLOW rule with a part Envoy cannot check here.
    fn rule(&self, rule: &AuthorizationRule) -> Option<Policy> {
        let mut base_permissions: Vec<Permission> = Vec::new();
        let mut base_principals: Vec<Principal> = Vec::new();
        for condition in &rule.when {
            match self.condition(condition) {
                Ok((mut permissions, mut principals)) => {
                    base_permissions.append(&mut permissions);
                    base_principals.append(&mut principals);
                }
                Err(Unchecked) if self.strict => return None,
                Err(Unchecked) => {}
            }
        }
        let mut principals = Vec::new();
        for from in &rule.from {
            let mut and = match from.source.as_ref().map(|s| self.source(s)).transpose() {
                Ok(ids) => ids.unwrap_or_default(),
                Err(Unchecked) => return None,
            };
            and.extend(base_principals.iter().cloned());
            principals.push(principal_and(and));
        }
        if rule.from.is_empty() {
            principals.push(principal_and(base_principals));
        }
        let mut permissions = Vec::new();
        for to in &rule.to {
            let mut and = match to.operation.as_ref().map(|o| self.operation(o)).transpose() {
                Ok(rules) => rules.unwrap_or_default(),
                Err(Unchecked) => return None,
            };
            and.extend(base_permissions.iter().cloned());
            permissions.push(permission_and(and));
        }
        if rule.to.is_empty() {
            permissions.push(permission_and(base_permissions));
        }
        Some(Policy { permissions, principals, ..Default::default() })
    }
}

/// `envoy.config.rbac.v3.RBAC` with its policies in name order: the same
/// wire shape (a map is a repeated entry of key 1 and value 2).
#[derive(Clone, PartialEq, prost::Message)]
struct RbacRules {
    #[prost(int32, tag = "1")]
    action: i32,
    #[prost(message, repeated, tag = "2")]
    policies: Vec<NamedPolicy>,
}

/// One entry of the `policies` map.
#[derive(Clone, PartialEq, prost::Message)]
struct NamedPolicy {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(message, optional, tag = "2")]
    policy: Option<Policy>,
}

/// `envoy.extensions.filters.http.rbac.v3.RBAC`, the fields set here.
#[derive(Clone, PartialEq, prost::Message)]
struct HttpRbac {
    #[prost(message, optional, tag = "1")]
    rules: Option<RbacRules>,
    #[prost(message, optional, tag = "2")]
    shadow_rules: Option<RbacRules>,
    #[prost(string, tag = "3")]
    shadow_rules_stat_prefix: String,
}

/// `envoy.extensions.filters.network.rbac.v3.RBAC`, the fields set here.
#[derive(Clone, PartialEq, prost::Message)]
struct NetworkRbac {
    #[prost(message, optional, tag = "1")]
    rules: Option<RbacRules>,
    #[prost(message, optional, tag = "2")]
    shadow_rules: Option<RbacRules>,
    #[prost(string, tag = "3")]
    stat_prefix: String,
    #[prost(string, tag = "5")]
    shadow_rules_stat_prefix: String,
}
