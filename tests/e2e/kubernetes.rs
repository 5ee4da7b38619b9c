//! End to end: meshpush reads the mesh from the Kubernetes API — the
//! stand-in API server of `support::kube_api`, since no kube-apiserver
//! can run here — and routes a real Envoy by it, under steady traffic:
//! an EndpointSlice gains a ready endpoint, a VirtualService is edited, an
//! endpoint turns not-ready, a change is made while the API server is down
//! (its watches answered 410 Gone after), and an invalid VirtualService is
//! refused with the last good version kept. Not one request fails. The
//! Pods' Nodes give their endpoints' locality, which Envoy shows; a Node
//! relabelled moves it.
//! Service port 18144, addresses 127.0.144.0/24.

use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use support::envoy::Section;
use support::kube_api::KubeApi;
use support::manifests::{pod, service, sidecar_node, subsets};
use support::scene::Scene;
use support::traffic::{Request, Traffic};

const PORT: u16 = 18144;

fn ip(host: u8) -> String {
    format!("127.0.144.{host}")
}

/// The EndpointSlice of `ledger`: `(pod, host, ready)` per endpoint.
fn slice(endpoints: &[(&str, u8, bool)]) -> String {
    let endpoints: String = endpoints
        .iter()
        .map(|(pod, host, ready)| {
            format!(
                "- addresses: [{}]\n  conditions: {{ready: {ready}, serving: {ready}, terminating: false}}\n  \
                 targetRef: {{kind: Pod, name: {pod}, namespace: shop}}\n",
                ip(*host)
            )
        })
        .collect();
    format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: ledger-x7k2p\n  namespace: shop\n  \
         labels: {{kubernetes.io/service-name: ledger}}\naddressType: IPv4\nports:\n- {{name: http, port: {PORT}, protocol: TCP}}\n\
         endpoints:\n{endpoints}"
    )
}

/// The `ledger` VirtualService: to `subset`, or to the whole service.
fn route(subset: Option<&str>) -> String {
    let subset = subset.map(|s| format!("\n        subset: {s}")).unwrap_or_default();
    format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: ledger\n  namespace: shop\n\
         spec:\n  hosts:\n  - ledger.shop.svc.cluster.local\n  http:\n  - route:\n    - destination:\n        \
         host: ledger.shop.svc.cluster.local{subset}\n"
    )
}

/// A Node in `zone` of region `us-east`.
fn node(name: &str, zone: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels:\n    \
         topology.kubernetes.io/region: us-east\n    topology.kubernetes.io/zone: {zone}\n"
    )
}

/// `pod` scheduled on `node`.
fn pod_on(node: &str, name: &str, host: u8, version: &str) -> String {
    pod("shop", name, &ip(host), &[("app", "ledger"), ("version", version)], PORT)
        .replace("spec:\n", &format!("spec:\n  nodeName: {node}\n"))
}

/// The locality Envoy holds for each host of ledger's whole-service
/// cluster: address → `region/zone/subzone`, from its `/clusters`.
fn envoy_localities(envoy: &support::envoy::Envoy) -> Result<std::collections::BTreeMap<String, String>, String> {
    let response = envoy.admin("/clusters?format=json");
    let clusters: serde_json::Value = serde_json::from_str(&response.body).map_err(|e| format!("/clusters: {e}"))?;
    let name = format!("outbound|{PORT}||ledger.shop.svc.cluster.local");
    let cluster = clusters["cluster_statuses"]
        .as_array()
        .and_then(|all| all.iter().find(|c| c["name"] == name.as_str()))
        .ok_or_else(|| format!("Envoy has no {name}"))?;
    let hosts = cluster["host_statuses"].as_array().cloned().unwrap_or_default();
    Ok(hosts
        .iter()
        .map(|h| {
            let locality = &h["locality"];
            let part = |k: &str| locality[k].as_str().unwrap_or("").to_string();
            (
                h["address"]["socket_address"]["address"].as_str().unwrap_or("?").to_string(),
                format!("{}/{}/{}", part("region"), part("zone"), part("sub_zone")),
            )
        })
        .collect())
}

