//! Istio's resource names, made and read in one place.
//!
//! People who know `istioctl proxy-config` should recognise every name
//! meshpush sends: clusters `outbound|9080|v1|reviews.default.svc.cluster.local`
//! and `inbound|9080||`, listeners `0.0.0.0_9080`, `virtualOutbound` and
//! `virtualInbound`, sidecar route configs named by port (`9080`) and gateway
//! ones by `http.<port>`. The EDS cache is keyed by cluster name, so
//! [`parse_cluster`] must read back exactly what [`outbound_cluster`] writes.

use crate::push::scope::OutboundPolicy;

/// Cluster that drops every connection (unknown destinations under `REGISTRY_ONLY`).
pub const BLACKHOLE_CLUSTER: &str = "BlackHoleCluster";
/// Cluster that forwards to the original destination (unknown destinations under `ALLOW_ANY`).
pub const PASSTHROUGH_CLUSTER: &str = "PassthroughCluster";
/// Cluster that hands captured inbound connections to ports the workload
/// does not declare to their original destination, from 127.0.0.6 (so
/// that capture lets them through to the application).
pub const INBOUND_PASSTHROUGH_CLUSTER: &str = "InboundPassthroughCluster";
/// The listener iptables redirects outbound traffic to.
pub const VIRTUAL_OUTBOUND: &str = "virtualOutbound";
/// The listener iptables redirects inbound traffic to.
pub const VIRTUAL_INBOUND: &str = "virtualInbound";
/// Port of [`VIRTUAL_OUTBOUND`] (Istio's).
pub const VIRTUAL_OUTBOUND_PORT: u32 = 15001;
/// Port of [`VIRTUAL_INBOUND`] (Istio's).
pub const VIRTUAL_INBOUND_PORT: u32 = 15006;
/// Catch-all virtual host when unknown hosts pass through (`ALLOW_ANY`).
pub const ALLOW_ANY_VIRTUAL_HOST: &str = "allow_any";
/// Catch-all virtual host when unknown hosts are refused (`REGISTRY_ONLY`).
pub const BLOCK_ALL_VIRTUAL_HOST: &str = "block_all";
/// Address of listeners that take redirected traffic, and the name prefix of
/// every per-port listener.
pub const WILDCARD_ADDRESS: &str = "0.0.0.0";
/// Address outbound listeners bind in `NONE` interception mode.
pub const LOCALHOST: &str = "127.0.0.1";

/// Which way a cluster sends traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// To the local workload (`inbound|port||`).
    Inbound,
    /// To a mesh service (`outbound|port|subset|host`).
    Outbound,
}

impl Direction {
    fn as_str(self) -> &'static str {
        match self {
            Direction::Inbound => "inbound",
            Direction::Outbound => "outbound",
        }
    }
}

/// A cluster name taken apart; borrows from the name it was parsed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClusterName<'a> {
    /// Inbound or outbound.
    pub direction: Direction,
    /// The service port (outbound) or workload port (inbound).
    pub port: u32,
    /// DestinationRule subset; empty for the whole service.
    pub subset: &'a str,
    /// Service FQDN; empty for inbound clusters.
    pub host: &'a str,
}

/// Where traffic for destinations the mesh does not know goes: the
/// original destination (`PassthroughCluster`), the Sidecar's egress proxy,
/// or nowhere (`BlackHoleCluster`, `REGISTRY_ONLY`).
pub fn unknown_destination_cluster(policy: &OutboundPolicy) -> String {
    match policy {
        OutboundPolicy::AllowAny { egress_proxy: None } => PASSTHROUGH_CLUSTER.to_string(),
        OutboundPolicy::AllowAny { egress_proxy: Some((host, port, subset)) } => outbound_cluster(*port, subset, host),
        OutboundPolicy::RegistryOnly => BLACKHOLE_CLUSTER.to_string(),
    }
}

/// `outbound|9080|v1|reviews.default.svc.cluster.local`; an empty subset gives `outbound|9080||host`.
pub fn outbound_cluster(port: u32, subset: &str, host: &str) -> String {
    format!("outbound|{port}|{subset}|{host}")
}

/// `inbound|9080||`: the local workload's port.
pub fn inbound_cluster(port: u32) -> String {
    format!("inbound|{port}||")
}

/// Reads a name made by [`outbound_cluster`], [`inbound_cluster`] or
/// [`sni_dnat_cluster`] (an outbound cluster too); `None` for anything
/// else (`BlackHoleCluster`, malformed names).
pub fn parse_cluster(name: &str) -> Option<ClusterName<'_>> {
    if let Some((port, subset, host)) = parse_sni_dnat_cluster(name) {
        return (!host.is_empty()).then_some(ClusterName { direction: Direction::Outbound, port, subset, host });
    }
    let mut parts = name.split('|');
    let direction = match parts.next()? {
        "inbound" => Direction::Inbound,
        "outbound" => Direction::Outbound,
        _ => return None,
    };
    let port = parts.next()?.parse().ok()?;
    let subset = parts.next()?;
    let host = parts.next()?;
    if parts.next().is_some() || (direction == Direction::Outbound && host.is_empty()) {
        return None;
    }
    Some(ClusterName { direction, port, subset, host })
}

