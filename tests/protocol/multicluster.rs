//! One mesh over several clusters: the meshpush binary reading a local
//! stand-in API server (`support::kube_api`) and, through remote secrets
//! in it, other stand-ins, as istiod reads remote clusters. An ADS client
//! watches one service's endpoints while clusters join, change, go away
//! and come back; `kubectl` lists the remote secrets through the stand-in
//! by their label, as the server's watch selects them.

use crate::support;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine as _;
use envoy_types::pb::envoy::config::endpoint::v3::{ClusterLoadAssignment, lb_endpoint::HostIdentifier};
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use meshpush::resource::TypeUrl;
use prost::Message as _;
use serde_json::Value;
use support::kube_api::{KubeApi, remote_secret};
use support::meshpush::Meshpush;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

const WAIT: Duration = Duration::from_secs(20);
const REVIEWS: &str = "outbound|9080||reviews.shop.svc.cluster.local";

fn service() -> String {
    "apiVersion: v1\nkind: Service\nmetadata: {name: reviews, namespace: shop}\n\
     spec:\n  clusterIP: 10.96.0.20\n  selector: {app: reviews}\n  ports:\n  - {name: http, port: 9080, targetPort: 9080}\n"
        .to_string()
}

fn pod(name: &str, ip: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: shop, labels: {{app: reviews}}}}\n\
         spec: {{serviceAccountName: reviews, containers: [{{name: app, image: x}}]}}\n\
         status: {{podIP: {ip}, phase: Running, conditions: [{{type: Ready, status: \"True\"}}]}}\n"
    )
}

/// A stand-in cluster serving `reviews` with one Pod per address.
fn cluster(addresses: &[(&str, &str)]) -> KubeApi {
    let api = KubeApi::start();
    api.put(&service());
    for (name, ip) in addresses {
        api.put(&pod(name, ip));
    }
    api
}

fn start(local: &KubeApi, flags: &[&str]) -> (Meshpush, tempfile::NamedTempFile) {
    let kubeconfig = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(kubeconfig.path(), local.kubeconfig()).unwrap();
    (Meshpush::start_kube(kubeconfig.path(), flags), kubeconfig)
}

fn configz(mesh: &Meshpush) -> Value {
    serde_json::from_str(&mesh.admin("/debug/configz").body).expect("configz is JSON")
}

/// The remote cluster `id` as `/debug/configz` shows it.
fn remote(mesh: &Meshpush, id: &str) -> Option<Value> {
    let configz = configz(mesh);
    configz["remoteClusters"]["clusters"].as_array()?.iter().find(|c| c["id"] == id).cloned()
}

/// A sidecar's EDS stream for `reviews`.
struct Eds {
    tx: mpsc::Sender<DiscoveryRequest>,
    rx: tonic::Streaming<DiscoveryResponse>,
}

impl Eds {
    async fn open(mesh: &Meshpush) -> Eds {
        Eds::open_in(mesh, None).await
    }

    /// [`Eds::open`] for a sidecar on `network` (its `NETWORK` metadata).
    async fn open_in(mesh: &Meshpush, network: Option<&str>) -> Eds {
        let addr = mesh.xds_addr().to_string();
        let mut client = AggregatedDiscoveryServiceClient::connect(format!("http://{addr}")).await.unwrap();
        let (tx, rx) = mpsc::channel(16);
        let mut node = meshpush::testing::memory::node(
            "sidecar~127.0.0.50~productpage-1.shop~shop.svc.cluster.local",
            "NONE",
            &[("app", "productpage")],
        );
        if let (Some(network), Some(metadata)) = (network, node.metadata.as_mut()) {
            use envoy_types::pb::google::protobuf::{Value, value::Kind};
            let value = Value { kind: Some(Kind::StringValue(network.into())) };
            metadata.fields.insert("NETWORK".into(), value);
        }
        tx.send(DiscoveryRequest {
            type_url: TypeUrl::Endpoint.as_str().into(),
            resource_names: vec![REVIEWS.into()],
            node: Some(node),
            ..Default::default()
        })
        .await
        .unwrap();
        let rx = client.stream_aggregated_resources(ReceiverStream::new(rx)).await.expect("a stream").into_inner();
        Eds { tx, rx }
    }

    /// Waits until the assignment holds exactly `addresses`, ACKing every
    /// response; what it last held, on failure.
    async fn wait_for(&mut self, addresses: &[&str], mesh: &Meshpush) {
        let want: BTreeSet<String> = addresses.iter().map(|a| a.to_string()).collect();
        let deadline = Instant::now() + WAIT;
        let mut last = BTreeSet::new();
        while last != want {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(Ok(Some(r))) = tokio::time::timeout(left, self.rx.message()).await else {
                panic!("the endpoints of {REVIEWS} never became {want:?} (last {last:?})\n{}", mesh.log_tail(40));
            };
            if let Some(any) = r.resources.first() {
                let cla = ClusterLoadAssignment::decode(any.value.as_slice()).unwrap();
                last = cla
                    .endpoints
                    .iter()
                    .flat_map(|g| &g.lb_endpoints)
                    .filter_map(|e| match &e.host_identifier {
                        Some(HostIdentifier::Endpoint(ep)) => ep.address.as_ref(),
                        _ => None,
                    })
                    .filter_map(|a| match &a.address {
                        Some(envoy_types::pb::envoy::config::core::v3::address::Address::SocketAddress(s)) => {
                            Some(s.address.clone())
                        }
                        _ => None,
                    })
                    .collect();
            }
            let ack = DiscoveryRequest {
                type_url: r.type_url.clone(),
                version_info: r.version_info.clone(),
                response_nonce: r.nonce.clone(),
                resource_names: vec![REVIEWS.into()],
                ..Default::default()
            };
            self.tx.send(ack).await.unwrap();
        }
    }
}

#[test]
fn endpoints_come_from_every_cluster_its_remote_secrets_name_and_follow_them_live() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let local = cluster(&[("reviews-1", "10.1.0.1")]);
    let second = cluster(&[("reviews-2", "10.2.0.1")]);
    let third = cluster(&[("reviews-3", "10.3.0.1")]);
    let (mesh, _kubeconfig) = start(&local, &["--cluster-id", "cluster1"]);
    let mut eds = rt.block_on(Eds::open(&mesh));
    rt.block_on(eds.wait_for(&["10.1.0.1"], &mesh));

    // Two remote secrets, one naming two clusters, one naming the local one.
    local.put(&remote_secret("istio-remote-secret-cluster2", &[("cluster2", &second.kubeconfig())]));
    local.put(&remote_secret("istio-remote-secret-more", &[("cluster3", &third.kubeconfig()), ("cluster1", "x")]));
    rt.block_on(eds.wait_for(&["10.1.0.1", "10.2.0.1", "10.3.0.1"], &mesh));
    let skipped = configz(&mesh)["remoteClusters"]["notRead"].to_string();
    assert!(skipped.contains("key cluster1 names the local cluster"), "{skipped}");
    assert_eq!(remote(&mesh, "cluster2").unwrap()["phase"], "synced");

    // A Pod added in cluster 2 arrives within a second.
    let added = Instant::now();
    second.put(&pod("reviews-2b", "10.2.0.2"));
    rt.block_on(eds.wait_for(&["10.1.0.1", "10.2.0.1", "10.2.0.2", "10.3.0.1"], &mesh));
    assert!(added.elapsed() < Duration::from_secs(1), "the new Pod took {:?}", added.elapsed());

    // A bad remote secret is reported, and the rest stays served.
    local.put(&remote_secret("istio-remote-secret-bad", &[("cluster4", "clusters: [not a kubeconfig")]));
    let deadline = Instant::now() + WAIT;
    while remote(&mesh, "cluster4").is_none_or(|c| c["phase"] != "failed") {
        assert!(Instant::now() < deadline, "cluster4 never reported failed: {}", configz(&mesh)["remoteClusters"]);
        std::thread::sleep(Duration::from_millis(50));
    }
    let failed = remote(&mesh, "cluster4").unwrap();
    assert!(failed["errors"][0].as_str().unwrap().contains("does not parse"), "{failed}");
    assert!(!mesh.log().contains("not a kubeconfig"), "a kubeconfig's text is never logged");

    // Its secret deleted, cluster 2's endpoints go; added again, they come back.
    local.delete("Secret", "istio-system", "istio-remote-secret-cluster2");
    rt.block_on(eds.wait_for(&["10.1.0.1", "10.3.0.1"], &mesh));
    assert!(remote(&mesh, "cluster2").is_none());
    local.put(&remote_secret("istio-remote-secret-cluster2", &[("cluster2", &second.kubeconfig())]));
    rt.block_on(eds.wait_for(&["10.1.0.1", "10.2.0.1", "10.2.0.2", "10.3.0.1"], &mesh));

    // kubectl selects the remote secrets by their label as meshpush's watch does.
    let kubeconfig = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(kubeconfig.path(), local.kubeconfig()).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig.path())
        .arg("--cache-dir")
        .arg(cache.path())
        .args(["get", "secrets", "-n", "istio-system", "-l", "istio/multiCluster=true", "-o", "name"])
        .output()
        .expect("kubectl on PATH");
    let names = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "kubectl: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(names.lines().count(), 3, "{names}");
}

#[test]
fn a_remote_cluster_that_goes_away_keeps_its_endpoints_and_one_that_never_syncs_does_not_hold_readiness() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let local = cluster(&[("reviews-1", "10.1.0.1")]);
    let second = cluster(&[("reviews-2", "10.2.0.1")]);
    let (mesh, _kubeconfig) = start(&local, &[]);
    let mut eds = rt.block_on(Eds::open(&mesh));
    local.put(&remote_secret("istio-remote-secret-cluster2", &[("cluster2", &second.kubeconfig())]));
    rt.block_on(eds.wait_for(&["10.1.0.1", "10.2.0.1"], &mesh));

    // Its API server goes away (its watches cut, every request refused):
    // the last endpoints stay while the rest of the mesh moves on.
    second.go_down();
    let deadline = Instant::now() + WAIT;
    while second.open_watches() > 0 {
        assert!(Instant::now() < deadline, "the stand-in's watches never ended");
        std::thread::sleep(Duration::from_millis(50));
    }
    local.put(&pod("reviews-1b", "10.1.0.2"));
    rt.block_on(eds.wait_for(&["10.1.0.1", "10.1.0.2", "10.2.0.1"], &mesh));

    // A server started with a secret naming a cluster that never answers
    // is ready once the timeout passed; the cluster says so.
    let down = KubeApi::start();
    down.go_down();
    local.put(&remote_secret("istio-remote-secret-down", &[("cluster3", &down.kubeconfig())]));
    let started = Instant::now();
    let (late, _kubeconfig) = start(&local, &["--remote-cluster-timeout", "2s"]);
    assert!(started.elapsed() >= Duration::from_secs(2), "ready before the timeout: {:?}", started.elapsed());
    assert_eq!(remote(&late, "cluster3").unwrap()["phase"], "timeout");
}

