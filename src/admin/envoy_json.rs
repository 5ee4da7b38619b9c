//! Envoy resources as JSON, in the field names of Envoy's own `config_dump`.
//!
//! envoy-types' messages have no serde support and meshpush carries no
//! protobuf descriptors, so this renders by hand the fields that operators
//! read and that `proxy-config`'s tables need: names, types, addresses,
//! filter chains and where they route, virtual hosts and route matches,
//! endpoints with health and weight. Field names and enum spellings follow
//! the proto JSON mapping Envoy prints (`snake_case`, `"EDS"`, `"5s"`), so a
//! reader of an Envoy dump finds the same paths here.
//!
//! What is not rendered is not lost: every resource also carries its exact
//! encoded bytes (see [`super::config_dump`]), decodable with any protobuf
//! tool.

use base64::Engine as _;
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::cluster::v3::cluster::{ClusterDiscoveryType, DiscoveryType, LbPolicy};
use envoy_types::pb::envoy::config::core::v3::{
    Address, DataSource, HealthStatus, TransportSocket, address, data_source, socket_address, transport_socket,
};
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::endpoint::v3::lb_endpoint::HostIdentifier;
use envoy_types::pb::envoy::config::listener::v3::{Filter, FilterChain, FilterChainMatch, Listener, filter};
use envoy_types::pb::envoy::config::route::v3::{
    Route, RouteConfiguration, RouteMatch, VirtualHost, route, route_action, route_match,
};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    HttpConnectionManager, http_connection_manager::RouteSpecifier,
};
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::{
    TcpProxy, tcp_proxy::ClusterSpecifier as TcpClusterSpecifier,
};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    CertificateValidationContext, CommonTlsContext, DownstreamTlsContext, SdsSecretConfig, Secret, UpstreamTlsContext,
    common_tls_context, secret,
};
use envoy_types::pb::envoy::r#type::matcher::v3::string_matcher;
use envoy_types::pb::google::protobuf::{Any, Duration};
use prost::{Message, Name};
use serde_json::{Map, Value, json};

/// `@type` of a message.
fn type_url<M: Name>() -> String {
    M::type_url()
}

fn duration(d: &Duration) -> Value {
    if d.nanos == 0 {
        json!(format!("{}s", d.seconds))
    } else {
        json!(format!("{:.3}s", d.seconds as f64 + f64::from(d.nanos) / 1e9))
    }
}

/// Inserts `value` under `key` unless it is empty (proto JSON omits defaults).
fn put(obj: &mut Map<String, Value>, key: &str, value: Value) {
    let empty = match &value {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(_) => false,
    };
    if !empty {
        obj.insert(key.to_string(), value);
    }
}

/// A socket address as `{"socket_address": {"address", "port_value"}}`.
pub fn address_json(a: &Address) -> Value {
    match &a.address {
        Some(address::Address::SocketAddress(s)) => {
            let mut sa = Map::new();
            put(&mut sa, "address", json!(s.address));
            match s.port_specifier {
                Some(socket_address::PortSpecifier::PortValue(p)) => put(&mut sa, "port_value", json!(p)),
                Some(socket_address::PortSpecifier::NamedPort(ref n)) => put(&mut sa, "named_port", json!(n)),
                None => {}
            }
            json!({ "socket_address": sa })
        }
        Some(address::Address::Pipe(p)) => json!({ "pipe": { "path": p.path } }),
        _ => json!({}),
    }
}

