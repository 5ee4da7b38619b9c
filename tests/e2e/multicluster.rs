//! One mesh over two clusters on two networks, with real Envoys: a sidecar
//! of cluster `east` (network `net-east`) reaches a service that runs only
//! in cluster `west` (network `net-west`) through west's east-west
//! gateway, over mesh mTLS end to end, as Istio's multi-network install
//! does it.
//!
//! meshpush reads `east` from a stand-in API server and `west` from
//! another, named by a remote secret in `east`. Each cluster's network is
//! its `istio-system` namespace's `topology.istio.io/network` label. West's
//! gateway is its Service `istio-eastwestgateway`, labelled with the
//! network, its load balancer at 127.0.0.3; the router that runs it is
//! configured by the `cross-network-gateway` Gateway (AUTO_PASSTHROUGH),
//! read from east, the config cluster. A's EDS for B's service names the
//! gateway, not B's Pod; A's Envoy sends mTLS with the SNI
//! `outbound_.PORT_._.HOST`; the gateway passes it through by that SNI to
//! B's Pod; B's Envoy terminates it and sees A's identity. The gateway
//! Envoy's stats show the connection on the SNI cluster.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::support::agent::{Agent, AgentSpec};
use crate::support::backend::Backend;
use crate::support::http;
use crate::support::kube_api::{KubeApi, remote_secret};
use crate::support::manifests::{router_node, sidecar_node};
use crate::support::process::{free_port, wait_until};
use crate::support::secure::SecureMesh;

const DEADLINE: Duration = Duration::from_secs(40);
const HOST: &str = "b.default.svc.cluster.local";

fn network_namespace(network: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: istio-system, labels: {{topology.istio.io/network: {network}}}}}\n"
    )
}

/// East: the config cluster. Its network, the remote secret naming west,
/// the east-west Gateway, and the Sidecars of A and B (which keep their
/// outbound listeners off the gateway's port).
fn east(west: &KubeApi, gateway_port: u16, pod_port: u16, backend: SocketAddr) -> KubeApi {
    let api = KubeApi::start();
    api.put(&network_namespace("net-east"));
    api.put(&remote_secret("istio-remote-secret-west", &[("west", &west.kubeconfig())]));
    api.put(&format!(
        "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {{name: cross-network-gateway, namespace: istio-system}}\n\
         spec:\n  selector: {{istio: eastwestgateway}}\n  servers:\n  - port: {{number: {gateway_port}, name: tls, protocol: TLS}}\n    \
         tls: {{mode: AUTO_PASSTHROUGH}}\n    hosts: [\"*.local\"]\n"
    ));
    api.put(
        "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: a, namespace: default}\n\
         spec: {workloadSelector: {labels: {app: a}}, egress: [{hosts: [\"./*\"]}]}\n",
    );
    api.put(&format!(
        "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {{name: b, namespace: default}}\n\
         spec:\n  workloadSelector: {{labels: {{app: b}}}}\n  \
         ingress: [{{port: {{number: {pod_port}, protocol: HTTP, name: http}}, defaultEndpoint: \"{backend}\"}}]\n  \
         egress: [{{hosts: [\"kube-system/*\"]}}]\n"
    ));
    api
}

/// West: its network, service `b` with its one Pod (a sidecar at
/// 127.0.0.2), and the east-west gateway: its Service with its load
/// balancer, and its Pod.
fn west(service_port: u16, pod_port: u16, gateway_port: u16) -> KubeApi {
    let api = KubeApi::start();
    api.put(&network_namespace("net-west"));
    api.put(&format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: b, namespace: default}}\n\
         spec: {{selector: {{app: b}}, ports: [{{name: http, port: {service_port}, targetPort: {pod_port}}}]}}\n"
    ));
    api.put(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: b-1, namespace: default, labels: {app: b, security.istio.io/tlsMode: istio}}\n\
         spec: {serviceAccountName: b, containers: [{name: app, image: b}]}\nstatus: {podIP: 127.0.0.2, phase: Running}\n",
    );
    api.put(&format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: istio-eastwestgateway\n  namespace: istio-system\n  \
         labels: {{istio: eastwestgateway, topology.istio.io/network: net-west, networking.istio.io/gatewayPort: \"{gateway_port}\"}}\n\
         spec: {{type: LoadBalancer, selector: {{istio: eastwestgateway}}, ports: [{{name: tls, port: {gateway_port}}}]}}\n\
         status: {{loadBalancer: {{ingress: [{{ip: 127.0.0.3}}]}}}}\n"
    ));
    api.put(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: istio-eastwestgateway-1, namespace: istio-system, \
         labels: {istio: eastwestgateway, topology.istio.io/network: net-west}}\n\
         spec: {serviceAccountName: istio-eastwestgateway, containers: [{name: istio-proxy, image: proxy}]}\n\
         status: {podIP: 127.0.0.3, phase: Running}\n",
    );
    api
}

