//! VirtualService routes as Envoy routes, and TCP routes as tcp_proxy
//! destinations, as Istio's `route.TranslateRoute` builds them.
//!
//! Istio's semantics are kept where a user would notice them: one Envoy
//! route per match condition, in order; a match limited to a port, to
//! gateways, to `sourceLabels` or a `sourceNamespace` applies only there (a
//! match naming gateways ignores the source conditions, as in Istio); a
//! lone destination is the route's cluster whatever its weight, several
//! are weighted clusters without those of weight 0; a route without
//! `retries` gets Istio's default retry policy and one without `timeout`
//! none (`0s`). Header operations go on the route (a lone destination's
//! too) or on the weighted cluster; setting `:authority`/`host` rewrites
//! the authority. `fault` and `corsPolicy` configure the connection
//! manager's filters per route. The consistent-hash key of each
//! destination's DestinationRule goes on the route, where Envoy hashes.
//!
//! Everything here is a pure function of the context, the rule and the
//! [`RouteTarget`]; nothing depends on map iteration order.

mod headers;
mod matching;
mod per_filter;
mod retry;

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine as _;
use envoy_types::pb::envoy::config::core::v3::{DataSource, RuntimeFractionalPercent, data_source::Specifier};
use envoy_types::pb::envoy::config::route::v3::{
    DirectResponseAction, RedirectAction, Route, RouteAction, WeightedCluster,
    redirect_action::{PathRewriteSpecifier, RedirectResponseCode, SchemeRewriteSpecifier},
    route::Action,
    route_action::{
        ClusterNotFoundResponseCode, ClusterSpecifier, HashPolicy, HostRewriteSpecifier, RequestMirrorPolicy,
        hash_policy::{ConnectionProperties, Cookie, CookieAttribute, Header, PolicySpecifier, QueryParameter},
    },
    route_match::PathSpecifier,
    weighted_cluster::{ClusterWeight, cluster_weight},
};
use envoy_types::pb::envoy::r#type::matcher::v3::RegexMatchAndSubstitute;

pub use matching::prefix_match;
pub use retry::default_retry_policy;

use super::{naming, policy, proto};
use crate::config::istio::{
    Destination, HttpMatchRequest, HttpRedirect, HttpRoute, L4MatchAttributes, Percent, TlsMatchAttributes,
};
use crate::model::host;
use crate::push::index::{ResolvedVirtualService, RouteSemantics, resolve_gateway_ref};
use crate::push::{PushContext, Scope};

/// Where routes are generated for: the proxy's namespace (which
/// DestinationRule applies, which `sourceNamespace` matches), the
/// `sourceLabels` its labels satisfy, the port requests arrive on, and the
/// gateway (`mesh` for sidecars, `namespace/name` for routers).
#[derive(Debug, Clone, Copy)]
pub struct RouteTarget<'a> {
    /// The snapshot.
    pub ctx: &'a PushContext,
    /// The proxy's namespace.
    pub namespace: &'a str,
    /// The `sourceLabels` selectors the proxy satisfies.
    pub source_labels: &'a [BTreeMap<String, String>],
    /// The port requests arrive on: a match's `port` must equal it, and it
    /// is the destination port of last resort.
    pub port: u32,
    /// `mesh` or the gateway's `namespace/name`.
    pub gateway: &'a str,
}

/// The upstream(s) of a route or a tcp_proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backends {
    /// One cluster.
    Single(String),
    /// Clusters with positive weights, in the rule's order.
    Weighted(Vec<(String, u32)>),
}

/// The conditions of a match that decide whether it applies to a proxy.
struct Applicability<'m> {
    port: Option<u32>,
    gateways: &'m [String],
    source_labels: &'m BTreeMap<String, String>,
    source_namespace: Option<&'m str>,
}

