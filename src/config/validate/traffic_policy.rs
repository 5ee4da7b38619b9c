//! Checks for a DestinationRule's `trafficPolicy` (the rule's own and each
//! subset's): load balancer, connection pool, outlier detection, per-port
//! settings and the client TLS a proxy originates, following Istio's
//! validation (`validateTLS` for the TLS). What Istio accepts but ignores is
//! a warning here, so a user learns that the field has no effect.

use std::collections::BTreeMap;

use super::Checker;
use crate::config::istio::{ClientTls, ConnectionPoolSettings, LoadBalancerSettings, OutlierDetection, TrafficPolicy};

/// A traffic policy at `path` (`spec.trafficPolicy`, `spec.subsets[i].trafficPolicy`).
pub(super) fn traffic_policy(check: &mut Checker, path: &str, policy: &TrafficPolicy) {
    if let Some(lb) = &policy.load_balancer {
        load_balancer(check, &format!("{path}.loadBalancer"), lb);
        if let Some(locality) = &lb.locality_lb_setting
            && (!locality.failover.is_empty() || !locality.failover_priority.is_empty())
            && policy.outlier_detection.is_none()
        {
            check.warning(
                format!("{path}.loadBalancer.localityLbSetting"),
                "fails over only when endpoints are ejected: without outlierDetection it has no effect (as in Istio)",
            );
        }
    }
    if let Some(pool) = &policy.connection_pool {
        connection_pool(check, &format!("{path}.connectionPool"), pool);
    }
    if let Some(od) = &policy.outlier_detection {
        outlier_detection(check, &format!("{path}.outlierDetection"), od);
    }
    let mut ports: BTreeMap<u32, usize> = BTreeMap::new();
    for (i, entry) in policy.port_level_settings.iter().enumerate() {
        let ppath = format!("{path}.portLevelSettings[{i}]");
        match &entry.port {
            None => check.error(format!("{ppath}.port"), "is missing: a port-level setting names its port"),
            Some(port) => {
                check.port(format!("{ppath}.port.number"), port.number);
                if let Some(first) = ports.insert(port.number, i) {
                    check.error(
                        format!("{ppath}.port.number"),
                        format!("port {} already has settings in {path}.portLevelSettings[{first}]", port.number),
                    );
                }
            }
        }
        if let Some(lb) = &entry.load_balancer {
            load_balancer(check, &format!("{ppath}.loadBalancer"), lb);
        }
        if let Some(pool) = &entry.connection_pool {
            connection_pool(check, &format!("{ppath}.connectionPool"), pool);
        }
        if let Some(od) = &entry.outlier_detection {
            outlier_detection(check, &format!("{ppath}.outlierDetection"), od);
        }
        if let Some(tls) = &entry.tls {
            client_tls(check, &format!("{ppath}.tls"), tls);
        }
    }
    if let Some(tls) = &policy.tls {
        client_tls(check, &format!("{path}.tls"), tls);
    }
    if let Some(budget) = &policy.retry_budget
        && let Some(p) = budget.percent
        && !(0.0..=100.0).contains(&p)
    {
        check.error(format!("{path}.retryBudget.percent"), format!("{p} is not a percentage (0 to 100)"));
    }
}

