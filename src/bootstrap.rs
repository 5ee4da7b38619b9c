//! Envoy bootstrap: the static YAML a sidecar or gateway Envoy starts from.
//!
//! Role: the one way meshpush tells an Envoy who it is and where its control plane
//! lives. Everything else an Envoy runs with arrives over ADS; the bootstrap only
//! carries the `node` (id, cluster, Istio-style metadata), the `ads_config` that
//! points at the static `xds-grpc` cluster, and a loopback-only admin listener;
//! and, from the ProxyConfig the agent runs the proxy by, the tracer Envoy
//! starts with and its stats matcher ([`observability`]).
//! `meshpush bootstrap` prints [`render`]'s output; the end-to-end tests start real
//! Envoys from it.
//!
//! Invariant: [`render`] either returns a bootstrap whose node id
//! [`Proxy::from_node`] accepts — so the server will accept the stream — or an
//! error naming the flag that was wrong. The YAML is built as a value tree and
//! serialized, never spliced from strings, so user-supplied labels and metadata
//! cannot break its structure.

use std::collections::BTreeMap;
use std::net::IpAddr;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::google::protobuf::{Struct, Value, value::Kind};
use serde_json::{Map, json};

use crate::config::mesh::proxy_config::{PROXY_CONFIG_METADATA, ProxyConfig};
use crate::model::{NodeError, Proxy};

pub mod grpc;
mod observability;

/// Name of the static cluster that carries ADS. Istio uses the same name, so
/// `istioctl proxy-config cluster` output looks familiar.
pub const XDS_CLUSTER: &str = "xds-grpc";

/// Name of the static cluster that reaches the workload's SDS server
/// (Istio's name; meshpush's mTLS settings refer to it).
pub use crate::generate::mtls::SDS_CLUSTER;

/// Metadata keys the bootstrap derives itself; `--meta` may not set them.
pub const DERIVED_META: [&str; 6] =
    ["NAMESPACE", "LABELS", "INTERCEPTION_MODE", "ISTIO_VERSION", "SDS", PROXY_CONFIG_METADATA];

/// What a bootstrap is made from: the flags of `meshpush bootstrap`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapOptions {
    /// Istio node id: `sidecar~IP~POD.NAMESPACE~NAMESPACE.svc.cluster.local`
    /// (or `router~…` for a gateway).
    pub node_id: String,
    /// `node.cluster`; when `None`, derived as Istio does: `APP.NAMESPACE`, APP being
    /// the `app`, `app.kubernetes.io/name` or canonical-name label, else the pod name.
    pub cluster: Option<String>,
    /// The meshpush xDS addresses, each `host:port` (`127.0.0.1:15010`,
    /// `[::1]:15010`, `meshpush.mesh.svc:15010`) or `unix:PATH` (a Unix domain
    /// socket, Envoy's `pipe` address). IPs and sockets give a STATIC cluster,
    /// names STRICT_DNS. Several are replicas of one control plane: the
    /// `xds-grpc` cluster balances over them, and when the replica Envoy is
    /// connected to goes away its next stream goes to another.
    pub xds_addrs: Vec<String>,
    /// Envoy's admin port; the admin listener binds 127.0.0.1 only.
    pub admin_port: u16,
    /// Workload labels (metadata `LABELS`); they select the proxy into subsets,
    /// Gateways and Sidecars.
    pub labels: BTreeMap<String, String>,
    /// Extra metadata, each value a string (`--meta CLUSTER_ID=Kubernetes`).
    pub meta: BTreeMap<String, String>,
    /// Metadata `INTERCEPTION_MODE`: `REDIRECT` (iptables, Istio's default),
    /// `TPROXY`, or `NONE` (outbound listeners bind 127.0.0.1; no iptables).
    pub interception: String,
    /// Use Delta xDS (`DELTA_GRPC`) instead of State of the World (`GRPC`).
    pub delta: bool,
    /// `node.locality` as `REGION/ZONE/SUBZONE` (parts may be left out).
    pub locality: Option<String>,
    /// The Unix socket of an SDS server holding the workload certificate
    /// (`meshpush agent`'s): adds the static `sds-grpc` cluster that
    /// mesh-mTLS clusters and listeners fetch `default` and `ROOTCA` from,
    /// as Istio's bootstrap does.
    pub sds_socket: Option<String>,
    /// A Gateway API Gateway (`NAMESPACE/NAME`) this router serves: adds the
    /// labels Istio's automated deployment gives the Gateway's pods
    /// (`gateway.networking.k8s.io/gateway-name`, `istio.io/gateway-name`).
    /// The node must be a router of that namespace.
    pub gateway: Option<String>,
    /// The ProxyConfig the proxy runs by (`meshpush agent`'s): sent as node
    /// metadata `PROXY_CONFIG`, its `ISTIO_META_*` `proxyMetadata` as
    /// metadata of their own, and its tracer and stats matcher rendered
    /// ([`observability`]).
    pub proxy_config: Option<ProxyConfig>,
}