impl<'a> RouteTarget<'a> {
    /// The target for a proxy of `scope` on `port` through `gateway`.
    pub fn new(ctx: &'a PushContext, scope: &'a Scope, port: u32, gateway: &'a str) -> RouteTarget<'a> {
        RouteTarget { ctx, namespace: &scope.key.namespace, source_labels: &scope.key.source_labels, port, gateway }
    }

    /// The Envoy routes of a VirtualService's HTTP routes that apply here, in order.
    pub fn http_routes(&self, vs: &ResolvedVirtualService) -> Vec<Route> {
        let mut out = Vec::new();
        for route in vs.http() {
            if route.matches.is_empty() {
                out.extend(self.http_route(vs, route, None));
                continue;
            }
            for m in route.matches.iter().filter(|m| self.applies(vs, &http_conditions(m))) {
                out.extend(self.http_route(vs, route, Some(m)));
            }
        }
        out
    }

    /// The route of a host without a VirtualService: everything to `cluster`
    /// with Istio's default retries and no timeout.
    pub fn default_route(&self, service_namespace: &str, host: &str, port: u32) -> Route {
        let cluster = naming::outbound_cluster(port, "", host);
        Route {
            name: "default".to_string(),
            r#match: Some(prefix_match("/")),
            action: Some(Action::Route(RouteAction {
                cluster_specifier: Some(ClusterSpecifier::Cluster(cluster)),
                timeout: Some(proto::seconds(0)),
                retry_policy: Some(default_retry_policy(false)),
                hash_policy: self.hash_policy(service_namespace, host, "", Some(port)).into_iter().collect(),
                ..Default::default()
            })),
            ..Default::default()
        }
    }

    /// The backends of the first TCP route of `vs` that applies here, for
    /// connections to `destination` (the addresses the chain matches; empty
    /// when it matches none): a match with `destinationSubnets` applies only
    /// when every one of them lies in one of its subnets.
    pub fn tcp_backends(&self, vs: &ResolvedVirtualService, destination: &[Arc<str>]) -> Option<Backends> {
        let route = vs.spec().tcp.iter().find(|r| {
            r.matches.is_empty()
                || r.matches.iter().any(|m| {
                    self.applies(vs, &l4_conditions(m))
                        && (m.destination_subnets.is_empty()
                            || (!destination.is_empty()
                                && destination
                                    .iter()
                                    .all(|a| m.destination_subnets.iter().any(|s| proto::cidr_contains(s, a)))))
                })
        })?;
        self.backends(vs, route.route.iter().map(|d| (&d.destination, d.weight)))
    }

    /// The TCP routes of `vs` that apply here only to connections to some
    /// `destinationSubnets`, with those subnets: Istio gives each a filter
    /// chain matching them, before the port's default chain.
    pub fn tcp_subnet_routes(&self, vs: &ResolvedVirtualService) -> Vec<(Vec<String>, Backends)> {
        let mut out = Vec::new();
        for route in &vs.spec().tcp {
            let subnets: Vec<String> = route
                .matches
                .iter()
                .filter(|m| !m.destination_subnets.is_empty() && self.applies(vs, &l4_conditions(m)))
                .flat_map(|m| m.destination_subnets.iter().cloned())
                .collect();
            if subnets.is_empty() {
                continue;
            }
            if let Some(backends) = self.backends(vs, route.route.iter().map(|d| (&d.destination, d.weight))) {
                out.push((subnets, backends));
            }
        }
        out
    }

    /// The TLS routes of `vs` that apply here, one entry per match that
    /// applies, in order: the SNI hosts it takes and where they go.
    pub fn tls_routes<'v>(&self, vs: &'v ResolvedVirtualService) -> Vec<(&'v [String], Backends)> {
        self.tls_matches(vs).into_iter().map(|(m, backends)| (m.sni_hosts.as_slice(), backends)).collect()
    }

