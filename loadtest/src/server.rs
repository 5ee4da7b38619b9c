//! The server under test: starting meshpush on a generated mesh, and reading
//! any server's CPU time and memory from `/proc`.
//!
//! A started meshpush leads its own process group; dropping the
//! [`ServerProcess`] ends exactly that group (SIGTERM, then SIGKILL after a
//! grace period), so the harness never leaves a server behind, even when it
//! fails.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use rustix::process::{Pid, Signal, kill_process_group};

/// How long a child gets to exit on SIGTERM.
const GRACE: Duration = Duration::from_secs(3);

/// A meshpush started by the harness, killed on drop.
#[derive(Debug)]
pub struct ServerProcess {
    child: Child,
    binary: PathBuf,
    /// Its config directory and log; removed on drop.
    dir: tempfile::TempDir,
    /// Where ADS and the registry listen.
    pub xds: SocketAddr,
    admin: SocketAddr,
    /// The CPU it runs on, if pinned ([`SERVER_CPU`]).
    pin: bool,
}

/// The CPU a pinned server runs on (`--pin`); the harness takes [`HARNESS_CPU`].
pub const SERVER_CPU: usize = 1;
/// The CPU a pinned harness runs on.
pub const HARNESS_CPU: usize = 0;

/// What the report says of a pinned run.
pub fn pinned_note() -> String {
    format!("the harness runs on CPU {HARNESS_CPU} alone, the server on CPU {SERVER_CPU} alone (--pin)")
}

/// Pins this process (the harness) to [`HARNESS_CPU`]; call it before any
/// thread starts, as threads inherit it.
pub fn pin_harness() -> anyhow::Result<()> {
    let mut cpus = rustix::thread::CpuSet::new();
    cpus.set(HARNESS_CPU);
    rustix::thread::sched_setaffinity(None, &cpus).context("pinning the harness to CPU 0")
}

impl ServerProcess {
    /// Writes `files` into a fresh config directory and starts `binary
    /// serve` on it, on free loopback ports. Returns once the process runs;
    /// the caller waits for readiness through the registry API.
    /// With `pin`, it runs on [`SERVER_CPU`] alone (through `taskset`).
    pub fn start(binary: &Path, files: &[(String, String)], pin: bool) -> anyhow::Result<ServerProcess> {
        let dir = tempfile::Builder::new().prefix("loadtest-meshpush-").tempdir().context("creating a config dir")?;
        std::fs::create_dir(dir.path().join("config"))?;
        for (name, text) in files {
            write_config(dir.path(), name, text)?;
        }
        let (xds, admin) = (free_addr()?, free_addr()?);
        let child = spawn(binary, dir.path(), xds, admin, pin)?;
        Ok(ServerProcess { child, binary: binary.into(), dir, xds, admin, pin })
    }

    /// Writes (or replaces) one file of its config directory.
    pub fn write_config(&self, name: &str, text: &str) -> anyhow::Result<()> {
        write_config(self.dir.path(), name, text)
    }

    /// Its config directory.
    pub fn config_dir(&self) -> PathBuf {
        self.dir.path().join("config")
    }

    /// Kills the server at once (SIGKILL to its group, as a node failure or
    /// an OOM kill ends it) and reaps it.
    pub fn kill(&mut self) -> anyhow::Result<()> {
        let _ = kill_process_group(Pid::from_child(&self.child), Signal::KILL);
        self.child.wait().context("reaping the killed meshpush")?;
        Ok(())
    }

    /// Starts the server again after [`ServerProcess::kill`]: the same
    /// binary, config directory and ports.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.child = spawn(&self.binary, self.dir.path(), self.xds, self.admin, self.pin)?;
        Ok(())
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Fails if the process has exited, with its log tail.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("meshpush exited ({status})\n{}", self.log_tail(30));
        }
        Ok(())
    }

    /// The last `n` lines of its log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("meshpush.log")
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let group = Pid::from_child(&self.child);
        let _ = kill_process_group(group, Signal::TERM);
        let deadline = Instant::now() + GRACE;
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = kill_process_group(group, Signal::KILL);
            let _ = self.child.wait();
        }
    }
}

