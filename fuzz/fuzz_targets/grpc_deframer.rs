//! Any bytes, as an ADS request body cut into HTTP/2 DATA chunks: the
//! deframer must not panic, must hand out exactly the messages a plain
//! reading of the frames gives (in order, whole, however the body is
//! cut), and must end in an error where the frames do (compressed flag,
//! over the size limit, a body ending inside a message).
//!
//! The first input byte picks the chunk size (1 to 256 bytes).
#![no_main]

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::StreamExt as _;
use http_body::Frame;
use libfuzzer_sys::fuzz_target;
use meshpush::xds::stream::messages::RequestMessages;

const MAX: usize = 4096;

struct Chunks(VecDeque<Bytes>);

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Poll::Ready(self.0.pop_front().map(|c| Ok(Frame::data(c))))
    }
}

/// The messages of `wire` read frame by frame; `Err(())` where the reading must fail.
fn plainly(mut wire: &[u8]) -> Vec<Result<Vec<u8>, ()>> {
    let mut out = Vec::new();
    while !wire.is_empty() {
        if wire.len() < 5 {
            out.push(Err(()));
            break;
        }
        let len = u32::from_be_bytes([wire[1], wire[2], wire[3], wire[4]]) as usize;
        if wire[0] != 0 || len > MAX || wire.len() - 5 < len {
            out.push(Err(()));
            break;
        }
        out.push(Ok(wire[5..5 + len].to_vec()));
        wire = &wire[5 + len..];
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&cut, wire)) = data.split_first() else { return };
    let size = usize::from(cut) + 1;
    let chunks = wire.chunks(size).map(Bytes::copy_from_slice).collect();
    let got: Vec<Result<Vec<u8>, ()>> = futures::executor::block_on(
        RequestMessages::new(Chunks(chunks), MAX).map(|m| m.map(|b| b.to_vec()).map_err(|_| ())).collect(),
    );
    assert_eq!(got, plainly(wire));
});
