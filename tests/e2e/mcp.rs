//! MCP-over-xDS end to end, both directions.
//!
//! - A stand-in MCP server (`meshpush::testing::mcp`, as a third-party
//!   server such as Nacos speaks the protocol) feeds meshpush through the
//!   mesh config's `configSources`, and a real Envoy sidecar is routed by
//!   what it sends: a VirtualService's weights, a weight change within a
//!   second, a VirtualService dropped from the next state, the server
//!   going away.
//! - One meshpush feeds another: B reads A's secure port with
//!   `ISTIO_MUTUAL` (the same mesh root, plug-in layout), and serves what
//!   A holds, A's Kubernetes Service as a synthetic ServiceEntry; A
//!   refuses an MCP client on its plaintext port and one of another
//!   namespace.
//!
//! The Envoy scenario uses service port 18170 and backends on 127.0.170.0/24.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use meshpush::testing::mcp::McpStandIn;
use serde_json::Value;

use crate::support;
use support::envoy::Section;
use support::manifests::{docs, pod, service, sidecar_node, subsets, weighted};
use support::meshpush::Meshpush;
use support::process::{free_addr, scratch_dir};
use support::scene::{MeshDir, Scene};
use support::secure::{self, SecureMesh, WorkloadCert};
use support::traffic::Request;

const PORT: u16 = 18170;

fn configz(mesh: &Meshpush) -> Value {
    serde_json::from_str(&mesh.admin("/debug/configz").body).expect("JSON")
}

/// The sources of the objects of `kind` that `mesh` serves, by name.
fn sources(mesh: &Meshpush, kind: &str) -> BTreeMap<String, String> {
    configz(mesh)["objects"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["kind"] == kind)
        .map(|o| (o["name"].as_str().unwrap().to_string(), o["source"]["file"].as_str().unwrap().to_string()))
        .collect()
}

/// A mesh config file that lists `sources` (YAML of `configSources`).
fn mesh_config(sources: &str) -> (tempfile::TempDir, String) {
    let dir = scratch_dir("mesh-config");
    let file = dir.path().join("mesh");
    std::fs::write(&file, format!("configSources:\n{sources}")).unwrap();
    let path = file.display().to_string();
    (dir, path)
}