    /// The TLS route matches of `vs` that apply here, in order, with where
    /// each sends its connections.
    pub fn tls_matches<'v>(&self, vs: &'v ResolvedVirtualService) -> Vec<(&'v TlsMatchAttributes, Backends)> {
        let mut out = Vec::new();
        for route in &vs.spec().tls {
            for m in route.matches.iter().filter(|m| self.applies(vs, &tls_conditions(m))) {
                if let Some(backends) = self.backends(vs, route.route.iter().map(|d| (&d.destination, d.weight))) {
                    out.push((m, backends));
                }
            }
        }
        out
    }

    /// Whether a match applies here (Istio's `sourceMatchHTTP`): the port
    /// must be the one requests arrive on; a match naming gateways applies
    /// on those only, any other to proxies with its source labels and namespace.
    fn applies(&self, vs: &ResolvedVirtualService, m: &Applicability<'_>) -> bool {
        if m.port.is_some_and(|p| p != self.port) {
            return false;
        }
        if !m.gateways.is_empty() {
            return m.gateways.iter().any(|g| &*resolve_gateway_ref(g, &vs.key.namespace) == self.gateway);
        }
        (m.source_labels.is_empty() || self.source_labels.contains(m.source_labels))
            && m.source_namespace.is_none_or(|ns| ns.is_empty() || ns == self.namespace)
    }

    /// One Envoy route for one match condition (`None`: match everything).
    fn http_route(
        &self,
        vs: &ResolvedVirtualService,
        route: &HttpRoute,
        m: Option<&HttpMatchRequest>,
    ) -> Option<Route> {
        let name = match (route.name.as_deref(), m.and_then(|m| m.name.as_deref())) {
            (Some(r), Some(m)) => format!("{r}.{m}"),
            (Some(r), None) => r.to_string(),
            (None, Some(m)) => m.to_string(),
            (None, None) => String::new(),
        };
        let mut out = Route {
            name,
            r#match: Some(matching::route_match(m, vs.semantics.segment_prefixes())),
            stat_prefix: m.and_then(|m| m.stat_prefix.clone()).unwrap_or_default(),
            ..Default::default()
        };
        let mut authority = None;
        if let Some(h) = &route.headers {
            let ops = headers::mutations(h);
            out.request_headers_to_add = ops.request_add;
            out.request_headers_to_remove = ops.request_remove;
            out.response_headers_to_add = ops.response_add;
            out.response_headers_to_remove = ops.response_remove;
            authority = ops.authority;
        }
        let action = if let Some(redirect) = &route.redirect {
            Action::Redirect(self.redirect(redirect))
        } else if let Some(direct) = &route.direct_response {
            let body = direct.body.as_ref().and_then(|b| match (&b.string, &b.bytes) {
                (Some(text), _) => Some(Specifier::InlineString(text.clone())),
                (None, Some(encoded)) => {
                    base64::engine::general_purpose::STANDARD.decode(encoded).ok().map(Specifier::InlineBytes)
                }
                (None, None) => None,
            });
            Action::DirectResponse(DirectResponseAction {
                status: direct.status,
                body: body.map(|specifier| DataSource { specifier: Some(specifier), ..Default::default() }),
                ..Default::default()
            })
        } else {
            Action::Route(self.route_action(vs, route, &mut out, authority)?)
        };
        out.action = Some(action);
        if let Some(fault) = route.fault.as_ref().and_then(per_filter::fault) {
            out.typed_per_filter_config.insert(proto::FAULT.to_string(), proto::any(&fault));
        }
        if let Some(cors) = &route.cors_policy {
            out.typed_per_filter_config.insert(proto::CORS.to_string(), proto::any(&per_filter::cors(cors)));
        }
        Some(out)
    }

    /// The forwarding action of a route; a lone destination's header
    /// operations go on `out`.
    fn route_action(
        &self,
        vs: &ResolvedVirtualService,
        route: &HttpRoute,
        out: &mut Route,
        mut authority: Option<String>,
    ) -> Option<RouteAction> {
        let mut action = RouteAction {
            timeout: Some(route.timeout.map(|t| t.to_proto()).unwrap_or_else(|| proto::seconds(0))),
            ..Default::default()
        };
        let gateway_api = vs.semantics == RouteSemantics::Gateway;
        if gateway_api {
            // The Gateway API answers 500 for a backend that does not resolve.
            action.cluster_not_found_response_code = ClusterNotFoundResponseCode::InternalServerError as i32;
        }
        if let Some(rewrite) = &route.rewrite {
            let separated_prefix = match out.r#match.as_ref().and_then(|m| m.path_specifier.as_ref()) {
                Some(PathSpecifier::PathSeparatedPrefix(p)) => Some(p.as_str()),
                _ => None,
            };
            if let Some(regex) = &rewrite.uri_regex_rewrite {
                action.regex_rewrite = Some(RegexMatchAndSubstitute {
                    pattern: Some(matching::regex(&regex.pattern)),
                    substitution: regex.rewrite.clone(),
                });
            } else if let (true, Some("/"), Some(prefix)) = (gateway_api, rewrite.uri.as_deref(), separated_prefix) {
                // Replacing a segment prefix by `/` removes it, keeping one
                // `/` when the whole path was the prefix (as Istio does).
                action.regex_rewrite = Some(RegexMatchAndSubstitute {
                    pattern: Some(matching::regex(&format!("^{}(/?)(.*)", regex::escape(prefix)))),
                    substitution: r"/\2".to_string(),
                });
            } else if let Some(uri) = rewrite.uri.as_ref().filter(|u| !u.is_empty()) {
                // The matched prefix (for an exact or regex match, the whole path) is replaced.
                action.prefix_rewrite = uri.clone();
            }
            if let Some(a) = rewrite.authority.as_ref().filter(|a| !a.is_empty()) {
                authority = Some(a.clone());
            }
        }
        if let Some(a) = authority {
            action.host_rewrite_specifier = Some(HostRewriteSpecifier::HostRewriteLiteral(a));
        }
        let mirrors = route
            .mirror
            .as_ref()
            .map(|d| (d, mirror_share(route.mirror_percentage.as_ref(), route.mirror_percent)))
            .into_iter()
            .chain(route.mirrors.iter().map(|m| (&m.destination, mirror_share(m.percentage.as_ref(), None))));
        for (destination, share) in mirrors {
            let Some(share) = share else { continue };
            action.request_mirror_policies.push(RequestMirrorPolicy {
                cluster: self.cluster_for(&vs.key.namespace, destination),
                runtime_fraction: Some(RuntimeFractionalPercent { default_value: Some(share), ..Default::default() }),
                trace_sampled: Some(proto::bool_value(false)),
                ..Default::default()
            });
        }
        let mut consistent_hash = false;
        match route.route.as_slice() {
            [] => {
                tracing::debug!(rule = %vs.key, "HTTP route without destinations, redirect or response; skipped");
                return None;
            }
            [only] => {
                action.cluster_specifier =
                    Some(ClusterSpecifier::Cluster(self.cluster_for(&vs.key.namespace, &only.destination)));
                if let Some(h) = &only.headers {
                    let ops = headers::mutations(h);
                    out.request_headers_to_add.extend(ops.request_add);
                    out.request_headers_to_remove.extend(ops.request_remove);
                    out.response_headers_to_add.extend(ops.response_add);
                    out.response_headers_to_remove.extend(ops.response_remove);
                    if let (Some(a), None) = (ops.authority, &action.host_rewrite_specifier) {
                        action.host_rewrite_specifier = Some(HostRewriteSpecifier::HostRewriteLiteral(a));
                    }
                }
                let hash = self.destination_hash(vs, &only.destination);
                consistent_hash = hash.is_some();
                action.hash_policy.extend(hash);
            }
            several => {
                // Without any weight the destinations share equally.
                let any_weight = several.iter().any(|d| d.weight.is_some());
                let mut clusters = Vec::new();
                for d in several {
                    let weight =
                        if any_weight { d.weight.unwrap_or(0).clamp(0, i64::from(u32::MAX)) as u32 } else { 1 };
                    if weight == 0 {
                        continue;
                    }
                    let mut cluster = ClusterWeight {
                        name: self.cluster_for(&vs.key.namespace, &d.destination),
                        weight: Some(proto::u32_value(weight)),
                        ..Default::default()
                    };
                    if let Some(h) = &d.headers {
                        let ops = headers::mutations(h);
                        cluster.request_headers_to_add = ops.request_add;
                        cluster.request_headers_to_remove = ops.request_remove;
                        cluster.response_headers_to_add = ops.response_add;
                        cluster.response_headers_to_remove = ops.response_remove;
                        cluster.host_rewrite_specifier =
                            ops.authority.map(cluster_weight::HostRewriteSpecifier::HostRewriteLiteral);
                    }
                    clusters.push(cluster);
                    action.hash_policy.extend(self.destination_hash(vs, &d.destination));
                }
                if clusters.is_empty() {
                    // Every weight is 0: Envoy needs a positive total, so they share.
                    return self.route_action(vs, &all_weighted_equally(route), out, None);
                }
                action.cluster_specifier = Some(match clusters.len() {
                    1 if clusters[0].request_headers_to_add.is_empty()
                        && clusters[0].request_headers_to_remove.is_empty()
                        && clusters[0].response_headers_to_add.is_empty()
                        && clusters[0].response_headers_to_remove.is_empty()
                        && clusters[0].host_rewrite_specifier.is_none() =>
                    {
                        ClusterSpecifier::Cluster(clusters.remove(0).name)
                    }
                    _ => ClusterSpecifier::WeightedClusters(WeightedCluster { clusters, ..Default::default() }),
                });
            }
        }
        action.retry_policy = retry::retry_policy(route.retries.as_ref(), consistent_hash);
        Some(action)
    }

    /// A redirect as Istio's `ApplyRedirect` builds it.
    fn redirect(&self, redirect: &HttpRedirect) -> RedirectAction {
        let code = match redirect.redirect_code {
            Some(302) => RedirectResponseCode::Found,
            Some(303) => RedirectResponseCode::SeeOther,
            Some(307) => RedirectResponseCode::TemporaryRedirect,
            Some(308) => RedirectResponseCode::PermanentRedirect,
            _ => RedirectResponseCode::MovedPermanently,
        };
        let path = match (&redirect.prefix_rewrite, &redirect.uri) {
            (Some(prefix), _) if !prefix.is_empty() => Some(PathRewriteSpecifier::PrefixRewrite(prefix.clone())),
            (_, Some(uri)) => Some(PathRewriteSpecifier::PathRedirect(uri.clone())),
            _ => None,
        };
        let mut port = match (redirect.port, redirect.derive_port.as_deref()) {
            (Some(p), _) => p,
            // Envoy cannot take the port from the request; routes are built
            // per port, so the port requests arrive on is that port.
            (None, Some("FROM_REQUEST_PORT")) => self.port,
            _ => 0,
        };
        let scheme = redirect.scheme.as_deref().filter(|s| !s.is_empty());
        // No explicit :80 for http or :443 for https (this listener is plain HTTP).
        let effective_scheme = scheme.unwrap_or("http");
        if (port == 80 && effective_scheme == "http") || (port == 443 && effective_scheme == "https") {
            port = 0;
        }
        RedirectAction {
            host_redirect: redirect.authority.clone().unwrap_or_default(),
            path_rewrite_specifier: path,
            scheme_rewrite_specifier: scheme.map(|s| SchemeRewriteSpecifier::SchemeRedirect(s.to_string())),
            port_redirect: port,
            response_code: code as i32,
            ..Default::default()
        }
    }

    /// Clusters and weights of a TCP destination list (Istio's weight rules).
    fn backends<'d>(
        &self,
        vs: &ResolvedVirtualService,
        destinations: impl Iterator<Item = (&'d Destination, Option<i64>)>,
    ) -> Option<Backends> {
        let list: Vec<(String, Option<i64>)> =
            destinations.map(|(d, w)| (self.cluster_for(&vs.key.namespace, d), w)).collect();
        if list.len() == 1 {
            return list.into_iter().next().map(|(c, _)| Backends::Single(c));
        }
        let any_weight = list.iter().any(|(_, w)| w.is_some());
        let mut weights: Vec<u32> = list
            .iter()
            .map(|(_, w)| if any_weight { w.map_or(0, |w| w.clamp(0, i64::from(u32::MAX)) as u32) } else { 1 })
            .collect();
        if weights.iter().all(|w| *w == 0) {
            // Envoy needs a positive total.
            weights.fill(1);
        }
        let mut weighted: Vec<(String, u32)> = Vec::new();
        for ((cluster, _), w) in list.into_iter().zip(weights) {
            if w == 0 {
                continue;
            }
            match weighted.iter_mut().find(|(c, _)| *c == cluster) {
                Some(entry) => entry.1 = entry.1.saturating_add(w),
                None => weighted.push((cluster, w)),
            }
        }
        match weighted.len() {
            0 => None,
            1 => weighted.pop().map(|(c, _)| Backends::Single(c)),
            _ => Some(Backends::Weighted(weighted)),
        }
    }

    /// `outbound|port|subset|host` of a destination written in a rule of
    /// `rule_namespace`. The port: the destination's, else the service's only
    /// port, else the port requests arrived on.
    /// A destination naming an alias (an `ExternalName` Service) goes to the
    /// cluster of the service the alias names, as in Istio.
    fn cluster_for(&self, rule_namespace: &str, d: &Destination) -> String {
        let host = host::resolve(&d.host, rule_namespace);
        let host = self.ctx.services.concrete(&host);
        naming::outbound_cluster(self.destination_port(host, d), d.subset.as_deref().unwrap_or(""), host)
    }

    fn destination_port(&self, host: &str, d: &Destination) -> u32 {
        d.port
            .as_ref()
            .map(|p| p.number)
            .filter(|p| *p != 0)
            .or_else(|| self.ctx.services.get(host).filter(|s| s.ports.len() == 1).map(|s| s.ports[0].port))
            .unwrap_or(self.port)
    }

    /// The hash policy of a destination whose DestinationRule hashes consistently.
    fn destination_hash(&self, vs: &ResolvedVirtualService, d: &Destination) -> Option<HashPolicy> {
        let host = host::resolve(&d.host, &vs.key.namespace);
        let host = self.ctx.services.concrete(&host);
        let svc_ns = self.ctx.services.get(host).map(|s| s.namespace.clone());
        let port = self.destination_port(host, d);
        self.hash_policy(
            svc_ns.as_deref().unwrap_or(self.namespace),
            host,
            d.subset.as_deref().unwrap_or(""),
            Some(port),
        )
    }

    fn hash_policy(&self, service_namespace: &str, host: &str, subset: &str, port: Option<u32>) -> Option<HashPolicy> {
        let policy = policy::for_destination(self.ctx, self.namespace, service_namespace, host, subset, port);
        let hash = policy.traffic.load_balancer?.consistent_hash?;
        let specifier = if let Some(header) = hash.http_header_name.filter(|h| !h.is_empty()) {
            PolicySpecifier::Header(Header { header_name: header, ..Default::default() })
        } else if let Some(cookie) = hash.http_cookie {
            PolicySpecifier::Cookie(Cookie {
                name: cookie.name,
                ttl: cookie.ttl.map(|t| t.to_proto()),
                path: cookie.path.unwrap_or_default(),
                attributes: cookie
                    .attributes
                    .into_iter()
                    .map(|a| CookieAttribute { name: a.name, value: a.value.unwrap_or_default() })
                    .collect(),
            })
        } else if hash.use_source_ip == Some(true) {
            PolicySpecifier::ConnectionProperties(ConnectionProperties { source_ip: true })
        } else if let Some(name) = hash.http_query_parameter_name.filter(|n| !n.is_empty()) {
            PolicySpecifier::QueryParameter(QueryParameter { name })
        } else {
            return None;
        };
        Some(HashPolicy { policy_specifier: Some(specifier), ..Default::default() })
    }
}

