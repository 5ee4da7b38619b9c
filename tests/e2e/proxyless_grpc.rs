//! Proxyless gRPC: gRPC's own xDS clients and servers (Python grpcio,
//! `support::proxyless`) driven by the real meshpush binary, as Istio's
//! proxyless mode drives them.
//!
//! Clients route by full and short names, split by weight over subsets,
//! match a header, take an injected fault as a gRPC status and follow an
//! endpoint that moves; a server serves only once it has its inbound
//! listener and enforces an AuthorizationPolicy DENY; client and server do
//! mTLS with the certificates `meshpush agent --grpc-bootstrap` keeps.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::agent::{Agent, AgentSpec};
use crate::support::manifests::sidecar_node;
use crate::support::meshpush::Meshpush;
use crate::support::process::{free_port, wait_until};
use crate::support::proxyless::{GrpcClient, GrpcServer, plain_bootstrap};
use crate::support::scene::MeshDir;
use crate::support::secure::SecureMesh;

const DEADLINE: Duration = Duration::from_secs(30);
/// The Service's port clients dial (its target port is where servers listen).
const PORT: u16 = 7070;

/// Service `echo` of namespace `app` (port [`PORT`] to `target`), and one
/// ready Pod per `(name, ip, version)`.
fn echo(target: u16, pods: &[(&str, &str, &str)]) -> String {
    let mut yaml = format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: echo, namespace: app}}\n\
         spec: {{clusterIP: 10.96.0.10, selector: {{app: echo}}, ports: [{{name: grpc, port: {PORT}, targetPort: {target}}}]}}\n"
    );
    for (name, ip, version) in pods {
        yaml.push_str(&format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: app, labels: {{app: echo, version: {version}}}}}\n\
             spec: {{serviceAccountName: echo}}\n\
             status: {{podIP: {ip}, phase: Running, conditions: [{{type: Ready, status: \"True\"}}]}}\n"
        ));
    }
    yaml
}

const RULES: &str = r#"
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: app}
spec:
  host: echo
  trafficPolicy: {loadBalancer: {simple: LEAST_REQUEST}}
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
---
apiVersion: v1
kind: Service
metadata: {name: sticky, namespace: app}
spec:
  clusterIP: 10.96.0.12
  selector: {app: echo}
  ports: [{name: grpc, port: 7071, targetPort: TARGET}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: sticky, namespace: app}
spec:
  host: sticky
  trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x-user}}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: app}
spec:
  hosts: [echo]
  http:
  - match: [{headers: {x-canary: {exact: "yes"}}}]
    route: [{destination: {host: echo, subset: v2}}]
  - match: [{uri: {prefix: /echo.Echo/Fail}}]
    fault: {abort: {grpcStatus: UNAVAILABLE, percentage: {value: 100}}}
    route: [{destination: {host: echo, subset: v1}}]
  - match: [{uri: {prefix: /echo.Echo/Slow}}]
    fault: {delay: {fixedDelay: 400ms, percentage: {value: 100}}}
    route: [{destination: {host: echo, subset: v1}}]
  - match: [{uri: {prefix: /echo.Echo/Late}}]
    timeout: 300ms
    fault: {delay: {fixedDelay: 2s, percentage: {value: 100}}}
    route: [{destination: {host: echo, subset: v1}}]
  - route:
    - {destination: {host: echo, subset: v1}, weight: 80}
    - {destination: {host: echo, subset: v2}, weight: 20}
"#;

/// A server of Pod `pod` (labels `app: echo`, `version`) at `ip:port`,
/// bootstrapped to dial `mesh` directly.
fn server(mesh: &Meshpush, dir: &Path, pod: &str, ip: &str, port: u16, labels: &[(&str, &str)]) -> GrpcServer {
    let bootstrap = dir.join(format!("{pod}.json"));
    plain_bootstrap(&bootstrap, &sidecar_node(ip, pod, "app"), labels, &mesh.xds_addr().to_string());
    GrpcServer::start(pod, SocketAddr::new(ip.parse().unwrap(), port), &bootstrap)
}

fn client(mesh: &Meshpush, dir: &Path, ip: &str) -> GrpcClient {
    let bootstrap = dir.join("client.json");
    plain_bootstrap(
        &bootstrap,
        &sidecar_node(ip, "client-1", "app"),
        &[("app", "client")],
        &mesh.xds_addr().to_string(),
    );
    GrpcClient::start("client", &bootstrap)
}

fn count(servers: &[String], name: &str) -> usize {
    servers.iter().filter(|s| *s == name).count()
}

