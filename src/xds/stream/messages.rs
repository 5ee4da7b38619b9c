//! `RequestMessages`: the request half of an ADS stream, as whole gRPC
//! messages, without a per-stream buffer.
//!
//! tonic's request decoding keeps, per stream, one buffer that every
//! request is copied into and that keeps the size of the largest request
//! the stream ever sent. Envoy's SotW requests are large (its node alone is
//! 60 KB with Envoy 1.40's extension list, an EDS request lists every
//! watched cluster), so ten thousand idle streams held ten thousand such
//! buffers. Here a stream holds only the message being received: one inside
//! a single HTTP/2 DATA chunk is handed on without a copy; one across chunks
//! is copied once, chunk by chunk as they arrive (so h2 can reuse its read
//! buffer), into a pooled buffer ([`buffers`]). Envoy sends
//! DATA frames of at most 16 KB, so most requests take the copy; after a
//! stream's first request the copy leaves the node out
//! ([`RequestMessages::leave_out`], through a field filter).
//!
//! What a message holds is read by each protocol (`sotw::request`,
//! `delta::request`).
//!
//! Every message takes its length from the server's request budget
//! ([`RequestBudget`]) once its frame header has arrived, and holds it
//! until the stream asks for the next message (by then it has handled this
//! one). While the budget is spent the body is not read further.
//!
//! Invariants: messages come out whole and in order; a compressed message,
//! a message over the size limit, one the budget cannot hold and a body
//! that ends inside a message are errors, and end the stream.

use std::collections::VecDeque;
use std::future::Future as _;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes, BytesMut};
use http_body::Body;
use tonic::Status;

use super::body::FRAME_HEADER_LEN;
use super::budget::{BudgetRefusal, RequestBudget, Reservation};
use super::buffers;
use super::field_filter::FieldFilter;

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
    /// The server's request budget, if the stream counts against one.
    budget: Option<RequestBudget>,
    /// The wait for the next message's bytes.
    waiting: Option<futures::future::BoxFuture<'static, Result<Reservation, BudgetRefusal>>>,
    /// The next message's bytes, taken from the budget.
    reserved: Option<Reservation>,
    /// The last message handed on: its bytes go back once the next is asked for.
    handed_on: Option<Reservation>,
    /// When the message being put together must have arrived (with a budget only).
    partial_deadline: Option<Pin<Box<tokio::time::Sleep>>>,
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
            budget: None,
            waiting: None,
            reserved: None,
            handed_on: None,
            partial_deadline: None,
        }
    }

    /// Counts every message against `budget` (see the module docs).
    pub fn with_budget(mut self, budget: RequestBudget) -> RequestMessages<B> {
        self.budget = Some(budget);
        self
    }

    /// Takes the next message's bytes from the budget once its header is
    /// here: `Ready(Ok)` when taken (or nothing to take), `Pending` while
    /// the budget is spent.
    fn reserve_next(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        let Some(budget) = &self.budget else { return Poll::Ready(Ok(())) };
        if self.partial.is_some() || self.reserved.is_some() {
            return Poll::Ready(Ok(()));
        }
        let len = match self.next_len() {
            Ok(Some(len)) if len > 0 => len,
            Ok(_) => return Poll::Ready(Ok(())),
            Err(status) => return Poll::Ready(Err(status)),
        };
        if self.waiting.is_none() {
            if let Some(reservation) = budget.try_reserve(len) {
                self.reserved = Some(reservation);
                return Poll::Ready(Ok(()));
            }
            let budget = budget.clone();
            self.waiting = Some(Box::pin(async move { budget.reserve(len).await }));
        }
        let waiting = self.waiting.as_mut().expect("set above");
        let reserved = ready!(waiting.as_mut().poll(cx));
        self.waiting = None;
        let (total, wait) = self.budget.as_ref().map_or((0, Default::default()), |b| (b.bytes(), b.wait()));
        Poll::Ready(match reserved {
            Ok(reservation) => {
                self.reserved = Some(reservation);
                Ok(())
            }
            Err(BudgetRefusal::TooLarge) => Err(Status::resource_exhausted(format!(
                "request of {len} bytes is larger than the server's request memory budget of {total} bytes"
            ))),
            Err(BudgetRefusal::Spent) => Err(Status::resource_exhausted(format!(
                "the server's request memory budget ({total} bytes) stayed spent for {wait:?}; \
                 the request of {len} bytes was not read"
            ))),
        })
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
            if let Some(budget) = &self.budget {
                self.partial_deadline = Some(Box::pin(tokio::time::sleep(budget.partial_timeout())));
            }
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

/// What a `RESOURCE_EXHAUSTED` status of [`RequestMessages`] refused a
/// request for, as a metric label: `too_large` (over the per-request
/// limit), `budget` (the request budget could not hold it).
pub fn refusal_reason(status: &Status) -> Option<&'static str> {
    if status.code() != tonic::Code::ResourceExhausted {
        return None;
    }
    Some(if status.message().contains("over the limit") { "too_large" } else { "budget" })
}

