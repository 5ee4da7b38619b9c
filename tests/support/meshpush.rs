//! The real meshpush binary, serving a config directory, for end-to-end tests.
//!
//! [`Meshpush::start`] runs `meshpush serve --config DIR --xds-addr 127.0.0.1:P
//! --admin-addr 127.0.0.1:Q --log-level info,meshpush=debug` on free loopback ports and returns
//! once `GET /ready` on the admin address answers 200, so a test never races the
//! server's startup. [`Meshpush::start_unix`] serves ADS on a Unix socket
//! instead. The process is killed on drop (see [`ChildGuard`]); its log tail
//! goes into every failure message that involves it.
//!
//! A test of control-plane failure uses [`Meshpush::kill_hard`] (SIGKILL) and
//! [`Meshpush::restart`], which starts a new process on the same addresses, as
//! a supervisor would.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use meshpush::serve::ListenAddr;

use super::http::{self, Response};
use super::process::{ChildGuard, free_addr, scratch_dir};

/// How long meshpush may take to load its config and report ready.
const READY_TIMEOUT: Duration = Duration::from_secs(15);

/// A running meshpush server, killed on drop.
pub struct Meshpush {
    child: ChildGuard,
    /// Processes this one replaced (killed), kept for their logs.
    previous: Vec<ChildGuard>,
    xds: ListenAddr,
    admin: SocketAddr,
    /// The config directory (none: the mesh comes from Kubernetes alone).
    config: Option<PathBuf>,
    /// Flags added to `serve`'s (kept for restarts).
    extra: Vec<String>,
    /// Environment variables set for it (kept for restarts).
    env: Vec<(String, String)>,
}

impl Meshpush {
    /// Starts meshpush serving `config_dir` (ADS on a free loopback port) and
    /// waits until it is ready.
    pub fn start(config_dir: &Path) -> Meshpush {
        Meshpush::start_on(config_dir, ListenAddr::Tcp(free_addr()))
    }

    /// Starts meshpush serving `config_dir` with ADS on the Unix socket
    /// `socket`, and waits until it is ready.
    pub fn start_unix(config_dir: &Path, socket: &Path) -> Meshpush {
        Meshpush::start_on(config_dir, ListenAddr::Unix(socket.to_path_buf()))
    }

    /// Starts meshpush with `extra` flags added to `serve`'s, and waits until it is ready.
    pub fn start_with_flags(config_dir: &Path, extra: &[&str]) -> Meshpush {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        Meshpush::start_on_with(config_dir, ListenAddr::Tcp(free_addr()), extra)
    }

    /// Starts meshpush with `extra` flags and the environment variables
    /// `env` (say, `SSL_CERT_FILE` for the servers it fetches from), and
    /// waits until it is ready.
    pub fn start_with_env(config_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Meshpush {
        let extra = extra.iter().map(|s| s.to_string()).collect();
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Meshpush::start_from(Some(config_dir), ListenAddr::Tcp(free_addr()), extra, env)
    }

    fn start_on(config_dir: &Path, xds: ListenAddr) -> Meshpush {
        Meshpush::start_on_with(config_dir, xds, Vec::new())
    }

    /// Starts meshpush reading the mesh from the Kubernetes API server of
    /// `kubeconfig` (and no config directory), with `extra` flags, and waits
    /// until it is ready: every watcher's first list applied.
    pub fn start_kube(kubeconfig: &Path, extra: &[&str]) -> Meshpush {
        let mut flags = vec!["--kubeconfig".to_string(), kubeconfig.display().to_string()];
        flags.extend(extra.iter().map(|s| s.to_string()));
        Meshpush::start_from(None, ListenAddr::Tcp(free_addr()), flags, Vec::new())
    }

    fn start_on_with(config_dir: &Path, xds: ListenAddr, extra: Vec<String>) -> Meshpush {
        Meshpush::start_from(Some(config_dir), xds, extra, Vec::new())
    }

    fn start_from(
        config_dir: Option<&Path>,
        xds: ListenAddr,
        extra: Vec<String>,
        env: Vec<(String, String)>,
    ) -> Meshpush {
        let admin = free_addr();
        let child = spawn("meshpush", config_dir, &xds, admin, &extra, &env);
        Meshpush { child, previous: Vec::new(), xds, admin, config: config_dir.map(Path::to_path_buf), extra, env }
    }

    /// A counter or gauge of `GET /metrics` (the sum over its label sets
    /// when `name` has no labels but the series do); 0 when absent.
    pub fn metric(&self, name: &str) -> f64 {
        let text = self.admin("/metrics").body;
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.rsplit_once(' '))
            .filter(|(series, _)| {
                *series == name || series.strip_prefix(name).is_some_and(|rest| rest.starts_with('{'))
            })
            .filter_map(|(_, value)| value.parse::<f64>().ok())
            .sum()
    }

    /// Kills the server with SIGKILL: no shutdown, no goodbye to the Envoys.
    pub fn kill_hard(&mut self) {
        let status = self.child.kill_hard();
        eprintln!("meshpush (pid {}) killed: {status}", self.child.pid());
    }

