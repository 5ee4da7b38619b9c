//! The ADS gRPC service, written by hand so responses go out pre-encoded.
//!
//! envoy-types' generated server hard-codes the prost codec, which would
//! re-encode every response per stream. This service decodes requests with
//! tonic's `Streaming` and answers with its own body
//! ([`ResponseStreamBody`]) that hands the shared response bytes to h2
//! without copying. It runs one task per stream: the task owns the stream's
//! [`Connection`], reads requests, serves pushes from its slot in the
//! [`PushQueue`](crate::push::PushQueue), and writes into a small bounded
//! channel. Client requests are served before pushes; a client that stops
//! reading blocks only its own task, while pushes for it merge in its slot.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use futures::future::BoxFuture;
use tokio::sync::mpsc;
use tonic::body::Body;
use tonic::server::NamedService;
use tonic::{Status, Streaming};
use tracing::Instrument;

use super::body::ResponseStreamBody;
use super::codec::{OutgoingResponse, RequestDecoder};
use super::connection::Connection;
use super::status::StreamStatus;
use crate::model::Proxy;
use crate::push::PushEngine;

/// gRPC service name.
pub const SERVICE_NAME: &str = "envoy.service.discovery.v3.AggregatedDiscoveryService";
const SOTW_PATH: &str = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources";
const DELTA_PATH: &str = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources";

/// Largest request accepted: Envoy's SotW EDS requests list every watched
/// cluster, and its gRPC client has no limit of its own.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024 * 1024;

/// Responses buffered per stream before its task waits for the client.
pub const STREAM_BUFFER: usize = 4;

/// The ADS service.
#[derive(Debug, Clone)]
pub struct AdsService {
    engine: Arc<PushEngine>,
}

impl AdsService {
    /// A service over `engine`.
    pub fn new(engine: Arc<PushEngine>) -> AdsService {
        AdsService { engine }
    }
}

impl NamedService for AdsService {
    const NAME: &'static str = SERVICE_NAME;
}

/// Opens a SotW stream: reads the first request (it carries the node),
/// refuses the stream if the node is unusable, else starts the stream task
/// and answers with a body fed by it.
async fn open_sotw<B>(engine: Arc<PushEngine>, req: http::Request<B>) -> http::Response<Body>
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
{
    let peer = req
        .extensions()
        .get::<tonic::transport::server::TcpConnectInfo>()
        .and_then(|i| i.remote_addr())
        .map(|a| a.to_string())
        .unwrap_or_default();
    let mut requests: Streaming<DiscoveryRequest> = Streaming::new_request(
        RequestDecoder::<DiscoveryRequest>::default(),
        req.into_body(),
        None,
        Some(MAX_REQUEST_BYTES),
    );
    let first = match requests.message().await {
        Ok(Some(first)) => first,
        Ok(None) => return Status::cancelled("stream ended before its first request").into_http(),
        Err(status) => return status.into_http(),
    };
    let proxy = match first.node.as_ref().ok_or(crate::model::NodeError::Missing).and_then(Proxy::from_node) {
        Ok(proxy) => Arc::new(proxy),
        Err(e) => {
            tracing::warn!(%peer, "refused an ADS stream: {e}");
            return Status::invalid_argument(e.to_string()).into_http();
        }
    };
    let rx = spawn_stream(engine, proxy, first, requests, peer);
    let mut response = http::Response::new(Body::new(ResponseStreamBody::new(rx)));
    response.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/grpc"));
    response
}

/// Starts the task that serves one SotW stream of `proxy`, whose first
/// request was `first`; returns the receiver of its responses (at most
/// [`STREAM_BUFFER`] buffered: a reader that stops only stalls this stream).
///
/// The gRPC service calls this for every stream; benches and tests call it
/// directly to drive the very same stream logic over in-memory channels.
pub fn spawn_stream(
    engine: Arc<PushEngine>,
    proxy: Arc<Proxy>,
    first: DiscoveryRequest,
    requests: impl futures::Stream<Item = Result<DiscoveryRequest, Status>> + Unpin + Send + 'static,
    peer: String,
) -> mpsc::Receiver<OutgoingResponse> {
    let (tx, rx) = mpsc::channel(STREAM_BUFFER);
    let handle = engine.queue.register(proxy.clone());
    let span = tracing::info_span!("ads", conn_id = handle.id, node_id = %proxy.id);
    tokio::spawn(
        async move {
            tracing::debug!(%peer, "stream connected");
            let conn = Connection::new(handle.id, proxy);
            let end = serve_stream(&engine, conn, &handle, first, requests, tx).await;
            engine.queue.unregister(handle.id);
            tracing::debug!(reason = %end, "stream closed");
        }
        .instrument(span),
    );
    rx
}

/// Serves one stream until the client goes away; returns why it ended.
async fn serve_stream(
    engine: &Arc<PushEngine>,
    mut conn: Connection,
    handle: &Arc<crate::push::queue::ConnectionHandle>,
    first: DiscoveryRequest,
    mut requests: impl futures::Stream<Item = Result<DiscoveryRequest, Status>> + Unpin,
    tx: mpsc::Sender<OutgoingResponse>,
) -> String {
    let mut pending = Some(first);
    let mut recorder = engine.metrics.stream();
    loop {
        let responses = if let Some(req) = pending.take() {
            recorder.serving_request(&conn, &req);
            let ctx = engine.ctx.load();
            conn.on_request(&ctx, &engine.cache, &req)
        } else {
            tokio::select! {
                biased;
                msg = futures::StreamExt::next(&mut requests) => match msg {
                    Some(Ok(req)) => { pending = Some(req); continue; }
                    None => return "client closed the stream".into(),
                    Some(Err(status)) => return format!("stream error: {status}"),
                },
                _ = handle.signal.notified() => {
                    let Some(push) = handle.signal.take() else { continue };
                    recorder.serving_push(&conn, &push);
                    let ctx = engine.ctx.load();
                    conn.on_push(&ctx, &engine.cache, &push)
                }
            }
        };
        if let (Some(scope), Some(inbound)) = (conn.scope(), conn.inbound()) {
            engine.queue.set_scope(handle, scope.id, inbound);
        }
        let sent_bytes: usize = responses.iter().map(OutgoingResponse::wire_len).sum();
        for response in responses {
            if tx.send(response).await.is_err() {
                return "response channel closed".into();
            }
        }
        recorder.finish(&conn, sent_bytes);
        *handle.status.lock() = StreamStatus::of(&conn);
    }
}

impl<B> tower_service::Service<http::Request<B>> for AdsService
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let engine = self.engine.clone();
        match req.uri().path() {
            SOTW_PATH => Box::pin(async move { Ok(open_sotw(engine, req).await) }),
            DELTA_PATH => Box::pin(async move {
                Ok(Status::unimplemented("delta xDS is not served yet: bootstrap with api_type GRPC").into_http())
            }),
            _ => Box::pin(async move { Ok(Status::unimplemented("no such method").into_http()) }),
        }
    }
}
