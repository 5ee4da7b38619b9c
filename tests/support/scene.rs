//! One end-to-end scenario: a mesh written as YAML into a directory of its own,
//! meshpush serving it, loopback backends playing the workloads, and the
//! Envoys under test.
//!
//! A [`Scene`] owns every process and thread it starts, so a failing test
//! still kills them all. It also owns the failure report: when the test
//! panics — a [`Scene::wait`] that timed out, an `assert!`, an `unwrap` — the
//! scene prints meshpush's log tail and, for each Envoy, its log tail and the
//! config_dump section the test last said was relevant (the `focus` of its
//! last wait, or [`Scene::focus`]).
//!
//! Config edits go through [`MeshDir`], which writes each file beside the
//! directory and renames it into place: meshpush never reads half a file, as
//! with `kubectl apply` or an editor's atomic save.

use std::cell::Cell;
use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use meshpush::bootstrap::BootstrapOptions;
use tempfile::TempDir;

use super::backend::Backend;
use super::envoy::{Envoy, Section, envoy_binary};
use super::meshpush::Meshpush;
use super::process::{Check, free_port, wait_until_report};

/// A config directory meshpush watches, edited atomically.
pub struct MeshDir {
    /// Holds `config/` (watched) and `staging/` (where files are written first).
    root: TempDir,
}

impl MeshDir {
    /// An empty config directory.
    pub fn new() -> MeshDir {
        let root = tempfile::Builder::new().prefix("meshpush-test-mesh-").tempdir().expect("create the mesh dir");
        fs::create_dir(root.path().join("config")).unwrap();
        fs::create_dir(root.path().join("staging")).unwrap();
        MeshDir { root }
    }

    /// The directory meshpush serves.
    pub fn path(&self) -> PathBuf {
        self.root.path().join("config")
    }

    /// Writes `text` to `name` in the config directory with one rename.
    pub fn write(&self, name: &str, text: &str) {
        let staged = self.root.path().join("staging").join(name);
        fs::write(&staged, text).unwrap_or_else(|e| panic!("write {}: {e}", staged.display()));
        fs::rename(&staged, self.path().join(name)).unwrap_or_else(|e| panic!("move {name} into place: {e}"));
    }

    /// Deletes `name` from the config directory.
    pub fn remove(&self, name: &str) {
        fs::remove_file(self.path().join(name)).unwrap_or_else(|e| panic!("remove {name}: {e}"));
    }
}

impl Default for MeshDir {
    fn default() -> Self {
        MeshDir::new()
    }
}

/// The processes and files of one scenario. See the module docs.
pub struct Scene {
    // Fields drop in order: Envoys first, then meshpush, then the backends
    // Envoys were sending to, then the directory.
    envoys: Vec<Envoy>,
    mesh: Meshpush,
    backends: Vec<Backend>,
    dir: MeshDir,
    focus: Cell<Section>,
}

impl Scene {
    /// Writes `files` (name, YAML) into a fresh config directory, starts a
    /// backend per `(name, address)`, and meshpush serving the directory over
    /// TCP.
    pub fn start(files: &[(&str, &str)], backends: &[(&str, &str)]) -> Scene {
        Scene::start_with(files, backends, Meshpush::start)
    }

    /// [`Scene::start`] with meshpush serving ADS on a Unix socket in the
    /// scene's directory.
    pub fn start_unix(files: &[(&str, &str)], backends: &[(&str, &str)]) -> Scene {
        Scene::start_with(files, backends, |dir| {
            let socket = dir.parent().unwrap().join("xds.sock");
            Meshpush::start_unix(dir, &socket)
        })
    }

    /// A scene whose meshpush `mesh` starts on the scene's config directory.
    pub fn start_with(
        files: &[(&str, &str)],
        backends: &[(&str, &str)],
        mesh: impl FnOnce(&Path) -> Meshpush,
    ) -> Scene {
        // On a fresh machine installing Envoy is the slow part; it must not
        // eat into any deadline.
        envoy_binary();
        let dir = MeshDir::new();
        for (name, text) in files {
            dir.write(name, text);
        }
        let backends = backends.iter().map(|(name, addr)| Backend::start(name, parse_addr(addr))).collect();
        let mesh = mesh(&dir.path());
        Scene { envoys: Vec::new(), mesh, backends, dir, focus: Cell::new(Section::Listeners) }
    }

    /// The config directory.
    pub fn dir(&self) -> &MeshDir {
        &self.dir
    }

    /// The meshpush server.
    pub fn mesh(&self) -> &Meshpush {
        &self.mesh
    }

