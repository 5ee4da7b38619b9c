//! End to end: bad input never disturbs what is being served.
//!
//! Under steady traffic to `orders` (namespace `shop`, port 18108, routed to
//! subset v1), a file that is not YAML appears and the VirtualService file is
//! edited into an invalid rule (a negative weight) that would send everything
//! to v2. meshpush logs each file with the reason and keeps the previous
//! VirtualService; Envoy keeps routing to v1 and no request fails. Fixing both
//! files applies them: traffic moves to v2 and the repaired file's Service
//! reaches Envoy.

use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use support::envoy::Section;
use support::manifests::{docs, pod, service, sidecar_node, subsets, weighted};
use support::scene::Scene;
use support::traffic::{Request, Traffic};

const PORT: u16 = 18108;

/// A Service whose YAML breaks off in the middle of a flow mapping.
const BROKEN: &str = "\
apiVersion: v1
kind: Service
metadata:
  name: audit
  namespace: shop
spec:
  ports: [{name: http, port: 18108
";

#[test]
fn broken_file_and_invalid_rule_keep_the_previous_config_until_fixed() {
    let mesh = docs(&[
        service("shop", "orders", PORT),
        pod("shop", "orders-v1", "127.0.108.2", &[("app", "orders"), ("version", "v1")], PORT),
        pod("shop", "orders-v2", "127.0.108.3", &[("app", "orders"), ("version", "v2")], PORT),
        subsets("shop", "orders", &["v1", "v2"]),
    ]);
    let route = |v1: i64, v2: i64| weighted("shop", "orders", "orders", &[("v1", v1), ("v2", v2)]);
    let mut scene = Scene::start(
        &[("mesh.yaml", &mesh), ("orders-vs.yaml", &route(100, 0))],
        &[("orders-v1", "127.0.108.2:18108"), ("orders-v2", "127.0.108.3:18108"), ("audit-1", "127.0.108.4:18108")],
    );
    let opts = scene.sidecar(&sidecar_node("127.0.108.9", "client", "shop"), &[("app", "client")]);
    scene.add_envoy("client", &opts);
    let client = scene.envoy("client");
    let orders = Request::new(SocketAddr::from(([127, 0, 0, 1], PORT)), "orders");
    scene.wait(Duration::from_secs(15), "orders to answer through the sidecar", Section::Routes, || {
        orders.send().map(drop)
    });
    orders.all_answered_by(10, &["orders-v1"]).unwrap();
    let traffic = Traffic::start(orders.clone());
    let rds_updates = || client.stat("http.outbound_0.0.0.0_18108.rds.18108.update_success");
    let updates_before = rds_updates();
    assert!(updates_before.is_some_and(|n| n > 0), "no RDS update counted for route config 18108");

    // Bad input: a file that is not YAML, and a rule that does not validate.
    scene.dir().write("broken.yaml", BROKEN);
    scene.dir().write("orders-vs.yaml", &route(-5, 100));
    let mesh = scene.mesh();
    scene.wait(Duration::from_secs(5), "meshpush to log both problems with file and reason", Section::Routes, || {
        let log = mesh.log();
        let broken = log.lines().any(|l| l.contains("WARN") && l.contains("broken.yaml"));
        let invalid = log.lines().any(|l| {
            l.contains("orders-vs.yaml")
                && l.contains("VirtualService shop/orders")
                && l.contains("spec.http[0].route[0].weight")
                && l.contains("-5 is negative")
                && l.contains("kept the previous VirtualService shop/orders")
        });
        if broken && invalid {
            Ok(())
        } else {
            Err(format!("broken.yaml logged: {broken}, orders-vs.yaml logged: {invalid}"))
        }
    });
    let log = mesh.log();
    let problems: Vec<&str> =
        log.lines().filter(|l| l.contains("broken.yaml") || l.contains("orders-vs.yaml")).map(str::trim).collect();
    eprintln!("meshpush said:\n{}", problems.join("\n"));

    // The previous config stays: same routes, same answers.
    let sent = traffic.sent();
    scene.wait(Duration::from_secs(5), "50 more background requests", Section::Routes, || traffic.sent() >= sent + 50);
    orders.all_answered_by(20, &["orders-v1"]).unwrap();
    assert_eq!(rds_updates(), updates_before, "Envoy was sent a new route config for bad input");
    assert!(!client.cluster_names().iter().any(|c| c.contains("audit")), "half a file was applied");

    // Fixed: both files apply.
    scene.dir().write(
        "broken.yaml",
        &docs(&[service("shop", "audit", PORT), pod("shop", "audit-1", "127.0.108.4", &[("app", "audit")], PORT)]),
    );
    scene.dir().write("orders-vs.yaml", &route(0, 100));
    scene.wait(Duration::from_secs(5), "orders to move to v2 once the rule is fixed", Section::Routes, || {
        orders.all_answered_by(10, &["orders-v2"])
    });
    let audit = Request::new(SocketAddr::from(([127, 0, 0, 1], PORT)), "audit");
    scene.wait(Duration::from_secs(5), "the repaired file's Service to answer", Section::Clusters, || {
        audit.all_answered_by(3, &["audit-1"])
    });
    let tally = traffic.stop();
    eprintln!("background traffic: {tally:?}");
    assert_eq!(tally.failed, 0, "requests failed around the bad input: {:?}", tally.failures);
    scene.assert_nothing_rejected();
}
