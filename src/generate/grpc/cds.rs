//! CDS for proxyless gRPC: `outbound|PORT|SUBSET|FQDN` for every visible
//! service port and subset of its DestinationRule, as istiod's gRPC
//! generator builds them.
//!
//! A cluster takes its endpoints over EDS (ADS), named as itself. Of the
//! merged DestinationRule policy (the subset's over the port's over the
//! rule's) it carries what gRPC applies:
//! * load balancing: round robin (gRPC's default, also for `RANDOM`,
//!   which gRPC does not have), `LEAST_REQUEST` (as a load balancing
//!   policy list, so that gRPC libraries without it take round robin
//!   rather than refuse the cluster, as C-core does the `lb_policy` field
//!   istiod sends), or a consistent hash as a ring hash (Maglev too: gRPC
//!   has no Maglev) with the ring's minimum size;
//! * circuit breaking: `http.http2MaxRequests` as `max_requests`, the one
//!   threshold gRPC reads;
//! * TLS: `ISTIO_MUTUAL` only, from the client's certificate provider,
//!   checking the destination's identities (as a sidecar's mesh mTLS does).
//!
//! gRPC has no auto mTLS: as under istiod, a gRPC client originates mTLS
//! only where a DestinationRule says ISTIO_MUTUAL. What it does not apply
//! is listed per DestinationRule (`unsupported::notes`).
//!
//! A service resolved by DNS gets a LOGICAL_DNS cluster of its first
//! endpoint (gRPC resolves one name); its other endpoints are not used.

use envoy_types::pb::envoy::config::cluster::v3::{
    CircuitBreakers, Cluster,
    circuit_breakers::Thresholds,
    cluster::{ClusterDiscoveryType, DiscoveryType, EdsClusterConfig, LbPolicy},
};
use envoy_types::pb::envoy::config::cluster::v3::{LoadBalancingPolicy, load_balancing_policy::Policy};
use envoy_types::pb::envoy::config::core::v3::TypedExtensionConfig;
use envoy_types::pb::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints, lb_endpoint::HostIdentifier,
};
use envoy_types::pb::envoy::extensions::load_balancing_policies::least_request::v3::LeastRequest;
use envoy_types::pb::envoy::extensions::load_balancing_policies::round_robin::v3::RoundRobin;
use envoy_types::pb::envoy::extensions::load_balancing_policies::wrr_locality::v3::WrrLocality;
use envoy_types::pb::google::protobuf::Any;

use super::tls;
use crate::config::istio::{DestinationRuleSpec, LoadBalancerSettings, TrafficPolicy};
use crate::generate::policy::{self, DestinationPolicy};
use crate::generate::{mtls, naming, proto};
use crate::model::{Resolution, Service, ServicePort};
use crate::push::{PushContext, Scope};

/// Every cluster of a gRPC scope, sorted by name.
pub fn clusters(ctx: &PushContext, scope: &Scope) -> Vec<Cluster> {
    let mut out = Vec::new();
    for svc in scope.services.iter().filter(|s| !s.is_alias()) {
        let rule = ctx.destination_rules.for_host(&scope.key.namespace, &svc.namespace, &svc.hostname).map(|r| &r.spec);
        let subsets = rule.map(|r| r.subsets.as_slice()).unwrap_or_default();
        for port in &svc.ports {
            out.push(cluster(ctx, svc, port, "", rule));
            for subset in subsets.iter().filter(|s| !s.name.is_empty()) {
                out.push(cluster(ctx, svc, port, &subset.name, rule));
            }
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out.dedup_by(|a, b| a.name == b.name);
    out
}

fn cluster(
    ctx: &PushContext,
    svc: &Service,
    port: &ServicePort,
    subset: &str,
    rule: Option<&DestinationRuleSpec>,
) -> Cluster {
    let name = naming::outbound_cluster(port.port, subset, &svc.hostname);
    let DestinationPolicy { traffic, .. } = policy::from_rule(rule, subset, Some(port.port));
    let mut cluster = Cluster { name: name.clone(), alt_stat_name: name.clone(), ..Default::default() };
    match svc.resolution {
        Resolution::Dns | Resolution::DnsRoundRobin => {
            cluster.cluster_discovery_type = Some(ClusterDiscoveryType::Type(DiscoveryType::LogicalDns as i32));
            cluster.load_assignment = Some(first_endpoint(ctx, svc, port, &name));
        }
        Resolution::Static | Resolution::Passthrough | Resolution::Alias => {
            cluster.cluster_discovery_type = Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32));
            cluster.eds_cluster_config =
                Some(EdsClusterConfig { eds_config: Some(proto::ads_config_source()), service_name: name });
        }
    }
    set_load_balancer(&mut cluster, traffic.load_balancer.as_ref());
    cluster.circuit_breakers = circuit_breakers(&traffic);
    if traffic.tls.as_ref().is_some_and(mtls::is_istio_mutual) {
        let tls = traffic.tls.as_ref().expect("checked");
        let sans =
            if tls.subject_alt_names.is_empty() { mtls::identities(ctx, svc) } else { tls.subject_alt_names.clone() };
        cluster.transport_socket = Some(tls::client_socket(&sans));
    }
    cluster
}

