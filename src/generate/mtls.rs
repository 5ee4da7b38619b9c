//! Mesh mutual TLS between sidecars, as Istio builds it: the client side
//! (`ISTIO_MUTUAL` in a DestinationRule, and auto mTLS when no rule sets
//! TLS, unless the mesh config's `enableAutoMtls` is false) and the server
//! side (the inbound chains a port's PeerAuthentication mode gives it).
//!
//! Both sides present the workload certificate and check the peer against
//! the mesh root; neither is on the ADS stream: the proxy fetches them as
//! SDS `default` and `ROOTCA` from its agent over the `sds-grpc` cluster of
//! its bootstrap. Every proxy is assumed to have that cluster, as istiod
//! assumes (Istio's pilot-agent bootstraps all have it), unless its node
//! says it has none (`SDS: "false"`, `Proxy::mesh_certificates`): such a
//! proxy keeps plain text, and a STRICT port of it takes no connection (it
//! fails closed rather than serving what the policy forbids).
//!
//! Client side: the SNI is `outbound_.PORT_.SUBSET_.HOST`, the SANs the
//! SPIFFE identities of the destination's service accounts, the ALPN
//! `istio-peer-exchange`, `istio` (and `h2` for HTTP/2), which is what a
//! PERMISSIVE server tells mesh traffic from plain text by. Auto mTLS sends
//! TLS only to endpoints labelled `security.istio.io/tlsMode: istio` (their
//! sidecar terminates it), through the cluster's transport socket matches
//! against the endpoint metadata EDS carries.

use envoy_types::pb::envoy::config::cluster::v3::cluster::TransportSocketMatch;
use envoy_types::pb::envoy::config::core::v3::{
    ApiConfigSource, ApiVersion, ConfigSource, DataSource, GrpcService, Metadata, TransportSocket,
    api_config_source::ApiType,
    config_source::ConfigSourceSpecifier,
    data_source,
    grpc_service::{EnvoyGrpc, TargetSpecifier},
    transport_socket,
};
use envoy_types::pb::envoy::config::listener::v3::FilterChainMatch;
use envoy_types::pb::envoy::extensions::transport_sockets::raw_buffer::v3::RawBuffer;
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    CertificateValidationContext, CommonTlsContext, DownstreamTlsContext, SdsSecretConfig, TlsParameters,
    UpstreamTlsContext, certificate_validation_context::TrustChainVerification, common_tls_context,
    tls_parameters::TlsProtocol,
};
use envoy_types::pb::envoy::r#type::matcher::v3::{StringMatcher, string_matcher};
use envoy_types::pb::google::protobuf::{Struct, Value, value::Kind};

use std::sync::Arc;

use super::{naming, proto, tls};
use crate::config::istio::{ClientTls, MtlsMode, ServerTls, TrafficPolicy};
use crate::model::service::Location;
use crate::model::{Endpoint, Resolution, Service};
use crate::push::PushContext;

/// The bootstrap's cluster to the agent's SDS server.
pub const SDS_CLUSTER: &str = "sds-grpc";
/// The SDS name of the workload's certificate and key.
pub const WORKLOAD_SECRET: &str = "default";
/// The SDS name of the mesh root.
pub const ROOT_SECRET: &str = "ROOTCA";
pub use crate::model::endpoint::{TLS_MODE_ISTIO, TLS_MODE_LABEL};
/// The endpoint metadata namespace Envoy matches transport sockets on.
const TRANSPORT_SOCKET_MATCH: &str = "envoy.transport_socket_match";
/// The key of the endpoint metadata (the label's short name).
const TLS_MODE_KEY: &str = "tlsMode";
/// `envoy.transport_sockets.raw_buffer`: plain text.
const RAW_BUFFER: &str = "envoy.transport_sockets.raw_buffer";

