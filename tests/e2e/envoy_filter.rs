//! End to end: EnvoyFilters on real Envoys, checked by real traffic, with
//! meshpush's config dump held against each Envoy's own.
//!
//! * Istio's local rate limit sample (`samples/ratelimit/local-rate-limit-service.yaml`,
//!   applied unchanged): the productpage sidecar answers 429 with
//!   `x-local-rate-limit: true` once its `/productpage` bucket (10 a
//!   minute) is drained, while other paths still pass.
//! * On a client sidecar selected by its labels: a Lua filter adds a request
//!   header the backend sees, a second Lua filter configured over ECDS adds
//!   another, a virtual host MERGE adds a response header, and a cluster
//!   MERGE makes Envoy speak HTTP/2 to a backend that speaks nothing else.
//!   Another sidecar of the namespace, which the filter does not select,
//!   gets none of it.
//! * On a gateway with two HTTPS hosts on one port: a connection manager
//!   MERGE on the chain matched by SNI changes the `server` header of that
//!   host only.
//! * Istio's global rate limit sample (`samples/bookinfo/policy/productpage_envoy_ratelimit.yaml`,
//!   unchanged) on a gateway: its filter, cluster and rate limit actions
//!   arrive, and without the rate limit service it fails closed.
//!
//! Addresses 127.0.186.0/24; ports 8000 (the sample's) and 18361–18367.

use crate::support;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use support::envoy::Section;
use support::grpc::GrpcBackend;
use support::manifests::{docs, service, sidecar_node};
use support::scene::Scene;
use support::tls::{TestCa, secret};

const CONVERGE: Duration = Duration::from_secs(20);

