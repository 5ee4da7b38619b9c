//! The xDS port's HTTP/2 connections: accepted, kept alive, capped, aged
//! and drained.
//!
//! tonic's server would serve these too, but its maximum connection age
//! waits for every stream to end after GOAWAY, and an ADS stream never ends
//! by itself, so the connection would never close. Here each connection is
//! served by hyper directly, and on reaching its age it is drained: GOAWAY
//! (no new streams on it), then each ADS stream on it ends `UNAVAILABLE`
//! ([`Drain`](crate::xds::stream::drain)), and Envoy, keeping the config it
//! has, reconnects. Ages are jittered ±10 % so connections opened together
//! (by a reconnect storm) do not all come back together. Streams that have
//! not ended [`ConnectionPolicy::grace`] after the drain are cut off with
//! the connection. A server shutdown drains every connection the same way.
//!
//! On the secure port each connection first completes a TLS handshake
//! (within [`HANDSHAKE_TIMEOUT`]; one that does not is closed), and the
//! identities of the client certificate it verified go with the
//! connection, with the [`TokenAuthenticator`] that checks a bearer token
//! where there is no certificate. Every request gets a
//! [`ConnectionContext`] extension: the peer address, the connection's
//! drain, its [`Transport`] and that authenticator.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::metrics::Metrics;
use crate::xds::stream::admission::{Admission, EntryPlace, FIRST_REQUEST_HOLD};
use crate::xds::stream::drain::{DrainReason, DrainSignal};
use crate::xds::stream::peer::{ConnectionContext, TokenAuthenticator, Transport};

/// How the xDS port treats its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionPolicy {
    /// Age at which a connection is drained (±10 % jitter); `None`: never.
    pub max_age: Option<Duration>,
    /// How long a drained connection's streams have to end before it is closed.
    pub grace: Duration,
    /// HTTP/2 PING interval on an idle connection.
    pub keepalive_interval: Duration,
    /// How long a PING may go unanswered before the connection is closed.
    pub keepalive_timeout: Duration,
    /// Concurrent streams one connection may open (HTTP/2
    /// `SETTINGS_MAX_CONCURRENT_STREAMS`; Envoy opens one ADS stream per
    /// connection, a client multiplexing more waits for a free one).
    pub max_streams: u32,
}

impl Default for ConnectionPolicy {
    /// Istio's: connections drained at 30 minutes, 10 s of grace; a PING
    /// every 30 s answered within 10 s; 100 streams per connection.
    fn default() -> Self {
        ConnectionPolicy {
            max_age: Some(Duration::from_secs(30 * 60)),
            grace: Duration::from_secs(10),
            keepalive_interval: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(10),
            max_streams: 100,
        }
    }
}

impl ConnectionPolicy {
    /// A new connection's age: the maximum, jittered by up to ±10 %.
    fn age(&self) -> Option<Duration> {
        self.max_age.map(|age| age.mul_f64(0.9 + 0.2 * fastrand::f64()))
    }

    fn http2(&self) -> hyper::server::conn::http2::Builder<TokioExecutor> {
        let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
        builder
            .timer(TokioTimer::new())
            .keep_alive_interval(Some(self.keepalive_interval))
            .keep_alive_timeout(self.keepalive_timeout)
            .max_concurrent_streams(self.max_streams);
        builder
    }
}

/// The bound xDS listener.
#[derive(Debug)]
pub enum XdsListener {
    /// On TCP.
    Tcp(tokio::net::TcpListener),
    /// On a Unix domain socket.
    Unix(tokio::net::UnixListener),
}

/// The xDS listener's accept queue. A restart or a lost replica sends
/// every Envoy it served back at once; a connection the queue has no room
/// for is dropped and its client tries again only after TCP's 1 s
/// retransmission timeout (1,000 Envoys connecting at once overflowed
/// tokio's default of 1,024 in the loadtest and half of them synced a
/// second late). The kernel caps this at `net.core.somaxconn`.
const XDS_ACCEPT_BACKLOG: u32 = 16_384;

impl XdsListener {
    /// Binds the xDS TCP address with a deep accept queue ([`XDS_ACCEPT_BACKLOG`]).
    pub fn bind_tcp(addr: SocketAddr) -> io::Result<XdsListener> {
        let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        socket.listen(XDS_ACCEPT_BACKLOG).map(XdsListener::Tcp)
    }
}

/// How long a client has to complete the TLS handshake on the secure port.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The secure port's side of a connection: its TLS, and how a client
/// without a certificate proves who it is.
#[derive(Clone)]
pub struct SecureTransport {
    /// Completes each connection's handshake.
    pub acceptor: tokio_rustls::TlsAcceptor,
    /// Checks bearer tokens (ADS streams of clients without a certificate).
    pub tokens: Option<Arc<dyn TokenAuthenticator>>,
}

