//! The Envoy the agent runs: started from the bootstrap it wrote, restarted
//! with backoff when it exits on its own, drained and stopped on shutdown,
//! and asked through its admin API whether it is ready.
//!
//! Its arguments come from the ProxyConfig, as pilot-agent passes them:
//! `--concurrency` only when set above 0 (else Envoy runs a worker per
//! hardware thread), `--drain-time-s` from `drainDuration` with the
//! immediate drain strategy, `--file-flush-interval-msec` and
//! `--file-flush-min-size-kb`; and its environment has the
//! `proxyMetadata` variables, as the injected container's has.
//!
//! Shutdown, as pilot-agent does it: a sidecar's inbound listeners (every
//! listener of a gateway) drain gracefully (`POST
//! /drain_listeners?inboundonly&graceful`), the agent waits
//! `terminationDrainDuration`, then sends Envoy SIGTERM, and SIGKILL if it
//! is still there [`STOP_GRACE`] later. Envoy's output goes to the agent's.
//!
//! Invariant: at most one Envoy runs per agent, and none outlives
//! [`supervise`] (the child is killed when its handle drops).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::config::mesh::proxy_config::{
    DEFAULT_DRAIN_DURATION, DEFAULT_FILE_FLUSH_INTERVAL, DEFAULT_TERMINATION_DRAIN_DURATION, ProxyConfig,
};
use crate::model::ProxyKind;

/// The first wait before restarting an Envoy that exited; it doubles to
/// [`MAX_RESTART_BACKOFF`], and starts over after a run of
/// [`STEADY_RUN`].
const FIRST_RESTART_BACKOFF: Duration = Duration::from_secs(1);

/// The longest wait before a restart.
const MAX_RESTART_BACKOFF: Duration = Duration::from_secs(30);

/// A run this long counts as healthy: the next exit restarts at once-ish.
const STEADY_RUN: Duration = Duration::from_secs(60);

/// How long Envoy has after SIGTERM before SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// How long an admin request may take.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(2);

/// How the agent runs Envoy.
#[derive(Debug, Clone)]
pub struct EnvoyCommand {
    /// The Envoy binary.
    pub binary: PathBuf,
    /// The bootstrap file the agent wrote.
    pub bootstrap: PathBuf,
    /// Envoy's admin port (on 127.0.0.1).
    pub admin_port: u16,
    /// Worker threads (`--concurrency`), when set above 0.
    pub concurrency: Option<u32>,
    /// Envoy's `--drain-time-s` (`drainDuration`).
    pub drain_time: Duration,
    /// How long listeners drain on shutdown (`terminationDrainDuration`).
    pub termination_drain: Duration,
    /// Whether shutdown drains every listener (a gateway) rather than the
    /// inbound ones (a sidecar).
    pub drain_all_listeners: bool,
    /// `--file-flush-interval-msec`.
    pub file_flush_interval: Duration,
    /// `--file-flush-min-size-kb`, when above 0.
    pub file_flush_min_size_kb: Option<u32>,
    /// Envoy's environment beyond the agent's (`proxyMetadata`).
    pub env: BTreeMap<String, String>,
    /// More arguments, after the agent's own (`--envoy-arg`).
    pub extra_args: Vec<String>,
}

impl EnvoyCommand {
    /// How the agent runs Envoy for a proxy of `kind` by `config`.
    pub fn new(
        binary: PathBuf,
        bootstrap: PathBuf,
        admin_port: u16,
        config: &ProxyConfig,
        kind: ProxyKind,
        extra_args: Vec<String>,
    ) -> EnvoyCommand {
        EnvoyCommand {
            binary,
            bootstrap,
            admin_port,
            concurrency: config.concurrency.and_then(|n| u32::try_from(n).ok()).filter(|n| *n > 0),
            drain_time: config.drain_duration.map_or(DEFAULT_DRAIN_DURATION, |d| d.0),
            termination_drain: config.termination_drain_duration.map_or(DEFAULT_TERMINATION_DRAIN_DURATION, |d| d.0),
            drain_all_listeners: matches!(kind, ProxyKind::Router | ProxyKind::Waypoint),
            file_flush_interval: config.file_flush_interval.map_or(DEFAULT_FILE_FLUSH_INTERVAL, |d| d.0),
            file_flush_min_size_kb: config.file_flush_min_size_kb.filter(|kb| *kb > 0),
            env: config.proxy_metadata.clone(),
            extra_args,
        }
    }

