//! Envoy's ADS stream, proxied to meshpush over mTLS.
//!
//! Envoy dials the agent's `XDS` socket in plaintext (a Unix socket only
//! its pod can reach); the agent opens the matching stream to meshpush's
//! secure port with the workload certificate, and passes messages both
//! ways. When the upstream stream ends — meshpush restarted, the connection
//! dropped, a certificate expired — Envoy's stream stays open: the agent
//! dials again with backoff and restores Envoy's subscriptions on the new
//! stream ([`super::subscriptions`]), so Envoy sees new responses, never a
//! disconnect. Envoy keeps serving the config it has meanwhile, as it
//! would when reconnecting itself.
//!
//! With PCDS on ([`AdsProxy::with_trust_bundle`]), the agent asks for PCDS
//! itself once Envoy has first asked for listeners, as pilot-agent does.
//! It keeps that subscription across upstream streams like Envoy's own,
//! answers its responses itself (an ACK, or a NACK for one it cannot read)
//! and hands their roots to SDS ([`super::trust_bundle`]); Envoy never sees
//! them.
//!
//! Invariants: requests reach meshpush in the order Envoy sent them, after
//! the requests that restore a new stream; each Envoy stream has its own
//! upstream stream; one Envoy stream ending ends its upstream stream.

use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::google::protobuf::Any;
use envoy_types::pb::google::rpc;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use tokio::sync::{Notify, mpsc, watch};
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::{ReceiverStream, UnboundedReceiverStream};
use tonic::{Request, Response, Status, Streaming};

use super::ResponseStream;
use super::subscriptions::{Delta, Sotw, Subscriptions};
use super::trust_bundle::{PCDS_TYPE, TrustBundle};
use super::upstream::Upstream;
use crate::resource::TypeUrl;
use crate::text::Shown;

/// The first wait before dialling meshpush again; it doubles up to
/// [`MAX_BACKOFF`] while dials fail, and starts over once a stream answers.
const FIRST_BACKOFF: Duration = Duration::from_millis(200);

/// The longest wait between dials.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Responses buffered toward Envoy before the upstream stream waits.
const TO_ENVOY_BUFFER: usize = 16;

/// The ADS service Envoy connects to.
#[derive(Debug, Clone)]
pub struct AdsProxy {
    upstream: Upstream,
    /// Where PCDS's roots go, when the agent asks for PCDS.
    trust_bundle: Option<Arc<watch::Sender<Arc<TrustBundle>>>>,
}

impl AdsProxy {
    /// A proxy to `upstream`.
    pub fn new(upstream: Upstream) -> AdsProxy {
        AdsProxy { upstream, trust_bundle: None }
    }

    /// This proxy, asking for PCDS on every stream and sending the roots
    /// it brings down `bundle`.
    pub fn with_trust_bundle(self, bundle: watch::Sender<Arc<TrustBundle>>) -> AdsProxy {
        AdsProxy { trust_bundle: Some(Arc::new(bundle)), ..self }
    }

    /// The tonic service, taking messages of any size from trusted Envoy.
    pub fn into_server(self) -> AggregatedDiscoveryServiceServer<AdsProxy> {
        AggregatedDiscoveryServiceServer::new(self)
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX)
    }

    /// Starts proxying one Envoy stream; the stream of responses to it.
    fn start<S: Protocol>(&self, from_envoy: Streaming<S::Request>) -> ReceiverStream<Result<S::Response, Status>> {
        let (to_envoy, rx) = mpsc::channel(TO_ENVOY_BUFFER);
        let (done, envoy_done) = watch::channel(false);
        let shared = Arc::new(Shared::<S> {
            state: Mutex::new(StreamState { subscriptions: S::default(), open: None, pcds: false }),
            asked: Notify::new(),
            pcds: self.trust_bundle.is_some(),
        });
        tokio::spawn(read_envoy(from_envoy, shared.clone(), done));
        let session = Session {
            shared,
            to_envoy,
            envoy_done,
            upstream: self.upstream.clone(),
            trust_bundle: self.trust_bundle.clone(),
        };
        tokio::spawn(session.run());
        ReceiverStream::new(rx)
    }
}

