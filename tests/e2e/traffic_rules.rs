//! End to end: the behaviours of Istio traffic rules a user sees, checked
//! with real requests through a real Envoy — an injected abort and delay, a
//! CORS preflight answered by Envoy, header operations arriving at the
//! backend and the client, a websocket upgrade, a mirrored request arriving
//! at the mirror, a `sourceLabels` route applying only to the labelled
//! workload, and cookie-hash stickiness.
//!
//! Each test runs its own mesh in namespace `shop` with its own service
//! ports (182xx) and backend addresses (127.0.12x.0/24), so they run in
//! parallel with each other and with the other end-to-end files.

use crate::support;

use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use support::envoy::Section;
use support::http;
use support::manifests::{docs, pod, service, sidecar, sidecar_node};
use support::scene::Scene;
use support::traffic::Request;

/// How long a fresh sidecar may take to get listeners, routes and endpoints.
const CONVERGE: Duration = Duration::from_secs(15);

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Starts the client sidecar `client.shop` (NONE mode) and waits until `probe` is answered.
fn start_client(scene: &mut Scene, labels: &[(&str, &str)], name: &str, ip: &str, probe: &Request) {
    let opts = scene.sidecar(&sidecar_node(ip, name, "shop"), labels);
    scene.add_envoy(name, &opts);
    scene.wait(CONVERGE, &format!("{} to answer through {name}", probe.host), Section::Routes, || {
        probe.send().map(drop)
    });
}

