//! The ADS gRPC service, written by hand so responses go out pre-encoded.
//!
//! envoy-types' generated server hard-codes the prost codec, which would
//! re-encode every response per stream. This service reads requests as
//! whole messages ([`RequestMessages`], which keeps no buffer between
//! requests), reads them into requests that skip what a stream no longer
//! needs (`sotw::request`, `delta::request`), and answers with its own body
//! ([`ResponseStreamBody`]) that hands the shared response bytes to h2
//! without copying. It runs one task per stream: the task owns the stream's
//! protocol state, reads requests, serves pushes from its mailbox in the
//! [`PushQueue`](crate::push::PushQueue), and writes into a small bounded
//! channel. Client requests are served before pushes; a client that stops
//! reading blocks only its own task, while pushes for it merge in its slot.
//!
//! A push is in flight until the client has answered every response it
//! carried: the next push waits for those ACKs (or NACKs), merging in the
//! mailbox meanwhile. Each stream therefore gets at most one push per round
//! trip, so when the server or its clients are short of CPU, changes merge
//! into fewer, larger pushes instead of queueing responses (and the ACKs
//! they draw, each repeating the node and every watched name) faster than
//! they can be handled. A client that does not answer within
//! [`ANSWER_WAIT`] gets its next push anyway.
//!
//! Both methods run that same task: [`Protocol`] is what differs between a
//! SotW stream ([`Connection`]) and a delta stream ([`DeltaConnection`]).

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DiscoveryRequest};
use futures::future::BoxFuture;
use tokio::sync::mpsc;
use tonic::Status;
use tonic::body::Body;
use tonic::server::NamedService;
use tracing::Instrument;

use super::api::{self, ApiRequest};
use super::delta::{DeltaConnection, DeltaRequest, DeltaResponse};
use super::sotw::{Connection, OutgoingResponse, SotwRequest};
use super::stream::admission::{Admission, AdmissionRate, FIRST_REQUEST_HOLD, Unanswered};
use super::stream::authorize::{self, Refusal};
use super::stream::bodies::BodyCache;
use super::stream::body::EndStatus;
use super::stream::body::{Framed, ResponseStreamBody};
use super::stream::budget::{BUDGET_WAIT, DEFAULT_BUDGET_BYTES, PARTIAL_TIMEOUT, RequestBudget};
use super::stream::buffers;
use super::stream::connection::ConnectionCore;
use super::stream::drain::Drain;
use super::stream::messages::{self, RequestMessages};
use super::stream::peer::{ConnectionContext, TokenAuthenticator, Transport};
use super::stream::published::Published;
use super::stream::recorder::StreamRecorder;
use super::stream::request::{RequestError, StreamNode};
use super::stream::status::{StatusBoard, StreamStatus};
use crate::engine::PushEngine;
use crate::model::{Identity, Proxy};
use crate::push::{ConnectionHandle, PendingPush};
use crate::text::Shown;

/// gRPC service name.
pub const SERVICE_NAME: &str = "envoy.service.discovery.v3.AggregatedDiscoveryService";
const SOTW_PATH: &str = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources";
const DELTA_PATH: &str = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources";

/// Largest request accepted by default: 4 MiB, istiod's default
/// (`ISTIO_GPRC_MAXRECVMSGSIZE`). Envoy's SotW EDS requests list every
/// watched cluster (about 50 bytes each: 80,000 clusters fit), and its gRPC
/// client has no limit of its own; a mesh whose proxies watch more raises
/// `--max-request-bytes`. A request costs about twelve times its size while
/// it is handled (a list of names is interned, sorted and indexed: perf.md).
pub const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;

/// What the server lets its streams take.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StreamLimits {
    /// How fast new streams start.
    pub admission: AdmissionRate,
    /// Streams that may be unanswered (arrived, first request not yet
    /// handled) at once; a new connection waits for one of these places
    /// before it is served. `None`: no bound
    /// ([`admission`](super::stream::admission)).
    pub max_unanswered: Option<u32>,
    /// Largest request message.
    pub max_request_bytes: usize,
    /// Request bytes all streams together may be receiving or handling.
    pub request_budget_bytes: usize,
    /// How long a request waits for room in that budget before it is refused.
    pub budget_wait: Duration,
    /// How long a begun request may take to arrive.
    pub partial_timeout: Duration,
}