    /// Starts a new server on the same config directory and the same xDS and
    /// admin addresses (killing the current one if it still runs), and waits
    /// until it is ready.
    pub fn restart(&mut self) {
        if self.child.exited().is_none() {
            self.child.kill_hard();
        }
        let name = format!("meshpush-{}", self.previous.len() + 2);
        let child = spawn(&name, self.config.as_deref(), &self.xds, self.admin, &self.extra, &self.env);
        self.previous.push(std::mem::replace(&mut self.child, child));
    }

    /// The process guard, for [`super::process::wait_until`] and log tails.
    pub fn process(&self) -> &ChildGuard {
        &self.child
    }

    /// Where the ADS server listens; goes into Envoy bootstraps (its `Display`
    /// is what `--xds-addr` takes).
    pub fn xds_addr(&self) -> &ListenAddr {
        &self.xds
    }

    /// Where the admin endpoints listen.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin
    }

    /// The config directory it serves.
    pub fn config_dir(&self) -> &Path {
        self.config.as_deref().expect("this meshpush serves a config directory")
    }

    /// The last `n` lines of meshpush's log.
    pub fn log_tail(&self, n: usize) -> String {
        self.child.log_tail(n)
    }

    /// The whole log of the running process.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.child.log_path()).unwrap_or_default()
    }

    /// Log tails of the processes this one replaced, oldest first.
    pub fn previous_logs(&self) -> String {
        super::process::logs(&self.previous.iter().collect::<Vec<_>>())
    }

    /// `GET path` from the admin endpoints. Panics if they do not answer.
    pub fn admin(&self, path: &str) -> Response {
        http::get(self.admin, path, &[])
            .unwrap_or_else(|e| panic!("meshpush admin GET {path}: {e}\n{}", self.log_tail(40)))
    }
}

/// Runs `meshpush serve` (with `env` set, through `env(1)`) and waits for `/ready`.
fn spawn(
    name: &str,
    config_dir: Option<&Path>,
    xds: &ListenAddr,
    admin: SocketAddr,
    extra: &[String],
    env: &[(String, String)],
) -> ChildGuard {
    let binary = Path::new(env!("CARGO_BIN_EXE_meshpush"));
    let config = config_dir.map(|dir| ["--config".to_string(), dir.display().to_string()]);
    // Tests poll the admin's expensive views in tight loops (every 20 ms;
    // a debug build takes milliseconds for each): the limits that keep real
    // pollers off the push path would turn their waits into 429s and 503s.
    // A test of the limits sets them itself.
    let unlimited = [("--admin-render-budget", "0s"), ("--admin-views-per-client", "0")];
    let limits: Vec<String> = unlimited
        .into_iter()
        .filter(|(flag, _)| !extra.iter().any(|f| f == flag))
        .flat_map(|(flag, value)| [flag.to_string(), value.to_string()])
        .collect();
    let args = env
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .chain((!env.is_empty()).then(|| binary.display().to_string()))
        .chain(["serve".to_string()])
        .chain(config.into_iter().flatten())
        .chain([
            "--xds-addr".to_string(),
            xds.to_string(),
            "--admin-addr".to_string(),
            admin.to_string(),
            "--log-level".to_string(),
            "info,meshpush=debug".to_string(),
        ])
        .chain(limits)
        .chain(extra.iter().cloned());
    let program = if env.is_empty() { binary } else { Path::new("/usr/bin/env") };
    let mut child = ChildGuard::spawn(name, scratch_dir(name), program, args);
    child.wait_ready(Instant::now() + READY_TIMEOUT, "meshpush GET /ready to answer 200", || {
        http::get(admin, "/ready", &[]).is_ok_and(|r| r.status == 200)
    });
    child
}

/// meshpush serving `dir` inside network namespace `ns` (its xDS and admin
/// ports on the namespace's loopback), as the mesh's CA (`ca_dir`) taking
/// tokens signed by the key set `jwks`, with more `flags` (where its
/// secure port listens, among them); returns once its first snapshot is
/// published.
pub fn meshpush_in(
    ns: &super::netns::NetNs,
    dir: &super::scene::MeshDir,
    ca_dir: &Path,
    jwks: &Path,
    flags: &[&str],
) -> ChildGuard {
    let binary = env!("CARGO_BIN_EXE_meshpush");
    let mut args: Vec<String> = ["netns", "exec", ns.name(), binary, "serve"].map(String::from).to_vec();
    let (config, ca, jwks) =
        (dir.path().display().to_string(), ca_dir.display().to_string(), jwks.display().to_string());
    for flag in [
        "--config",
        &config,
        "--xds-addr",
        "127.0.0.1:15010",
        "--admin-addr",
        "127.0.0.1:15014",
        "--ca-dir",
        &ca,
        "--webhook-addr",
        "off",
        "--jwks",
        &jwks,
    ]
    .into_iter()
    .chain(flags.iter().copied())
    {
        args.push(flag.to_string());
    }
    let mesh = ChildGuard::spawn("meshpush", scratch_dir("meshpush"), Path::new("ip"), args);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    super::process::wait_until(deadline, "meshpush is ready", &[&mesh], || {
        std::fs::read_to_string(mesh.log_path()).is_ok_and(|log| log.contains("first snapshot published"))
    });
    mesh
}
