//! MeshConfig's external authorizers: the `envoyExtAuthzHttp` and
//! `envoyExtAuthzGrpc` extension providers that CUSTOM AuthorizationPolicies
//! name (`spec.provider.name`).
//!
//! Role: the provider as the mesh config writes it ([`HttpAuthorizerProvider`],
//! [`GrpcAuthorizerProvider`], every field of istio/api's messages), and
//! what can be said of it on its own ([`issues`]): what istiod's mesh
//! config validation and its authorization builder
//! (`pilot/pkg/security/authz/builder/extauthz.go`) find wrong with it — a
//! port out of range, a malformed service, an unknown `statusOnError`, a
//! `pathPrefix` without its `/`, a lone `*` in a header list, a name that
//! is not a DNS-1123 label; and, where istiod would send Envoy what Envoy
//! refuses with the whole listener, `statusOnError: "0"` and a request
//! body buffer of 0 bytes — and the fields that do not do what one might
//! think (`clearRouteCache`, which istiod never sets; the deprecated
//! `includeHeadersInCheck`; `packAsBytes` on an HTTP provider). Whether the
//! service is one of the mesh is the registry's question
//! (`model::authorizers`).
//!
//! Invariant: a [`Fault`] issue makes the provider unusable, as in istiod:
//! a CUSTOM policy naming it denies the requests its rules match; a
//! [`Note`] issue changes nothing about what is generated.
//!
//! [`Fault`]: IssueKind::Fault
//! [`Note`]: IssueKind::Note

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

use crate::config::Duration;
use crate::config::validate::{is_dns1123_label, is_wildcard_host};

/// How long Envoy waits for the authorizer when the provider does not say
/// (istiod's default: 600s).
pub const DEFAULT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// `EnvoyExternalAuthorizationHttpProvider`: Envoy's ext_authz filter
/// asking an HTTP service.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpAuthorizerProvider {
    /// The service: `HOST` or `NAMESPACE/HOST`.
    pub service: String,
    /// Its port (a number, or a string of one, as protobuf's JSON takes it).
    #[serde(deserialize_with = "port_number")]
    pub port: u32,
    /// How long a check may take; none: 600s.
    pub timeout: Option<Duration>,
    /// Put before the request's path in the check request.
    #[serde(alias = "path_prefix")]
    pub path_prefix: String,
    /// Whether a request passes when the authorizer cannot be reached or
    /// answers 5xx.
    #[serde(alias = "fail_open")]
    pub fail_open: bool,
    /// Whether routes are computed again after the check (istiod does not
    /// apply it; reported).
    #[serde(alias = "clear_route_cache")]
    pub clear_route_cache: bool,
    /// The status a client gets when the check fails to complete (`"403"`).
    #[serde(alias = "status_on_error")]
    pub status_on_error: String,
    /// Deprecated: `includeRequestHeadersInCheck`, used when that is empty.
    #[serde(alias = "include_headers_in_check")]
    pub include_headers_in_check: Vec<String>,
    /// The client's headers sent to the authorizer (exact, `prefix*`, `*suffix`).
    #[serde(alias = "include_request_headers_in_check")]
    pub include_request_headers_in_check: Vec<String>,
    /// Fixed headers added to each check request.
    #[serde(alias = "include_additional_headers_in_check")]
    pub include_additional_headers_in_check: BTreeMap<String, String>,
    /// Whether (and how much of) the request body is sent.
    #[serde(alias = "include_request_body_in_check")]
    pub include_request_body_in_check: Option<RequestBody>,
    /// The authorizer's headers put on the request when it allows.
    #[serde(alias = "headers_to_upstream_on_allow")]
    pub headers_to_upstream_on_allow: Vec<String>,
    /// The authorizer's headers sent to the client when it denies.
    #[serde(alias = "headers_to_downstream_on_deny")]
    pub headers_to_downstream_on_deny: Vec<String>,
    /// The authorizer's headers sent to the client when it allows.
    #[serde(alias = "headers_to_downstream_on_allow")]
    pub headers_to_downstream_on_allow: Vec<String>,
}

