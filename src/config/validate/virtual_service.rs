//! Checks for VirtualService: hosts, gateways, HTTP and TCP routes, matches,
//! destinations and weights, following Istio's `validateVirtualService`.

use base64::Engine as _;

use super::{Checker, LABEL_RULE, is_dns1123_label, is_dns1123_subdomain, is_ip_or_cidr, is_wildcard_host, one_line};
use crate::config::istio::{
    Destination, Headers, HttpFaultInjection, HttpMatchRequest, HttpRedirect, HttpRoute, MESH_GATEWAY, Percent,
    StringMatch, TcpRoute, TlsRoute, VirtualService, grpc_status_code, grpc_status_names,
};

pub(super) fn virtual_service(check: &mut Checker, vs: &VirtualService) {
    let spec = &vs.spec;
    let bound_to_mesh = spec.gateways.is_empty() || spec.gateways.iter().any(|g| g == MESH_GATEWAY);
    // A VirtualService without hosts is a delegate: it routes only through
    // a root VirtualService that hands routes over to it.
    let delegate = spec.hosts.is_empty();
    if delegate {
        if !spec.gateways.is_empty() {
            check.error(
                "spec.gateways",
                "a delegate VirtualService (one without hosts) takes its root's gateways: remove these",
            );
        }
        if !spec.tcp.is_empty() {
            check.error("spec.tcp", "a delegate VirtualService (one without hosts) routes HTTP only");
        }
        if !spec.tls.is_empty() {
            check.error("spec.tls", "a delegate VirtualService (one without hosts) routes HTTP only");
        }
        if spec.http.is_empty() {
            check.error(
                "spec.http",
                "is empty: a VirtualService needs hosts, and a delegate (one without hosts) HTTP routes",
            );
        }
        for (i, route) in spec.http.iter().enumerate() {
            if route.delegate.is_some() {
                check.error(
                    format!("spec.http[{i}].delegate"),
                    "a delegate cannot delegate again (Istio does not nest delegation)",
                );
            }
        }
    }
    for (i, host) in spec.hosts.iter().enumerate() {
        let path = format!("spec.hosts[{i}]");
        if !is_wildcard_host(host) {
            check.error(
                path,
                format!(
                    "{host:?} is not a host name or wildcard (reviews, reviews.prod.svc.cluster.local, *.example.com)"
                ),
            );
        } else if host == "*" && bound_to_mesh {
            check.error(
                path,
                "\"*\" is not allowed for a VirtualService bound to the mesh gateway: it would capture every host",
            );
        }
    }
    for (i, gateway) in spec.gateways.iter().enumerate() {
        gateway_name(check, format!("spec.gateways[{i}]"), gateway);
    }
    check.export_to(&spec.export_to);
    if spec.http.is_empty() && spec.tcp.is_empty() && spec.tls.is_empty() && !delegate {
        check.error("spec", "has no http, tls or tcp routes: the VirtualService would route nothing");
    }
    for (i, route) in spec.http.iter().enumerate() {
        http_route(check, &format!("spec.http[{i}]"), route);
    }
    for (i, route) in spec.tcp.iter().enumerate() {
        tcp_route(check, &format!("spec.tcp[{i}]"), route);
    }
    for (i, route) in spec.tls.iter().enumerate() {
        tls_route(check, &format!("spec.tls[{i}]"), route, &spec.hosts);
    }
}

/// Whether every name `sni` matches is a name `host` matches (`a.example.com`
/// and `*.example.com` are within `*.example.com`; anything is within `*`).
fn within(sni: &str, host: &str) -> bool {
    let (sni, host) = (sni.to_ascii_lowercase(), host.to_ascii_lowercase());
    match host.strip_prefix('*') {
        None => sni == host,
        Some(suffix) => sni.strip_prefix('*').unwrap_or(&sni).ends_with(suffix) && sni.len() > suffix.len(),
    }
}

