//! What ambient mode's ztunnel is served, as istiod's ambient index
//! derives it (`pilot/pkg/serviceregistry/ambient`): every workload and
//! service as an `istio.workload.Address`, and the mesh's
//! AuthorizationPolicies and PeerAuthentications as
//! `istio.security.Authorization`s, each encoded once.
//!
//! - [`address`]: Pods, WorkloadEntries and ServiceEntry endpoints as
//!   workloads; Kubernetes Services and ServiceEntry hosts as services;
//! - [`policy`]: an AuthorizationPolicy, its L4 parts only, with what
//!   ztunnel leaves out reported;
//! - [`peer_mtls`]: PeerAuthentications as DENY policies on connections
//!   without a peer identity, and which of them a workload names;
//! - [`lookup`]: the keys an on-demand ztunnel asks for, and the
//!   resources that answer each;
//! - [`waypoint`]: waypoints (Gateways of class `istio-waypoint`), and which
//!   Services and workloads bind to them.
//!
//! Every ztunnel is sent the same resources (istiod filters none per
//! node), so the index is one per snapshot, built on first use: a mesh no
//! ztunnel asks about never builds it. Resource names are istiod's, so a
//! ztunnel moving between control planes is resent nothing it holds.

pub mod address;
pub mod lookup;
pub mod peer_mtls;
pub mod policy;
pub mod waypoint;

#[cfg(test)]
mod test;

use std::collections::BTreeMap;
use std::sync::Arc;

use rayon::prelude::*;

use crate::config::istio::{AuthorizationPolicy, PeerAuthentication};
use crate::config::mesh::MeshConfig;
use crate::config::{ConfigKey, ConfigKind, ConfigObject};
use crate::model::StoreSnapshot;
use crate::resource::{EncodedResource, TypeUrl};
use crate::workload_api::security::Scope;

/// The kinds whose objects the index reads: a change of one rebuilds it.
pub const INPUTS: [ConfigKind; 11] = [
    ConfigKind::KubernetesGateway,
    ConfigKind::GatewayClass,
    ConfigKind::Pod,
    ConfigKind::EndpointSlice,
    ConfigKind::Service,
    ConfigKind::ServiceEntry,
    ConfigKind::WorkloadEntry,
    ConfigKind::Node,
    ConfigKind::Namespace,
    ConfigKind::AuthorizationPolicy,
    ConfigKind::PeerAuthentication,
];

/// ztunnel's resources of one snapshot.
#[derive(Debug, Default)]
pub struct AmbientIndex {
    /// Workloads and services, sorted by name.
    pub addresses: Vec<Arc<EncodedResource>>,
    /// What answers an on-demand ztunnel's keys.
    pub keys: lookup::AddressKeys,
    /// Authorization policies, sorted by name.
    pub authorizations: Vec<Arc<EncodedResource>>,
    /// What ztunnel does not enforce of each AuthorizationPolicy, and what
    /// happens instead.
    pub notes: BTreeMap<ConfigKey, Vec<String>>,
    /// The mesh's network (`""`, the default one, unless the root
    /// namespace names one).
    pub network: String,
    /// The ready waypoints.
    pub waypoints: waypoint::Waypoints,
    /// Objects whose waypoint binding cannot hold, and why (istiod's
    /// `istio.io/WaypointBound` condition); and waypoints not ready.
    pub bindings: BTreeMap<ConfigKey, String>,
    /// What each ready waypoint (namespace, name) serves.
    pub bound: BTreeMap<(String, String), waypoint::Bound>,
}

