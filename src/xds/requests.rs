//! The request half of an ADS stream: whole gRPC messages
//! ([`RequestMessages`]), read into requests ([`SotwRequest`],
//! [`DeltaRequest`]) that keep only what a stream uses.
//!
//! tonic's request decoding keeps, per stream, one buffer that every
//! request is copied into and that keeps the size of the largest request
//! the stream ever sent. Envoy's SotW requests are large (its node alone is
//! 60 KB with Envoy 1.40's extension list, an EDS request lists every
//! watched cluster), so ten thousand idle streams held ten thousand such
//! buffers. Here a stream holds only the message being received: one inside
//! a single HTTP/2 DATA chunk is handed on without a copy; one across chunks
//! is copied once, chunk by chunk as they arrive (so h2 can reuse its read
//! buffer), into a pooled buffer ([`buffers`]). Envoy sends DATA frames of
//! at most 16 KB, so most requests take the copy; after a stream's first
//! request the copy leaves the node out ([`RequestMessages::leave_out`]).
//!
//! Envoy repeats its node (60 KB with Envoy 1.40's extension list) in every
//! request, and a SotW EDS request lists every watched cluster, in every
//! ACK too. Requests therefore read the node only when asked (a stream's
//! first request), never build its extension list, and leave resource names
//! as slices of the message, identified by one hash.
//!
//! Invariants: messages come out whole and in order; a compressed message,
//! a message over the size limit and a body that ends inside a message are
//! errors, and end the stream. [`RequestNames::hash`] is [`names_hash`] of
//! the names whether they arrive next to each other or not.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use envoy_types::pb::envoy::config::core::v3::Node;
use http_body::Body;
use prost::Message;
use prost::encoding::{self, DecodeContext, WireType};
use tonic::Status;

use super::codec::FRAME_HEADER_LEN;
use super::names::names_hash;

/// Buffers for requests that span several DATA chunks, reused by every
/// stream. A busy server otherwise frees a 100 KB buffer per Envoy ACK,
/// mimalloc hands the memory back to the kernel, and the next ACK's buffer
/// is faulted in and zeroed again: that was a quarter of the server's CPU
/// for an endpoint change in s1. The pool is small and bounded; a buffer
/// that does not come back (or does not fit) is simply freed.
pub mod buffers {
    use std::sync::LazyLock;

    use bytes::{Bytes, BytesMut};
    use crossbeam::queue::ArrayQueue;

    /// Buffers kept at most.
    const KEPT: usize = 32;
    /// Largest buffer kept.
    const LARGEST: usize = 512 * 1024;

    static POOL: LazyLock<ArrayQueue<BytesMut>> = LazyLock::new(|| ArrayQueue::new(KEPT));

    /// An empty buffer with room for `len` bytes.
    pub fn take(len: usize) -> BytesMut {
        match POOL.pop() {
            Some(mut buffer) => {
                buffer.reserve(len);
                buffer
            }
            None => BytesMut::with_capacity(len),
        }
    }

    /// Gives `message`'s memory back for reuse, if nothing else holds it.
    pub fn recycle(message: Bytes) {
        if let Ok(mut buffer) = message.try_into_mut()
            && buffer.capacity() <= LARGEST
        {
            buffer.clear();
            let _ = POOL.push(buffer);
        }
    }
}

/// The room a request copied without its node starts with (an ACK of a
/// few hundred names fits).
const LEFT_OUT_ROOM: usize = 16 * 1024;

/// Whole gRPC messages (frame header removed) from a request body.
pub struct RequestMessages<B> {
    body: Pin<Box<B>>,
    /// Received, not yet handed on.
    chunks: VecDeque<Bytes>,
    /// Bytes in `chunks`.
    buffered: usize,
    /// Largest message accepted.
    max: usize,
    /// The message being put together from several chunks.
    partial: Option<BytesMut>,
    /// Its length.
    partial_len: usize,
    /// How much of it was read (less may be kept: see `leave_out`).
    partial_read: usize,
    /// Set by [`RequestMessages::leave_out`]: the field a message copied
    /// from several chunks is copied without.
    leave_out: Option<u32>,
    /// Where the copy of the partial message is in its fields.
    filter: FieldFilter,
    /// The body ended (or failed): nothing more comes.
    ended: bool,
}

