//! `meshpush agent` for tests: the real binary beside a real Envoy, as
//! pilot-agent runs beside one in a pod, dialling a meshpush's secure port.
//!
//! An [`Agent`] owns the agent's process (and so Envoy's: the agent starts
//! Envoy in its own process group, which the guard kills on drop), its
//! socket directory and its ports: Envoy's admin, the status port. It reads
//! Envoy's admin API and the agent's SDS socket for the tests.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{Secret, secret};
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::envoy::service::secret::v3::secret_discovery_service_client::SecretDiscoveryServiceClient;
use prost::Message as _;

use super::envoy::envoy_binary;
use super::http::{self, Response};
use super::process::{ChildGuard, free_addr, free_port, scratch_dir};

/// How long an agent may take to get its certificate and a live Envoy.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// What an agent is started with.
pub struct AgentSpec<'a> {
    /// Its node id.
    pub node_id: String,
    /// meshpush's secure port.
    pub discovery: SocketAddr,
    /// The mesh root (meshpush's `ca-dir/root-cert.pem`).
    pub root_cert: &'a Path,
    /// The service-account token.
    pub token: &'a str,
    /// More flags.
    pub extra: Vec<String>,
}

/// A running agent and its Envoy.
pub struct Agent {
    child: ChildGuard,
    admin: SocketAddr,
    status: SocketAddr,
    status_port: SocketAddr,
    socket_dir: PathBuf,
}

impl Agent {
    /// Starts `meshpush agent` (interception NONE, one Envoy worker) without
    /// waiting for it.
    pub fn spawn(name: &str, spec: AgentSpec<'_>) -> Agent {
        Agent::spawn_with_env(name, spec, &[])
    }

    /// [`Agent::spawn`] with `env` set (through `env(1)`).
    pub fn spawn_with_env(name: &str, spec: AgentSpec<'_>, env: &[(&str, &str)]) -> Agent {
        let mut prefix: Vec<String> = Vec::new();
        if !env.is_empty() {
            prefix.push("env".into());
            prefix.extend(env.iter().map(|(k, v)| format!("{k}={v}")));
        }
        Agent::spawn_via(name, spec, prefix)
    }

    /// [`Agent::spawn`] inside network namespace `netns` (`ip netns exec`):
    /// its ports are the namespace's, so read them from there.
    pub fn spawn_in(netns: &str, name: &str, spec: AgentSpec<'_>) -> Agent {
        Agent::spawn_via(name, spec, vec!["ip".into(), "netns".into(), "exec".into(), netns.into()])
    }

    /// The agent of the demo waypoint (`manifests::demo_waypoint`: Pod
    /// `waypoint-0` of `demo` at `ip`, with its pods' labels) inside `ns`.
    pub fn demo_waypoint_in(
        ns: &super::netns::NetNs,
        ip: &str,
        discovery: SocketAddr,
        root_cert: &Path,
        token: &str,
    ) -> Agent {
        let spec = AgentSpec {
            node_id: super::manifests::demo_waypoint_node(ip),
            discovery,
            root_cert,
            token,
            extra: super::manifests::waypoint_label_flags(),
        };
        Agent::spawn_in(ns.name(), "waypoint", spec)
    }

    /// Whether its readiness probe answers 200, asked from inside `ns`
    /// (an agent started with [`Agent::spawn_in`]).
    pub fn ready_in(&self, ns: &super::netns::NetNs) -> bool {
        let url = format!("http://{}/healthz/ready", self.status);
        ns.run("curl", &["-sf", "-o", "/dev/null", &url]).status.success()
    }

