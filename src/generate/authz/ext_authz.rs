//! An external authorizer (`model::authorizers::Authorizer`) as Envoy's
//! ext_authz filters, as istiod builds them (`generateHTTPConfig`,
//! `generateGRPCConfig` in `pilot/pkg/security/authz/builder/extauthz.go`).
//!
//! The HTTP filter asks the provider's service on its outbound cluster
//! (`outbound|PORT||HOST`): over HTTP (`http_service`: the path prefix, the
//! client headers sent, the fixed headers added, the authorizer's headers
//! kept for the upstream and the client) or over gRPC (`grpc_service`,
//! authority the host); with the provider's timeout, `failure_mode_allow`,
//! `status_on_error` and request body settings. The network filter, for
//! TCP ports, exists for gRPC providers only: istiod adds nothing for an
//! HTTP provider there.
//!
//! Either filter runs only for a request (or connection) a CUSTOM rule of
//! its provider matched: `filter_enabled_metadata` looks for the name of
//! such a rule (`istio-ext-authz-PROVIDER-…`) where the shadow RBAC filter
//! before it writes the policy its shadow rules matched.
//!
//! Invariant: the configs hold no proto map, so prost encodes them the
//! same way every time.

use envoy_types::pb::envoy::config::core::v3::{
    ApiVersion, GrpcService, HeaderValue, HttpUri, grpc_service, http_uri::HttpUpstreamType,
};
use envoy_types::pb::envoy::extensions::filters::http::ext_authz::v3::{
    AuthorizationRequest, AuthorizationResponse, BufferSettings, ExtAuthz as HttpExtAuthz, HttpService,
    ext_authz::Services,
};
use envoy_types::pb::envoy::extensions::filters::network::ext_authz::v3::ExtAuthz as NetworkExtAuthz;
use envoy_types::pb::envoy::r#type::matcher::v3::{
    ListStringMatcher, MetadataMatcher, StringMatcher, ValueMatcher, metadata_matcher::PathSegment,
    metadata_matcher::path_segment::Segment, string_matcher::MatchPattern, value_matcher,
};
use envoy_types::pb::envoy::r#type::v3::HttpStatus;

use super::{HTTP_RBAC, NETWORK_RBAC, TCP_STAT_PREFIX};
use crate::generate::naming;
use crate::model::authorizers::{Authorizer, AuthorizerApi, HttpCheck};

/// Envoy's HTTP ext_authz filter.
pub const HTTP_EXT_AUTHZ: &str = "envoy.filters.http.ext_authz";
/// Envoy's network ext_authz filter.
pub const NETWORK_EXT_AUTHZ: &str = "envoy.filters.network.ext_authz";
/// The shadow rules' stat prefix of a CUSTOM RBAC filter, which is also the
/// prefix of the metadata key it writes the matched policy under.
pub const SHADOW_STAT_PREFIX: &str = "istio_ext_authz_";
/// What Envoy's RBAC filter calls the shadow policy that matched.
const SHADOW_EFFECTIVE_POLICY_ID: &str = "shadow_effective_policy_id";
/// The prefix of every CUSTOM rule's name.
const RULE_PREFIX: &str = "istio-ext-authz";

/// The prefix of the names of the CUSTOM rules of `provider`, which its
/// ext_authz filters look for.
pub fn rule_prefix(provider: &str) -> String {
    format!("{RULE_PREFIX}-{provider}")
}

/// The HTTP ext_authz filter's config for `authorizer`.
pub fn http_config(authorizer: &Authorizer) -> HttpExtAuthz {
    let cluster = naming::outbound_cluster(authorizer.port, "", &authorizer.host);
    let timeout = Some(authorizer.timeout.to_proto());
    let (services, allowed_headers) = match &authorizer.api {
        AuthorizerApi::Http(check) => {
            let service = http_service(check, &authorizer.host, cluster, timeout);
            (Services::HttpService(service), headers(&check.request_headers))
        }
        AuthorizerApi::Grpc => (Services::GrpcService(grpc_service(authorizer, cluster, timeout)), None),
    };
    HttpExtAuthz {
        status_on_error: authorizer.status_on_error.map(|code| HttpStatus { code }),
        failure_mode_allow: authorizer.fail_open,
        transport_api_version: ApiVersion::V3 as i32,
        services: Some(services),
        filter_enabled_metadata: Some(enabled_by(HTTP_RBAC, &authorizer.provider)),
        with_request_body: authorizer.request_body.as_ref().map(|b| BufferSettings {
            max_request_bytes: b.max_request_bytes,
            allow_partial_message: b.allow_partial_message,
            pack_as_bytes: b.pack_as_bytes,
        }),
        allowed_headers,
        ..Default::default()
    }
}

