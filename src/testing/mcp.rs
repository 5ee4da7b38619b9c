//! A stand-in MCP-over-xDS server, as a third-party one (Nacos, slime, an
//! istiod serving `GENERATOR: api`) speaks the protocol: a state-of-the-
//! world ADS service that answers each subscribed `GROUP/VERSION/KIND`
//! type URL with the full state it holds for it, as
//! `istio.mcp.v1alpha1.Resource`s, and sends every subscribed type again
//! whenever its state changes. It records the nodes that connect and the
//! ACKs and NACKs it is sent, so tests can check the client's side of the
//! protocol.
//!
//! The state is YAML documents ([`McpStandIn::set_yaml`]), turned into
//! resources with the same conversion meshpush serves with (a resource's
//! body can also be set as raw bytes, for what a broken server sends).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::google::protobuf::Any;
use futures::Stream;
use parking_lot::Mutex;
use prost::Message;
use tokio::sync::watch;
use tonic::{Request, Response, Status, Streaming};

use crate::config::mcp as mcp_config;
use crate::istio_api::mcp;

/// Type URL → the resources listed for it.
pub type McpState = BTreeMap<String, Vec<mcp::Resource>>;

/// The stand-in server. Dropping it stops it.
pub struct McpStandIn {
    /// Where it listens (plaintext gRPC on loopback).
    pub addr: SocketAddr,
    state: watch::Sender<(u64, McpState)>,
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

/// What clients sent.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    /// Each stream's first node id and its `GENERATOR` metadata.
    pub nodes: Vec<(String, Option<String>)>,
    /// Type URLs subscribed to, in order.
    pub subscribed: Vec<String>,
    /// ACKs: (type URL, version).
    pub acks: Vec<(String, String)>,
    /// NACKs: (type URL, error message).
    pub nacks: Vec<(String, String)>,
    /// The identities of the client certificates presented (TLS only).
    pub peers: Vec<Vec<String>>,
}

impl McpStandIn {
    /// Starts a server on a free loopback port, holding nothing.
    pub async fn start() -> McpStandIn {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        McpStandIn::start_on(listener).await
    }

    /// Starts a server on `listener` (a server that went away comes back
    /// on its old port this way).
    pub async fn start_on(listener: tokio::net::TcpListener) -> McpStandIn {
        let addr = listener.local_addr().unwrap();
        let (state, _) = watch::channel((1, McpState::new()));
        let seen = Arc::new(Mutex::new(Seen::default()));
        let service = Service { state: state.subscribe(), seen: seen.clone() };
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(AggregatedDiscoveryServiceServer::new(service))
                .serve_with_incoming(incoming)
                .await;
        });
        McpStandIn { addr, state, seen, task }
    }

    /// Starts a server on a free loopback port that speaks TLS as `tls`
    /// says, recording the identities of the client certificates it sees.
    pub async fn start_tls(tls: Arc<rustls::ServerConfig>) -> McpStandIn {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (state, _) = watch::channel((1, McpState::new()));
        let seen = Arc::new(Mutex::new(Seen::default()));
        let service = Service { state: state.subscribe(), seen: seen.clone() };
        let acceptor = tokio_rustls::TlsAcceptor::from(tls);
        let peers = seen.clone();
        let incoming = futures::stream::unfold(listener, move |listener| {
            let (acceptor, peers) = (acceptor.clone(), peers.clone());
            async move {
                loop {
                    let Ok((tcp, _)) = listener.accept().await else { return None };
                    // A failed handshake is the client's problem: wait for the next.
                    if let Ok(tls) = acceptor.accept(tcp).await {
                        let certs = tls.get_ref().1.peer_certificates().unwrap_or_default();
                        let ids = certs.first().map(crate::ca::tls::identities_of).unwrap_or_default();
                        peers.lock().peers.push(ids.iter().map(ToString::to_string).collect());
                        return Some((Ok::<_, std::io::Error>(TlsIo(tls)), listener));
                    }
                }
            }
        });
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(AggregatedDiscoveryServiceServer::new(service))
                .serve_with_incoming(incoming)
                .await;
        });
        McpStandIn { addr, state, seen, task }
    }

    /// Replaces the whole state with the Istio objects of `yaml`, each
    /// listed under its kind's type URL at `version` (`v1`, `v1alpha3`);
    /// every kind not in it is listed empty.
    pub fn set_yaml(&self, version: &str, yaml: &str) {
        let parsed = crate::config::parse::parse_documents("stand-in.yaml", yaml);
        assert!(!parsed.has_errors(), "{:?}", parsed.problems);
        let mut state = McpState::new();
        for kind in &crate::istio_api::KINDS {
            state.insert(kind.type_url(version), Vec::new());
        }
        for (i, (object, _)) in parsed.objects.iter().enumerate() {
            let kind = mcp_config::istio_kind(object.kind()).expect("an Istio kind");
            let resource = mcp_config::resource(object, &i.to_string()).unwrap();
            state.get_mut(&kind.type_url(version)).unwrap().push(resource);
        }
        self.set(state);
    }

    /// Replaces the whole state.
    pub fn set(&self, state: McpState) {
        self.state.send_modify(|(version, old)| {
            *version += 1;
            *old = state;
        });
    }

    /// Changes the state in place.
    pub fn edit(&self, f: impl FnOnce(&mut McpState)) {
        self.state.send_modify(|(version, state)| {
            *version += 1;
            f(state);
        });
    }

    /// What clients sent so far.
    pub fn seen(&self) -> Seen {
        self.seen.lock().clone()
    }
}

