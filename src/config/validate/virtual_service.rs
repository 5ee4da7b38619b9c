//! Checks for VirtualService: hosts, gateways, HTTP and TCP routes, matches,
//! destinations and weights, following Istio's `validateVirtualService`.

use super::{Checker, LABEL_RULE, is_dns1123_label, is_dns1123_subdomain, is_wildcard_host, one_line};
use crate::config::istio::{Destination, HttpRoute, MESH_GATEWAY, StringMatch, TcpRoute, VirtualService};

pub(super) fn virtual_service(check: &mut Checker, vs: &VirtualService) {
    let spec = &vs.spec;
    let bound_to_mesh = spec.gateways.is_empty() || spec.gateways.iter().any(|g| g == MESH_GATEWAY);
    if spec.hosts.is_empty() {
        check.error("spec.hosts", "is empty: a VirtualService needs at least one host");
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
    if spec.http.is_empty() && spec.tcp.is_empty() {
        check.error("spec", "has neither http nor tcp routes: the VirtualService would route nothing");
    }
    for (i, route) in spec.http.iter().enumerate() {
        http_route(check, &format!("spec.http[{i}]"), route);
    }
    for (i, route) in spec.tcp.iter().enumerate() {
        tcp_route(check, &format!("spec.tcp[{i}]"), route);
    }
}

fn http_route(check: &mut Checker, path: &str, route: &HttpRoute) {
    match (route.route.is_empty(), &route.redirect) {
        (false, Some(_)) => {
            check.error(path, "has both route and redirect: a route either forwards or redirects");
        }
        (true, None) => {
            check.error(path, "has neither route nor redirect: matching requests would have nowhere to go");
        }
        _ => {}
    }
    if route.redirect.is_some() && route.rewrite.is_some() {
        check.error(
            path,
            "has both redirect and rewrite: a redirected request is not forwarded, so it cannot be rewritten",
        );
    }
    if let Some(code) = route.redirect.as_ref().and_then(|r| r.redirect_code)
        && ![301, 302, 303, 307, 308].contains(&code)
    {
        check.error(
            format!("{path}.redirect.redirectCode"),
            format!("{code} is not a redirect status (301, 302, 303, 307 or 308)"),
        );
    }
    if let Some(retries) = &route.retries
        && retries.attempts < 0
    {
        check.error(format!("{path}.retries.attempts"), format!("{} is negative", retries.attempts));
    }
    for (m, condition) in route.matches.iter().enumerate() {
        let mpath = format!("{path}.match[{m}]");
        if let Some(uri) = &condition.uri {
            string_match(check, &format!("{mpath}.uri"), uri);
        }
        for (name, value) in &condition.headers {
            let hpath = format!("{mpath}.headers.{name}");
            if name.is_empty() {
                check.error(hpath.clone(), "a header name is empty");
            } else if name.chars().any(|c| c.is_ascii_uppercase()) {
                check.error(
                    hpath.clone(),
                    format!("header name {name:?} has upper-case letters: write it as {:?} (HTTP/2 header names are lower-case)", name.to_ascii_lowercase()),
                );
            }
            string_match(check, &hpath, value);
        }
        if let Some(port) = condition.port {
            check.port(format!("{mpath}.port"), port);
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

fn tcp_route(check: &mut Checker, path: &str, route: &TcpRoute) {
    if route.route.is_empty() {
        check.error(format!("{path}.route"), "is empty: a TCP route needs at least one destination");
    }
    for (m, condition) in route.matches.iter().enumerate() {
        if let Some(port) = condition.port {
            check.port(format!("{path}.match[{m}].port"), port);
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
    if let Some(pattern) = &m.regex
        && let Err(err) = regex::Regex::new(pattern)
    {
        check.error(format!("{path}.regex"), format!("{pattern:?} does not compile: {}", one_line(&err.to_string())));
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
