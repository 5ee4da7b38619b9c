//! Checks for the Istio kinds other than VirtualService (DestinationRule,
//! Gateway, ServiceEntry, WorkloadEntry, Sidecar), following Istio's own
//! validation (`pkg/config/validation`) where meshpush implements the
//! feature. A Gateway server that cannot be served is a warning on that
//! server: the Gateway's other servers are served.

use std::collections::{BTreeMap, BTreeSet};

use crate::config::protocol::Protocol;

use super::{Checker, LABEL_RULE, check_namespaced_host, is_dns1123_label, is_ip, is_ip_or_cidr, is_wildcard_host};
use crate::config::istio::{
    ClientTls, ConnectionPoolSettings, DestinationRule, Gateway, LoadBalancerSettings, OutlierDetection, Server,
    ServerTls, ServiceEntry, Sidecar, TlsMode, TrafficPolicy, WorkloadEntry, WorkloadEntrySpec, WorkloadGroup,
};

/// Port protocols Istio knows (`protocol.Parse`), compared case-insensitively as Istio does.
const PROTOCOLS: &[&str] =
    &["HTTP", "HTTPS", "HTTP2", "GRPC", "GRPC-WEB", "TCP", "TLS", "MONGO", "REDIS", "MYSQL", "UDP"];

pub(super) fn destination_rule(check: &mut Checker, dr: &DestinationRule) {
    let spec = &dr.spec;
    if spec.host.is_empty() {
        check.error("spec.host", "is empty: a DestinationRule needs the host it applies to");
    } else if !is_wildcard_host(&spec.host) {
        check.error("spec.host", format!("{:?} is not a host name or wildcard", spec.host));
    }
    check.export_to(&spec.export_to);
    if let Some(policy) = &spec.traffic_policy {
        traffic_policy(check, "spec.trafficPolicy", policy);
    }
    if spec.workload_selector.is_some() {
        check.unsupported(
            "spec.workloadSelector",
            Some("the rule applies to every proxy that sees the host, not only the selected workloads"),
        );
    }
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, subset) in spec.subsets.iter().enumerate() {
        let path = format!("spec.subsets[{i}]");
        if subset.name.is_empty() {
            check.error(format!("{path}.name"), "is empty: a subset needs a name");
        } else if !is_dns1123_label(&subset.name) {
            check.error(format!("{path}.name"), format!("{:?} is not a valid subset name: {LABEL_RULE}", subset.name));
        } else if let Some(first) = names.insert(&subset.name, i) {
            check.error(
                format!("{path}.name"),
                format!("{:?} is already the name of spec.subsets[{first}]: subset names must be unique", subset.name),
            );
        }
        if let Some(policy) = &subset.traffic_policy {
            traffic_policy(check, &format!("{path}.trafficPolicy"), policy);
        }
    }
}

