//! TLS for proxyless gRPC: certificates from the client's own certificate
//! provider, not SDS.
//!
//! The bootstrap `meshpush agent --grpc-bootstrap` writes (as Istio's
//! pilot-agent does) declares one `file_watcher` provider instance named
//! `default`, whose certificate `default` is the workload's and `ROOTCA`
//! the mesh root. Every TLS context sent to gRPC names those, in both the
//! current fields and the deprecated ones older gRPC releases read, as
//! istiod sends them.

use envoy_types::pb::envoy::config::core::v3::TransportSocket;
use envoy_types::pb::envoy::config::core::v3::transport_socket::ConfigType;
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    CertificateProviderPluginInstance, CertificateValidationContext, CommonTlsContext, DownstreamTlsContext,
    UpstreamTlsContext,
    common_tls_context::{CertificateProviderInstance, CombinedCertificateValidationContext, ValidationContextType},
};
use envoy_types::pb::envoy::r#type::matcher::v3::{StringMatcher, string_matcher::MatchPattern};

use super::TLS_TRANSPORT_SOCKET;
use crate::generate::proto;

/// The certificate provider instance the bootstrap declares.
pub const PROVIDER_INSTANCE: &str = "default";
/// The provider's workload certificate.
pub const WORKLOAD_CERTIFICATE: &str = "default";
/// The provider's root certificates.
pub const ROOT_CERTIFICATE: &str = "ROOTCA";

/// The TLS context of both sides: the workload certificate, and the peer
/// checked against the mesh root and, when `sans` is not empty, one of them
/// exactly.
pub fn common_context(sans: &[String]) -> CommonTlsContext {
    let current = |certificate_name: &str| CertificateProviderPluginInstance {
        instance_name: PROVIDER_INSTANCE.to_string(),
        certificate_name: certificate_name.to_string(),
    };
    let deprecated = |certificate_name: &str| CertificateProviderInstance {
        instance_name: PROVIDER_INSTANCE.to_string(),
        certificate_name: certificate_name.to_string(),
    };
    let match_subject_alt_names = sans
        .iter()
        .map(|san| StringMatcher { match_pattern: Some(MatchPattern::Exact(san.clone())), ..Default::default() })
        .collect();
    #[allow(deprecated)]
    CommonTlsContext {
        tls_certificate_provider_instance: Some(current(WORKLOAD_CERTIFICATE)),
        tls_certificate_certificate_provider_instance: Some(deprecated(WORKLOAD_CERTIFICATE)),
        validation_context_type: Some(ValidationContextType::CombinedValidationContext(
            CombinedCertificateValidationContext {
                default_validation_context: Some(CertificateValidationContext {
                    match_subject_alt_names,
                    ca_certificate_provider_instance: Some(current(ROOT_CERTIFICATE)),
                    ..Default::default()
                }),
                validation_context_certificate_provider_instance: Some(deprecated(ROOT_CERTIFICATE)),
                ..Default::default()
            },
        )),
        ..Default::default()
    }
}

/// A client's TLS socket to a destination whose identities are `sans`.
pub fn client_socket(sans: &[String]) -> TransportSocket {
    let context = UpstreamTlsContext { common_tls_context: Some(common_context(sans)), ..Default::default() };
    TransportSocket {
        name: TLS_TRANSPORT_SOCKET.to_string(),
        config_type: Some(ConfigType::TypedConfig(proto::any(&context))),
    }
}

/// A server's TLS socket: the client must present a mesh certificate (gRPC
/// checks no identity on the server side; AuthorizationPolicies do).
pub fn server_socket() -> TransportSocket {
    let context = DownstreamTlsContext {
        common_tls_context: Some(common_context(&[])),
        require_client_certificate: Some(proto::bool_value(true)),
        ..Default::default()
    };
    TransportSocket {
        name: TLS_TRANSPORT_SOCKET.to_string(),
        config_type: Some(ConfigType::TypedConfig(proto::any(&context))),
    }
}
