//! What a push sends: the one decision both protocols make the same way.
//!
//! A push from the engine says whether the stream's scope was touched
//! (`full`), which resource types the change can affect, and which hosts'
//! endpoints moved. A stream whose scope itself changed (its Sidecar, a
//! Service it sees) regenerates everything. From that, [`plan`] gives, in
//! push order (CDS, EDS, LDS, RDS, SDS: make before break), each type the stream
//! sends and how much of it. The protocols differ only in what they put on
//! the wire for each step.
//!
//! Invariant: an endpoint-only push touches assignments only, and only
//! those of the changed hosts; a push that changed clusters also visits
//! their assignments (a changed cluster warms until its
//! ClusterLoadAssignment arrives again).

use std::collections::HashSet;

use crate::model::Hostname;
use crate::push::PendingPush;
use crate::resource::{TypeSet, TypeUrl};

/// How much of one type a push sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step<'a> {
    /// Whatever of the type differs from what the client has.
    All,
    /// Only the assignments of these hosts (an endpoint-only push).
    Hosts(&'a HashSet<Hostname>),
}

/// The types a push sends to a stream, in push order, with how much of
/// each. `moved`: the stream's scope changed with this push;
/// `subscribed`: whether the stream watches a type.
pub fn plan(push: &PendingPush, moved: bool, subscribed: impl Fn(TypeUrl) -> bool) -> Vec<(TypeUrl, Step<'_>)> {
    let full = push.full || moved;
    let types = if moved { TypeSet::ALL } else { push.types };
    TypeUrl::PUSH_ORDER
        .into_iter()
        .filter(|t| subscribed(*t))
        .filter_map(|t| match (full, t) {
            (false, TypeUrl::Endpoint) => Some((t, Step::Hosts(&push.hosts))),
            (false, _) => None,
            // Assignments are owed again after their clusters changed.
            (true, TypeUrl::Endpoint) if types.contains(TypeUrl::Cluster) => Some((t, Step::All)),
            (true, _) => types.contains(t).then_some((t, Step::All)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Instant;

    use super::*;

    fn push(full: bool, types: &[TypeUrl]) -> PendingPush {
        PendingPush {
            full,
            hosts: Arc::new(["reviews.default.svc.cluster.local".into()].into()),
            types: TypeSet::of(types),
            rescope: false,
            first_change: Instant::now(),
        }
    }

    fn types(steps: &[(TypeUrl, Step<'_>)]) -> Vec<TypeUrl> {
        steps.iter().map(|(t, _)| *t).collect()
    }

    #[test]
    fn an_endpoint_push_sends_the_changed_hosts_assignments_only() {
        let p = push(false, &[TypeUrl::Endpoint]);
        let steps = plan(&p, false, |_| true);
        assert_eq!(steps, vec![(TypeUrl::Endpoint, Step::Hosts(&p.hosts))]);
    }

    #[test]
    fn a_full_push_sends_the_affected_types_in_push_order() {
        use TypeUrl::{Cluster, Endpoint, Listener, Route, Secret};
        let routing = push(true, &[Listener, Route]);
        assert_eq!(types(&plan(&routing, false, |_| true)), vec![Listener, Route], "a route change keeps clusters");
        let policy = push(true, &[Cluster, Route]);
        assert_eq!(
            types(&plan(&policy, false, |_| true)),
            vec![Cluster, Endpoint, Route],
            "changed clusters owe their assignments"
        );
        assert_eq!(types(&plan(&routing, true, |_| true)), TypeUrl::PUSH_ORDER.to_vec(), "moved: all");
        assert_eq!(
            types(&plan(&routing, true, |t| ![
                Listener,
                Secret,
                TypeUrl::ProxyConfig,
                TypeUrl::ExtensionConfig,
                TypeUrl::Address,
                TypeUrl::Authorization
            ]
            .contains(&t))),
            vec![Cluster, Endpoint, Route],
            "unwatched"
        );
    }
}
