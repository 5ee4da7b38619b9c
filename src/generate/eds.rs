//! EDS: the `ClusterLoadAssignment` of one outbound cluster.
//!
//! The cache key of an assignment is the cluster name alone, so the output is
//! a function of `(PushContext, cluster name)` and never of the proxy asking:
//! the DestinationRule whose subset labels filter the endpoints is the one a
//! proxy in the *service's* namespace would see. Endpoints are grouped by
//! locality; groups are sorted by locality and endpoints by address, so the
//! same endpoint set always encodes to the same bytes.
//!
//! A known cluster with no endpoints gets an assignment with no endpoints
//! (never silence: Envoy keeps an EDS cluster warming until it gets one).

use std::collections::BTreeMap;

use envoy_types::pb::envoy::config::core::v3::{HealthStatus, Locality};
use envoy_types::pb::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, Endpoint as EnvoyEndpoint, LbEndpoint, LocalityLbEndpoints, lb_endpoint::HostIdentifier,
};

use super::naming::{self, Direction};
use super::{policy, proto};
use crate::model::{Resolution, Service, ServiceEndpoints};
use crate::push::PushContext;

/// The assignment for `cluster_name`: `None` when the name is not an outbound
/// cluster of a known service port.
pub fn load_assignment(ctx: &PushContext, cluster_name: &str) -> Option<ClusterLoadAssignment> {
    let name = naming::parse_cluster(cluster_name)?;
    if name.direction != Direction::Outbound {
        return None;
    }
    let svc = ctx.services.get(name.host)?;
    svc.port(name.port)?;
    // The service's own namespace picks the rule: EDS is shared by every proxy.
    let policy = policy::for_destination(ctx, &svc.namespace, &svc.namespace, &svc.hostname, name.subset, None);
    if !policy.subset_found {
        tracing::debug!(cluster = cluster_name, "subset is not defined by a DestinationRule; sending no endpoints");
        return Some(empty(cluster_name));
    }
    Some(assignment(cluster_name, svc, name.port, ctx.endpoints.get(&svc.hostname).map(|e| &**e), &policy.labels))
}

/// The service host of a cluster name (`reviews.default.svc.cluster.local`
/// for `outbound|9080|v1|reviews.default.svc.cluster.local`).
pub fn host_of(cluster_name: &str) -> Option<&str> {
    naming::parse_cluster(cluster_name).filter(|n| n.direction == Direction::Outbound).map(|n| n.host)
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
) -> ClusterLoadAssignment {
    if svc.resolution == Resolution::Passthrough {
        return empty(cluster_name);
    }
    let need_ip = svc.resolution == Resolution::Static;
    // locality → (address, port, weight)
    let mut groups: BTreeMap<&str, Vec<(&str, u32, u32)>> = BTreeMap::new();
    for e in endpoints.map(|e| e.endpoints.as_slice()).unwrap_or_default() {
        let Some(&target) = e.ports.get(&port) else {
            continue;
        };
        if !e.matches(subset_labels) {
            continue;
        }
        if need_ip && !proto::is_ip(&e.address) {
            tracing::debug!(cluster = cluster_name, address = %e.address, "endpoint is not an IP address; left out of EDS");
            continue;
        }
        groups.entry(&e.locality).or_default().push((&e.address, target, e.weight.max(1)));
    }
    let endpoints = groups
        .into_iter()
        .map(|(locality, mut members)| {
            members.sort_unstable();
            let total = members.iter().fold(0u32, |sum, m| sum.saturating_add(m.2));
            LocalityLbEndpoints {
                locality: parse_locality(locality),
                load_balancing_weight: Some(proto::u32_value(total)),
                lb_endpoints: members
                    .into_iter()
                    .map(|(address, port, weight)| LbEndpoint {
                        host_identifier: Some(HostIdentifier::Endpoint(EnvoyEndpoint {
                            address: Some(proto::socket_address(address, port)),
                            ..Default::default()
                        })),
                        health_status: HealthStatus::Healthy as i32,
                        load_balancing_weight: Some(proto::u32_value(weight)),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }
        })
        .collect();
    ClusterLoadAssignment { cluster_name: cluster_name.to_string(), endpoints, ..Default::default() }
}

/// `region/zone/subzone` (any suffix may be missing); `None` when empty.
fn parse_locality(text: &str) -> Option<Locality> {
    if text.is_empty() {
        return None;
    }
    let mut parts = text.splitn(3, '/');
    let mut next = || parts.next().unwrap_or("").to_string();
    Some(Locality { region: next(), zone: next(), sub_zone: next() })
}
