//! Proxyless gRPC for tests: gRPC's own xDS client and server (Python's
//! `grpcio`, `tests/data/proxyless/app.py`), configured by a gRPC
//! bootstrap, never a stand-in.
//!
//! The venv is `.tools/grpc-venv`, installed on first use by
//! `scripts/grpc-venv.sh` (pinned grpcio, a binary wheel from PyPI). A
//! [`GrpcServer`] is an xDS-enabled server answering every method with its
//! name, the method and the client's certificate identity; a
//! [`GrpcClient`] keeps its channels (and so their xDS state) for its
//! whole life and is driven over a loopback HTTP control port.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::http;
use super::process::{ChildGuard, free_addr, scratch_dir};

/// How long a gRPC process may take to start.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// The venv's python, installing the venv when missing. Panics with the
/// installer's output when installation fails.
pub fn python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let script = repo.join("scripts/grpc-venv.sh");
        let out =
            Command::new("bash").arg(&script).output().unwrap_or_else(|e| panic!("run {}: {e}", script.display()));
        let printed = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(
            out.status.success() && Path::new(&printed).is_file(),
            "{} failed ({}), so no grpcio for the tests\nstderr: {}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr),
        );
        PathBuf::from(printed)
    })
}

fn app() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/proxyless/app.py")
}

/// `meshpush bootstrap --grpc` for `node_id` with `labels`, dialling
/// meshpush at `xds` directly (Istio's `grpc-simple` shape), written to `path`.
pub fn plain_bootstrap(path: &Path, node_id: &str, labels: &[(&str, &str)], xds: &str) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_meshpush"));
    command.args(["bootstrap", "--grpc", "--node-id", node_id, "--interception", "NONE", "--xds-addr", xds]);
    for (k, v) in labels {
        command.args(["--label", &format!("{k}={v}")]);
    }
    let out = command.output().expect("run meshpush bootstrap");
    assert!(out.status.success(), "meshpush bootstrap --grpc: {}", String::from_utf8_lossy(&out.stderr));
    std::fs::write(path, &out.stdout).expect("write the gRPC bootstrap");
}

/// `env GRPC_XDS_BOOTSTRAP=… python app.py ARGS…` in its own session.
fn spawn(name: &str, bootstrap: &Path, args: &[String]) -> ChildGuard {
    let mut all = vec![
        format!("GRPC_XDS_BOOTSTRAP={}", bootstrap.display()),
        // The server's "will start serving" line is at INFO.
        "GRPC_VERBOSITY=INFO".to_string(),
        python().display().to_string(),
        "-u".to_string(),
        app().display().to_string(),
    ];
    all.extend(args.iter().cloned());
    ChildGuard::spawn(name, scratch_dir(name), Path::new("env"), all)
}

/// A proxyless gRPC server, killed on drop.
pub struct GrpcServer {
    child: ChildGuard,
}

impl GrpcServer {
    /// Starts server `name` listening on `address` (a loopback address:
    /// its listener is `xds.istio.io/grpc/lds/inbound/ADDRESS`), and waits
    /// until it has started (not until it serves: that takes its listener).
    pub fn start(name: &str, address: SocketAddr, bootstrap: &Path) -> GrpcServer {
        let args = ["server".to_string(), "--name".into(), name.into(), "--address".into(), address.to_string()];
        let mut child = spawn(name, bootstrap, &args);
        let log = child.log_path().to_path_buf();
        child.wait_ready(Instant::now() + START_TIMEOUT, "the gRPC server to start", || {
            std::fs::read_to_string(&log).is_ok_and(|l| l.contains("started "))
        });
        GrpcServer { child }
    }

    /// Whether gRPC says it serves: it got its listener.
    pub fn serving(&self) -> bool {
        std::fs::read_to_string(self.child.log_path()).is_ok_and(|l| l.contains("will start serving"))
    }

    /// The process guard.
    pub fn process(&self) -> &ChildGuard {
        &self.child
    }
}

/// What one call gave: the server's answer, or the status and details.
pub type Outcome = Result<String, (String, String)>;

/// A proxyless gRPC client, killed on drop.
pub struct GrpcClient {
    child: ChildGuard,
    control: SocketAddr,
}

impl GrpcClient {
    /// Starts a client with `bootstrap` and waits for its control port.
    pub fn start(name: &str, bootstrap: &Path) -> GrpcClient {
        let control = free_addr();
        let args = ["client".to_string(), "--control".into(), control.to_string()];
        let mut child = spawn(name, bootstrap, &args);
        child.wait_ready(Instant::now() + START_TIMEOUT, "the gRPC client's control port", || {
            std::net::TcpStream::connect(control).is_ok()
        });
        GrpcClient { child, control }
    }

    /// `count` calls of `method` to `target` (`xds:///HOST:PORT`), each
    /// with `headers`, in order, each with a deadline of 3 s.
    pub fn call(&self, target: &str, method: &str, headers: &[(&str, &str)], count: usize) -> Vec<Outcome> {
        self.call_within(target, method, headers, count, Duration::from_secs(3))
    }

    /// [`GrpcClient::call`] with each call's deadline `timeout`.
    pub fn call_within(
        &self,
        target: &str,
        method: &str,
        headers: &[(&str, &str)],
        count: usize,
        timeout: Duration,
    ) -> Vec<Outcome> {
        let mut path = format!(
            "/call?target={}&method={}&count={count}&timeout={}",
            encode(target),
            encode(method),
            timeout.as_secs_f64()
        );
        for (k, v) in headers {
            path.push_str(&format!("&header={}", encode(&format!("{k}={v}"))));
        }
        let response = http::get_within(self.control, &path, timeout * count as u32 + Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("the gRPC client's control port: {e}\n{}", self.child.log_tail(30)));
        assert_eq!(response.status, 200, "the control port refused {path}: {}", response.body);
        let body: serde_json::Value = serde_json::from_str(&response.body).expect("JSON from the control port");
        body["results"]
            .as_array()
            .expect("results")
            .iter()
            .map(|r| match r["ok"].as_str() {
                Some(answer) => Ok(answer.to_string()),
                None => Err((
                    r["error"].as_str().unwrap_or_default().to_string(),
                    r["details"].as_str().unwrap_or_default().to_string(),
                )),
            })
            .collect()
    }

    /// The first word of each call's answer (the server's name), or
    /// `STATUS` for a failed call.
    pub fn servers(&self, target: &str, method: &str, headers: &[(&str, &str)], count: usize) -> Vec<String> {
        self.call(target, method, headers, count)
            .into_iter()
            .map(|o| match o {
                Ok(answer) => answer.split_whitespace().next().unwrap_or_default().to_string(),
                Err((status, _)) => status,
            })
            .collect()
    }

    /// The process guard.
    pub fn process(&self) -> &ChildGuard {
        &self.child
    }
}

/// Percent-encodes what a query value may not hold as is.
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' | b':' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