/// One ADS protocol as the proxy drives it: its record of Envoy's stream,
/// the upstream stream it opens, and the messages the agent reads and
/// writes itself (PCDS).
trait Protocol: Subscriptions {
    /// Opens the upstream stream that sends `requests`.
    fn open(
        client: AggregatedDiscoveryServiceClient<tonic::transport::Channel>,
        requests: UnboundedReceiverStream<Self::Request>,
    ) -> BoxFuture<'static, Result<Streaming<Self::Response>, Status>>;

    /// The type a request asks for.
    fn request_type(request: &Self::Request) -> &str;

    /// The type a response carries.
    fn response_type(response: &Self::Response) -> &str;

    /// A wildcard subscription to `type_url`.
    fn subscribe(type_url: &str) -> Self::Request;

    /// The ACK of `response`, or its NACK with `error`.
    fn answer(response: &Self::Response, error: Option<String>) -> Self::Request;

    /// The resources a response carries.
    fn resources(response: &Self::Response) -> Vec<&Any>;
}

/// A NACK's error detail.
fn nack(message: String) -> rpc::Status {
    rpc::Status { code: tonic::Code::InvalidArgument as i32, message, ..Default::default() }
}

impl Protocol for Sotw {
    fn open(
        mut client: AggregatedDiscoveryServiceClient<tonic::transport::Channel>,
        requests: UnboundedReceiverStream<DiscoveryRequest>,
    ) -> BoxFuture<'static, Result<Streaming<DiscoveryResponse>, Status>> {
        Box::pin(async move { Ok(client.stream_aggregated_resources(requests).await?.into_inner()) })
    }

    fn request_type(request: &DiscoveryRequest) -> &str {
        &request.type_url
    }

    fn response_type(response: &DiscoveryResponse) -> &str {
        &response.type_url
    }

    fn subscribe(type_url: &str) -> DiscoveryRequest {
        DiscoveryRequest { type_url: type_url.to_string(), ..Default::default() }
    }

    fn answer(response: &DiscoveryResponse, error: Option<String>) -> DiscoveryRequest {
        DiscoveryRequest {
            type_url: response.type_url.clone(),
            version_info: response.version_info.clone(),
            response_nonce: response.nonce.clone(),
            error_detail: error.map(nack),
            ..Default::default()
        }
    }

    fn resources(response: &DiscoveryResponse) -> Vec<&Any> {
        response.resources.iter().collect()
    }
}

impl Protocol for Delta {
    fn open(
        mut client: AggregatedDiscoveryServiceClient<tonic::transport::Channel>,
        requests: UnboundedReceiverStream<DeltaDiscoveryRequest>,
    ) -> BoxFuture<'static, Result<Streaming<DeltaDiscoveryResponse>, Status>> {
        Box::pin(async move { Ok(client.delta_aggregated_resources(requests).await?.into_inner()) })
    }

    fn request_type(request: &DeltaDiscoveryRequest) -> &str {
        &request.type_url
    }

    fn response_type(response: &DeltaDiscoveryResponse) -> &str {
        &response.type_url
    }

    fn subscribe(type_url: &str) -> DeltaDiscoveryRequest {
        DeltaDiscoveryRequest { type_url: type_url.to_string(), ..Default::default() }
    }

    fn answer(response: &DeltaDiscoveryResponse, error: Option<String>) -> DeltaDiscoveryRequest {
        DeltaDiscoveryRequest {
            type_url: response.type_url.clone(),
            response_nonce: response.nonce.clone(),
            error_detail: error.map(nack),
            ..Default::default()
        }
    }

    fn resources(response: &DeltaDiscoveryResponse) -> Vec<&Any> {
        response.resources.iter().filter_map(|r| r.resource.as_ref()).collect()
    }
}