#[test]
fn proxyless_clients_route_by_full_and_short_names_by_weight_by_header_and_take_faults() {
    let work = tempfile::tempdir().unwrap();
    let port = free_port();
    let dir = MeshDir::new();
    dir.write("echo.yaml", &echo(port, &[("echo-v1", "127.0.88.1", "v1"), ("echo-v2", "127.0.88.2", "v2")]));
    let mesh = Meshpush::start(&dir.path());
    let v1 = server(&mesh, work.path(), "echo-v1", "127.0.88.1", port, &[("app", "echo"), ("version", "v1")]);
    let v2 = server(&mesh, work.path(), "echo-v2", "127.0.88.2", port, &[("app", "echo"), ("version", "v2")]);
    let client = client(&mesh, work.path(), "127.0.88.9");
    let procs = [mesh.process(), v1.process(), v2.process(), client.process()];
    let target = format!("xds:///echo:{PORT}");
    wait_until(Instant::now() + DEADLINE, "a call by the short name", &procs, || {
        let got = client.servers(&target, "/echo.Echo/Call", &[], 1);
        if got[0].starts_with("echo-v") { Ok(()) } else { Err(format!("{got:?}")) }
    });
    assert!(v1.serving() && v2.serving(), "both servers got their listeners");
    // Every spelling Istio expands for a client of the namespace.
    for host in ["echo", "echo.app", "echo.app.svc", "echo.app.svc.cluster.local"] {
        let got = client.servers(&format!("xds:///{host}:{PORT}"), "/echo.Echo/Call", &[], 4);
        assert!(got.iter().all(|s| s.starts_with("echo-v")), "{host}: {got:?}");
    }
    // A name that resolves to nothing gets no listener: gRPC's own
    // resolution error (once its 15 s wait for the resource is over), there
    // and only there.
    let nothing = client.call_within(&format!("xds:///nothing:{PORT}"), "/echo.Echo/Call", &[], 1, DEADLINE);
    assert!(
        matches!(&nothing[0], Err((status, details)) if status == "UNAVAILABLE" && details.contains("does not exist")),
        "{nothing:?}"
    );
    assert!(client.servers(&target, "/echo.Echo/Call", &[], 2).iter().all(|s| s.starts_with("echo-v")));

    dir.write("rules.yaml", &RULES.replace("TARGET", &port.to_string()));
    wait_until(Instant::now() + DEADLINE, "the header match to pick v2", &procs, || {
        let got = client.servers(&target, "/echo.Echo/Call", &[("x-canary", "yes")], 5);
        if count(&got, "echo-v2") == 5 { Ok(()) } else { Err(format!("{got:?}")) }
    });
    // 80/20 over 400 calls: v1's share is 0.8 ± 0.1 (over six standard deviations).
    let mut split = Vec::new();
    for _ in 0..4 {
        split.extend(client.servers(&target, "/echo.Echo/Call", &[], 100));
    }
    let (to_v1, to_v2) = (count(&split, "echo-v1"), count(&split, "echo-v2"));
    assert_eq!(to_v1 + to_v2, 400, "every call answered: {split:?}");
    assert!((280..=360).contains(&to_v1), "80/20 split gave v1 {to_v1} of 400");
    let faulted = client.call(&target, "/echo.Echo/Fail", &[], 3);
    for outcome in &faulted {
        let Err((status, details)) = outcome else { panic!("a fault is injected: {faulted:?}") };
        assert_eq!(status, "UNAVAILABLE", "the abort's gRPC status: {details}");
    }
    let started = Instant::now();
    let slow = client.servers(&target, "/echo.Echo/Slow", &[], 1);
    assert_eq!(slow, ["echo-v1"], "a delayed call is answered");
    assert!(started.elapsed() >= Duration::from_millis(400), "the delay held the call {:?}", started.elapsed());
    // The route's timeout bounds the call (gRPC's own deadline is 3 s).
    let late = client.servers(&target, "/echo.Echo/Late", &[], 1);
    assert_eq!(late, ["DEADLINE_EXCEEDED"], "the 300 ms timeout ended the call the 2 s delay held");
    // A ring hash by header: each user sticks to one server, the users spread.
    let mut chosen = std::collections::BTreeSet::new();
    for user in 0..16 {
        let header = format!("user-{user}");
        let got = client.servers("xds:///sticky:7071", "/echo.Echo/Call", &[("x-user", &header)], 3);
        assert!(got.iter().all(|s| s == &got[0] && s.starts_with("echo-v")), "{header} sticks: {got:?}");
        chosen.insert(got[0].clone());
    }
    assert_eq!(chosen.len(), 2, "sixteen users over both servers: {chosen:?}");
    assert!(!mesh.log().contains("NACK"), "gRPC took everything it was sent:\n{}", mesh.log_tail(40));
}

