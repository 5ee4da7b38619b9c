//! Gathered writes: an xDS connection's HTTP/2 frames leave in a few large
//! writes instead of one write per DATA frame.
//!
//! h2 holds one large DATA frame at a time: it writes the frame (head and
//! payload, one `writev`), flushes, and only then takes the next. A 1 MB
//! response to a peer whose `SETTINGS_MAX_FRAME_SIZE` is the default 16 KB
//! therefore costs 64 syscalls, and on loopback each one also runs the
//! receiver's TCP input in the sender's context. This wrapper, between h2
//! and the socket, copies what h2 writes into one buffer and answers h2's
//! per-frame flushes without writing; the bytes go to the socket when the
//! buffer holds [`GATHER_LIMIT`], or when h2 flushes again without having
//! written anything since the last flush — which it does once the
//! connection has nothing more to send in this poll (the task wakes itself
//! on every deferred flush, so that second flush always comes).
//!
//! tokio's `BufWriter` does not fit: it writes on every flush, and it keeps
//! its buffer for the life of the connection. Here the buffer is given back
//! as soon as it is drained (to a small per-thread pool, so the next
//! connection to write reuses warm pages), so an idle connection holds
//! none, and a blocked one (its socket full) holds at most [`GATHER_LIMIT`].
//!
//! Invariants: bytes reach the socket in the order h2 wrote them; a flush
//! reported done without writing is always followed by a real one when h2
//! next flushes with nothing new, or by this task's next poll; a shutdown
//! writes everything first.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Buffered bytes at which they are written without waiting for a flush:
/// four DATA frames, one loopback segment.
pub const GATHER_LIMIT: usize = 64 * 1024;

/// Drained buffers kept per thread for the next connection that writes.
/// A buffer freed to the allocator comes back as fresh pages the kernel
/// must zero; measured on the replay floor that was half the server's CPU.
const SPARE_PER_THREAD: usize = 32;