impl<B> RequestMessages<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    /// Messages of `body`, none larger than `max` bytes.
    pub fn new(body: B, max: usize) -> RequestMessages<B> {
        RequestMessages {
            body: Box::pin(body),
            chunks: VecDeque::new(),
            buffered: 0,
            max,
            partial: None,
            partial_len: 0,
            partial_read: 0,
            leave_out: None,
            filter: FieldFilter::default(),
            ended: false,
        }
    }

    /// From the next message on, a message that arrives across chunks is
    /// copied without its top-level length-delimited `field` (its bytes are
    /// read past, not copied). For the node, which Envoy repeats in every
    /// request and a stream reads only in the first: an ACK then costs a
    /// copy of its names, not of 60 KB of node. A message inside one chunk
    /// is handed on whole, without a copy, as before.
    pub fn leave_out(&mut self, field: u32) {
        self.leave_out = Some(field);
    }

    /// The next whole message, if it has arrived.
    fn take_message(&mut self) -> Result<Option<Bytes>, Status> {
        if self.partial.is_none() {
            let Some(len) = self.next_len()? else { return Ok(None) };
            self.advance(FRAME_HEADER_LEN);
            if len == 0 {
                return Ok(Some(Bytes::new()));
            }
            if let Some(front) = self.chunks.front_mut()
                && front.len() >= len
            {
                // Inside one chunk: handed on without a copy.
                self.buffered -= len;
                let message = front.split_to(len);
                if front.is_empty() {
                    self.chunks.pop_front();
                }
                return Ok(Some(message));
            }
            // Without the node, most of an Envoy request is left behind:
            // start small and grow, rather than hold its full size while
            // the request waits to be served.
            let room = if self.leave_out.is_some() { len.min(LEFT_OUT_ROOM) } else { len };
            self.partial = Some(buffers::take(room));
            self.partial_len = len;
            self.partial_read = 0;
            self.filter = FieldFilter::default();
        }
        // Across chunks: each chunk is copied as it comes and let go, so
        // h2 can reuse its read buffer.
        let partial = self.partial.as_mut().expect("set above");
        while self.partial_read < self.partial_len
            && let Some(front) = self.chunks.front_mut()
        {
            let n = (self.partial_len - self.partial_read).min(front.len());
            match self.leave_out {
                Some(field) => self.filter.copy(field, &front[..n], partial),
                None => partial.extend_from_slice(&front[..n]),
            }
            front.advance(n);
            self.buffered -= n;
            self.partial_read += n;
            if front.is_empty() {
                self.chunks.pop_front();
            }
        }
        if self.partial_read < self.partial_len {
            return Ok(None);
        }
        if !self.filter.at_boundary() {
            self.partial = None;
            return Err(Status::invalid_argument("undecodable request: a field runs past the end of the request"));
        }
        Ok(self.partial.take().map(BytesMut::freeze))
    }

    /// The length of the next message, once its frame header has arrived.
    fn next_len(&self) -> Result<Option<usize>, Status> {
        if self.buffered < FRAME_HEADER_LEN {
            return Ok(None);
        }
        let mut header = [0u8; FRAME_HEADER_LEN];
        let mut filled = 0;
        for chunk in &self.chunks {
            let n = (FRAME_HEADER_LEN - filled).min(chunk.len());
            header[filled..filled + n].copy_from_slice(&chunk[..n]);
            filled += n;
            if filled == FRAME_HEADER_LEN {
                break;
            }
        }
        if header[0] != 0 {
            return Err(Status::unimplemented("compressed requests are not supported; send them uncompressed"));
        }
        let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        if len > self.max {
            return Err(Status::resource_exhausted(format!(
                "request of {len} bytes is over the limit of {} bytes",
                self.max
            )));
        }
        Ok(Some(len))
    }

    /// Drops `n` buffered bytes from the front.
    fn advance(&mut self, mut n: usize) {
        self.buffered -= n;
        while n > 0 {
            let front = self.chunks.front_mut().expect("buffered bytes are in chunks");
            let step = n.min(front.len());
            front.advance(step);
            n -= step;
            if front.is_empty() {
                self.chunks.pop_front();
            }
        }
    }
}

