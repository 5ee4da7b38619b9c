//! MCP-over-xDS served: the Istio config meshpush holds, to a client whose
//! node says `GENERATOR: api` (another meshpush or istiod reading it
//! through `configSources`, or any MCP client), as istiod's `api`
//! generator serves it.
//!
//! - **Who.** Only a client proven to be an identity of the mesh's root
//!   namespace, on the secure port (its certificate or its token), as
//!   istiod's `ENABLE_XDS_API_GENERATOR_AUTH` (on by default) allows; the
//!   plaintext port proves no one and refuses every such client.
//! - **What.** A request for `GROUP/VERSION/KIND` of a kind meshpush holds
//!   (`istio_api::KINDS`, the older versions included) is answered with
//!   every object of that kind in the published snapshot's store: the
//!   merged view of every source, each an `istio.mcp.v1alpha1.Resource`
//!   named `NS/NAME`, its version the store revision that wrote it. Any
//!   other type URL is answered with an empty list, as istiod answers it.
//! - **Synthetic ServiceEntries.** ServiceEntries also list, as istiod's
//!   generator does, a `synthetic-NAME` entry for each Kubernetes Service
//!   the client's namespace sees (its hosts, addresses, ports, location,
//!   resolution, workload selector and `exportTo`; no endpoints), so that
//!   a consumer knows the registry's services.
//! - **When.** At once for a new subscription; then each time a published
//!   snapshot changes the objects of a subscribed kind (the kind's map is
//!   compared by pointer, so an unchanged kind costs nothing), the kind's
//!   full state again. ACKs are recorded; a NACK is logged, bounded.
//!
//! The stream is state of the world only, as istiod's MCP clients speak
//! it; the server refuses a delta stream of such a client, saying so.
//! None of this runs for any other client: the push path of a mesh that
//! serves no MCP client is untouched.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse;
use envoy_types::pb::google::protobuf::Any;
use prost::Message;
use tokio::sync::mpsc;
use tonic::Status;

use super::stream::authorize::Refusal;
use super::stream::body::{FRAME_HEADER_LEN, Framed};
use super::stream::drain::Drain;
use crate::config::ConfigKind;
use crate::config::mcp as mcp_config;
use crate::engine::PushEngine;
use crate::istio_api::{self, IstioKind};
use crate::model::store::KindMap;
use crate::model::{Identity, Proxy};
use crate::text::Shown;

/// The node metadata `GENERATOR` value of an MCP client.
pub const API_GENERATOR: &str = "api";

/// Whether `proxy` is an MCP client.
pub fn is_api_client(proxy: &Proxy) -> bool {
    proxy.metadata.get(crate::model::proxy::GENERATOR_METADATA).is_some_and(|g| g == API_GENERATOR)
}

/// Whether a client proven to be `identities` may read the config, in a
/// mesh whose root namespace is `root_namespace`.
pub fn authorize(identities: &[Identity], root_namespace: &str) -> Result<(), Refusal> {
    if identities.is_empty() {
        return Err(Refusal {
            reason: "api_unauthenticated",
            code: tonic::Code::Unauthenticated,
            message: "MCP-over-xDS (GENERATOR: api) is served on the secure port only, to a client proven to be an \
                      identity of the root namespace"
                .into(),
        });
    }
    if identities.iter().any(|i| i.namespace() == root_namespace) {
        return Ok(());
    }
    Err(Refusal {
        reason: "api_identity",
        code: tonic::Code::PermissionDenied,
        message: format!(
            "MCP-over-xDS (GENERATOR: api) is served to identities of the root namespace {root_namespace} only; the \
             client is {}",
            Shown(&identities[0].to_string())
        ),
    })
}

/// A request of an MCP client, as the stream reads it.
#[derive(Debug, Clone, Default)]
pub struct ApiRequest {
    /// `type_url`.
    pub type_url: String,
    /// `response_nonce`.
    pub response_nonce: String,
    /// `error_detail.message`, when the request is a NACK.
    pub error: Option<String>,
}

/// A whole framed response (its nonce inside: an MCP stream shares no body).
#[derive(Debug)]
pub struct ApiResponse(Bytes);

impl Framed for ApiResponse {
    fn into_chunks(self) -> (Bytes, Bytes) {
        (self.0, Bytes::new())
    }

    fn wire_len(&self) -> usize {
        self.0.len()
    }
}

