//! TLS contexts, as Istio builds them: downstream for gateway servers that
//! terminate TLS (`BuildListenerTLSContext`: certificates from Secrets over
//! SDS on the ADS stream, or from files on the router; client certificate
//! checks for MUTUAL and OPTIONAL_MUTUAL; the server's TLS versions and
//! cipher suites), upstream for clusters a DestinationRule's `tls`
//! originates TLS to (`constructUpstreamTLS`).
//!
//! Invariant: a context is built only when every Secret it names resolves
//! for the router ([`SecretIndex::resolve`]); otherwise the reason is
//! returned and the server's chain is left out, so a missing Secret costs
//! that server alone (Envoy would hold the whole listener warming for it).

use envoy_types::pb::envoy::config::core::v3::{DataSource, TransportSocket, data_source, transport_socket};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    CertificateValidationContext, CommonTlsContext, DownstreamTlsContext, SdsSecretConfig, TlsCertificate,
    TlsParameters, certificate_validation_context::TrustChainVerification, common_tls_context,
    tls_parameters::TlsProtocol,
};
use envoy_types::pb::envoy::r#type::matcher::v3::{StringMatcher, string_matcher};

use super::proto;
use crate::config::istio::{ServerTls, TlsMode, usable_cipher_suites};
use crate::push::index::GatewayServer;
use crate::push::index::secrets::{self, Reader, SecretIndex};

/// The ALPN a gateway offers on a TLS chain it terminates (Istio's `ALPNHttp`).
pub const ALPN_HTTP: [&str; 2] = ["h2", "http/1.1"];

/// The transport socket name of TLS.
pub const TLS_TRANSPORT_SOCKET: &str = "envoy.transport_sockets.tls";

/// The downstream TLS context of a server that terminates TLS, or why it
/// cannot be built. `namespace` is the router's: its Secrets are the ones
/// the server's `credentialName` names.
pub fn server_context(
    secrets_index: &SecretIndex,
    namespace: &str,
    server: &GatewayServer,
) -> Result<DownstreamTlsContext, String> {
    let tls = server.tls().ok_or("has no TLS settings")?;
    let verify = server.mode.verifies_clients();
    let mut common = CommonTlsContext {
        alpn_protocols: ALPN_HTTP.iter().map(|s| s.to_string()).collect(),
        tls_params: tls_params(tls),
        ..Default::default()
    };
    let credentials: Vec<&str> = match &tls.credential_name {
        Some(name) if !name.is_empty() => vec![name.as_str()],
        _ => tls.credential_names.iter().map(String::as_str).collect(),
    };
    if !credentials.is_empty() {
        for credential in &credentials {
            let name = secrets::resource_name(credential);
            resolves(secrets_index, namespace, &name)?;
            common.tls_certificate_sds_secret_configs.push(sds(name));
        }
        if verify {
            let ca = ca_name(tls, credentials[0]);
            resolves(secrets_index, namespace, &ca)?;
            common.validation_context_type =
                Some(common_tls_context::ValidationContextType::CombinedValidationContext(
                    common_tls_context::CombinedCertificateValidationContext {
                        default_validation_context: Some(client_checks(tls)),
                        validation_context_sds_secret_config: Some(sds(ca)),
                        ..Default::default()
                    },
                ));
        }
    } else {
        let pairs: Vec<(&str, &str)> = if tls.tls_certificates.is_empty() {
            vec![(tls.server_certificate.as_deref().unwrap_or(""), tls.private_key.as_deref().unwrap_or(""))]
        } else {
            tls.tls_certificates.iter().map(|c| (c.server_certificate.as_str(), c.private_key.as_str())).collect()
        };
        common.tls_certificates = pairs
            .into_iter()
            .map(|(chain, key)| TlsCertificate {
                certificate_chain: Some(file(chain)),
                private_key: Some(file(key)),
                ..Default::default()
            })
            .collect();
        if verify {
            let mut context = client_checks(tls);
            context.trusted_ca = tls.ca_certificates.as_deref().map(file);
            context.crl = tls.ca_crl.as_deref().map(file);
            common.validation_context_type =
                Some(common_tls_context::ValidationContextType::ValidationContext(context));
        }
    }
    Ok(DownstreamTlsContext {
        common_tls_context: Some(common),
        require_client_certificate: Some(proto::bool_value(server.mode == TlsMode::Mutual)),
        ..Default::default()
    })
}

/// The transport socket that terminates TLS with `context`.
pub fn downstream_socket(context: &DownstreamTlsContext) -> TransportSocket {
    TransportSocket {
        name: TLS_TRANSPORT_SOCKET.to_string(),
        config_type: Some(transport_socket::ConfigType::TypedConfig(proto::any(context))),
    }
}

