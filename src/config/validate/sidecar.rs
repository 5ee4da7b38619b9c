//! Checks for Sidecar: its ingress and egress listeners, outbound traffic
//! policy and workload selector, following Istio's validation
//! (`pkg/config/validation`). A port that declares no protocol is a warning:
//! meshpush serves it as plain TCP where Istio would sniff for HTTP.

use std::collections::BTreeMap;

use super::{Checker, check_namespaced_host, is_ip, is_wildcard_host};
use crate::config::istio::{ConnectionPoolSettings, Sidecar};
use crate::config::protocol::Protocol;

/// A Sidecar ingress `defaultEndpoint`: loopback or "the instance IP" with a port, or a Unix socket.
fn is_default_endpoint(endpoint: &str) -> bool {
    if let Some(path) = endpoint.strip_prefix("unix://") {
        return path.starts_with('/');
    }
    let Some((ip, port)) = endpoint.rsplit_once(':') else { return false };
    matches!(ip, "127.0.0.1" | "[::1]" | "0.0.0.0" | "[::]") && port.parse::<u16>().is_ok_and(|p| p > 0)
}

/// A Sidecar: ingress listeners, egress listeners and the outbound traffic policy.
pub(super) fn sidecar(check: &mut Checker, sidecar: &Sidecar) {
    let spec = &sidecar.spec;
    let mut ingress_ports: BTreeMap<u32, usize> = BTreeMap::new();
    for (i, listener) in spec.ingress.iter().enumerate() {
        let path = format!("spec.ingress[{i}]");
        check.port(format!("{path}.port.number"), listener.port.number);
        if let Some(first) = ingress_ports.insert(listener.port.number, i) {
            check.error(
                format!("{path}.port.number"),
                format!("port {} is already used by spec.ingress[{first}]", listener.port.number),
            );
        }
        if let Some(protocol) = &listener.port.protocol
            && Protocol::parse(protocol).is_none()
        {
            check.error(format!("{path}.port.protocol"), format!("{protocol:?} is not a protocol Istio knows"));
        }
        if let Some(bind) = &listener.bind
            && !is_ip(bind)
        {
            check.error(
                format!("{path}.bind"),
                format!("{bind:?} is not an IP address (Unix sockets cannot be bound here)"),
            );
        }
        if let Some(mode) = &listener.capture_mode {
            check.one_of(format!("{path}.captureMode"), mode, &["DEFAULT", "IPTABLES", "NONE"]);
        }
        if listener.port.protocol.is_none()
            && Protocol::of_kubernetes_port(listener.port.number, listener.port.name.as_deref(), None)
                == Protocol::Unknown
        {
            check.warning(
                format!("{path}.port"),
                "declares no protocol (protocol, or a name such as http-…): Istio would detect HTTP by sniffing; \
                 meshpush serves the port as plain TCP",
            );
        }
        inbound_h2_upgrade(check, &format!("{path}.connectionPool"), listener.connection_pool.as_ref());
        if let Some(endpoint) = listener.default_endpoint.as_deref().filter(|e| !e.is_empty())
            && !is_default_endpoint(endpoint)
        {
            check.error(
                format!("{path}.defaultEndpoint"),
                format!(
                    "{endpoint:?} is not one of 127.0.0.1:PORT, [::1]:PORT, 0.0.0.0:PORT, [::]:PORT or unix:///path"
                ),
            );
        }
    }
    inbound_h2_upgrade(check, "spec.inboundConnectionPool", spec.inbound_connection_pool.as_ref());
    if let Some(proxy) = spec.outbound_traffic_policy.as_ref().and_then(|p| p.egress_proxy.as_ref()) {
        let path = "spec.outboundTrafficPolicy.egressProxy";
        if proxy.host.is_empty() || proxy.host.contains('*') || !is_wildcard_host(&proxy.host) {
            check.error(format!("{path}.host"), format!("{:?} is not a host name", proxy.host));
        }
        match &proxy.port {
            None => check.error(format!("{path}.port"), "is missing: the egress proxy needs its port"),
            Some(port) => check.port(format!("{path}.port.number"), port.number),
        }
        if spec.outbound_traffic_policy.as_ref().and_then(|p| p.mode.as_deref()) == Some("REGISTRY_ONLY") {
            check.warning(path, "is used only with mode ALLOW_ANY (as in Istio): ignored under REGISTRY_ONLY");
        }
    }
    let mut without_port = None;
    let mut ports: BTreeMap<(u32, &str), usize> = BTreeMap::new();
    for (i, listener) in spec.egress.iter().enumerate() {
        let path = format!("spec.egress[{i}]");
        match &listener.port {
            Some(port) => {
                check.port(format!("{path}.port.number"), port.number);
                let bind = listener.bind.as_deref().unwrap_or("");
                if let Some(first) = ports.insert((port.number, bind), i) {
                    check.error(
                        format!("{path}.port.number"),
                        format!(
                            "port {} is already used by spec.egress[{first}] on the same bind address",
                            port.number
                        ),
                    );
                }
            }
            None => match without_port {
                Some(first) => check.error(
                    format!("{path}.port"),
                    format!("is missing, as in spec.egress[{first}]: at most one egress listener may omit its port"),
                ),
                None => without_port = Some(i),
            },
        }
        if let Some(bind) = &listener.bind
            && !is_ip(bind)
        {
            check.error(format!("{path}.bind"), format!("{bind:?} is not an IP address"));
        }
        if let Some(protocol) = listener.port.as_ref().and_then(|p| p.protocol.as_deref()) {
            check.unsupported(
                format!("{path}.port.protocol"),
                Some(&format!(
                    "the listener serves each service on the port by the service's own protocol, not {protocol:?}"
                )),
            );
        }
        if let Some(mode) = &listener.capture_mode {
            check.one_of(format!("{path}.captureMode"), mode, &["DEFAULT", "IPTABLES", "NONE"]);
        }
        if listener.hosts.is_empty() {
            check.error(format!("{path}.hosts"), "is empty: an egress listener needs at least one namespace/host");
        }
        for (h, host) in listener.hosts.iter().enumerate() {
            check_namespaced_host(check, format!("{path}.hosts[{h}]"), host, false, true);
        }
    }
    if let Some(mode) = spec.outbound_traffic_policy.as_ref().and_then(|p| p.mode.as_deref()) {
        check.one_of("spec.outboundTrafficPolicy.mode", mode, &["ALLOW_ANY", "REGISTRY_ONLY"]);
    }
    if let Some(selector) = &spec.workload_selector
        && selector.labels.is_empty()
    {
        check.error(
            "spec.workloadSelector.labels",
            "is empty: leave workloadSelector out to apply to the whole namespace",
        );
    }
}

/// An inbound connection pool (a listener's or the Sidecar's) at `path`:
/// its `http.h2UpgradePolicy` has no effect there.
fn inbound_h2_upgrade(check: &mut Checker, path: &str, pool: Option<&ConnectionPoolSettings>) {
    if pool.and_then(|p| p.http.as_ref()).is_some_and(|h| h.h2_upgrade_policy.is_some()) {
        check.warning(
            format!("{path}.http.h2UpgradePolicy"),
            "is not used: Istio does not upgrade inbound connections to HTTP/2",
        );
    }
}
