//! Metrics and debug endpoints against a running server with real ADS streams.
//!
//! An in-process server (ADS over loopback gRPC, the admin router over
//! loopback HTTP) serves a copy of bookinfo plus one broken file; a tonic
//! client drives a stream as Envoy does — subscribe, ACK, take a push, NACK
//! one, answer a stale nonce — and the test reads what an operator would:
//! `/metrics`, `/debug/*`.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::protobuf::{Struct, Value as PbValue, value::Kind};
use envoy_types::pb::google::rpc::Status as RpcStatus;
use meshpush::admin::AdminState;
use meshpush::config::parse::parse_documents;
use meshpush::engine::PushEngine;
use meshpush::envoy_api::json;
use meshpush::model::ConfigStore;
use meshpush::model::store::Write;
use meshpush::push::PushRequest;
use meshpush::resource::TypeUrl;
use meshpush::source::file::FileSource;
use meshpush::xds::AdsService;
use prost::Message;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

const WAIT: Duration = Duration::from_secs(10);
const PRODUCTPAGE: &str = "sidecar~127.0.0.11~productpage-v1.default~default.svc.cluster.local";
const REVIEWS_V1: &str = "outbound|9080|v1|reviews.default.svc.cluster.local";

/// A VirtualService with a negative weight: refused, reported as a problem.
const BROKEN: &str = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: broken, namespace: default}\nspec:\n  hosts: [ratings]\n  http:\n  - route:\n    - destination: {host: ratings}\n      weight: -5\n";

struct Server {
    engine: Arc<PushEngine>,
    store: Arc<ConfigStore>,
    xds: std::net::SocketAddr,
    admin: std::net::SocketAddr,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Server {
    async fn start() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/bookinfo");
        for entry in std::fs::read_dir(&example).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "yaml") {
                std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
            }
        }
        std::fs::write(dir.path().join("broken.yaml"), BROKEN).unwrap();
        let store = Arc::new(ConfigStore::new());
        let (source, report) = FileSource::load(dir.path(), &store).expect("the directory loads");
        assert!(report.errors > 0, "broken.yaml is reported");
        let engine = PushEngine::new();
        engine.push(PushRequest::new(report.changes)).await;
        engine.set_ready();
        let service = AdsService::new(engine.clone());
        let state = AdminState::new(service.clone());
        state.set_source(source.status());

        let xds_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (xds, admin) = (xds_listener.local_addr().unwrap(), admin_listener.local_addr().unwrap());
        let ads = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(xds_listener))
                .await
                .unwrap();
        });
        let router = meshpush::admin::router_with(state);
        let http = tokio::spawn(async move { axum::serve(admin_listener, router).await.unwrap() });
        Server { engine, store, xds, admin, tasks: vec![ads, http], _dir: dir }
    }

    async fn apply(&self, yaml: &str) {
        let parsed = parse_documents("test.yaml", yaml);
        assert!(parsed.problems.iter().all(|p| !p.is_error()), "{:?}", parsed.problems);
        let changes = self.store.apply(parsed.objects.into_iter().map(|(o, s)| Write::put(o, s)));
        assert!(!changes.is_empty());
        self.engine.push(PushRequest::new(changes)).await;
    }

    /// `GET path` from the admin address: status and body.
    async fn get(&self, path: &str) -> (u16, String) {
        let (addr, path) = (self.admin, path.to_string());
        let r = tokio::task::spawn_blocking(move || support::http::get(addr, &path, &[]))
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("admin GET: {e}"));
        (r.status, r.body)
    }

    async fn json(&self, path: &str) -> Value {
        let (status, body) = self.get(path).await;
        assert_eq!(status, 200, "{path}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path} is not JSON ({e}): {body}"))
    }

    async fn metrics(&self) -> String {
        let (status, body) = self.get("/metrics").await;
        assert_eq!(status, 200);
        body
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// The value of series `series` (name plus labels, exactly as exposed).
fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("series {series} not exposed:\n{text}"))
}

fn node(id: &str) -> Node {
    let s = |v: &str| PbValue { kind: Some(Kind::StringValue(v.into())) };
    let labels = Struct { fields: [("app".to_string(), s("productpage")), ("version".to_string(), s("v1"))].into() };
    Node {
        id: id.into(),
        cluster: "productpage.default".into(),
        metadata: Some(Struct {
            fields: [
                ("NAMESPACE".to_string(), s("default")),
                ("INTERCEPTION_MODE".to_string(), s("NONE")),
                ("ISTIO_VERSION".to_string(), s("1.40-test")),
                ("LABELS".to_string(), PbValue { kind: Some(Kind::StructValue(labels)) }),
            ]
            .into(),
        }),
        ..Default::default()
    }
}

