//! A route of any of the API's kinds, and its conversion into Istio's
//! rules: the step between attachment (which reads a route's parents and
//! hostnames through [`Route`]) and VirtualService assembly (which merges
//! the [`RouteRules`] of every route of a host).
//!
//! It owns what the kinds share: the dispatch to the HTTP and gRPC
//! conversion (`http_route`) and the TCP and TLS one (`stream_route`), the
//! `ResolvedRefs` condition, and where a backend reference points. Invariant:
//! a backend that does not resolve stays in the rules as a destination no
//! cluster serves (its share of traffic fails) and is reported, never
//! dropped, so that the other backends keep their shares.

use crate::config::gateway_api::{BackendObjectReference, GrpcRoute, HttpRoute, ParentReference, TcpRoute, TlsRoute};
use crate::config::istio::{self, Destination, PortSelector};
use crate::config::{ConfigKey, ConfigKind, ConfigObject, ObjectMeta};
use crate::model::{StoreSnapshot, host};

use super::grants::Grants;
use super::http_route;
use super::status::Condition;
use super::stream_route::stream_rules;

/// The route kinds, in the order they are translated.
pub(super) const ROUTE_KINDS: [ConfigKind; 4] =
    [ConfigKind::HttpRoute, ConfigKind::GrpcRoute, ConfigKind::TcpRoute, ConfigKind::TlsRoute];

/// A route of any of the API's kinds, as attachment and status read it.
#[derive(Debug, Clone, Copy)]
pub(super) enum Route<'a> {
    Http(&'a HttpRoute),
    Grpc(&'a GrpcRoute),
    Tcp(&'a TcpRoute),
    Tls(&'a TlsRoute),
}

impl<'a> Route<'a> {
    /// The route `object` is, if it is one.
    pub(super) fn of(object: &'a ConfigObject) -> Option<Route<'a>> {
        match object {
            ConfigObject::HttpRoute(r) => Some(Route::Http(r)),
            ConfigObject::GrpcRoute(r) => Some(Route::Grpc(r)),
            ConfigObject::TcpRoute(r) => Some(Route::Tcp(r)),
            ConfigObject::TlsRoute(r) => Some(Route::Tls(r)),
            _ => None,
        }
    }

    /// The kind as manifests and `allowedRoutes` write it.
    pub(super) fn kind(self) -> &'static str {
        match self {
            Route::Http(_) => "HTTPRoute",
            Route::Grpc(_) => "GRPCRoute",
            Route::Tcp(_) => "TCPRoute",
            Route::Tls(_) => "TLSRoute",
        }
    }

    /// Its name, namespace and creation time.
    pub(super) fn metadata(self) -> &'a ObjectMeta {
        match self {
            Route::Http(r) => &r.metadata,
            Route::Grpc(r) => &r.metadata,
            Route::Tcp(r) => &r.metadata,
            Route::Tls(r) => &r.metadata,
        }
    }

    /// The parents it asks to attach to.
    pub(super) fn parent_refs(self) -> &'a [ParentReference] {
        match self {
            Route::Http(r) => &r.spec.parent_refs,
            Route::Grpc(r) => &r.spec.parent_refs,
            Route::Tcp(r) => &r.spec.parent_refs,
            Route::Tls(r) => &r.spec.parent_refs,
        }
    }

    /// The hostnames it routes (a TCPRoute has none: it takes any).
    pub(super) fn hostnames(self) -> &'a [String] {
        match self {
            Route::Http(r) => &r.spec.hostnames,
            Route::Grpc(r) => &r.spec.hostnames,
            Route::Tcp(_) => &[],
            Route::Tls(r) => &r.spec.hostnames,
        }
    }
}

/// The converted rules of one route, ready to merge into a host's
/// VirtualService.
#[derive(Debug, Clone)]
pub(super) struct RouteRules {
    /// (creation time, namespace, name): older routes go first.
    pub(super) order: (String, String, String),
    /// The route's kind, namespace and name.
    pub(super) kind: &'static str,
    pub(super) namespace: String,
    pub(super) name: String,
    /// The store revision of the route.
    pub(super) revision: u64,
    pub(super) rules: Rules,
}

/// A route's rules as Istio's: HTTP routes (of an HTTPRoute or GRPCRoute),
/// TCP routes, or TLS routes (whose SNI match is set per host when the
/// VirtualService is assembled).
#[derive(Debug, Clone)]
pub(super) enum Rules {
    Http(Vec<istio::HttpRoute>),
    Tcp(Vec<istio::TcpRoute>),
    Tls(Vec<istio::TlsRoute>),
}

/// Why a route's references do not all resolve (`ResolvedRefs` False), and
/// whether the route is still served.
#[derive(Debug, Clone)]
pub(super) struct RefProblem {
    /// The condition's reason.
    pub(super) reason: &'static str,
    /// The condition's message.
    pub(super) message: String,
}

/// A route converted: its rules (with the reference problem, if any, that
/// leaves some backends unresolved), or a problem that stops it being served.
pub(super) type Converted = Result<(RouteRules, Option<RefProblem>), RefProblem>;