    /// Starts the agent through `prefix` (a program and its first
    /// arguments, before the agent's binary), or directly when it is empty.
    fn spawn_via(name: &str, spec: AgentSpec<'_>, prefix: Vec<String>) -> Agent {
        let dir = scratch_dir(name);
        let token_file = dir.path().join("token");
        std::fs::write(&token_file, spec.token).expect("write the token");
        let socket_dir = dir.path().join("proxy");
        let admin_port = free_port();
        let status = free_addr();
        let status_port = free_addr();
        let mut args: Vec<String> = vec![
            "agent".into(),
            "--node-id".into(),
            spec.node_id,
            "--discovery-address".into(),
            spec.discovery.to_string(),
            "--root-cert".into(),
            spec.root_cert.display().to_string(),
            "--token-file".into(),
            token_file.display().to_string(),
            "--interception".into(),
            "NONE".into(),
            "--admin-port".into(),
            admin_port.to_string(),
            "--socket-dir".into(),
            socket_dir.display().to_string(),
            "--status-addr".into(),
            status.to_string(),
            "--concurrency".into(),
            "1".into(),
            "--drain-duration".into(),
            "1s".into(),
            "--termination-drain-duration".into(),
            "1s".into(),
            "--log-level".into(),
            "info,meshpush=debug".into(),
        ];
        // The tests' Envoy, unless the spec names another (a wrapper).
        if !spec.extra.iter().any(|a| a == "--envoy-binary") {
            args.extend(["--envoy-binary".into(), envoy_binary().display().to_string()]);
        }
        // The status port on the readiness port's address, free (not
        // Istio's 15020, which parallel agents would share).
        if !spec.extra.iter().any(|a| a == "--status-port") {
            args.extend(["--status-port".into(), status_port.port().to_string()]);
        }
        args.extend(spec.extra);
        let binary = Path::new(env!("CARGO_BIN_EXE_meshpush"));
        let child = match prefix.split_first() {
            None => ChildGuard::spawn(name, dir, binary, args),
            Some((program, first)) => {
                let mut all: Vec<String> = first.to_vec();
                all.push(binary.display().to_string());
                all.extend(args);
                ChildGuard::spawn(name, dir, Path::new(program), all)
            }
        };
        let status_port = SocketAddr::new(status.ip(), status_port.port());
        Agent { child, admin: SocketAddr::from((Ipv4Addr::LOCALHOST, admin_port)), status, status_port, socket_dir }
    }

    /// [`Agent::spawn`], then waits until its readiness probe answers 200.
    pub fn start(name: &str, spec: AgentSpec<'_>) -> Agent {
        Agent::start_with_env(name, spec, &[])
    }

    /// [`Agent::spawn_with_env`], then waits until its readiness probe answers 200.
    pub fn start_with_env(name: &str, spec: AgentSpec<'_>, env: &[(&str, &str)]) -> Agent {
        let mut agent = Agent::spawn_with_env(name, spec, env);
        let status = agent.status;
        agent.child.wait_ready(Instant::now() + READY_TIMEOUT, "the agent's /healthz/ready to answer 200", || {
            http::get(status, "/healthz/ready", &[]).is_ok_and(|r| r.status == 200)
        });
        agent
    }

    /// The process guard.
    pub fn process(&self) -> &ChildGuard {
        &self.child
    }

    /// The process guard, mutably (to wait for or stop the agent).
    pub fn process_mut(&mut self) -> &mut ChildGuard {
        &mut self.child
    }

    /// Envoy's admin address (on the loopback of the agent's namespace).
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin
    }

    /// The readiness probe's answer.
    pub fn readiness(&self) -> std::io::Result<Response> {
        http::get(self.status, "/healthz/ready", &[])
    }

    /// The readiness port's address.
    pub fn readiness_addr(&self) -> SocketAddr {
        self.status
    }

    /// The status port's address.
    pub fn status_port_addr(&self) -> SocketAddr {
        self.status_port
    }

    /// `GET path` from the agent's status port (application probes).
    pub fn status_port(&self, path: &str) -> std::io::Result<Response> {
        http::get(self.status_port, path, &[])
    }

    /// `GET path` from Envoy's admin API.
    pub fn envoy_admin(&self, path: &str) -> std::io::Result<Response> {
        http::get(self.admin, path, &[])
    }

    /// An Envoy stat (counter or gauge), if Envoy answers and has it.
    pub fn envoy_stat(&self, name: &str) -> Option<u64> {
        let body = self.envoy_admin(&format!("/stats?filter=^{}$", name.replace('.', "\\."))).ok()?.body;
        body.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(": ")?.trim().parse().ok())
    }

    /// The names of the clusters Envoy has.
    pub fn envoy_clusters(&self) -> Vec<String> {
        let body = self.envoy_admin("/clusters?format=json").map(|r| r.body).unwrap_or_default();
        let json: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        json["cluster_statuses"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str().map(str::to_string))
            .collect()
    }

    /// The pid of the Envoy the agent runs now (its child process), if any.
    pub fn envoy_pid(&self) -> Option<u32> {
        let agent = self.child.pid().to_string();
        std::fs::read_dir("/proc").ok()?.flatten().find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // `pid (comm) state ppid …`; comm may hold spaces, so split after it.
            let (comm, rest) = stat.rsplit_once(')')?;
            let ppid = rest.split_whitespace().nth(1)?;
            (ppid == agent && comm.ends_with("(envoy")).then_some(pid)
        })
    }

    /// The agent's SDS socket.
    pub fn sds_socket(&self) -> PathBuf {
        self.socket_dir.join("SDS")
    }

    /// The combined log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.child.log_path()).unwrap_or_default()
    }
}

