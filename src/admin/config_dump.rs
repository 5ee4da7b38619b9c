//! `/debug/config_dump?proxyID=`: what a proxy is sent, in the shape of
//! Envoy's own `/config_dump`.
//!
//! The dump is produced by the code that serves the stream: a throwaway
//! [`Connection`] for the same proxy asks for CDS and LDS (wildcard), then
//! for the route configs its listeners name and the assignments its EDS
//! clusters need — exactly what Envoy asks — against the published snapshot
//! and the shared cache. So the bytes are the ones the stream gets, with no
//! second generator to drift from the first, and the live stream task is
//! never touched.
//!
//! Each section is Envoy's (`ClustersConfigDump`, `ListenersConfigDump`,
//! `RoutesConfigDump`, `EndpointsConfigDump`, `SecretsConfigDump`, with
//! `@type`); private keys are redacted as Envoy's dump redacts them; each resource
//! is rendered by [`super::envoy_json`] and also carries its exact encoding
//! as base64 (`meshpush_encoded`, a `google.protobuf.Any`), so nothing the
//! JSON leaves out is lost. `version_info` is the version of the content
//! shown; the stream's own sent and ACKed versions are in `/debug/syncz`.

use std::sync::Arc;

use base64::Engine as _;
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::cluster::v3::cluster::{ClusterDiscoveryType, DiscoveryType};
use envoy_types::pb::envoy::config::core::v3::{data_source, transport_socket};
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::listener::v3::{Listener, filter};
use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    HttpConnectionManager, http_connection_manager::RouteSpecifier,
};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    DownstreamTlsContext, Secret, UpstreamTlsContext, common_tls_context, secret,
};
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::protobuf::Any;
use prost::{Message, Name};
use serde_json::{Value, json};

use super::envoy_json;
use crate::model::Proxy;
use crate::resource::TypeUrl;
use crate::xds::AdsService;
use crate::xds::sotw::Connection;
use crate::xds::sotw::OutgoingResponse;
use crate::xds::stream::body::FRAME_HEADER_LEN;
use crate::xds::stream::published::Published;

const ADMIN_PREFIX: &str = "type.googleapis.com/envoy.admin.v3.";

/// What one type's response held.
struct Section {
    version: String,
    resources: Vec<Any>,
}

/// Decodes a response as the client sees it (the nonce is not needed).
fn decode(response: &OutgoingResponse) -> Option<DiscoveryResponse> {
    DiscoveryResponse::decode(response.body.get(FRAME_HEADER_LEN..)?).ok()
}

/// Asks `conn` for `names` of type `t`, as Envoy would, and decodes the answer.
fn fetch(ads: &AdsService, conn: &mut Connection, t: TypeUrl, names: Vec<String>) -> Section {
    let request = DiscoveryRequest { type_url: t.as_str().to_string(), resource_names: names, ..Default::default() };
    let ctx = ads.engine().snapshot();
    let view = Published { ctx: &ctx, cache: ads.engine().cache(), bodies: ads.bodies() };
    let responses = conn.on_request(&view, &request.into());
    let mut section = Section { version: String::new(), resources: Vec::new() };
    for r in responses.iter().filter_map(decode).filter(|r| r.type_url == t.as_str()) {
        section.version = r.version_info;
        section.resources.extend(r.resources);
    }
    section
}

fn messages<M: Message + Default>(section: &Section) -> Vec<(M, &Any)> {
    section.resources.iter().filter_map(|a| M::decode(a.value.as_slice()).ok().map(|m| (m, a))).collect()
}

fn encoded(any: &Any) -> String {
    base64::engine::general_purpose::STANDARD.encode(any.encode_to_vec())
}

/// Route config names the listeners ask for over RDS.
fn rds_names(listeners: &[(Listener, &Any)]) -> Vec<String> {
    let mut names: Vec<String> = listeners
        .iter()
        .flat_map(|(l, _)| l.filter_chains.iter().chain(l.default_filter_chain.as_ref()))
        .flat_map(|fc| fc.filters.iter())
        .filter_map(|f| match &f.config_type {
            Some(filter::ConfigType::TypedConfig(any)) if any.type_url == HttpConnectionManager::type_url() => {
                HttpConnectionManager::decode(any.value.as_slice()).ok()
            }
            _ => None,
        })
        .filter_map(|hcm| match hcm.route_specifier {
            Some(RouteSpecifier::Rds(rds)) => Some(rds.route_config_name),
            _ => None,
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Clusters that take their endpoints from EDS, by the name they ask for.
fn eds_names(clusters: &[(Cluster, &Any)]) -> Vec<String> {
    clusters
        .iter()
        .filter(|(c, _)| c.cluster_discovery_type == Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32)))
        .map(|(c, _)| {
            c.eds_cluster_config
                .as_ref()
                .map(|e| e.service_name.clone())
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| c.name.clone())
        })
        .collect()
}

