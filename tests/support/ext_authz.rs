//! External authorizers on loopback, for CUSTOM AuthorizationPolicies.
//!
//! Both decide alike: a request whose `x-ext-authz` header is `allow` is
//! allowed, any other is denied with 403 and the body
//! [`DENIED_BODY`] (so a test tells the authorizer's answer from Envoy's own
//! RBAC 403); each counts what it was asked.
//!
//! * [`HttpAuthorizer`] speaks Envoy's ext_authz HTTP protocol: Envoy sends
//!   the request's method and path (after the provider's `pathPrefix`) and
//!   the headers the provider names; a 200 allows, anything else is the
//!   answer the client gets.
//! * [`GrpcAuthorizer`] serves `envoy.service.auth.v3.Authorization/Check`
//!   (envoy-types' generated service, over tonic): HTTP requests as above,
//!   and TCP connections (a check without HTTP attributes), allowed until
//!   [`GrpcAuthorizer::deny_connections`].
//!
//! Envoy is the real client of both.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use envoy_types::ext_authz::v3::pb::{
    Authorization, AuthorizationServer, CheckRequest, CheckResponse, DeniedHttpResponse, HttpResponse, HttpStatus,
};
use envoy_types::pb::google::rpc;

/// The header whose value `allow` allows a request.
pub const DECISION_HEADER: &str = "x-ext-authz";
/// The body of an authorizer's denial.
pub const DENIED_BODY: &str = "denied by the external authorizer";

/// A tokio runtime of one worker for a stand-in server.
fn runtime(what: &str) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("a runtime for the {what}: {e}"))
}

/// An HTTP ext_authz service; it stops when dropped.
pub struct HttpAuthorizer {
    checks: Arc<Mutex<Vec<String>>>,
    _runtime: tokio::runtime::Runtime,
}

impl HttpAuthorizer {
    /// Starts one listening on `addr`.
    pub fn start(addr: SocketAddr) -> HttpAuthorizer {
        let runtime = runtime("HTTP authorizer");
        let checks: Arc<Mutex<Vec<String>>> = Arc::default();
        let router = Router::new().fallback(decide).with_state(checks.clone());
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(addr))
            .unwrap_or_else(|e| panic!("bind the HTTP authorizer on {addr}: {e}"));
        runtime.spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        HttpAuthorizer { checks, _runtime: runtime }
    }

    /// The path of every check request so far, in order.
    pub fn checks(&self) -> Vec<String> {
        self.checks.lock().unwrap().clone()
    }
}

/// One check: allowed (200) when the decision header says so, else 403.
async fn decide(State(checks): State<Arc<Mutex<Vec<String>>>>, request: Request) -> (StatusCode, &'static str) {
    checks.lock().unwrap().push(request.uri().path().to_string());
    match request.headers().get(DECISION_HEADER).and_then(|v| v.to_str().ok()) {
        Some("allow") => (StatusCode::OK, ""),
        _ => (StatusCode::FORBIDDEN, DENIED_BODY),
    }
}

/// What the gRPC authorizer was asked and decides.
#[derive(Default)]
struct GrpcState {
    /// The path of every HTTP check, in order.
    http: Mutex<Vec<String>>,
    /// The number of TCP checks.
    tcp: AtomicUsize,
    /// Whether TCP connections are denied.
    deny_tcp: AtomicBool,
}

/// A gRPC ext_authz service; it stops when dropped.
pub struct GrpcAuthorizer {
    state: Arc<GrpcState>,
    _runtime: tokio::runtime::Runtime,
}

impl GrpcAuthorizer {
    /// Starts one listening on `addr`.
    pub fn start(addr: SocketAddr) -> GrpcAuthorizer {
        let runtime = runtime("gRPC authorizer");
        let state: Arc<GrpcState> = Arc::default();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(addr))
            .unwrap_or_else(|e| panic!("bind the gRPC authorizer on {addr}: {e}"));
        let service = AuthorizationServer::new(Decider(state.clone()));
        runtime.spawn(async move {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            let _ = tonic::transport::Server::builder().add_service(service).serve_with_incoming(incoming).await;
        });
        GrpcAuthorizer { state, _runtime: runtime }
    }

    /// The path of every HTTP check so far, in order.
    pub fn http_checks(&self) -> Vec<String> {
        self.state.http.lock().unwrap().clone()
    }

    /// How many TCP connections it was asked about.
    pub fn tcp_checks(&self) -> usize {
        self.state.tcp.load(Ordering::SeqCst)
    }

    /// From now on, deny TCP connections.
    pub fn deny_connections(&self) {
        self.state.deny_tcp.store(true, Ordering::SeqCst);
    }
}

struct Decider(Arc<GrpcState>);

#[tonic::async_trait]
impl Authorization for Decider {
    async fn check(
        &self,
        request: tonic::Request<CheckRequest>,
    ) -> Result<tonic::Response<CheckResponse>, tonic::Status> {
        let http = request.into_inner().attributes.and_then(|a| a.request).and_then(|r| r.http);
        let allowed = match &http {
            Some(http) => {
                self.0.http.lock().unwrap().push(http.path.clone());
                http.headers.get(DECISION_HEADER).is_some_and(|v| v == "allow")
            }
            None => {
                self.0.tcp.fetch_add(1, Ordering::SeqCst);
                !self.0.deny_tcp.load(Ordering::SeqCst)
            }
        };
        let code = if allowed { tonic::Code::Ok } else { tonic::Code::PermissionDenied };
        let denied = (!allowed && http.is_some()).then(|| {
            HttpResponse::DeniedResponse(DeniedHttpResponse {
                status: Some(HttpStatus { code: 403 }),
                body: DENIED_BODY.to_string(),
                ..Default::default()
            })
        });
        Ok(tonic::Response::new(CheckResponse {
            status: Some(rpc::Status { code: code as i32, ..Default::default() }),
            http_response: denied,
            ..Default::default()
        }))
    }
}