/// A DestinationRule's `tls`, as Istio's `validateTLS`, with what Istio
/// ignores reported.
fn client_tls(check: &mut Checker, path: &str, tls: &ClientTls) {
    let mode = tls.mode.as_deref().unwrap_or("DISABLE").to_ascii_uppercase();
    if !["DISABLE", "SIMPLE", "MUTUAL", "ISTIO_MUTUAL"].contains(&mode.as_str()) {
        return check.error(
            format!("{path}.mode"),
            format!("{:?} is not one of DISABLE, SIMPLE, MUTUAL, ISTIO_MUTUAL", tls.mode.as_deref().unwrap_or("")),
        );
    }
    let files = [
        ("clientCertificate", &tls.client_certificate),
        ("privateKey", &tls.private_key),
        ("caCertificates", &tls.ca_certificates),
    ];
    let credential = tls.credential_name.as_deref().is_some_and(|n| !n.is_empty());
    match mode.as_str() {
        "ISTIO_MUTUAL" => {
            for (field, value) in files {
                if value.is_some() {
                    check.error(
                        format!("{path}.{field}"),
                        "cannot be set with ISTIO_MUTUAL, which uses the workload's certificates (as Istio says)",
                    );
                }
            }
            for (field, set) in [("credentialName", credential), ("caCrl", tls.ca_crl.is_some())] {
                if set {
                    check.warning(
                        format!("{path}.{field}"),
                        "is not read with ISTIO_MUTUAL: the workload's certificate and the mesh root are used",
                    );
                }
            }
        }
        "DISABLE" => {
            if files.iter().any(|(_, v)| v.is_some())
                || credential
                || tls.sni.is_some()
                || !tls.subject_alt_names.is_empty()
            {
                check
                    .warning(path, "sets certificates or names with mode DISABLE: ignored, connections are plain text");
            }
        }
        mode => {
            if credential {
                check.warning(
                    format!("{path}.credentialName"),
                    "is read by gateways only (as in Istio, whose sidecars need the rule's workloadSelector for it): sidecars originate no TLS to this destination",
                );
                for (field, value) in files {
                    if value.is_some() {
                        check.warning(
                            format!("{path}.{field}"),
                            "is not read with credentialName: the Secret holds the certificates",
                        );
                    }
                }
            } else if mode == "MUTUAL" {
                for (field, value) in &files[..2] {
                    if value.as_deref().is_none_or(str::is_empty) {
                        check.error(
                            format!("{path}.{field}"),
                            "is missing: MUTUAL TLS presents a client certificate and key (or set credentialName)",
                        );
                    }
                }
            }
            if credential && tls.ca_crl.is_some() {
                check.warning(
                    format!("{path}.caCrl"),
                    "is not read with credentialName (as in Istio): no revocation list is checked",
                );
            }
            if tls.insecure_skip_verify == Some(true) {
                for (field, set) in [
                    ("subjectAltNames", !tls.subject_alt_names.is_empty()),
                    ("caCertificates", tls.ca_certificates.is_some()),
                    ("caCrl", tls.ca_crl.is_some()),
                ] {
                    if set {
                        check.warning(format!("{path}.{field}"), "is not checked with insecureSkipVerify: the server's certificate is accepted whatever it says");
                    }
                }
            }
            if mode == "SIMPLE" && !credential {
                for (field, value) in &files[..2] {
                    if value.is_some() {
                        check.warning(
                            format!("{path}.{field}"),
                            "is not used by SIMPLE TLS, which presents no client certificate: ignored",
                        );
                    }
                }
            }
        }
    }
}

