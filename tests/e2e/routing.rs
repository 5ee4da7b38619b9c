//! End to end: routing rules meshpush turns into Envoy routes, checked by where
//! real requests land.
//!
//! Each test runs its own small mesh (namespace `shop`) with meshpush, a NONE-mode
//! sidecar Envoy for a client workload (outbound listeners on 127.0.0.1:PORT),
//! and loopback backends playing the workloads. Tests in this file run in
//! parallel, so each has its own service port (181xx) and backend addresses
//! (127.0.1xx.0/24). The weight shift runs twice: SotW and delta xDS.

use crate::support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use support::envoy::Section;
use support::manifests::{docs, pod, service, sidecar_node, subsets, weighted, workload_entry};
use support::scene::Scene;
use support::traffic::{Request, Traffic};

/// How long a fresh sidecar may take to get listeners, routes and endpoints.
const CONVERGE: Duration = Duration::from_secs(15);

/// Where a NONE-mode sidecar takes outbound traffic for `port`.
fn outbound(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Starts the client sidecar `client.shop` and waits until `probe` is answered.
fn start_client(scene: &mut Scene, ip: &str, probe: &Request) {
    start_client_with(scene, ip, probe, false);
}

/// [`start_client`], on delta xDS when `delta`.
fn start_client_with(scene: &mut Scene, ip: &str, probe: &Request, delta: bool) {
    let mut opts = scene.sidecar(&sidecar_node(ip, "client", "shop"), &[("app", "client")]);
    opts.delta = delta;
    scene.add_envoy("client", &opts);
    scene.wait(CONVERGE, &format!("Host {} to be answered through the sidecar", probe.host), Section::Routes, || {
        probe.send().map(drop)
    });
}

/// Scenario 1: a VirtualService for `web` sends `/api…` to the `api` service and
/// everything else to `web`; the `Host` header picks the virtual host.
#[test]
fn virtual_service_routes_by_host_and_path() {
    const PORT: u16 = 18101;
    let mesh = docs(&[
        service("shop", "web", PORT),
        service("shop", "api", PORT),
        pod("shop", "web-1", "127.0.101.2", &[("app", "web")], PORT),
        pod("shop", "api-1", "127.0.101.3", &[("app", "api")], PORT),
    ]);
    let routes = "\
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: web
  namespace: shop
spec:
  hosts:
  - web
  http:
  - match:
    - uri:
        prefix: /api
    route:
    - destination:
        host: api
  - route:
    - destination:
        host: web
";
    let mut scene = Scene::start(
        &[("mesh.yaml", &mesh), ("routes.yaml", routes)],
        &[("web-1", "127.0.101.2:18101"), ("api-1", "127.0.101.3:18101")],
    );
    let to = |host: &str, path: &str| Request::new(outbound(PORT), host).path(path);
    start_client(&mut scene, "127.0.101.9", &to("web", "/"));

    let cases = [
        ("web", "/", "web-1"),
        ("web", "/catalog/42", "web-1"),
        ("web", "/api", "api-1"),
        ("web", "/api/orders?id=7", "api-1"),
        ("web.shop", "/api/orders", "api-1"),
        ("web.shop.svc.cluster.local:18101", "/api/orders", "api-1"),
        ("web.shop.svc.cluster.local", "/", "web-1"),
        // `api` has no VirtualService: its own default route, whatever the path.
        ("api", "/", "api-1"),
        ("api:18101", "/catalog", "api-1"),
    ];
    for (host, path, expected) in cases {
        let seen = to(host, path).sample(5).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(seen.keys().collect::<Vec<_>>(), [expected], "Host {host} path {path}: answered by {seen:?}");
    }
    // A host no service or rule names reaches no backend: it falls through to
    // the catch-all route (PassthroughCluster, as in Istio's ALLOW_ANY mode).
    let unknown = support::http::get(outbound(PORT), "/", &[("host", "nobody.example.test")]).unwrap();
    assert!(unknown.status != 200 && unknown.header("x-backend").is_none(), "unknown host: {unknown:?}");
    scene.assert_nothing_rejected();
}

/// Scenario 2: a 100/0 split moved to 0/100 by editing the file: traffic
/// follows within 2 s and no request fails while it moves.
#[test]
fn weight_shift_moves_traffic_within_two_seconds_without_a_failed_request() {
    weight_shift(18102, false);
}

/// Scenario 2 with the sidecar on delta xDS (`DELTA_GRPC`).
#[test]
fn weight_shift_moves_traffic_within_two_seconds_without_a_failed_request_over_delta() {
    weight_shift(18112, true);
}

/// Scenario 2 on service port `port` (backends on 127.0.N.0/24, N = port - 18000).
fn weight_shift(port: u16, delta: bool) {
    let net = format!("127.0.{}", port - 18000);
    let (v1_ip, v2_ip) = (format!("{net}.2"), format!("{net}.3"));
    let mesh = docs(&[
        service("shop", "cart", port),
        pod("shop", "cart-v1", &v1_ip, &[("app", "cart"), ("version", "v1")], port),
        pod("shop", "cart-v2", &v2_ip, &[("app", "cart"), ("version", "v2")], port),
        subsets("shop", "cart", &["v1", "v2"]),
    ]);
    let split = |v1: i64, v2: i64| weighted("shop", "cart", "cart", &[("v1", v1), ("v2", v2)]);
    let mut scene = Scene::start(
        &[("mesh.yaml", &mesh), ("cart-vs.yaml", &split(100, 0))],
        &[("cart-v1", &format!("{v1_ip}:{port}")), ("cart-v2", &format!("{v2_ip}:{port}"))],
    );
    let cart = Request::new(outbound(port), "cart");
    start_client_with(&mut scene, &format!("{net}.9"), &cart, delta);
    assert_eq!(scene.envoy("client").ads_api_type(), if delta { "DELTA_GRPC" } else { "GRPC" });
    cart.all_answered_by(30, &["cart-v1"]).unwrap();

    let traffic = Traffic::start(cart.clone());
    scene.wait(Duration::from_secs(5), "background traffic to flow", Section::Routes, || traffic.sent() >= 20);
    scene.dir().write("cart-vs.yaml", &split(0, 100));
    let written = Instant::now();
    scene.wait(Duration::from_secs(2), "20 requests in a row to reach cart-v2", Section::Routes, || {
        cart.all_answered_by(20, &["cart-v2"])
    });
    let moved = written.elapsed();
    let before_stop = traffic.sent();
    scene.wait(Duration::from_secs(5), "more background traffic after the shift", Section::Routes, || {
        traffic.sent() >= before_stop + 20
    });
    let tally = traffic.stop();
    eprintln!("weight shift served after {moved:?}; background traffic: {tally:?}");

    assert_eq!(tally.failed, 0, "requests failed during the shift: {:?}", tally.failures);
    assert!(
        tally.answered_by("cart-v1") > 0 && tally.answered_by("cart-v2") > 0,
        "traffic spanned the shift: {tally:?}"
    );
    assert_eq!(cart.sample(40).unwrap(), BTreeMap::from([("cart-v2".to_string(), 40)]));
    scene.assert_nothing_rejected();
}

/// Scenario 3: DestinationRule subsets select endpoints by label, from Pods and
/// WorkloadEntries alike; `end-user: jason` goes to v2, everyone else to v1.
#[test]
fn header_match_routes_to_a_subset_of_pods_and_workload_entries() {
    const PORT: u16 = 18103;
    let v1 = [("app", "reviews"), ("version", "v1")];
    let v2 = [("app", "reviews"), ("version", "v2")];
    let mesh = docs(&[
        service("shop", "reviews", PORT),
        pod("shop", "reviews-v1-pod", "127.0.103.2", &v1, PORT),
        workload_entry("shop", "reviews-v1-vm", "127.0.103.3", &v1),
        pod("shop", "reviews-v2-pod", "127.0.103.4", &v2, PORT),
        workload_entry("shop", "reviews-v2-vm", "127.0.103.5", &v2),
        subsets("shop", "reviews", &["v1", "v2"]),
    ]);
    let routes = "\
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: reviews
  namespace: shop
spec:
  hosts:
  - reviews
  http:
  - match:
    - headers:
        end-user:
          exact: jason
    route:
    - destination:
        host: reviews
        subset: v2
  - route:
    - destination:
        host: reviews
        subset: v1
";
    let backends = [
        ("reviews-v1-pod", "127.0.103.2:18103"),
        ("reviews-v1-vm", "127.0.103.3:18103"),
        ("reviews-v2-pod", "127.0.103.4:18103"),
        ("reviews-v2-vm", "127.0.103.5:18103"),
    ];
    let mut scene = Scene::start(&[("mesh.yaml", &mesh), ("routes.yaml", routes)], &backends);
    let anyone = Request::new(outbound(PORT), "reviews");
    let jason = anyone.clone().header("end-user", "jason");
    start_client(&mut scene, "127.0.103.9", &anyone);
    // Round robin over a subset's two endpoints: 20 requests reach both.
    scene.focus(Section::Endpoints);
    let expect = |request: &Request, backends: [&str; 2]| {
        let seen = request.sample(20).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(seen.keys().map(String::as_str).collect::<Vec<_>>(), backends, "{:?}: {seen:?}", request.headers);
    };
    expect(&anyone, ["reviews-v1-pod", "reviews-v1-vm"]);
    expect(&jason, ["reviews-v2-pod", "reviews-v2-vm"]);
    // An exact match: another user is not jason.
    expect(&anyone.clone().header("end-user", "jasonx"), ["reviews-v1-pod", "reviews-v1-vm"]);
    scene.assert_nothing_rejected();
}

/// Scenario 7: a MESH_EXTERNAL STATIC ServiceEntry with endpoints on loopback
/// is reachable by its host name.
#[test]
fn static_service_entry_is_reachable_by_host_name() {
    const PORT: u16 = 18107;
    let entry = "\
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: payments
  namespace: shop
spec:
  hosts:
  - payments.external.test
  location: MESH_EXTERNAL
  resolution: STATIC
  ports:
  - number: 18107
    name: http
    protocol: HTTP
  endpoints:
  - address: 127.0.107.2
  - address: 127.0.107.3
";
    let mut scene = Scene::start(
        &[("payments.yaml", entry)],
        &[("payments-a", "127.0.107.2:18107"), ("payments-b", "127.0.107.3:18107")],
    );
    let payments = Request::new(outbound(PORT), "payments.external.test").path("/charge");
    start_client(&mut scene, "127.0.107.9", &payments);
    scene.focus(Section::Clusters);
    let seen = payments.sample(20).unwrap();
    assert_eq!(seen.keys().map(String::as_str).collect::<Vec<_>>(), ["payments-a", "payments-b"], "{seen:?}");
    let seen = Request::new(outbound(PORT), "payments.external.test:18107").sample(4).unwrap();
    assert_eq!(seen.values().sum::<u64>(), 4, "{seen:?}");
    assert!(
        scene.envoy("client").cluster_names().iter().any(|c| c == "outbound|18107||payments.external.test"),
        "the entry's cluster"
    );
    scene.assert_nothing_rejected();
}
