//! What a change touches: the resource types a change of each kind can
//! affect, and the hosts whose generated output one version of an object
//! can change. [`PushContext::next`](super::PushContext::next) reads both
//! to narrow what it rebuilds and what streams are sent.

use std::collections::HashSet;

use super::index::{ServiceIndex, Workload};
use crate::config::{ConfigKind, ConfigObject, k8s};
use crate::model::{Hostname, StoreSnapshot, host};
use crate::resource::{TypeSet, TypeUrl};

/// The resource types a change of `kind` can affect.
pub fn affected_types(kind: ConfigKind) -> TypeSet {
    use TypeUrl::{Cluster, Endpoint, Listener, Route};
    match kind {
        // Services and Sidecars change what a scope sees: everything; the
        // mesh config may change anything.
        ConfigKind::Service | ConfigKind::ServiceEntry | ConfigKind::Sidecar | ConfigKind::MeshConfig => TypeSet::ALL,
        // A Node's labels are its Pods' locality.
        ConfigKind::Pod | ConfigKind::EndpointSlice | ConfigKind::WorkloadEntry | ConfigKind::Node => {
            TypeSet::of(&[Endpoint])
        }
        // HTTP routes live in RDS, TCP routes in listeners.
        ConfigKind::VirtualService => TypeSet::of(&[Listener, Route]),
        // Cluster policy, subset endpoints, and hash policies on routes.
        // (and the Secrets a router's TLS origination names).
        ConfigKind::DestinationRule => TypeSet::of(&[Cluster, Endpoint, Route, TypeUrl::Secret]),
        // Servers, their routes, the Secrets they name, and the clusters
        // AUTO_PASSTHROUGH servers reach.
        ConfigKind::Gateway => TypeSet::of(&[Cluster, Listener, Route, TypeUrl::Secret]),
        // A template for auto-registered WorkloadEntries, which carry the change.
        ConfigKind::WorkloadGroup => TypeSet::EMPTY,
        // Given to pods at injection; no served configuration reads it (as
        // istiod leaves it out of every generator).
        ConfigKind::ProxyConfig => TypeSet::EMPTY,
        // Patches of listeners, routes and clusters (and the extension
        // configs served over ECDS).
        ConfigKind::EnvoyFilter => TypeSet::of(&[Cluster, Listener, Route, TypeUrl::ExtensionConfig]),
        // The certificates themselves, and the listeners whose TLS chains
        // are served only while the Secret they name exists.
        ConfigKind::Secret => TypeSet::of(&[Listener, TypeUrl::Secret]),
        // Inbound chains (the workload's mode), and auto mTLS towards the
        // services of a namespace (its namespace-level mode).
        ConfigKind::PeerAuthentication => TypeSet::of(&[Cluster, Listener]),
        // The RBAC filters of inbound chains.
        ConfigKind::AuthorizationPolicy => TypeSet::of(&[Listener]),
        // The JWT filters of inbound chains and gateway listeners, and the
        // keys inlined in them.
        ConfigKind::RequestAuthentication | ConfigKind::FetchedJwks => TypeSet::of(&[Listener]),
        // The trust bundle agents are sent; nothing Envoy holds.
        ConfigKind::FetchedTrustBundle => TypeSet::of(&[TypeUrl::ProxyConfig]),
        // The network gateways a host name gives: assignments (`next`
        // pushes everything when the networks move).
        ConfigKind::ResolvedGatewayHost => TypeSet::of(&[TypeUrl::Endpoint]),
        // The access loggers and tracers of connection managers and TCP proxies.
        ConfigKind::Telemetry => TypeSet::of(&[Listener]),
        // The Gateway API becomes Istio Gateways and VirtualServices: what a
        // Gateway changes. A Namespace's labels can move routes between
        // listeners; when the translation does not change, nothing is pushed
        // (`next` narrows the set).
        ConfigKind::GatewayClass
        | ConfigKind::KubernetesGateway
        | ConfigKind::HttpRoute
        | ConfigKind::GrpcRoute
        | ConfigKind::TcpRoute
        | ConfigKind::TlsRoute
        | ConfigKind::ReferenceGrant
        | ConfigKind::Namespace
        | ConfigKind::Ingress
        | ConfigKind::IngressClass => TypeSet::of(&[Cluster, Listener, Route, TypeUrl::Secret]),
    }
}