    /// Envoy's arguments.
    pub fn args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec!["-c".into(), self.bootstrap.clone().into_os_string()];
        let drain = self.drain_time.as_secs().max(1).to_string();
        let flush = self.file_flush_interval.as_millis().max(1).to_string();
        for arg in [
            "--drain-time-s",
            &drain,
            "--drain-strategy",
            "immediate",
            "--file-flush-interval-msec",
            &flush,
            "--disable-hot-restart",
            "--local-address-ip-version",
            "v4",
        ] {
            args.push(arg.into());
        }
        if let Some(kb) = self.file_flush_min_size_kb {
            args.extend(["--file-flush-min-size-kb".into(), kb.to_string().into()]);
        }
        if let Some(n) = self.concurrency {
            args.extend(["--concurrency".into(), n.to_string().into()]);
        }
        args.extend(self.extra_args.iter().map(OsString::from));
        args
    }

    fn admin(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.admin_port))
    }
}

/// Why Envoy could not be run at all.
#[derive(Debug, thiserror::Error)]
#[error("starting Envoy ({binary}): {source}")]
pub struct StartError {
    binary: String,
    source: std::io::Error,
}

/// Runs Envoy until `shutdown` turns true, then drains and stops it.
/// Fails only when the binary cannot be started at all (the first time).
pub async fn supervise(command: EnvoyCommand, mut shutdown: watch::Receiver<bool>) -> Result<(), StartError> {
    let mut backoff = FIRST_RESTART_BACKOFF;
    let mut started_once = false;
    loop {
        let mut child = match tokio::process::Command::new(&command.binary)
            .args(command.args())
            .envs(&command.env)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .spawn()
        {
            Ok(child) => child,
            Err(source) if !started_once => {
                return Err(StartError { binary: command.binary.display().to_string(), source });
            }
            Err(e) => {
                tracing::error!("restarting Envoy failed: {e}; trying again in {backoff:?}");
                if wait_or_shutdown(backoff, &mut shutdown).await {
                    return Ok(());
                }
                backoff = (backoff * 2).min(MAX_RESTART_BACKOFF);
                continue;
            }
        };
        started_once = true;
        let started = Instant::now();
        tracing::info!(pid = child.id(), "started Envoy");
        let exited = tokio::select! {
            status = child.wait() => Some(status),
            _ = shutdown.wait_for(|s| *s) => None,
        };
        let Some(exited) = exited else {
            stop(&command, &mut child).await;
            return Ok(());
        };
        if started.elapsed() >= STEADY_RUN {
            backoff = FIRST_RESTART_BACKOFF;
        }
        let status = exited.map_or_else(|e| e.to_string(), |s| s.to_string());
        tracing::error!("Envoy exited ({status}); restarting it in {backoff:?}");
        if wait_or_shutdown(backoff, &mut shutdown).await {
            return Ok(());
        }
        backoff = (backoff * 2).min(MAX_RESTART_BACKOFF);
    }
}

/// Sleeps `wait`, or less if shutdown comes first (then true).
async fn wait_or_shutdown(wait: Duration, shutdown: &mut watch::Receiver<bool>) -> bool {
    tokio::select! {
        () = tokio::time::sleep(wait) => false,
        stopping = shutdown.wait_for(|s| *s) => stopping.is_ok(),
    }
}

/// Drains Envoy's inbound listeners (a gateway's all), waits the
/// termination drain duration, stops it.
async fn stop(command: &EnvoyCommand, child: &mut tokio::process::Child) {
    match drain(command.admin(), command.drain_all_listeners).await {
        Ok(200) => tracing::info!("draining Envoy's listeners for {:?}", command.termination_drain),
        Ok(status) => tracing::warn!("Envoy answered {status} to the drain request; stopping it after the drain time"),
        Err(e) => tracing::warn!("asking Envoy to drain: {e}; stopping it after the drain time"),
    }
    let exited = tokio::time::timeout(command.termination_drain, child.wait()).await;
    if exited.is_ok() {
        return;
    }
    if let Some(pid) = child.id().and_then(|id| rustix::process::Pid::from_raw(id as i32)) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
    match tokio::time::timeout(STOP_GRACE, child.wait()).await {
        Ok(status) => tracing::info!("Envoy stopped ({})", status.map_or_else(|e| e.to_string(), |s| s.to_string())),
        Err(_) => {
            tracing::warn!("Envoy did not stop within {STOP_GRACE:?} of SIGTERM; killing it");
            let _ = child.kill().await;
        }
    }
}

