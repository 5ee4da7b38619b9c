//! `SotwRequest`: a state-of-the-world `DiscoveryRequest` as a stream reads it.
//!
//! Read by hand, not by prost: the node only on a stream's first request,
//! and `resource_names` left as slices of the message, identified by one
//! hash ([`RequestNames`]), so an ACK that repeats a 1,000-name EDS list
//! costs a hash and no allocation.
//!
//! Invariant: [`RequestNames::hash`] is [`names_hash`] of the names whether
//! they arrive next to each other or not.

use bytes::{BufMut, Bytes, BytesMut};
use prost::Message;
use prost::encoding::{self, DecodeContext, WireType};

use crate::xds::stream::request::{RequestError, StreamNode};
use crate::xds::watch::name_list::names_hash;

/// A SotW `DiscoveryRequest` as a stream reads it. `resource_names` stay
/// inside the received message ([`RequestNames`]): a stream compares them
/// with what it watches by one hash, and builds strings only for a list it
/// has not seen (see [`NameList`](crate::xds::watch::name_list::NameList)), so an ACK that repeats a 1,000-name
/// EDS list costs a hash and no allocation. Fields meshpush does not read
/// (7, 8) are skipped.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SotwRequest {
    /// `version_info` (field 1).
    pub version_info: String,
    /// `resource_names` (field 3).
    pub resource_names: RequestNames,
    /// `type_url` (field 4).
    pub type_url: String,
    /// `response_nonce` (field 5).
    pub response_nonce: String,
    /// `error_detail` (field 6).
    pub error_detail: Option<envoy_types::pb::google::rpc::Status>,
}

impl SotwRequest {
    /// Reads an encoded `DiscoveryRequest`, and its node only `with_node`
    /// (a stream reads it from its first request; Envoy repeats it in every
    /// request after).
    pub fn read(message: Bytes, with_node: bool) -> Result<(SotwRequest, Option<StreamNode>), RequestError> {
        let mut request = SotwRequest::default();
        let mut node = None;
        let mut spans = Vec::new();
        // The encoded field-3 entries, while they lie next to each other
        // (as every encoder writes a repeated field).
        let mut region: Option<(usize, usize)> = None;
        let mut contiguous = true;
        let mut buf: &[u8] = &message;
        while !buf.is_empty() {
            let entry_start = message.len() - buf.len();
            let (tag, wire_type) = encoding::decode_key(&mut buf)?;
            if wire_type != WireType::LengthDelimited || !(1..=6).contains(&tag) {
                encoding::skip_field(wire_type, tag, &mut buf, DecodeContext::default())?;
                continue;
            }
            let len = usize::try_from(encoding::decode_varint(&mut buf)?)
                .ok()
                .filter(|len| *len <= buf.len())
                .ok_or(RequestError::Malformed("a field runs past the end of the request"))?;
            let (value, rest) = buf.split_at(len);
            let value_start = message.len() - buf.len();
            buf = rest;
            let text = || {
                String::from_utf8(value.to_vec()).map_err(|_| RequestError::Malformed("a string field is not UTF-8"))
            };
            match tag {
                1 => request.version_info = text()?,
                // A message field that occurs again is merged into the
                // first, as protobuf parsers do (Envoy writes it once).
                2 if with_node => node.get_or_insert_with(StreamNode::default).merge(value)?,
                2 => {}
                3 => {
                    spans.push((value_start as u32, len as u32));
                    let entry_end = value_start + len;
                    region = match region {
                        None => Some((entry_start, entry_end)),
                        Some((start, end)) => {
                            contiguous &= end == entry_start;
                            Some((start, entry_end))
                        }
                    };
                }
                4 => request.type_url = text()?,
                5 => request.response_nonce = text()?,
                _ => request.error_detail.get_or_insert_with(Default::default).merge(value)?,
            }
        }
        let hash = match region {
            Some((start, end)) if contiguous => xxhash_rust::xxh3::xxh3_64(&message[start..end]),
            _ => names_hash(spans.iter().map(|&(at, len)| &message[at as usize..(at + len) as usize])),
        };
        request.resource_names = RequestNames { message, spans, hash };
        Ok((request, node))
    }
}

/// A request's `resource_names`, as slices of the received message.
#[derive(Debug, Clone, Default)]
pub struct RequestNames {
    message: Bytes,
    /// (offset, length) of each name in `message`.
    spans: Vec<(u32, u32)>,
    /// [`names_hash`] of the names.
    hash: u64,
}

impl RequestNames {
    /// The names, in the order sent.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> + Clone {
        self.spans.iter().map(|&(at, len)| &self.message[at as usize..(at + len) as usize])
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// None at all.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The list's identity: [`names_hash`] of the names in order.
    pub fn hash(&self) -> u64 {
        self.hash
    }

