//! Istio's wildcard strings (`*` any present value, `*x` a suffix, `x*` a
//! prefix, else exact) as Envoy's string, header and regular-expression
//! matchers. Every part of a rule matches its values through these, so a
//! wildcard means the same in a `from`, a `to` and a `when`.

use envoy_types::pb::envoy::config::route::v3::{HeaderMatcher, header_matcher::HeaderMatchSpecifier};
use envoy_types::pb::envoy::r#type::matcher::v3::{
    RegexMatcher, StringMatcher, ValueMatcher, string_matcher::MatchPattern, value_matcher,
};

/// Istio's wildcard strings: `*` any (present), `*x` suffix, `x*` prefix,
/// else exact; `prefix` goes before the value (a suffix match under a
/// prefix becomes a regular expression).
pub(super) fn string_matcher(value: &str, prefix: &str) -> StringMatcher {
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

/// A string matcher as a matcher of a metadata value.
pub(super) fn string_value(m: StringMatcher) -> ValueMatcher {
    ValueMatcher { match_pattern: Some(value_matcher::MatchPattern::StringMatch(m)) }
}

/// A matcher by Envoy's safe regular expression (RE2).
pub(super) fn regex(expression: &str) -> StringMatcher {
    StringMatcher {
        match_pattern: Some(MatchPattern::SafeRegex(RegexMatcher {
            regex: expression.to_string(),
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// `text` with the regular expression's special characters escaped.
pub(super) fn regex_quote(text: &str) -> String {
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
pub(super) fn header_matcher(name: &str, value: &str, ignore_case: bool) -> HeaderMatcher {
    let specifier = if value == "*" {
        HeaderMatchSpecifier::PresentMatch(true)
    } else {
        let mut m = string_matcher(value, "");
        m.ignore_case = ignore_case;
        HeaderMatchSpecifier::StringMatch(m)
    };
    HeaderMatcher { name: name.to_string(), header_match_specifier: Some(specifier), ..Default::default() }
}