#[test]
fn envoy_follows_the_kubernetes_api_through_slices_edits_an_outage_and_a_bad_object() {
    let api = KubeApi::start();
    let kubeconfig = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(kubeconfig.path(), api.kubeconfig()).unwrap();
    api.put("apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n");
    api.put(&service("shop", "ledger", PORT));
    api.put(&node("worker-a", "us-east-1a"));
    api.put(&node("worker-b", "us-east-1b"));
    api.put(&pod_on("worker-a", "ledger-v1", 2, "v1"));
    api.put(&slice(&[("ledger-v1", 2, true)]));
    api.put(&subsets("shop", "ledger", &["v1", "v2"]));
    api.put(&route(Some("v1")));

    let backends = [("ledger-v1", format!("{}:{PORT}", ip(2))), ("ledger-v2", format!("{}:{PORT}", ip(3)))];
    let backends: Vec<(&str, &str)> = backends.iter().map(|(n, a)| (*n, a.as_str())).collect();
    let mut scene =
        Scene::start_with(&[], &backends, |_| support::meshpush::Meshpush::start_kube(kubeconfig.path(), &[]));
    let opts = scene.sidecar(&sidecar_node(&ip(9), "client", "shop"), &[("app", "client")]);
    scene.add_envoy("client", &opts);
    let request = Request::new(SocketAddr::from(([127, 0, 0, 1], PORT)), "ledger");
    scene.wait(Duration::from_secs(15), "the sidecar to reach ledger-v1", Section::Routes, || {
        request.all_answered_by(5, &["ledger-v1"])
    });
    let traffic = Traffic::start(request.clone());

    // A new Pod, ready in the slice; the route opened to the whole service.
    api.put(&pod_on("worker-b", "ledger-v2", 3, "v2"));
    api.put(&slice(&[("ledger-v1", 2, true), ("ledger-v2", 3, true)]));
    api.put(&route(None));
    scene.wait(Duration::from_secs(10), "both pods to answer", Section::Endpoints, || {
        let seen = request.sample(20)?;
        if seen.contains_key("ledger-v1") && seen.contains_key("ledger-v2") {
            Ok(())
        } else {
            Err(format!("answered by {seen:?}"))
        }
    });

    // Each endpoint is where its Pod's Node is; a Node relabelled moves
    // the endpoints of its Pods, and only those.
    let localities = |zone_b: &str| {
        [(ip(2), "us-east/us-east-1a/".to_string()), (ip(3), format!("us-east/{zone_b}/"))].into_iter().collect()
    };
    scene.wait(Duration::from_secs(10), "Envoy to hold each endpoint's locality", Section::Endpoints, || {
        let held = envoy_localities(scene.envoy("client"))?;
        if held == localities("us-east-1b") { Ok(()) } else { Err(format!("Envoy holds {held:?}")) }
    });
    api.put(&node("worker-b", "us-east-1c"));
    scene.wait(Duration::from_secs(10), "the relabelled Node's endpoint to move", Section::Endpoints, || {
        let held = envoy_localities(scene.envoy("client"))?;
        if held == localities("us-east-1c") { Ok(()) } else { Err(format!("Envoy holds {held:?}")) }
    });

    // ledger-v2 turns not-ready: no request goes to it any more.
    api.put(&slice(&[("ledger-v1", 2, true), ("ledger-v2", 3, false)]));
    scene.wait(Duration::from_secs(10), "only ledger-v1 to answer", Section::Endpoints, || {
        request.all_answered_by(20, &["ledger-v1"])
    });

    // ledger-v2 is ready again; then, while the API server is down, the
    // route moves to it. After, the watches cannot resume (410 Gone) and
    // list again. (One kind changes during the outage: each kind's watcher
    // lists on its own, so changes of two kinds may land in two pushes.)
    api.put(&slice(&[("ledger-v1", 2, true), ("ledger-v2", 3, true)]));
    scene.wait(Duration::from_secs(10), "both pods to answer again", Section::Endpoints, || {
        let seen = request.sample(20)?;
        if seen.len() == 2 { Ok(()) } else { Err(format!("answered by {seen:?}")) }
    });
    api.go_down();
    api.put(&route(Some("v2")));
    api.come_back();
    scene.wait(Duration::from_secs(20), "the relist to move the route to ledger-v2", Section::Routes, || {
        request.all_answered_by(10, &["ledger-v2"])
    });

    // An invalid edit is refused; the last good route stays.
    api.put(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: ledger, namespace: shop}\n\
         spec:\n  hosts: [ledger.shop.svc.cluster.local]\n  http:\n  - route: [{destination: {host: ledger.shop.svc.cluster.local, subset: v1}, weight: lots}]\n",
    );
    scene.wait(Duration::from_secs(10), "the invalid VirtualService's problem", Section::Routes, || {
        let configz = scene.mesh().admin("/debug/configz").body;
        if configz.contains("k8s:VirtualService/shop/ledger@") && configz.contains("weight") {
            Ok(())
        } else {
            Err("no problem on /debug/configz yet".to_string())
        }
    });
    request.all_answered_by(10, &["ledger-v2"]).expect("the last good route is still served");

    let tally = traffic.stop();
    eprintln!("through the sidecar: {tally:?}");
    assert!(tally.sent >= 100, "too little traffic to tell: {tally:?}");
    assert_eq!(tally.failed, 0, "requests failed: {:?}", tally.failures);
    scene.assert_nothing_rejected();
}

