//! In-memory ADS clients: the server's own stream logic, driven over channels.
//!
//! [`MemoryClient::connect`] starts a stream through
//! [`spawn_stream`] — the very task the gRPC
//! service runs — with an in-memory request channel instead of HTTP/2. The
//! client behaves like Envoy on the wire: CDS and LDS wildcard, then EDS and
//! RDS by the names those return, the node on every request and the full
//! name list in every ACK. Benches and tests use it to measure and check the
//! push path without sockets; the loadtest does the same over gRPC.

use std::collections::BTreeSet;
use std::sync::Arc;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::config::listener::v3::{Listener, filter::ConfigType};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    HttpConnectionManager, http_connection_manager::RouteSpecifier,
};
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::protobuf::Any;
use prost::Message;
use tokio::sync::mpsc;
use tonic::Status;

use crate::resource::TypeUrl;
use crate::xds::AdsService;
use crate::xds::server::spawn_stream;
use crate::xds::sotw::OutgoingResponse;
use crate::xds::stream::body::{FRAME_HEADER_LEN, nonce_text};

/// Per-type client state.
#[derive(Debug, Default, Clone)]
pub struct ClientWatch {
    /// Names subscribed (empty for wildcard types).
    pub names: Vec<String>,
    /// Last version received.
    pub version: String,
    /// Last nonce received.
    pub nonce: String,
}

/// One simulated Envoy.
#[derive(Debug)]
pub struct MemoryClient {
    /// Its node.
    pub node: Node,
    requests: mpsc::Sender<Result<DiscoveryRequest, Status>>,
    responses: mpsc::Receiver<Box<OutgoingResponse>>,
    /// Per-type state, by `TypeUrl::index`.
    pub watches: [ClientWatch; TypeUrl::COUNT],
    /// Responses received.
    pub received: u64,
    /// Bytes received (frame headers included).
    pub bytes: u64,
}

/// An Istio-style node: `id` (which carries the namespace), metadata
/// `NAMESPACE`, `INTERCEPTION_MODE` and `LABELS`, of a proxy without an
/// agent (`SDS: "false"`, as a `meshpush bootstrap` Envoy says): it holds
/// no workload certificate, so it is sent no mesh mTLS.
pub fn node(id: &str, interception: &str, labels: &[(&str, &str)]) -> Node {
    use envoy_types::pb::google::protobuf::{Struct, Value, value::Kind};
    let s = |v: &str| Value { kind: Some(Kind::StringValue(v.into())) };
    let namespace = id.split('~').nth(2).and_then(|w| w.split_once('.')).map(|(_, ns)| ns).unwrap_or("default");
    let labels = Struct { fields: labels.iter().map(|(k, v)| (k.to_string(), s(v))).collect() };
    Node {
        id: id.into(),
        metadata: Some(Struct {
            fields: [
                ("NAMESPACE".to_string(), s(namespace)),
                ("INTERCEPTION_MODE".to_string(), s(interception)),
                ("LABELS".to_string(), Value { kind: Some(Kind::StructValue(labels)) }),
                (crate::model::proxy::SDS_METADATA.to_string(), s("false")),
            ]
            .into(),
        }),
        ..Default::default()
    }
}

/// A proxyless gRPC application's node, as the bootstrap `meshpush agent
/// --grpc-bootstrap` writes names it: metadata `GENERATOR: grpc`,
/// `NAMESPACE` and `LABELS`; its DNS domain the id's last part.
pub fn grpc_node(id: &str, labels: &[(&str, &str)]) -> Node {
    use envoy_types::pb::google::protobuf::{Value, value::Kind};
    let mut node = node(id, "NONE", labels);
    let metadata = node.metadata.as_mut().expect("set above");
    metadata.fields.remove(crate::model::proxy::SDS_METADATA);
    metadata.fields.insert(
        crate::model::proxy::GENERATOR_METADATA.to_string(),
        Value { kind: Some(Kind::StringValue(crate::model::proxy::GRPC_GENERATOR.into())) },
    );
    node
}

/// Decodes a response as it came off the wire.
pub fn decode(response: &OutgoingResponse) -> DiscoveryResponse {
    let mut wire = Vec::with_capacity(response.wire_len());
    wire.extend_from_slice(&response.body[FRAME_HEADER_LEN..]);
    wire.extend_from_slice(&response.tail());
    DiscoveryResponse::decode(&wire[..]).expect("the server sends valid responses")
}