#[test]
fn a_proxyless_client_follows_an_endpoint_that_moves_within_a_second() {
    let work = tempfile::tempdir().unwrap();
    let port = free_port();
    let dir = MeshDir::new();
    dir.write("echo.yaml", &echo(port, &[("echo-0", "127.0.89.1", "v1")]));
    let mesh = Meshpush::start(&dir.path());
    let labels = [("app", "echo"), ("version", "v1")];
    let first = server(&mesh, work.path(), "echo-0", "127.0.89.1", port, &labels);
    // Where the Pod moves to (a rescheduled Pod, with a new address).
    let second = server(&mesh, work.path(), "echo-0-moved", "127.0.89.2", port, &labels);
    let client = client(&mesh, work.path(), "127.0.89.9");
    let procs = [mesh.process(), first.process(), second.process(), client.process()];
    let target = format!("xds:///echo:{PORT}");
    wait_until(Instant::now() + DEADLINE, "calls to the Pod's first address", &procs, || {
        let got = client.servers(&target, "/echo.Echo/Call", &[], 1);
        if got[0] == "echo-0" { Ok(()) } else { Err(format!("{got:?}")) }
    });
    wait_until(Instant::now() + DEADLINE, "the second server's listener", &procs, || second.serving());

    let moved = Instant::now();
    dir.write("echo.yaml", &echo(port, &[("echo-0", "127.0.89.2", "v1")]));
    wait_until(moved + Duration::from_secs(10), "calls to the Pod's new address", &procs, || {
        let got = client.servers(&target, "/echo.Echo/Call", &[], 1);
        if got[0] == "echo-0-moved" { Ok(()) } else { Err(format!("{got:?}")) }
    });
    let took = moved.elapsed();
    assert!(took < Duration::from_secs(1), "the client followed the endpoint after {took:?}");
}

