//! Checks on the Gateway API kinds, as the API server's schema and CEL
//! rules make them: an object the API server would refuse is refused here
//! with the same field path. What depends on other objects (whether a
//! parent or backend exists, whether a reference is granted) is not
//! checked here: it is the objects' status, computed on a snapshot by
//! `push::index::gateway_api`.

use std::collections::BTreeSet;

use super::virtual_service::{compiles, is_header_name};
use super::{Checker, is_dns1123_label, is_dns1123_subdomain};
use crate::config::gateway_api::{
    self, BackendObjectReference, Gateway, GatewayClass, GrpcMethodMatch, GrpcRoute, GrpcRouteFilter, HttpHeaderFilter,
    HttpPathModifier, HttpRequestMirrorFilter, HttpRoute, HttpRouteFilter, HttpRouteRule, ParentReference,
    ReferenceGrant, StreamRouteRule, TcpRoute, TlsRoute,
};

pub(super) fn gateway_class(check: &mut Checker, class: &GatewayClass) {
    let name = &class.spec.controller_name;
    if name.is_empty() || !name.contains('/') {
        check.error(
            "spec.controllerName",
            format!("{name:?} is not a controller name: a domain-prefixed path such as istio.io/gateway-controller"),
        );
    }
}

/// Whether `p` is a listener protocol the API's schema takes: a name of
/// letters, digits and inner dashes (`HTTP`, Istio's waypoints' `HBONE`),
/// or a domain-prefixed one (`example.com/udp`). Which protocols are
/// served is the translation's business: one meshpush does not serve is
/// reported in the Gateway's status, not refused here.
fn is_protocol_name(p: &str) -> bool {
    let name = |s: &str| {
        !s.is_empty()
            && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    };
    let alnum = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric());
    p.len() <= 255
        && match p.split_once('/') {
            None => name(p),
            Some((domain, rest)) => domain.split('.').all(alnum) && alnum(rest),
        }
}