    /// The meshpush server, to kill or restart it.
    pub fn mesh_mut(&mut self) -> &mut Meshpush {
        &mut self.mesh
    }

    /// Starts one more backend.
    pub fn add_backend(&mut self, name: &str, addr: &str) {
        self.backends.push(Backend::start(name, parse_addr(addr)));
    }

    /// Stops backend `name` (it no longer accepts connections).
    pub fn remove_backend(&mut self, name: &str) {
        let i = self.backends.iter().position(|b| b.name() == name).unwrap_or_else(|| panic!("no backend {name}"));
        self.backends.remove(i);
    }

    /// Backend `name`.
    pub fn backend(&self, name: &str) -> &Backend {
        self.backends.iter().find(|b| b.name() == name).unwrap_or_else(|| panic!("no backend {name}"))
    }

    /// Bootstrap options for a sidecar `node_id` with workload `labels`, in
    /// NONE mode (outbound listeners bind 127.0.0.1:PORT), connected to this
    /// scene's meshpush, with a free admin port.
    pub fn sidecar(&self, node_id: &str, labels: &[(&str, &str)]) -> BootstrapOptions {
        let mut opts = BootstrapOptions::new(node_id, self.mesh.xds_addr().to_string());
        opts.admin_port = free_port();
        opts.labels = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        opts.interception = "NONE".into();
        opts
    }

    /// Starts Istio's ingress gateway as Envoy `gateway`: router
    /// `ingress-1.istio-system` at 127.0.0.1, labelled `istio:
    /// ingressgateway` and `app: istio-ingressgateway`, as Istio's chart
    /// labels it.
    pub fn add_ingress_gateway(&mut self) {
        let mut opts = self.sidecar(
            &super::manifests::router_node("127.0.0.1", "ingress-1", "istio-system"),
            &[("istio", "ingressgateway"), ("app", "istio-ingressgateway")],
        );
        opts.interception = "REDIRECT".into();
        self.add_envoy("gateway", &opts);
    }

    /// Starts Envoy `name` from `opts` and keeps it in the scene.
    pub fn add_envoy(&mut self, name: &str, opts: &BootstrapOptions) {
        assert!(self.envoys.iter().all(|e| e.name() != name), "two Envoys named {name}");
        self.envoys.push(Envoy::start_named(name, opts));
    }

    /// Stops Envoy `name` and forgets it.
    pub fn remove_envoy(&mut self, name: &str) {
        let i = self.envoys.iter().position(|e| e.name() == name).unwrap_or_else(|| panic!("no Envoy {name}"));
        self.envoys.remove(i);
    }

    /// Keeps an Envoy started elsewhere (an isolated one, say) in the scene.
    pub fn keep_envoy(&mut self, envoy: Envoy) {
        self.envoys.push(envoy);
    }

    /// Envoy `name`.
    pub fn envoy(&self, name: &str) -> &Envoy {
        self.envoys.iter().find(|e| e.name() == name).unwrap_or_else(|| panic!("no Envoy {name}"))
    }

    /// Every Envoy, in start order.
    pub fn envoys(&self) -> &[Envoy] {
        &self.envoys
    }

    /// Sets the config_dump section a failure report shows.
    pub fn focus(&self, section: Section) {
        self.focus.set(section);
    }

    /// Polls `cond` until it holds, for at most `timeout`; on timeout the test
    /// fails naming `what` and what the last attempt saw, and the scene
    /// reports `focus` of every Envoy's config_dump.
    pub fn wait<C: Check>(&self, timeout: Duration, what: &str, focus: Section, cond: impl FnMut() -> C) {
        self.focus(focus);
        // The report is printed once, by `drop`, for every kind of failure.
        wait_until_report(Instant::now() + timeout, what, String::new, cond);
    }

    /// Fails unless every Envoy accepted everything meshpush sent it.
    pub fn assert_nothing_rejected(&self) {
        for envoy in &self.envoys {
            let rejected = envoy.rejected_updates();
            assert!(rejected.is_empty(), "{} rejected xDS updates: {rejected:?}", envoy.name());
        }
    }

    /// meshpush's log tail(s) and every Envoy's log tail and focused config_dump section.
    pub fn report(&self) -> String {
        let mut out = self.mesh.previous_logs();
        out.push_str(&super::process::logs(&[self.mesh.process()]));
        for envoy in &self.envoys {
            out.push_str(&envoy.report(self.focus.get()));
        }
        out
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("\n===== scene report (the test failed) =====\n{}", self.report());
        }
    }
}

fn parse_addr(addr: &str) -> SocketAddr {
    addr.parse().unwrap_or_else(|e| panic!("backend address {addr:?}: {e}"))
}