thread_local! {
    static SPARE: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn take_buffer() -> Vec<u8> {
    SPARE.with_borrow_mut(Vec::pop).unwrap_or_else(|| Vec::with_capacity(GATHER_LIMIT))
}

fn give_back(mut buf: Vec<u8>) {
    if buf.capacity() == GATHER_LIMIT {
        buf.clear();
        SPARE.with_borrow_mut(|spare| {
            if spare.len() < SPARE_PER_THREAD {
                spare.push(buf);
            }
        });
    }
}

/// A socket whose writes are gathered (see the module docs).
#[derive(Debug)]
pub struct GatheredWrites<IO> {
    io: IO,
    /// Bytes written by h2, not yet by the socket: `buf[sent..]`.
    buf: Vec<u8>,
    sent: usize,
    /// A flush was reported done without writing the buffer.
    flush_owed: bool,
    /// h2 wrote since the last flush was reported done.
    wrote_since_flush: bool,
}

impl<IO> GatheredWrites<IO> {
    /// Gathers the writes to `io`.
    pub fn new(io: IO) -> GatheredWrites<IO> {
        GatheredWrites { io, buf: Vec::new(), sent: 0, flush_owed: false, wrote_since_flush: false }
    }

    fn buffered(&self) -> usize {
        self.buf.len() - self.sent
    }

    /// Copies `chunks` (at most [`GATHER_LIMIT`] with what is buffered).
    fn append(&mut self, chunks: &[io::IoSlice<'_>]) {
        if self.buf.capacity() == 0 {
            self.buf = take_buffer();
        }
        for chunk in chunks {
            self.buf.extend_from_slice(chunk);
        }
        self.wrote_since_flush = true;
    }
}

impl<IO: AsyncWrite + Unpin> GatheredWrites<IO> {
    /// Writes the buffer out; frees it once empty.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.buf.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.buf[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        give_back(std::mem::take(&mut self.buf));
        self.sent = 0;
        self.flush_owed = false;
        Poll::Ready(Ok(()))
    }

    fn poll_gather(&mut self, cx: &mut Context<'_>, chunks: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let total: usize = chunks.iter().map(|c| c.len()).sum();
        if self.buffered() + total > GATHER_LIMIT {
            ready!(self.poll_drain(cx))?;
            if total >= GATHER_LIMIT {
                // Larger than any gathering: straight through, uncopied.
                return Pin::new(&mut self.io).poll_write_vectored(cx, chunks);
            }
        }
        self.append(chunks);
        Poll::Ready(Ok(total))
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for GatheredWrites<IO> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for GatheredWrites<IO> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.get_mut().poll_gather(cx, &[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        chunks: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_gather(cx, chunks)
    }

    /// Vectored writes cost nothing more here, and they let h2 hand over a
    /// frame's head and payload in one call.
    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.buffered() > 0 && (!this.flush_owed || this.wrote_since_flush) {
            // h2 may have more to write in this poll: report the flush done,
            // and make sure this task runs again to do it if h2 does not
            // flush again first.
            this.flush_owed = true;
            this.wrote_since_flush = false;
            cx.waker().wake_by_ref();
            return Poll::Ready(Ok(()));
        }
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    use super::*;

    /// A socket that records each write it is given, accepting up to
    /// `accept` bytes per call and refusing (would-block) every other call
    /// when `stall` is set.
    #[derive(Default)]
    struct Socket {
        writes: Vec<Vec<u8>>,
        flushes: usize,
        shut: bool,
        accept: Option<usize>,
        stall: bool,
        stalled_last: bool,
    }

    impl AsyncWrite for Socket {
        fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
            if self.stall && !self.stalled_last {
                self.stalled_last = true;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            self.stalled_last = false;
            let n = self.accept.map_or(buf.len(), |a| a.min(buf.len()));
            self.writes.push(buf[..n].to_vec());
            Poll::Ready(Ok(n))
        }
        fn poll_flush(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.flushes += 1;
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.shut = true;
            Poll::Ready(Ok(()))
        }
    }

    struct CountWakes(AtomicUsize);
    impl Wake for CountWakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn poll<T>(f: impl FnMut(&mut Context<'_>) -> Poll<T>) -> (T, usize) {
        let wakes = Arc::new(CountWakes(AtomicUsize::new(0)));
        let waker = std::task::Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let mut f = f;
        for _ in 0..10_000 {
            if let Poll::Ready(t) = f(&mut cx) {
                return (t, wakes.0.load(Ordering::Relaxed));
            }
        }
        panic!("never ready");
    }

    /// What h2 does for one large DATA frame: head and payload in vectored
    /// writes until all is taken, then a flush. Returns the flush's wakes.
    fn frame(gw: &mut GatheredWrites<Socket>, n: u8, len: usize) -> usize {
        let mut frame = vec![9u8, 0, n];
        frame.resize(3 + len, n);
        let (head, payload) = frame.split_at(3);
        let mut taken = 0;
        while taken < frame.len() {
            let chunks = if taken < 3 {
                vec![io::IoSlice::new(&head[taken..]), io::IoSlice::new(payload)]
            } else {
                vec![io::IoSlice::new(&payload[taken - 3..])]
            };
            let (wrote, _) = poll(|cx| Pin::new(&mut *gw).poll_write_vectored(cx, &chunks));
            taken += wrote.unwrap();
        }
        poll(|cx| Pin::new(&mut *gw).poll_flush(cx).map(Result::unwrap)).1
    }

    fn flush(gw: &mut GatheredWrites<Socket>) {
        poll(|cx| Pin::new(&mut *gw).poll_flush(cx)).0.unwrap();
    }

    fn bytes(socket: &Socket) -> Vec<u8> {
        socket.writes.concat()
    }

    fn expected(frames: impl IntoIterator<Item = (u8, usize)>) -> Vec<u8> {
        frames.into_iter().flat_map(|(n, len)| [9u8, 0, n].into_iter().chain(std::iter::repeat_n(n, len))).collect()
    }

    #[test]
    fn frames_each_flushed_leave_in_one_write_at_the_second_flush() {
        let mut gw = GatheredWrites::new(Socket::default());
        for n in 0..3 {
            let wakes = frame(&mut gw, n, 16 * 1024);
            assert_eq!(wakes, 1, "a deferred flush wakes the task to finish it");
        }
        assert!(gw.io.writes.is_empty(), "nothing written before h2 is done");
        flush(&mut gw);
        assert_eq!(gw.io.writes.len(), 1);
        assert_eq!(bytes(&gw.io), expected((0..3).map(|n| (n, 16 * 1024))));
        assert_eq!(gw.buf.capacity(), 0, "a drained buffer is given back");
        // Nothing buffered: a flush goes straight to the socket.
        flush(&mut gw);
        assert_eq!((gw.io.writes.len(), gw.io.flushes), (1, 2));
    }

    #[test]
    fn a_full_buffer_is_written_without_waiting_for_a_flush() {
        let mut gw = GatheredWrites::new(Socket::default());
        let frames: Vec<(u8, usize)> = (0..40).map(|n| (n, 16 * 1024)).collect();
        for &(n, len) in &frames {
            frame(&mut gw, n, len);
        }
        flush(&mut gw);
        let sizes: Vec<usize> = gw.io.writes.iter().map(Vec::len).collect();
        // As many whole frames as fit in each write; all but the last full.
        let per_write = GATHER_LIMIT / (16 * 1024 + 3);
        assert_eq!(sizes.len(), 40_usize.div_ceil(per_write), "{sizes:?}");
        assert!(sizes[..sizes.len() - 1].iter().all(|&s| s == per_write * (16 * 1024 + 3)), "{sizes:?}");
        assert_eq!(bytes(&gw.io), expected(frames));
    }

    #[test]
    fn partial_and_refused_writes_keep_the_order_and_lose_nothing() {
        let socket = Socket { accept: Some(7000), stall: true, ..Socket::default() };
        let mut gw = GatheredWrites::new(socket);
        let frames = [(1, 100), (2, 16 * 1024), (3, 5), (4, 200 * 1024), (5, 300 * 1024)];
        for (n, len) in frames {
            frame(&mut gw, n, len);
        }
        flush(&mut gw);
        assert_eq!(bytes(&gw.io), expected(frames));
        assert!(gw.io.writes.iter().all(|w| w.len() <= 7000));
    }

    #[test]
    fn shutdown_writes_everything_first() {
        let mut gw = GatheredWrites::new(Socket::default());
        frame(&mut gw, 1, 20_000);
        poll(|cx| Pin::new(&mut gw).poll_shutdown(cx)).0.unwrap();
        assert!(gw.io.shut);
        assert_eq!(bytes(&gw.io), expected([(1, 20_000)]));
    }
}
