//! A waypoint's clusters, and the endpoints of its `inbound-vip` ones.

use envoy_types::pb::envoy::config::cluster::v3::{
    Cluster,
    cluster::{ClusterDiscoveryType, DiscoveryType, LbConfig, LbPolicy, OriginalDstLbConfig},
};
use envoy_types::pb::envoy::config::core::v3::{
    Address, EnvoyInternalAddress, Http2ProtocolOptions, Metadata, TransportSocket, address,
    envoy_internal_address::AddressNameSpecifier, transport_socket,
};
use envoy_types::pb::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints, lb_endpoint::HostIdentifier,
};
use envoy_types::pb::envoy::extensions::transport_sockets::internal_upstream::v3::{
    InternalUpstreamTransport, internal_upstream_transport::MetadataValueSource,
};
use envoy_types::pb::envoy::extensions::transport_sockets::raw_buffer::v3::RawBuffer;
use envoy_types::pb::envoy::extensions::upstreams::http::v3::{
    HttpProtocolOptions,
    http_protocol_options::{ExplicitHttpConfig, UpstreamProtocolOptions, explicit_http_config::ProtocolConfig},
};
use envoy_types::pb::envoy::r#type::metadata::v3::{MetadataKind, metadata_kind};
use envoy_types::pb::google::protobuf::{Struct, Value, value::Kind};

use super::{CONNECT_ORIGINATE, ENCAP, HBONE_PORT, MAIN_INTERNAL, ORIGINAL_DST_METADATA};
use super::{bound, inbound_vip_cluster, parse_inbound_vip};
use crate::generate::{cds, eds, mtls, policy, proto};
use crate::model::Service;
use crate::push::{PushContext, Scope};

