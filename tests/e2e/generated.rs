//! Everything meshpush generates for the test mesh (`examples/bookinfo`
//! and `tests/data/mesh-cases.yaml`), checked by a real Envoy 1.40 with
//! `--mode validate`: for a REDIRECT and a NONE sidecar, the ingress
//! gateway and a Sidecar-scoped sidecar, every cluster, listener, route
//! configuration and assignment must be accepted.

use std::sync::Arc;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::cluster::v3::cluster::{ClusterDiscoveryType, DiscoveryType};
use envoy_types::pb::envoy::config::core::v3::{Address, SocketAddress, address, socket_address::PortSpecifier};
use envoy_types::pb::envoy::config::listener::v3::{Filter, Listener, filter};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::http_connection_manager::RouteSpecifier;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    HttpConnectionManager, http_filter,
};
use envoy_types::pb::google::protobuf::Any;
use meshpush::generate::{cds, eds, lds, rds};
use meshpush::model::ConfigStore;
use meshpush::push::{InboundKey, PushContext, Scope, ScopeInterner};
use meshpush::testing::bookinfo;
use prost::Message;

use crate::support::envoy::envoy_binary;

fn context() -> PushContext {
    context_with_mesh("")
}

/// The test mesh served with the mesh config `text`.
fn context_with_mesh(text: &str) -> PushContext {
    let store = ConfigStore::new();
    store.apply(bookinfo::with_cases());
    let mesh = meshpush::config::mesh::MeshSettings::parse("mesh.yaml", text).unwrap().mesh_config();
    PushContext::build_with(store.snapshot(), 1, Arc::new(ScopeInterner::default()), Arc::new(mesh))
}

fn productpage(ctx: &PushContext, mode: &str) -> Arc<Scope> {
    ctx.scope_for(&bookinfo::productpage_in(mode))
}

fn productpage_inbound(ctx: &PushContext, mode: &str) -> InboundKey {
    (*ctx.inbound_for(&bookinfo::productpage_in(mode)).1).clone()
}

fn ingress(ctx: &PushContext) -> Arc<Scope> {
    ctx.scope_for(&bookinfo::ingress())
}

fn scoped(ctx: &PushContext) -> Arc<Scope> {
    ctx.scope_for(&bookinfo::scoped_client())
}

fn any<T: prost::Name>(message: &T) -> Any {
    Any { type_url: T::type_url(), value: message.encode_to_vec() }
}

fn socket_address(ip: &str, port: u32) -> Address {
    Address {
        address: Some(address::Address::SocketAddress(SocketAddress {
            address: ip.to_string(),
            port_specifier: Some(PortSpecifier::PortValue(port)),
            ..Default::default()
        })),
    }
}

/// The ADS cluster the `ads: {}` config sources (RDS, EDS, SDS) point at:
/// a static cluster with the HTTP/2 options a generated gRPC cluster has.
fn xds_cluster() -> Cluster {
    let ctx = context();
    let mut xds = cds::clusters(&ctx, &productpage(&ctx, "REDIRECT"))
        .into_iter()
        .find(|c| c.name.starts_with("outbound|7070|"))
        .expect("the gRPC cluster carries HTTP/2 options");
    xds.name = "xds".into();
    xds.cluster_discovery_type = Some(ClusterDiscoveryType::Type(DiscoveryType::Static as i32));
    xds.eds_cluster_config = None;
    xds.load_assignment = Some(envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment {
        cluster_name: "xds".into(),
        ..Default::default()
    });
    xds
}