fn traffic_policy(check: &mut Checker, path: &str, policy: &TrafficPolicy) {
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
        let lpath = format!("{lb_path}.localityLbSetting");
        if !locality.distribute.is_empty() && (!locality.failover.is_empty() || !locality.failover_priority.is_empty())
        {
            check.error(
                lpath.clone(),
                "sets distribute with failover or failoverPriority: Istio allows one or the other",
            );
        }
        for (i, d) in locality.distribute.iter().enumerate() {
            let dpath = format!("{lpath}.distribute[{i}]");
            if d.from.is_empty() {
                check.error(
                    format!("{dpath}.from"),
                    "is empty: name the locality traffic comes from (region/zone/subzone, * wildcards)",
                );
            }
            let total: u64 = d.to.values().map(|w| u64::from(*w)).sum();
            if total != 100 {
                check.error(format!("{dpath}.to"), format!("weights add up to {total}, not 100"));
            }
        }
        for (i, f) in locality.failover.iter().enumerate() {
            if f.from.is_empty() || f.to.is_empty() || f.from.contains('/') || f.to.contains('/') {
                check.error(format!("{lpath}.failover[{i}]"), "from and to must be regions (no zone)");
            } else if f.from == f.to {
                check.error(format!("{lpath}.failover[{i}]"), format!("fails over from {} to itself", f.from));
            }
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

pub(super) fn gateway(check: &mut Checker, gateway: &Gateway) {
    if gateway.spec.servers.is_empty() {
        check.error("spec.servers", "is empty: a Gateway needs at least one server");
    }
    let mut port_names: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, server) in gateway.spec.servers.iter().enumerate() {
        let path = format!("spec.servers[{i}]");
        check.port(format!("{path}.port.number"), server.port.number);
        if let Some(target) = server.port.target_port {
            check.port(format!("{path}.port.targetPort"), target);
        }
        let protocol = server.protocol();
        match protocol.as_str() {
            _ if GATEWAY_PROTOCOLS.contains(&protocol.as_str()) => {}
            "" => check.error(format!("{path}.port.protocol"), format!("is missing: set one of {}", GATEWAY_PROTOCOLS.join(", "))),
            "UDP" => check.warning(
                format!("{path}.port.protocol"),
                "UDP: gateways serve TCP protocols only (as Istio's): this server is not served; the Gateway's others are",
            ),
            _ => check.error(
                format!("{path}.port.protocol"),
                format!("{:?} is not a protocol: use one of {}", server.port.protocol, GATEWAY_PROTOCOLS.join(", ")),
            ),
        }
        if server.port.name.is_empty() {
            // Istio refuses this; meshpush names HTTPS routes by it, and warns.
            check.warning(format!("{path}.port.name"), "is empty: Istio requires a port name");
        } else if let Some(first) = port_names.insert(&server.port.name, i) {
            check.warning(
                format!("{path}.port.name"),
                format!(
                    "{:?} is also the port name of spec.servers[{first}]: Istio requires unique port names",
                    server.port.name
                ),
            );
        }
        if server.hosts.is_empty() {
            check.error(format!("{path}.hosts"), "is empty: a server needs at least one host (\"*\" for any)");
        }
        for (h, host) in server.hosts.iter().enumerate() {
            check_namespaced_host(check, format!("{path}.hosts[{h}]"), host, true, false);
        }
        if let Some(bind) = &server.bind
            && !is_ip(bind)
        {
            check.error(format!("{path}.bind"), format!("{bind:?} is not an IP address"));
        }
        if let Some((field, reason)) = server.unservable() {
            check.warning(
                format!("{path}.{field}"),
                format!("{reason}: this server is not served; the Gateway's others are"),
            );
            continue;
        }
        if let Some(tls) = &server.tls {
            server_tls(check, &format!("{path}.tls"), server, tls);
        }
    }
    let labelled = gateway.spec.servers.iter().enumerate().map(|(i, s)| (format!("spec.servers[{i}]"), s));
    for (i, reason) in crate::config::istio::port_conflicts(labelled) {
        check.warning(
            format!("spec.servers[{i}]"),
            format!("{reason}: this server is not served; the Gateway's others are"),
        );
    }
}

/// Gateway server protocols meshpush serves: HTTP ones through the HTTP
/// connection manager, the others (MONGO, MYSQL, REDIS as Istio: TCP)
/// through tcp_proxy.
const GATEWAY_PROTOCOLS: &[&str] =
    &["HTTP", "HTTPS", "HTTP2", "GRPC", "GRPC-WEB", "TCP", "TLS", "MONGO", "REDIS", "MYSQL"];

/// TLS versions as Istio names them.
const TLS_VERSIONS: &[&str] = &["TLS_AUTO", "TLSV1_0", "TLSV1_1", "TLSV1_2", "TLSV1_3"];

/// The settings of a server that can be served: what is ignored, and why.
fn server_tls(check: &mut Checker, path: &str, server: &Server, tls: &ServerTls) {
    let mode = server.tls_mode().unwrap_or(TlsMode::Plain);
    if tls.https_redirect && !matches!(server.protocol().as_str(), "HTTP" | "HTTP2" | "GRPC" | "GRPC-WEB") {
        check.warning(
            format!("{path}.httpsRedirect"),
            format!("has no effect on a {} server: it redirects plain HTTP servers only", server.protocol()),
        );
    }
    if matches!(mode, TlsMode::Passthrough | TlsMode::AutoPassthrough) {
        let certificates = tls.credential_name.is_some()
            || !tls.credential_names.is_empty()
            || tls.server_certificate.is_some()
            || tls.private_key.is_some()
            || tls.ca_certificates.is_some()
            || !tls.tls_certificates.is_empty();
        if certificates {
            check.warning(path, "names certificates, which a passthrough server does not use (it does not terminate TLS): ignored, as in Istio");
        }
    }
    if !mode.terminates() {
        return;
    }
    if mode == TlsMode::IstioMutual {
        for (field, set) in [
            ("minProtocolVersion", tls.min_protocol_version.is_some()),
            ("maxProtocolVersion", tls.max_protocol_version.is_some()),
            ("cipherSuites", !tls.cipher_suites.is_empty()),
            ("verifyCertificateSpki", !tls.verify_certificate_spki.is_empty()),
            ("verifyCertificateHash", !tls.verify_certificate_hash.is_empty()),
            ("caCertCredentialName", tls.ca_cert_credential_name.is_some()),
        ] {
            if set {
                check.warning(
                    format!("{path}.{field}"),
                    "is not applied to ISTIO_MUTUAL, which serves mesh mTLS with Envoy's defaults and the mesh root (Istio ignores it too)",
                );
            }
        }
        return;
    }
    for (field, version) in
        [("minProtocolVersion", &tls.min_protocol_version), ("maxProtocolVersion", &tls.max_protocol_version)]
    {
        if let Some(v) = version {
            check.one_of(format!("{path}.{field}"), v, TLS_VERSIONS);
        }
    }
    let rank =
        |v: &Option<String>| v.as_deref().and_then(|v| TLS_VERSIONS.iter().position(|t| *t == v)).filter(|r| *r > 0);
    if let (Some(min), Some(max)) = (rank(&tls.min_protocol_version), rank(&tls.max_protocol_version))
        && min > max
    {
        check.error(format!("{path}.minProtocolVersion"), "is above maxProtocolVersion: no TLS version would be left");
    }
    if matches!(tls.min_protocol_version.as_deref(), Some("TLSV1_0" | "TLSV1_1")) && tls.cipher_suites.is_empty() {
        check.warning(
            format!("{path}.minProtocolVersion"),
            "below TLSV1_2 needs cipherSuites that those versions can use: Envoy's default ones cannot",
        );
    }
    let mut seen = BTreeSet::new();
    for (i, suite) in tls.cipher_suites.iter().enumerate() {
        if !crate::config::istio::is_cipher_suite(suite) {
            check.warning(
                format!("{path}.cipherSuites[{i}]"),
                format!("{suite:?} is not a cipher suite Envoy knows: ignored (as in Istio)"),
            );
        } else if !seen.insert(suite) {
            check.warning(format!("{path}.cipherSuites[{i}]"), format!("{suite:?} is listed twice: ignored"));
        }
    }
    if !mode.verifies_clients() {
        for (field, set) in [
            ("subjectAltNames", !tls.subject_alt_names.is_empty()),
            ("verifyCertificateSpki", !tls.verify_certificate_spki.is_empty()),
            ("verifyCertificateHash", !tls.verify_certificate_hash.is_empty()),
            ("insecureSkipVerify", tls.insecure_skip_verify.is_some()),
            ("caCertificates", tls.ca_certificates.is_some()),
            ("caCertCredentialName", tls.ca_cert_credential_name.is_some()),
        ] {
            if set {
                check.warning(format!("{path}.{field}"), "checks client certificates, which SIMPLE TLS does not ask for: ignored (use MUTUAL or OPTIONAL_MUTUAL)");
            }
        }
    }
    let from_secret = tls.credential_name.is_some() || !tls.credential_names.is_empty();
    if from_secret && tls.ca_crl.is_some() {
        check.warning(
            format!("{path}.caCrl"),
            "is not read with credentialName: the Secret's ca.crl (or crl) is the revocation list",
        );
    }
    if from_secret && tls.ca_certificates.is_some() && mode.verifies_clients() {
        check.warning(format!("{path}.caCertificates"), "is not read with credentialName: the client CA comes from the Secret (its ca.crt or cacert, or a NAME-cacert Secret) or caCertCredentialName");
    }
    if tls.credential_names.len() > 2 {
        check.warning(
            format!("{path}.credentialNames"),
            "lists more than 2 Secrets: Envoy serves at most one RSA and one ECDSA certificate (as Istio says)",
        );
    }
    if tls.tls_certificates.len() > 2 {
        check.warning(
            format!("{path}.tlsCertificates"),
            "lists more than 2 certificates: Envoy serves at most one RSA and one ECDSA certificate (as Istio says)",
        );
    }
    for (i, cert) in tls.tls_certificates.iter().enumerate() {
        if cert.server_certificate.is_empty() || cert.private_key.is_empty() {
            check.error(format!("{path}.tlsCertificates[{i}]"), "needs both serverCertificate and privateKey");
        }
        if cert.ca_certificates.is_some() {
            check.warning(
                format!("{path}.tlsCertificates[{i}].caCertificates"),
                "is not read (as in Istio): client certificates are checked against the server's caCertificates",
            );
        }
    }
}

pub(super) fn service_entry(check: &mut Checker, se: &ServiceEntry) {
    let spec = &se.spec;
    if spec.hosts.is_empty() {
        check.error("spec.hosts", "is empty: a ServiceEntry needs at least one host");
    }
    for (i, host) in spec.hosts.iter().enumerate() {
        if host == "*" {
            check.error(format!("spec.hosts[{i}]"), "\"*\" is not allowed: a ServiceEntry cannot claim every host");
        } else if !is_wildcard_host(host) {
            check.error(format!("spec.hosts[{i}]"), format!("{host:?} is not a host name or wildcard"));
        }
    }
    for (i, address) in spec.addresses.iter().enumerate() {
        if !is_ip_or_cidr(address) {
            check.error(
                format!("spec.addresses[{i}]"),
                format!("{address:?} is neither an IP address nor a CIDR block"),
            );
        }
    }
    check.export_to(&spec.export_to);
    let mut numbers: BTreeMap<u32, usize> = BTreeMap::new();
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, port) in spec.ports.iter().enumerate() {
        let path = format!("spec.ports[{i}]");
        check.port(format!("{path}.number"), port.number);
        if let Some(first) = numbers.insert(port.number, i) {
            check.error(
                format!("{path}.number"),
                format!("port {} is already declared by spec.ports[{first}]: port numbers must be unique", port.number),
            );
        }
        if port.name.is_empty() {
            check.error(format!("{path}.name"), format!("port {} has no name: Istio requires one", port.number));
        } else if let Some(first) = names.insert(&port.name, i) {
            check.error(
                format!("{path}.name"),
                format!("{:?} is already the name of spec.ports[{first}]: port names must be unique", port.name),
            );
        }
        if let Some(protocol) = &port.protocol
            && !PROTOCOLS.contains(&protocol.to_ascii_uppercase().as_str())
        {
            check.error(format!("{path}.protocol"), format!("{protocol:?} is not one of {}", PROTOCOLS.join(", ")));
        }
        if let Some(target) = port.target_port {
            check.port(format!("{path}.targetPort"), target);
        }
        if port.protocol.as_deref().is_none_or(str::is_empty) {
            check.warning(
                format!("{path}.protocol"),
                format!(
                    "is not set: Istio would detect HTTP by sniffing; meshpush serves port {} as plain TCP, \
                     so HTTP rules do not apply to it (set protocol: HTTP, TCP, …)",
                    port.number
                ),
            );
        }
    }
    if let Some(location) = &spec.location {
        check.one_of("spec.location", location, &["MESH_EXTERNAL", "MESH_INTERNAL"]);
    }
    let resolution = spec.resolution.as_deref().unwrap_or("NONE");
    check.one_of("spec.resolution", resolution, &["NONE", "STATIC", "DNS", "DNS_ROUND_ROBIN"]);
    if !spec.endpoints.is_empty() && spec.workload_selector.is_some() {
        check.error("spec", "sets both endpoints and workloadSelector: endpoints come from one or the other");
    }
    match resolution {
        "STATIC" if spec.endpoints.is_empty() && spec.workload_selector.is_none() => check.error(
            "spec.endpoints",
            "is empty: resolution STATIC needs endpoints (IP addresses) or a workloadSelector",
        ),
        "DNS" | "DNS_ROUND_ROBIN" if spec.endpoints.is_empty() => {
            for (i, host) in spec.hosts.iter().enumerate().filter(|(_, h)| h.starts_with("*.")) {
                check.error(
                    format!("spec.hosts[{i}]"),
                    format!(
                        "{host:?}: a wildcard host cannot be resolved by DNS; add endpoints or use resolution NONE"
                    ),
                );
            }
        }
        "DNS_ROUND_ROBIN" if spec.endpoints.len() > 1 => check.error(
            "spec.endpoints",
            format!("has {} endpoints: resolution DNS_ROUND_ROBIN takes exactly one", spec.endpoints.len()),
        ),
        _ => {}
    }
    let port_names: BTreeSet<&str> = spec.ports.iter().map(|p| p.name.as_str()).collect();
    for (i, endpoint) in spec.endpoints.iter().enumerate() {
        let path = format!("spec.endpoints[{i}]");
        workload(check, &path, endpoint);
        if resolution == "STATIC"
            && !endpoint.address.is_empty()
            && !is_ip(&endpoint.address)
            && !endpoint.address.starts_with("unix://")
        {
            check.error(
                format!("{path}.address"),
                format!(
                    "{:?} is not an IP address or unix:// socket: resolution STATIC needs them (use DNS for names)",
                    endpoint.address
                ),
            );
        }
        for name in endpoint.ports.keys() {
            if !port_names.contains(name.as_str()) {
                check.error(
                    format!("{path}.ports.{name}"),
                    format!("{name:?} is not the name of any port in spec.ports"),
                );
            }
        }
    }
}

