//! The state-of-the-world protocol (`StreamAggregatedResources`): every
//! response carries a type's whole state (CDS, LDS) or what changed of the
//! named resources (EDS, RDS), versioned per type.
//!
//! * [`connection`]: one stream's protocol state ([`Connection`]).
//! * [`request`]: a `DiscoveryRequest` as a stream reads it.
//! * [`sent`]: what a stream sent of one type ([`sent::Sent`]).
//! * [`codec`]: pre-encoded, gRPC-framed `DiscoveryResponse`s.

pub mod codec;
pub mod connection;
pub mod request;
pub mod sent;

pub use codec::OutgoingResponse;
pub use connection::Connection;
pub use request::SotwRequest;
