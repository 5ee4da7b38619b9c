//! End to end: an ingress gateway Envoy (a router proxy) configured by meshpush.
//!
//! A Gateway in `istio-system` selects routers labelled `istio: ingressgateway`
//! and serves `shop.example.test` over HTTP on port 18105, bound to 127.0.0.1
//! (`spec.servers[].bind`, so nothing listens outside loopback). A
//! VirtualService in `shop` bound to that Gateway routes the host to the
//! `storefront` service, whose pods are loopback backends.

use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use support::envoy::Section;
use support::manifests::{docs, gateway, gateway_route, pod, service};
use support::scene::Scene;
use support::traffic::Request;

const GATEWAY_PORT: u16 = 18105;
const SERVICE_PORT: u16 = 18155;

#[test]
fn gateway_routes_a_host_to_a_service_through_a_bound_virtual_service() {
    let mesh = docs(&[
        service("shop", "storefront", SERVICE_PORT),
        pod("shop", "storefront-1", "127.0.105.2", &[("app", "storefront")], SERVICE_PORT),
        pod("shop", "storefront-2", "127.0.105.3", &[("app", "storefront")], SERVICE_PORT),
        // Only bound to the mesh: the gateway must not serve it.
        service("shop", "internal", SERVICE_PORT),
    ]);
    let ingress = docs(&[
        gateway("istio-system", "ingress", "ingressgateway", GATEWAY_PORT, &["shop.example.test"]),
        gateway_route("shop", "storefront", "istio-system/ingress", "shop.example.test", "storefront", SERVICE_PORT),
    ]);
    let mut scene = Scene::start(
        &[("mesh.yaml", &mesh), ("ingress.yaml", &ingress)],
        &[("storefront-1", "127.0.105.2:18155"), ("storefront-2", "127.0.105.3:18155")],
    );
    scene.add_ingress_gateway();
    let gw = scene.envoy("gateway");

    let entry = SocketAddr::from(([127, 0, 0, 1], GATEWAY_PORT));
    let shop = Request::new(entry, "shop.example.test").path("/cart/checkout");
    scene.wait(Duration::from_secs(15), "shop.example.test to answer through the gateway", Section::Routes, || {
        shop.send().map(drop)
    });

    // The listener binds where the Gateway says: 127.0.0.1, not 0.0.0.0.
    scene.focus(Section::Listeners);
    let listeners = gw.section(Section::Listeners);
    let listener = listeners["dynamic_listeners"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|l| l["name"] == "127.0.0.1_18105")
        .expect("listener 127.0.0.1_18105");
    let address = &listener["active_state"]["listener"]["address"]["socket_address"];
    assert_eq!((address["address"].as_str(), address["port_value"].as_u64()), (Some("127.0.0.1"), Some(18105)));

    scene.focus(Section::Routes);
    let seen = shop.sample(20).unwrap();
    assert_eq!(seen.keys().map(String::as_str).collect::<Vec<_>>(), ["storefront-1", "storefront-2"], "{seen:?}");
    // With the port in the Host header too.
    shop.clone().path("/").all_answered_by(5, &["storefront-1", "storefront-2"]).unwrap();
    let with_port = Request::new(entry, "shop.example.test:18105");
    with_port.all_answered_by(5, &["storefront-1", "storefront-2"]).unwrap();
    // Hosts the Gateway does not serve get a 404 from the gateway itself.
    for host in ["internal", "internal.shop.svc.cluster.local", "other.example.test"] {
        let r = support::http::get(entry, "/", &[("host", host)]).unwrap();
        assert_eq!((r.status, r.header("x-backend")), (404, None), "Host {host}: {r:?}");
    }
    scene.assert_nothing_rejected();
}