/// The Gateway API objects of the status test: a Gateway of class `istio`,
/// a route it admits, a route naming a listener it does not have, and a
/// TCPRoute (which the stand-in serves only at `v1alpha2`, as an API server
/// with an older Gateway API release does).
const GATEWAY_API_OBJECTS: &[&str] = &[
    "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: istio}\n\
     spec: {controllerName: istio.io/gateway-controller}\n",
    "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: edge, namespace: shop, generation: 1}\n\
     spec:\n  gatewayClassName: istio\n  listeners: [{name: http, port: 80, protocol: HTTP}, {name: db, port: 5432, protocol: TCP}]\n",
    "apiVersion: gateway.networking.k8s.io/v1alpha2\nkind: TCPRoute\nmetadata: {name: db, namespace: shop}\n\
     spec:\n  parentRefs: [{name: edge, sectionName: db}]\n  rules: [{backendRefs: [{name: ledger, port: 18144}]}]\n",
    "apiVersion: v1\nkind: Service\nmetadata: {name: ledger, namespace: shop}\nspec: {ports: [{name: http, port: 18144}]}\n",
    "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: books, namespace: shop}\n\
     spec:\n  parentRefs: [{name: edge}]\n  rules: [{backendRefs: [{name: ledger, port: 18144}]}]\n\
     status:\n  parents:\n  - parentRef: {name: elsewhere}\n    controllerName: example.com/other\n    conditions: []\n",
    "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: lost, namespace: shop}\n\
     spec:\n  parentRefs: [{name: edge, sectionName: https}]\n  rules: [{backendRefs: [{name: ledger, port: 18144}]}]\n",
];

/// The `(type, status, reason)` of each condition in `conditions`.
fn condition_list(conditions: &serde_json::Value) -> Vec<(String, String, String)> {
    conditions
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let s = |f: &str| c[f].as_str().unwrap_or_default().to_string();
            (s("type"), s("status"), s("reason"))
        })
        .collect()
}