/// Istio's `fault`, `corsPolicy` and `headers` on one VirtualService, and a
/// websocket upgrade through its catch-all route.
#[test]
fn fault_cors_headers_and_websocket_behave_as_istio_configures_them() {
    const PORT: u16 = 18201;
    let mesh = docs(&[service("shop", "web", PORT), pod("shop", "web-1", "127.0.121.2", &[("app", "web")], PORT)]);
    let rules = "\
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: web, namespace: shop}
spec:
  hosts: [web]
  http:
  - name: broken
    match: [{uri: {prefix: /broken}}]
    fault: {abort: {httpStatus: 555, percentage: {value: 100}}}
    route: [{destination: {host: web}}]
  - name: slow
    match: [{uri: {prefix: /slow}}]
    fault: {delay: {fixedDelay: 1s, percentage: {value: 100}}}
    route: [{destination: {host: web}}]
  - name: cors
    match: [{uri: {prefix: /cors}}]
    corsPolicy:
      allowOrigins: [{exact: \"https://shop.example\"}]
      allowMethods: [POST, GET]
      allowHeaders: [x-token]
      maxAge: 1h
    route: [{destination: {host: web}}]
  - name: rest
    headers:
      request: {set: {x-added: \"yes\"}, remove: [x-secret]}
      response: {add: {x-served-by: mesh}}
    route:
    - destination: {host: web}
      headers: {request: {add: {x-destination: web}}}
";
    let mut scene = Scene::start(&[("mesh.yaml", &mesh), ("rules.yaml", rules)], &[("web-1", "127.0.121.2:18201")]);
    let web = Request::new(loopback(PORT), "web");
    start_client(&mut scene, &[("app", "client")], "client", "127.0.121.9", &web);
    let send = |method: &str, path: &str, headers: &[(&str, &str)]| {
        let mut all = vec![("host", "web")];
        all.extend_from_slice(headers);
        http::request(loopback(PORT), method, path, &all).unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    };

    // Abort: Envoy answers 555 itself; the backend never sees the request.
    let hits_before = scene.backend("web-1").hits();
    let aborted = send("GET", "/broken", &[]);
    assert_eq!(aborted.status, 555, "{aborted:?}");
    assert_eq!(aborted.header("x-backend"), None);
    assert_eq!(scene.backend("web-1").hits(), hits_before, "an aborted request must not reach the backend");

    // Delay: forwarded, one second late.
    let started = Instant::now();
    let slow = send("GET", "/slow", &[]);
    assert_eq!((slow.status, slow.header("x-backend")), (200, Some("web-1")));
    assert!(started.elapsed() >= Duration::from_millis(950), "the delay was {:?}", started.elapsed());

    // CORS: a preflight from an allowed origin is answered by Envoy with the policy.
    let preflight = [("origin", "https://shop.example"), ("access-control-request-method", "POST")];
    let answer = send("OPTIONS", "/cors", &preflight);
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.header("access-control-allow-origin"), Some("https://shop.example"), "{answer:?}");
    assert_eq!(answer.header("access-control-allow-methods"), Some("POST,GET"));
    assert_eq!(answer.header("access-control-allow-headers"), Some("x-token"));
    assert_eq!(answer.header("access-control-max-age"), Some("3600"));
    assert_eq!(answer.header("x-backend"), None, "Envoy answers the preflight itself");
    // Another origin's preflight is forwarded (Istio's default) and gets no grant.
    let other =
        send("OPTIONS", "/cors", &[("origin", "https://evil.example"), ("access-control-request-method", "POST")]);
    assert_eq!(other.header("x-backend"), Some("web-1"), "{other:?}");
    assert_eq!(other.header("access-control-allow-origin"), None);
    // A simple request from the allowed origin gets the grant on the response.
    let simple = send("GET", "/cors", &[("origin", "https://shop.example")]);
    assert_eq!(simple.header("access-control-allow-origin"), Some("https://shop.example"), "{simple:?}");

    // Headers: set and added request headers arrive, a removed one does not,
    // and the response carries the added header.
    let plain = send("GET", "/", &[("x-secret", "s3cr3t")]);
    assert_eq!(plain.header("x-backend"), Some("web-1"), "{plain:?}");
    assert_eq!(plain.header("x-echo-x-added"), Some("yes"), "{plain:?}");
    assert_eq!(plain.header("x-echo-x-destination"), Some("web"), "{plain:?}");
    assert_eq!(plain.header("x-echo-x-secret"), None, "a removed header must not reach the backend");
    assert_eq!(plain.header("x-served-by"), Some("mesh"), "{plain:?}");

    // Websocket: the upgrade is answered 101 and the connection carries data both ways.
    let (head, mut upgraded) = http::upgrade(loopback(PORT), "web", "/ws").expect("the upgrade request");
    assert!(head.start.contains(" 101 "), "upgrade answered {:?} {:?}", head.start, head.headers);
    upgraded.get_mut().write_all(b"ping\n").unwrap();
    let mut echoed = String::new();
    upgraded.read_line(&mut echoed).unwrap();
    assert_eq!(echoed, "ping\n");
    scene.assert_nothing_rejected();
}

/// `mirror` with `mirrorPercentage`: every request also reaches the mirror,
/// whose answer is dropped.
#[test]
fn mirrored_requests_arrive_at_the_mirror() {
    const PORT: u16 = 18202;
    let mesh = docs(&[
        service("shop", "web", PORT),
        service("shop", "shadow", PORT),
        pod("shop", "web-1", "127.0.122.2", &[("app", "web")], PORT),
        pod("shop", "shadow-1", "127.0.122.3", &[("app", "shadow")], PORT),
    ]);
    let rules = "\
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: web, namespace: shop}
spec:
  hosts: [web]
  http:
  - route: [{destination: {host: web}}]
    mirror: {host: shadow}
    mirrorPercentage: {value: 100.0}
";
    let mut scene = Scene::start(
        &[("mesh.yaml", &mesh), ("rules.yaml", rules)],
        &[("web-1", "127.0.122.2:18202"), ("shadow-1", "127.0.122.3:18202")],
    );
    let web = Request::new(loopback(PORT), "web");
    start_client(&mut scene, &[("app", "client")], "client", "127.0.122.9", &web);
    let before = scene.backend("shadow-1").hits();
    web.all_answered_by(10, &["web-1"]).unwrap();
    scene.wait(Duration::from_secs(5), "10 mirrored requests at shadow-1", Section::Routes, || {
        let mirrored = scene.backend("shadow-1").hits() - before;
        if mirrored >= 10 { Ok(()) } else { Err(format!("{mirrored} mirrored")) }
    });
    scene.assert_nothing_rejected();
}

/// `sourceLabels`: the route applies only to callers with the labels.
#[test]
fn a_source_labels_route_applies_only_to_the_labelled_workload() {
    const PORT: u16 = 18203;
    let mesh = docs(&[
        service("shop", "api", PORT),
        service("shop", "api-canary", PORT),
        pod("shop", "api-1", "127.0.123.2", &[("app", "api")], PORT),
        pod("shop", "canary-1", "127.0.123.3", &[("app", "api-canary")], PORT),
    ]);
    let rules = "\
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: api, namespace: shop}
spec:
  hosts: [api]
  http:
  - match: [{sourceLabels: {version: v1}}]
    route: [{destination: {host: api-canary}}]
  - route: [{destination: {host: api}}]
";
    // Both clients are NONE-mode sidecars on one host: each binds its
    // outbound listeners on an address of its own.
    let sidecars = docs(&[
        sidecar("shop", "v1", Some("client-v1"), &["./*"], Some("127.0.123.11")),
        sidecar("shop", "v2", Some("client-v2"), &["./*"], Some("127.0.123.12")),
    ]);
    let mut scene = Scene::start(
        &[("mesh.yaml", &mesh), ("rules.yaml", rules), ("sidecars.yaml", &sidecars)],
        &[("api-1", "127.0.123.2:18203"), ("canary-1", "127.0.123.3:18203")],
    );
    let from = |ip: [u8; 4]| Request::new(SocketAddr::from((ip, PORT)), "api");
    let (v1, v2) = (from([127, 0, 123, 11]), from([127, 0, 123, 12]));
    start_client(&mut scene, &[("app", "client-v1"), ("version", "v1")], "client-v1", "127.0.123.9", &v1);
    start_client(&mut scene, &[("app", "client-v2"), ("version", "v2")], "client-v2", "127.0.123.10", &v2);
    v1.all_answered_by(10, &["canary-1"]).unwrap();
    v2.all_answered_by(10, &["api-1"]).unwrap();
    scene.assert_nothing_rejected();
}

/// `consistentHash.httpCookie`: Envoy sets the cookie on the first answer
/// and every request carrying it lands on the same workload.
#[test]
fn a_cookie_hash_keeps_a_client_on_one_workload() {
    const PORT: u16 = 18204;
    let mesh = docs(&[
        service("shop", "cart", PORT),
        pod("shop", "cart-1", "127.0.124.2", &[("app", "cart")], PORT),
        pod("shop", "cart-2", "127.0.124.3", &[("app", "cart")], PORT),
        pod("shop", "cart-3", "127.0.124.4", &[("app", "cart")], PORT),
    ]);
    let rule = "\
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: cart, namespace: shop}
spec:
  host: cart
  trafficPolicy:
    loadBalancer:
      consistentHash:
        httpCookie: {name: session, path: /, ttl: 3600s}
";
    let mut scene = Scene::start(
        &[("mesh.yaml", &mesh), ("rule.yaml", rule)],
        &[("cart-1", "127.0.124.2:18204"), ("cart-2", "127.0.124.3:18204"), ("cart-3", "127.0.124.4:18204")],
    );
    let cart = Request::new(loopback(PORT), "cart");
    start_client(&mut scene, &[("app", "client")], "client", "127.0.124.9", &cart);
    // Every endpoint known before the stickiness is measured.
    scene.wait(CONVERGE, "all three cart workloads to answer", Section::Endpoints, || {
        let seen = cart.sample(30)?;
        if seen.len() == 3 { Ok(()) } else { Err(format!("answered by {seen:?}")) }
    });
    let first = http::get(loopback(PORT), "/", &[("host", "cart")]).unwrap();
    let cookie = first.header("set-cookie").unwrap_or_else(|| panic!("no set-cookie on {first:?}"));
    assert!(cookie.starts_with("session=") && cookie.contains("Path=/"), "{cookie}");
    let session = cookie.split(';').next().unwrap().to_string();
    let sticky = cart.clone().header("cookie", &session);
    let seen = sticky.sample(20).unwrap();
    assert_eq!(seen.len(), 1, "requests with {session} went to {seen:?}");
    assert_eq!(
        seen.keys().next().map(String::as_str),
        first.header("x-backend"),
        "the cookie names the first answer's workload"
    );
    scene.assert_nothing_rejected();
}

/// `Sidecar.ingress` on a NONE-mode proxy: the sidecar binds the ingress
/// port on its address and hands requests to the application at
/// `defaultEndpoint`; `outboundTrafficPolicy.egressProxy` sends requests for
/// hosts the mesh does not know to the egress proxy.
#[test]
fn sidecar_ingress_listeners_and_the_egress_proxy_carry_traffic() {
    const PORT: u16 = 18205;
    let mesh = docs(&[
        service("shop", "web", PORT),
        service("shop", "egress", PORT),
        pod("shop", "egress-1", "127.0.125.3", &[("app", "egress")], PORT),
    ]);
    let sidecars = "\
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: web, namespace: shop}
spec:
  workloadSelector: {labels: {app: web}}
  ingress:
  - port: {number: 18205, protocol: HTTP, name: http}
    bind: 127.0.125.20
    captureMode: NONE
    defaultEndpoint: 127.0.0.1:18215
  egress:
  - hosts: [./*]
  outboundTrafficPolicy:
    mode: ALLOW_ANY
    egressProxy: {host: egress, port: {number: 18205}}
";
    let mut scene = Scene::start(
        &[("mesh.yaml", &mesh), ("sidecars.yaml", sidecars)],
        &[("web-app", "127.0.0.1:18215"), ("egress-1", "127.0.125.3:18205")],
    );
    let opts = scene.sidecar(&sidecar_node("127.0.125.20", "web-1", "shop"), &[("app", "web")]);
    scene.add_envoy("web", &opts);
    let inbound = Request::new(SocketAddr::from(([127, 0, 125, 20], PORT)), "web.shop");
    scene.wait(CONVERGE, "the ingress listener to reach the application", Section::Listeners, || {
        inbound.all_answered_by(3, &["web-app"])
    });
    // Outbound from the same sidecar: a host the mesh does not know goes to the egress proxy.
    let unknown = Request::new(SocketAddr::from(([127, 0, 0, 1], PORT)), "api.partner.example");
    scene.wait(CONVERGE, "an unknown host to reach the egress proxy", Section::Routes, || {
        unknown.all_answered_by(3, &["egress-1"])
    });
    scene.assert_nothing_rejected();
}

/// Locality failover, Istio's default with outlier detection: a client in
/// `us-east/zone-a` is served by the endpoint in its zone; when that one
/// fails and is ejected, traffic fails over to the other region.
#[test]
fn outlier_detection_keeps_traffic_in_the_callers_locality_and_fails_over() {
    const PORT: u16 = 18206;
    let entry = |name: &str, ip: &str, locality: &str| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {{name: {name}, namespace: shop}}\n\
             spec: {{address: {ip}, locality: {locality}, labels: {{app: api}}}}\n"
        )
    };
    let mesh = docs(&[
        service("shop", "api", PORT),
        entry("api-near", "127.0.126.2", "us-east/zone-a"),
        entry("api-far", "127.0.126.3", "eu-west/zone-b"),
    ]);
    let rule = "\
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: api, namespace: shop}
spec:
  host: api
  trafficPolicy:
    outlierDetection: {consecutive5xxErrors: 1, interval: 1s, baseEjectionTime: 1m, maxEjectionPercent: 100}
";
    let mut scene = Scene::start(
        &[("mesh.yaml", &mesh), ("rule.yaml", rule)],
        &[("api-near", "127.0.126.2:18206"), ("api-far", "127.0.126.3:18206")],
    );
    let mut opts = scene.sidecar(&sidecar_node("127.0.126.9", "client", "shop"), &[("app", "client")]);
    opts.locality = Some("us-east/zone-a".into());
    scene.add_envoy("client", &opts);
    let api = Request::new(loopback(PORT), "api");
    scene.wait(CONVERGE, "api to answer through the sidecar", Section::Endpoints, || api.send().map(drop));
    api.all_answered_by(20, &["api-near"]).unwrap();

    scene.remove_backend("api-near");
    scene.wait(Duration::from_secs(10), "traffic to fail over to the other region", Section::Endpoints, || {
        api.all_answered_by(10, &["api-far"])
    });
    scene.assert_nothing_rejected();
}

/// WorkloadGroup auto-registration: a VM's Envoy that connects with
/// `AUTO_REGISTER_GROUP` becomes an endpoint of the Service its group's
/// labels select, and a client's requests reach the VM.
#[test]
fn a_vm_proxy_registers_into_its_workload_group_and_receives_traffic() {
    const PORT: u16 = 18207;
    let mesh = docs(&[service("shop", "ratings", PORT)]);
    let group = "\
apiVersion: networking.istio.io/v1
kind: WorkloadGroup
metadata: {name: ratings-vm, namespace: shop}
spec:
  metadata: {labels: {app: ratings}}
  template: {ports: {http: 18207}}
";
    // The VM's proxy runs beside the client's on this host: its listeners bind an address of their own.
    let vm_sidecar = sidecar("shop", "vm", None, &["./*"], Some("127.0.127.6"));
    let vm_sidecar = vm_sidecar.replace("spec:\n", "spec:\n  workloadSelector:\n    labels:\n      role: vm\n");
    let mut scene = Scene::start(
        &[("mesh.yaml", &mesh), ("group.yaml", group), ("vm-sidecar.yaml", &vm_sidecar)],
        &[("vm-app", "127.0.127.5:18207")],
    );
    let ratings = Request::new(loopback(PORT), "ratings");
    let opts = scene.sidecar(&sidecar_node("127.0.127.9", "client", "shop"), &[("app", "client")]);
    scene.add_envoy("client", &opts);
    scene.wait(CONVERGE, "the client's listener for ratings", Section::Listeners, || {
        if scene.envoy("client").has_active_listener("0.0.0.0_18207") {
            Ok(())
        } else {
            Err("no listener yet".to_string())
        }
    });
    assert!(ratings.send().is_err(), "no workload has registered yet");

    let mut vm = scene.sidecar(&sidecar_node("127.0.127.5", "ratings-vm-1", "shop"), &[("role", "vm")]);
    vm.meta.insert("AUTO_REGISTER_GROUP".into(), "ratings-vm".into());
    scene.add_envoy("vm", &vm);
    scene.wait(CONVERGE, "ratings to be answered by the registered VM", Section::Endpoints, || {
        ratings.all_answered_by(3, &["vm-app"])
    });
    let configz = scene.mesh().admin("/debug/configz").body;
    assert!(configz.contains("ratings-vm-127.0.127.5"), "the registered entry is shown");
    scene.assert_nothing_rejected();
}
