//! Protocol tests: an in-process tonic ADS client against meshpush's server,
//! pinning the state-of-the-world rules of `docs/xds-protocol.md`.
//!
//! To prove that the server sent *nothing* in answer to a request (an ACK, a
//! stale nonce, a NACK), a test sends a probe — a request for a type the
//! stream has not subscribed yet — and checks that the very next response is
//! the probe's. The server handles a stream's requests in order, so anything
//! it had sent for the earlier request would have arrived first.

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::listener::v3::Listener;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::rpc::Status as RpcStatus;
use meshpush::resource::TypeUrl;
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

const WAIT: Duration = Duration::from_secs(10);
const PRODUCTPAGE: &str = "sidecar~127.0.0.11~productpage-v1.default~default.svc.cluster.local";

/// The in-process server over bookinfo, with this file's stream helpers.
struct Harness(support::ads_server::AdsServer);

impl std::ops::Deref for Harness {
    type Target = support::ads_server::AdsServer;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl Harness {
    async fn start() -> Harness {
        Harness(support::ads_server::AdsServer::bookinfo().await)
    }

    async fn stream(&self, node_id: &str) -> Stream {
        Stream::open(self.addr, node(node_id, &[("app", "productpage"), ("version", "v1")])).await
    }
}

/// An Istio sidecar node in NONE mode (metadata NAMESPACE, LABELS, INTERCEPTION_MODE).
fn node(id: &str, labels: &[(&str, &str)]) -> Node {
    meshpush::testing::memory::node(id, "NONE", labels)
}

/// One ADS stream, driven like Envoy drives it.
struct Stream {
    tx: mpsc::Sender<DiscoveryRequest>,
    rx: Streaming<DiscoveryResponse>,
    node: Node,
}

impl Stream {
    async fn open(addr: std::net::SocketAddr, node: Node) -> Stream {
        Stream::open_with_first(addr, node, TypeUrl::Cluster, "").await
    }

    /// Opens a stream whose first request is for type `t` with `version`
    /// and an empty nonce (a reconnect when the version is not empty).
    async fn open_with_first(addr: std::net::SocketAddr, node: Node, t: TypeUrl, version: &str) -> Stream {
        let mut client = AggregatedDiscoveryServiceClient::connect(format!("http://{addr}")).await.unwrap();
        let (tx, rx) = mpsc::channel(16);
        // The first request is queued before the call: the server reads it
        // to learn the node before it accepts the stream.
        tx.send(DiscoveryRequest {
            version_info: version.into(),
            type_url: t.as_str().into(),
            node: Some(node.clone()),
            ..Default::default()
        })
        .await
        .unwrap();
        let response = tokio::time::timeout(WAIT, client.stream_aggregated_resources(ReceiverStream::new(rx)))
            .await
            .expect("stream opens")
            .expect("stream accepted");
        Stream { tx, rx: response.into_inner(), node }
    }

    async fn send(&mut self, t: TypeUrl, names: &[&str], version: &str, nonce: &str) {
        self.send_request(DiscoveryRequest {
            version_info: version.into(),
            resource_names: names.iter().map(|s| s.to_string()).collect(),
            type_url: t.as_str().into(),
            response_nonce: nonce.into(),
            ..Default::default()
        })
        .await;
    }

    async fn send_request(&mut self, mut req: DiscoveryRequest) {
        // Like Envoy 1.40: the node on every request.
        req.node = Some(self.node.clone());
        self.tx.send(req).await.expect("stream open");
    }

    async fn ack(&mut self, r: &DiscoveryResponse, names: &[&str]) {
        let t = TypeUrl::parse(&r.type_url).unwrap();
        self.send(t, names, &r.version_info, &r.nonce).await;
    }

    async fn recv(&mut self) -> DiscoveryResponse {
        tokio::time::timeout(WAIT, self.rx.message())
            .await
            .expect("a response within the deadline")
            .expect("no stream error")
            .expect("stream still open")
    }

    async fn recv_type(&mut self, t: TypeUrl) -> DiscoveryResponse {
        let r = self.recv().await;
        assert_eq!(r.type_url, t.as_str(), "expected a {t} response, got {}", r.type_url);
        r
    }