pub(super) fn gateway(check: &mut Checker, gw: &Gateway) {
    if gw.spec.gateway_class_name.is_empty() {
        check.error("spec.gatewayClassName", "is required: the GatewayClass whose controller serves the Gateway");
    }
    let listeners = &gw.spec.listeners;
    if listeners.is_empty() || listeners.len() > 64 {
        check.error("spec.listeners", format!("has {} listeners: a Gateway has 1 to 64", listeners.len()));
    }
    let mut names = BTreeSet::new();
    let mut combos = BTreeSet::new();
    for (i, l) in listeners.iter().enumerate() {
        let path = format!("spec.listeners[{i}]");
        if !is_dns1123_label(&l.name) {
            check.error(format!("{path}.name"), format!("{:?} is not a listener name: a DNS-1123 label", l.name));
        } else if !names.insert(l.name.as_str()) {
            check.error(format!("{path}.name"), format!("{:?} names two listeners: names must be unique", l.name));
        }
        check.port(format!("{path}.port"), l.port);
        let protocol = l.protocol.as_str();
        if !is_protocol_name(protocol) {
            check.error(
                format!("{path}.protocol"),
                format!(
                    "{protocol:?} is not a protocol: a name such as HTTP, HTTPS, TLS, TCP or UDP, or a domain-prefixed one"
                ),
            );
        }
        if let Some(h) = &l.hostname {
            if matches!(protocol, "TCP" | "UDP") {
                check.error(format!("{path}.hostname"), format!("must not be set on a {protocol} listener"));
            } else {
                hostname(check, format!("{path}.hostname"), h);
            }
        }
        if !combos.insert((l.port, protocol, l.hostname.as_deref().unwrap_or(""))) {
            check.error(path.clone(), "repeats another listener's port, protocol and hostname: each must be unique");
        }
        match (&l.tls, protocol) {
            (None, "HTTPS" | "TLS") => {
                check.error(format!("{path}.tls"), format!("is required on a {protocol} listener"))
            }
            (Some(_), "HTTP" | "TCP" | "UDP") => {
                check.error(format!("{path}.tls"), format!("must not be set on a {protocol} listener"))
            }
            (Some(tls), _) => {
                let mode = l.tls_mode();
                check.one_of(format!("{path}.tls.mode"), mode, &["Terminate", "Passthrough"]);
                if protocol == "HTTPS" && mode == "Passthrough" {
                    check.error(format!("{path}.tls.mode"), "must be Terminate on an HTTPS listener");
                }
                if mode == "Terminate" && tls.certificate_refs.is_empty() {
                    check.error(format!("{path}.tls.certificateRefs"), "is required when the listener terminates TLS");
                }
                if mode == "Passthrough" && !tls.certificate_refs.is_empty() {
                    check.warning(
                        format!("{path}.tls.certificateRefs"),
                        "is not used: a Passthrough listener leaves TLS to the backend (Istio ignores it too)",
                    );
                }
                if !tls.options.is_empty() {
                    check.unsupported(format!("{path}.tls.options"), Some("the listener's TLS uses Istio's defaults"));
                }
            }
            (None, _) => {}
        }
        if let Some(namespaces) = l.allowed_routes.as_ref().and_then(|a| a.namespaces.as_ref()) {
            let from = l.routes_from();
            check.one_of(format!("{path}.allowedRoutes.namespaces.from"), from, &["All", "Same", "Selector"]);
            if from == "Selector" && namespaces.selector.is_none() {
                check.error(format!("{path}.allowedRoutes.namespaces.selector"), "is required with from: Selector");
            }
            if let Some(selector) = &namespaces.selector {
                for (j, e) in selector.match_expressions.iter().enumerate() {
                    let at = format!("{path}.allowedRoutes.namespaces.selector.matchExpressions[{j}].operator");
                    check.one_of(at, &e.operator, &["In", "NotIn", "Exists", "DoesNotExist"]);
                }
            }
        }
    }
    for (i, a) in gw.spec.addresses.iter().enumerate() {
        let kind = a.kind.as_deref().unwrap_or("IPAddress");
        if kind == "IPAddress" && a.value.parse::<std::net::IpAddr>().is_err() {
            check.error(format!("spec.addresses[{i}].value"), format!("{:?} is not an IP address", a.value));
        } else if kind != "IPAddress" {
            check.unsupported(
                format!("spec.addresses[{i}].type"),
                Some("it is reported in the status; a router binds only an IPAddress it holds"),
            );
        }
    }
    if gw.spec.infrastructure.is_some() {
        check.unsupported(
            "spec.infrastructure",
            Some("meshpush deploys no gateway: label the routers you run yourself (meshpush bootstrap --gateway)"),
        );
    }
}

/// What happens to a route with a filter meshpush cannot apply.
const UNAPPLIED_FILTER: &str =
    "the route is not served (ResolvedRefs False, InvalidFilter), as Istio does with a filter it cannot apply";
/// What happens to a route with a backend filter other than a header modifier.
const UNAPPLIED_BACKEND_FILTER: &str =
    "only header modifiers are applied per backend: the route is not served (InvalidFilter)";

pub(super) fn http_route(check: &mut Checker, route: &HttpRoute) {
    let spec = &route.spec;
    parents_and_hostnames(check, &spec.parent_refs, &spec.hostnames);
    if spec.rules.len() > 16 {
        check.error("spec.rules", format!("has {} rules: at most 16", spec.rules.len()));
    }
    for (i, rule) in spec.rules.iter().enumerate() {
        http_rule(check, &format!("spec.rules[{i}]"), rule);
    }
}

fn parent_ref(check: &mut Checker, path: &str, p: &ParentReference) {
    if !is_dns1123_subdomain(&p.name) {
        check.error(format!("{path}.name"), format!("{:?} is not an object name", p.name));
    }
    if let Some(port) = p.port {
        check.port(format!("{path}.port"), port);
    }
}

