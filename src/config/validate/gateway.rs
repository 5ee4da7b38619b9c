//! Checks for Istio's Gateway: its servers' ports, protocols, hosts and TLS
//! settings, following Istio's validation (`pkg/config/validation`) where
//! meshpush implements the feature. A server that cannot be served is a
//! warning on that server, not an error: the Gateway's other servers are
//! served, as Istio serves them.

use std::collections::{BTreeMap, BTreeSet};

use super::{Checker, check_namespaced_host, is_ip};
use crate::config::istio::{Gateway, Server, ServerTls, TlsMode};

/// A Gateway: each server on its own, then the port conflicts between them.
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