    /// Proves nothing else was queued for this stream: subscribes to LDS
    /// (wildcard) and expects the LDS response to be the next message.
    async fn probe_nothing_pending(&mut self) -> DiscoveryResponse {
        self.send(TypeUrl::Listener, &[], "", "").await;
        self.recv_type(TypeUrl::Listener).await
    }
}

fn names<M: Message + Default>(r: &DiscoveryResponse, name: impl Fn(&M) -> String) -> BTreeSet<String> {
    let names: Vec<String> = r.resources.iter().map(|a| name(&M::decode(&a.value[..]).unwrap())).collect();
    let set: BTreeSet<String> = names.iter().cloned().collect();
    assert_eq!(set.len(), names.len(), "a resource name appears twice in one response");
    set
}

fn cluster_names(r: &DiscoveryResponse) -> BTreeSet<String> {
    names::<Cluster>(r, |c| c.name.clone())
}

fn cla_names(r: &DiscoveryResponse) -> BTreeSet<String> {
    names::<ClusterLoadAssignment>(r, |c| c.cluster_name.clone())
}

fn cla(r: &DiscoveryResponse, name: &str) -> ClusterLoadAssignment {
    r.resources
        .iter()
        .map(|a| ClusterLoadAssignment::decode(&a.value[..]).unwrap())
        .find(|c| c.cluster_name == name)
        .unwrap_or_else(|| panic!("{name} not in the response"))
}

fn endpoint_count(c: &ClusterLoadAssignment) -> usize {
    c.endpoints.iter().map(|l| l.lb_endpoints.len()).sum()
}

const REVIEWS_V1: &str = "outbound|9080|v1|reviews.default.svc.cluster.local";
const REVIEWS_V2: &str = "outbound|9080|v2|reviews.default.svc.cluster.local";
const RATINGS: &str = "outbound|9080||ratings.default.svc.cluster.local";

#[tokio::test]
async fn wildcard_cds_sends_every_cluster_with_unique_names_and_matching_type() {
    let h = Harness::start().await;
    let mut s = h.stream(PRODUCTPAGE).await;
    let cds = s.recv_type(TypeUrl::Cluster).await;
    let clusters = cluster_names(&cds);
    for expected in [
        REVIEWS_V1,
        REVIEWS_V2,
        RATINGS,
        "outbound|9080||details.default.svc.cluster.local",
        "BlackHoleCluster",
        "PassthroughCluster",
    ] {
        assert!(clusters.contains(expected), "{expected} missing from {clusters:?}");
    }
    assert!(!cds.version_info.is_empty());
    assert!(!cds.nonce.is_empty());
    assert!(cds.resources.iter().all(|a| a.type_url == TypeUrl::Cluster.as_str()));
    // `*` is the same wildcard.
    let mut s2 = h.stream(PRODUCTPAGE).await;
    let first = s2.recv_type(TypeUrl::Cluster).await;
    s2.send(TypeUrl::Cluster, &["*"], &first.version_info, &first.nonce).await;
    let lds = s2.probe_nothing_pending().await;
    assert!(!lds.resources.is_empty());
}

#[tokio::test]
async fn eds_sends_only_the_named_assignments_and_remembers_unknown_names() {
    let h = Harness::start().await;
    let mut s = h.stream(PRODUCTPAGE).await;
    let cds = s.recv_type(TypeUrl::Cluster).await;
    s.ack(&cds, &[]).await;
    let future = "outbound|9080||payments.default.svc.cluster.local";
    s.send(TypeUrl::Endpoint, &[REVIEWS_V1, future], "", "").await;
    let eds = s.recv_type(TypeUrl::Endpoint).await;
    assert_eq!(cla_names(&eds), [REVIEWS_V1.to_string()].into());
    assert_eq!(endpoint_count(&cla(&eds, REVIEWS_V1)), 1, "subset v1 has one pod");
    s.ack(&eds, &[REVIEWS_V1, future]).await;

    // The name that did not exist is sent when it appears.
    h.apply(
        "apiVersion: v1\nkind: Service\nmetadata: {name: payments, namespace: default}\nspec:\n  selector: {app: payments}\n  ports: [{name: http, port: 9080}]\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: payments-1, namespace: default, labels: {app: payments}}\nstatus: {podIP: 127.0.0.40, phase: Running}\n",
    )
    .await;
    let mut saw = false;
    for _ in 0..4 {
        let r = s.recv().await;
        if r.type_url == TypeUrl::Endpoint.as_str() && cla_names(&r).contains(future) {
            assert_eq!(endpoint_count(&cla(&r, future)), 1);
            saw = true;
            break;
        }
        let names: Vec<&str> = if r.type_url == TypeUrl::Endpoint.as_str() { vec![REVIEWS_V1, future] } else { vec![] };
        s.ack(&r, &names).await;
    }
    assert!(saw, "the assignment of the new service was pushed");
}

#[tokio::test]
async fn ack_is_not_answered() {
    let h = Harness::start().await;
    let mut s = h.stream(PRODUCTPAGE).await;
    let cds = s.recv_type(TypeUrl::Cluster).await;
    s.ack(&cds, &[]).await;
    let lds = s.probe_nothing_pending().await;
    assert!(!lds.resources.is_empty());
    s.ack(&lds, &[]).await;
    s.send(TypeUrl::Route, &["9080"], "", "").await;
    let rds = s.recv_type(TypeUrl::Route).await;
    assert_eq!(rds.resources.len(), 1);
}

#[tokio::test]
async fn nack_keeps_stream_and_does_not_resend() {
    let h = Harness::start().await;
    let mut s = h.stream(PRODUCTPAGE).await;
    let cds = s.recv_type(TypeUrl::Cluster).await;
    let mut nack = DiscoveryRequest {
        version_info: String::new(),
        type_url: TypeUrl::Cluster.as_str().into(),
        response_nonce: cds.nonce.clone(),
        error_detail: Some(RpcStatus { code: 13, message: "cluster rejected for the test".into(), details: vec![] }),
        ..Default::default()
    };
    s.send_request(nack.clone()).await;
    let lds = s.probe_nothing_pending().await;
    assert_eq!(lds.type_url, TypeUrl::Listener.as_str(), "the stream survives a NACK");
    // Answered, as Envoy answers every response: the next push need not
    // wait out the answer wait (as long as this test's own deadline).
    s.ack(&lds, &[]).await;

    // The next real change is pushed as usual.
    h.apply(
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: ratings, namespace: default}\nspec:\n  host: ratings\n  trafficPolicy: {loadBalancer: {simple: RANDOM}}\n  subsets: [{name: v1, labels: {version: v1}}]\n",
    )
    .await;
    // The change's CDS, in which ratings has only the v1 subset (a CDS
    // built before the change was applied may come first).
    let pushed = loop {
        let pushed = s.recv_type(TypeUrl::Cluster).await;
        if !cluster_names(&pushed).contains("outbound|9080|v2|ratings.default.svc.cluster.local") {
            break pushed;
        }
        s.ack(&pushed, &[]).await;
    };
    assert_ne!(pushed.version_info, cds.version_info);
    // A NACK with a stale nonce is ignored as well.
    nack.response_nonce = cds.nonce.clone();
    s.send_request(nack).await;
    s.ack(&pushed, &[]).await;
    s.send(TypeUrl::Route, &["9080"], "", "").await;
    let next = s.recv().await;
    assert!(
        next.type_url == TypeUrl::Route.as_str() || next.type_url == TypeUrl::Listener.as_str(),
        "nothing was resent for the NACK: got {} version {}",
        next.type_url,
        next.version_info
    );
}

