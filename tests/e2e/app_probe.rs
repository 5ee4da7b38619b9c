//! The application's probes through a running `meshpush agent`, as an
//! injected pod's kubelet makes them: the probes the injector moved to the
//! agent's status port (`ISTIO_KUBE_APP_PROBERS`) reach the app and come
//! back with its answer, readiness answers on the status port too, and
//! `meshpush wait` (an injected pod's `postStart` hook when the
//! application waits for its proxy) returns once the proxy is ready, and
//! `meshpush drain` (a native sidecar's `preStop` hook) has it drain.

use std::process::Command;

use crate::support::agent::{Agent, AgentSpec};
use crate::support::backend::Backend;
use crate::support::manifests::{self, sidecar_node};
use crate::support::process::{free_addr, free_port};
use crate::support::scene::MeshDir;
use crate::support::secure::SecureMesh;

#[test]
fn the_kubelets_probes_reach_the_app_through_the_agent_and_wait_holds_until_the_proxy_is_ready() {
    let dir = MeshDir::new();
    dir.write("ledger.yaml", &manifests::service("default", "ledger", 8080));
    let secure = SecureMesh::start(&dir);
    let token = secure.token("default", "ledger");
    let app = Backend::start("ledger", free_addr());
    let closed = free_port();
    let probers = format!(
        "{{\"/app-health/ledger/readyz\":{{\"httpGet\":{{\"path\":\"/ready\",\"port\":{}}}}},\
         \"/app-health/ledger/livez\":{{\"tcpSocket\":{{\"port\":{closed}}}}}}}",
        app.addr().port()
    );
    let spec = AgentSpec {
        node_id: sidecar_node("127.0.0.1", "ledger-1", "default"),
        discovery: secure.secure,
        root_cert: &secure.root,
        token: &token,
        extra: Vec::new(),
    };
    let agent =
        Agent::start_with_env("agent", spec, &[("ISTIO_KUBE_APP_PROBERS", &probers), ("INSTANCE_IP", "127.0.0.1")]);
    let ready = agent.status_port("/app-health/ledger/readyz").unwrap();
    assert_eq!(ready.status, 200, "{}", ready.body);
    assert_eq!(ready.body, "ledger GET /ready\n", "the app's own answer to its own path comes back");
    assert_eq!(agent.status_port("/app-health/ledger/livez").unwrap().status, 500, "nothing listens there");
    assert_eq!(agent.status_port("/app-health/other/readyz").unwrap().status, 400, "no such probe");
    assert_eq!(agent.status_port("/healthz/ready").unwrap().status, 200, "readiness on the status port too");

    let wait = Command::new(env!("CARGO_BIN_EXE_meshpush"))
        .args(["wait", "--timeout", "20s", "--url"])
        .arg(format!("http://{}/healthz/ready", agent.readiness_addr()))
        .output()
        .unwrap();
    assert!(wait.status.success(), "{}", String::from_utf8_lossy(&wait.stderr));
    let never = Command::new(env!("CARGO_BIN_EXE_meshpush"))
        .args(["wait", "--timeout", "1s", "--period", "100ms", "--url"])
        .arg(format!("http://127.0.0.1:{closed}/healthz/ready"))
        .output()
        .unwrap();
    assert!(!never.status.success(), "nothing ready there");
    assert!(String::from_utf8_lossy(&never.stderr).contains("was not ready within 1s"));

    // A native sidecar's preStop: the agent has Envoy drain.
    let drain = Command::new(env!("CARGO_BIN_EXE_meshpush"))
        .arg("drain")
        .arg(format!("--url=http://{}/drain", agent.status_port_addr()))
        .output()
        .unwrap();
    assert!(drain.status.success(), "{}", String::from_utf8_lossy(&drain.stderr));
    crate::support::process::wait_until(
        std::time::Instant::now() + std::time::Duration::from_secs(10),
        "the agent to have Envoy drain",
        &[agent.process()],
        || agent.process().log_tail(50).contains("draining Envoy's listeners, as the pod asked"),
    );
}
