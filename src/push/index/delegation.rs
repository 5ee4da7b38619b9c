//! VirtualService delegation, as Istio merges it: a root VirtualService
//! (one with hosts) hands an HTTP route over to a delegate (one without
//! hosts) with `delegate: {name, namespace}`; the delegate's routes take the
//! root route's place, each merged with it.
//!
//! Istio's rules (`MergeHTTPRoutes`): a delegate route's matches are
//! combined with each root match that does not conflict with it (a
//! conflicting pair is dropped; a delegate match conflicting with every
//! root match drops the whole delegate route); in a combined match the
//! delegate's conditions win and the root's fill what it leaves out. The
//! delegate route keeps its own rewrite, timeout, retries, fault, mirrors,
//! CORS policy and headers, and takes the root route's where it has none;
//! names join as `root-delegate`. The delegate must exist, have no hosts,
//! and be exported to the root's namespace; otherwise the root route is
//! dropped (validation and the reference checks say so). Short host names
//! in a delegate resolve in the delegate's namespace.

use std::collections::BTreeMap;

use crate::config::istio::{self, HttpMatchRequest, HttpRoute, StringMatch};
use crate::config::{ConfigKey, ConfigKind};
use crate::model::host;
use crate::model::service::ExportTo;

/// The delegates of a snapshot, by key.
pub type Delegates<'a> = BTreeMap<ConfigKey, &'a istio::VirtualService>;

/// The HTTP routes of `root` with every delegating route replaced by the
/// delegate's merged routes, and the delegates it read. A delegate that
/// names no `exportTo` is exported to `default_export` (the mesh config's).
pub fn merge(
    root: &istio::VirtualService,
    delegates: &Delegates<'_>,
    default_export: &[String],
) -> (Vec<HttpRoute>, Vec<ConfigKey>) {
    let root_ns = root.metadata.namespace();
    let mut routes = Vec::with_capacity(root.spec.http.len());
    let mut used = Vec::new();
    for route in &root.spec.http {
        let Some(delegate) = &route.delegate else {
            routes.push(route.clone());
            continue;
        };
        let namespace = delegate.namespace.as_deref().filter(|n| !n.is_empty()).unwrap_or(root_ns);
        let key = ConfigKey::new(ConfigKind::VirtualService, namespace, &delegate.name);
        used.push(key.clone());
        let Some(found) = delegates.get(&key) else { continue };
        if !ExportTo::or_default(&found.spec.export_to, default_export, namespace).visible_to(root_ns) {
            continue;
        }
        for sub in &found.spec.http {
            if sub.delegate.is_some() {
                continue; // Istio does not nest delegation.
            }
            if let Some(merged) = merge_route(route, &resolved(sub, namespace)) {
                routes.push(merged);
            }
        }
    }
    (routes, used)
}

/// A delegate route with its destination hosts fully qualified in the
/// delegate's namespace, so they mean the same in the root.
fn resolved(route: &HttpRoute, namespace: &str) -> HttpRoute {
    let mut route = route.clone();
    let fqdn = |h: &mut String| *h = host::resolve(h, namespace).to_string();
    for d in &mut route.route {
        fqdn(&mut d.destination.host);
    }
    if let Some(m) = &mut route.mirror {
        fqdn(&mut m.host);
    }
    for m in &mut route.mirrors {
        fqdn(&mut m.destination.host);
    }
    route
}

fn merge_route(root: &HttpRoute, delegate: &HttpRoute) -> Option<HttpRoute> {
    let matches = merge_matches(&root.matches, &delegate.matches)?;
    let mut out = delegate.clone();
    out.matches = matches;
    out.name = joined(root.name.as_deref(), delegate.name.as_deref());
    out.rewrite = out.rewrite.or_else(|| root.rewrite.clone());
    out.direct_response = out.direct_response.or_else(|| root.direct_response.clone());
    out.timeout = out.timeout.or(root.timeout);
    out.retries = out.retries.or_else(|| root.retries.clone());
    out.fault = out.fault.or_else(|| root.fault.clone());
    out.mirror = out.mirror.or_else(|| root.mirror.clone());
    out.mirror_percent = out.mirror_percent.or(root.mirror_percent);
    out.mirror_percentage = out.mirror_percentage.or(root.mirror_percentage);
    out.cors_policy = out.cors_policy.or_else(|| root.cors_policy.clone());
    if out.mirrors.is_empty() {
        out.mirrors = root.mirrors.clone();
    }
    out.headers = out.headers.or_else(|| root.headers.clone());
    Some(out)
}

