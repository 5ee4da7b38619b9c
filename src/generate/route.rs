//! VirtualService routes as Envoy routes, and TCP routes as tcp_proxy
//! destinations.
//!
//! Istio's semantics are kept where a user would notice them: one Envoy
//! route per match condition, in order; a match limited to a port or to
//! gateways applies only there; weights default to 100 for a lone
//! destination and to 0 for a destination left without one when others have
//! weights; a route without `retries` gets Istio's default retry policy (2
//! attempts) and a route without `timeout` none at all (`0s`). The
//! consistent-hash key of the destination's DestinationRule goes on the
//! route, where Envoy computes the hash.
//!
//! Everything here is a pure function of the context, the rule and the
//! [`RouteTarget`]; nothing depends on map iteration order.

use envoy_types::pb::envoy::config::route::v3::{
    DirectResponseAction, HeaderMatcher, RedirectAction, RetryPolicy, Route, RouteAction, RouteMatch, WeightedCluster,
    header_matcher::HeaderMatchSpecifier,
    redirect_action::{PathRewriteSpecifier, RedirectResponseCode},
    retry_policy::RetryHostPredicate,
    route::Action,
    route_action::{
        ClusterSpecifier, HashPolicy, HostRewriteSpecifier,
        hash_policy::{ConnectionProperties, Header, PolicySpecifier},
    },
    route_match::PathSpecifier,
    weighted_cluster::ClusterWeight,
};
use envoy_types::pb::envoy::extensions::retry::host::previous_hosts::v3::PreviousHostsPredicate;
use envoy_types::pb::envoy::r#type::matcher::v3::{
    RegexMatchAndSubstitute, RegexMatcher, StringMatcher, string_matcher::MatchPattern,
};

use super::{naming, policy, proto};
use crate::config::istio::{Destination, HttpMatchRequest, HttpRetry, HttpRoute, StringMatch};
use crate::model::host;
use crate::push::PushContext;
use crate::push::index::{ResolvedVirtualService, resolve_gateway_ref};

/// Istio's default `retryOn`.
pub const DEFAULT_RETRY_ON: &str = "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes";
/// Istio's default number of retries.
pub const DEFAULT_RETRY_ATTEMPTS: u32 = 2;

/// Where routes are generated for: the proxy's namespace (which
/// DestinationRule applies), the port requests arrive on, and the gateway
/// (`mesh` for sidecars, `namespace/name` for routers).
#[derive(Debug, Clone, Copy)]
pub struct RouteTarget<'a> {
    /// The snapshot.
    pub ctx: &'a PushContext,
    /// The proxy's namespace.
    pub namespace: &'a str,
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

