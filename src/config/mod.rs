//! Typed input objects: the Kubernetes and Istio kinds meshpush reads.
//!
//! Role in the data flow: a *source* (a watched directory of YAML, the
//! registry API) parses documents into [`ConfigObject`]s, validates them and
//! hands them to the store (`model::ConfigStore`). Everything downstream
//! works on these typed values, never on raw YAML.
//!
//! This layer sits just above the base types: it knows each kind on its
//! own, never a store of them (the model layer above it holds the store
//! and checks references between objects).
//!
//! Invariant: a `ConfigObject` that reached the store has passed
//! [`validate`] — generators may rely on its fields
//! being well-formed (weights non-negative, ports in range, durations parsed).

pub mod consul;
pub mod duration;
pub mod gateway_api;
pub mod ingress;
pub mod istio;
pub mod k8s;
pub mod mcp;
pub mod mesh;
pub mod parse;
pub mod problem;
pub mod protocol;
pub mod secret;
pub mod validate;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use duration::Duration;
pub use problem::{Problem, Severity};

/// The kinds of object meshpush understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ConfigKind {
    /// `v1 Service`.
    Service,
    /// `v1 Pod`.
    Pod,
    /// `discovery.k8s.io/v1 EndpointSlice`.
    EndpointSlice,
    /// `v1 Node` (cluster-scoped): the locality of the Pods on it.
    Node,
    /// `networking.istio.io ServiceEntry`.
    ServiceEntry,
    /// `networking.istio.io WorkloadEntry`.
    WorkloadEntry,
    /// `networking.istio.io VirtualService`.
    VirtualService,
    /// `networking.istio.io DestinationRule`.
    DestinationRule,
    /// `networking.istio.io Gateway`.
    Gateway,
    /// `networking.istio.io Sidecar`.
    Sidecar,
    /// `networking.istio.io WorkloadGroup`.
    WorkloadGroup,
    /// `v1 Secret`: certificates for Gateways and DestinationRules.
    Secret,
    /// `security.istio.io PeerAuthentication`: which inbound ports take mTLS.
    PeerAuthentication,
    /// `security.istio.io AuthorizationPolicy`: which requests a workload lets through.
    AuthorizationPolicy,
    /// `security.istio.io RequestAuthentication`: which JWTs a workload accepts.
    RequestAuthentication,
    /// `telemetry.istio.io Telemetry`: what proxies log, trace and count.
    Telemetry,
    /// `networking.istio.io ProxyConfig`: how new proxies are run
    /// (concurrency, environment, image), given at injection.
    ProxyConfig,
    /// `networking.istio.io EnvoyFilter`: patches to the Envoy config of
    /// the proxies it selects.
    EnvoyFilter,
    /// A JWKS meshpush fetched for a RequestAuthentication (internal: written
    /// by `source::jwks` only, never read from a file or an API).
    FetchedJwks,
    /// The roots meshpush fetched from a SPIFFE bundle URL of the mesh
    /// config's `caCertificates` (internal: written by
    /// `source::spiffe_bundle` only, never read from a file or an API).
    FetchedTrustBundle,
    /// The addresses meshpush resolved for a network gateway known by host
    /// name (internal: written by `source::gateway_dns` only).
    ResolvedGatewayHost,
    /// The mesh config served (internal: written by `source::mesh_config`
    /// from Istio's mesh config file, with the command line over it).
    MeshConfig,
    /// `v1 Namespace` (cluster-scoped): its labels, which a Gateway
    /// listener's `allowedRoutes` may select on.
    Namespace,
    /// `gateway.networking.k8s.io GatewayClass` (cluster-scoped).
    GatewayClass,
    /// `gateway.networking.k8s.io Gateway`.
    KubernetesGateway,
    /// `gateway.networking.k8s.io HTTPRoute`.
    HttpRoute,
    /// `gateway.networking.k8s.io GRPCRoute`.
    GrpcRoute,
    /// `gateway.networking.k8s.io TCPRoute`.
    TcpRoute,
    /// `gateway.networking.k8s.io TLSRoute`.
    TlsRoute,
    /// `gateway.networking.k8s.io ReferenceGrant`.
    ReferenceGrant,
    /// `networking.k8s.io Ingress`.
    Ingress,
    /// `networking.k8s.io IngressClass` (cluster-scoped).
    IngressClass,
}