impl BootstrapOptions {
    /// Options for `node_id` against the control plane at `xds_addr`, with Istio's
    /// defaults: admin port 15000, REDIRECT interception, SotW, no labels.
    pub fn new(node_id: impl Into<String>, xds_addr: impl Into<String>) -> Self {
        BootstrapOptions {
            node_id: node_id.into(),
            cluster: None,
            xds_addrs: vec![xds_addr.into()],
            admin_port: 15000,
            labels: BTreeMap::new(),
            meta: BTreeMap::new(),
            interception: "REDIRECT".to_string(),
            delta: false,
            locality: None,
            sds_socket: None,
            gateway: None,
            proxy_config: None,
        }
    }
}

/// Why a bootstrap could not be rendered. Each names the flag to fix.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// The node id was refused by the same parser the server uses.
    #[error("--node-id: {0}; example: sidecar~10.1.2.3~reviews-v1-abc.default~default.svc.cluster.local")]
    Node(NodeError),
    /// A `--label` or `--meta` argument is not `KEY=VALUE`.
    #[error("--{flag} {arg:?}: expected KEY=VALUE with a non-empty KEY")]
    KeyValue {
        /// `label` or `meta`.
        flag: &'static str,
        /// The argument as given.
        arg: String,
    },
    /// A `--meta` key would overwrite metadata the bootstrap derives itself.
    #[error("--meta {0}=…: {0} is set by meshpush (use --node-id, --label or --interception instead)")]
    ReservedMeta(String),
    /// The interception mode is not one the server knows.
    #[error("--interception {0:?}: expected REDIRECT, TPROXY or NONE")]
    Interception(String),
    /// The xDS address is not `host:port` or `unix:PATH`.
    #[error("--xds-addr {0:?}: expected HOST:PORT (127.0.0.1:15010) or unix:PATH (unix:/run/meshpush/xds.sock)")]
    XdsAddr(String),
    /// No xDS address, or sockets and host names together (Envoy resolves
    /// either a STATIC or a STRICT_DNS cluster, not both).
    #[error("--xds-addr: {0}")]
    XdsAddrs(&'static str),
    /// `--gateway` is not `NAMESPACE/NAME`, or the node cannot serve it.
    #[error("--gateway {0}")]
    Gateway(String),
    /// The SDS socket path is empty.
    #[error("the SDS socket path is empty")]
    SdsSocket,
    /// Serializing the bootstrap failed (a bug: the tree is built from strings).
    #[error("serializing the bootstrap: {0}")]
    Yaml(#[from] serde_yaml_ng::Error),
    /// Serializing the ProxyConfig failed (a bug: it is plain data).
    #[error("serializing the ProxyConfig: {0}")]
    Json(serde_json::Error),
}

/// Parses one `KEY=VALUE` argument of `--label` or `--meta` (`flag` names which,
/// for the error). The value may be empty and may itself contain `=`.
pub fn parse_key_value(flag: &'static str, arg: &str) -> Result<(String, String), BootstrapError> {
    match arg.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() && !key.contains(char::is_whitespace) => {
            Ok((key.to_string(), value.to_string()))
        }
        _ => Err(BootstrapError::KeyValue { flag, arg: arg.to_string() }),
    }
}