fn http_rule(check: &mut Checker, path: &str, rule: &HttpRouteRule) {
    if rule.matches.len() > 64 {
        check.error(format!("{path}.matches"), "has more than 64 entries");
    }
    for (j, m) in rule.matches.iter().enumerate() {
        let mpath = format!("{path}.matches[{j}]");
        if let Some(p) = &m.path {
            let at = format!("{mpath}.path");
            let kind = p.kind();
            check.one_of(format!("{at}.type"), kind, &["Exact", "PathPrefix", "RegularExpression"]);
            let value = p.value();
            if kind == "RegularExpression" {
                compiles(check, &format!("{at}.value"), value);
            } else {
                path_value(check, format!("{at}.value"), value);
            }
        }
        for (k, h) in m.headers.iter().enumerate() {
            let at = format!("{mpath}.headers[{k}]");
            if !is_header_name(&h.name) {
                check.error(format!("{at}.name"), format!("{:?} is not a header name", h.name));
            }
            match h.kind.as_deref().unwrap_or("Exact") {
                "Exact" => {}
                "RegularExpression" => compiles(check, &format!("{at}.value"), &h.value),
                other => check.error(format!("{at}.type"), format!("{other:?} is not one of Exact, RegularExpression")),
            }
        }
        let names: BTreeSet<String> = m.headers.iter().map(|h| h.name.to_ascii_lowercase()).collect();
        if names.len() != m.headers.len() {
            check.error(format!("{mpath}.headers"), "names a header twice (names are case-insensitive)");
        }
        for (k, q) in m.query_params.iter().enumerate() {
            let at = format!("{mpath}.queryParams[{k}]");
            if q.name.is_empty() {
                check.error(format!("{at}.name"), "is required");
            }
            match q.kind.as_deref().unwrap_or("Exact") {
                "Exact" => {}
                "RegularExpression" => compiles(check, &format!("{at}.value"), &q.value),
                other => check.error(format!("{at}.type"), format!("{other:?} is not one of Exact, RegularExpression")),
            }
        }
        if let Some(method) = &m.method {
            let methods = ["GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"];
            check.one_of(format!("{mpath}.method"), method, &methods);
        }
    }
    let kinds: Vec<&str> = rule.filters.iter().map(|f| f.kind.as_str()).collect();
    if kinds.contains(&"RequestRedirect") && kinds.contains(&"URLRewrite") {
        check.error(format!("{path}.filters"), "has both RequestRedirect and URLRewrite: they cannot be combined");
    }
    if rule.filters.iter().any(|f| f.kind == "RequestRedirect") && !rule.backend_refs.is_empty() {
        check.error(path, "has both a RequestRedirect filter and backendRefs: a redirect has no backend");
    }
    for unique in ["RequestHeaderModifier", "ResponseHeaderModifier", "RequestRedirect", "URLRewrite"] {
        if kinds.iter().filter(|k| **k == unique).count() > 1 {
            check.error(format!("{path}.filters"), format!("has more than one {unique} filter"));
        }
    }
    let prefix_only = rule.matches.iter().all(|m| m.path.as_ref().is_none_or(|p| p.kind() == "PathPrefix"));
    for (j, f) in rule.filters.iter().enumerate() {
        filter(check, &format!("{path}.filters[{j}]"), f, prefix_only);
    }
    for (j, b) in rule.backend_refs.iter().enumerate() {
        let at = format!("{path}.backendRefs[{j}]");
        backend(check, &at, &b.backend, b.weight);
        for (k, f) in b.filters.iter().enumerate() {
            let fpath = format!("{at}.filters[{k}]");
            if !matches!(f.kind.as_str(), "RequestHeaderModifier" | "ResponseHeaderModifier") {
                check.unsupported(format!("{fpath}.type"), Some(UNAPPLIED_BACKEND_FILTER));
            }
            filter(check, &fpath, f, prefix_only);
        }
    }
    if let Some(t) = &rule.timeouts {
        let request = t.request.as_deref().map(|v| (v, duration(check, &format!("{path}.timeouts.request"), v)));
        let backend =
            t.backend_request.as_deref().map(|v| (v, duration(check, &format!("{path}.timeouts.backendRequest"), v)));
        if let (Some((_, Some(r))), Some((_, Some(b)))) = (request, backend)
            && !r.is_zero()
            && b > r
        {
            check.error(format!("{path}.timeouts.backendRequest"), "must not be longer than timeouts.request");
        }
    }
    if let Some(retry) = &rule.retry {
        for (k, code) in retry.codes.iter().enumerate() {
            if !(400..=599).contains(code) {
                check
                    .error(format!("{path}.retry.codes[{k}]"), format!("{code} is not an HTTP error status (400-599)"));
            }
        }
        if let Some(b) = &retry.backoff {
            duration(check, &format!("{path}.retry.backoff"), b);
        }
    }
}

