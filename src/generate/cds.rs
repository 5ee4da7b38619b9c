//! CDS: the clusters of one scope.
//!
//! For every visible service port: `outbound|port||host` and one cluster per
//! subset of the DestinationRule the scope's namespace sees. A cluster's
//! discovery type follows the service's resolution (EDS for known IPs,
//! STRICT_DNS with inline endpoints for DNS entries, ORIGINAL_DST for
//! passthrough); its load balancer, circuit breakers, HTTP options and
//! outlier detection follow the merged DestinationRule policy. Sidecars also
//! get `inbound|port||` for each of their workload ports. `BlackHoleCluster`
//! and `PassthroughCluster` are always there.
//!
//! Invariants: the output depends only on the context and the scope; it is
//! sorted by name with each name once, so equal inputs encode to equal bytes.

use envoy_types::pb::envoy::config::cluster::v3::{
    CircuitBreakers, Cluster, OutlierDetection,
    circuit_breakers::Thresholds,
    cluster::{
        ClusterDiscoveryType, DiscoveryType, DnsLookupFamily, EdsClusterConfig, LbConfig, LbPolicy, RingHashLbConfig,
    },
};
use envoy_types::pb::envoy::config::core::v3::{
    Http1ProtocolOptions, Http2ProtocolOptions, HttpProtocolOptions as CoreHttpProtocolOptions,
};
use envoy_types::pb::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, Endpoint as EnvoyEndpoint, LbEndpoint, LocalityLbEndpoints, lb_endpoint::HostIdentifier,
};
use envoy_types::pb::envoy::extensions::upstreams::http::v3::{
    HttpProtocolOptions,
    http_protocol_options::{ExplicitHttpConfig, UpstreamProtocolOptions, explicit_http_config::ProtocolConfig},
};

use super::policy::{self, DestinationPolicy};
use super::{eds, naming, proto};
use crate::config::istio::{DestinationRuleSpec, LoadBalancerSettings, TrafficPolicy};
use crate::model::{Protocol, ProxyKind, Resolution, Service, ServicePort};
use crate::push::{InboundKey, PushContext, Scope};

/// Istio's default connect timeout.
const DEFAULT_CONNECT_TIMEOUT_SECONDS: i64 = 10;
/// Envoy's upper bound for `RingHashLbConfig.minimum_ring_size`.
const MAX_RING_SIZE: u64 = 8_388_608;

/// Every cluster a proxy of `scope` needs, sorted by name.
pub fn clusters(ctx: &PushContext, scope: &Scope) -> Vec<Cluster> {
    let mut out = Vec::new();
    for svc in &scope.services {
        let rule = ctx.destination_rules.for_host(&scope.key.namespace, &svc.namespace, &svc.hostname).map(|r| &r.spec);
        let subsets = rule.map(|r| r.subsets.as_slice()).unwrap_or_default();
        for port in &svc.ports {
            out.push(outbound(ctx, svc, port, "", rule));
            for subset in subsets.iter().filter(|s| !s.name.is_empty()) {
                out.push(outbound(ctx, svc, port, &subset.name, rule));
            }
        }
    }
    out.push(blackhole());
    out.push(passthrough());
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out.dedup_by(|a, b| a.name == b.name);
    out
}

/// The inbound clusters of a workload: `inbound|PORT||` for each of its
/// ports (sidecars only). Sorted by name.
pub fn inbound_clusters(key: &InboundKey) -> Vec<Cluster> {
    if key.kind != ProxyKind::Sidecar {
        return Vec::new();
    }
    let mut out: Vec<Cluster> = key.ports.iter().map(|p| inbound(p.port, p.protocol)).collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out.dedup_by(|a, b| a.name == b.name);
    out
}

