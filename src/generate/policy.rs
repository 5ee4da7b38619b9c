//! The DestinationRule that applies to a cluster, and its traffic policy for
//! the cluster's port with the subset's policy merged over the top-level one.
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
    port: Option<u32>,
) -> DestinationPolicy {
    let rule = ctx.destination_rules.for_host(proxy_namespace, service_namespace, host);
    from_rule(rule.map(|r| &r.spec), subset, port)
}

/// The policy of `subset` (empty: the whole service) on `port`, as Istio's
/// `MergeSubsetTrafficPolicy` computes it: a policy's `portLevelSettings`
/// entry for the port replaces its load balancer, connection pool, outlier
/// detection and TLS wholesale (fields it leaves out take their defaults);
/// then the subset's policy is laid over the rule's field by field — or
/// wholesale, when the subset has settings for the port.
pub fn from_rule(rule: Option<&DestinationRuleSpec>, subset: &str, port: Option<u32>) -> DestinationPolicy {
    let Some(rule) = rule else {
        return DestinationPolicy { subset_found: subset.is_empty(), ..Default::default() };
    };
    let (mut traffic, _) = at_port(rule.traffic_policy.as_ref(), port);
    if subset.is_empty() {
        return DestinationPolicy { traffic, labels: BTreeMap::new(), subset_found: true };
    }
    let Some(found) = rule.subsets.iter().find(|s| s.name == subset) else {
        return DestinationPolicy { traffic, labels: BTreeMap::new(), subset_found: false };
    };
    if let Some(subset_policy) = &found.traffic_policy {
        let (over, port_level) = at_port(Some(subset_policy), port);
        if over.load_balancer.is_some() || port_level {
            traffic.load_balancer = over.load_balancer;
        }
        if over.connection_pool.is_some() || port_level {
            traffic.connection_pool = over.connection_pool;
        }
        if over.outlier_detection.is_some() || port_level {
            traffic.outlier_detection = over.outlier_detection;
        }
        if over.retry_budget.is_some() {
            traffic.retry_budget = over.retry_budget;
        }
        if over.tls.is_some() || port_level {
            traffic.tls = over.tls;
        }
    }
    DestinationPolicy { traffic, labels: found.labels.clone(), subset_found: true }
}

/// A policy as it applies on `port`, and whether a port-level entry decided it.
fn at_port(policy: Option<&TrafficPolicy>, port: Option<u32>) -> (TrafficPolicy, bool) {
    let Some(policy) = policy else { return (TrafficPolicy::default(), false) };
    let entry = port
        .and_then(|p| policy.port_level_settings.iter().find(|s| s.port.as_ref().is_some_and(|sel| sel.number == p)));
    match entry {
        Some(entry) => (
            TrafficPolicy {
                load_balancer: entry.load_balancer.clone(),
                connection_pool: entry.connection_pool.clone(),
                outlier_detection: entry.outlier_detection.clone(),
                tls: entry.tls.clone(),
                ..Default::default()
            },
            true,
        ),
        None => (TrafficPolicy { port_level_settings: Vec::new(), ..policy.clone() }, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::istio::{
        ConnectionPoolSettings, LoadBalancerSettings, PortSelector, PortTrafficPolicy, Subset, TcpSettings,
    };

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
        let v2 = from_rule(Some(&rule), "v2", None);
        assert!(v2.subset_found);
        assert_eq!(v2.traffic.load_balancer, lb("LEAST_REQUEST"));
        assert_eq!(v2.traffic.connection_pool, pool, "fields the subset leaves out come from the rule");
        assert_eq!(v2.labels["version"], "v2");
        assert!(!from_rule(Some(&rule), "v9", None).subset_found);
        assert_eq!(from_rule(Some(&rule), "", None).traffic.load_balancer, lb("RANDOM"));
    }

    #[test]
    fn port_level_settings_replace_the_policy_on_their_port() {
        let lb = |s: &str| Some(LoadBalancerSettings { simple: Some(s.into()), ..Default::default() });
        let pool = Some(ConnectionPoolSettings {
            tcp: Some(TcpSettings { max_connections: Some(5), ..Default::default() }),
            ..Default::default()
        });
        let port = |n: u32, balancer| PortTrafficPolicy {
            port: Some(PortSelector { number: n }),
            load_balancer: balancer,
            ..Default::default()
        };
        let rule = DestinationRuleSpec {
            host: "reviews".into(),
            traffic_policy: Some(TrafficPolicy {
                load_balancer: lb("RANDOM"),
                connection_pool: pool.clone(),
                port_level_settings: vec![port(9080, lb("ROUND_ROBIN"))],
                ..Default::default()
            }),
            subsets: vec![Subset {
                name: "v2".into(),
                traffic_policy: Some(TrafficPolicy {
                    port_level_settings: vec![port(9081, lb("LEAST_REQUEST"))],
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        };
        let on_9080 = from_rule(Some(&rule), "", Some(9080)).traffic;
        assert_eq!(on_9080.load_balancer, lb("ROUND_ROBIN"));
        assert_eq!(on_9080.connection_pool, None, "a port-level entry is not merged with the rule's policy");
        assert_eq!(from_rule(Some(&rule), "", Some(9090)).traffic.connection_pool, pool);
        let v2 = from_rule(Some(&rule), "v2", Some(9081)).traffic;
        assert_eq!(v2.load_balancer, lb("LEAST_REQUEST"));
        assert_eq!(v2.connection_pool, None, "the subset's port-level entry replaces every field");
        let v2_other = from_rule(Some(&rule), "v2", Some(9090)).traffic;
        assert_eq!(v2_other.load_balancer, lb("RANDOM"), "without an entry for the port the subset adds nothing");
    }
}