/// One subscribed type URL.
struct Subscription {
    /// Its kind, if meshpush holds it.
    kind: Option<&'static IstioKind>,
    /// The kind's objects as last sent, compared by pointer.
    sent: Option<KindMap>,
    /// For ServiceEntries: the Kubernetes Services as last sent.
    sent_services: Option<KindMap>,
    /// The nonce of the last response.
    nonce: String,
}

/// Serves one MCP client's stream until it ends; returns why.
pub async fn serve(
    engine: Arc<PushEngine>,
    proxy: Arc<Proxy>,
    first: ApiRequest,
    mut requests: impl futures::Stream<Item = Result<ApiRequest, Status>> + Unpin,
    tx: mpsc::Sender<Box<ApiResponse>>,
    mut drain: Drain,
) -> (String, Option<Status>) {
    if !engine.is_ready() {
        engine.wait_ready().await;
    }
    let mut versions = engine.versions();
    let mut subscriptions: BTreeMap<String, Subscription> = BTreeMap::new();
    let mut nonces = 0u64;
    let mut pending = Some(first);
    loop {
        let mut send = Vec::new();
        if let Some(request) = pending.take() {
            // A request with the nonce last sent is an answer; one with
            // another nonce for a type already subscribed is stale. Any other
            // (istiod's client sends a nonce of its own on its first
            // requests) subscribes, and is answered.
            let subscribed = subscriptions.contains_key(&request.type_url) && !request.response_nonce.is_empty();
            if let Some(error) = &request.error {
                tracing::warn!(
                    node_id = %Shown(&proxy.id),
                    type_url = %Shown(&request.type_url),
                    "an MCP client refused a response: {}",
                    Shown(error)
                );
            } else if !subscribed {
                let kind = istio_api::kind_of_type_url(&request.type_url).map(|(k, _)| k);
                let sub = Subscription { kind, sent: None, sent_services: None, nonce: String::new() };
                subscriptions.insert(request.type_url.clone(), sub);
                send.push(request.type_url);
            }
        } else {
            tokio::select! {
                biased;
                message = futures::StreamExt::next(&mut requests) => match message {
                    Some(Ok(request)) => { pending = Some(request); continue; }
                    None => return ("client closed the stream".into(), None),
                    Some(Err(status)) => return (format!("stream error: {}", status.message()), Some(status)),
                },
                reason = drain.drained() => {
                    return (reason.message().into(), Some(Status::unavailable(reason.message())));
                }
                changed = versions.changed() => {
                    if changed.is_err() {
                        return ("the server is shutting down".into(), None);
                    }
                    let ctx = engine.snapshot();
                    for (type_url, sub) in &subscriptions {
                        let services = ctx.store.kind(ConfigKind::Service);
                        let changed = match (sub.kind, &sub.sent) {
                            (Some(kind), Some(sent)) => {
                                !sent.ptr_eq(ctx.store.kind(mcp_config::config_kind(kind)))
                                    || sub.sent_services.as_ref().is_some_and(|s| !s.ptr_eq(services))
                            }
                            _ => false,
                        };
                        if changed {
                            send.push(type_url.clone());
                        }
                    }
                }
            }
        }
        let ctx = engine.snapshot();
        for type_url in send {
            let Some(sub) = subscriptions.get_mut(&type_url) else { continue };
            nonces += 1;
            let map = sub.kind.map(|k| ctx.store.kind(mcp_config::config_kind(k)).clone());
            let entries = sub.kind.is_some_and(|k| mcp_config::config_kind(k) == ConfigKind::ServiceEntry);
            let mut response = state_of(&type_url, sub.kind, map.as_ref(), nonces);
            if entries {
                synthetic_entries(&ctx, &proxy.namespace, &mut response);
                sub.sent_services = Some(ctx.store.kind(ConfigKind::Service).clone());
            }
            sub.nonce = response.nonce.clone();
            sub.sent = map;
            if tx.send(Box::new(ApiResponse(framed(&response)))).await.is_err() {
                return ("response channel closed".into(), None);
            }
        }
    }
}

