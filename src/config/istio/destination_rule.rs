//! `DestinationRule`: subsets and traffic policy for a destination host.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::{Duration, ObjectMeta};

/// Istio DestinationRule.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DestinationRule {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: DestinationRuleSpec,
}

/// `DestinationRule.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DestinationRuleSpec {
    /// The host (short name resolved in the rule's namespace, or FQDN).
    pub host: String,
    /// Policy for every subset unless the subset overrides it.
    pub traffic_policy: Option<TrafficPolicy>,
    /// Named subsets selected by endpoint labels.
    pub subsets: Vec<Subset>,
    /// Namespaces the rule is visible to.
    pub export_to: Vec<String>,
    /// Workloads of the rule's namespace it applies to (all when absent).
    pub workload_selector: Option<LabelSelector>,
}

/// A label selector as `istio.type.v1beta1.WorkloadSelector` writes it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LabelSelector {
    /// Labels that must all match.
    pub match_labels: BTreeMap<String, String>,
}

/// A named subset of a service's endpoints.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Subset {
    /// Subset name (appears in cluster names: `outbound|9080|v1|reviews…`).
    pub name: String,
    /// Endpoint labels that select the subset.
    pub labels: BTreeMap<String, String>,
    /// Overrides the rule's policy (fields merge: a subset field wins).
    pub traffic_policy: Option<TrafficPolicy>,
}

/// Traffic policy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TrafficPolicy {
    /// Load balancing.
    pub load_balancer: Option<LoadBalancerSettings>,
    /// Connection pool limits.
    pub connection_pool: Option<ConnectionPoolSettings>,
    /// Outlier detection.
    pub outlier_detection: Option<OutlierDetection>,
    /// Policies for single ports, replacing the ones above there.
    pub port_level_settings: Vec<PortTrafficPolicy>,
    /// Retries allowed as a share of active requests.
    pub retry_budget: Option<RetryBudget>,
    /// TLS to the destination.
    pub tls: Option<ClientTls>,
}

/// `ClientTLSSettings`: how a proxy connects to the destination over TLS.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClientTls {
    /// `DISABLE`, `SIMPLE`, `MUTUAL` or `ISTIO_MUTUAL`.
    pub mode: Option<String>,
    /// A file on the proxy: the client certificate (MUTUAL).
    pub client_certificate: Option<String>,
    /// A file on the proxy: the client's private key (MUTUAL).
    pub private_key: Option<String>,
    /// A file on the proxy: the CA bundle the server certificate is checked against.
    pub ca_certificates: Option<String>,
    /// A file on the proxy: the revocation list.
    pub ca_crl: Option<String>,
    /// A Secret holding the client certificate and key (MUTUAL) and the CA.
    pub credential_name: Option<String>,
    /// Names the server certificate must carry (any one).
    pub subject_alt_names: Vec<String>,
    /// The SNI sent; the request's host when unset.
    pub sni: Option<String>,
    /// Accept a server certificate whatever signed it.
    pub insecure_skip_verify: Option<bool>,
}

/// A traffic policy for one port.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PortTrafficPolicy {
    /// The port.
    pub port: Option<super::PortSelector>,
    /// Load balancing.
    pub load_balancer: Option<LoadBalancerSettings>,
    /// Connection pool limits.
    pub connection_pool: Option<ConnectionPoolSettings>,
    /// Outlier detection.
    pub outlier_detection: Option<OutlierDetection>,
    /// TLS to the destination on this port.
    pub tls: Option<ClientTls>,
}

/// A retry budget.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RetryBudget {
    /// Share of active requests that may be retries (Envoy's default 20).
    pub percent: Option<f64>,
    /// Retries always allowed (Envoy's default 3).
    pub min_retry_concurrency: Option<u32>,
    /// Window over which requests count (Istio's field; Envoy counts active requests).
    pub budget_interval: Option<Duration>,
}

/// Load balancer: a simple policy or consistent hashing, plus locality settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LoadBalancerSettings {
    /// `ROUND_ROBIN`, `LEAST_REQUEST`, `LEAST_CONN` (alias), `RANDOM`, `PASSTHROUGH` or `UNSPECIFIED`.
    pub simple: Option<String>,
    /// Consistent hashing.
    pub consistent_hash: Option<ConsistentHashLb>,
    /// Locality-weighted load balancing and failover.
    pub locality_lb_setting: Option<LocalityLbSetting>,
    /// Slow start for new endpoints.
    pub warmup_duration_secs: Option<Duration>,
    /// Slow start with its curve.
    pub warmup: Option<WarmupConfiguration>,
}

/// Slow start.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WarmupConfiguration {
    /// Window.
    pub duration: Option<Duration>,
    /// Starting share of the weight, in percent (Envoy's default 10).
    pub minimum_percent: Option<f64>,
    /// Curve (Envoy's default 1.0: linear).
    pub aggression: Option<f64>,
}

