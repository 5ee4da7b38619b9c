//! A waypoint's configuration, as istiod builds it
//! (`pilot/pkg/networking/core/{listener,cluster}_waypoint.go`), from
//! upstream Envoy's parts only.
//!
//! ztunnel sends a waypoint HBONE: HTTP/2 CONNECT over mutual TLS to 15008,
//! the CONNECT authority being the original destination (a Service's VIP
//! and port, or a bound workload's address). Three listeners carry it:
//!
//! 1. `connect_terminate` (0.0.0.0:15008): terminates TLS (the waypoint's
//!    certificate; a client certificate of the mesh required) and CONNECT.
//!    It records in filter state, shared with the next hop, the original
//!    destination (`envoy.filters.listener.original_dst.local_ip`, from the
//!    authority), the original source, and the peer's SPIFFE identity
//!    (`io.istio.peer_principal`), then sends the tunnelled bytes to
//!    cluster `main_internal`.
//! 2. `main_internal`, an internal listener: `original_dst` restores the
//!    destination, and a filter chain per bound Service port (its VIPs and
//!    port; HTTP ports by `http_inspector` where the protocol is not
//!    declared) applies the policies that target the Service or the
//!    waypoint (RBAC reading the peer from filter state) and, on HTTP, the
//!    Service's routes (VirtualServices, HTTPRoutes with the Service as
//!    parent), to cluster `inbound-vip|PORT|http[/SUBSET]|HOST` (or `tcp`).
//!    Traffic for a bound workload goes to `encap` as it is.
//! 3. `connect_originate`, an internal listener: tunnels each connection
//!    as HBONE to the destination workload's ztunnel (or sidecar) on 15008,
//!    with the waypoint's certificate.
//!
//! An `inbound-vip` cluster's endpoints are the Service's, each as an
//! internal address of `connect_originate` carrying its `IP:PORT` in
//! metadata when the workload takes HBONE, else its own address (plain
//! TCP). What istiod's waypoint adds with Istio's own Envoy extensions
//! (peer metadata exchange, `istio.stats`, the `istio.hashable_string`
//! filter state factory) has no upstream form: telemetry is left out, and
//! filter state is `envoy.string` (README: "Waypoints").

mod clusters;
mod listeners;

pub use clusters::{clusters, load_assignment};
pub use listeners::listeners;

use std::sync::Arc;

use crate::model::Service;
use crate::push::{PushContext, Scope};

/// The HBONE listener, and its route's stat prefix.
pub const CONNECT_TERMINATE: &str = "connect_terminate";
/// The inner listener (and the cluster that reaches it).
pub const MAIN_INTERNAL: &str = "main_internal";
/// The listener that tunnels to destinations (and the ORIGINAL_DST
/// cluster it sends to).
pub const CONNECT_ORIGINATE: &str = "connect_originate";
/// The cluster of traffic to bound workloads: on to `connect_originate`.
pub const ENCAP: &str = "encap";
/// The port HBONE is taken and sent on.
pub const HBONE_PORT: u32 = 15008;
/// The metadata namespace (and filter state prefix) of the original
/// destination Envoy's `original_dst` listener filter reads.
pub const ORIGINAL_DST_METADATA: &str = "envoy.filters.listener.original_dst";

/// Cluster name prefix of a bound Service's port.
const INBOUND_VIP: &str = "inbound-vip";

/// `inbound-vip|PORT|http|HOST` (`tcp`; `http/SUBSET` for a subset).
pub fn inbound_vip_cluster(port: u32, http: bool, subset: &str, host: &str) -> String {
    let kind = if http { "http" } else { "tcp" };
    if subset.is_empty() {
        format!("{INBOUND_VIP}|{port}|{kind}|{host}")
    } else {
        format!("{INBOUND_VIP}|{port}|{kind}/{subset}|{host}")
    }
}

/// A name made by [`inbound_vip_cluster`], taken apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InboundVip<'a> {
    /// The Service port.
    pub port: u32,
    /// Whether it is the HTTP cluster.
    pub http: bool,
    /// The DestinationRule subset; empty for the whole Service.
    pub subset: &'a str,
    /// The Service host.
    pub host: &'a str,
}

/// Reads a name made by [`inbound_vip_cluster`].
pub fn parse_inbound_vip(name: &str) -> Option<InboundVip<'_>> {
    let mut parts = name.split('|');
    if parts.next()? != INBOUND_VIP {
        return None;
    }
    let port = parts.next()?.parse().ok()?;
    let kind_subset = parts.next()?;
    let (kind, subset) = kind_subset.split_once('/').unwrap_or((kind_subset, ""));
    let http = match kind {
        "http" => true,
        "tcp" => false,
        _ => return None,
    };
    let host = parts.next()?;
    if host.is_empty() || parts.next().is_some() {
        return None;
    }
    Some(InboundVip { port, http, subset, host })
}

/// The Services a waypoint scope serves (its scope's services, which
/// `push::scope` takes from the ambient index's bindings).
fn bound(scope: &Scope) -> &[Arc<Service>] {
    &scope.services
}

/// The waypoint Gateway (namespace, name) of a scope.
fn gateway(scope: &Scope) -> Option<(&str, &str)> {
    scope.key.gateways.first().map(|k| (&*k.namespace, &*k.name))
}

/// The addresses of the workloads bound to the waypoint of `scope`.
fn bound_workloads(ctx: &PushContext, scope: &Scope) -> Vec<String> {
    let Some((namespace, name)) = gateway(scope) else { return Vec::new() };
    let ambient = ctx.ambient();
    ambient.bound.get(&(namespace.to_string(), name.to_string())).map(|b| b.workload_ips.clone()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inbound_vip_names_read_back() {
        for (port, http, subset, host) in [(80, true, "", "web.demo.svc.cluster.local"), (9000, false, "v2", "db.x")] {
            let name = inbound_vip_cluster(port, http, subset, host);
            assert_eq!(parse_inbound_vip(&name), Some(InboundVip { port, http, subset, host }), "{name}");
        }
        assert_eq!(inbound_vip_cluster(80, true, "v1", "h"), "inbound-vip|80|http/v1|h");
        for bad in [
            "outbound|80||h",
            "inbound-vip|x|http|h",
            "inbound-vip|80|udp|h",
            "inbound-vip|80|http|",
            "inbound-vip|80|http|h|x",
        ] {
            assert_eq!(parse_inbound_vip(bad), None, "{bad}");
        }
    }
}