pub(super) fn workload_group(check: &mut Checker, group: &WorkloadGroup) {
    let template = &group.spec.template;
    if !template.address.is_empty() {
        check.warning(
            "spec.template.address",
            "is not used: a registered workload's address is its proxy's (as in Istio)",
        );
    }
    for (name, port) in &template.ports {
        check.port(format!("spec.template.ports.{name}"), *port);
    }
    if template.weight == Some(0) {
        check.error("spec.template.weight", "0 is not a weight: it must be at least 1 (leave it out for 1)");
    }
    if template.network.as_deref().is_some_and(|v| !v.is_empty()) {
        check.unsupported("spec.template.network", Some("meshpush serves one network: the entry is reached directly"));
    }
    if group.spec.probe.is_some() {
        check.unsupported(
            "spec.probe",
            Some("meshpush takes no health reports from agents: a registered workload gets traffic as soon as it connects"),
        );
    }
    if !group.spec.metadata.annotations.is_empty() {
        check.warning(
            "spec.metadata.annotations",
            "no annotation configures traffic on a WorkloadEntry: they are kept on the registered entries only",
        );
    }
}

pub(super) fn workload_entry(check: &mut Checker, we: &WorkloadEntry) {
    workload(check, "spec", &we.spec);
}

/// A WorkloadEntry spec, or a ServiceEntry's inline endpoint.
fn workload(check: &mut Checker, path: &str, spec: &WorkloadEntrySpec) {
    if spec.address.is_empty() {
        check.error(format!("{path}.address"), "is empty: a workload needs an IP address or DNS name");
    } else if let Some(socket) = spec.address.strip_prefix("unix://") {
        if !socket.starts_with('/') {
            check.error(
                format!("{path}.address"),
                format!("{:?}: a Unix socket address is unix:///absolute/path", spec.address),
            );
        }
    } else if !is_ip(&spec.address) && (!is_wildcard_host(&spec.address) || spec.address.starts_with('*')) {
        check.error(format!("{path}.address"), format!("{:?} is neither an IP address nor a DNS name", spec.address));
    }
    for (name, port) in &spec.ports {
        check.port(format!("{path}.ports.{name}"), *port);
    }
    if spec.weight == Some(0) {
        check.error(format!("{path}.weight"), "0 is not a weight: it must be at least 1 (leave it out for 1)");
    }
    if spec.network.as_deref().is_some_and(|n| !n.is_empty()) {
        check.unsupported(
            format!("{path}.network"),
            Some("meshpush serves one network: the endpoint is reached directly, as if on the caller's network"),
        );
    }
}