/// The config dump of `proxy`, generated now from the published snapshot.
pub fn config_dump(ads: &AdsService, proxy: &Arc<Proxy>) -> Value {
    let mut conn = Connection::new(0, proxy.clone());
    let cds = fetch(ads, &mut conn, TypeUrl::Cluster, Vec::new());
    let lds = fetch(ads, &mut conn, TypeUrl::Listener, Vec::new());
    let clusters = messages::<Cluster>(&cds);
    let listeners = messages::<Listener>(&lds);
    let rds = fetch(ads, &mut conn, TypeUrl::Route, rds_names(&listeners));
    let eds = fetch(ads, &mut conn, TypeUrl::Endpoint, eds_names(&clusters));
    let routes = messages::<RouteConfiguration>(&rds);
    let assignments = messages::<ClusterLoadAssignment>(&eds);
    let sds = fetch(ads, &mut conn, TypeUrl::Secret, sds_names(&listeners, &clusters));
    let secrets = messages::<Secret>(&sds);

    let clusters_dump = json!({
        "@type": format!("{ADMIN_PREFIX}ClustersConfigDump"),
        "version_info": cds.version,
        "dynamic_active_clusters": clusters.iter().map(|(c, any)| json!({
            "version_info": cds.version,
            "cluster": envoy_json::cluster_json(c),
            "meshpush_encoded": encoded(any),
        })).collect::<Vec<_>>(),
    });
    let listeners_dump = json!({
        "@type": format!("{ADMIN_PREFIX}ListenersConfigDump"),
        "version_info": lds.version,
        "dynamic_listeners": listeners.iter().map(|(l, any)| json!({
            "name": l.name,
            "active_state": {
                "version_info": lds.version,
                "listener": envoy_json::listener_json(l),
            },
            "meshpush_encoded": encoded(any),
        })).collect::<Vec<_>>(),
    });
    let routes_dump = json!({
        "@type": format!("{ADMIN_PREFIX}RoutesConfigDump"),
        "dynamic_route_configs": routes.iter().map(|(r, any)| json!({
            "version_info": rds.version,
            "route_config": envoy_json::route_config_json(r),
            "meshpush_encoded": encoded(any),
        })).collect::<Vec<_>>(),
    });
    let endpoints_dump = json!({
        "@type": format!("{ADMIN_PREFIX}EndpointsConfigDump"),
        "dynamic_endpoint_configs": assignments.iter().map(|(e, any)| json!({
            "version_info": eds.version,
            "endpoint_config": envoy_json::assignment_json(e),
            "meshpush_encoded": encoded(any),
        })).collect::<Vec<_>>(),
    });
    // Private keys are redacted as Envoy redacts them in its own dump, in
    // the JSON and in the encoding shown alongside it.
    let secrets_dump = json!({
        "@type": format!("{ADMIN_PREFIX}SecretsConfigDump"),
        "dynamic_active_secrets": secrets.into_iter().map(|(s, _)| {
            let redacted = redact(s);
            json!({
                "name": redacted.name,
                "version_info": sds.version,
                "secret": envoy_json::secret_json(&redacted),
                "meshpush_encoded": encoded(&prost_types_any(&redacted)),
            })
        }).collect::<Vec<_>>(),
    });
    json!({ "configs": [clusters_dump, listeners_dump, routes_dump, endpoints_dump, secrets_dump] })
}

/// What Envoy shows instead of a private key.
pub const REDACTED: &[u8] = b"[redacted]";

/// `secret` with its private key replaced by [`REDACTED`].
pub fn redact(mut secret: Secret) -> Secret {
    if let Some(secret::Type::TlsCertificate(cert)) = &mut secret.r#type {
        if let Some(key) = &mut cert.private_key {
            key.specifier = Some(data_source::Specifier::InlineBytes(REDACTED.to_vec()));
        }
        cert.password = None;
    }
    secret
}

fn prost_types_any(secret: &Secret) -> Any {
    Any { type_url: Secret::type_url(), value: secret.encode_to_vec() }
}

/// SDS names the listeners' TLS chains and the clusters' TLS ask for over ADS.
fn sds_names(listeners: &[(Listener, &Any)], clusters: &[(Cluster, &Any)]) -> Vec<String> {
    let typed = |socket: Option<&envoy_types::pb::envoy::config::core::v3::TransportSocket>| {
        socket?.config_type.as_ref().map(|transport_socket::ConfigType::TypedConfig(any)| any.value.clone())
    };
    let downstream = listeners
        .iter()
        .flat_map(|(l, _)| l.filter_chains.iter().chain(l.default_filter_chain.as_ref()))
        .filter_map(|fc| typed(fc.transport_socket.as_ref()))
        .filter_map(|bytes| DownstreamTlsContext::decode(bytes.as_slice()).ok()?.common_tls_context);
    let upstream = clusters
        .iter()
        .filter_map(|(c, _)| typed(c.transport_socket.as_ref()))
        .filter_map(|bytes| UpstreamTlsContext::decode(bytes.as_slice()).ok()?.common_tls_context);
    let mut names: Vec<String> = downstream
        .chain(upstream)
        .flat_map(|common| {
            let mut out: Vec<String> = common.tls_certificate_sds_secret_configs.into_iter().map(|s| s.name).collect();
            match common.validation_context_type {
                Some(common_tls_context::ValidationContextType::ValidationContextSdsSecretConfig(s)) => {
                    out.push(s.name)
                }
                Some(common_tls_context::ValidationContextType::CombinedValidationContext(c)) => {
                    out.extend(c.validation_context_sds_secret_config.map(|s| s.name))
                }
                _ => {}
            }
            out
        })
        .collect();
    names.sort();
    names.dedup();
    names
}