fn istio_manifest(path: &str) -> String {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/istio").join(path);
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

fn get(addr: SocketAddr, host: &str, path: &str) -> Result<support::http::Response, String> {
    support::http::get(addr, path, &[("host", host)]).map_err(|e| e.to_string())
}

#[test]
fn istio_s_local_rate_limit_sample_answers_429_once_the_productpage_bucket_is_drained() {
    // The sample patches the inbound virtual host of port 8000.
    const PORT: u16 = 8000;
    const APP: &str = "127.0.0.1:18361";
    let ip = "127.0.186.20";
    let mesh = docs(&[
        service("default", "productpage", PORT),
        format!(
            "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {{name: productpage, namespace: default}}\nspec:\n  \
             workloadSelector: {{labels: {{app: productpage}}}}\n  ingress:\n  - port: {{number: {PORT}, protocol: HTTP, name: http}}\n    \
             bind: {ip}\n    captureMode: NONE\n    defaultEndpoint: {APP}\n  egress:\n  - hosts: [\"./*\"]\n"
        ),
    ]);
    let sample = istio_manifest("samples/ratelimit/local-rate-limit-service.yaml");
    let mut scene = Scene::start(&[("mesh.yaml", &mesh), ("ratelimit.yaml", &sample)], &[("productpage-v1", APP)]);
    let opts = scene.sidecar(&sidecar_node(ip, "productpage-v1", "default"), &[("app", "productpage")]);
    scene.add_envoy("productpage", &opts);
    let entry = SocketAddr::from(([127, 0, 186, 20], PORT));
    let host = "productpage.default.svc.cluster.local";
    // The filter and the route's limits arrive with the listener.
    scene.wait(CONVERGE, "the rate limited listener", Section::Listeners, || {
        let listeners = scene.envoy("productpage").section(Section::Listeners).to_string();
        let patched = listeners.contains("envoy.filters.http.local_ratelimit") && listeners.contains("test_enabled");
        match get(entry, host, "/") {
            Ok(r) if r.status == 200 && patched => Ok(()),
            Ok(r) => Err(format!("status {}, filter there: {patched}", r.status)),
            Err(e) => Err(e),
        }
    });
    scene.focus(Section::Listeners);
    let mut passed = 0;
    let limited = loop {
        let r = get(entry, host, "/productpage").expect("the sidecar answers");
        if r.status == 429 {
            break r;
        }
        assert_eq!(r.status, 200, "{r:?}");
        passed += 1;
        assert!(passed <= 10, "the productpage bucket holds 10 tokens a minute, {passed} requests passed");
    };
    assert!(passed >= 1, "the bucket held tokens before it was drained");
    assert_eq!(limited.header("x-local-rate-limit"), Some("true"), "{limited:?}");
    // Other paths draw on the route's own bucket of 100.
    assert_eq!(get(entry, host, "/reviews").expect("answered").status, 200);
    support::dump::assert_dump_matches_envoy(scene.mesh(), scene.envoy("productpage"), "productpage-v1.default");
    scene.assert_nothing_rejected();
}

/// The client's filters: Lua and ECDS on the echo port, a virtual host
/// header, HTTP/2 to `web`.
fn client_patches(echo: u16, web: u16) -> String {
    let lua = |name: &str, header: &str, value: &str| {
        format!(
            "name: {name}\n        typed_config:\n          '@type': type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua\n          \
             default_source_code: {{inline_string: 'function envoy_on_request(h) h:headers():add(\"{header}\", \"{value}\") end'}}"
        )
    };
    let before_router = format!(
        "    match:\n      context: SIDECAR_OUTBOUND\n      listener:\n        portNumber: {echo}\n        filterChain:\n          filter:\n            \
         name: envoy.filters.network.http_connection_manager\n            subFilter: {{name: envoy.filters.http.router}}\n"
    );
    format!(
        "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {{name: client-patches, namespace: shop}}\nspec:\n  \
         workloadSelector: {{labels: {{app: client}}}}\n  configPatches:\n  \
         - applyTo: HTTP_FILTER\n{before_router}    patch:\n      operation: INSERT_BEFORE\n      value:\n        {lua}\n  \
         - applyTo: EXTENSION_CONFIG\n    patch:\n      operation: ADD\n      value:\n        {ecds}\n  \
         - applyTo: HTTP_FILTER\n{before_router}    patch:\n      operation: INSERT_BEFORE\n      value:\n        name: ecds-lua\n        \
         config_discovery:\n          config_source: {{ads: {{}}}}\n          type_urls: [type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua]\n  \
         - applyTo: VIRTUAL_HOST\n    match:\n      context: SIDECAR_OUTBOUND\n      routeConfiguration:\n        vhost: {{name: 'echo.shop.svc.cluster.local:{echo}'}}\n    \
         patch:\n      operation: MERGE\n      value: {{response_headers_to_add: [{{header: {{key: x-vhost, value: merged}}}}]}}\n  \
         - applyTo: CLUSTER\n    match:\n      context: SIDECAR_OUTBOUND\n      cluster: {{service: web.shop.svc.cluster.local, portNumber: {web}}}\n    \
         patch:\n      operation: MERGE\n      value:\n        typed_extension_protocol_options:\n          envoy.extensions.upstreams.http.v3.HttpProtocolOptions:\n            \
         '@type': type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions\n            explicit_http_config: {{http2_protocol_options: {{}}}}\n",
        lua = lua("envoy.filters.http.lua", "x-lua", "hello"),
        ecds = lua("ecds-lua", "x-ecds", "discovered"),
    )
}

#[test]
fn a_selected_sidecar_gets_lua_ecds_a_virtual_host_header_and_http2_and_its_neighbour_none() {
    const ECHO: u16 = 18362;
    const WEB: u16 = 18363;
    let (client_ip, other_ip) = ("127.0.186.9", "127.0.186.10");
    let outbound_bind =
        |name: &str, app: &str, ip: &str| support::manifests::sidecar("shop", name, Some(app), &["./*"], Some(ip));
    let mesh = docs(&[
        service("shop", "echo", ECHO),
        support::manifests::pod("shop", "echo-1", "127.0.186.3", &[("app", "echo")], ECHO),
        service("shop", "web", WEB),
        support::manifests::pod("shop", "web-1", "127.0.186.2", &[("app", "web")], WEB),
        outbound_bind("client", "client", client_ip),
        outbound_bind("other", "other", other_ip),
    ]);
    let patches = client_patches(ECHO, WEB);
    let mut scene =
        Scene::start(&[("mesh.yaml", &mesh), ("patches.yaml", &patches)], &[("echo-1", "127.0.186.3:18362")]);
    // `web` speaks HTTP/2 only (h2c), as a gRPC server does.
    let _web = GrpcBackend::start("web-1", SocketAddr::from(([127, 0, 186, 2], WEB)));
    let client = scene.sidecar(&sidecar_node(client_ip, "client-1", "shop"), &[("app", "client")]);
    scene.add_envoy("client", &client);
    let other = scene.sidecar(&sidecar_node(other_ip, "other-1", "shop"), &[("app", "other")]);
    scene.add_envoy("other", &other);

    let via = |ip: &str, port: u16| SocketAddr::new(ip.parse().unwrap(), port);
    scene.wait(CONVERGE, "the client's echo requests to carry both Lua headers", Section::Listeners, || {
        match get(via(client_ip, ECHO), "echo", "/") {
            Ok(r) if r.status == 200 && r.header("x-echo-x-ecds").is_some() => Ok(()),
            Ok(r) => Err(format!("{} {:?}", r.status, r.headers)),
            Err(e) => Err(e),
        }
    });
    scene.focus(Section::Listeners);
    let echoed = get(via(client_ip, ECHO), "echo", "/").unwrap();
    assert_eq!(echoed.header("x-echo-x-lua"), Some("hello"), "{echoed:?}");
    assert_eq!(echoed.header("x-echo-x-ecds"), Some("discovered"), "{echoed:?}");
    assert_eq!(echoed.header("x-vhost"), Some("merged"), "{echoed:?}");
    scene.wait(CONVERGE, "web over HTTP/2", Section::Clusters, || match get(via(client_ip, WEB), "web", "/") {
        Ok(r) if r.status == 200 && r.header("x-backend") == Some("web-1") => Ok(()),
        Ok(r) => Err(format!("{} {:?}", r.status, r.headers)),
        Err(e) => Err(e),
    });

    // The neighbour: the same services, none of the patches.
    scene.wait(CONVERGE, "the neighbour to reach echo", Section::Listeners, || {
        get(via(other_ip, ECHO), "echo", "/")
            .and_then(|r| if r.status == 200 { Ok(()) } else { Err(r.status.to_string()) })
    });
    let plain = get(via(other_ip, ECHO), "echo", "/").unwrap();
    assert!(plain.header("x-echo-x-lua").is_none() && plain.header("x-vhost").is_none(), "{plain:?}");
    let refused = get(via(other_ip, WEB), "web", "/").unwrap();
    assert_ne!(refused.status, 200, "HTTP/1.1 to an HTTP/2-only backend fails: {refused:?}");

    for (envoy, node) in [("client", "client-1.shop"), ("other", "other-1.shop")] {
        support::dump::assert_dump_matches_envoy(scene.mesh(), scene.envoy(envoy), node);
    }
    let metrics = scene.mesh().admin("/metrics").body;
    for kind in ["httpfilter", "vhost", "cluster", "extensionconfig"] {
        let line =
            format!("pilot_total_envoy_filter{{name=\"shop/client-patches\",type=\"{kind}\",result=\"applied\"}}");
        assert!(metrics.contains(&line), "{line} in {metrics}");
    }
    scene.assert_nothing_rejected();
}

#[test]
fn a_gateway_connection_manager_merged_by_sni_changes_that_host_only() {
    const HTTPS: u16 = 18364;
    const APP: u16 = 18365;
    let ca = TestCa::new("meshpush test CA");
    let (shop, bank) = (ca.leaf("shop", &["shop.example.test"]), ca.leaf("bank", &["bank.example.test"]));
    let gateway = format!(
        "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {{name: ingress, namespace: istio-system}}\nspec:\n  \
         selector: {{istio: ingressgateway}}\n  servers:\n  \
         - port: {{number: {HTTPS}, name: https-shop, protocol: HTTPS}}\n    bind: 127.0.0.1\n    hosts: [shop.example.test]\n    \
         tls: {{mode: SIMPLE, credentialName: shop-cert}}\n  \
         - port: {{number: {HTTPS}, name: https-bank, protocol: HTTPS}}\n    bind: 127.0.0.1\n    hosts: [bank.example.test]\n    \
         tls: {{mode: SIMPLE, credentialName: bank-cert}}\n"
    );
    let routes = format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: shop, namespace: shop}}\nspec:\n  \
         hosts: [shop.example.test, bank.example.test]\n  gateways: [istio-system/ingress]\n  http:\n  \
         - route: [{{destination: {{host: storefront, port: {{number: {APP}}}}}}}]\n"
    );
    let filter = format!(
        "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {{name: shop-server-name, namespace: istio-system}}\nspec:\n  \
         workloadSelector: {{labels: {{istio: ingressgateway}}}}\n  configPatches:\n  - applyTo: NETWORK_FILTER\n    match:\n      \
         context: GATEWAY\n      listener:\n        portNumber: {HTTPS}\n        filterChain:\n          sni: shop.example.test\n          \
         filter: {{name: envoy.filters.network.http_connection_manager}}\n    patch:\n      operation: MERGE\n      value:\n        \
         typed_config:\n          '@type': type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager\n          \
         server_name: patched-by-sni\n"
    );
    let mesh = docs(&[
        service("shop", "storefront", APP),
        support::manifests::pod("shop", "storefront-1", "127.0.186.4", &[("app", "storefront")], APP),
    ]);
    let secrets =
        docs(&[secret("istio-system", "shop-cert", &shop, None), secret("istio-system", "bank-cert", &bank, None)]);
    let mut scene = Scene::start(
        &[
            ("mesh.yaml", &mesh),
            ("gateway.yaml", &gateway),
            ("routes.yaml", &routes),
            ("secrets.yaml", &secrets),
            ("filter.yaml", &filter),
        ],
        &[("storefront-1", &format!("127.0.186.4:{APP}"))],
    );
    scene.add_ingress_gateway();
    let work = tempfile::tempdir().expect("a scratch dir");
    ca.write(work.path(), "ca.pem");
    // The `server` header a host answers with, through curl (TLS by SNI).
    let server = |host: &str| -> Result<String, String> {
        let out = Command::new("curl")
            .args([
                "-sS",
                "--http1.1",
                "--max-time",
                "5",
                "--cacert",
                "ca.pem",
                "-D",
                "-",
                "-o",
                "/dev/null",
                "--resolve",
            ])
            .arg(format!("{host}:{HTTPS}:127.0.0.1"))
            .arg(format!("https://{host}:{HTTPS}/"))
            .current_dir(work.path())
            .output()
            .map_err(|e| e.to_string())?;
        let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
        if !head.starts_with("http/1.1 200") {
            return Err(format!("{head} {}", String::from_utf8_lossy(&out.stderr)));
        }
        Ok(head.lines().find_map(|l| l.strip_prefix("server: ")).unwrap_or_default().trim().to_string())
    };
    scene.wait(CONVERGE, "shop.example.test with the patched server name", Section::Listeners, || {
        server("shop.example.test").and_then(|s| if s == "patched-by-sni" { Ok(()) } else { Err(s) })
    });
    let bank_server = server("bank.example.test").expect("bank answers");
    assert_ne!(bank_server, "patched-by-sni", "the other host's chain is not matched");
    support::dump::assert_dump_matches_envoy(scene.mesh(), scene.envoy("gateway"), "ingress-1.istio-system");
    scene.assert_nothing_rejected();
}