/// The waypoint's clusters, sorted by name: the two internal hops, the
/// HBONE originating one, and an `inbound-vip` cluster per bound Service
/// port (HTTP and TCP), and per subset of its DestinationRule.
pub fn clusters(ctx: &PushContext, scope: &Scope) -> Vec<Cluster> {
    let mut out = vec![internal_hop(MAIN_INTERNAL, ctx), internal_hop(ENCAP, ctx), connect_originate(ctx)];
    for svc in bound(scope).iter().filter(|s| !s.is_alias()) {
        let rule = ctx.destination_rules.for_host(&svc.namespace, &svc.namespace, &svc.hostname).map(|r| &r.spec);
        let subsets: Vec<&str> = std::iter::once("")
            .chain(rule.into_iter().flat_map(|r| r.subsets.iter().map(|s| s.name.as_str())).filter(|s| !s.is_empty()))
            .collect();
        for port in &svc.ports {
            for subset in &subsets {
                for http in [true, false] {
                    out.push(inbound_vip(ctx, svc, port, subset, rule, http));
                }
            }
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out.dedup_by(|a, b| a.name == b.name);
    out
}

/// A STATIC cluster of one internal address: `main_internal` reaches the
/// listener of its name, `encap` the `connect_originate` listener.
fn internal_hop(to: &str, ctx: &PushContext) -> Cluster {
    let listener = if to == ENCAP { CONNECT_ORIGINATE } else { to };
    let mut cluster = Cluster {
        name: to.to_string(),
        connect_timeout: Some(ctx.mesh.traffic.connect_timeout.to_proto()),
        load_assignment: Some(ClusterLoadAssignment {
            cluster_name: to.to_string(),
            endpoints: vec![LocalityLbEndpoints {
                lb_endpoints: vec![lb_endpoint(internal_address(listener, ""), None)],
                ..Default::default()
            }],
            ..Default::default()
        }),
        transport_socket: Some(internal_upstream(false, None)),
        ..Default::default()
    };
    cluster.cluster_discovery_type = Some(ClusterDiscoveryType::Type(DiscoveryType::Static as i32));
    cluster
}

/// `connect_originate`: HBONE to each connection's original destination,
/// port 15008, with the waypoint's certificate.
fn connect_originate(ctx: &PushContext) -> Cluster {
    let options = HttpProtocolOptions {
        upstream_protocol_options: Some(UpstreamProtocolOptions::ExplicitHttpConfig(ExplicitHttpConfig {
            protocol_config: Some(ProtocolConfig::Http2ProtocolOptions(Http2ProtocolOptions {
                allow_connect: true,
                ..Default::default()
            })),
        })),
        ..Default::default()
    };
    let mut cluster = Cluster {
        name: CONNECT_ORIGINATE.to_string(),
        connect_timeout: Some(ctx.mesh.traffic.connect_timeout.to_proto()),
        lb_policy: LbPolicy::ClusterProvided as i32,
        lb_config: Some(LbConfig::OriginalDstLbConfig(OriginalDstLbConfig {
            upstream_port_override: Some(proto::u32_value(HBONE_PORT)),
            ..Default::default()
        })),
        transport_socket: Some(mtls::hbone_client_socket(&ctx.mesh.trust_domains_for_validation())),
        ..Default::default()
    };
    cluster.cluster_discovery_type = Some(ClusterDiscoveryType::Type(DiscoveryType::OriginalDst as i32));
    cluster.typed_extension_protocol_options.insert(proto::HTTP_PROTOCOL_OPTIONS.to_string(), proto::any(&options));
    cluster
}

/// `inbound-vip|PORT|http|HOST` (or `tcp`): the Service's cluster as its
/// DestinationRule makes it, reaching its endpoints through
/// `connect_originate` (their `IP:PORT` passed along in metadata).
fn inbound_vip(
    ctx: &PushContext,
    svc: &Service,
    port: &crate::model::ServicePort,
    subset: &str,
    rule: Option<&crate::config::istio::DestinationRuleSpec>,
    http: bool,
) -> Cluster {
    let mut cluster = cds::service_cluster(ctx, svc, port, subset, rule);
    let name = inbound_vip_cluster(port.port, http, subset, &svc.hostname);
    if let Some(eds) = &mut cluster.eds_cluster_config {
        eds.service_name = name.clone();
    }
    if let Some(cla) = &mut cluster.load_assignment {
        cla.cluster_name = name.clone();
    }
    if !http {
        cluster.typed_extension_protocol_options.clear();
    }
    cluster.name = name;
    cluster.transport_socket = Some(internal_upstream(true, cluster.transport_socket.take()));
    cluster.transport_socket_matches.clear();
    cluster
}

/// The endpoints of an `inbound-vip` cluster; `None` for another name.
pub fn load_assignment(ctx: &PushContext, cluster_name: &str) -> Option<ClusterLoadAssignment> {
    let name = parse_inbound_vip(cluster_name)?;
    let svc = ctx.services.get(name.host).filter(|s| !s.is_alias())?;
    svc.port(name.port)?;
    let rule =
        policy::for_destination(ctx, &svc.namespace, &svc.namespace, &svc.hostname, name.subset, Some(name.port));
    if !rule.subset_found {
        return Some(eds::empty(cluster_name));
    }
    let endpoints = ctx.endpoints.get(&svc.hostname).map(|e| &**e);
    let mut cla = eds::assignment(cluster_name, svc, name.port, endpoints, &rule.labels, &ctx.mesh.cluster_id);
    let ambient = ctx.ambient();
    for group in &mut cla.endpoints {
        for lb in &mut group.lb_endpoints {
            let Some(HostIdentifier::Endpoint(endpoint)) = &mut lb.host_identifier else { continue };
            let Some(address::Address::SocketAddress(socket)) =
                endpoint.address.as_ref().and_then(|a| a.address.as_ref())
            else {
                continue;
            };
            let ip = &socket.address;
            let port = match socket.port_specifier {
                Some(envoy_types::pb::envoy::config::core::v3::socket_address::PortSpecifier::PortValue(p)) => p,
                _ => continue,
            };
            if !ambient.keys.takes_hbone(&format!("{}/{ip}", ambient.network)) {
                continue; // no ztunnel there: plain TCP to it
            }
            let target = if ip.contains(':') { format!("[{ip}]:{port}") } else { format!("{ip}:{port}") };
            endpoint.address = Some(internal_address(CONNECT_ORIGINATE, &target));
            lb.metadata = Some(original_destination(&target));
        }
    }
    Some(cla)
}

/// An internal address of listener `listener` (`endpoint_id`: which of its
/// destinations this endpoint stands for).
fn internal_address(listener: &str, endpoint_id: &str) -> Address {
    Address {
        address: Some(address::Address::EnvoyInternalAddress(EnvoyInternalAddress {
            address_name_specifier: Some(AddressNameSpecifier::ServerListenerName(listener.to_string())),
            endpoint_id: endpoint_id.to_string(),
        })),
    }
}

fn lb_endpoint(address: Address, metadata: Option<Metadata>) -> LbEndpoint {
    LbEndpoint {
        host_identifier: Some(HostIdentifier::Endpoint(Endpoint { address: Some(address), ..Default::default() })),
        metadata,
        ..Default::default()
    }
}

/// `envoy.filters.listener.original_dst: {local: IP:PORT}`: where
/// `connect_originate` tunnels the connection to.
fn original_destination(target: &str) -> Metadata {
    let local =
        Struct { fields: [("local".to_string(), Value { kind: Some(Kind::StringValue(target.to_string())) })].into() };
    Metadata { filter_metadata: [(ORIGINAL_DST_METADATA.to_string(), local)].into(), ..Default::default() }
}

/// `envoy.transport_sockets.internal_upstream` around `inner` (raw buffer
/// when none); with `passthrough`, each host's original destination
/// metadata goes along to the listener.
fn internal_upstream(passthrough: bool, inner: Option<TransportSocket>) -> TransportSocket {
    let config = InternalUpstreamTransport {
        passthrough_metadata: if passthrough {
            vec![MetadataValueSource {
                kind: Some(MetadataKind { kind: Some(metadata_kind::Kind::Host(metadata_kind::Host::default())) }),
                name: ORIGINAL_DST_METADATA.to_string(),
            }]
        } else {
            Vec::new()
        },
        transport_socket: Some(inner.unwrap_or_else(|| TransportSocket {
            name: "envoy.transport_sockets.raw_buffer".to_string(),
            config_type: Some(transport_socket::ConfigType::TypedConfig(proto::any(&RawBuffer::default()))),
        })),
    };
    TransportSocket {
        name: "envoy.transport_sockets.internal_upstream".to_string(),
        config_type: Some(transport_socket::ConfigType::TypedConfig(proto::any(&config))),
    }
}
