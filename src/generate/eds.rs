//! EDS: the `ClusterLoadAssignment` of one outbound cluster.
//!
//! An assignment is a function of `(PushContext, cluster name)` — the
//! DestinationRule whose subset labels filter the endpoints is the one a
//! proxy in the *service's* namespace would see — and, only when that rule
//! turns on locality load balancing, of the asking proxy's
//! [`EndpointView`] too ([`depends_on_view`]). Endpoints are grouped by
//! locality; groups are sorted by locality and endpoints by address, so the
//! same endpoint set always encodes to the same bytes.
//!
//! Locality load balancing, as Istio's `loadbalancer` package applies it:
//! enabled unless the rule's `localityLbSetting.enabled` is false;
//! `distribute` re-weighs the localities for proxies of a matching `from`;
//! otherwise, when the policy has outlier detection, endpoints get
//! priorities — by `failoverPriority` labels compared with the proxy's,
//! and (without such labels, or with `failover` entries) by how much of
//! the proxy's locality they share (same subzone 0, zone 1, region 2, other
//! regions 3, or 4 for regions a `failover` entry does not name as the
//! proxy region's) — renumbered from 0 without gaps.
//! DNS clusters carry their endpoints inline in CDS, which is shared by a
//! scope: they get no locality priorities.
//!
//! Across networks and clusters (`network`): a proxy's view names its
//! network, and the networks it asks to see, when a network gateway
//! exists or it asks; endpoints of other networks are then replaced by
//! their network's gateways (Istio's split horizon). A cluster-local host
//! (`serviceSettings`, Istio's defaults) is served with the endpoints of
//! the proxy's own cluster only. A gateway's SNI-DNAT cluster
//! (`outbound_.PORT_.SUBSET_.HOST`) holds only the endpoints mesh mTLS
//! reaches: nothing else may cross a network gateway.
//!
//! A known cluster with no endpoints gets an assignment with no endpoints
//! (never silence: Envoy keeps an EDS cluster warming until it gets one).

mod network;

use std::collections::BTreeMap;

use envoy_types::pb::envoy::config::core::v3::{HealthStatus, Locality as EnvoyLocality};
use envoy_types::pb::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, Endpoint as EnvoyEndpoint, LbEndpoint, LocalityLbEndpoints, lb_endpoint::HostIdentifier,
};

use super::naming::{self, Direction};
use super::{mtls, policy, proto};
use crate::config::istio::MtlsMode;
use crate::config::istio::{LocalityDistribute, LocalityFailover, LocalityLbSetting, TrafficPolicy};
use crate::model::{Endpoint, Locality, Resolution, Service, ServiceEndpoints};
use crate::push::PushContext;
use crate::push::scope::EndpointView;

/// The address prefix of a Unix domain socket endpoint (`unix:///var/run/app.sock`).
const UNIX_PREFIX: &str = "unix://";

/// The assignment for `cluster_name`: `None` when the name is not an outbound
/// cluster of a known service port.
pub fn load_assignment(
    ctx: &PushContext,
    cluster_name: &str,
    view: Option<&EndpointView>,
) -> Option<ClusterLoadAssignment> {
    let Some(name) = naming::parse_cluster(cluster_name) else {
        // A waypoint's `inbound-vip` cluster, or nothing.
        return super::waypoint::load_assignment(ctx, cluster_name);
    };
    if name.direction != Direction::Outbound {
        return None;
    }
    // An alias has no cluster of its own.
    let svc = ctx.services.get(name.host).filter(|s| !s.is_alias())?;
    svc.port(name.port)?;
    // The service's own namespace picks the rule: EDS is shared by every proxy.
    let policy =
        policy::for_destination(ctx, &svc.namespace, &svc.namespace, &svc.hostname, name.subset, Some(name.port));
    if !policy.subset_found {
        tracing::debug!(cluster = cluster_name, "subset is not defined by a DestinationRule; sending no endpoints");
        return Some(empty(cluster_name));
    }
    let endpoints = ctx.endpoints.get(&svc.hostname).map(|e| &**e);
    // Whether mesh mTLS would be used to an endpoint on its port, as
    // istiod's `mtlsChecker` decides it: the rule's TLS mode when it sets
    // one, else the endpoint's sidecar unless its PeerAuthentication
    // disables mTLS on the port.
    let mtls = |e: &Endpoint, port: u32| match policy.traffic.tls.as_ref() {
        Some(tls) => tls.mode.as_deref() == Some("ISTIO_MUTUAL"),
        None => {
            e.mesh_mtls && ctx.peer_authentications.workload(&svc.namespace, &e.labels).port(port) != MtlsMode::Disable
        }
    };
    let shaping = Shaping {
        network: view.filter(|v| v.network_key.is_some()).map(|v| (&*ctx.networks, v)),
        cluster: view.filter(|_| cluster_local(ctx, svc)).map(|v| &*v.cluster),
        mtls_only: naming::parse_sni_dnat_cluster(cluster_name).is_some(),
        mtls: &mtls,
        local_cluster: &ctx.mesh.cluster_id,
    };
    let mut cla = build(cluster_name, svc, name.port, endpoints, &policy.labels, &shaping);
    if let (Some(view), Some(mode)) = (view, LocalityMode::of(&policy.traffic, ctx.mesh.locality_lb_setting.as_ref())) {
        apply_locality(&mut cla, endpoints, &mode, view, &ctx.mesh.cluster_id);
    }
    Some(cla)
}