/// `EnvoyExternalAuthorizationGrpcProvider`: Envoy's ext_authz filter
/// asking a gRPC `envoy.service.auth.v3.Authorization` service (on HTTP
/// ports, and on TCP ports through the network filter).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GrpcAuthorizerProvider {
    /// The service: `HOST` or `NAMESPACE/HOST`.
    pub service: String,
    /// Its port (a number, or a string of one).
    #[serde(deserialize_with = "port_number")]
    pub port: u32,
    /// How long a check may take; none: 600s.
    pub timeout: Option<Duration>,
    /// Whether a request or connection passes when the authorizer cannot be
    /// reached.
    #[serde(alias = "fail_open")]
    pub fail_open: bool,
    /// Whether routes are computed again after the check (istiod does not
    /// apply it; reported).
    #[serde(alias = "clear_route_cache")]
    pub clear_route_cache: bool,
    /// The status a client gets when the check fails to complete.
    #[serde(alias = "status_on_error")]
    pub status_on_error: String,
    /// Whether (and how much of) the request body is sent.
    #[serde(alias = "include_request_body_in_check")]
    pub include_request_body_in_check: Option<RequestBody>,
}

/// `EnvoyExternalAuthorizationRequestBody`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RequestBody {
    /// The most body bytes buffered for the check.
    #[serde(alias = "max_request_bytes")]
    pub max_request_bytes: u32,
    /// Whether a larger body is sent cut (else the client gets 413).
    #[serde(alias = "allow_partial_message")]
    pub allow_partial_message: bool,
    /// Whether a gRPC check carries the body as bytes (else as UTF-8 text).
    #[serde(alias = "pack_as_bytes")]
    pub pack_as_bytes: bool,
}

/// What an issue does to the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IssueKind {
    /// istiod cannot use the provider: CUSTOM policies naming it deny.
    Fault,
    /// Said for the user's sake; what is generated is as istiod generates it.
    Note,
}

/// One thing to say about a provider's field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    /// The field, relative to the provider's kind (`port`,
    /// `includeRequestBodyInCheck.packAsBytes`); empty: the provider.
    pub field: String,
    /// What is wrong (a fault's consequence, [`DENIES`], is the reader's
    /// to add) or, for a note, what happens.
    pub message: String,
    /// Whether it makes the provider unusable.
    pub kind: IssueKind,
}

/// Either kind of provider, as the checks read it.
#[derive(Debug, Clone, Copy)]
pub enum AuthorizerProvider<'a> {
    /// `envoyExtAuthzHttp`.
    Http(&'a HttpAuthorizerProvider),
    /// `envoyExtAuthzGrpc`.
    Grpc(&'a GrpcAuthorizerProvider),
}

impl AuthorizerProvider<'_> {
    /// The key of the provider's kind in the mesh config.
    pub fn key(&self) -> &'static str {
        match self {
            AuthorizerProvider::Http(_) => "envoyExtAuthzHttp",
            AuthorizerProvider::Grpc(_) => "envoyExtAuthzGrpc",
        }
    }

    /// The service and port the provider names.
    pub fn service(&self) -> (&str, u32) {
        match self {
            AuthorizerProvider::Http(p) => (&p.service, p.port),
            AuthorizerProvider::Grpc(p) => (&p.service, p.port),
        }
    }
}

/// What follows a fault: what istiod does with a provider it cannot use.
pub const DENIES: &str = "a CUSTOM policy naming this provider denies the requests its rules match, as istiod does";

