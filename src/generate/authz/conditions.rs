//! The `when` side of a rule: each condition key as the principals or
//! permissions it stands for, as Istio maps them. Source keys build what a
//! `from` would, destination keys what a `to` would; `request.auth.*` keys
//! match the verified token's claims, and `experimental.envoy.filters.*`
//! keys another filter's dynamic metadata. A key Envoy cannot check here
//! is `Unchecked`, and the rule fails closed.

use envoy_types::pb::envoy::config::rbac::v3::{
    MetadataSource, Permission, Principal, SourcedMetadata, permission, principal,
};
use envoy_types::pb::envoy::r#type::matcher::v3::{
    ListMatcher, MetadataMatcher, OrMatcher, ValueMatcher, list_matcher, metadata_matcher, value_matcher,
};

use super::permissions::rule;
use super::principals::{
    id, namespace_matcher, payload_matcher, service_account_regex, spiffe_matcher, trust_domain_matcher,
};
use super::wildcard::{header_matcher, regex, string_matcher, string_value};
use super::{Peer, RuleBuilder, Unchecked, one_of_none_of};
use crate::config::istio::Condition;
use crate::generate::proto;

impl RuleBuilder<'_> {
    /// `(permissions, principals)` of a `when` condition.
    pub(super) fn condition(&self, c: &Condition) -> Result<(Vec<Permission>, Vec<Principal>), Unchecked> {
        let (mut permissions, mut principals) = (Vec::new(), Vec::new());
        let (values, not) = (&c.values, &c.not_values);
        match c.key.as_str() {
            "destination.ip" => one_of_none_of(&mut permissions, values, not, |v| {
                proto::cidr_range(v).map(|r| rule(permission::Rule::DestinationIp(r)))
            }),
            "destination.port" => one_of_none_of(&mut permissions, values, not, |v| {
                v.parse().ok().map(|p| rule(permission::Rule::DestinationPort(p)))
            }),
            // gRPC sees no SNI (it matches only the empty name).
            "connection.sni" if self.peer == Peer::Grpc => self.unchecked()?,
            "connection.sni" => one_of_none_of(&mut permissions, values, not, |v| {
                Some(rule(permission::Rule::RequestedServerName(string_matcher(v, ""))))
            }),
            "source.ip" => one_of_none_of(&mut principals, values, not, |v| {
                proto::cidr_range(v).map(|c| id(principal::Identifier::DirectRemoteIp(c)))
            }),
            "remote.ip" => one_of_none_of(&mut principals, values, not, |v| {
                proto::cidr_range(v).map(|c| id(principal::Identifier::RemoteIp(c)))
            }),
            "source.namespace" => {
                one_of_none_of(&mut principals, values, not, |v| Some(self.peer(namespace_matcher(v))))
            }
            "source.trustDomain" => {
                one_of_none_of(&mut principals, values, not, |v| Some(self.peer(trust_domain_matcher(v))))
            }
            "source.serviceAccount" => one_of_none_of(&mut principals, values, not, |v| {
                Some(self.peer(regex(&service_account_regex(self.namespace, v))))
            }),
            "source.principal" => one_of_none_of(&mut principals, values, not, |v| Some(self.peer(spiffe_matcher(v)))),
            "request.auth.principal" => self.request_principals(&mut principals, values, not)?,
            "request.auth.audiences" => self.claims(&mut principals, &["aud"], values, not)?,
            "request.auth.presenter" => self.claims(&mut principals, &["azp"], values, not)?,
            key => match key.strip_prefix("request.headers[").and_then(|k| k.strip_suffix(']')) {
                Some(_) if self.tcp => return Err(Unchecked),
                Some(header) => one_of_none_of(&mut principals, values, not, |v| {
                    Some(id(principal::Identifier::Header(header_matcher(header, v, false))))
                }),
                None => match key.strip_prefix("request.auth.claims").and_then(claim_path) {
                    Some(path) => {
                        let path: Vec<&str> = path.iter().map(String::as_str).collect();
                        self.claims(&mut principals, &path, values, not)?
                    }
                    None => match filter_metadata_key(key) {
                        // gRPC has no filters that leave metadata.
                        Some(_) if self.peer == Peer::Grpc => self.unchecked()?,
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

    /// A claim of the verified token (at `path` inside the payload) is one
    /// of `values` (a list claim: holds one of them) and none of `not`. HTTP only.
    fn claims(
        &self,
        and: &mut Vec<Principal>,
        path: &[&str],
        values: &[String],
        not: &[String],
    ) -> Result<(), Unchecked> {
        if self.tcp || self.peer == Peer::Grpc {
            return self.unchecked();
        }
        if !values.is_empty() {
            and.push(claim_matcher(path, values));
        }
        if !not.is_empty() {
            and.push(id(principal::Identifier::NotId(Box::new(claim_matcher(path, not)))));
        }
        Ok(())
    }
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