impl std::fmt::Display for ClusterName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}|{}|{}|{}", self.direction.as_str(), self.port, self.subset, self.host)
    }
}

/// Listener name: `0.0.0.0_9080` (bind address, underscore, port).
pub fn listener(bind: &str, port: u32) -> String {
    format!("{bind}_{port}")
}

/// Route config of a sidecar's outbound HTTP port: the port number (`9080`).
pub fn sidecar_route(port: u32) -> String {
    port.to_string()
}

/// Route config of a gateway's HTTP port: `http.8080`.
pub fn gateway_route(port: u32) -> String {
    format!("http.{port}")
}

/// Route config of a gateway's HTTPS server that terminates TLS, one per
/// server as Istio names them: `https.443.PORT_NAME.GATEWAY.NAMESPACE`,
/// with `.BIND` when the server binds an address.
pub fn https_gateway_route(number: u32, port_name: &str, gateway: &str, namespace: &str, bind: Option<&str>) -> String {
    match bind {
        Some(bind) => format!("https.{number}.{port_name}.{gateway}.{namespace}.{bind}"),
        None => format!("https.{number}.{port_name}.{gateway}.{namespace}"),
    }
}

/// The name of a cluster reached by SNI through an AUTO_PASSTHROUGH
/// gateway, and the SNI that selects it: `outbound_.8080_.v1_.reviews.default.svc.cluster.local`
/// (Istio's DNS SRV form, the subset empty for the whole service).
pub fn sni_dnat_cluster(port: u32, subset: &str, host: &str) -> String {
    format!("outbound_.{port}_.{subset}_.{host}")
}

/// The parts of a name made by [`sni_dnat_cluster`]: `(port, subset, host)`.
pub fn parse_sni_dnat_cluster(name: &str) -> Option<(u32, &str, &str)> {
    let rest = name.strip_prefix("outbound_.")?;
    let (port, rest) = rest.split_once("_.")?;
    let (subset, host) = rest.split_once("_.")?;
    Some((parse_sidecar_route(port)?, subset, host))
}

/// The port of a route config name made by [`sidecar_route`].
pub fn parse_sidecar_route(name: &str) -> Option<u32> {
    // `u32::from_str` takes a leading `+`; a route name never has one.
    name.bytes().all(|b| b.is_ascii_digit()).then(|| name.parse().ok()).flatten()
}

/// The port of a route config name made by [`gateway_route`].
pub fn parse_gateway_route(name: &str) -> Option<u32> {
    parse_sidecar_route(name.strip_prefix("http.")?)
}

/// Virtual host name: `reviews.default.svc.cluster.local:9080`.
pub fn virtual_host(host: &str, port: u32) -> String {
    format!("{host}:{port}")
}

/// Virtual host of an inbound HTTP port: `inbound|http|9080`.
pub fn inbound_virtual_host(port: u32) -> String {
    format!("inbound|http|{port}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_names_round_trip() {
        let name = outbound_cluster(9080, "v1", "reviews.default.svc.cluster.local");
        assert_eq!(name, "outbound|9080|v1|reviews.default.svc.cluster.local");
        let parsed = parse_cluster(&name).unwrap();
        assert_eq!(parsed.direction, Direction::Outbound);
        assert_eq!((parsed.port, parsed.subset, parsed.host), (9080, "v1", "reviews.default.svc.cluster.local"));
        assert_eq!(parsed.to_string(), name);

        assert_eq!(
            outbound_cluster(9080, "", "r.default.svc.cluster.local"),
            "outbound|9080||r.default.svc.cluster.local"
        );
        let inbound = inbound_cluster(9080);
        assert_eq!(inbound, "inbound|9080||");
        assert_eq!(parse_cluster(&inbound).unwrap().direction, Direction::Inbound);
    }

    #[test]
    fn foreign_names_do_not_parse() {
        for bad in [BLACKHOLE_CLUSTER, PASSTHROUGH_CLUSTER, "outbound|x||h", "outbound|80||", "outbound|80|a|b|c", ""] {
            assert!(parse_cluster(bad).is_none(), "{bad:?} parsed");
        }
    }

    #[test]
    fn route_and_listener_names_follow_istio() {
        assert_eq!(listener(WILDCARD_ADDRESS, 9080), "0.0.0.0_9080");
        assert_eq!(sidecar_route(9080), "9080");
        assert_eq!(gateway_route(8080), "http.8080");
        assert_eq!(parse_sidecar_route("9080"), Some(9080));
        assert_eq!(parse_sidecar_route("+9080"), None);
        assert_eq!(parse_gateway_route("http.8080"), Some(8080));
        assert_eq!(parse_gateway_route("8080"), None);
        let sni = sni_dnat_cluster(8080, "v1", "reviews.default.svc.cluster.local");
        assert_eq!(sni, "outbound_.8080_.v1_.reviews.default.svc.cluster.local");
        assert_eq!(parse_sni_dnat_cluster(&sni), Some((8080, "v1", "reviews.default.svc.cluster.local")));
        assert_eq!(parse_sni_dnat_cluster("outbound_.8080_._.a.b"), Some((8080, "", "a.b")));
        assert_eq!(https_gateway_route(443, "https", "gw", "istio-system", None), "https.443.https.gw.istio-system");
    }
}