/// A TLS route, as Istio's `validateTLSRoute`: matches that each name SNI
/// hosts, every one of them within the VirtualService's hosts.
fn tls_route(check: &mut Checker, path: &str, route: &TlsRoute, hosts: &[String]) {
    if route.matches.is_empty() {
        check.error(format!("{path}.match"), "is empty: a TLS route needs a match with sniHosts");
    }
    if route.route.is_empty() {
        check.error(format!("{path}.route"), "is empty: a TLS route needs at least one destination");
    }
    for (m, condition) in route.matches.iter().enumerate() {
        let mpath = format!("{path}.match[{m}]");
        if condition.sni_hosts.is_empty() {
            check.error(format!("{mpath}.sniHosts"), "is empty: a TLS match names the SNI hosts it takes");
        }
        for (s, sni) in condition.sni_hosts.iter().enumerate() {
            let at = format!("{mpath}.sniHosts[{s}]");
            if !is_wildcard_host(sni) {
                check.error(at, format!("{sni:?} is not a host name or wildcard"));
            } else if !hosts.iter().any(|h| within(sni, h)) {
                check.error(
                    at,
                    format!("{sni:?} is not one of the VirtualService's hosts: Istio requires sniHosts within them"),
                );
            }
        }
        if let Some(port) = condition.port {
            check.port(format!("{mpath}.port"), port);
        }
        for (i, subnet) in condition.destination_subnets.iter().enumerate() {
            if !is_ip_or_cidr(subnet) {
                check.error(
                    format!("{mpath}.destinationSubnets[{i}]"),
                    format!("{subnet:?} is not an IP address or CIDR block"),
                );
            }
        }
        for (g, gateway) in condition.gateways.iter().enumerate() {
            gateway_name(check, format!("{mpath}.gateways[{g}]"), gateway);
        }
    }
    for (d, dest) in route.route.iter().enumerate() {
        destination(check, &format!("{path}.route[{d}].destination"), &dest.destination);
    }
    let weights: Vec<_> = route.route.iter().map(|d| d.weight).collect();
    check_weights(check, path, &weights);
}

