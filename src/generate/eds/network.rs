//! Split horizon: what of a service's endpoints a proxy reaches directly,
//! and what it reaches through another network's gateway, as istiod's
//! `EndpointsByNetworkFilter` decides it.
//!
//! - An endpoint of a network the proxy does not ask to see
//!   (`REQUESTED_NETWORK_VIEW`) is left out; one of the default network
//!   (`""`) is always seen.
//! - With no gateway in the mesh, every other endpoint is sent as it is.
//! - Otherwise every weight is multiplied by the index's scale. An
//!   endpoint on the proxy's network (or on the default network, or on a
//!   network no gateway reaches) is sent directly; so is every endpoint
//!   to a proxy on the default network, unless a gateway reaches the
//!   endpoint's network. Any other endpoint is replaced by the gateways
//!   of its network (its cluster's, else all of the network's), its
//!   weight split evenly among them, provided mesh mTLS would be used to
//!   it: the gateway routes by the mTLS SNI, and nothing else crosses.
//! - Each gateway becomes one endpoint after the direct ones of the same
//!   locality, in address order, carrying the weight summed for it and
//!   the `tlsMode: istio` metadata that makes the client's cluster speak
//!   mesh mTLS to it.

use std::collections::BTreeMap;

use crate::model::Endpoint;
use crate::push::index::NetworkIndex;
use crate::push::scope::EndpointView;

/// One endpoint as sent: address, port, weight, and whether its sidecar
/// (or the gateway in front of it) terminates mesh mTLS.
pub(super) type Member<'e> = (&'e str, u32, u32, bool);

/// The members of one locality: `endpoints` are the service's (with the
/// port each serves on) that passed the other filters; `mtls` says
/// whether mesh mTLS would be used to an endpoint on its port.
pub(super) fn split<'e>(
    endpoints: &[(&'e Endpoint, u32)],
    networks: &'e NetworkIndex,
    view: &EndpointView,
    mtls: impl Fn(&Endpoint, u32) -> bool,
) -> Vec<Member<'e>> {
    let mut direct: Vec<Member<'e>> = Vec::with_capacity(endpoints.len());
    // Gateway (address, port) → summed weight.
    let mut through: BTreeMap<(&'e str, u32), u32> = BTreeMap::new();
    let split_horizon = networks.split_horizon();
    let scale = if split_horizon { networks.scale() } else { 1 };
    for &(e, port) in endpoints {
        let network = e.network_name();
        if !view.sees(network) {
            continue;
        }
        let weight = e.weight.max(1).saturating_mul(scale);
        if !split_horizon {
            direct.push((&e.address, port, weight, e.mesh_mtls));
            continue;
        }
        let gateways: Vec<_> = networks.gateways_for(network, e.cluster_id(networks.local_cluster())).collect();
        let force_gateway = view.network.is_empty() && !network.is_empty() && !gateways.is_empty();
        let same_network = view.network.is_empty() || network.is_empty() || *view.network == *network;
        if !force_gateway && (same_network || gateways.is_empty()) {
            direct.push((&e.address, port, weight, e.mesh_mtls));
            continue;
        }
        if !mtls(e, port) {
            continue;
        }
        let share = weight / gateways.len() as u32;
        for g in gateways {
            let sum = through.entry((&g.address, g.port)).or_default();
            *sum = sum.saturating_add(share);
        }
    }
    direct.sort_unstable();
    direct.extend(through.into_iter().map(|((address, port), weight)| (address, port, weight.max(1), true)));
    direct
}
