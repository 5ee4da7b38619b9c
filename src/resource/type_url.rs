//! The nine resource types meshpush serves, and their type URLs: Envoy's
//! six (ECDS only for the extension configs EnvoyFilters add), Istio's
//! PCDS, which only agents ask for, and ztunnel's two (WDS: workloads and
//! services; WADS: authorization policies), which only ztunnel asks for.

use std::fmt;

use serde::Serialize;

/// A resource type served over ADS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum TypeUrl {
    /// CDS: `envoy.config.cluster.v3.Cluster`.
    Cluster,
    /// EDS: `envoy.config.endpoint.v3.ClusterLoadAssignment`.
    Endpoint,
    /// LDS: `envoy.config.listener.v3.Listener`.
    Listener,
    /// RDS: `envoy.config.route.v3.RouteConfiguration`.
    Route,
    /// SDS: `envoy.extensions.transport_sockets.tls.v3.Secret`, the
    /// certificates and keys listeners and clusters name.
    Secret,
    /// PCDS: `istio.mesh.v1alpha1.ProxyConfig`, the mesh's trust bundle
    /// for an agent (never for Envoy).
    ProxyConfig,
    /// ECDS: `envoy.config.core.v3.TypedExtensionConfig`, the HTTP filter
    /// configurations EnvoyFilters serve by name.
    ExtensionConfig,
    /// WDS: `istio.workload.Address`, the workloads and services ztunnel
    /// reaches (never for Envoy).
    Address,
    /// WADS: `istio.security.Authorization`, the policies ztunnel enforces
    /// (never for Envoy).
    Authorization,
}

impl TypeUrl {
    /// How many types there are: the length of per-type arrays.
    pub const COUNT: usize = 9;

    /// Every type, in push order (make before break: clusters and their
    /// endpoints before the listeners and routes that use them; extension
    /// configs and secrets after them, as Istio orders them: a listener or
    /// cluster that names one warms until it arrives; the agent's PCDS
    /// after them, as it changes nothing Envoy holds; ztunnel's addresses
    /// before the policies that name them, as ztunnel subscribes).
    pub const PUSH_ORDER: [TypeUrl; TypeUrl::COUNT] = [
        TypeUrl::Cluster,
        TypeUrl::Endpoint,
        TypeUrl::Listener,
        TypeUrl::Route,
        TypeUrl::ExtensionConfig,
        TypeUrl::Secret,
        TypeUrl::ProxyConfig,
        TypeUrl::Address,
        TypeUrl::Authorization,
    ];

    /// The full type URL.
    pub const fn as_str(self) -> &'static str {
        match self {
            TypeUrl::Cluster => "type.googleapis.com/envoy.config.cluster.v3.Cluster",
            TypeUrl::Endpoint => "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment",
            TypeUrl::Listener => "type.googleapis.com/envoy.config.listener.v3.Listener",
            TypeUrl::Route => "type.googleapis.com/envoy.config.route.v3.RouteConfiguration",
            TypeUrl::Secret => "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret",
            TypeUrl::ProxyConfig => "type.googleapis.com/istio.mesh.v1alpha1.ProxyConfig",
            TypeUrl::ExtensionConfig => "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig",
            TypeUrl::Address => "type.googleapis.com/istio.workload.Address",
            TypeUrl::Authorization => "type.googleapis.com/istio.security.Authorization",
        }
    }

    /// Short name as in metrics and `istioctl` (`cds`, `eds`, `lds`, `rds`, `sds`, `pcds`, `ecds`, `wds`, `wads`).
    pub const fn short(self) -> &'static str {
        match self {
            TypeUrl::Cluster => "cds",
            TypeUrl::Endpoint => "eds",
            TypeUrl::Listener => "lds",
            TypeUrl::Route => "rds",
            TypeUrl::Secret => "sds",
            TypeUrl::ProxyConfig => "pcds",
            TypeUrl::ExtensionConfig => "ecds",
            TypeUrl::Address => "wds",
            TypeUrl::Authorization => "wads",
        }
    }

    /// Parses a type URL.
    pub fn parse(url: &str) -> Option<TypeUrl> {
        TypeUrl::PUSH_ORDER.into_iter().find(|t| t.as_str() == url)
    }

    /// Index for per-type arrays.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// Whether an empty subscription means "everything" (LDS and CDS, for
    /// Envoy; PCDS, whose one resource has no name; ztunnel's two, which
    /// it asks for whole unless it asks on demand).
    pub const fn is_wildcard_type(self) -> bool {
        matches!(
            self,
            TypeUrl::Cluster | TypeUrl::Listener | TypeUrl::ProxyConfig | TypeUrl::Address | TypeUrl::Authorization
        )
    }

    /// Whether this is one of ztunnel's types (the workload API).
    pub const fn is_workload_api(self) -> bool {
        matches!(self, TypeUrl::Address | TypeUrl::Authorization)
    }
}

impl fmt::Display for TypeUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.short())
    }
}

/// A set of resource types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
pub struct TypeSet(u16);

impl TypeSet {
    /// No type.
    pub const EMPTY: TypeSet = TypeSet(0);
    /// Every type.
    pub const ALL: TypeSet = TypeSet(0b1_1111_1111);

    /// A set of the given types.
    pub fn of(types: &[TypeUrl]) -> TypeSet {
        types.iter().fold(TypeSet::EMPTY, |set, t| set.with(*t))
    }

    /// This set plus `t`.
    pub const fn with(self, t: TypeUrl) -> TypeSet {
        TypeSet(self.0 | 1 << t.index())
    }

    /// Whether `t` is in the set.
    pub const fn contains(self, t: TypeUrl) -> bool {
        self.0 & (1 << t.index()) != 0
    }

    /// Union.
    pub const fn union(self, other: TypeSet) -> TypeSet {
        TypeSet(self.0 | other.0)
    }
}