#[tokio::test]
async fn stale_nonce_is_ignored() {
    let h = Harness::start().await;
    let mut s = h.stream(PRODUCTPAGE).await;
    let cds = s.recv_type(TypeUrl::Cluster).await;
    s.ack(&cds, &[]).await;
    s.send(TypeUrl::Endpoint, &[REVIEWS_V1], "", "").await;
    let eds1 = s.recv_type(TypeUrl::Endpoint).await;
    s.send(TypeUrl::Endpoint, &[REVIEWS_V1, REVIEWS_V2], &eds1.version_info, &eds1.nonce).await;
    let eds2 = s.recv_type(TypeUrl::Endpoint).await;
    assert_eq!(cla_names(&eds2), [REVIEWS_V2.to_string()].into(), "only the newly named assignment");
    // A request that answers the older nonce changes nothing.
    s.send(TypeUrl::Endpoint, &[RATINGS], &eds1.version_info, &eds1.nonce).await;
    s.probe_nothing_pending().await;
}

#[tokio::test]
async fn reconnect_with_the_current_version_is_not_answered_but_an_old_one_is() {
    let h = Harness::start().await;
    let mut s = h.stream(PRODUCTPAGE).await;
    let cds = s.recv_type(TypeUrl::Cluster).await;
    drop(s);

    // A new stream that already has this content: nothing to send.
    let mut s2 = Stream::open_with_first(
        h.addr,
        node(PRODUCTPAGE, &[("app", "productpage"), ("version", "v1")]),
        TypeUrl::Cluster,
        &cds.version_info,
    )
    .await;
    s2.probe_nothing_pending().await;

    // A stream that has an older version gets the current one.
    let mut s3 = Stream::open_with_first(
        h.addr,
        node(PRODUCTPAGE, &[("app", "productpage"), ("version", "v1")]),
        TypeUrl::Cluster,
        "0000000000000000",
    )
    .await;
    let r = s3.recv_type(TypeUrl::Cluster).await;
    assert_eq!(r.version_info, cds.version_info);
}

