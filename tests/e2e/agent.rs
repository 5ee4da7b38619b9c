//! `meshpush agent` beside a real Envoy, against the real binary's secure
//! port: the agent gets a certificate for the identity its token proves,
//! starts Envoy on a bootstrap pointing at its own sockets, proxies Envoy's
//! ADS stream to meshpush over mTLS — keeping it open while meshpush
//! restarts — serves and rotates the certificate over SDS, restarts Envoy
//! when it dies, answers its readiness probe, and drains and stops Envoy on
//! SIGTERM. An agent whose token does not hold the identity it asks for
//! gets nothing.

use std::time::{Duration, Instant};

use crate::support::agent::{Agent, AgentSpec, SdsStream, secret_pem};
use crate::support::manifests::{self, sidecar_node};
use crate::support::process::wait_until;
use crate::support::scene::MeshDir;
use crate::support::secure::SecureMesh;

const DEADLINE: Duration = Duration::from_secs(30);

#[test]
fn an_agent_runs_envoy_on_its_certificate_and_keeps_envoys_stream_while_meshpush_restarts() {
    let dir = MeshDir::new();
    dir.write("ledger.yaml", &manifests::service("default", "ledger", 8080));
    let mut secure = SecureMesh::start(&dir);
    let token = secure.token("default", "sleep");
    let mut agent = Agent::start(
        "agent",
        AgentSpec {
            node_id: sidecar_node("127.0.0.1", "sleep-1", "default"),
            discovery: secure.secure,
            root_cert: &secure.root,
            token: &token,
            // Short-lived certificates: renewed every ~3 s during the test.
            extra: vec!["--cert-ttl".into(), "6s".into()],
        },
    );
    let ledger = "outbound|8080||ledger.default.svc.cluster.local";
    wait_until(
        Instant::now() + DEADLINE,
        "Envoy has the mesh's clusters through the agent",
        &[agent.process(), secure.mesh.process()],
        || agent.envoy_clusters().iter().any(|c| c == ledger),
    );
    assert!(secure.mesh.metric("citadel_server_success_cert_issuance") >= 1.0);

    // SDS: `default` is the workload certificate for default/sleep, `ROOTCA`
    // the mesh root; a renewal is pushed on the open stream.
    let root = std::fs::read_to_string(&secure.root).unwrap();
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(agent.sds_socket()).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "the SDS socket (it hands out the key) is the agent's user's alone: {mode:o}");
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mut ca = SdsStream::open(&agent.sds_socket(), &["ROOTCA"]).await;
        let (_, _, secrets) = ca.next(Duration::from_secs(5)).await;
        assert_eq!(secrets.len(), 1);
        assert_eq!(secret_pem(&secrets[0]).trim(), root.trim());

        let mut workload = SdsStream::open(&agent.sds_socket(), &["default"]).await;
        let (first, nonce, secrets) = workload.next(Duration::from_secs(5)).await;
        assert_eq!(secrets[0].name, "default");
        let chain = secret_pem(&secrets[0]);
        let leaf = rustls_pki_types::pem::PemObject::from_pem_slice(chain.as_bytes()).expect("a PEM leaf");
        let ids = meshpush::ca::tls::identities_of(&leaf);
        assert_eq!(
            ids.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["spiffe://cluster.local/ns/default/sa/sleep"]
        );
        workload.ack(&["default"], &first, &nonce).await;
        let (renewed, _, secrets) = workload.next(Duration::from_secs(10)).await;
        assert_ne!(renewed, first, "a renewal is a new certificate (serial)");
        assert_ne!(secret_pem(&secrets[0]), chain);
    });
    assert!(secure.mesh.metric("citadel_server_success_cert_issuance") >= 2.0, "the renewal was issued by the CA");

    // Envoy dies: the agent starts another, which is served as the first was.
    let first_envoy = agent.envoy_pid().expect("the agent's Envoy");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(first_envoy as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    wait_until(
        Instant::now() + DEADLINE,
        "the agent restarts Envoy and it gets its clusters",
        &[agent.process()],
        || {
            agent.envoy_pid().is_some_and(|pid| pid != first_envoy)
                && agent.readiness().is_ok_and(|r| r.status == 200)
                && agent.envoy_clusters().iter().any(|c| c == ledger)
        },
    );
    assert!(agent.log().contains("Envoy exited"), "{}", agent.process().log_tail(30));

    // meshpush restarts: Envoy's stream to the agent stays open (one
    // connection, never disconnected), and what changed while meshpush was
    // down reaches Envoy through the agent's new upstream stream.
    let connections = agent.envoy_stat("cluster.xds-grpc.upstream_cx_total");
    assert_eq!(connections, Some(1), "Envoy dialled its agent once");
    secure.mesh.kill_hard();
    dir.write("audit.yaml", &manifests::service("default", "audit", 9090));
    secure.mesh.restart();
    let audit = "outbound|9090||audit.default.svc.cluster.local";
    wait_until(
        Instant::now() + DEADLINE,
        "Envoy gets the change made while meshpush was down",
        &[agent.process(), secure.mesh.process()],
        || agent.envoy_clusters().iter().any(|c| c == audit),
    );
    assert_eq!(agent.envoy_stat("cluster.xds-grpc.upstream_cx_total"), Some(1), "Envoy's stream was never cut");
    assert_eq!(agent.envoy_stat("control_plane.connected_state"), Some(1));
    assert!(agent.log().contains("dialling again"), "{}", agent.process().log_tail(30));
    assert_eq!(agent.readiness().unwrap().status, 200);

    // SIGTERM: readiness goes, Envoy drains and stops, the agent exits 0.
    let status = agent.process_mut().terminate(Instant::now() + DEADLINE).expect("the agent exits on SIGTERM");
    assert!(status.success(), "{status}\n{}", agent.process().log_tail(30));
    assert!(agent.envoy_admin("/ready").is_err(), "Envoy stopped with its agent");
    let log = agent.log();
    assert!(log.contains("draining Envoy"), "{log}");
    for secret in ["PRIVATE KEY", token.as_str()] {
        assert!(!log.contains(secret), "the agent's log shows a key or the token");
        assert!(!secure.mesh.log().contains(secret) && !secure.mesh.previous_logs().contains(secret));
    }
}

