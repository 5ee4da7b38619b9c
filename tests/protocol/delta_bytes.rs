//! Bytes on the wire per change, state of the world versus delta.
//!
//! One SotW stream and one delta stream of the same sidecar, on a synthetic
//! mesh of 1,000 services (s1's shape), each watching every cluster, its
//! assignment, every listener and route config `8080`. Three changes — one
//! endpoint, one new service, one VirtualService — and for each the bytes
//! (gRPC frames, header included) each stream receives until it is quiet.
//! Figures: `cargo test --test delta_bytes -- --nocapture` (perf.md);
//! `DELTA_BYTES_SERVICES=N` changes the mesh size, `DELTA_BYTES_TRACE=1`
//! prints every response.

use crate::support;

use std::time::Duration;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use meshpush::config::SourceRef;
use meshpush::model::store::Write;
use meshpush::resource::TypeUrl;
use meshpush::testing::synth::MeshSpec;
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

const QUIET: Duration = Duration::from_millis(400);
const NODE: &str = "sidecar~10.255.0.1~client-1.ns-1~ns-1.svc.cluster.local";

fn src() -> SourceRef {
    SourceRef { file: "synth.yaml".into(), doc: 0 }
}

fn node() -> Node {
    meshpush::testing::memory::node(NODE, "NONE", &[("app", "client")])
}

struct Sotw {
    tx: mpsc::Sender<DiscoveryRequest>,
    rx: tonic::Streaming<DiscoveryResponse>,
    names: [Vec<String>; TypeUrl::COUNT],
}

impl Sotw {
    async fn request(&mut self, t: TypeUrl, r: Option<&DiscoveryResponse>) {
        let req = DiscoveryRequest {
            node: Some(node()),
            type_url: t.as_str().into(),
            resource_names: self.names[t.index()].clone(),
            version_info: r.map(|r| r.version_info.clone()).unwrap_or_default(),
            response_nonce: r.map(|r| r.nonce.clone()).unwrap_or_default(),
            ..Default::default()
        };
        self.tx.send(req).await.unwrap();
    }

    /// ACKs everything until quiet; returns the bytes received.
    async fn drain(&mut self) -> usize {
        let mut bytes = 0;
        while let Ok(Some(r)) = tokio::time::timeout(QUIET, self.rx.message()).await.map(|m| m.unwrap()) {
            bytes += r.encoded_len() + 5;
            if std::env::var_os("DELTA_BYTES_TRACE").is_some() {
                eprintln!("sotw {} {} {}", r.type_url, r.resources.len(), r.nonce);
            }
            let t = TypeUrl::parse(&r.type_url).unwrap();
            self.request(t, Some(&r)).await;
        }
        bytes
    }
}

struct Delta {
    tx: mpsc::Sender<DeltaDiscoveryRequest>,
    rx: tonic::Streaming<DeltaDiscoveryResponse>,
}

impl Delta {
    async fn send(&mut self, t: TypeUrl, subscribe: &[String], nonce: &str) {
        let req = DeltaDiscoveryRequest {
            node: Some(node()),
            type_url: t.as_str().into(),
            resource_names_subscribe: subscribe.to_vec(),
            response_nonce: nonce.into(),
            ..Default::default()
        };
        self.tx.send(req).await.unwrap();
    }

    async fn drain(&mut self) -> usize {
        let mut bytes = 0;
        while let Ok(Some(r)) = tokio::time::timeout(QUIET, self.rx.message()).await.map(|m| m.unwrap()) {
            bytes += r.encoded_len() + 5;
            if std::env::var_os("DELTA_BYTES_TRACE").is_some() {
                eprintln!("delta {} +{} -{} {}", r.type_url, r.resources.len(), r.removed_resources.len(), r.nonce);
            }
            let t = TypeUrl::parse(&r.type_url).unwrap();
            self.send(t, &[], &r.nonce).await;
        }
        bytes
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_sends_no_more_than_a_resource_header_over_sotw_and_far_less_for_a_new_service() {
    let spec = MeshSpec::new(std::env::var("DELTA_BYTES_SERVICES").map_or(1000, |v| v.parse().unwrap()));
    let server = support::ads_server::AdsServer::with_objects(spec.objects()).await;
    let addr = server.addr;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
    let mut client = AggregatedDiscoveryServiceClient::new(channel).max_decoding_message_size(usize::MAX);

    // SotW: CDS, learn the EDS names, then EDS, LDS, RDS.
    // The first request is queued before the call: the server reads it
    // (the node) before it answers the call.
    let (tx, rx) = mpsc::channel(64);
    tx.send(DiscoveryRequest { node: Some(node()), type_url: TypeUrl::Cluster.as_str().into(), ..Default::default() })
        .await
        .unwrap();
    let rx = client.stream_aggregated_resources(ReceiverStream::new(rx)).await.unwrap().into_inner();
    let mut sotw = Sotw { tx, rx, names: Default::default() };
    let cds = sotw.rx.message().await.unwrap().unwrap();
    let eds_names: Vec<String> = cds
        .resources
        .iter()
        .map(|a| Cluster::decode(&a.value[..]).unwrap())
        .filter(|c| c.eds_cluster_config.is_some())
        .map(|c| c.name)
        .collect();
    sotw.request(TypeUrl::Cluster, Some(&cds)).await;
    sotw.names[TypeUrl::Endpoint.index()] = eds_names.clone();
    sotw.names[TypeUrl::Route.index()] = vec!["8080".into()];
    for t in [TypeUrl::Endpoint, TypeUrl::Listener, TypeUrl::Route] {
        sotw.request(t, None).await;
    }
    let sotw_initial = cds.encoded_len() + 5 + sotw.drain().await;

    let (tx, rx) = mpsc::channel(64);
    tx.send(DeltaDiscoveryRequest {
        node: Some(node()),
        type_url: TypeUrl::Cluster.as_str().into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let rx = client.delta_aggregated_resources(ReceiverStream::new(rx)).await.unwrap().into_inner();
    let mut delta = Delta { tx, rx };
    delta.send(TypeUrl::Endpoint, &eds_names, "").await;
    delta.send(TypeUrl::Listener, &[], "").await;
    delta.send(TypeUrl::Route, &["8080".into()], "").await;
    let delta_initial = delta.drain().await;
    println!("{:<28} {:>12} {:>12}", "change", "SotW bytes", "delta bytes");
    println!("{:<28} {:>12} {:>12}", "initial sync", sotw_initial, delta_initial);

    let mut svc_1000 = vec![Write::put(spec.service(1000), src())];
    svc_1000.push(Write::put(spec.pod(1000, 0, "10.254.0.1"), src()));
    let changes: [(&str, Vec<Write>); 3] = [
        ("one endpoint added", vec![Write::put(spec.pod(1, 99, "10.254.0.2"), src())]),
        ("one new service", svc_1000),
        ("one VirtualService edited", vec![Write::put(spec.virtual_service(0, 50), src())]),
    ];
    for (what, writes) in changes {
        server.write(writes).await;
        let (s, d) = tokio::join!(sotw.drain(), delta.drain());
        println!("{what:<28} {s:>12} {d:>12}");
        assert!(d > 0, "{what}: the delta stream got the change");
        if what != "one new service" {
            // Both send only the changed resource — the assignment, or route
            // config `8080` (every service of this mesh shares the port, so
            // one route config holds every virtual host); delta adds a name
            // and a version per resource.
            assert!(d <= s + 100, "{what}: delta ({d} bytes) about as small as SotW ({s} bytes)");
        } else {
            assert!(d < s, "{what}: delta sends less ({d} bytes) than SotW ({s} bytes)");
        }
    }
}