impl ConfigKind {
    /// Every kind, in a fixed order.
    pub const ALL: [ConfigKind; 32] = [
        ConfigKind::Service,
        ConfigKind::Pod,
        ConfigKind::EndpointSlice,
        ConfigKind::Node,
        ConfigKind::ServiceEntry,
        ConfigKind::WorkloadEntry,
        ConfigKind::VirtualService,
        ConfigKind::DestinationRule,
        ConfigKind::Gateway,
        ConfigKind::Sidecar,
        ConfigKind::WorkloadGroup,
        ConfigKind::Secret,
        ConfigKind::PeerAuthentication,
        ConfigKind::AuthorizationPolicy,
        ConfigKind::RequestAuthentication,
        ConfigKind::Telemetry,
        ConfigKind::ProxyConfig,
        ConfigKind::EnvoyFilter,
        ConfigKind::FetchedJwks,
        ConfigKind::FetchedTrustBundle,
        ConfigKind::ResolvedGatewayHost,
        ConfigKind::MeshConfig,
        ConfigKind::Namespace,
        ConfigKind::GatewayClass,
        ConfigKind::KubernetesGateway,
        ConfigKind::HttpRoute,
        ConfigKind::GrpcRoute,
        ConfigKind::TcpRoute,
        ConfigKind::TlsRoute,
        ConfigKind::ReferenceGrant,
        ConfigKind::Ingress,
        ConfigKind::IngressClass,
    ];