/// ALPN a client offers to an in-mesh destination (`ALPNInMeshWithMxc`).
const ALPN_IN_MESH: [&str; 2] = ["istio-peer-exchange", "istio"];
/// The same, to an HTTP/2 destination (`ALPNInMeshH2WithMxc`).
const ALPN_IN_MESH_H2: [&str; 3] = ["istio-peer-exchange", "istio", "h2"];
/// ALPN a server offers on a TCP port (`ALPNDownstreamWithMxc`).
const ALPN_DOWNSTREAM_TCP: [&str; 3] = ["istio-peer-exchange", "h2", "http/1.1"];
/// The ALPNs that mark a TLS connection as a sidecar's mesh mTLS, which a
/// PERMISSIVE port tells from a client's own TLS by (`allIstioMtlsALPNs`).
const MESH_ALPNS: [&str; 5] = ["istio", "istio-peer-exchange", "istio-http/1.0", "istio-http/1.1", "istio-h2"];
/// Istio's cipher suites for inbound mesh mTLS (`SupportedCiphers`).
const CIPHERS: [&str; 6] = [
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-RSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-AES128-GCM-SHA256",
    "ECDHE-RSA-AES128-GCM-SHA256",
    "AES256-GCM-SHA384",
    "AES128-GCM-SHA256",
];
/// Envoy's transport protocol names in a filter chain match.
const TLS: &str = "tls";
const RAW: &str = "raw_buffer";

/// What mesh mTLS makes of a cluster.
#[derive(Debug, Clone, PartialEq)]
pub enum MeshTls {
    /// Every connection is mesh mTLS (ISTIO_MUTUAL, or an original-destination
    /// cluster whose endpoints all have sidecars).
    Always(TransportSocket),
    /// Auto mTLS: mesh mTLS to endpoints whose sidecar terminates it, plain
    /// text to the rest.
    Matched(Vec<TransportSocketMatch>),
}

/// The mesh mTLS of the cluster of `port` of `svc` (`subset` empty for the
/// whole service) under the merged `traffic` policy, as Istio decides it
/// (`buildUpstreamTLSSettings`): ISTIO_MUTUAL when the rule says so; with
/// no TLS in the rule, auto mTLS unless the mesh config turns it off
/// (`enableAutoMtls: false`), the destination is outside the mesh, or its
/// namespace's PeerAuthentication disables mTLS. `http2`: the
/// cluster speaks HTTP/2; `passthrough`: its type is ORIGINAL_DST (no
/// per-endpoint matches: mTLS only when every endpoint has a sidecar).
pub fn upstream(
    ctx: &PushContext,
    svc: &Service,
    port: u32,
    subset: &str,
    traffic: &TrafficPolicy,
    http2: bool,
    passthrough: bool,
) -> Option<MeshTls> {
    let sni = naming::sni_dnat_cluster(port, subset, &svc.hostname);
    match &traffic.tls {
        Some(tls) if is_istio_mutual(tls) => {
            let sans =
                if tls.subject_alt_names.is_empty() { identities(ctx, svc) } else { tls.subject_alt_names.clone() };
            let sni = tls.sni.clone().filter(|s| !s.is_empty()).unwrap_or(sni);
            Some(MeshTls::Always(client_socket(&sans, sni, http2, tls.insecure_skip_verify == Some(true))))
        }
        Some(_) => None,
        None => {
            if !ctx.mesh.traffic.auto_mtls
                || svc.location == Location::MeshExternal
                || ctx.peer_authentications.service_mode(&svc.namespace) == MtlsMode::Disable
            {
                return None;
            }
            let socket = client_socket(&identities(ctx, svc), sni, http2, false);
            if passthrough || svc.resolution == Resolution::Passthrough {
                let endpoints = ctx.endpoints.get(&svc.hostname).map(|e| e.endpoints.as_slice()).unwrap_or_default();
                let serving: Vec<&Endpoint> = endpoints.iter().filter(|e| e.ports.contains_key(&port)).collect();
                let all_sidecars = !serving.is_empty() && serving.iter().all(|e| e.mesh_mtls);
                return all_sidecars.then_some(MeshTls::Always(socket));
            }
            Some(MeshTls::Matched(vec![
                TransportSocketMatch {
                    name: format!("tlsMode-{TLS_MODE_ISTIO}"),
                    r#match: Some(string_struct(TLS_MODE_KEY, TLS_MODE_ISTIO)),
                    transport_socket: Some(socket),
                },
                TransportSocketMatch {
                    name: "tlsMode-disabled".to_string(),
                    r#match: Some(Struct::default()),
                    transport_socket: Some(raw_buffer()),
                },
            ]))
        }
    }
}

/// Whether a rule's TLS is `ISTIO_MUTUAL`.
pub fn is_istio_mutual(tls: &ClientTls) -> bool {
    tls.mode.as_deref().is_some_and(|m| m.eq_ignore_ascii_case("ISTIO_MUTUAL"))
}