/// Asks Envoy to drain its inbound listeners gracefully (all of them for a
/// gateway); Envoy's answer.
pub async fn drain(admin: SocketAddr, all_listeners: bool) -> Result<u16, String> {
    let path = if all_listeners { "/drain_listeners?graceful" } else { "/drain_listeners?inboundonly&graceful" };
    admin_request(admin, "POST", path).await
}

/// Whether Envoy's admin API says it is live (`GET /ready` answers 200).
pub async fn is_ready(admin_port: u16) -> bool {
    let admin = SocketAddr::from((Ipv4Addr::LOCALHOST, admin_port));
    matches!(admin_request(admin, "GET", "/ready").await, Ok(200))
}

/// One admin request; its status code.
async fn admin_request(admin: SocketAddr, method: &str, path: &str) -> Result<u16, String> {
    let request = async {
        let tcp = tokio::net::TcpStream::connect(admin).await.map_err(|e| e.to_string())?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        let request = http::Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::HOST, admin.to_string())
            .body(String::new())
            .map_err(|e| e.to_string())?;
        let response = sender.send_request(request).await.map_err(|e| e.to_string())?;
        Ok(response.status().as_u16())
    };
    tokio::time::timeout(ADMIN_TIMEOUT, request).await.map_err(|_| format!("no answer within {ADMIN_TIMEOUT:?}"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envoy_runs_by_the_proxy_config_with_extra_arguments_last() {
        let (config, _) = ProxyConfig::parse(
            "test",
            "concurrency: 3\ndrainDuration: 20s\nterminationDrainDuration: 2s\nfileFlushInterval: 250ms\n\
             fileFlushMinSizeKb: 64\nproxyMetadata: {ISTIO_META_X: y}\n",
        )
        .unwrap();
        let command = EnvoyCommand::new(
            "/usr/local/bin/envoy".into(),
            "/etc/istio/proxy/envoy-bootstrap.yaml".into(),
            15000,
            &ProxyConfig::istio_default().over(&config),
            ProxyKind::Sidecar,
            vec!["--base-id".into(), "7".into()],
        );
        let args: Vec<String> = command.args().into_iter().map(|a| a.into_string().unwrap()).collect();
        let value = |flag: &str| args.iter().position(|a| a == flag).map(|at| args[at + 1].as_str());
        assert_eq!(&args[..2], ["-c", "/etc/istio/proxy/envoy-bootstrap.yaml"]);
        assert_eq!(value("--drain-time-s"), Some("20"));
        assert_eq!(value("--drain-strategy"), Some("immediate"));
        assert_eq!(value("--concurrency"), Some("3"));
        assert_eq!(value("--file-flush-interval-msec"), Some("250"));
        assert_eq!(value("--file-flush-min-size-kb"), Some("64"));
        assert_eq!(command.termination_drain, Duration::from_secs(2));
        assert!(!command.drain_all_listeners);
        assert_eq!(command.env.get("ISTIO_META_X").map(String::as_str), Some("y"));
        assert!(args.contains(&"--disable-hot-restart".to_string()));
        assert_eq!(&args[args.len() - 2..], ["--base-id", "7"]);

        // Istio's defaults: no --concurrency, 45 s of drain, 5 s on termination, a flush a second.
        let default = EnvoyCommand::new(
            "envoy".into(),
            "b.yaml".into(),
            15000,
            &ProxyConfig::istio_default(),
            ProxyKind::Router,
            Vec::new(),
        );
        let args: Vec<String> = default.args().into_iter().map(|a| a.into_string().unwrap()).collect();
        assert!(
            !args.contains(&"--concurrency".to_string()) && !args.contains(&"--file-flush-min-size-kb".to_string())
        );
        let at = args.iter().position(|a| a == "--drain-time-s").unwrap();
        assert_eq!(args[at + 1], "45");
        assert_eq!(default.termination_drain, Duration::from_secs(5));
        assert!(default.drain_all_listeners, "a gateway drains every listener");
    }
}