    /// The kind's name as meshpush shows it: the Kubernetes `kind`, except
    /// that the Gateway API's Gateway is `KubernetesGateway` (as istiod
    /// calls it) so that it is never mistaken for Istio's.
    pub fn as_str(self) -> &'static str {
        match self {
            ConfigKind::Service => "Service",
            ConfigKind::Pod => "Pod",
            ConfigKind::EndpointSlice => "EndpointSlice",
            ConfigKind::Node => "Node",
            ConfigKind::ServiceEntry => "ServiceEntry",
            ConfigKind::WorkloadEntry => "WorkloadEntry",
            ConfigKind::VirtualService => "VirtualService",
            ConfigKind::DestinationRule => "DestinationRule",
            ConfigKind::Gateway => "Gateway",
            ConfigKind::Sidecar => "Sidecar",
            ConfigKind::WorkloadGroup => "WorkloadGroup",
            ConfigKind::Secret => "Secret",
            ConfigKind::PeerAuthentication => "PeerAuthentication",
            ConfigKind::AuthorizationPolicy => "AuthorizationPolicy",
            ConfigKind::RequestAuthentication => "RequestAuthentication",
            ConfigKind::Telemetry => "Telemetry",
            ConfigKind::ProxyConfig => "ProxyConfig",
            ConfigKind::EnvoyFilter => "EnvoyFilter",
            ConfigKind::FetchedJwks => "FetchedJwks",
            ConfigKind::FetchedTrustBundle => "FetchedTrustBundle",
            ConfigKind::ResolvedGatewayHost => "ResolvedGatewayHost",
            ConfigKind::MeshConfig => "MeshConfig",
            ConfigKind::Namespace => "Namespace",
            ConfigKind::GatewayClass => "GatewayClass",
            ConfigKind::KubernetesGateway => "KubernetesGateway",
            ConfigKind::HttpRoute => "HTTPRoute",
            ConfigKind::GrpcRoute => "GRPCRoute",
            ConfigKind::TcpRoute => "TCPRoute",
            ConfigKind::TlsRoute => "TLSRoute",
            ConfigKind::ReferenceGrant => "ReferenceGrant",
            ConfigKind::Ingress => "Ingress",
            ConfigKind::IngressClass => "IngressClass",
        }
    }

    /// The Kubernetes `kind` string manifests write (with
    /// [`api_group`](Self::api_group), what names the kind).
    pub fn kind_name(self) -> &'static str {
        match self {
            ConfigKind::KubernetesGateway => "Gateway",
            other => other.as_str(),
        }
    }

    /// The kind's API group: `""` (core), `discovery.k8s.io`,
    /// `networking.istio.io`, `security.istio.io`, `telemetry.istio.io`, …
    pub fn api_group(self) -> &'static str {
        match self {
            ConfigKind::Service | ConfigKind::Pod | ConfigKind::Node | ConfigKind::Secret | ConfigKind::Namespace => "",
            ConfigKind::EndpointSlice => "discovery.k8s.io",
            ConfigKind::PeerAuthentication | ConfigKind::AuthorizationPolicy | ConfigKind::RequestAuthentication => {
                "security.istio.io"
            }
            ConfigKind::Telemetry => "telemetry.istio.io",
            ConfigKind::FetchedJwks
            | ConfigKind::FetchedTrustBundle
            | ConfigKind::ResolvedGatewayHost
            | ConfigKind::MeshConfig => "meshpush.io",
            ConfigKind::GatewayClass
            | ConfigKind::KubernetesGateway
            | ConfigKind::HttpRoute
            | ConfigKind::GrpcRoute
            | ConfigKind::TcpRoute
            | ConfigKind::TlsRoute
            | ConfigKind::ReferenceGrant => gateway_api::GROUP,
            ConfigKind::Ingress | ConfigKind::IngressClass => ingress::GROUP,
            _ => "networking.istio.io",
        }
    }

    /// The Gateway API's route kinds.
    pub fn is_gateway_api_route(self) -> bool {
        matches!(self, ConfigKind::HttpRoute | ConfigKind::GrpcRoute | ConfigKind::TcpRoute | ConfigKind::TlsRoute)
    }

    /// Kinds meshpush writes itself: never read from a file, the registry
    /// API or Kubernetes.
    pub fn is_internal(self) -> bool {
        matches!(
            self,
            ConfigKind::FetchedJwks
                | ConfigKind::FetchedTrustBundle
                | ConfigKind::ResolvedGatewayHost
                | ConfigKind::MeshConfig
        )
    }

    /// Kinds whose objects belong to no namespace (their keys' namespace is
    /// empty).
    pub fn is_cluster_scoped(self) -> bool {
        matches!(
            self,
            ConfigKind::Node
                | ConfigKind::FetchedJwks
                | ConfigKind::FetchedTrustBundle
                | ConfigKind::ResolvedGatewayHost
                | ConfigKind::MeshConfig
                | ConfigKind::Namespace
                | ConfigKind::GatewayClass
                | ConfigKind::IngressClass
        )
    }

    /// Kinds that only move endpoints: a change to one of these can take the
    /// fast lane (no debounce wait, only the endpoint index is rebuilt). A
    /// Node's labels give its Pods' endpoints their locality.
    pub fn is_endpoint_kind(self) -> bool {
        matches!(self, ConfigKind::Pod | ConfigKind::EndpointSlice | ConfigKind::WorkloadEntry | ConfigKind::Node)
    }
}

impl fmt::Display for ConfigKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which Kubernetes cluster an object was read from: [`ClusterId::LOCAL`]
/// for meshpush's own (the cluster of its `--cluster-id`, where the mesh's
/// Istio config lives, and every object of its files and registry API),
/// else a remote cluster's id, as a remote secret names it.
///
/// Remote clusters are read for their registry (Services, Pods,
/// EndpointSlices, Nodes, Namespaces) only, as istiod reads them; their
/// objects are kept apart from the local ones of the same name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ClusterId(Option<Arc<str>>);

impl ClusterId {
    /// meshpush's own cluster.
    pub const LOCAL: ClusterId = ClusterId(None);

    /// Remote cluster `id`.
    pub fn remote(id: &str) -> ClusterId {
        ClusterId(Some(id.into()))
    }