fn spec<'a>(secure: &'a SecureMesh, node_id: String, token: &'a str, extra: Vec<String>) -> AgentSpec<'a> {
    AgentSpec { node_id, discovery: secure.secure, root_cert: &secure.root, token, extra }
}

fn meta(pairs: &[(&str, &str)]) -> Vec<String> {
    pairs.iter().flat_map(|(k, v)| ["--meta".to_string(), format!("{k}={v}")]).collect()
}

#[test]
fn a_sidecar_reaches_another_networks_service_over_mtls_through_its_east_west_gateway() {
    let (service_port, pod_port, gateway_port) = (free_port(), free_port(), free_port());
    let backend = Backend::start("b", SocketAddr::from(([127, 0, 0, 1], free_port())));
    let west = west(service_port, pod_port, gateway_port);
    let east = east(&west, gateway_port, pod_port, backend.addr());
    let kubeconfig = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(kubeconfig.path(), east.kubeconfig()).unwrap();
    let secure = SecureMesh::start_kube(kubeconfig.path(), &["--cluster-id", "east"]);
    let (token_a, token_b, token_gw) = (
        secure.token("default", "a"),
        secure.token("default", "b"),
        secure.token("istio-system", "istio-eastwestgateway"),
    );
    let b = Agent::start(
        "agent-b",
        spec(
            &secure,
            sidecar_node("127.0.0.2", "b-1", "default"),
            &token_b,
            [vec!["--label".into(), "app=b".into()], meta(&[("CLUSTER_ID", "west"), ("NETWORK", "net-west")])].concat(),
        ),
    );
    let gateway = Agent::start(
        "agent-eastwest",
        spec(
            &secure,
            router_node("127.0.0.3", "istio-eastwestgateway-1", "istio-system"),
            &token_gw,
            [
                vec!["--label".into(), "istio=eastwestgateway".into()],
                meta(&[("CLUSTER_ID", "west"), ("NETWORK", "net-west"), ("REQUESTED_NETWORK_VIEW", "net-west")]),
            ]
            .concat(),
        ),
    );
    let a = Agent::start(
        "agent-a",
        spec(
            &secure,
            sidecar_node("127.0.0.1", "a-1", "default"),
            &token_a,
            [vec!["--label".into(), "app=a".into()], meta(&[("CLUSTER_ID", "east"), ("NETWORK", "net-east")])].concat(),
        ),
    );
    let procs = [a.process(), b.process(), gateway.process(), secure.mesh.process()];
    let through_a = SocketAddr::from(([127, 0, 0, 1], service_port));
    wait_until(Instant::now() + DEADLINE, "A reaches B through west's east-west gateway", &procs, || {
        http::get(through_a, "/", &[("host", HOST)])
            .map_err(|e| e.to_string())
            .and_then(|r| if r.status == 200 { Ok(()) } else { Err(format!("{} {}", r.status, r.body)) })
    });

    // A was sent the gateway, weighted for B's one Pod, not B's address.
    let outbound = format!("outbound|{service_port}||{HOST}");
    let a_endpoints = a.envoy_admin("/clusters").unwrap().body;
    let hosts: Vec<&str> = a_endpoints
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("{outbound}::"))?.split_once("::"))
        .map(|(host, _)| host)
        .filter(|host| host.parse::<SocketAddr>().is_ok())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(hosts, [format!("127.0.0.3:{gateway_port}")], "A's endpoints of {outbound}");

    // Mesh mTLS end to end: B's Envoy names A's identity and its own.
    let answer = http::get(through_a, "/", &[("host", HOST)]).expect("A answers");
    assert_eq!(answer.status, 200, "{}", answer.body);
    let xfcc = answer.header("x-echo-x-forwarded-client-cert").unwrap_or_default().to_string();
    assert!(xfcc.contains("URI=spiffe://cluster.local/ns/default/sa/a"), "A's identity reaches B: {xfcc:?}");
    assert!(xfcc.contains("By=spiffe://cluster.local/ns/default/sa/b"), "B's own identity: {xfcc:?}");
    assert!(
        a.envoy_stat(&format!("cluster.{outbound}.ssl.handshake")).is_some_and(|n| n >= 1),
        "A's cluster shook hands over TLS (with B, through the gateway)"
    );
    // The gateway passed it by SNI: its SNI cluster took the connections,
    // to B's Pod (its endpoints are its own network's), without TLS of its own.
    let sni = format!("outbound_.{service_port}_._.{HOST}");
    let passed = gateway.envoy_stat(&format!("cluster.{sni}.upstream_cx_total"));
    assert!(passed.is_some_and(|n| n >= 1), "the gateway's {sni} carried the connection: {passed:?}");
    assert_eq!(gateway.envoy_stat(&format!("cluster.{sni}.ssl.handshake")), None, "passed through, not terminated");
    let gateway_hosts = gateway.envoy_admin("/clusters").unwrap().body;
    assert!(gateway_hosts.contains(&format!("{sni}::127.0.0.2:{pod_port}::")), "the gateway routes to B's Pod");

    // B's Pod moves to east's network (its label): A reaches it directly,
    // and the gateway no longer (it sees only its own network).
    west.put(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: b-1, namespace: default, labels: {app: b, security.istio.io/tlsMode: istio, topology.istio.io/network: net-east}}\n\
         spec: {serviceAccountName: b, containers: [{name: app, image: b}]}\nstatus: {podIP: 127.0.0.2, phase: Running}\n",
    );
    wait_until(Instant::now() + DEADLINE, "A is sent B's Pod directly", &procs, || {
        let body = a.envoy_admin("/clusters").map(|r| r.body).unwrap_or_default();
        if body.contains(&format!("{outbound}::127.0.0.2:{pod_port}::")) { Ok(()) } else { Err("not yet".to_string()) }
    });
    http::get(through_a, "/direct", &[("host", HOST)]).expect("A still reaches B, directly");
}

