//! The agent's two status ports, as a pod's probes find them with Istio:
//! - the readiness port (Istio's 15021, `--status-addr`): `/healthz/ready`
//!   answers 200 only when the agent holds a valid workload certificate,
//!   Envoy's admin API says it is live (it has its first listeners and
//!   clusters; when an Envoy runs), and the agent is not shutting down;
//!   else 503 with the reason;
//! - the status port (ProxyConfig `statusPort`, Istio's 15020): the same
//!   `/healthz/ready`, and the application's probes the injector pointed
//!   there (`/app-health/…`, `/app-lifecycle/…`, [`super::app_probe`]),
//!   and `POST /drain` from the pod itself (a native sidecar's `preStop`).

use std::net::SocketAddr;
use std::time::SystemTime;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use tokio::sync::watch;

use super::app_probe::AppProbers;
use super::sds::CurrentCert;

/// What the readiness answer is made of.
#[derive(Debug, Clone)]
pub struct Readiness {
    /// The certificate held.
    pub current: CurrentCert,
    /// Envoy's admin port.
    pub admin_port: u16,
    /// True once shutdown began.
    pub shutdown: watch::Receiver<bool>,
    /// Whether a drain takes every listener (a gateway) or the inbound ones.
    pub drain_all_listeners: bool,
    /// Whether an Envoy runs (without one, the certificate is all readiness asks).
    pub envoy: bool,
}

impl Readiness {
    /// Why the workload is not ready, or `None` when it is.
    pub async fn not_ready(&self) -> Option<&'static str> {
        if *self.shutdown.borrow() {
            return Some("the agent is shutting down");
        }
        let valid = self.current.borrow().as_ref().is_some_and(|c| c.valid_at(SystemTime::now()));
        if !valid {
            return Some("no valid workload certificate yet");
        }
        if self.envoy && !super::envoy::is_ready(self.admin_port).await {
            return Some("Envoy is not live yet");
        }
        None
    }
}

/// Serves a status port on `listener` until the process ends: readiness,
/// and the application's probes when given.
pub async fn serve(
    listener: tokio::net::TcpListener,
    readiness: Readiness,
    probers: Option<AppProbers>,
) -> std::io::Result<()> {
    let mut app = Router::new().route("/healthz/ready", get(ready));
    if let Some(probers) = probers {
        let handler = move |request| super::app_probe::handle(probers.clone(), request);
        app = app
            .route("/app-health/{*probe}", get(handler.clone()))
            .route("/app-lifecycle/{*probe}", get(handler))
            .route("/drain", axum::routing::post(drain));
    }
    let app = app.with_state(readiness);
    axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await
}

/// `POST /drain` (a native sidecar's `preStop` hook, from the pod itself
/// only): Envoy starts draining its listeners, as the pod goes away.
async fn drain(
    State(readiness): State<Readiness>,
    axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<SocketAddr>,
) -> (StatusCode, String) {
    if !peer.ip().is_loopback() {
        return (StatusCode::FORBIDDEN, "only the pod itself may drain its proxy\n".into());
    }
    let admin = SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, readiness.admin_port));
    match super::envoy::drain(admin, readiness.drain_all_listeners).await {
        Ok(200) => {
            tracing::info!("draining Envoy's listeners, as the pod asked");
            (StatusCode::OK, "draining\n".into())
        }
        Ok(status) => (StatusCode::BAD_GATEWAY, format!("Envoy answered {status} to the drain request\n")),
        Err(e) => (StatusCode::BAD_GATEWAY, format!("asking Envoy to drain: {e}\n")),
    }
}

async fn ready(State(readiness): State<Readiness>) -> (StatusCode, String) {
    match readiness.not_ready().await {
        None => (StatusCode::OK, "ready\n".into()),
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")),
    }
}

/// The address the status port listens on when none is given (Istio's).
pub const DEFAULT_STATUS_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 15021);
