//! TCPRoutes and TLSRoutes as Istio's TCP and TLS routes: the conversion
//! step for the kinds that route whole connections, between attachment and
//! VirtualService assembly (which sets a TLS route's SNI match per host and
//! a mesh route's port).
//!
//! It owns where a rule sends connections. Invariant: a rule always has a
//! destination; with no backend of positive weight it is one no cluster
//! serves, so that connections are refused as the API asks rather than
//! falling through to another route.

use crate::config::gateway_api::StreamRouteRule;
use crate::config::istio::{self, Destination, PortSelector};
use crate::model::StoreSnapshot;

use super::grants::Grants;
use super::routes::{RefProblem, resolve, weighted};

/// The rules of a TCPRoute or TLSRoute (`from`: its kind and namespace) as
/// Istio's, each made by `istio_route` from where the rule sends
/// connections (a TLS route without its SNI match: that is set per host
/// when the VirtualService is assembled).
pub(super) fn stream_rules<R>(
    store: &StoreSnapshot,
    from: (&'static str, &str),
    rules: &[StreamRouteRule],
    grants: &Grants<'_>,
    problem: &mut Option<RefProblem>,
    istio_route: impl Fn(Vec<istio::RouteDestination>) -> R,
) -> Vec<R> {
    rules.iter().map(|rule| istio_route(stream_destinations(store, from, rule, grants, problem))).collect()
}

/// Where a TCPRoute or TLSRoute rule sends connections. With no backend of
/// positive weight the API asks for connections to be refused: they go to
/// a destination no cluster serves, as Istio does.
fn stream_destinations(
    store: &StoreSnapshot,
    from: (&'static str, &str),
    rule: &StreamRouteRule,
    grants: &Grants<'_>,
    problem: &mut Option<RefProblem>,
) -> Vec<istio::RouteDestination> {
    let weighted = weighted(&rule.backend_refs, |b| b.weight);
    if weighted.is_empty() {
        let nowhere = Destination {
            host: "internal.cluster.local".to_string(),
            subset: Some("zero-weight".to_string()),
            port: Some(PortSelector { number: 65535 }),
        };
        return vec![istio::RouteDestination { destination: nowhere, weight: None }];
    }
    weighted
        .into_iter()
        .map(|(b, weight)| istio::RouteDestination {
            destination: resolve(store, from, &b.backend, grants, problem),
            weight,
        })
        .collect()
}
