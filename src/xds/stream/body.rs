//! The HTTP/2 response body of an ADS stream: shared bytes out, no copies.
//!
//! A gRPC message on the wire is a 5-byte frame header (compression flag,
//! big-endian length) followed by the message. Every response meshpush
//! sends is a shared body — frame header included, since the nonce has a
//! fixed width ([`NONCE_LEN`]) and so the length is known when the body is
//! assembled — followed by this stream's tail (SotW: the nonce field).
//! This body yields exactly those two chunks: the shared `Bytes` (a reference
//! count bump, not a copy) and a small tail. h2 writes them to the socket as
//! they are. A codec, by contrast, copies every message into a per-stream
//! buffer; at a thousand streams receiving half a megabyte each that copy
//! dominated the server's CPU and memory in a prototype.
//!
//! Delta responses have the same two-chunk shape (`delta::codec`): a shared
//! body, then a per-stream tail (the nonce and the names removed).
//!
//! When the stream task is done the body ends with `grpc-status: 0`.

use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::Frame;
use tokio::sync::mpsc;

use crate::xds::watch::Nonce;

/// Length of a gRPC frame header.
pub const FRAME_HEADER_LEN: usize = 5;
/// Hex digits of a nonce.
pub const NONCE_LEN: usize = 8;
/// Encoded length of a nonce field (tag, length, digits).
pub const NONCE_FIELD_LEN: usize = 2 + NONCE_LEN;

/// A nonce as sent ([`Nonce`]'s text): fixed-width hex, so a body's frame
/// length is known before any stream's nonce is.
pub fn nonce_text(nonce: u32) -> String {
    Nonce(nonce).to_string()
}

/// A response as it goes on the wire: a shared, framed body (the frame
/// header announces body and tail) and this stream's tail.
pub trait Framed {
    /// The shared body and the per-stream tail.
    fn into_chunks(self) -> (Bytes, Bytes);
    /// Bytes it puts on the wire (frame header included).
    fn wire_len(&self) -> usize;
}

/// How a stream ended, set by its task before it drops the response
/// channel: the status its trailers carry (`OK` when never set).
pub type EndStatus = Arc<OnceLock<tonic::Status>>;

/// The body of one ADS response stream.
///
/// Its stream task sends it each response boxed: a tokio channel allocates
/// its first block of 32 slots with the channel, and 32 pointers are 256
/// bytes where 32 SotW responses are 1,280 (and delta ones 2,048), for
/// every open stream however few responses it ever has in flight.
#[derive(Debug)]
pub struct ResponseStreamBody<R> {
    responses: mpsc::Receiver<Box<R>>,
    end: EndStatus,
    tail: Option<Bytes>,
    done: bool,
}

impl<R> ResponseStreamBody<R> {
    /// A body fed by the stream task through `responses`, ending with `end`'s status.
    pub fn new(responses: mpsc::Receiver<Box<R>>, end: EndStatus) -> ResponseStreamBody<R> {
        ResponseStreamBody { responses, end, tail: None, done: false }
    }
}

impl<R: Framed> http_body::Body for ResponseStreamBody<R> {
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
                let (body, tail) = (*response).into_chunks();
                self.tail = Some(tail);
                Poll::Ready(Some(Ok(Frame::data(body))))
            }
            Poll::Ready(None) => {
                self.done = true;
                let mut trailers = HeaderMap::new();
                match self.end.get() {
                    Some(status) => {
                        if status.add_header(&mut trailers).is_err() {
                            trailers.insert("grpc-status", http::HeaderValue::from(status.code() as i32));
                        }
                    }
                    None => {
                        trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                    }
                }
                Poll::Ready(Some(Ok(Frame::trailers(trailers))))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.tail.is_none()
    }
}
