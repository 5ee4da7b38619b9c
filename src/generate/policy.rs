//! The DestinationRule that applies to a cluster, and its traffic policy with
//! the subset's policy merged over the top-level one.
//!
//! CDS reads the load balancer, connection pool and outlier detection from
//! it; RDS reads the consistent-hash key (Envoy hashes on the route, not on
//! the cluster). Both go through [`for_destination`] so a cluster and the
//! routes that target it always agree on which rule applies.

use std::collections::BTreeMap;

use crate::config::istio::{DestinationRuleSpec, TrafficPolicy};
use crate::push::PushContext;

/// The traffic policy and subset labels for one cluster.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DestinationPolicy {
    /// Top-level policy with the subset's fields laid over it.
    pub traffic: TrafficPolicy,
    /// Labels selecting the subset's endpoints (empty for the whole service).
    pub labels: BTreeMap<String, String>,
    /// Whether the subset is defined (always true for the empty subset).
    pub subset_found: bool,
}

/// The policy for `subset` of `host` (a service of `service_namespace`) as
/// seen from `proxy_namespace`, following Istio's DestinationRule lookup.
pub fn for_destination(
    ctx: &PushContext,
    proxy_namespace: &str,
    service_namespace: &str,
    host: &str,
    subset: &str,
) -> DestinationPolicy {
    let rule = ctx.destination_rules.for_host(proxy_namespace, service_namespace, host);
    from_rule(rule.map(|r| &r.spec), subset)
}

/// Merges a rule's top-level policy with the named subset's. Istio merges
/// field by field at the top level: a subset's `connectionPool` replaces the
/// rule's whole `connectionPool`, and so on.
pub fn from_rule(rule: Option<&DestinationRuleSpec>, subset: &str) -> DestinationPolicy {
    let Some(rule) = rule else {
        return DestinationPolicy { subset_found: subset.is_empty(), ..Default::default() };
    };
    let mut traffic = rule.traffic_policy.clone().unwrap_or_default();
    if subset.is_empty() {
        return DestinationPolicy { traffic, labels: BTreeMap::new(), subset_found: true };
    }
    let Some(found) = rule.subsets.iter().find(|s| s.name == subset) else {
        return DestinationPolicy { traffic, labels: BTreeMap::new(), subset_found: false };
    };
    if let Some(over) = &found.traffic_policy {
        if over.load_balancer.is_some() {
            traffic.load_balancer = over.load_balancer.clone();
        }
        if over.connection_pool.is_some() {
            traffic.connection_pool = over.connection_pool.clone();
        }
        if over.outlier_detection.is_some() {
            traffic.outlier_detection = over.outlier_detection.clone();
        }
    }
    DestinationPolicy { traffic, labels: found.labels.clone(), subset_found: true }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::istio::{ConnectionPoolSettings, LoadBalancerSettings, Subset, TcpSettings};

    #[test]
    fn subset_fields_replace_top_level_fields() {
        let lb = |s: &str| Some(LoadBalancerSettings { simple: Some(s.into()), ..Default::default() });
        let pool = Some(ConnectionPoolSettings {
            tcp: Some(TcpSettings { max_connections: Some(5), ..Default::default() }),
            ..Default::default()
        });
        let rule = DestinationRuleSpec {
            host: "reviews".into(),
            traffic_policy: Some(TrafficPolicy {
                load_balancer: lb("RANDOM"),
                connection_pool: pool.clone(),
                ..Default::default()
            }),
            subsets: vec![Subset {
                name: "v2".into(),
                labels: [("version".to_string(), "v2".to_string())].into(),
                traffic_policy: Some(TrafficPolicy { load_balancer: lb("LEAST_REQUEST"), ..Default::default() }),
            }],
            ..Default::default()
        };
        let v2 = from_rule(Some(&rule), "v2");
        assert!(v2.subset_found);
        assert_eq!(v2.traffic.load_balancer, lb("LEAST_REQUEST"));
        assert_eq!(v2.traffic.connection_pool, pool, "fields the subset leaves out come from the rule");
        assert_eq!(v2.labels["version"], "v2");
        assert!(!from_rule(Some(&rule), "v9").subset_found);
        assert_eq!(from_rule(Some(&rule), "").traffic.load_balancer, lb("RANDOM"));
    }
}