/// A Cluster.
pub fn cluster_json(c: &Cluster) -> Value {
    let mut o = Map::new();
    o.insert("@type".into(), json!(type_url::<Cluster>()));
    put(&mut o, "name", json!(c.name));
    if let Some(ClusterDiscoveryType::Type(t)) = c.cluster_discovery_type {
        put(&mut o, "type", json!(DiscoveryType::try_from(t).map(|t| t.as_str_name()).unwrap_or("UNKNOWN")));
    }
    if let Some(eds) = &c.eds_cluster_config {
        let mut e = Map::new();
        e.insert("eds_config".into(), json!({ "ads": {}, "resource_api_version": "V3" }));
        put(&mut e, "service_name", json!(eds.service_name));
        o.insert("eds_cluster_config".into(), Value::Object(e));
    }
    if let Some(d) = &c.connect_timeout {
        o.insert("connect_timeout".into(), duration(d));
    }
    if c.lb_policy != 0 {
        put(&mut o, "lb_policy", json!(LbPolicy::try_from(c.lb_policy).map(|p| p.as_str_name()).unwrap_or("UNKNOWN")));
    }
    if let Some(cb) = &c.circuit_breakers {
        let thresholds: Vec<Value> = cb
            .thresholds
            .iter()
            .map(|t| {
                let mut m = Map::new();
                for (key, v) in [
                    ("max_connections", &t.max_connections),
                    ("max_pending_requests", &t.max_pending_requests),
                    ("max_requests", &t.max_requests),
                    ("max_retries", &t.max_retries),
                ] {
                    if let Some(v) = v {
                        m.insert(key.into(), json!(v.value));
                    }
                }
                Value::Object(m)
            })
            .collect();
        put(&mut o, "circuit_breakers", json!({ "thresholds": thresholds }));
    }
    if c.outlier_detection.is_some() {
        o.insert("outlier_detection".into(), json!({}));
    }
    if let Some(la) = &c.load_assignment {
        o.insert("load_assignment".into(), assignment_body(la));
    }
    if let Some(socket) = &c.transport_socket {
        o.insert("transport_socket".into(), transport_socket_json(socket));
    }
    let matches: Vec<Value> = c
        .transport_socket_matches
        .iter()
        .map(|m| {
            let criteria: Map<String, Value> = m
                .r#match
                .iter()
                .flat_map(|s| &s.fields)
                .map(|(k, v)| match &v.kind {
                    Some(envoy_types::pb::google::protobuf::value::Kind::StringValue(s)) => (k.clone(), json!(s)),
                    _ => (k.clone(), Value::Null),
                })
                .collect();
            json!({
                "name": m.name,
                "match": criteria,
                "transport_socket": m.transport_socket.as_ref().map(transport_socket_json),
            })
        })
        .collect();
    put(&mut o, "transport_socket_matches", json!(matches));
    Value::Object(o)
}

fn filter_chain_match_json(m: &FilterChainMatch) -> Value {
    let mut o = Map::new();
    if let Some(p) = &m.destination_port {
        o.insert("destination_port".into(), json!(p.value));
    }
    let ranges: Vec<Value> = m
        .prefix_ranges
        .iter()
        .map(|r| json!({ "address_prefix": r.address_prefix, "prefix_len": r.prefix_len.as_ref().map(|l| l.value) }))
        .collect();
    put(&mut o, "prefix_ranges", json!(ranges));
    put(&mut o, "server_names", json!(m.server_names));
    put(&mut o, "transport_protocol", json!(m.transport_protocol));
    put(&mut o, "application_protocols", json!(m.application_protocols));
    Value::Object(o)
}

fn decode<M: Message + Default>(any: &Any) -> Option<M> {
    M::decode(any.value.as_slice()).ok()
}

fn filter_json(f: &Filter) -> Value {
    let mut o = Map::new();
    o.insert("name".into(), json!(f.name));
    let Some(filter::ConfigType::TypedConfig(any)) = &f.config_type else {
        return Value::Object(o);
    };
    let mut typed = Map::new();
    typed.insert("@type".into(), json!(any.type_url));
    if any.type_url == type_url::<HttpConnectionManager>() {
        if let Some(hcm) = decode::<HttpConnectionManager>(any) {
            put(&mut typed, "stat_prefix", json!(hcm.stat_prefix));
            match &hcm.route_specifier {
                Some(RouteSpecifier::Rds(rds)) => {
                    typed.insert(
                        "rds".into(),
                        json!({
                            "config_source": { "ads": {}, "resource_api_version": "V3" },
                            "route_config_name": rds.route_config_name,
                        }),
                    );
                }
                Some(RouteSpecifier::RouteConfig(rc)) => {
                    typed.insert("route_config".into(), route_config_body(rc));
                }
                _ => {}
            }
            let http_filters: Vec<Value> = hcm.http_filters.iter().map(|f| json!({ "name": f.name })).collect();
            put(&mut typed, "http_filters", json!(http_filters));
        }
    } else if any.type_url == type_url::<TcpProxy>()
        && let Some(tcp) = decode::<TcpProxy>(any)
    {
        put(&mut typed, "stat_prefix", json!(tcp.stat_prefix));
        match &tcp.cluster_specifier {
            Some(TcpClusterSpecifier::Cluster(c)) => put(&mut typed, "cluster", json!(c)),
            Some(TcpClusterSpecifier::WeightedClusters(w)) => {
                let clusters: Vec<Value> =
                    w.clusters.iter().map(|c| json!({ "name": c.name, "weight": c.weight })).collect();
                typed.insert("weighted_clusters".into(), json!({ "clusters": clusters }));
            }
            None => {}
        }
    }
    o.insert("typed_config".into(), Value::Object(typed));
    Value::Object(o)
}