/// Every SDS name a server's TLS context refers to (for the router's SDS set).
pub fn secret_names(server: &GatewayServer) -> Vec<String> {
    let Some(tls) = server.tls().filter(|_| server.mode.terminates()) else { return Vec::new() };
    let credentials: Vec<&str> = match &tls.credential_name {
        Some(name) if !name.is_empty() => vec![name.as_str()],
        _ => tls.credential_names.iter().map(String::as_str).collect(),
    };
    let mut out: Vec<String> = credentials.iter().map(|c| secrets::resource_name(c)).collect();
    if server.mode.verifies_clients()
        && let Some(first) = credentials.first()
    {
        out.push(ca_name(tls, first));
    }
    out
}

/// The SDS name of the CA a server checks clients against: that of
/// `caCertCredentialName` when set, else the credential's own
/// (`kubernetes://NAME-cacert`). Either resolves to a Secret's `ca.crt` or
/// `cacert` (Istio would ask for the CA Secret under its plain name, which
/// its SDS server then reads as a certificate and key and cannot serve).
fn ca_name(tls: &ServerTls, credential: &str) -> String {
    match tls.ca_cert_credential_name.as_deref().filter(|n| !n.is_empty()) {
        Some(name) => secrets::ca_resource_name(name),
        None => secrets::ca_resource_name(credential),
    }
}

fn resolves(index: &SecretIndex, namespace: &str, name: &str) -> Result<(), String> {
    use secrets::Unresolved;
    match index.resolve(namespace, Reader::Router, name) {
        Ok(_) => Ok(()),
        Err(Unresolved::Missing) if name.ends_with(secrets::CA_SUFFIX) => Err(format!(
            "{name}: no client CA in namespace {namespace} (a ca.crt or cacert key in the credential's Secret, or a Secret named {})",
            name.trim_start_matches(secrets::KUBERNETES_SCHEME)
        )),
        Err(Unresolved::Missing) => Err(format!(
            "{name}: no Secret with a certificate and key (tls.crt/tls.key or cert/key) in namespace {namespace}"
        )),
        Err(Unresolved::OtherNamespace) => Err(format!(
            "{name}: names another namespace than the gateway's ({namespace}), whose Secrets it may not read \
             (no ReferenceGrant there lets its Gateways refer to this one)"
        )),
        Err(Unresolved::Scheme | Unresolved::KeyDenied) => Err(format!("{name}: not a Kubernetes Secret name")),
    }
}