fn http_route(check: &mut Checker, path: &str, route: &HttpRoute) {
    let actions: Vec<&str> = [
        ("route", !route.route.is_empty()),
        ("redirect", route.redirect.is_some()),
        ("directResponse", route.direct_response.is_some()),
        ("delegate", route.delegate.is_some()),
    ]
    .into_iter()
    .filter_map(|(name, set)| set.then_some(name))
    .collect();
    match actions.as_slice() {
        [] => check.error(
            path,
            "has none of route, redirect, directResponse or delegate: matching requests would have nowhere to go",
        ),
        [_] => {}
        several => check.error(
            path,
            format!(
                "sets {}: a route either forwards, redirects, answers directly or delegates",
                several.join(" and ")
            ),
        ),
    }
    if route.rewrite.is_some() && (route.redirect.is_some() || route.direct_response.is_some()) {
        check.error(
            path,
            "has a rewrite with a redirect or directResponse: such a request is not forwarded, so it cannot be rewritten",
        );
    }
    if let Some(redirect) = &route.redirect {
        redirect_checks(check, &format!("{path}.redirect"), redirect);
    }
    if let Some(direct) = &route.direct_response {
        let dpath = format!("{path}.directResponse");
        if !(200..=599).contains(&direct.status) {
            check.error(format!("{dpath}.status"), format!("{} is not an HTTP status (200 to 599)", direct.status));
        }
        if let Some(body) = &direct.body {
            match (&body.string, &body.bytes) {
                (Some(_), Some(_)) => check.error(format!("{dpath}.body"), "sets both string and bytes: set one"),
                (None, Some(bytes)) if base64::engine::general_purpose::STANDARD.decode(bytes).is_err() => {
                    check.error(format!("{dpath}.body.bytes"), "is not base64 (bytes are written as base64 in YAML)")
                }
                _ => {}
            }
        }
    }
    if let Some(delegate) = &route.delegate {
        let dpath = format!("{path}.delegate");
        if !is_dns1123_subdomain(&delegate.name) {
            check.error(format!("{dpath}.name"), format!("{:?} is not a VirtualService name", delegate.name));
        }
        if let Some(ns) = delegate.namespace.as_deref().filter(|n| !n.is_empty())
            && !is_dns1123_label(ns)
        {
            check.error(format!("{dpath}.namespace"), format!("{ns:?} is not a namespace name: {LABEL_RULE}"));
        }
    }
    if let Some(rewrite) = &route.rewrite {
        if rewrite.uri.is_some() && rewrite.uri_regex_rewrite.is_some() {
            check.error(format!("{path}.rewrite"), "sets both uri and uriRegexRewrite: set one");
        }
        if let Some(regex) = &rewrite.uri_regex_rewrite {
            compiles(check, &format!("{path}.rewrite.uriRegexRewrite.match"), &regex.pattern);
        }
    }
    if let Some(retries) = &route.retries {
        if retries.attempts < 0 {
            check.error(format!("{path}.retries.attempts"), format!("{} is negative", retries.attempts));
        }
        if let Some(t) = retries.per_try_timeout
            && t.0 < std::time::Duration::from_millis(1)
        {
            check.error(format!("{path}.retries.perTryTimeout"), "must be at least 1ms");
        }
    }
    if let Some(fault) = &route.fault {
        fault_checks(check, &format!("{path}.fault"), fault);
    }
    if route.mirror.is_some() && !route.mirrors.is_empty() {
        check.error(path, "sets both mirror and mirrors: use mirrors for several destinations");
    }
    if route.mirror_percentage.is_some() && route.mirror_percent.is_some() {
        check.error(path, "sets both mirrorPercentage and the deprecated mirrorPercent: keep mirrorPercentage");
    }
    if let Some(p) = &route.mirror_percentage {
        percentage(check, &format!("{path}.mirrorPercentage.value"), p);
    }
    if let Some(p) = route.mirror_percent.filter(|p| *p > 100) {
        check.error(format!("{path}.mirrorPercent"), format!("{p} is more than 100"));
    }
    if let Some(mirror) = &route.mirror {
        destination(check, &format!("{path}.mirror"), mirror);
    }
    for (i, mirror) in route.mirrors.iter().enumerate() {
        destination(check, &format!("{path}.mirrors[{i}].destination"), &mirror.destination);
        if let Some(p) = &mirror.percentage {
            percentage(check, &format!("{path}.mirrors[{i}].percentage.value"), p);
        }
    }
    if let Some(cors) = &route.cors_policy {
        let cpath = format!("{path}.corsPolicy");
        for (i, origin) in cors.allow_origins.iter().enumerate() {
            string_match(check, &format!("{cpath}.allowOrigins[{i}]"), origin);
        }
        if !cors.allow_origins.is_empty() && !cors.allow_origin.is_empty() {
            check.warning(
                format!("{cpath}.allowOrigin"),
                "is ignored because allowOrigins is set (as in Istio): move these origins to allowOrigins",
            );
        }
        if let Some(age) = cors.max_age
            && age.0.subsec_nanos() != 0
        {
            check.error(format!("{cpath}.maxAge"), format!("{age} is not a whole number of seconds"));
        }
        if let Some(mode) = &cors.unmatched_preflights {
            check.one_of(format!("{cpath}.unmatchedPreflights"), mode, &["UNSPECIFIED", "FORWARD", "IGNORE"]);
        }
        for (field, names) in [("allowHeaders", &cors.allow_headers), ("exposeHeaders", &cors.expose_headers)] {
            for (i, name) in names.iter().enumerate() {
                if !is_header_name(name) && name != "*" {
                    check.error(format!("{cpath}.{field}[{i}]"), format!("{name:?} is not a header name"));
                }
            }
        }
    }
    if let Some(headers) = &route.headers {
        header_operations(check, &format!("{path}.headers"), headers);
    }
    for (m, condition) in route.matches.iter().enumerate() {
        match_checks(check, &format!("{path}.match[{m}]"), condition);
    }
    for (d, dest) in route.route.iter().enumerate() {
        destination(check, &format!("{path}.route[{d}].destination"), &dest.destination);
        if let Some(headers) = &dest.headers {
            header_operations(check, &format!("{path}.route[{d}].headers"), headers);
        }
    }
    let weights: Vec<_> = route.route.iter().map(|d| d.weight).collect();
    check_weights(check, path, &weights);
}