impl Drop for McpStandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Clone)]
struct Service {
    state: watch::Receiver<(u64, McpState)>,
    seen: Arc<Mutex<Seen>>,
}

type Responses = Pin<Box<dyn Stream<Item = Result<DiscoveryResponse, Status>> + Send>>;
type DeltaResponses = Pin<Box<dyn Stream<Item = Result<DeltaDiscoveryResponse, Status>> + Send>>;

fn response(type_url: &str, version: u64, state: &McpState) -> DiscoveryResponse {
    let resources = state
        .get(type_url)
        .into_iter()
        .flatten()
        .map(|r| Any { type_url: crate::istio_api::RESOURCE_TYPE_URL.into(), value: r.encode_to_vec() });
    DiscoveryResponse {
        version_info: version.to_string(),
        nonce: format!("{type_url}-{version}"),
        type_url: type_url.to_string(),
        resources: resources.collect(),
        ..Default::default()
    }
}

#[tonic::async_trait]
impl AggregatedDiscoveryService for Service {
    type StreamAggregatedResourcesStream = Responses;
    type DeltaAggregatedResourcesStream = DeltaResponses;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Responses>, Status> {
        let mut requests = request.into_inner();
        let mut state = self.state.clone();
        let seen = self.seen.clone();
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        tokio::spawn(async move {
            let mut subscribed: Vec<String> = Vec::new();
            let mut first = true;
            loop {
                tokio::select! {
                    request = requests.message() => {
                        let Ok(Some(request)) = request else { return };
                        if first {
                            let node = request.node.clone().unwrap_or_default();
                            let generator = node.metadata.as_ref().and_then(|m| m.fields.get("GENERATOR")).and_then(|v| match &v.kind {
                                Some(envoy_types::pb::google::protobuf::value::Kind::StringValue(s)) => Some(s.clone()),
                                _ => None,
                            });
                            seen.lock().nodes.push((node.id, generator));
                            first = false;
                        }
                        if request.response_nonce.is_empty() {
                            seen.lock().subscribed.push(request.type_url.clone());
                            subscribed.push(request.type_url.clone());
                            let first_response = {
                                let (version, now) = &*state.borrow();
                                response(&request.type_url, *version, now)
                            };
                            if tx.send(Ok(first_response)).await.is_err() {
                                return;
                            }
                        } else if let Some(error) = request.error_detail {
                            seen.lock().nacks.push((request.type_url, error.message));
                        } else {
                            seen.lock().acks.push((request.type_url, request.version_info));
                        }
                    }
                    changed = state.changed() => {
                        if changed.is_err() { return }
                        let (version, now) = state.borrow_and_update().clone();
                        for type_url in &subscribed {
                            if tx.send(Ok(response(type_url, version, &now))).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }

    async fn delta_aggregated_resources(
        &self,
        _: Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<Response<DeltaResponses>, Status> {
        Err(Status::unimplemented("the stand-in MCP server speaks state of the world only, as istiod's client does"))
    }
}

/// A TLS connection, as tonic's server takes one.
struct TlsIo(tokio_rustls::server::TlsStream<tokio::net::TcpStream>);

impl tonic::transport::server::Connected for TlsIo {
    type ConnectInfo = ();

    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl tokio::io::AsyncRead for TlsIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for TlsIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