/// The labels that make a router serve the Gateway API Gateway `gateway`
/// (`NAMESPACE/NAME`), or a waypoint stand for it.
fn gateway_labels(gateway: &str, proxy: &Proxy) -> Result<[(String, String); 2], BootstrapError> {
    use crate::config::gateway_api::{GATEWAY_NAME_LABEL, ISTIO_GATEWAY_NAME_LABEL};
    let Some((namespace, name)) = gateway.split_once('/').filter(|(ns, n)| !ns.is_empty() && !n.is_empty()) else {
        return Err(BootstrapError::Gateway(format!("{gateway:?}: expected NAMESPACE/NAME (istio-system/ingress)")));
    };
    if !matches!(proxy.kind, crate::model::ProxyKind::Router | crate::model::ProxyKind::Waypoint) {
        return Err(BootstrapError::Gateway(format!(
            "{gateway}: a Gateway is served by a router (or a waypoint); --node-id must start with router~ or waypoint~"
        )));
    }
    if *proxy.namespace != *namespace {
        return Err(BootstrapError::Gateway(format!(
            "{gateway}: a Gateway is served by routers of its own namespace; the node is in {}",
            proxy.namespace
        )));
    }
    Ok([(GATEWAY_NAME_LABEL.to_string(), name.to_string()), (ISTIO_GATEWAY_NAME_LABEL.to_string(), name.to_string())])
}

/// Renders the bootstrap YAML for `opts`.
pub fn render(opts: &BootstrapOptions) -> Result<String, BootstrapError> {
    let proxy = proxy(opts)?;
    let (discovery, xds_endpoints) = xds_endpoints(&opts.xds_addrs)?;
    let (node, cluster) = node(opts, &proxy)?;
    let dynamic_resources = json!({
        "ads_config": {
            "api_type": if opts.delta { "DELTA_GRPC" } else { "GRPC" },
            "transport_api_version": "V3",
            "grpc_services": [{ "envoy_grpc": { "cluster_name": XDS_CLUSTER } }],
            // As Istio bootstraps Envoy: the node on the first request of
            // each stream only (a new stream, to a restarted server too,
            // starts with it), not in every ACK (Envoy 1.40's is ~62 KB).
            "set_node_on_first_message_only": true,
        },
        "cds_config": { "ads": {}, "resource_api_version": "V3" },
        "lds_config": { "ads": {}, "resource_api_version": "V3" },
    });
    let http2 = |keepalive: bool| {
        let mut options = json!({});
        if keepalive {
            // Istio's values: a dead control plane is noticed within ~40 s.
            options = json!({ "connection_keepalive": { "interval": "30s", "timeout": "10s" } });
        }
        json!({
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": { "http2_protocol_options": options },
            },
        })
    };
    let mut clusters = vec![json!({
        "name": XDS_CLUSTER,
        "type": discovery,
        "connect_timeout": "1s",
        "load_assignment": {
            "cluster_name": XDS_CLUSTER,
            "endpoints": [{ "lb_endpoints": xds_endpoints }],
        },
        "typed_extension_protocol_options": http2(true),
    })];
    if let Some(path) = &opts.sds_socket {
        if path.is_empty() {
            return Err(BootstrapError::SdsSocket);
        }
        clusters.push(json!({
            "name": SDS_CLUSTER,
            "type": "STATIC",
            "connect_timeout": "1s",
            "load_assignment": {
                "cluster_name": SDS_CLUSTER,
                "endpoints": [{ "lb_endpoints": [{ "endpoint": { "address": { "pipe": { "path": path } } } }] }],
            },
            "typed_extension_protocol_options": http2(false),
        }));
    }
    let tracer = opts
        .proxy_config
        .as_ref()
        .and_then(|c| c.tracing.as_ref())
        .and_then(|tracing| observability::tracer(tracing, &cluster));
    let tracing = tracer.map(|(collector, tracing)| {
        clusters.push(collector);
        tracing
    });
    let stats_config = opts
        .proxy_config
        .as_ref()
        .and_then(|c| c.proxy_stats_matcher.as_ref())
        .map(|matcher| observability::stats_config(matcher, &[&*proxy.ip]));
    let static_resources = json!({ "clusters": clusters });
    // A waypoint's listeners hand connections to each other through Envoy's
    // internal listeners, which this extension turns on (as Istio's
    // bootstrap does).
    let bootstrap_extensions = (proxy.kind == crate::model::ProxyKind::Waypoint).then(|| {
        json!([{
            "name": "envoy.bootstrap.internal_listener",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.bootstrap.internal_listener.v3.InternalListener",
                "buffer_size_kb": 64,
            },
        }])
    });
    let admin = json!({
        "address": { "socket_address": { "address": "127.0.0.1", "port_value": opts.admin_port } },
    });
    // The admin layer lets tests and operators flip runtime flags via /runtime_modify.
    let layered_runtime = json!({ "layers": [{ "name": "admin", "admin_layer": {} }] });
    // Without a connection limit Envoy warns at every start; Istio sets this one too.
    let overload_manager = json!({
        "resource_monitors": [{
            "name": "envoy.resource_monitors.global_downstream_max_connections",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.resource_monitors.downstream_connections.v3.DownstreamConnectionsConfig",
                "max_active_downstream_connections": i32::MAX,
            },
        }],
    });

    // Top-level sections in reading order (nested keys come out sorted).
    let mut doc = serde_yaml_ng::Mapping::new();
    for (key, section) in [
        ("node", node),
        ("dynamic_resources", dynamic_resources),
        ("static_resources", static_resources),
        ("admin", admin),
        ("layered_runtime", layered_runtime),
        ("overload_manager", overload_manager),
    ] {
        doc.insert(key.into(), serde_yaml_ng::to_value(section)?);
    }
    for (key, section) in
        [("tracing", tracing), ("stats_config", stats_config), ("bootstrap_extensions", bootstrap_extensions)]
    {
        if let Some(section) = section {
            doc.insert(key.into(), serde_yaml_ng::to_value(section)?);
        }
    }
    Ok(serde_yaml_ng::to_string(&doc)?)
}

