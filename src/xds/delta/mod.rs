//! The incremental protocol (`DeltaAggregatedResources`): per-resource
//! versions, only changes on the wire.
//!
//! * [`connection`]: one stream's protocol state ([`DeltaConnection`]).
//! * [`held`]: what the client holds of a type, compact and sorted.
//! * [`request`]: a `DeltaDiscoveryRequest` as a stream reads it.
//! * [`codec`]: pre-encoded, gRPC-framed `DeltaDiscoveryResponse`s.

pub mod codec;
pub mod connection;
pub mod held;
pub mod request;

pub use codec::DeltaResponse;
pub use connection::DeltaConnection;
pub use request::DeltaRequest;
