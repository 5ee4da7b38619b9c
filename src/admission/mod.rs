//! The admission webhooks, on istiod's HTTPS port 15017
//! (`serve --webhook-addr`): the sidecar injector (`POST /inject`,
//! [`inject`]) and the config validator (`POST /validate`, [`validate`]),
//! each reading a v1 AdmissionReview as [`review`] says.
//!
//! TLS: the secure port's serving certificate (from meshpush's CA, for
//! `--server-san` names, which must include the webhook Service's
//! `NAME.NAMESPACE.svc`), without asking for a client certificate, with
//! ALPN `h2` and `http/1.1` (the API server's webhook client may use
//! either). The API server verifies it against the `caBundle` meshpush
//! keeps in its webhook configurations (`source::webhook_ca_bundle`).
//!
//! Invariants: a request reads the snapshot being served and never writes
//! anything; a malformed request gets a 400-class answer or a refusal that
//! says what is wrong, and never disturbs another; a connection that does
//! not finish its handshake in ten seconds is dropped.

pub mod inject;
pub mod review;
pub mod validate;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;

use crate::engine::PushEngine;
use crate::inject::{Injector, InjectorSettings};

/// How long a client has to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the webhooks answer from: the served snapshot and the injector's
/// settings.
#[derive(Clone)]
pub struct Webhooks {
    engine: Arc<PushEngine>,
    settings: Arc<InjectorSettings>,
}

impl Webhooks {
    /// Webhooks answering from `engine`'s snapshots.
    pub fn new(engine: Arc<PushEngine>, settings: InjectorSettings) -> Webhooks {
        Webhooks { engine, settings: Arc::new(settings) }
    }

    /// The routes: `/inject`, `/inject/PARAMS…` and `/validate`.
    pub fn router(self) -> Router {
        Router::new()
            .route("/inject", post(inject_route))
            .route("/inject/{*params}", post(inject_with_params))
            .route("/validate", post(validate_route))
            .with_state(self)
    }

    fn injector(&self) -> (Injector, Arc<crate::push::PushContext>) {
        let snapshot = self.engine.snapshot().clone();
        let injector = Injector { mesh: (*snapshot.mesh).clone(), settings: (*self.settings).clone() };
        (injector, snapshot)
    }
}

async fn inject_route(State(hooks): State<Webhooks>, headers: HeaderMap, body: Bytes) -> Response {
    inject_answer(&hooks, "", &headers, &body)
}

async fn inject_with_params(
    State(hooks): State<Webhooks>,
    Path(params): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    inject_answer(&hooks, &params, &headers, &body)
}

fn inject_answer(hooks: &Webhooks, params: &str, headers: &HeaderMap, body: &Bytes) -> Response {
    let request = match review::read(headers, body) {
        Ok(request) => request,
        Err(answer) => return *answer,
    };
    let (injector, snapshot) = hooks.injector();
    let (injector, mut warnings) = inject::with_params(&injector, params);
    let mut response = inject::review(&injector, Some(&snapshot.store), &request);
    if !warnings.is_empty() {
        warnings.extend(response.warnings.take().unwrap_or_default());
        response.warnings = Some(warnings);
    }
    review::answer(response)
}

async fn validate_route(headers: HeaderMap, body: Bytes) -> Response {
    match review::read(&headers, &body) {
        Ok(request) => review::answer(validate::review(&request)),
        Err(answer) => *answer,
    }
}

/// Serves `router` over TLS on `listener` until `shutdown` turns true.
pub async fn serve(
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    router: Router,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let service = hyper_util::service::TowerToHyperService::new(router);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!("the webhook port could not accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = async { drop(shutdown.wait_for(|stop| *stop).await) } => return,
        };
        let (acceptor, service) = (acceptor.clone(), service.clone());
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => return tracing::debug!(%peer, "webhook TLS handshake failed: {e}"),
                Err(_) => return tracing::debug!(%peer, "webhook TLS handshake timed out"),
            };
            let builder = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            if let Err(e) = builder.serve_connection(hyper_util::rt::TokioIo::new(tls), service).await {
                tracing::debug!(%peer, "webhook connection ended: {e}");
            }
        });
    }
}

#[cfg(test)]
mod test;