/// One outbound cluster of a service port, for the whole service (`subset`
/// empty) or one subset of `rule`.
fn outbound(
    ctx: &PushContext,
    svc: &Service,
    port: &ServicePort,
    subset: &str,
    rule: Option<&DestinationRuleSpec>,
) -> Cluster {
    let name = naming::outbound_cluster(port.port, subset, &svc.hostname);
    let DestinationPolicy { traffic, labels, .. } = policy::from_rule(rule, subset);
    let lb = traffic.load_balancer.as_ref();
    let passthrough =
        svc.resolution == Resolution::Passthrough || lb.and_then(|l| l.simple.as_deref()) == Some("PASSTHROUGH");

    let mut cluster = Cluster {
        name: name.clone(),
        connect_timeout: Some(connect_timeout(&traffic)),
        circuit_breakers: Some(circuit_breakers(&traffic)),
        outlier_detection: traffic.outlier_detection.as_ref().map(outlier_detection),
        ..Default::default()
    };
    if passthrough {
        set_type(&mut cluster, DiscoveryType::OriginalDst);
        cluster.lb_policy = LbPolicy::ClusterProvided as i32;
    } else {
        match svc.resolution {
            Resolution::Dns => {
                set_type(&mut cluster, DiscoveryType::StrictDns);
                // Istio's default: A records only, so a name with both
                // families resolves to the same address on every proxy.
                cluster.dns_lookup_family = DnsLookupFamily::V4Only as i32;
                let endpoints = ctx.endpoints.get(&svc.hostname).map(|e| &**e);
                cluster.load_assignment = Some(eds::assignment(&name, svc, port.port, endpoints, &labels));
            }
            Resolution::Static | Resolution::Passthrough => {
                set_type(&mut cluster, DiscoveryType::Eds);
                cluster.eds_cluster_config =
                    Some(EdsClusterConfig { eds_config: Some(proto::ads_config_source()), service_name: name });
            }
        }
        set_load_balancer(&mut cluster, lb);
    }
    let max_requests_per_connection = traffic
        .connection_pool
        .as_ref()
        .and_then(|p| p.http.as_ref())
        .and_then(|h| h.max_requests_per_connection)
        .and_then(proto::positive_u32);
    set_http_options(&mut cluster, port.protocol, max_requests_per_connection);
    cluster
}

/// `inbound|port||`: the local workload on 127.0.0.1.
fn inbound(port: u32, protocol: Protocol) -> Cluster {
    let name = naming::inbound_cluster(port);
    let endpoint = LbEndpoint {
        host_identifier: Some(HostIdentifier::Endpoint(EnvoyEndpoint {
            address: Some(proto::socket_address(naming::LOCALHOST, port)),
            ..Default::default()
        })),
        ..Default::default()
    };
    let mut cluster = Cluster {
        name: name.clone(),
        connect_timeout: Some(proto::seconds(DEFAULT_CONNECT_TIMEOUT_SECONDS)),
        circuit_breakers: Some(circuit_breakers(&TrafficPolicy::default())),
        load_assignment: Some(ClusterLoadAssignment {
            cluster_name: name,
            endpoints: vec![LocalityLbEndpoints { lb_endpoints: vec![endpoint], ..Default::default() }],
            ..Default::default()
        }),
        ..Default::default()
    };
    set_type(&mut cluster, DiscoveryType::Static);
    set_http_options(&mut cluster, protocol, None);
    cluster
}

/// `BlackHoleCluster`: a static cluster with no hosts.
fn blackhole() -> Cluster {
    let mut cluster = Cluster {
        name: naming::BLACKHOLE_CLUSTER.to_string(),
        connect_timeout: Some(proto::seconds(DEFAULT_CONNECT_TIMEOUT_SECONDS)),
        ..Default::default()
    };
    set_type(&mut cluster, DiscoveryType::Static);
    cluster
}

/// `PassthroughCluster`: forwards to the connection's original destination.
fn passthrough() -> Cluster {
    let mut cluster = Cluster {
        name: naming::PASSTHROUGH_CLUSTER.to_string(),
        connect_timeout: Some(proto::seconds(DEFAULT_CONNECT_TIMEOUT_SECONDS)),
        lb_policy: LbPolicy::ClusterProvided as i32,
        circuit_breakers: Some(circuit_breakers(&TrafficPolicy::default())),
        ..Default::default()
    };
    set_type(&mut cluster, DiscoveryType::OriginalDst);
    cluster
}

fn set_type(cluster: &mut Cluster, kind: DiscoveryType) {
    cluster.cluster_discovery_type = Some(ClusterDiscoveryType::Type(kind as i32));
}

fn connect_timeout(traffic: &TrafficPolicy) -> envoy_types::pb::google::protobuf::Duration {
    traffic
        .connection_pool
        .as_ref()
        .and_then(|p| p.tcp.as_ref())
        .and_then(|t| t.connect_timeout)
        .filter(|d| !d.0.is_zero()) // Envoy requires a positive timeout.
        .map(|d| d.to_proto())
        .unwrap_or_else(|| proto::seconds(DEFAULT_CONNECT_TIMEOUT_SECONDS))
}

