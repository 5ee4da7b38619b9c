//! The `from` side of a rule: who sends the request, as RBAC principals.
//! A source's peer identities (principals, service accounts, trust
//! domains, namespaces) match the peer certificate's SPIFFE URI, its IP
//! blocks the connection's addresses, and its request principals the
//! verified token's `iss` and `sub` that `jwt_authn` leaves in the request's
//! dynamic metadata. The `when` conditions on the same attributes build
//! their principals here too, so both sides match alike.

use envoy_types::pb::envoy::config::rbac::v3::{MetadataSource, Principal, SourcedMetadata, principal};
use envoy_types::pb::envoy::r#type::matcher::v3::{
    FilterStateMatcher, MetadataMatcher, StringMatcher, ValueMatcher, filter_state_matcher, metadata_matcher,
    string_matcher::MatchPattern,
};

use super::wildcard::{regex, regex_quote, string_matcher, string_value};
use super::{PEER_PRINCIPAL, Peer, RbacMatcher, RuleBuilder, Unchecked, one_of_none_of};
use crate::config::istio::Source;
use crate::generate::jwt::{JWT_AUTHN, PAYLOAD_METADATA};
use crate::generate::proto;

impl RuleBuilder<'_> {
    /// The peer's identity (its SPIFFE URI) matches `m`: the connection's
    /// peer certificate, or on a waypoint the filter state its HBONE
    /// listener recorded.
    pub(super) fn peer(&self, m: StringMatcher) -> Principal {
        match self.peer {
            Peer::Certificate | Peer::Grpc => authenticated(m),
            Peer::FilterState => id(principal::Identifier::FilterState(FilterStateMatcher {
                key: PEER_PRINCIPAL.to_string(),
                matcher: Some(filter_state_matcher::Matcher::StringMatch(m)),
            })),
        }
    }

    /// The principal conditions of a source, in Istio's order.
    pub(super) fn source(&self, s: &Source) -> Result<Vec<Principal>, Unchecked> {
        let mut and = Vec::new();
        one_of_none_of(&mut and, &s.principals, &s.not_principals, |v| Some(self.peer(spiffe_matcher(v))));
        self.request_principals(&mut and, &s.request_principals, &s.not_request_principals)?;
        one_of_none_of(&mut and, &s.service_accounts, &s.not_service_accounts, |v| {
            Some(self.peer(regex(&service_account_regex(self.namespace, v))))
        });
        one_of_none_of(&mut and, &s.trust_domains, &s.not_trust_domains, |v| Some(self.peer(trust_domain_matcher(v))));
        one_of_none_of(&mut and, &s.namespaces, &s.not_namespaces, |v| Some(self.peer(namespace_matcher(v))));
        one_of_none_of(&mut and, &s.remote_ip_blocks, &s.not_remote_ip_blocks, |v| {
            proto::cidr_range(v).map(|c| id(principal::Identifier::RemoteIp(c)))
        });
        one_of_none_of(&mut and, &s.ip_blocks, &s.not_ip_blocks, |v| {
            proto::cidr_range(v).map(|c| id(principal::Identifier::DirectRemoteIp(c)))
        });
        Ok(and)
    }

    /// Request principals (`ISS/SUB`, with Istio's wildcards) as the
    /// verified token's `iss` and `sub`. HTTP only.
    pub(super) fn request_principals(
        &self,
        and: &mut Vec<Principal>,
        values: &[String],
        not: &[String],
    ) -> Result<(), Unchecked> {
        if values.is_empty() && not.is_empty() {
            return Ok(());
        }
        if self.tcp || self.peer == Peer::Grpc {
            return self.unchecked();
        }
        one_of_none_of(and, values, not, |v| Some(request_principal(v)));
        Ok(())
    }
}

/// A matcher on the verified token's payload at `path`.
pub(super) fn payload_matcher(path: &[&str], value: ValueMatcher) -> Principal {
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

/// A principal of one identifier.
pub(super) fn id(identifier: principal::Identifier) -> Principal {
    Principal { identifier: Some(identifier) }
}

/// All of `ids`; none means any sender.
pub(super) fn principal_and(ids: Vec<Principal>) -> Principal {
    if ids.is_empty() {
        return id(principal::Identifier::Any(true));
    }
    id(principal::Identifier::AndIds(principal::Set { ids }))
}

/// The peer certificate's identity (its SPIFFE URI) matches `m`.
pub(super) fn authenticated(m: StringMatcher) -> Principal {
    id(principal::Identifier::Authenticated(principal::Authenticated { principal_name: Some(m) }))
}

/// A principal (`cluster.local/ns/NS/sa/SA`) as the peer certificate's URI.
pub(super) fn spiffe_matcher(value: &str) -> StringMatcher {
    string_matcher(value, "spiffe://")
}

/// A namespace (Istio's `*` anywhere in it) as the `/ns/NS/` of a SPIFFE URI.
pub(super) fn namespace_matcher(value: &str) -> StringMatcher {
    let pattern: Vec<String> = value.split('*').map(regex_quote).collect();
    regex(&format!(".*/ns/{}/.*", pattern.join(".*")))
}

/// A trust domain (`*` any, or a `*` within it) as the head of a SPIFFE URI.
pub(super) fn trust_domain_matcher(value: &str) -> StringMatcher {
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
pub(super) fn service_account_regex(namespace: &str, value: &str) -> String {
    let (ns, sa) = value.split_once('/').unwrap_or((namespace, value));
    format!("spiffe://.+/ns/{}/(.+/|)sa/{}(/.+)?", regex_quote(ns), regex_quote(sa))
}

impl RbacMatcher for Principal {
    fn any_of(ids: Vec<Self>) -> Self {
        id(principal::Identifier::OrIds(principal::Set { ids }))
    }

    fn negated(self) -> Self {
        id(principal::Identifier::NotId(Box::new(self)))
    }
}
