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
//! The dump is Envoy's own message, `envoy.admin.v3.ConfigDump`, with its
//! sections (`ClustersConfigDump`, `ListenersConfigDump`,
//! `RoutesConfigDump`, `EndpointsConfigDump` as `?include_eds` gives it,
//! `SecretsConfigDump`, and `EcdsConfigDump` when HTTP filters discover
//! their configuration), printed through Envoy's descriptors
//! ([`crate::envoy_api::json`]) exactly as Envoy's admin prints it: every
//! field of every resource, nothing rendered by hand. Private keys are
//! redacted as Envoy's dump redacts them. What only Envoy can know is not
//! there: `last_updated`, and Envoy's bootstrap and static resources.
//! `version_info` is the version of the content shown; the stream's own
//! sent and ACKed versions are in `/debug/syncz`.

use std::sync::Arc;

use envoy_types::pb::envoy::admin::v3::clusters_config_dump::DynamicCluster;
use envoy_types::pb::envoy::admin::v3::ecds_config_dump::EcdsFilterConfig;
use envoy_types::pb::envoy::admin::v3::endpoints_config_dump::DynamicEndpointConfig;
use envoy_types::pb::envoy::admin::v3::listeners_config_dump::{DynamicListener, DynamicListenerState};
use envoy_types::pb::envoy::admin::v3::routes_config_dump::DynamicRouteConfig;
use envoy_types::pb::envoy::admin::v3::secrets_config_dump::DynamicSecret;
use envoy_types::pb::envoy::admin::v3::{
    ClustersConfigDump, ConfigDump, EcdsConfigDump, EndpointsConfigDump, ListenersConfigDump, RoutesConfigDump,
    SecretsConfigDump,
};
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::cluster::v3::cluster::{ClusterDiscoveryType, DiscoveryType};
use envoy_types::pb::envoy::config::core::v3::{data_source, transport_socket};
use envoy_types::pb::envoy::config::listener::v3::{Listener, filter};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    HttpConnectionManager, http_connection_manager::RouteSpecifier, http_filter,
};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    DownstreamTlsContext, Secret, UpstreamTlsContext, common_tls_context, secret,
};
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::protobuf::Any;
use prost::{Message, Name};
use serde_json::Value;

use crate::envoy_api::json::{self, JsonError};
use crate::model::Proxy;
use crate::resource::TypeUrl;
use crate::xds::AdsService;
use crate::xds::sotw::Connection;
use crate::xds::sotw::OutgoingResponse;
use crate::xds::stream::body::FRAME_HEADER_LEN;
use crate::xds::stream::published::Published;

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

