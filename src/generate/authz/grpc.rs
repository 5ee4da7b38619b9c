//! AuthorizationPolicies as a proxyless gRPC server enforces them: the
//! RBAC filters of its inbound listener, as istiod's gRPC generator makes
//! them.
//!
//! gRPC's RBAC filter (gRFC A41) takes the actions ALLOW and DENY only, and
//! refuses two filters of one name: the DENY filter is
//! `envoy.filters.http.rbac.DENY`, the ALLOW filter `envoy.filters.http.rbac`,
//! in that order. AUDIT and CUSTOM policies have no gRPC filter and dry-run
//! policies no shadow rules there: none of them is sent (each is reported
//! per policy, `generate::grpc::unsupported`).
//!
//! A rule reads the peer's certificate as a sidecar's does. What gRPC has
//! no matcher for — JWT attributes, `experimental.envoy.filters.*`
//! metadata, path templates, `connection.sni` — fails closed, as an HTTP
//! attribute on a TCP port does: an ALLOW rule with it is left out (it
//! allows nothing), a DENY rule is kept without it (it denies more).
//!
//! One difference from istiod, on purpose: istiod sends no ALLOW filter
//! for ALLOW policies without rules, so a gRPC server allows everything
//! where Istio's documented semantics (and every Envoy) deny everything.
//! meshpush keeps the documented semantics for gRPC too.

use std::sync::Arc;

use envoy_types::pb::envoy::config::rbac::v3::rbac::Action;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{HttpFilter, http_filter};

use super::{HTTP_RBAC, HttpRbac, Kind, NamedPolicy, Peer, RbacRules, kind_of, packed, rbac_policies};
use crate::push::index::AppliedPolicy;

/// The name of a gRPC server's DENY filter (its ALLOW filter is [`HTTP_RBAC`]).
pub const GRPC_HTTP_RBAC_DENY: &str = "envoy.filters.http.rbac.DENY";

/// The RBAC filters of a gRPC server that `policies` select, DENY first.
pub fn grpc_http_filters(policies: &[Arc<AppliedPolicy>]) -> Vec<HttpFilter> {
    let mut out = Vec::new();
    for (kind, action, name) in
        [(Kind::Deny, Action::Deny, GRPC_HTTP_RBAC_DENY), (Kind::Allow, Action::Allow, HTTP_RBAC)]
    {
        let chosen: Vec<&Arc<AppliedPolicy>> = policies.iter().filter(|p| kind_of(p) == kind && !p.dry_run).collect();
        if chosen.is_empty() {
            continue;
        }
        let strict = kind == Kind::Allow;
        let mut named: Vec<NamedPolicy> =
            chosen.iter().flat_map(|p| rbac_policies(p, "", strict, false, Peer::Grpc)).collect();
        named.sort_by(|a, b| a.name.cmp(&b.name));
        let config = HttpRbac {
            rules: Some(RbacRules { action: action as i32, policies: named }),
            shadow_rules: None,
            shadow_rules_stat_prefix: String::new(),
        };
        out.push(HttpFilter {
            name: name.to_string(),
            config_type: Some(http_filter::ConfigType::TypedConfig(packed(
                "envoy.extensions.filters.http.rbac.v3.RBAC",
                &config,
            ))),
            ..Default::default()
        });
    }
    out
}