impl Default for StreamLimits {
    /// No admission pacing (tests and benches open streams as fast as they
    /// like); the default request limits. `meshpush serve` sets its own.
    fn default() -> Self {
        StreamLimits {
            admission: AdmissionRate::UNLIMITED,
            max_unanswered: None,
            max_request_bytes: MAX_REQUEST_BYTES,
            request_budget_bytes: DEFAULT_BUDGET_BYTES,
            budget_wait: BUDGET_WAIT,
            partial_timeout: PARTIAL_TIMEOUT,
        }
    }
}

/// Responses buffered per stream before its task waits for the client.
pub const STREAM_BUFFER: usize = 4;

/// Longest a push waits for the client to answer the previous one. Envoy
/// answers every response; this only bounds the wait on a client that
/// does not (it then gets a push per `ANSWER_WAIT`, not none).
pub const ANSWER_WAIT: Duration = Duration::from_secs(10);

/// The ADS service: every stream of the server, SotW and delta.
#[derive(Debug, Clone)]
pub struct AdsService {
    shared: Arc<Shared>,
}

/// What every stream of one server shares.
#[derive(Debug)]
struct Shared {
    engine: Arc<PushEngine>,
    bodies: BodyCache,
    statuses: Arc<StatusBoard>,
    admission: Arc<Admission>,
    budget: RequestBudget,
    max_request_bytes: usize,
}

impl AdsService {
    /// A service over `engine`, with the default [`StreamLimits`].
    pub fn new(engine: Arc<PushEngine>) -> AdsService {
        AdsService::with_limits(engine, StreamLimits::default())
    }

    /// A service over `engine` whose streams live within `limits`.
    pub fn with_limits(engine: Arc<PushEngine>, limits: StreamLimits) -> AdsService {
        AdsService {
            shared: Arc::new(Shared {
                engine: engine.clone(),
                bodies: BodyCache::new(),
                statuses: Arc::new(StatusBoard::default()),
                admission: Arc::new(Admission::new(
                    limits.admission,
                    limits.max_unanswered,
                    engine.metrics().streams_unanswered.clone(),
                )),
                budget: RequestBudget::new(limits.request_budget_bytes)
                    .with_timeouts(limits.budget_wait, limits.partial_timeout),
                max_request_bytes: limits.max_request_bytes,
            }),
        }
    }

    /// The admission of new streams, whose places the xDS ports' new
    /// connections wait for.
    pub fn admission(&self) -> Arc<Admission> {
        self.shared.admission.clone()
    }

    /// The request budget the streams share.
    pub fn budget(&self) -> &RequestBudget {
        &self.shared.budget
    }

    /// The engine the streams are pushed from.
    pub fn engine(&self) -> &Arc<PushEngine> {
        &self.shared.engine
    }

    /// Every open stream's status, for the admin endpoints.
    pub fn statuses(&self) -> &Arc<StatusBoard> {
        &self.shared.statuses
    }

    /// The response bodies shared by the streams.
    pub fn bodies(&self) -> &BodyCache {
        &self.shared.bodies
    }
}

impl NamedService for AdsService {
    const NAME: &'static str = SERVICE_NAME;
}