fn filter_chain_json(fc: &FilterChain) -> Value {
    let mut o = Map::new();
    put(&mut o, "name", json!(fc.name));
    if let Some(m) = &fc.filter_chain_match {
        put(&mut o, "filter_chain_match", filter_chain_match_json(m));
    }
    o.insert("filters".into(), json!(fc.filters.iter().map(filter_json).collect::<Vec<_>>()));
    if let Some(socket) = &fc.transport_socket {
        o.insert("transport_socket".into(), transport_socket_json(socket));
    }
    Value::Object(o)
}

/// An SDS secret and where it comes from: the ADS stream, or a gRPC
/// cluster (the agent's `sds-grpc`, for the mesh's own secrets).
fn sds_json(s: &SdsSecretConfig) -> Value {
    use envoy_types::pb::envoy::config::core::v3::{
        config_source::ConfigSourceSpecifier, grpc_service::TargetSpecifier,
    };
    let source = match s.sds_config.as_ref().and_then(|c| c.config_source_specifier.as_ref()) {
        Some(ConfigSourceSpecifier::ApiConfigSource(api)) => {
            let clusters: Vec<Value> = api
                .grpc_services
                .iter()
                .filter_map(|g| match &g.target_specifier {
                    Some(TargetSpecifier::EnvoyGrpc(e)) => {
                        Some(json!({ "envoy_grpc": { "cluster_name": e.cluster_name } }))
                    }
                    _ => None,
                })
                .collect();
            json!({ "api_config_source": { "api_type": "GRPC", "grpc_services": clusters }, "resource_api_version": "V3" })
        }
        _ => json!({ "ads": {}, "resource_api_version": "V3" }),
    };
    json!({ "name": s.name, "sds_config": source })
}

/// A transport socket: TLS (downstream on filter chains, upstream on
/// clusters) with its certificates (SDS names or files) and how the peer is
/// checked; anything else by name.
fn transport_socket_json(socket: &TransportSocket) -> Value {
    let mut typed = Map::new();
    if let Some(transport_socket::ConfigType::TypedConfig(any)) = &socket.config_type {
        typed.insert("@type".into(), json!(any.type_url));
        if any.type_url == type_url::<DownstreamTlsContext>()
            && let Some(context) = decode::<DownstreamTlsContext>(any)
        {
            if let Some(require) = context.require_client_certificate {
                typed.insert("require_client_certificate".into(), json!(require.value));
            }
            if let Some(common) = &context.common_tls_context {
                typed.insert("common_tls_context".into(), common_tls_context_json(common));
            }
        } else if any.type_url == type_url::<UpstreamTlsContext>()
            && let Some(context) = decode::<UpstreamTlsContext>(any)
        {
            put(&mut typed, "sni", json!(context.sni));
            if let Some(common) = &context.common_tls_context {
                typed.insert("common_tls_context".into(), common_tls_context_json(common));
            }
        }
    }
    json!({ "name": socket.name, "typed_config": typed })
}

