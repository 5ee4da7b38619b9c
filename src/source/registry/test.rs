//! The registry API against an in-process server: batches applied and
//! refused whole, versions, and a change reaching an ADS stream.

use std::net::SocketAddr;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::config::core::v3::address::Address as AddressKind;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::endpoint::v3::lb_endpoint::HostIdentifier;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::protobuf::{Struct, Value, value::Kind};
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::transport::Channel;

use super::proto::registry_client::RegistryClient;
use super::proto::{ApplyRequest, GetVersionRequest, Object, ObjectKey, WaitForRevisionRequest};
use super::*;
use crate::config::ConfigObject;
use crate::push::{DebounceConfig, Debouncer, PushRequest, PushSlot};
use crate::resource::TypeUrl;
use crate::xds::AdsService;

const WAIT: Duration = Duration::from_secs(10);
const CLUSTER: &str = "outbound|8080||web.default.svc.cluster.local";

/// A server with ADS and the registry on one port, fed only by the API.
struct Server {
    store: Arc<ConfigStore>,
    addr: SocketAddr,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Server {
    /// Starts the server; `ready` publishes the first (empty) snapshot as
    /// `meshpush serve` does after loading an empty directory.
    async fn start(ready: bool) -> Server {
        let store = Arc::new(ConfigStore::new());
        let engine = PushEngine::new();
        if ready {
            engine.push(PushRequest::new(store.apply([]))).await;
            engine.set_ready();
        }
        let (changes_tx, changes_rx) = mpsc::channel(64);
        let slot = Arc::new(PushSlot::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = tonic::transport::Server::builder()
            .add_service(AdsService::new(engine.clone()))
            .add_service(RegistryService::new(store.clone(), engine.clone(), changes_tx).into_server());
        let debouncer = Debouncer::new(DebounceConfig::default(), slot.clone());
        let tasks = vec![
            tokio::spawn(async move { router.serve_with_incoming(TcpListenerStream::new(listener)).await.unwrap() }),
            tokio::spawn(async move {
                debouncer.run(changes_rx).await;
            }),
            tokio::spawn(engine.run(slot)),
        ];
        Server { store, addr, tasks }
    }

    async fn client(&self) -> RegistryClient<Channel> {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .connect()
            .await
            .expect("connect to the registry");
        RegistryClient::new(channel)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.tasks.iter().for_each(|t| t.abort());
    }
}

fn service(port: u32) -> Object {
    Object {
        document: format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: default}}\n\
             spec: {{ports: [{{name: http, port: {port}}}]}}\n"
        ),
    }
}

fn slice(address: &str) -> Object {
    Object {
        document: format!(
            "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
             metadata: {{name: web-1, namespace: default, labels: {{kubernetes.io/service-name: web}}}}\n\
             addressType: IPv4\nendpoints: [{{addresses: [{address}]}}]\nports: [{{name: http, port: 8080}}]\n"
        ),
    }
}

fn key(kind: &str, name: &str) -> ObjectKey {
    ObjectKey { kind: kind.into(), namespace: String::new(), name: name.into() }
}

