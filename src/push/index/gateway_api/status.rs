//! The status conditions of the Gateway API, as this translation reports
//! them: the last step of the flow, read by `source::gateway_status` (which
//! writes them back to Kubernetes) and by the problem list.
//!
//! It owns only the shapes (a condition, a listener's status, a route
//! parent's status, an object's whole status); the other parts of the
//! folder decide their values.
//!
//! Invariant: a condition's `status` is `True` or `False`, never anything
//! else, so that [`Condition::is_true`] is the whole truth about it.

use serde::Serialize;

use crate::config::gateway_api::{self as api, ParentReference};

/// The controller name in route parent statuses.
pub(super) const CONTROLLER: &str = api::ISTIO_CONTROLLER;

/// One status condition, as the Gateway API writes them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// `Accepted`, `Programmed`, `ResolvedRefs`, `Conflicted`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// `True` or `False`.
    pub status: &'static str,
    /// The reason the API names.
    pub reason: &'static str,
    /// For people.
    pub message: String,
}

impl Condition {
    /// A condition that holds when `ok`.
    pub(super) fn new(kind: &'static str, ok: bool, reason: &'static str, message: impl Into<String>) -> Condition {
        Condition { kind, status: if ok { "True" } else { "False" }, reason, message: message.into() }
    }

    /// Whether the condition holds.
    pub fn is_true(&self) -> bool {
        self.status == "True"
    }
}

/// A listener's status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenerStatus {
    /// The listener.
    pub name: String,
    /// How many routes attached.
    pub attached_routes: u32,
    /// The route kinds it takes.
    pub supported_kinds: Vec<RouteKind>,
    /// Its conditions.
    pub conditions: Vec<Condition>,
}

/// A route kind in a listener's status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RouteKind {
    /// Its group.
    pub group: &'static str,
    /// Its kind.
    pub kind: String,
}

/// One parent's status in a route's status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteParentStatus {
    /// The parent as the route names it.
    pub parent_ref: ParentReference,
    /// The controller reporting.
    pub controller_name: &'static str,
    /// Its conditions.
    pub conditions: Vec<Condition>,
}

/// The status of one Gateway API object, as its `status` field holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum ObjectStatus {
    /// A GatewayClass.
    GatewayClass {
        /// Its conditions.
        conditions: Vec<Condition>,
    },
    /// A Gateway.
    Gateway {
        /// Its addresses (those it asked for).
        addresses: Vec<api::GatewayAddress>,
        /// Its conditions.
        conditions: Vec<Condition>,
        /// Each listener's.
        listeners: Vec<ListenerStatus>,
    },
    /// A route.
    Route {
        /// One entry per parent the route names that meshpush serves.
        parents: Vec<RouteParentStatus>,
    },
}

impl ObjectStatus {
    /// Every condition that does not hold, with where it is (`listeners[http]`,
    /// `parents[0]`), for the problems list.
    pub fn failures(&self) -> Vec<(String, &Condition)> {
        let mut out = Vec::new();
        match self {
            ObjectStatus::GatewayClass { conditions } => {
                out.extend(conditions.iter().filter(|c| !c.is_true()).map(|c| (String::new(), c)))
            }
            ObjectStatus::Gateway { conditions, listeners, .. } => {
                out.extend(conditions.iter().filter(|c| !c.is_true()).map(|c| (String::new(), c)));
                for l in listeners {
                    // `Conflicted` is the one condition that is bad when it holds.
                    let bad = l.conditions.iter().filter(|c| c.is_true() == (c.kind == "Conflicted"));
                    out.extend(bad.map(|c| (format!("listeners[{}]", l.name), c)));
                }
            }
            ObjectStatus::Route { parents } => {
                for (i, p) in parents.iter().enumerate() {
                    out.extend(p.conditions.iter().filter(|c| !c.is_true()).map(|c| (format!("parents[{i}]"), c)));
                }
            }
        }
        out
    }
}