#[test]
fn gateway_api_status_is_written_to_the_objects() {
    let api = KubeApi::start();
    for object in GATEWAY_API_OBJECTS {
        api.put(object);
    }
    let kubeconfig = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(kubeconfig.path(), api.kubeconfig()).unwrap();
    let scene = Scene::start_with(&[], &[], |_| support::meshpush::Meshpush::start_kube(kubeconfig.path(), &[]));
    let gateway = || api.get("gateway.networking.k8s.io/Gateway", "shop", "edge").expect("the Gateway");
    let route = |name: &str| api.get("HTTPRoute", "shop", name).expect("the route");
    let t = |a: &str, b: &str, c: &str| (a.to_string(), b.to_string(), c.to_string());

    scene.wait(Duration::from_secs(20), "the Gateway's status", Section::Listeners, || {
        let status = &gateway()["status"];
        let attached = |i: usize| status["listeners"][i]["attachedRoutes"].as_u64();
        let got = (condition_list(&status["conditions"]), attached(0), attached(1));
        let want = (vec![t("Accepted", "True", "Accepted"), t("Programmed", "True", "Programmed")], Some(1), Some(1));
        if got == want { Ok(()) } else { Err(format!("{got:?}")) }
    });
    let listener = &gateway()["status"]["listeners"][0];
    assert_eq!(listener["name"], "http");
    assert!(condition_list(&listener["conditions"]).contains(&t("ResolvedRefs", "True", "ResolvedRefs")));
    assert_eq!(gateway()["status"]["conditions"][0]["observedGeneration"], 1);

    scene.wait(Duration::from_secs(20), "the routes' status", Section::Listeners, || {
        let books = route("books")["status"]["parents"].clone();
        let lost = route("lost")["status"]["parents"].clone();
        let ours =
            books.as_array().and_then(|p| p.iter().find(|p| p["controllerName"] == "istio.io/gateway-controller"));
        let got = (
            ours.map(|p| condition_list(&p["conditions"])),
            lost.as_array().and_then(|p| p.first()).map(|p| condition_list(&p["conditions"])),
        );
        let want = (
            Some(vec![t("Accepted", "True", "Accepted"), t("ResolvedRefs", "True", "ResolvedRefs")]),
            Some(vec![t("Accepted", "False", "NoMatchingParent"), t("ResolvedRefs", "True", "ResolvedRefs")]),
        );
        if got == want { Ok(()) } else { Err(format!("{got:?}")) }
    });
    scene.wait(Duration::from_secs(20), "the TCPRoute's status", Section::Listeners, || {
        let db = api.get("TCPRoute", "shop", "db").expect("the route");
        let got = db["status"]["parents"].as_array().and_then(|p| p.first()).map(|p| condition_list(&p["conditions"]));
        let want = Some(vec![t("Accepted", "True", "Accepted"), t("ResolvedRefs", "True", "ResolvedRefs")]);
        if got == want { Ok(()) } else { Err(format!("{got:?}")) }
    });
    // Another controller's entry is kept.
    let parents = route("books")["status"]["parents"].clone();
    assert!(parents.as_array().unwrap().iter().any(|p| p["controllerName"] == "example.com/other"), "{parents}");

    // The suite's ObservedGenerationBump tests: an edit of the spec moves
    // the generation, and the conditions follow it even when they do not
    // otherwise change.
    let observed = |conditions: &serde_json::Value| -> Vec<i64> {
        conditions.as_array().into_iter().flatten().filter_map(|c| c["observedGeneration"].as_i64()).collect()
    };
    let bumped = |what: &str,
                  get: &dyn Fn() -> serde_json::Value,
                  conditions: &dyn Fn(&serde_json::Value) -> serde_json::Value| {
        let generation = get()["metadata"]["generation"].as_i64().expect("a generation");
        assert!(generation > 1, "{what}: the edit moved the generation");
        scene.wait(
            Duration::from_secs(20),
            &format!("{what}'s conditions at generation {generation}"),
            Section::Listeners,
            || {
                let seen = observed(&conditions(&get()));
                if !seen.is_empty() && seen.iter().all(|g| *g == generation) {
                    Ok(())
                } else {
                    Err(format!("{seen:?}"))
                }
            },
        );
    };
    // HTTPRouteObservedGenerationBump: the route gets a hostname.
    let mut books = route("books");
    books["spec"]["hostnames"] = serde_json::json!(["books.example.com"]);
    api.put_value(books);
    let ours = |r: &serde_json::Value| {
        r["status"]["parents"]
            .as_array()
            .and_then(|p| p.iter().find(|p| p["controllerName"] == "istio.io/gateway-controller"))
            .map(|p| p["conditions"].clone())
            .unwrap_or_default()
    };
    bumped("the HTTPRoute", &|| route("books"), &ours);
    // GatewayObservedGenerationBump: the Gateway gets a listener.
    let mut edge = gateway();
    edge["spec"]["listeners"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"name": "alt", "port": 8080, "protocol": "HTTP"}));
    api.put_value(edge);
    bumped("the Gateway", &gateway, &|g| g["status"]["conditions"].clone());
    // GatewayClassObservedGenerationBump: the class's description changes.
    let class = || api.get("GatewayClass", "", "istio").expect("the GatewayClass");
    let mut istio = class();
    istio["spec"]["description"] = serde_json::json!("edited");
    api.put_value(istio);
    bumped("the GatewayClass", &class, &|c| c["status"]["conditions"].clone());
}