/// Least request, or a consistent hash as a ring hash; round robin (the
/// default, no field) otherwise.
fn set_load_balancer(cluster: &mut Cluster, lb: Option<&LoadBalancerSettings>) {
    let Some(lb) = lb else { return };
    if let Some(hash) = &lb.consistent_hash {
        cluster.lb_policy = LbPolicy::RingHash as i32;
        cluster.lb_config = crate::generate::cds::ring_hash_config(hash);
        return;
    }
    if lb.simple.as_deref() == Some("LEAST_REQUEST") {
        cluster.load_balancing_policy = Some(least_request());
    }
}

/// Least request where the gRPC library has it (Go, Java), else round
/// robin (C-core: C++, Python, which refuse a cluster whose `lb_policy` is
/// LEAST_REQUEST): the load balancing policy field's list, of which each
/// client takes the first it knows, inside the locality weighting gRPC
/// gives its default policy.
fn least_request() -> LoadBalancingPolicy {
    let policy = |name: &str, config: Any| Policy {
        typed_extension_config: Some(TypedExtensionConfig { name: name.to_string(), typed_config: Some(config) }),
    };
    let picking = LoadBalancingPolicy {
        policies: vec![
            policy("envoy.load_balancing_policies.least_request", proto::any(&LeastRequest::default())),
            policy("envoy.load_balancing_policies.round_robin", proto::any(&RoundRobin::default())),
        ],
    };
    let locality = WrrLocality { endpoint_picking_policy: Some(picking) };
    LoadBalancingPolicy { policies: vec![policy("envoy.load_balancing_policies.wrr_locality", proto::any(&locality))] }
}

/// `max_requests` from `http2MaxRequests`, when the rule sets a positive one.
fn circuit_breakers(traffic: &TrafficPolicy) -> Option<CircuitBreakers> {
    let max = traffic.connection_pool.as_ref()?.http.as_ref()?.http2_max_requests.and_then(proto::positive_u32)?;
    Some(CircuitBreakers {
        thresholds: vec![Thresholds { max_requests: Some(proto::u32_value(max)), ..Default::default() }],
        ..Default::default()
    })
}

/// A LOGICAL_DNS cluster's one endpoint: the service's first endpoint on
/// `port` (by address), else the host itself.
fn first_endpoint(ctx: &PushContext, svc: &Service, port: &ServicePort, name: &str) -> ClusterLoadAssignment {
    let endpoints = ctx.endpoints.get(&svc.hostname).map(|e| e.endpoints.as_slice()).unwrap_or_default();
    let first = endpoints
        .iter()
        .filter_map(|e| e.ports.get(&port.port).map(|target| (&*e.address, *target)))
        .min()
        .unwrap_or((&*svc.hostname, port.port));
    ClusterLoadAssignment {
        cluster_name: name.to_string(),
        endpoints: vec![LocalityLbEndpoints {
            locality: Some(Default::default()),
            lb_endpoints: vec![LbEndpoint {
                host_identifier: Some(HostIdentifier::Endpoint(Endpoint {
                    address: Some(proto::socket_address(first.0, first.1)),
                    ..Default::default()
                })),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}