/// Consistent-hash load balancing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConsistentHashLb {
    /// Hash on this request header.
    pub http_header_name: Option<String>,
    /// Hash on this cookie (generated when missing).
    pub http_cookie: Option<HttpCookie>,
    /// Hash on the source IP.
    #[serde(rename = "useSourceIp")]
    pub use_source_ip: Option<bool>,
    /// Hash on this query parameter.
    pub http_query_parameter_name: Option<String>,
    /// Ring hash with its size.
    pub ring_hash: Option<RingHash>,
    /// Maglev with its table size.
    pub maglev: Option<MagLev>,
    /// Ring size for the ring hash (deprecated by Istio for `ringHash`).
    pub minimum_ring_size: Option<u64>,
}

/// The cookie of a cookie hash.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpCookie {
    /// Cookie name.
    pub name: String,
    /// Cookie path.
    pub path: Option<String>,
    /// Lifetime of a generated cookie; without one Envoy does not generate it.
    pub ttl: Option<Duration>,
    /// Extra cookie attributes.
    pub attributes: Vec<CookieAttribute>,
}

/// An attribute of a generated cookie.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct CookieAttribute {
    /// Name.
    pub name: String,
    /// Value.
    pub value: Option<String>,
}

/// Ring hash settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RingHash {
    /// Minimum ring size (Istio's default 1024).
    pub minimum_ring_size: Option<u64>,
}

/// Maglev settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MagLev {
    /// Table size, a prime (Envoy's default 65537).
    pub table_size: Option<u64>,
}

/// Locality load balancing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LocalityLbSetting {
    /// Weighted shares of traffic from a locality to localities.
    pub distribute: Vec<LocalityDistribute>,
    /// Where traffic fails over from a region.
    pub failover: Vec<LocalityFailover>,
    /// Labels that order endpoints by priority.
    pub failover_priority: Vec<String>,
    /// Turns locality load balancing on or off.
    pub enabled: Option<bool>,
}

/// Shares of traffic from one locality.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LocalityDistribute {
    /// Source locality (`region/zone/subzone`, `*` wildcards).
    pub from: String,
    /// Destination locality → weight.
    pub to: BTreeMap<String, u32>,
}

/// Failover from one region to another.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LocalityFailover {
    /// Source region.
    pub from: String,
    /// Region to fail over to.
    pub to: String,
}

/// Connection pool settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConnectionPoolSettings {
    /// TCP settings.
    pub tcp: Option<TcpSettings>,
    /// HTTP settings.
    pub http: Option<HttpSettings>,
}

/// TCP connection pool settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TcpSettings {
    /// Maximum connections to the destination.
    pub max_connections: Option<i64>,
    /// Connect timeout.
    pub connect_timeout: Option<Duration>,
    /// TCP keepalive.
    pub tcp_keepalive: Option<TcpKeepalive>,
    /// Maximum lifetime of a connection.
    pub max_connection_duration: Option<Duration>,
    /// Idle timeout of a TCP connection.
    pub idle_timeout: Option<Duration>,
}

/// TCP keepalive settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TcpKeepalive {
    /// Probes before the connection is dead.
    pub probes: Option<u32>,
    /// Idle time before the first probe.
    pub time: Option<Duration>,
    /// Time between probes.
    pub interval: Option<Duration>,
}

/// HTTP connection pool settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpSettings {
    /// Maximum pending HTTP/1.1 requests.
    pub http1_max_pending_requests: Option<i64>,
    /// Maximum concurrent HTTP/2 requests.
    pub http2_max_requests: Option<i64>,
    /// Maximum requests per connection (1 disables keep-alive).
    pub max_requests_per_connection: Option<i64>,
    /// Maximum concurrent retries.
    pub max_retries: Option<i64>,
    /// Idle timeout of an upstream connection.
    pub idle_timeout: Option<Duration>,
    /// `DEFAULT`, `DO_NOT_UPGRADE` or `UPGRADE` (HTTP/1.1 to HTTP/2).
    pub h2_upgrade_policy: Option<String>,
    /// Use the protocol the client used.
    pub use_client_protocol: Option<bool>,
    /// Maximum concurrent streams per HTTP/2 connection.
    pub max_concurrent_streams: Option<i64>,
    /// HTTP/2 keepalive pings.
    pub http2_keep_alive: Option<ConnectionKeepalive>,
}

/// HTTP/2 keepalive.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConnectionKeepalive {
    /// Time between pings.
    pub interval: Option<Duration>,
    /// Time to wait for a ping's answer.
    pub timeout: Option<Duration>,
}

/// Outlier detection.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OutlierDetection {
    /// Consecutive errors before ejection (deprecated by Istio: 5xx errors).
    pub consecutive_errors: Option<i64>,
    /// Count locally originated failures apart.
    pub split_external_local_origin_errors: Option<bool>,
    /// Consecutive locally originated failures before ejection.
    pub consecutive_local_origin_failures: Option<u32>,
    /// Consecutive gateway errors (502, 503, 504) before ejection.
    pub consecutive_gateway_errors: Option<u32>,
    /// Consecutive 5xx before ejection.
    pub consecutive_5xx_errors: Option<u32>,
    /// Sweep interval.
    pub interval: Option<Duration>,
    /// Minimum ejection time.
    pub base_ejection_time: Option<Duration>,
    /// Maximum percentage of hosts ejected.
    pub max_ejection_percent: Option<i64>,
    /// Outlier detection stops below this share of healthy hosts.
    pub min_health_percent: Option<i64>,
}