fn load_balancer(check: &mut Checker, lb_path: &str, lb: &LoadBalancerSettings) {
    if let Some(simple) = &lb.simple {
        check.one_of(
            format!("{lb_path}.simple"),
            simple,
            &["UNSPECIFIED", "ROUND_ROBIN", "LEAST_REQUEST", "LEAST_CONN", "RANDOM", "PASSTHROUGH"],
        );
    }
    if let Some(hash) = &lb.consistent_hash {
        if lb.simple.is_some() {
            check.error(lb_path, "sets both simple and consistentHash: choose one load balancer");
        }
        let hpath = format!("{lb_path}.consistentHash");
        let keys: Vec<&str> = [
            ("httpHeaderName", hash.http_header_name.as_deref().is_some_and(|h| !h.is_empty())),
            ("httpCookie", hash.http_cookie.is_some()),
            ("useSourceIp", hash.use_source_ip == Some(true)),
            ("httpQueryParameterName", hash.http_query_parameter_name.as_deref().is_some_and(|h| !h.is_empty())),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect();
        match keys.as_slice() {
            [] => check.error(
                hpath.clone(),
                "names no hash key: set one of httpHeaderName, httpCookie, useSourceIp or httpQueryParameterName",
            ),
            [_] => {}
            several => check
                .error(hpath.clone(), format!("sets {}: a consistent hash has exactly one key", several.join(" and "))),
        }
        if let Some(cookie) = &hash.http_cookie {
            if cookie.name.is_empty() {
                check.error(format!("{hpath}.httpCookie.name"), "is empty: a hash cookie needs a name");
            }
            if cookie.ttl.is_none() {
                check.warning(
                    format!("{hpath}.httpCookie.ttl"),
                    "is not set: Envoy then hashes on the cookie only when the client sends it, and never sets it",
                );
            }
        }
        let algorithms = [hash.ring_hash.is_some(), hash.maglev.is_some()].iter().filter(|s| **s).count();
        if algorithms > 1 {
            check.error(hpath.clone(), "sets both ringHash and maglev: choose one");
        }
        if hash.minimum_ring_size.is_some() && algorithms > 0 {
            check.error(
                format!("{hpath}.minimumRingSize"),
                "is deprecated and conflicts with ringHash or maglev: use ringHash.minimumRingSize",
            );
        }
    }
    if let Some(locality) = &lb.locality_lb_setting {
        for (path, why) in locality_problems(locality) {
            check.error(format!("{lb_path}.localityLbSetting{path}"), why);
        }
    }
    if lb.warmup.is_some() && lb.warmup_duration_secs.is_some() {
        check.error(lb_path, "sets both warmup and warmupDurationSecs: keep warmup");
    }
    if let Some(warmup) = &lb.warmup {
        if warmup.duration.is_none() {
            check.error(format!("{lb_path}.warmup.duration"), "is missing: a warmup needs its duration");
        }
        if let Some(p) = warmup.minimum_percent
            && !(0.0..=100.0).contains(&p)
        {
            check.error(format!("{lb_path}.warmup.minimumPercent"), format!("{p} is not a percentage (0 to 100)"));
        }
        if let Some(a) = warmup.aggression
            && a < 1.0
        {
            check.error(format!("{lb_path}.warmup.aggression"), format!("{a} is less than 1"));
        }
    }
    let warmup = lb.warmup.is_some() || lb.warmup_duration_secs.is_some();
    if warmup && lb.consistent_hash.is_some() {
        check.warning(
            lb_path,
            "warmup applies to ROUND_ROBIN and LEAST_REQUEST only: ignored with consistentHash (as in Istio)",
        );
    } else if warmup && matches!(lb.simple.as_deref(), Some("RANDOM") | Some("PASSTHROUGH")) {
        check.warning(
            lb_path,
            "warmup applies to ROUND_ROBIN and LEAST_REQUEST only: ignored with this load balancer (as in Istio)",
        );
    }
}

fn connection_pool(check: &mut Checker, pool_path: &str, pool: &ConnectionPoolSettings) {
    if let Some(tcp) = &pool.tcp {
        check.non_negative(format!("{pool_path}.tcp.maxConnections"), tcp.max_connections);
        if let Some(t) = tcp.connect_timeout
            && t.0 < std::time::Duration::from_millis(1)
        {
            check.error(format!("{pool_path}.tcp.connectTimeout"), "must be at least 1ms");
        }
    }
    if let Some(http) = &pool.http {
        let h = format!("{pool_path}.http");
        check.non_negative(format!("{h}.http1MaxPendingRequests"), http.http1_max_pending_requests);
        check.non_negative(format!("{h}.http2MaxRequests"), http.http2_max_requests);
        check.non_negative(format!("{h}.maxRequestsPerConnection"), http.max_requests_per_connection);
        check.non_negative(format!("{h}.maxRetries"), http.max_retries);
        check.non_negative(format!("{h}.maxConcurrentStreams"), http.max_concurrent_streams);
        if let Some(policy) = &http.h2_upgrade_policy {
            check.one_of(format!("{h}.h2UpgradePolicy"), policy, &["DEFAULT", "DO_NOT_UPGRADE", "UPGRADE"]);
        }
    }
}

fn outlier_detection(check: &mut Checker, path: &str, od: &OutlierDetection) {
    if let Some(percent) = od.max_ejection_percent
        && !(0..=100).contains(&percent)
    {
        check.error(format!("{path}.maxEjectionPercent"), format!("{percent} is not a percentage (0..100)"));
    }
    if let Some(percent) = od.min_health_percent
        && !(0..=100).contains(&percent)
    {
        check.error(format!("{path}.minHealthPercent"), format!("{percent} is not a percentage (0..100)"));
    }
    if od.consecutive_errors.is_some() {
        check.unsupported(
            format!("{path}.consecutiveErrors"),
            Some("Istio ignores this deprecated field too; use consecutive5xxErrors or consecutiveGatewayErrors"),
        );
    }
    if od.consecutive_local_origin_failures.is_some() && od.split_external_local_origin_errors != Some(true) {
        check.warning(
            format!("{path}.consecutiveLocalOriginFailures"),
            "is used only with splitExternalLocalOriginErrors: true (as in Istio): ignored",
        );
    }
}

/// What Istio's validation refuses in a locality setting (a
/// DestinationRule's or the mesh config's): each as the path under the
/// setting (`.distribute[0].to`, empty for the setting itself) and why.
pub fn locality_problems(locality: &crate::config::istio::LocalityLbSetting) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if !locality.distribute.is_empty() && (!locality.failover.is_empty() || !locality.failover_priority.is_empty()) {
        out.push((
            String::new(),
            "sets distribute with failover or failoverPriority: Istio allows one or the other".into(),
        ));
    }
    for (i, d) in locality.distribute.iter().enumerate() {
        if d.from.is_empty() {
            out.push((
                format!(".distribute[{i}].from"),
                "is empty: name the locality traffic comes from (region/zone/subzone, * wildcards)".into(),
            ));
        }
        let total: u64 = d.to.values().map(|w| u64::from(*w)).sum();
        if total != 100 {
            out.push((format!(".distribute[{i}].to"), format!("weights add up to {total}, not 100")));
        }
    }
    for (i, f) in locality.failover.iter().enumerate() {
        if f.from.is_empty() || f.to.is_empty() || f.from.contains('/') || f.to.contains('/') {
            out.push((format!(".failover[{i}]"), "from and to must be regions (no zone)".into()));
        } else if f.from == f.to {
            out.push((format!(".failover[{i}]"), format!("fails over from {} to itself", f.from)));
        }
    }
    out
}
