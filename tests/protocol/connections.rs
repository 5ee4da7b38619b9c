//! The xDS port's connection policy, over real HTTP/2: a connection
//! carries at most `max_streams` streams at once (a client multiplexing
//! more waits for a free one), a peer that stops answering HTTP/2
//! PINGs is disconnected after the keepalive interval and timeout, and a
//! new connection is served only once it has a place among the unanswered
//! streams (a silent client holds one only briefly, an answered stream
//! gives its place to the next connection, and every stream a waiting
//! connection multiplexes is served once it has its place, its request
//! arriving whole even when the admission rate holds it unread a while).

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use meshpush::resource::TypeUrl;
use meshpush::serve::connections::ConnectionPolicy;
use meshpush::testing::wait::wait_until_async;
use meshpush::xds::server::StreamLimits;
use meshpush::xds::stream::admission::FIRST_REQUEST_HOLD;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_stream::wrappers::ReceiverStream;

use crate::support::ads_server::AdsServer;

const PRODUCTPAGE: &str = "sidecar~127.0.0.11~productpage-v1.default~default.svc.cluster.local";

/// Opens a SotW stream on `client` and waits up to `wait` for its CDS
/// response; the request sender keeps the stream open.
async fn first_response(
    client: &mut AggregatedDiscoveryServiceClient<tonic::transport::Channel>,
    wait: Duration,
) -> Option<(
    tokio::sync::mpsc::Sender<DiscoveryRequest>,
    tonic::Streaming<envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse>,
)> {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let node = meshpush::testing::memory::node(PRODUCTPAGE, "NONE", &[("app", "productpage")]);
    tx.send(DiscoveryRequest { node: Some(node), type_url: TypeUrl::Cluster.as_str().into(), ..Default::default() })
        .await
        .unwrap();
    let mut client = client.clone();
    let opened = async move {
        let mut responses = client.stream_aggregated_resources(ReceiverStream::new(rx)).await.ok()?.into_inner();
        responses.message().await.ok()??;
        Some(responses)
    };
    tokio::time::timeout(wait, opened).await.ok().flatten().map(|responses| (tx, responses))
}

#[tokio::test]
async fn a_connection_carries_at_most_max_streams_and_a_third_waits_for_a_free_one() {
    let policy = ConnectionPolicy { max_streams: 2, ..ConnectionPolicy::default() };
    let server = AdsServer::bookinfo_with_policy(policy).await;
    // One connection (a Channel is one HTTP/2 connection).
    let mut client = AggregatedDiscoveryServiceClient::connect(format!("http://{}", server.addr)).await.unwrap();
    let a = first_response(&mut client, Duration::from_secs(10)).await.expect("the first stream is served");
    let _b = first_response(&mut client, Duration::from_secs(10)).await.expect("the second stream is served");
    assert!(
        first_response(&mut client, Duration::from_millis(1500)).await.is_none(),
        "a third stream on the connection is served while two are open"
    );
    // Once one ends, a new stream gets its place.
    drop(a);
    first_response(&mut client, Duration::from_secs(10)).await.expect("a stream is served once one ended");
}

#[tokio::test]
async fn a_peer_that_stops_answering_pings_is_disconnected() {
    let policy = ConnectionPolicy {
        keepalive_interval: Duration::from_millis(500),
        keepalive_timeout: Duration::from_millis(500),
        ..ConnectionPolicy::default()
    };
    let server = AdsServer::bookinfo_with_policy(policy).await;
    // An HTTP/2 peer that says hello (preface, empty SETTINGS) and then
    // reads without ever answering: no SETTINGS ACK, no PING ACK.
    let mut peer = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    peer.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await.unwrap();
    peer.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).await.unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    let mut pings = 0;
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match peer.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                // Frame type 6 is PING (a rough count: frames may share a read).
                Ok(n) => pings += buf[..n].windows(4).filter(|w| w[0..3] == [0, 0, 8] && w[3] == 6).count(),
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the silent peer was still connected after 10 s");
    assert!(pings >= 1, "the server closed without pinging");
    assert!(started.elapsed() >= Duration::from_millis(500), "closed before a ping could go unanswered");
}

