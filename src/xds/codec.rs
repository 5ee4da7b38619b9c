//! Pre-encoded responses, and the decoder for requests.
//!
//! A SotW `DiscoveryResponse` is assembled from resources that were encoded
//! once (see [`EncodedResource`]): the gRPC frame header and fields 1
//! (`version_info`), 2 (`resources`) and 4 (`type_url`) form a
//! [`ResponseBody`] that many streams can share; only field 5 (`nonce`) is
//! per stream. The nonce has a fixed width, so the frame length is known
//! when the body is assembled. Since prost writes fields in number order and
//! fields 6 and 7 are empty, body + nonce is byte-for-byte what prost
//! encodes for the whole message.
//!
//! Requests are decoded with prost; after a stream's first request the node
//! is skipped ([`NodeOnceDecoder`]).

use std::marker::PhantomData;

use bytes::{BufMut, Bytes, BytesMut};
use prost::Message;
use prost::encoding::{self, WireType};
use tonic::Status;

use envoy_types::pb::envoy::config::core::v3::Node;

use super::types::TypeUrl;
use crate::generate::cache::EncodedResource;

/// Length of a gRPC frame header.
pub const FRAME_HEADER_LEN: usize = 5;
/// Hex digits of a nonce.
pub const NONCE_LEN: usize = 8;
/// Encoded length of the nonce field (tag, length, digits).
pub const NONCE_FIELD_LEN: usize = 2 + NONCE_LEN;

/// A gRPC-framed `DiscoveryResponse` without its nonce.
#[derive(Debug, Clone)]
pub struct ResponseBody {
    /// Frame header (sized for a nonce of [`NONCE_LEN`]) and fields 1, 2 and 4.
    pub bytes: Bytes,
}

impl ResponseBody {
    /// Assembles the body for `resources` (each an encoded `Any`).
    pub fn assemble<'a>(
        type_url: TypeUrl,
        version: &str,
        resources: impl IntoIterator<Item = &'a EncodedResource> + Clone,
    ) -> ResponseBody {
        let mut fields = 0;
        if !version.is_empty() {
            fields += encoding::string::encoded_len(1, &version.to_string());
        }
        fields += resources
            .clone()
            .into_iter()
            .map(|r| encoding::key_len(2) + encoding::encoded_len_varint(r.bytes.len() as u64) + r.bytes.len())
            .sum::<usize>();
        fields += encoding::string::encoded_len(4, &type_url.as_str().to_string());
        let mut buf = BytesMut::with_capacity(FRAME_HEADER_LEN + fields);
        buf.put_u8(0);
        buf.put_u32((fields + NONCE_FIELD_LEN) as u32);
        if !version.is_empty() {
            encoding::string::encode(1, &version.to_string(), &mut buf);
        }
        for r in resources {
            encoding::encode_key(2, WireType::LengthDelimited, &mut buf);
            encoding::encode_varint(r.bytes.len() as u64, &mut buf);
            buf.put_slice(&r.bytes);
        }
        encoding::string::encode(4, &type_url.as_str().to_string(), &mut buf);
        debug_assert_eq!(buf.len(), FRAME_HEADER_LEN + fields);
        ResponseBody { bytes: buf.freeze() }
    }
}

/// One response on its way to a stream: the shared body and this stream's nonce.
#[derive(Debug, Clone)]
pub struct OutgoingResponse {
    /// Shared, framed body.
    pub body: Bytes,
    /// This stream's nonce.
    pub nonce: u32,
}

impl OutgoingResponse {
    /// The nonce as sent: fixed-width hex.
    pub fn nonce_text(nonce: u32) -> String {
        format!("{nonce:08x}")
    }

    /// The per-stream tail: field 5, the nonce.
    pub fn tail(&self) -> Bytes {
        let mut tail = BytesMut::with_capacity(NONCE_FIELD_LEN);
        encoding::string::encode(5, &Self::nonce_text(self.nonce), &mut tail);
        debug_assert_eq!(tail.len(), NONCE_FIELD_LEN);
        tail.freeze()
    }