#[test]
fn an_ingress_reports_the_addresses_of_the_ingress_service() {
    let api = KubeApi::start();
    let service = |ip: &str| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: istio-ingressgateway, namespace: istio-system}}\n\
             spec: {{type: LoadBalancer, ports: [{{name: http, port: 80}}]}}\n\
             status: {{loadBalancer: {{ingress: [{{ip: {ip}}}, {{hostname: lb.example.net}}]}}}}\n"
        )
    };
    api.put(&service("203.0.113.7"));
    api.put(
        "apiVersion: v1\nkind: Service\nmetadata: {name: shop, namespace: web}\nspec: {ports: [{name: http, port: 8080}]}\n",
    );
    for (name, class) in [("shop", "istio"), ("theirs", "nginx")] {
        api.put(&format!(
            "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: {name}, namespace: web}}\n\
             spec:\n  ingressClassName: {class}\n  rules: [{{host: {name}.example.com, http: {{paths: [{{path: /, \
             pathType: Prefix, backend: {{service: {{name: shop, port: {{number: 8080}}}}}}}}]}}}}]\n"
        ));
    }
    let kubeconfig = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(kubeconfig.path(), api.kubeconfig()).unwrap();
    let scene = Scene::start_with(&[], &[], |_| support::meshpush::Meshpush::start_kube(kubeconfig.path(), &[]));
    let addresses =
        |name: &str| api.get("Ingress", "web", name).expect("the Ingress")["status"]["loadBalancer"].clone();
    let wait_for = |want: serde_json::Value| {
        scene.wait(Duration::from_secs(20), &format!("the Ingress status {want}"), Section::Listeners, || {
            let got = addresses("shop");
            if got == want { Ok(()) } else { Err(format!("{got}")) }
        });
    };
    wait_for(serde_json::json!({"ingress": [{"ip": "203.0.113.7"}, {"hostname": "lb.example.net"}]}));
    // The load balancer moves: the Ingress follows.
    api.put(&service("203.0.113.8"));
    wait_for(serde_json::json!({"ingress": [{"ip": "203.0.113.8"}, {"hostname": "lb.example.net"}]}));
    assert!(addresses("theirs").is_null(), "another controller's Ingress is not written");
    drop(scene);

    // Another ingress Service and class, by MeshConfig's settings as flags.
    api.put(
        "apiVersion: v1\nkind: Service\nmetadata: {name: edge, namespace: istio-system}\n\
         spec: {type: ClusterIP, externalIPs: [198.51.100.4], ports: [{name: http, port: 80}]}\n",
    );
    let flags = ["--ingress-service", "edge", "--ingress-class", "nginx"];
    let scene = Scene::start_with(&[], &[], |_| support::meshpush::Meshpush::start_kube(kubeconfig.path(), &flags));
    scene.wait(Duration::from_secs(20), "the nginx-class Ingress to report edge's address", Section::Listeners, || {
        let got = addresses("theirs");
        let want = serde_json::json!({"ingress": [{"ip": "198.51.100.4"}]});
        if got == want { Ok(()) } else { Err(format!("{got}")) }
    });
}