/// `None` when the delegate route matches nothing the root route matches.
fn merge_matches(root: &[HttpMatchRequest], delegate: &[HttpMatchRequest]) -> Option<Vec<HttpMatchRequest>> {
    if root.is_empty() {
        return Some(delegate.to_vec());
    }
    if delegate.is_empty() {
        return Some(root.to_vec());
    }
    let mut out = Vec::new();
    for sub in delegate {
        let before = out.len();
        out.extend(root.iter().filter(|r| !conflicts(r, sub)).map(|r| merge_match(r, sub)));
        if out.len() == before {
            return None;
        }
    }
    Some(out)
}

fn merge_match(root: &HttpMatchRequest, delegate: &HttpMatchRequest) -> HttpMatchRequest {
    let mut out = delegate.clone();
    out.name = joined(root.name.as_deref(), delegate.name.as_deref());
    out.uri = out.uri.or_else(|| root.uri.clone());
    out.scheme = out.scheme.or_else(|| root.scheme.clone());
    out.method = out.method.or_else(|| root.method.clone());
    out.authority = out.authority.or_else(|| root.authority.clone());
    let merged = |r: &BTreeMap<String, StringMatch>, d: &BTreeMap<String, StringMatch>| {
        let mut m = r.clone();
        m.extend(d.clone());
        m
    };
    out.headers = merged(&root.headers, &delegate.headers);
    out.without_headers = merged(&root.without_headers, &delegate.without_headers);
    out.query_params = merged(&root.query_params, &delegate.query_params);
    out.port = out.port.filter(|p| *p != 0).or(root.port);
    let mut labels = root.source_labels.clone();
    labels.extend(delegate.source_labels.clone());
    out.source_labels = labels;
    out.source_namespace = out.source_namespace.filter(|n| !n.is_empty()).or_else(|| root.source_namespace.clone());
    if out.gateways.is_empty() {
        out.gateways = root.gateways.clone();
    }
    out.stat_prefix = out.stat_prefix.filter(|p| !p.is_empty()).or_else(|| root.stat_prefix.clone());
    out
}

/// Istio's `hasConflict`: conditions a request cannot meet both of.
fn conflicts(root: &HttpMatchRequest, leaf: &HttpMatchRequest) -> bool {
    let pairs = [
        (&root.uri, &leaf.uri),
        (&root.scheme, &leaf.scheme),
        (&root.method, &leaf.method),
        (&root.authority, &leaf.authority),
    ];
    if pairs.iter().any(|(r, l)| string_conflict(r.as_ref(), l.as_ref())) {
        return true;
    }
    let map_conflict = |r: &BTreeMap<String, StringMatch>, l: &BTreeMap<String, StringMatch>| {
        l.iter().any(|(k, v)| string_conflict(r.get(k), Some(v)))
    };
    if map_conflict(&root.headers, &leaf.headers)
        || map_conflict(&root.without_headers, &leaf.without_headers)
        || map_conflict(&root.query_params, &leaf.query_params)
    {
        return true;
    }
    if root.ignore_uri_case.unwrap_or(false) != leaf.ignore_uri_case.unwrap_or(false) {
        return true;
    }
    if let (Some(r), Some(l)) = (root.port.filter(|p| *p > 0), leaf.port.filter(|p| *p > 0))
        && r != l
    {
        return true;
    }
    if let Some(ns) = root.source_namespace.as_deref().filter(|n| !n.is_empty())
        && leaf.source_namespace.as_deref() != Some(ns)
    {
        return true;
    }
    if leaf.source_labels.iter().any(|(k, v)| root.source_labels.get(k).is_some_and(|rv| rv != v)) {
        return true;
    }
    if !root.gateways.is_empty() && !leaf.gateways.is_empty() {
        return leaf.gateways.len() > root.gateways.len() || leaf.gateways.iter().any(|g| !root.gateways.contains(g));
    }
    false
}

/// Istio's `stringMatchConflict`: a leaf condition that cannot narrow the root's.
fn string_conflict(root: Option<&StringMatch>, leaf: Option<&StringMatch>) -> bool {
    let (Some(root), Some(leaf)) = (root, leaf) else { return false };
    let set = |m: &StringMatch| m.exact.is_some() || m.prefix.is_some() || m.regex.is_some();
    if (root.regex.is_some() && set(leaf)) || (leaf.regex.is_some() && set(root)) {
        return true;
    }
    if let Some(exact) = &root.exact {
        return leaf.prefix.is_some() || leaf.exact.as_ref() != Some(exact);
    }
    if let Some(prefix) = &root.prefix {
        if let Some(p) = &leaf.prefix {
            return !p.starts_with(prefix.as_str());
        }
        if let Some(e) = &leaf.exact {
            return !e.starts_with(prefix.as_str());
        }
    }
    true
}

