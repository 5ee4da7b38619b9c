//! End to end: endpoints come and go while traffic flows.
//!
//! Service `inventory` (namespace `shop`, port 18104) starts with one Pod and one
//! WorkloadEntry, each a file of its own. Under steady traffic through a NONE-mode
//! sidecar, a WorkloadEntry and a Pod are added (each starts receiving
//! requests), then the original two are removed (each stops receiving
//! requests), and not one request fails. It runs twice: SotW, and delta xDS
//! (port 18114, 127.0.114.0/24).

use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use support::envoy::{Envoy, Section};
use support::manifests::{pod, service, sidecar_node, workload_entry};
use support::scene::Scene;
use support::traffic::{Request, Traffic};

/// The endpoint addresses Envoy has for `cluster` (from its EDS config_dump).
fn endpoints(envoy: &Envoy, cluster: &str) -> Vec<String> {
    let section = envoy.section(Section::Endpoints);
    let mut out: Vec<String> = section["dynamic_endpoint_configs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| &c["endpoint_config"])
        .filter(|c| c["cluster_name"] == cluster)
        .flat_map(|c| c["endpoints"].as_array().into_iter().flatten())
        .flat_map(|locality| locality["lb_endpoints"].as_array().into_iter().flatten())
        .filter_map(|e| e["endpoint"]["address"]["socket_address"]["address"].as_str().map(str::to_string))
        .collect();
    out.sort();
    out
}

#[test]
fn added_endpoints_receive_traffic_and_removed_ones_stop_without_a_failed_request() {
    endpoints_come_and_go(18104, false);
}

/// The same with the sidecar on delta xDS (`DELTA_GRPC`).
#[test]
fn added_endpoints_receive_traffic_and_removed_ones_stop_without_a_failed_request_over_delta() {
    endpoints_come_and_go(18114, true);
}

/// The scenario on service port `port`, addresses 127.0.N.0/24 (N = port - 18000).
fn endpoints_come_and_go(port: u16, delta: bool) {
    let net = format!("127.0.{}", port - 18000);
    let ip = |host: u8| format!("{net}.{host}");
    let at = |host: u8| format!("{net}.{host}:{port}");
    let cluster = format!("outbound|{port}||inventory.shop.svc.cluster.local");
    let labels = [("app", "inventory")];
    let mut scene = Scene::start(
        &[
            ("service.yaml", &service("shop", "inventory", port)),
            ("pod-1.yaml", &pod("shop", "inventory-pod-1", &ip(2), &labels, port)),
            ("vm-1.yaml", &workload_entry("shop", "inventory-vm-1", &ip(3), &labels)),
        ],
        &[("inventory-pod-1", &at(2)), ("inventory-vm-1", &at(3))],
    );
    let mut opts = scene.sidecar(&sidecar_node(&ip(9), "client", "shop"), &[("app", "client")]);
    opts.delta = delta;
    scene.add_envoy("client", &opts);
    assert_eq!(scene.envoy("client").ads_api_type(), if delta { "DELTA_GRPC" } else { "GRPC" });
    let inventory = Request::new(SocketAddr::from(([127, 0, 0, 1], port)), "inventory");
    scene.wait(Duration::from_secs(15), "inventory to answer through the sidecar", Section::Endpoints, || {
        inventory.send().map(drop)
    });

    // New backends listen before the config names them, as a workload is
    // ready before it is registered.
    scene.add_backend("inventory-vm-2", &at(4));
    scene.add_backend("inventory-pod-2", &at(5));
    let traffic = Traffic::start(inventory.clone());

    // A new WorkloadEntry, then a new Pod, each starts taking requests.
    let added = [
        ("vm-2.yaml", workload_entry("shop", "inventory-vm-2", &ip(4), &labels), "inventory-vm-2"),
        ("pod-2.yaml", pod("shop", "inventory-pod-2", &ip(5), &labels, port), "inventory-pod-2"),
    ];
    for (file, yaml, backend) in &added {
        scene.dir().write(file, yaml);
        scene.wait(
            Duration::from_secs(5),
            &format!("{backend} to answer background requests"),
            Section::Endpoints,
            || {
                let t = traffic.tally();
                if t.answered_by(backend) >= 5 { Ok(()) } else { Err(format!("{t:?}")) }
            },
        );
    }

    // The original WorkloadEntry and Pod leave; their backends keep running,
    // so a request that still reached them would show up in their hits.
    scene.dir().remove("vm-1.yaml");
    scene.dir().remove("pod-1.yaml");
    let client = scene.envoy("client");
    scene.wait(Duration::from_secs(5), "Envoy's endpoints to be the two new ones", Section::Endpoints, || {
        let now = endpoints(client, &cluster);
        if now == [ip(4), ip(5)] { Ok(()) } else { Err(format!("{now:?}")) }
    });
    let gone_hits = ["inventory-pod-1", "inventory-vm-1"].map(|b| scene.backend(b).hits());
    let sent = traffic.sent();
    scene.wait(Duration::from_secs(5), "50 more background requests", Section::Endpoints, || {
        traffic.sent() >= sent + 50
    });
    let seen = inventory.sample(20).unwrap();
    assert_eq!(
        seen.keys().map(String::as_str).collect::<Vec<_>>(),
        ["inventory-pod-2", "inventory-vm-2"],
        "after the removal: {seen:?}"
    );
    let tally = traffic.stop();
    assert_eq!(
        ["inventory-pod-1", "inventory-vm-1"].map(|b| scene.backend(b).hits()),
        gone_hits,
        "removed endpoints still received requests"
    );
    eprintln!("background traffic: {tally:?}");
    assert_eq!(tally.failed, 0, "requests failed while endpoints changed: {:?}", tally.failures);
    scene.assert_nothing_rejected();
}
