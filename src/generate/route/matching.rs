//! `HTTPMatchRequest` as Envoy's `RouteMatch`, as Istio translates it.
//!
//! The path from `uri` (prefix `/` when absent) with `ignoreUriCase` as
//! `case_sensitive: false`; `headers` and `withoutHeaders` (inverted, a
//! missing header counting as empty unless the match only asks for
//! presence) as header matchers sorted by name, then `method`, `authority`
//! and `scheme` as the `:method`, `:authority` and `:scheme` pseudo-headers;
//! `queryParams` as query parameter matchers. An empty match, or the regex
//! `*`, only asks for the header or parameter to be present.

use envoy_types::pb::envoy::config::route::v3::{
    HeaderMatcher, QueryParameterMatcher, RouteMatch, header_matcher::HeaderMatchSpecifier,
    query_parameter_matcher::QueryParameterMatchSpecifier, route_match::PathSpecifier,
};
use envoy_types::pb::envoy::r#type::matcher::v3::{RegexMatcher, StringMatcher, string_matcher::MatchPattern};

use crate::config::istio::{HttpMatchRequest, StringMatch};
use crate::generate::proto;

/// A match on a path prefix.
pub fn prefix_match(prefix: &str) -> RouteMatch {
    RouteMatch { path_specifier: Some(PathSpecifier::Prefix(prefix.to_string())), ..Default::default() }
}

/// The Envoy match of one condition (`None`: match everything). With
/// `segment_prefixes` (the Gateway API's and Ingress's semantics) a path
/// prefix matches whole segments (`/foo` matches `/foo` and `/foo/bar`, not
/// `/foobar`), as Istio matches it.
pub fn route_match(m: Option<&HttpMatchRequest>, segment_prefixes: bool) -> RouteMatch {
    let Some(m) = m else { return prefix_match("/") };
    let path = match &m.uri {
        Some(StringMatch { exact: Some(p), .. }) => PathSpecifier::Path(p.clone()),
        Some(StringMatch { prefix: Some(p), .. }) if segment_prefixes && p != "/" => {
            PathSpecifier::PathSeparatedPrefix(p.trim_end_matches('/').to_string())
        }
        Some(StringMatch { prefix: Some(p), .. }) => PathSpecifier::Prefix(p.clone()),
        Some(StringMatch { regex: Some(r), .. }) => PathSpecifier::SafeRegex(regex(r)),
        _ => PathSpecifier::Prefix("/".to_string()),
    };
    let mut headers: Vec<HeaderMatcher> = m.headers.iter().map(|(name, value)| header_matcher(name, value)).collect();
    headers.extend(m.without_headers.iter().map(|(name, value)| HeaderMatcher {
        invert_match: true,
        treat_missing_header_as_empty: !asks_presence(value),
        ..header_matcher(name, value)
    }));
    headers.sort_by(|a, b| a.name.cmp(&b.name));
    for (name, value) in [(":method", &m.method), (":authority", &m.authority), (":scheme", &m.scheme)] {
        if let Some(value) = value {
            headers.push(header_matcher(name, value));
        }
    }
    let query_parameters = m
        .query_params
        .iter()
        .map(|(name, value)| QueryParameterMatcher {
            name: name.clone(),
            query_parameter_match_specifier: Some(if asks_presence(value) {
                QueryParameterMatchSpecifier::PresentMatch(true)
            } else {
                QueryParameterMatchSpecifier::StringMatch(string_matcher(value).unwrap_or_default())
            }),
        })
        .collect();
    RouteMatch {
        path_specifier: Some(path),
        case_sensitive: m.ignore_uri_case.map(|ignore| proto::bool_value(!ignore)),
        headers,
        query_parameters,
        ..Default::default()
    }
}

/// An Envoy string matcher for an exact, prefix or regex match; `None` when none is set.
pub fn string_matcher(m: &StringMatch) -> Option<StringMatcher> {
    let pattern = match m {
        StringMatch { exact: Some(v), .. } => MatchPattern::Exact(v.clone()),
        StringMatch { prefix: Some(v), .. } => MatchPattern::Prefix(v.clone()),
        StringMatch { regex: Some(v), .. } => MatchPattern::SafeRegex(regex(v)),
        _ => return None,
    };
    Some(StringMatcher { match_pattern: Some(pattern), ignore_case: false })
}

/// An RE2 matcher. The engine is left unset: Envoy's default is RE2, and the
/// explicit `google_re2` field is deprecated.
pub fn regex(pattern: &str) -> RegexMatcher {
    RegexMatcher { regex: pattern.to_string(), ..Default::default() }
}

/// Whether a match only asks for presence: nothing set, or the regex `*`.
fn asks_presence(m: &StringMatch) -> bool {
    m.regex.as_deref() == Some("*") || string_matcher(m).is_none()
}

fn header_matcher(name: &str, value: &StringMatch) -> HeaderMatcher {
    let specifier = match string_matcher(value).filter(|_| !asks_presence(value)) {
        Some(matcher) => HeaderMatchSpecifier::StringMatch(matcher),
        None => HeaderMatchSpecifier::PresentMatch(true),
    };
    HeaderMatcher { name: name.to_string(), header_match_specifier: Some(specifier), ..Default::default() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact(v: &str) -> StringMatch {
        StringMatch { exact: Some(v.into()), ..Default::default() }
    }

    #[test]
    fn every_condition_becomes_a_matcher() {
        let m = HttpMatchRequest {
            uri: Some(StringMatch { prefix: Some("/api".into()), ..Default::default() }),
            method: Some(exact("POST")),
            authority: Some(StringMatch { prefix: Some("shop.".into()), ..Default::default() }),
            scheme: Some(exact("https")),
            headers: [("x-b".to_string(), exact("1")), ("x-a".to_string(), StringMatch::default())].into(),
            without_headers: [("x-debug".to_string(), exact("on")), ("x-c".to_string(), StringMatch::default())].into(),
            query_params: [
                ("id".to_string(), StringMatch { regex: Some("\\d+".into()), ..Default::default() }),
                ("q".to_string(), StringMatch::default()),
            ]
            .into(),
            ignore_uri_case: Some(true),
            ..Default::default()
        };
        let out = route_match(Some(&m), false);
        assert_eq!(out.path_specifier, Some(PathSpecifier::Prefix("/api".into())));
        assert_eq!(out.case_sensitive.map(|b| b.value), Some(false));
        let names: Vec<&str> = out.headers.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, vec!["x-a", "x-b", "x-c", "x-debug", ":method", ":authority", ":scheme"]);
        let by = |n: &str| out.headers.iter().find(|h| h.name == n).unwrap();
        assert_eq!(by("x-a").header_match_specifier, Some(HeaderMatchSpecifier::PresentMatch(true)));
        assert!(by("x-debug").invert_match && by("x-debug").treat_missing_header_as_empty);
        assert!(
            by("x-c").invert_match && !by("x-c").treat_missing_header_as_empty,
            "absent header: a presence match, inverted"
        );
        assert_eq!(out.query_parameters.len(), 2);
        assert_eq!(
            out.query_parameters[1].query_parameter_match_specifier,
            Some(QueryParameterMatchSpecifier::PresentMatch(true))
        );
        assert!(route_match(None, false).case_sensitive.is_none());
    }
}