/// Whether the proxy's cluster decides what it is sent of `svc`: a
/// cluster-local host in a mesh of several clusters.
fn cluster_local(ctx: &PushContext, svc: &Service) -> bool {
    ctx.networks.multi_cluster() && ctx.mesh.cluster_local_hosts.is_cluster_local(&svc.hostname)
}

/// The cache key of the assignment of `cluster_name` as a proxy with
/// `view` gets it: `None` when it does not depend on the view (every proxy
/// shares it); else the name with the parts of the view it depends on.
pub fn view_key(ctx: &PushContext, cluster_name: &str, view: &EndpointView) -> Option<String> {
    let locality = depends_on_view(ctx, cluster_name);
    let network = view.network_key.as_deref();
    let cluster = eds_service(ctx, cluster_name).is_some_and(|svc| cluster_local(ctx, svc));
    if !locality && network.is_none() && !cluster {
        return None;
    }
    let locality = if locality { &*view.locality_key } else { "" };
    let cluster = if cluster { &*view.cluster } else { "" };
    Some(format!("{cluster_name}\u{1f}{locality}\u{1f}{}\u{1f}{cluster}", network.unwrap_or("")))
}

/// The service whose endpoints the outbound cluster `cluster_name` holds.
fn eds_service<'c>(ctx: &'c PushContext, cluster_name: &str) -> Option<&'c Service> {
    let name = naming::parse_cluster(cluster_name).filter(|n| n.direction == Direction::Outbound)?;
    ctx.services.get(name.host).map(|s| &**s)
}

/// Whether the assignment of `cluster_name` depends on the proxy's
/// locality (its rule turns on locality load balancing).
pub fn depends_on_view(ctx: &PushContext, cluster_name: &str) -> bool {
    if !ctx.destination_rules.locality_aware() {
        return false;
    }
    let Some(name) = naming::parse_cluster(cluster_name).filter(|n| n.direction == Direction::Outbound) else {
        return false;
    };
    let Some(svc) = ctx.services.get(name.host) else { return false };
    let policy =
        policy::for_destination(ctx, &svc.namespace, &svc.namespace, &svc.hostname, name.subset, Some(name.port));
    LocalityMode::of(&policy.traffic, ctx.mesh.locality_lb_setting.as_ref()).is_some()
}

/// How locality load balancing shapes a cluster's assignment.
#[derive(Debug)]
enum LocalityMode<'p> {
    /// Re-weigh localities (`distribute`).
    Distribute(&'p [LocalityDistribute]),
    /// Priorities by failover labels, then by locality.
    Failover { failover: &'p [LocalityFailover], labels: &'p [String] },
}