#[test]
fn an_mcp_server_routes_a_real_envoy_and_its_loss_keeps_the_config() {
    let net = "127.0.170";
    let (v1_ip, v2_ip) = (format!("{net}.2"), format!("{net}.3"));
    let registry = docs(&[
        service("shop", "cart", PORT),
        pod("shop", "cart-v1", &v1_ip, &[("app", "cart"), ("version", "v1")], PORT),
        pod("shop", "cart-v2", &v2_ip, &[("app", "cart"), ("version", "v2")], PORT),
    ]);
    let rules = |v1: i64, v2: i64| {
        docs(&[subsets("shop", "cart", &["v1", "v2"]), weighted("shop", "cart", "cart", &[("v1", v1), ("v2", v2)])])
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let stand_in = runtime.block_on(McpStandIn::start());
    stand_in.set_yaml("v1", &rules(100, 0));
    let address = format!("xds://{}", stand_in.addr);
    let (_mesh_dir, mesh_file) = mesh_config(&format!("- address: {address}\n"));
    let mut scene = Scene::start_with(
        &[("registry.yaml", &registry)],
        &[("cart-v1", &format!("{v1_ip}:{PORT}")), ("cart-v2", &format!("{v2_ip}:{PORT}"))],
        |dir| Meshpush::start_with_flags(dir, &["--mesh-config", &mesh_file]),
    );
    let sources_now = sources(scene.mesh(), "VirtualService");
    assert_eq!(sources_now["cart"], format!("mcp:{address}/VirtualService/shop/cart"), "ready with the MCP objects");
    let seen = stand_in.seen();
    assert_eq!(seen.nodes[0].1.as_deref(), Some("api"), "{seen:?}");

    let cart = Request::new(std::net::SocketAddr::from(([127, 0, 0, 1], PORT)), "cart");
    let opts = scene.sidecar(&sidecar_node(&format!("{net}.9"), "client", "shop"), &[("app", "client")]);
    scene.add_envoy("client", &opts);
    scene.wait(Duration::from_secs(15), "cart answered by v1 through the sidecar", Section::Routes, || {
        cart.all_answered_by(10, &["cart-v1"])
    });

    // A weight change, applied within a second.
    stand_in.set_yaml("v1", &rules(0, 100));
    let changed = Instant::now();
    scene.wait(Duration::from_secs(1), "a request to reach cart-v2 within a second", Section::Routes, || {
        cart.all_answered_by(1, &["cart-v2"])
    });
    eprintln!("MCP weight change served after {:?}", changed.elapsed());
    cart.all_answered_by(20, &["cart-v2"]).unwrap();

    // The VirtualService dropped from the next state: deleted, so both
    // versions answer again.
    stand_in.set_yaml("v1", &subsets("shop", "cart", &["v1", "v2"]));
    scene.wait(Duration::from_secs(5), "the VirtualService withdrawn", Section::Routes, || {
        !sources(scene.mesh(), "VirtualService").contains_key("cart")
    });
    scene.wait(Duration::from_secs(5), "both versions answering without the VirtualService", Section::Routes, || {
        cart.sample(40).is_ok_and(|s| s.len() == 2)
    });

    // The server goes away: the config it sent stays.
    stand_in.set_yaml("v1", &rules(0, 100));
    scene.wait(Duration::from_secs(5), "cart-v2 alone again", Section::Routes, || {
        cart.all_answered_by(20, &["cart-v2"])
    });
    drop(stand_in);
    runtime.shutdown_background();
    scene.wait(Duration::from_secs(10), "the MCP server reported unreachable", Section::Routes, || {
        configz(scene.mesh())["configSources"][&address]["state"] == "unreachable"
    });
    assert!(sources(scene.mesh(), "VirtualService").contains_key("cart"), "the objects stay");
    cart.all_answered_by(20, &["cart-v2"]).unwrap();
    scene.assert_nothing_rejected();
}

/// Opens an MCP client's stream for VirtualServices over `channel`; the
/// first response's resource count, or the refusal.
async fn first_virtual_services(channel: tonic::transport::Channel, node_id: &str) -> Result<usize, tonic::Status> {
    let mut client = AggregatedDiscoveryServiceClient::new(channel);
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let mut node = meshpush::testing::memory::node(node_id, "REDIRECT", &[]);
    let generator = envoy_types::pb::google::protobuf::Value {
        kind: Some(envoy_types::pb::google::protobuf::value::Kind::StringValue("api".into())),
    };
    node.metadata.get_or_insert_default().fields.insert("GENERATOR".into(), generator);
    let request = DiscoveryRequest {
        type_url: "networking.istio.io/v1/VirtualService".into(),
        node: Some(node),
        ..Default::default()
    };
    tx.send(request).await.unwrap();
    let mut stream =
        client.stream_aggregated_resources(tokio_stream::wrappers::ReceiverStream::new(rx)).await?.into_inner();
    let first = tokio::time::timeout(Duration::from_secs(10), stream.message()).await.expect("an answer in time")?;
    Ok(first.expect("a response").resources.len())
}

#[test]
fn one_meshpush_feeds_another_over_mutual_tls_and_refuses_other_clients() {
    let dir = MeshDir::new();
    dir.write("registry.yaml", &docs(&[service("shop", "cart", PORT)]));
    dir.write("rules.yaml", &subsets("shop", "cart", &["v1", "v2"]));
    dir.write("routes.yaml", &weighted("shop", "cart", "cart", &[("v1", 30), ("v2", 70)]));
    let a = SecureMesh::start(&dir);

    // B shares A's mesh root (the plug-in layout A's self-signed root was written in).
    let b_ca = scratch_dir("b-ca");
    let a_ca = a.root.parent().unwrap();
    for file in ["ca-cert.pem", "ca-key.pem", "root-cert.pem", "cert-chain.pem"] {
        if a_ca.join(file).exists() {
            std::fs::copy(a_ca.join(file), b_ca.path().join(file)).unwrap();
        }
    }
    let address = format!("xds://127.0.0.1:{}", a.secure.port());
    let (_mesh_dir, mesh_file) = mesh_config(&format!("- address: {address}\n  tlsSettings: {{mode: ISTIO_MUTUAL}}\n"));
    let b_dir = MeshDir::new();
    let (b_ca_dir, b_secure) = (b_ca.path().display().to_string(), free_addr().to_string());
    let b = Meshpush::start_with_flags(
        &b_dir.path(),
        &["--mesh-config", &mesh_file, "--ca-dir", &b_ca_dir, "--secure-xds-addr", &b_secure],
    );
    let expected = |kind: &str, name: &str| format!("mcp:{address}/{kind}/shop/{name}");
    assert_eq!(sources(&b, "VirtualService").get("cart"), Some(&expected("VirtualService", "cart")), "ready with A's");
    assert_eq!(sources(&b, "DestinationRule").get("cart"), Some(&expected("DestinationRule", "cart")));
    // A's Kubernetes Service reaches B as istiod's synthetic ServiceEntry.
    assert_eq!(
        sources(&b, "ServiceEntry").get("synthetic-cart"),
        Some(&expected("ServiceEntry", "synthetic-cart")),
        "{:?}",
        sources(&b, "ServiceEntry")
    );
    let report = &configz(&b)["configSources"][&address];
    assert_eq!((report["state"].as_str(), report["synced"].as_bool()), (Some("connected"), Some(true)), "{report}");
    let served = configz(&b)["objects"].as_array().unwrap().iter().find(|o| o["kind"] == "VirtualService").cloned();
    let weights = &served.unwrap()["object"]["spec"]["http"][0]["route"];
    assert_eq!((weights[0]["weight"].as_i64(), weights[1]["weight"].as_i64()), (Some(30), Some(70)), "{weights}");

    // A deletes its DestinationRule: B withdraws it.
    dir.remove("rules.yaml");
    meshpush::testing::wait::wait_until(
        Instant::now() + Duration::from_secs(10),
        "B to withdraw the rule",
        String::new,
        || !sources(&b, "DestinationRule").contains_key("cart"),
    );

    // A serves MCP to no one on its plaintext port, and to no identity
    // outside the root namespace.
    let root = std::fs::read_to_string(&a.root).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let plaintext = match a.mesh.xds_addr() {
            meshpush::serve::ListenAddr::Tcp(addr) => *addr,
            other => panic!("{other}"),
        };
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{plaintext}")).unwrap();
        let refused =
            first_virtual_services(channel.connect().await.unwrap(), &sidecar_node("10.0.0.1", "x", "istio-system"))
                .await
                .unwrap_err();
        assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");

        let token = a.token("default", "sleep");
        let (key, csr) = secure::csr(&["spiffe://cluster.local/ns/default/sa/sleep"]);
        let anonymous = secure::channel(a.secure, &root, None).await.unwrap();
        let issued = secure::create_certificate(anonymous, &csr, Some(&token)).await.unwrap();
        let sleep = WorkloadCert { key_pem: key.serialize_pem(), chain: issued.cert_chain };
        let channel = secure::channel(a.secure, &root, Some(&sleep)).await.unwrap();
        let refused =
            first_virtual_services(channel, &sidecar_node("10.0.0.1", "sleep-1", "default")).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
        assert!(refused.message().contains("root namespace"), "{refused:?}");
    });
    let log = b.log();
    assert!(!log.contains("PRIVATE KEY"), "a key in B's log");
}