/// What istiod's validation and builder find wrong with the provider named
/// `name`, and the fields that do not do what they say; in field order.
pub fn issues(name: &str, provider: AuthorizerProvider<'_>) -> Vec<Issue> {
    let mut out = Vec::new();
    let mut fault = |field: &str, message: String| {
        out.push(Issue { field: field.into(), message, kind: IssueKind::Fault });
    };
    if let Err(e) = check_name(name) {
        fault("", format!("the name {name:?} {e}"));
    }
    let (service, port) = provider.service();
    if let Err(e) = check_service(service) {
        fault("service", e);
    }
    if !(1..=65535).contains(&port) {
        fault("port", format!("{port} is not a port (1 to 65535)"));
    }
    let status = match provider {
        AuthorizerProvider::Http(p) => &p.status_on_error,
        AuthorizerProvider::Grpc(p) => &p.status_on_error,
    };
    if let Err(e) = status_on_error(status) {
        fault("statusOnError", e);
    }
    let body = match provider {
        AuthorizerProvider::Http(p) => &p.include_request_body_in_check,
        AuthorizerProvider::Grpc(p) => &p.include_request_body_in_check,
    };
    if body.as_ref().is_some_and(|b| b.max_request_bytes == 0) {
        // istiod sends it, and Envoy refuses the listener: refused here instead.
        fault(
            "includeRequestBodyInCheck.maxRequestBytes",
            "is 0 (or unset), which Envoy refuses: a body is buffered up to at least one byte".into(),
        );
    }
    if let AuthorizerProvider::Http(p) = provider {
        if !p.path_prefix.is_empty() && !p.path_prefix.starts_with('/') {
            fault("pathPrefix", format!("{:?} does not begin with '/'", p.path_prefix));
        }
        for (field, values) in header_lists(p) {
            if values.iter().any(|v| v == "*") {
                fault(
                    field,
                    "a lone \"*\" matches no header here: use a prefix (\"x-*\") or a suffix (\"*-id\")".into(),
                );
            }
        }
    }
    let mut note = |field: &str, message: &str| {
        out.push(Issue { field: field.into(), message: message.into(), kind: IssueKind::Note });
    };
    let clear_route_cache = match provider {
        AuthorizerProvider::Http(p) => p.clear_route_cache,
        AuthorizerProvider::Grpc(p) => p.clear_route_cache,
    };
    if clear_route_cache {
        note(
            "clearRouteCache",
            "not applied: istiod sets no clear_route_cache on its ext_authz filter, so routes are not \
             computed again after the check (in Istio too)",
        );
    }
    if let AuthorizerProvider::Http(p) = provider {
        if !p.include_headers_in_check.is_empty() {
            if p.include_request_headers_in_check.is_empty() {
                note("includeHeadersInCheck", "deprecated: applied as includeRequestHeadersInCheck, its replacement");
            } else {
                note(
                    "includeHeadersInCheck",
                    "ignored: includeRequestHeadersInCheck is set and replaces it, as in istiod",
                );
            }
        }
        if p.include_request_body_in_check.as_ref().is_some_and(|b| b.pack_as_bytes) {
            note(
                "includeRequestBodyInCheck.packAsBytes",
                "has no effect on an HTTP provider: only a gRPC check request carries the body as bytes",
            );
        }
    }
    out
}