    /// Whether it is meshpush's own cluster.
    pub fn is_local(&self) -> bool {
        self.0.is_none()
    }

    /// The remote cluster's id; `None` for the local one.
    pub fn remote_id(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

/// Identity of one config object: what a change is about.
///
/// Every write to the store yields `ConfigKey`s; there is no "something
/// changed" flag anywhere in meshpush.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ConfigKey {
    /// The object's kind.
    pub kind: ConfigKind,
    /// Its namespace (`default` when the document names none).
    pub namespace: Arc<str>,
    /// Its name.
    pub name: Arc<str>,
    /// The cluster it was read from (last, so that the keys of one kind
    /// and namespace stay together in key order whatever their cluster).
    #[serde(default, skip_serializing_if = "ClusterId::is_local")]
    pub cluster: ClusterId,
}

impl ConfigKey {
    /// Builds a key of the local cluster.
    pub fn new(kind: ConfigKind, namespace: &str, name: &str) -> Self {
        ConfigKey { kind, namespace: namespace.into(), name: name.into(), cluster: ClusterId::LOCAL }
    }

    /// Builds a key of `cluster`.
    pub fn in_cluster(kind: ConfigKind, namespace: &str, name: &str, cluster: &ClusterId) -> Self {
        ConfigKey { kind, namespace: namespace.into(), name: name.into(), cluster: cluster.clone() }
    }
}

impl fmt::Display for ConfigKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)?;
        match self.cluster.remote_id() {
            Some(cluster) => write!(f, " (cluster {cluster})"),
            None => Ok(()),
        }
    }
}

/// Kubernetes object metadata (the part meshpush reads).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ObjectMeta {
    /// Object name.
    pub name: String,
    /// Namespace; empty means `default`.
    pub namespace: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations (`networking.istio.io/exportTo` is read from here).
    pub annotations: BTreeMap<String, String>,
    /// When the API server created the object (RFC 3339): the Gateway API
    /// orders routes of equal precedence by it. Objects of a file have none.
    pub creation_timestamp: Option<String>,
    /// The prefix the API server generated the name from (a Pod of a
    /// controller has one: its workload name is the controller's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generate_name: Option<String>,
    /// The objects that own this one (a Pod's ReplicaSet or Job).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub owner_references: Vec<OwnerReference>,
    /// Set once the object is being deleted (a Pod terminating).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<String>,
    /// The API server's unique id of the object: a Pod deleted and created
    /// again under its name has another (the CA checks a Pod-bound token's
    /// Pod by it). Objects of a file have none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// The cluster the object was read from (set by the source that read
    /// it, never by the object's text).
    #[serde(skip)]
    pub cluster: ClusterId,
    /// An Istio config object's `spec` exactly as its source wrote it
    /// (set by the parser for the kinds MCP-over-xDS carries): what
    /// meshpush serves its MCP clients, every field included, not only
    /// those its types model.
    #[serde(skip)]
    pub written_spec: Option<WrittenSpec>,
}

/// A `spec` as its source wrote it, as JSON; shared, compared by value.
#[derive(Debug, Clone, PartialEq)]
pub struct WrittenSpec(pub Arc<serde_json::Value>);

/// `metadata.ownerReferences[]` (the part meshpush reads).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OwnerReference {
    /// The owner's kind (`ReplicaSet`, `Job`, …).
    pub kind: String,
    /// The owner's API version (`apps/v1`, …).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// The owner's name.
    pub name: String,
    /// Whether the owner is the object's controller.
    pub controller: Option<bool>,
}

impl ObjectMeta {
    /// The namespace, with Kubernetes' default applied.
    pub fn namespace(&self) -> &str {
        if self.namespace.is_empty() { "default" } else { &self.namespace }
    }
}

/// Where an object came from: shown in every message about it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct SourceRef {
    /// File path (or `registry` for objects applied through the API).
    pub file: Arc<str>,
    /// 0-based index of the YAML document in the file.
    pub doc: usize,
}

impl fmt::Display for SourceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} doc {}", self.file, self.doc)
    }
}

