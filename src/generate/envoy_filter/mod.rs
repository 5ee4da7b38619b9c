//! EnvoyFilter patches applied to generated resources, as istiod applies
//! them (`pilot/pkg/networking/core/envoyfilter`; the behaviour, case by
//! case, is in `docs/envoyfilter.md` §2–§3).
//!
//! The flow: a scope's (or a workload shape's) resources are generated as
//! usual, then the patches its key holds — already selected and ordered
//! for the proxy by `push::index::envoy_filter` — are applied to them in
//! the context of the side they belong to, and the result is cached and
//! encoded once like any other. A scope without patches takes the plain
//! generator's output untouched: a mesh without EnvoyFilters pays one
//! emptiness check per generation.
//!
//! * [`listener`]: LISTENER, LISTENER_FILTER, FILTER_CHAIN, NETWORK_FILTER
//!   and HTTP_FILTER (and, on a sidecar's inbound side, the route patches
//!   of the route configurations inlined in its connection managers);
//! * [`route`]: ROUTE_CONFIGURATION, VIRTUAL_HOST and HTTP_ROUTE;
//! * [`cluster`]: CLUSTER (and [`extension_configs`], EXTENSION_CONFIG);
//! * [`record`]: what each patch did, for the metric and the reports.
//!
//! Where istiod panics half-way (a MERGE of a typed config into a filter
//! of another type), meshpush skips that patch for that object and
//! reports it; where a patch would leave a filter list Envoy refuses (a
//! filter after the terminal one, or the terminal one removed), the patch
//! is skipped for that list and reported, so Envoy never NACKs because of
//! a patch. Everything else follows istiod, its quirks included.
//!
//! Invariant: patching is a pure function of the resources, the patches
//! and the context — the same inputs give byte-identical output, and a
//! patch value is never modified (every insertion is a copy), so repeated
//! generations never apply a MERGE twice.

pub mod cluster;
pub mod listener;
pub mod record;
pub mod route;

use std::sync::Arc;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::TypedExtensionConfig;
use envoy_types::pb::envoy::config::listener::v3::Listener;
use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
use envoy_types::pb::google::protobuf::Any;
use prost::Message;

pub use record::{PatchLog, Record};

use crate::config::istio::envoy_filter::{ApplyTo, Operation, PatchContext};
use crate::envoy_api::merge::{self, Lists, MergeError};
use crate::model::ProxyKind;
use crate::push::index::envoy_filter::ResolvedPatch;
use crate::push::{InboundKey, PushContext, Scope};

/// The side of a proxy a resource belongs to: the context its patches must name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    /// A sidecar's inbound side.
    SidecarInbound,
    /// A sidecar's outbound side.
    SidecarOutbound,
    /// A gateway (all of it).
    Gateway,
}

impl Context {
    /// The context of a scope's resources.
    pub fn of_scope(scope: &Scope) -> Context {
        match scope.key.kind {
            ProxyKind::Router => Context::Gateway,
            // A ztunnel scope holds no patches (it is sent no Envoy type),
            // nor does a waypoint's (see `EnvoyFilterIndex::outbound`).
            ProxyKind::Sidecar | ProxyKind::Ztunnel | ProxyKind::Waypoint => Context::SidecarOutbound,
        }
    }

    fn patch_context(self) -> PatchContext {
        match self {
            Context::SidecarInbound => PatchContext::SidecarInbound,
            Context::SidecarOutbound => PatchContext::SidecarOutbound,
            Context::Gateway => PatchContext::Gateway,
        }
    }

    /// Whether an ADD of a whole listener or cluster in `patch` lands here:
    /// its own context, or ANY everywhere but a sidecar's inbound side.
    fn takes_add(self, patch: &ResolvedPatch) -> bool {
        patch.matches.context == self.patch_context()
            || (patch.matches.context == PatchContext::Any && self != Context::SidecarInbound)
    }
}

/// The patches of `kind` read in `context`, in order.
fn of_kind(
    patches: &[Arc<ResolvedPatch>],
    kind: ApplyTo,
    context: Context,
) -> impl Iterator<Item = &ResolvedPatch> + Clone {
    patches.iter().map(|p| &**p).filter(move |p| p.apply_to == kind && p.in_context(context.patch_context()))
}

/// Whether a patch's operation merges.
fn is_merge(p: &ResolvedPatch) -> bool {
    matches!(p.operation, Operation::Merge | Operation::MergeAndReplaceList)
}

/// The patch's value as the generated type `M` (a copy).
fn value<M: Message + Default>(p: &ResolvedPatch) -> Option<M> {
    p.value.as_ref().map(merge::typed)
}