#[tonic::async_trait]
impl AggregatedDiscoveryService for AdsProxy {
    type StreamAggregatedResourcesStream = ResponseStream<DiscoveryResponse>;
    type DeltaAggregatedResourcesStream = ResponseStream<DeltaDiscoveryResponse>;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Self::StreamAggregatedResourcesStream>, Status> {
        Ok(Response::new(Box::pin(self.start::<Sotw>(request.into_inner()))))
    }

    async fn delta_aggregated_resources(
        &self,
        request: Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<Response<Self::DeltaAggregatedResourcesStream>, Status> {
        Ok(Response::new(Box::pin(self.start::<Delta>(request.into_inner()))))
    }
}

/// What an Envoy stream's two tasks share: its subscriptions, and the
/// upstream stream's number and sender while one is open.
struct Shared<S: Subscriptions> {
    state: Mutex<StreamState<S>>,
    /// Signalled on Envoy's first request: the upstream stream starts then,
    /// when there is a node to send.
    asked: Notify,
    /// Whether the agent asks for PCDS.
    pcds: bool,
}

struct StreamState<S: Subscriptions> {
    subscriptions: S,
    /// The open upstream stream's number and request sender.
    open: Option<(u64, mpsc::UnboundedSender<S::Request>)>,
    /// Whether the agent has subscribed to PCDS on this Envoy stream.
    pcds: bool,
}

impl<S: Subscriptions> StreamState<S> {
    /// Records `request` (Envoy's, or the agent's own) and sends it
    /// upstream when a stream is open (else the next stream's restoring
    /// requests carry it).
    fn send(&mut self, request: S::Request) {
        let session = self.open.as_ref().map_or(0, |(s, _)| *s);
        let forward = self.subscriptions.on_request(request, session);
        if let (Some(request), Some((_, sender))) = (forward, self.open.as_ref()) {
            // A closed sender is a stream that just ended: the next one's
            // restoring requests carry this one.
            let _ = sender.send(request);
        }
    }
}

/// Reads Envoy's requests: records each, and sends it upstream when a
/// stream is open (else the next stream's restoring requests carry it).
/// Sets `done` when Envoy's side ends.
/// Once Envoy first asks for listeners, the agent subscribes to PCDS, when
/// it asks for PCDS at all.
async fn read_envoy<S: Protocol>(
    mut from_envoy: Streaming<S::Request>,
    shared: Arc<Shared<S>>,
    done: watch::Sender<bool>,
) {
    let _done = scopeguard::guard(done, |done| {
        done.send_replace(true);
    });
    while let Some(request) = from_envoy.next().await {
        let Ok(request) = request else { break };
        let mut state = shared.state.lock();
        let first = state.subscriptions.is_empty();
        let listeners = S::request_type(&request) == TypeUrl::Listener.as_str();
        state.send(request);
        if shared.pcds && listeners && !state.pcds {
            state.pcds = true;
            state.send(S::subscribe(PCDS_TYPE));
        }
        drop(state);
        if first {
            shared.asked.notify_one();
        }
    }
}

/// One Envoy stream's upstream side.
struct Session<S: Protocol> {
    shared: Arc<Shared<S>>,
    to_envoy: mpsc::Sender<Result<S::Response, Status>>,
    /// True once Envoy's side of the stream has ended.
    envoy_done: watch::Receiver<bool>,
    upstream: Upstream,
    /// Where PCDS's roots go.
    trust_bundle: Option<Arc<watch::Sender<Arc<TrustBundle>>>>,
}

impl<S: Protocol> Session<S> {
    /// Resolves once Envoy's stream is gone, either way.
    async fn gone(&self) {
        let mut done = self.envoy_done.clone();
        tokio::select! {
            () = self.to_envoy.closed() => {}
            _ = done.wait_for(|done| *done) => {}
        }
    }