#[tokio::test]
async fn apply_puts_and_deletes_objects_and_the_revision_gets_published() {
    let server = Server::start(true).await;
    let mut client = server.client().await;

    let applied = client
        .apply(ApplyRequest { puts: vec![service(8080), slice("127.0.0.50")], deletes: vec![] })
        .await
        .expect("a valid batch is applied")
        .into_inner();
    assert_eq!(applied.changed, 2);
    assert!(applied.warnings.is_empty(), "{:?}", applied.warnings);
    let stored = server.store.snapshot();
    let web = stored.get(&ConfigKey::new(ConfigKind::Service, "default", "web")).expect("the Service is stored");
    assert_eq!(web.source, SourceRef { file: REGISTRY_SOURCE.into(), doc: 0 });
    assert!(matches!(*web.object, ConfigObject::Service(_)));

    let published = client
        .wait_for_revision(WaitForRevisionRequest { revision: applied.revision, timeout_ms: 5_000 })
        .await
        .expect("the revision is published")
        .into_inner();
    assert!(published.ready && published.revision >= applied.revision);
    assert!(published.version >= 2, "the batch made a new snapshot: {published:?}");

    // The same batch again changes nothing and keeps the revision.
    let again = client
        .apply(ApplyRequest { puts: vec![service(8080), slice("127.0.0.50")], deletes: vec![] })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((again.changed, again.revision), (0, applied.revision));

    // Deleting one object, and one that does not exist.
    let deleted = client
        .apply(ApplyRequest { puts: vec![], deletes: vec![key("EndpointSlice", "web-1"), key("Sidecar", "nothing")] })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(deleted.changed, 1);
    assert!(deleted.revision > applied.revision);
    assert_eq!(server.store.snapshot().len(), 1, "only the Service is left");
    let version = client.get_version(GetVersionRequest {}).await.unwrap().into_inner();
    assert!(version.ready);
    // Every answer names the server instance, the same one throughout.
    assert!(!version.instance_id.is_empty());
    assert_eq!(applied.instance_id, version.instance_id);
    assert_eq!(published.instance_id, version.instance_id);
    assert!(version.instance_id.starts_with(&format!("{}-", std::process::id())), "{}", version.instance_id);
}

#[tokio::test]
async fn an_invalid_batch_is_refused_whole_with_a_reason_per_object() {
    let server = Server::start(true).await;
    let mut client = server.client().await;
    let bad_vs = Object {
        document: "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: web}\n\
                   spec: {hosts: [web], http: [{route: [{destination: {host: web}, weight: -5}]}]}\n"
            .into(),
    };
    let unknown = Object { document: "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n".into() };
    let request = ApplyRequest {
        puts: vec![service(8080), bad_vs, unknown, service(0), Object { document: "  \n".into() }],
        deletes: vec![key("Widget", "w"), key("Service", "web")],
    };
    let status = client.apply(request).await.expect_err("the batch is refused");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().starts_with("batch refused, nothing applied"), "{}", status.message());
    let problems = apply_problems(&status).expect("the status carries ApplyProblems").problems;
    let lines: Vec<String> = problems.iter().map(problem_line).collect();
    assert_eq!(
        lines,
        vec![
            "puts[1]: VirtualService default/web: spec.http[0].route[0].weight: -5 is negative",
            "puts[2]: warning: unknown kind Deployment apps/v1: skipped",
            "puts[3]: Service default/web: spec.ports[0].port: 0 is not a valid port number: ports are 1..65535",
            "puts[4]: the document is empty: expected one object with apiVersion and kind",
            "deletes[0]: Widget /w: unknown kind \"Widget\": expected one of Service, Pod, EndpointSlice, Node, \
             ServiceEntry, WorkloadEntry, VirtualService, DestinationRule, Gateway, Sidecar, WorkloadGroup, Secret, PeerAuthentication, AuthorizationPolicy, RequestAuthentication, Telemetry, ProxyConfig, EnvoyFilter, Namespace, GatewayClass, KubernetesGateway, HTTPRoute, GRPCRoute, TCPRoute, TLSRoute, ReferenceGrant, Ingress, IngressClass",
            "deletes[1]: Service /web: puts[0] puts the same object; put or delete it, not both",
        ]
    );
    assert!(server.store.snapshot().is_empty(), "nothing of the batch was applied");
}

#[tokio::test]
async fn the_same_object_twice_in_a_batch_is_refused() {
    let server = Server::start(true).await;
    let mut client = server.client().await;
    let status = client
        .apply(ApplyRequest { puts: vec![service(8080), service(9090)], deletes: vec![] })
        .await
        .expect_err("refused");
    let problems = apply_problems(&status).unwrap().problems;
    assert_eq!(problems.len(), 1);
    assert_eq!(
        problem_line(&problems[0]),
        "puts[1]: Service default/web: puts[0] puts the same object; each object once per batch"
    );
    assert!(server.store.snapshot().is_empty());
}