fn filter(check: &mut Checker, path: &str, f: &HttpRouteFilter, prefix_only: bool) {
    let present = match f.kind.as_str() {
        "RequestHeaderModifier" => f.request_header_modifier.is_some(),
        "ResponseHeaderModifier" => f.response_header_modifier.is_some(),
        "RequestMirror" => f.request_mirror.is_some(),
        "RequestRedirect" => f.request_redirect.is_some(),
        "URLRewrite" => f.url_rewrite.is_some(),
        "CORS" => f.cors.is_some(),
        "ExtensionRef" => {
            // Their settings are reported by the parser as not applied.
            check.unsupported(format!("{path}.type"), Some(UNAPPLIED_FILTER));
            true
        }
        other => {
            return check.error(
                format!("{path}.type"),
                format!(
                    "{other:?} is not a filter type: RequestHeaderModifier, ResponseHeaderModifier, RequestMirror, \
                     RequestRedirect, URLRewrite, CORS or ExtensionRef"
                ),
            );
        }
    };
    if !present {
        let field = match f.kind.as_str() {
            "URLRewrite" => "urlRewrite".to_string(),
            "CORS" => "cors".to_string(),
            kind => kind[..1].to_ascii_lowercase() + &kind[1..],
        };
        check.error(format!("{path}.{field}"), format!("is required with type {}", f.kind));
    }
    header_filters(check, path, &f.request_header_modifier, &f.response_header_modifier);
    if let Some(r) = &f.request_redirect {
        let at = format!("{path}.requestRedirect");
        if let Some(s) = &r.scheme {
            check.one_of(format!("{at}.scheme"), s, &["http", "https"]);
        }
        if let Some(h) = &r.hostname {
            hostname_exact(check, format!("{at}.hostname"), h);
        }
        if let Some(p) = r.port {
            check.port(format!("{at}.port"), p);
        }
        if let Some(code) = r.status_code
            && ![301, 302, 303, 307, 308].contains(&code)
        {
            check.error(format!("{at}.statusCode"), format!("{code} is not one of 301, 302, 303, 307, 308"));
        }
        if let Some(p) = &r.path {
            path_modifier(check, &format!("{at}.path"), p, prefix_only);
        }
    }
    if let Some(c) = &f.cors {
        let at = format!("{path}.cors");
        for (field, list, max) in [
            ("allowOrigins", &c.allow_origins, 64),
            ("allowMethods", &c.allow_methods, 9),
            ("allowHeaders", &c.allow_headers, 64),
            ("exposeHeaders", &c.expose_headers, 64),
        ] {
            if list.len() > max {
                check.error(format!("{at}.{field}"), format!("has more than {max} entries"));
            }
            if field != "exposeHeaders" && list.len() > 1 && list.iter().any(|v| v == "*") {
                check.error(format!("{at}.{field}"), "cannot hold * beside other values");
            }
        }
        for (k, origin) in c.allow_origins.iter().enumerate() {
            let scheme_ok =
                origin == "*" || origin.split_once("://").is_some_and(|(s, h)| !s.is_empty() && !h.is_empty());
            if !scheme_ok {
                check.error(
                    format!("{at}.allowOrigins[{k}]"),
                    format!("{origin:?} is not an origin (SCHEME://HOST[:PORT], or *)"),
                );
            }
        }
    }
    if let Some(r) = &f.url_rewrite {
        let at = format!("{path}.urlRewrite");
        if let Some(h) = &r.hostname {
            hostname_exact(check, format!("{at}.hostname"), h);
        }
        if let Some(p) = &r.path {
            path_modifier(check, &format!("{at}.path"), p, prefix_only);
        }
    }
    if let Some(m) = &f.request_mirror {
        mirror(check, &format!("{path}.requestMirror"), m);
    }
}

