//! `Proxy`: the Envoy on the other end of an ADS stream, parsed once from its `node`.
//!
//! Node ids follow Istio: `TYPE~IP~POD.NAMESPACE~NAMESPACE.svc.cluster.local`,
//! TYPE being `sidecar`, `router`, `waypoint` or `ztunnel`; the last part is
//! the proxy's DNS domain. Metadata keys follow Istio too
//! (`NAMESPACE`, `LABELS`, `INTERCEPTION_MODE`, `ISTIO_VERSION`, `CLUSTER_ID`,
//! `GENERATOR`: `grpc` for a proxyless gRPC application, see [`XdsClient`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::google::protobuf::{Struct, Value, value::Kind};
use serde::Serialize;

use super::{Labels, Locality, NodeMetadata, intern_labels, no_labels};
use crate::config::mesh::proxy_config::{PROXY_CONFIG_METADATA, ProxyConfig};
use crate::text::Shown;

/// What kind of proxy it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum ProxyKind {
    /// A workload's sidecar.
    Sidecar,
    /// A gateway (ingress or egress).
    Router,
    /// Ambient mode's node proxy, ztunnel: it asks for the workload API
    /// only (workloads, services and policies), never for Envoy's types.
    Ztunnel,
    /// Ambient mode's L7 proxy: an Envoy that a Gateway of class
    /// `istio-waypoint` stands for; it takes HBONE from ztunnel for the
    /// Services and workloads bound to it, applies their L7 policy and
    /// routes, and sends HBONE on to the destination.
    Waypoint,
}

/// Which xDS client is on the other end: Envoy, or a gRPC library that
/// speaks xDS itself (proxyless gRPC, node metadata `GENERATOR: grpc`, as
/// Istio's `grpc-agent` template and bootstraps set it). A gRPC client
/// understands a subset of Envoy's API and names every resource it wants
/// (`HOST:PORT` listeners, `outbound|…` routes and clusters), so it is
/// served by a generator of its own (`generate::grpc`), while its kind
/// (a sidecar, by its node id) still decides what it sees.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum XdsClient {
    /// Envoy (a sidecar, gateway or waypoint) or ztunnel.
    #[default]
    Envoy,
    /// A proxyless gRPC application.
    Grpc,
}

/// The node metadata key that picks istiod's generator; [`GRPC_GENERATOR`] is proxyless gRPC.
pub const GENERATOR_METADATA: &str = "GENERATOR";
/// The value of [`GENERATOR_METADATA`] a proxyless gRPC node sends.
pub const GRPC_GENERATOR: &str = "grpc";

/// How traffic reaches the sidecar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum InterceptionMode {
    /// iptables REDIRECT (Istio's default): virtualOutbound on 15001, virtualInbound on 15006.
    Redirect,
    /// TPROXY: like REDIRECT for configuration purposes.
    Tproxy,
    /// No capture: outbound listeners bind `127.0.0.1:<port>`; the application
    /// talks to them directly.
    None,
}

/// Why a node was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeError {
    /// The request carried no node on the first message.
    #[error("the first request of the stream has no node")]
    Missing,
    /// The node id is not `type~ip~id~domain`.
    #[error("node id \"{}\" is not of the form TYPE~IP~POD.NAMESPACE~DOMAIN (TYPE sidecar, router, waypoint or ztunnel)", Shown(.0))]
    BadId(String),
    /// A metadata value could not be read.
    #[error("node \"{}\": metadata {key}: {}", Shown(id), Shown(reason))]
    BadMetadata {
        /// The node id.
        id: String,
        /// The metadata key.
        key: &'static str,
        /// What was wrong.
        reason: String,
    },
}