/// Merges the patch's value into `target` (the whole object, as
/// `pkg/proto/merge` does; `MERGE_AND_REPLACE_LIST` replaces lists). What
/// the value sets was checked against Envoy's constraints when it was read.
///
/// Where protobuf's own merge of the encoded value gives Istio's result
/// (a MERGE whose value holds no Duration: Istio replaces a Duration whole,
/// protobuf merges its two fields), the value's bytes are merged into the
/// generated message directly; otherwise through the pool.
fn merge_into<M: Message + prost::Name + Default>(target: &mut M, p: &ResolvedPatch) -> Result<(), String> {
    let Some(patch) = &p.value else { return Ok(()) };
    if let Some(bytes) = p.merge_bytes() {
        return target.merge(bytes).map_err(|e| e.to_string());
    }
    let lists = if p.operation == Operation::MergeAndReplaceList { Lists::Replace } else { Lists::Append };
    let mut dynamic = merge::dynamic(target);
    merge::merge(&mut dynamic, patch, lists).map_err(|e| e.to_string())?;
    *target = merge::typed(&dynamic);
    Ok(())
}

/// Why a typed config merge was not made.
enum TypedMerge {
    /// The patch's typed config is of another type.
    Mismatch(String),
    /// It could not be read.
    Failed(String),
}

/// Merges a typed config into another as istiod's `MergeAnyWithAny` does.
fn merge_typed(target: &mut Any, patch: &Any) -> Result<(), TypedMerge> {
    match merge::merge_any(target, patch) {
        Ok(()) => Ok(()),
        Err(e @ MergeError::TypeMismatch { .. }) => Err(TypedMerge::Mismatch(e.to_string())),
        Err(e) => Err(TypedMerge::Failed(e.to_string())),
    }
}

/// The outbound (or gateway) clusters of `scope`, patched.
pub fn clusters(ctx: &PushContext, scope: &Scope, record: &mut Record) -> Vec<Cluster> {
    let mut out = crate::generate::cds::clusters(ctx, scope);
    let patches = &scope.key.envoy_filters;
    if !patches.is_empty() {
        cluster::patch(patches, Context::of_scope(scope), &mut out, &|_| &[], record);
    }
    out
}

/// The inbound clusters of a workload shape, patched.
pub fn inbound_clusters(key: &InboundKey, record: &mut Record) -> Vec<Cluster> {
    let mut out = crate::generate::cds::inbound_clusters(key);
    if let Some(patches) = &key.envoy_filters {
        let hosts = |port: u32| patches.hosts.get(&port).map(Vec::as_slice).unwrap_or_default();
        cluster::patch(&patches.patches, Context::SidecarInbound, &mut out, &hosts, record);
    }
    out
}

/// The listeners of `scope`, patched.
pub fn listeners(ctx: &PushContext, scope: &Scope, record: &mut Record) -> Vec<Listener> {
    let mut out = crate::generate::lds::listeners(ctx, scope);
    let patches = &scope.key.envoy_filters;
    if !patches.is_empty() {
        listener::patch(patches, Context::of_scope(scope), &mut out, record);
    }
    out
}

/// The inbound listeners of a workload shape, patched (their inline route
/// configurations first, as istiod patches them while building them).
pub fn inbound_listeners(key: &InboundKey, record: &mut Record) -> Vec<Listener> {
    let mut out = crate::generate::lds::inbound_listeners(key);
    if let Some(patches) = &key.envoy_filters {
        listener::patch_inline_routes(&patches.patches, &mut out, record);
        listener::patch(&patches.patches, Context::SidecarInbound, &mut out, record);
    }
    out
}

/// The route configurations of `scope`, patched.
pub fn route_configs(ctx: &PushContext, scope: &Scope, record: &mut Record) -> Vec<RouteConfiguration> {
    let mut out = crate::generate::rds::route_configs(ctx, scope);
    let patches = &scope.key.envoy_filters;
    if !patches.is_empty() {
        let ports = route::GatewayPorts::of(scope);
        route::patch(patches, Context::of_scope(scope), &mut out, &ports, record);
    }
    out
}

/// The extension configs `scope` serves over ECDS: the value of every
/// EXTENSION_CONFIG ADD, by its name, whatever the patch's context or match
/// (istiod reads neither). A name served by an earlier patch is not served
/// twice: the later patch is reported. An HTTP filter that names the
/// config in its `config_discovery` is how Envoy comes to ask for it.
pub fn extension_configs(scope: &Scope, record: &mut Record) -> Vec<TypedExtensionConfig> {
    let mut out: Vec<TypedExtensionConfig> = Vec::new();
    for p in scope.key.envoy_filters.iter().filter(|p| p.apply_to == ApplyTo::ExtensionConfig) {
        record.considered(p);
        if p.operation != Operation::Add {
            continue;
        }
        let Some(config) = value::<TypedExtensionConfig>(p) else { continue };
        if out.iter().any(|c| c.name == config.name) {
            record.failed(p, &format!("extension config {:?}", config.name), "an earlier patch serves this name");
            continue;
        }
        out.push(config);
        record.applied(p);
    }
    out
}

#[cfg(test)]
mod test;
