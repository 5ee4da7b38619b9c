//! One MCP-over-xDS server, read as istiod's `xds://` config source reads
//! it: a state-of-the-world ADS stream whose node says `GENERATOR: api`,
//! one wildcard subscription per type URL of every kind meshpush applies
//! (`istio_api::KINDS`: the canonical version, and the older versions
//! servers of earlier releases name it by), each response the full state
//! of its type.
//!
//! What a response does to the store:
//! - each resource is turned into the document a file would hold and
//!   parsed and validated as one (`config::mcp`); it is stored as
//!   `mcp:ADDRESS/KIND/NS/NAME`;
//! - a resource that is refused (it does not decode, or does not
//!   validate) keeps the last good version of its object, and its problem
//!   names the source; the rest applies;
//! - an object the server no longer lists under any of its type URLs is
//!   withdrawn (`Write::Withdraw`: only while it is still this server's
//!   version, so a key another source wrote since is left alone);
//! - objects labelled `istio.io/rev` for another revision are left out,
//!   as istiod leaves them out;
//! - every response is ACKed, as istiod ACKs it: the rest applied.
//!
//! When the stream ends or fails, the objects stay as they are; the client
//! reconnects after a backoff (from 0.5 s, doubling to a minute, jittered,
//! back to the start once a response arrives), and the next full state
//! reconciles the store.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::protobuf::{Struct, Value as ProtoValue, value::Kind};
use prost::Message;
use tokio::sync::mpsc;

use super::status::ServerStatus;
use super::transport::{self, TransportContext};
use crate::config::mesh::config_sources::McpServer;
use crate::config::parse::parse_json;
use crate::config::{ConfigKey, Problem, Severity, SourceRef, mcp as mcp_config};
use crate::istio_api::{self, IstioKind, mcp};
use crate::model::store::Write;
use crate::model::{ChangeSet, ConfigStore};

/// The largest response read (a mesh's whole config of one kind).
const MAX_MESSAGE: usize = 64 << 20;
/// The first wait before reconnecting, and the longest.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(500), Duration::from_secs(60));

/// What a client needs besides its server.
#[derive(Debug, Clone)]
pub struct ClientContext {
    /// The store it writes.
    pub store: Arc<ConfigStore>,
    /// Where its change sets go.
    pub changes: mpsc::Sender<ChangeSet>,
    /// What its connections need.
    pub transport: TransportContext,
    /// The revision served (`istio.io/rev`), if any.
    pub revision: Option<Arc<str>>,
    /// The node it introduces itself as.
    pub node: Node,
}

/// The node of meshpush's MCP clients: a sidecar-shaped id in meshpush's
/// own namespace (`sidecar~IP~POD.NS~NS.svc.cluster.local`, as istiod's
/// client sends it), `GENERATOR: api`, its revision and version.
pub fn node(namespace: &str, pod: &str, ip: &str, revision: Option<&str>) -> Node {
    let text = |s: &str| ProtoValue { kind: Some(Kind::StringValue(s.to_string())) };
    let mut fields = BTreeMap::new();
    fields.insert("GENERATOR".to_string(), text("api"));
    fields.insert("NAMESPACE".to_string(), text(namespace));
    // What istiod's own client says: newer than any release, so a server
    // gates nothing on it.
    fields.insert("ISTIO_VERSION".to_string(), text("65536.65536.65536"));
    if let Some(revision) = revision {
        fields.insert("ISTIO_REVISION".to_string(), text(revision));
    }
    Node {
        id: format!("sidecar~{ip}~{pod}.{namespace}~{namespace}.svc.cluster.local"),
        metadata: Some(Struct { fields: fields.into_iter().collect() }),
        ..Default::default()
    }
}

/// Reads `server` until aborted.
pub async fn run(server: McpServer, context: ClientContext, status: ServerStatus) {
    let mut client = Client { label: format!("mcp:{}", server.address), server, context, status, held: HashMap::new() };
    let mut wait = BACKOFF.0;
    loop {
        client.status.connecting();
        let responded = match client.session().await {
            Ok(responded) => {
                client.status.failed("the server closed the stream".into());
                responded
            }
            Err((responded, error)) => {
                client.status.failed(error);
                responded
            }
        };
        if responded {
            wait = BACKOFF.0;
        }
        let jitter = wait.mul_f64(fastrand::f64() * 0.5);
        tokio::time::sleep(wait + jitter).await;
        wait = (wait * 2).min(BACKOFF.1);
    }
}

struct Client {
    server: McpServer,
    /// `mcp:ADDRESS`, the start of every object's source.
    label: String,
    context: ClientContext,
    status: ServerStatus,
    /// The keys each type URL's last response listed (those refused with
    /// a last good version included).
    held: HashMap<String, BTreeSet<ConfigKey>>,
}

