//! `RequestAuthentication` (`security.istio.io`): which JSON Web Tokens a
//! workload accepts, and where it finds the keys that sign them.
//!
//! A request that carries a token one of the rules' locations holds must
//! present a valid one (else 401); a request without a token passes, and
//! an AuthorizationPolicy decides what it may do (`requestPrincipals`,
//! `request.auth.*`). The policies that apply to a workload are selected as
//! AuthorizationPolicies are (`push::index::request_authentication`), and
//! become Envoy's `jwt_authn` filter in `generate::jwt`. This module is the
//! object as written; the types are `Eq + Hash + Ord` so that the rules of
//! a workload can be part of its inbound key.
//!
//! The key set comes from `jwks` (inline), else from `jwksUri`, else from
//! the issuer's OpenID discovery document; meshpush fetches the last two
//! itself, as istiod does by default, and inlines what it got
//! (`source::jwks`, [`FetchedJwks`]).

use serde::{Deserialize, Serialize};

use super::{TargetRef, WorkloadLabels};
use crate::config::ObjectMeta;
use crate::config::duration::Duration;

/// Istio RequestAuthentication.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RequestAuthentication {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: RequestAuthenticationSpec,
}

/// `RequestAuthentication.spec`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RequestAuthenticationSpec {
    /// The workloads of the policy's namespace it applies to; absent (or no
    /// labels): the whole namespace, or the mesh in the root namespace.
    pub selector: Option<WorkloadLabels>,
    /// A Gateway API resource or Service it applies to instead.
    pub target_ref: Option<TargetRef>,
    /// The same, several.
    pub target_refs: Vec<TargetRef>,
    /// One rule per accepted issuer.
    pub jwt_rules: Vec<JwtRule>,
}

/// `JWTRule`: one issuer's tokens.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct JwtRule {
    /// The `iss` a token must carry.
    pub issuer: String,
    /// One of these must be in the token's `aud` (none: any audience).
    pub audiences: Vec<String>,
    /// Where the key set is published.
    pub jwks_uri: Option<String>,
    /// The key set itself, as JSON (wins over `jwksUri`).
    pub jwks: Option<String>,
    /// Headers the token may be in (default: `Authorization: Bearer …`).
    pub from_headers: Vec<JwtHeader>,
    /// Query parameters the token may be in (default: `access_token`).
    pub from_params: Vec<String>,
    /// Cookies the token may be in.
    pub from_cookies: Vec<String>,
    /// A header to which the verified payload is written (base64url).
    pub output_payload_to_header: Option<String>,
    /// Whether the token is passed on upstream (else it is removed).
    pub forward_original_token: bool,
    /// Claims copied into request headers.
    pub output_claim_to_headers: Vec<ClaimToHeader>,
    /// How long fetching the key set may take (Istio's default: 5 s).
    pub timeout: Option<Duration>,
    /// Claims whose string value is a space-separated list (besides
    /// `scope` and `permission`, which always are).
    pub space_delimited_claims: Vec<String>,
}

impl JwtRule {
    /// The `jwksUri`, if set and not empty.
    pub fn jwks_uri(&self) -> Option<&str> {
        self.jwks_uri.as_deref().filter(|u| !u.is_empty())
    }

    /// The inline `jwks`, if set and not empty.
    pub fn inline_jwks(&self) -> Option<&str> {
        self.jwks.as_deref().filter(|j| !j.is_empty())
    }
}

/// `JWTHeader`: a header a token may be in.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct JwtHeader {
    /// The header's name.
    pub name: String,
    /// What precedes the token in the value (`Bearer `).
    pub prefix: String,
}

/// `ClaimToHeader`: a claim copied into a request header.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClaimToHeader {
    /// The header written.
    pub header: String,
    /// The claim read (nested claims with `.`).
    pub claim: String,
}