/// The SPIFFE identities a destination's certificates may name: those of
/// its endpoints' service accounts, and a ServiceEntry's `subjectAltNames`.
pub(crate) fn identities(ctx: &PushContext, svc: &Service) -> Vec<String> {
    let mut out: Vec<String> = ctx
        .endpoints
        .get(&svc.hostname)
        .map(|e| e.service_accounts())
        .unwrap_or_default()
        .iter()
        .map(|account| ctx.mesh.spiffe_id(&svc.namespace, account))
        .collect();
    if let Some(stored) = ctx.store.get(&svc.source)
        && let crate::config::ConfigObject::ServiceEntry(entry) = &*stored.object
    {
        out.extend(entry.spec.subject_alt_names.iter().cloned());
    }
    if !ctx.mesh.trust_domain_aliases.is_empty() {
        // A mesh identity under an alias is the same workload's (a trust domain migration).
        let trust_domains = crate::push::index::trust_domain::TrustDomains::of(&ctx.mesh);
        out = out.iter().flat_map(|id| trust_domains.expand_identity(id)).collect();
    }
    out.sort();
    out.dedup();
    out
}

/// The metadata of an endpoint whose sidecar terminates mesh mTLS
/// (`mesh_mtls`), which auto mTLS clusters match their TLS socket on;
/// `None` for the rest.
pub fn endpoint_metadata(mesh_mtls: bool) -> Option<Metadata> {
    mesh_mtls.then(|| Metadata {
        // One entry: the encoding stays deterministic.
        filter_metadata: [(TRANSPORT_SOCKET_MATCH.to_string(), string_struct(TLS_MODE_KEY, TLS_MODE_ISTIO))].into(),
        ..Default::default()
    })
}

fn string_struct(key: &str, value: &str) -> Struct {
    Struct { fields: [(key.to_string(), Value { kind: Some(Kind::StringValue(value.to_string())) })].into() }
}

/// The client's TLS socket: the workload certificate, the peer checked
/// against the mesh root and `sans` (any identity of the mesh when empty).
fn client_socket(sans: &[String], sni: String, http2: bool, insecure: bool) -> TransportSocket {
    let alpn: &[&str] = if http2 { &ALPN_IN_MESH_H2 } else { &ALPN_IN_MESH };
    let mut checks = tls::san_checks(sans);
    if insecure {
        checks.trust_chain_verification = TrustChainVerification::AcceptUntrusted as i32;
    }
    let common = CommonTlsContext {
        tls_params: Some(TlsParameters {
            tls_minimum_protocol_version: TlsProtocol::TlSv12 as i32,
            tls_maximum_protocol_version: TlsProtocol::TlSv13 as i32,
            ..Default::default()
        }),
        alpn_protocols: alpn.iter().map(|s| s.to_string()).collect(),
        tls_certificate_sds_secret_configs: vec![sds(WORKLOAD_SECRET)],
        validation_context_type: Some(root_checks(checks)),
        ..Default::default()
    };
    let context = UpstreamTlsContext { common_tls_context: Some(common), sni, ..Default::default() };
    TransportSocket {
        name: tls::TLS_TRANSPORT_SOCKET.to_string(),
        config_type: Some(transport_socket::ConfigType::TypedConfig(proto::any(&context))),
    }
}

/// The server's TLS socket on an inbound port (`BuildInboundTLS`): the
/// workload certificate, a client certificate required and checked against
/// the mesh root and for a SPIFFE name in one of `trust_domains` (any
/// identity when empty), TLS 1.2 to 1.3 with Istio's ciphers; ALPN `h2`,
/// `http/1.1` on HTTP ports, and `istio-peer-exchange` before them on TCP
/// ports.
fn server_socket(http: bool, trust_domains: &[Arc<str>]) -> TransportSocket {
    let alpn: &[&str] = if http { &tls::ALPN_HTTP } else { &ALPN_DOWNSTREAM_TCP };
    let common = CommonTlsContext {
        tls_params: Some(TlsParameters {
            tls_minimum_protocol_version: TlsProtocol::TlSv12 as i32,
            tls_maximum_protocol_version: TlsProtocol::TlSv13 as i32,
            cipher_suites: CIPHERS.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }),
        ..workload_server_context(alpn, trust_domain_checks(trust_domains))
    };
    mutual_socket(common)
}

