//! `ReferenceReport`: the cross-object reference problems of the served
//! config, kept current while serving and logged as they appear.
//!
//! `meshpush validate` checks references on the store it loads
//! ([`super::validate_dir`]); the server checks the same on every store
//! revision it serves, so both report the same problems for the same files:
//! a destination host that matches no Service, an unknown subset or gateway,
//! an extension provider a Telemetry or a CUSTOM AuthorizationPolicy names
//! that cannot serve it, and the Gateway API conditions that do not hold (a
//! route no listener admits, a backend that does not resolve).
//! A problem is logged once, at WARN, when it first appears (and at INFO
//! when it is gone); `/debug/configz` and the status page read the current
//! set.
//!
//! Invariant: [`ReferenceReport::problems`] is what `check_references`
//! finds on the last snapshot refreshed; a snapshot whose Services, Istio
//! rules and Sidecars are those checked last (endpoint churn) is not
//! checked again.

use std::collections::BTreeSet;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::config::mesh::MeshConfig;
use crate::config::{ConfigKind, Problem};
use crate::model::{StoreSnapshot, check_ext_authz, check_references, check_telemetry};

/// The reference problems of the last store revision seen. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct ReferenceReport {
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    /// The snapshot last checked.
    checked: Option<StoreSnapshot>,
    problems: Vec<Problem>,
}

/// Whether the objects the checks read are the same in both snapshots:
/// endpoint churn (Pods, EndpointSlices, WorkloadEntries) changes none of them.
fn same_rules(a: &StoreSnapshot, b: &StoreSnapshot) -> bool {
    ConfigKind::ALL.iter().filter(|k| !k.is_endpoint_kind()).all(|k| a.kind(*k).ptr_eq(b.kind(*k)))
}

impl ReferenceReport {
    /// An empty report.
    pub fn new() -> ReferenceReport {
        ReferenceReport::default()
    }

    /// Checks `store` unless the objects the checks read are those checked
    /// last; logs what appeared and what went away when `log`.
    pub fn refresh(&self, store: &StoreSnapshot, mesh: &MeshConfig, log: bool) {
        if self.state.lock().checked.as_ref().is_some_and(|last| same_rules(last, store)) {
            return;
        }
        let mut problems = check_references(store);
        problems.extend(check_telemetry(store, mesh));
        problems.extend(check_ext_authz(store, mesh));
        problems.extend(super::gateway_api_problems(store, mesh));
        let mut state = self.state.lock();
        if log {
            let before: BTreeSet<String> = state.problems.iter().map(ToString::to_string).collect();
            let now: BTreeSet<String> = problems.iter().map(ToString::to_string).collect();
            for problem in now.difference(&before) {
                tracing::warn!("{problem}");
            }
            for gone in before.difference(&now) {
                tracing::info!("resolved: {gone}");
            }
        }
        state.checked = Some(store.clone());
        state.problems = problems;
    }

    /// The current problems.
    pub fn problems(&self) -> Vec<Problem> {
        self.state.lock().problems.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ConfigStore;
    use crate::testing::bookinfo;

    #[test]
    fn the_report_follows_the_store() {
        let store = ConfigStore::new();
        store.apply(bookinfo::writes());
        let report = ReferenceReport::new();
        report.refresh(&store.snapshot(), &MeshConfig::default(), false);
        assert!(report.problems().is_empty(), "{:?}", report.problems());
        store.apply(bookinfo::puts(
            "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: typo}\n\
             spec: {hosts: [reviews], http: [{route: [{destination: {host: reveiws}}]}]}\n",
        ));
        report.refresh(&store.snapshot(), &MeshConfig::default(), false);
        let problems = report.problems();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].path, "spec.http[0].route[0].destination.host");
    }
}