/// A key set meshpush fetched for a rule that has no inline `jwks`.
///
/// Not a Kubernetes kind: `source::jwks` writes one per `(issuer, jwksUri)`
/// the served RequestAuthentications name, and no file or API can (the
/// parser refuses the kind). It is in the store so that a snapshot stays a
/// function of the store alone: new keys are a change like any other.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FetchedJwks {
    /// Metadata: a cluster-scoped name made from the issuer and URI.
    pub metadata: ObjectMeta,
    /// The rule's issuer.
    pub issuer: String,
    /// The rule's `jwksUri` (empty: found through the issuer's discovery document).
    pub jwks_uri: String,
    /// The key set (JSON with a `keys` list), when the last fetch got one.
    pub keys: Option<String>,
    /// Why the last fetch failed, when it did (the keys of an earlier
    /// fetch, if any, are kept).
    pub error: Option<String>,
}

/// The name of the [`FetchedJwks`] for a rule's issuer and `jwksUri`.
pub fn fetched_jwks_name(issuer: &str, jwks_uri: &str) -> String {
    let hash = xxhash_rust::xxh3::xxh3_64(format!("{issuer}\n{jwks_uri}").as_bytes());
    format!("jwks-{hash:016x}")
}

/// A key set as meshpush sends it to Envoy.
#[derive(Debug, Clone, PartialEq)]
pub struct Jwks {
    /// The set as JSON, with the private members of asymmetric keys removed.
    pub public: String,
    /// Whether the text had private members (removed) or symmetric keys.
    pub has_private_members: bool,
}

/// Members of an asymmetric JWK that belong to its private key (RFC 7518).
const PRIVATE_MEMBERS: [&str; 7] = ["d", "p", "q", "dp", "dq", "qi", "oth"];

/// Reads a JWKS as Envoy's `jwt_authn` reads it: an object with a `keys`
/// list, each key of type `RSA` (`n`, `e`), `EC` (`crv`, `x`, `y`), `OKP`
/// (`crv`, `x`) or `oct` (`k`). Private members of asymmetric keys are
/// dropped: verifying needs only the public key.
pub fn parse_jwks(text: &str) -> Result<Jwks, String> {
    let mut value: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON ({e})"))?;
    let keys = value
        .get_mut("keys")
        .and_then(serde_json::Value::as_array_mut)
        .ok_or_else(|| "has no \"keys\" list".to_string())?;
    if keys.is_empty() {
        return Err("its \"keys\" list is empty".into());
    }
    let mut has_private_members = false;
    for (i, key) in keys.iter_mut().enumerate() {
        let key = key.as_object_mut().ok_or_else(|| format!("keys[{i}] is not an object"))?;
        let kty = key.get("kty").and_then(serde_json::Value::as_str).unwrap_or_default().to_string();
        let needs: &[&str] = match kty.as_str() {
            "RSA" => &["n", "e"],
            "EC" => &["crv", "x", "y"],
            "OKP" => &["crv", "x"],
            "oct" => &["k"],
            "" => return Err(format!("keys[{i}] has no \"kty\"")),
            other => return Err(format!("keys[{i}] has key type {other:?} (RSA, EC, OKP or oct)")),
        };
        if let Some(missing) = needs.iter().find(|m| !key.get(**m).is_some_and(serde_json::Value::is_string)) {
            return Err(format!("keys[{i}] ({kty}) has no {missing:?}"));
        }
        if kty == "oct" {
            has_private_members = true;
        } else {
            for member in PRIVATE_MEMBERS {
                has_private_members |= key.remove(member).is_some();
            }
        }
    }
    Ok(Jwks { public: value.to_string(), has_private_members })
}

/// The host and port a `jwksUri` names (`http` or `https`, as Istio
/// accepts), or why it names none.
pub fn jwks_uri_authority(uri: &str) -> Result<(String, u16), String> {
    let parsed: http::Uri = uri.parse().map_err(|e| format!("{uri:?} is not a URI ({e})"))?;
    let default_port = match parsed.scheme_str() {
        Some("https") => 443,
        Some("http") => 80,
        _ => return Err(format!("{uri:?} is neither an http nor an https URI")),
    };
    let host = parsed.host().filter(|h| !h.is_empty()).ok_or_else(|| format!("{uri:?} names no host"))?;
    Ok((host.trim_matches(['[', ']']).to_string(), parsed.port_u16().unwrap_or(default_port)))
}
