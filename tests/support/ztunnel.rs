//! A stand-in ztunnel: a delta ADS client that behaves on the wire as
//! ztunnel does (`src/xds/client.rs` of istio/ztunnel). Its node is
//! ztunnel's (the `ztunnel~` id, string metadata); it asks for its two
//! types at once, Address then Authorization, with the node on each and
//! empty subscriptions (a wildcard) unless it names resources (on demand);
//! it ACKs and NACKs by nonce; and it reconnects with
//! `initial_resource_versions`. On the secure port it presents no client
//! certificate, only `authorization: Bearer TOKEN` and `clusterid`, as
//! ztunnel does. Responses decode with the workload API's own protos.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DeltaDiscoveryResponse};
use envoy_types::pb::google::protobuf::{Struct, Value, value::Kind};
use envoy_types::pb::google::rpc::Status as RpcStatus;
use meshpush::resource::TypeUrl;
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

/// How long a stand-in waits for any one answer.
pub const WAIT: Duration = Duration::from_secs(10);

/// The node of a ztunnel on `node_name` whose own Pod is `pod` (in
/// `istio-system`), as ztunnel builds it (`Config::node`): the id, and its
/// metadata as strings.
pub fn node_of(pod: &str, ip: &str, node_name: &str) -> Node {
    let text = |s: &str| Value { kind: Some(Kind::StringValue(s.into())) };
    let metadata: BTreeMap<String, Value> = [
        ("NAME", pod),
        ("NAMESPACE", "istio-system"),
        ("INSTANCE_IPS", ip),
        ("NODE_NAME", node_name),
        ("CLUSTER_ID", "Kubernetes"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), text(v)))
    .collect();
    Node {
        id: format!("ztunnel~{ip}~{pod}.istio-system~istio-system.svc.cluster.local"),
        metadata: Some(Struct { fields: metadata.into_iter().collect() }),
        ..Default::default()
    }
}

/// The stand-in's usual node: Pod `ztunnel-hq5pl` on `node-a`.
pub fn ztunnel_node() -> Node {
    node_of("ztunnel-hq5pl", "10.1.0.2", "node-a")
}

/// What one stream opens with.
#[derive(Debug, Clone, Default)]
pub struct Open {
    /// Its node (default: [`ztunnel_node`]).
    pub node: Option<Node>,
    /// The versions it holds of each type (Address, Authorization): sent
    /// as `initial_resource_versions` on a reconnect.
    pub held: [HashMap<String, String>; 2],
    /// The names it subscribes to first, per type; empty for a wildcard.
    pub subscribe: [Vec<String>; 2],
    /// Its bearer token (the secure port), sent with `clusterid: Kubernetes`.
    pub token: Option<String>,
}

/// One ztunnel stream.
pub struct Ztunnel {
    /// Requests to send.
    pub tx: mpsc::Sender<DeltaDiscoveryRequest>,
    /// Responses.
    pub rx: Streaming<DeltaDiscoveryResponse>,
}

impl Ztunnel {
    /// Connects over plaintext to `addr` as [`ztunnel_node`], with
    /// wildcard subscriptions, holding `held`.
    pub async fn connect(addr: SocketAddr, held: &[HashMap<String, String>; 2]) -> Result<Ztunnel, tonic::Status> {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .expect("a URI")
            .connect()
            .await
            .expect("the xDS port accepts");
        Ztunnel::open(channel, Open { held: held.clone(), ..Open::default() }).await
    }