/// A padded stream's task: its request sender (which keeps the stream
/// open) and when its first response came, or why it was refused.
type PaddedStream =
    tokio::task::JoinHandle<Result<(tokio::sync::mpsc::Sender<DiscoveryRequest>, Instant), tonic::Status>>;

/// Opens `n` streams on `client`'s one connection, each with a first
/// request of about 62 KB (an Envoy 1.40 node's size), so that together
/// they pass the 65,535 bytes a client may send before the server's first
/// SETTINGS and WINDOW_UPDATE.
fn padded_streams(client: &AggregatedDiscoveryServiceClient<tonic::transport::Channel>, n: usize) -> Vec<PaddedStream> {
    use envoy_types::pb::google::protobuf::{Value, value::Kind};
    (0..n)
        .map(|i| {
            let mut client = client.clone();
            tokio::spawn(async move {
                let (tx, rx) = tokio::sync::mpsc::channel(4);
                let mut node = meshpush::testing::memory::node(PRODUCTPAGE, "NONE", &[("app", "productpage")]);
                let pad = Value { kind: Some(Kind::StringValue(format!("{i}").repeat(62_000))) };
                node.metadata.as_mut().unwrap().fields.insert("PAD".into(), pad);
                let first = DiscoveryRequest {
                    node: Some(node),
                    type_url: TypeUrl::Cluster.as_str().into(),
                    ..Default::default()
                };
                tx.send(first).await.unwrap();
                let mut responses = client.stream_aggregated_resources(ReceiverStream::new(rx)).await?.into_inner();
                responses.message().await?.ok_or_else(|| tonic::Status::cancelled("no response"))?;
                Ok((tx, Instant::now()))
            })
        })
        .collect()
}

/// Opens six padded streams ([`padded_streams`]) on a connection that
/// waits for its place behind a silent client (which holds `server`'s one
/// place until its hold passes), and waits up to `deadline` for each
/// stream's first response: when each came, or a panic naming the stream.
async fn served_behind_a_silent_client(server: &AdsServer, deadline: Duration) -> Vec<Instant> {
    let _silent = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let admission = server.ads.admission();
    wait_until_async(Instant::now() + Duration::from_secs(5), "the silent connection to hold the place", || async {
        if admission.taken() == 1 { Ok(()) } else { Err(format!("{} places taken", admission.taken())) }
    })
    .await;
    let client = AggregatedDiscoveryServiceClient::connect(format!("http://{}", server.addr)).await.unwrap();
    let mut answered = Vec::new();
    for (i, stream) in padded_streams(&client, 6).into_iter().enumerate() {
        match tokio::time::timeout(deadline, stream).await {
            Ok(Ok(Ok((_open, at)))) => answered.push(at),
            Ok(Ok(Err(status))) => panic!("stream {i} was refused: {status}"),
            Ok(Err(e)) => panic!("stream {i}'s task failed: {e}"),
            Err(_) => panic!("stream {i} had no response within {deadline:?}"),
        }
    }
    answered
}

/// A server with a single place for unanswered streams.
async fn one_place() -> AdsServer {
    AdsServer::bookinfo_with(StreamLimits { max_unanswered: Some(1), ..StreamLimits::default() }).await
}