    /// Dials, restores and relays until Envoy's stream ends.
    async fn run(self) {
        tokio::select! {
            () = self.shared.asked.notified() => {}
            () = self.gone() => return,
        }
        let mut backoff = FIRST_BACKOFF;
        let mut session = 0u64;
        loop {
            session += 1;
            let ended = tokio::select! {
                ended = self.relay(session) => ended,
                () = self.gone() => return,
            };
            {
                let mut state = self.shared.state.lock();
                state.open = None;
                state.subscriptions.end_session();
            }
            match ended {
                Ended::Envoy => return,
                Ended::Upstream { answered, why } => {
                    if answered {
                        backoff = FIRST_BACKOFF;
                    }
                    tracing::warn!(
                        upstream = %self.upstream.address(),
                        "the ADS stream to meshpush ended ({why}); dialling again in {backoff:?}, Envoy's stream stays open"
                    );
                }
            }
            tokio::select! {
                () = tokio::time::sleep(jittered(backoff)) => {}
                () = self.gone() => return,
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// One upstream stream: dial, restore, relay responses to Envoy.
    async fn relay(&self, session: u64) -> Ended {
        let channel = match self.upstream.channel().await {
            Ok(channel) => channel,
            Err(e) => return Ended::Upstream { answered: false, why: format!("dial: {}", error_chain(&e)) },
        };
        let (sender, requests) = mpsc::unbounded_channel();
        {
            let mut state = self.shared.state.lock();
            for request in state.subscriptions.replay() {
                let _ = sender.send(request);
            }
            state.open = Some((session, sender));
        }
        let client = AggregatedDiscoveryServiceClient::new(channel).max_decoding_message_size(usize::MAX);
        let mut responses = match S::open(client, UnboundedReceiverStream::new(requests)).await {
            Ok(responses) => responses,
            Err(status) => return Ended::Upstream { answered: false, why: status_text(&status) },
        };
        let mut answered = false;
        loop {
            let response = match responses.next().await {
                Some(Ok(response)) => response,
                Some(Err(status)) => return Ended::Upstream { answered, why: status_text(&status) },
                None => return Ended::Upstream { answered, why: "meshpush closed it".into() },
            };
            answered = true;
            let response = self.shared.state.lock().subscriptions.on_response(response, session);
            if S::response_type(&response) == PCDS_TYPE
                && let Some(bundle) = &self.trust_bundle
            {
                let error = take_trust_bundle(bundle, &S::resources(&response)).err();
                self.shared.state.lock().send(S::answer(&response, error));
                continue;
            }
            if self.to_envoy.send(Ok(response)).await.is_err() {
                return Ended::Envoy;
            }
        }
    }
}

/// Hands the roots of a PCDS response to SDS; why it cannot be read.
fn take_trust_bundle(bundle: &watch::Sender<Arc<TrustBundle>>, resources: &[&Any]) -> Result<(), String> {
    match TrustBundle::from_pcds(resources) {
        Ok(Some(new)) => {
            bundle.send_if_modified(|held| {
                if **held == new {
                    return false;
                }
                tracing::info!("the mesh's trust bundle changed (PCDS): Envoy is sent the new ROOTCA");
                *held = Arc::new(new);
                true
            });
            Ok(())
        }
        // An empty response is ignored, as pilot-agent ignores it.
        Ok(None) => Ok(()),
        Err(e) => {
            tracing::warn!("a PCDS response the agent cannot read, refused (the roots held stay): {e}");
            Err(e)
        }
    }
}

/// How an upstream stream ended.
enum Ended {
    /// Envoy's stream is gone: nothing more to do.
    Envoy,
    /// meshpush's side ended or could not be opened.
    Upstream {
        /// Whether it answered anything first.
        answered: bool,
        /// Why, for the log.
        why: String,
    },
}

/// `backoff`, plus or minus a fifth, so agents restarted together do not
/// dial together.
fn jittered(backoff: Duration) -> Duration {
    backoff.mul_f64(0.8 + 0.4 * fastrand::f64())
}

fn status_text(status: &Status) -> String {
    format!("{:?}: {}", status.code(), Shown(status.message()))
}

fn error_chain(error: &dyn std::error::Error) -> String {
    crate::text::shown(&crate::text::error_chain(error)).into_owned()
}