/// Adds the hosts an object (one version of it) affects.
pub(super) fn affected_hosts(
    object: &ConfigObject,
    store: &StoreSnapshot,
    old: &ServiceIndex,
    new: &ServiceIndex,
    out: &mut HashSet<Hostname>,
) {
    let ns = object.meta().namespace();
    let mut add_matching = |pattern: &str| {
        for index in [old, new] {
            if pattern.starts_with('*') {
                out.extend(
                    index.all().iter().filter(|s| host::matches(pattern, &s.hostname)).map(|s| s.hostname.clone()),
                );
            } else if index.get(pattern).is_some() {
                out.insert(pattern.into());
            }
        }
        if !pattern.starts_with('*') {
            out.insert(pattern.into());
        }
    };
    match object {
        ConfigObject::Service(svc) => add_matching(&host::service_fqdn(&svc.metadata.name, ns)),
        ConfigObject::ServiceEntry(se) => se.spec.hosts.iter().for_each(|h| add_matching(h)),
        ConfigObject::VirtualService(vs) => {
            vs.spec.hosts.iter().for_each(|h| add_matching(&host::resolve(h, ns)));
            // Destinations change which clusters routes use.
            for route in &vs.spec.http {
                let mirrors = route.mirror.iter().chain(route.mirrors.iter().map(|m| &m.destination));
                for d in route.route.iter().map(|d| &d.destination).chain(mirrors) {
                    add_matching(&host::resolve(&d.host, ns));
                }
            }
        }
        ConfigObject::DestinationRule(dr) => add_matching(&host::resolve(&dr.spec.host, ns)),
        ConfigObject::EndpointSlice(slice) => {
            if let Some(svc) = slice.metadata.labels.get(k8s::SERVICE_NAME_LABEL) {
                add_matching(&host::service_fqdn(svc, ns));
            }
        }
        ConfigObject::Pod(_) | ConfigObject::WorkloadEntry(_) => {
            if let Some(w) = Workload::from_object(object, store) {
                for index in [old, new] {
                    out.extend(index.selecting(&w.namespace, &w.labels).into_iter().map(|s| s.hostname.clone()));
                }
            }
        }
        // A Node's Pods are found through the workload index (`next`).
        ConfigObject::Node(_)
        | ConfigObject::Gateway(_)
        | ConfigObject::Sidecar(_)
        | ConfigObject::WorkloadGroup(_)
        | ConfigObject::Secret(_)
        | ConfigObject::EnvoyFilter(_)
        // What they translate to is compared as a whole (`next`).
        | ConfigObject::Namespace(_)
        | ConfigObject::GatewayClass(_)
        | ConfigObject::KubernetesGateway(_)
        | ConfigObject::HttpRoute(_)
        | ConfigObject::GrpcRoute(_)
        | ConfigObject::TcpRoute(_)
        | ConfigObject::TlsRoute(_)
        | ConfigObject::ReferenceGrant(_)
        | ConfigObject::Ingress(_)
        | ConfigObject::IngressClass(_)
        // A change regenerates every scope (`next`).
        | ConfigObject::PeerAuthentication(_)
        | ConfigObject::AuthorizationPolicy(_)
        | ConfigObject::RequestAuthentication(_)
        | ConfigObject::FetchedJwks(_)
        | ConfigObject::Telemetry(_)
        | ConfigObject::FetchedTrustBundle(_)
        | ConfigObject::ResolvedGatewayHost(_)
        | ConfigObject::MeshConfig(_) => {}
        // Read at injection only.
        ConfigObject::ProxyConfig(_) => {}
    }
}