/// One typed config object.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind")]
#[allow(clippy::large_enum_variant)]
pub enum ConfigObject {
    /// `v1 Service`.
    Service(k8s::Service),
    /// `v1 Pod`.
    Pod(k8s::Pod),
    /// `discovery.k8s.io/v1 EndpointSlice`.
    EndpointSlice(k8s::EndpointSlice),
    /// `v1 Node`.
    Node(k8s::Node),
    /// Istio ServiceEntry. (boxed: every object of the store is as large as the
    /// largest variant, and Pods and EndpointSlices are most of them).
    ServiceEntry(Box<istio::ServiceEntry>),
    /// Istio WorkloadEntry.
    WorkloadEntry(istio::WorkloadEntry),
    /// Istio VirtualService.
    VirtualService(istio::VirtualService),
    /// Istio DestinationRule. (boxed: every object of the store is as large as the
    /// largest variant, and Pods and EndpointSlices are most of them).
    DestinationRule(Box<istio::DestinationRule>),
    /// Istio Gateway.
    Gateway(istio::Gateway),
    /// Istio Sidecar. (boxed: every object of the store is as large as the
    /// largest variant, and Pods and EndpointSlices are most of them).
    Sidecar(Box<istio::Sidecar>),
    /// Istio WorkloadGroup. (boxed: every object of the store is as large as the
    /// largest variant, and Pods and EndpointSlices are most of them).
    WorkloadGroup(Box<istio::WorkloadGroup>),
    /// `v1 Secret` (boxed, as the kinds above; its values are redacted in
    /// every view).
    Secret(Box<secret::Secret>),
    /// Istio PeerAuthentication.
    PeerAuthentication(istio::PeerAuthentication),
    /// Istio AuthorizationPolicy (boxed, as the kinds above).
    AuthorizationPolicy(Box<istio::AuthorizationPolicy>),
    /// Istio RequestAuthentication (boxed, as the kinds above).
    RequestAuthentication(Box<istio::RequestAuthentication>),
    /// Istio Telemetry (boxed, as the kinds above).
    Telemetry(Box<istio::Telemetry>),
    /// Istio ProxyConfig.
    ProxyConfig(Box<istio::ProxyConfigObject>),
    /// Istio EnvoyFilter (boxed, as the kinds above).
    EnvoyFilter(Box<istio::EnvoyFilter>),
    /// A fetched JWKS (boxed, as the kinds above).
    FetchedJwks(Box<istio::FetchedJwks>),
    /// A fetched SPIFFE bundle (boxed, as the kinds above).
    FetchedTrustBundle(Box<mesh::spiffe_bundle::FetchedTrustBundle>),
    /// A network gateway host name's addresses (internal).
    ResolvedGatewayHost(Box<mesh::networks::ResolvedGatewayHost>),
    /// The mesh config served (boxed, as the kinds above).
    MeshConfig(Box<mesh::MeshConfigObject>),
    /// `v1 Namespace`.
    Namespace(k8s::Namespace),
    /// Gateway API GatewayClass.
    GatewayClass(Box<gateway_api::GatewayClass>),
    /// Gateway API Gateway (boxed, as the kinds above).
    KubernetesGateway(Box<gateway_api::Gateway>),
    /// Gateway API HTTPRoute (boxed, as the kinds above).
    HttpRoute(Box<gateway_api::HttpRoute>),
    /// Gateway API GRPCRoute (boxed, as the kinds above).
    GrpcRoute(Box<gateway_api::GrpcRoute>),
    /// Gateway API TCPRoute (boxed, as the kinds above).
    TcpRoute(Box<gateway_api::TcpRoute>),
    /// Gateway API TLSRoute (boxed, as the kinds above).
    TlsRoute(Box<gateway_api::TlsRoute>),
    /// Gateway API ReferenceGrant (boxed, as the kinds above).
    ReferenceGrant(Box<gateway_api::ReferenceGrant>),
    /// `networking.k8s.io/v1 Ingress` (boxed, as the kinds above).
    Ingress(Box<ingress::Ingress>),
    /// `networking.k8s.io/v1 IngressClass`.
    IngressClass(Box<ingress::IngressClass>),
}