/// Istio's global rate limit sample (`samples/bookinfo/policy/productpage_envoy_ratelimit.yaml`,
/// applied unchanged) on an ingress gateway: the rate limit filter, its
/// cluster and the virtual hosts' rate limit actions reach the gateway, and,
/// with no rate limit service reachable (the sample's `ratelimit.default`
/// is not deployed), requests are refused as the sample's
/// `failure_mode_deny: true` says — where they passed before it was applied.
#[test]
fn istio_s_global_rate_limit_sample_reaches_the_gateway_and_fails_closed_without_its_service() {
    const GATEWAY: u16 = 18366;
    const APP: u16 = 18367;
    let mesh = docs(&[
        service("default", "productpage", APP),
        support::manifests::pod("default", "productpage-v1", "127.0.186.5", &[("app", "productpage")], APP),
        support::manifests::gateway("istio-system", "ingress", "ingressgateway", GATEWAY, &["bookinfo.example.test"]),
        support::manifests::gateway_route(
            "default",
            "productpage",
            "istio-system/ingress",
            "bookinfo.example.test",
            "productpage",
            APP,
        ),
    ]);
    let mut scene = Scene::start(&[("mesh.yaml", &mesh)], &[("productpage-v1", &format!("127.0.186.5:{APP}"))]);
    scene.add_ingress_gateway();
    let entry = SocketAddr::from(([127, 0, 0, 1], GATEWAY));
    let status = || get(entry, "bookinfo.example.test", "/productpage").map(|r| r.status);
    scene.wait(CONVERGE, "the gateway to answer", Section::Listeners, || match status() {
        Ok(200) => Ok(()),
        other => Err(format!("{other:?}")),
    });
    scene.dir().write("ratelimit.yaml", &istio_manifest("samples/bookinfo/policy/productpage_envoy_ratelimit.yaml"));
    scene.wait(CONVERGE, "requests refused without the rate limit service", Section::Listeners, || match status() {
        Ok(500) => Ok(()),
        other => Err(format!("{other:?}")),
    });
    let gateway = scene.envoy("gateway");
    let listeners = gateway.section(Section::Listeners).to_string();
    assert!(listeners.contains("envoy.ratelimit") && listeners.contains("productpage-ratelimit"), "{listeners}");
    assert!(gateway.section(Section::Clusters).to_string().contains("rate_limit_cluster"));
    assert!(gateway.section(Section::Routes).to_string().contains("\"descriptor_key\":\"PATH\""));
    support::dump::assert_dump_matches_envoy(scene.mesh(), gateway, "ingress-1.istio-system");
    scene.assert_nothing_rejected();
}