/// The network ext_authz filter's config for `authorizer`: gRPC providers
/// only (`None` for an HTTP one, as istiod gives TCP ports nothing for it).
pub fn network_config(authorizer: &Authorizer) -> Option<NetworkExtAuthz> {
    if authorizer.api != AuthorizerApi::Grpc {
        return None;
    }
    let cluster = naming::outbound_cluster(authorizer.port, "", &authorizer.host);
    Some(NetworkExtAuthz {
        stat_prefix: TCP_STAT_PREFIX.to_string(),
        grpc_service: Some(grpc_service(authorizer, cluster, Some(authorizer.timeout.to_proto()))),
        failure_mode_allow: authorizer.fail_open,
        transport_api_version: ApiVersion::V3 as i32,
        filter_enabled_metadata: Some(enabled_by(NETWORK_RBAC, &authorizer.provider)),
        ..Default::default()
    })
}

/// The HTTP service of an HTTP authorizer. The URI is required by Envoy
/// but unused: the cluster is where checks go.
fn http_service(
    check: &HttpCheck,
    host: &str,
    cluster: String,
    timeout: Option<envoy_types::pb::google::protobuf::Duration>,
) -> HttpService {
    let added: Vec<HeaderValue> = check
        .added_headers
        .iter()
        .map(|(key, value)| HeaderValue { key: key.to_string(), value: value.to_string(), ..Default::default() })
        .collect();
    let answers = [&check.upstream_on_allow, &check.client_on_deny, &check.client_on_allow];
    HttpService {
        path_prefix: check.path_prefix.to_string(),
        server_uri: Some(HttpUri {
            uri: format!("http://{host}"),
            timeout,
            http_upstream_type: Some(HttpUpstreamType::Cluster(cluster)),
        }),
        authorization_request: (!added.is_empty())
            .then(|| AuthorizationRequest { headers_to_add: added, ..Default::default() }),
        authorization_response: answers.iter().any(|list| !list.is_empty()).then(|| AuthorizationResponse {
            allowed_upstream_headers: headers(&check.upstream_on_allow),
            allowed_client_headers: headers(&check.client_on_deny),
            allowed_client_headers_on_success: headers(&check.client_on_allow),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The gRPC service of an authorizer: Envoy's own gRPC client on the cluster.
fn grpc_service(
    authorizer: &Authorizer,
    cluster: String,
    timeout: Option<envoy_types::pb::google::protobuf::Duration>,
) -> GrpcService {
    GrpcService {
        target_specifier: Some(grpc_service::TargetSpecifier::EnvoyGrpc(grpc_service::EnvoyGrpc {
            cluster_name: cluster,
            authority: authorizer.host.to_string(),
            ..Default::default()
        })),
        timeout,
        ..Default::default()
    }
}

/// Header names as written (`name`, `prefix*`, `*suffix`) as Envoy's
/// case-insensitive matchers; none for an empty list.
fn headers(names: &[std::sync::Arc<str>]) -> Option<ListStringMatcher> {
    if names.is_empty() {
        return None;
    }
    let pattern = |name: &str| {
        if let Some(suffix) = name.strip_prefix('*') {
            MatchPattern::Suffix(suffix.to_string())
        } else if let Some(prefix) = name.strip_suffix('*') {
            MatchPattern::Prefix(prefix.to_string())
        } else {
            MatchPattern::Exact(name.to_string())
        }
    };
    let patterns = names.iter().map(|n| StringMatcher { match_pattern: Some(pattern(n)), ignore_case: true }).collect();
    Some(ListStringMatcher { patterns })
}

/// "The RBAC filter `rbac_filter` matched a CUSTOM rule of `provider`".
fn enabled_by(rbac_filter: &str, provider: &str) -> MetadataMatcher {
    MetadataMatcher {
        filter: rbac_filter.to_string(),
        path: vec![PathSegment {
            segment: Some(Segment::Key(format!("{SHADOW_STAT_PREFIX}{SHADOW_EFFECTIVE_POLICY_ID}"))),
        }],
        value: Some(ValueMatcher {
            match_pattern: Some(value_matcher::MatchPattern::StringMatch(StringMatcher {
                match_pattern: Some(MatchPattern::Prefix(rule_prefix(provider))),
                ..Default::default()
            })),
        }),
        invert: false,
    }
}
