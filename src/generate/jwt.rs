//! RequestAuthentication → Envoy's `jwt_authn` HTTP filter, as Istio
//! builds it (`pilot/pkg/security/authn`).
//!
//! One provider per JWT rule, named `origins-I` in issuer order, each with
//! its key set inlined (`local_jwks`: meshpush fetched it, as istiod does
//! by default), the token locations, audiences and outputs of the rule, and
//! the verified payload written to the filter's dynamic metadata under
//! `payload`: that is what AuthorizationPolicy's `requestPrincipals` and
//! `request.auth.*` match (`generate::authz`), so the filter runs before
//! the RBAC filters. The requirement is Istio's: a request without a token
//! passes, one with an invalid token is refused (401). With one provider,
//! "it or none"; with several, "any one of them, or each one's token either
//! valid or absent", so that providers sharing a location still work. CORS
//! preflight requests are not checked. A gateway's filter clears the route
//! cache, so routes may match on the headers the filter writes.
//!
//! Invariant: the filter's bytes are a function of the rules only. The
//! providers are a proto map, which prost encodes in hash order; the config
//! is encoded from a mirror message with the providers in rule order.

use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::{DataSource, data_source};
use envoy_types::pb::envoy::config::route::v3::{RouteMatch, route_match::PathSpecifier};
use envoy_types::pb::envoy::extensions::filters::http::jwt_authn::v3::{
    JwtClaimToHeader, JwtHeader, JwtProvider, JwtRequirement, JwtRequirementAndList, JwtRequirementOrList,
    RequirementRule, jwt_provider, jwt_requirement::RequiresType, requirement_rule::RequirementType,
};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{HttpFilter, http_filter};
use envoy_types::pb::google::protobuf::{Any, Empty};

use crate::push::index::ResolvedJwtRule;

/// Envoy's JWT authentication filter (also the metadata namespace RBAC reads).
pub const JWT_AUTHN: &str = "envoy.filters.http.jwt_authn";
/// The key under which the filter writes a verified token's payload.
pub const PAYLOAD_METADATA: &str = "payload";
/// Claims that are always read as space-separated lists, as Istio reads them.
const SPACE_DELIMITED: [&str; 2] = ["permission", "scope"];

/// Where the filter runs: a gateway also clears the route cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JwtPlacement {
    /// A sidecar's inbound chain.
    Inbound,
    /// A gateway's listener.
    Gateway,
}

/// The `jwt_authn` filter for `rules` (sorted by issuer), or none without rules.
pub fn http_filter(rules: &[Arc<ResolvedJwtRule>], placement: JwtPlacement) -> Option<HttpFilter> {
    if rules.is_empty() {
        return None;
    }
    let clear_route_cache = placement == JwtPlacement::Gateway;
    let providers: Vec<NamedProvider> = rules
        .iter()
        .enumerate()
        .map(|(i, r)| NamedProvider { name: provider_name(i), provider: Some(provider(r, clear_route_cache)) })
        .collect();
    let this_or_none =
        |name: &str| requires_any(vec![provider_named(name), requirement(RequiresType::AllowMissing(Empty {}))]);
    let requires = if providers.len() == 1 {
        this_or_none(&providers[0].name)
    } else {
        let mut any: Vec<JwtRequirement> = providers.iter().map(|p| provider_named(&p.name)).collect();
        let each: Vec<JwtRequirement> = providers.iter().map(|p| this_or_none(&p.name)).collect();
        any.push(requirement(RequiresType::RequiresAll(JwtRequirementAndList { requirements: each })));
        requires_any(any)
    };
    let config = JwtAuthn {
        providers,
        rules: vec![RequirementRule {
            r#match: Some(RouteMatch { path_specifier: Some(PathSpecifier::Prefix("/".into())), ..Default::default() }),
            requirement_type: Some(RequirementType::Requires(requires)),
        }],
        bypass_cors_preflight: true,
    };
    Some(HttpFilter {
        name: JWT_AUTHN.to_string(),
        config_type: Some(http_filter::ConfigType::TypedConfig(Any {
            type_url: "type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication".into(),
            value: prost::Message::encode_to_vec(&config),
        })),
        ..Default::default()
    })
}

/// The provider name of the `index`-th rule (by issuer), as Istio names it.
pub fn provider_name(index: usize) -> String {
    format!("origins-{index}")
}

fn provider(resolved: &ResolvedJwtRule, clear_route_cache: bool) -> JwtProvider {
    let rule = &resolved.rule;
    let mut space_delimited: Vec<String> = rule.space_delimited_claims.clone();
    space_delimited.extend(SPACE_DELIMITED.iter().map(|c| c.to_string()));
    space_delimited.sort();
    space_delimited.dedup();
    JwtProvider {
        issuer: rule.issuer.clone(),
        audiences: rule.audiences.clone(),
        forward: rule.forward_original_token,
        from_headers: rule
            .from_headers
            .iter()
            .map(|h| JwtHeader { name: h.name.clone(), value_prefix: h.prefix.clone() })
            .collect(),
        from_params: rule.from_params.clone(),
        from_cookies: rule.from_cookies.clone(),
        forward_payload_header: rule.output_payload_to_header.clone().unwrap_or_default(),
        payload_in_metadata: PAYLOAD_METADATA.to_string(),
        normalize_payload_in_metadata: Some(jwt_provider::NormalizePayload { space_delimited_claims: space_delimited }),
        claim_to_headers: rule
            .output_claim_to_headers
            .iter()
            .map(|c| JwtClaimToHeader {
                header_name: c.header.clone(),
                claim_name: c.claim.clone(),
                ..Default::default()
            })
            .collect(),
        clear_route_cache,
        jwks_source_specifier: Some(jwt_provider::JwksSourceSpecifier::LocalJwks(DataSource {
            specifier: Some(data_source::Specifier::InlineString(resolved.jwks.to_string())),
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn requirement(requires: RequiresType) -> JwtRequirement {
    JwtRequirement { requires_type: Some(requires) }
}

fn provider_named(name: &str) -> JwtRequirement {
    requirement(RequiresType::ProviderName(name.to_string()))
}

fn requires_any(requirements: Vec<JwtRequirement>) -> JwtRequirement {
    requirement(RequiresType::RequiresAny(JwtRequirementOrList { requirements }))
}

/// `envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication`, the
/// fields set here, with the providers map as entries in name order (a map
/// is a repeated entry of key 1 and value 2 on the wire).
#[derive(Clone, PartialEq, prost::Message)]
struct JwtAuthn {
    #[prost(message, repeated, tag = "1")]
    providers: Vec<NamedProvider>,
    #[prost(message, repeated, tag = "2")]
    rules: Vec<RequirementRule>,
    #[prost(bool, tag = "4")]
    bypass_cors_preflight: bool,
}

/// One entry of the `providers` map.
#[derive(Clone, PartialEq, prost::Message)]
struct NamedProvider {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(message, optional, tag = "2")]
    provider: Option<JwtProvider>,
}