impl Client {
    /// One stream, until it ends (`Ok`) or fails; either way whether any
    /// response arrived.
    async fn session(&mut self) -> Result<bool, (bool, String)> {
        let store = self.context.store.snapshot();
        let channel = transport::connect(&self.server, &self.context.transport, &store)
            .await
            .map_err(|e| (false, format!("connecting: {e}")))?;
        drop(store);
        let mut ads = AggregatedDiscoveryServiceClient::new(channel).max_decoding_message_size(MAX_MESSAGE);
        let (requests, outbound) = mpsc::channel(64);
        let type_urls: Vec<String> = istio_api::KINDS.iter().flat_map(IstioKind::type_urls).collect();
        for (i, type_url) in type_urls.iter().enumerate() {
            let node = (i == 0).then(|| self.context.node.clone());
            let request = DiscoveryRequest { node, type_url: type_url.clone(), ..Default::default() };
            requests.try_send(request).expect("the channel holds every first request");
        }
        self.status.subscribed(type_urls.len());
        let mut responses = ads
            .stream_aggregated_resources(tokio_stream::wrappers::ReceiverStream::new(outbound))
            .await
            .map_err(|e| (false, format!("opening the ADS stream: {}", grpc_status(&e))))?
            .into_inner();
        self.status.connected();
        let mut responded = false;
        loop {
            let response = match responses.message().await {
                Ok(Some(response)) => response,
                Ok(None) => return Ok(responded),
                Err(e) => return Err((responded, format!("the stream failed: {}", grpc_status(&e)))),
            };
            responded = true;
            let ack = DiscoveryRequest {
                version_info: response.version_info.clone(),
                response_nonce: response.nonce.clone(),
                type_url: response.type_url.clone(),
                ..Default::default()
            };
            if !self.apply(response).await {
                return Ok(responded);
            }
            if requests.send(ack).await.is_err() {
                return Ok(responded);
            }
        }
    }

    /// Applies one response; false when the server is shutting down.
    async fn apply(&mut self, response: DiscoveryResponse) -> bool {
        let Some((kind, version)) = istio_api::kind_of_type_url(&response.type_url) else {
            // Not asked for: nothing to apply (a server may answer a type it
            // was never asked for; it is not this client's to read).
            return true;
        };
        let store_kind = mcp_config::config_kind(kind);
        let mut listed = BTreeSet::new();
        let mut writes = Vec::new();
        let mut problems = Vec::new();
        for any in &response.resources {
            let resource = match any_resource(any) {
                Ok(resource) => resource,
                Err(message) => {
                    problems.push(self.problem(kind, None, message));
                    continue;
                }
            };
            let named = mcp_config::resource_name(&resource).ok();
            let key = named.as_ref().map(|(ns, name)| ConfigKey::new(store_kind, ns, name));
            let in_revision = resource.metadata.as_ref().is_none_or(|m| {
                let labels: BTreeMap<String, String> = m.labels.clone().into_iter().collect();
                crate::source::kube::in_revision(self.context.revision.as_deref(), Some(&labels))
            });
            if !in_revision {
                continue;
            }
            let document = match mcp_config::document(kind, version, &resource) {
                Ok(document) => document,
                Err(e) => {
                    // Refused: a named object keeps its last good version.
                    problems.push(self.problem(kind, named.as_ref(), e.to_string()));
                    listed.extend(key);
                    continue;
                }
            };
            let (ns, name) = named.expect("a document has a name");
            let source = self.source(kind, &ns, &name);
            let parsed = parse_json(&source, &document);
            problems.extend(parsed.problems);
            listed.extend(key);
            for (object, source) in parsed.objects {
                writes.push(Write::put(object, source));
            }
        }
        let previous = self.held.insert(response.type_url.clone(), listed);
        for key in previous.unwrap_or_default() {
            let still = self.held.values().any(|keys| keys.contains(&key));
            if !still {
                let source: Arc<str> = self.source(kind, &key.namespace, &key.name).into();
                writes.push(Write::Withdraw(key, source));
            }
        }
        let count = self.held.get(&response.type_url).map_or(0, BTreeSet::len);
        self.status.responded(&response.type_url, count, problems);
        let Ok(permit) = self.context.changes.clone().reserve_owned().await else {
            return false;
        };
        self.context.store.apply_then(writes, move |changes| {
            permit.send(changes);
        });
        true
    }

    /// `mcp:ADDRESS/KIND/NS/NAME`.
    fn source(&self, kind: &IstioKind, namespace: &str, name: &str) -> String {
        format!("{}/{}/{namespace}/{name}", self.label, kind.kind)
    }

    fn problem(&self, kind: &IstioKind, named: Option<&(String, String)>, message: String) -> Problem {
        let file = match named {
            Some((ns, name)) => self.source(kind, ns, name),
            None => format!("{}/{}", self.label, kind.kind),
        };
        Problem {
            severity: Severity::Error,
            source: SourceRef { file: file.into(), doc: 0 },
            object: None,
            path: String::new(),
            message,
        }
    }
}

/// An `Any` of the envelope, decoded.
fn any_resource(any: &envoy_types::pb::google::protobuf::Any) -> Result<mcp::Resource, String> {
    if any.type_url != istio_api::RESOURCE_TYPE_URL {
        return Err(format!(
            "a resource of type {:?} is not an {}",
            crate::text::shown(&any.type_url),
            istio_api::RESOURCE_TYPE_URL
        ));
    }
    mcp::Resource::decode(any.value.as_slice()).map_err(|e| format!("the resource does not decode: {e}"))
}

/// A gRPC status as one line, its message cut to a safe length.
fn grpc_status(status: &tonic::Status) -> String {
    format!("{:?}: {}", status.code(), crate::text::shown(status.message()))
}