/// One stream's protocol state machine, SotW or delta: what the stream
/// task drives with requests and pushes.
pub trait Protocol: Send + Sized + 'static {
    /// A request, as the stream reads it.
    type Request: Default + Send + 'static;
    /// A response on its way to the stream.
    type Response: Framed + Send + 'static;
    /// The request's `node` field, read in a stream's first request only.
    const NODE_FIELD: u32;
    /// A new stream's state.
    fn open(id: u64, proxy: Arc<Proxy>) -> Self;
    /// Reads a request message, and its node when `first` (a stream's first
    /// request; Envoy repeats the node in every request after).
    fn read(message: bytes::Bytes, first: bool) -> Result<(Self::Request, Option<StreamNode>), RequestError>;
    /// Gives a handled request's buffer back for reuse ([`buffers`]).
    fn recycle(req: Self::Request);
    /// The type a request is about.
    fn type_url(req: &Self::Request) -> &str;
    /// Handles one request; returns the responses to send, in order.
    fn on_request(&mut self, view: &Published<'_>, req: &Self::Request) -> Vec<Self::Response>;
    /// Handles a push from the engine; returns the responses, in order.
    fn on_push(&mut self, view: &Published<'_>, push: &PendingPush) -> Vec<Self::Response>;
    /// What the stream keeps whichever its protocol.
    fn core(&self) -> &ConnectionCore;
    /// The request as an MCP client's stream reads it, if the protocol
    /// serves MCP clients (state of the world does; delta does not).
    fn api_request(req: Self::Request) -> Option<ApiRequest>;
}

impl Protocol for Connection {
    type Request = SotwRequest;
    type Response = OutgoingResponse;
    const NODE_FIELD: u32 = 2;
    fn open(id: u64, proxy: Arc<Proxy>) -> Self {
        Connection::new(id, proxy)
    }
    fn read(message: bytes::Bytes, first: bool) -> Result<(SotwRequest, Option<StreamNode>), RequestError> {
        SotwRequest::read(message, first)
    }
    fn recycle(req: SotwRequest) {
        buffers::recycle(req.resource_names.into_message());
    }
    fn type_url(req: &SotwRequest) -> &str {
        &req.type_url
    }
    fn on_request(&mut self, view: &Published<'_>, req: &SotwRequest) -> Vec<OutgoingResponse> {
        Connection::on_request(self, view, req)
    }
    fn on_push(&mut self, view: &Published<'_>, push: &PendingPush) -> Vec<OutgoingResponse> {
        Connection::on_push(self, view, push)
    }
    fn core(&self) -> &ConnectionCore {
        &self.core
    }
    fn api_request(req: SotwRequest) -> Option<ApiRequest> {
        Some(ApiRequest {
            type_url: req.type_url,
            response_nonce: req.response_nonce,
            error: req.error_detail.map(|e| e.message),
        })
    }
}

impl Protocol for DeltaConnection {
    type Request = DeltaRequest;
    type Response = DeltaResponse;
    const NODE_FIELD: u32 = 1;
    fn open(id: u64, proxy: Arc<Proxy>) -> Self {
        DeltaConnection::new(id, proxy)
    }
    fn read(message: bytes::Bytes, first: bool) -> Result<(DeltaRequest, Option<StreamNode>), RequestError> {
        DeltaRequest::read(message, first)
    }
    fn recycle(_: DeltaRequest) {
        // Its message was recycled once read: a delta request keeps no part of it.
    }
    fn type_url(req: &DeltaRequest) -> &str {
        &req.type_url
    }
    fn on_request(&mut self, view: &Published<'_>, req: &DeltaRequest) -> Vec<DeltaResponse> {
        DeltaConnection::on_request(self, view, req)
    }
    fn on_push(&mut self, view: &Published<'_>, push: &PendingPush) -> Vec<DeltaResponse> {
        DeltaConnection::on_push(self, view, push)
    }
    fn core(&self) -> &ConnectionCore {
        &self.core
    }
    fn api_request(_: DeltaRequest) -> Option<ApiRequest> {
        None
    }
}

/// Opens a stream of protocol `P`: waits for its admission slot, reads the
/// first request (it carries the node), refuses the stream if the node is
/// unusable, else starts the stream task and answers with a body fed by it.
async fn open<P: Protocol, B>(ads: AdsService, req: http::Request<B>) -> http::Response<Body>
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
{
    let connection = req.extensions().get::<ConnectionContext>().cloned();
    // Unanswered until its first request is handled (or refused), in the
    // place its connection was admitted with if it is the first stream.
    let mut unanswered = ads.shared.admission.arrive(connection.as_ref().and_then(|c| c.place.take()));
    let peer = connection.as_ref().and_then(|c| c.peer).map(|a| a.to_string()).unwrap_or_default();
    let transport = connection.as_ref().map(|c| c.transport.clone()).unwrap_or_default();
    let tokens = connection.as_ref().and_then(|c| c.tokens.clone());
    let drain = connection.map_or_else(Drain::never, |c| c.drain);
    // Read now: the headers go with `into_body` below. Only a secure-port
    // client without a certificate is asked for its token.
    let authorization = match (&transport, &tokens) {
        (Transport::Mtls { identities }, Some(_)) if identities.is_empty() => {
            req.headers().get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()).map(str::to_owned)
        }
        _ => None,
    };
    let shared = &ads.shared;
    // In arrival order, at the configured rate: a reconnect storm is served
    // a slice at a time, each slice synced before the next is read.
    shared.admission.admit(shared.engine.metrics()).await;
    let undecodable = |e: RequestError| Status::invalid_argument(format!("undecodable request: {e}"));
    let mut messages =
        RequestMessages::new(req.into_body(), shared.max_request_bytes).with_budget(shared.budget.clone());
    let first = {
        let next = futures::StreamExt::next(&mut messages);
        let mut next = std::pin::pin!(next);
        match tokio::time::timeout(FIRST_REQUEST_HOLD, next.as_mut()).await {
            Ok(first) => first,
            // A client that says nothing does not hold the ports closed.
            Err(_) => {
                unanswered.answered();
                next.await
            }
        }
    };
    let (first, node) = match first {
        Some(Ok(message)) => match P::read(message, true) {
            Ok(decoded) => decoded,
            Err(e) => return undecodable(e).into_http(),
        },
        None => return Status::cancelled("stream ended before its first request").into_http(),
        Some(Err(status)) => {
            note_refusal(shared, &status, &peer, None);
            return status.into_http();
        }
    };
    // Envoy repeats the node in every request; only the first one's is read.
    messages.leave_out(P::NODE_FIELD);
    let requests = futures::StreamExt::map(messages, move |m| {
        m.and_then(|m| P::read(m, false).map(|(r, _)| r).map_err(undecodable))
    });
    let node = node.map(Node::from);
    let proxy = match node.as_ref().ok_or(crate::model::NodeError::Missing).and_then(Proxy::from_node) {
        Ok(proxy) => Arc::new(proxy),
        Err(e) => {
            tracing::warn!(%peer, "refused an ADS stream: {e}");
            return Status::invalid_argument(e.to_string()).into_http();
        }
    };
    // As istiod: ztunnel and waypoints are served only where ambient mode is on.
    let ambient = matches!(proxy.kind, crate::model::ProxyKind::Ztunnel | crate::model::ProxyKind::Waypoint);
    if ambient && !shared.engine.snapshot().mesh.ambient.enabled {
        tracing::warn!(%peer, node_id = %Shown(&proxy.id), "refused an ambient proxy: ambient mode is off");
        return Status::failed_precondition(format!(
            "{} requires ambient mode: serve with --enable-ambient (PILOT_ENABLE_AMBIENT=true)",
            if proxy.kind == crate::model::ProxyKind::Ztunnel { "ztunnel" } else { "a waypoint" }
        ))
        .into_http();
    }
    if api::is_api_client(&proxy) {
        return open_api::<P>(&ads, proxy, first, requests, &peer, &transport, tokens.zip(authorization), drain).await;
    }
    if let Transport::Mtls { identities } = &transport
        && let Err(refusal) = authorize_secure(shared, &proxy, identities, tokens.zip(authorization)).await
    {
        shared.engine.metrics().streams_refused.get_or_create(&[("reason", refusal.reason)]).inc();
        tracing::warn!(%peer, node_id = %Shown(&proxy.id), "refused a secure ADS stream: {}", refusal.message);
        return refusal.status().into_http();
    }
    let end = EndStatus::default();
    let rx = spawn::<P>(&ads, proxy, first, requests, peer, end.clone(), drain, unanswered);
    let mut response = http::Response::new(Body::new(ResponseStreamBody::new(rx, end)));
    response.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/grpc"));
    response
}