#[test]
fn an_agent_is_refused_an_identity_its_token_does_not_hold() {
    let dir = MeshDir::new();
    let secure = SecureMesh::start(&dir);
    let token = secure.token("default", "sleep");
    let mut agent = Agent::spawn(
        "agent-httpbin",
        AgentSpec {
            node_id: sidecar_node("127.0.0.1", "httpbin-1", "default"),
            discovery: secure.secure,
            root_cert: &secure.root,
            token: &token,
            extra: vec!["--service-account".into(), "httpbin".into()],
        },
    );
    let deadline = Instant::now() + DEADLINE;
    let status = loop {
        if let Some(status) = agent.process_mut().exited() {
            break status;
        }
        assert!(Instant::now() < deadline, "the agent kept running\n{}", agent.process().log_tail(20));
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success());
    let log = agent.log();
    assert!(log.contains("refused the certificate request for spiffe://cluster.local/ns/default/sa/httpbin"), "{log}");
    assert!(log.contains("PermissionDenied"), "{log}");
    assert!(agent.envoy_admin("/ready").is_err(), "no Envoy runs without a certificate");
    assert!(secure.mesh.metric("citadel_server_csr_sign_error") >= 1.0, "the CA counted the refusal");
}

/// Over delta, what Envoy holds goes into the new upstream stream's
/// `initial_resource_versions`: a service removed while meshpush was down
/// is removed from Envoy, one added is added, and Envoy's stream to the
/// agent stays the one it opened.
#[test]
fn over_delta_a_restarted_meshpush_learns_what_envoy_holds_and_brings_it_up_to_date() {
    let dir = MeshDir::new();
    dir.write("ledger.yaml", &manifests::service("default", "ledger", 8080));
    dir.write("audit.yaml", &manifests::service("default", "audit", 9090));
    let mut secure = SecureMesh::start(&dir);
    let token = secure.token("default", "sleep");
    let agent = Agent::start(
        "agent-delta",
        AgentSpec {
            node_id: sidecar_node("127.0.0.1", "sleep-1", "default"),
            discovery: secure.secure,
            root_cert: &secure.root,
            token: &token,
            extra: vec!["--delta".into()],
        },
    );
    let (ledger, audit, billing) = (
        "outbound|8080||ledger.default.svc.cluster.local",
        "outbound|9090||audit.default.svc.cluster.local",
        "outbound|7070||billing.default.svc.cluster.local",
    );
    wait_until(Instant::now() + DEADLINE, "Envoy has ledger and audit over delta", &[agent.process()], || {
        let clusters = agent.envoy_clusters();
        clusters.iter().any(|c| c == ledger) && clusters.iter().any(|c| c == audit)
    });
    secure.mesh.kill_hard();
    dir.remove("audit.yaml");
    dir.write("billing.yaml", &manifests::service("default", "billing", 7070));
    secure.mesh.restart();
    wait_until(
        Instant::now() + DEADLINE,
        "Envoy loses audit and gains billing, keeping ledger",
        &[agent.process(), secure.mesh.process()],
        || {
            let clusters = agent.envoy_clusters();
            clusters.iter().any(|c| c == billing)
                && !clusters.iter().any(|c| c == audit)
                && clusters.iter().any(|c| c == ledger)
        },
    );
    assert_eq!(agent.envoy_stat("cluster.xds-grpc.upstream_cx_total"), Some(1), "Envoy's stream was never cut");
    assert_eq!(agent.envoy_stat("control_plane.connected_state"), Some(1));
    assert!(agent.envoy_admin("/config_dump").unwrap().body.contains("DELTA_GRPC"), "Envoy runs delta xDS");
}

