//! The service model: what the mesh *is*, derived from the typed config.
//!
//! * [`ConfigStore`] holds every config object by [`ConfigKey`](crate::config::ConfigKey),
//!   with its source and revision; writes yield typed change sets.
//! * [`check_references`] reports references between the store's objects
//!   that lead nowhere; [`check_telemetry`] and [`check_ext_authz`] the
//!   extension providers objects name that cannot serve them.
//! * [`authorizers`] resolves the mesh config's external authorizers
//!   against the registry, for generation and the report alike.
//! * [`Service`], [`Endpoint`] and [`Proxy`] are the shapes generators read:
//!   Kubernetes Services and ServiceEntries both become `Service`s; Pods,
//!   EndpointSlices, WorkloadEntries and inline ServiceEntry endpoints all
//!   become `Endpoint`s.
//!
//! Invariant: model values are immutable once built and shared through `Arc`;
//! a change produces new values, never edits old ones in place.

pub mod authorizers;
pub mod canonical;
pub mod endpoint;
pub mod host;
pub mod identity;
pub mod locality;
pub mod node_metadata;
pub mod proxy;
pub mod proxy_config;
pub mod references;
pub mod service;
pub mod store;
pub mod weak_table;
pub mod workload_name;

pub use endpoint::{Endpoint, Labels, ServiceEndpoints, intern_labels, no_labels};
pub use host::Hostname;
pub use identity::Identity;
pub use locality::Locality;
pub use node_metadata::NodeMetadata;
pub use proxy::{InterceptionMode, NodeError, Proxy, ProxyKind, XdsClient};
pub use references::{check_ext_authz, check_references, check_telemetry};
pub use service::{Alias, Protocol, Resolution, Service, ServicePort};
pub use store::{ChangeSet, ConfigStore, StoreSnapshot, StoredObject};
