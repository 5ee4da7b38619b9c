//! The real meshpush binary, serving a config directory, for end-to-end tests.
//!
//! [`Meshpush::start`] runs `meshpush serve --config DIR --xds-addr 127.0.0.1:P
//! --admin-addr 127.0.0.1:Q --log-level debug` on free loopback ports and returns
//! once `GET /ready` on the admin address answers 200, so a test never races the
//! server's startup. The process is killed on drop (see [`ChildGuard`]); its log
//! tail goes into every failure message that involves it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::http::{self, Response};
use super::process::{ChildGuard, free_addr, scratch_dir};

/// How long meshpush may take to load its config and report ready.
const READY_TIMEOUT: Duration = Duration::from_secs(15);

/// A running meshpush server, killed on drop.
pub struct Meshpush {
    child: ChildGuard,
    xds: SocketAddr,
    admin: SocketAddr,
    config: PathBuf,
}

impl Meshpush {
    /// Starts meshpush serving `config_dir` and waits until it is ready.
    pub fn start(config_dir: &Path) -> Meshpush {
        let (xds, admin) = (free_addr(), free_addr());
        let binary = Path::new(env!("CARGO_BIN_EXE_meshpush"));
        let args = [
            "serve".to_string(),
            "--config".to_string(),
            config_dir.display().to_string(),
            "--xds-addr".to_string(),
            xds.to_string(),
            "--admin-addr".to_string(),
            admin.to_string(),
            "--log-level".to_string(),
            "debug".to_string(),
        ];
        let mut child = ChildGuard::spawn("meshpush", scratch_dir("meshpush"), binary, args);
        child.wait_ready(Instant::now() + READY_TIMEOUT, "meshpush GET /ready to answer 200", || {
            http::get(admin, "/ready", &[]).is_ok_and(|r| r.status == 200)
        });
        Meshpush { child, xds, admin, config: config_dir.to_path_buf() }
    }

    /// The process guard, for [`super::process::wait_until`] and log tails.
    pub fn process(&self) -> &ChildGuard {
        &self.child
    }

    /// Where the ADS server listens; goes into Envoy bootstraps.
    pub fn xds_addr(&self) -> SocketAddr {
        self.xds
    }

    /// Where the admin endpoints listen.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin
    }

    /// The config directory it serves.
    pub fn config_dir(&self) -> &Path {
        &self.config
    }

    /// The last `n` lines of meshpush's log.
    pub fn log_tail(&self, n: usize) -> String {
        self.child.log_tail(n)
    }

    /// `GET path` from the admin endpoints. Panics if they do not answer.
    pub fn admin(&self, path: &str) -> Response {
        http::get(self.admin, path, &[])
            .unwrap_or_else(|e| panic!("meshpush admin GET {path}: {e}\n{}", self.log_tail(40)))
    }
}