/// A Sidecar ingress `defaultEndpoint`: loopback or "the instance IP" with a port, or a Unix socket.
fn is_default_endpoint(endpoint: &str) -> bool {
    if let Some(path) = endpoint.strip_prefix("unix://") {
        return path.starts_with('/');
    }
    let Some((ip, port)) = endpoint.rsplit_once(':') else { return false };
    matches!(ip, "127.0.0.1" | "[::1]" | "0.0.0.0" | "[::]") && port.parse::<u16>().is_ok_and(|p| p > 0)
}

pub(super) fn sidecar(check: &mut Checker, sidecar: &Sidecar) {
    let spec = &sidecar.spec;
    let mut ingress_ports: BTreeMap<u32, usize> = BTreeMap::new();
    for (i, listener) in spec.ingress.iter().enumerate() {
        let path = format!("spec.ingress[{i}]");
        check.port(format!("{path}.port.number"), listener.port.number);
        if let Some(first) = ingress_ports.insert(listener.port.number, i) {
            check.error(
                format!("{path}.port.number"),
                format!("port {} is already used by spec.ingress[{first}]", listener.port.number),
            );
        }
        if let Some(protocol) = &listener.port.protocol
            && Protocol::parse(protocol).is_none()
        {
            check.error(format!("{path}.port.protocol"), format!("{protocol:?} is not a protocol Istio knows"));
        }
        if let Some(bind) = &listener.bind
            && !is_ip(bind)
        {
            check.error(
                format!("{path}.bind"),
                format!("{bind:?} is not an IP address (Unix sockets cannot be bound here)"),
            );
        }
        if let Some(mode) = &listener.capture_mode {
            check.one_of(format!("{path}.captureMode"), mode, &["DEFAULT", "IPTABLES", "NONE"]);
        }
        if listener.port.protocol.is_none()
            && Protocol::of_kubernetes_port(listener.port.number, listener.port.name.as_deref(), None)
                == Protocol::Unknown
        {
            check.warning(
                format!("{path}.port"),
                "declares no protocol (protocol, or a name such as http-…): Istio would detect HTTP by sniffing; \
                 meshpush serves the port as plain TCP",
            );
        }
        if listener
            .connection_pool
            .as_ref()
            .and_then(|p| p.http.as_ref())
            .is_some_and(|h| h.h2_upgrade_policy.is_some())
        {
            check.warning(
                format!("{path}.connectionPool.http.h2UpgradePolicy"),
                "is not used: Istio does not upgrade inbound connections to HTTP/2",
            );
        }
        if let Some(endpoint) = listener.default_endpoint.as_deref().filter(|e| !e.is_empty())
            && !is_default_endpoint(endpoint)
        {
            check.error(
                format!("{path}.defaultEndpoint"),
                format!(
                    "{endpoint:?} is not one of 127.0.0.1:PORT, [::1]:PORT, 0.0.0.0:PORT, [::]:PORT or unix:///path"
                ),
            );
        }
    }
    if spec
        .inbound_connection_pool
        .as_ref()
        .and_then(|p| p.http.as_ref())
        .is_some_and(|h| h.h2_upgrade_policy.is_some())
    {
        check.warning(
            "spec.inboundConnectionPool.http.h2UpgradePolicy",
            "is not used: Istio does not upgrade inbound connections to HTTP/2",
        );
    }
    if let Some(proxy) = spec.outbound_traffic_policy.as_ref().and_then(|p| p.egress_proxy.as_ref()) {
        let path = "spec.outboundTrafficPolicy.egressProxy";
        if proxy.host.is_empty() || proxy.host.contains('*') || !is_wildcard_host(&proxy.host) {
            check.error(format!("{path}.host"), format!("{:?} is not a host name", proxy.host));
        }
        match &proxy.port {
            None => check.error(format!("{path}.port"), "is missing: the egress proxy needs its port"),
            Some(port) => check.port(format!("{path}.port.number"), port.number),
        }
        if spec.outbound_traffic_policy.as_ref().and_then(|p| p.mode.as_deref()) == Some("REGISTRY_ONLY") {
            check.warning(path, "is used only with mode ALLOW_ANY (as in Istio): ignored under REGISTRY_ONLY");
        }
    }
    let mut without_port = None;
    let mut ports: BTreeMap<(u32, &str), usize> = BTreeMap::new();
    for (i, listener) in spec.egress.iter().enumerate() {
        let path = format!("spec.egress[{i}]");
        match &listener.port {
            Some(port) => {
                check.port(format!("{path}.port.number"), port.number);
                let bind = listener.bind.as_deref().unwrap_or("");
                if let Some(first) = ports.insert((port.number, bind), i) {
                    check.error(
                        format!("{path}.port.number"),
                        format!(
                            "port {} is already used by spec.egress[{first}] on the same bind address",
                            port.number
                        ),
                    );
                }
            }
            None => match without_port {
                Some(first) => check.error(
                    format!("{path}.port"),
                    format!("is missing, as in spec.egress[{first}]: at most one egress listener may omit its port"),
                ),
                None => without_port = Some(i),
            },
        }
        if let Some(bind) = &listener.bind
            && !is_ip(bind)
        {
            check.error(format!("{path}.bind"), format!("{bind:?} is not an IP address"));
        }
        if let Some(protocol) = listener.port.as_ref().and_then(|p| p.protocol.as_deref()) {
            check.unsupported(
                format!("{path}.port.protocol"),
                Some(&format!(
                    "the listener serves each service on the port by the service's own protocol, not {protocol:?}"
                )),
            );
        }
        if let Some(mode) = &listener.capture_mode {
            check.one_of(format!("{path}.captureMode"), mode, &["DEFAULT", "IPTABLES", "NONE"]);
        }
        if listener.hosts.is_empty() {
            check.error(format!("{path}.hosts"), "is empty: an egress listener needs at least one namespace/host");
        }
        for (h, host) in listener.hosts.iter().enumerate() {
            check_namespaced_host(check, format!("{path}.hosts[{h}]"), host, false, true);
        }
    }
    if let Some(mode) = spec.outbound_traffic_policy.as_ref().and_then(|p| p.mode.as_deref()) {
        check.one_of("spec.outboundTrafficPolicy.mode", mode, &["ALLOW_ANY", "REGISTRY_ONLY"]);
    }
    if let Some(selector) = &spec.workload_selector
        && selector.labels.is_empty()
    {
        check.error(
            "spec.workloadSelector.labels",
            "is empty: leave workloadSelector out to apply to the whole namespace",
        );
    }
}
