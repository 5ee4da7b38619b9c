//! HTTPRoutes and GRPCRoutes as Istio's HTTP routes: the conversion step
//! for the kinds that route requests, between attachment and VirtualService
//! assembly (which merges the routes of a host and orders them by
//! `precedence`).
//!
//! It owns how a rule and each of its matches become one Istio route: path,
//! header, query and method matches (a gRPC method as a path), the filters
//! (header modifiers, redirects, rewrites, CORS, mirrors), retries,
//! timeouts and weighted destinations. Invariant: a filter meshpush cannot
//! apply stops the whole route (`InvalidFilter`), never only that filter,
//! so that a route is served as written or not at all.

use std::collections::BTreeMap;

use crate::config::Duration;
use crate::config::gateway_api::{
    self as api, GrpcRoute, GrpcRouteFilter, GrpcRouteMatch, HttpBackendRef, HttpHeaderFilter, HttpRoute,
    HttpRouteFilter, HttpRouteMatch, HttpRouteRule,
};
use crate::config::istio::{self, HttpRouteDestination, StringMatch};
use crate::model::StoreSnapshot;

use super::grants::Grants;
use super::routes::{RefProblem, destination, resolve, rule_name, weighted};

/// An HTTPRoute's rules (`from`: its kind and namespace) as Istio's routes,
/// one per rule and match.
pub(super) fn http_rules(
    store: &StoreSnapshot,
    from: (&'static str, &str),
    r: &HttpRoute,
    grants: &Grants<'_>,
    problem: &mut Option<RefProblem>,
) -> Result<Vec<istio::HttpRoute>, RefProblem> {
    let meta = &r.metadata;
    let mut routes = Vec::new();
    let rules: Vec<HttpRouteRule> =
        if r.spec.rules.is_empty() { vec![HttpRouteRule::default()] } else { r.spec.rules.clone() };
    for (n, rule) in rules.iter().enumerate() {
        // The API's default (which the API server writes): one match, path prefix `/`.
        let default_match = [HttpRouteMatch::default()];
        let matches = if rule.matches.is_empty() { &default_match[..] } else { &rule.matches[..] };
        for m in matches {
            let m = Some(convert_match(m));
            routes.push(convert_rule(store, from, rule_name(meta, rule.name.as_deref(), n), rule, m, grants, problem)?);
        }
    }
    Ok(routes)
}

/// A GRPCRoute's rules (`from`: its kind and namespace) as Istio's routes,
/// one per rule and match (a rule without matches takes every call).
pub(super) fn grpc_rules(
    store: &StoreSnapshot,
    from: (&'static str, &str),
    r: &GrpcRoute,
    grants: &Grants<'_>,
    problem: &mut Option<RefProblem>,
) -> Result<Vec<istio::HttpRoute>, RefProblem> {
    let meta = &r.metadata;
    let mut routes = Vec::new();
    for (n, rule) in r.spec.rules.iter().enumerate() {
        let name = rule_name(meta, rule.name.as_deref(), n);
        let http_rule = HttpRouteRule {
            name: rule.name.clone(),
            filters: rule.filters.iter().map(grpc_filter).collect(),
            backend_refs: rule
                .backend_refs
                .iter()
                .map(|b| HttpBackendRef {
                    backend: b.backend.clone(),
                    weight: b.weight,
                    filters: b.filters.iter().map(grpc_filter).collect(),
                })
                .collect(),
            ..Default::default()
        };
        if rule.matches.is_empty() {
            // No match: every call.
            routes.push(convert_rule(store, from, name.clone(), &http_rule, None, grants, problem)?);
        }
        for m in &rule.matches {
            let m = Some(convert_grpc_match(m));
            routes.push(convert_rule(store, from, name.clone(), &http_rule, m, grants, problem)?);
        }
    }
    if routes.is_empty() {
        // A route without rules: every call to a 500, as the API says.
        let empty = HttpRouteRule::default();
        routes.push(convert_rule(store, from, rule_name(meta, None, 0), &empty, None, grants, problem)?);
    }
    Ok(routes)
}

/// A GRPCRoute filter as the HTTPRoute filter of the same type (the kinds
/// share header modifiers and mirrors; `ExtensionRef` stays unapplied).
fn grpc_filter(f: &GrpcRouteFilter) -> HttpRouteFilter {
    HttpRouteFilter {
        kind: f.kind.clone(),
        request_header_modifier: f.request_header_modifier.clone(),
        response_header_modifier: f.response_header_modifier.clone(),
        request_mirror: f.request_mirror.clone(),
        ..Default::default()
    }
}

/// A gRPC match as Istio's: the method becomes a match on the path
/// `/SERVICE/METHOD` (exact with both, a prefix with only the service, a
/// regex otherwise), headers as HTTPRoute's.
fn convert_grpc_match(m: &GrpcRouteMatch) -> istio::HttpMatchRequest {
    let regex = |v: String| StringMatch { regex: Some(v), ..Default::default() };
    let uri = m.method.as_ref().map(|method| {
        let (service, name) = (method.service.as_deref(), method.method.as_deref());
        match (method.kind(), service, name) {
            ("Exact", Some(s), Some(n)) => StringMatch { exact: Some(format!("/{s}/{n}")), ..Default::default() },
            ("Exact", Some(s), None) => StringMatch { prefix: Some(format!("/{s}/")), ..Default::default() },
            (_, None, Some(n)) => regex(format!("/[^/]+/{n}")),
            (_, Some(s), None) => regex(format!("/{s}/.+")),
            (_, Some(s), Some(n)) => regex(format!("/{s}/{n}")),
            // Validation refuses a method match with neither.
            (_, None, None) => regex("/.+/.+".to_string()),
        }
    });
    let headers =
        m.headers.iter().map(|h| (h.name.to_ascii_lowercase(), string_match(h.kind.as_deref(), &h.value))).collect();
    istio::HttpMatchRequest { uri, headers, ..Default::default() }
}

/// One rule and one of its matches as an Istio HTTP route. A backend that
/// does not resolve stays as a destination no cluster serves (its share of
/// requests gets 500) and is recorded in `problem`; a filter meshpush cannot
/// apply stops the whole route.
fn convert_rule(
    store: &StoreSnapshot,
    from: (&'static str, &str),
    name: String,
    rule: &HttpRouteRule,
    m: Option<istio::HttpMatchRequest>,
    grants: &Grants<'_>,
    problem: &mut Option<RefProblem>,
) -> Result<istio::HttpRoute, RefProblem> {
    let mut out = istio::HttpRoute { name: Some(name), matches: m.into_iter().collect(), ..Default::default() };
    for f in &rule.filters {
        match f.kind.as_str() {
            "RequestHeaderModifier" | "ResponseHeaderModifier" => modify_headers(&mut out.headers, f),
            "RequestRedirect" => {
                let r = f.request_redirect.as_ref().expect("validated: the filter has its settings");
                let mut redirect = istio::HttpRedirect {
                    authority: r.hostname.clone(),
                    scheme: r.scheme.clone(),
                    // The API's default; the API server writes it, a file may not.
                    redirect_code: Some(r.status_code.unwrap_or(302)),
                    port: r.port,
                    derive_port: match (r.port, &r.scheme) {
                        (Some(_), _) => None,
                        (None, Some(_)) => Some("FROM_PROTOCOL_DEFAULT".to_string()),
                        (None, None) => Some("FROM_REQUEST_PORT".to_string()),
                    },
                    ..Default::default()
                };
                if let Some(p) = &r.path {
                    match p.kind.as_str() {
                        "ReplaceFullPath" => redirect.uri = p.replace_full_path.clone(),
                        _ => redirect.prefix_rewrite = p.replace_prefix_match.clone(),
                    }
                }
                out.redirect = Some(redirect);
            }
            "URLRewrite" => {
                let r = f.url_rewrite.as_ref().expect("validated: the filter has its settings");
                let mut rewrite = istio::HttpRewrite { authority: r.hostname.clone(), ..Default::default() };
                if let Some(p) = &r.path {
                    match p.kind.as_str() {
                        "ReplaceFullPath" => {
                            rewrite.uri_regex_rewrite = Some(istio::RegexRewrite {
                                pattern: "/.*".to_string(),
                                rewrite: p.replace_full_path.clone().unwrap_or_default(),
                            })
                        }
                        _ => {
                            let prefix = p.replace_prefix_match.as_deref().unwrap_or("/").trim_end_matches('/');
                            rewrite.uri = Some(if prefix.is_empty() { "/".to_string() } else { prefix.to_string() });
                        }
                    }
                }
                out.rewrite = Some(rewrite);
            }
            "CORS" => {
                let c = f.cors.as_ref().expect("validated: the filter has its settings");
                out.cors_policy = Some(cors_policy(c));
            }
            "RequestMirror" => {
                let mirror = f.request_mirror.as_ref().expect("validated: the filter has its settings");
                match destination(store, from, &mirror.backend_ref, grants) {
                    Ok(d) => {
                        let percentage = match (mirror.fraction, mirror.percent) {
                            (Some(f), _) => {
                                Some(f64::from(f.numerator) * 100.0 / f64::from(f.denominator.unwrap_or(100)))
                            }
                            (None, Some(p)) => Some(f64::from(p)),
                            (None, None) => None,
                        };
                        out.mirrors.push(istio::HttpMirrorPolicy {
                            destination: d,
                            percentage: percentage.map(|value| istio::Percent { value }),
                        });
                    }
                    Err((_, p)) => *problem = Some(p),
                }
            }
            other => {
                return Err(RefProblem {
                    reason: "InvalidFilter",
                    message: format!("filter {other} is not applied by meshpush; the route is not served"),
                });
            }
        }
    }
    if let Some(r) = &rule.retry {
        // Connection errors are retried whenever a retry is configured, as
        // the API asks; attempts default to 2.
        let mut on: Vec<String> =
            ["connect-failure", "refused-stream", "unavailable", "cancelled"].map(String::from).to_vec();
        on.extend(r.codes.iter().map(u32::to_string));
        let attempts = i64::from(r.attempts.unwrap_or(2));
        out.retries = Some(istio::HttpRetry {
            attempts,
            retry_on: (attempts > 0).then(|| on.join(",")),
            backoff: r.backoff.as_deref().and_then(api::parse_duration).map(Duration),
            ..Default::default()
        });
    }
    if let Some(t) = &rule.timeouts {
        let parse = |v: &Option<String>| v.as_deref().and_then(api::parse_duration).filter(|d| !d.is_zero());
        if let Some(request) = parse(&t.request) {
            out.timeout = Some(Duration(request));
        }
        if let Some(backend) = parse(&t.backend_request) {
            // Each try's bound when retrying, else the request's (as Istio).
            match &mut out.retries {
                Some(retries) => retries.per_try_timeout = Some(Duration(backend)),
                None => out.timeout = Some(Duration(backend)),
            }
        }
    }
    let weighted = weighted(&rule.backend_refs, |b| b.weight);
    if weighted.is_empty() {
        if out.redirect.is_none() {
            // No backend with a positive weight: the API asks for 500.
            out.direct_response = Some(istio::HttpDirectResponse { status: 500, body: None });
        }
        return Ok(out);
    }
    for (b, weight) in weighted {
        let d = resolve(store, from, &b.backend, grants, problem);
        let mut headers: Option<istio::Headers> = None;
        for f in &b.filters {
            match f.kind.as_str() {
                "RequestHeaderModifier" | "ResponseHeaderModifier" => modify_headers(&mut headers, f),
                other => {
                    return Err(RefProblem {
                        reason: "InvalidFilter",
                        message: format!(
                            "filter {other} on a backend is not applied by meshpush; the route is not served"
                        ),
                    });
                }
            }
        }
        out.route.push(HttpRouteDestination { destination: d, weight, headers });
    }
    Ok(out)
}

/// A CORS filter as Istio's policy: origins exact, a lone `*` as any
/// origin of the form `SCHEME://HOST[:PORT]`, a trailing `*` as a prefix,
/// other wildcards as a regex; preflights no origin matches are left to
/// the backend unanswered (`IGNORE`), as Istio sets it.
fn cors_policy(c: &api::HttpCorsFilter) -> istio::CorsPolicy {
    let origin = |o: &String| -> StringMatch {
        if o == "*" {
            StringMatch { regex: Some(r"^[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s?#]+$".to_string()), ..Default::default() }
        } else if !o.contains('*') {
            StringMatch { exact: Some(o.clone()), ..Default::default() }
        } else if o.matches('*').count() == 1 && o.ends_with('*') {
            StringMatch { prefix: Some(o.trim_end_matches('*').to_string()), ..Default::default() }
        } else {
            let pattern = regex::escape(o).replace(r"\*", ".*");
            StringMatch { regex: Some(format!("^{pattern}$")), ..Default::default() }
        }
    };
    istio::CorsPolicy {
        allow_origins: c.allow_origins.iter().filter(|o| !o.is_empty()).map(origin).collect(),
        allow_methods: c.allow_methods.clone(),
        allow_headers: c.allow_headers.clone(),
        expose_headers: c.expose_headers.clone(),
        // The API's default (which the API server writes): 5 seconds.
        max_age: Some(c.max_age.unwrap_or(5))
            .filter(|s| *s > 0)
            .map(|s| Duration(std::time::Duration::from_secs(s.into()))),
        allow_credentials: c.allow_credentials.filter(|a| *a),
        unmatched_preflights: Some("IGNORE".to_string()),
        ..Default::default()
    }
}

/// A match as Istio's.
fn convert_match(m: &HttpRouteMatch) -> istio::HttpMatchRequest {
    let uri = m.path.as_ref().map(|p| match p.kind() {
        "Exact" => StringMatch { exact: Some(p.value().to_string()), ..Default::default() },
        "RegularExpression" => StringMatch { regex: Some(p.value().to_string()), ..Default::default() },
        _ => {
            let v = p.value();
            let v = if v == "/" { v } else { v.trim_end_matches('/') };
            StringMatch {
                prefix: Some(if v.is_empty() { "/".to_string() } else { v.to_string() }),
                ..Default::default()
            }
        }
    });
    istio::HttpMatchRequest {
        uri: uri.or_else(|| Some(StringMatch { prefix: Some("/".to_string()), ..Default::default() })),
        headers: m
            .headers
            .iter()
            .map(|h| (h.name.to_ascii_lowercase(), string_match(h.kind.as_deref(), &h.value)))
            .collect(),
        query_params: m
            .query_params
            .iter()
            .map(|q| (q.name.clone(), string_match(q.kind.as_deref(), &q.value)))
            .collect(),
        method: m.method.as_ref().map(|v| StringMatch { exact: Some(v.clone()), ..Default::default() }),
        ..Default::default()
    }
}

/// A header or query parameter match of an HTTPRoute or GRPCRoute as
/// Istio's: a regex for `RegularExpression`, else exact (the API's default).
fn string_match(kind: Option<&str>, value: &str) -> StringMatch {
    match kind.unwrap_or("Exact") {
        "RegularExpression" => StringMatch { regex: Some(value.to_string()), ..Default::default() },
        _ => StringMatch { exact: Some(value.to_string()), ..Default::default() },
    }
}

/// A `RequestHeaderModifier` or `ResponseHeaderModifier` filter applied to
/// the headers of a route or of one of its backends.
fn modify_headers(headers: &mut Option<istio::Headers>, f: &HttpRouteFilter) {
    let h = headers.get_or_insert_with(Default::default);
    match f.kind.as_str() {
        "RequestHeaderModifier" => h.request = f.request_header_modifier.as_ref().map(header_operations),
        _ => h.response = f.response_header_modifier.as_ref().map(header_operations),
    }
}

/// A header modifier as Istio's operations; a later entry naming a header
/// again is ignored, as the API says.
fn header_operations(f: &HttpHeaderFilter) -> istio::HeaderOperations {
    let map = |list: &[api::HttpHeader]| {
        let mut out = BTreeMap::new();
        for h in list {
            out.entry(h.name.to_ascii_lowercase()).or_insert_with(|| h.value.clone());
        }
        out
    };
    istio::HeaderOperations { set: map(&f.set), add: map(&f.add), remove: f.remove.clone() }
}