/// The bootstrap's `node`: its id, `node.cluster` (returned too), locality
/// and Istio-style metadata. Envoy's bootstrap and gRPC's
/// ([`grpc::render`]) carry the same one.
fn node(opts: &BootstrapOptions, proxy: &Proxy) -> Result<(serde_json::Value, String), BootstrapError> {
    let mut labels = opts.labels.clone();
    if let Some(gateway) = &opts.gateway {
        labels.extend(gateway_labels(gateway, proxy)?);
    }

    let mut metadata = Map::new();
    if let Some(config) = &opts.proxy_config {
        for (key, value) in config.node_metadata() {
            metadata.insert(key, json!(value));
        }
        metadata.insert(PROXY_CONFIG_METADATA.into(), serde_json::to_value(config).map_err(BootstrapError::Json)?);
    }
    for (key, value) in &opts.meta {
        metadata.insert(key.clone(), json!(value));
    }
    metadata.insert("NAMESPACE".into(), json!(&*proxy.namespace));
    metadata.insert("LABELS".into(), json!(labels));
    metadata.insert("INTERCEPTION_MODE".into(), json!(opts.interception));
    metadata.insert("ISTIO_VERSION".into(), json!("meshpush"));
    // The server sends mesh mTLS to every proxy (as istiod does) unless it
    // says it cannot fetch the workload certificate it would name (over
    // `sds-grpc`): one without an agent says so.
    let holds_certificate = if opts.sds_socket.is_some() { "true" } else { "false" };
    metadata.insert(crate::model::proxy::SDS_METADATA.into(), json!(holds_certificate));

    let cluster = opts.cluster.clone().unwrap_or_else(|| derived_cluster(proxy, &labels));

    let mut node = json!({
        "id": opts.node_id,
        "cluster": cluster,
        "metadata": metadata,
    });
    if let Some(locality) = opts.locality.as_deref().filter(|l| !l.is_empty()) {
        let mut parts = locality.splitn(3, '/');
        let mut next = || parts.next().unwrap_or("").to_string();
        node["locality"] = json!({ "region": next(), "zone": next(), "sub_zone": next() });
    }
    Ok((node, cluster))
}