    /// The received message the names are in (to recycle its buffer).
    pub fn into_message(self) -> Bytes {
        self.message
    }
}

impl PartialEq for RequestNames {
    fn eq(&self, other: &RequestNames) -> bool {
        self.iter().eq(other.iter())
    }
}

impl From<Vec<String>> for RequestNames {
    fn from(names: Vec<String>) -> RequestNames {
        let mut message = BytesMut::new();
        let mut spans = Vec::with_capacity(names.len());
        for n in &names {
            encoding::encode_varint(n.len() as u64, &mut message);
            spans.push((message.len() as u32, n.len() as u32));
            message.put_slice(n.as_bytes());
        }
        let hash = names_hash(names.iter().map(|n| n.as_bytes()));
        RequestNames { message: message.freeze(), spans, hash }
    }
}

impl From<envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest> for SotwRequest {
    fn from(r: envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest) -> Self {
        SotwRequest {
            version_info: r.version_info,
            resource_names: r.resource_names.into(),
            type_url: r.type_url,
            response_nonce: r.response_nonce,
            error_detail: r.error_detail,
        }
    }
}

#[cfg(test)]
mod tests {
    use envoy_types::pb::envoy::config::core::v3::Node;

    use super::*;

    /// Found by the `sotw_request` fuzz target: a node field that occurs
    /// twice was read as the last occurrence; prost (and every protobuf
    /// parser) merges the two.
    #[test]
    fn a_node_that_occurs_twice_is_merged_as_protobuf_merges_it() {
        use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
        let first = Node { id: "sidecar~1.2.3.4~a.b~b.svc.cluster.local".into(), ..Default::default() };
        let second = Node { cluster: "a.b".into(), ..Default::default() };
        let mut wire = Vec::new();
        for node in [&first, &second] {
            prost::encoding::message::encode(2, node, &mut wire);
        }
        let (_, node) = SotwRequest::read(Bytes::from(wire.clone()), true).unwrap();
        let node = Node::from(node.unwrap());
        let expected = DiscoveryRequest::decode(&wire[..]).unwrap().node.unwrap();
        assert_eq!((node.id.as_str(), node.cluster.as_str()), (expected.id.as_str(), expected.cluster.as_str()));
        assert_eq!(node.id, first.id);
    }

    #[test]
    fn requests_read_as_envoy_wrote_them_and_later_ones_skip_the_node() {
        use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
        let full = DiscoveryRequest {
            version_info: "v1".into(),
            node: Some(Node { id: "sidecar~1.2.3.4~a.b~b.svc.cluster.local".into(), ..Default::default() }),
            resource_names: vec!["a".into(), "bb".into(), "*".into()],
            type_url: "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment".into(),
            response_nonce: "00000001".into(),
            error_detail: Some(envoy_types::pb::google::rpc::Status {
                code: 13,
                message: "no".into(),
                details: vec![],
            }),
            ..Default::default()
        };
        let wire = Bytes::from(full.encode_to_vec());
        let (first, node) = SotwRequest::read(wire.clone(), true).unwrap();
        assert_eq!(first, SotwRequest::from(full.clone()));
        assert_eq!(node.map(|n| n.id), full.node.as_ref().map(|n| n.id.clone()));
        assert_eq!(first.resource_names.iter().collect::<Vec<_>>(), [&b"a"[..], b"bb", b"*"]);
        assert_eq!(first.resource_names.hash(), names_hash([&b"a"[..], b"bb", b"*"]));
        let (later, node) = SotwRequest::read(wire, false).unwrap();
        assert_eq!(later, first);
        assert!(node.is_none());
    }

    #[test]
    fn names_apart_hash_as_names_together_and_bad_requests_are_errors() {
        // Field 3 entries with field 1 between them: the same list, the same hash.
        let mut apart = Vec::new();
        for (tag, value) in [(3u8, &b"a"[..]), (1, b"v"), (3, b"bb")] {
            apart.extend([tag << 3 | 2, value.len() as u8]);
            apart.extend_from_slice(value);
        }
        let (read, _) = SotwRequest::read(Bytes::from(apart), false).unwrap();
        assert_eq!(read.version_info, "v");
        assert_eq!(read.resource_names.hash(), RequestNames::from(vec!["a".to_string(), "bb".to_string()]).hash());

        assert!(SotwRequest::read(Bytes::from_static(&[3 << 3 | 2, 9, b'a']), false).is_err(), "runs past the end");
        assert!(SotwRequest::read(Bytes::from_static(&[4 << 3 | 2, 1, 0xff]), false).is_err(), "not UTF-8");
    }
}
