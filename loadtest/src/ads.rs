//! Simulated Envoys: one task per ADS stream, many streams per HTTP/2 connection.
//!
//! Each stream subscribes the way Envoy 1.40 does: CDS wildcard first; on
//! each CDS response, the CDS ACK and then an EDS request naming the EDS
//! clusters; once every cluster has its endpoints (or 15 s have passed,
//! Envoy's `initial_fetch_timeout`), LDS wildcard; on each LDS response, the
//! LDS ACK and then an RDS request naming the route configurations the
//! listeners use. Every response is ACKed. Every request — ACKs included —
//! carries the node and the full `resource_names` list of its type, as
//! Envoy's SotW client sends them; nothing is abbreviated to spare the
//! harness or the server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::{Buf as _, BufMut as _, Bytes};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::{Channel, Endpoint};

use crate::track::{Change, NameSet, NameSets, Stats, SyncState, Tracker, XdsType};
use crate::wire::{self, Response};

const SOTW_PATH: &str = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources";

/// Envoy's default HTTP/2 windows (`initial_stream_window_size`,
/// `initial_connection_window_size`: 256 MiB).
const WINDOW: u32 = 256 * 1024 * 1024;

/// Envoy's `initial_fetch_timeout`: how long it waits for a cluster's
/// endpoints before it initializes without them and asks for listeners.
const INITIAL_FETCH_TIMEOUT: Duration = Duration::from_secs(15);

/// Requests queued per stream before its task waits.
const REQUEST_QUEUE: usize = 8;

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
        })
    }
}

/// Opens one HTTP/2 connection to the server, with Envoy's flow-control windows.
pub async fn connect(addr: SocketAddr) -> Result<Channel, tonic::transport::Error> {
    Endpoint::from_shared(format!("http://{addr}"))
        .expect("a socket address is a valid URI")
        .initial_stream_window_size(WINDOW)
        .initial_connection_window_size(WINDOW)
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

/// Runs one simulated Envoy until the harness stops it or the stream ends.
pub async fn run_stream(channel: Channel, identity: Identity, shared: Arc<Shared>) {
    let mut stop = shared.stop.subscribe();
    let (tx, rx) = mpsc::channel::<wire::Request>(REQUEST_QUEUE);
    let mut sim = Sim::new(identity, shared.clone(), tx);
    // meshpush reads the first request (for the node) before it answers the
    // call, so the first request is queued before the call is made.
    sim.send(XdsType::Cluster, Bytes::new(), "", "").await;
    let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(usize::MAX);
    let opened = async {
        grpc.ready().await.map_err(|e| Status::unavailable(e.to_string()))?;
        let path = http::uri::PathAndQuery::from_static(SOTW_PATH);
        grpc.streaming(tonic::Request::new(ReceiverStream::new(rx)), path, RawCodec).await
    };
    let mut responses = tokio::select! {
        opened = opened => match opened {
            Ok(response) => response.into_inner(),
            Err(status) => {
                shared.stats.streams_refused.fetch_add(1, Ordering::Relaxed);
                eprintln!("loadtest: stream {} refused: {status}", sim.identity.id);
                return;
            }
        },
        () = stopped(&mut stop) => return,
    };
    loop {
        let lds_deadline = sim.lds_deadline;
        tokio::select! {
            message = responses.message() => match message {
                Ok(Some(message)) => sim.on_response(message).await,
                Ok(None) | Err(_) => {
                    if !*shared.stop.borrow() {
                        shared.stats.streams_lost.fetch_add(1, Ordering::Relaxed);
                    }
                    break;
                }
            },
            () = stopped(&mut stop) => break,
            _ = tokio::time::sleep_until(lds_deadline.unwrap_or_else(far_future).into()), if lds_deadline.is_some() => {
                sim.request_listeners().await;
            }
        }
    }
    sim.release();
}

/// Resolves once the harness says stop (or can no longer say anything).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86_400)
}

/// Last ACKed version and nonce of one type.
#[derive(Debug, Default)]
struct TypeState {
    version: String,
    nonce: String,
}

/// Per-name "received at least once" marks for a watched list, until synced.
#[derive(Debug, Default)]
struct Received {
    marks: Vec<bool>,
    missing: usize,
}

impl Received {
    fn reset(&mut self, set: &NameSet) {
        self.marks = vec![false; set.len()];
        self.missing = set.len();
    }

    fn mark(&mut self, set: &NameSet, name: &str) {
        if let Some(i) = set.position(name)
            && let Some(seen) = self.marks.get_mut(i as usize)
            && !*seen
        {
            *seen = true;
            self.missing -= 1;
        }
    }
}

/// One stream's protocol state.
struct Sim {
    identity: Identity,
    shared: Arc<Shared>,
    node: wire::EncodedNode,
    tx: mpsc::Sender<wire::Request>,
    types: [TypeState; 4],
    eds: Option<Arc<NameSet>>,
    rds: Option<Arc<NameSet>>,
    eds_received: Received,
    rds_received: Received,
    cds_acked: bool,
    lds_requested: bool,
    lds_acked: bool,
    lds_deadline: Option<Instant>,
    synced: bool,
    carried: Vec<Arc<Change>>,
}

impl Sim {
    fn new(identity: Identity, shared: Arc<Shared>, tx: mpsc::Sender<wire::Request>) -> Sim {
        let node = wire::EncodedNode::new(&identity.node, &shared.node_common);
        Sim {
            identity,
            shared,
            node,
            tx,
            types: Default::default(),
            eds: None,
            rds: None,
            eds_received: Received::default(),
            rds_received: Received::default(),
            cds_acked: false,
            lds_requested: false,
            lds_acked: false,
            lds_deadline: None,
            synced: false,
            carried: Vec::new(),
        }
    }