fn common_tls_context_json(common: &CommonTlsContext) -> Value {
    let mut c = Map::new();
    put(&mut c, "alpn_protocols", json!(common.alpn_protocols));
    let sds: Vec<Value> = common.tls_certificate_sds_secret_configs.iter().map(sds_json).collect();
    put(&mut c, "tls_certificate_sds_secret_configs", json!(sds));
    let files: Vec<Value> = common
        .tls_certificates
        .iter()
        .map(|t| {
            json!({
                "certificate_chain": t.certificate_chain.as_ref().map(data_source_json),
                "private_key": t.private_key.as_ref().map(data_source_json),
            })
        })
        .collect();
    put(&mut c, "tls_certificates", json!(files));
    #[allow(deprecated)] // Istio's SAN checks are on the untyped matcher.
    let sans = |v: &CertificateValidationContext| -> Vec<Value> {
        v.match_subject_alt_names
            .iter()
            .filter_map(|m| match &m.match_pattern {
                Some(string_matcher::MatchPattern::Exact(s)) => Some(json!({ "exact": s })),
                Some(string_matcher::MatchPattern::Prefix(s)) => Some(json!({ "prefix": s })),
                _ => None,
            })
            .collect()
    };
    match &common.validation_context_type {
        Some(common_tls_context::ValidationContextType::CombinedValidationContext(v)) => {
            let mut combined = Map::new();
            if let Some(checks) = &v.default_validation_context {
                let mut d = Map::new();
                put(&mut d, "match_subject_alt_names", json!(sans(checks)));
                put(&mut combined, "default_validation_context", Value::Object(d));
            }
            combined.insert(
                "validation_context_sds_secret_config".into(),
                json!(v.validation_context_sds_secret_config.as_ref().map(sds_json)),
            );
            c.insert("combined_validation_context".into(), Value::Object(combined));
        }
        Some(common_tls_context::ValidationContextType::ValidationContext(v)) => {
            let mut d = Map::new();
            d.insert("trusted_ca".into(), json!(v.trusted_ca.as_ref().map(data_source_json)));
            put(&mut d, "match_subject_alt_names", json!(sans(v)));
            c.insert("validation_context".into(), Value::Object(d));
        }
        _ => {}
    }
    Value::Object(c)
}

/// A data source: a file path, or inline bytes as base64 (as Envoy prints them).
fn data_source_json(d: &DataSource) -> Value {
    match &d.specifier {
        Some(data_source::Specifier::Filename(f)) => json!({ "filename": f }),
        Some(data_source::Specifier::InlineBytes(b)) => {
            json!({ "inline_bytes": base64::engine::general_purpose::STANDARD.encode(b) })
        }
        Some(data_source::Specifier::InlineString(s)) => json!({ "inline_string": s }),
        Some(data_source::Specifier::EnvironmentVariable(v)) => json!({ "environment_variable": v }),
        None => json!({}),
    }
}

/// A Secret, as given (callers redact private keys first: see
/// `config_dump::redact`).
pub fn secret_json(s: &Secret) -> Value {
    let mut o = Map::new();
    o.insert("@type".into(), json!(type_url::<Secret>()));
    put(&mut o, "name", json!(s.name));
    match &s.r#type {
        Some(secret::Type::TlsCertificate(t)) => {
            o.insert(
                "tls_certificate".into(),
                json!({
                    "certificate_chain": t.certificate_chain.as_ref().map(data_source_json),
                    "private_key": t.private_key.as_ref().map(data_source_json),
                }),
            );
        }
        Some(secret::Type::ValidationContext(v)) => {
            o.insert(
                "validation_context".into(),
                json!({ "trusted_ca": v.trusted_ca.as_ref().map(data_source_json), "crl": v.crl.as_ref().map(data_source_json) }),
            );
        }
        _ => {}
    }
    Value::Object(o)
}

/// A Listener.
pub fn listener_json(l: &Listener) -> Value {
    let mut o = Map::new();
    o.insert("@type".into(), json!(type_url::<Listener>()));
    put(&mut o, "name", json!(l.name));
    if let Some(a) = &l.address {
        o.insert("address".into(), address_json(a));
    }
    let mut chains: Vec<Value> = l.filter_chains.iter().map(filter_chain_json).collect();
    put(&mut o, "filter_chains", json!(std::mem::take(&mut chains)));
    if let Some(fc) = &l.default_filter_chain {
        o.insert("default_filter_chain".into(), filter_chain_json(fc));
    }
    if let Some(b) = &l.use_original_dst {
        o.insert("use_original_dst".into(), json!(b.value));
    }
    if let Some(b) = &l.bind_to_port {
        o.insert("bind_to_port".into(), json!(b.value));
    }
    let listener_filters: Vec<Value> = l.listener_filters.iter().map(|f| json!({ "name": f.name })).collect();
    put(&mut o, "listener_filters", json!(listener_filters));
    let direction = match l.traffic_direction {
        1 => "INBOUND",
        2 => "OUTBOUND",
        _ => "",
    };
    put(&mut o, "traffic_direction", json!(direction));
    Value::Object(o)
}