    /// Bytes this response puts on the wire (frame header included).
    pub fn wire_len(&self) -> usize {
        self.body.len() + NONCE_FIELD_LEN
    }
}

/// The parts of Envoy's `Node` meshpush reads (id, cluster, metadata; also
/// locality and user agent name, for the record). Envoy 1.40 sends 516
/// `extensions` and its build version in every node; prost skips those
/// fields here instead of building 60 KB of messages per stream.
#[derive(Clone, PartialEq, Message)]
pub struct StreamNode {
    /// `id` (field 1).
    #[prost(string, tag = "1")]
    pub id: String,
    /// `cluster` (field 2).
    #[prost(string, tag = "2")]
    pub cluster: String,
    /// `metadata` (field 3).
    #[prost(message, optional, tag = "3")]
    pub metadata: Option<envoy_types::pb::google::protobuf::Struct>,
    /// `locality` (field 4).
    #[prost(message, optional, tag = "4")]
    pub locality: Option<envoy_types::pb::envoy::config::core::v3::Locality>,
    /// `user_agent_name` (field 6).
    #[prost(string, tag = "6")]
    pub user_agent_name: String,
}

impl From<StreamNode> for Node {
    fn from(n: StreamNode) -> Node {
        Node {
            id: n.id,
            cluster: n.cluster,
            metadata: n.metadata,
            locality: n.locality,
            user_agent_name: n.user_agent_name,
            ..Default::default()
        }
    }
}

impl From<Node> for StreamNode {
    fn from(n: Node) -> StreamNode {
        StreamNode {
            id: n.id,
            cluster: n.cluster,
            metadata: n.metadata,
            locality: n.locality,
            user_agent_name: n.user_agent_name,
        }
    }
}

/// A SotW `DiscoveryRequest` as a stream reads it: `resource_names` stay
/// slices of the received message. A stream compares a request's names with
/// what it watches by hash and builds strings only for a list it has not
/// seen (see [`super::names`]); an ACK repeating a 1,000-name EDS list
/// allocates nothing for them. Fields meshpush does not read (7, 8) are
/// skipped.
#[derive(Clone, PartialEq, Message)]
pub struct SotwRequest {
    /// `version_info` (field 1).
    #[prost(string, tag = "1")]
    pub version_info: String,
    /// `node` (field 2), the parts meshpush reads.
    #[prost(message, optional, tag = "2")]
    pub node: Option<StreamNode>,
    /// `resource_names` (field 3), undecoded.
    #[prost(bytes = "bytes", repeated, tag = "3")]
    pub resource_names: Vec<Bytes>,
    /// `type_url` (field 4).
    #[prost(string, tag = "4")]
    pub type_url: String,
    /// `response_nonce` (field 5).
    #[prost(string, tag = "5")]
    pub response_nonce: String,
    /// `error_detail` (field 6).
    #[prost(message, optional, tag = "6")]
    pub error_detail: Option<envoy_types::pb::google::rpc::Status>,
}

/// A [`SotwRequest`] after a stream's first: every field but the node.
/// Envoy sends its node (60 KB with Envoy 1.40's extension list) on every
/// request; the stream parsed it from the first, so prost skips it here.
#[derive(Clone, PartialEq, Message)]
pub struct SotwLaterRequest {
    /// `version_info` (field 1).
    #[prost(string, tag = "1")]
    pub version_info: String,
    /// `resource_names` (field 3), undecoded.
    #[prost(bytes = "bytes", repeated, tag = "3")]
    pub resource_names: Vec<Bytes>,
    /// `type_url` (field 4).
    #[prost(string, tag = "4")]
    pub type_url: String,
    /// `response_nonce` (field 5).
    #[prost(string, tag = "5")]
    pub response_nonce: String,
    /// `error_detail` (field 6).
    #[prost(message, optional, tag = "6")]
    pub error_detail: Option<envoy_types::pb::google::rpc::Status>,
}