/// Route config names the listeners ask for over RDS.
fn rds_names(listeners: &[(Listener, &Any)]) -> Vec<String> {
    let mut names: Vec<String> = connection_managers(listeners)
        .filter_map(|hcm| match hcm.route_specifier {
            Some(RouteSpecifier::Rds(rds)) => Some(rds.route_config_name),
            _ => None,
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The connection managers of `listeners`' chains, and of their API
/// listeners (a proxyless gRPC client's).
fn connection_managers<'a>(listeners: &'a [(Listener, &Any)]) -> impl Iterator<Item = HttpConnectionManager> + 'a {
    let decode = |any: &Any| {
        (any.type_url == HttpConnectionManager::type_url())
            .then(|| HttpConnectionManager::decode(any.value.as_slice()).ok())
            .flatten()
    };
    let chains = listeners
        .iter()
        .flat_map(|(l, _)| l.filter_chains.iter().chain(l.default_filter_chain.as_ref()))
        .flat_map(|fc| fc.filters.iter())
        .filter_map(move |f| match &f.config_type {
            Some(filter::ConfigType::TypedConfig(any)) => decode(any),
            _ => None,
        });
    let api = listeners
        .iter()
        .filter_map(|(l, _)| l.api_listener.as_ref().and_then(|a| a.api_listener.as_ref()))
        .filter_map(decode);
    chains.chain(api)
}

/// The extension configs the HTTP filters of `listeners` discover (ECDS), by name.
fn ecds_names(listeners: &[(Listener, &Any)]) -> Vec<String> {
    let mut names: Vec<String> = connection_managers(listeners)
        .flat_map(|hcm| hcm.http_filters)
        .filter(|f| matches!(f.config_type, Some(http_filter::ConfigType::ConfigDiscovery(_))))
        .map(|f| f.name)
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

/// The config dump of `proxy`, generated now from the published snapshot,
/// as Envoy's `envoy.admin.v3.ConfigDump` in Envoy's own JSON.
pub fn config_dump(ads: &AdsService, proxy: &Arc<Proxy>) -> Result<Value, JsonError> {
    let mut conn = Connection::new(0, proxy.clone());
    let cds = fetch(ads, &mut conn, TypeUrl::Cluster, Vec::new());
    let lds = fetch(ads, &mut conn, TypeUrl::Listener, Vec::new());
    let clusters = messages::<Cluster>(&cds);
    let listeners = messages::<Listener>(&lds);
    let rds = fetch(ads, &mut conn, TypeUrl::Route, rds_names(&listeners));
    let eds = fetch(ads, &mut conn, TypeUrl::Endpoint, eds_names(&clusters));
    let sds = fetch(ads, &mut conn, TypeUrl::Secret, sds_names(&listeners, &clusters));
    let ecds_wanted = ecds_names(&listeners);
    let ecds = (!ecds_wanted.is_empty()).then(|| fetch(ads, &mut conn, TypeUrl::ExtensionConfig, ecds_wanted));

    let clusters_dump = ClustersConfigDump {
        version_info: cds.version.clone(),
        dynamic_active_clusters: cds
            .resources
            .iter()
            .map(|any| DynamicCluster {
                version_info: cds.version.clone(),
                cluster: Some(any.clone()),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let listeners_dump = ListenersConfigDump {
        version_info: lds.version.clone(),
        dynamic_listeners: listeners
            .iter()
            .map(|(l, any)| DynamicListener {
                name: l.name.clone(),
                active_state: Some(DynamicListenerState {
                    version_info: lds.version.clone(),
                    listener: Some((*any).clone()),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let routes_dump = RoutesConfigDump {
        dynamic_route_configs: rds
            .resources
            .iter()
            .map(|any| DynamicRouteConfig {
                version_info: rds.version.clone(),
                route_config: Some(any.clone()),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let endpoints_dump = EndpointsConfigDump {
        dynamic_endpoint_configs: eds
            .resources
            .iter()
            .map(|any| DynamicEndpointConfig {
                version_info: eds.version.clone(),
                endpoint_config: Some(any.clone()),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    // Private keys are redacted as Envoy redacts them in its own dump.
    let secrets_dump = SecretsConfigDump {
        dynamic_active_secrets: messages::<Secret>(&sds)
            .into_iter()
            .map(|(s, _)| {
                let redacted = redact(s);
                DynamicSecret {
                    name: redacted.name.clone(),
                    version_info: sds.version.clone(),
                    secret: Some(Any { type_url: Secret::type_url(), value: redacted.encode_to_vec() }),
                    ..Default::default()
                }
            })
            .collect(),
        ..Default::default()
    };
    let mut configs = vec![packed(&clusters_dump), packed(&listeners_dump)];
    // Extension configs as Envoy shows its HTTP filters' (ECDS), when any is asked for.
    if let Some(ecds) = ecds {
        let filters = EcdsConfigDump {
            ecds_filters: ecds
                .resources
                .iter()
                .map(|any| EcdsFilterConfig {
                    version_info: ecds.version.clone(),
                    ecds_filter: Some(any.clone()),
                    ..Default::default()
                })
                .collect(),
        };
        configs.push(packed(&filters));
    }
    configs.extend([packed(&routes_dump), packed(&endpoints_dump), packed(&secrets_dump)]);
    let dump = ConfigDump { configs };
    json::to_json(&dump)
}

fn packed<M: Message + Name>(message: &M) -> Any {
    Any { type_url: M::type_url(), value: message.encode_to_vec() }
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
