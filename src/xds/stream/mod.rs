//! The stream machinery both protocols share: the request half of a stream
//! (whole gRPC messages without a per-stream buffer, the pooled buffers,
//! the node filter, the node itself), the response half (the HTTP/2 body
//! that sends shared bytes, the cache of those bytes), what a stream
//! answers from, which scope it is generated for, and what it reports.
//!
//! * [`messages`]: whole request messages; [`buffers`]: their pool;
//!   `field_filter`: copying them without the node; [`request`]: the
//!   node and request errors.
//! * [`body`]: the response stream's HTTP/2 body and gRPC framing;
//!   [`bodies`]: response bodies assembled once, shared by the streams.
//! * [`connection`]: what every stream keeps whichever its protocol
//!   (identity, watches, counters, nonces) and the rules both keep alike;
//!   [`published`]: the snapshot, resource cache and body cache a stream
//!   reads; [`placement`]: its scope and workload shape.
//! * [`status`]: each stream's state for the admin endpoints;
//!   [`recorder`]: its metric bookkeeping.
//! * The server's limits: [`admission`] paces new streams; [`budget`]
//!   bounds the request bytes all streams hold; [`drain`] ends the streams
//!   of a connection that reached its maximum age.
//! * [`authorize`]: which proxy a secure-port client may be.
//! * [`peer`]: what a stream knows of its connection — the client's
//!   address and, on the secure port, the identities its certificate proves.
//!
//! Nothing here knows either protocol: `sotw` and `delta` build on it, and
//! the server (`xds::server`) drives them.

pub mod admission;
pub mod authorize;
pub mod bodies;
pub mod body;
pub mod budget;
pub mod buffers;
pub mod connection;
pub mod drain;
mod field_filter;
pub mod messages;
pub mod peer;
pub mod placement;
pub mod published;
pub mod recorder;
pub mod request;
pub mod status;