/// The applicability conditions of a TCP match.
fn l4_conditions(m: &L4MatchAttributes) -> Applicability<'_> {
    Applicability {
        port: m.port,
        gateways: &m.gateways,
        source_labels: &m.source_labels,
        source_namespace: m.source_namespace.as_deref(),
    }
}

/// The applicability conditions of a TLS match.
fn tls_conditions(m: &TlsMatchAttributes) -> Applicability<'_> {
    Applicability {
        port: m.port,
        gateways: &m.gateways,
        source_labels: &m.source_labels,
        source_namespace: m.source_namespace.as_deref(),
    }
}

/// The applicability conditions of an HTTP match.
fn http_conditions(m: &HttpMatchRequest) -> Applicability<'_> {
    Applicability {
        port: m.port,
        gateways: &m.gateways,
        source_labels: &m.source_labels,
        source_namespace: m.source_namespace.as_deref(),
    }
}

/// The share of requests a mirror copies: `None` for an explicit 0 (no
/// mirroring), every request when no share is given.
fn mirror_share(
    percentage: Option<&Percent>,
    percent: Option<u32>,
) -> Option<envoy_types::pb::envoy::r#type::v3::FractionalPercent> {
    match (percentage, percent) {
        (Some(p), _) => (p.value > 0.0).then(|| per_filter::per_million(p)),
        (None, Some(n)) => (n > 0).then(|| per_filter::per_hundred(n.min(100))),
        (None, None) => Some(per_filter::per_hundred(100)),
    }
}

/// The route with every destination's weight removed (they then share equally).
fn all_weighted_equally(route: &HttpRoute) -> HttpRoute {
    let mut route = route.clone();
    for d in &mut route.route {
        d.weight = None;
    }
    route
}

/// A route sending everything to `cluster` (the catch-all virtual host).
pub fn catch_all_route(cluster: &str) -> Route {
    Route {
        name: naming::ALLOW_ANY_VIRTUAL_HOST.to_string(),
        r#match: Some(prefix_match("/")),
        action: Some(Action::Route(RouteAction {
            cluster_specifier: Some(ClusterSpecifier::Cluster(cluster.to_string())),
            timeout: Some(proto::seconds(0)),
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// A route answering 502 to everything (`REGISTRY_ONLY`'s catch-all).
pub fn block_all_route() -> Route {
    Route {
        name: naming::BLOCK_ALL_VIRTUAL_HOST.to_string(),
        r#match: Some(prefix_match("/")),
        action: Some(Action::DirectResponse(DirectResponseAction { status: 502, ..Default::default() })),
        ..Default::default()
    }
}