/// `simple` → `lb_policy`; `consistentHash` → RING_HASH (the hash key itself
/// goes on the routes, see `rds`).
fn set_load_balancer(cluster: &mut Cluster, lb: Option<&LoadBalancerSettings>) {
    let Some(lb) = lb else { return };
    if let Some(hash) = &lb.consistent_hash {
        cluster.lb_policy = LbPolicy::RingHash as i32;
        if let Some(size) = hash.minimum_ring_size.filter(|s| *s > 0) {
            cluster.lb_config = Some(LbConfig::RingHashLbConfig(RingHashLbConfig {
                minimum_ring_size: Some(envoy_types::pb::google::protobuf::UInt64Value {
                    value: size.min(MAX_RING_SIZE),
                }),
                ..Default::default()
            }));
        }
        return;
    }
    cluster.lb_policy = match lb.simple.as_deref() {
        Some("LEAST_REQUEST") | Some("LEAST_CONN") => LbPolicy::LeastRequest,
        Some("RANDOM") => LbPolicy::Random,
        _ => LbPolicy::RoundRobin,
    } as i32;
}

/// Istio's circuit breakers: every limit at its maximum unless the
/// connection pool sets it (Envoy's own defaults, 1024 connections and 3
/// concurrent retries, surprise people who never asked for limits).
fn circuit_breakers(traffic: &TrafficPolicy) -> CircuitBreakers {
    let pool = traffic.connection_pool.as_ref();
    let tcp = pool.and_then(|p| p.tcp.as_ref());
    let http = pool.and_then(|p| p.http.as_ref());
    let limit = |v: Option<i64>| Some(proto::u32_value(v.and_then(proto::positive_u32).unwrap_or(u32::MAX)));
    CircuitBreakers {
        thresholds: vec![Thresholds {
            max_connections: limit(tcp.and_then(|t| t.max_connections)),
            max_pending_requests: limit(http.and_then(|h| h.http1_max_pending_requests)),
            max_requests: limit(http.and_then(|h| h.http2_max_requests)),
            max_retries: limit(http.and_then(|h| h.max_retries)),
            track_remaining: true,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// HTTP/2 upstream for http2 and grpc ports; `max_requests_per_connection`
/// for HTTP ports. TCP ports get no HTTP options at all.
fn set_http_options(cluster: &mut Cluster, protocol: Protocol, max_requests_per_connection: Option<u32>) {
    let config = match protocol {
        Protocol::Http2 | Protocol::Grpc => ProtocolConfig::Http2ProtocolOptions(Http2ProtocolOptions::default()),
        // Envoy requires an upstream protocol whenever the options are set.
        Protocol::Http if max_requests_per_connection.is_some() => {
            ProtocolConfig::HttpProtocolOptions(Http1ProtocolOptions::default())
        }
        _ => return,
    };
    let options = HttpProtocolOptions {
        common_http_protocol_options: max_requests_per_connection.map(|n| CoreHttpProtocolOptions {
            max_requests_per_connection: Some(proto::u32_value(n)),
            ..Default::default()
        }),
        upstream_protocol_options: Some(UpstreamProtocolOptions::ExplicitHttpConfig(ExplicitHttpConfig {
            protocol_config: Some(config),
        })),
        ..Default::default()
    };
    // A single entry: prost writes map entries in iteration order, and one
    // entry keeps the encoding deterministic.
    cluster.typed_extension_protocol_options.insert(proto::HTTP_PROTOCOL_OPTIONS.to_string(), proto::any(&options));
}

/// Istio's outlier detection: `consecutive5xxErrors` is enforced at 100%,
/// and the success-rate and gateway-failure detectors Envoy enables by
/// default are turned off.
fn outlier_detection(od: &crate::config::istio::OutlierDetection) -> OutlierDetection {
    // Envoy requires positive durations.
    let positive = |d: Option<crate::config::Duration>| d.filter(|d| !d.0.is_zero()).map(|d| d.to_proto());
    OutlierDetection {
        consecutive_5xx: od.consecutive_5xx_errors.filter(|n| *n > 0).map(proto::u32_value),
        enforcing_consecutive_5xx: od.consecutive_5xx_errors.map(|n| proto::u32_value(if n > 0 { 100 } else { 0 })),
        enforcing_consecutive_gateway_failure: Some(proto::u32_value(0)),
        enforcing_success_rate: Some(proto::u32_value(0)),
        interval: positive(od.interval),
        base_ejection_time: positive(od.base_ejection_time),
        max_ejection_percent: od.max_ejection_percent.map(|p| proto::u32_value(p.clamp(0, 100) as u32)),
        ..Default::default()
    }
}