/// Opens an MCP client's stream (`api`): authorized to the root
/// namespace's identities on the secure port, state of the world only.
#[allow(clippy::too_many_arguments, reason = "one stream's parts, passed once")]
async fn open_api<P: Protocol>(
    ads: &AdsService,
    proxy: Arc<Proxy>,
    first: P::Request,
    requests: impl futures::Stream<Item = Result<P::Request, Status>> + Unpin + Send + 'static,
    peer: &str,
    transport: &Transport,
    token: Option<(Arc<dyn TokenAuthenticator>, String)>,
    drain: Drain,
) -> http::Response<Body> {
    let shared = &ads.shared;
    let Some(first) = P::api_request(first) else {
        return Status::unimplemented(
            "MCP-over-xDS (GENERATOR: api) is served over state-of-the-world ADS (StreamAggregatedResources), as \
             istiod's MCP clients speak it",
        )
        .into_http();
    };
    let proven;
    let identities: &[Identity] = match (transport, token) {
        (Transport::Mtls { identities }, Some((tokens, header))) if identities.is_empty() => {
            match tokens.authenticate(&header).await {
                Ok(found) => {
                    proven = found;
                    &proven
                }
                Err(why) => return refuse(shared, peer, &proxy, authorize::token_refused(why)),
            }
        }
        (Transport::Mtls { identities }, _) => identities,
        _ => &[],
    };
    let root = shared.engine.snapshot().mesh.root_namespace.clone();
    let checked = if identities.is_empty() {
        api::authorize(identities, &root)
    } else {
        authorize::node_identity(&proxy, identities).and_then(|id| api::authorize(std::slice::from_ref(id), &root))
    };
    if let Err(refusal) = checked {
        return refuse(shared, peer, &proxy, refusal);
    }
    tracing::info!(%peer, node_id = %Shown(&proxy.id), "an MCP client connected");
    let (tx, rx) = mpsc::channel(STREAM_BUFFER);
    let end = EndStatus::default();
    let requests = futures::StreamExt::map(requests, |r| {
        r.and_then(|r| P::api_request(r).ok_or_else(|| Status::internal("not a state-of-the-world request")))
    });
    let (engine, ended, peer) = (shared.engine.clone(), end.clone(), peer.to_string());
    tokio::spawn(async move {
        let (reason, failure) = api::serve(engine, proxy, first, requests, tx, drain).await;
        tracing::debug!(%peer, reason = %reason, "MCP client stream ended");
        if let Some(failure) = failure {
            let _ = ended.set(failure);
        }
    });
    let mut response = http::Response::new(Body::new(ResponseStreamBody::new(rx, end)));
    response.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/grpc"));
    response
}