/// ADS over the [`xds_cluster`].
fn ads_resources() -> envoy_types::pb::envoy::config::bootstrap::v3::bootstrap::DynamicResources {
    use envoy_types::pb::envoy::config::core::v3::{
        ApiConfigSource, ApiVersion, GrpcService,
        api_config_source::ApiType,
        grpc_service::{EnvoyGrpc, TargetSpecifier},
    };
    envoy_types::pb::envoy::config::bootstrap::v3::bootstrap::DynamicResources {
        ads_config: Some(ApiConfigSource {
            api_type: ApiType::Grpc as i32,
            transport_api_version: ApiVersion::V3 as i32,
            grpc_services: vec![GrpcService {
                target_specifier: Some(TargetSpecifier::EnvoyGrpc(EnvoyGrpc {
                    cluster_name: "xds".into(),
                    ..Default::default()
                })),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Runs `envoy --mode validate` (in `dir`, where relative file paths
/// resolve) on a bootstrap of `listeners` and `clusters` as static
/// resources, with ADS configured; fails with Envoy's words if it refuses.
fn assert_envoy_accepts(
    envoy: &std::path::Path,
    dir: &std::path::Path,
    label: &str,
    listeners: Vec<Listener>,
    clusters: Vec<Cluster>,
) {
    use envoy_types::pb::envoy::config::bootstrap::v3::{Bootstrap, bootstrap::StaticResources};
    let bootstrap = Bootstrap {
        node: Some(envoy_types::pb::envoy::config::core::v3::Node {
            id: format!("{label}~check"),
            cluster: "check".into(),
            ..Default::default()
        }),
        static_resources: Some(StaticResources { listeners, clusters, ..Default::default() }),
        dynamic_resources: Some(ads_resources()),
        ..Default::default()
    };
    let path = dir.join(format!("{label}.pb"));
    std::fs::write(&path, bootstrap.encode_to_vec()).unwrap();
    let out = std::process::Command::new(envoy)
        .args(["--mode", "validate", "--log-level", "warn", "-c"])
        .arg(&path)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{label}: Envoy refused the configuration:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A bootstrap per proxy holds everything generated for it: listeners and
/// clusters as static resources, every route configuration inline in a
/// listener of its own (so Envoy also checks that routed clusters exist),
/// and every EDS assignment as a static cluster's endpoints.
#[test]
fn envoy_accepts_everything_generated() {
    assert_envoy_accepts_the_test_mesh(&context(), "");
}

/// The same with every traffic default of the mesh config set to what
/// Istio's own default is not: the shapes those fields give clusters and
/// listeners (keepalive, HTTP/2 upgrade, DNS refresh, the inbound LOCALHOST
/// clusters, the listener filter timeout, REGISTRY_ONLY) are Envoy's too.
#[test]
fn envoy_accepts_what_the_mesh_config_s_traffic_defaults_generate() {
    let mesh = "connectTimeout: 2500ms\ntcpKeepalive: {probes: 3, time: 60s, interval: 10s}\n\
                h2UpgradePolicy: UPGRADE\nprotocolDetectionTimeout: 100ms\ndnsRefreshRate: 5s\n\
                inboundTrafficPolicy: {mode: LOCALHOST}\noutboundTrafficPolicy: {mode: REGISTRY_ONLY}\n\
                enableAutoMtls: false\n";
    assert_envoy_accepts_the_test_mesh(&context_with_mesh(mesh), "traffic-");
}

/// Checks everything generated in `ctx` for the test mesh's proxies, each
/// bootstrap labelled with `prefix`.
fn assert_envoy_accepts_the_test_mesh(ctx: &PushContext, prefix: &str) {
    use envoy_types::pb::envoy::extensions::filters::http::router::v3::Router;
    use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{HttpFilter, http_filter};

    let envoy = envoy_binary();
    let dir = tempfile::tempdir().unwrap();
    let xds = xds_cluster();
    for (label, scope, inbound) in [
        ("redirect", productpage(ctx, "REDIRECT"), Some(productpage_inbound(ctx, "REDIRECT"))),
        ("none", productpage(ctx, "NONE"), Some(productpage_inbound(ctx, "NONE"))),
        ("gateway", ingress(ctx), None),
        ("scoped", scoped(ctx), None),
    ] {
        let mut clusters = cds::clusters(ctx, &scope);
        clusters.extend(inbound.iter().flat_map(cds::inbound_clusters));
        // EDS clusters only: DNS clusters carry their (host name) endpoints
        // inline. As a proxy in us-east sees them: with locality priorities.
        let mut client = bookinfo::productpage();
        client.locality = meshpush::model::Locality::parse("us-east/zone-a");
        let view = meshpush::push::scope::endpoint_view(ctx, &client);
        let assignments: Vec<_> = clusters
            .iter()
            .filter(|c| c.eds_cluster_config.is_some())
            .filter_map(|c| eds::load_assignment(ctx, &c.name, view.as_deref()))
            .collect();
        for (i, mut cla) in assignments.into_iter().enumerate() {
            let name = format!("eds-check-{i}");
            cla.cluster_name = name.clone();
            clusters.push(Cluster {
                name,
                connect_timeout: Some(envoy_types::pb::google::protobuf::Duration { seconds: 1, nanos: 0 }),
                cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Static as i32)),
                load_assignment: Some(cla),
                ..Default::default()
            });
        }
        clusters.push(xds.clone());

        let mut listeners = lds::listeners(ctx, &scope);
        listeners.extend(inbound.iter().flat_map(lds::inbound_listeners));
        for (i, rc) in rds::route_configs(ctx, &scope).into_iter().enumerate() {
            let mut manager = HttpConnectionManager {
                stat_prefix: format!("rds_check_{i}"),
                route_specifier: Some(RouteSpecifier::RouteConfig(rc)),
                ..Default::default()
            };
            manager.http_filters = vec![HttpFilter {
                name: "envoy.filters.http.router".into(),
                config_type: Some(http_filter::ConfigType::TypedConfig(any(&Router::default()))),
                ..Default::default()
            }];
            listeners.push(Listener {
                name: format!("rds-check-{i}"),
                address: Some(socket_address("127.0.0.2", 20000 + i as u32)),
                filter_chains: vec![envoy_types::pb::envoy::config::listener::v3::FilterChain {
                    filters: vec![Filter {
                        name: "envoy.filters.network.http_connection_manager".into(),
                        config_type: Some(filter::ConfigType::TypedConfig(any(&manager))),
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            });
        }

        assert_envoy_accepts(&envoy, dir.path(), &format!("{prefix}{label}"), listeners, clusters);
    }
}

/// Istio's TLS manifests (`tests/data/istio`: gateways with HTTPS servers,
/// TLS origination with files, `tls:` routes), generated for the gateways
/// they select and a sidecar of each namespace, and checked by Envoy's
/// `--mode validate`. The files they name (`/etc/certs/…`,
/// `tests/testdata/certs/…`) are made by the test: every certificate file
/// holds one test certificate, every key file its key, every CA file the
/// test CA (Envoy reads them when it takes the configuration).
#[test]
fn envoy_accepts_what_istio_s_tls_manifests_generate() {
    use meshpush::config::parse::parse_documents;
    use meshpush::model::store::Write;

    let envoy = envoy_binary();
    let dir = tempfile::tempdir().unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/istio");
    let files = [
        "tests/testdata/config/gateway-all.yaml",
        "tests/testdata/config/ingressgateway.yaml",
        "tests/testdata/config/egressgateway.yaml",
        "tests/testdata/config/destination-rule-ssl.yaml",
        "tests/testdata/config/se-example.yaml",
        "tests/testdata/config/external_services.yaml",
        "tests/testdata/config/none.yaml",
        "samples/bookinfo/networking/egress-rule-google-apis.yaml",
    ];
    let ca = crate::support::tls::TestCa::new("istio manifests CA");
    let leaf = ca.leaf("istio manifests", &["uk.bookinfo.com"]);
    let relative = regex::Regex::new(r"tests/testdata/certs/[\w/.-]+\.pem").unwrap();
    let moved = regex::Regex::new(r"/[\w/.-]+/etc-certs/[\w.-]+\.pem").unwrap();
    let store = ConfigStore::new();
    for file in files {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        // Absolute paths move under the scratch directory; relative ones are
        // relative to Envoy's working directory, which is that directory.
        let text = text.replace("/etc/certs/", &format!("{}/etc-certs/", dir.path().display()));
        for m in relative.find_iter(&text).chain(moved.find_iter(&text)) {
            let target = if m.as_str().starts_with('/') {
                std::path::PathBuf::from(m.as_str())
            } else {
                dir.path().join(m.as_str())
            };
            let name = target.file_name().unwrap().to_string_lossy().to_string();
            let pem = if name.contains("key") {
                &leaf.key
            } else if name.contains("root") || name.contains("ca") {
                &ca.pem
            } else {
                &leaf.cert
            };
            std::fs::create_dir_all(target.parent().unwrap()).unwrap();
            std::fs::write(&target, pem).unwrap();
        }
        let parsed = parse_documents(file, &text);
        assert!(!parsed.has_errors(), "{file}: {:#?}", parsed.problems);
        store.apply(parsed.objects.into_iter().map(|(o, s)| Write::put(o, s)).collect::<Vec<_>>());
    }
    let ctx = PushContext::build(store.snapshot(), 1, Arc::new(ScopeInterner::default()));
    let router = |id: &str, labels: &[(&str, &str)]| {
        let mut p = meshpush::model::Proxy::from_node(&envoy_types::pb::envoy::config::core::v3::Node {
            id: id.to_string(),
            ..Default::default()
        })
        .unwrap();
        p.labels = std::sync::Arc::new(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        p
    };
    let proxies = [
        ("ingress", router("router~10.9.0.1~ingress.testns~testns.svc.cluster.local", &[("istio", "ingressgateway")])),
        ("egress", router("router~10.9.0.2~egress.testns~testns.svc.cluster.local", &[("istio", "egressgateway")])),
        (
            "controller",
            router("router~10.9.0.3~gw.testns~testns.svc.cluster.local", &[("app", "my-gateway-controller")]),
        ),
        ("testns", router("sidecar~10.9.0.4~app.testns~testns.svc.cluster.local", &[("app", "a")])),
        ("seexamples", router("sidecar~10.9.0.5~app.seexamples~seexamples.svc.cluster.local", &[("app", "a")])),
        ("default", router("sidecar~10.9.0.6~app.default~default.svc.cluster.local", &[("app", "a")])),
    ];
    let xds = xds_cluster();
    let mut checked = 0;
    for (label, proxy) in proxies {
        let scope = ctx.scope_for(&proxy);
        let listeners = lds::listeners(&ctx, &scope);
        let mut clusters = cds::clusters(&ctx, &scope);
        let tls = listeners.iter().flat_map(|l| &l.filter_chains).any(|c| c.transport_socket.is_some())
            || clusters.iter().any(|c| c.transport_socket.is_some());
        checked += usize::from(tls);
        clusters.push(xds.clone());
        assert_envoy_accepts(&envoy, dir.path(), label, listeners, clusters);
    }
    assert!(checked >= 4, "only {checked} proxies got TLS: the manifests were not applied");
}

/// Mesh mTLS and authorization, generated for sidecars that hold a
/// workload certificate, checked by Envoy's `--mode validate`: auto mTLS
/// clusters (transport socket matches, SDS from `sds-grpc`), ISTIO_MUTUAL,
/// inbound chains of every PeerAuthentication mode (TLS and ALPN matches,
/// the TLS inspector), and RBAC filters of every action and matcher kind
/// on HTTP and TCP ports — redirected (`virtualInbound`) and bound (a
/// Sidecar ingress listener).
#[test]
fn envoy_accepts_what_mesh_mtls_authorization_and_jwt_authentication_generate() {
    use meshpush::config::parse::parse_documents;
    use meshpush::model::store::Write;

    const MESH: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: vault, namespace: secure}
spec:
  clusterIP: 10.40.0.1
  selector: {app: vault}
  ports: [{name: http, port: 8200}, {name: tcp-raft, port: 8201}, {name: grpc-api, port: 8202}]
---
apiVersion: v1
kind: Pod
metadata: {name: vault-0, namespace: secure, labels: {app: vault, security.istio.io/tlsMode: istio}}
spec: {serviceAccountName: vault}
status: {podIP: 10.41.0.1, phase: Running}
---
apiVersion: v1
kind: Pod
metadata: {name: vault-legacy, namespace: secure, labels: {app: vault}}
status: {podIP: 10.41.0.2, phase: Running}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: vault, namespace: secure}
spec:
  host: vault
  trafficPolicy:
    portLevelSettings: [{port: {number: 8202}, tls: {mode: ISTIO_MUTUAL, sni: api.vault}}]
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: bound, namespace: secure}
spec:
  workloadSelector: {labels: {app: bound}}
  ingress:
  - {port: {number: 8200, protocol: HTTP, name: http}, defaultEndpoint: 127.0.0.1:18200}
  - {port: {number: 8201, protocol: TCP, name: tcp}, defaultEndpoint: 127.0.0.1:18201}
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: vault, namespace: secure}
spec:
  selector: {matchLabels: {tier: secure}}
  mtls: {mode: STRICT}
  portLevelMtls: {8201: {mode: PERMISSIVE}, 8202: {mode: DISABLE}}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny, namespace: secure}
spec:
  action: DENY
  rules:
  - to: [{operation: {paths: [/admin*, "*/debug", /exact], notMethods: [GET], hosts: ["*.internal"], notPorts: ["9999"]}}]
    when: [{key: destination.ip, values: [10.0.0.0/8]}, {key: connection.sni, values: ["*.vault"]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow, namespace: secure}
spec:
  rules:
  - from:
    - source: {principals: ["cluster.local/ns/secure/*"], notNamespaces: [other], serviceAccounts: [web], trustDomains: ["cluster.*"]}
    - source: {ipBlocks: [10.0.0.0/8], notRemoteIpBlocks: [203.0.113.0/24]}
    when: [{key: "request.headers[x-user]", values: ["*"]}, {key: source.namespace, notValues: ["kube-*"]}]
  - to: [{operation: {ports: ["8201"]}}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: audit, namespace: secure}
spec:
  action: AUDIT
  rules: [{when: [{key: source.principal, values: ["*"]}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: trial, namespace: secure, annotations: {istio.io/dry-run: "true"}}
spec:
  rules: [{from: [{source: {notPrincipals: ["*"]}}]}]
---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: secure}
spec:
  jwtRules:
  - issuer: https://issuer.example
    jwks: '{"keys":[{"kty":"EC","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}'
    audiences: [vault]
    fromHeaders: [{name: x-jwt, prefix: "Bearer "}]
    fromParams: [token]
    fromCookies: [session]
    outputPayloadToHeader: x-jwt-payload
    outputClaimToHeaders: [{header: x-jwt-sub, claim: sub}]
    forwardOriginalToken: true
  - issuer: https://unreachable.example
    jwksUri: https://unreachable.example/keys
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: users, namespace: secure}
spec:
  rules:
  - from: [{source: {requestPrincipals: ["https://issuer.example/*", "*@example"], notRequestPrincipals: ["*"]}}]
    when:
    - {key: request.auth.principal, values: ["https://issuer.example/alice"]}
    - {key: request.auth.audiences, values: [vault, other]}
    - {key: request.auth.presenter, notValues: [cli]}
    - {key: "request.auth.claims[groups]", values: [admins]}
    - {key: "request.auth.claims[nested][role]", values: ["ops*"]}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: templates, namespace: secure}
spec:
  action: DENY
  rules:
  - to: [{operation: {paths: ["/users/{*}/keys", "/blobs/{**}"], notPaths: ["/v1/{*}/health"]}}]
    when: [{key: "experimental.envoy.filters.network.mysql_proxy[db.table]", values: ["[update]", "select"], notValues: [drop]}]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: mesh-edge, namespace: secure}
spec:
  selector: {istio: eastwest}
  servers:
  - port: {number: 15443, name: https-mesh, protocol: HTTPS}
    hosts: ["*"]
    tls: {mode: ISTIO_MUTUAL, subjectAltNames: [spiffe://cluster.local/ns/secure/sa/web]}
  - port: {number: 15444, name: tls-mesh, protocol: TLS}
    hosts: ["*"]
    tls: {mode: ISTIO_MUTUAL}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: mesh-edge, namespace: secure}
spec:
  hosts: ["*"]
  gateways: [mesh-edge]
  http: [{route: [{destination: {host: vault, port: {number: 8200}}}]}]
  tcp: [{match: [{port: 15444}], route: [{destination: {host: vault, port: {number: 8201}}}]}]
"#;
    let envoy = envoy_binary();
    let dir = tempfile::tempdir().unwrap();
    let parsed = parse_documents("mtls.yaml", MESH);
    assert!(!parsed.has_errors(), "{:#?}", parsed.problems);
    let store = ConfigStore::new();
    store.apply(bookinfo::with_cases());
    store.apply(parsed.objects.into_iter().map(|(o, s)| Write::put(o, s)).collect::<Vec<_>>());
    let ctx = PushContext::build(store.snapshot(), 1, Arc::new(ScopeInterner::default()));
    // The cluster the mesh secrets come from (its socket need not exist to validate).
    let sds = Cluster {
        name: "sds-grpc".into(),
        connect_timeout: Some(envoy_types::pb::google::protobuf::Duration { seconds: 1, nanos: 0 }),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Static as i32)),
        ..xds_cluster()
    };
    let sidecar = |id: &str, mode: &str, labels: &[(&str, &str)]| {
        let mut proxy = bookinfo::proxy(id, mode, labels);
        proxy.mesh_certificates = true;
        proxy
    };
    for (label, proxy) in [
        (
            "redirected",
            sidecar(
                "sidecar~10.41.0.1~vault-0.secure~secure.svc.cluster.local",
                "REDIRECT",
                &[("app", "vault"), ("tier", "secure")],
            ),
        ),
        (
            "bound",
            sidecar(
                "sidecar~127.0.0.3~bound-0.secure~secure.svc.cluster.local",
                "NONE",
                &[("app", "bound"), ("tier", "secure")],
            ),
        ),
    ] {
        let scope = ctx.scope_for(&proxy);
        let (_, inbound) = ctx.inbound_for(&proxy);
        let mut clusters = cds::clusters(&ctx, &scope);
        assert!(clusters.iter().any(|c| !c.transport_socket_matches.is_empty()), "{label}: auto mTLS");
        clusters.extend(cds::inbound_clusters(&inbound));
        clusters.push(xds_cluster());
        clusters.push(sds.clone());
        let mut listeners = lds::listeners(&ctx, &scope);
        let own = lds::inbound_listeners(&inbound);
        let chains: Vec<_> = own.iter().flat_map(|l| &l.filter_chains).collect();
        assert!(chains.iter().any(|c| c.transport_socket.is_some()), "{label}: mTLS chains");
        assert!(
            chains.iter().any(|c| c.filters.iter().any(|f| f.name == "envoy.filters.network.rbac")),
            "{label}: TCP RBAC"
        );
        assert_eq!(inbound.jwt_rules.len(), 2, "{label}: both JWT rules guard the HTTP ports");
        listeners.extend(own);
        assert_envoy_accepts(&envoy, dir.path(), label, listeners, clusters);
    }
    // A router that terminates mesh mTLS on its own certificate (ISTIO_MUTUAL servers).
    let router = {
        let mut proxy = bookinfo::proxy(
            "router~10.41.0.9~eastwest-0.secure~secure.svc.cluster.local",
            "REDIRECT",
            &[("istio", "eastwest")],
        );
        proxy.mesh_certificates = true;
        proxy
    };
    let scope = ctx.scope_for(&router);
    let listeners = lds::listeners(&ctx, &scope);
    for name in ["0.0.0.0_15443", "0.0.0.0_15444"] {
        let l = listeners.iter().find(|l| l.name == name).unwrap_or_else(|| panic!("{name} served"));
        assert!(l.filter_chains.iter().all(|c| c.transport_socket.is_some()), "{name}: mesh mTLS terminated");
    }
    let mut clusters = cds::clusters(&ctx, &scope);
    clusters.push(xds_cluster());
    clusters.push(sds);
    assert_envoy_accepts(&envoy, dir.path(), "istio-mutual-gateway", listeners, clusters);
}

/// CUSTOM authorization, checked by Envoy's `--mode validate`: the shadow
/// RBAC and ext_authz filters of an HTTP authorizer (every provider field
/// set) and of a gRPC one (the network filter on TCP ports too), a dry run,
/// the fail-closed DENY of a provider the mesh config lacks, on sidecars
/// (redirected and bound ports) and on the ingress gateway.
#[test]
fn envoy_accepts_what_custom_authorization_generates() {
    use meshpush::config::parse::parse_documents;
    use meshpush::model::store::Write;

    const MESH: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: authz, namespace: auth}
spec:
  clusterIP: 10.42.0.1
  selector: {app: authz}
  ports: [{name: http, port: 8000}, {name: grpc, port: 9000}]
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: ext}
spec:
  clusterIP: 10.42.0.2
  selector: {app: api}
  ports: [{name: http, port: 8080}, {name: tcp-raw, port: 9100}]
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: bound, namespace: ext}
spec:
  workloadSelector: {labels: {tier: bound}}
  ingress:
  - {port: {number: 8080, protocol: HTTP, name: http}, defaultEndpoint: 127.0.0.1:18080}
  - {port: {number: 9100, protocol: TCP, name: tcp}, defaultEndpoint: 127.0.0.1:19100}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: by-http, namespace: ext}
spec:
  selector: {matchLabels: {tier: http}}
  action: CUSTOM
  provider: {name: ext-http}
  rules: [{to: [{operation: {paths: ["/private*"], methods: [POST]}}], when: [{key: "request.headers[x-user]", values: ["*"]}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: trial, namespace: ext, annotations: {istio.io/dry-run: "true"}}
spec:
  selector: {matchLabels: {tier: http}}
  action: CUSTOM
  provider: {name: ext-http}
  rules: [{}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: by-grpc, namespace: ext}
spec:
  selector: {matchLabels: {app: api, tier: grpc}}
  action: CUSTOM
  provider: {name: ext-grpc}
  rules: [{to: [{operation: {ports: ["9100"]}}]}, {to: [{operation: {hosts: ["*.internal"]}}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: by-grpc-bound, namespace: ext}
spec:
  selector: {matchLabels: {tier: bound}}
  action: CUSTOM
  provider: {name: ext-grpc}
  rules: [{}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: unknown, namespace: ext}
spec:
  selector: {matchLabels: {tier: bad}}
  action: CUSTOM
  provider: {name: opa}
  rules: [{to: [{operation: {paths: [/admin]}}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-debug, namespace: ext}
spec:
  action: DENY
  rules: [{to: [{operation: {paths: [/debug]}}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: edge, namespace: default}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  action: CUSTOM
  provider: {name: ext-http}
  rules: [{to: [{operation: {hosts: ["*.example.com"]}}]}]
"#;
    const MESH_CONFIG: &str = "extensionProviders:
- name: ext-http
  envoyExtAuthzHttp:
    service: authz.auth.svc.cluster.local
    port: 8000
    timeout: 2s
    pathPrefix: /check
    failOpen: true
    statusOnError: '503'
    includeRequestHeadersInCheck: [x-user, x-ext-*, '*-id']
    includeAdditionalHeadersInCheck: {x-from: envoy}
    includeRequestBodyInCheck: {maxRequestBytes: 4096, allowPartialMessage: true}
    headersToUpstreamOnAllow: [x-user-id]
    headersToDownstreamOnDeny: [set-cookie, x-reason-*]
    headersToDownstreamOnAllow: [x-trace]
- name: ext-grpc
  envoyExtAuthzGrpc: {service: auth/authz.auth.svc.cluster.local, port: 9000, timeout: 1s, statusOnError: '500',
    includeRequestBodyInCheck: {maxRequestBytes: 1024, packAsBytes: true}}
";
    let envoy = envoy_binary();
    let dir = tempfile::tempdir().unwrap();
    let parsed = parse_documents("custom.yaml", MESH);
    assert!(!parsed.has_errors(), "{:#?}", parsed.problems);
    let store = ConfigStore::new();
    store.apply(bookinfo::with_cases());
    store.apply(parsed.objects.into_iter().map(|(o, s)| Write::put(o, s)).collect::<Vec<_>>());
    let mesh = meshpush::config::mesh::MeshSettings::parse("mesh.yaml", MESH_CONFIG).unwrap().mesh_config();
    let ctx = PushContext::build_with(store.snapshot(), 1, Arc::new(ScopeInterner::default()), Arc::new(mesh));
    // Every filter's name and, of connection managers, every HTTP filter's; with rule names.
    let filters = |listeners: &[Listener]| -> String {
        let mut out = format!("{listeners:?}");
        let text = |any: &Any| String::from_utf8_lossy(&any.value).into_owned();
        for f in listeners.iter().flat_map(|l| &l.filter_chains).flat_map(|c| &c.filters) {
            let Some(filter::ConfigType::TypedConfig(any)) = &f.config_type else { continue };
            out.push_str(&text(any));
            if any.type_url.ends_with("HttpConnectionManager") {
                let hcm = HttpConnectionManager::decode(any.value.as_slice()).unwrap();
                for http in &hcm.http_filters {
                    out.push_str(&http.name);
                    if let Some(http_filter::ConfigType::TypedConfig(any)) = &http.config_type {
                        out.push_str(&text(any));
                    }
                }
            }
        }
        out
    };
    for (label, id, mode, tier, expected) in [
        ("custom-http", "sidecar~10.43.0.1~api-0.ext~ext.svc.cluster.local", "REDIRECT", "http", "http.ext_authz"),
        ("custom-grpc", "sidecar~10.43.0.2~api-1.ext~ext.svc.cluster.local", "REDIRECT", "grpc", "network.ext_authz"),
        ("custom-bound", "sidecar~127.0.0.4~api-2.ext~ext.svc.cluster.local", "NONE", "bound", "network.ext_authz"),
        ("custom-bad", "sidecar~10.43.0.3~api-3.ext~ext.svc.cluster.local", "REDIRECT", "bad", "bad-CUSTOM-action"),
    ] {
        let proxy = bookinfo::proxy(id, mode, &[("app", "api"), ("tier", tier)]);
        let scope = ctx.scope_for(&proxy);
        let (_, inbound) = ctx.inbound_for(&proxy);
        let mut clusters = cds::clusters(&ctx, &scope);
        clusters.extend(cds::inbound_clusters(&inbound));
        clusters.push(xds_cluster());
        let mut listeners = lds::listeners(&ctx, &scope);
        let own = lds::inbound_listeners(&inbound);
        assert!(filters(&own).contains(expected), "{label}: {expected}");
        listeners.extend(own);
        assert_envoy_accepts(&envoy, dir.path(), label, listeners, clusters);
    }
    let scope = ingress(&ctx);
    let listeners = lds::listeners(&ctx, &scope);
    assert!(filters(&listeners).contains("envoy.filters.http.ext_authz"), "the gateway asks the authorizer");
    let mut clusters = cds::clusters(&ctx, &scope);
    clusters.push(xds_cluster());
    assert_envoy_accepts(&envoy, dir.path(), "custom-gateway", listeners, clusters);
}
