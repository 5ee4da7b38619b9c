//! RequestAuthentications in generated config: the JWT filter a workload's
//! inbound HTTP ports and a gateway's listeners get, with Istio's providers
//! and requirements, and the RBAC matchers on the verified payload.

use envoy_types::pb::envoy::config::rbac::v3::principal;
use envoy_types::pb::envoy::extensions::filters::http::jwt_authn::v3::{
    JwtAuthentication, jwt_provider::JwksSourceSpecifier, jwt_requirement::RequiresType,
    requirement_rule::RequirementType,
};
use envoy_types::pb::envoy::extensions::filters::http::rbac::v3::Rbac as HttpRbac;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::HttpFilter;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::http_filter::ConfigType;

use super::authz::{WEB, web};
use super::*;
use crate::push::index::request_authentication::FAIL_CLOSED_JWKS;

const KEYS: &str = r#"{"keys":[{"kty":"EC","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}"#;

fn ra(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {{name: {name}, namespace: shop}}\nspec:\n{spec}\n---\n"
    )
}

fn inbound(yaml: &str) -> Listener {
    let ctx = context(mesh_with(&format!("{WEB}{yaml}")));
    let listeners = lds::inbound_listeners(&ctx.inbound_for(&web()).1);
    listener(&listeners, "virtualInbound").clone()
}

fn http_filters(l: &Listener, chain: &str) -> Vec<HttpFilter> {
    let chain = l.filter_chains.iter().find(|c| c.name == chain).expect("the port's chain");
    hcm(&chain.filters[0]).http_filters
}

fn decode<T: Message + Default>(f: &HttpFilter) -> T {
    match &f.config_type {
        Some(ConfigType::TypedConfig(any)) => T::decode(any.value.as_slice()).unwrap(),
        _ => panic!("no typed config"),
    }
}

fn jwt_authn(l: &Listener) -> JwtAuthentication {
    let filters = http_filters(l, "inbound|8080||");
    assert_eq!(filters[0].name, "envoy.filters.http.jwt_authn", "the JWT filter runs first");
    decode(&filters[0])
}

#[test]
fn without_request_authentication_there_is_no_jwt_filter() {
    let filters = http_filters(&inbound(""), "inbound|8080||");
    assert!(filters.iter().all(|f| f.name != "envoy.filters.http.jwt_authn"));
}

#[test]
fn one_rule_is_one_provider_that_a_request_meets_or_carries_no_token_for() {
    let spec = format!(
        "  jwtRules:\n  - issuer: https://issuer.example\n    jwks: '{KEYS}'\n    audiences: [web]\n    fromHeaders: [{{name: x-jwt, prefix: 'Bearer '}}]\n    fromParams: [token]\n    fromCookies: [session]\n    outputPayloadToHeader: x-payload\n    forwardOriginalToken: true\n    outputClaimToHeaders: [{{header: x-sub, claim: sub}}]\n    spaceDelimitedClaims: [roles]"
    );
    let config = jwt_authn(&inbound(&ra("jwt", &spec)));
    let provider = &config.providers["origins-0"];
    assert_eq!(provider.issuer, "https://issuer.example");
    assert_eq!(provider.audiences, ["web"]);
    assert_eq!(provider.from_headers[0].name, "x-jwt");
    assert_eq!(provider.from_headers[0].value_prefix, "Bearer ");
    assert_eq!(
        (provider.from_params.as_slice(), provider.from_cookies.as_slice()),
        (&["token".to_string()][..], &["session".to_string()][..])
    );
    assert_eq!(provider.forward_payload_header, "x-payload");
    assert!(provider.forward);
    assert_eq!(provider.claim_to_headers[0].header_name, "x-sub");
    assert_eq!(provider.payload_in_metadata, "payload", "RBAC reads the payload here");
    assert_eq!(
        provider.normalize_payload_in_metadata.as_ref().unwrap().space_delimited_claims,
        ["permission", "roles", "scope"]
    );
    assert!(!provider.clear_route_cache, "a sidecar does not route on the filter's headers");
    match &provider.jwks_source_specifier {
        Some(JwksSourceSpecifier::LocalJwks(source)) => assert!(format!("{source:?}").contains("f83OJ3D2")),
        other => panic!("keys inline, got {other:?}"),
    }
    assert!(config.bypass_cors_preflight);
    let Some(RequirementType::Requires(requires)) = &config.rules[0].requirement_type else { panic!("a requirement") };
    let Some(RequiresType::RequiresAny(any)) = &requires.requires_type else { panic!("any of") };
    assert!(matches!(&any.requirements[0].requires_type, Some(RequiresType::ProviderName(n)) if n == "origins-0"));
    assert!(matches!(&any.requirements[1].requires_type, Some(RequiresType::AllowMissing(_))));
    // The TCP port has no HTTP filters at all.
    let l = inbound(&ra("jwt", &spec));
    let tcp = l.filter_chains.iter().find(|c| c.name == "inbound|9000||").unwrap();
    assert!(tcp.filters.iter().all(|f| f.name != "envoy.filters.network.http_connection_manager"));
}