#[tokio::test]
async fn endpoint_change_sends_only_changed_assignments_to_watchers() {
    let h = Harness::start().await;
    let mut watcher = h.stream(PRODUCTPAGE).await;
    let mut other = h.stream("sidecar~127.0.0.12~details-v1.default~default.svc.cluster.local").await;
    for s in [&mut watcher, &mut other] {
        let cds = s.recv_type(TypeUrl::Cluster).await;
        s.ack(&cds, &[]).await;
    }
    watcher.send(TypeUrl::Endpoint, &[REVIEWS_V1, RATINGS], "", "").await;
    let eds = watcher.recv_type(TypeUrl::Endpoint).await;
    watcher.ack(&eds, &[REVIEWS_V1, RATINGS]).await;
    other.send(TypeUrl::Endpoint, &[RATINGS], "", "").await;
    let eds_other = other.recv_type(TypeUrl::Endpoint).await;
    other.ack(&eds_other, &[RATINGS]).await;

    let generations =
        || meshpush::generate::cache::CacheStats::get(&h.engine.cache().stats.generations, TypeUrl::Endpoint);
    let before = generations();
    // A second reviews-v1 pod.
    h.apply(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: reviews-v1-b, namespace: default, labels: {app: reviews, version: v1}}\nstatus: {podIP: 127.0.0.41, phase: Running}\n",
    )
    .await;
    let pushed = watcher.recv_type(TypeUrl::Endpoint).await;
    assert_eq!(cla_names(&pushed), [REVIEWS_V1.to_string()].into(), "only the changed assignment");
    assert_eq!(endpoint_count(&cla(&pushed, REVIEWS_V1)), 2);
    assert_ne!(pushed.version_info, eds.version_info);
    // The stream that does not watch reviews gets nothing.
    other.probe_nothing_pending().await;
    // And exactly one assignment was encoded for the change: the one watched.
    assert_eq!(generations() - before, 1);
}

#[tokio::test]
async fn removed_cluster_goes_only_after_listeners_and_routes() {
    let h = Harness::start().await;
    let mut s = h.stream(PRODUCTPAGE).await;
    let cds = s.recv_type(TypeUrl::Cluster).await;
    s.ack(&cds, &[]).await;
    let lds = s.probe_nothing_pending().await;
    s.ack(&lds, &[]).await;
    s.send(TypeUrl::Route, &["9080"], "", "").await;
    let rds = s.recv_type(TypeUrl::Route).await;
    s.ack(&rds, &["9080"]).await;
    assert!(cluster_names(&cds).contains(RATINGS));

    h.delete(vec![
        meshpush::config::ConfigKey::new(meshpush::config::ConfigKind::Service, "default", "ratings"),
        meshpush::config::ConfigKey::new(meshpush::config::ConfigKind::VirtualService, "default", "ratings"),
    ])
    .await;
    let cds2 = s.recv_type(TypeUrl::Cluster).await;
    assert!(cluster_names(&cds2).contains(RATINGS), "the cluster stays while routes may still use it");
    s.ack(&cds2, &[]).await;
    // The listener may be unchanged (port 9080 still has services); the
    // route config must change, and the cluster stays until it is ACKed.
    let rds2 = loop {
        let r = s.recv().await;
        assert_ne!(r.type_url, TypeUrl::Cluster.as_str(), "cluster removed before the routes were ACKed");
        if r.type_url == TypeUrl::Route.as_str() {
            break r;
        }
        s.ack(&r, &[]).await;
    };
    s.ack(&rds2, &["9080"]).await;
    let cds3 = s.recv_type(TypeUrl::Cluster).await;
    assert!(!cluster_names(&cds3).contains(RATINGS), "removed once listeners and routes are ACKed");
}