    /// Opens a stream on `channel` and sends both initial requests, as
    /// ztunnel does: Address then Authorization, the node on each.
    pub async fn open(channel: tonic::transport::Channel, open: Open) -> Result<Ztunnel, tonic::Status> {
        let mut client = AggregatedDiscoveryServiceClient::new(channel);
        let (tx, rx) = mpsc::channel(16);
        let node = open.node.unwrap_or_else(ztunnel_node);
        for ((t, versions), names) in
            [TypeUrl::Address, TypeUrl::Authorization].into_iter().zip(open.held).zip(open.subscribe)
        {
            tx.send(DeltaDiscoveryRequest {
                node: Some(node.clone()),
                type_url: t.as_str().into(),
                initial_resource_versions: versions,
                resource_names_subscribe: names,
                ..Default::default()
            })
            .await
            .unwrap();
        }
        let mut request = tonic::Request::new(ReceiverStream::new(rx));
        if let Some(token) = &open.token {
            request.metadata_mut().insert("authorization", format!("Bearer {token}").parse().expect("ASCII"));
            request.metadata_mut().insert("clusterid", "Kubernetes".parse().expect("ASCII"));
        }
        let response = tokio::time::timeout(WAIT, client.delta_aggregated_resources(request))
            .await
            .expect("the stream opens or is refused within the deadline")?;
        Ok(Ztunnel { tx, rx: response.into_inner() })
    }

    /// The next response.
    pub async fn recv(&mut self) -> DeltaDiscoveryResponse {
        tokio::time::timeout(WAIT, self.rx.message())
            .await
            .expect("a response within the deadline")
            .expect("no stream error")
            .expect("stream still open")
    }

    /// The status the stream ends with before any response (a refusal
    /// comes either as the call's status or as the stream's first item).
    pub async fn refusal(opened: Result<Ztunnel, tonic::Status>) -> tonic::Status {
        match opened {
            Err(status) => status,
            Ok(mut z) => match tokio::time::timeout(WAIT, z.rx.message()).await.expect("an answer") {
                Err(status) => status,
                Ok(m) => panic!("the ztunnel was served: {m:?}"),
            },
        }
    }

    /// ACKs `r`; or NACKs it, as ztunnel does, naming what it rejected.
    pub async fn answer(&mut self, r: &DeltaDiscoveryResponse, rejected: Option<&str>) {
        let error_detail = rejected.map(|m| RpcStatus { code: 0, message: m.into(), details: vec![] });
        let req = DeltaDiscoveryRequest {
            type_url: r.type_url.clone(),
            response_nonce: r.nonce.clone(),
            error_detail,
            ..Default::default()
        };
        self.tx.send(req).await.unwrap();
    }

    /// Subscribes to more `names` of type `t` (ztunnel's on-demand lookup
    /// of a workload or service it does not hold).
    pub async fn subscribe(&mut self, t: TypeUrl, names: &[&str]) {
        let req = DeltaDiscoveryRequest {
            type_url: t.as_str().into(),
            resource_names_subscribe: names.iter().map(|n| n.to_string()).collect(),
            ..Default::default()
        };
        self.tx.send(req).await.unwrap();
    }

    /// The first response of each of its two types, ACKed.
    pub async fn initial(&mut self) -> (DeltaDiscoveryResponse, DeltaDiscoveryResponse) {
        let mut by_type: HashMap<String, DeltaDiscoveryResponse> = HashMap::new();
        while by_type.len() < 2 {
            let r = self.recv().await;
            self.answer(&r, None).await;
            by_type.insert(r.type_url.clone(), r);
        }
        (by_type.remove(TypeUrl::Address.as_str()).unwrap(), by_type.remove(TypeUrl::Authorization.as_str()).unwrap())
    }
}

/// The resources of a response by name, decoded.
pub fn decoded<M: Message + Default>(r: &DeltaDiscoveryResponse) -> BTreeMap<String, M> {
    r.resources
        .iter()
        .map(|x| {
            let any = x.resource.as_ref().expect("a resource carries its body");
            assert_eq!(any.type_url, r.type_url, "each Any is of the response's type");
            (x.name.clone(), M::decode(&any.value[..]).expect("decodes with ztunnel's protos"))
        })
        .collect()
}

/// The version of each resource of a response, by name.
pub fn versions(r: &DeltaDiscoveryResponse) -> HashMap<String, String> {
    r.resources.iter().map(|x| (x.name.clone(), x.version.clone())).collect()
}
