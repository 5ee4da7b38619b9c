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
}

/// Load balancer: a simple policy or consistent hashing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LoadBalancerSettings {
    /// `ROUND_ROBIN`, `LEAST_REQUEST`, `LEAST_CONN` (alias), `RANDOM` or `PASSTHROUGH`.
    pub simple: Option<String>,
    /// Consistent hashing.
    pub consistent_hash: Option<ConsistentHashLb>,
}

/// Consistent-hash load balancing key.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConsistentHashLb {
    /// Hash on this request header.
    pub http_header_name: Option<String>,
    /// Hash on the source IP.
    #[serde(rename = "useSourceIp")]
    pub use_source_ip: Option<bool>,
    /// Ring size for the ring hash.
    pub minimum_ring_size: Option<u64>,
}

/// Connection pool settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConnectionPoolSettings {
    /// TCP settings.
    pub tcp: Option<TcpSettings>,
    /// HTTP settings.
    pub http: Option<HttpSettings>,
}

/// TCP connection pool settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TcpSettings {
    /// Maximum connections to the destination.
    pub max_connections: Option<i64>,
    /// Connect timeout.
    pub connect_timeout: Option<Duration>,
}

/// HTTP connection pool settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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
}

/// Outlier detection.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OutlierDetection {
    /// Consecutive 5xx before ejection.
    pub consecutive_5xx_errors: Option<u32>,
    /// Sweep interval.
    pub interval: Option<Duration>,
    /// Minimum ejection time.
    pub base_ejection_time: Option<Duration>,
    /// Maximum percentage of hosts ejected.
    pub max_ejection_percent: Option<i64>,
}