/// A connected proxy, as far as configuration generation is concerned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Proxy {
    /// The full node id.
    pub id: Arc<str>,
    /// Sidecar or router.
    pub kind: ProxyKind,
    /// The workload IP from the node id.
    pub ip: Arc<str>,
    /// `pod.namespace` part of the id.
    pub workload: Arc<str>,
    /// Namespace (metadata `NAMESPACE`, else from the id).
    pub namespace: Arc<str>,
    /// Workload labels (metadata `LABELS`), held once for every proxy
    /// that sends the same ([`intern_labels`]).
    pub labels: Labels,
    /// Interception mode (metadata `INTERCEPTION_MODE`, default REDIRECT).
    pub interception: InterceptionMode,
    /// Envoy's `node.cluster` (shown by proxy-status).
    pub cluster: Arc<str>,
    /// Envoy's `node.locality` (locality load balancing prefers endpoints near it).
    pub locality: Locality,
    /// Whether the proxy holds a workload certificate: its bootstrap has
    /// the `sds-grpc` cluster to an agent serving `default` (its certificate
    /// and key) and `ROOTCA` (the mesh root). istiod assumes every proxy
    /// does, and so does meshpush unless the node says otherwise with
    /// metadata `SDS: "false"` (a plain `meshpush bootstrap`, which has no
    /// agent, says so). Only a proxy holding one is sent mesh mTLS.
    pub mesh_certificates: bool,
    /// The ProxyConfig its agent runs it by (metadata `PROXY_CONFIG`);
    /// `None`: the node sent none, and the mesh's `defaultConfig` applies.
    pub proxy_config: Option<Arc<ProxyConfig>>,
    /// Envoy, or a proxyless gRPC application (metadata `GENERATOR: grpc`).
    pub client: XdsClient,
    /// The DNS domain of the node id's last part (`NAMESPACE.svc.cluster.local`):
    /// a gRPC client's short names (`foo:8080`) expand with it, as Istio's do.
    pub dns_domain: Arc<str>,
    /// Every other metadata value, flattened to strings.
    pub metadata: NodeMetadata,
}

/// The metadata key that says whether a proxy's agent serves it a
/// workload certificate over SDS: `"false"` says it holds none; absent or
/// any other value, it holds one (Istio's agents once sent `SDS: "true"`,
/// and send nothing since Istio 1.8).
pub const SDS_METADATA: &str = "SDS";

impl Proxy {
    /// The network it is on (metadata `NETWORK`, which the injector sets
    /// from `ISTIO_META_NETWORK`); `""`: the default network.
    pub fn network(&self) -> &str {
        self.metadata.get("NETWORK").unwrap_or_default()
    }

    /// The id of the cluster it runs in (metadata `CLUSTER_ID`), when it says.
    pub fn cluster_id(&self) -> Option<&str> {
        self.metadata.get("CLUSTER_ID").filter(|c| !c.is_empty())
    }

    /// The networks whose endpoints it asks to see (metadata
    /// `REQUESTED_NETWORK_VIEW`, comma-separated, as an east-west gateway
    /// names its own network); `None`: every network.
    pub fn requested_network_view(&self) -> Option<Vec<&str>> {
        let view = self.metadata.get("REQUESTED_NETWORK_VIEW")?;
        let networks: Vec<&str> = view.split(',').map(str::trim).filter(|n| !n.is_empty()).collect();
        (!networks.is_empty()).then_some(networks)
    }

    /// Parses an Envoy node. This is the one place node ids are read.
    pub fn from_node(node: &Node) -> Result<Proxy, NodeError> {
        let bad_id = || NodeError::BadId(node.id.clone());
        let parts: Vec<&str> = node.id.split('~').collect();
        let [kind, ip, workload, domain] = parts[..] else { return Err(bad_id()) };
        let kind = match kind {
            "sidecar" => ProxyKind::Sidecar,
            "router" => ProxyKind::Router,
            "ztunnel" => ProxyKind::Ztunnel,
            "waypoint" => ProxyKind::Waypoint,
            _ => return Err(bad_id()),
        };
        if ip.is_empty() || workload.is_empty() {
            return Err(bad_id());
        }
        // PROXY_CONFIG is read into `proxy_config` below, not kept as text.
        let metadata = node.metadata.as_ref().map(flatten).unwrap_or_default();
        let proxy_config = match node.metadata.as_ref().and_then(|m| m.fields.get(PROXY_CONFIG_METADATA)) {
            None => None,
            Some(v) => Some(Arc::new(proxy_config_from(v).map_err(|reason| NodeError::BadMetadata {
                id: node.id.clone(),
                key: PROXY_CONFIG_METADATA,
                reason,
            })?)),
        };
        let namespace = metadata
            .get("NAMESPACE")
            .map(str::to_string)
            .or_else(|| workload.split_once('.').map(|(_, ns)| ns.to_string()))
            .or_else(|| domain.split('.').next().filter(|s| !s.is_empty()).map(str::to_string))
            .unwrap_or_else(|| "default".to_string());
        let labels = match node.metadata.as_ref().and_then(|m| m.fields.get("LABELS")) {
            None => no_labels(),
            Some(v) => labels_from(v)
                .map_err(|reason| NodeError::BadMetadata { id: node.id.clone(), key: "LABELS", reason })
                .map(intern_labels)?,
        };
        let interception = match metadata.get("INTERCEPTION_MODE") {
            None | Some("REDIRECT") => InterceptionMode::Redirect,
            Some("TPROXY") => InterceptionMode::Tproxy,
            Some("NONE") => InterceptionMode::None,
            Some(other) => {
                return Err(NodeError::BadMetadata {
                    id: node.id.clone(),
                    key: "INTERCEPTION_MODE",
                    reason: format!("{other:?} is not REDIRECT, TPROXY or NONE"),
                });
            }
        };
        Ok(Proxy {
            id: node.id.as_str().into(),
            kind,
            ip: ip.into(),
            workload: workload.into(),
            namespace: namespace.into(),
            labels,
            interception,
            cluster: node.cluster.as_str().into(),
            locality: node
                .locality
                .as_ref()
                .map(|l| Locality { region: l.region.clone(), zone: l.zone.clone(), subzone: l.sub_zone.clone() })
                .unwrap_or_default(),
            mesh_certificates: metadata.get(SDS_METADATA).is_none_or(|v| v != "false"),
            proxy_config,
            client: match metadata.get(GENERATOR_METADATA) {
                Some(GRPC_GENERATOR) => XdsClient::Grpc,
                _ => XdsClient::Envoy,
            },
            dns_domain: domain.into(),
            metadata,
        })
    }
}