/// Copies a protobuf message's bytes as they arrive, in pieces, without
/// the first occurrence of one top-level length-delimited field; the rest
/// after it is copied in bulk (a repeat of the field, which no encoder
/// writes for a message field, would be kept: readers after the first
/// request skip the node anyway). Keys and lengths are held until they are
/// whole, so a piece may end anywhere. Anything it does not expect (an
/// overlong varint, a group) is copied verbatim from there on, for the
/// decoder to judge.
#[derive(Debug, Default)]
struct FieldFilter {
    /// The key and length bytes of the field being read (not yet copied).
    head: [u8; 20],
    head_len: u8,
    /// The length-delimited field whose key is in `head` (its length is next).
    key_field: Option<(u32, u8)>,
    state: FilterState,
}

#[derive(Debug, Default, Clone, Copy, PartialEq)]
enum FilterState {
    /// At a field's key or length.
    #[default]
    Head,
    /// Inside a value: this many bytes to copy.
    Copy(usize),
    /// Inside the left-out field's value: this many bytes to pass.
    Skip(usize),
    /// Inside a varint value: copy up to its last byte.
    Varint,
    /// Copying the rest as it is.
    Verbatim,
}

impl FieldFilter {
    /// Copies `input`, the next bytes of the message, into `out`, without
    /// field `leave_out`.
    fn copy(&mut self, leave_out: u32, mut input: &[u8], out: &mut BytesMut) {
        while !input.is_empty() {
            match self.state {
                FilterState::Verbatim => {
                    out.extend_from_slice(input);
                    return;
                }
                FilterState::Copy(n) | FilterState::Skip(n) => {
                    let k = n.min(input.len());
                    if matches!(self.state, FilterState::Copy(_)) {
                        out.extend_from_slice(&input[..k]);
                    }
                    input = &input[k..];
                    self.state = match (self.state, n - k) {
                        (FilterState::Copy(_), 0) => FilterState::Head,
                        (FilterState::Copy(_), left) => FilterState::Copy(left),
                        // Past the field: the rest is copied in bulk.
                        (_, 0) => FilterState::Verbatim,
                        (_, left) => FilterState::Skip(left),
                    };
                }
                FilterState::Varint => {
                    let last = input.iter().position(|b| b & 0x80 == 0);
                    let k = last.map_or(input.len(), |i| i + 1);
                    out.extend_from_slice(&input[..k]);
                    input = &input[k..];
                    if last.is_some() {
                        self.state = FilterState::Head;
                    }
                }
                FilterState::Head => {
                    let byte = input[0];
                    input = &input[1..];
                    if usize::from(self.head_len) == self.head.len() {
                        self.verbatim(out);
                        out.put_u8(byte);
                        continue;
                    }
                    self.head[usize::from(self.head_len)] = byte;
                    self.head_len += 1;
                    if byte & 0x80 != 0 {
                        continue;
                    }
                    self.varint_ended(leave_out, out);
                }
            }
        }
    }

    /// A varint in `head` is complete: a key, or a length after one.
    fn varint_ended(&mut self, leave_out: u32, out: &mut BytesMut) {
        let head = &self.head[..usize::from(self.head_len)];
        match self.key_field {
            None => {
                let Ok(key) = encoding::decode_varint(&mut &head[..]) else { return self.verbatim(out) };
                let field = u32::try_from(key >> 3).unwrap_or(u32::MAX);
                match key & 7 {
                    2 => self.key_field = Some((field, self.head_len)),
                    0 => self.flush_head(out, FilterState::Varint),
                    1 => self.flush_head(out, FilterState::Copy(8)),
                    5 => self.flush_head(out, FilterState::Copy(4)),
                    _ => self.verbatim(out),
                }
            }
            Some((field, key_len)) => {
                let Ok(len) = encoding::decode_varint(&mut &head[usize::from(key_len)..]) else {
                    return self.verbatim(out);
                };
                let len = usize::try_from(len).unwrap_or(usize::MAX);
                self.key_field = None;
                if field == leave_out {
                    self.head_len = 0;
                    self.state = if len == 0 { FilterState::Verbatim } else { FilterState::Skip(len) };
                } else {
                    self.flush_head(out, if len == 0 { FilterState::Head } else { FilterState::Copy(len) });
                }
            }
        }
    }