/// The proxy `opts` describe, as the server will read it: checks the node
/// id, the interception mode and the metadata keys with the server's own
/// node parser, so that what renders here is what the server accepts.
pub fn proxy(opts: &BootstrapOptions) -> Result<Proxy, BootstrapError> {
    if let Some(key) = opts.meta.keys().find(|k| DERIVED_META.contains(&k.as_str())) {
        return Err(BootstrapError::ReservedMeta(key.clone()));
    }
    let string = |s: &str| Value { kind: Some(Kind::StringValue(s.to_string())) };
    let node = Node {
        id: opts.node_id.clone(),
        metadata: Some(Struct { fields: [("INTERCEPTION_MODE".to_string(), string(&opts.interception))].into() }),
        ..Default::default()
    };
    Proxy::from_node(&node).map_err(|e| match e {
        NodeError::BadMetadata { key: "INTERCEPTION_MODE", .. } => {
            BootstrapError::Interception(opts.interception.clone())
        }
        other => BootstrapError::Node(other),
    })
}

/// `APP.NAMESPACE`, as Istio names a workload's `node.cluster`
/// (`model::canonical::app`, else the pod name).
fn derived_cluster(proxy: &Proxy, labels: &BTreeMap<String, String>) -> String {
    let app = crate::model::canonical::app(labels)
        .unwrap_or_else(|| proxy.workload.split('.').next().unwrap_or(&proxy.workload));
    format!("{app}.{}", proxy.namespace)
}

/// The `xds-grpc` cluster's discovery type and its `lb_endpoints`, one per `--xds-addr`.
fn xds_endpoints(addrs: &[String]) -> Result<(&'static str, serde_json::Value), BootstrapError> {
    if addrs.is_empty() {
        return Err(BootstrapError::XdsAddrs("at least one address is needed"));
    }
    let mut names = false;
    let mut sockets = false;
    let mut endpoints = Vec::with_capacity(addrs.len());
    for addr in addrs {
        let address = if let Some(path) = addr.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(BootstrapError::XdsAddr(addr.to_string()));
            }
            sockets = true;
            json!({ "pipe": { "path": path } })
        } else {
            let (host, port) = split_host_port(addr)?;
            names |= host.parse::<IpAddr>().is_err();
            json!({ "socket_address": { "address": host, "port_value": port } })
        };
        endpoints.push(json!({ "endpoint": { "address": address } }));
    }
    if names && sockets {
        return Err(BootstrapError::XdsAddrs("unix: sockets and host names cannot be mixed"));
    }
    // IPs and sockets need no resolver; names are resolved (and re-resolved) by Envoy.
    let discovery = if names { "STRICT_DNS" } else { "STATIC" };
    Ok((discovery, serde_json::Value::Array(endpoints)))
}