fn redirect_checks(check: &mut Checker, path: &str, redirect: &HttpRedirect) {
    if let Some(code) = redirect.redirect_code
        && ![301, 302, 303, 307, 308].contains(&code)
    {
        check.error(
            format!("{path}.redirectCode"),
            format!("{code} is not a redirect status (301, 302, 303, 307 or 308)"),
        );
    }
    if redirect.port.is_some() && redirect.derive_port.is_some() {
        check.error(path, "sets both port and derivePort: set one");
    }
    if let Some(port) = redirect.port {
        check.port(format!("{path}.port"), port);
    }
    if let Some(derive) = &redirect.derive_port {
        check.one_of(format!("{path}.derivePort"), derive, &["FROM_PROTOCOL_DEFAULT", "FROM_REQUEST_PORT"]);
    }
    if redirect.uri.is_some() && redirect.prefix_rewrite.is_some() {
        check.error(path, "sets both uri and prefixRewrite: set one");
    }
}

fn fault_checks(check: &mut Checker, path: &str, fault: &HttpFaultInjection) {
    if fault.delay.is_none() && fault.abort.is_none() {
        check.error(path, "sets neither delay nor abort");
    }
    if let Some(delay) = &fault.delay {
        let dpath = format!("{path}.delay");
        match (delay.fixed_delay, delay.exponential_delay) {
            (Some(_), Some(_)) => check.error(dpath.clone(), "sets both fixedDelay and exponentialDelay: set one"),
            (None, Some(_)) => check.unsupported(
                dpath.clone(),
                Some("an exponentialDelay, which Istio does not implement either: no delay is injected"),
            ),
            (None, None) => check.error(dpath.clone(), "has no fixedDelay"),
            (Some(_), None) => {}
        }
        if let Some(p) = &delay.percentage {
            percentage(check, &format!("{dpath}.percentage.value"), p);
        } else if let Some(n) = delay.percent {
            if !(0..=100).contains(&n) {
                check.error(format!("{dpath}.percent"), format!("{n} is not a percentage (0 to 100)"));
            }
        } else {
            check.warning(
                format!("{dpath}.percentage"),
                "is not set: no request is delayed (as in Istio); set percentage.value: 100 to delay every request",
            );
        }
    }
    if let Some(abort) = &fault.abort {
        let apath = format!("{path}.abort");
        let set = [abort.http_status.is_some(), abort.grpc_status.is_some(), abort.http2_error.is_some()];
        if set.iter().filter(|s| **s).count() > 1 {
            check.error(apath.clone(), "sets more than one of httpStatus, grpcStatus and http2Error: set one");
        }
        if let Some(status) = abort.http_status
            && !(200..=599).contains(&status)
        {
            check.error(format!("{apath}.httpStatus"), format!("{status} is not an HTTP status (200 to 599)"));
        }
        if let Some(name) = &abort.grpc_status
            && grpc_status_code(name).is_none()
        {
            check.error(
                format!("{apath}.grpcStatus"),
                format!("{name:?} is not a gRPC status name ({})", grpc_status_names().join(", ")),
            );
        }
        if abort.http2_error.is_some() && abort.http_status.is_none() && abort.grpc_status.is_none() {
            check.unsupported(
                apath.clone(),
                Some("an http2Error abort, which Istio does not implement either: no request is aborted"),
            );
        }
        if abort.http_status.is_none() && abort.grpc_status.is_none() && abort.http2_error.is_none() {
            check.error(apath.clone(), "sets none of httpStatus, grpcStatus or http2Error");
        }
        match &abort.percentage {
            Some(p) => percentage(check, &format!("{apath}.percentage.value"), p),
            None => check.warning(
                format!("{apath}.percentage"),
                "is not set: no request is aborted (as in Istio); set percentage.value: 100 to abort every request",
            ),
        }
    }
}

