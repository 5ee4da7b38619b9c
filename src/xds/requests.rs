//! `RequestMessages`: the request half of an ADS stream, as whole gRPC
//! messages.
//!
//! tonic's request decoding keeps, per stream, one buffer that every
//! request is copied into and that keeps the size of the largest request
//! the stream ever sent. Envoy's SotW requests are large (its node alone is
//! 60 KB with Envoy 1.40's extension list, an EDS request lists every
//! watched cluster), so ten thousand idle streams held ten thousand such
//! buffers. Here a stream holds the HTTP/2 DATA chunks of the message being
//! received and nothing once it is decoded: a message inside one chunk is
//! handed on without a copy, a message across chunks is copied once into a
//! buffer of exactly its size, which is freed with the request.
//!
//! Invariants: messages come out whole and in order; a compressed message,
//! a message over the size limit and a body that ends inside a message are
//! errors, and end the stream.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes, BytesMut};
use http_body::Body;
use tonic::Status;

use super::codec::FRAME_HEADER_LEN;

/// Whole gRPC messages (frame header removed) from a request body.
pub struct RequestMessages<B> {
    body: Pin<Box<B>>,
    /// Received, not yet handed on.
    chunks: VecDeque<Bytes>,
    /// Bytes in `chunks`.
    buffered: usize,
    /// Largest message accepted.
    max: usize,
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
        RequestMessages { body: Box::pin(body), chunks: VecDeque::new(), buffered: 0, max, ended: false }
    }

    /// The next whole message, if it has arrived.
    fn take_message(&mut self) -> Result<Option<Bytes>, Status> {
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
        if self.buffered < FRAME_HEADER_LEN + len {
            return Ok(None);
        }
        self.advance(FRAME_HEADER_LEN);
        if len == 0 {
            return Ok(Some(Bytes::new()));
        }
        self.buffered -= len;
        let front = self.chunks.front_mut().expect("buffered bytes are in chunks");
        if front.len() >= len {
            let message = front.split_to(len);
            if front.is_empty() {
                self.chunks.pop_front();
            }
            return Ok(Some(message));
        }
        let mut message = BytesMut::with_capacity(len);
        while message.len() < len {
            let front = self.chunks.front_mut().expect("buffered bytes are in chunks");
            let n = (len - message.len()).min(front.len());
            message.extend_from_slice(&front[..n]);
            front.advance(n);
            if front.is_empty() {
                self.chunks.pop_front();
            }
        }
        Ok(Some(message.freeze()))
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

impl<B> futures::Stream for RequestMessages<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Item = Result<Bytes, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if this.ended && this.chunks.is_empty() {
                return Poll::Ready(None);
            }
            match this.take_message() {
                Ok(Some(message)) => return Poll::Ready(Some(Ok(message))),
                Ok(None) if this.ended => {
                    this.chunks.clear();
                    return Poll::Ready(Some(Err(Status::internal("the request body ended inside a message"))));
                }
                Ok(None) => {}
                Err(status) => {
                    this.ended = true;
                    this.chunks.clear();
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