#[test]
fn create_remote_secret_prints_the_secret_a_primary_reads_the_remote_cluster_by() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let local = cluster(&[("reviews-1", "10.1.0.1")]);
    let second = cluster(&[("reviews-2", "10.2.0.1")]);
    // The reader's token, as the chart's remote install and Kubernetes'
    // token controller leave it.
    let token = base64::engine::general_purpose::STANDARD.encode("reader-token");
    second.put(&format!(
        "apiVersion: v1\nkind: Secret\ntype: kubernetes.io/service-account-token\nmetadata:\n  name: meshpush-reader-token\n  \
         namespace: istio-system\n  annotations: {{kubernetes.io/service-account.name: meshpush-reader}}\ndata: {{token: {token}}}\n"
    ));
    let kubeconfig = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(kubeconfig.path(), second.kubeconfig()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_meshpush"))
        .args(["create-remote-secret", "--name", "cluster2", "--kubeconfig"])
        .arg(kubeconfig.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "create-remote-secret: {}", String::from_utf8_lossy(&out.stderr));
    let secret = String::from_utf8(out.stdout).unwrap();
    assert!(secret.contains("token: reader-token") && secret.contains("istio-remote-secret-cluster2"), "{secret}");

    let (mesh, _kubeconfig) = start(&local, &[]);
    let mut eds = rt.block_on(Eds::open(&mesh));
    rt.block_on(eds.wait_for(&["10.1.0.1"], &mesh));
    local.put(secret.trim_end().trim_end_matches("---"));
    rt.block_on(eds.wait_for(&["10.1.0.1", "10.2.0.1"], &mesh));
    assert!(!mesh.log().contains("reader-token"), "the token is never logged");

    // Without the reader's token there is nothing to print, and it says why.
    second.delete("Secret", "istio-system", "meshpush-reader-token");
    let out = Command::new(env!("CARGO_BIN_EXE_meshpush"))
        .args(["create-remote-secret", "--name", "cluster2", "--kubeconfig"])
        .arg(kubeconfig.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let why = String::from_utf8_lossy(&out.stderr);
    assert!(why.contains("no token Secret of service account istio-system/meshpush-reader"), "{why}");
}

/// Sidecars of two networks watching the same cluster name are each sent
/// their own network's split horizon, though their streams share the
/// resolution of that name list per view (a bug once shared it across
/// networks of one locality).
#[test]
fn sidecars_of_two_networks_watching_the_same_names_get_their_own_split_horizon() {
    let dir = tempfile::TempDir::new().unwrap();
    let (config, mesh_file, networks) =
        (dir.path().join("mesh"), dir.path().join("mesh.yaml"), dir.path().join("nets"));
    std::fs::create_dir(&config).unwrap();
    let mut objects = service();
    for (name, ip, network) in [("reviews-1", "10.1.0.1", "n1"), ("reviews-2", "10.2.0.1", "n2")] {
        let pod = pod(name, ip).replace(
            "labels: {app: reviews}",
            &format!(
                "labels: {{app: reviews, security.istio.io/tlsMode: istio, topology.istio.io/network: {network}}}"
            ),
        );
        objects.push_str("---\n");
        objects.push_str(&pod);
    }
    std::fs::write(config.join("reviews.yaml"), objects).unwrap();
    std::fs::write(&mesh_file, "rootNamespace: istio-system\n").unwrap();
    std::fs::write(
        &networks,
        "networks:\n  n1: {gateways: [{address: 192.0.2.1, port: 15443}]}\n  n2: {gateways: [{address: 192.0.2.2, port: 15443}]}\n",
    )
    .unwrap();
    let (mesh_arg, networks_arg) = (mesh_file.display().to_string(), networks.display().to_string());
    let mesh = Meshpush::start_with_flags(&config, &["--mesh-config", &mesh_arg, "--mesh-networks", &networks_arg]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut n1 = Eds::open_in(&mesh, Some("n1")).await;
        n1.wait_for(&["10.1.0.1", "192.0.2.2"], &mesh).await;
        let mut n2 = Eds::open_in(&mesh, Some("n2")).await;
        n2.wait_for(&["10.2.0.1", "192.0.2.1"], &mesh).await;
    });
}
