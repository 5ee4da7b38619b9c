//! AuthorizationPolicy → Envoy's RBAC filters on a workload's inbound
//! chains, as Istio builds them (`pilot/pkg/security/authz`).
//!
//! Per action, one filter: AUDIT (RBAC `LOG`), then DENY, then ALLOW, so a
//! request any DENY rule matches is refused whatever an ALLOW rule says,
//! and with any ALLOW policy a request no ALLOW rule matches is refused
//! too. A CUSTOM policy names an external authorizer meshpush does not
//! have: its rules deny, as Istio's do for a provider it does not know.
//! Each rule is one RBAC policy `ns[NS]-policy[NAME]-rule[I]`: any of its
//! `from` (their fields all matching, values of one field any) and any of
//! its `to`, and every `when`. A policy without rules matches nothing (an
//! ALLOW without rules allows nothing). Dry-run policies go into the
//! filter's shadow rules: evaluated and counted, not enforced.
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
//! left out (it allows nothing), a DENY rule is kept without it (it denies
//! more).
//!
//! Invariant: the filters' bytes are a function of the policies only. The
//! RBAC proto keeps its policies in a map, which prost encodes in hash
//! order; so the filter configs are encoded from mirror messages of the
//! same wire shape with the policies sorted by name.

use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::TypedExtensionConfig;
use envoy_types::pb::envoy::config::listener::v3::{Filter, filter};
use envoy_types::pb::envoy::config::rbac::v3::{
    MetadataSource, Permission, Policy, Principal, SourcedMetadata, permission, principal, rbac::Action,
};
use envoy_types::pb::envoy::config::route::v3::{HeaderMatcher, header_matcher::HeaderMatchSpecifier};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{HttpFilter, http_filter};
use envoy_types::pb::envoy::extensions::path::r#match::uri_template::v3::UriTemplateMatchConfig;
use envoy_types::pb::envoy::r#type::matcher::v3::{
    ListMatcher, MetadataMatcher, OrMatcher, PathMatcher, RegexMatcher, StringMatcher, ValueMatcher, list_matcher,
    metadata_matcher, path_matcher, string_matcher::MatchPattern, value_matcher,
};
use envoy_types::pb::google::protobuf::Any;

use super::jwt::{JWT_AUTHN, PAYLOAD_METADATA};
use super::proto;
use crate::config::istio::{AuthorizationRule, Condition, Operation, Source};
use crate::push::index::AppliedPolicy;

use crate::config::istio::{ANY_SEGMENTS, ONE_SEGMENT};
/// The name Istio gives the URI template matcher of a permission.
const URI_TEMPLATE: &str = "uri-template";

/// Envoy's HTTP RBAC filter.
pub const HTTP_RBAC: &str = "envoy.filters.http.rbac";
/// Envoy's network RBAC filter.
pub const NETWORK_RBAC: &str = "envoy.filters.network.rbac";
/// The stat prefix of the network filter, as Istio sets it.
const TCP_STAT_PREFIX: &str = "tcp.";
/// Stat prefixes of dry-run rules, as Istio sets them.
const DRY_RUN_ALLOW: &str = "istio_dry_run_allow_";
const DRY_RUN_DENY: &str = "istio_dry_run_deny_";

/// The HTTP RBAC filters `policies` make, in the order they run.
pub fn http_filters(policies: &[Arc<AppliedPolicy>]) -> Vec<HttpFilter> {
    groups(policies, false)
        .into_iter()
        .map(|(rules, shadow, prefix)| {
            let config = HttpRbac { rules, shadow_rules: shadow, shadow_rules_stat_prefix: prefix };
            HttpFilter {
                name: HTTP_RBAC.to_string(),
                config_type: Some(http_filter::ConfigType::TypedConfig(packed(
                    "envoy.extensions.filters.http.rbac.v3.RBAC",
                    &config,
                ))),
                ..Default::default()
            }
        })
        .collect()
}