#[test]
fn a_proxyless_server_serves_once_it_has_its_listener_and_enforces_a_deny_on_one_method() {
    let work = tempfile::tempdir().unwrap();
    let port = free_port();
    let dir = MeshDir::new();
    dir.write("echo.yaml", &echo(port, &[("echo-v1", "127.0.90.1", "v1")]));
    let mesh = Meshpush::start(&dir.path());
    // Its node's labels are not `app: echo`: no Service selects the
    // server yet, so it has no inbound port and gets no listener.
    let server = server(&mesh, work.path(), "echo-v1", "127.0.90.1", port, &[("app", "echo-server")]);
    let client = client(&mesh, work.path(), "127.0.90.9");
    let procs = [mesh.process(), server.process(), client.process()];
    let target = format!("xds:///echo:{PORT}");
    wait_until(Instant::now() + DEADLINE, "the client to have the endpoint, and the call refused", &procs, || {
        let got = client.call(&target, "/echo.Echo/Call", &[], 1);
        match &got[0] {
            Err((status, details)) if status == "UNAVAILABLE" && !details.contains("nothing") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    assert!(!server.serving(), "no listener, no serving");

    // A Service that selects it gives it its port, so its listener.
    dir.write(
        "server.yaml",
        &format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: echo-server, namespace: app}}\n\
             spec: {{clusterIP: 10.96.0.11, selector: {{app: echo-server}}, ports: [{{name: grpc, port: {PORT}, targetPort: {port}}}]}}\n"
        ),
    );
    wait_until(Instant::now() + DEADLINE, "the server to serve the call", &procs, || {
        let got = client.call(&target, "/echo.Echo/Call", &[], 1);
        if got[0].as_ref().is_ok_and(|a| a.starts_with("echo-v1 /echo.Echo/Call")) {
            Ok(())
        } else {
            Err(format!("{got:?}"))
        }
    });
    assert!(server.serving());

    dir.write(
        "deny.yaml",
        "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: no-forbidden, namespace: app}\n\
         spec: {selector: {matchLabels: {app: echo-server}}, action: DENY, rules: [{to: [{operation: {paths: [/echo.Echo/Forbidden]}}]}]}\n",
    );
    wait_until(Instant::now() + DEADLINE, "the DENY to refuse its method", &procs, || {
        let got = client.call(&target, "/echo.Echo/Forbidden", &[], 1);
        match &got[0] {
            Err((status, _)) if status == "PERMISSION_DENIED" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    let other = client.call(&target, "/echo.Echo/Call", &[], 3);
    assert!(other.iter().all(Result::is_ok), "other methods are served: {other:?}");
}

#[test]
fn a_proxyless_client_and_server_do_mtls_with_the_agents_certificates() {
    let work = tempfile::tempdir().unwrap();
    let port = free_port();
    let dir = MeshDir::new();
    dir.write("echo.yaml", &echo(port, &[("echo-v1", "127.0.91.1", "v1")]));
    dir.write(
        "mtls.yaml",
        "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: default, namespace: app}\n\
         spec: {mtls: {mode: STRICT}}\n---\n\
         apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: echo, namespace: app}\n\
         spec: {host: echo, trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}}\n",
    );
    let secure = SecureMesh::start(&dir);
    // Certificates of 8 s, renewed every 4 s: the calls below outlive the first ones.
    let agent = |name: &str, node: String, account: &str, labels: &[(&str, &str)]| {
        let (bootstrap, certs, mut extra): (_, _, Vec<String>) = if name == "server-agent" {
            // The files beside the bootstrap, by default.
            let dir = work.path().join("server");
            (dir.join("bootstrap.json"), dir, vec![])
        } else {
            let certs = work.path().join(format!("{name}-certs"));
            (
                work.path().join(format!("{name}.json")),
                certs.clone(),
                vec!["--output-certs".into(), certs.display().to_string()],
            )
        };
        extra.extend([
            "--disable-envoy".into(),
            "--grpc-bootstrap".into(),
            bootstrap.display().to_string(),
            "--cert-ttl".into(),
            "8s".into(),
        ]);
        for (k, v) in labels {
            extra.extend(["--label".into(), format!("{k}={v}")]);
        }
        let token = secure.token("app", account);
        let spec = AgentSpec { node_id: node, discovery: secure.secure, root_cert: &secure.root, token: &token, extra };
        (Agent::start(name, spec), bootstrap, certs)
    };
    let (server_agent, server_bootstrap, server_certs) = agent(
        "server-agent",
        sidecar_node("127.0.91.1", "echo-v1", "app"),
        "echo",
        &[("app", "echo"), ("version", "v1")],
    );
    let (client_agent, client_bootstrap, client_certs) =
        agent("client-agent", sidecar_node("127.0.91.9", "client-1", "app"), "client", &[("app", "client")]);
    for certs in [&server_certs, &client_certs] {
        for file in ["cert-chain.pem", "key.pem", "root-cert.pem"] {
            assert!(certs.join(file).is_file(), "the agent wrote {file}");
        }
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(certs.join("key.pem")).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the key is its owner's alone outside Kubernetes");
    }
    let bootstrap: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&client_bootstrap).unwrap()).unwrap();
    assert_eq!(bootstrap["node"]["metadata"]["GENERATOR"], "grpc");
    let server = bootstrap["xds_servers"][0]["server_uri"].as_str().unwrap();
    assert!(server.starts_with("unix-abstract:meshpush-grpc-xds-"), "the agent's socket: {server}");
    assert_eq!(bootstrap["certificate_providers"]["default"]["plugin_name"], "file_watcher");
    assert_eq!(bootstrap["certificate_providers"]["default"]["config"]["refresh_interval"], "2s");

    let server = GrpcServer::start("echo-v1", SocketAddr::new("127.0.91.1".parse().unwrap(), port), &server_bootstrap);
    let client = GrpcClient::start("client", &client_bootstrap);
    let procs =
        [secure.mesh.process(), server_agent.process(), client_agent.process(), server.process(), client.process()];
    let target = format!("xds:///echo:{PORT}");
    let identity = "echo-v1 /echo.Echo/Call spiffe://cluster.local/ns/app/sa/client";
    wait_until(Instant::now() + DEADLINE, "an mTLS call, the server seeing the client's identity", &procs, || {
        let got = client.call(&target, "/echo.Echo/Call", &[], 1);
        match &got[0] {
            Ok(answer) if answer == identity => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    // Renewals rewrite both sides' files (the bootstraps tell gRPC to
    // read them every quarter of a certificate's life), and calls go on
    // meanwhile, past the first certificates' expiry.
    let chains = || [&server_certs, &client_certs].map(|d| std::fs::read_to_string(d.join("cert-chain.pem")).unwrap());
    let first = chains();
    let began = Instant::now();
    wait_until(Instant::now() + DEADLINE, "renewed files and calls past the first certificates' life", &procs, || {
        let got = client.call(&target, "/echo.Echo/Call", &[], 1);
        assert!(matches!(&got[0], Ok(a) if a == identity), "a call failed while certificates rotate: {got:?}");
        let now = chains();
        let renewed = now[0] != first[0] && now[1] != first[1];
        if renewed && began.elapsed() > Duration::from_secs(10) { Ok(()) } else { Err(format!("renewed: {renewed}")) }
    });
    // A client without certificates cannot reach the STRICT server.
    let plain_bootstrap_path = work.path().join("plain.json");
    plain_bootstrap(
        &plain_bootstrap_path,
        &sidecar_node("127.0.91.8", "plain-1", "app"),
        &[("app", "plain")],
        &secure.mesh.xds_addr().to_string(),
    );
    let plain = GrpcClient::start("plain", &plain_bootstrap_path);
    let got = plain.call(&target, "/echo.Echo/Call", &[], 1);
    assert!(got[0].is_err(), "no certificate, no call: {got:?}");
}
