//! End to end: a Sidecar resource limits what a sidecar Envoy is sent.
//!
//! Namespace `a` has service `alpha` (port 18106), namespace `b` has `beta`
//! (port 18116). A Sidecar in `a` with egress `./*` keeps everything of `b` out
//! of a sidecar of `a`: no cluster, no listener, no route. Deleting the Sidecar
//! file brings `b` in, and `beta` becomes reachable.

use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use support::envoy::{Envoy, Section};
use support::manifests::{docs, pod, service, sidecar, sidecar_node};
use support::scene::Scene;
use support::traffic::Request;

const ALPHA_PORT: u16 = 18106;
const BETA_PORT: u16 = 18116;
const ALPHA: &str = "outbound|18106||alpha.a.svc.cluster.local";
const BETA: &str = "outbound|18116||beta.b.svc.cluster.local";

/// Clusters of namespace `b` Envoy has.
fn clusters_of_b(envoy: &Envoy) -> Vec<String> {
    envoy.cluster_names().into_iter().filter(|c| c.ends_with(".b.svc.cluster.local")).collect()
}

#[test]
fn sidecar_egress_hides_other_namespaces_until_it_is_removed() {
    let mesh = docs(&[
        service("a", "alpha", ALPHA_PORT),
        pod("a", "alpha-1", "127.0.106.2", &[("app", "alpha")], ALPHA_PORT),
        service("b", "beta", BETA_PORT),
        pod("b", "beta-1", "127.0.106.3", &[("app", "beta")], BETA_PORT),
    ]);
    let mut scene = Scene::start(
        &[("mesh.yaml", &mesh), ("sidecar-a.yaml", &sidecar("a", "default", None, &["./*"], None))],
        &[("alpha-1", "127.0.106.2:18106"), ("beta-1", "127.0.106.3:18116")],
    );
    let opts = scene.sidecar(&sidecar_node("127.0.106.9", "client", "a"), &[("app", "client")]);
    scene.add_envoy("client", &opts);
    let client = scene.envoy("client");
    let alpha = Request::new(SocketAddr::from(([127, 0, 0, 1], ALPHA_PORT)), "alpha");
    let beta = Request::new(SocketAddr::from(([127, 0, 0, 1], BETA_PORT)), "beta.b");
    scene.wait(Duration::from_secs(15), "alpha to answer through the sidecar", Section::Clusters, || {
        alpha.send().map(drop)
    });

    // Scoped: only `a` (and the special clusters).
    let clusters = client.cluster_names();
    assert!(clusters.iter().any(|c| c == ALPHA), "{clusters:?}");
    assert_eq!(clusters_of_b(client), Vec::<String>::new(), "the Sidecar admits ./* only");
    scene.focus(Section::Listeners);
    assert!(!client.has_active_listener("0.0.0.0_18116"), "{:?}", client.listener_names("active_state"));
    assert!(beta.send().is_err(), "beta must be unreachable from a scoped sidecar of `a`");

    // Without the Sidecar the whole mesh is visible.
    scene.dir().remove("sidecar-a.yaml");
    scene.wait(Duration::from_secs(5), "beta's cluster to reach the sidecar", Section::Clusters, || {
        let b = clusters_of_b(client);
        if b == [BETA] { Ok(()) } else { Err(format!("clusters of b: {b:?}")) }
    });
    scene.wait(Duration::from_secs(5), "beta to answer through the sidecar", Section::Routes, || {
        beta.all_answered_by(5, &["beta-1"])
    });
    alpha.all_answered_by(5, &["alpha-1"]).unwrap();
    scene.assert_nothing_rejected();
}