impl From<SotwLaterRequest> for SotwRequest {
    fn from(r: SotwLaterRequest) -> Self {
        SotwRequest {
            version_info: r.version_info,
            node: None,
            resource_names: r.resource_names,
            type_url: r.type_url,
            response_nonce: r.response_nonce,
            error_detail: r.error_detail,
        }
    }
}

impl From<envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest> for SotwRequest {
    fn from(r: envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest) -> Self {
        SotwRequest {
            version_info: r.version_info,
            node: r.node.map(Into::into),
            resource_names: r.resource_names.into_iter().map(Bytes::from).collect(),
            type_url: r.type_url,
            response_nonce: r.response_nonce,
            error_detail: r.error_detail,
        }
    }
}

/// A `DeltaDiscoveryRequest` as a stream reads it: the node as a
/// [`StreamNode`]; resource locators (fields 8, 9) are skipped.
#[derive(Clone, PartialEq, Message)]
pub struct DeltaRequest {
    /// `node` (field 1), the parts meshpush reads.
    #[prost(message, optional, tag = "1")]
    pub node: Option<StreamNode>,
    /// `type_url` (field 2).
    #[prost(string, tag = "2")]
    pub type_url: String,
    /// `resource_names_subscribe` (field 3).
    #[prost(string, repeated, tag = "3")]
    pub resource_names_subscribe: Vec<String>,
    /// `resource_names_unsubscribe` (field 4).
    #[prost(string, repeated, tag = "4")]
    pub resource_names_unsubscribe: Vec<String>,
    /// `initial_resource_versions` (field 5).
    #[prost(map = "string, string", tag = "5")]
    pub initial_resource_versions: std::collections::HashMap<String, String>,
    /// `response_nonce` (field 6).
    #[prost(string, tag = "6")]
    pub response_nonce: String,
    /// `error_detail` (field 7).
    #[prost(message, optional, tag = "7")]
    pub error_detail: Option<envoy_types::pb::google::rpc::Status>,
}

/// A [`DeltaRequest`] after a stream's first: every field but the node
/// (Envoy repeats it on every request; the stream read it from the first).
#[derive(Clone, PartialEq, Message)]
pub struct DeltaLaterRequest {
    /// `type_url` (field 2).
    #[prost(string, tag = "2")]
    pub type_url: String,
    /// `resource_names_subscribe` (field 3).
    #[prost(string, repeated, tag = "3")]
    pub resource_names_subscribe: Vec<String>,
    /// `resource_names_unsubscribe` (field 4).
    #[prost(string, repeated, tag = "4")]
    pub resource_names_unsubscribe: Vec<String>,
    /// `initial_resource_versions` (field 5).
    #[prost(map = "string, string", tag = "5")]
    pub initial_resource_versions: std::collections::HashMap<String, String>,
    /// `response_nonce` (field 6).
    #[prost(string, tag = "6")]
    pub response_nonce: String,
    /// `error_detail` (field 7).
    #[prost(message, optional, tag = "7")]
    pub error_detail: Option<envoy_types::pb::google::rpc::Status>,
}

impl From<DeltaLaterRequest> for DeltaRequest {
    fn from(r: DeltaLaterRequest) -> Self {
        DeltaRequest {
            node: None,
            type_url: r.type_url,
            resource_names_subscribe: r.resource_names_subscribe,
            resource_names_unsubscribe: r.resource_names_unsubscribe,
            initial_resource_versions: r.initial_resource_versions,
            response_nonce: r.response_nonce,
            error_detail: r.error_detail,
        }
    }
}

impl From<envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest> for DeltaRequest {
    fn from(r: envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest) -> Self {
        DeltaRequest {
            node: r.node.map(Into::into),
            type_url: r.type_url,
            resource_names_subscribe: r.resource_names_subscribe,
            resource_names_unsubscribe: r.resource_names_unsubscribe,
            initial_resource_versions: r.initial_resource_versions,
            response_nonce: r.response_nonce,
            error_detail: r.error_detail,
        }
    }
}

