//! gRPC for tests: a backend that answers every call and says who it is,
//! and a client call through tonic, as a gRPC application makes it.
//!
//! A [`GrpcBackend`] stands in for one gRPC workload at its loopback
//! address. It speaks HTTP/2 without TLS (h2c, what a mesh's gRPC upstream
//! speaks) and answers every call, whatever its method, with an empty
//! message and `grpc-status: 0`, with headers telling the test what
//! arrived: `x-backend: NAME`, `x-request-path` (`/SERVICE/METHOD`), and
//! each request header echoed as `x-echo-<name>`. It is an echo server on
//! the wire, not a generated service: routing is what the tests check.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::thread::JoinHandle;

use bytes::Bytes;
use http_body_util::{BodyExt as _, StreamBody};
use hyper::body::Frame;
use tokio::sync::oneshot;

/// One running gRPC backend; dropping it stops it.
pub struct GrpcBackend {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl GrpcBackend {
    /// Starts backend `name` on loopback `addr`. Panics if it cannot bind.
    pub fn start(name: &str, addr: SocketAddr) -> GrpcBackend {
        assert!(addr.ip().is_loopback(), "backends bind loopback only, not {addr}");
        let listener =
            std::net::TcpListener::bind(addr).unwrap_or_else(|e| panic!("gRPC backend {name}: bind {addr}: {e}"));
        listener.set_nonblocking(true).expect("a non-blocking listener");
        let (stop, stopped) = oneshot::channel();
        let name = name.to_string();
        let thread = std::thread::Builder::new()
            .name(format!("grpc-backend-{name}"))
            .spawn(move || {
                let runtime =
                    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
                runtime.block_on(serve(name, listener, stopped));
            })
            .expect("spawn the gRPC backend thread");
        GrpcBackend { addr, stop: Some(stop), thread: Some(thread) }
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for GrpcBackend {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn serve(name: String, listener: std::net::TcpListener, mut stopped: oneshot::Receiver<()>) {
    let listener = tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = &mut stopped => break,
            accepted = listener.accept() => accepted,
        };
        let Ok((stream, _)) = accepted else { continue };
        let name = name.clone();
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |request| answer(name.clone(), request));
            let _ = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
    connections.abort_all();
}

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

async fn answer(
    name: String,
    request: http::Request<hyper::body::Incoming>,
) -> Result<http::Response<Body>, Infallible> {
    let path = request.uri().path().to_string();
    let mut response = http::Response::builder()
        .status(200)
        .header("content-type", "application/grpc")
        .header("x-backend", name.as_str())
        .header("x-request-path", path.as_str());
    for (n, v) in request.headers() {
        response = response.header(format!("x-echo-{n}"), v.clone());
    }
    // Read the call to its end before answering, as a unary server does.
    let _ = request.into_body().collect().await;
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
    // One message: not compressed, zero bytes long (an empty message).
    let frames = [Ok(Frame::data(Bytes::from_static(&[0, 0, 0, 0, 0]))), Ok(Frame::trailers(trailers))];
    let body = StreamBody::new(futures::stream::iter(frames)).boxed();
    Ok(response.body(body).expect("a response"))
}

/// A unary call of `path` (`/SERVICE/METHOD`, an empty message) to `addr`,
/// with `authority` as its `:authority` and `metadata` sent along, made by
/// tonic: the backend that answered (`x-backend`), or what failed.
pub fn call(addr: SocketAddr, authority: &str, path: &str, metadata: &[(&str, &str)]) -> Result<String, String> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let origin: http::Uri = format!("http://{authority}").parse().map_err(|e| format!("authority: {e}"))?;
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| e.to_string())?
            .origin(origin)
            .connect_timeout(std::time::Duration::from_secs(5))
            .timeout(std::time::Duration::from_secs(5))
            .connect()
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?;
        let mut grpc = tonic::client::Grpc::new(channel);
        grpc.ready().await.map_err(|e| format!("channel: {e}"))?;
        let mut request = tonic::Request::new(());
        for (k, v) in metadata {
            let key: tonic::metadata::MetadataKey<tonic::metadata::Ascii> =
                k.parse().map_err(|_| format!("metadata {k}"))?;
            request.metadata_mut().insert(key, v.parse().map_err(|_| format!("metadata value {v}"))?);
        }
        let path: http::uri::PathAndQuery = path.parse().map_err(|e| format!("path: {e}"))?;
        let codec = tonic_prost::ProstCodec::<(), ()>::default();
        let response =
            grpc.unary(request, path, codec).await.map_err(|s| format!("{:?}: {}", s.code(), s.message()))?;
        let backend = response.metadata().get("x-backend").and_then(|v| v.to_str().ok()).unwrap_or_default();
        Ok(backend.to_string())
    })
}