impl ConfigObject {
    /// The object's kind.
    pub fn kind(&self) -> ConfigKind {
        match self {
            ConfigObject::Service(_) => ConfigKind::Service,
            ConfigObject::Pod(_) => ConfigKind::Pod,
            ConfigObject::EndpointSlice(_) => ConfigKind::EndpointSlice,
            ConfigObject::Node(_) => ConfigKind::Node,
            ConfigObject::ServiceEntry(_) => ConfigKind::ServiceEntry,
            ConfigObject::WorkloadEntry(_) => ConfigKind::WorkloadEntry,
            ConfigObject::VirtualService(_) => ConfigKind::VirtualService,
            ConfigObject::DestinationRule(_) => ConfigKind::DestinationRule,
            ConfigObject::Gateway(_) => ConfigKind::Gateway,
            ConfigObject::Sidecar(_) => ConfigKind::Sidecar,
            ConfigObject::WorkloadGroup(_) => ConfigKind::WorkloadGroup,
            ConfigObject::Secret(_) => ConfigKind::Secret,
            ConfigObject::PeerAuthentication(_) => ConfigKind::PeerAuthentication,
            ConfigObject::AuthorizationPolicy(_) => ConfigKind::AuthorizationPolicy,
            ConfigObject::RequestAuthentication(_) => ConfigKind::RequestAuthentication,
            ConfigObject::Telemetry(_) => ConfigKind::Telemetry,
            ConfigObject::ProxyConfig(_) => ConfigKind::ProxyConfig,
            ConfigObject::EnvoyFilter(_) => ConfigKind::EnvoyFilter,
            ConfigObject::FetchedJwks(_) => ConfigKind::FetchedJwks,
            ConfigObject::FetchedTrustBundle(_) => ConfigKind::FetchedTrustBundle,
            ConfigObject::ResolvedGatewayHost(_) => ConfigKind::ResolvedGatewayHost,
            ConfigObject::MeshConfig(_) => ConfigKind::MeshConfig,
            ConfigObject::Namespace(_) => ConfigKind::Namespace,
            ConfigObject::GatewayClass(_) => ConfigKind::GatewayClass,
            ConfigObject::KubernetesGateway(_) => ConfigKind::KubernetesGateway,
            ConfigObject::HttpRoute(_) => ConfigKind::HttpRoute,
            ConfigObject::GrpcRoute(_) => ConfigKind::GrpcRoute,
            ConfigObject::TcpRoute(_) => ConfigKind::TcpRoute,
            ConfigObject::TlsRoute(_) => ConfigKind::TlsRoute,
            ConfigObject::ReferenceGrant(_) => ConfigKind::ReferenceGrant,
            ConfigObject::Ingress(_) => ConfigKind::Ingress,
            ConfigObject::IngressClass(_) => ConfigKind::IngressClass,
        }
    }