fn route_match_json(m: &RouteMatch) -> Value {
    let mut o = Map::new();
    match &m.path_specifier {
        Some(route_match::PathSpecifier::Prefix(p)) => {
            o.insert("prefix".into(), json!(p));
        }
        Some(route_match::PathSpecifier::Path(p)) => {
            o.insert("path".into(), json!(p));
        }
        Some(route_match::PathSpecifier::SafeRegex(r)) => {
            o.insert("safe_regex".into(), json!({ "regex": r.regex }));
        }
        _ => {}
    }
    let headers: Vec<Value> = m
        .headers
        .iter()
        .map(|h| {
            let mut hm = Map::new();
            hm.insert("name".into(), json!(h.name));
            if let Some(spec) = &h.header_match_specifier {
                hm.insert("match".into(), json!(format!("{spec:?}")));
            }
            if h.invert_match {
                hm.insert("invert_match".into(), json!(true));
            }
            Value::Object(hm)
        })
        .collect();
    put(&mut o, "headers", json!(headers));
    Value::Object(o)
}

fn route_json(r: &Route) -> Value {
    let mut o = Map::new();
    put(&mut o, "name", json!(r.name));
    if let Some(m) = &r.r#match {
        o.insert("match".into(), route_match_json(m));
    }
    match &r.action {
        Some(route::Action::Route(action)) => {
            let mut a = Map::new();
            match &action.cluster_specifier {
                Some(route_action::ClusterSpecifier::Cluster(c)) => put(&mut a, "cluster", json!(c)),
                Some(route_action::ClusterSpecifier::WeightedClusters(w)) => {
                    let clusters: Vec<Value> = w
                        .clusters
                        .iter()
                        .map(|c| json!({ "name": c.name, "weight": c.weight.as_ref().map(|w| w.value) }))
                        .collect();
                    a.insert("weighted_clusters".into(), json!({ "clusters": clusters }));
                }
                _ => {}
            }
            if let Some(t) = &action.timeout {
                a.insert("timeout".into(), duration(t));
            }
            o.insert("route".into(), Value::Object(a));
        }
        Some(route::Action::Redirect(_)) => {
            o.insert("redirect".into(), json!({}));
        }
        Some(route::Action::DirectResponse(d)) => {
            o.insert("direct_response".into(), json!({ "status": d.status }));
        }
        _ => {}
    }
    if let Some(meta) = &r.metadata
        && let Some(istio) = meta.filter_metadata.get("istio")
        && let Some(config) = istio.fields.get("config")
        && let Some(envoy_types::pb::google::protobuf::value::Kind::StringValue(s)) = &config.kind
    {
        o.insert("metadata".into(), json!({ "filter_metadata": { "istio": { "config": s } } }));
    }
    Value::Object(o)
}

fn virtual_host_json(vh: &VirtualHost) -> Value {
    json!({
        "name": vh.name,
        "domains": vh.domains,
        "routes": vh.routes.iter().map(route_json).collect::<Vec<_>>(),
    })
}

fn route_config_body(rc: &RouteConfiguration) -> Value {
    let mut o = Map::new();
    put(&mut o, "name", json!(rc.name));
    o.insert("virtual_hosts".into(), json!(rc.virtual_hosts.iter().map(virtual_host_json).collect::<Vec<_>>()));
    if let Some(v) = &rc.validate_clusters {
        o.insert("validate_clusters".into(), json!(v.value));
    }
    Value::Object(o)
}

/// A RouteConfiguration.
pub fn route_config_json(rc: &RouteConfiguration) -> Value {
    let mut v = route_config_body(rc);
    v.as_object_mut().expect("an object").insert("@type".into(), json!(type_url::<RouteConfiguration>()));
    v
}