/// The full state of `type_url`: every object of `map`, each a resource.
fn state_of(type_url: &str, kind: Option<&IstioKind>, map: Option<&KindMap>, nonce: u64) -> DiscoveryResponse {
    let mut resources = Vec::new();
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    if let (Some(_), Some(map)) = (kind, map) {
        for stored in map.values() {
            match mcp_config::resource(&stored.object, &stored.revision.to_string()) {
                Ok(resource) => {
                    let value = resource.encode_to_vec();
                    hasher.update(&value);
                    resources.push(Any { type_url: istio_api::RESOURCE_TYPE_URL.into(), value });
                }
                // Left out, said why: a client keeps its last good version.
                Err(e) => tracing::warn!(object = %stored.object.key(), "not served over MCP: {e}"),
            }
        }
    }
    let version = format!("{:016x}", hasher.digest());
    DiscoveryResponse {
        nonce: format!("{version}-{nonce}"),
        version_info: version,
        resources,
        type_url: type_url.to_string(),
        ..Default::default()
    }
}

/// Adds to `response` (the ServiceEntries) a synthetic entry for each
/// Kubernetes Service a client in `namespace` sees, as istiod's generator
/// adds them, and folds them into its version.
fn synthetic_entries(ctx: &crate::push::PushContext, namespace: &str, response: &mut DiscoveryResponse) {
    use crate::model::service::{ExportTo, Location, Resolution};
    let Some(kind) = istio_api::kind_named("ServiceEntry") else { return };
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    hasher.update(response.version_info.as_bytes());
    for service in ctx.services.all() {
        let visible = match &service.export_to {
            ExportTo::All => true,
            ExportTo::Namespaces(list) => &*service.namespace == namespace || list.iter().any(|n| &**n == namespace),
        };
        if !service.is_kubernetes() || service.is_alias() || !visible {
            continue;
        }
        let resolution = match service.resolution {
            Resolution::Passthrough => "NONE",
            Resolution::Dns => "DNS",
            Resolution::DnsRoundRobin => "DNS_ROUND_ROBIN",
            Resolution::Static | Resolution::Alias => "STATIC",
        };
        let location = match service.location {
            Location::MeshInternal => "MESH_INTERNAL",
            Location::MeshExternal => "MESH_EXTERNAL",
        };
        let ports: Vec<serde_json::Value> = service
            .ports
            .iter()
            .map(|p| {
                let mut port = serde_json::json!({"number": p.port, "name": &*p.name});
                if let Some(protocol) = protocol_name(p.protocol) {
                    port["protocol"] = protocol.into();
                }
                port
            })
            .collect();
        let mut spec = serde_json::json!({
            "hosts": [service.hostname.to_string()],
            "addresses": service.addresses.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
            "ports": ports,
            "location": location,
            "resolution": resolution,
        });
        if !service.selector.is_empty() {
            spec["workloadSelector"] = serde_json::json!({"labels": service.selector});
        }
        if let ExportTo::Namespaces(list) = &service.export_to {
            spec["exportTo"] = list.iter().map(|n| n.to_string()).collect::<Vec<_>>().into();
        }
        let Ok(body) = istio_api::spec_to_body(kind, &spec, true) else { continue };
        let version = ctx.store.get(&service.source).map_or(0, |s| s.revision);
        let resource = istio_api::mcp::Resource {
            metadata: Some(istio_api::mcp::Metadata {
                name: format!("{}/synthetic-{}", service.namespace, service.source.name),
                version: version.to_string(),
                ..Default::default()
            }),
            body: Some(body),
        };
        let value = resource.encode_to_vec();
        hasher.update(&value);
        response.resources.push(Any { type_url: istio_api::RESOURCE_TYPE_URL.into(), value });
    }
    let version = format!("{:016x}", hasher.digest());
    response.nonce = response.nonce.replacen(&response.version_info, &version, 1);
    response.version_info = version;
}

/// A port's protocol as a ServiceEntry names it (none when undeclared).
fn protocol_name(protocol: crate::config::protocol::Protocol) -> Option<&'static str> {
    use crate::config::protocol::Protocol;
    Some(match protocol {
        Protocol::Http => "HTTP",
        Protocol::Http2 => "HTTP2",
        Protocol::Grpc => "GRPC",
        Protocol::Tcp => "TCP",
        Protocol::Tls => "TLS",
        Protocol::Unknown => return None,
    })
}

/// A message as gRPC frames it.
fn framed(response: &DiscoveryResponse) -> Bytes {
    let len = response.encoded_len();
    let mut buf = BytesMut::with_capacity(FRAME_HEADER_LEN + len);
    buf.put_u8(0);
    buf.put_u32(len as u32);
    response.encode(&mut buf).expect("the buffer holds the message");
    buf.freeze()
}
