//! Checks for the Kubernetes kinds: Service, Pod, EndpointSlice, Secret.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use super::{Checker, is_dns1123_label, is_ip, is_wildcard_host};
use crate::config::k8s::{EndpointSlice, IntOrString, Pod, SERVICE_NAME_LABEL, Service};
use crate::config::protocol::Protocol;
use crate::config::secret::Secret;

pub(super) fn service(check: &mut Checker, service: &Service) {
    let spec = &service.spec;
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, port) in spec.ports.iter().enumerate() {
        let path = format!("spec.ports[{i}]");
        check.port(format!("{path}.port"), port.port);
        match &port.target_port {
            Some(IntOrString::Int(n)) => check.port(format!("{path}.targetPort"), *n),
            Some(IntOrString::String(name)) if !is_port_name(name) => check.error(
                format!("{path}.targetPort"),
                format!("{name:?} is not a port name: at most 15 lower-case letters, digits and '-', with a letter"),
            ),
            _ => {}
        }
        if let Some(protocol) = &port.protocol {
            check.one_of(format!("{path}.protocol"), protocol, &["TCP", "UDP", "SCTP"]);
        }
        let tcp = port.protocol.as_deref().is_none_or(|p| p == "TCP");
        // Istio's own Services (a waypoint's, a gateway's) name no protocol
        // on purpose: no sidecar sends to them as HTTP.
        let istio_managed = service.metadata.labels.contains_key("gateway.istio.io/managed");
        if tcp
            && !istio_managed
            && Protocol::of_kubernetes_port(port.port, port.name.as_deref(), port.app_protocol.as_deref())
                == Protocol::Unknown
        {
            let named = match (&port.app_protocol, port.name.as_deref()) {
                (Some(app), _) => format!("appProtocol {app:?}"),
                (None, Some(name)) if !name.is_empty() => format!("port name {name:?}"),
                _ => "the port, which has no name,".to_string(),
            };
            check.warning(
                path.clone(),
                format!(
                    "{named} declares no protocol Istio knows: Istio would detect HTTP by sniffing; meshpush serves \
                     port {} as plain TCP, so HTTP rules do not apply to it (name it http-…, grpc-…, tcp-…, or set appProtocol)",
                    port.port
                ),
            );
        }
        match port.name.as_deref() {
            Some(name) if !name.is_empty() => {
                if let Some(first) = names.insert(name, i) {
                    check.error(
                        format!("{path}.name"),
                        format!("{name:?} is already the name of spec.ports[{first}]: port names must be unique"),
                    );
                }
            }
            // Kubernetes needs names to tell ports apart (EndpointSlices match by name).
            _ if spec.ports.len() > 1 => check.error(
                format!("{path}.name"),
                format!("port {} has no name: a Service with several ports must name each", port.port),
            ),
            _ => {}
        }
    }
    if let Some(ip) = spec.cluster_ip.as_deref().filter(|ip| !ip.is_empty() && *ip != "None")
        && !is_ip(ip)
    {
        check.error("spec.clusterIP", format!("{ip:?} is neither an IP address nor \"None\""));
    }
    if let Some(service_type) = &spec.service_type {
        check.one_of("spec.type", service_type, &["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"]);
    }
    // ztunnel is sent both (push::index::ambient); a sidecar's endpoints
    // are the same for every proxy (EDS is shared), so neither is applied
    // to sidecars yet.
    if spec.internal_traffic_policy.as_deref() == Some("Local") {
        check.warning(
            "spec.internalTrafficPolicy",
            "Local is applied by ztunnel (ambient mode); sidecars are not applied it: they send to every endpoint, \
             where istiod sends a sidecar only its node's",
        );
    }
    if let Some(distribution) = spec.traffic_distribution.as_deref().filter(|d| !d.is_empty()) {
        check.warning(
            "spec.trafficDistribution",
            format!(
                "{} is applied by ztunnel (ambient mode); sidecars are not applied it: they do not prefer near \
                 endpoints unless a DestinationRule's locality load balancing says so",
                crate::text::shown(distribution)
            ),
        );
    }
}

pub(super) fn pod(check: &mut Checker, pod: &Pod) {
    if let Some(ip) = pod.status.pod_ip.as_deref().filter(|ip| !ip.is_empty())
        && !is_ip(ip)
    {
        check.error("status.podIP", format!("{ip:?} is not an IP address"));
    }
    for (c, container) in pod.spec.containers.iter().enumerate() {
        for (p, port) in container.ports.iter().enumerate() {
            check.port(format!("spec.containers[{c}].ports[{p}].containerPort"), port.container_port);
        }
    }
}