/// A context that checks the peer's certificate names one of `sans`
/// exactly, whatever its type: Istio's `StringToExactMatch`, on the untyped
/// matcher (Envoy calls it deprecated; Istio still sets it).
pub(super) fn san_checks(sans: &[String]) -> CertificateValidationContext {
    #[allow(deprecated)]
    CertificateValidationContext {
        match_subject_alt_names: sans
            .iter()
            .map(|san| StringMatcher {
                match_pattern: Some(string_matcher::MatchPattern::Exact(san.clone())),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// What a client certificate must satisfy beyond its chain.
fn client_checks(tls: &ServerTls) -> CertificateValidationContext {
    CertificateValidationContext {
        verify_certificate_spki: tls.verify_certificate_spki.clone(),
        verify_certificate_hash: tls.verify_certificate_hash.clone(),
        trust_chain_verification: if tls.insecure_skip_verify == Some(true) {
            TrustChainVerification::AcceptUntrusted as i32
        } else {
            TrustChainVerification::VerifyTrustChain as i32
        },
        ..san_checks(&tls.subject_alt_names)
    }
}

/// TLS versions and cipher suites, when the server sets any.
fn tls_params(tls: &ServerTls) -> Option<TlsParameters> {
    let version = |v: &Option<String>| match v.as_deref() {
        Some("TLSV1_0") => TlsProtocol::TlSv10,
        Some("TLSV1_1") => TlsProtocol::TlSv11,
        Some("TLSV1_2") => TlsProtocol::TlSv12,
        Some("TLSV1_3") => TlsProtocol::TlSv13,
        _ => TlsProtocol::TlsAuto,
    };
    let params = TlsParameters {
        tls_minimum_protocol_version: version(&tls.min_protocol_version) as i32,
        tls_maximum_protocol_version: version(&tls.max_protocol_version) as i32,
        cipher_suites: usable_cipher_suites(&tls.cipher_suites),
        ..Default::default()
    };
    (params != TlsParameters::default()).then_some(params)
}

fn sds(name: String) -> SdsSecretConfig {
    SdsSecretConfig { name, sds_config: Some(proto::ads_config_source()) }
}

fn file(path: &str) -> DataSource {
    DataSource { specifier: Some(data_source::Specifier::Filename(path.to_string())), ..Default::default() }
}

/// The CA bundle of the proxy's system (Debian's and Ubuntu's path, the one
/// Istio's proxy image has): what SIMPLE TLS checks a server against when
/// the rule names no CA, as Istio's agent serves it (`file-root:system`).
/// Envoy's own `system_root_certs` is not implemented.
pub const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// What a DestinationRule's `tls` makes of a cluster: its TLS transport
/// socket, and whether Envoy takes the SNI (and the name checked against
/// the server's certificate) from each request's host.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamTls {
    /// The `envoy.transport_sockets.tls` socket.
    pub socket: TransportSocket,
    /// No `sni` given: the request's host is the SNI (Istio's auto SNI).
    pub auto_sni: bool,
    /// No `sni` and no `subjectAltNames`: the certificate must name the
    /// request's host (Istio's auto SAN validation).
    pub auto_san_validation: bool,
}

/// The TLS a cluster originates, as Istio builds it (`constructUpstreamTLS`):
/// SIMPLE checks the server against `caCertificates`, a Secret's CA
/// (`credentialName`) or the system's CAs, unless `insecureSkipVerify`;
/// MUTUAL also presents the client certificate (files, or the Secret's).
/// `None` for DISABLE, for ISTIO_MUTUAL (mesh mTLS, built by `mtls` for
/// proxies holding a workload certificate), and for a
/// `credentialName` on a sidecar (Istio reads Secrets for gateways only and
/// originates nothing there; validation reports that too). `http2`: the
/// cluster speaks HTTP/2 upstream, so ALPN offers `h2` only.
pub fn upstream_context(tls: &crate::config::istio::ClientTls, router: bool, http2: bool) -> Option<UpstreamTls> {
    use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::UpstreamTlsContext;
    let mode = tls.mode.as_deref().unwrap_or("DISABLE").to_ascii_uppercase();
    let mutual = match mode.as_str() {
        "SIMPLE" => false,
        "MUTUAL" => true,
        _ => return None,
    };
    let credential = tls.credential_name.as_deref().filter(|n| !n.is_empty());
    if credential.is_some() && !router {
        return None;
    }
    let insecure = tls.insecure_skip_verify == Some(true);
    let mut common = CommonTlsContext {
        tls_params: Some(TlsParameters {
            tls_minimum_protocol_version: TlsProtocol::TlSv12 as i32,
            tls_maximum_protocol_version: TlsProtocol::TlSv13 as i32,
            ..Default::default()
        }),
        alpn_protocols: if http2 { vec!["h2".to_string()] } else { Vec::new() },
        ..Default::default()
    };
    let checks = || san_checks(&tls.subject_alt_names);
    match credential {
        Some(name) => {
            if mutual {
                common.tls_certificate_sds_secret_configs.push(sds(secrets::resource_name(name)));
            }
            if !insecure {
                common.validation_context_type =
                    Some(common_tls_context::ValidationContextType::CombinedValidationContext(
                        common_tls_context::CombinedCertificateValidationContext {
                            default_validation_context: Some(checks()),
                            validation_context_sds_secret_config: Some(sds(secrets::ca_resource_name(name))),
                            ..Default::default()
                        },
                    ));
            }
        }
        None => {
            if mutual {
                common.tls_certificates.push(TlsCertificate {
                    certificate_chain: tls.client_certificate.as_deref().map(file),
                    private_key: tls.private_key.as_deref().map(file),
                    ..Default::default()
                });
            }
            let context = if insecure {
                CertificateValidationContext::default()
            } else {
                let mut context = checks();
                match tls.ca_certificates.as_deref().filter(|c| !c.is_empty()) {
                    Some(ca) => context.trusted_ca = Some(file(ca)),
                    None => context.trusted_ca = Some(file(SYSTEM_CA_BUNDLE)),
                }
                context.crl = tls.ca_crl.as_deref().map(file);
                context
            };
            common.validation_context_type =
                Some(common_tls_context::ValidationContextType::ValidationContext(context));
        }
    }
    let sni = tls.sni.clone().unwrap_or_default();
    let context = UpstreamTlsContext { common_tls_context: Some(common), sni: sni.clone(), ..Default::default() };
    Some(UpstreamTls {
        socket: TransportSocket {
            name: TLS_TRANSPORT_SOCKET.to_string(),
            config_type: Some(transport_socket::ConfigType::TypedConfig(proto::any(&context))),
        },
        auto_sni: sni.is_empty(),
        auto_san_validation: sni.is_empty() && tls.subject_alt_names.is_empty() && !insecure,
    })
}

/// The SDS names a cluster's TLS refers to (a router's `credentialName`).
pub fn upstream_secret_names(tls: &crate::config::istio::ClientTls, router: bool) -> Vec<String> {
    let Some(name) = tls.credential_name.as_deref().filter(|n| !n.is_empty() && router) else { return Vec::new() };
    let mode = tls.mode.as_deref().unwrap_or("").to_ascii_uppercase();
    let mut out = Vec::new();
    if mode == "MUTUAL" {
        out.push(secrets::resource_name(name));
    }
    if matches!(mode.as_str(), "SIMPLE" | "MUTUAL") && tls.insecure_skip_verify != Some(true) {
        out.push(secrets::ca_resource_name(name));
    }
    out
}
