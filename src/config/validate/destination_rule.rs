//! Checks for DestinationRule: the host it applies to, `exportTo` and its
//! subsets' names, following Istio's validation (`pkg/config/validation`).
//! The traffic policies the rule and each subset carry are checked by
//! `traffic_policy`. Whether the host or a subset's labels match anything is
//! not checked here: that needs the whole store (`model::references`).

use std::collections::BTreeMap;

use super::traffic_policy::traffic_policy;
use super::{Checker, LABEL_RULE, is_dns1123_label, is_wildcard_host};
use crate::config::istio::DestinationRule;

/// A DestinationRule: its host, `exportTo`, traffic policies and subsets.
pub(super) fn destination_rule(check: &mut Checker, dr: &DestinationRule) {
    let spec = &dr.spec;
    if spec.host.is_empty() {
        check.error("spec.host", "is empty: a DestinationRule needs the host it applies to");
    } else if !is_wildcard_host(&spec.host) {
        check.error("spec.host", format!("{:?} is not a host name or wildcard", spec.host));
    }
    check.export_to(&spec.export_to);
    if let Some(policy) = &spec.traffic_policy {
        traffic_policy(check, "spec.trafficPolicy", policy);
    }
    if spec.workload_selector.is_some() {
        check.unsupported(
            "spec.workloadSelector",
            Some("the rule applies to every proxy that sees the host, not only the selected workloads"),
        );
    }
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, subset) in spec.subsets.iter().enumerate() {
        let path = format!("spec.subsets[{i}]");
        if subset.name.is_empty() {
            check.error(format!("{path}.name"), "is empty: a subset needs a name");
        } else if !is_dns1123_label(&subset.name) {
            check.error(format!("{path}.name"), format!("{:?} is not a valid subset name: {LABEL_RULE}", subset.name));
        } else if let Some(first) = names.insert(&subset.name, i) {
            check.error(
                format!("{path}.name"),
                format!("{:?} is already the name of spec.subsets[{first}]: subset names must be unique", subset.name),
            );
        }
        if let Some(policy) = &subset.traffic_policy {
            traffic_policy(check, &format!("{path}.trafficPolicy"), policy);
        }
    }
}