/// The network RBAC filters `policies` make for a TCP port, in order.
pub fn network_filters(policies: &[Arc<AppliedPolicy>]) -> Vec<Filter> {
    groups(policies, true)
        .into_iter()
        .map(|(rules, shadow, prefix)| {
            let config = NetworkRbac {
                rules,
                shadow_rules: shadow,
                stat_prefix: TCP_STAT_PREFIX.to_string(),
                shadow_rules_stat_prefix: prefix,
            };
            Filter {
                name: NETWORK_RBAC.to_string(),
                config_type: Some(filter::ConfigType::TypedConfig(packed(
                    "envoy.extensions.filters.network.rbac.v3.RBAC",
                    &config,
                ))),
            }
        })
        .collect()
}

fn packed(name: &str, message: &impl prost::Message) -> Any {
    Any { type_url: format!("type.googleapis.com/{name}"), value: message.encode_to_vec() }
}

/// What a policy's action makes of its rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Audit,
    Deny,
    Allow,
}

fn kind_of(policy: &AppliedPolicy) -> Kind {
    match policy.spec.action.as_deref().unwrap_or("ALLOW") {
        "AUDIT" => Kind::Audit,
        "DENY" | "CUSTOM" => Kind::Deny,
        _ => Kind::Allow,
    }
}

