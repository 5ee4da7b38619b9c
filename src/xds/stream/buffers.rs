//! The pool of buffers for requests that span several DATA chunks,
//! reused by every stream. A busy server otherwise frees a 100 KB buffer per Envoy ACK,
//! mimalloc hands the memory back to the kernel, and the next ACK's buffer
//! is faulted in and zeroed again: that was a quarter of the server's CPU
//! for an endpoint change in s1. The pool is small and bounded; a buffer
//! that does not come back (or does not fit) is simply freed.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooled_buffers_come_back_empty_with_room() {
        let mut buffer = take(100);
        buffer.extend_from_slice(&[7; 100]);
        recycle(buffer.freeze());
        let again = take(300);
        assert!(again.is_empty(), "a reused buffer holds nothing of its last request");
        assert!(again.capacity() >= 300);
    }
}