impl<'p> LocalityMode<'p> {
    /// The mode of `traffic`, its locality setting else the mesh's `mesh`.
    fn of(traffic: &'p TrafficPolicy, mesh: Option<&'p LocalityLbSetting>) -> Option<LocalityMode<'p>> {
        let own = traffic.load_balancer.as_ref().and_then(|lb| lb.locality_lb_setting.as_ref());
        let setting = own.or(mesh);
        if setting.is_some_and(|s| s.enabled == Some(false)) {
            return None;
        }
        match setting {
            Some(s) if !s.distribute.is_empty() => Some(LocalityMode::Distribute(&s.distribute)),
            // Without a rule of its own, Istio's mesh default: failover by locality.
            _ if traffic.outlier_detection.is_some() => Some(LocalityMode::Failover {
                failover: setting.map_or(&[][..], |s| &s.failover),
                labels: setting.map_or(&[][..], |s| &s.failover_priority),
            }),
            _ => None,
        }
    }
}

/// Whether a cluster's load balancer must honour locality weights (Istio
/// sets it for `distribute`, and for failover with explicit entries).
pub fn locality_weighted(traffic: &TrafficPolicy, mesh: Option<&LocalityLbSetting>) -> bool {
    match LocalityMode::of(traffic, mesh) {
        Some(LocalityMode::Distribute(_)) => true,
        Some(LocalityMode::Failover { failover, labels }) => !failover.is_empty() || !labels.is_empty(),
        None => false,
    }
}

fn apply_locality(
    cla: &mut ClusterLoadAssignment,
    endpoints: Option<&ServiceEndpoints>,
    mode: &LocalityMode<'_>,
    view: &EndpointView,
    local_cluster: &str,
) {
    match mode {
        LocalityMode::Distribute(rules) => distribute(cla, rules, &view.locality),
        LocalityMode::Failover { failover, labels } => {
            if !labels.is_empty() {
                split_by_failover_labels(cla, endpoints, labels, view, local_cluster);
            }
            // With failover labels, localities rank only when `failover` names regions (as in Istio).
            let by_locality = labels.is_empty() || !failover.is_empty();
            for group in cla.endpoints.iter_mut().filter(|_| by_locality) {
                let locality = group.locality.as_ref().map(from_proto).unwrap_or_default();
                let mut p = view.locality.priority_of(&locality);
                if p == 3
                    && let Some(rule) = failover.iter().find(|f| f.from == view.locality.region)
                    && locality.region != rule.to
                {
                    p = 4;
                }
                group.priority = group.priority * 5 + p;
            }
            renumber(cla);
        }
    }
}

/// Istio's `applyLocalityWeights`: the first rule whose `from` matches the
/// proxy shares traffic among the localities its `to` names, in proportion
/// to their endpoints' weights; localities it does not name get nothing.
fn distribute(cla: &mut ClusterLoadAssignment, rules: &[LocalityDistribute], proxy: &Locality) {
    let Some(rule) = rules.iter().find(|r| proxy.matches(&r.from)) else { return };
    let mut unmatched: Vec<bool> = vec![true; cla.endpoints.len()];
    for (pattern, share) in &rule.to {
        let members: Vec<usize> = (0..cla.endpoints.len())
            .filter(|&i| {
                unmatched[i] && cla.endpoints[i].locality.as_ref().map(from_proto).unwrap_or_default().matches(pattern)
            })
            .collect();
        let weights: Vec<u32> =
            members.iter().map(|&i| cla.endpoints[i].load_balancing_weight.map_or(1, |w| w.value)).collect();
        let total: u32 = weights.iter().sum();
        for (&i, &weight) in members.iter().zip(&weights) {
            unmatched[i] = false;
            let w = (f64::from(weight) * f64::from(*share) / f64::from(total.max(1))).ceil() as u32;
            if w > 0 {
                cla.endpoints[i].load_balancing_weight = Some(proto::u32_value(w));
            }
        }
    }
    for (i, group) in cla.endpoints.iter_mut().enumerate() {
        if unmatched[i] {
            group.lb_endpoints.clear();
        }
    }
}

