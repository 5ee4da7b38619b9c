//! Sidecars on the bootstrap Istio's pilot-agent writes (its golden
//! rendering, `tests/data/istio/pkg/bootstrap/testdata/default_golden.json`):
//! a node that says nothing of certificates, delta xDS, an `sds-grpc`
//! cluster, as an Istio sidecar connects. meshpush sends such a proxy mesh
//! mTLS as istiod does: A reaches B's STRICT port over mutual TLS, and B's
//! workload learns A's identity.
//!
//! meshpush's agent serves each Envoy its certificate (SDS) and proxies its
//! ADS, as pilot-agent would: the test hands the agent a wrapper for its
//! Envoy binary, which starts Envoy on the Istio-shaped bootstrap pointed
//! at the agent's sockets instead of the agent's own bootstrap.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::mtls::{B_IP, mesh, peer_authentication};
use crate::support::agent::{Agent, AgentSpec};
use crate::support::backend::Backend;
use crate::support::envoy::envoy_binary;
use crate::support::http;
use crate::support::manifests::sidecar_node;
use crate::support::process::{ChildGuard, free_port, wait_until};
use crate::support::scene::MeshDir;
use crate::support::secure::SecureMesh;
use crate::support::traffic::Request;

const DEADLINE: Duration = Duration::from_secs(30);

/// pilot-agent's bootstrap for the pod `pod` of service account `account`
/// at `ip`, labelled `app`: Istio's golden rendering with this pod's node,
/// its pipes at `@SOCKETS@` (the wrapper fills in the agent's socket
/// directory) and its admin on `@ADMIN_PORT@`. The golden's own listeners
/// (Prometheus on 15090, readiness on 15021) are left out: two sidecars
/// share this host's ports.
fn istio_bootstrap(ip: &str, pod: &str, account: &str, app: &str) -> String {
    let golden =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/istio/pkg/bootstrap/testdata/default_golden.json");
    let mut b: Value = serde_json::from_str(&std::fs::read_to_string(&golden).unwrap()).unwrap();
    b["node"]["id"] = json!(sidecar_node(ip, pod, "default"));
    b["node"]["cluster"] = json!(format!("{app}.default"));
    let meta = b["node"]["metadata"].as_object_mut().unwrap();
    assert!(!meta.contains_key("SDS"), "pilot-agent says nothing of certificates");
    for (key, value) in [
        ("NAMESPACE", json!("default")),
        ("NAME", json!(pod)),
        ("SERVICE_ACCOUNT", json!(account)),
        ("LABELS", json!({"app": app, "security.istio.io/tlsMode": "istio"})),
        ("INTERCEPTION_MODE", json!("NONE")),
        ("CLUSTER_ID", json!("Kubernetes")),
        ("MESH_ID", json!("cluster.local")),
        ("WORKLOAD_NAME", json!(app)),
        ("INSTANCE_IPS", json!(ip)),
    ] {
        meta.insert(key.into(), value);
    }
    b["admin"]["address"]["socket_address"]["port_value"] = json!("@ADMIN_PORT@");
    b["admin"]["profile_path"] = json!("/dev/null");
    let clusters = b["static_resources"]["clusters"].as_array_mut().unwrap();
    for cluster in clusters.iter_mut() {
        let socket = match cluster["name"].as_str() {
            Some("sds-grpc") => "SDS",
            Some("xds-grpc") => "XDS",
            _ => continue,
        };
        let endpoint = &mut cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"];
        endpoint["address"]["pipe"]["path"] = json!(format!("@SOCKETS@/{socket}"));
    }
    b["static_resources"]["listeners"] = json!([]);
    // The admin port is a number in Envoy's JSON: the placeholder is filled in unquoted.
    serde_json::to_string_pretty(&b).unwrap().replace("\"@ADMIN_PORT@\"", "@ADMIN_PORT@")
}