    async fn send(&mut self, t: XdsType, names: Bytes, version: &str, nonce: &str) {
        let request = wire::encode_request(&self.node, &names, t.url(), version, nonce);
        self.shared.stats.requests.fetch_add(1, Ordering::Relaxed);
        // A closed channel means the stream is gone; the response loop sees that too.
        let _ = self.tx.send(request).await;
    }

    /// ACKs the last response of `t`, with the type's full name list.
    async fn ack(&mut self, t: XdsType) {
        let names = self.names(t);
        let state = &self.types[t as usize];
        let (version, nonce) = (state.version.clone(), state.nonce.clone());
        self.send(t, names, &version, &nonce).await;
    }

    fn names(&self, t: XdsType) -> Bytes {
        let set = match t {
            XdsType::Endpoint => self.eds.as_ref(),
            XdsType::Route => self.rds.as_ref(),
            XdsType::Cluster | XdsType::Listener => None,
        };
        set.map(|s| s.encoded.clone()).unwrap_or_default()
    }

    async fn on_response(&mut self, message: Bytes) {
        let stats = &self.shared.stats;
        stats.bytes.fetch_add(message.len() as u64, Ordering::Relaxed);
        let response = Response::parse(&message);
        let Some(t) = XdsType::from_url(response.type_url) else { return };
        stats.responses[t as usize].fetch_add(1, Ordering::Relaxed);
        self.types[t as usize] = TypeState { version: response.version.into(), nonce: response.nonce.into() };
        let tracker = &self.shared.tracker;
        for resource in &response.resources {
            tracker.carried(t, resource, wire::resource_name(resource), &mut self.carried);
        }
        match t {
            XdsType::Cluster => {
                let mut names: Vec<&str> = response.resources.iter().filter_map(|r| wire::eds_name(r)).collect();
                names.sort_unstable();
                names.dedup();
                let set = self.shared.names.intern(XdsType::Endpoint, &names);
                self.ack(t).await;
                self.cds_acked = true;
                if self.eds.as_ref().is_none_or(|old| !Arc::ptr_eq(old, &set)) {
                    self.shared.names.switch(self.eds.as_ref(), &set);
                    if !self.lds_requested {
                        self.eds_received.reset(&set);
                    }
                    // Envoy asks for endpoints only once it has EDS clusters.
                    let subscribe = self.eds.is_some() || !set.names.is_empty();
                    self.eds = Some(set);
                    if subscribe {
                        self.ack(XdsType::Endpoint).await;
                    }
                }
                if !self.lds_requested && self.lds_deadline.is_none() {
                    self.lds_deadline = Some(Instant::now() + INITIAL_FETCH_TIMEOUT);
                }
            }
            XdsType::Listener => {
                let mut names = Vec::new();
                for listener in &response.resources {
                    wire::rds_names(listener, &mut names);
                }
                names.sort_unstable();
                names.dedup();
                let set = self.shared.names.intern(XdsType::Route, &names);
                self.ack(t).await;
                self.lds_acked = true;
                if self.rds.as_ref().is_none_or(|old| !Arc::ptr_eq(old, &set)) {
                    self.shared.names.switch(self.rds.as_ref(), &set);
                    if !self.synced {
                        self.rds_received.reset(&set);
                    }
                    let subscribe = self.rds.is_some() || !set.names.is_empty();
                    self.rds = Some(set);
                    if subscribe {
                        self.ack(XdsType::Route).await;
                    }
                }
            }
            XdsType::Endpoint | XdsType::Route => {
                if !self.synced {
                    for resource in &response.resources {
                        let name = wire::resource_name(resource);
                        match (t, &self.eds, &self.rds) {
                            (XdsType::Endpoint, Some(set), _) => self.eds_received.mark(set, name),
                            (XdsType::Route, _, Some(set)) => self.rds_received.mark(set, name),
                            _ => {}
                        }
                    }
                }
                self.ack(t).await;
            }
        }
        if !self.carried.is_empty() {
            let acked = Instant::now();
            for change in self.carried.drain(..) {
                change.record(self.identity.id, self.identity.namespace, acked);
            }
        }
        if !self.lds_requested && self.cds_acked && self.eds_received.missing == 0 {
            self.request_listeners().await;
        }
        if !self.synced && self.lds_acked && self.eds_received.missing == 0 && self.rds_received.missing == 0 {
            self.synced = true;
            self.shared.sync.record();
        }
    }

    /// The first LDS request: after cluster warming, as Envoy's init manager orders it.
    async fn request_listeners(&mut self) {
        self.lds_deadline = None;
        if !self.lds_requested {
            self.lds_requested = true;
            self.send(XdsType::Listener, Bytes::new(), "", "").await;
        }
    }

    fn release(&mut self) {
        for set in [self.eds.take(), self.rds.take()].into_iter().flatten() {
            self.shared.names.release(&set);
        }
    }
}

/// A gRPC codec that sends pre-encoded requests (copying each part once
/// into the stream's buffer) and hands back each response message's bytes
/// undecoded.
#[derive(Debug, Clone, Copy, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = wire::Request;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = wire::Request;
    type Error = Status;

    fn encode(&mut self, item: wire::Request, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        for part in item.parts() {
            dst.put_slice(part);
        }
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}