/// Splits `host:port`, `[v6]:port` included.
fn split_host_port(addr: &str) -> Result<(String, u16), BootstrapError> {
    let bad = || BootstrapError::XdsAddr(addr.to_string());
    let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
    // An IPv6 host must be bracketed, or its last group would read as the port.
    let host = match host.strip_prefix('[') {
        Some(v6) => v6.strip_suffix(']').filter(|h| h.parse::<IpAddr>().is_ok()).ok_or_else(bad)?,
        None if host.contains(':') => return Err(bad()),
        None => host,
    };
    let port: u16 = port.parse().map_err(|_| bad())?;
    if host.is_empty() || port == 0 {
        return Err(bad());
    }
    Ok((host.to_string(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIDECAR: &str = "sidecar~10.1.2.3~reviews-v1-abc.default~default.svc.cluster.local";

    fn parsed(opts: &BootstrapOptions) -> serde_json::Value {
        serde_yaml_ng::from_str(&render(opts).expect("renders")).expect("valid YAML")
    }

    #[test]
    fn node_carries_istio_metadata_and_labels_as_strings() {
        let mut opts = BootstrapOptions::new(SIDECAR, "127.0.0.1:15010");
        opts.labels = [("app".into(), "reviews".into()), ("version".into(), "v1".into())].into();
        opts.meta.insert("CLUSTER_ID".into(), "Kubernetes".into());
        opts.meta.insert("SIDECAR_PORT".into(), "15001".into());
        opts.interception = "NONE".into();
        let b = parsed(&opts);
        let node = &b["node"];
        assert_eq!(node["id"], SIDECAR);
        assert_eq!(node["cluster"], "reviews.default");
        assert_eq!(node["metadata"]["NAMESPACE"], "default");
        assert_eq!(node["metadata"]["LABELS"], json!({"app": "reviews", "version": "v1"}));
        assert_eq!(node["metadata"]["INTERCEPTION_MODE"], "NONE");
        assert_eq!(node["metadata"]["ISTIO_VERSION"], "meshpush");
        assert_eq!(node["metadata"]["CLUSTER_ID"], "Kubernetes");
        // A number-like value stays a string, as Istio's metadata does.
        assert_eq!(node["metadata"]["SIDECAR_PORT"], "15001");
    }

    #[test]
    fn cluster_falls_back_to_pod_name_and_can_be_set() {
        let opts = BootstrapOptions::new(SIDECAR, "127.0.0.1:15010");
        assert_eq!(parsed(&opts)["node"]["cluster"], "reviews-v1-abc.default");
        let opts = BootstrapOptions { cluster: Some("custom".into()), ..opts };
        assert_eq!(parsed(&opts)["node"]["cluster"], "custom");
    }

    #[test]
    fn delta_switches_the_ads_api_type() {
        let mut opts = BootstrapOptions::new(SIDECAR, "127.0.0.1:15010");
        let ads = |b: &serde_json::Value| b["dynamic_resources"]["ads_config"]["api_type"].clone();
        assert_eq!(ads(&parsed(&opts)), "GRPC");
        opts.delta = true;
        let b = parsed(&opts);
        assert_eq!(ads(&b), "DELTA_GRPC");
        assert_eq!(b["dynamic_resources"]["cds_config"], json!({"ads": {}, "resource_api_version": "V3"}));
        assert_eq!(b["dynamic_resources"]["lds_config"], json!({"ads": {}, "resource_api_version": "V3"}));
    }

    #[test]
    fn xds_cluster_is_static_for_an_ip_and_dns_for_a_name() {
        let cluster = |addr: &str| {
            let b = parsed(&BootstrapOptions::new(SIDECAR, addr));
            b["static_resources"]["clusters"][0].clone()
        };
        let c = cluster("127.0.0.1:15010");
        assert_eq!(c["name"], XDS_CLUSTER);
        assert_eq!(c["type"], "STATIC");
        let sa = &c["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"];
        assert_eq!(sa["address"], "127.0.0.1");
        assert_eq!(sa["port_value"], 15010);
        assert_eq!(cluster("meshpush.mesh.svc:15010")["type"], "STRICT_DNS");
        assert_eq!(cluster("[::1]:15010")["type"], "STATIC");
    }

    #[test]
    fn xds_cluster_dials_a_unix_socket_through_a_pipe_address() {
        let b = parsed(&BootstrapOptions::new(SIDECAR, "unix:/run/meshpush/xds.sock"));
        let c = &b["static_resources"]["clusters"][0];
        assert_eq!(c["type"], "STATIC");
        let address = &c["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"];
        assert_eq!(address, &json!({ "pipe": { "path": "/run/meshpush/xds.sock" } }));
        let err = render(&BootstrapOptions::new(SIDECAR, "unix:")).unwrap_err();
        assert!(matches!(err, BootstrapError::XdsAddr(_)), "{err}");
    }

    #[test]
    fn admin_binds_loopback_only() {
        let opts = BootstrapOptions { admin_port: 19000, ..BootstrapOptions::new(SIDECAR, "127.0.0.1:15010") };
        let admin = &parsed(&opts)["admin"]["address"]["socket_address"];
        assert_eq!(admin["address"], "127.0.0.1");
        assert_eq!(admin["port_value"], 19000);
    }

    #[test]
    fn refuses_malformed_node_ids() {
        for id in ["", "reviews", "sidecar~10.1.2.3~reviews.default", "proxy~10.1.2.3~a.b~b.svc.cluster.local"] {
            let err = render(&BootstrapOptions::new(id, "127.0.0.1:15010")).unwrap_err();
            assert!(matches!(err, BootstrapError::Node(NodeError::BadId(_))), "{id}: {err}");
            assert!(err.to_string().starts_with("--node-id"), "{err}");
        }
        let gateway = "router~10.0.0.1~ingressgateway-1.istio-system~istio-system.svc.cluster.local";
        let b = parsed(&BootstrapOptions::new(gateway, "127.0.0.1:15010"));
        assert_eq!(b["node"]["metadata"]["NAMESPACE"], "istio-system");
    }

    #[test]
    fn refuses_unknown_interception_modes() {
        let opts = BootstrapOptions { interception: "MAGIC".into(), ..BootstrapOptions::new(SIDECAR, "127.0.0.1:1") };
        let err = render(&opts).unwrap_err();
        assert!(matches!(err, BootstrapError::Interception(_)), "{err}");
        assert!(err.to_string().starts_with("--interception \"MAGIC\""), "{err}");
        let opts = BootstrapOptions { interception: "TPROXY".into(), ..opts };
        assert_eq!(parsed(&opts)["node"]["metadata"]["INTERCEPTION_MODE"], "TPROXY");
    }

    #[test]
    fn refuses_meta_that_would_shadow_derived_keys() {
        let mut opts = BootstrapOptions::new(SIDECAR, "127.0.0.1:15010");
        opts.meta.insert("LABELS".into(), "{}".into());
        assert!(matches!(render(&opts), Err(BootstrapError::ReservedMeta(k)) if k == "LABELS"));
    }

    #[test]
    fn several_xds_addresses_are_one_cluster_of_replicas() {
        let mut opts = BootstrapOptions::new(SIDECAR, "127.0.0.1:15010");
        opts.xds_addrs.push("127.0.0.2:15010".into());
        let b = parsed(&opts);
        let c = &b["static_resources"]["clusters"][0];
        assert_eq!(b["static_resources"]["clusters"].as_array().unwrap().len(), 1);
        assert_eq!(c["type"], "STATIC");
        let hosts: Vec<_> = c["load_assignment"]["endpoints"][0]["lb_endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["endpoint"]["address"]["socket_address"]["address"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(hosts, ["127.0.0.1", "127.0.0.2"]);
        // One name among IPs: Envoy resolves them all.
        opts.xds_addrs.push("meshpush-1.mesh.svc:15010".into());
        assert_eq!(parsed(&opts)["static_resources"]["clusters"][0]["type"], "STRICT_DNS");
        // A socket among names cannot be resolved; no address at all is refused too.
        opts.xds_addrs.push("unix:/run/meshpush/xds.sock".into());
        assert!(matches!(render(&opts).unwrap_err(), BootstrapError::XdsAddrs(_)));
        opts.xds_addrs.clear();
        assert!(matches!(render(&opts).unwrap_err(), BootstrapError::XdsAddrs(_)));
    }

    #[test]
    fn refuses_bad_xds_addresses() {
        for addr in ["127.0.0.1", "127.0.0.1:", ":15010", "127.0.0.1:99999", "host:0", "::1:15010"] {
            let err = render(&BootstrapOptions::new(SIDECAR, addr)).unwrap_err();
            assert!(matches!(err, BootstrapError::XdsAddr(_)), "{addr}: {err}");
        }
    }

    #[test]
    fn key_value_arguments_need_a_key() {
        assert_eq!(parse_key_value("label", "app=reviews").unwrap(), ("app".into(), "reviews".into()));
        assert_eq!(parse_key_value("meta", "K=a=b").unwrap(), ("K".into(), "a=b".into()));
        assert_eq!(parse_key_value("label", "empty=").unwrap(), ("empty".into(), String::new()));
        for bad in ["app", "=reviews", " =x", "a b=c"] {
            let err = parse_key_value("label", bad).unwrap_err();
            assert!(err.to_string().starts_with("--label"), "{bad}: {err}");
        }
    }

    #[test]
    fn labels_cannot_break_the_yaml_structure() {
        let mut opts = BootstrapOptions::new(SIDECAR, "127.0.0.1:15010");
        opts.labels.insert("app".into(), "x\n  evil: true\n\"'#: {".into());
        let b = parsed(&opts);
        assert_eq!(b["node"]["metadata"]["LABELS"]["app"], "x\n  evil: true\n\"'#: {");
        assert!(b["node"]["metadata"].get("evil").is_none());
    }

    #[test]
    fn an_sds_socket_adds_the_sds_grpc_cluster_beside_xds_grpc() {
        let plain = parsed(&BootstrapOptions::new(SIDECAR, "unix:/etc/istio/proxy/XDS"));
        assert_eq!(plain["static_resources"]["clusters"].as_array().unwrap().len(), 1);
        assert_eq!(
            plain["node"]["metadata"]["SDS"], "false",
            "without an agent, the node says it holds no certificate"
        );
        let mut opts = BootstrapOptions::new(SIDECAR, "unix:/etc/istio/proxy/XDS");
        opts.sds_socket = Some("/etc/istio/proxy/SDS".into());
        let b = parsed(&opts);
        assert_eq!(b["node"]["metadata"]["SDS"], "true");
        let clusters = b["static_resources"]["clusters"].as_array().unwrap();
        let sds = clusters.iter().find(|c| c["name"] == SDS_CLUSTER).expect("an sds-grpc cluster");
        assert_eq!(sds["type"], "STATIC");
        let address = &sds["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"];
        assert_eq!(address["pipe"]["path"], "/etc/istio/proxy/SDS");
        let options =
            &sds["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"];
        assert!(options["explicit_http_config"]["http2_protocol_options"].is_object(), "SDS is gRPC: HTTP/2");
        opts.sds_socket = Some(String::new());
        assert!(matches!(render(&opts), Err(BootstrapError::SdsSocket)));
    }

    #[test]
    fn a_proxy_config_travels_as_metadata_with_its_tracer_and_stats_matcher() {
        let (config, _) = ProxyConfig::parse(
            "test",
            "concurrency: 2\nproxyMetadata: {ISTIO_META_DNS_CAPTURE: 'true', PLAIN: x}\ntracing: {zipkin: {address: '127.0.0.1:9411'}}\n\
             proxyStatsMatcher: {inclusionPrefixes: [upstream_cx]}\n",
        )
        .unwrap();
        let opts = BootstrapOptions { proxy_config: Some(config), ..BootstrapOptions::new(SIDECAR, "127.0.0.1:1") };
        let b = parsed(&opts);
        let metadata = &b["node"]["metadata"];
        assert_eq!(metadata["DNS_CAPTURE"], "true", "ISTIO_META_ keys are node metadata without the prefix");
        assert!(metadata.get("PLAIN").is_none());
        assert_eq!(metadata["PROXY_CONFIG"]["proxyMetadata"]["PLAIN"], "x", "the whole config, as an object");
        assert_eq!(metadata["PROXY_CONFIG"]["tracing"]["zipkin"]["address"], "127.0.0.1:9411");
        let clusters = b["static_resources"]["clusters"].as_array().unwrap();
        assert!(clusters.iter().any(|c| c["name"] == "zipkin"), "the collector's cluster");
        assert_eq!(b["tracing"]["http"]["typed_config"]["collector_cluster"], "zipkin");
        let patterns = b["stats_config"]["stats_matcher"]["inclusion_list"]["patterns"].as_array().unwrap();
        assert!(patterns.contains(&json!({"prefix": "upstream_cx"})));
        // The server reads it back as the proxy's ProxyConfig.
        let node: Node = {
            let metadata = crate::generate::access_log::json_struct(b["node"]["metadata"].as_object().unwrap().clone());
            Node { id: SIDECAR.into(), metadata: Some(metadata), ..Default::default() }
        };
        let proxy = Proxy::from_node(&node).unwrap();
        assert_eq!(proxy.proxy_config.as_deref(), opts.proxy_config.as_ref());
        assert!(proxy.metadata.get("PROXY_CONFIG").is_none());
        // Without one, neither tracer nor matcher: Envoy keeps every stat.
        let plain = parsed(&BootstrapOptions::new(SIDECAR, "127.0.0.1:1"));
        assert!(plain.get("tracing").is_none() && plain.get("stats_config").is_none());
        let mut opts = BootstrapOptions::new(SIDECAR, "127.0.0.1:1");
        opts.meta.insert("PROXY_CONFIG".into(), "{}".into());
        assert!(matches!(render(&opts), Err(BootstrapError::ReservedMeta(_))));
    }
}