/// Counts, logs and answers a refused secure stream.
fn refuse(shared: &Shared, peer: &str, proxy: &Proxy, refusal: Refusal) -> http::Response<Body> {
    shared.engine.metrics().streams_refused.get_or_create(&[("reason", refusal.reason)]).inc();
    tracing::warn!(%peer, node_id = %Shown(&proxy.id), "refused an ADS stream: {}", refusal.message);
    refusal.status().into_http()
}

/// Whether a secure-port client may be `proxy`
/// ([`authorize`](super::stream::authorize)): it proves who it is with the
/// `identities` of its certificate or, without one, with its bearer token
/// (the connection's authenticator and the `authorization` header). A
/// router's labels are checked against a published snapshot's workloads,
/// so it waits for the first.
async fn authorize_secure(
    shared: &Shared,
    proxy: &Proxy,
    identities: &[Identity],
    token: Option<(Arc<dyn TokenAuthenticator>, String)>,
) -> Result<(), Refusal> {
    let proven;
    let identities = match token {
        Some((tokens, header)) if identities.is_empty() => {
            proven = tokens.authenticate(&header).await.map_err(authorize::token_refused)?;
            &proven[..]
        }
        _ => identities,
    };
    let identity = authorize::node_identity(proxy, identities)?;
    if matches!(proxy.kind, crate::model::ProxyKind::Router | crate::model::ProxyKind::Waypoint)
        && !proxy.labels.is_empty()
    {
        shared.engine.wait_ready().await;
        authorize::gateway_labels(proxy, identity, &shared.engine.snapshot().workloads)?;
    }
    Ok(())
}