/// Writes file `name` of the config directory under `dir`.
fn write_config(dir: &Path, name: &str, text: &str) -> anyhow::Result<()> {
    write_file(&dir.join("config"), name, text)
}

/// Writes file `name` (a path relative to `config`) in place, as `kubectl
/// cp` or a shell redirect does: opened, truncated, written, closed.
pub fn write_file(config: &Path, name: &str, text: &str) -> anyhow::Result<()> {
    let path = config.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).with_context(|| format!("creating the directory of {name}"))?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {name}"))
}

/// Starts `binary serve` on the config directory under `dir` and these
/// ports, its output appended to `dir`'s log, leading a process group of
/// its own; with `pin`, through `taskset`, which leaves it on
/// [`SERVER_CPU`] with the same pid.
fn spawn(binary: &Path, dir: &Path, xds: SocketAddr, admin: SocketAddr, pin: bool) -> anyhow::Result<Child> {
    let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("meshpush.log"))?;
    let mut command = if pin {
        let mut taskset = Command::new("taskset");
        taskset.arg("--cpu-list").arg(SERVER_CPU.to_string()).arg(binary);
        taskset
    } else {
        Command::new(binary)
    };
    command
        .arg("serve")
        .arg("--config")
        .arg(dir.join("config"))
        .arg("--xds-addr")
        .arg(xds.to_string())
        .arg("--admin-addr")
        .arg(admin.to_string())
        .arg("--log-level")
        .arg("warn")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))
}

/// A loopback address nobody listens on right now.
fn free_addr() -> anyhow::Result<SocketAddr> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?)
}

/// The binary `cargo build --release` puts beside this one
/// (`target/release/meshpush`).
pub fn default_meshpush_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    // `cargo test` runs binaries from target/<profile>/deps.
    let dir = if dir.ends_with("deps") { dir.parent().map(Path::to_path_buf).unwrap_or(dir) } else { dir };
    dir.join("meshpush")
}

/// CPU time (user + system, all threads, living and exited) of process `pid`
/// (`self` for the harness), from `/proc/<pid>/stat`, at the kernel's tick
/// resolution (10 ms).
pub fn cpu_time(pid: &str) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start at `state`.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    let ticks = rustix::param::clock_ticks_per_second().max(1);
    Some(Duration::from_nanos((utime + stime) * 1_000_000_000 / ticks))
}

/// A memory figure of `/proc/<pid>/status` in bytes: `VmHWM` (peak resident
/// set) or `VmRSS` (resident now).
pub fn memory(pid: &str, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))?;
    let kib: u64 = line[field.len() + 1..].trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib * 1024)
}

/// This process's open-file limit now.
pub fn fd_limit() -> u64 {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// Raises this process's open-file limit to its hard limit (children
/// inherit it). Returns a line saying what happened when it matters.
pub fn raise_fd_limit(needed: u64) -> Option<String> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let (current, maximum) = (limit.current.unwrap_or(u64::MAX), limit.maximum);
    let target = maximum.unwrap_or(u64::MAX).min(1 << 20);
    if current >= target {
        return (current < needed).then(|| {
            format!("open-file limit is {current}, below the {needed} this run may need; raise the hard limit")
        });
    }
    match setrlimit(Resource::Nofile, Rlimit { current: Some(target), maximum }) {
        Ok(()) if target < needed => {
            Some(format!("raised the open-file limit from {current} to {target}, below the {needed} this run may need"))
        }
        Ok(()) => Some(format!("raised the open-file limit from {current} to {target}")),
        Err(e) => Some(format!("could not raise the open-file limit from {current} ({e}); this run may need {needed}")),
    }
}
