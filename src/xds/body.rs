//! The HTTP/2 response body of an ADS stream: shared bytes out, no copies.
//!
//! A gRPC message on the wire is a 5-byte frame header (compression flag,
//! big-endian length) followed by the message. Every response meshpush
//! sends is a shared [`ResponseBody`](super::codec::ResponseBody) — frame
//! header included, since the nonce has a fixed width and so the length is
//! known when the body is assembled — followed by this stream's nonce field.
//! This body yields exactly those two chunks: the shared `Bytes` (a reference
//! count bump, not a copy) and a small tail. h2 writes them to the socket as
//! they are. A codec, by contrast, copies every message into a per-stream
//! buffer; at a thousand streams receiving half a megabyte each that copy
//! dominated the server's CPU and memory in a prototype.
//!
//! When the stream task is done the body ends with `grpc-status: 0`.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::Frame;
use tokio::sync::mpsc;

use super::codec::OutgoingResponse;

/// The body of one ADS response stream.
#[derive(Debug)]
pub struct ResponseStreamBody {
    responses: mpsc::Receiver<OutgoingResponse>,
    tail: Option<Bytes>,
    done: bool,
}

impl ResponseStreamBody {
    /// A body fed by the stream task through `responses`.
    pub fn new(responses: mpsc::Receiver<OutgoingResponse>) -> ResponseStreamBody {
        ResponseStreamBody { responses, tail: None, done: false }
    }
}

impl http_body::Body for ResponseStreamBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Some(tail) = self.tail.take() {
            return Poll::Ready(Some(Ok(Frame::data(tail))));
        }
        if self.done {
            return Poll::Ready(None);
        }
        match self.responses.poll_recv(cx) {
            Poll::Ready(Some(response)) => {
                self.tail = Some(response.tail());
                Poll::Ready(Some(Ok(Frame::data(response.body))))
            }
            Poll::Ready(None) => {
                self.done = true;
                let mut trailers = HeaderMap::new();
                trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                Poll::Ready(Some(Ok(Frame::trailers(trailers))))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.tail.is_none()
    }
}