/// Per action present, in order: `(rules, shadow rules, shadow stat prefix)`.
fn groups(policies: &[Arc<AppliedPolicy>], tcp: bool) -> Vec<(Option<RbacRules>, Option<RbacRules>, String)> {
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
            let mut policies: Vec<NamedPolicy> = chosen.iter().flat_map(|p| rbac_policies(p, kind, tcp)).collect();
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

/// The RBAC policies of one AuthorizationPolicy, named as Istio names them.
fn rbac_policies(policy: &AppliedPolicy, kind: Kind, tcp: bool) -> Vec<NamedPolicy> {
    let name = |i: usize| format!("ns[{}]-policy[{}]-rule[{i}]", policy.namespace, policy.name);
    if policy.spec.rules.is_empty() {
        return vec![NamedPolicy { name: name(0), policy: Some(match_never()) }];
    }
    policy
        .spec
        .rules
        .iter()
        .enumerate()
        .filter_map(|(i, rule)| {
            let built = RuleBuilder { namespace: &policy.namespace, tcp, strict: kind == Kind::Allow }.rule(rule)?;
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
}

/// A part of a rule Envoy cannot check here.
struct Unchecked;

impl RuleBuilder<'_> {
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

    /// The principal conditions of a source, in Istio's order.
    fn source(&self, s: &Source) -> Result<Vec<Principal>, Unchecked> {
        let mut and = Vec::new();
        self.ids(&mut and, &s.principals, &s.not_principals, |v| Some(authenticated(spiffe_matcher(v))));
        self.request_principals(&mut and, &s.request_principals, &s.not_request_principals)?;
        self.ids(&mut and, &s.service_accounts, &s.not_service_accounts, |v| {
            Some(authenticated(regex(&service_account_regex(self.namespace, v))))
        });
        self.ids(&mut and, &s.trust_domains, &s.not_trust_domains, |v| Some(authenticated(trust_domain_matcher(v))));
        self.ids(&mut and, &s.namespaces, &s.not_namespaces, |v| Some(authenticated(namespace_matcher(v))));
        self.ids(&mut and, &s.remote_ip_blocks, &s.not_remote_ip_blocks, |v| {
            proto::cidr_range(v).map(|c| id(principal::Identifier::RemoteIp(c)))
        });
        self.ids(&mut and, &s.ip_blocks, &s.not_ip_blocks, |v| {
            proto::cidr_range(v).map(|c| id(principal::Identifier::DirectRemoteIp(c)))
        });
        Ok(and)
    }

    /// The permission conditions of an operation, in Istio's order.
    fn operation(&self, o: &Operation) -> Result<Vec<Permission>, Unchecked> {
        let mut and = Vec::new();
        let http = [(&o.hosts, &o.not_hosts), (&o.methods, &o.not_methods), (&o.paths, &o.not_paths)];
        if self.tcp && http.iter().any(|(values, not)| !values.is_empty() || !not.is_empty()) {
            if self.strict {
                return Err(Unchecked);
            }
        } else {
            self.rules(&mut and, &o.hosts, &o.not_hosts, |v| {
                Some(rule(permission::Rule::Header(header_matcher(":authority", v, true))))
            });
            self.rules(&mut and, &o.methods, &o.not_methods, |v| {
                Some(rule(permission::Rule::Header(header_matcher(":method", v, false))))
            });
            self.rules(&mut and, &o.paths, &o.not_paths, |v| Some(path_permission(v)));
        }
        self.rules(&mut and, &o.ports, &o.not_ports, |v| {
            v.parse().ok().map(|p| rule(permission::Rule::DestinationPort(p)))
        });
        Ok(and)
    }

    /// `(permissions, principals)` of a `when` condition.
    fn condition(&self, c: &Condition) -> Result<(Vec<Permission>, Vec<Principal>), Unchecked> {
        let (mut permissions, mut principals) = (Vec::new(), Vec::new());
        let (values, not) = (&c.values, &c.not_values);
        match c.key.as_str() {
            "destination.ip" => self.rules(&mut permissions, values, not, |v| {
                proto::cidr_range(v).map(|r| rule(permission::Rule::DestinationIp(r)))
            }),
            "destination.port" => self.rules(&mut permissions, values, not, |v| {
                v.parse().ok().map(|p| rule(permission::Rule::DestinationPort(p)))
            }),
            "connection.sni" => self.rules(&mut permissions, values, not, |v| {
                Some(rule(permission::Rule::RequestedServerName(string_matcher(v, ""))))
            }),
            "source.ip" => self.ids(&mut principals, values, not, |v| {
                proto::cidr_range(v).map(|c| id(principal::Identifier::DirectRemoteIp(c)))
            }),
            "remote.ip" => self.ids(&mut principals, values, not, |v| {
                proto::cidr_range(v).map(|c| id(principal::Identifier::RemoteIp(c)))
            }),
            "source.namespace" => self.ids(&mut principals, values, not, |v| Some(authenticated(namespace_matcher(v)))),
            "source.trustDomain" => {
                self.ids(&mut principals, values, not, |v| Some(authenticated(trust_domain_matcher(v))))
            }
            "source.serviceAccount" => self.ids(&mut principals, values, not, |v| {
                Some(authenticated(regex(&service_account_regex(self.namespace, v))))
            }),
            "source.principal" => self.ids(&mut principals, values, not, |v| Some(authenticated(spiffe_matcher(v)))),
            "request.auth.principal" => self.request_principals(&mut principals, values, not)?,
            "request.auth.audiences" => self.claims(&mut principals, &["aud"], values, not)?,
            "request.auth.presenter" => self.claims(&mut principals, &["azp"], values, not)?,
            key => match key.strip_prefix("request.headers[").and_then(|k| k.strip_suffix(']')) {
                Some(_) if self.tcp => return Err(Unchecked),
                Some(header) => self.ids(&mut principals, values, not, |v| {
                    Some(id(principal::Identifier::Header(header_matcher(header, v, false))))
                }),
                None => match key.strip_prefix("request.auth.claims").and_then(claim_path) {
                    Some(path) => {
                        let path: Vec<&str> = path.iter().map(String::as_str).collect();
                        self.claims(&mut principals, &path, values, not)?
                    }
                    None => match filter_metadata_key(key) {
                        Some((filter, field)) => {
                            if !values.is_empty() {
                                permissions.push(filter_metadata(filter, field, values));
                            }
                            if !not.is_empty() {
                                let none = filter_metadata(filter, field, not);
                                permissions.push(rule(permission::Rule::NotRule(Box::new(none))));
                            }
                        }
                        None => return Err(Unchecked),
                    },
                },
            },
        }
        Ok((permissions, principals))
    }

    /// Request principals (`ISS/SUB`, with Istio's wildcards) as the
    /// verified token's `iss` and `sub`. HTTP only.
    fn request_principals(&self, and: &mut Vec<Principal>, values: &[String], not: &[String]) -> Result<(), Unchecked> {
        if values.is_empty() && not.is_empty() {
            return Ok(());
        }
        if self.tcp {
            return if self.strict { Err(Unchecked) } else { Ok(()) };
        }
        self.ids(and, values, not, |v| Some(request_principal(v)));
        Ok(())
    }

    /// A claim of the verified token (at `path` inside the payload) is one
    /// of `values` (a list claim: holds one of them) and none of `not`. HTTP only.
    fn claims(
        &self,
        and: &mut Vec<Principal>,
        path: &[&str],
        values: &[String],
        not: &[String],
    ) -> Result<(), Unchecked> {
        if self.tcp {
            return if self.strict { Err(Unchecked) } else { Ok(()) };
        }
        if !values.is_empty() {
            and.push(claim_matcher(path, values));
        }
        if !not.is_empty() {
            and.push(id(principal::Identifier::NotId(Box::new(claim_matcher(path, not)))));
        }
        Ok(())
    }

    /// Appends "any of `values`" and "none of `not`" as principals.
    fn ids(&self, and: &mut Vec<Principal>, values: &[String], not: &[String], f: impl Fn(&str) -> Option<Principal>) {
        let any: Vec<Principal> = values.iter().filter_map(|v| f(v)).collect();
        if !any.is_empty() {
            and.push(id(principal::Identifier::OrIds(principal::Set { ids: any })));
        }
        let none: Vec<Principal> = not.iter().filter_map(|v| f(v)).collect();
        if !none.is_empty() {
            let or = id(principal::Identifier::OrIds(principal::Set { ids: none }));
            and.push(id(principal::Identifier::NotId(Box::new(or))));
        }
    }

    /// Appends "any of `values`" and "none of `not`" as permissions.
    fn rules(
        &self,
        and: &mut Vec<Permission>,
        values: &[String],
        not: &[String],
        f: impl Fn(&str) -> Option<Permission>,
    ) {
        let any: Vec<Permission> = values.iter().filter_map(|v| f(v)).collect();
        if !any.is_empty() {
            and.push(rule(permission::Rule::OrRules(permission::Set { rules: any })));
        }
        let none: Vec<Permission> = not.iter().filter_map(|v| f(v)).collect();
        if !none.is_empty() {
            let or = rule(permission::Rule::OrRules(permission::Set { rules: none }));
            and.push(rule(permission::Rule::NotRule(Box::new(or))));
        }
    }
}

/// A path with Istio's templates (`{*}` one segment, `{**}` the rest) as
/// Envoy's URI template matcher, else as a path matcher with Istio's
/// wildcards.
fn path_permission(value: &str) -> Permission {
    if value.contains(ONE_SEGMENT) || value.contains(ANY_SEGMENTS) {
        let template =
            UriTemplateMatchConfig { path_template: value.replace(ANY_SEGMENTS, "**").replace(ONE_SEGMENT, "*") };
        return rule(permission::Rule::UriTemplate(TypedExtensionConfig {
            name: URI_TEMPLATE.to_string(),
            typed_config: Some(proto::any(&template)),
        }));
    }
    rule(permission::Rule::UrlPath(PathMatcher { rule: Some(path_matcher::Rule::Path(string_matcher(value, ""))) }))
}

/// `experimental.envoy.filters.NAME[FIELD]` → `(envoy.filters.NAME, FIELD)`.
fn filter_metadata_key(key: &str) -> Option<(&str, &str)> {
    let rest = key.strip_prefix("experimental.")?.strip_suffix(']')?;
    let (filter, field) = rest.split_once('[')?;
    (filter.starts_with("envoy.filters.") && !field.is_empty()).then_some((filter, field))
}

/// The request's dynamic metadata of `filter` at `field` is one of
/// `values`: `[V]` a list holding V, else the value itself (Istio's
/// wildcards).
fn filter_metadata(filter: &str, field: &str, values: &[String]) -> Permission {
    let mut any: Vec<ValueMatcher> = values
        .iter()
        .map(|v| match v.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
            Some(element) => ValueMatcher {
                match_pattern: Some(value_matcher::MatchPattern::ListMatch(Box::new(ListMatcher {
                    match_pattern: Some(list_matcher::MatchPattern::OneOf(Box::new(string_value(string_matcher(
                        element, "",
                    ))))),
                }))),
            },
            None => string_value(string_matcher(v, "")),
        })
        .collect();
    let value = if any.len() == 1 {
        any.remove(0)
    } else {
        ValueMatcher { match_pattern: Some(value_matcher::MatchPattern::OrMatch(OrMatcher { value_matchers: any })) }
    };
    let matcher = MetadataMatcher {
        filter: filter.to_string(),
        path: vec![metadata_matcher::PathSegment {
            segment: Some(metadata_matcher::path_segment::Segment::Key(field.to_string())),
        }],
        value: Some(value),
        ..Default::default()
    };
    rule(permission::Rule::SourcedMetadata(SourcedMetadata {
        metadata_matcher: Some(matcher),
        metadata_source: MetadataSource::Dynamic as i32,
    }))
}

/// `request.auth.claims[A][B]…` → `[A, B, …]` (the text after the prefix).
fn claim_path(brackets: &str) -> Option<Vec<String>> {
    let mut path = Vec::new();
    let mut rest = brackets;
    while !rest.is_empty() {
        let inner = rest.strip_prefix('[')?;
        let end = inner.find(']')?;
        if end == 0 {
            return None;
        }
        path.push(inner[..end].to_string());
        rest = &inner[end + 1..];
    }
    (!path.is_empty()).then_some(path)
}

/// A matcher on the verified token's payload at `path`.
fn payload_matcher(path: &[&str], value: ValueMatcher) -> Principal {
    let segments = std::iter::once(PAYLOAD_METADATA).chain(path.iter().copied());
    let matcher = MetadataMatcher {
        filter: JWT_AUTHN.to_string(),
        path: segments
            .map(|key| metadata_matcher::PathSegment {
                segment: Some(metadata_matcher::path_segment::Segment::Key(key.to_string())),
            })
            .collect(),
        value: Some(value),
        ..Default::default()
    };
    // The request's dynamic metadata (`sourced_metadata`: Istio's
    // `metadata` field is deprecated in Envoy).
    id(principal::Identifier::SourcedMetadata(SourcedMetadata {
        metadata_matcher: Some(matcher),
        metadata_source: MetadataSource::Dynamic as i32,
    }))
}

fn string_value(m: StringMatcher) -> ValueMatcher {
    ValueMatcher { match_pattern: Some(value_matcher::MatchPattern::StringMatch(m)) }
}

/// `ISS/SUB` (split at the last `/`: an issuer may be a URL), as Istio
/// matches it: `*` any token, `*X` a suffix of the subject (or, without a
/// `/`, of the whole), `X*` a prefix of it.
fn request_principal(value: &str) -> Principal {
    let any = || regex(".+");
    let exact = |v: &str| StringMatcher { match_pattern: Some(MatchPattern::Exact(v.into())), ..Default::default() };
    let prefix = |v: &str| StringMatcher { match_pattern: Some(MatchPattern::Prefix(v.into())), ..Default::default() };
    let suffix = |v: &str| StringMatcher { match_pattern: Some(MatchPattern::Suffix(v.into())), ..Default::default() };
    let split = value.rfind('/').map(|i| (&value[..i], &value[i + 1..]));
    let (iss, sub) = match (value, split) {
        ("*", _) => (any(), any()),
        (v, Some((iss, sub))) if v.starts_with('*') => (if iss == "*" { any() } else { suffix(&iss[1..]) }, exact(sub)),
        (v, None) if v.starts_with('*') => (any(), suffix(&v[1..])),
        (v, Some((iss, sub))) if v.ends_with('*') => {
            (exact(iss), if sub == "*" { any() } else { prefix(&sub[..sub.len() - 1]) })
        }
        (v, None) if v.ends_with('*') => (prefix(&v[..v.len() - 1]), any()),
        (_, Some((iss, sub))) => (exact(iss), exact(sub)),
        (v, None) => (exact(v), exact("")),
    };
    principal_and(vec![payload_matcher(&["iss"], string_value(iss)), payload_matcher(&["sub"], string_value(sub))])
}

/// A claim holds one of `values`: as a list (one element matches) or as a
/// plain value.
fn claim_matcher(path: &[&str], values: &[String]) -> Principal {
    let mut any: Vec<ValueMatcher> = values.iter().map(|v| string_value(string_matcher(v, ""))).collect();
    let one = if any.len() == 1 {
        any.remove(0)
    } else {
        ValueMatcher { match_pattern: Some(value_matcher::MatchPattern::OrMatch(OrMatcher { value_matchers: any })) }
    };
    let list = ValueMatcher {
        match_pattern: Some(value_matcher::MatchPattern::ListMatch(Box::new(ListMatcher {
            match_pattern: Some(list_matcher::MatchPattern::OneOf(Box::new(one.clone()))),
        }))),
    };
    let either = OrMatcher { value_matchers: vec![list, one] };
    payload_matcher(path, ValueMatcher { match_pattern: Some(value_matcher::MatchPattern::OrMatch(either)) })
}

fn id(identifier: principal::Identifier) -> Principal {
    Principal { identifier: Some(identifier) }
}

fn rule(rule: permission::Rule) -> Permission {
    Permission { rule: Some(rule) }
}

fn principal_and(ids: Vec<Principal>) -> Principal {
    if ids.is_empty() {
        return id(principal::Identifier::Any(true));
    }
    id(principal::Identifier::AndIds(principal::Set { ids }))
}

fn permission_and(rules: Vec<Permission>) -> Permission {
    if rules.is_empty() {
        return rule(permission::Rule::Any(true));
    }
    rule(permission::Rule::AndRules(permission::Set { rules }))
}

fn authenticated(m: StringMatcher) -> Principal {
    id(principal::Identifier::Authenticated(principal::Authenticated { principal_name: Some(m) }))
}

/// Istio's wildcard strings: `*` any (present), `*x` suffix, `x*` prefix,
/// else exact; `prefix` goes before the value (a suffix match under a
/// prefix becomes a regular expression).
fn string_matcher(value: &str, prefix: &str) -> StringMatcher {
    let pattern = if value == "*" {
        return regex(".+");
    } else if let Some(suffix) = value.strip_prefix('*') {
        if prefix.is_empty() {
            MatchPattern::Suffix(suffix.to_string())
        } else {
            return regex(&format!("{}.*{}", regex_quote(prefix), regex_quote(suffix)));
        }
    } else if let Some(start) = value.strip_suffix('*') {
        MatchPattern::Prefix(format!("{prefix}{start}"))
    } else {
        MatchPattern::Exact(format!("{prefix}{value}"))
    };
    StringMatcher { match_pattern: Some(pattern), ..Default::default() }
}

/// A principal (`cluster.local/ns/NS/sa/SA`) as the peer certificate's URI.
fn spiffe_matcher(value: &str) -> StringMatcher {
    string_matcher(value, "spiffe://")
}

fn namespace_matcher(value: &str) -> StringMatcher {
    let pattern: Vec<String> = value.split('*').map(regex_quote).collect();
    regex(&format!(".*/ns/{}/.*", pattern.join(".*")))
}

fn trust_domain_matcher(value: &str) -> StringMatcher {
    if value == "*" {
        return StringMatcher { match_pattern: Some(MatchPattern::Prefix("spiffe://".into())), ..Default::default() };
    }
    match value.split_once('*') {
        None => StringMatcher {
            match_pattern: Some(MatchPattern::Prefix(format!("spiffe://{value}/"))),
            ..Default::default()
        },
        Some((head, tail)) => regex(&format!("spiffe://{}[^/]*{}/.*", regex_quote(head), regex_quote(tail))),
    }
}

/// `NS/SA`, or `SA` in the policy's namespace.
fn service_account_regex(namespace: &str, value: &str) -> String {
    let (ns, sa) = value.split_once('/').unwrap_or((namespace, value));
    format!("spiffe://.+/ns/{}/(.+/|)sa/{}(/.+)?", regex_quote(ns), regex_quote(sa))
}

fn regex(expression: &str) -> StringMatcher {
    StringMatcher {
        match_pattern: Some(MatchPattern::SafeRegex(RegexMatcher {
            regex: expression.to_string(),
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn regex_quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A header matcher with Istio's wildcards (`*` present, `*x`, `x*`).
fn header_matcher(name: &str, value: &str, ignore_case: bool) -> HeaderMatcher {
    let specifier = if value == "*" {
        HeaderMatchSpecifier::PresentMatch(true)
    } else {
        let mut m = string_matcher(value, "");
        m.ignore_case = ignore_case;
        HeaderMatchSpecifier::StringMatch(m)
    };
    HeaderMatcher { name: name.to_string(), header_match_specifier: Some(specifier), ..Default::default() }
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

#[cfg(test)]
mod tests {
    use envoy_types::pb::envoy::extensions::filters::http::rbac::v3::Rbac as EnvoyHttpRbac;
    use prost::Message as _;

    use super::*;

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
        assert_eq!(
            exact(spiffe_matcher("cluster.local/*")),
            Some(MatchPattern::Prefix("spiffe://cluster.local/".into()))
        );
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
}