#[tokio::test]
async fn a_connection_waits_for_a_place_and_a_silent_client_holds_one_only_briefly() {
    let server = one_place().await;
    let admission = server.ads.admission();
    // A client that connects and says nothing is accepted and takes the place.
    let _silent = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let taken = Instant::now();
    wait_until_async(Instant::now() + Duration::from_secs(5), "the silent connection to hold the place", || async {
        if admission.taken() == 1 { Ok(()) } else { Err(format!("{} places taken", admission.taken())) }
    })
    .await;
    // An Envoy connecting now is served only once the silent client's hold has passed.
    let addr = server.addr;
    let served = tokio::spawn(async move {
        let mut client = AggregatedDiscoveryServiceClient::connect(format!("http://{addr}")).await.unwrap();
        let opened = first_response(&mut client, FIRST_REQUEST_HOLD + Duration::from_secs(10)).await;
        (opened.map(|(tx, _)| tx), Instant::now())
    });
    let (opened, at) = served.await.unwrap();
    assert!(opened.is_some(), "the waiting connection was never served");
    let waited = at.duration_since(taken);
    assert!(
        waited >= FIRST_REQUEST_HOLD - Duration::from_millis(500),
        "served after {waited:?}, while the silent client held the only place"
    );
    wait_until_async(Instant::now() + Duration::from_secs(5), "the place to be free again", || async {
        let (taken, unanswered) = (admission.taken(), server.engine.metrics().streams_unanswered.get());
        if (taken, unanswered) == (0, 0) { Ok(()) } else { Err(format!("{taken} taken, {unanswered} unanswered")) }
    })
    .await;
}

#[tokio::test]
async fn an_answered_stream_gives_its_place_to_the_next_connection() {
    let server = one_place().await;
    let connect = || AggregatedDiscoveryServiceClient::connect(format!("http://{}", server.addr));
    let mut a = connect().await.unwrap();
    let _a = first_response(&mut a, Duration::from_secs(10)).await.expect("the first connection is served");
    // A's stream stays open, answered: B (a connection of its own) is served
    // at once, not after A's hold.
    let mut b = connect().await.unwrap();
    let _b = first_response(&mut b, FIRST_REQUEST_HOLD - Duration::from_secs(1))
        .await
        .expect("the second connection is served while the first stream is open");
    assert_eq!(server.ads.admission().taken(), 0);
}

#[tokio::test]
async fn every_stream_of_a_waiting_connection_is_served_once_it_has_a_place() {
    // As the loadtest's s4 connections: six streams on one connection, each
    // opening with a request of about 62 KB (an Envoy 1.40 node's size), so
    // that together they pass the 65,535 bytes a client may send before the
    // server's first SETTINGS and WINDOW_UPDATE; the connection waits for
    // its place behind a silent client meanwhile.
    let server = one_place().await;
    // Served once the silent client's hold has passed: well within the 30 s
    // a begun request has to arrive whole.
    served_behind_a_silent_client(&server, FIRST_REQUEST_HOLD + Duration::from_secs(10)).await;
}

#[tokio::test]
async fn streams_of_a_waiting_connection_that_then_wait_for_their_start_arrive_whole() {
    // As s4 under a storm: the connection waits for its place (its six
    // 62 KB first requests pass the 65,535 bytes a client may send before
    // the server's SETTINGS), and once served its streams start one at a
    // time at the admission rate, the last 2.5 s after the first. Each
    // request must then arrive whole within the partial-request timeout.
    use meshpush::xds::stream::admission::AdmissionRate;
    let limits = StreamLimits {
        max_unanswered: Some(1),
        admission: AdmissionRate { per_second: Some(2.0), burst: 1 },
        partial_timeout: Duration::from_secs(2),
        ..StreamLimits::default()
    };
    let server = AdsServer::bookinfo_with(limits).await;
    let answered = served_behind_a_silent_client(&server, FIRST_REQUEST_HOLD + Duration::from_secs(15)).await;
    // The rate spread them: the last started 2.5 s after the first, its
    // request held unread in h2 meanwhile.
    let spread = answered.iter().max().unwrap().duration_since(*answered.iter().min().unwrap());
    assert!(spread >= Duration::from_secs(2), "the six streams were answered within {spread:?}: no rate applied");
}
