//! Processes inside the network namespace of an isolated Envoy
//! ([`Envoy::start_isolated`]): a router that binds `0.0.0.0` (an Ingress's
//! gateway, say) is only reachable there, so its backends listen there and
//! its clients connect from there.
//!
//! * [`NamespacedBackend`]: an HTTP server (Python's standard library) that
//!   answers as [`super::backend::Backend`] does: 200, `x-backend: NAME`,
//!   `x-request-path`, each request header as `x-echo-<name>`.
//! * [`get`]: one request with curl, entered into the namespace.
//!
//! Both enter the namespace with `nsenter`, as the Envoy's own user
//! namespace requires when it has one.

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use super::envoy::Envoy;
use super::process::{ChildGuard, scratch_dir};

/// The server a [`NamespacedBackend`] runs (python: NAME HOST PORT), for
/// tests that run it in namespaces of their own too.
pub const ECHO_SERVER: &str = r#"
import http.server, sys
name, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
class Echo(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = f"{name} GET {self.path}\n".encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.send_header("x-backend", name)
        self.send_header("x-request-path", self.path)
        for k, v in self.headers.items():
            self.send_header("x-echo-" + k.lower(), v)
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer((host, port), Echo).serve_forever()
"#;

/// `nsenter` into `envoy`'s network namespace (and its user namespace, when
/// it has its own), followed by `program`.
fn entered(envoy: &Envoy, program: &str) -> Command {
    let pid = envoy.process().pid().to_string();
    let own_user_ns =
        std::fs::read_link(format!("/proc/{pid}/ns/user")).ok() != std::fs::read_link("/proc/self/ns/user").ok();
    let mut command = Command::new("nsenter");
    command.args(["--target", &pid, "--net"]);
    if own_user_ns {
        command.args(["--user", "--preserve-credentials"]);
    }
    command.arg("--").arg(program);
    command
}

/// A backend in an isolated Envoy's namespace; stops on drop.
pub struct NamespacedBackend {
    _process: ChildGuard,
}

impl NamespacedBackend {
    /// Starts backend `name` on `addr` in `envoy`'s namespace and waits until it answers.
    pub fn start(envoy: &Envoy, name: &str, addr: SocketAddr) -> NamespacedBackend {
        let command = entered(envoy, "python3");
        let mut args: Vec<String> = command.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        args.extend([
            "-c".to_string(),
            ECHO_SERVER.to_string(),
            name.to_string(),
            addr.ip().to_string(),
            addr.port().to_string(),
        ]);
        let mut process =
            ChildGuard::spawn(&format!("backend-{name}"), scratch_dir(name), std::path::Path::new("nsenter"), &args);
        process.wait_ready(Instant::now() + Duration::from_secs(15), "the backend to answer", || {
            get(envoy, addr, "probe", "/").is_ok_and(|(status, _)| status == 200)
        });
        NamespacedBackend { _process: process }
    }
}

/// `GET path` with `Host: host` to `addr` inside `envoy`'s namespace:
/// `(status, x-backend)`.
pub fn get(envoy: &Envoy, addr: SocketAddr, host: &str, path: &str) -> Result<(u16, String), String> {
    let out = entered(envoy, "curl")
        .args(["-sS", "--max-time", "5", "-o", "/dev/null", "-D", "-", "-H"])
        .arg(format!("host: {host}"))
        .arg(format!("http://{addr}{path}"))
        .output()
        .map_err(|e| format!("run curl: {e}"))?;
    if !out.status.success() {
        return Err(format!("curl: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).ok_or("no status line")?;
    let backend = head.lines().find_map(|l| l.strip_prefix("x-backend:")).map(|v| v.trim().to_string());
    Ok((status, backend.unwrap_or_default()))
}
