//! Pre-encoded `DeltaDiscoveryResponse`s.
//!
//! A delta response is fields 1 (`system_version_info`), 2 (`resources`,
//! each a `Resource {version = 1, resource = 2, name = 3}`), 4 (`type_url`),
//! 5 (`nonce`) and 6 (`removed_resources`). prost writes fields in number
//! order, so unlike SotW the nonce is not the last field whenever something
//! is removed: the names removed follow it. A response is therefore cut in
//! two chunks:
//!
//! * a [`DeltaResponse::body`]: the gRPC frame header and fields 1, 2 and 4,
//!   built from the cache's encoded `Any`s (one copy into the body) and
//!   shared by every stream that sends the same resources and removals —
//!   the frame length covers the tail, whose length those removals fix;
//! * a per-stream tail: field 5 (the fixed-width nonce), then field 6.
//!
//! Body + tail is byte-for-byte what prost encodes for the whole message (a
//! unit test checks this). A resource's version is its content hash
//! ([`EncodedResource::hash`]) as 16 hex digits.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use prost::encoding::{self, WireType};

use crate::resource::EncodedResource;
use crate::resource::TypeUrl;
use crate::xds::stream::body::{FRAME_HEADER_LEN, Framed, NONCE_FIELD_LEN, nonce_text};

/// Hex digits of a resource version.
pub const RESOURCE_VERSION_LEN: usize = 16;

/// A resource's delta version: its content hash in hex.
pub fn resource_version(hash: u64) -> String {
    format!("{hash:016x}")
}

/// Reads back a version [`resource_version`] wrote (`None` for anything else).
pub fn parse_resource_version(version: &str) -> Option<u64> {
    (version.len() == RESOURCE_VERSION_LEN).then(|| u64::from_str_radix(version, 16).ok()).flatten()
}

fn string_field_len(tag: u32, s: &str) -> usize {
    encoding::key_len(tag) + encoding::encoded_len_varint(s.len() as u64) + s.len()
}

fn put_string_field(tag: u32, s: &str, buf: &mut BytesMut) {
    encoding::encode_key(tag, WireType::LengthDelimited, buf);
    encoding::encode_varint(s.len() as u64, buf);
    buf.put_slice(s.as_bytes());
}

/// Length of one `Resource` message (without its own key and length).
fn resource_len(r: &EncodedResource) -> usize {
    encoding::key_len(1)
        + 1
        + RESOURCE_VERSION_LEN
        + encoding::key_len(2)
        + encoding::encoded_len_varint(r.bytes.len() as u64)
        + r.bytes.len()
        + string_field_len(3, &r.name)
}

/// Length of the tail that carries `removed`.
pub fn tail_len(removed: &[Arc<str>]) -> usize {
    NONCE_FIELD_LEN + removed.iter().map(|n| string_field_len(6, n)).sum::<usize>()
}

/// The shared chunk: frame header (announcing a tail of `tail_len` bytes)
/// and fields 1, 2 and 4.
pub fn assemble(type_url: TypeUrl, system_version: &str, resources: &[Arc<EncodedResource>], tail_len: usize) -> Bytes {
    let mut fields = 0;
    if !system_version.is_empty() {
        fields += string_field_len(1, system_version);
    }
    fields += resources
        .iter()
        .map(|r| {
            let len = resource_len(r);
            encoding::key_len(2) + encoding::encoded_len_varint(len as u64) + len
        })
        .sum::<usize>();
    fields += string_field_len(4, type_url.as_str());
    let mut buf = BytesMut::with_capacity(FRAME_HEADER_LEN + fields);
    buf.put_u8(0);
    buf.put_u32((fields + tail_len) as u32);
    if !system_version.is_empty() {
        put_string_field(1, system_version, &mut buf);
    }
    for r in resources {
        encoding::encode_key(2, WireType::LengthDelimited, &mut buf);
        encoding::encode_varint(resource_len(r) as u64, &mut buf);
        put_string_field(1, &resource_version(r.hash), &mut buf);
        encoding::encode_key(2, WireType::LengthDelimited, &mut buf);
        encoding::encode_varint(r.bytes.len() as u64, &mut buf);
        buf.put_slice(&r.bytes);
        put_string_field(3, &r.name, &mut buf);
    }
    put_string_field(4, type_url.as_str(), &mut buf);
    debug_assert_eq!(buf.len(), FRAME_HEADER_LEN + fields);
    buf.freeze()
}