/// The EDS names the clusters among `resources` ask for, as Envoy subscribes them.
pub fn eds_names(resources: &[Any]) -> BTreeSet<String> {
    resources
        .iter()
        .filter_map(|a| Cluster::decode(&a.value[..]).ok())
        .filter(|c| c.eds_cluster_config.is_some())
        .map(|c| c.name)
        .collect()
}

/// The route configurations the listeners among `resources` ask for over RDS.
pub fn rds_names(resources: &[Any]) -> BTreeSet<String> {
    resources
        .iter()
        .filter_map(|a| Listener::decode(&a.value[..]).ok())
        .flat_map(|l| l.filter_chains.into_iter().flat_map(|c| c.filters))
        .filter_map(|f| match f.config_type {
            Some(ConfigType::TypedConfig(any)) if any.type_url.ends_with("HttpConnectionManager") => {
                HttpConnectionManager::decode(&any.value[..]).ok()
            }
            _ => None,
        })
        .filter_map(|hcm| match hcm.route_specifier {
            Some(RouteSpecifier::Rds(rds)) => Some(rds.route_config_name),
            _ => None,
        })
        .collect()
}

/// The ECDS names the listeners in `resources` refer to: HTTP filters
/// whose configuration is discovered (`config_discovery`), by filter name.
pub fn ecds_names(resources: &[Any]) -> BTreeSet<String> {
    use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::http_filter;
    resources
        .iter()
        .filter_map(|a| Listener::decode(&a.value[..]).ok())
        .flat_map(|l| l.filter_chains.into_iter().chain(l.default_filter_chain).flat_map(|c| c.filters))
        .filter_map(|f| match f.config_type {
            Some(ConfigType::TypedConfig(any)) if any.type_url.ends_with("HttpConnectionManager") => {
                HttpConnectionManager::decode(&any.value[..]).ok()
            }
            _ => None,
        })
        .flat_map(|hcm| hcm.http_filters)
        .filter(|f| matches!(f.config_type, Some(http_filter::ConfigType::ConfigDiscovery(_))))
        .map(|f| f.name)
        .collect()
}

/// The SDS names the listeners in `resources` refer to over ADS (their
/// chains' TLS certificates and validation contexts), as Envoy asks for them.
pub fn sds_names(resources: &[Any]) -> BTreeSet<String> {
    use envoy_types::pb::envoy::config::core::v3::transport_socket;
    use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{DownstreamTlsContext, common_tls_context};
    let mut out = BTreeSet::new();
    for l in resources.iter().filter_map(|a| Listener::decode(&a.value[..]).ok()) {
        for socket in l.filter_chains.iter().filter_map(|c| c.transport_socket.as_ref()) {
            let Some(transport_socket::ConfigType::TypedConfig(any)) = &socket.config_type else { continue };
            let Ok(context) = DownstreamTlsContext::decode(&any.value[..]) else { continue };
            let Some(common) = context.common_tls_context else { continue };
            out.extend(common.tls_certificate_sds_secret_configs.into_iter().map(|s| s.name));
            match common.validation_context_type {
                Some(common_tls_context::ValidationContextType::ValidationContextSdsSecretConfig(s)) => {
                    out.insert(s.name);
                }
                Some(common_tls_context::ValidationContextType::CombinedValidationContext(c)) => {
                    out.extend(c.validation_context_sds_secret_config.map(|s| s.name));
                }
                _ => {}
            }
        }
    }
    out
}

impl MemoryClient {
    /// Opens a stream for `node`; its first request is CDS wildcard, as Envoy's is.
    pub fn connect(ads: &AdsService, node: Node) -> MemoryClient {
        let proxy = Arc::new(crate::model::Proxy::from_node(&node).expect("a valid Istio node"));
        let (tx, rx) = mpsc::channel(16);
        let first = DiscoveryRequest {
            node: Some(node.clone()),
            type_url: TypeUrl::Cluster.as_str().into(),
            ..Default::default()
        };
        let responses =
            spawn_stream(ads, proxy, first, tokio_stream::wrappers::ReceiverStream::new(rx), "memory".into());
        MemoryClient { node, requests: tx, responses, watches: Default::default(), received: 0, bytes: 0 }
    }

    /// Sends a request for `t` with the client's current names, version and nonce.
    pub async fn request(&mut self, t: TypeUrl) {
        let w = &self.watches[t.index()];
        let req = DiscoveryRequest {
            version_info: w.version.clone(),
            node: Some(self.node.clone()),
            resource_names: w.names.clone(),
            type_url: t.as_str().into(),
            response_nonce: w.nonce.clone(),
            ..Default::default()
        };
        let _ = self.requests.send(Ok(req)).await;
    }

