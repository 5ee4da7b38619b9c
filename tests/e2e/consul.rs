//! Consul's catalog as a registry, end to end: a stand-in Consul server
//! (`meshpush::testing::consul`, checked with py-consul in
//! `tests/protocol/consul.rs`) and a real Envoy sidecar routed to
//! `reviews.service.consul` by a DestinationRule subset that selects on a
//! `version|v2` tag and a VirtualService: a new instance takes traffic
//! within a second, a deregistered one leaves, and Consul's loss keeps
//! the config.
//!
//! Service port 18171, backends on 127.0.171.0/24.

use std::time::{Duration, Instant};

use meshpush::testing::consul::ConsulStandIn;
use serde_json::Value;

use crate::support;
use support::envoy::Section;
use support::manifests::{docs, sidecar_node, subsets, weighted};
use support::meshpush::Meshpush;
use support::scene::Scene;
use support::traffic::Request;

const PORT: u16 = 18171;
const HOST: &str = "reviews.service.consul";

#[test]
fn consul_services_are_routed_by_tag_subsets_and_follow_the_catalog() {
    let net = "127.0.171";
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let consul = runtime.block_on(ConsulStandIn::start(None));
    let http = [("protocol", "http")];
    consul.register("node-1", "10.0.0.1", "reviews", "reviews-1", &format!("{net}.2"), PORT, &["version|v1"], &http);
    consul.register("node-2", "10.0.0.2", "reviews", "reviews-2", &format!("{net}.3"), PORT, &["version|v2"], &http);
    let rules = docs(&[subsets("shop", HOST, &["v1", "v2"]), weighted("shop", "reviews", HOST, &[("v2", 100)])]);
    let url = consul.url();
    let mut scene = Scene::start_with(
        &[("rules.yaml", &rules)],
        &[
            ("reviews-v1", &format!("{net}.2:{PORT}")),
            ("reviews-v2", &format!("{net}.3:{PORT}")),
            ("reviews-v2b", &format!("{net}.4:{PORT}")),
        ],
        |dir| Meshpush::start_with_flags(dir, &["--consul-address", &url]),
    );
    let reviews = Request::new(std::net::SocketAddr::from(([127, 0, 0, 1], PORT)), HOST);
    let opts = scene.sidecar(&sidecar_node(&format!("{net}.9"), "client", "shop"), &[("app", "client")]);
    scene.add_envoy("client", &opts);
    scene.wait(Duration::from_secs(15), "reviews answered by the v2 subset", Section::Routes, || {
        reviews.all_answered_by(10, &["reviews-v2"])
    });

    // A new instance of the subset takes traffic within a second.
    consul.register("node-3", "10.0.0.3", "reviews", "reviews-3", &format!("{net}.4"), PORT, &["version|v2"], &http);
    let registered = Instant::now();
    scene.wait(Duration::from_secs(1), "the new instance answering within a second", Section::Endpoints, || {
        reviews.sample(4).is_ok_and(|seen| seen.contains_key("reviews-v2b"))
    });
    eprintln!("a new Consul instance took traffic after {:?}", registered.elapsed());

    // A deregistered one leaves.
    consul.deregister("node-2", "reviews-2");
    scene.wait(Duration::from_secs(5), "the deregistered instance gone", Section::Endpoints, || {
        reviews.all_answered_by(20, &["reviews-v2b"])
    });

    // Consul goes away: the catalog served stays.
    drop(consul);
    runtime.shutdown_background();
    scene.wait(Duration::from_secs(10), "Consul reported unreachable", Section::Endpoints, || {
        let configz: Value = serde_json::from_str(&scene.mesh().admin("/debug/configz").body).unwrap();
        configz["consul"]["state"] == "unreachable"
    });
    reviews.all_answered_by(20, &["reviews-v2b"]).unwrap();
    scene.assert_nothing_rejected();
}