/// The header modifiers of a filter (HTTPRoute's and GRPCRoute's).
fn header_filters(
    check: &mut Checker,
    path: &str,
    request: &Option<HttpHeaderFilter>,
    response: &Option<HttpHeaderFilter>,
) {
    for (name, headers) in [("requestHeaderModifier", request), ("responseHeaderModifier", response)] {
        let Some(h) = headers else { continue };
        let mut seen = BTreeSet::new();
        for (op, list) in [("set", &h.set), ("add", &h.add)] {
            for (k, header) in list.iter().enumerate() {
                let at = format!("{path}.{name}.{op}[{k}].name");
                if !is_header_name(&header.name) {
                    check.error(at, format!("{:?} is not a header name", header.name));
                } else if !seen.insert((op, header.name.as_str())) {
                    check.error(at, format!("{:?} is named twice", header.name));
                }
            }
        }
        for (k, header) in h.remove.iter().enumerate() {
            if !is_header_name(header) {
                check.error(format!("{path}.{name}.remove[{k}]"), format!("{header:?} is not a header name"));
            }
        }
    }
}

/// A mirror filter (HTTPRoute's and GRPCRoute's); `at` is its path.
fn mirror(check: &mut Checker, at: &str, m: &HttpRequestMirrorFilter) {
    if m.percent.is_some() && m.fraction.is_some() {
        check.error(at, "sets both percent and fraction");
    }
    if m.percent.is_some_and(|p| p > 100) {
        check.error(format!("{at}.percent"), "is more than 100");
    }
    if let Some(fr) = m.fraction {
        let denominator = fr.denominator.unwrap_or(100);
        if denominator == 0 || fr.numerator > denominator {
            check.error(format!("{at}.fraction"), "must have a denominator above 0 and not below the numerator");
        }
    }
    if let Some(port) = m.backend_ref.port {
        check.port(format!("{at}.backendRef.port"), port);
    }
}

pub(super) fn grpc_route(check: &mut Checker, route: &GrpcRoute) {
    let spec = &route.spec;
    parents_and_hostnames(check, &spec.parent_refs, &spec.hostnames);
    if spec.rules.len() > 16 {
        check.error("spec.rules", format!("has {} rules: at most 16", spec.rules.len()));
    }
    for (i, rule) in spec.rules.iter().enumerate() {
        let path = format!("spec.rules[{i}]");
        if rule.matches.len() > 64 {
            check.error(format!("{path}.matches"), "has more than 64 entries");
        }
        for (j, m) in rule.matches.iter().enumerate() {
            let mpath = format!("{path}.matches[{j}]");
            if let Some(method) = &m.method {
                grpc_method(check, &format!("{mpath}.method"), method);
            }
            for (k, h) in m.headers.iter().enumerate() {
                let at = format!("{mpath}.headers[{k}]");
                if !is_header_name(&h.name) {
                    check.error(format!("{at}.name"), format!("{:?} is not a header name", h.name));
                }
                match h.kind.as_deref().unwrap_or("Exact") {
                    "Exact" => {}
                    "RegularExpression" => compiles(check, &format!("{at}.value"), &h.value),
                    other => {
                        check.error(format!("{at}.type"), format!("{other:?} is not one of Exact, RegularExpression"))
                    }
                }
            }
            let names: BTreeSet<String> = m.headers.iter().map(|h| h.name.to_ascii_lowercase()).collect();
            if names.len() != m.headers.len() {
                check.error(format!("{mpath}.headers"), "names a header twice (names are case-insensitive)");
            }
        }
        for unique in ["RequestHeaderModifier", "ResponseHeaderModifier"] {
            if rule.filters.iter().filter(|f| f.kind == unique).count() > 1 {
                check.error(format!("{path}.filters"), format!("has more than one {unique} filter"));
            }
        }
        for (j, f) in rule.filters.iter().enumerate() {
            grpc_filter(check, &format!("{path}.filters[{j}]"), f);
        }
        for (j, b) in rule.backend_refs.iter().enumerate() {
            let at = format!("{path}.backendRefs[{j}]");
            backend(check, &at, &b.backend, b.weight);
            for (k, f) in b.filters.iter().enumerate() {
                let fpath = format!("{at}.filters[{k}]");
                if !matches!(f.kind.as_str(), "RequestHeaderModifier" | "ResponseHeaderModifier") {
                    check.unsupported(format!("{fpath}.type"), Some(UNAPPLIED_BACKEND_FILTER));
                }
                grpc_filter(check, &fpath, f);
            }
        }
    }
}