#[tokio::test]
async fn nothing_is_accepted_before_the_directory_is_loaded() {
    let server = Server::start(false).await;
    let mut client = server.client().await;
    let status = client.apply(ApplyRequest { puts: vec![service(8080)], deletes: vec![] }).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert!(!client.get_version(GetVersionRequest {}).await.unwrap().into_inner().ready);
    assert!(server.store.snapshot().is_empty());
}

#[tokio::test]
async fn an_endpoint_change_applied_through_the_api_reaches_an_ads_stream() {
    let server = Server::start(true).await;
    let mut registry = server.client().await;
    let applied = registry
        .apply(ApplyRequest { puts: vec![service(8080), slice("127.0.0.50")], deletes: vec![] })
        .await
        .unwrap()
        .into_inner();
    // The stream starts on the snapshot that has the service, so that the
    // next push it sees is the endpoint change.
    registry.wait_for_revision(WaitForRevisionRequest { revision: applied.revision, timeout_ms: 5_000 }).await.unwrap();

    let mut ads = AggregatedDiscoveryServiceClient::connect(format!("http://{}", server.addr)).await.unwrap();
    let (tx, rx) = mpsc::channel(16);
    let node = node();
    tx.send(request(&node, TypeUrl::Cluster, &[], "", "")).await.unwrap();
    let mut responses = ads.stream_aggregated_resources(ReceiverStream::new(rx)).await.unwrap().into_inner();
    let mut next = async || -> DiscoveryResponse {
        tokio::time::timeout(WAIT, responses.message()).await.expect("a response in time").unwrap().unwrap()
    };
    let cds = next().await;
    assert_eq!(cds.type_url, TypeUrl::Cluster.as_str());
    tx.send(request(&node, TypeUrl::Cluster, &[], &cds.version_info, &cds.nonce)).await.unwrap();
    tx.send(request(&node, TypeUrl::Endpoint, &[CLUSTER], "", "")).await.unwrap();
    let eds = next().await;
    assert_eq!(eds.type_url, TypeUrl::Endpoint.as_str());
    assert_eq!(addresses(&eds), vec!["127.0.0.50".to_string()]);
    tx.send(request(&node, TypeUrl::Endpoint, &[CLUSTER], &eds.version_info, &eds.nonce)).await.unwrap();

    let changed =
        registry.apply(ApplyRequest { puts: vec![slice("127.0.0.51")], deletes: vec![] }).await.unwrap().into_inner();
    assert_eq!(changed.changed, 1);
    let pushed = next().await;
    assert_eq!(pushed.type_url, TypeUrl::Endpoint.as_str());
    assert_eq!(addresses(&pushed), vec!["127.0.0.51".to_string()], "the new address is pushed");
}

fn node() -> Node {
    let s = |v: &str| Value { kind: Some(Kind::StringValue(v.into())) };
    Node {
        id: "sidecar~127.0.0.60~client.default~default.svc.cluster.local".into(),
        metadata: Some(Struct { fields: [("NAMESPACE".to_string(), s("default"))].into() }),
        ..Default::default()
    }
}

fn request(node: &Node, t: TypeUrl, names: &[&str], version: &str, nonce: &str) -> DiscoveryRequest {
    DiscoveryRequest {
        node: Some(node.clone()),
        type_url: t.as_str().into(),
        resource_names: names.iter().map(|n| n.to_string()).collect(),
        version_info: version.into(),
        response_nonce: nonce.into(),
        ..Default::default()
    }
}

/// Every endpoint address of the response's ClusterLoadAssignments.
fn addresses(response: &DiscoveryResponse) -> Vec<String> {
    let mut found = Vec::new();
    for any in &response.resources {
        let cla = ClusterLoadAssignment::decode(&any.value[..]).unwrap();
        for lb in cla.endpoints.iter().flat_map(|l| &l.lb_endpoints) {
            let Some(HostIdentifier::Endpoint(endpoint)) = &lb.host_identifier else { continue };
            if let Some(AddressKind::SocketAddress(socket)) = endpoint.address.as_ref().and_then(|a| a.address.as_ref())
            {
                found.push(socket.address.clone());
            }
        }
    }
    found
}