struct Stream {
    tx: mpsc::Sender<DiscoveryRequest>,
    rx: Streaming<DiscoveryResponse>,
}

impl Stream {
    async fn open(addr: std::net::SocketAddr, id: &str) -> Stream {
        Stream::open_node(addr, node(id)).await
    }

    async fn open_node(addr: std::net::SocketAddr, node: envoy_types::pb::envoy::config::core::v3::Node) -> Stream {
        let mut client = AggregatedDiscoveryServiceClient::connect(format!("http://{addr}")).await.unwrap();
        let (tx, rx) = mpsc::channel(16);
        tx.send(DiscoveryRequest {
            type_url: TypeUrl::Cluster.as_str().into(),
            node: Some(node),
            ..Default::default()
        })
        .await
        .unwrap();
        let response = client.stream_aggregated_resources(ReceiverStream::new(rx)).await.expect("stream accepted");
        Stream { tx, rx: response.into_inner() }
    }

    async fn send(&mut self, t: TypeUrl, names: &[&str], version: &str, nonce: &str) {
        self.tx
            .send(DiscoveryRequest {
                version_info: version.into(),
                resource_names: names.iter().map(|s| s.to_string()).collect(),
                type_url: t.as_str().into(),
                response_nonce: nonce.into(),
                ..Default::default()
            })
            .await
            .unwrap();
    }

    async fn recv(&mut self, t: TypeUrl) -> DiscoveryResponse {
        let r = tokio::time::timeout(WAIT, self.rx.message()).await.expect("a response in time").unwrap().unwrap();
        assert_eq!(r.type_url, t.as_str());
        r
    }

    /// ACKs whatever arrives until nothing has for a moment.
    async fn drain_acking(&mut self) {
        while let Ok(r) = tokio::time::timeout(Duration::from_millis(300), self.rx.message()).await {
            let r = r.unwrap().unwrap();
            let t = TypeUrl::parse(&r.type_url).unwrap();
            self.send(t, &watched(t), &r.version_info, &r.nonce).await;
        }
    }

    /// Receives responses, ACKing each, until one of type `t` arrives (returned, not ACKed).
    async fn recv_acking(&mut self, t: TypeUrl, names: impl Fn(TypeUrl) -> Vec<&'static str>) -> DiscoveryResponse {
        loop {
            let r = tokio::time::timeout(WAIT, self.rx.message()).await.expect("a response in time").unwrap().unwrap();
            let rt = TypeUrl::parse(&r.type_url).unwrap();
            if rt == t {
                return r;
            }
            self.send(rt, &names(rt), &r.version_info, &r.nonce).await;
        }
    }
}

fn watched(t: TypeUrl) -> Vec<&'static str> {
    match t {
        TypeUrl::Endpoint => vec![REVIEWS_V1],
        TypeUrl::Route => vec!["9080"],
        _ => vec![],
    }
}

/// Polls `check` (an admin read) until it holds or the deadline passes.
async fn eventually<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    meshpush::testing::wait::wait_until_async(std::time::Instant::now() + WAIT, what, check).await;
}

const DR_RANDOM: &str = "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: ratings, namespace: default}\nspec:\n  host: ratings\n  trafficPolicy: {loadBalancer: {simple: RANDOM}}\n  subsets: [{name: v1, labels: {version: v1}}]\n";
const DR_LEAST: &str = "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: ratings, namespace: default}\nspec:\n  host: ratings\n  trafficPolicy: {loadBalancer: {simple: LEAST_REQUEST}}\n  subsets: [{name: v1, labels: {version: v1}}]\n";

