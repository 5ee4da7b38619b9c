//! Child processes for tests, and waiting on them.
//!
//! A [`ChildGuard`] owns one child started through `setsid`, so the child leads a
//! session and process group of its own: signals aimed at the test's group (a CI
//! runner's timeout, a shell exiting) do not reach it, and dropping the guard kills
//! exactly that group — SIGTERM, then SIGKILL after a grace period — whether the
//! test passed or panicked. Its stdout and stderr go to a log file in a scratch
//! directory; a failing test keeps that directory and prints where it is.
//!
//! [`wait_until`] is meshpush's one way tests wait (`meshpush::testing::wait`):
//! poll a condition until a deadline, and on timeout panic with what was awaited
//! and here the log tails of the processes involved. Tests never sleep for a
//! fixed time to let something happen.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process, kill_process_group};
use tempfile::TempDir;

/// How often [`ChildGuard::wait_ready`] polls.
pub const POLL: Duration = Duration::from_millis(50);

pub use meshpush::testing::wait::Check;

/// Lines of each log a failure message shows.
const TAIL_LINES: usize = 60;

/// How long a child gets to exit on SIGTERM before it is killed.
const GRACE: Duration = Duration::from_secs(3);

/// A scratch directory for one process's files (config, logs), named after it.
pub fn scratch_dir(name: &str) -> TempDir {
    tempfile::Builder::new().prefix(&format!("meshpush-test-{name}-")).tempdir().expect("create a scratch directory")
}

/// A loopback port nobody listens on right now. Another process could take it
/// before the caller binds it; on these single-purpose machines that is rare.
pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).and_then(|l| l.local_addr()).expect("bind 127.0.0.1:0").port()
}

/// `127.0.0.1:` + [`free_port`].
pub fn free_addr() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()))
}

/// A running child process that dies with this guard.
pub struct ChildGuard {
    name: String,
    child: Child,
    log: PathBuf,
    /// `None` only while dropping.
    dir: Option<TempDir>,
}

impl ChildGuard {
    /// Starts `program args…` in a new session (`setsid`), logging stdout and stderr
    /// to `<dir>/<name>.log`. The guard owns `dir`, which may hold other files the
    /// child reads (its config).
    pub fn spawn<I, S>(name: &str, dir: TempDir, program: &Path, args: I) -> ChildGuard
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let log = dir.path().join(format!("{name}.log"));
        let out = File::create(&log).expect("create the child's log file");
        let err = out.try_clone().expect("clone the log file handle");
        // The forked child is not a group leader, so setsid(1) calls setsid(2) and
        // execs in place: the pid we hold is the session's and the group's id.
        let child = Command::new("setsid")
            .arg(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("start {name} ({}) via setsid: {e}", program.display()));
        ChildGuard { name: name.to_string(), child, log, dir: Some(dir) }
    }

    /// The name given at spawn, used in messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The child's pid (also its process group and session id).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The scratch directory the guard owns.
    pub fn dir(&self) -> &Path {
        self.dir.as_ref().expect("dir is present until drop").path()
    }

    /// The log file path.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The last `n` lines of the child's combined stdout and stderr.
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read(&self.log).map(|b| String::from_utf8_lossy(&b).into_owned());
        match text {
            Ok(text) => {
                let lines: Vec<&str> = text.lines().collect();
                lines[lines.len().saturating_sub(n)..].join("\n")
            }
            Err(e) => format!("(cannot read {}: {e})", self.log.display()),
        }
    }

    /// The exit status, if the child has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("poll the child")
    }

    /// Kills the child's process group with SIGKILL — no chance to clean up, as
    /// when a machine or container dies — and reaps it.
    pub fn kill_hard(&mut self) -> ExitStatus {
        // ESRCH (already gone) is fine: wait() below reports how it ended.
        let _ = kill_process_group(Pid::from_child(&self.child), Signal::KILL);
        self.child.wait().expect("reap the killed child")
    }

    /// Sends the child (not its group) SIGTERM, as an orchestrator stops a
    /// container, and waits for it to exit; `None` if it has not by `deadline`.
    pub fn terminate(&mut self, deadline: Instant) -> Option<ExitStatus> {
        let _ = kill_process(Pid::from_child(&self.child), Signal::TERM);
        while Instant::now() < deadline {
            if let Some(status) = self.exited() {
                return Some(status);
            }
            thread::sleep(Duration::from_millis(20));
        }
        self.exited()
    }

    /// Waits until `ready()` holds. Panics with the log tail if the child exits
    /// first or `deadline` passes: a process that never gets ready fails fast.
    pub fn wait_ready(&mut self, deadline: Instant, what: &str, mut ready: impl FnMut() -> bool) {
        loop {
            if let Some(status) = self.exited() {
                panic!("{} exited ({status}) before {what}\n{}", self.name, logs(&[self]));
            }
            if ready() {
                return;
            }
            if Instant::now() >= deadline {
                panic!("timed out waiting for {what}\n{}", logs(&[self]));
            }
            thread::sleep(POLL);
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let group = Pid::from_child(&self.child);
        // ESRCH (already gone) is the only expected error, and nothing else is fixable here.
        let _ = kill_process_group(group, Signal::TERM);
        let deadline = Instant::now() + GRACE;
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(20));
        }
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = kill_process_group(group, Signal::KILL);
            let _ = self.child.wait();
        }
        if let Some(dir) = self.dir.take()
            && thread::panicking()
        {
            let kept = dir.keep();
            eprintln!("{} log kept at {}", self.name, kept.join(format!("{}.log", self.name)).display());
        }
    }
}

/// The log tails of `procs`, each under a header, for failure messages.
pub fn logs(procs: &[&ChildGuard]) -> String {
    let mut out = String::new();
    for p in procs {
        let _ = write!(out, "\n----- {} (pid {}) log tail -----\n{}\n", p.name, p.pid(), p.log_tail(TAIL_LINES));
    }
    out
}

/// Polls `cond` until it holds (meshpush's one [`wait_until`](meshpush::testing::wait::wait_until)).
/// On `deadline`, panics naming `what`, what the last attempt saw, and the log
/// tails of `procs` (typically Envoy and meshpush).
pub fn wait_until<C: Check>(deadline: Instant, what: &str, procs: &[&ChildGuard], cond: impl FnMut() -> C) {
    wait_until_report(deadline, what, || logs(procs), cond);
}

/// [`wait_until`] whose timeout message ends with `report()` instead of log
/// tails, for callers that know more (an Envoy's config_dump, say) or that
/// report elsewhere (then `report` returns an empty string).
pub fn wait_until_report<C: Check>(
    deadline: Instant,
    what: &str,
    report: impl FnOnce() -> String,
    cond: impl FnMut() -> C,
) {
    meshpush::testing::wait::wait_until(deadline, what, report, cond);
}
