//! Generation: a [`PushContext`](crate::push::PushContext) and a
//! [`Scope`](crate::push::Scope) in, Envoy v3 resources (prost messages) out.
//!
//! * [`cds`]: clusters (`outbound|port|subset|host`, `inbound|port||`,
//!   `BlackHoleCluster`, `PassthroughCluster`).
//! * [`eds`]: the `ClusterLoadAssignment` of one cluster, by name.
//! * [`lds`]: listeners (`0.0.0.0_PORT`, `virtualOutbound`, `virtualInbound`).
//! * [`rds`]: route configurations (`PORT` for sidecars, `http.PORT` and
//!   `https.PORT.NAME.GATEWAY.NS` for gateways).
//! * [`sds`]: the Secrets (certificates, keys, CAs) a proxy's TLS chains name.
//! * [`mtls`]: mesh mTLS between sidecars (client and server side).
//! * [`authz`]: AuthorizationPolicies as RBAC filters on inbound chains.
//! * [`naming`]: Istio's naming, made and parsed in one place.
//! * [`envoy_filter`]: EnvoyFilter patches applied to the generated resources.
//! * [`grpc`]: what proxyless gRPC applications are sent instead of the
//!   above (listeners by dialled name, a route config and clusters per
//!   service port, certificate-provider TLS).
//! * [`cache`]: the per-scope cache of encoded resources built on the above.
//!
//! Role in the data flow: the cache layer calls these once per
//! `(type, scope)` (EDS: once per cluster name) and encodes the result once
//! for every proxy of the scope.
//!
//! Invariants: every function here is pure. Its output depends on the
//! snapshot and the scope only — never on a proxy's id, IP or metadata
//! beyond what the scope holds — and it is deterministic: lists are sorted
//! or follow the order of sorted inputs, no hash-map iteration order reaches
//! a message, so equal inputs encode to byte-identical protobuf. (The one map
//! in these messages, `Cluster.typed_extension_protocol_options`, never holds
//! more than one entry.)

pub mod access_log;
pub mod authz;
pub mod cache;
pub mod cds;
pub mod eds;
pub mod envoy_filter;
pub mod grpc;
pub mod jwt;
pub mod lds;
pub mod naming;
pub mod pcds;
pub mod rds;
pub mod sds;

mod gateway;
pub mod mtls;
mod outbound;
mod policy;
mod proto;
mod route;
mod tls;
pub mod trace;
pub mod waypoint;

pub use cds::clusters;
pub use eds::{host_of, load_assignment};
pub use lds::listeners;
pub use naming::{BLACKHOLE_CLUSTER, ClusterName, Direction, PASSTHROUGH_CLUSTER, VIRTUAL_INBOUND, VIRTUAL_OUTBOUND};
pub use rds::{route_config, route_configs};

#[cfg(test)]
mod test;