    fn flush_head(&mut self, out: &mut BytesMut, next: FilterState) {
        out.extend_from_slice(&self.head[..usize::from(self.head_len)]);
        self.head_len = 0;
        self.state = next;
    }

    fn verbatim(&mut self, out: &mut BytesMut) {
        self.key_field = None;
        self.flush_head(out, FilterState::Verbatim);
    }

    /// Whether the bytes so far end where a field ends (or were copied
    /// verbatim, for the decoder to judge).
    fn at_boundary(&self) -> bool {
        match self.state {
            FilterState::Head => self.head_len == 0,
            FilterState::Verbatim => true,
            _ => false,
        }
    }
}

impl<B> futures::Stream for RequestMessages<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Item = Result<Bytes, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if this.ended && this.chunks.is_empty() && this.partial.is_none() {
                return Poll::Ready(None);
            }
            match this.take_message() {
                Ok(Some(message)) => return Poll::Ready(Some(Ok(message))),
                Ok(None) if this.ended => {
                    this.chunks.clear();
                    this.partial = None;
                    return Poll::Ready(Some(Err(Status::internal("the request body ended inside a message"))));
                }
                Ok(None) => {}
                Err(status) => {
                    this.ended = true;
                    this.chunks.clear();
                    this.partial = None;
                    return Poll::Ready(Some(Err(status)));
                }
            }
            match ready!(this.body.as_mut().poll_frame(cx)) {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data()
                        && !data.is_empty()
                    {
                        this.buffered += data.len();
                        this.chunks.push_back(data);
                    }
                }
                Some(Err(e)) => {
                    this.ended = true;
                    this.chunks.clear();
                    this.partial = None;
                    return Poll::Ready(Some(Err(Status::from_error(e.into()))));
                }
                None => this.ended = true,
            }
        }
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

