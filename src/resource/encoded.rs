//! Encoded resources: Envoy resources as they go on the wire, encoded once.
//!
//! An [`EncodedResource`] is one resource packed as a `google.protobuf.Any`
//! and encoded to `Bytes`, with a content hash that serves as its version.
//! A [`ResourceSet`] is every resource of one type that one group of
//! proxies is sent, sorted by name, with a version for the whole set.
//! Generation produces them, the cache keeps them, the xDS streams frame
//! them into responses: all three share these bytes by reference count.
//!
//! Invariants: an `EncodedResource` always holds a valid `Any` of its type;
//! its hash is a pure function of its bytes; a `ResourceSet`'s names are
//! sorted and unique, and its version is a pure function of its names and
//! hashes, so equal content has equal versions across restarts.

use std::sync::Arc;

use bytes::Bytes;
use envoy_types::pb::google::protobuf::Any;
use prost::Message;

use crate::resource::TypeUrl;

/// One resource, encoded once as an `Any`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedResource {
    /// Resource name.
    pub name: Arc<str>,
    /// The encoded `google.protobuf.Any`.
    pub bytes: Bytes,
    /// Content hash (the per-resource version).
    pub hash: u64,
}

impl EncodedResource {
    /// Encodes `message` of `type_url` as an `Any`.
    pub fn encode<M: Message>(type_url: TypeUrl, name: Arc<str>, message: &M) -> EncodedResource {
        let any = Any { type_url: type_url.as_str().to_string(), value: message.encode_to_vec() };
        let bytes = Bytes::from(any.encode_to_vec());
        let hash = xxhash_rust::xxh3::xxh3_64(&bytes);
        EncodedResource { name, bytes, hash }
    }

    /// Decodes back to an `Any` (debug output and tests).
    pub fn to_any(&self) -> Any {
        Any::decode(self.bytes.clone()).expect("an EncodedResource always holds a valid Any")
    }
}

/// A version string for a set of `(name, hash)` pairs.
pub fn version_of<'a>(resources: impl IntoIterator<Item = (&'a str, u64)>) -> Arc<str> {
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    for (name, hash) in resources {
        hasher.update(name.as_bytes());
        hasher.update(&[0]);
        hasher.update(&hash.to_le_bytes());
    }
    format!("{:016x}", hasher.digest()).into()
}

/// Every resource of one type for one scope.
#[derive(Debug, Default)]
pub struct ResourceSet {
    /// Resources sorted by name (names unique).
    pub resources: Vec<Arc<EncodedResource>>,
    /// Version of the whole set.
    pub version: Arc<str>,
}

impl ResourceSet {
    /// Builds a set, sorting and de-duplicating by name (the first one wins).
    pub fn new(mut resources: Vec<Arc<EncodedResource>>) -> ResourceSet {
        resources.sort_by(|a, b| a.name.cmp(&b.name));
        resources.dedup_by(|a, b| a.name == b.name);
        let version = version_of(resources.iter().map(|r| (&*r.name, r.hash)));
        ResourceSet { resources, version }
    }

    /// The union of two sets whose names do not overlap (a scope's set and
    /// a workload's inbound set), merged in name order.
    pub fn union(a: &ResourceSet, b: &ResourceSet) -> ResourceSet {
        let (a, b) = (&a.resources, &b.resources);
        let mut resources = Vec::with_capacity(a.len() + b.len());
        let (mut i, mut j) = (0, 0);
        while i < a.len() && j < b.len() {
            if a[i].name <= b[j].name {
                resources.push(a[i].clone());
                i += 1;
            } else {
                resources.push(b[j].clone());
                j += 1;
            }
        }
        resources.extend_from_slice(&a[i..]);
        resources.extend_from_slice(&b[j..]);
        let version = version_of(resources.iter().map(|r| (&*r.name, r.hash)));
        ResourceSet { resources, version }
    }

    /// A resource by name.
    pub fn get(&self, name: &str) -> Option<&Arc<EncodedResource>> {
        self.resources.binary_search_by(|r| (*r.name).cmp(name)).ok().map(|i| &self.resources[i])
    }
}