    /// The object's metadata.
    pub fn meta(&self) -> &ObjectMeta {
        match self {
            ConfigObject::Service(o) => &o.metadata,
            ConfigObject::Pod(o) => &o.metadata,
            ConfigObject::EndpointSlice(o) => &o.metadata,
            ConfigObject::Node(o) => &o.metadata,
            ConfigObject::ServiceEntry(o) => &o.metadata,
            ConfigObject::WorkloadEntry(o) => &o.metadata,
            ConfigObject::VirtualService(o) => &o.metadata,
            ConfigObject::DestinationRule(o) => &o.metadata,
            ConfigObject::Gateway(o) => &o.metadata,
            ConfigObject::Sidecar(o) => &o.metadata,
            ConfigObject::WorkloadGroup(o) => &o.metadata,
            ConfigObject::Secret(o) => &o.metadata,
            ConfigObject::PeerAuthentication(o) => &o.metadata,
            ConfigObject::AuthorizationPolicy(o) => &o.metadata,
            ConfigObject::RequestAuthentication(o) => &o.metadata,
            ConfigObject::Telemetry(o) => &o.metadata,
            ConfigObject::ProxyConfig(o) => &o.metadata,
            ConfigObject::EnvoyFilter(o) => &o.metadata,
            ConfigObject::FetchedJwks(o) => &o.metadata,
            ConfigObject::FetchedTrustBundle(o) => &o.metadata,
            ConfigObject::ResolvedGatewayHost(o) => &o.metadata,
            ConfigObject::MeshConfig(o) => &o.metadata,
            ConfigObject::Namespace(o) => &o.metadata,
            ConfigObject::GatewayClass(o) => &o.metadata,
            ConfigObject::KubernetesGateway(o) => &o.metadata,
            ConfigObject::HttpRoute(o) => &o.metadata,
            ConfigObject::GrpcRoute(o) => &o.metadata,
            ConfigObject::TcpRoute(o) => &o.metadata,
            ConfigObject::TlsRoute(o) => &o.metadata,
            ConfigObject::ReferenceGrant(o) => &o.metadata,
            ConfigObject::Ingress(o) => &o.metadata,
            ConfigObject::IngressClass(o) => &o.metadata,
        }
    }

    /// The object's metadata, to change (a source stamps the cluster it read it from).
    pub fn meta_mut(&mut self) -> &mut ObjectMeta {
        match self {
            ConfigObject::Service(o) => &mut o.metadata,
            ConfigObject::Pod(o) => &mut o.metadata,
            ConfigObject::EndpointSlice(o) => &mut o.metadata,
            ConfigObject::Node(o) => &mut o.metadata,
            ConfigObject::ServiceEntry(o) => &mut o.metadata,
            ConfigObject::WorkloadEntry(o) => &mut o.metadata,
            ConfigObject::VirtualService(o) => &mut o.metadata,
            ConfigObject::DestinationRule(o) => &mut o.metadata,
            ConfigObject::Gateway(o) => &mut o.metadata,
            ConfigObject::Sidecar(o) => &mut o.metadata,
            ConfigObject::WorkloadGroup(o) => &mut o.metadata,
            ConfigObject::Secret(o) => &mut o.metadata,
            ConfigObject::PeerAuthentication(o) => &mut o.metadata,
            ConfigObject::AuthorizationPolicy(o) => &mut o.metadata,
            ConfigObject::RequestAuthentication(o) => &mut o.metadata,
            ConfigObject::Telemetry(o) => &mut o.metadata,
            ConfigObject::ProxyConfig(o) => &mut o.metadata,
            ConfigObject::EnvoyFilter(o) => &mut o.metadata,
            ConfigObject::FetchedJwks(o) => &mut o.metadata,
            ConfigObject::FetchedTrustBundle(o) => &mut o.metadata,
            ConfigObject::ResolvedGatewayHost(o) => &mut o.metadata,
            ConfigObject::MeshConfig(o) => &mut o.metadata,
            ConfigObject::Namespace(o) => &mut o.metadata,
            ConfigObject::GatewayClass(o) => &mut o.metadata,
            ConfigObject::KubernetesGateway(o) => &mut o.metadata,
            ConfigObject::HttpRoute(o) => &mut o.metadata,
            ConfigObject::GrpcRoute(o) => &mut o.metadata,
            ConfigObject::TcpRoute(o) => &mut o.metadata,
            ConfigObject::TlsRoute(o) => &mut o.metadata,
            ConfigObject::ReferenceGrant(o) => &mut o.metadata,
            ConfigObject::Ingress(o) => &mut o.metadata,
            ConfigObject::IngressClass(o) => &mut o.metadata,
        }
    }

    /// The key this object is stored under (with an empty namespace for a
    /// cluster-scoped kind).
    pub fn key(&self) -> ConfigKey {
        let meta = self.meta();
        let kind = self.kind();
        let namespace = if kind.is_cluster_scoped() { "" } else { meta.namespace() };
        ConfigKey::in_cluster(kind, namespace, &meta.name, &meta.cluster)
    }
}
