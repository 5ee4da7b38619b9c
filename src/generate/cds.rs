//! CDS: the clusters of one scope.
//!
//! For every visible service port: `outbound|port||host` and one cluster per
//! subset of the DestinationRule the scope's namespace sees. A cluster's
//! discovery type follows the service's resolution (EDS for known IPs,
//! STRICT_DNS with inline endpoints for DNS entries, ORIGINAL_DST for
//! passthrough — EDS on a router, which has no original destination, as in
//! Istio); an alias (`ExternalName`) has none of its own; its load balancer, circuit breakers, HTTP options and
//! outlier detection follow the merged DestinationRule policy; its TLS is
//! the rule's, or mesh mTLS (`mtls`: ISTIO_MUTUAL, or auto mTLS) for a
//! proxy that holds a workload certificate. Sidecars also
//! get `inbound|port||` for each of their workload ports. `BlackHoleCluster`
//! and `PassthroughCluster` are always there.
//!
//! What a rule (or, inbound, a Sidecar's connection pool) leaves unsaid
//! comes from the mesh config's traffic defaults, as in Istio: every
//! cluster's connect timeout; the TCP keepalive of every cluster with a
//! traffic policy (all but `BlackHoleCluster`, which never connects); the
//! HTTP/2 upgrade of outbound HTTP/1.1 ports; the refresh rate of DNS
//! clusters; whether auto mTLS is on.
//!
//! Invariants: the output depends only on the context and the scope; it is
//! sorted by name with each name once, so equal inputs encode to equal bytes.

use envoy_types::pb::envoy::config::cluster::v3::{
    CircuitBreakers, Cluster, OutlierDetection, UpstreamConnectionOptions,
    circuit_breakers::{Thresholds, thresholds::RetryBudget},
    cluster::{
        ClusterDiscoveryType, CommonLbConfig, DiscoveryType, DnsLookupFamily, EdsClusterConfig, LbConfig, LbPolicy,
        LeastRequestLbConfig, MaglevLbConfig, RingHashLbConfig, RoundRobinLbConfig, SlowStartConfig,
        common_lb_config::{LocalityConfigSpecifier, LocalityWeightedLbConfig},
    },
};
use envoy_types::pb::envoy::config::core::v3::{
    BindConfig, Http1ProtocolOptions, Http2ProtocolOptions, HttpProtocolOptions as CoreHttpProtocolOptions,
    KeepaliveSettings, RuntimeDouble, SocketAddress, TcpKeepalive, UpstreamHttpProtocolOptions,
    socket_address::PortSpecifier,
};
use envoy_types::pb::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, Endpoint as EnvoyEndpoint, LbEndpoint, LocalityLbEndpoints, lb_endpoint::HostIdentifier,
};
use envoy_types::pb::envoy::extensions::upstreams::http::v3::{
    HttpProtocolOptions,
    http_protocol_options::{
        ExplicitHttpConfig, UpstreamProtocolOptions, UseDownstreamHttpConfig, explicit_http_config::ProtocolConfig,
    },
};
use envoy_types::pb::envoy::r#type::v3::Percent;

use super::mtls::{self, MeshTls};
use super::policy::{self, DestinationPolicy};
use super::{eds, gateway, naming, proto, tls};
use crate::config::Duration;
use crate::config::istio::{
    ConnectionPoolSettings, ConsistentHashLb, DestinationRuleSpec, LoadBalancerSettings,
    TcpKeepalive as IstioTcpKeepalive, TrafficPolicy,
};
use crate::config::mesh::{H2UpgradePolicy, TrafficSettings};
use crate::model::{InterceptionMode, Protocol, ProxyKind, Resolution, Service, ServicePort};
use crate::push::scope::{InboundDefaults, InboundEndpoint, InboundPort};
use crate::push::{InboundKey, PushContext, Scope};

/// The source address of inbound connections to the original destination:
/// Istio's iptables rules return connections from it to the application
/// rather than redirecting them to the sidecar again.
const INBOUND_PASSTHROUGH_SOURCE: &str = "127.0.0.6";
/// Istio's "never" for an ORIGINAL_DST cluster's cleanup interval: the
/// longest a protobuf duration holds, about 292 years.
const NEVER_SECONDS: i64 = (i64::MAX - 999_999_999) / 1_000_000_000;
/// Istio's ring size when a consistent hash sets none.
const DEFAULT_RING_SIZE: u64 = 1024;
/// Envoy's upper bound for `RingHashLbConfig.minimum_ring_size`.
const MAX_RING_SIZE: u64 = 8_388_608;