/// The `ResolvedRefs` condition of a converted route.
pub(super) fn resolved_condition(converted: &Converted) -> Condition {
    match converted {
        Ok((_, None)) => Condition::new("ResolvedRefs", true, "ResolvedRefs", "All references resolved"),
        Ok((_, Some(p))) | Err(p) => Condition::new("ResolvedRefs", false, p.reason, p.message.clone()),
    }
}

/// Converts `route` (stored at `revision`) into Istio's rules.
pub(super) fn convert_route(store: &StoreSnapshot, route: Route<'_>, revision: u64, grants: &Grants<'_>) -> Converted {
    let meta = route.metadata();
    let from = (route.kind(), meta.namespace());
    let mut problem: Option<RefProblem> = None;
    let rules = match route {
        Route::Http(r) => Rules::Http(http_route::http_rules(store, from, r, grants, &mut problem)?),
        Route::Grpc(r) => Rules::Http(http_route::grpc_rules(store, from, r, grants, &mut problem)?),
        Route::Tcp(r) => Rules::Tcp(stream_rules(store, from, &r.spec.rules, grants, &mut problem, |route| {
            istio::TcpRoute { route, ..Default::default() }
        })),
        Route::Tls(r) => Rules::Tls(stream_rules(store, from, &r.spec.rules, grants, &mut problem, |route| {
            istio::TlsRoute { route, ..Default::default() }
        })),
    };
    let rules = RouteRules {
        order: (meta.creation_timestamp.clone().unwrap_or_default(), from.1.to_string(), meta.name.clone()),
        kind: route.kind(),
        namespace: from.1.to_string(),
        name: meta.name.clone(),
        revision,
        rules,
    };
    Ok((rules, problem))
}

/// A rule's Envoy route name: its own, else `NAMESPACE.ROUTE.INDEX`.
pub(super) fn rule_name(meta: &ObjectMeta, name: Option<&str>, n: usize) -> String {
    name.map_or_else(|| format!("{}.{}.{n}", meta.namespace(), meta.name), str::to_string)
}

/// The backends of a rule that take traffic (a weight unset counts as 1;
/// one of 0 takes none), each with the weight Istio's route gives it: none
/// for a lone backend, which takes everything.
pub(super) fn weighted<B>(backends: &[B], weight: impl Fn(&B) -> Option<u32>) -> Vec<(&B, Option<i64>)> {
    let taking: Vec<(&B, u32)> = backends.iter().map(|b| (b, weight(b).unwrap_or(1))).filter(|(_, w)| *w > 0).collect();
    let lone = taking.len() == 1;
    taking.into_iter().map(|(b, w)| (b, if lone { None } else { Some(i64::from(w)) })).collect()
}

/// Where a backend of a rule sends its share: [`destination`], or when it
/// does not resolve the destination it leaves in the route, with why
/// recorded in `problem`.
pub(super) fn resolve(
    store: &StoreSnapshot,
    from: (&'static str, &str),
    b: &BackendObjectReference,
    grants: &Grants<'_>,
    problem: &mut Option<RefProblem>,
) -> Destination {
    destination(store, from, b, grants).unwrap_or_else(|(d, p)| {
        *problem = Some(p);
        d
    })
}

/// Where a backend reference of a route (`from`: its kind and namespace)
/// points; when it does not resolve, the destination it leaves in the
/// route (no cluster serves it) and why.
pub(super) fn destination(
    store: &StoreSnapshot,
    from: (&'static str, &str),
    b: &BackendObjectReference,
    grants: &Grants<'_>,
) -> Result<Destination, (Destination, RefProblem)> {
    let (kind, route_ns) = from;
    let ns = b.namespace(route_ns);
    let unresolved = |reason: &'static str, message: String| {
        Err((Destination { host: String::new(), ..Default::default() }, RefProblem { reason, message }))
    };
    if b.group() != "" || b.kind() != "Service" {
        return unresolved(
            "InvalidKind",
            format!("backendRef {} {} {}: only Services are backends", b.group(), b.kind(), b.name),
        );
    }
    if ns != route_ns && !grants.allow(kind, route_ns, ("", "Service", ns, &b.name)) {
        return unresolved(
            "RefNotPermitted",
            format!("backendRef {ns}/{} is in another namespace and no ReferenceGrant allows it", b.name),
        );
    }
    let Some(port) = b.port else {
        return unresolved("UnsupportedValue", format!("backendRef {ns}/{} has no port", b.name));
    };
    let host = host::service_fqdn(&b.name, ns).to_string();
    let d = Destination { host, port: Some(PortSelector { number: port }), ..Default::default() };
    if store.get(&ConfigKey::new(ConfigKind::Service, ns, &b.name)).is_none() {
        return Err((
            d,
            RefProblem { reason: "BackendNotFound", message: format!("Service {ns}/{} does not exist", b.name) },
        ));
    }
    Ok(d)
}
