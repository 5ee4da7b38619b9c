//! Whether an xDS client is still there, judged as gRPC servers judge it:
//! a client is alive while anything at all arrives from it.
//!
//! hyper's keepalive sends a PING once a connection has been quiet for the
//! interval, and on its own would end the connection when that PING's ACK
//! is not back within the timeout, whatever else arrived meanwhile. A
//! client busy with a large push answers the PING only once it has read
//! what was queued before it, while its ACKs of the push keep arriving;
//! hyper cut such clients off. gRPC's servers, istiod's among them, count
//! every frame read as a sign of life, and close a connection only when
//! nothing has arrived for the interval and then the timeout.
//!
//! So hyper keeps sending the PINGs (a quiet client must be asked to
//! speak) with a timeout no connection reaches ([`PING_ACK_WAIT`]), the
//! connection's IO is wrapped in [`Reading`], which notes when bytes were
//! last read, and [`silence`] resolves once nothing has been read for
//! interval + timeout. A client that answers the PING, or sends anything
//! else, stays; one that sends nothing is closed when it would have been
//! before: the timeout after the PING.
//!
//! hyper also judged the PING before reading the socket: a server too busy
//! to poll a connection for a while found the timeout passed and closed it
//! with the ACK waiting unread. The connection's serving loop polls the
//! connection before [`silence`], so whatever has arrived is read, and
//! counted, first.
//!
//! Invariant: [`LastRead`] only moves forward, and only when a read
//! returned bytes; an idle connection costs one timer wake-up per
//! interval + timeout.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// hyper's own wait for a PING's ACK: beyond any connection's life, so
/// that [`silence`] alone decides when a client is gone.
pub(crate) const PING_ACK_WAIT: Duration = Duration::from_secs(365 * 24 * 3600);

/// When a connection last read anything: shared by its [`Reading`] IO and
/// the [`silence`] that watches it.
#[derive(Debug, Clone)]
pub(crate) struct LastRead(Arc<Clock>);

#[derive(Debug)]
struct Clock {
    /// The connection's start; `millis` counts from it.
    start: Instant,
    millis: AtomicU64,
}

impl LastRead {
    /// A clock whose last read is now.
    pub(crate) fn now() -> LastRead {
        LastRead(Arc::new(Clock { start: Instant::now(), millis: AtomicU64::new(0) }))
    }

    fn touch(&self) {
        let millis = u64::try_from(self.0.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.0.millis.fetch_max(millis, Ordering::Relaxed);
    }

    fn at(&self) -> Instant {
        self.0.start + Duration::from_millis(self.0.millis.load(Ordering::Relaxed))
    }
}

/// Resolves once nothing has been read for `quiet`.
pub(crate) async fn silence(last_read: &LastRead, quiet: Duration) {
    loop {
        let due = last_read.at() + quiet;
        if Instant::now() >= due {
            return;
        }
        tokio::time::sleep_until(due).await;
    }
}

/// A connection's IO that notes its reads on a [`LastRead`].
#[derive(Debug)]
pub(crate) struct Reading<IO> {
    io: IO,
    last_read: LastRead,
}

impl<IO> Reading<IO> {
    pub(crate) fn new(io: IO, last_read: LastRead) -> Reading<IO> {
        Reading { io, last_read }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Reading<IO> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.last_read.touch();
        }
        polled
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Reading<IO> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn silence_waits_for_quiet_counted_from_the_last_read() {
        let (mut client, server) = tokio::io::duplex(64);
        let last_read = LastRead::now();
        let mut server = Reading::new(server, last_read.clone());
        let quiet = Duration::from_secs(40);
        let start = Instant::now();

        // A byte read at 30 s moves the silence to 70 s.
        tokio::time::sleep(Duration::from_secs(30)).await;
        client.write_all(b"x").await.unwrap();
        let mut byte = [0u8; 1];
        server.read_exact(&mut byte).await.unwrap();
        silence(&last_read, quiet).await;
        assert_eq!(start.elapsed(), Duration::from_secs(70));

        // Writing is not a sign of the client's life.
        server.write_all(b"y").await.unwrap();
        let before = Instant::now();
        silence(&last_read, quiet).await;
        assert_eq!(before.elapsed(), Duration::ZERO);
    }
}