/// Istio's `applyFailoverPriorities`: within each locality, endpoints whose
/// labels agree with the proxy's on the first N listed labels rank before
/// those that agree on fewer (`label=value` compares with the value given).
fn split_by_failover_labels(
    cla: &mut ClusterLoadAssignment,
    endpoints: Option<&ServiceEndpoints>,
    labels: &[String],
    view: &EndpointView,
    local_cluster: &str,
) {
    let by_address: BTreeMap<&str, &Endpoint> =
        endpoints.map(|e| e.endpoints.iter().map(|e| (&*e.address, e)).collect()).unwrap_or_default();
    let wanted: Vec<(&str, Option<&str>)> = labels
        .iter()
        .map(|l| match l.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (l.as_str(), None),
        })
        .collect();
    let priority = |endpoint: Option<&&Endpoint>| -> u32 {
        for (j, (name, value)) in wanted.iter().enumerate() {
            let mine = value.or_else(|| view.labels.get(*name).map(String::as_str));
            let theirs = endpoint.and_then(|e| e.label(name, local_cluster));
            if mine != theirs {
                return (wanted.len() - j) as u32;
            }
        }
        0
    };
    let mut out = Vec::with_capacity(cla.endpoints.len());
    for group in std::mem::take(&mut cla.endpoints) {
        let mut by_priority: BTreeMap<u32, Vec<LbEndpoint>> = BTreeMap::new();
        for ep in group.lb_endpoints.iter().cloned() {
            let address = match &ep.host_identifier {
                Some(HostIdentifier::Endpoint(e)) => match e.address.as_ref().and_then(|a| a.address.as_ref()) {
                    Some(envoy_types::pb::envoy::config::core::v3::address::Address::SocketAddress(sa)) => {
                        sa.address.as_str()
                    }
                    _ => "",
                },
                _ => "",
            };
            by_priority.entry(priority(by_address.get(address))).or_default().push(ep);
        }
        for (p, members) in by_priority {
            let total =
                members.iter().fold(0u32, |sum, m| sum.saturating_add(m.load_balancing_weight.map_or(1, |w| w.value)));
            out.push(LocalityLbEndpoints {
                lb_endpoints: members,
                priority: p,
                load_balancing_weight: Some(proto::u32_value(total)),
                ..group.clone()
            });
        }
    }
    cla.endpoints = out;
}

/// Renumbers priorities 0, 1, 2… keeping their order (Envoy needs no gaps).
fn renumber(cla: &mut ClusterLoadAssignment) {
    let mut used: Vec<u32> = cla.endpoints.iter().map(|g| g.priority).collect();
    used.sort_unstable();
    used.dedup();
    for group in &mut cla.endpoints {
        group.priority = used.binary_search(&group.priority).unwrap_or(0) as u32;
    }
}

fn from_proto(l: &EnvoyLocality) -> Locality {
    Locality { region: l.region.clone(), zone: l.zone.clone(), subzone: l.sub_zone.clone() }
}

/// The service host of a cluster name (`reviews.default.svc.cluster.local`
/// for `outbound|9080|v1|reviews.default.svc.cluster.local`).
pub fn host_of(cluster_name: &str) -> Option<&str> {
    match naming::parse_cluster(cluster_name) {
        Some(n) => (n.direction == Direction::Outbound).then_some(n.host),
        None => super::waypoint::parse_inbound_vip(cluster_name).map(|n| n.host),
    }
}

/// An assignment without endpoints.
pub(crate) fn empty(cluster_name: &str) -> ClusterLoadAssignment {
    ClusterLoadAssignment { cluster_name: cluster_name.to_string(), ..Default::default() }
}

/// Builds the assignment of one service port from its endpoints, keeping
/// those whose labels carry every `subset_labels` entry. EDS clusters
/// (`Resolution::Static`) need IP addresses: host names are left out of them.
pub(crate) fn assignment(
    cluster_name: &str,
    svc: &Service,
    port: u32,
    endpoints: Option<&ServiceEndpoints>,
    subset_labels: &BTreeMap<String, String>,
    local_cluster: &str,
) -> ClusterLoadAssignment {
    let shaping = Shaping { network: None, cluster: None, mtls_only: false, mtls: &|_, _| true, local_cluster };
    build(cluster_name, svc, port, endpoints, subset_labels, &shaping)
}

