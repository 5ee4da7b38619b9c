//! The server's request limits, over a real HTTP/2 connection: a request
//! over the size limit is refused with RESOURCE_EXHAUSTED; requests that
//! clients begun and never finished hold the shared request budget only
//! until the partial timeout, and a stream that finds the budget spent is
//! refused after the budget wait, counted and logged, while the server
//! goes on serving.
//!
//! The clients here write raw gRPC frames (a frame header announcing more
//! bytes than follow is what a stalled or hostile client sends), through
//! tonic's channel as a plain HTTP/2 client.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use http_body::Frame;
use meshpush::resource::TypeUrl;
use meshpush::testing::wait::wait_until_async;
use meshpush::xds::server::StreamLimits;
use prost::Message;
use tokio::sync::mpsc;

use crate::support::ads_server::AdsServer;

const SOTW: &str = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources";
const PRODUCTPAGE: &str = "sidecar~127.0.0.11~productpage-v1.default~default.svc.cluster.local";

/// A request body fed chunk by chunk; it never ends while the sender lives.
struct Chunks(mpsc::Receiver<Bytes>);

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0.poll_recv(cx).map(|c| c.map(|c| Ok(Frame::data(c))))
    }
}

/// A gRPC frame header announcing `len` bytes.
fn header(len: usize) -> Bytes {
    let mut h = vec![0];
    h.extend_from_slice(&(len as u32).to_be_bytes());
    h.into()
}

/// A CDS request of about `size` bytes (the node's metadata padded).
fn cds_request(size: usize) -> Bytes {
    let mut node = meshpush::testing::memory::node(PRODUCTPAGE, "NONE", &[("app", "productpage")]);
    node.user_agent_name = "x".repeat(size);
    let req = DiscoveryRequest { node: Some(node), type_url: TypeUrl::Cluster.as_str().into(), ..Default::default() };
    let body = req.encode_to_vec();
    let mut framed = header(body.len()).to_vec();
    framed.extend_from_slice(&body);
    framed.into()
}

/// An open SotW call: its sender, and the response (or the refusal).
struct Call {
    tx: mpsc::Sender<Bytes>,
    response: tokio::task::JoinHandle<Result<http::Response<tonic::body::Body>, String>>,
}

async fn call(addr: std::net::SocketAddr, first: Bytes) -> Call {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
    let (tx, rx) = mpsc::channel(8);
    tx.send(first).await.unwrap();
    let request = http::Request::builder()
        .method(http::Method::POST)
        .uri(format!("http://{addr}{SOTW}"))
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .header(http::header::TE, "trailers")
        .body(tonic::body::Body::new(Chunks(rx)))
        .unwrap();
    let mut channel = channel;
    let response = tokio::spawn(async move {
        std::future::poll_fn(|cx| tower_service::Service::poll_ready(&mut channel, cx))
            .await
            .map_err(|e| e.to_string())?;
        tower_service::Service::call(&mut channel, request).await.map_err(|e| e.to_string())
    });
    Call { tx, response }
}

/// The gRPC status a call ended with: from a trailers-only refusal's
/// headers, or from the trailers after its messages (which are counted).
async fn ending(call: Call) -> (tonic::Status, usize) {
    let response = tokio::time::timeout(Duration::from_secs(20), call.response).await.unwrap().unwrap().unwrap();
    if let Some(status) = tonic::Status::from_header_map(response.headers()) {
        return (status, 0);
    }
    let mut body = response.into_body();
    let mut data = 0;
    loop {
        let frame = std::future::poll_fn(|cx| http_body::Body::poll_frame(Pin::new(&mut body), cx)).await;
        match frame {
            Some(Ok(frame)) if frame.is_data() => data += 1,
            Some(Ok(frame)) => {
                let trailers = frame.into_trailers().unwrap();
                return (tonic::Status::from_header_map(&trailers).expect("a grpc-status"), data);
            }
            Some(Err(e)) => return (tonic::Status::unknown(e.to_string()), data),
            None => panic!("the response ended without trailers"),
        }
    }
}