impl AmbientIndex {
    /// Builds the index of `store` in a mesh configured as `mesh`.
    pub fn build(store: &StoreSnapshot, mesh: &MeshConfig) -> AmbientIndex {
        let root = &*mesh.root_namespace;
        let mut index = AmbientIndex::default();
        let mut selector_policies = Vec::new();
        let mut authorizations = Vec::new();
        for stored in store.kind(ConfigKind::AuthorizationPolicy).values() {
            let ConfigObject::AuthorizationPolicy(ap) = &*stored.object else { continue };
            let translated = policy::translate(&in_namespace_ap(ap), root, mesh.ambient.dry_run_policies);
            if !translated.notes.is_empty() {
                index.notes.insert(stored.object.key(), translated.notes);
            }
            let Some(authorization) = translated.authorization else { continue };
            let name = format!("{}/{}", authorization.namespace, authorization.name);
            if authorization.scope == Scope::WorkloadSelector as i32 {
                selector_policies.push(address::SelectorPolicy {
                    key: name.clone(),
                    namespace: authorization.namespace.clone(),
                    labels: ap.spec.selector.as_ref().map(|s| s.match_labels.clone()).unwrap_or_default(),
                });
            }
            authorizations.push(Arc::new(EncodedResource::encode(TypeUrl::Authorization, name.into(), &authorization)));
        }
        let peer_authentications: Vec<PeerAuthentication> = store
            .kind(ConfigKind::PeerAuthentication)
            .values()
            .filter_map(|s| match &*s.object {
                ConfigObject::PeerAuthentication(pa) => Some(in_namespace_pa(pa)),
                _ => None,
            })
            .collect();
        if !peer_authentications.is_empty() {
            let strict = peer_mtls::static_strict(root);
            let name = format!("{root}/{}", strict.name);
            authorizations.push(Arc::new(EncodedResource::encode(TypeUrl::Authorization, name.into(), &strict)));
        }
        let level = |namespace: &str| {
            peer_mtls::oldest(
                peer_authentications.iter().filter(|p| p.metadata.namespace == namespace && p.spec.selector.is_none()),
            )
        };
        for pa in &peer_authentications {
            if let Some(converted) = peer_mtls::translate(pa, level(&pa.metadata.namespace), level(root), root) {
                let name = format!("{}/{}", converted.namespace, converted.name);
                authorizations.push(Arc::new(EncodedResource::encode(TypeUrl::Authorization, name.into(), &converted)));
            }
        }
        index.network = address::network(store, mesh);
        index.waypoints = waypoint::Waypoints::build(store, &index.network);
        (index.bindings, index.bound) = waypoint_bindings(store, &index.waypoints);
        let inputs = address::Inputs {
            mesh,
            selector_policies: &selector_policies,
            peer_authentications: &peer_authentications,
            waypoints: &index.waypoints,
        };
        let addresses: Vec<(Arc<str>, _)> =
            address::addresses(store, &inputs).into_iter().map(|(name, address)| (Arc::from(name), address)).collect();
        index.keys = lookup::AddressKeys::of(addresses.iter().map(|(name, address)| (name, address)));
        index.addresses = addresses
            .into_par_iter()
            .map(|(name, address)| Arc::new(EncodedResource::encode(TypeUrl::Address, name, &address)))
            .collect();
        index.addresses.sort_by(|a, b| a.name.cmp(&b.name));
        index.addresses.dedup_by(|a, b| a.name == b.name);
        authorizations.sort_by(|a, b| a.name.cmp(&b.name));
        authorizations.dedup_by(|a, b| a.name == b.name);
        index.authorizations = authorizations;
        index
    }
}

/// Why each object that asks for a waypoint cannot have it (and why each
/// waypoint that is not ready is not); and what each waypoint serves.
fn waypoint_bindings(
    store: &StoreSnapshot,
    waypoints: &waypoint::Waypoints,
) -> (BTreeMap<ConfigKey, String>, BTreeMap<(String, String), waypoint::Bound>) {
    use waypoint::Target;
    let mut errors = BTreeMap::new();
    let mut bound: BTreeMap<(String, String), waypoint::Bound> = BTreeMap::new();
    for ((namespace, name), why) in waypoints.not_ready() {
        errors.insert(ConfigKey::new(ConfigKind::KubernetesGateway, namespace, name), format!("not ready: {why}"));
    }
    let kinds = [
        (ConfigKind::Service, Target::Service),
        (ConfigKind::ServiceEntry, Target::Service),
        (ConfigKind::Pod, Target::Workload),
        (ConfigKind::WorkloadEntry, Target::Workload),
    ];
    let asking = |meta: &crate::config::ObjectMeta| {
        meta.labels.contains_key(waypoint::USE_WAYPOINT)
            || store
                .get(&ConfigKey::new(ConfigKind::Namespace, "", meta.namespace()))
                .is_some_and(|n| n.object.meta().labels.contains_key(waypoint::USE_WAYPOINT))
    };
    for (kind, target) in kinds {
        for stored in store.kind(kind).values() {
            let meta = stored.object.meta();
            if !asking(meta) {
                continue;
            }
            match waypoints.bind(store, meta, target) {
                Err(why) => {
                    errors.insert(stored.object.key(), why);
                }
                Ok(None) => {}
                Ok(Some(w)) => {
                    let entry = bound.entry((w.namespace.clone(), w.name.clone())).or_default();
                    waypoint::Bound::add(entry, &stored.object, w);
                }
            }
        }
    }
    bound.values_mut().for_each(waypoint::Bound::settle);
    (errors, bound)
}

/// The policy with Kubernetes' default namespace where its file named none.
fn in_namespace_ap(ap: &AuthorizationPolicy) -> std::borrow::Cow<'_, AuthorizationPolicy> {
    if ap.metadata.namespace.is_empty() {
        let mut owned = ap.clone();
        owned.metadata.namespace = ap.metadata.namespace().to_string();
        std::borrow::Cow::Owned(owned)
    } else {
        std::borrow::Cow::Borrowed(ap)
    }
}

/// The policy with Kubernetes' default namespace where its file named none.
fn in_namespace_pa(pa: &PeerAuthentication) -> PeerAuthentication {
    let mut owned = pa.clone();
    owned.metadata.namespace = pa.metadata.namespace().to_string();
    owned
}
