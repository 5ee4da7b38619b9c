//! Per-route configuration of the fault and CORS filters, as Istio
//! translates `fault` and `corsPolicy`.
//!
//! Every HTTP connection manager carries both filters (see `lds`); a route
//! turns them on through `typed_per_filter_config`. Percentages become
//! parts per million (`percentage.value` × 10,000), the deprecated whole
//! `percent` parts per hundred; as in Istio (and Envoy), a fault without a
//! share injects into no request (validation warns about it).

use envoy_types::pb::envoy::config::core::v3::RuntimeFractionalPercent;
use envoy_types::pb::envoy::extensions::filters::common::fault::v3::{FaultDelay, fault_delay::FaultDelaySecifier};
use envoy_types::pb::envoy::extensions::filters::http::cors::v3::CorsPolicy as EnvoyCorsPolicy;
use envoy_types::pb::envoy::extensions::filters::http::fault::v3::{FaultAbort, HttpFault, fault_abort::ErrorType};
use envoy_types::pb::envoy::r#type::v3::{FractionalPercent, fractional_percent::DenominatorType};

use super::matching::string_matcher;
use crate::config::istio::{CorsPolicy, HttpFaultInjection, Percent, StringMatch, grpc_status_code};
use crate::generate::proto;

/// The fault filter's route config, or `None` when nothing Envoy can inject
/// is set (an exponential delay or an HTTP/2 error alone: validation
/// reports those as not supported).
pub fn fault(fault: &HttpFaultInjection) -> Option<HttpFault> {
    let delay = fault.delay.as_ref().and_then(|d| {
        let fixed = d.fixed_delay?;
        let percentage = match (&d.percentage, d.percent) {
            (Some(p), _) => per_million(p),
            (None, Some(n)) => per_hundred(n.clamp(0, 100) as u32),
            (None, None) => per_hundred(0),
        };
        Some(FaultDelay {
            percentage: Some(percentage),
            fault_delay_secifier: Some(FaultDelaySecifier::FixedDelay(fixed.to_proto())),
        })
    });
    let abort = fault.abort.as_ref().and_then(|a| {
        let error = match (a.http_status, &a.grpc_status) {
            (Some(status), _) => ErrorType::HttpStatus(status.max(0) as u32),
            (None, Some(name)) => ErrorType::GrpcStatus(grpc_status_code(name)?),
            (None, None) => return None,
        };
        Some(FaultAbort {
            percentage: a.percentage.as_ref().map(per_million),
            error_type: Some(error),
            ..Default::default()
        })
    });
    (delay.is_some() || abort.is_some()).then(|| HttpFault { delay, abort, ..Default::default() })
}

/// The CORS filter's route config.
pub fn cors(policy: &CorsPolicy) -> EnvoyCorsPolicy {
    let origins: Vec<_> = if !policy.allow_origins.is_empty() {
        policy.allow_origins.iter().filter_map(string_matcher).collect()
    } else {
        policy
            .allow_origin
            .iter()
            .filter_map(|o| string_matcher(&StringMatch { exact: Some(o.clone()), ..Default::default() }))
            .collect()
    };
    EnvoyCorsPolicy {
        allow_origin_string_match: origins,
        allow_methods: policy.allow_methods.join(","),
        allow_headers: policy.allow_headers.join(","),
        expose_headers: policy.expose_headers.join(","),
        max_age: policy.max_age.map(|d| d.0.as_secs().to_string()).unwrap_or_default(),
        allow_credentials: policy.allow_credentials.map(proto::bool_value),
        filter_enabled: Some(RuntimeFractionalPercent { default_value: Some(per_hundred(100)), ..Default::default() }),
        // Only `IGNORE` keeps preflights whose origin does not match from the upstream.
        forward_not_matching_preflights: Some(proto::bool_value(
            policy.unmatched_preflights.as_deref() != Some("IGNORE"),
        )),
        ..Default::default()
    }
}

/// A share of requests: Istio's `Percent` (0–100 with fractions) in parts per million.
pub fn per_million(percent: &Percent) -> FractionalPercent {
    let value = percent.value.clamp(0.0, 100.0);
    FractionalPercent { numerator: (value * 10_000.0) as u32, denominator: DenominatorType::Million as i32 }
}

/// A whole percentage in parts per hundred.
pub fn per_hundred(percent: u32) -> FractionalPercent {
    FractionalPercent { numerator: percent, denominator: DenominatorType::Hundred as i32 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Duration;
    use crate::config::istio::{FaultAbort as IstioAbort, FaultDelay as IstioDelay};

    #[test]
    fn faults_translate_with_istio_shares() {
        let fault_of =
            |delay: Option<IstioDelay>, abort: Option<IstioAbort>| fault(&HttpFaultInjection { delay, abort });
        let f = fault_of(
            Some(IstioDelay {
                fixed_delay: Some("7s".parse::<Duration>().unwrap()),
                percentage: Some(Percent { value: 0.1 }),
                ..Default::default()
            }),
            Some(IstioAbort { http_status: Some(555), ..Default::default() }),
        )
        .unwrap();
        let delay = f.delay.unwrap();
        assert_eq!(delay.percentage.unwrap().numerator, 1000, "0.1% is 1,000 per million");
        assert!(matches!(delay.fault_delay_secifier, Some(FaultDelaySecifier::FixedDelay(d)) if d.seconds == 7));
        let abort = f.abort.unwrap();
        assert_eq!(abort.error_type, Some(ErrorType::HttpStatus(555)));
        assert!(abort.percentage.is_none(), "no share is passed on as none (Envoy then aborts nothing), as Istio does");
        let grpc =
            fault_of(None, Some(IstioAbort { grpc_status: Some("UNAVAILABLE".into()), ..Default::default() })).unwrap();
        assert_eq!(grpc.abort.unwrap().error_type, Some(ErrorType::GrpcStatus(14)));
        let old = fault_of(
            Some(IstioDelay { fixed_delay: Some("1s".parse().unwrap()), percent: Some(40), ..Default::default() }),
            None,
        )
        .unwrap();
        let share = old.delay.unwrap().percentage.unwrap();
        assert_eq!((share.numerator, share.denominator), (40, DenominatorType::Hundred as i32));
        assert!(
            fault_of(Some(IstioDelay { exponential_delay: Some("1s".parse().unwrap()), ..Default::default() }), None)
                .is_none()
        );
        assert!(
            fault_of(None, Some(IstioAbort { http2_error: Some("PROTOCOL_ERROR".into()), ..Default::default() }))
                .is_none()
        );
    }

    #[test]
    fn cors_joins_lists_and_forwards_unmatched_preflights_unless_told_to_ignore() {
        let mut policy = CorsPolicy {
            allow_origins: vec![StringMatch { prefix: Some("https://a.".into()), ..Default::default() }],
            allow_origin: vec!["https://ignored.example".into()],
            allow_methods: vec!["GET".into(), "POST".into()],
            max_age: Some("24h".parse().unwrap()),
            allow_credentials: Some(false),
            ..Default::default()
        };
        let out = cors(&policy);
        assert_eq!(out.allow_origin_string_match.len(), 1, "allowOrigins wins over the deprecated allowOrigin");
        assert_eq!(out.allow_methods, "GET,POST");
        assert_eq!(out.max_age, "86400");
        assert_eq!(out.allow_credentials.map(|b| b.value), Some(false));
        assert_eq!(out.forward_not_matching_preflights.map(|b| b.value), Some(true));
        policy.unmatched_preflights = Some("IGNORE".into());
        assert_eq!(cors(&policy).forward_not_matching_preflights.map(|b| b.value), Some(false));
    }
}