/// Decodes a stream's first request in full (it carries the node) and every
/// later one as `Later`, which may leave fields out.
#[derive(Debug)]
pub struct NodeOnceDecoder<First, Later> {
    first_done: bool,
    _types: PhantomData<fn() -> (First, Later)>,
}

impl<First, Later> Default for NodeOnceDecoder<First, Later> {
    fn default() -> Self {
        NodeOnceDecoder { first_done: false, _types: PhantomData }
    }
}

impl<First: Message + Default, Later: Message + Default + Into<First>> NodeOnceDecoder<First, Later> {
    /// Decodes the stream's next request message.
    pub fn decode(&mut self, message: Bytes) -> Result<First, Status> {
        let decoded = if self.first_done {
            Later::decode(message).map(Into::into)
        } else {
            self.first_done = true;
            First::decode(message)
        };
        decoded.map_err(|e| Status::invalid_argument(format!("undecodable request: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use envoy_types::pb::envoy::config::cluster::v3::Cluster;
    use envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse;

    use super::*;

    #[test]
    fn body_plus_nonce_is_what_prost_encodes() {
        let clusters: Vec<EncodedResource> = ["a", "b"]
            .iter()
            .map(|n| {
                EncodedResource::encode(
                    TypeUrl::Cluster,
                    Arc::from(*n),
                    &Cluster { name: n.to_string(), ..Default::default() },
                )
            })
            .collect();
        let body = ResponseBody::assemble(TypeUrl::Cluster, "v42", clusters.iter());
        let out = OutgoingResponse { body: body.bytes, nonce: 0x17 };
        // What the stream body yields: the shared frame, then the tail.
        let mut framed = BytesMut::new();
        framed.put_slice(&out.body);
        framed.put_slice(&out.tail());
        assert_eq!(framed.len(), out.wire_len());
        assert_eq!(framed[0], 0, "not compressed");
        let len = u32::from_be_bytes(framed[1..5].try_into().unwrap()) as usize;
        assert_eq!(len, framed.len() - FRAME_HEADER_LEN, "the frame header announces the message length");
        let wire = &framed[FRAME_HEADER_LEN..];

        let expected = DiscoveryResponse {
            version_info: "v42".into(),
            resources: clusters.iter().map(|c| c.to_any()).collect(),
            type_url: TypeUrl::Cluster.as_str().into(),
            nonce: "00000017".into(),
            ..Default::default()
        };
        assert_eq!(wire, &expected.encode_to_vec()[..]);
        assert_eq!(DiscoveryResponse::decode(wire).unwrap(), expected);
    }

    #[test]
    fn requests_read_as_envoy_wrote_them_and_later_ones_skip_the_node() {
        use envoy_types::pb::envoy::config::core::v3::Node;
        use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
        let full = DiscoveryRequest {
            version_info: "v1".into(),
            node: Some(Node { id: "sidecar~1.2.3.4~a.b~b.svc.cluster.local".into(), ..Default::default() }),
            resource_names: vec!["a".into(), "b".into()],
            type_url: TypeUrl::Endpoint.as_str().into(),
            response_nonce: "00000001".into(),
            error_detail: Some(envoy_types::pb::google::rpc::Status {
                code: 13,
                message: "no".into(),
                details: vec![],
            }),
            ..Default::default()
        };
        let wire = Bytes::from(full.encode_to_vec());
        let first = SotwRequest::decode(wire.clone()).unwrap();
        assert_eq!(first, SotwRequest::from(full.clone()));
        assert_eq!(first.resource_names, [Bytes::from_static(b"a"), Bytes::from_static(b"b")]);
        let later: SotwRequest = SotwLaterRequest::decode(wire).unwrap().into();
        assert_eq!(later, SotwRequest { node: None, ..SotwRequest::from(full) });
    }
}
