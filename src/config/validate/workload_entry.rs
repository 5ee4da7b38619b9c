//! Checks for WorkloadEntry and WorkloadGroup: a workload's address, ports,
//! weight and network, following Istio's validation (`pkg/config/validation`).
//! The workload check also serves a ServiceEntry's inline endpoints, which
//! have a WorkloadEntry's shape.

use super::{Checker, is_ip, is_wildcard_host};
use crate::config::istio::{WorkloadEntry, WorkloadEntrySpec, WorkloadGroup};

/// A WorkloadEntry: its spec is one workload.
pub(super) fn workload_entry(check: &mut Checker, we: &WorkloadEntry) {
    workload(check, "spec", &we.spec);
}

/// A WorkloadGroup: the template its registered WorkloadEntries are made from.
pub(super) fn workload_group(check: &mut Checker, group: &WorkloadGroup) {
    let template = &group.spec.template;
    if !template.address.is_empty() {
        check.warning(
            "spec.template.address",
            "is not used: a registered workload's address is its proxy's (as in Istio)",
        );
    }
    for (name, port) in &template.ports {
        check.port(format!("spec.template.ports.{name}"), *port);
    }
    if template.weight == Some(0) {
        check.error("spec.template.weight", "0 is not a weight: it must be at least 1 (leave it out for 1)");
    }
    if group.spec.probe.is_some() {
        check.unsupported(
            "spec.probe",
            Some("meshpush takes no health reports from agents: a registered workload gets traffic as soon as it connects"),
        );
    }
    if !group.spec.metadata.annotations.is_empty() {
        check.warning(
            "spec.metadata.annotations",
            "no annotation configures traffic on a WorkloadEntry: they are kept on the registered entries only",
        );
    }
}

/// A WorkloadEntry spec, or a ServiceEntry's inline endpoint.
pub(super) fn workload(check: &mut Checker, path: &str, spec: &WorkloadEntrySpec) {
    if spec.address.is_empty() {
        check.error(format!("{path}.address"), "is empty: a workload needs an IP address or DNS name");
    } else if let Some(socket) = spec.address.strip_prefix("unix://") {
        if !socket.starts_with('/') {
            check.error(
                format!("{path}.address"),
                format!("{:?}: a Unix socket address is unix:///absolute/path", spec.address),
            );
        }
    } else if !is_ip(&spec.address) && (!is_wildcard_host(&spec.address) || spec.address.starts_with('*')) {
        check.error(format!("{path}.address"), format!("{:?} is neither an IP address nor a DNS name", spec.address));
    }
    for (name, port) in &spec.ports {
        check.port(format!("{path}.ports.{name}"), *port);
    }
    if spec.weight == Some(0) {
        check.error(format!("{path}.weight"), "0 is not a weight: it must be at least 1 (leave it out for 1)");
    }
}