/// The SPIFFE identities of a chain's leaf.
fn leaf_identities(chain: &[String]) -> Vec<String> {
    use rustls_pki_types::pem::PemObject as _;
    let leaf = rustls_pki_types::CertificateDer::pem_slice_iter(chain[0].as_bytes()).next().unwrap().unwrap();
    meshpush::ca::tls::identities_of(&leaf).iter().map(ToString::to_string).collect()
}

#[test]
fn a_remote_clusters_workload_token_is_reviewed_by_its_own_cluster() {
    use crate::support::process::{free_addr, scratch_dir};
    use crate::support::secure;
    let west = KubeApi::start();
    west.accept_token("west-token", "default", "b");
    let east = KubeApi::start();
    east.accept_token("east-token", "default", "a");
    east.put(&remote_secret("istio-remote-secret-west", &[("west", &west.kubeconfig())]));
    let kubeconfig = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(kubeconfig.path(), east.kubeconfig()).unwrap();
    let ca_dir = scratch_dir("ca");
    let (secure_addr, ca) = (free_addr(), ca_dir.path().display().to_string());
    let secure_flag = secure_addr.to_string();
    let flags = ["--ca-dir", &ca, "--secure-xds-addr", &secure_flag, "--webhook-addr", "off", "--cluster-id", "east"];
    // Ready once west has synced: its client is known.
    let mesh = crate::support::meshpush::Meshpush::start_kube(kubeconfig.path(), &flags);
    let root = std::fs::read_to_string(ca_dir.path().join("root-cert.pem")).unwrap();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let ask = |token: &'static str, cluster: Option<&'static str>| {
            let root = root.clone();
            async move {
                let (_, csr) = secure::csr(&[]);
                let channel = secure::channel(secure_addr, &root, None).await.unwrap();
                secure::create_certificate_in(channel, &csr, token, cluster).await
            }
        };
        let issued = ask("west-token", Some("west")).await.unwrap_or_else(|e| panic!("{e:?}\n{}", mesh.log_tail(20)));
        assert_eq!(leaf_identities(&issued.cert_chain), ["spiffe://cluster.local/ns/default/sa/b"]);
        let issued = ask("east-token", None).await.expect("the local cluster reviews a caller naming none");
        assert_eq!(leaf_identities(&issued.cert_chain), ["spiffe://cluster.local/ns/default/sa/a"]);
        let issued = ask("east-token", Some("east")).await.expect("or naming the local cluster");
        assert_eq!(leaf_identities(&issued.cert_chain), ["spiffe://cluster.local/ns/default/sa/a"]);
        for (token, cluster, why) in [
            ("west-token", None, "TokenReview"),
            ("east-token", Some("west"), "TokenReview of cluster west"),
            ("west-token", Some("south"), "no cluster south is read"),
        ] {
            let refused = ask(token, cluster).await.expect_err("refused");
            assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
            assert!(refused.message().contains(why), "{token} from {cluster:?}: {}", refused.message());
        }
    });
}