#[tokio::test]
async fn assignment_is_sent_again_after_its_cluster_changes() {
    let h = Harness::start().await;
    let mut s = h.stream(PRODUCTPAGE).await;
    let cds = s.recv_type(TypeUrl::Cluster).await;
    s.ack(&cds, &[]).await;
    let ratings_v1 = "outbound|9080|v1|ratings.default.svc.cluster.local";
    s.send(TypeUrl::Endpoint, &[ratings_v1], "", "").await;
    let eds = s.recv_type(TypeUrl::Endpoint).await;
    s.ack(&eds, &[ratings_v1]).await;

    // Change only the cluster (its load balancer), not the endpoints.
    h.apply(
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: ratings, namespace: default}\nspec:\n  host: ratings\n  trafficPolicy: {loadBalancer: {simple: RANDOM}}\n  subsets: [{name: v1, labels: {version: v1}}, {name: v2, labels: {version: v2}}]\n",
    )
    .await;
    let cds2 = s.recv_type(TypeUrl::Cluster).await;
    assert_ne!(cds2.version_info, cds.version_info);
    s.ack(&cds2, &[]).await;
    let eds2 = s.recv_type(TypeUrl::Endpoint).await;
    assert!(cla_names(&eds2).contains(ratings_v1), "the unchanged assignment is sent again");
}

