//! A simulated Envoy's gRPC stream, without tonic's codec buffers.
//!
//! The harness sends pre-encoded requests and reads responses undecoded, so
//! it needs gRPC's framing only: a 5-byte header (compression flag, length)
//! before each message. tonic's codecs keep a growing buffer per stream on
//! each side; with a thousand streams each receiving a megabyte, those
//! buffers were freshly allocated memory over and over, and the kernel's
//! zeroing of their pages was over half of the harness's CPU in the s1
//! sync. Here a request is framed into one buffer of exactly its size, and
//! a response inside one DATA chunk is handed on without a copy; one across
//! chunks is copied into a buffer from a small shared pool that comes back
//! once the simulator has read it ([`recycle`]).
//!
//! What goes on the wire is unchanged: the same messages in the same
//! framing, cut into Envoy's 16 KB DATA frames by [`crate::frames`].

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::LazyLock;
use std::task::{Context, Poll, ready};

use bytes::{Buf as _, BufMut as _, Bytes, BytesMut};
use crossbeam::queue::ArrayQueue;
use http_body::{Body, Frame};
use tokio::sync::mpsc;

use crate::wire;

/// gRPC's message header: compression flag, then the length (big-endian).
const HEADER_LEN: usize = 5;

/// A stream's request body: each queued request, framed.
pub struct RequestBody {
    requests: mpsc::Receiver<wire::Request>,
}

impl RequestBody {
    /// The body of the requests `requests` yields, in order.
    pub fn new(requests: mpsc::Receiver<wire::Request>) -> RequestBody {
        RequestBody { requests }
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Poll::Ready(ready!(self.requests.poll_recv(cx)).map(|request| Ok(Frame::data(frame(&request)))))
    }
}

/// `request` with its gRPC header, in one buffer of its size.
fn frame(request: &wire::Request) -> Bytes {
    let len: usize = request.parts().iter().map(Bytes::len).sum();
    let mut out = BytesMut::with_capacity(HEADER_LEN + len);
    out.put_u8(0);
    out.put_u32(u32::try_from(len).expect("a request under 4 GiB"));
    for part in request.parts() {
        out.put_slice(part);
    }
    out.freeze()
}

/// Buffers for responses that span DATA chunks, shared by every stream.
static POOL: LazyLock<ArrayQueue<BytesMut>> = LazyLock::new(|| ArrayQueue::new(64));

/// Largest buffer the pool keeps.
const POOLED_MAX: usize = 4 * 1024 * 1024;

/// Gives a handled response's buffer back to the pool, if nothing else holds it.
pub fn recycle(message: Bytes) {
    if let Ok(mut buffer) = message.try_into_mut()
        && buffer.capacity() <= POOLED_MAX
    {
        buffer.clear();
        let _ = POOL.push(buffer);
    }
}

/// Why a response stream ended other than by the server closing it.
#[derive(Debug)]
pub enum ResponseError {
    /// The body failed (connection lost, reset).
    Body(String),
    /// A compressed message (never requested) or a body cut inside a message.
    Framing(&'static str),
}

impl std::fmt::Display for ResponseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ResponseError::Body(e) => write!(f, "the response body failed: {e}"),
            ResponseError::Framing(what) => f.write_str(what),
        }
    }
}

/// Whole response messages (header removed) from a response body.
pub struct ResponseMessages<B> {
    body: B,
    chunks: VecDeque<Bytes>,
    buffered: usize,
    ended: bool,
}

impl<B> ResponseMessages<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    /// The messages of `body`.
    pub fn new(body: B) -> ResponseMessages<B> {
        ResponseMessages { body, chunks: VecDeque::new(), buffered: 0, ended: false }
    }

    /// The next message; `Ok(None)` when the body ended between messages.
    pub async fn message(&mut self) -> Result<Option<Bytes>, ResponseError> {
        std::future::poll_fn(|cx| self.poll_message(cx)).await
    }

    fn poll_message(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, ResponseError>> {
        loop {
            if let Some(message) = self.take_message()? {
                return Poll::Ready(Ok(Some(message)));
            }
            if self.ended {
                return Poll::Ready(if self.buffered == 0 {
                    Ok(None)
                } else {
                    Err(ResponseError::Framing("the response body ended inside a message"))
                });
            }
            match ready!(Pin::new(&mut self.body).poll_frame(cx)) {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data()
                        && !data.is_empty()
                    {
                        self.buffered += data.len();
                        self.chunks.push_back(data);
                    }
                }
                Some(Err(e)) => return Poll::Ready(Err(ResponseError::Body(e.to_string()))),
                None => self.ended = true,
            }
        }
    }

    /// The next message if all of it has arrived.
    fn take_message(&mut self) -> Result<Option<Bytes>, ResponseError> {
        if self.buffered < HEADER_LEN {
            return Ok(None);
        }
        let mut header = [0u8; HEADER_LEN];
        let mut filled = 0;
        for chunk in &self.chunks {
            let n = (HEADER_LEN - filled).min(chunk.len());
            header[filled..filled + n].copy_from_slice(&chunk[..n]);
            filled += n;
            if filled == HEADER_LEN {
                break;
            }
        }
        if header[0] != 0 {
            return Err(ResponseError::Framing("a compressed response (none was asked for)"));
        }
        let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        if self.buffered < HEADER_LEN + len {
            return Ok(None);
        }
        self.skip(HEADER_LEN);
        self.buffered -= len;
        let front = self.chunks.front_mut();
        if let Some(front) = front
            && front.len() >= len
        {
            let message = front.split_to(len);
            if front.is_empty() {
                self.chunks.pop_front();
            }
            return Ok(Some(message));
        }
        let mut message = POOL.pop().unwrap_or_default();
        message.reserve(len);
        while message.len() < len {
            let front = self.chunks.front_mut().expect("the message has arrived");
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
    fn skip(&mut self, mut n: usize) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test::{Chunks, framed};

    fn read_all(wire: &[u8], size: usize) -> Result<Vec<Bytes>, ResponseError> {
        let mut messages = ResponseMessages::new(Chunks::cut(wire, size));
        futures::executor::block_on(async {
            let mut out = Vec::new();
            while let Some(message) = messages.message().await? {
                out.push(message.clone());
                recycle(message);
            }
            Ok(out)
        })
    }

    #[test]
    fn responses_come_out_whole_however_the_body_is_cut() {
        let big: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
        let mut wire = framed(&big);
        wire.extend(framed(b"small"));
        wire.extend(framed(b""));
        for size in [1, 4, 5, 6, 100, 16_384, 40_005, 100_000] {
            let got = read_all(&wire, size).unwrap_or_else(|e| panic!("chunks of {size}: {e:?}"));
            assert_eq!(got, [Bytes::from(big.clone()), Bytes::from_static(b"small"), Bytes::new()], "chunks of {size}");
        }
    }

    #[test]
    fn a_body_cut_inside_a_message_or_compressed_is_an_error() {
        let whole = framed(&[7; 50]);
        assert!(matches!(read_all(&whole[..30], 8), Err(ResponseError::Framing(_))));
        let mut compressed = framed(b"x");
        compressed[0] = 1;
        assert!(matches!(read_all(&compressed, 100), Err(ResponseError::Framing(_))));
    }
}