pub(super) fn endpoint_slice(check: &mut Checker, slice: &EndpointSlice) {
    match slice.metadata.labels.get(SERVICE_NAME_LABEL) {
        Some(service) if is_dns1123_label(service) => {}
        Some(service) => {
            check.error(format!("metadata.labels.{SERVICE_NAME_LABEL}"), format!("{service:?} is not a Service name"))
        }
        None => check.error(
            "metadata.labels",
            format!("label {SERVICE_NAME_LABEL} is missing: it names the Service these endpoints belong to"),
        ),
    }
    let address_type = slice.address_type.as_deref().unwrap_or("");
    let address_ok: fn(&str) -> bool = match address_type {
        "IPv4" => |a| a.parse::<Ipv4Addr>().is_ok(),
        "IPv6" => |a| a.parse::<Ipv6Addr>().is_ok(),
        "FQDN" => |a| a != "*" && !a.starts_with("*.") && is_wildcard_host(a),
        "" => {
            check.error("addressType", "is missing: set IPv4, IPv6 or FQDN");
            |_| true
        }
        other => {
            check.error("addressType", format!("{other:?} is not one of IPv4, IPv6, FQDN"));
            |_| true
        }
    };
    for (e, endpoint) in slice.endpoints.iter().enumerate() {
        if endpoint.addresses.is_empty() {
            check.error(format!("endpoints[{e}].addresses"), "is empty: an endpoint needs an address");
        }
        for (a, address) in endpoint.addresses.iter().enumerate() {
            if !address_ok(address) {
                check.error(
                    format!("endpoints[{e}].addresses[{a}]"),
                    format!("{address:?} is not an address of type {address_type}"),
                );
            }
        }
    }
    for (p, port) in slice.ports.iter().enumerate() {
        if let Some(number) = port.port {
            check.port(format!("ports[{p}].port"), number);
        }
    }
}

/// An IANA service name, as Kubernetes requires for named ports.
fn is_port_name(name: &str) -> bool {
    name.len() <= 15 && is_dns1123_label(name) && name.bytes().any(|b| b.is_ascii_lowercase()) && !name.contains("--")
}

/// A Secret's TLS keys: each pair complete, certificates that parse, a key
/// that is a PEM private key. A value that does not parse refuses the
/// Secret (the last good version stays served, as for any object); an
/// expired certificate is a warning, and served, as Istio serves it.
/// Messages name keys, never values.
pub(super) fn secret(check: &mut Checker, secret: &Secret) {
    let has = |k: &str| secret.data.get(k).is_some_and(|v| !v.0.is_empty());
    for (cert, key) in [("cert", "key"), ("tls.crt", "tls.key")] {
        match (has(cert), has(key)) {
            (true, false) => check.warning(
                format!("data.{cert}"),
                format!("is set without data.{key}: no certificate is served from this pair"),
            ),
            (false, true) => check.warning(
                format!("data.{key}"),
                format!("is set without data.{cert}: no certificate is served from this pair"),
            ),
            (true, true) => {
                certificates(check, &format!("data.{cert}"), &secret.data[cert].0);
                private_key(check, &format!("data.{key}"), &secret.data[key].0);
            }
            (false, false) => {}
        }
    }
    for ca in ["cacert", "ca.crt"] {
        if has(ca) {
            certificates(check, &format!("data.{ca}"), &secret.data[ca].0);
        }
    }
}

fn certificates(check: &mut Checker, path: &str, pem: &[u8]) {
    let mut found = 0;
    for (i, block) in x509_parser::pem::Pem::iter_from_buffer(pem).enumerate() {
        let block = match block {
            Ok(block) => block,
            Err(_) => return check.error(path, format!("block {i} is not PEM: expected -----BEGIN CERTIFICATE-----")),
        };
        if block.label != "CERTIFICATE" {
            let message = format!("block {i} is a {:?} block: expected certificates only", block.label);
            return check.error(path, message);
        }
        let cert = match block.parse_x509() {
            Ok(cert) => cert,
            Err(e) => return check.error(path, format!("block {i} is not an X.509 certificate: {e}")),
        };
        let validity = cert.validity();
        if !validity.is_valid() {
            let message = format!(
                "certificate {i} is valid from {} to {}, not now: it is served anyway (as Istio does), and clients will refuse it",
                validity.not_before, validity.not_after
            );
            check.warning(path, message);
        }
        found += 1;
    }
    if found == 0 {
        check.error(path, "holds no PEM certificate (-----BEGIN CERTIFICATE-----)");
    }
}

fn private_key(check: &mut Checker, path: &str, pem: &[u8]) {
    let mut blocks = x509_parser::pem::Pem::iter_from_buffer(pem);
    match blocks.next() {
        Some(Ok(block)) if block.label.ends_with("PRIVATE KEY") && !block.contents.is_empty() => {}
        _ => check.error(path, "is not a PEM private key (-----BEGIN PRIVATE KEY-----, RSA or EC)"),
    }
}