#[test]
fn an_agent_runs_envoy_by_the_proxy_config_it_layers_from_the_mesh_config_and_the_pods_annotation() {
    let dir = MeshDir::new();
    dir.write("ledger.yaml", &manifests::service("default", "ledger", 8080));
    let secure = SecureMesh::start(&dir);
    let token = secure.token("default", "sleep");
    let files = tempfile::TempDir::new().unwrap();
    let mesh = files.path().join("mesh");
    std::fs::write(
        &mesh,
        "defaultConfig:\n  fileFlushInterval: 3s\n  proxyMetadata: {ISTIO_META_TEAM: mesh, ISTIO_META_TIER: mesh}\n  \
         proxyBootstrapTemplatePath: /etc/istio/custom.json\n",
    )
    .unwrap();
    let annotations = files.path().join("annotations");
    // As Kubernetes' downward API writes it: KEY="Go-quoted value" per line.
    std::fs::write(
        &annotations,
        "app=\"sleep\"\nproxy.istio.io/config=\"proxyMetadata:\\n  ISTIO_META_TEAM: pod\\n\"\n",
    )
    .unwrap();
    let agent = Agent::start(
        "agent-proxy-config",
        AgentSpec {
            node_id: sidecar_node("127.0.0.1", "sleep-2", "default"),
            discovery: secure.secure,
            root_cert: &secure.root,
            token: &token,
            extra: vec![
                "--mesh-config".into(),
                mesh.display().to_string(),
                "--pod-annotations".into(),
                annotations.display().to_string(),
            ],
        },
    );
    wait_until(Instant::now() + DEADLINE, "Envoy has the mesh's clusters", &[agent.process()], || {
        agent.envoy_clusters().iter().any(|c| c == "outbound|8080||ledger.default.svc.cluster.local")
    });
    let info: serde_json::Value = serde_json::from_str(&agent.envoy_admin("/server_info").unwrap().body).unwrap();
    let options = &info["command_line_options"];
    assert_eq!(options["file_flush_interval"], "3s", "the mesh's defaultConfig: {options}");
    assert_eq!(options["concurrency"], 1, "the agent's flag is the top layer: {options}");
    let metadata = &info["node"]["metadata"];
    assert_eq!(metadata["TEAM"], "pod", "the annotation over the mesh config: {metadata}");
    assert_eq!(metadata["TIER"], "mesh", "proxyMetadata merged by key: {metadata}");
    assert_eq!(metadata["PROXY_CONFIG"]["fileFlushInterval"], "3s", "the effective config travels: {metadata}");
    let log = agent.log();
    assert!(
        log.contains("defaultConfig.proxyBootstrapTemplatePath: not applied by meshpush yet"),
        "a field the agent does not apply is said: {}",
        agent.process().log_tail(30)
    );
}
