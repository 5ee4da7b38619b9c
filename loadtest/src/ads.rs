//! Simulated Envoys' streams: one task per ADS stream, many streams per
//! HTTP/2 connection, whichever the protocol.
//!
//! This module owns what does not depend on the protocol: the connections
//! (Envoy's flow-control windows), the stream task ([`run_stream`]: first
//! request queued before the call opens, responses handed to the simulator,
//! the `initial_fetch_timeout` timer, a failed stream opened again after
//! Envoy's backoff, stopping) over [`crate::grpc`]'s
//! framing (pre-encoded requests out, responses undecoded). What every
//! stream shares is `fleet`'s. What a stream says on the wire is its
//! simulator's: `sotw` on `StreamAggregatedResources`, `delta` on
//! `DeltaAggregatedResources` (a [`Protocol`] each); what Envoy does alike
//! on both is `envoy`'s. Nothing is abbreviated to spare the harness or
//! the server: every request carries the node, every response is ACKed.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tonic::Status;
use tonic::transport::{Channel, Endpoint};

use crate::envoy::{Envoy, Sim};
use crate::fleet::{Identity, Protocol, Shared};
use crate::frames::EnvoyFrames;
use crate::grpc::{self, RequestBody, ResponseMessages};
use crate::track::XdsType;
use crate::{delta, sotw, wire};

/// The HTTP/2 windows Envoy 1.40 opens on its xDS connection (observed:
/// `SETTINGS_INITIAL_WINDOW_SIZE` 16 MiB, and a connection window raised
/// to 24 MiB).
const STREAM_WINDOW: u32 = 16 * 1024 * 1024;
const CONNECTION_WINDOW: u32 = 24 * 1024 * 1024;

/// Requests queued per stream before its task waits.
const REQUEST_QUEUE: usize = 8;

/// Connections opened from one loopback source address. Each source
/// address has its own ephemeral ports towards the server's one address
/// and port (28,232 on this machine's default range), so many connections
/// spread over several addresses never run out of them.
const CONNECTIONS_PER_SOURCE: u32 = 16_384;

/// The source address of connection `c` to `server`: for a loopback IPv4
/// server, `127.0.1.N` with N counting blocks of
/// [`CONNECTIONS_PER_SOURCE`] connections; otherwise the system's choice.
pub fn source_address(server: SocketAddr, c: u32) -> Option<IpAddr> {
    match server.ip() {
        IpAddr::V4(ip) if ip.is_loopback() => {
            let block = c / CONNECTIONS_PER_SOURCE;
            let [hi, lo] = u16::try_from(block + 1).unwrap_or(u16::MAX).to_be_bytes();
            Some(IpAddr::V4(Ipv4Addr::new(127, 1, hi, lo)))
        }
        _ => None,
    }
}

/// Opens one HTTP/2 connection to the server from `source` (if given), with
/// Envoy's flow-control windows.
pub async fn connect(addr: SocketAddr, source: Option<IpAddr>) -> Result<Channel, tonic::transport::Error> {
    Endpoint::from_shared(format!("http://{addr}"))
        .expect("a socket address is a valid URI")
        .local_address(source)
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(10))
        .connect()
        .await
}

/// Runs one simulated Envoy on `protocol` until the harness stops it.
pub async fn run_stream(channel: Channel, identity: Identity, shared: Arc<Shared>, protocol: Protocol) {
    match protocol {
        Protocol::Sotw => drive::<sotw::Sim>(channel, identity, shared).await,
        Protocol::Delta => drive::<delta::Sim>(channel, identity, shared).await,
    }
}

/// Envoy's retry of a failed xDS stream: jittered exponential backoff,
/// 500 ms base and 30 s cap (Envoy's `RetryInitialDelayMs` and
/// `RetryMaxDelayMs` when the bootstrap sets no retry policy): the n-th
/// retry in a row waits a random time below `min(base × (2ⁿ − 1), cap)`,
/// and a received message starts the count again.
#[derive(Debug, Default)]
struct Backoff {
    retries: u32,
}