/// Accepts and serves connections with `routes` until `shutdown` turns
/// true; then drains every connection and returns once all are closed.
/// With `secure`, every connection is mutual TLS first (the secure port).
/// Every connection is accepted at once, and served once `admission` gives
/// it a place among the unanswered streams, in arrival order.
pub async fn serve(
    listener: XdsListener,
    routes: tonic::service::Routes,
    policy: ConnectionPolicy,
    metrics: Arc<Metrics>,
    shutdown: watch::Receiver<bool>,
    secure: Option<SecureTransport>,
    admission: Arc<Admission>,
) {
    let builder = policy.http2();
    let mut connections = JoinSet::new();
    let mut stop = shutdown.clone();
    loop {
        let accepted = tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = accept(&listener) => accepted,
        };
        let (io, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors, mostly: wait a little rather than spin.
                tracing::warn!("accepting an xDS connection: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let connection = Connection {
            builder: builder.clone(),
            routes: routes.clone(),
            policy,
            metrics: metrics.clone(),
            shutdown: shutdown.clone(),
            admission: admission.clone(),
        };
        let plain = |transport| (transport, None);
        match (io, secure.clone()) {
            (Accepted::Tcp(io), None) => connections.spawn(connection.serve(io, peer, plain(Transport::Plaintext))),
            (Accepted::Unix(io), None) => connections.spawn(connection.serve(io, peer, plain(Transport::Plaintext))),
            (Accepted::Tcp(io), Some(secure)) => connections.spawn(connection.serve_tls(secure, io, peer)),
            (Accepted::Unix(io), Some(secure)) => connections.spawn(connection.serve_tls(secure, io, peer)),
        };
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}

enum Accepted {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

async fn accept(listener: &XdsListener) -> io::Result<(Accepted, Option<SocketAddr>)> {
    match listener {
        XdsListener::Tcp(l) => {
            let (stream, peer) = l.accept().await?;
            // A response leaves as its shared body, then a small per-stream
            // tail (the nonce); with Nagle's algorithm on, that tail waited
            // for the client's delayed ACK: 40 ms added to a push, often.
            stream.set_nodelay(true)?;
            Ok((Accepted::Tcp(stream), Some(peer)))
        }
        XdsListener::Unix(l) => Ok((Accepted::Unix(l.accept().await?.0), None)),
    }
}

/// What serving one connection takes.
struct Connection {
    builder: hyper::server::conn::http2::Builder<TokioExecutor>,
    routes: tonic::service::Routes,
    policy: ConnectionPolicy,
    metrics: Arc<Metrics>,
    shutdown: watch::Receiver<bool>,
    admission: Arc<Admission>,
}

impl Connection {
    /// Completes the TLS handshake, then serves the connection with the
    /// identities its client certificate proved.
    async fn serve_tls<IO>(self, secure: SecureTransport, io: IO, peer: Option<SocketAddr>)
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, secure.acceptor.accept(io)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                // A client certificate from another CA ends here.
                tracing::info!(?peer, "secure xDS: TLS handshake refused: {e}");
                self.metrics.tls_handshakes_refused.inc();
                return;
            }
            Err(_) => {
                tracing::info!(?peer, "secure xDS: TLS handshake not completed within {HANDSHAKE_TIMEOUT:?}");
                self.metrics.tls_handshakes_refused.inc();
                return;
            }
        };
        let identities: Arc<[crate::model::Identity]> = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(crate::ca::tls::identities_of)
            .unwrap_or_default()
            .into();
        self.serve(stream, peer, (Transport::Mtls { identities }, secure.tokens)).await;
    }

    async fn serve<IO>(
        mut self,
        io: IO,
        peer: Option<SocketAddr>,
        (transport, tokens): (Transport, Option<Arc<dyn TokenAuthenticator>>),
    ) where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        // Served, HTTP/2 and all, only once admitted: until then the
        // client's requests wait in the kernel's socket buffers.
        let place = tokio::select! {
            place = self.admission.enter() => EntryPlace::new(place),
            _ = self.shutdown.wait_for(|s| *s) => return,
        };
        let (signal, drain) = DrainSignal::new();
        let context = ConnectionContext { peer, drain, transport, tokens, place: place.clone() };
        let routes = self.routes;
        let service = hyper::service::service_fn(move |mut req: http::Request<hyper::body::Incoming>| {
            req.extensions_mut().insert(context.clone());
            let mut routes = routes.clone();
            tower_service::Service::call(&mut routes, req.map(tonic::body::Body::new))
        });
        let conn = self.builder.serve_connection(TokioIo::new(io), service);
        let mut conn = std::pin::pin!(conn);
        let mut age = std::pin::pin!(sleep_or_never(self.policy.age()));
        // A connection that opens no stream gives its place back.
        let mut hold = std::pin::pin!(tokio::time::sleep(FIRST_REQUEST_HOLD));
        let mut holding = true;
        let reason = loop {
            tokio::select! {
                served = conn.as_mut() => {
                    if let Err(e) = served {
                        tracing::debug!(?peer, "xDS connection ended: {}", crate::text::error_chain(&e));
                    }
                    return;
                }
                () = hold.as_mut(), if holding => {
                    holding = false;
                    drop(place.take());
                }
                () = age.as_mut() => break DrainReason::MaxAge,
                _ = self.shutdown.wait_for(|s| *s) => break DrainReason::Shutdown,
            }
        };
        tracing::debug!(
            ?peer,
            reason = reason.label(),
            "draining an xDS connection: GOAWAY, its streams end UNAVAILABLE"
        );
        self.metrics.connections_drained.get_or_create(&[("reason", reason.label())]).inc();
        conn.as_mut().graceful_shutdown();
        signal.drain(reason);
        if tokio::time::timeout(self.policy.grace, conn.as_mut()).await.is_err() {
            tracing::debug!(?peer, grace = ?self.policy.grace, "closing a drained xDS connection whose streams did not end");
        }
    }
}

async fn sleep_or_never(age: Option<Duration>) {
    match age {
        Some(age) => tokio::time::sleep(age).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_are_jittered_within_ten_percent() {
        let policy = ConnectionPolicy { max_age: Some(Duration::from_secs(100)), ..ConnectionPolicy::default() };
        let ages: Vec<Duration> = (0..1000).map(|_| policy.age().unwrap()).collect();
        assert!(ages.iter().all(|a| (Duration::from_secs(90)..=Duration::from_secs(110)).contains(a)));
        let spread = ages.iter().max().unwrap().saturating_sub(*ages.iter().min().unwrap());
        assert!(spread > Duration::from_secs(15), "ages barely differ: {spread:?}");
        assert_eq!(ConnectionPolicy { max_age: None, ..policy }.age(), None);
    }
}
