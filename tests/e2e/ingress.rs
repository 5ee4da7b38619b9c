//! End to end: a Kubernetes Ingress of class `istio` routes by host and path
//! through a real Envoy, as Istio's ingress controller translates it.
//!
//! The Ingress's Gateway is served by the routers labelled `istio:
//! ingressgateway` of `istio-system`, and binds `0.0.0.0:80` as Istio's
//! does. Tests never listen outside loopback, so that router runs in a
//! network namespace of its own (`Envoy::start_isolated`), reaching
//! meshpush over a Unix socket; the backends and the client run in that
//! namespace too (`support::isolated`). Addresses 127.0.191.0/24.

use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use support::envoy::{Envoy, Section};
use support::isolated::{NamespacedBackend, get};
use support::manifests::{docs, pod, router_node};
use support::scene::Scene;

const INGRESS: &str = r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: shop, namespace: web}
spec:
  ingressClassName: istio
  rules:
  - host: shop.example.com
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: storefront, port: {number: 8080}}}}
      - {path: /api, pathType: Prefix, backend: {service: {name: api, port: {name: http}}}}
  - host: status.example.com
    http:
      paths:
      - {path: /health, pathType: Exact, backend: {service: {name: api, port: {number: 8080}}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: elsewhere, namespace: web}
spec:
  ingressClassName: nginx
  rules:
  - host: nginx.example.com
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: storefront, port: {number: 8080}}}}
"#;

fn http_service(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: web}}\n\
         spec:\n  selector: {{app: {name}}}\n  ports: [{{name: http, port: 8080}}]\n"
    )
}

#[test]
fn an_istio_ingress_routes_by_host_and_path() {
    let mesh = docs(&[
        http_service("storefront"),
        http_service("api"),
        pod("web", "storefront-1", "127.0.191.2", &[("app", "storefront")], 8080),
        pod("web", "api-1", "127.0.191.3", &[("app", "api")], 8080),
    ]);
    let mut scene = Scene::start_unix(&[("mesh.yaml", &mesh), ("ingress.yaml", INGRESS)], &[]);
    let mut opts =
        scene.sidecar(&router_node("127.0.0.1", "ingressgateway-1", "istio-system"), &[("istio", "ingressgateway")]);
    opts.interception = "REDIRECT".into();
    scene.keep_envoy(Envoy::start_isolated("ingressgateway", &opts));
    let router = scene.envoy("ingressgateway");
    let _storefront = NamespacedBackend::start(router, "storefront-1", "127.0.191.2:8080".parse().unwrap());
    let _api = NamespacedBackend::start(router, "api-1", "127.0.191.3:8080".parse().unwrap());

    let entry: SocketAddr = "127.0.0.1:80".parse().unwrap();
    let cases = [
        ("shop.example.com", "/", 200, "storefront-1"),
        ("shop.example.com", "/cart", 200, "storefront-1"),
        ("shop.example.com", "/api", 200, "api-1"),
        ("shop.example.com", "/api/orders", 200, "api-1"),
        // A prefix matches whole segments.
        ("shop.example.com", "/apis", 200, "storefront-1"),
        ("status.example.com", "/health", 200, "api-1"),
        ("status.example.com", "/health/deep", 404, ""),
        // Another controller's Ingress is not served.
        ("nginx.example.com", "/", 404, ""),
    ];
    for (host, path, status, backend) in cases {
        let what = format!("http://{host}{path} through the ingress gateway");
        scene.wait(Duration::from_secs(30), &what, Section::Routes, || {
            let (got, seen) = get(router, entry, host, path)?;
            if got == status && seen == backend { Ok(()) } else { Err(format!("status {got} from {seen:?}")) }
        });
    }
    scene.assert_nothing_rejected();
}