impl Backoff {
    const BASE_MS: u64 = 500;
    const CAP_MS: u64 = 30_000;

    fn next(&mut self) -> Duration {
        self.retries = (self.retries + 1).min(16);
        let ceiling = (Self::BASE_MS * ((1u64 << self.retries) - 1)).min(Self::CAP_MS);
        Duration::from_millis(fastrand::u64(0..ceiling))
    }

    fn reset(&mut self) {
        self.retries = 0;
    }
}

/// How one stream of a simulated Envoy ended.
enum Ended {
    /// The harness stopped it.
    Stopped,
    /// It could not be opened, or the server ended it: Envoy retries.
    Failed,
}

/// Streams whose failures are printed; the rest are only counted.
const PRINTED_FAILURES: u64 = 3;

/// Runs one simulated Envoy until the harness stops it. When its stream
/// fails (refused, or cut by the server), it opens a new one after
/// Envoy's backoff, on the same channel (which connects again when its
/// connection is gone), and tells the server what it holds.
async fn drive<S: Sim>(channel: Channel, identity: Identity, shared: Arc<Shared>) {
    let mut stop = shared.stop.subscribe();
    let (tx, mut rx) = mpsc::channel::<wire::Request>(REQUEST_QUEUE);
    let mut sim = S::new(Envoy::new(identity, shared.clone(), tx, S::PROTOCOL));
    // meshpush reads the first request (for the node) before it answers the
    // call, so the first request is queued before the call is made.
    let envoy = sim.envoy();
    let first = envoy.wildcard(XdsType::Cluster);
    envoy.send(first).await;
    let mut backoff = Backoff::default();
    loop {
        if let Ended::Stopped = session(&mut sim, channel.clone(), rx, &shared, &mut stop, &mut backoff).await {
            return;
        }
        tokio::select! {
            () = tokio::time::sleep(backoff.next()) => {}
            () = stopped(&mut stop) => return,
        }
        let (tx, next) = mpsc::channel::<wire::Request>(REQUEST_QUEUE);
        rx = next;
        sim.envoy().attach(tx);
        shared.stats.reconnects.fetch_add(1, Ordering::Relaxed);
        sim.reconnect().await;
    }
}

/// One ADS stream: opens the call with the requests queued in `rx` and
/// hands every response to the simulator until the stream ends.
async fn session<S: Sim>(
    sim: &mut S,
    channel: Channel,
    rx: mpsc::Receiver<wire::Request>,
    shared: &Shared,
    stop: &mut watch::Receiver<bool>,
    backoff: &mut Backoff,
) -> Ended {
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
                if !*shared.stop.borrow() {
                    let n = shared.stats.streams_refused.fetch_add(1, Ordering::Relaxed);
                    if n < PRINTED_FAILURES {
                        eprintln!("loadtest: stream {} refused: {status}", sim.envoy().identity.id);
                    }
                }
                return Ended::Failed;
            }
        },
        () = stopped(stop) => return Ended::Stopped,
    };
    loop {
        let lds_deadline = sim.envoy().lds_deadline();
        tokio::select! {
            message = responses.message() => match message {
                Ok(Some(message)) => {
                    backoff.reset();
                    sim.on_response(message.clone()).await;
                    grpc::recycle(message);
                }
                ended => {
                    if *shared.stop.borrow() {
                        return Ended::Stopped;
                    }
                    let n = shared.stats.streams_lost.fetch_add(1, Ordering::Relaxed);
                    if n < PRINTED_FAILURES && let Err(e) = ended {
                        eprintln!("loadtest: stream {} lost: {e}", sim.envoy().identity.id);
                    }
                    return Ended::Failed;
                }
            },
            () = stopped(stop) => return Ended::Stopped,
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