/// Why a request message could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// prost could not decode it (or a message inside it).
    #[error(transparent)]
    Decode(#[from] prost::DecodeError),
    /// A field is not what the protocol says it is.
    #[error("{0}")]
    Malformed(&'static str),
}

/// A SotW `DiscoveryRequest` as a stream reads it. `resource_names` stay
/// inside the received message ([`RequestNames`]): a stream compares them
/// with what it watches by one hash, and builds strings only for a list it
/// has not seen (see [`super::names`]), so an ACK that repeats a 1,000-name
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
    pub fn decode(message: Bytes, with_node: bool) -> Result<(SotwRequest, Option<StreamNode>), RequestError> {
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
                2 if with_node => node = Some(StreamNode::decode(value)?),
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
                _ => request.error_detail = Some(envoy_types::pb::google::rpc::Status::decode(value)?),
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

/// A `DeltaDiscoveryRequest` as a stream reads it, without the node (see
/// [`DeltaRequest::read`]); resource locators (fields 8, 9) are skipped.
#[derive(Clone, PartialEq, Message)]
pub struct DeltaRequest {
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

/// The node (field 1) of a `DeltaDiscoveryRequest`, every other field skipped.
#[derive(Clone, PartialEq, Message)]
struct DeltaNode {
    #[prost(message, optional, tag = "1")]
    node: Option<StreamNode>,
}

impl DeltaRequest {
    /// Reads an encoded `DeltaDiscoveryRequest`, and its node only
    /// `with_node` (prost skips it otherwise, as every field of the other
    /// read).
    pub fn read(message: Bytes, with_node: bool) -> Result<(DeltaRequest, Option<StreamNode>), RequestError> {
        let node = if with_node { DeltaNode::decode(message.clone())?.node } else { None };
        let request = DeltaRequest::decode(message.clone())?;
        buffers::recycle(message);
        Ok((request, node))
    }
}

impl From<envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest> for DeltaRequest {
    fn from(r: envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest) -> Self {
        DeltaRequest {
            type_url: r.type_url,
            resource_names_subscribe: r.resource_names_subscribe,
            resource_names_unsubscribe: r.resource_names_unsubscribe,
            initial_resource_versions: r.initial_resource_versions,
            response_nonce: r.response_nonce,
            error_detail: r.error_detail,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use futures::StreamExt as _;
    use http_body::Frame;

    use super::*;

    /// A body that yields the given chunks.
    struct Chunks(VecDeque<Bytes>);

    impl Body for Chunks {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            Poll::Ready(self.0.pop_front().map(|c| Ok(Frame::data(c))))
        }
    }

    fn framed(message: &[u8]) -> Vec<u8> {
        let mut out = vec![0];
        out.extend_from_slice(&(message.len() as u32).to_be_bytes());
        out.extend_from_slice(message);
        out
    }

    /// The wire bytes cut into chunks of `size`.
    fn messages(wire: &[u8], size: usize, max: usize) -> Vec<Result<Bytes, Status>> {
        let chunks = wire.chunks(size).map(Bytes::copy_from_slice).collect();
        futures::executor::block_on(RequestMessages::new(Chunks(chunks), max).collect())
    }

    #[test]
    fn messages_come_out_whole_however_the_body_is_cut() {
        let a: Vec<u8> = (0..200u8).collect();
        let b = b"second".to_vec();
        let mut wire = framed(&a);
        wire.extend(framed(&b));
        wire.extend(framed(b""));
        for size in [1, 3, 5, 7, 64, 205, 1000] {
            let got: Vec<Bytes> = messages(&wire, size, 1 << 20).into_iter().map(|m| m.unwrap()).collect();
            assert_eq!(got, [Bytes::from(a.clone()), Bytes::from(b.clone()), Bytes::new()], "chunks of {size}");
        }
    }

    /// The messages of `wire` cut into chunks of `size`, the node field (2)
    /// left out from the second message on, as a stream reads them.
    fn without_node_after_first(wire: &[u8], size: usize) -> Vec<Result<Bytes, Status>> {
        let chunks = wire.chunks(size).map(Bytes::copy_from_slice).collect();
        let mut stream = RequestMessages::new(Chunks(chunks), 1 << 20);
        futures::executor::block_on(async {
            let mut out = vec![stream.next().await.expect("a first message")];
            stream.leave_out(2);
            out.extend(stream.collect::<Vec<_>>().await);
            out
        })
    }

    #[test]
    fn later_messages_across_chunks_are_copied_without_the_left_out_field() {
        use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
        let node = Node {
            id: "sidecar~10.0.0.1~a.ns~ns.svc.cluster.local".into(),
            cluster: "a".repeat(300),
            ..Default::default()
        };
        let request = DiscoveryRequest {
            version_info: "v7".into(),
            node: Some(node),
            resource_names: (0..40).map(|i| format!("outbound|80||svc-{i}.ns.svc.cluster.local")).collect(),
            type_url: "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment".into(),
            response_nonce: "0000002a".into(),
            ..Default::default()
        };
        // Unknown fields of every wire type stay, in place: a varint (20),
        // a fixed64 (21), a fixed32 (22) and a length-delimited one (23).
        let mut message = request.encode_to_vec();
        encoding::uint64::encode(20, &300, &mut message);
        encoding::fixed64::encode(21, &7, &mut message);
        encoding::fixed32::encode(22, &9, &mut message);
        encoding::string::encode(23, &"kept".to_string(), &mut message);
        let without_node = DiscoveryRequest { node: None, ..request.clone() }.encode_to_vec();
        let mut expected_later = without_node.clone();
        expected_later.extend_from_slice(&message[request.encoded_len()..]);

        let mut wire = framed(&message);
        wire.extend(framed(&message));
        wire.extend(framed(&message));
        for size in [1, 2, 3, 7, 64, 500, message.len() + 5] {
            let got: Vec<Bytes> = without_node_after_first(&wire, size).into_iter().map(|m| m.unwrap()).collect();
            assert_eq!(got[0], message, "the first message is whole (chunks of {size})");
            for later in &got[1..] {
                if size > message.len() {
                    assert_eq!(later, &message, "inside one chunk: handed on whole");
                } else {
                    assert_eq!(later, &expected_later, "across chunks of {size}: without the node");
                }
            }
        }
    }

    #[test]
    fn a_left_out_field_that_runs_past_the_message_is_an_error() {
        // Field 2, length-delimited, claiming 100 bytes of which 3 follow.
        let broken = [0x12, 100, 1, 2, 3];
        let mut wire = framed(b"\x22\x01x");
        wire.extend(framed(&broken));
        let got = without_node_after_first(&wire, 2);
        assert!(got[0].is_ok());
        assert_eq!(got[1].as_ref().unwrap_err().code(), tonic::Code::InvalidArgument);
    }

    #[test]
    fn compressed_oversized_and_cut_off_messages_are_errors() {
        let mut compressed = framed(b"x");
        compressed[0] = 1;
        let got = messages(&compressed, 100, 100);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].as_ref().unwrap_err().code(), tonic::Code::Unimplemented);

        let got = messages(&framed(&[0; 50]), 100, 49);
        assert_eq!(got[0].as_ref().unwrap_err().code(), tonic::Code::ResourceExhausted);

        let whole = framed(&[7; 50]);
        let got = messages(&whole[..30], 8, 100);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].as_ref().unwrap_err().code(), tonic::Code::Internal);
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
        let (first, node) = SotwRequest::decode(wire.clone(), true).unwrap();
        assert_eq!(first, SotwRequest::from(full.clone()));
        assert_eq!(node.map(|n| n.id), full.node.as_ref().map(|n| n.id.clone()));
        assert_eq!(first.resource_names.iter().collect::<Vec<_>>(), [&b"a"[..], b"bb", b"*"]);
        assert_eq!(first.resource_names.hash(), names_hash([&b"a"[..], b"bb", b"*"]));
        let (later, node) = SotwRequest::decode(wire, false).unwrap();
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
        let (read, _) = SotwRequest::decode(Bytes::from(apart), false).unwrap();
        assert_eq!(read.version_info, "v");
        assert_eq!(read.resource_names.hash(), RequestNames::from(vec!["a".to_string(), "bb".to_string()]).hash());

        assert!(SotwRequest::decode(Bytes::from_static(&[3 << 3 | 2, 9, b'a']), false).is_err(), "runs past the end");
        assert!(SotwRequest::decode(Bytes::from_static(&[4 << 3 | 2, 1, 0xff]), false).is_err(), "not UTF-8");
    }

    #[test]
    fn delta_requests_read_the_node_only_when_asked() {
        use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
        let full = DeltaDiscoveryRequest {
            node: Some(Node { id: "router~10.0.0.1~gw.ns~ns.svc.cluster.local".into(), ..Default::default() }),
            type_url: "type.googleapis.com/envoy.config.cluster.v3.Cluster".into(),
            resource_names_subscribe: vec!["a".into()],
            resource_names_unsubscribe: vec!["b".into()],
            initial_resource_versions: [("a".to_string(), "1".to_string())].into(),
            response_nonce: "7".into(),
            ..Default::default()
        };
        let wire = Bytes::from(full.encode_to_vec());
        let (first, node) = DeltaRequest::read(wire.clone(), true).unwrap();
        assert_eq!(first, DeltaRequest::from(full.clone()));
        assert_eq!(node.map(|n| n.id), full.node.map(|n| n.id));
        let (later, node) = DeltaRequest::read(wire, false).unwrap();
        assert_eq!(later, first);
        assert!(node.is_none());
    }

    #[test]
    fn pooled_buffers_come_back_empty_with_room() {
        let mut buffer = buffers::take(100);
        buffer.extend_from_slice(&[7; 100]);
        buffers::recycle(buffer.freeze());
        let again = buffers::take(300);
        assert!(again.is_empty(), "a reused buffer holds nothing of its last request");
        assert!(again.capacity() >= 300);
    }
}