fn match_checks(check: &mut Checker, mpath: &str, condition: &HttpMatchRequest) {
    for (field, value) in [
        ("uri", &condition.uri),
        ("scheme", &condition.scheme),
        ("method", &condition.method),
        ("authority", &condition.authority),
    ] {
        if let Some(value) = value {
            string_match(check, &format!("{mpath}.{field}"), value);
        }
    }
    for (field, map) in [("headers", &condition.headers), ("withoutHeaders", &condition.without_headers)] {
        for (name, value) in map {
            let hpath = format!("{mpath}.{field}.{name}");
            if name.is_empty() {
                check.error(hpath.clone(), "a header name is empty");
            } else if name.chars().any(|c| c.is_ascii_uppercase()) {
                check.error(
                    hpath.clone(),
                    format!("header name {name:?} has upper-case letters: write it as {:?} (HTTP/2 header names are lower-case)", name.to_ascii_lowercase()),
                );
            }
            string_match_or_presence(check, &hpath, value);
        }
    }
    for (name, value) in &condition.query_params {
        string_match_or_presence(check, &format!("{mpath}.queryParams.{name}"), value);
    }
    if let Some(port) = condition.port {
        check.port(format!("{mpath}.port"), port);
    }
    for (g, gateway) in condition.gateways.iter().enumerate() {
        gateway_name(check, format!("{mpath}.gateways[{g}]"), gateway);
    }
    if let Some(ns) = condition.source_namespace.as_deref().filter(|ns| !ns.is_empty())
        && !is_dns1123_label(ns)
    {
        check.error(format!("{mpath}.sourceNamespace"), format!("{ns:?} is not a namespace name: {LABEL_RULE}"));
    }
    if !condition.gateways.is_empty() && (!condition.source_labels.is_empty() || condition.source_namespace.is_some()) {
        check.warning(
            format!("{mpath}.sourceLabels"),
            "is not used: a match that names gateways applies on those gateways whatever the source (as in Istio)",
        );
    }
}

fn header_operations(check: &mut Checker, path: &str, headers: &Headers) {
    for (side, ops) in [("request", &headers.request), ("response", &headers.response)] {
        let Some(ops) = ops else { continue };
        for (op, names) in [
            ("set", ops.set.keys().collect::<Vec<_>>()),
            ("add", ops.add.keys().collect()),
            ("remove", ops.remove.iter().collect()),
        ] {
            for name in names {
                let at = format!("{path}.{side}.{op}.{name}");
                if !is_header_name(name.trim_start_matches(':')) {
                    check.error(at, format!("{name:?} is not a header name"));
                } else if name.starts_with(':') && !(side == "request" && op != "remove" && name == ":authority") {
                    check.warning(
                        at,
                        format!("{name:?} is a pseudo-header, which Envoy does not let routes change: ignored"),
                    );
                } else if name.eq_ignore_ascii_case("host") && op == "remove" {
                    check.warning(at, "the host header cannot be removed: ignored");
                }
            }
        }
    }
}

/// An HTTP header name: an RFC 9110 token.
pub(super) fn is_header_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn percentage(check: &mut Checker, path: &str, p: &Percent) {
    if !(0.0..=100.0).contains(&p.value) {
        check.error(path, format!("{} is not a percentage (0 to 100)", p.value));
    }
}

fn tcp_route(check: &mut Checker, path: &str, route: &TcpRoute) {
    if route.route.is_empty() {
        check.error(format!("{path}.route"), "is empty: a TCP route needs at least one destination");
    }
    for (m, condition) in route.matches.iter().enumerate() {
        if let Some(port) = condition.port {
            check.port(format!("{path}.match[{m}].port"), port);
        }
        for (i, subnet) in condition.destination_subnets.iter().enumerate() {
            let at = format!("{path}.match[{m}].destinationSubnets[{i}]");
            if !is_ip_or_cidr(subnet) {
                check.error(at, format!("{subnet:?} is not an IP address or CIDR block"));
            }
        }
        if let Some(subnet) = &condition.source_subnet {
            check.unsupported(
                format!("{path}.match[{m}].sourceSubnet"),
                Some(if is_ip_or_cidr(subnet) {
                    "the route applies whatever the source address"
                } else {
                    "and it is not an IP address or CIDR block"
                }),
            );
        }
        for (g, gateway) in condition.gateways.iter().enumerate() {
            gateway_name(check, format!("{path}.match[{m}].gateways[{g}]"), gateway);
        }
    }
    for (d, dest) in route.route.iter().enumerate() {
        destination(check, &format!("{path}.route[{d}].destination"), &dest.destination);
    }
    let weights: Vec<_> = route.route.iter().map(|d| d.weight).collect();
    check_weights(check, path, &weights);
}