#[tokio::test]
async fn malformed_node_id_is_refused_with_invalid_argument() {
    let h = Harness::start().await;
    let mut client = AggregatedDiscoveryServiceClient::connect(format!("http://{}", h.addr)).await.unwrap();
    let (tx, rx) = mpsc::channel(1);
    tx.send(DiscoveryRequest {
        node: Some(Node { id: "not-an-istio-id".into(), ..Default::default() }),
        type_url: TypeUrl::Cluster.as_str().into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let status = match client.stream_aggregated_resources(ReceiverStream::new(rx)).await {
        Err(status) => status,
        Ok(response) => response.into_inner().message().await.expect_err("the stream must fail"),
    };
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("not-an-istio-id"), "{}", status.message());
}

#[tokio::test]
async fn node_may_be_omitted_after_the_first_request() {
    let h = Harness::start().await;
    let mut s = h.stream(PRODUCTPAGE).await;
    let cds = s.recv_type(TypeUrl::Cluster).await;
    // Like a gRPC client: no node on later requests.
    s.tx.send(DiscoveryRequest {
        version_info: cds.version_info.clone(),
        type_url: TypeUrl::Cluster.as_str().into(),
        response_nonce: cds.nonce.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    s.tx.send(DiscoveryRequest { type_url: TypeUrl::Listener.as_str().into(), ..Default::default() }).await.unwrap();
    let lds = s.recv_type(TypeUrl::Listener).await;
    let listeners = names::<Listener>(&lds, |l| l.name.clone());
    assert!(listeners.contains("0.0.0.0_9080"), "{listeners:?}");
}

/// Passes request bytes through as they are, so a test can send what no
/// encoder would produce.
#[derive(Debug, Clone, Default)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = bytes::Bytes;
    type Decode = bytes::Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }
    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = bytes::Bytes;
    type Error = tonic::Status;
    fn encode(&mut self, item: bytes::Bytes, dst: &mut tonic::codec::EncodeBuf<'_>) -> Result<(), tonic::Status> {
        bytes::BufMut::put(dst, item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = bytes::Bytes;
    type Error = tonic::Status;
    fn decode(&mut self, src: &mut tonic::codec::DecodeBuf<'_>) -> Result<Option<bytes::Bytes>, tonic::Status> {
        let n = bytes::Buf::remaining(src);
        Ok(Some(bytes::Buf::copy_to_bytes(src, n)))
    }
}

#[tokio::test]
async fn a_later_request_that_cannot_be_decoded_ends_the_stream_with_invalid_argument() {
    let h = Harness::start().await;
    let channel =
        tonic::transport::Endpoint::from_shared(format!("http://{}", h.addr)).unwrap().connect().await.unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let (tx, rx) = mpsc::channel::<bytes::Bytes>(4);
    let first = DiscoveryRequest {
        node: Some(Node { id: PRODUCTPAGE.into(), ..Default::default() }),
        type_url: TypeUrl::Cluster.as_str().into(),
        ..Default::default()
    };
    tx.send(first.encode_to_vec().into()).await.unwrap();
    let path = http::uri::PathAndQuery::from_static(
        "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources",
    );
    let mut responses = grpc
        .streaming(tonic::Request::new(ReceiverStream::new(rx)), path, RawCodec)
        .await
        .expect("the stream opens")
        .into_inner();
    let cds = responses.message().await.expect("a CDS response").expect("a message");
    assert!(DiscoveryResponse::decode(cds).is_ok());
    // Field 1 (version_info) announced as 200 bytes long, then nothing: no decoder can read it.
    tx.send(bytes::Bytes::from_static(&[0x0a, 0xc8, 0x01, 0x41])).await.unwrap();
    let status = loop {
        match responses.message().await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the stream ended with OK"),
            Err(status) => break status,
        }
    };
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("undecodable request"), "{}", status.message());
}

#[tokio::test]
async fn a_huge_node_id_is_refused_with_a_bounded_message() {
    let h = Harness::start().await;
    let mut client = AggregatedDiscoveryServiceClient::connect(format!("http://{}", h.addr)).await.unwrap();
    let (tx, rx) = mpsc::channel(1);
    let huge = format!("not-an-istio-id\n{}", "x".repeat(1 << 20));
    tx.send(DiscoveryRequest {
        node: Some(Node { id: huge, ..Default::default() }),
        type_url: TypeUrl::Cluster.as_str().into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let status = match client.stream_aggregated_resources(ReceiverStream::new(rx)).await {
        Err(status) => status,
        Ok(response) => response.into_inner().message().await.expect_err("the stream must fail"),
    };
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().len() < 512, "{} bytes echoed", status.message().len());
    assert!(status.message().contains("not-an-istio-id\\nxxx"), "escaped: {}", status.message());
    assert!(status.message().contains("(1048592 bytes)"), "{}", status.message());
}

#[tokio::test]
async fn named_listeners_are_answered_at_every_change_of_the_names() {
    let h = Harness::start().await;
    // A proxyless gRPC client of bookinfo's namespace: it names the
    // listeners it wants (`HOST:PORT`, as its application dialled them).
    let node = meshpush::testing::memory::grpc_node(
        "sidecar~127.0.0.12~client-1.default~default.svc.cluster.local",
        &[("app", "client")],
    );
    let mut s = Stream::open_with_first(h.addr, node, TypeUrl::Cluster, "").await;
    let cds = s.recv_type(TypeUrl::Cluster).await;
    s.ack(&cds, &[]).await;
    s.send(TypeUrl::Listener, &["reviews:9080"], "", "").await;
    let lds = s.recv_type(TypeUrl::Listener).await;
    let names = |r: &DiscoveryResponse| -> Vec<String> {
        r.resources.iter().map(|a| Listener::decode(a.value.as_slice()).unwrap().name).collect()
    };
    assert_eq!(names(&lds), ["reviews:9080"], "the listener, named as asked");
    s.ack(&lds, &["reviews:9080"]).await;
    // A name that resolves to nothing: the answer leaves it out, and comes
    // although what exists did not change.
    s.send(TypeUrl::Listener, &["reviews:9080", "nothing:9080"], &lds.version_info, &lds.nonce).await;
    let again = s.recv_type(TypeUrl::Listener).await;
    assert_eq!(names(&again), ["reviews:9080"]);
    assert_ne!(again.nonce, lds.nonce);
    // The same names again is an ACK: not answered.
    s.ack(&again, &["reviews:9080", "nothing:9080"]).await;
    let probe = s.probe_nothing_pending().await;
    assert!(names(&probe).is_empty(), "after names, an empty list unsubscribes them all");
}