/// Every cluster a proxy of `scope` needs, sorted by name.
pub fn clusters(ctx: &PushContext, scope: &Scope) -> Vec<Cluster> {
    if scope.key.kind == ProxyKind::Waypoint {
        return super::waypoint::clusters(ctx, scope);
    }
    let mut out = Vec::new();
    let router = scope.key.kind == ProxyKind::Router;
    let proxy = OutboundProxy { router, mesh_certificates: scope.key.mesh_certificates };
    for svc in scope.services.iter().filter(|s| !s.is_alias()) {
        let rule = ctx.destination_rules.for_host(&scope.key.namespace, &svc.namespace, &svc.hostname).map(|r| &r.spec);
        let subsets = rule.map(|r| r.subsets.as_slice()).unwrap_or_default();
        for port in &svc.ports {
            out.push(outbound(ctx, svc, port, "", rule, proxy));
            for subset in subsets.iter().filter(|s| !s.name.is_empty()) {
                out.push(outbound(ctx, svc, port, &subset.name, rule, proxy));
            }
        }
    }
    if router {
        out.extend(sni_dnat_clusters(ctx, scope));
    }
    out.push(blackhole(&ctx.mesh.traffic));
    out.push(passthrough(&ctx.mesh.traffic));
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out.dedup_by(|a, b| a.name == b.name);
    out
}

/// The SDS names the clusters of `scope` refer to: the Secrets a router's
/// DestinationRules name for TLS origination (`credentialName`). Sidecars
/// read none (Istio originates no TLS from a Secret there).
pub fn secret_names(ctx: &PushContext, scope: &Scope) -> Vec<String> {
    if scope.key.kind != ProxyKind::Router {
        return Vec::new();
    }
    let mut out = Vec::new();
    for svc in scope.services.iter().filter(|s| !s.is_alias()) {
        let Some(rule) = ctx.destination_rules.for_host(&scope.key.namespace, &svc.namespace, &svc.hostname) else {
            continue;
        };
        let subsets =
            std::iter::once("").chain(rule.spec.subsets.iter().map(|s| s.name.as_str()).filter(|n| !n.is_empty()));
        for subset in subsets {
            for port in &svc.ports {
                let policy = policy::from_rule(Some(&rule.spec), subset, Some(port.port));
                if let Some(t) = &policy.traffic.tls {
                    out.extend(tls::upstream_secret_names(t, true));
                }
            }
        }
    }
    out
}

/// The clusters a router's AUTO_PASSTHROUGH servers reach by SNI
/// (`outbound_.PORT_.SUBSET_.HOST`): each the service port's (or subset's)
/// outbound cluster under that name, as Istio's SNI-DNAT clusters. The
/// client's TLS goes through untouched, so none originates TLS.
fn sni_dnat_clusters(ctx: &PushContext, scope: &Scope) -> Vec<Cluster> {
    gateway::sni_targets(ctx, scope)
        .into_iter()
        .filter_map(|t| {
            let port = t.service.port(t.port)?;
            let rule = ctx
                .destination_rules
                .for_host(&scope.key.namespace, &t.service.namespace, &t.service.hostname)
                .map(|r| &r.spec);
            // No TLS of the router's own: the client's goes through.
            let proxy = OutboundProxy { router: true, mesh_certificates: false };
            let mut cluster = outbound(ctx, t.service, port, &t.subset, rule, proxy);
            cluster.name = t.cluster.clone();
            if let Some(eds) = cluster.eds_cluster_config.as_mut() {
                eds.service_name = t.cluster.clone();
            }
            if let Some(cla) = cluster.load_assignment.as_mut() {
                cla.cluster_name = t.cluster.clone();
            }
            cluster.transport_socket = None;
            Some(cluster)
        })
        .collect()
}