/// Flattens metadata to strings: strings stay, numbers and booleans print,
/// lists and structs become JSON. `PROXY_CONFIG` is left out.
fn flatten(s: &Struct) -> NodeMetadata {
    flat(s).filter(|(k, _)| *k != PROXY_CONFIG_METADATA).collect()
}

/// A struct's fields, flattened to strings as [`flatten`] says.
fn flat(s: &Struct) -> impl Iterator<Item = (&str, String)> {
    s.fields.iter().map(|(k, v)| (k.as_str(), value_to_string(v)))
}

fn value_to_string(v: &Value) -> String {
    match &v.kind {
        Some(Kind::StringValue(s)) => s.clone(),
        Some(Kind::BoolValue(b)) => b.to_string(),
        Some(Kind::NumberValue(n)) => n.to_string(),
        Some(Kind::NullValue(_)) | None => String::new(),
        Some(Kind::ListValue(_)) | Some(Kind::StructValue(_)) => value_to_json(v).to_string(),
    }
}

fn value_to_json(v: &Value) -> serde_json::Value {
    match &v.kind {
        Some(Kind::StringValue(s)) => serde_json::Value::String(s.clone()),
        Some(Kind::BoolValue(b)) => serde_json::Value::Bool(*b),
        // A Struct keeps every number as a double: a whole one reads back as an integer.
        Some(Kind::NumberValue(n)) if n.fract() == 0.0 && n.abs() < 9.0e15 => serde_json::json!(*n as i64),
        Some(Kind::NumberValue(n)) => serde_json::json!(n),
        Some(Kind::NullValue(_)) | None => serde_json::Value::Null,
        Some(Kind::ListValue(l)) => l.values.iter().map(value_to_json).collect(),
        Some(Kind::StructValue(s)) => s.fields.iter().map(|(k, v)| (k.clone(), value_to_json(v))).collect(),
    }
}

/// `PROXY_CONFIG`: a struct of ProxyConfig's fields (as pilot-agent sends
/// it), or a JSON string of one. Fields meshpush does not model are
/// skipped, as istiod skips the ones it does not read.
fn proxy_config_from(v: &Value) -> Result<ProxyConfig, String> {
    let json = match &v.kind {
        Some(Kind::StringValue(s)) => serde_json::from_str(s).map_err(|e| e.to_string())?,
        _ => value_to_json(v),
    };
    let config: ProxyConfig = serde_json::from_value(json).map_err(|e| e.to_string())?;
    config.check().map_err(|(path, why)| format!("{path}: {why}"))?;
    Ok(config)
}

