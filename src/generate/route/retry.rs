//! `HTTPRetry` as Envoy's retry policy, as Istio's `retry.ConvertPolicy` does.
//!
//! Without `retries` a route gets Istio's default: 2 retries on connection
//! failures, refused streams, `unavailable`, `cancelled` and retriable
//! status codes, at most 5 host selections, preferring hosts not tried yet
//! — except on a consistent-hash route, where retrying another host would
//! defeat the hash. `attempts: 0` means no retries at all. Numbers in
//! `retryOn` are status codes; `retryIgnorePreviousHosts: false` drops the
//! host predicate, `retryRemoteLocalities: true` spreads retries over
//! localities, `backoff` sets the base interval.

use std::sync::LazyLock;

use envoy_types::pb::envoy::config::route::v3::{
    RetryPolicy,
    retry_policy::{RetryBackOff, RetryHostPredicate, RetryPriority, retry_host_predicate, retry_priority},
};
use envoy_types::pb::envoy::extensions::retry::host::previous_hosts::v3::PreviousHostsPredicate;
use envoy_types::pb::envoy::extensions::retry::priority::previous_priorities::v3::PreviousPrioritiesConfig;

use crate::config::istio::HttpRetry;
use crate::generate::proto;

/// Istio's default `retryOn`.
pub const DEFAULT_RETRY_ON: &str = "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes";
/// Istio's default number of retries.
pub const DEFAULT_RETRY_ATTEMPTS: u32 = 2;

/// The host predicate preferring hosts not tried yet (an encoded `Any`, built once).
static PREVIOUS_HOSTS: LazyLock<RetryHostPredicate> = LazyLock::new(|| RetryHostPredicate {
    name: proto::PREVIOUS_HOSTS.to_string(),
    config_type: Some(retry_host_predicate::ConfigType::TypedConfig(proto::any(&PreviousHostsPredicate::default()))),
});

/// The retry priority moving retries to localities not tried yet.
static PREVIOUS_PRIORITIES: LazyLock<RetryPriority> = LazyLock::new(|| RetryPriority {
    name: proto::PREVIOUS_PRIORITIES.to_string(),
    config_type: Some(retry_priority::ConfigType::TypedConfig(proto::any(&PreviousPrioritiesConfig {
        update_frequency: 2,
    }))),
});

/// The retry policy of a route; `consistent_hash` when its destination hashes.
pub fn retry_policy(retries: Option<&HttpRetry>, consistent_hash: bool) -> Option<RetryPolicy> {
    let Some(retries) = retries else {
        return Some(default_retry_policy(consistent_hash));
    };
    let attempts = proto::positive_u32(retries.attempts)?;
    let mut policy = default_retry_policy(consistent_hash);
    policy.num_retries = Some(proto::u32_value(attempts));
    if let Some(on) = retries.retry_on.as_deref().filter(|s| !s.trim().is_empty()) {
        let (mut conditions, mut codes) = (Vec::new(), Vec::new());
        for part in on.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part.parse::<u32>() {
                Ok(code) if (100..600).contains(&code) => codes.push(code),
                _ => conditions.push(part),
            }
        }
        if !codes.is_empty() && !conditions.contains(&"retriable-status-codes") {
            conditions.push("retriable-status-codes");
        }
        policy.retry_on = conditions.join(",");
        policy.retriable_status_codes = codes;
    }
    if let Some(t) = retries.per_try_timeout {
        policy.per_try_timeout = Some(t.to_proto());
    }
    if let Some(ignore) = retries.retry_ignore_previous_hosts {
        policy.retry_host_predicate = if ignore { vec![PREVIOUS_HOSTS.clone()] } else { Vec::new() };
    }
    if retries.retry_remote_localities == Some(true) {
        policy.retry_priority = Some(PREVIOUS_PRIORITIES.clone());
    }
    if let Some(backoff) = retries.backoff {
        policy.retry_back_off = Some(RetryBackOff { base_interval: Some(backoff.to_proto()), ..Default::default() });
    }
    Some(policy)
}

/// Istio's default retry policy (see the module docs).
pub fn default_retry_policy(consistent_hash: bool) -> RetryPolicy {
    RetryPolicy {
        retry_on: DEFAULT_RETRY_ON.to_string(),
        num_retries: Some(proto::u32_value(DEFAULT_RETRY_ATTEMPTS)),
        retry_host_predicate: if consistent_hash { Vec::new() } else { vec![PREVIOUS_HOSTS.clone()] },
        host_selection_retry_max_attempts: 5,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_follow_istio() {
        let default = retry_policy(None, false).unwrap();
        assert_eq!(default.num_retries.unwrap().value, 2);
        assert_eq!(default.retry_host_predicate.len(), 1);
        assert!(retry_policy(None, true).unwrap().retry_host_predicate.is_empty(), "no host predicate when hashing");
        let none = HttpRetry { attempts: 0, ..Default::default() };
        assert!(retry_policy(Some(&none), false).is_none());
        let full = HttpRetry {
            attempts: 4,
            per_try_timeout: Some("2s".parse().unwrap()),
            retry_on: Some("gateway-error, 503,connect-failure".into()),
            retry_remote_localities: Some(true),
            retry_ignore_previous_hosts: Some(false),
            backoff: Some("250ms".parse().unwrap()),
        };
        let p = retry_policy(Some(&full), false).unwrap();
        assert_eq!(p.num_retries.unwrap().value, 4);
        assert_eq!(p.retry_on, "gateway-error,connect-failure,retriable-status-codes");
        assert_eq!(p.retriable_status_codes, vec![503]);
        assert_eq!(p.per_try_timeout.unwrap().seconds, 2);
        assert!(p.retry_host_predicate.is_empty());
        assert_eq!(p.retry_priority.unwrap().name, proto::PREVIOUS_PRIORITIES);
        assert_eq!(p.retry_back_off.unwrap().base_interval.unwrap().nanos, 250_000_000);
    }
}
