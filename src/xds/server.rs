//! The ADS gRPC service, written by hand so responses go out pre-encoded.
//!
//! envoy-types' generated server hard-codes the prost codec, which would
//! re-encode every response per stream. This service routes
//! `StreamAggregatedResources` through tonic's `Grpc::streaming` with
//! [`PreEncodedCodec`], and runs one task per stream: the task owns the
//! stream's [`Connection`], reads requests, serves pushes from its slot in the
//! [`PushQueue`](crate::push::PushQueue), and writes into a small bounded
//! channel. Client requests are served before pushes; a client that stops
//! reading blocks only its own task, while pushes for it merge in its slot.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use envoy_types::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DiscoveryRequest};
use futures::future::BoxFuture;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::body::Body;
use tonic::server::{Grpc, NamedService, StreamingService};
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument;

use super::codec::{OutgoingResponse, PreEncodedCodec};
use super::connection::Connection;
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
const STREAM_BUFFER: usize = 4;

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

struct Sotw(Arc<PushEngine>);

impl StreamingService<DiscoveryRequest> for Sotw {
    type Response = OutgoingResponse;
    type ResponseStream = ReceiverStream<Result<OutgoingResponse, Status>>;
    type Future = BoxFuture<'static, Result<Response<Self::ResponseStream>, Status>>;

    fn call(&mut self, request: Request<Streaming<DiscoveryRequest>>) -> Self::Future {
        let engine = self.0.clone();
        Box::pin(async move {
            let peer = request.remote_addr().map(|a| a.to_string()).unwrap_or_default();
            let mut requests = request.into_inner();
            // The first request carries the node; refuse the stream if it is unusable.
            let first = match requests.message().await? {
                Some(first) => first,
                None => return Err(Status::cancelled("stream ended before its first request")),
            };
            let node = first
                .node
                .as_ref()
                .ok_or_else(|| Status::invalid_argument(crate::model::NodeError::Missing.to_string()))?;
            let proxy = Arc::new(Proxy::from_node(node).map_err(|e| Status::invalid_argument(e.to_string()))?);
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
            Ok(Response::new(ReceiverStream::new(rx)))
        })
    }
}

/// Serves one stream until the client goes away; returns why it ended.
async fn serve_stream(
    engine: &Arc<PushEngine>,
    mut conn: Connection,
    handle: &crate::push::queue::ConnectionHandle,
    first: DiscoveryRequest,
    mut requests: Streaming<DiscoveryRequest>,
    tx: mpsc::Sender<Result<OutgoingResponse, Status>>,
) -> String {
    let mut pending = Some(first);
    loop {
        let responses = if let Some(req) = pending.take() {
            let ctx = engine.ctx.load();
            conn.on_request(&ctx, &engine.cache, &req)
        } else {
            tokio::select! {
                biased;
                msg = requests.message() => match msg {
                    Ok(Some(req)) => { pending = Some(req); continue; }
                    Ok(None) => return "client closed the stream".into(),
                    Err(status) => return format!("stream error: {status}"),
                },
                _ = handle.signal.notified() => {
                    let Some(push) = handle.signal.take() else { continue };
                    let ctx = engine.ctx.load();
                    conn.on_push(&ctx, &engine.cache, &push)
                }
            }
        };
        if let Some(scope) = conn.scope() {
            handle.scope.store(scope.id.0, std::sync::atomic::Ordering::Relaxed);
        }
        for response in responses {
            if tx.send(Ok(response)).await.is_err() {
                return "response channel closed".into();
            }
        }
    }
}

impl<B> tower_service::Service<http::Request<B>> for AdsService
where
    B: http_body::Body + Send + 'static,
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
            SOTW_PATH => Box::pin(async move {
                let mut grpc = Grpc::new(PreEncodedCodec::<DiscoveryRequest>::default())
                    .max_decoding_message_size(MAX_REQUEST_BYTES);
                Ok(grpc.streaming(Sotw(engine), req).await)
            }),
            DELTA_PATH => Box::pin(async move {
                let _ = std::marker::PhantomData::<DeltaDiscoveryRequest>;
                Ok(Status::unimplemented("delta xDS is not served yet: bootstrap with api_type GRPC").into_http())
            }),
            _ => Box::pin(async move { Ok(Status::unimplemented("no such method").into_http()) }),
        }
    }
}