/// A wrapper for the agent's Envoy: it runs the tests' Envoy with the
/// agent's arguments, but on `bootstrap` with the agent's socket directory
/// and admin port (read from the bootstrap the agent wrote).
fn wrapper(dir: &Path, name: &str, bootstrap: &str) -> PathBuf {
    let template = dir.join(format!("{name}.json"));
    std::fs::write(&template, bootstrap).unwrap();
    let script = dir.join(format!("{name}.sh"));
    let text = format!(
        r#"#!/usr/bin/env bash
set -euo pipefail
args=(); next=0
for a in "$@"; do
  if [ "$next" = 1 ]; then
    dir="$(dirname "$a")"
    port="$(awk '/^admin:/ {{f=1}} f && /port_value:/ {{print $2; exit}}' "$a")"
    sed -e "s#@SOCKETS@#$dir#g" -e "s#@ADMIN_PORT@#$port#g" '{template}' > "$dir/istio-bootstrap.json"
    args+=("$dir/istio-bootstrap.json"); next=0; continue
  fi
  [ "$a" = "-c" ] && next=1
  args+=("$a")
done
exec '{envoy}' "${{args[@]}}"
"#,
        template = template.display(),
        envoy = envoy_binary().display()
    );
    std::fs::write(&script, text).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

#[test]
fn sidecars_on_pilot_agents_bootstrap_get_mesh_mtls_as_from_istiod() {
    let (service_port, pod_port) = (free_port(), free_port());
    let backend = Backend::start("b", SocketAddr::from(([127, 0, 0, 1], free_port())));
    let dir = MeshDir::new();
    dir.write("b.yaml", &mesh(service_port, pod_port, backend.addr()));
    dir.write("strict.yaml", &peer_authentication("STRICT"));
    let secure = SecureMesh::start(&dir);
    let files = tempfile::TempDir::new().unwrap();
    let agent = |name: &str, ip: &str, pod: &str, account: &str, app: &str| {
        let envoy = wrapper(files.path(), name, &istio_bootstrap(ip, pod, account, app));
        Agent::start(
            name,
            AgentSpec {
                node_id: sidecar_node(ip, pod, "default"),
                discovery: secure.secure,
                root_cert: &secure.root,
                token: &secure.token("default", account),
                extra: vec![
                    "--label".into(),
                    format!("app={app}"),
                    "--envoy-binary".into(),
                    envoy.display().to_string(),
                ],
            },
        )
    };
    let b = agent("istio-sidecar-b", B_IP, "b-1", "b", "b");
    let a = agent("istio-sidecar-a", "127.0.0.1", "a-1", "a", "a");
    let procs: [&ChildGuard; 3] = [a.process(), b.process(), secure.mesh.process()];
    let through_a = Request::new(SocketAddr::from(([127, 0, 0, 1], service_port)), "b.default.svc.cluster.local");
    wait_until(Instant::now() + DEADLINE, "A reaches B's STRICT port through both sidecars", &procs, || {
        through_a.send().map(drop)
    });

    // Over mutual TLS, on the certificates the agents serve.
    let answer = http::get(through_a.target, "/", &[("host", "b.default.svc.cluster.local")]).unwrap();
    assert_eq!(answer.status, 200, "{}", answer.body);
    let xfcc = answer.header("x-echo-x-forwarded-client-cert").unwrap_or_default().to_string();
    assert!(xfcc.contains("URI=spiffe://cluster.local/ns/default/sa/a"), "A's identity reaches B: {xfcc:?}");
    // (Istio's bootstrap keeps few stats, so the TLS shows in the config.)
    let clusters = a.envoy_admin("/config_dump?resource=dynamic_active_clusters").unwrap().body;
    assert!(clusters.contains("outbound_.") && clusters.contains("ROOTCA"), "A's auto mTLS cluster to B");
    // Both Envoys run on Istio's bootstrap: delta xDS, and no SDS key in their nodes.
    let dump = a.envoy_admin("/config_dump?mask=bootstrap").unwrap().body;
    assert!(dump.contains("DELTA_GRPC") && dump.contains("WORKLOAD_IDENTITY_SOCKET_FILE"), "{dump}");
    // STRICT: plain text is refused.
    let plain = http::get(SocketAddr::from(([127, 0, 0, 2], pod_port)), "/", &[("host", "b")]);
    assert!(plain.is_err() || plain.is_ok_and(|r| r.status != 200), "plain text reached B's STRICT port");
}