fn destination(check: &mut Checker, path: &str, dest: &Destination) {
    if dest.host.is_empty() {
        check.error(format!("{path}.host"), "is empty: a destination needs a host");
    } else if dest.host == "*" || !is_wildcard_host(&dest.host) || dest.host.starts_with("*.") {
        check.error(
            format!("{path}.host"),
            format!("{:?} is not a host name (wildcards cannot be destinations)", dest.host),
        );
    }
    if let Some(subset) = &dest.subset
        && !is_dns1123_label(subset)
    {
        check.error(format!("{path}.subset"), format!("{subset:?} is not a valid subset name: {LABEL_RULE}"));
    }
    if let Some(port) = &dest.port {
        check.port(format!("{path}.port.number"), port.number);
    }
}

/// Weights of one route's destinations: none negative; when every
/// destination has one, they add up to 100 (Istio shares the traffic out
/// by them, and a total other than 100 is almost always a typo).
fn check_weights(check: &mut Checker, path: &str, weights: &[Option<i64>]) {
    for (d, weight) in weights.iter().enumerate() {
        if let Some(w) = *weight {
            let wpath = format!("{path}.route[{d}].weight");
            if w < 0 {
                check.error(wpath, format!("{w} is negative"));
            } else if w > 100 {
                check.error(wpath, format!("{w} is more than 100: weights are percentages of the route's traffic"));
            }
        }
    }
    let set: Vec<i64> = weights.iter().flatten().copied().collect();
    if set.is_empty() || set.iter().any(|w| *w < 0) {
        return;
    }
    if set.len() == weights.len() {
        let total: i64 = set.iter().sum();
        if total != 100 && !(weights.len() == 1 && total == 0) {
            let listed = set.iter().map(i64::to_string).collect::<Vec<_>>().join(" + ");
            check.error(format!("{path}.route"), format!("weights add up to {total} ({listed}), not 100"));
        }
    } else {
        check.warning(
            format!("{path}.route"),
            format!(
                "{} of {} destinations have a weight: set a weight on every destination or on none",
                set.len(),
                weights.len()
            ),
        );
    }
}

/// A string match where an empty one means "present" (headers, query parameters).
fn string_match_or_presence(check: &mut Checker, path: &str, m: &StringMatch) {
    if m.exact.is_some() || m.prefix.is_some() || m.regex.is_some() {
        if m.regex.as_deref() == Some("*") {
            return;
        }
        string_match(check, path, m);
    }
}

pub(super) fn compiles(check: &mut Checker, path: &str, pattern: &str) {
    if let Err(err) = regex::Regex::new(pattern) {
        check.error(path, format!("{pattern:?} does not compile: {}", one_line(&err.to_string())));
    }
}

fn string_match(check: &mut Checker, path: &str, m: &StringMatch) {
    let set: Vec<&str> = [("exact", &m.exact), ("prefix", &m.prefix), ("regex", &m.regex)]
        .into_iter()
        .filter_map(|(name, v)| v.as_ref().map(|_| name))
        .collect();
    match set.len() {
        0 => check.error(path, "is empty: set exactly one of exact, prefix or regex"),
        1 => {}
        _ => check.error(path, format!("sets {}: set exactly one of exact, prefix or regex", set.join(" and "))),
    }
    if let Some(pattern) = &m.regex {
        compiles(check, &format!("{path}.regex"), pattern);
    }
}

/// A gateway reference: `mesh`, `name` (the rule's namespace) or `namespace/name`.
fn gateway_name(check: &mut Checker, path: String, gateway: &str) {
    if gateway == MESH_GATEWAY {
        return;
    }
    let ok = match gateway.split_once('/') {
        Some((namespace, name)) => is_dns1123_label(namespace) && is_dns1123_subdomain(name),
        None => is_dns1123_subdomain(gateway),
    };
    if !ok {
        check.error(path, format!("{gateway:?} is not a gateway reference: write mesh, name or namespace/name"));
    }
}