#[test]
fn several_rules_sort_by_issuer_and_need_any_one_or_each_valid_or_absent() {
    let yaml = [
        ra("b", &format!("  jwtRules: [{{issuer: zeta, jwks: '{KEYS}'}}]")),
        ra("a", &format!("  jwtRules: [{{issuer: alpha, jwks: '{KEYS}'}}]")),
    ]
    .concat();
    let config = jwt_authn(&inbound(&yaml));
    assert_eq!(config.providers["origins-0"].issuer, "alpha");
    assert_eq!(config.providers["origins-1"].issuer, "zeta");
    let Some(RequirementType::Requires(requires)) = &config.rules[0].requirement_type else { panic!() };
    let Some(RequiresType::RequiresAny(any)) = &requires.requires_type else { panic!() };
    assert_eq!(any.requirements.len(), 3, "either provider, or all of them valid-or-missing");
    assert!(
        matches!(&any.requirements[2].requires_type, Some(RequiresType::RequiresAll(all)) if all.requirements.len() == 2)
    );
}

#[test]
fn keys_not_fetched_yet_fail_closed_and_the_key_set_is_part_of_the_inbound_key() {
    let config = jwt_authn(&inbound(&ra(
        "remote",
        "  jwtRules: [{issuer: https://issuer.example, jwksUri: https://issuer.example/keys}]",
    )));
    match &config.providers["origins-0"].jwks_source_specifier {
        Some(JwksSourceSpecifier::LocalJwks(source)) => {
            assert!(
                FAIL_CLOSED_JWKS.contains("pO5gtpRk") && format!("{source:?}").contains("pO5gtpRk"),
                "no token verifies before the keys arrive"
            )
        }
        other => panic!("inline keys, got {other:?}"),
    }
    let with = |keys: &str| {
        let ctx =
            context(mesh_with(&format!("{WEB}{}", ra("jwt", &format!("  jwtRules: [{{issuer: i, jwks: '{keys}'}}]")))));
        (*ctx.inbound_for(&web()).1).clone()
    };
    let other_keys = KEYS.replace("f83O", "AAAA");
    assert_ne!(with(KEYS), with(&other_keys), "rotated keys make a new inbound key");
}

#[test]
fn request_principals_and_claims_match_the_verified_payload() {
    let yaml = [
        ra("jwt", &format!("  jwtRules: [{{issuer: https://issuer.example, jwks: '{KEYS}'}}]")),
        "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: users, namespace: shop}\nspec:\n  rules:\n  - from: [{source: {requestPrincipals: [\"https://issuer.example/alice\"]}}]\n    when:\n    - {key: \"request.auth.claims[groups]\", values: [admins]}\n    - {key: request.auth.audiences, notValues: [other]}\n".to_string(),
    ]
    .concat();
    let l = inbound(&yaml);
    let filters = http_filters(&l, "inbound|8080||");
    let names: Vec<&str> = filters.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(&names[..2], ["envoy.filters.http.jwt_authn", "envoy.filters.http.rbac"]);
    let rbac: HttpRbac = decode(&filters[1]);
    let policy = &rbac.rules.unwrap().policies["ns[shop]-policy[users]-rule[0]"];
    let text = format!("{:?}", policy.principals);
    for expected in [
        "envoy.filters.http.jwt_authn",
        "\"payload\"",
        "\"iss\"",
        "\"sub\"",
        "https://issuer.example",
        "alice",
        "\"groups\"",
        "admins",
        "\"aud\"",
        "NotId",
    ] {
        assert!(text.contains(expected), "{expected} missing from {text}");
    }
    let Some(principal::Identifier::AndIds(and)) = &policy.principals[0].identifier else { panic!("and of parts") };
    assert_eq!(and.ids.len(), 3, "the principal, the claim and the audience");
}

#[test]
fn a_gateway_gets_the_filter_and_clears_the_route_cache() {
    let yaml = format!(
        "apiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {{name: edge, namespace: default}}\nspec:\n  selector: {{matchLabels: {{istio: ingressgateway}}}}\n  jwtRules: [{{issuer: i, jwks: '{KEYS}'}}]\n"
    );
    let ctx = context(mesh_with(&yaml));
    let listeners = lds::listeners(&ctx, &ingress(&ctx));
    let managers = connection_managers(&listeners);
    assert!(!managers.is_empty());
    for manager in managers {
        assert_eq!(manager.http_filters[0].name, "envoy.filters.http.jwt_authn", "{}", manager.stat_prefix);
        let config: JwtAuthentication = decode(&manager.http_filters[0]);
        assert!(config.providers["origins-0"].clear_route_cache);
    }
    assert!(productpage_inbound(&ctx, "REDIRECT").jwt_rules.is_empty(), "sidecars are not selected");
}
