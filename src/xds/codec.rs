//! Pre-encoded responses and the gRPC codec that writes them.
//!
//! A SotW `DiscoveryResponse` is assembled from resources that were encoded
//! once (see [`EncodedResource`]): fields 1 (`version_info`), 2 (`resources`)
//! and 4 (`type_url`) form a [`ResponseBody`] that many streams can share;
//! only field 5 (`nonce`) is per stream and is appended by the encoder. Since
//! prost writes fields in number order and fields 6 and 7 are empty, body +
//! nonce is byte-for-byte what prost encodes for the whole message.

use std::marker::PhantomData;

use bytes::{BufMut, Bytes, BytesMut};
use prost::Message;
use prost::encoding::{self, WireType};
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

use super::types::TypeUrl;
use crate::generate::cache::EncodedResource;

/// A `DiscoveryResponse` without its nonce.
#[derive(Debug, Clone)]
pub struct ResponseBody {
    /// Encoded fields 1, 2 and 4.
    pub bytes: Bytes,
}

impl ResponseBody {
    /// Assembles the body for `resources` (each an encoded `Any`).
    pub fn assemble<'a>(
        type_url: TypeUrl,
        version: &str,
        resources: impl IntoIterator<Item = &'a EncodedResource> + Clone,
    ) -> ResponseBody {
        let payload: usize = resources
            .clone()
            .into_iter()
            .map(|r| encoding::key_len(2) + encoding::encoded_len_varint(r.bytes.len() as u64) + r.bytes.len())
            .sum();
        let mut buf = BytesMut::with_capacity(payload + version.len() + type_url.as_str().len() + 16);
        if !version.is_empty() {
            encoding::string::encode(1, &version.to_string(), &mut buf);
        }
        for r in resources {
            encoding::encode_key(2, WireType::LengthDelimited, &mut buf);
            encoding::encode_varint(r.bytes.len() as u64, &mut buf);
            buf.put_slice(&r.bytes);
        }
        encoding::string::encode(4, &type_url.as_str().to_string(), &mut buf);
        ResponseBody { bytes: buf.freeze() }
    }
}

/// One response on its way to a stream: the shared body and this stream's nonce.
#[derive(Debug, Clone)]
pub struct OutgoingResponse {
    /// Shared body.
    pub body: Bytes,
    /// This stream's nonce (field 5).
    pub nonce: String,
}

impl OutgoingResponse {
    /// Writes the response as prost would encode the whole message.
    pub fn write_to(&self, dst: &mut impl BufMut) {
        dst.put_slice(&self.body);
        if !self.nonce.is_empty() {
            encoding::string::encode(5, &self.nonce, dst);
        }
    }

    /// Encoded length.
    pub fn encoded_len(&self) -> usize {
        self.body.len() + if self.nonce.is_empty() { 0 } else { encoding::string::encoded_len(5, &self.nonce) }
    }
}

/// gRPC codec: decodes requests with prost, encodes pre-encoded responses as they are.
#[derive(Debug)]
pub struct PreEncodedCodec<Req> {
    _req: PhantomData<fn() -> Req>,
}

impl<Req> Default for PreEncodedCodec<Req> {
    fn default() -> Self {
        PreEncodedCodec { _req: PhantomData }
    }
}

impl<Req: Message + Default + Send + 'static> Codec for PreEncodedCodec<Req> {
    type Encode = OutgoingResponse;
    type Decode = Req;
    type Encoder = ResponseEncoder;
    type Decoder = RequestDecoder<Req>;

    fn encoder(&mut self) -> Self::Encoder {
        ResponseEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        RequestDecoder { _req: PhantomData }
    }
}

/// Writes [`OutgoingResponse`]s.
#[derive(Debug)]
pub struct ResponseEncoder;

impl Encoder for ResponseEncoder {
    type Item = OutgoingResponse;
    type Error = Status;

    fn encode(&mut self, item: Self::Item, dst: &mut EncodeBuf<'_>) -> Result<(), Self::Error> {
        dst.reserve(item.encoded_len());
        item.write_to(dst);
        Ok(())
    }
}

/// Decodes requests with prost.
#[derive(Debug)]
pub struct RequestDecoder<Req> {
    _req: PhantomData<fn() -> Req>,
}

impl<Req: Message + Default> Decoder for RequestDecoder<Req> {
    type Item = Req;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Self::Item>, Self::Error> {
        Req::decode(src).map(Some).map_err(|e| Status::invalid_argument(format!("undecodable request: {e}")))
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
        let out = OutgoingResponse { body: body.bytes, nonce: "17".into() };
        let mut wire = BytesMut::new();
        out.write_to(&mut wire);
        assert_eq!(wire.len(), out.encoded_len());

        let expected = DiscoveryResponse {
            version_info: "v42".into(),
            resources: clusters.iter().map(|c| c.to_any()).collect(),
            type_url: TypeUrl::Cluster.as_str().into(),
            nonce: "17".into(),
            ..Default::default()
        };
        assert_eq!(&wire[..], &expected.encode_to_vec()[..]);
        assert_eq!(DiscoveryResponse::decode(&wire[..]).unwrap(), expected);
    }
}