/// Drives one stream to sync: CDS, LDS, RDS and EDS each sent and ACKed.
async fn synced_stream(s: &Server) -> Stream {
    let mut st = Stream::open(s.xds, PRODUCTPAGE).await;
    let cds = st.recv(TypeUrl::Cluster).await;
    st.send(TypeUrl::Cluster, &[], &cds.version_info, &cds.nonce).await;
    st.send(TypeUrl::Listener, &[], "", "").await;
    let lds = st.recv(TypeUrl::Listener).await;
    st.send(TypeUrl::Listener, &[], &lds.version_info, &lds.nonce).await;
    st.send(TypeUrl::Route, &["9080"], "", "").await;
    let rds = st.recv(TypeUrl::Route).await;
    st.send(TypeUrl::Route, &["9080"], &rds.version_info, &rds.nonce).await;
    st.send(TypeUrl::Endpoint, &[REVIEWS_V1], "", "").await;
    let eds = st.recv(TypeUrl::Endpoint).await;
    st.send(TypeUrl::Endpoint, &[REVIEWS_V1], &eds.version_info, &eds.nonce).await;
    st
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_pushes_acks_nacks_and_convergence() {
    let s = Server::start().await;
    let mut st = synced_stream(&s).await;

    // A change, pushed and ACKed: one convergence observation.
    s.apply(DR_RANDOM).await;
    let cds = st.recv_acking(TypeUrl::Cluster, watched).await;
    st.send(TypeUrl::Cluster, &[], &cds.version_info, &cds.nonce).await;
    st.drain_acking().await;
    eventually("a convergence observation", || async {
        let m = s.metrics().await;
        let n = metric(&m, "pilot_proxy_convergence_time_count");
        if n >= 1.0 { Ok(()) } else { Err(format!("count {n}")) }
    })
    .await;

    // Another change, NACKed.
    s.apply(DR_LEAST).await;
    let rejected = st.recv_acking(TypeUrl::Cluster, watched).await;
    st.tx
        .send(DiscoveryRequest {
            version_info: cds.version_info.clone(),
            type_url: TypeUrl::Cluster.as_str().into(),
            response_nonce: rejected.nonce.clone(),
            error_detail: Some(RpcStatus { code: 13, message: "rejected by the test".into(), details: vec![] }),
            ..Default::default()
        })
        .await
        .unwrap();
    // And a request answering an old nonce.
    st.send(TypeUrl::Cluster, &[], &cds.version_info, &cds.nonce).await;

    eventually("the NACK and the stale nonce to be counted", || async {
        let m = s.metrics().await;
        let (rejects, expired) =
            (metric(&m, "pilot_total_xds_rejects{type=\"cds\"}"), metric(&m, "pilot_xds_expired_nonce{type=\"cds\"}"));
        if rejects == 1.0 && expired == 1.0 { Ok(()) } else { Err(format!("rejects {rejects}, expired {expired}")) }
    })
    .await;

    let m = s.metrics().await;
    assert_eq!(metric(&m, "pilot_xds"), 1.0, "one stream connected");
    assert_eq!(metric(&m, "pilot_services"), 4.0, "bookinfo's four services");
    assert!(metric(&m, "pilot_xds_pushes{type=\"cds\"}") >= 3.0, "initial + two pushes");
    for t in ["lds", "rds", "eds"] {
        assert!(metric(&m, &format!("pilot_xds_pushes{{type=\"{t}\"}}")) >= 1.0, "{t} sent");
    }
    assert!(metric(&m, "pilot_xds_push_time_count{type=\"cds\"}") >= 3.0);
    let converged = metric(&m, "pilot_proxy_convergence_time_count");
    assert_eq!(converged, 1.0, "the NACKed push did not converge");
    let sum = metric(&m, "pilot_proxy_convergence_time_sum");
    assert!(sum > 0.0 && sum < WAIT.as_secs_f64(), "plausible convergence time: {sum}");
    assert_eq!(metric(&m, "pilot_pushcontext_init_seconds_count"), 3.0, "initial load + two changes");
    assert!(metric(&m, "pilot_push_triggers{type=\"config\"}") >= 2.0);
    assert!(metric(&m, "pilot_inbound_updates{type=\"config\"}") >= 2.0);
    assert!(metric(&m, "meshpush_xds_acks_total{type=\"cds\"}") >= 2.0);
    assert!(metric(&m, "meshpush_xds_sent_bytes_total") > 1000.0);
    assert!(metric(&m, "meshpush_cache_generations_total{type=\"cds\"}") >= 1.0);
    assert!(
        metric(&m, "meshpush_cache_hits_total{type=\"eds\"}") + metric(&m, "meshpush_cache_misses_total{type=\"eds\"}")
            >= 1.0
    );
    assert!(metric(&m, "meshpush_encoded_bytes_total") > 0.0);
    assert_eq!(metric(&m, "meshpush_push_queue_depth"), 0.0);
    assert!(metric(&m, "meshpush_scopes") >= 1.0);
    assert!(m.contains("# TYPE pilot_proxy_convergence_time histogram"));
    assert!(m.contains("debounce"), "the convergence help text says the debounce wait is included");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_endpoints_describe_streams_pushes_scopes_and_config() {
    let s = Server::start().await;
    let mut st = synced_stream(&s).await;
    eventually("syncz to show the stream synced", || async {
        let v = s.json("/debug/syncz").await;
        // A sidecar's listeners name no Secrets: SDS is never sent to it.
        let states: Vec<(String, String)> = v[0]["types"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| (t["type"].as_str().unwrap_or("").into(), t["status"].as_str().unwrap_or("").into()))
            .collect();
        let synced = states.iter().filter(|(t, _)| t != "sds").all(|(_, s)| s == "SYNCED");
        let sds_unsent = states.iter().any(|(t, s)| t == "sds" && s == "NOT SENT");
        if states.len() == 5 && synced && sds_unsent { Ok(()) } else { Err(format!("{states:?}")) }
    })
    .await;

    // A NACK turns CDS to ERROR, with Envoy's reason.
    s.apply(DR_RANDOM).await;
    let cds = st.recv_acking(TypeUrl::Cluster, watched).await;
    st.tx
        .send(DiscoveryRequest {
            type_url: TypeUrl::Cluster.as_str().into(),
            response_nonce: cds.nonce.clone(),
            error_detail: Some(RpcStatus { code: 13, message: "bad cluster for the test".into(), details: vec![] }),
            ..Default::default()
        })
        .await
        .unwrap();
    eventually("syncz to show the NACK", || async {
        let v = s.json("/debug/syncz").await;
        if v[0]["types"][0]["status"] == "ERROR" { Ok(()) } else { Err(v[0]["types"][0].to_string()) }
    })
    .await;
    let syncz = s.json("/debug/syncz").await;
    let p = &syncz[0];
    assert_eq!(p["proxy"], PRODUCTPAGE);
    assert_eq!(p["cluster"], "productpage.default");
    assert_eq!(p["proxy_version"], "1.40-test");
    let cds_sync = &p["types"][0];
    assert_eq!(cds_sync["type"], "cds");
    assert_eq!(cds_sync["nonce_sent"], Value::String(cds.nonce.clone()));
    assert_eq!(cds_sync["version_sent"], Value::String(cds.version_info.clone()));
    assert_eq!(cds_sync["last_nack"], "bad cluster for the test");
    assert!(cds_sync["version_acked"].is_string() && cds_sync["nonce_acked"].is_string());

    let conns = s.json("/debug/connections").await;
    assert_eq!(conns.as_array().unwrap().len(), 1);
    let c = &conns[0];
    assert_eq!(c["proxy"], PRODUCTPAGE);
    assert_eq!(c["namespace"], "default");
    assert_eq!(c["labels"]["app"], "productpage");
    assert_eq!(c["subscribed"], serde_json::json!(["cds", "lds", "eds", "rds"]));
    assert_eq!(c["watched"]["eds"], 1);
    assert!(c["nacks"].as_u64() == Some(1) && c["acks"].as_u64().unwrap() >= 4);
    assert!(c["connected_seconds"].as_f64().unwrap() >= 0.0);

    let push = s.json("/debug/push_status").await;
    let last = &push["last_push"];
    assert_eq!(last["trigger"], serde_json::json!(["config"]));
    assert_eq!(last["sample_keys"], serde_json::json!(["DestinationRule default/ratings"]));
    assert_eq!(last["proxies"], 1);
    assert!(last["duration_ms"].as_f64().unwrap() >= last["build_ms"].as_f64().unwrap());
    assert_eq!(push["proxies"], 1);
    assert!(push["per_type"]["cds"]["pushes"].as_u64().unwrap() >= 2);
    assert_eq!(push["per_type"]["cds"]["rejects"], 1);

    let scopes = s.json("/debug/scopes").await;
    let mine = scopes
        .as_array()
        .unwrap()
        .iter()
        .find(|sc| sc["proxies"].as_array().is_some_and(|p| p.iter().any(|p| p == PRODUCTPAGE)))
        .unwrap_or_else(|| panic!("no scope lists the stream: {scopes}"));
    assert_eq!(mine["members"], 1);
    assert_eq!(mine["key"]["namespace"], "default");
    let visible: Vec<&str> = mine["visible_services"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(visible.contains(&"reviews.default.svc.cluster.local"), "{visible:?}");

    let configz = s.json("/debug/configz").await;
    let objects = configz["objects"].as_array().unwrap();
    let reviews_vs = objects
        .iter()
        .find(|o| o["kind"] == "VirtualService" && o["name"] == "reviews")
        .expect("the reviews VirtualService");
    assert_eq!(reviews_vs["source"]["file"], "virtual-services.yaml");
    assert!(objects.iter().all(|o| o["name"] != "broken"), "the refused object is not in the store");
    let problems = configz["problems"].as_array().unwrap();
    assert!(
        problems.iter().any(|p| p["file"] == "broken.yaml"
            && p["severity"] == "error"
            && p["message"].as_str().unwrap().contains("-5")),
        "{problems:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_dump_shows_what_the_proxy_is_sent_in_envoys_shape() {
    let s = Server::start().await;
    let mut st = synced_stream(&s).await;
    let dump = s.json("/debug/config_dump?proxyID=productpage-v1.default").await;
    let configs = dump["configs"].as_array().expect("configs");
    let types: Vec<&str> = configs.iter().filter_map(|c| c["@type"].as_str()).collect();
    assert_eq!(
        types,
        [
            "type.googleapis.com/envoy.admin.v3.ClustersConfigDump",
            "type.googleapis.com/envoy.admin.v3.ListenersConfigDump",
            "type.googleapis.com/envoy.admin.v3.RoutesConfigDump",
            "type.googleapis.com/envoy.admin.v3.EndpointsConfigDump",
            "type.googleapis.com/envoy.admin.v3.SecretsConfigDump",
        ]
    );
    let clusters = configs[0]["dynamic_active_clusters"].as_array().unwrap();
    let reviews = clusters.iter().find(|c| c["cluster"]["name"] == REVIEWS_V1).expect("reviews v1 cluster");
    assert_eq!(reviews["cluster"]["@type"], "type.googleapis.com/envoy.config.cluster.v3.Cluster");
    assert_eq!(reviews["cluster"]["type"], "EDS");
    // Every cluster a stream is sent is shown, and its JSON reads back
    // through Envoy's descriptors (known fields, known types) into a message
    // that prints the same JSON again. (That this JSON is Envoy's own is
    // checked against real Envoys in the e2e scenarios: tests/support/dump.rs.)
    let mut fresh = Stream::open(s.xds, PRODUCTPAGE).await;
    let sent = fresh.recv(TypeUrl::Cluster).await;
    assert_eq!(clusters.len(), sent.resources.len());
    for any in &sent.resources {
        let cluster = Cluster::decode(any.value.as_slice()).unwrap();
        let shown = &clusters.iter().find(|c| c["cluster"]["name"] == cluster.name.as_str()).unwrap()["cluster"];
        let mut fields = shown.clone();
        fields.as_object_mut().unwrap().remove("@type");
        let read = json::from_json("envoy.config.cluster.v3.Cluster", &fields).unwrap();
        assert_eq!(json::any_to_json(&json::to_any(&read)).unwrap(), *shown, "{}", cluster.name);
    }
    // The version is the one the stream was sent.
    let syncz = s.json("/debug/syncz").await;
    assert_eq!(configs[0]["version_info"], syncz[0]["types"][0]["version_sent"]);

    let listeners = configs[1]["dynamic_listeners"].as_array().unwrap();
    let l = listeners.iter().find(|l| l["name"] == "0.0.0.0_9080").expect("the 9080 listener");
    let listener = &l["active_state"]["listener"];
    assert_eq!(listener["address"]["socket_address"]["address"], "127.0.0.1");
    assert_eq!(listener["address"]["socket_address"]["port_value"], 9080);
    assert_eq!(listener["filter_chains"][0]["filters"][0]["typed_config"]["rds"]["route_config_name"], "9080");

    let routes = configs[2]["dynamic_route_configs"].as_array().unwrap();
    let rc = &routes.iter().find(|r| r["route_config"]["name"] == "9080").expect("route config 9080")["route_config"];
    assert!(
        rc["virtual_hosts"].as_array().unwrap().iter().any(|vh| vh["domains"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d == "reviews.default.svc.cluster.local"))
    );

    let endpoints = configs[3]["dynamic_endpoint_configs"].as_array().unwrap();
    let cla = &endpoints
        .iter()
        .find(|e| e["endpoint_config"]["cluster_name"] == REVIEWS_V1)
        .expect("reviews v1 endpoints")["endpoint_config"];
    let sa = &cla["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"];
    assert_eq!(sa["address"], "127.0.0.13");
    assert_eq!(sa["port_value"], 9080);

    // The full node id works too; an unknown proxy is a 404 and a missing id a 400.
    let by_id = s.json(&format!("/debug/config_dump?proxyID={PRODUCTPAGE}")).await;
    assert_eq!(by_id["configs"][0]["version_info"], configs[0]["version_info"]);
    assert_eq!(s.get("/debug/config_dump?proxyID=nobody.default").await.0, 404);
    assert_eq!(s.get("/debug/config_dump").await.0, 400);
    // Building the dump sent nothing on the live stream.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), st.rx.message()).await.is_err(),
        "the dump did not disturb the stream"
    );
}

#[tokio::test]
async fn requests_beyond_the_concurrency_cap_are_turned_away_at_once() {
    let state = AdminState::new(AdsService::new(PushEngine::new()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // A cap of 0: every request is beyond it.
    let limits = meshpush::admin::AdminLimits { max_concurrent: 0, ..Default::default() };
    let router = meshpush::admin::router_with_limits(state, limits);
    let http = tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let r = tokio::task::spawn_blocking(move || support::http::get(addr, "/ready", &[])).await.unwrap().unwrap();
    assert_eq!(r.status, 503);
    assert!(r.body.contains("too many admin requests"), "{}", r.body);
    http.abort();
}

/// `GET path` from `admin` over a connection from address `from` (a
/// loopback address of the test's choosing): the status.
async fn get_from(from: std::net::IpAddr, admin: std::net::SocketAddr, path: &str) -> u16 {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(std::net::SocketAddr::new(from, 0)).unwrap();
    let mut stream = socket.connect(admin).await.unwrap();
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).await.unwrap();
    reply.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no status line: {reply:?}"))
}

#[tokio::test]
async fn expensive_views_are_rate_limited_per_client_address_and_the_rest_are_not() {
    let engine = meshpush::engine::PushEngine::new();
    engine.set_ready();
    let state = meshpush::admin::AdminState::new(meshpush::xds::AdsService::new(engine));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = listener.local_addr().unwrap();
    // Each client 1 view a second, 3 at once.
    let limits = meshpush::admin::AdminLimits { per_client_per_second: 1, per_client_burst: 3, ..Default::default() };
    let router = meshpush::admin::router_with_limits(state, limits)
        .into_make_service_with_connect_info::<std::net::SocketAddr>();
    let http = tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let one: std::net::IpAddr = [127, 0, 0, 1].into();
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(get_from(one, admin, "/debug/syncz").await);
    }
    assert_eq!(statuses[..3], [200, 200, 200], "the burst is served: {statuses:?}");
    assert!(statuses[3..].contains(&429), "then the client is slowed: {statuses:?}");
    // Cheap endpoints are not limited; another address has its own allowance.
    for _ in 0..10 {
        assert_eq!(get_from(one, admin, "/ready").await, 200);
        assert_eq!(get_from(one, admin, "/metrics").await, 200);
    }
    let other: std::net::IpAddr = [127, 0, 0, 2].into();
    assert_eq!(get_from(other, admin, "/debug/connections").await, 200);
    assert_eq!(get_from(other, admin, "/").await, 200);
    http.abort();
}

#[tokio::test]
async fn expensive_views_stop_when_their_time_budget_is_spent_whoever_asks() {
    let engine = meshpush::engine::PushEngine::new();
    engine.set_ready();
    let state = meshpush::admin::AdminState::new(meshpush::xds::AdsService::new(engine));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = listener.local_addr().unwrap();
    // A microsecond a second: the first view spends more than the whole
    // budget (two microseconds), and for many seconds none is built.
    let limits =
        meshpush::admin::AdminLimits { render_time_per_second: Duration::from_micros(1), ..Default::default() };
    let router = meshpush::admin::router_with_limits(state, limits)
        .into_make_service_with_connect_info::<std::net::SocketAddr>();
    let http = tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let one: std::net::IpAddr = [127, 0, 0, 1].into();
    assert_eq!(get_from(one, admin, "/debug/syncz").await, 200);
    // Another address, well within its own rate, is refused all the same.
    let other: std::net::IpAddr = [127, 0, 0, 2].into();
    assert_eq!(get_from(other, admin, "/debug/connections").await, 503);
    assert_eq!(get_from(other, admin, "/").await, 503);
    // The cheap endpoints are not part of the budget.
    assert_eq!(get_from(other, admin, "/ready").await, 200);
    assert_eq!(get_from(other, admin, "/metrics").await, 200);
    http.abort();
}

#[tokio::test]
async fn configz_says_what_ztunnel_does_not_enforce_of_a_policy_where_ambient_mode_is_on() {
    let s = Server::start().await;
    let l7 = "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: get-only, namespace: default}\n\
              spec:\n  action: ALLOW\n  rules: [{to: [{operation: {methods: [GET]}}]}]\n";
    s.apply(l7).await;
    let notes = |configz: &Value| -> Option<Value> {
        let objects = configz["objects"].as_array().unwrap();
        let policy = objects.iter().find(|o| o["kind"] == "AuthorizationPolicy" && o["name"] == "get-only").unwrap();
        policy.get("ztunnelNotEnforced").cloned()
    };
    assert_eq!(notes(&s.json("/debug/configz").await), None, "no ztunnel is served: nothing to say");

    let mesh = meshpush::config::mesh::MeshConfig {
        ambient: meshpush::config::mesh::AmbientSettings { enabled: true, dry_run_policies: false },
        ..Default::default()
    };
    let object =
        meshpush::config::ConfigObject::MeshConfig(Box::new(meshpush::config::mesh::MeshConfigObject::new(mesh)));
    let source = meshpush::config::SourceRef { file: "mesh".into(), doc: 0 };
    let changes = s.store.apply([Write::put(object, source)]);
    s.engine.push(PushRequest::new(changes)).await;
    let notes = notes(&s.json("/debug/configz").await).expect("the policy's notes");
    let text = notes[0].as_str().unwrap();
    assert!(text.contains("methods") && text.contains("allows less"), "{text}");
}

#[tokio::test]
async fn configz_says_what_proxyless_grpc_does_not_apply_of_an_object() {
    let s = Server::start().await;
    s.apply(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: mirrored, namespace: default}\n\
         spec:\n  hosts: [reviews]\n  http:\n  - mirror: {host: ratings}\n    route: [{destination: {host: reviews}}]\n",
    )
    .await;
    let configz = s.json("/debug/configz").await;
    let objects = configz["objects"].as_array().unwrap();
    let find = |kind: &str, name: &str| objects.iter().find(|o| o["kind"] == kind && o["name"] == name).unwrap();
    let notes = find("VirtualService", "mirrored")["proxylessGrpcNotApplied"].as_array().expect("notes").clone();
    assert_eq!(notes.len(), 1, "{notes:?}");
    let text = notes[0].as_str().unwrap();
    assert!(text.starts_with("spec.http[0].mirror: ") && text.contains("not applied"), "{text}");
    let plain = find("Service", "reviews");
    assert!(plain.get("proxylessGrpcNotApplied").is_none(), "nothing to say of an object gRPC applies whole");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_dump_of_a_proxyless_grpc_client_shows_the_routes_its_api_listeners_name() {
    let s = Server::start().await;
    let id = "sidecar~127.0.0.30~client-1.default~default.svc.cluster.local";
    let mut st = Stream::open_node(s.xds, meshpush::testing::memory::grpc_node(id, &[("app", "client")])).await;
    st.recv(TypeUrl::Cluster).await;
    let dump = s.json(&format!("/debug/config_dump?proxyID={id}")).await;
    let configs = dump["configs"].as_array().expect("configs");
    let listeners = configs[1]["dynamic_listeners"].as_array().unwrap();
    assert!(listeners.iter().any(|l| l["name"] == "reviews:9080"), "gRPC's listeners, by dialled name");
    let routes = configs[2]["dynamic_route_configs"].as_array().unwrap();
    let reviews = routes
        .iter()
        .find(|r| r["route_config"]["name"] == "outbound|9080||reviews.default.svc.cluster.local")
        .expect("the route config an API listener names");
    let domains = reviews["route_config"]["virtual_hosts"][0]["domains"].as_array().unwrap();
    assert!(domains.iter().any(|d| d == "reviews:9080"), "{domains:?}");
}
