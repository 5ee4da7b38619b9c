//! The order of the HTTP routes in a VirtualService assembled from the
//! Gateway API: the last step before the VirtualService is written, once
//! every route of a (listener, host) or (Service, port) is merged.
//!
//! It owns the API's precedence: exact path over prefix over regex, longer
//! paths first, then a method match, then the number of header and of query
//! matches; a route without a match last. Invariant: the sort is stable, so
//! routes of equal precedence keep the order they came in (the oldest route
//! first, as the API asks).

use crate::config::istio::{self, StringMatch};

/// Orders routes by the Gateway API's precedence (stable: equal routes keep
/// their order, oldest route first). Each route has at most one match.
pub(super) fn sort_by_precedence(routes: &mut [istio::HttpRoute]) {
    fn rank(r: &istio::HttpRoute) -> (i32, usize, bool, usize, usize) {
        let Some(m) = r.matches.first() else { return (-1, 0, false, 0, 0) };
        let (kind, len) = match &m.uri {
            Some(StringMatch { exact: Some(v), .. }) => (3, v.len()),
            Some(StringMatch { prefix: Some(v), .. }) => (2, v.len()),
            Some(StringMatch { regex: Some(v), .. }) => (1, v.len()),
            _ => (-1, 0),
        };
        (kind, len, m.method.is_some(), m.headers.len(), m.query_params.len())
    }
    routes.sort_by(|a, b| match (a.matches.first(), b.matches.first()) {
        (None, None) => std::cmp::Ordering::Equal,
        // A route without a match goes last.
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (Some(_), None) => std::cmp::Ordering::Less,
        (Some(_), Some(_)) => rank(b).cmp(&rank(a)),
    });
}
