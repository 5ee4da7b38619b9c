//! Cluster patches (`docs/envoyfilter.md` §2.6, §3.9).
//!
//! Each generated cluster goes through the CLUSTER patches in order: a
//! REMOVE drops it (whatever was merged before), a MERGE merges — except
//! that a patch carrying a `transport_socket` merges only that: into the
//! `transport_socket_matches` entry of the same name when the cluster has
//! such entries (none of that name: the patch is skipped), else into the
//! cluster's socket of the same name, else it replaces the cluster's
//! socket. Then the clusters ADDed, whatever their cluster match: on a
//! sidecar's outbound side and a gateway for context ANY, on the inbound
//! side only for SIDECAR_INBOUND. Added clusters are not patched further.

use std::sync::Arc;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::{TransportSocket, transport_socket::ConfigType};

use super::{Context, Record, TypedMerge, is_merge, merge_into, merge_typed, of_kind, value};
use crate::config::istio::envoy_filter::{ApplyTo, Operation};
use crate::generate::naming::{Direction, parse_cluster};
use crate::model::Hostname;
use crate::push::index::envoy_filter::ResolvedPatch;

/// The services behind an inbound port (what `service` compares with on
/// an `inbound|PORT||` cluster).
pub type InboundHosts<'a> = dyn Fn(u32) -> &'a [Hostname] + 'a;

/// Patches the clusters of one side of a proxy, then adds its ADDs.
pub fn patch(
    patches: &[Arc<ResolvedPatch>],
    context: Context,
    clusters: &mut Vec<Cluster>,
    inbound_hosts: &InboundHosts<'_>,
    record: &mut Record,
) {
    let mine: Vec<&ResolvedPatch> = of_kind(patches, ApplyTo::Cluster, context).collect();
    if mine.is_empty() {
        return;
    }
    mine.iter().for_each(|p| record.considered(p));
    clusters.retain_mut(|c| {
        for p in &mine {
            if p.operation == Operation::Add || !cluster_match(c, p, inbound_hosts) {
                continue;
            }
            match p.operation {
                Operation::Remove => {
                    record.applied(p);
                    return false;
                }
                _ if is_merge(p) => merge_cluster(c, p, record),
                _ => {}
            }
        }
        true
    });
    for p in mine.iter().filter(|p| p.operation == Operation::Add && context.takes_add(p)) {
        if let Some(added) = value::<Cluster>(p) {
            clusters.push(added);
            record.applied(p);
        }
    }
}

/// istiod's `clusterMatch`: the name alone when set; else port, subset and
/// service against the parsed name (on an inbound cluster, the services
/// behind its port).
fn cluster_match(c: &Cluster, p: &ResolvedPatch, inbound_hosts: &InboundHosts<'_>) -> bool {
    let Some(m) = p.matches.cluster.as_ref() else { return true };
    if !m.name.is_empty() {
        return m.name == c.name;
    }
    let parsed = parse_cluster(&c.name);
    let (port, subset, host) = parsed.map_or((0, "", ""), |n| (n.port, n.subset, n.host));
    if !m.subset.is_empty() && m.subset != subset {
        return false;
    }
    if !m.service.is_empty() {
        let inbound = parsed.is_some_and(|n| n.direction == Direction::Inbound);
        let found = if inbound { inbound_hosts(port).iter().any(|h| **h == *m.service) } else { host == m.service };
        if !found {
            return false;
        }
    }
    m.port_number == 0 || m.port_number == port
}

/// A CLUSTER MERGE, with istiod's transport socket rule.
fn merge_cluster(c: &mut Cluster, p: &ResolvedPatch, record: &mut Record) {
    let Some(patch) = value::<Cluster>(p) else { return };
    let Some(theirs) = patch.transport_socket else {
        return match merge_into(c, p) {
            Ok(()) => record.applied(p),
            Err(e) => record.failed(p, &format!("cluster {}", c.name), e),
        };
    };
    let what = format!("cluster {}", c.name);
    let target: Option<&mut TransportSocket> = if c.transport_socket_matches.is_empty() {
        c.transport_socket.as_mut().filter(|ts| ts.name == theirs.name)
    } else {
        let entry = c
            .transport_socket_matches
            .iter_mut()
            .filter_map(|m| m.transport_socket.as_mut())
            .find(|ts| ts.name == theirs.name);
        if entry.is_none() {
            let reason = format!(
                "it has transport_socket_matches and none holds a socket named {:?} to merge into",
                crate::text::shown(&theirs.name)
            );
            return record.failed(p, &what, reason);
        }
        entry
    };
    match target {
        Some(ours) => {
            if let (Some(ConfigType::TypedConfig(o)), Some(ConfigType::TypedConfig(t))) =
                (ours.config_type.as_mut(), theirs.config_type.as_ref())
                && let Err(TypedMerge::Mismatch(e) | TypedMerge::Failed(e)) = merge_typed(o, t)
            {
                return record.failed(p, &what, e);
            }
            record.applied(p);
        }
        None => {
            c.transport_socket = Some(theirs);
            record.applied(p);
        }
    }
}