fn assignment_body(cla: &ClusterLoadAssignment) -> Value {
    let endpoints: Vec<Value> = cla
        .endpoints
        .iter()
        .map(|l| {
            let mut o = Map::new();
            if let Some(loc) = &l.locality {
                let mut lm = Map::new();
                put(&mut lm, "region", json!(loc.region));
                put(&mut lm, "zone", json!(loc.zone));
                put(&mut lm, "sub_zone", json!(loc.sub_zone));
                o.insert("locality".into(), Value::Object(lm));
            }
            let lbs: Vec<Value> = l
                .lb_endpoints
                .iter()
                .map(|e| {
                    let mut em = Map::new();
                    if let Some(HostIdentifier::Endpoint(ep)) = &e.host_identifier
                        && let Some(a) = &ep.address
                    {
                        em.insert("endpoint".into(), json!({ "address": address_json(a) }));
                    }
                    let health = HealthStatus::try_from(e.health_status).map(|h| h.as_str_name()).unwrap_or("UNKNOWN");
                    em.insert("health_status".into(), json!(health));
                    if let Some(w) = &e.load_balancing_weight {
                        em.insert("load_balancing_weight".into(), json!(w.value));
                    }
                    Value::Object(em)
                })
                .collect();
            o.insert("lb_endpoints".into(), json!(lbs));
            if let Some(w) = &l.load_balancing_weight {
                o.insert("load_balancing_weight".into(), json!(w.value));
            }
            Value::Object(o)
        })
        .collect();
    json!({ "cluster_name": cla.cluster_name, "endpoints": endpoints })
}

/// A ClusterLoadAssignment.
pub fn assignment_json(cla: &ClusterLoadAssignment) -> Value {
    let mut v = assignment_body(cla);
    v.as_object_mut().expect("an object").insert("@type".into(), json!(type_url::<ClusterLoadAssignment>()));
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::cluster::v3::cluster::EdsClusterConfig;

    #[test]
    fn cluster_renders_with_envoy_field_names() {
        let c = Cluster {
            name: "outbound|9080|v1|reviews.default.svc.cluster.local".into(),
            cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32)),
            eds_cluster_config: Some(EdsClusterConfig { eds_config: None, service_name: "svc".into() }),
            connect_timeout: Some(Duration { seconds: 10, nanos: 0 }),
            ..Default::default()
        };
        let v = cluster_json(&c);
        assert_eq!(v["@type"], "type.googleapis.com/envoy.config.cluster.v3.Cluster");
        assert_eq!(v["type"], "EDS");
        assert_eq!(v["eds_cluster_config"]["service_name"], "svc");
        assert_eq!(v["connect_timeout"], "10s");
        assert!(v.get("lb_policy").is_none(), "defaults are omitted");
    }

    #[test]
    fn mesh_mtls_renders_its_socket_matches_names_and_the_agent_s_sds() {
        use std::sync::Arc;
        let yaml = "apiVersion: v1\nkind: Service\nmetadata: {name: vault, namespace: secure}\nspec:\n  selector: {app: vault}\n  ports: [{name: http, port: 8200}]\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: vault-0, namespace: secure, labels: {app: vault, security.istio.io/tlsMode: istio}}\nspec: {serviceAccountName: vault}\nstatus: {podIP: 10.41.0.1}\n";
        let store = crate::model::ConfigStore::new();
        store.apply(crate::testing::bookinfo::puts(yaml));
        let ctx = crate::push::PushContext::build(store.snapshot(), 1, Arc::new(crate::push::ScopeInterner::default()));
        let mut client =
            crate::testing::bookinfo::proxy("sidecar~10.41.0.9~c.secure~secure.svc.cluster.local", "REDIRECT", &[]);
        client.mesh_certificates = true;
        let clusters = crate::generate::cds::clusters(&ctx, &ctx.scope_for(&client));
        let vault = clusters.iter().find(|c| c.name == "outbound|8200||vault.secure.svc.cluster.local").unwrap();
        let v = cluster_json(vault);
        let matches = &v["transport_socket_matches"];
        assert_eq!(matches[0]["name"], "tlsMode-istio");
        assert_eq!(matches[0]["match"]["tlsMode"], "istio");
        let tls = &matches[0]["transport_socket"]["typed_config"];
        assert_eq!(tls["sni"], "outbound_.8200_._.vault.secure.svc.cluster.local");
        let common = &tls["common_tls_context"];
        assert_eq!(common["tls_certificate_sds_secret_configs"][0]["name"], "default");
        assert_eq!(
            common["tls_certificate_sds_secret_configs"][0]["sds_config"]["api_config_source"]["grpc_services"][0]["envoy_grpc"]
                ["cluster_name"],
            "sds-grpc"
        );
        let combined = &common["combined_validation_context"];
        assert_eq!(
            combined["default_validation_context"]["match_subject_alt_names"][0]["exact"],
            "spiffe://cluster.local/ns/secure/sa/vault"
        );
        assert_eq!(combined["validation_context_sds_secret_config"]["name"], "ROOTCA");
        assert_eq!(matches[1]["name"], "tlsMode-disabled");
    }
}
