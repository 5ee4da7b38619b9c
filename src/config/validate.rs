//! Semantic checks on typed config objects, as Istio's validation webhook makes them.
//!
//! Role in the data flow: [`parse_documents`](super::parse::parse_documents)
//! runs [`validate`] on every object it reads; an object with an Error never
//! reaches the store, so generators may rely on its fields being well-formed.
//! References between objects (unknown hosts, subsets, gateways) are
//! checked afterwards on a whole store snapshot, by the model layer
//! (`model::references`): like Istio, meshpush accepts such objects and the
//! route fails at run time.
//!
//! This module owns the rules; the per-kind checks live beside it, one file
//! per kind or API group: `k8s`, `virtual_service`, `destination_rule` (with
//! `traffic_policy`), `gateway`, `service_entry`, `workload_entry`,
//! `sidecar`, `security`, `telemetry`, `gateway_api`, `ingress`. Invariant: [`validate`]
//! looks at one object only and is a pure function of it, so the same object
//! always gets the same verdict whichever file or order it came in.

use std::net::IpAddr;

use serde::Serialize;

use super::problem::{Severity, not_supported};
use super::{ConfigKind, ConfigObject, ObjectMeta};

mod destination_rule;
pub mod envoy_filter;
mod gateway;
mod gateway_api;
mod ingress;
mod k8s;
mod proxy_config;
mod security;
mod service_entry;
mod sidecar;
mod telemetry;
#[cfg(test)]
mod test;
mod traffic_policy;
pub use traffic_policy::locality_problems;
mod virtual_service;
mod workload_entry;

/// One finding about a field of an object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldError {
    /// Field path inside the object (`spec.http[0].route[1].weight`); empty for the whole object.
    pub path: String,
    /// What value was wrong and why.
    pub message: String,
    /// Error (the object is refused) or warning.
    pub severity: Severity,
}

/// Checks one object; returns every problem found (empty when it is fine).
pub fn validate(object: &ConfigObject) -> Vec<FieldError> {
    let mut check = Checker::default();
    check.meta(object.kind(), object.meta());
    match object {
        ConfigObject::Service(o) => k8s::service(&mut check, o),
        ConfigObject::Pod(o) => k8s::pod(&mut check, o),
        ConfigObject::EndpointSlice(o) => k8s::endpoint_slice(&mut check, o),
        // Labels are all a Node has that meshpush reads; any value is valid.
        ConfigObject::Node(_) => {}
        ConfigObject::ServiceEntry(o) => service_entry::service_entry(&mut check, o),
        ConfigObject::WorkloadEntry(o) => workload_entry::workload_entry(&mut check, o),
        ConfigObject::VirtualService(o) => virtual_service::virtual_service(&mut check, o),
        ConfigObject::DestinationRule(o) => destination_rule::destination_rule(&mut check, o),
        ConfigObject::Gateway(o) => gateway::gateway(&mut check, o),
        ConfigObject::Sidecar(o) => sidecar::sidecar(&mut check, o),
        ConfigObject::WorkloadGroup(o) => workload_entry::workload_group(&mut check, o),
        ConfigObject::Secret(o) => k8s::secret(&mut check, o),
        ConfigObject::PeerAuthentication(o) => security::peer_authentication(&mut check, o),
        ConfigObject::AuthorizationPolicy(o) => security::authorization_policy(&mut check, o),
        ConfigObject::RequestAuthentication(o) => security::request_authentication(&mut check, o),
        ConfigObject::Telemetry(o) => telemetry::telemetry(&mut check, o),
        ConfigObject::ProxyConfig(o) => proxy_config::proxy_config(&mut check, o),
        ConfigObject::EnvoyFilter(o) => envoy_filter::envoy_filter(&mut check, o),
        // Written by meshpush from what it fetched; the fetch checked it.
        ConfigObject::FetchedJwks(_)
        | ConfigObject::FetchedTrustBundle(_)
        | ConfigObject::ResolvedGatewayHost(_)
        | ConfigObject::MeshConfig(_) => {}
        // Labels are all a Namespace has that meshpush reads.
        ConfigObject::Namespace(_) => {}
        ConfigObject::GatewayClass(o) => gateway_api::gateway_class(&mut check, o),
        ConfigObject::KubernetesGateway(o) => gateway_api::gateway(&mut check, o),
        ConfigObject::HttpRoute(o) => gateway_api::http_route(&mut check, o),
        ConfigObject::GrpcRoute(o) => gateway_api::grpc_route(&mut check, o),
        ConfigObject::TcpRoute(o) => gateway_api::tcp_route(&mut check, o),
        ConfigObject::TlsRoute(o) => gateway_api::tls_route(&mut check, o),
        ConfigObject::ReferenceGrant(o) => gateway_api::reference_grant(&mut check, o),
        ConfigObject::Ingress(o) => ingress::ingress(&mut check, o),
        ConfigObject::IngressClass(o) => ingress::ingress_class(&mut check, o),
    }
    check.found
}

/// Collects findings; the per-kind checks report through it.
#[derive(Debug, Default)]
struct Checker {
    found: Vec<FieldError>,
}

impl Checker {
    fn error(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.push(Severity::Error, path.into(), message.into());
    }

    fn warning(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.push(Severity::Warning, path.into(), message.into());
    }

    /// A field meshpush reads but does not apply (see [`not_supported`]).
    fn unsupported(&mut self, path: impl Into<String>, consequence: Option<&str>) {
        self.warning(path, not_supported(consequence));
    }

    fn push(&mut self, severity: Severity, path: String, message: String) {
        self.found.push(FieldError { path, message, severity });
    }

