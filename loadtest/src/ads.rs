//! Simulated Envoys' streams: one task per ADS stream, many streams per
//! HTTP/2 connection, whichever the protocol.
//!
//! This module owns what does not depend on the protocol: the connections
//! (Envoy's flow-control windows), the stream task ([`run_stream`]: first
//! request queued before the call opens, responses handed to the simulator,
//! the `initial_fetch_timeout` timer, stopping) over [`crate::grpc`]'s
//! framing (pre-encoded requests out, responses undecoded), and the state every
//! stream shares ([`Shared`]). What a stream says on the wire is its
//! simulator's: `sotw` on `StreamAggregatedResources`, `delta` on
//! `DeltaAggregatedResources` (a [`Protocol`] each); what Envoy does alike
//! on both is `envoy`'s. Nothing is abbreviated to spare the harness or
//! the server: every request carries the node, every response is ACKed.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{mpsc, watch};
use tonic::Status;
use tonic::transport::{Channel, Endpoint};

use crate::envoy::Envoy;
use crate::frames::EnvoyFrames;
use crate::grpc::{self, RequestBody, ResponseMessages};
use crate::track::{NameSets, Stats, SyncState, Tracker, XdsType};
use crate::{delta, sotw, wire};

/// The HTTP/2 windows Envoy 1.40 opens on its xDS connection (observed:
/// `SETTINGS_INITIAL_WINDOW_SIZE` 16 MiB, and a connection window raised
/// to 24 MiB).
const STREAM_WINDOW: u32 = 16 * 1024 * 1024;
const CONNECTION_WINDOW: u32 = 24 * 1024 * 1024;

/// Requests queued per stream before its task waits.
const REQUEST_QUEUE: usize = 8;

/// Which ADS method the simulated Envoys use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// State of the world: `StreamAggregatedResources` (Envoy's `api_type: GRPC`).
    Sotw,
    /// Incremental: `DeltaAggregatedResources` (Envoy's `api_type: DELTA_GRPC`).
    Delta,
}

impl Protocol {
    /// `sotw` or `delta`.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Sotw => "sotw",
            Protocol::Delta => "delta",
        }
    }

    /// The gRPC method.
    pub fn method(self) -> &'static str {
        match self {
            Protocol::Sotw => "StreamAggregatedResources",
            Protocol::Delta => "DeltaAggregatedResources",
        }
    }

    fn path(self) -> &'static str {
        match self {
            Protocol::Sotw => "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources",
            Protocol::Delta => "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources",
        }
    }

    /// The request's `node` field.
    pub(crate) fn node_field(self) -> u32 {
        match self {
            Protocol::Sotw => wire::SOTW_NODE_FIELD,
            Protocol::Delta => wire::DELTA_NODE_FIELD,
        }
    }
}

/// State every stream shares.
#[derive(Debug)]
pub struct Shared {
    /// Counters.
    pub stats: Stats,
    /// Sync progress.
    pub sync: SyncState,
    /// Watched name lists.
    pub names: NameSets,
    /// Changes being looked for.
    pub tracker: Tracker,
    /// Set to `true` to end every stream.
    pub stop: watch::Sender<bool>,
    /// The encoded `Node` fields every simulated Envoy shares.
    pub node_common: Bytes,
    /// Delta streams' resource → wanted-name maps, interned.
    pub(crate) deps: delta::DepsTable,
}

impl Shared {
    /// Fresh state; the sync clock starts now. `node_common` is the encoded
    /// `Node` fields every stream sends after its own (see [`crate::mesh::Shape::node_common`]).
    pub fn new(node_common: Bytes) -> Arc<Shared> {
        Arc::new(Shared {
            stats: Stats::default(),
            sync: SyncState::new(),
            names: NameSets::default(),
            tracker: Tracker::default(),
            stop: watch::Sender::new(false),
            node_common,
            deps: delta::DepsTable::default(),
        })
    }
}

/// Opens one HTTP/2 connection to the server, with Envoy's flow-control windows.
pub async fn connect(addr: SocketAddr) -> Result<Channel, tonic::transport::Error> {
    Endpoint::from_shared(format!("http://{addr}"))
        .expect("a socket address is a valid URI")
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(10))
        .connect()
        .await
}