/// The per-stream chunk: field 5 (the nonce), then field 6 (`removed`).
pub fn tail(nonce: u32, removed: &[Arc<str>]) -> Bytes {
    let mut buf = BytesMut::with_capacity(tail_len(removed));
    put_string_field(5, &nonce_text(nonce), &mut buf);
    for n in removed {
        put_string_field(6, n, &mut buf);
    }
    debug_assert_eq!(buf.len(), tail_len(removed));
    buf.freeze()
}

/// One delta response on its way to a stream.
#[derive(Debug, Clone)]
pub struct DeltaResponse {
    /// Shared, framed body (fields 1, 2, 4).
    pub body: Bytes,
    /// This stream's nonce and removed names (fields 5, 6).
    pub tail: Bytes,
}

impl DeltaResponse {
    /// Bytes this response puts on the wire (frame header included).
    pub fn wire_len(&self) -> usize {
        self.body.len() + self.tail.len()
    }

    /// The message bytes (without the frame header), as a client decodes them.
    pub fn message_bytes(&self) -> Vec<u8> {
        let mut wire = Vec::with_capacity(self.wire_len());
        wire.extend_from_slice(&self.body[FRAME_HEADER_LEN..]);
        wire.extend_from_slice(&self.tail);
        wire
    }
}

impl Framed for DeltaResponse {
    fn into_chunks(self) -> (Bytes, Bytes) {
        (self.body, self.tail)
    }
    fn wire_len(&self) -> usize {
        DeltaResponse::wire_len(self)
    }
}

#[cfg(test)]
mod tests {
    use envoy_types::pb::envoy::config::cluster::v3::Cluster;
    use envoy_types::pb::envoy::service::discovery::v3::{DeltaDiscoveryResponse, Resource};
    use prost::Message;

    use super::*;

    fn clusters(names: &[&str]) -> Vec<Arc<EncodedResource>> {
        names
            .iter()
            .map(|n| {
                Arc::new(EncodedResource::encode(
                    TypeUrl::Cluster,
                    Arc::from(*n),
                    &Cluster { name: n.to_string(), ..Default::default() },
                ))
            })
            .collect()
    }

    fn check(resources: &[Arc<EncodedResource>], removed: &[Arc<str>], system_version: &str) {
        let body = assemble(TypeUrl::Cluster, system_version, resources, tail_len(removed));
        let out = DeltaResponse { body, tail: tail(0x2a, removed) };
        let mut framed = out.body.to_vec();
        framed.extend_from_slice(&out.tail);
        assert_eq!(framed.len(), out.wire_len());
        assert_eq!(framed[0], 0, "not compressed");
        let len = u32::from_be_bytes(framed[1..5].try_into().unwrap()) as usize;
        assert_eq!(len, framed.len() - FRAME_HEADER_LEN, "the frame header announces the message length");

        let expected = DeltaDiscoveryResponse {
            system_version_info: system_version.into(),
            resources: resources
                .iter()
                .map(|r| Resource {
                    name: r.name.to_string(),
                    version: format!("{:016x}", r.hash),
                    resource: Some(r.to_any()),
                    ..Default::default()
                })
                .collect(),
            type_url: TypeUrl::Cluster.as_str().into(),
            removed_resources: removed.iter().map(|n| n.to_string()).collect(),
            nonce: "0000002a".into(),
            ..Default::default()
        };
        assert_eq!(&framed[FRAME_HEADER_LEN..], &expected.encode_to_vec()[..]);
        assert_eq!(out.message_bytes(), expected.encode_to_vec());
    }

    #[test]
    fn body_plus_tail_is_what_prost_encodes() {
        check(&clusters(&["a", "b"]), &[], "7");
        // Removed names come after the nonce (field 6 > field 5).
        check(&clusters(&["a"]), &[Arc::from("gone-1"), Arc::from("gone-2")], "7");
        check(&[], &[Arc::from("gone")], "");
    }

    #[test]
    fn versions_round_trip() {
        assert_eq!(parse_resource_version(&resource_version(0xdead_beef)), Some(0xdead_beef));
        assert_eq!(parse_resource_version("v1"), None);
    }
}