impl RouteTarget<'_> {
    /// The Envoy routes of a VirtualService's HTTP routes that apply here, in order.
    pub fn http_routes(&self, vs: &ResolvedVirtualService) -> Vec<Route> {
        let mut out = Vec::new();
        for route in &vs.spec.http {
            if route.matches.is_empty() {
                out.extend(self.http_route(vs, route, None));
                continue;
            }
            for m in route.matches.iter().filter(|m| self.applies(vs, m.port, &m.gateways)) {
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
                retry_policy: Some(default_retry_policy()),
                hash_policy: self.hash_policy(service_namespace, host, "").into_iter().collect(),
                ..Default::default()
            })),
            ..Default::default()
        }
    }

    /// The backends of the first TCP route of `vs` that applies here.
    pub fn tcp_backends(&self, vs: &ResolvedVirtualService) -> Option<Backends> {
        let route = vs
            .spec
            .tcp
            .iter()
            .find(|r| r.matches.is_empty() || r.matches.iter().any(|m| self.applies(vs, m.port, &m.gateways)))?;
        self.backends(vs, route.route.iter().map(|d| (&d.destination, d.weight)))
    }

    /// Whether a match limited by `port` and `gateways` applies here.
    fn applies(&self, vs: &ResolvedVirtualService, port: Option<u32>, gateways: &[String]) -> bool {
        port.is_none_or(|p| p == self.port)
            && (gateways.is_empty()
                || gateways.iter().any(|g| &*resolve_gateway_ref(g, &vs.key.namespace) == self.gateway))
    }

    /// One Envoy route for one match condition (`None`: match everything).
    fn http_route(
        &self,
        vs: &ResolvedVirtualService,
        route: &HttpRoute,
        m: Option<&HttpMatchRequest>,
    ) -> Option<Route> {
        let action = if let Some(redirect) = &route.redirect {
            let code = match redirect.redirect_code {
                Some(302) => RedirectResponseCode::Found,
                Some(303) => RedirectResponseCode::SeeOther,
                Some(307) => RedirectResponseCode::TemporaryRedirect,
                Some(308) => RedirectResponseCode::PermanentRedirect,
                _ => RedirectResponseCode::MovedPermanently,
            };
            Action::Redirect(RedirectAction {
                host_redirect: redirect.authority.clone().unwrap_or_default(),
                path_rewrite_specifier: redirect.uri.clone().map(PathRewriteSpecifier::PathRedirect),
                response_code: code as i32,
                ..Default::default()
            })
        } else {
            let Some(backends) = self.backends(vs, route.route.iter().map(|d| (&d.destination, d.weight))) else {
                tracing::debug!(rule = %vs.key, "HTTP route without destinations or redirect; skipped");
                return None;
            };
            let mut action = RouteAction {
                cluster_specifier: Some(match backends {
                    Backends::Single(cluster) => ClusterSpecifier::Cluster(cluster),
                    Backends::Weighted(clusters) => ClusterSpecifier::WeightedClusters(WeightedCluster {
                        clusters: clusters
                            .into_iter()
                            .map(|(name, weight)| ClusterWeight {
                                name,
                                weight: Some(proto::u32_value(weight)),
                                ..Default::default()
                            })
                            .collect(),
                        ..Default::default()
                    }),
                }),
                timeout: Some(route.timeout.map(|t| t.to_proto()).unwrap_or_else(|| proto::seconds(0))),
                retry_policy: retry_policy(route.retries.as_ref()),
                hash_policy: self.route_hash_policy(vs, route).into_iter().collect(),
                ..Default::default()
            };
            if let Some(rewrite) = &route.rewrite {
                if let Some(uri) = &rewrite.uri {
                    match m.and_then(|m| m.uri.as_ref()) {
                        // The matched prefix is replaced, the rest of the path kept.
                        None => action.prefix_rewrite = uri.clone(),
                        Some(s) if s.prefix.is_some() => action.prefix_rewrite = uri.clone(),
                        // Exact and regex matches replace the whole path (query kept).
                        Some(_) => {
                            action.regex_rewrite = Some(RegexMatchAndSubstitute {
                                pattern: Some(regex("^.*$")),
                                substitution: uri.clone(),
                            })
                        }
                    }
                }
                if let Some(authority) = &rewrite.authority {
                    action.host_rewrite_specifier = Some(HostRewriteSpecifier::HostRewriteLiteral(authority.clone()));
                }
            }
            Action::Route(action)
        };
        let name = match (route.name.as_deref(), m.and_then(|m| m.name.as_deref())) {
            (Some(r), Some(m)) => format!("{r}.{m}"),
            (Some(r), None) => r.to_string(),
            (None, Some(m)) => m.to_string(),
            (None, None) => String::new(),
        };
        Some(Route { name, r#match: Some(route_match(m)), action: Some(action), ..Default::default() })
    }

    /// Clusters and weights of a destination list (Istio's weight rules).
    fn backends<'d>(
        &self,
        vs: &ResolvedVirtualService,
        destinations: impl Iterator<Item = (&'d Destination, Option<i64>)>,
    ) -> Option<Backends> {
        let list: Vec<(String, Option<i64>)> =
            destinations.map(|(d, w)| (self.cluster_for(&vs.key.namespace, d), w)).collect();
        let any_weight = list.iter().any(|(_, w)| w.is_some());
        // Without any weight the destinations share equally; a destination
        // left without one when others have weights gets 0.
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
    fn cluster_for(&self, rule_namespace: &str, d: &Destination) -> String {
        let host = host::resolve(&d.host, rule_namespace);
        let port = d
            .port
            .as_ref()
            .map(|p| p.number)
            .filter(|p| *p != 0)
            .or_else(|| self.ctx.services.get(&host).filter(|s| s.ports.len() == 1).map(|s| s.ports[0].port))
            .unwrap_or(self.port);
        naming::outbound_cluster(port, d.subset.as_deref().unwrap_or(""), &host)
    }

    /// The hash policy of the first destination (with a weight) whose
    /// DestinationRule hashes consistently.
    fn route_hash_policy(&self, vs: &ResolvedVirtualService, route: &HttpRoute) -> Option<HashPolicy> {
        let any_weight = route.route.iter().any(|d| d.weight.is_some());
        route.route.iter().filter(|d| !any_weight || d.weight.is_some_and(|w| w > 0)).find_map(|d| {
            let host = host::resolve(&d.destination.host, &vs.key.namespace);
            let svc_ns = self.ctx.services.get(&host).map(|s| s.namespace.clone());
            self.hash_policy(
                svc_ns.as_deref().unwrap_or(self.namespace),
                &host,
                d.destination.subset.as_deref().unwrap_or(""),
            )
        })
    }

    fn hash_policy(&self, service_namespace: &str, host: &str, subset: &str) -> Option<HashPolicy> {
        let policy = policy::for_destination(self.ctx, self.namespace, service_namespace, host, subset);
        let hash = policy.traffic.load_balancer?.consistent_hash?;
        let specifier = if let Some(header) = hash.http_header_name.filter(|h| !h.is_empty()) {
            PolicySpecifier::Header(Header { header_name: header, ..Default::default() })
        } else if hash.use_source_ip == Some(true) {
            PolicySpecifier::ConnectionProperties(ConnectionProperties { source_ip: true })
        } else {
            return None;
        };
        Some(HashPolicy { policy_specifier: Some(specifier), ..Default::default() })
    }
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

/// A match on a path prefix.
pub fn prefix_match(prefix: &str) -> RouteMatch {
    RouteMatch { path_specifier: Some(PathSpecifier::Prefix(prefix.to_string())), ..Default::default() }
}

fn route_match(m: Option<&HttpMatchRequest>) -> RouteMatch {
    let Some(m) = m else { return prefix_match("/") };
    let path = match &m.uri {
        Some(StringMatch { exact: Some(p), .. }) => PathSpecifier::Path(p.clone()),
        Some(StringMatch { prefix: Some(p), .. }) => PathSpecifier::Prefix(p.clone()),
        Some(StringMatch { regex: Some(r), .. }) => PathSpecifier::SafeRegex(regex(r)),
        _ => PathSpecifier::Prefix("/".to_string()),
    };
    // `headers` is a BTreeMap: the matchers come out sorted by name.
    let headers = m
        .headers
        .iter()
        .map(|(name, value)| {
            let pattern = match value {
                StringMatch { exact: Some(v), .. } => Some(MatchPattern::Exact(v.clone())),
                StringMatch { prefix: Some(v), .. } => Some(MatchPattern::Prefix(v.clone())),
                StringMatch { regex: Some(v), .. } => Some(MatchPattern::SafeRegex(regex(v))),
                _ => None,
            };
            HeaderMatcher {
                name: name.clone(),
                header_match_specifier: Some(match pattern {
                    Some(p) => {
                        HeaderMatchSpecifier::StringMatch(StringMatcher { match_pattern: Some(p), ignore_case: false })
                    }
                    // An empty match asks only for the header to be there.
                    None => HeaderMatchSpecifier::PresentMatch(true),
                }),
                ..Default::default()
            }
        })
        .collect();
    RouteMatch { path_specifier: Some(path), headers, ..Default::default() }
}

/// An RE2 matcher. The engine is left unset: Envoy's default is RE2, and the
/// explicit `google_re2` field is deprecated.
fn regex(pattern: &str) -> RegexMatcher {
    RegexMatcher { regex: pattern.to_string(), ..Default::default() }
}

/// Istio's retry policy for a route: its defaults when `retries` is absent,
/// none when `attempts` is 0.
fn retry_policy(retries: Option<&HttpRetry>) -> Option<RetryPolicy> {
    let Some(retries) = retries else {
        return Some(default_retry_policy());
    };
    let attempts = proto::positive_u32(retries.attempts)?;
    let mut policy = default_retry_policy();
    policy.num_retries = Some(proto::u32_value(attempts));
    if let Some(on) = retries.retry_on.as_deref().filter(|s| !s.trim().is_empty()) {
        // Numbers in `retryOn` are status codes (Istio's extension).
        let (mut conditions, mut codes) = (Vec::new(), Vec::new());
        for part in on.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part.parse::<u32>() {
                Ok(code) if (100..600).contains(&code) => codes.push(code),
                _ => conditions.push(part),
            }
        }
        if !codes.is_empty() && !conditions.contains(&"retriable-status-codes") {
            conditions.push("retriable-status-codes");
        }
        policy.retry_on = conditions.join(",");
        policy.retriable_status_codes = codes;
    }
    if let Some(t) = retries.per_try_timeout {
        policy.per_try_timeout = Some(t.to_proto());
    }
    Some(policy)
}

/// Istio's `DefaultRetryPolicy`: 2 retries on connection failures, refused
/// streams and 503, preferring hosts not tried yet. Built once (its host
/// predicate is an encoded `Any`); every route gets a clone.
pub fn default_retry_policy() -> RetryPolicy {
    static DEFAULT: std::sync::LazyLock<RetryPolicy> = std::sync::LazyLock::new(|| RetryPolicy {
        retry_on: DEFAULT_RETRY_ON.to_string(),
        num_retries: Some(proto::u32_value(DEFAULT_RETRY_ATTEMPTS)),
        retriable_status_codes: vec![503],
        retry_host_predicate: vec![RetryHostPredicate {
            name: proto::PREVIOUS_HOSTS.to_string(),
            config_type: Some(
                envoy_types::pb::envoy::config::route::v3::retry_policy::retry_host_predicate::ConfigType::TypedConfig(
                    proto::any(&PreviousHostsPredicate::default()),
                ),
            ),
        }],
        host_selection_retry_max_attempts: 5,
        ..Default::default()
    });
    DEFAULT.clone()
}