/// A peer's certificate must name a SPIFFE identity in one of
/// `trust_domains` (`spiffe://TD/` prefixes, in the untyped SAN matchers
/// as Istio's sidecars carry them); none: any name.
fn trust_domain_checks(trust_domains: &[Arc<str>]) -> CertificateValidationContext {
    #[allow(deprecated)]
    CertificateValidationContext {
        match_subject_alt_names: trust_domains
            .iter()
            .map(|domain| StringMatcher {
                match_pattern: Some(string_matcher::MatchPattern::Prefix(format!("spiffe://{domain}/"))),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// A waypoint's HBONE server socket (istiod's `buildCommonConnectTLSContext`):
/// the workload certificate, a client certificate of the mesh required
/// (a SPIFFE name in one of `trust_domains`), ALPN `h2`.
pub fn hbone_server_socket(trust_domains: &[Arc<str>]) -> TransportSocket {
    let common = CommonTlsContext {
        tls_params: Some(hbone_tls()),
        ..workload_server_context(&["h2"], trust_domain_checks(trust_domains))
    };
    mutual_socket(common)
}

/// HBONE is TLS 1.3 only (ztunnel takes nothing older; Envoy's client
/// offers 1.2 at most unless told).
fn hbone_tls() -> TlsParameters {
    TlsParameters {
        tls_minimum_protocol_version: TlsProtocol::TlSv13 as i32,
        tls_maximum_protocol_version: TlsProtocol::TlSv13 as i32,
        ..Default::default()
    }
}

/// A waypoint's HBONE client socket, to a destination's ztunnel or
/// sidecar on 15008: the workload certificate, the peer checked against
/// the mesh root and for a SPIFFE name in one of `trust_domains`, ALPN `h2`.
pub fn hbone_client_socket(trust_domains: &[Arc<str>]) -> TransportSocket {
    let common = CommonTlsContext {
        tls_params: Some(hbone_tls()),
        alpn_protocols: vec!["h2".to_string()],
        tls_certificate_sds_secret_configs: vec![sds(WORKLOAD_SECRET)],
        validation_context_type: Some(root_checks(trust_domain_checks(trust_domains))),
        ..Default::default()
    };
    let context = UpstreamTlsContext { common_tls_context: Some(common), ..Default::default() };
    TransportSocket {
        name: tls::TLS_TRANSPORT_SOCKET.to_string(),
        config_type: Some(transport_socket::ConfigType::TypedConfig(proto::any(&context))),
    }
}

/// The TLS socket of a Gateway server in `ISTIO_MUTUAL` mode, as Istio's
/// `BuildListenerTLSContext` makes it: the router's own workload
/// certificate, a client certificate required and checked against the mesh
/// root (and the server's `subjectAltNames`, `caCrl`, `insecureSkipVerify`);
/// ALPN `h2`, `http/1.1` for HTTPS, with `istio-peer-exchange` first for a
/// TLS server. Envoy's default TLS versions and ciphers: Istio applies the
/// server's own only to SIMPLE and MUTUAL.
pub fn gateway_server_socket(server: &ServerTls, https: bool) -> TransportSocket {
    let alpn: &[&str] = if https { &tls::ALPN_HTTP } else { &ALPN_DOWNSTREAM_TCP };
    let mut checks = tls::san_checks(&server.subject_alt_names);
    checks.crl = server.ca_crl.as_deref().map(|path| DataSource {
        specifier: Some(data_source::Specifier::Filename(path.to_string())),
        ..Default::default()
    });
    if server.insecure_skip_verify == Some(true) {
        checks.trust_chain_verification = TrustChainVerification::AcceptUntrusted as i32;
    }
    mutual_socket(workload_server_context(alpn, checks))
}

/// A server context on the workload certificate that checks clients
/// against the mesh root and `checks`, offering `alpn`.
fn workload_server_context(alpn: &[&str], checks: CertificateValidationContext) -> CommonTlsContext {
    CommonTlsContext {
        alpn_protocols: alpn.iter().map(|s| s.to_string()).collect(),
        tls_certificate_sds_secret_configs: vec![sds(WORKLOAD_SECRET)],
        validation_context_type: Some(root_checks(checks)),
        ..Default::default()
    }
}

/// The server socket of `common`, a client certificate required.
fn mutual_socket(common: CommonTlsContext) -> TransportSocket {
    let context = DownstreamTlsContext {
        common_tls_context: Some(common),
        require_client_certificate: Some(proto::bool_value(true)),
        ..Default::default()
    };
    tls::downstream_socket(&context)
}

/// `checks` combined with the mesh root from SDS.
fn root_checks(checks: CertificateValidationContext) -> common_tls_context::ValidationContextType {
    common_tls_context::ValidationContextType::CombinedValidationContext(
        common_tls_context::CombinedCertificateValidationContext {
            default_validation_context: Some(checks),
            validation_context_sds_secret_config: Some(sds(ROOT_SECRET)),
            ..Default::default()
        },
    )
}

/// An SDS secret fetched from the agent (`sds-grpc`), not over ADS.
fn sds(name: &str) -> SdsSecretConfig {
    SdsSecretConfig {
        name: name.to_string(),
        sds_config: Some(ConfigSource {
            resource_api_version: ApiVersion::V3 as i32,
            config_source_specifier: Some(ConfigSourceSpecifier::ApiConfigSource(ApiConfigSource {
                api_type: ApiType::Grpc as i32,
                transport_api_version: ApiVersion::V3 as i32,
                set_node_on_first_message_only: true,
                grpc_services: vec![GrpcService {
                    target_specifier: Some(TargetSpecifier::EnvoyGrpc(EnvoyGrpc {
                        cluster_name: SDS_CLUSTER.to_string(),
                        ..Default::default()
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            })),
            ..Default::default()
        }),
    }
}

fn raw_buffer() -> TransportSocket {
    TransportSocket {
        name: RAW_BUFFER.to_string(),
        config_type: Some(transport_socket::ConfigType::TypedConfig(proto::any(&RawBuffer {}))),
    }
}

/// One filter chain an inbound port gets: what it matches beyond the port,
/// and the TLS it terminates.
#[derive(Debug, Clone, PartialEq)]
pub struct InboundChain {
    /// The chain name's suffix after `inbound|PORT||` (empty for the
    /// port's main chain), so that names stay unique.
    pub suffix: &'static str,
    /// The transport protocol matched (`tls`, `raw_buffer`, or any).
    pub transport: Option<&'static str>,
    /// The ALPNs matched (any when empty).
    pub alpn: &'static [&'static str],
    /// The mesh mTLS the chain terminates.
    pub socket: Option<TransportSocket>,
    /// The chain refuses its connections (to `BlackHoleCluster`) instead of
    /// handing them to the workload.
    pub refuse: bool,
}

impl InboundChain {
    /// Puts this chain's transport and ALPN into `m`.
    pub fn apply(&self, m: &mut FilterChainMatch) {
        m.transport_protocol = self.transport.unwrap_or_default().to_string();
        m.application_protocols = self.alpn.iter().map(|s| s.to_string()).collect();
    }

    /// Whether the listener needs the TLS inspector for this chain.
    pub fn inspects_tls(&self) -> bool {
        self.transport == Some(TLS) || !self.alpn.is_empty()
    }
}

/// The chains of an inbound port of `mode` (`http`: an HTTP port), as
/// Istio's filter chain match options (`getFilterChainMatchOptions`):
/// - STRICT: one chain for TLS, which terminates mesh mTLS; plain text
///   matches nothing and is refused.
/// - PERMISSIVE: mesh mTLS (TLS with a mesh ALPN) on one chain, plain text
///   on another; on a TCP port a third takes a client's own TLS through.
/// - DISABLE: plain text, matched by port alone.
///
/// A proxy without a workload certificate (`certificates` false) cannot
/// terminate mesh mTLS: PERMISSIVE serves plain text only, and STRICT
/// refuses every connection (rather than take what the policy forbids).
/// Mesh mTLS accepts peers of `trust_domains` only (any when empty).
pub fn inbound_chains(mode: MtlsMode, http: bool, certificates: bool, trust_domains: &[Arc<str>]) -> Vec<InboundChain> {
    let chain = |suffix, transport, alpn, tls: bool| InboundChain {
        suffix,
        transport,
        alpn,
        socket: tls.then(|| server_socket(http, trust_domains)),
        refuse: false,
    };
    match (mode, certificates) {
        (MtlsMode::Disable, _) | (MtlsMode::Permissive, false) => vec![chain("", None, &[], false)],
        (MtlsMode::Strict, false) => vec![InboundChain { refuse: true, ..chain("", None, &[], false) }],
        (MtlsMode::Strict, true) => vec![chain("", Some(TLS), &[], true)],
        (MtlsMode::Permissive, true) if http => {
            vec![chain("", Some(TLS), &MESH_ALPNS, true), chain("-plaintext", Some(RAW), &[], false)]
        }
        (MtlsMode::Permissive, true) => vec![
            chain("", Some(TLS), &MESH_ALPNS, true),
            chain("-tls", Some(TLS), &[], false),
            chain("-plaintext", Some(RAW), &[], false),
        ],
    }
}