/// Starts the task that serves one SotW stream of `proxy`, whose first
/// request was `first`; returns the receiver of its responses (at most
/// [`STREAM_BUFFER`] buffered: a reader that stops only stalls this stream).
///
/// The gRPC service calls this for every stream; benches and tests call it
/// directly to drive the very same stream logic over in-memory channels.
pub fn spawn_stream(
    ads: &AdsService,
    proxy: Arc<Proxy>,
    first: DiscoveryRequest,
    requests: impl futures::Stream<Item = Result<DiscoveryRequest, Status>> + Unpin + Send + 'static,
    peer: String,
) -> mpsc::Receiver<Box<OutgoingResponse>> {
    let requests = futures::StreamExt::map(requests, |r| r.map(SotwRequest::from));
    let unanswered = ads.shared.admission.arrive(None);
    spawn::<Connection>(ads, proxy, first.into(), requests, peer, EndStatus::default(), Drain::never(), unanswered)
}

/// [`spawn_stream`] for a delta stream.
pub fn spawn_delta_stream(
    ads: &AdsService,
    proxy: Arc<Proxy>,
    first: DeltaDiscoveryRequest,
    requests: impl futures::Stream<Item = Result<DeltaDiscoveryRequest, Status>> + Unpin + Send + 'static,
    peer: String,
) -> mpsc::Receiver<Box<DeltaResponse>> {
    let requests = futures::StreamExt::map(requests, |r| r.map(DeltaRequest::from));
    let unanswered = ads.shared.admission.arrive(None);
    spawn::<DeltaConnection>(ads, proxy, first.into(), requests, peer, EndStatus::default(), Drain::never(), unanswered)
}

#[allow(clippy::too_many_arguments, reason = "one stream's parts, passed once")]
fn spawn<P: Protocol>(
    ads: &AdsService,
    proxy: Arc<Proxy>,
    mut first: P::Request,
    mut requests: impl futures::Stream<Item = Result<P::Request, Status>> + Unpin + Send + 'static,
    peer: String,
    end: EndStatus,
    mut drain: Drain,
    mut unanswered: Unanswered,
) -> mpsc::Receiver<Box<P::Response>> {
    let (tx, rx) = mpsc::channel(STREAM_BUFFER);
    let shared = ads.shared.clone();
    let handle = shared.engine.queue().register(proxy.clone());
    let status = shared.statuses.open(handle.id);
    let span = tracing::info_span!("ads", conn_id = handle.id, node_id = %Shown(&proxy.id));
    tokio::spawn(
        async move {
            tracing::debug!(%peer, "stream connected");
            if !shared.engine.is_ready() {
                tracing::debug!("waiting for the first snapshot before answering");
                shared.engine.wait_ready().await;
            }
            // Lent, not moved: an async fn's arguments would be kept twice
            // in this task's state, once here and once in `serve_stream`'s
            // (and a variable moved into a new local keeps its place here
            // too). The first request is taken out of its place.
            // `tx` so outlives `serve_stream` and is dropped when this task
            // ends, after `end` is set below: the body reads `end` once the
            // channel closes, so it always finds the status set.
            let parts = StreamParts {
                first: &mut first,
                requests: &mut requests,
                tx: &tx,
                drain: &mut drain,
                unanswered: &mut unanswered,
            };
            let (reason, failure) = serve_stream::<P>(&shared, proxy, &handle, &status, parts).await;
            shared.engine.queue().unregister(handle.id);
            shared.statuses.close(handle.id);
            match failure {
                // The trailers carry why (the channel to the body is gone by now).
                Some(failure) => {
                    if failure.code() == tonic::Code::Unavailable {
                        tracing::debug!(reason = %reason, "stream ended: its connection was drained");
                    } else if !note_refusal(&shared, &failure, &peer, Some(handle.id)) {
                        tracing::info!(reason = %reason, "stream ended on a bad request");
                    }
                    let _ = end.set(failure);
                }
                None => tracing::debug!(reason = %reason, "stream closed"),
            }
        }
        .instrument(span),
    );
    rx
}

/// Counts and logs a request refused for its size or for the request
/// budget; returns whether `status` was such a refusal.
fn note_refusal(shared: &Shared, status: &Status, peer: &str, conn_id: Option<u64>) -> bool {
    let Some(reason) = messages::refusal_reason(status) else { return false };
    shared.engine.metrics().requests_refused.get_or_create(&[("reason", reason)]).inc();
    tracing::warn!(
        %peer,
        conn_id,
        budget_free = shared.budget.available(),
        "refused an ADS request (RESOURCE_EXHAUSTED): {}",
        status.message()
    );
    true
}

