//! End to end: five Envoys of different scopes converge on one change.
//!
//! Namespace `a` has service `alpha` (port 18111), namespace `b` has `beta`
//! (port 18121). Sidecars `a1` and `a2` run under Sidecars that admit `./*`
//! only; `b1` sees the whole mesh (no Sidecar applies); `b2` runs under a
//! Sidecar admitting `*/*`. A gateway `edge` (istio-system) serves
//! `*.example.test` on 18131. Sidecars of one namespace would collide on
//! 127.0.0.1:PORT, so each Sidecar resource gives its workload's listeners a
//! bind address of their own (`egress[].bind`); `b1` keeps 127.0.0.1.
//!
//! The change: one file adds service `gamma` in `b` with its pod and a
//! gateway route for `gamma.example.test`. `b1`, `b2` and the gateway must
//! route to it; `a1` and `a2` must not even get its cluster.

use crate::support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use support::envoy::{Envoy, Section};
use support::manifests::{docs, gateway, gateway_route, pod, router_node, service, sidecar, sidecar_node};
use support::scene::Scene;
use support::traffic::Request;

const ALPHA_PORT: u16 = 18111;
const BETA_PORT: u16 = 18121;
const GATEWAY_PORT: u16 = 18131;
const GAMMA: &str = "outbound|18121||gamma.b.svc.cluster.local";

/// The sidecars: name, namespace, node IP, bind address of their outbound listeners.
const SIDECARS: [(&str, &str, &str, &str); 4] = [
    ("a1", "a", "127.0.111.101", "127.0.111.101"),
    ("a2", "a", "127.0.111.102", "127.0.111.102"),
    ("b1", "b", "127.0.111.103", "127.0.0.1"),
    ("b2", "b", "127.0.111.104", "127.0.111.104"),
];

fn addr(ip: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip.parse().unwrap(), port)
}

/// Clusters of namespace `b` Envoy has.
fn clusters_of_b(envoy: &Envoy) -> Vec<String> {
    envoy.cluster_names().into_iter().filter(|c| c.ends_with(".b.svc.cluster.local")).collect()
}

#[test]
fn five_envoys_converge_on_one_change_each_within_its_scope() {
    let mesh = docs(&[
        service("a", "alpha", ALPHA_PORT),
        pod("a", "alpha-1", "127.0.111.2", &[("app", "alpha")], ALPHA_PORT),
        service("b", "beta", BETA_PORT),
        pod("b", "beta-1", "127.0.111.3", &[("app", "beta")], BETA_PORT),
        sidecar("a", "a1", Some("a1"), &["./*"], Some("127.0.111.101")),
        sidecar("a", "a2", Some("a2"), &["./*"], Some("127.0.111.102")),
        sidecar("b", "b2", Some("b2"), &["*/*"], Some("127.0.111.104")),
        gateway("istio-system", "edge", "edge", GATEWAY_PORT, &["*.example.test"]),
        gateway_route("a", "alpha-edge", "istio-system/edge", "alpha.example.test", "alpha", ALPHA_PORT),
    ]);
    let mut scene = Scene::start(
        &[("mesh.yaml", &mesh)],
        &[("alpha-1", "127.0.111.2:18111"), ("beta-1", "127.0.111.3:18121"), ("gamma-1", "127.0.111.4:18121")],
    );
    for (name, ns, ip, _) in SIDECARS {
        let opts = scene.sidecar(&sidecar_node(ip, name, ns), &[("app", name)]);
        scene.add_envoy(name, &opts);
    }
    let opts = scene.sidecar(&router_node("127.0.0.1", "edge-1", "istio-system"), &[("istio", "edge")]);
    scene.add_envoy("edge", &opts);

    // Before the change: everybody reaches alpha; only `b` sidecars see beta.
    let edge = addr("127.0.0.1", GATEWAY_PORT);
    for (name, _, _, bind) in SIDECARS {
        let alpha = Request::new(addr(bind, ALPHA_PORT), "alpha.a.svc.cluster.local");
        scene.wait(Duration::from_secs(15), &format!("{name} to reach alpha"), Section::Listeners, || {
            alpha.all_answered_by(2, &["alpha-1"])
        });
    }
    let alpha_edge = Request::new(edge, "alpha.example.test");
    scene.wait(Duration::from_secs(15), "the gateway to reach alpha", Section::Routes, || {
        alpha_edge.all_answered_by(2, &["alpha-1"])
    });
    scene.focus(Section::Clusters);
    for (name, ns, _, bind) in SIDECARS {
        let envoy = scene.envoy(name);
        let expected: Vec<String> =
            if ns == "b" { vec!["outbound|18121||beta.b.svc.cluster.local".to_string()] } else { Vec::new() };
        assert_eq!(clusters_of_b(envoy), expected, "{name}: clusters of namespace b");
        if ns == "b" {
            Request::new(addr(bind, BETA_PORT), "beta.b").all_answered_by(2, &["beta-1"]).unwrap();
        }
    }

    // One change, five Envoys.
    let change = docs(&[
        service("b", "gamma", BETA_PORT),
        pod("b", "gamma-1", "127.0.111.4", &[("app", "gamma")], BETA_PORT),
        gateway_route("b", "gamma-edge", "istio-system/edge", "gamma.example.test", "gamma", BETA_PORT),
    ]);
    scene.dir().write("gamma.yaml", &change);
    let written = Instant::now();
    let mut converged: Vec<(String, Duration)> = Vec::new();
    // `b` sidecars and the gateway route to gamma.
    let routes: Vec<(&str, Request)> = vec![
        ("b1", Request::new(addr("127.0.0.1", BETA_PORT), "gamma.b")),
        ("b2", Request::new(addr("127.0.111.104", BETA_PORT), "gamma.b.svc.cluster.local")),
        ("edge", Request::new(edge, "gamma.example.test")),
    ];
    for (name, request) in &routes {
        scene.wait(Duration::from_secs(10), &format!("{name} to route to gamma"), Section::Routes, || {
            request.all_answered_by(3, &["gamma-1"])
        });
        converged.push((name.to_string(), written.elapsed()));
    }
    // `a` sidecars got the push too (their scope changed nowhere they can see):
    // they still have no cluster of `b`, gamma included, and still reach alpha.
    for (name, _, _, bind) in SIDECARS.iter().filter(|s| s.1 == "a") {
        let envoy = scene.envoy(name);
        assert_eq!(clusters_of_b(envoy), Vec::<String>::new(), "{name}: clusters of namespace b after the change");
        Request::new(addr(bind, ALPHA_PORT), "alpha.a").all_answered_by(2, &["alpha-1"]).unwrap();
        assert!(
            Request::new(addr(bind, BETA_PORT), "gamma.b").send().is_err(),
            "{name} must not reach gamma in namespace b"
        );
    }
    // Everyone who may see gamma has its cluster; the gateway too.
    for name in ["b1", "b2", "edge"] {
        assert!(scene.envoy(name).cluster_names().iter().any(|c| c == GAMMA), "{name}: no {GAMMA}");
    }
    eprintln!("converged after the write: {converged:?}");
    scene.assert_nothing_rejected();
}