/// The inbound clusters of a workload: `inbound|PORT||` for each of its
/// ports (sidecars only). Sorted by name.
pub fn inbound_clusters(key: &InboundKey) -> Vec<Cluster> {
    if key.kind != ProxyKind::Sidecar {
        return Vec::new();
    }
    let mut out: Vec<Cluster> = key.ports.iter().map(|p| inbound(p, &key.defaults)).collect();
    if key.interception != InterceptionMode::None {
        // `virtualInbound`'s catch-all chains lead here.
        out.push(inbound_passthrough(&key.defaults));
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out.dedup_by(|a, b| a.name == b.name);
    out
}

/// What of the proxy decides its outbound clusters beyond the scope's services.
#[derive(Debug, Clone, Copy)]
struct OutboundProxy {
    /// A router (its passthrough services are EDS; it reads TLS Secrets).
    router: bool,
    /// It holds a workload certificate: its clusters originate mesh mTLS.
    mesh_certificates: bool,
}

/// One outbound cluster of a service port, for the whole service (`subset`
/// empty) or one subset of `rule`, for `proxy`.
fn outbound(
    ctx: &PushContext,
    svc: &Service,
    port: &ServicePort,
    subset: &str,
    rule: Option<&DestinationRuleSpec>,
    proxy: OutboundProxy,
) -> Cluster {
    let router = proxy.router;
    let mesh = &ctx.mesh.traffic;
    let name = naming::outbound_cluster(port.port, subset, &svc.hostname);
    let DestinationPolicy { traffic, labels, .. } = policy::from_rule(rule, subset, Some(port.port));
    let lb = traffic.load_balancer.as_ref();
    let passthrough = (svc.resolution == Resolution::Passthrough && !router)
        || lb.and_then(|l| l.simple.as_deref()) == Some("PASSTHROUGH");

    let mut cluster = Cluster {
        name: name.clone(),
        connect_timeout: Some(connect_timeout(&traffic, mesh.connect_timeout)),
        circuit_breakers: Some(circuit_breakers(&traffic)),
        outlier_detection: traffic.outlier_detection.as_ref().map(outlier_detection),
        ..Default::default()
    };
    if passthrough {
        set_type(&mut cluster, DiscoveryType::OriginalDst);
        cluster.lb_policy = LbPolicy::ClusterProvided as i32;
    } else {
        match svc.resolution {
            Resolution::Dns | Resolution::DnsRoundRobin => {
                let kind = if svc.resolution == Resolution::Dns {
                    DiscoveryType::StrictDns
                } else {
                    DiscoveryType::LogicalDns
                };
                set_type(&mut cluster, kind);
                // Istio's default: A records only, so a name with both
                // families resolves to the same address on every proxy.
                cluster.dns_lookup_family = DnsLookupFamily::V4Only as i32;
                set_dns_refresh(&mut cluster, mesh.dns_refresh_rate);
                let endpoints = ctx.endpoints.get(&svc.hostname).map(|e| &**e);
                cluster.load_assignment =
                    Some(eds::assignment(&name, svc, port.port, endpoints, &labels, &ctx.mesh.cluster_id));
            }
            Resolution::Static | Resolution::Passthrough | Resolution::Alias => {
                set_type(&mut cluster, DiscoveryType::Eds);
                cluster.eds_cluster_config =
                    Some(EdsClusterConfig { eds_config: Some(proto::ads_config_source()), service_name: name });
            }
        }
        set_load_balancer(&mut cluster, lb);
    }
    let pool = traffic.connection_pool.as_ref();
    let http2 = speaks_http2(port.protocol, pool, mesh.h2_upgrade);
    let origination = traffic.tls.as_ref().and_then(|t| tls::upstream_context(t, router, http2));
    let auto = origination.as_ref().map(|o| (o.auto_sni, o.auto_san_validation));
    set_http_options(&mut cluster, port.protocol, pool, http2, auto.unwrap_or_default());
    cluster.transport_socket = origination.map(|o| o.socket);
    if proxy.mesh_certificates {
        match mtls::upstream(ctx, svc, port.port, subset, &traffic, http2, passthrough) {
            Some(MeshTls::Always(socket)) => cluster.transport_socket = Some(socket),
            Some(MeshTls::Matched(matches)) => cluster.transport_socket_matches = matches,
            None => {}
        }
    }
    set_tcp_keepalive(&mut cluster, mesh.tcp_keepalive.as_ref(), traffic.connection_pool.as_ref());
    if let Some(od) = &traffic.outlier_detection {
        // Istio stops the panic mode below `minHealthPercent` (0 unless set):
        // ejected hosts stay ejected rather than taking traffic again.
        cluster.common_lb_config.get_or_insert_with(CommonLbConfig::default).healthy_panic_threshold =
            Some(Percent { value: od.min_health_percent.unwrap_or(0).clamp(0, 100) as f64 });
    }
    if !passthrough && eds::locality_weighted(&traffic, ctx.mesh.locality_lb_setting.as_ref()) {
        cluster.common_lb_config.get_or_insert_with(CommonLbConfig::default).locality_config_specifier =
            Some(LocalityConfigSpecifier::LocalityWeightedLbConfig(LocalityWeightedLbConfig::default()));
    }
    cluster
}

/// The cluster of `port` of `svc` (`subset` empty: the whole service) under
/// `rule`, with no mesh TLS of its own: a waypoint's `inbound-vip` cluster
/// before its name and transport change (`generate::waypoint`).
pub(crate) fn service_cluster(
    ctx: &PushContext,
    svc: &Service,
    port: &ServicePort,
    subset: &str,
    rule: Option<&DestinationRuleSpec>,
) -> Cluster {
    outbound(ctx, svc, port, subset, rule, OutboundProxy { router: false, mesh_certificates: false })
}

/// `inbound|port||`: the local workload, where the port's endpoint says,
/// with the Sidecar's inbound connection pool over the mesh's defaults.
///
/// To the original destination (the mesh's PASSTHROUGH inbound mode), it is
/// Istio's ORIGINAL_DST cluster: idle hosts never cleaned up (there is one,
/// the workload), and connections from [`INBOUND_PASSTHROUGH_SOURCE`], which
/// Istio's iptables rules let through to the application instead of
/// redirecting them back to the sidecar. Otherwise a static cluster of the
/// one address (127.0.0.1 at the same port under LOCALHOST, or a Sidecar
/// ingress listener's `defaultEndpoint`).
fn inbound(port: &InboundPort, defaults: &InboundDefaults) -> Cluster {
    let name = naming::inbound_cluster(port.port);
    let traffic = TrafficPolicy { connection_pool: port.pool.clone(), ..Default::default() };
    let mut cluster = Cluster {
        name: name.clone(),
        connect_timeout: Some(connect_timeout(&traffic, defaults.connect_timeout)),
        circuit_breakers: Some(circuit_breakers(&traffic)),
        ..Default::default()
    };
    let address = match &port.endpoint {
        InboundEndpoint::OriginalDestination => None,
        InboundEndpoint::Socket { ip, port } => Some(proto::socket_address(ip, *port)),
        InboundEndpoint::Unix(path) => Some(proto::pipe_address(path)),
    };
    match address {
        None => {
            set_type(&mut cluster, DiscoveryType::OriginalDst);
            cluster.lb_policy = LbPolicy::ClusterProvided as i32;
            cluster.cleanup_interval = Some(proto::seconds(NEVER_SECONDS));
            cluster.upstream_bind_config = Some(passthrough_source());
        }
        Some(address) => {
            let endpoint = LbEndpoint {
                host_identifier: Some(HostIdentifier::Endpoint(EnvoyEndpoint {
                    address: Some(address),
                    ..Default::default()
                })),
                ..Default::default()
            };
            cluster.load_assignment = Some(ClusterLoadAssignment {
                cluster_name: name,
                endpoints: vec![LocalityLbEndpoints { lb_endpoints: vec![endpoint], ..Default::default() }],
                ..Default::default()
            });
            set_type(&mut cluster, DiscoveryType::Static);
        }
    }
    // Istio never upgrades inbound connections to HTTP/2, whatever the
    // Sidecar's pool or the mesh say.
    let pool = port.pool.as_ref().map(|p| {
        let mut p = p.clone();
        if let Some(http) = &mut p.http {
            http.h2_upgrade_policy = None;
        }
        p
    });
    let http2 = speaks_http2(port.protocol, pool.as_ref(), H2UpgradePolicy::DoNotUpgrade);
    set_http_options(&mut cluster, port.protocol, pool.as_ref(), http2, (false, false));
    set_tcp_keepalive(&mut cluster, defaults.tcp_keepalive.as_ref(), port.pool.as_ref());
    cluster
}

/// `BlackHoleCluster`: a static cluster with no hosts. It never connects,
/// so of the mesh's defaults it takes only the connect timeout, as in Istio.
fn blackhole(mesh: &TrafficSettings) -> Cluster {
    let mut cluster = Cluster {
        name: naming::BLACKHOLE_CLUSTER.to_string(),
        connect_timeout: Some(mesh.connect_timeout.to_proto()),
        ..Default::default()
    };
    set_type(&mut cluster, DiscoveryType::Static);
    cluster
}

/// `InboundPassthroughCluster` (Istio's): `virtualInbound` hands it the
/// connections to ports the workload does not declare. It forwards each to
/// its original destination from [`INBOUND_PASSTHROUGH_SOURCE`], which
/// capture lets through to the application (from any other source the
/// proxy's own connection to its pod would be captured again, a loop).
fn inbound_passthrough(defaults: &InboundDefaults) -> Cluster {
    let mut cluster = original_destination(
        naming::INBOUND_PASSTHROUGH_CLUSTER,
        &defaults.connect_timeout,
        defaults.tcp_keepalive.as_ref(),
    );
    cluster.upstream_bind_config = Some(passthrough_source());
    cluster
}

/// The source inbound passthrough connects from.
fn passthrough_source() -> BindConfig {
    BindConfig {
        source_address: Some(SocketAddress {
            address: INBOUND_PASSTHROUGH_SOURCE.to_string(),
            port_specifier: Some(PortSpecifier::PortValue(0)),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// `PassthroughCluster`: forwards to the connection's original destination,
/// with the mesh's connect timeout and TCP keepalive.
fn passthrough(mesh: &TrafficSettings) -> Cluster {
    original_destination(naming::PASSTHROUGH_CLUSTER, &mesh.connect_timeout, mesh.tcp_keepalive.as_ref())
}

/// An ORIGINAL_DST cluster (both passthroughs): Istio's default circuit
/// breakers, the given connect timeout and TCP keepalive.
fn original_destination(
    name: &str,
    connect_timeout: &crate::config::Duration,
    keepalive: Option<&IstioTcpKeepalive>,
) -> Cluster {
    let mut cluster = Cluster {
        name: name.to_string(),
        connect_timeout: Some(connect_timeout.to_proto()),
        lb_policy: LbPolicy::ClusterProvided as i32,
        circuit_breakers: Some(circuit_breakers(&TrafficPolicy::default())),
        ..Default::default()
    };
    set_type(&mut cluster, DiscoveryType::OriginalDst);
    set_tcp_keepalive(&mut cluster, keepalive, None);
    cluster
}

/// How often a DNS cluster resolves again, as Istio sets it: at the mesh's
/// `dnsRefreshRate`, or at a record's TTL where it has one. Envoy has
/// deprecated both fields for its DNS cluster extension; Istio still sets
/// them, and so does meshpush, so its DNS clusters keep Istio's shape.
#[allow(deprecated)]
fn set_dns_refresh(cluster: &mut Cluster, rate: Duration) {
    cluster.dns_refresh_rate = Some(rate.to_proto());
    cluster.respect_dns_ttl = true;
}

fn set_type(cluster: &mut Cluster, kind: DiscoveryType) {
    cluster.cluster_discovery_type = Some(ClusterDiscoveryType::Type(kind as i32));
}

/// The connection pool's connect timeout, else the mesh's (`mesh`).
fn connect_timeout(traffic: &TrafficPolicy, mesh: Duration) -> envoy_types::pb::google::protobuf::Duration {
    traffic
        .connection_pool
        .as_ref()
        .and_then(|p| p.tcp.as_ref())
        .and_then(|t| t.connect_timeout)
        .filter(|d| !d.0.is_zero()) // Envoy requires a positive timeout.
        .unwrap_or(mesh)
        .to_proto()
}

/// `simple` → `lb_policy` (Istio's default is LEAST_REQUEST) with the
/// warmup's slow start; `consistentHash` → RING_HASH (1024 entries unless
/// set) or MAGLEV — the hash key itself goes on the routes, see `route`.
fn set_load_balancer(cluster: &mut Cluster, lb: Option<&LoadBalancerSettings>) {
    let slow_start = lb.and_then(slow_start);
    cluster.lb_policy = match lb.and_then(|l| l.simple.as_deref()) {
        Some("RANDOM") => LbPolicy::Random,
        Some("ROUND_ROBIN") => {
            cluster.lb_config =
                slow_start.map(|s| LbConfig::RoundRobinLbConfig(RoundRobinLbConfig { slow_start_config: Some(s) }));
            LbPolicy::RoundRobin
        }
        _ => {
            cluster.lb_config = slow_start.map(|s| {
                LbConfig::LeastRequestLbConfig(LeastRequestLbConfig {
                    slow_start_config: Some(s),
                    ..Default::default()
                })
            });
            LbPolicy::LeastRequest
        }
    } as i32;
    let Some(hash) = lb.and_then(|l| l.consistent_hash.as_ref()) else { return };
    let u64_value = |value: u64| envoy_types::pb::google::protobuf::UInt64Value { value };
    if let Some(maglev) = &hash.maglev {
        cluster.lb_policy = LbPolicy::Maglev as i32;
        cluster.lb_config = maglev
            .table_size
            .filter(|t| *t > 0)
            .map(|t| LbConfig::MaglevLbConfig(MaglevLbConfig { table_size: Some(u64_value(t)) }));
        return;
    }
    cluster.lb_policy = LbPolicy::RingHash as i32;
    cluster.lb_config = ring_hash_config(hash);
}

/// The ring of a consistent hash: its minimum size as the rule sets it
/// (Istio's 1024 when it sets none, up to Envoy's and gRPC's bound).
pub(crate) fn ring_hash_config(hash: &ConsistentHashLb) -> Option<LbConfig> {
    let size = match &hash.ring_hash {
        Some(ring) => ring.minimum_ring_size.filter(|s| *s > 0),
        None => Some(hash.minimum_ring_size.filter(|s| *s > 0).unwrap_or(DEFAULT_RING_SIZE)),
    };
    size.map(|size| {
        LbConfig::RingHashLbConfig(RingHashLbConfig {
            minimum_ring_size: Some(envoy_types::pb::google::protobuf::UInt64Value { value: size.min(MAX_RING_SIZE) }),
            ..Default::default()
        })
    })
}

/// Slow start from `warmup` (Istio's defaults: aggression 1, 10% minimum
/// weight) or the older `warmupDurationSecs`.
fn slow_start(lb: &LoadBalancerSettings) -> Option<SlowStartConfig> {
    if let Some(warmup) = &lb.warmup {
        return Some(SlowStartConfig {
            slow_start_window: warmup.duration.map(|d| d.to_proto()),
            aggression: Some(RuntimeDouble {
                default_value: warmup.aggression.unwrap_or(1.0),
                runtime_key: "(".to_string(),
            }),
            min_weight_percent: Some(Percent { value: warmup.minimum_percent.unwrap_or(10.0) }),
        });
    }
    lb.warmup_duration_secs.map(|d| SlowStartConfig { slow_start_window: Some(d.to_proto()), ..Default::default() })
}

/// Istio's circuit breakers: every limit at its maximum unless the
/// connection pool sets it (Envoy's own defaults, 1024 connections and 3
/// concurrent retries, surprise people who never asked for limits), and the
/// retry budget when the policy has one (Istio's defaults: 20%, 3).
fn circuit_breakers(traffic: &TrafficPolicy) -> CircuitBreakers {
    let pool = traffic.connection_pool.as_ref();
    let tcp = pool.and_then(|p| p.tcp.as_ref());
    let http = pool.and_then(|p| p.http.as_ref());
    let limit = |v: Option<i64>| Some(proto::u32_value(v.and_then(proto::positive_u32).unwrap_or(u32::MAX)));
    let retry_budget = traffic.retry_budget.as_ref().map(|b| RetryBudget {
        budget_percent: Some(Percent { value: b.percent.unwrap_or(20.0) }),
        min_retry_concurrency: Some(proto::u32_value(b.min_retry_concurrency.filter(|n| *n > 0).unwrap_or(3))),
        budget_interval: b.budget_interval.map(|d| d.to_proto()),
    });
    CircuitBreakers {
        thresholds: vec![Thresholds {
            max_connections: limit(tcp.and_then(|t| t.max_connections)),
            max_pending_requests: limit(http.and_then(|h| h.http1_max_pending_requests)),
            max_requests: limit(http.and_then(|h| h.http2_max_requests)),
            max_retries: limit(http.and_then(|h| h.max_retries)),
            retry_budget,
            track_remaining: true,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// Whether a cluster of a port of `protocol` speaks HTTP/2 upstream, as
/// Istio decides it: http2 and grpc ports do; an HTTP/1.1 port does when
/// its rule's `h2UpgradePolicy` is UPGRADE, or, where the rule says DEFAULT
/// or nothing, when the mesh's (`mesh`) is; none with `useClientProtocol`.
fn speaks_http2(protocol: Protocol, pool: Option<&ConnectionPoolSettings>, mesh: H2UpgradePolicy) -> bool {
    let http = pool.and_then(|p| p.http.as_ref());
    let use_client_protocol = http.and_then(|h| h.use_client_protocol) == Some(true);
    let upgrade = match http.and_then(|h| h.h2_upgrade_policy.as_deref()) {
        Some("UPGRADE") => true,
        Some("DO_NOT_UPGRADE") => false,
        _ => mesh == H2UpgradePolicy::Upgrade,
    };
    !use_client_protocol
        && (matches!(protocol, Protocol::Http2 | Protocol::Grpc) || (protocol == Protocol::Http && upgrade))
}

/// The upstream HTTP protocol, as Istio picks it: HTTP/2 when `http2`
/// ([`speaks_http2`]), the client's protocol with `useClientProtocol`; with
/// the pool's idle timeout (HTTP, else TCP), requests per connection,
/// connection lifetime, and for HTTP/2 its concurrent streams and
/// keepalive. TCP ports get no HTTP options. `(auto_sni,
/// auto_san_validation)`: the cluster originates TLS with the request's
/// host as SNI (and checks the server's certificate names it), as Istio
/// sets for any port's cluster, since HTTP routes may send to a TLS port's
/// cluster.
fn set_http_options(
    cluster: &mut Cluster,
    protocol: Protocol,
    pool: Option<&ConnectionPoolSettings>,
    http2: bool,
    (auto_sni, auto_san_validation): (bool, bool),
) {
    let http = pool.and_then(|p| p.http.as_ref());
    let tcp = pool.and_then(|p| p.tcp.as_ref());
    let auto = auto_sni || auto_san_validation;
    if !matches!(protocol, Protocol::Http | Protocol::Http2 | Protocol::Grpc) && !auto {
        return;
    }
    let use_client_protocol = http.and_then(|h| h.use_client_protocol) == Some(true);
    let common = CoreHttpProtocolOptions {
        idle_timeout: http.and_then(|h| h.idle_timeout).or(tcp.and_then(|t| t.idle_timeout)).map(|d| d.to_proto()),
        max_requests_per_connection: http
            .and_then(|h| h.max_requests_per_connection)
            .and_then(proto::positive_u32)
            .map(proto::u32_value),
        max_connection_duration: tcp.and_then(|t| t.max_connection_duration).map(|d| d.to_proto()),
        ..Default::default()
    };
    let has_common = common != CoreHttpProtocolOptions::default();
    let http2_options = || Http2ProtocolOptions {
        max_concurrent_streams: http
            .and_then(|h| h.max_concurrent_streams)
            .and_then(proto::positive_u32)
            .map(proto::u32_value),
        connection_keepalive: http.and_then(|h| h.http2_keep_alive.as_ref()).map(|k| KeepaliveSettings {
            interval: k.interval.map(|d| d.to_proto()),
            timeout: k.timeout.map(|d| d.to_proto()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let upstream = if use_client_protocol {
        UpstreamProtocolOptions::UseDownstreamProtocolConfig(UseDownstreamHttpConfig {
            http_protocol_options: Some(Http1ProtocolOptions::default()),
            http2_protocol_options: Some(http2_options()),
            ..Default::default()
        })
    } else if http2 {
        UpstreamProtocolOptions::ExplicitHttpConfig(ExplicitHttpConfig {
            protocol_config: Some(ProtocolConfig::Http2ProtocolOptions(http2_options())),
        })
    } else if has_common || auto {
        // Envoy requires an upstream protocol whenever the options are set.
        UpstreamProtocolOptions::ExplicitHttpConfig(ExplicitHttpConfig {
            protocol_config: Some(ProtocolConfig::HttpProtocolOptions(Http1ProtocolOptions::default())),
        })
    } else {
        return;
    };
    let options = HttpProtocolOptions {
        common_http_protocol_options: has_common.then_some(common),
        upstream_http_protocol_options: auto.then_some(UpstreamHttpProtocolOptions {
            auto_sni,
            auto_san_validation,
            ..Default::default()
        }),
        upstream_protocol_options: Some(upstream),
        ..Default::default()
    };
    // A single entry: prost writes map entries in iteration order, and one
    // entry keeps the encoding deterministic.
    cluster.typed_extension_protocol_options.insert(proto::HTTP_PROTOCOL_OPTIONS.to_string(), proto::any(&options));
}

/// TCP keepalive on upstream connections, as Istio's `applyTCPKeepalive`:
/// the mesh's (`mesh`), then each attribute the connection pool's sets over
/// it; either one alone turns keepalive on (an empty one with the OS's
/// probes and times). Whole seconds, as Envoy takes them.
fn set_tcp_keepalive(cluster: &mut Cluster, mesh: Option<&IstioTcpKeepalive>, pool: Option<&ConnectionPoolSettings>) {
    let rule = pool.and_then(|p| p.tcp.as_ref()).and_then(|t| t.tcp_keepalive.as_ref());
    if mesh.is_none() && rule.is_none() {
        return;
    }
    let secs = |d: Duration| proto::u32_value(d.0.as_secs().min(u64::from(u32::MAX)) as u32);
    let mut keepalive = TcpKeepalive::default();
    for set in mesh.into_iter().chain(rule) {
        if let Some(probes) = set.probes.filter(|p| *p > 0) {
            keepalive.keepalive_probes = Some(proto::u32_value(probes));
        }
        if let Some(time) = set.time {
            keepalive.keepalive_time = Some(secs(time));
        }
        if let Some(interval) = set.interval {
            keepalive.keepalive_interval = Some(secs(interval));
        }
    }
    cluster.upstream_connection_options =
        Some(UpstreamConnectionOptions { tcp_keepalive: Some(keepalive), ..Default::default() });
}

/// Istio's outlier detection: consecutive 5xx and gateway errors are
/// enforced at 100% when set, locally originated failures counted apart
/// when asked, and the success-rate detector Envoy enables by default is off.
fn outlier_detection(od: &crate::config::istio::OutlierDetection) -> OutlierDetection {
    // Envoy requires positive durations.
    let positive = |d: Option<Duration>| d.filter(|d| !d.0.is_zero()).map(|d| d.to_proto());
    let enforcing = |n: u32| proto::u32_value(if n > 0 { 100 } else { 0 });
    let split = od.split_external_local_origin_errors == Some(true);
    let local_failures = od.consecutive_local_origin_failures.filter(|n| split && *n > 0);
    OutlierDetection {
        consecutive_5xx: od.consecutive_5xx_errors.map(proto::u32_value),
        enforcing_consecutive_5xx: od.consecutive_5xx_errors.map(enforcing),
        consecutive_gateway_failure: od.consecutive_gateway_errors.map(proto::u32_value),
        enforcing_consecutive_gateway_failure: od.consecutive_gateway_errors.map(enforcing),
        enforcing_success_rate: Some(proto::u32_value(0)),
        interval: positive(od.interval),
        base_ejection_time: positive(od.base_ejection_time),
        max_ejection_percent: od.max_ejection_percent.filter(|p| *p > 0).map(|p| proto::u32_value(p.min(100) as u32)),
        split_external_local_origin_errors: split,
        consecutive_local_origin_failure: local_failures.map(proto::u32_value),
        enforcing_consecutive_local_origin_failure: local_failures.map(|_| proto::u32_value(100)),
        enforcing_local_origin_success_rate: split.then(|| proto::u32_value(0)),
        ..Default::default()
    }
}