/// What a stream task lends [`serve_stream`] for the stream's life.
struct StreamParts<'a, Q, R, T> {
    /// The first request, taken (left as a default) when it is served.
    first: &'a mut Q,
    requests: &'a mut R,
    tx: &'a mpsc::Sender<Box<T>>,
    drain: &'a mut Drain,
    unanswered: &'a mut Unanswered,
}

/// Serves one stream until the client goes away or its connection is
/// drained; returns why it ended, and the status to end it with when a
/// request could not be read or the connection was drained.
///
/// The stream's protocol state is made here, not passed in: it lives in
/// this future's state once (an argument would be kept twice, in the
/// caller's state and in this one's, and it is most of the task's size).
async fn serve_stream<P: Protocol>(
    shared: &Shared,
    proxy: Arc<Proxy>,
    handle: &Arc<ConnectionHandle>,
    status: &parking_lot::Mutex<StreamStatus>,
    parts: StreamParts<'_, P::Request, impl futures::Stream<Item = Result<P::Request, Status>> + Unpin, P::Response>,
) -> (String, Option<Status>) {
    let StreamParts { first, requests, tx, drain, unanswered } = parts;
    let engine = &shared.engine;
    let mut conn = P::open(handle.id, proxy);
    let mut pending = Some(std::mem::take(first));
    let mut recorder = StreamRecorder::new(engine.metrics().clone());
    // When the last responses were handed to the stream: a push waits for
    // their answers, for at most ANSWER_WAIT after that.
    let mut last_sent = tokio::time::Instant::now();
    loop {
        let responses = if let Some(req) = pending.take() {
            recorder.serving_type(conn.core(), P::type_url(&req));
            let ctx = engine.snapshot();
            let responses =
                conn.on_request(&Published { ctx: &ctx, cache: engine.cache(), bodies: &shared.bodies }, &req);
            P::recycle(req);
            responses
        } else {
            let answer_deadline = last_sent + ANSWER_WAIT;
            let may_push = conn.core().answered() || tokio::time::Instant::now() >= answer_deadline;
            tokio::select! {
                biased;
                msg = futures::StreamExt::next(requests) => match msg {
                    Some(Ok(req)) => { pending = Some(req); continue; }
                    None => return ("client closed the stream".into(), None),
                    Some(Err(status)) => return (format!("stream error: {}", status.message()), Some(status)),
                },
                reason = drain.drained() => {
                    return (reason.message().into(), Some(Status::unavailable(reason.message())));
                }
                _ = tokio::time::sleep_until(answer_deadline), if !may_push => continue,
                push = handle.mailbox.take(), if may_push => {
                    if !conn.core().answered() {
                        engine.metrics().unanswered_pushes.inc();
                        tracing::warn!(wait = ?ANSWER_WAIT, "the client has not answered the last response; pushing anyway");
                    }
                    recorder.serving_push(conn.core(), &push);
                    let ctx = engine.snapshot();
                    conn.on_push(&Published { ctx: &ctx, cache: engine.cache(), bodies: &shared.bodies }, &push)
                }
            }
        };
        if let (Some(scope), Some(inbound)) = (conn.core().scope(), conn.core().inbound()) {
            engine.queue().set_scope(handle, scope.id, inbound);
        }
        let sent_bytes: usize = responses.iter().map(Framed::wire_len).sum();
        let sent_any = !responses.is_empty();
        for response in responses {
            if tx.send(Box::new(response)).await.is_err() {
                return ("response channel closed".into(), None);
            }
        }
        if sent_any {
            // The answer wait starts once the client could read them.
            last_sent = tokio::time::Instant::now();
        }
        recorder.finish(conn.core(), sent_bytes);
        status.lock().update(conn.core());
        // The first request has been answered (later passes: no-op).
        unanswered.answered();
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
        let ads = self.clone();
        match req.uri().path() {
            SOTW_PATH => Box::pin(async move { Ok(open::<Connection, B>(ads, req).await) }),
            DELTA_PATH => Box::pin(async move { Ok(open::<DeltaConnection, B>(ads, req).await) }),
            _ => Box::pin(async move { Ok(Status::unimplemented("no such method").into_http()) }),
        }
    }
}
