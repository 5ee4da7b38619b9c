//! Pre-encoded, gRPC-framed responses.
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
//! Requests are read in [`super::request`].

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use prost::encoding::{self, WireType};

use crate::resource::{EncodedResource, TypeUrl, version_of};
use crate::xds::stream::body::{FRAME_HEADER_LEN, Framed, NONCE_FIELD_LEN, nonce_text};
use crate::xds::stream::published::Published;

/// A gRPC-framed `DiscoveryResponse` without its nonce.
#[derive(Debug, Clone)]
pub struct ResponseBody {
    /// Frame header (sized for a fixed-width nonce) and fields 1, 2 and 4.
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
    /// The per-stream tail: field 5, the nonce.
    pub fn tail(&self) -> Bytes {
        let mut tail = BytesMut::with_capacity(NONCE_FIELD_LEN);
        encoding::string::encode(5, &nonce_text(self.nonce), &mut tail);
        debug_assert_eq!(tail.len(), NONCE_FIELD_LEN);
        tail.freeze()
    }

    /// Bytes this response puts on the wire (frame header included).
    pub fn wire_len(&self) -> usize {
        self.body.len() + NONCE_FIELD_LEN
    }
}

/// The shared body for `resources` at `version`, assembled once for every
/// stream that sends the same: `partial` says the resources are a subset of
/// what `version` describes (EDS and RDS send only what changed), so the
/// subset itself becomes part of the key.
pub fn body(
    view: &Published<'_>,
    type_url: TypeUrl,
    version: &Arc<str>,
    resources: &[Arc<EncodedResource>],
    partial: bool,
) -> Bytes {
    let which = if partial {
        xxhash_rust::xxh3::xxh3_64(version_of(resources.iter().map(|r| (&*r.name, r.hash))).as_bytes())
    } else {
        0
    };
    view.body((type_url, version.clone(), which), || {
        ResponseBody::assemble(type_url, version, resources.iter().map(|r| &**r)).bytes
    })
}

impl Framed for OutgoingResponse {
    fn into_chunks(self) -> (Bytes, Bytes) {
        let tail = self.tail();
        (self.body, tail)
    }
    fn wire_len(&self) -> usize {
        OutgoingResponse::wire_len(self)
    }
}

#[cfg(test)]
mod tests {
    use envoy_types::pb::envoy::config::cluster::v3::Cluster;
    use envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse;
    use prost::Message;

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
}