impl<B> futures::Stream for RequestMessages<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Item = Result<Bytes, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        // Asked for the next message: the last one was handled.
        this.handed_on = None;
        loop {
            if this.ended && this.chunks.is_empty() && this.partial.is_none() {
                return Poll::Ready(None);
            }
            let reserved = match this.reserve_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(reserved) => reserved,
            };
            match reserved.and_then(|()| this.take_message()) {
                Ok(Some(message)) => {
                    this.handed_on = this.reserved.take();
                    this.partial_deadline = None;
                    return Poll::Ready(Some(Ok(message)));
                }
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
                    this.reserved = None;
                    return Poll::Ready(Some(Err(status)));
                }
            }
            let frame = match this.body.as_mut().poll_frame(cx) {
                Poll::Ready(frame) => frame,
                Poll::Pending => {
                    if let Some(deadline) = &mut this.partial_deadline
                        && deadline.as_mut().poll(cx).is_ready()
                    {
                        let timeout = this.budget.as_ref().map(RequestBudget::partial_timeout).unwrap_or_default();
                        let status = Status::deadline_exceeded(format!(
                            "a request of {} bytes was not received within {timeout:?} of its start \
                             ({} bytes arrived)",
                            this.partial_len, this.partial_read
                        ));
                        this.ended = true;
                        this.chunks.clear();
                        this.partial = None;
                        this.reserved = None;
                        this.partial_deadline = None;
                        return Poll::Ready(Some(Err(status)));
                    }
                    return Poll::Pending;
                }
            };
            match frame {
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

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use envoy_types::pb::envoy::config::core::v3::Node;
    use futures::StreamExt as _;
    use http_body::Frame;
    use prost::Message;
    use prost::encoding;

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

    #[tokio::test]
    async fn a_message_holds_its_bytes_of_the_budget_until_the_next_is_asked_for() {
        let budget = RequestBudget::new(100);
        let body = |messages: &[&[u8]]| {
            let wire: Vec<u8> = messages.iter().flat_map(|m| framed(m)).collect();
            Chunks(wire.chunks(7).map(Bytes::copy_from_slice).collect())
        };
        let mut a = RequestMessages::new(body(&[&[1; 60], &[2; 10]]), 1 << 20).with_budget(budget.clone());
        assert_eq!(a.next().await.unwrap().unwrap().len(), 60);
        assert_eq!(budget.available(), 40, "held while the stream handles it");
        // Another stream's 50 bytes wait, without reading, for room.
        let mut b = RequestMessages::new(body(&[&[3; 50]]), 1 << 20).with_budget(budget.clone());
        let mut b_next = std::pin::pin!(b.next());
        assert!(futures::poll!(b_next.as_mut()).is_pending());
        assert_eq!(a.next().await.unwrap().unwrap().len(), 10);
        assert_eq!(b_next.await.unwrap().unwrap().len(), 50);
        assert_eq!(budget.available(), 100 - 10 - 50);
        drop(a);
        drop(b);
        assert_eq!(budget.available(), 100, "everything given back");
    }

    /// A body that yields its chunks, then never anything more.
    struct Stalls(VecDeque<Bytes>);

    impl Body for Stalls {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            match self.0.pop_front() {
                Some(chunk) => Poll::Ready(Some(Ok(Frame::data(chunk)))),
                None => Poll::Pending,
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_message_begun_and_not_finished_in_time_ends_the_stream_and_frees_its_budget() {
        let budget = RequestBudget::new(1000);
        let wire = framed(&[7; 500]);
        let chunks = vec![Bytes::copy_from_slice(&wire[..200])].into();
        let mut messages = RequestMessages::new(Stalls(chunks), 1 << 20).with_budget(budget.clone());
        let started = tokio::time::Instant::now();
        let status = messages.next().await.unwrap().unwrap_err();
        assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
        assert!(status.message().contains("a request of 500 bytes was not received within 30s"), "{status:?}");
        assert_eq!(started.elapsed(), crate::xds::stream::budget::PARTIAL_TIMEOUT);
        assert_eq!(budget.available(), 1000);
    }

    #[tokio::test]
    async fn a_message_larger_than_the_budget_is_refused() {
        let budget = RequestBudget::new(100);
        let chunks = vec![Bytes::from(framed(&[0; 101]))].into();
        let mut messages = RequestMessages::new(Chunks(chunks), 1 << 20).with_budget(budget.clone());
        let status = messages.next().await.unwrap().unwrap_err();
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert!(status.message().contains("larger than the server's request memory budget of 100 bytes"), "{status:?}");
        assert!(messages.next().await.is_none());
        assert_eq!(budget.available(), 100);
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
}