/// What of a proxy and of the cluster shapes an assignment beyond subset
/// labels.
struct Shaping<'a> {
    /// Split horizon, for the proxy's view.
    network: Option<(&'a crate::push::index::NetworkIndex, &'a EndpointView)>,
    /// Only endpoints of this cluster (a cluster-local host).
    cluster: Option<&'a str>,
    /// Only endpoints mesh mTLS reaches (an SNI-DNAT cluster).
    mtls_only: bool,
    /// Whether mesh mTLS would be used to an endpoint on its port.
    mtls: &'a dyn Fn(&Endpoint, u32) -> bool,
    /// The local cluster's id (the cluster of its endpoints).
    local_cluster: &'a str,
}

/// [`assignment`] shaped by `shaping`.
fn build(
    cluster_name: &str,
    svc: &Service,
    port: u32,
    endpoints: Option<&ServiceEndpoints>,
    subset_labels: &BTreeMap<String, String>,
    shaping: &Shaping<'_>,
) -> ClusterLoadAssignment {
    // A passthrough service's endpoints are asked for only by routers (a
    // sidecar's cluster of it is ORIGINAL_DST): they need IPs too.
    let need_ip = matches!(svc.resolution, Resolution::Static | Resolution::Passthrough);
    // locality → (endpoint, the port it serves on)
    let mut groups: BTreeMap<&str, Vec<(&Endpoint, u32)>> = BTreeMap::new();
    for e in endpoints.map(|e| e.endpoints.as_slice()).unwrap_or_default() {
        let Some(&target) = e.ports.get(&port) else {
            continue;
        };
        if !e.matches(subset_labels, shaping.local_cluster)
            || shaping.cluster.is_some_and(|c| e.cluster_id(shaping.local_cluster) != c)
        {
            continue;
        }
        if need_ip && !proto::is_ip(&e.address) && !e.address.starts_with(UNIX_PREFIX) {
            tracing::debug!(cluster = cluster_name, address = %e.address, "endpoint is not an IP address; left out of EDS");
            continue;
        }
        if shaping.mtls_only && !(shaping.mtls)(e, target) {
            continue;
        }
        groups.entry(&e.locality).or_default().push((e, target));
    }
    let endpoints = groups
        .into_iter()
        .map(|(locality, group)| {
            // (address, port, weight, its sidecar terminates mesh mTLS)
            let members: Vec<network::Member<'_>> = match shaping.network {
                Some((networks, view)) => network::split(&group, networks, view, shaping.mtls),
                None => {
                    let mut members: Vec<_> =
                        group.iter().map(|(e, port)| (&*e.address, *port, e.weight.max(1), e.mesh_mtls)).collect();
                    members.sort_unstable();
                    members
                }
            };
            let total = members.iter().fold(0u32, |sum, m| sum.saturating_add(m.2));
            LocalityLbEndpoints {
                locality: parse_locality(locality),
                load_balancing_weight: Some(proto::u32_value(total)),
                lb_endpoints: members
                    .into_iter()
                    .map(|(address, port, weight, mesh_mtls)| LbEndpoint {
                        host_identifier: Some(HostIdentifier::Endpoint(EnvoyEndpoint {
                            address: Some(match address.strip_prefix(UNIX_PREFIX) {
                                // A Unix domain socket: the port means nothing.
                                Some(path) => proto::pipe_address(path),
                                None => proto::socket_address(address, port),
                            }),
                            ..Default::default()
                        })),
                        health_status: HealthStatus::Healthy as i32,
                        load_balancing_weight: Some(proto::u32_value(weight)),
                        metadata: mtls::endpoint_metadata(mesh_mtls),
                    })
                    .collect(),
                ..Default::default()
            }
        })
        .collect();
    ClusterLoadAssignment { cluster_name: cluster_name.to_string(), endpoints, ..Default::default() }
}

/// `region/zone/subzone` (any suffix may be missing); an empty locality
/// when unknown, never none: proxyless gRPC refuses an assignment with a
/// group of endpoints without one, and istiod sends an empty one too.
fn parse_locality(text: &str) -> Option<EnvoyLocality> {
    if text.is_empty() {
        return Some(EnvoyLocality::default());
    }
    let mut parts = text.splitn(3, '/');
    let mut next = || parts.next().unwrap_or("").to_string();
    Some(EnvoyLocality { region: next(), zone: next(), sub_zone: next() })
}