/// A gRPC method match: a service, a method or both; with `Exact`, the
/// service a dotted name and the method an identifier, as the API's CEL
/// rules say.
fn grpc_method(check: &mut Checker, path: &str, m: &GrpcMethodMatch) {
    check.one_of(format!("{path}.type"), m.kind(), &["Exact", "RegularExpression"]);
    if m.service.is_none() && m.method.is_none() {
        check.error(path, "needs a service, a method or both");
    }
    for (field, value) in [("service", &m.service), ("method", &m.method)] {
        let Some(v) = value else { continue };
        if m.kind() == "RegularExpression" {
            compiles(check, &format!("{path}.{field}"), v);
            continue;
        }
        let word = |w: &str| {
            w.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        let ok = if field == "service" { v.split('.').all(word) } else { word(v) };
        if !ok {
            let what = if field == "service" { "a gRPC service name (a.b.Service)" } else { "a gRPC method name" };
            check.error(format!("{path}.{field}"), format!("{v:?} is not {what}"));
        }
    }
}

fn grpc_filter(check: &mut Checker, path: &str, f: &GrpcRouteFilter) {
    let present = match f.kind.as_str() {
        "RequestHeaderModifier" => f.request_header_modifier.is_some(),
        "ResponseHeaderModifier" => f.response_header_modifier.is_some(),
        "RequestMirror" => f.request_mirror.is_some(),
        "ExtensionRef" => {
            check.unsupported(format!("{path}.type"), Some(UNAPPLIED_FILTER));
            true
        }
        other => {
            return check.error(
                format!("{path}.type"),
                format!(
                    "{other:?} is not a GRPCRoute filter type: RequestHeaderModifier, ResponseHeaderModifier, \
                     RequestMirror or ExtensionRef"
                ),
            );
        }
    };
    if !present {
        let field = f.kind[..1].to_ascii_lowercase() + &f.kind[1..];
        check.error(format!("{path}.{field}"), format!("is required with type {}", f.kind));
    }
    header_filters(check, path, &f.request_header_modifier, &f.response_header_modifier);
    if let Some(m) = &f.request_mirror {
        mirror(check, &format!("{path}.requestMirror"), m);
    }
}

pub(super) fn tcp_route(check: &mut Checker, route: &TcpRoute) {
    parents_and_hostnames(check, &route.spec.parent_refs, &[]);
    stream_rules(check, &route.spec.rules);
}

pub(super) fn tls_route(check: &mut Checker, route: &TlsRoute) {
    parents_and_hostnames(check, &route.spec.parent_refs, &route.spec.hostnames);
    stream_rules(check, &route.spec.rules);
}

/// The rules of a TCPRoute or TLSRoute: 1 to 16 (the API's bounds), each
/// with 1 to 16 backends.
fn stream_rules(check: &mut Checker, rules: &[StreamRouteRule]) {
    if rules.is_empty() || rules.len() > 16 {
        check.error("spec.rules", format!("has {} rules: 1 to 16", rules.len()));
    }
    for (i, rule) in rules.iter().enumerate() {
        let path = format!("spec.rules[{i}]");
        if rule.backend_refs.is_empty() || rule.backend_refs.len() > 16 {
            check.error(format!("{path}.backendRefs"), format!("has {} entries: 1 to 16", rule.backend_refs.len()));
        }
        for (j, b) in rule.backend_refs.iter().enumerate() {
            backend(check, &format!("{path}.backendRefs[{j}]"), &b.backend, b.weight);
        }
    }
}

/// A backend reference's weight and port.
fn backend(check: &mut Checker, at: &str, b: &BackendObjectReference, weight: Option<u32>) {
    if weight.is_some_and(|w| w > 1_000_000) {
        check.error(format!("{at}.weight"), "is more than 1000000");
    }
    if let Some(port) = b.port {
        check.port(format!("{at}.port"), port);
    }
}

/// A route's `parentRefs` (at most 32) and `hostnames`.
fn parents_and_hostnames(check: &mut Checker, parents: &[ParentReference], hostnames: &[String]) {
    if parents.len() > 32 {
        check.error("spec.parentRefs", "has more than 32 entries");
    }
    for (i, p) in parents.iter().enumerate() {
        parent_ref(check, &format!("spec.parentRefs[{i}]"), p);
    }
    for (i, h) in hostnames.iter().enumerate() {
        hostname(check, format!("spec.hostnames[{i}]"), h);
    }
}

fn path_modifier(check: &mut Checker, path: &str, p: &HttpPathModifier, prefix_only: bool) {
    match p.kind.as_str() {
        "ReplaceFullPath" => match &p.replace_full_path {
            Some(v) => path_value(check, format!("{path}.replaceFullPath"), v),
            None => check.error(format!("{path}.replaceFullPath"), "is required with type ReplaceFullPath"),
        },
        "ReplacePrefixMatch" => {
            match &p.replace_prefix_match {
                Some(v) => path_value(check, format!("{path}.replacePrefixMatch"), v),
                None => check.error(format!("{path}.replacePrefixMatch"), "is required with type ReplacePrefixMatch"),
            }
            if !prefix_only {
                check.error(
                    format!("{path}.type"),
                    "ReplacePrefixMatch needs every match of the rule to be a PathPrefix match",
                );
            }
        }
        other => {
            check.error(format!("{path}.type"), format!("{other:?} is not one of ReplaceFullPath, ReplacePrefixMatch"))
        }
    }
}

/// A path as the API accepts it: absolute, no `//`, `/./`, `/../`, `%2f`,
/// `%2F` or `#`, and not ending in `/.` or `/..`.
fn path_value(check: &mut Checker, path: String, value: &str) {
    let bad = ["//", "/./", "/../", "%2f", "%2F", "#"].iter().find(|s| value.contains(**s));
    if !value.starts_with('/') {
        check.error(path, format!("{value:?} must be an absolute path (start with /)"));
    } else if let Some(s) = bad {
        check.error(path, format!("{value:?} must not contain {s:?}"));
    } else if value.ends_with("/..") || value.ends_with("/.") {
        check.error(path, format!("{value:?} must not end with /. or /.."));
    }
}

/// A Gateway API hostname: a DNS name, optionally with a `*.` prefix; never
/// an IP address.
fn hostname(check: &mut Checker, path: String, value: &str) {
    let name = value.strip_prefix("*.").unwrap_or(value);
    if value.parse::<std::net::IpAddr>().is_ok() {
        check.error(path, format!("{value:?} is an IP address: a hostname must be a DNS name"));
    } else if name.is_empty() || !is_dns1123_subdomain(name) {
        check.error(path, format!("{value:?} is not a hostname: a lower-case DNS name, optionally prefixed by *."));
    }
}

/// A hostname without a wildcard (redirect and rewrite targets).
fn hostname_exact(check: &mut Checker, path: String, value: &str) {
    if value.starts_with('*') {
        check.error(path, format!("{value:?} must not be a wildcard"));
    } else {
        hostname(check, path, value);
    }
}

/// A Gateway API duration (`1h2m3s4ms`: up to four parts of up to five
/// digits); `None` when it is not one.
fn duration(check: &mut Checker, path: &str, value: &str) -> Option<std::time::Duration> {
    let parsed = gateway_api::parse_duration(value);
    if parsed.is_none() {
        check.error(path, format!("{value:?} is not a duration such as 10s, 1m30s or 500ms"));
    }
    parsed
}

pub(super) fn reference_grant(check: &mut Checker, grant: &ReferenceGrant) {
    if grant.spec.from.is_empty() {
        check.error("spec.from", "is required: at least one kind and namespace that may refer");
    }
    if grant.spec.to.is_empty() {
        check.error("spec.to", "is required: at least one kind that may be referred to");
    }
    for (i, f) in grant.spec.from.iter().enumerate() {
        if !is_dns1123_label(&f.namespace) {
            check.error(format!("spec.from[{i}].namespace"), format!("{:?} is not a namespace name", f.namespace));
        }
        if f.kind.is_empty() {
            check.error(format!("spec.from[{i}].kind"), "is required");
        }
    }
    for (i, t) in grant.spec.to.iter().enumerate() {
        if t.kind.is_empty() {
            check.error(format!("spec.to[{i}].kind"), "is required");
        }
    }
}