/// One simulated Envoy's identity.
#[derive(Debug, Clone)]
pub struct Identity {
    /// Stream number (0..N).
    pub id: u32,
    /// Namespace index of its sidecar.
    pub namespace: u32,
    /// The encoded `Node` fields of its own (id, cluster, metadata).
    pub node: Vec<u8>,
}

/// One protocol's simulator: what a stream says on the wire. [`run_stream`]
/// drives it.
pub(crate) trait Sim: Send + Sized {
    /// Its protocol.
    const PROTOCOL: Protocol;
    /// A simulator around a new stream's state.
    fn new(envoy: Envoy) -> Self;
    /// The stream's state.
    fn envoy(&mut self) -> &mut Envoy;
    /// Handles one response message: ACKs it, follows up with subscriptions,
    /// then [`Envoy::settle`].
    fn on_response(&mut self, message: Bytes) -> impl Future<Output = ()> + Send;
}

/// Runs one simulated Envoy on `protocol` until the harness stops it or
/// the stream ends.
pub async fn run_stream(channel: Channel, identity: Identity, shared: Arc<Shared>, protocol: Protocol) {
    match protocol {
        Protocol::Sotw => drive::<sotw::Sim>(channel, identity, shared).await,
        Protocol::Delta => drive::<delta::Sim>(channel, identity, shared).await,
    }
}

async fn drive<S: Sim>(channel: Channel, identity: Identity, shared: Arc<Shared>) {
    let mut stop = shared.stop.subscribe();
    let (tx, rx) = mpsc::channel::<wire::Request>(REQUEST_QUEUE);
    let mut sim = S::new(Envoy::new(identity, shared.clone(), tx, S::PROTOCOL));
    // meshpush reads the first request (for the node) before it answers the
    // call, so the first request is queued before the call is made.
    let envoy = sim.envoy();
    let first = envoy.wildcard(XdsType::Cluster);
    envoy.send(first).await;
    let mut service = EnvoyFrames(channel);
    let opened = async {
        std::future::poll_fn(|cx| tower_service::Service::poll_ready(&mut service, cx))
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        let request = http::Request::builder()
            .method(http::Method::POST)
            .uri(S::PROTOCOL.path())
            .header(http::header::CONTENT_TYPE, "application/grpc")
            .header(http::header::TE, "trailers")
            .body(tonic::body::Body::new(RequestBody::new(rx)))
            .expect("a valid request");
        let response = tower_service::Service::call(&mut service, request)
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        // A refusal is a trailers-only response: its status is in the headers.
        match Status::from_header_map(response.headers()) {
            Some(status) if status.code() != tonic::Code::Ok => Err(status),
            _ if response.status() != http::StatusCode::OK => {
                Err(Status::unavailable(format!("HTTP status {}", response.status())))
            }
            _ => Ok(ResponseMessages::new(response.into_body())),
        }
    };
    let mut responses = tokio::select! {
        opened = opened => match opened {
            Ok(responses) => responses,
            Err(status) => {
                shared.stats.streams_refused.fetch_add(1, Ordering::Relaxed);
                eprintln!("loadtest: stream {} refused: {status}", sim.envoy().identity.id);
                return;
            }
        },
        () = stopped(&mut stop) => return,
    };
    loop {
        let lds_deadline = sim.envoy().lds_deadline();
        tokio::select! {
            message = responses.message() => match message {
                Ok(Some(message)) => {
                    sim.on_response(message.clone()).await;
                    grpc::recycle(message);
                }
                ended => {
                    if !*shared.stop.borrow() {
                        shared.stats.streams_lost.fetch_add(1, Ordering::Relaxed);
                        if let Err(e) = ended {
                            eprintln!("loadtest: stream {} lost: {e}", sim.envoy().identity.id);
                        }
                    }
                    break;
                }
            },
            () = stopped(&mut stop) => break,
            _ = tokio::time::sleep_until(lds_deadline.unwrap_or_else(far_future).into()), if lds_deadline.is_some() => {
                sim.envoy().request_listeners().await;
            }
        }
    }
}

/// Resolves once the harness says stop (or can no longer say anything).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86_400)
}