/// `LABELS` is a struct of strings in Istio; a JSON string of an object is accepted too.
fn labels_from(v: &Value) -> Result<BTreeMap<String, String>, String> {
    match &v.kind {
        Some(Kind::StructValue(s)) => Ok(flat(s).map(|(k, v)| (k.to_string(), v)).collect()),
        Some(Kind::StringValue(text)) if text.trim().is_empty() => Ok(BTreeMap::new()),
        Some(Kind::StringValue(text)) => {
            serde_json::from_str(text).map_err(|e| format!("not a JSON object of strings: {e}"))
        }
        _ => Err("expected a struct of strings".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, meta: &[(&str, Value)]) -> Node {
        Node {
            id: id.into(),
            cluster: "reviews.default".into(),
            metadata: Some(Struct { fields: meta.iter().map(|(k, v)| (k.to_string(), v.clone())).collect() }),
            ..Default::default()
        }
    }

    fn s(v: &str) -> Value {
        Value { kind: Some(Kind::StringValue(v.into())) }
    }

    #[test]
    fn parses_istio_sidecar_node() {
        let labels = Value {
            kind: Some(Kind::StructValue(Struct {
                fields: [("app".to_string(), s("reviews")), ("version".to_string(), s("v1"))].into(),
            })),
        };
        let p = Proxy::from_node(&node(
            "sidecar~10.1.2.3~reviews-v1-abc.default~default.svc.cluster.local",
            &[("LABELS", labels), ("INTERCEPTION_MODE", s("NONE"))],
        ))
        .unwrap();
        assert_eq!(p.kind, ProxyKind::Sidecar);
        assert_eq!(&*p.ip, "10.1.2.3");
        assert_eq!(&*p.namespace, "default");
        assert_eq!(p.labels["version"], "v1");
        assert_eq!(p.interception, InterceptionMode::None);
    }

    #[test]
    fn proxies_that_send_the_same_labels_share_one_copy() {
        let labels = |version: &str| Value {
            kind: Some(Kind::StructValue(Struct {
                fields: [("app".to_string(), s("ledger-shared")), ("version".to_string(), s(version))].into(),
            })),
        };
        let proxy = |pod: &str, version: &str| {
            let id = format!("sidecar~10.1.2.3~{pod}.default~default.svc.cluster.local");
            Proxy::from_node(&node(&id, &[("LABELS", labels(version))])).unwrap()
        };
        let (a, b, c) = (proxy("ledger-a", "v1"), proxy("ledger-b", "v1"), proxy("ledger-c", "v2"));
        assert!(Arc::ptr_eq(&a.labels, &b.labels), "two replicas, one map");
        assert!(!Arc::ptr_eq(&a.labels, &c.labels));
        assert_eq!(c.labels["version"], "v2");
        let none = Proxy::from_node(&node("sidecar~10.1.2.4~bare.default~default.svc.cluster.local", &[])).unwrap();
        assert!(none.labels.is_empty());
    }

    #[test]
    fn a_proxy_holds_a_workload_certificate_unless_its_node_says_it_holds_none() {
        let id = "sidecar~10.1.2.3~reviews-v1-abc.default~default.svc.cluster.local";
        let holds = |meta: &[(&str, Value)]| Proxy::from_node(&node(id, meta)).unwrap().mesh_certificates;
        assert!(holds(&[]), "Istio's pilot-agent sends no SDS key: it holds one, as istiod assumes");
        assert!(holds(&[("SDS", s("true"))]));
        assert!(!holds(&[("SDS", s("false"))]), "a bootstrap without an agent");
    }

    #[test]
    fn a_grpc_generator_node_is_a_proxyless_grpc_client_with_its_dns_domain() {
        let id = "sidecar~10.1.2.3~echo-abc.app~app.svc.cluster.local";
        let p = Proxy::from_node(&node(id, &[("GENERATOR", s("grpc"))])).unwrap();
        assert_eq!((p.kind, p.client), (ProxyKind::Sidecar, XdsClient::Grpc));
        assert_eq!(&*p.dns_domain, "app.svc.cluster.local");
        let envoy = Proxy::from_node(&node(id, &[("GENERATOR", s("api"))])).unwrap();
        assert_eq!(envoy.client, XdsClient::Envoy, "only `grpc` picks the gRPC generator");
    }

    #[test]
    fn namespace_metadata_wins_over_id() {
        let p = Proxy::from_node(&node(
            "router~10.0.0.1~gw.istio-system~istio-system.svc.cluster.local",
            &[("NAMESPACE", s("edge"))],
        ))
        .unwrap();
        assert_eq!(p.kind, ProxyKind::Router);
        assert_eq!(&*p.namespace, "edge");
        assert_eq!(p.interception, InterceptionMode::Redirect);
    }

    #[test]
    fn refuses_malformed_ids() {
        for id in ["", "sidecar", "sidecar~1.2.3.4~x", "gateway~1.2.3.4~a.b~b.svc", "sidecar~~a.b~c"] {
            assert!(matches!(Proxy::from_node(&node(id, &[])), Err(NodeError::BadId(_))), "{id}");
        }
    }

    #[test]
    fn refuses_unknown_interception_mode() {
        let err =
            Proxy::from_node(&node("sidecar~1.1.1.1~a.b~b.svc.cluster.local", &[("INTERCEPTION_MODE", s("MAGIC"))]))
                .unwrap_err();
        assert!(err.to_string().contains("INTERCEPTION_MODE"), "{err}");
    }
}
