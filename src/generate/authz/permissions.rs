//! The `to` side of a rule: what the request asks for, as RBAC
//! permissions. Hosts, methods and paths are HTTP attributes: on a TCP port
//! they cannot be checked, and the rule fails closed (as the module `authz`
//! says).
//! A path with Istio's templates (`{*}`, `{**}`) becomes Envoy's URI
//! template matcher, as Istio makes it. The `when` conditions that become
//! permissions are built with the same pieces.

use envoy_types::pb::envoy::config::core::v3::TypedExtensionConfig;
use envoy_types::pb::envoy::config::rbac::v3::{Permission, permission};
use envoy_types::pb::envoy::extensions::path::r#match::uri_template::v3::UriTemplateMatchConfig;
use envoy_types::pb::envoy::r#type::matcher::v3::{PathMatcher, path_matcher};

use super::wildcard::{header_matcher, string_matcher};
use super::{Peer, RbacMatcher, RuleBuilder, Unchecked, one_of_none_of};
use crate::config::istio::{ANY_SEGMENTS, ONE_SEGMENT, Operation};
use crate::generate::proto;

/// The name Istio gives the URI template matcher of a permission.
const URI_TEMPLATE: &str = "uri-template";

impl RuleBuilder<'_> {
    /// The permission conditions of an operation, in Istio's order.
    pub(super) fn operation(&self, o: &Operation) -> Result<Vec<Permission>, Unchecked> {
        let mut and = Vec::new();
        let http = [(&o.hosts, &o.not_hosts), (&o.methods, &o.not_methods), (&o.paths, &o.not_paths)];
        if self.tcp && http.iter().any(|(values, not)| !values.is_empty() || !not.is_empty()) {
            if self.strict {
                return Err(Unchecked);
            }
        } else {
            one_of_none_of(&mut and, &o.hosts, &o.not_hosts, |v| {
                Some(rule(permission::Rule::Header(header_matcher(":authority", v, true))))
            });
            one_of_none_of(&mut and, &o.methods, &o.not_methods, |v| {
                Some(rule(permission::Rule::Header(header_matcher(":method", v, false))))
            });
            let templated = |v: &String| v.contains(ONE_SEGMENT) || v.contains(ANY_SEGMENTS);
            if self.peer == Peer::Grpc && o.paths.iter().chain(&o.not_paths).any(templated) {
                // gRPC has no URI template matcher.
                self.unchecked()?;
            } else {
                one_of_none_of(&mut and, &o.paths, &o.not_paths, |v| Some(path_permission(v)));
            }
        }
        one_of_none_of(&mut and, &o.ports, &o.not_ports, |v| {
            v.parse().ok().map(|p| rule(permission::Rule::DestinationPort(p)))
        });
        Ok(and)
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

/// A permission of one rule (Envoy's `Permission`).
pub(super) fn rule(rule: permission::Rule) -> Permission {
    Permission { rule: Some(rule) }
}

/// All of `rules`; none means any request.
pub(super) fn permission_and(rules: Vec<Permission>) -> Permission {
    if rules.is_empty() {
        return rule(permission::Rule::Any(true));
    }
    rule(permission::Rule::AndRules(permission::Set { rules }))
}

impl RbacMatcher for Permission {
    fn any_of(rules: Vec<Self>) -> Self {
        rule(permission::Rule::OrRules(permission::Set { rules }))
    }

    fn negated(self) -> Self {
        rule(permission::Rule::NotRule(Box::new(self)))
    }
}