    fn meta(&mut self, kind: ConfigKind, meta: &ObjectMeta) {
        // Kubernetes names Services by DNS-1035 label (they become DNS names);
        // every other kind here by DNS-1123 subdomain.
        if kind == ConfigKind::Service {
            if !is_dns1035_label(&meta.name) {
                let why = "a Service name must be a DNS-1035 label: at most 63 lower-case letters, \
                           digits and '-', starting with a letter and ending with a letter or digit";
                self.error("metadata.name", format!("{:?} is not a valid name: {why}", meta.name));
            }
        } else if !is_dns1123_subdomain(&meta.name) {
            let why = "names must be DNS-1123 subdomains: lower-case letters, digits, '-' and '.', \
                       starting and ending with a letter or digit, at most 253 characters";
            self.error("metadata.name", format!("{:?} is not a valid name: {why}", meta.name));
        }
        if !meta.namespace.is_empty() && !is_dns1123_label(&meta.namespace) {
            self.error("metadata.namespace", format!("{:?} is not a valid namespace: {LABEL_RULE}", meta.namespace));
        }
    }

    /// A port number must be 1..=65535.
    fn port(&mut self, path: impl Into<String>, number: u32) {
        if !(1..=65535).contains(&number) {
            self.error(path, format!("{number} is not a valid port number: ports are 1..65535"));
        }
    }

    /// A count or limit must not be negative.
    fn non_negative(&mut self, path: impl Into<String>, value: Option<i64>) {
        if let Some(v) = value.filter(|v| *v < 0) {
            self.error(path, format!("{v} is negative"));
        }
    }

    /// A value must be one of a closed set (compared exactly, as Istio does).
    fn one_of(&mut self, path: impl Into<String>, value: &str, allowed: &[&str]) {
        if !allowed.contains(&value) {
            self.error(path, format!("{value:?} is not one of {}", allowed.join(", ")));
        }
    }

    /// `exportTo` entries: `.`, `*` or a namespace.
    fn export_to(&mut self, list: &[String]) {
        for (i, entry) in list.iter().enumerate() {
            if entry != "." && entry != "*" && !is_dns1123_label(entry) {
                self.error(
                    format!("spec.exportTo[{i}]"),
                    format!("{entry:?} is neither \".\", \"*\" nor a namespace name ({LABEL_RULE})"),
                );
            }
        }
    }
}

const LABEL_RULE: &str = "a DNS-1123 label is at most 63 lower-case letters, digits and '-', \
                          starting and ending with a letter or digit";

/// Kubernetes' DNS-1123 label: namespaces, subset names, port names.
pub(crate) fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Kubernetes' DNS-1035 label: a DNS-1123 label that starts with a letter.
fn is_dns1035_label(s: &str) -> bool {
    is_dns1123_label(s) && s.starts_with(|c: char| c.is_ascii_lowercase())
}

/// Kubernetes' DNS-1123 subdomain: object names.
fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

/// A host as Istio accepts it in rules: `*`, `*.suffix`, or a (short or
/// fully qualified) DNS name; letters may be upper-case, as in DNS.
pub(crate) fn is_wildcard_host(s: &str) -> bool {
    if s == "*" {
        return true;
    }
    let name = s.strip_prefix("*.").unwrap_or(s);
    !name.is_empty() && name.len() <= 255 && name.split('.').all(is_dns_label_any_case)
}

/// A DNS label as Istio's `IsDNS1123Label` reads one: letters of either
/// case, digits and inner hyphens, at most 63.
pub(crate) fn is_dns_label_any_case(label: &str) -> bool {
    !label.is_empty()
        && label.len() <= 63
        && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !label.starts_with('-')
        && !label.ends_with('-')
}

fn is_ip(s: &str) -> bool {
    s.parse::<IpAddr>().is_ok()
}

/// An IP address or a CIDR block (`10.0.0.0/8`).
fn is_ip_or_cidr(s: &str) -> bool {
    match s.split_once('/') {
        None => is_ip(s),
        Some((ip, bits)) => match (ip.parse::<IpAddr>(), bits.parse::<u8>()) {
            (Ok(IpAddr::V4(_)), Ok(bits)) => bits <= 32,
            (Ok(IpAddr::V6(_)), Ok(bits)) => bits <= 128,
            _ => false,
        },
    }
}

/// Checks a `namespace/host` entry (Sidecar egress, Gateway server hosts).
/// `allow_bare` accepts a plain host (Gateway); `allow_tilde` accepts `~/`
/// (Sidecar: "no namespace").
fn check_namespaced_host(check: &mut Checker, path: String, entry: &str, allow_bare: bool, allow_tilde: bool) {
    let (namespace, host) = match entry.split_once('/') {
        Some(parts) => parts,
        None if allow_bare => ("*", entry),
        None => {
            return check
                .error(path, format!("{entry:?} is not of the form namespace/host (for example ./* or */reviews)"));
        }
    };
    let namespace_ok =
        matches!(namespace, "*" | ".") || (allow_tilde && namespace == "~") || is_dns1123_label(namespace);
    if !namespace_ok {
        let allowed = if allow_tilde { "\".\", \"*\", \"~\"" } else { "\".\", \"*\"" };
        check.error(
            path.clone(),
            format!("{entry:?}: namespace {namespace:?} is neither {allowed} nor a namespace name ({LABEL_RULE})"),
        );
    }
    if !is_wildcard_host(host) {
        check.error(path, format!("{entry:?}: {host:?} is not a host name or wildcard (*, *.example.com)"));
    }
}

/// The last line of an error message (the `regex` crate's are multi-line, with the cause last).
fn one_line(message: &str) -> String {
    let last = message.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or(message);
    last.trim().trim_start_matches("error: ").to_string()
}