/// The header lists of an HTTP provider, each with its field name.
fn header_lists(p: &HttpAuthorizerProvider) -> [(&'static str, &[String]); 5] {
    [
        ("includeRequestHeadersInCheck", &p.include_request_headers_in_check),
        ("includeHeadersInCheck", &p.include_headers_in_check),
        ("headersToDownstreamOnDeny", &p.headers_to_downstream_on_deny),
        ("headersToDownstreamOnAllow", &p.headers_to_downstream_on_allow),
        ("headersToUpstreamOnAllow", &p.headers_to_upstream_on_allow),
    ]
}

/// A provider name as istiod's builder takes it for an authorizer: a
/// DNS-1123 label (it is part of RBAC policy names and metadata keys).
pub fn check_name(name: &str) -> Result<(), String> {
    if is_dns1123_label(name) {
        Ok(())
    } else {
        Err("is not a DNS-1123 label (at most 63 lower-case letters, digits and '-', starting and ending with a \
             letter or digit)"
            .into())
    }
}

/// A provider's `service` as istiod's validation takes it: `HOST` (a DNS
/// name or an IP address) or `NAMESPACE/HOST`.
fn check_service(service: &str) -> Result<(), String> {
    if service.is_empty() {
        return Err("is empty: an authorizer names its service".into());
    }
    let host_ok = |h: &str| is_wildcard_host(h) && !h.starts_with('*');
    let ok = match service.split_once('/') {
        None => host_ok(service) || service.parse::<std::net::IpAddr>().is_ok(),
        Some((namespace, host)) => is_dns1123_label(namespace) && host_ok(host),
    };
    if ok { Ok(()) } else { Err(format!("{service:?} is neither HOST nor NAMESPACE/HOST")) }
}

/// The status code `status_on_error` names, if any: a code Envoy knows.
///
/// istiod also takes `"0"`, Envoy's enum's placeholder, which Envoy then
/// refuses with the whole listener; meshpush refuses it here instead.
pub fn status_on_error(text: &str) -> Result<Option<i32>, String> {
    use envoy_types::pb::envoy::r#type::v3::StatusCode;
    if text.is_empty() {
        return Ok(None);
    }
    let code: i32 = text.parse().map_err(|_| format!("{text:?} is not an HTTP status code"))?;
    match StatusCode::try_from(code) {
        Ok(StatusCode::Empty) | Err(_) => Err(format!("{code} is not an HTTP status code Envoy knows")),
        Ok(_) => Ok(Some(code)),
    }
}

/// A port as protobuf's JSON mapping reads a `uint32`: a number, or a
/// string holding one (Istio's own examples write `port: "9000"`).
fn port_number<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Port {
        Number(u32),
        Text(String),
    }
    match Port::deserialize(d)? {
        Port::Number(n) => Ok(n),
        Port::Text(text) => {
            text.trim().parse().map_err(|_| serde::de::Error::custom(format!("{text:?} is not a port number")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(yaml: &str) -> HttpAuthorizerProvider {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    fn fields(issues: &[Issue], kind: IssueKind) -> Vec<&str> {
        issues.iter().filter(|i| i.kind == kind).map(|i| i.field.as_str()).collect()
    }

    #[test]
    fn a_port_may_be_written_as_a_string_as_istio_s_examples_write_it() {
        assert_eq!(http("{service: a.b.svc.cluster.local, port: \"9000\"}").port, 9000);
        assert_eq!(http("{service: a.b.svc.cluster.local, port: 9000}").port, 9000);
        assert!(serde_yaml_ng::from_str::<HttpAuthorizerProvider>("{port: nine}").is_err());
    }

    #[test]
    fn what_istiod_refuses_makes_the_provider_deny_and_the_rest_is_a_note() {
        let bad = http(
            "{service: 'ns/bad host', port: 0, statusOnError: '999', pathPrefix: check, \
             includeRequestHeadersInCheck: ['*'], headersToUpstreamOnAllow: ['x-*'], clearRouteCache: true, \
             includeHeadersInCheck: [x-a], includeRequestBodyInCheck: {maxRequestBytes: 64, packAsBytes: true}}",
        );
        let found = issues("Opa", AuthorizerProvider::Http(&bad));
        assert_eq!(
            fields(&found, IssueKind::Fault),
            ["", "service", "port", "statusOnError", "pathPrefix", "includeRequestHeadersInCheck"]
        );
        assert_eq!(
            fields(&found, IssueKind::Note),
            ["clearRouteCache", "includeHeadersInCheck", "includeRequestBodyInCheck.packAsBytes"]
        );
        let good = http("{service: ext.foo.svc.cluster.local, port: 8000, statusOnError: '503'}");
        assert_eq!(issues("ext-authz", AuthorizerProvider::Http(&good)), []);
        let mut grpc =
            GrpcAuthorizerProvider { service: "foo/ext.example.com".into(), port: 9000, ..Default::default() };
        assert_eq!(issues("ext-grpc", AuthorizerProvider::Grpc(&grpc)), []);
        grpc.include_request_body_in_check = Some(RequestBody::default());
        let empty_body = issues("ext-grpc", AuthorizerProvider::Grpc(&grpc));
        assert_eq!(
            fields(&empty_body, IssueKind::Fault),
            ["includeRequestBodyInCheck.maxRequestBytes"],
            "Envoy refuses 0"
        );
    }

    #[test]
    fn status_on_error_is_a_code_envoy_knows() {
        assert_eq!(status_on_error(""), Ok(None));
        assert_eq!(status_on_error("503"), Ok(Some(503)));
        for bad in ["0", "299", "forbidden"] {
            assert!(status_on_error(bad).is_err(), "{bad}");
        }
    }
}
