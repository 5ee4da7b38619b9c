//! The agent's status port (Istio's 15021): `/healthz/ready` answers 200
//! only when the agent holds a valid workload certificate, Envoy's admin
//! API says it is live (it has its first listeners and clusters), and the
//! agent is not shutting down; else 503 with the reason.

use std::net::SocketAddr;
use std::time::SystemTime;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use tokio::sync::watch;

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
        if !super::envoy::is_ready(self.admin_port).await {
            return Some("Envoy is not live yet");
        }
        None
    }
}

/// Serves the status port on `listener` until the process ends.
pub async fn serve(listener: tokio::net::TcpListener, readiness: Readiness) -> std::io::Result<()> {
    let app = Router::new().route("/healthz/ready", get(ready)).with_state(readiness);
    axum::serve(listener, app).await
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
