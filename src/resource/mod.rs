//! Base types every layer shares: the resource types meshpush serves and
//! resources as they go on the wire.
//!
//! * [`TypeUrl`], [`TypeSet`]: CDS, EDS, LDS, RDS, SDS, PCDS and sets of them.
//! * [`EncodedResource`], [`ResourceSet`]: resources encoded once, with
//!   content hashes as versions.
//!
//! This is the bottom layer: it imports nothing of meshpush's own.

mod encoded;
mod type_url;

pub use encoded::{EncodedResource, ResourceSet, version_of};
pub use type_url::{TypeSet, TypeUrl};