fn joined(root: Option<&str>, delegate: Option<&str>) -> Option<String> {
    match (root.filter(|r| !r.is_empty()), delegate.filter(|d| !d.is_empty())) {
        (Some(r), Some(d)) => Some(format!("{r}-{d}")),
        (Some(r), None) => Some(r.to_string()),
        (None, d) => d.map(str::to_string),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::istio::{Delegate, Destination, HttpRouteDestination, VirtualServiceSpec};
    use crate::config::{Duration, ObjectMeta};

    fn vs(name: &str, namespace: &str, hosts: &[&str], http: Vec<HttpRoute>) -> istio::VirtualService {
        istio::VirtualService {
            metadata: ObjectMeta { name: name.into(), namespace: namespace.into(), ..Default::default() },
            spec: VirtualServiceSpec {
                hosts: hosts.iter().map(|h| h.to_string()).collect(),
                http,
                ..Default::default()
            },
        }
    }

    fn prefix(p: &str) -> HttpMatchRequest {
        HttpMatchRequest {
            uri: Some(StringMatch { prefix: Some(p.into()), ..Default::default() }),
            ..Default::default()
        }
    }

    fn to(host: &str) -> Vec<HttpRouteDestination> {
        vec![HttpRouteDestination {
            destination: Destination { host: host.into(), ..Default::default() },
            ..Default::default()
        }]
    }

    #[test]
    fn delegate_routes_take_the_root_routes_place_merged_with_it() {
        let root = vs(
            "root",
            "front",
            &["shop.example"],
            vec![
                HttpRoute {
                    name: Some("reviews".into()),
                    matches: vec![prefix("/reviews")],
                    delegate: Some(Delegate { name: "reviews".into(), namespace: Some("back".into()) }),
                    timeout: Some("5s".parse::<Duration>().unwrap()),
                    ..Default::default()
                },
                HttpRoute { route: to("web"), ..Default::default() },
            ],
        );
        let delegate = vs(
            "reviews",
            "back",
            &[],
            vec![
                HttpRoute {
                    name: Some("v2".into()),
                    matches: vec![prefix("/reviews/v2")],
                    route: to("reviews-v2"),
                    ..Default::default()
                },
                // Conflicts with the root's /reviews: dropped.
                HttpRoute { matches: vec![prefix("/ratings")], route: to("ratings"), ..Default::default() },
                HttpRoute { route: to("reviews"), timeout: Some("1s".parse().unwrap()), ..Default::default() },
            ],
        );
        let delegates: Delegates<'_> =
            [(ConfigKey::new(ConfigKind::VirtualService, "back", "reviews"), &delegate)].into();
        let everywhere = ["*".to_string()];
        let (routes, used) = merge(&root, &delegates, &everywhere);
        assert_eq!(used, vec![ConfigKey::new(ConfigKind::VirtualService, "back", "reviews")]);
        let names: Vec<Option<&str>> = routes.iter().map(|r| r.name.as_deref()).collect();
        assert_eq!(names, [Some("reviews-v2"), Some("reviews"), None]);
        assert_eq!(routes[0].matches[0].uri.as_ref().unwrap().prefix.as_deref(), Some("/reviews/v2"));
        assert_eq!(routes[0].timeout, Some("5s".parse().unwrap()), "the root's timeout fills in");
        assert_eq!(
            routes[0].route[0].destination.host, "reviews-v2.back.svc.cluster.local",
            "resolved where the delegate lives"
        );
        assert_eq!(
            routes[1].matches[0].uri.as_ref().unwrap().prefix.as_deref(),
            Some("/reviews"),
            "no match: the root's"
        );
        assert_eq!(routes[1].timeout, Some("1s".parse().unwrap()), "the delegate's own wins");
        assert_eq!(routes[2].route[0].destination.host, "web");
        // Naming no exportTo, it is the mesh's default's: `.` keeps it in its own namespace.
        assert_eq!(merge(&root, &delegates, &[".".to_string()]).0.len(), 1);

        // Not exported to the root's namespace: the route is dropped.
        let mut private = delegate.clone();
        private.spec.export_to = vec![".".into()];
        let delegates: Delegates<'_> =
            [(ConfigKey::new(ConfigKind::VirtualService, "back", "reviews"), &private)].into();
        assert_eq!(merge(&root, &delegates, &everywhere).0.len(), 1);
        // Missing: dropped too.
        assert_eq!(merge(&root, &Delegates::new(), &everywhere).0.len(), 1);
    }
}