    /// Receives the next raw response (`None` when the stream ended).
    pub async fn recv_raw(&mut self) -> Option<OutgoingResponse> {
        let r = self.responses.recv().await?;
        self.received += 1;
        self.bytes += r.wire_len() as u64;
        Some(*r)
    }

    /// Receives and decodes the next response, records its version and
    /// nonce, and learns the names it implies (EDS names from clusters, RDS
    /// names from listeners). Returns the response and the types whose
    /// subscriptions grew.
    pub async fn recv(&mut self) -> Option<(DiscoveryResponse, Vec<TypeUrl>)> {
        let raw = self.recv_raw().await?;
        let response = decode(&raw);
        let t = TypeUrl::parse(&response.type_url).expect("a served type");
        let w = &mut self.watches[t.index()];
        w.version = response.version_info.clone();
        w.nonce = response.nonce.clone();
        let mut grew = Vec::new();
        match t {
            TypeUrl::Cluster => {
                if self.set_names(TypeUrl::Endpoint, eds_names(&response.resources)) {
                    grew.push(TypeUrl::Endpoint);
                }
            }
            TypeUrl::Listener => {
                if self.set_names(TypeUrl::Route, rds_names(&response.resources)) {
                    grew.push(TypeUrl::Route);
                }
                if self.set_names(TypeUrl::Secret, sds_names(&response.resources)) {
                    grew.push(TypeUrl::Secret);
                }
                if self.set_names(TypeUrl::ExtensionConfig, ecds_names(&response.resources)) {
                    grew.push(TypeUrl::ExtensionConfig);
                }
            }
            TypeUrl::Endpoint
            | TypeUrl::Route
            | TypeUrl::Secret
            | TypeUrl::ProxyConfig
            | TypeUrl::ExtensionConfig
            | TypeUrl::Address
            | TypeUrl::Authorization => {}
        }
        Some((response, grew))
    }

    fn set_names(&mut self, t: TypeUrl, names: BTreeSet<String>) -> bool {
        let names: Vec<String> = names.into_iter().collect();
        let w = &mut self.watches[t.index()];
        if w.names == names {
            return false;
        }
        w.names = names;
        true
    }

    /// Syncs like Envoy: CDS, then EDS for its clusters, LDS, then RDS for
    /// its route configs, ACKing everything. Returns when every type was
    /// received and ACKed once.
    pub async fn sync(&mut self) {
        let mut seen = [false; TypeUrl::COUNT];
        let mut listeners_asked = false;
        loop {
            // Envoy never asks for PCDS, the agent's type, nor for ztunnel's.
            let wanted = |t: TypeUrl, w: &[ClientWatch; TypeUrl::COUNT]| {
                t == TypeUrl::ProxyConfig
                    || t.is_workload_api()
                    || seen[t.index()]
                    || (!t.is_wildcard_type() && w[t.index()].names.is_empty())
            };
            if TypeUrl::PUSH_ORDER.iter().all(|t| wanted(*t, &self.watches)) {
                return;
            }
            let Some((response, grew)) = self.recv().await else { return };
            let t = TypeUrl::parse(&response.type_url).expect("served type");
            seen[t.index()] = true;
            self.request(t).await; // the ACK, with the full name list
            for g in grew {
                self.request(g).await;
            }
            if t == TypeUrl::Cluster && !listeners_asked {
                listeners_asked = true;
                self.request(TypeUrl::Listener).await;
            }
        }
    }

    /// Answers a raw response as Envoy does — an ACK echoing its nonce and
    /// version, with every name the client watches — without decoding its
    /// resources (benches count responses by the thousand). Returns its type.
    pub async fn ack(&mut self, response: &OutgoingResponse) -> TypeUrl {
        let t = TypeUrl::PUSH_ORDER
            .into_iter()
            .find(|t| response.body.ends_with(t.as_str().as_bytes()))
            .expect("type_url is the body's last field");
        // version_info, when set, is the body's first field.
        let mut fields = &response.body[FRAME_HEADER_LEN..];
        let mut version = String::new();
        if fields.first() == Some(&0x0a) {
            fields = &fields[1..];
            let len = prost::encoding::decode_varint(&mut fields).expect("the version's length") as usize;
            version = String::from_utf8_lossy(&fields[..len]).into_owned();
        }
        let w = &mut self.watches[t.index()];
        w.version = version;
        w.nonce = nonce_text(response.nonce);
        self.request(t).await;
        t
    }
}