/// An SDS stream to an agent's socket, as Envoy opens one per secret.
pub struct SdsStream {
    requests: tokio::sync::mpsc::Sender<DiscoveryRequest>,
    responses: tonic::Streaming<DiscoveryResponse>,
}

impl SdsStream {
    /// Opens a stream on `socket` asking for `names`.
    pub async fn open(socket: &Path, names: &[&str]) -> SdsStream {
        let socket = socket.to_path_buf();
        let channel = tonic::transport::Endpoint::from_static("http://agent.sds")
            .connect_with_connector(UnixConnector(socket))
            .await
            .expect("dial the agent's SDS socket");
        let (requests, rx) = tokio::sync::mpsc::channel(4);
        requests
            .send(DiscoveryRequest {
                type_url: "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret".into(),
                resource_names: names.iter().map(|n| n.to_string()).collect(),
                ..Default::default()
            })
            .await
            .unwrap();
        let responses = SecretDiscoveryServiceClient::new(channel)
            .stream_secrets(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
            .expect("the SDS stream opens")
            .into_inner();
        SdsStream { requests, responses }
    }

    /// The next response (within `wait`): its version, nonce and secrets.
    pub async fn next(&mut self, wait: Duration) -> (String, String, Vec<Secret>) {
        let response = tokio::time::timeout(wait, self.responses.message())
            .await
            .expect("an SDS response in time")
            .expect("the SDS stream stays up")
            .expect("the SDS stream does not end");
        let secrets = response.resources.iter().map(|any| Secret::decode(&any.value[..]).expect("a Secret")).collect();
        (response.version_info, response.nonce, secrets)
    }

    /// ACKs a response of `version` and `nonce` for `names`.
    pub async fn ack(&self, names: &[&str], version: &str, nonce: &str) {
        let _ = self
            .requests
            .send(DiscoveryRequest {
                type_url: "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret".into(),
                resource_names: names.iter().map(|n| n.to_string()).collect(),
                version_info: version.into(),
                response_nonce: nonce.into(),
                ..Default::default()
            })
            .await;
    }
}

/// The PEM a Secret's `tls_certificate` chain or `validation_context` CA holds.
pub fn secret_pem(secret: &Secret) -> String {
    use envoy_types::pb::envoy::config::core::v3::data_source::Specifier;
    let source = match &secret.r#type {
        Some(secret::Type::TlsCertificate(tls)) => tls.certificate_chain.as_ref(),
        Some(secret::Type::ValidationContext(ca)) => ca.trusted_ca.as_ref(),
        _ => None,
    };
    match source.and_then(|s| s.specifier.as_ref()) {
        Some(Specifier::InlineBytes(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
        other => panic!("an inline secret, not {other:?}"),
    }
}

/// Dials a Unix socket, for tonic.
#[derive(Clone)]
struct UnixConnector(PathBuf);

impl tower_service::Service<::http::Uri> for UnixConnector {
    type Response = hyper_util::rt::TokioIo<tokio::net::UnixStream>;
    type Error = std::io::Error;
    type Future = futures::future::BoxFuture<'static, std::io::Result<Self::Response>>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: ::http::Uri) -> Self::Future {
        let path = self.0.clone();
        Box::pin(async move { Ok(hyper_util::rt::TokioIo::new(tokio::net::UnixStream::connect(path).await?)) })
    }
}
