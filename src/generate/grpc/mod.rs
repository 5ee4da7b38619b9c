//! Proxyless gRPC: what a gRPC library that speaks xDS itself is sent, as
//! istiod's gRPC generator (`pilot/pkg/networking/grpcgen`) sends it.
//!
//! A gRPC client (node metadata `GENERATOR: grpc`, [`XdsClient::Grpc`])
//! reads a subset of Envoy's API and names every resource it wants:
//!
//! * [`lds`]: a client listener per target it dials, named exactly as it
//!   dialled it (`HOST:PORT`, short names expanded with its DNS domain as
//!   Istio's `tryFindFQDN` does), an `api_listener` whose connection
//!   manager takes routes over RDS from `outbound|PORT||FQDN` and runs the
//!   filters gRPC has (fault, router); and a server listener per port an
//!   xDS-enabled gRPC server listens on (`xds.istio.io/grpc/lds/inbound/IP:PORT`),
//!   with one chain, `inbound-plaintext` or `inbound-mtls` by
//!   PeerAuthentication, its AuthorizationPolicies as RBAC filters (DENY,
//!   then ALLOW) and an inline route that lets every request through.
//! * [`rds`]: per service port, `outbound|PORT||FQDN` with that service's
//!   one virtual host (its names with and without `:PORT`, as gRPC matches
//!   the authority it dialled) and the routes of its VirtualService, cut to
//!   what gRPC applies ([`unsupported`]); a timeout becomes the stream's
//!   maximum duration, which is what gRPC reads.
//! * [`cds`]: `outbound|PORT|SUBSET|FQDN`, EDS over ADS, with the
//!   DestinationRule's load balancing (round robin, least request, ring
//!   hash), circuit breaking (`max_requests`), outlier detection and, for
//!   `ISTIO_MUTUAL`, TLS from the client's certificate provider ([`tls`]).
//! * EDS is the ordinary generator: every group of endpoints carries a
//!   locality (empty when unknown), which gRPC requires.
//!
//! What a gRPC client cannot apply of a VirtualService, DestinationRule or
//! AuthorizationPolicy is left out of what it is sent and listed per object
//! ([`unsupported::notes`], shown on `/debug/configz`), never sent for it
//! to refuse or ignore.
//!
//! Role in the data flow: the cache calls [`lds::listeners`],
//! [`rds::route_configs`] and [`cds::clusters`] once per gRPC scope (its
//! scope key says [`XdsClient::Grpc`], so gRPC and Envoy sidecars never
//! share a set); a stream picks the names its client asked for from them.
//! A server listener depends on the workload's own ports and policies and
//! on the address the server listens on, so [`lds::server_listener`] is
//! built per workload shape and name.
//!
//! Invariants: as every generator, pure and deterministic; a listener name
//! that resolves to no service gives no resource (the client reports its
//! own resolution error), and costs the other clients nothing.
//!
//! [`XdsClient::Grpc`]: crate::model::XdsClient::Grpc

pub mod cds;
pub mod lds;
pub mod rds;
pub mod tls;
pub mod unsupported;

/// The prefix of a gRPC server's listener name: its bootstrap's
/// `server_listener_resource_name_template` (Istio's), with the address
/// it listens on after it.
pub const SERVER_LISTENER_PREFIX: &str = "xds.istio.io/grpc/lds/inbound/";

/// The transport socket name gRPC requires of a TLS socket.
pub const TLS_TRANSPORT_SOCKET: &str = "envoy.transport_sockets.tls";

#[cfg(test)]
mod test;