#[tokio::test]
async fn a_request_over_the_size_limit_is_refused_with_resource_exhausted() {
    let limits = StreamLimits { max_request_bytes: 64 * 1024, ..StreamLimits::default() };
    let server = AdsServer::bookinfo_with(limits).await;
    let big = call(server.addr, cds_request(100 * 1024)).await;
    let (status, _) = ending(big).await;
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("over the limit of 65536 bytes"), "{}", status.message());
    assert_eq!(refused(&server, "too_large"), 1);
    // A request under the limit is served.
    let small = call(server.addr, cds_request(1024)).await;
    let response = tokio::time::timeout(Duration::from_secs(10), small.response).await.unwrap().unwrap().unwrap();
    assert_eq!(tonic::Status::from_header_map(response.headers()).map(|s| s.code()), None, "not refused");
}

#[tokio::test]
async fn begun_requests_hold_the_budget_until_the_partial_timeout_and_a_stream_refused_for_it_does_not_stop_the_server()
{
    let limits = StreamLimits {
        request_budget_bytes: 256 * 1024,
        budget_wait: Duration::from_millis(500),
        partial_timeout: Duration::from_secs(2),
        ..StreamLimits::default()
    };
    let server = AdsServer::bookinfo_with(limits).await;
    let budget = server.ads.budget().clone();
    // Two clients announce 120 KB each and send 10 KB: 240 KB of the budget held.
    let mut stalled = Vec::new();
    for _ in 0..2 {
        let staller = call(server.addr, header(120 * 1024)).await;
        staller.tx.send(Bytes::from(vec![0x0a; 10 * 1024])).await.unwrap();
        stalled.push(staller);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    wait_until_async(deadline, "the stalled requests to hold 240 KB of the budget", || async {
        let free = budget.available();
        if free == 16 * 1024 { Ok(()) } else { Err(format!("{free} bytes free")) }
    })
    .await;

    // A whole 30 KB request finds no room and is refused after the budget wait.
    let asked = Instant::now();
    let (status, _) = ending(call(server.addr, cds_request(30 * 1024)).await).await;
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("request memory budget (262144 bytes) stayed spent"), "{}", status.message());
    assert!(asked.elapsed() >= Duration::from_millis(500), "refused before the wait: {:?}", asked.elapsed());
    assert_eq!(refused(&server, "budget"), 1);

    // The stalled requests end at the partial timeout, and give their bytes back.
    for staller in stalled {
        let (status, _) = ending(staller).await;
        assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
        assert!(status.message().contains("was not received within 2s"), "{}", status.message());
    }
    wait_until_async(Instant::now() + Duration::from_secs(5), "the whole budget to be free", || async {
        let free = budget.available();
        if free == 256 * 1024 { Ok(()) } else { Err(format!("{free} bytes free")) }
    })
    .await;

    // The same 30 KB request is served now: a CDS response comes.
    let served = call(server.addr, cds_request(30 * 1024)).await;
    let response = tokio::time::timeout(Duration::from_secs(10), served.response).await.unwrap().unwrap().unwrap();
    assert_eq!(tonic::Status::from_header_map(response.headers()).map(|s| s.code()), None, "not refused");
    let mut body = response.into_body();
    let frame = tokio::time::timeout(
        Duration::from_secs(10),
        std::future::poll_fn(|cx| http_body::Body::poll_frame(Pin::new(&mut body), cx)),
    )
    .await
    .unwrap()
    .expect("a frame")
    .unwrap();
    let data = frame.into_data().expect("a data frame");
    assert!(data.len() > 5 && data[0] == 0, "a gRPC message begins: {:?}", &data[..data.len().min(8)]);
}

/// Requests the server refused for `reason`.
fn refused(server: &AdsServer, reason: &'static str) -> u64 {
    server.engine.metrics().requests_refused.get_or_create(&[("reason", reason)]).get()
}
