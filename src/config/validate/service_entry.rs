//! Checks for ServiceEntry: hosts, addresses, ports and their protocols,
//! resolution and inline endpoints, following Istio's validation
//! (`pkg/config/validation`). An inline endpoint is checked as a
//! WorkloadEntry is (`workload_entry`), plus what the resolution asks of it.

use std::collections::{BTreeMap, BTreeSet};

use super::workload_entry::workload;
use super::{Checker, is_ip, is_ip_or_cidr, is_wildcard_host};
use crate::config::istio::ServiceEntry;

/// Port protocols Istio knows (`protocol.Parse`), compared case-insensitively as Istio does.
const PROTOCOLS: &[&str] =
    &["HTTP", "HTTPS", "HTTP2", "GRPC", "GRPC-WEB", "TCP", "TLS", "MONGO", "REDIS", "MYSQL", "UDP"];

/// A ServiceEntry: hosts, addresses, ports, resolution and endpoints.
pub(super) fn service_entry(check: &mut Checker, se: &ServiceEntry) {
    let spec = &se.spec;
    if spec.hosts.is_empty() {
        check.error("spec.hosts", "is empty: a ServiceEntry needs at least one host");
    }
    for (i, host) in spec.hosts.iter().enumerate() {
        if host == "*" {
            check.error(format!("spec.hosts[{i}]"), "\"*\" is not allowed: a ServiceEntry cannot claim every host");
        } else if !is_wildcard_host(host) {
            check.error(format!("spec.hosts[{i}]"), format!("{host:?} is not a host name or wildcard"));
        }
    }
    for (i, address) in spec.addresses.iter().enumerate() {
        if !is_ip_or_cidr(address) {
            check.error(
                format!("spec.addresses[{i}]"),
                format!("{address:?} is neither an IP address nor a CIDR block"),
            );
        }
    }
    check.export_to(&spec.export_to);
    let mut numbers: BTreeMap<u32, usize> = BTreeMap::new();
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, port) in spec.ports.iter().enumerate() {
        let path = format!("spec.ports[{i}]");
        check.port(format!("{path}.number"), port.number);
        if let Some(first) = numbers.insert(port.number, i) {
            check.error(
                format!("{path}.number"),
                format!("port {} is already declared by spec.ports[{first}]: port numbers must be unique", port.number),
            );
        }
        if port.name.is_empty() {
            check.error(format!("{path}.name"), format!("port {} has no name: Istio requires one", port.number));
        } else if let Some(first) = names.insert(&port.name, i) {
            check.error(
                format!("{path}.name"),
                format!("{:?} is already the name of spec.ports[{first}]: port names must be unique", port.name),
            );
        }
        if let Some(protocol) = &port.protocol
            && !PROTOCOLS.contains(&protocol.to_ascii_uppercase().as_str())
        {
            check.error(format!("{path}.protocol"), format!("{protocol:?} is not one of {}", PROTOCOLS.join(", ")));
        }
        if let Some(target) = port.target_port {
            check.port(format!("{path}.targetPort"), target);
        }
        if port.protocol.as_deref().is_none_or(str::is_empty) {
            check.warning(
                format!("{path}.protocol"),
                format!(
                    "is not set: Istio would detect HTTP by sniffing; meshpush serves port {} as plain TCP, \
                     so HTTP rules do not apply to it (set protocol: HTTP, TCP, …)",
                    port.number
                ),
            );
        }
    }
    if let Some(location) = &spec.location {
        check.one_of("spec.location", location, &["MESH_EXTERNAL", "MESH_INTERNAL"]);
    }
    let resolution = spec.resolution.as_deref().unwrap_or("NONE");
    check.one_of("spec.resolution", resolution, &["NONE", "STATIC", "DNS", "DNS_ROUND_ROBIN"]);
    if !spec.endpoints.is_empty() && spec.workload_selector.is_some() {
        check.error("spec", "sets both endpoints and workloadSelector: endpoints come from one or the other");
    }
    match resolution {
        "STATIC" if spec.endpoints.is_empty() && spec.workload_selector.is_none() => check.error(
            "spec.endpoints",
            "is empty: resolution STATIC needs endpoints (IP addresses) or a workloadSelector",
        ),
        "DNS" | "DNS_ROUND_ROBIN" if spec.endpoints.is_empty() => {
            for (i, host) in spec.hosts.iter().enumerate().filter(|(_, h)| h.starts_with("*.")) {
                check.error(
                    format!("spec.hosts[{i}]"),
                    format!(
                        "{host:?}: a wildcard host cannot be resolved by DNS; add endpoints or use resolution NONE"
                    ),
                );
            }
        }
        "DNS_ROUND_ROBIN" if spec.endpoints.len() > 1 => check.error(
            "spec.endpoints",
            format!("has {} endpoints: resolution DNS_ROUND_ROBIN takes exactly one", spec.endpoints.len()),
        ),
        _ => {}
    }
    let port_names: BTreeSet<&str> = spec.ports.iter().map(|p| p.name.as_str()).collect();
    for (i, endpoint) in spec.endpoints.iter().enumerate() {
        let path = format!("spec.endpoints[{i}]");
        workload(check, &path, endpoint);
        if resolution == "STATIC"
            && !endpoint.address.is_empty()
            && !is_ip(&endpoint.address)
            && !endpoint.address.starts_with("unix://")
        {
            check.error(
                format!("{path}.address"),
                format!(
                    "{:?} is not an IP address or unix:// socket: resolution STATIC needs them (use DNS for names)",
                    endpoint.address
                ),
            );
        }
        for name in endpoint.ports.keys() {
            if !port_names.contains(name.as_str()) {
                check.error(
                    format!("{path}.ports.{name}"),
                    format!("{name:?} is not the name of any port in spec.ports"),
                );
            }
        }
    }
}
