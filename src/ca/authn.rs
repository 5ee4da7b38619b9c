//! Who is asking: the identities a certificate request's caller holds.
//!
//! A caller proves an identity one of three ways, tried in this order:
//!
//! 1. **Its current workload certificate.** On the secure port a client
//!    certificate that chains to the mesh root has already been verified by
//!    the TLS handshake; its SPIFFE URIs are what it holds (a renewal).
//! 2. **A JWT verified against a JWKS file** (`--jwks FILE`), for a mesh
//!    without Kubernetes: signed by one of the set's keys (by `kid`, else
//!    any key of the header's algorithm; asymmetric algorithms only),
//!    unexpired, with `istio-ca` among its audiences and a subject
//!    `system:serviceaccount:NAMESPACE:NAME`. The file is read again when
//!    it changes, so keys rotate without a restart.
//! 3. **A Kubernetes service-account token, checked by TokenReview** with
//!    the cluster meshpush reads (audience `istio-ca`, as istiod asks for
//!    it); the reviewed username names the identity. A caller of another
//!    cluster says which (the `ClusterID` header pilot-agent sends): its
//!    token is reviewed by that remote cluster, as istiod reviews it, and
//!    refused when meshpush reads no cluster of that id.
//!
//! A token bound to a Pod (Kubernetes' projected tokens are) also names
//! that Pod: the JWT's `kubernetes.io.pod` claim, or the review's
//! `authentication.kubernetes.io/pod-name` and `pod-uid` extras. The CA
//! needs it to know which node a caller such as ztunnel runs on
//! ([`impersonation`](super::impersonation)).
//!
//! Tokens come as `authorization: Bearer TOKEN`. No token or key material
//! ever reaches a message: refusals say which check failed.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use parking_lot::Mutex;

use crate::model::Identity;
use crate::model::identity::from_service_account_subject;

/// The audience a token must be for (Istio's CA audience).
pub const CA_AUDIENCE: &str = "istio-ca";

/// Longest token read; Kubernetes' projected tokens are about 1 KB.
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// Who a caller proved to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The identities it holds (a certificate may name several; a token
    /// names one).
    pub identities: Vec<Identity>,
    /// The Pod its token is bound to, if it is a Pod-bound token.
    pub pod: Option<CallerPod>,
}

/// The Pod a token is bound to (in its service account's namespace).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
pub struct CallerPod {
    /// The Pod's name.
    pub name: String,
    /// Its UID: a Pod deleted and created again under the same name has
    /// another.
    #[serde(default)]
    pub uid: Option<String>,
}

/// A caller that could not be authenticated, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AuthError(pub String);

/// The header a caller names its cluster in (pilot-agent's `ClusterID`).
pub const CLUSTER_ID_HEADER: &str = "clusterid";

/// The API clients of the mesh's remote clusters, by id, kept current by
/// what reads them (`source::kube::remote`). Cheap to clone.
#[derive(Clone, Default)]
pub struct ClusterClients(std::sync::Arc<parking_lot::RwLock<std::collections::HashMap<String, kube::Client>>>);

impl ClusterClients {
    /// Sets (or, with `None`, forgets) the client of cluster `id`.
    pub fn set(&self, id: &str, client: Option<kube::Client>) {
        let mut clients = self.0.write();
        match client {
            Some(client) => clients.insert(id.to_string(), client),
            None => clients.remove(id),
        };
    }

    /// The client of cluster `id`.
    pub fn get(&self, id: &str) -> Option<kube::Client> {
        self.0.read().get(id).cloned()
    }
}

impl std::fmt::Debug for ClusterClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.read().keys()).finish()
    }
}

/// The ways callers are authenticated. See the module docs.
#[derive(Default)]
pub struct Authenticators {
    trust_domain: String,
    jwks: Option<JwksFile>,
    token_review: Option<kube::Client>,
    /// The local cluster's id, and the remote clusters' clients.
    clusters: Option<(String, ClusterClients)>,
}

impl std::fmt::Debug for Authenticators {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticators")
            .field("trust_domain", &self.trust_domain)
            .field("jwks", &self.jwks.as_ref().map(|j| &j.path))
            .field("token_review", &self.token_review.is_some())
            .field("clusters", &self.clusters)
            .finish()
    }
}

impl Authenticators {
    /// Certificates only, for identities in `trust_domain`; add token checks
    /// with [`with_jwks`](Self::with_jwks) and [`with_token_review`](Self::with_token_review).
    pub fn new(trust_domain: &str) -> Authenticators {
        Authenticators { trust_domain: trust_domain.to_string(), ..Authenticators::default() }
    }

    /// Also accept JWTs signed by a key of the JWKS in `path` (read now,
    /// and again whenever it changes).
    pub fn with_jwks(mut self, path: &Path) -> Result<Authenticators, AuthError> {
        let file = JwksFile { path: path.to_path_buf(), cached: Mutex::new(None) };
        file.keys()?;
        self.jwks = Some(file);
        Ok(self)
    }

    /// Also accept service-account tokens that `client`'s cluster reviews as valid.
    pub fn with_token_review(mut self, client: kube::Client) -> Authenticators {
        self.token_review = Some(client);
        self
    }

    /// Also review the tokens of callers of remote clusters with those
    /// clusters' `clients` (a caller naming `local_id`, or no cluster, is
    /// reviewed by the local cluster).
    pub fn with_remote_clusters(mut self, local_id: &str, clients: ClusterClients) -> Authenticators {
        self.clusters = Some((local_id.to_string(), clients));
        self
    }

    /// Whether any token check is configured (without one, only callers
    /// that already hold a certificate can be served).
    pub fn accepts_tokens(&self) -> bool {
        self.jwks.is_some() || self.token_review.is_some()
    }

    /// The identities of a caller presenting `certificate` (the verified
    /// client certificate's identities, empty without one) and `authorization`
    /// (the header's value, if any).
    pub async fn authenticate(
        &self,
        certificate: &[Identity],
        authorization: Option<&str>,
    ) -> Result<Caller, AuthError> {
        self.authenticate_in(certificate, authorization, None).await
    }

    /// [`authenticate`](Self::authenticate) for a caller of `cluster` (its
    /// `ClusterID` header; `None`: the local cluster).
    pub async fn authenticate_in(
        &self,
        certificate: &[Identity],
        authorization: Option<&str>,
        cluster: Option<&str>,
    ) -> Result<Caller, AuthError> {
        if !certificate.is_empty() {
            return Ok(Caller { identities: certificate.to_vec(), pod: None });
        }
        let Some(header) = authorization else {
            return Err(AuthError(
                "no credential: present a workload certificate or an `authorization: Bearer TOKEN` header".into(),
            ));
        };
        self.authenticate_token_in(header, cluster).await
    }

    /// The caller an `authorization: Bearer TOKEN` header proves.
    pub async fn authenticate_token(&self, header: &str) -> Result<Caller, AuthError> {
        self.authenticate_token_in(header, None).await
    }

    /// [`authenticate_token`](Self::authenticate_token) for a caller of `cluster`.
    async fn authenticate_token_in(&self, header: &str, cluster: Option<&str>) -> Result<Caller, AuthError> {
        let token = bearer_token(header)?;
        if !self.accepts_tokens() {
            return Err(AuthError("this CA accepts no tokens (no --jwks file and no Kubernetes cluster)".into()));
        }
        let mut refusals = Vec::new();
        if let Some(jwks) = &self.jwks {
            match jwks.verify(token, &self.trust_domain) {
                Ok(caller) => return Ok(caller),
                Err(e) => refusals.push(format!("JWKS: {e}")),
            }
        }
        let remote = match (cluster, &self.clusters) {
            (Some(id), Some((local, clients))) if id != local => Some((id, clients.get(id))),
            _ => None,
        };
        match remote {
            Some((id, Some(client))) => match token_review(&client, token, &self.trust_domain).await {
                Ok(caller) => return Ok(caller),
                Err(e) => refusals.push(format!("TokenReview of cluster {}: {e}", crate::text::Shown(id))),
            },
            Some((id, None)) => refusals
                .push(format!("TokenReview: no cluster {} is read (its ClusterID header)", crate::text::Shown(id))),
            None => {
                if let Some(client) = &self.token_review {
                    match token_review(client, token, &self.trust_domain).await {
                        Ok(caller) => return Ok(caller),
                        Err(e) => refusals.push(format!("TokenReview: {e}")),
                    }
                }
            }
        }
        Err(AuthError(format!("the token was refused ({})", refusals.join("; "))))
    }
}

impl crate::xds::stream::peer::TokenAuthenticator for Authenticators {
    fn authenticate<'a>(
        &'a self,
        authorization: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<Vec<Identity>, String>> {
        Box::pin(async move {
            self.authenticate_token(authorization).await.map(|caller| caller.identities).map_err(|e| e.0)
        })
    }
}

/// The token of an `authorization` header.
fn bearer_token(header: &str) -> Result<&str, AuthError> {
    let token = header
        .strip_prefix("Bearer ")
        .or_else(|| header.strip_prefix("bearer "))
        .ok_or_else(|| AuthError("the authorization header is not `Bearer TOKEN`".into()))?
        .trim();
    if token.is_empty() {
        return Err(AuthError("the bearer token is empty".into()));
    }
    if token.len() > MAX_TOKEN_BYTES {
        return Err(AuthError(format!("the bearer token is longer than {MAX_TOKEN_BYTES} bytes")));
    }
    Ok(token)
}

/// A JWKS file, re-read when its modification time changes.
#[derive(Debug)]
struct JwksFile {
    path: PathBuf,
    cached: Mutex<Option<(SystemTime, std::sync::Arc<JwkSet>)>>,
}

/// JWT signature algorithms accepted: asymmetric ones only, so a public
/// key can never be used as an HMAC secret.
const ALGORITHMS: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

impl JwksFile {
    fn keys(&self) -> Result<std::sync::Arc<JwkSet>, AuthError> {
        let shown = self.path.display();
        let modified = std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .map_err(|e| AuthError(format!("reading the JWKS {shown}: {e}")))?;
        let mut cached = self.cached.lock();
        if let Some((at, keys)) = cached.as_ref()
            && *at == modified
        {
            return Ok(keys.clone());
        }
        let text = std::fs::read(&self.path).map_err(|e| AuthError(format!("reading the JWKS {shown}: {e}")))?;
        let keys: JwkSet = serde_json::from_slice(&text)
            .map_err(|e| AuthError(format!("the JWKS {shown} is not a JSON Web Key Set: {e}")))?;
        if keys.keys.is_empty() {
            return Err(AuthError(format!("the JWKS {shown} holds no keys")));
        }
        let keys = std::sync::Arc::new(keys);
        *cached = Some((modified, keys.clone()));
        Ok(keys)
    }

    fn verify(&self, token: &str, trust_domain: &str) -> Result<Caller, AuthError> {
        let keys = self.keys()?;
        let header = jsonwebtoken::decode_header(token).map_err(|e| AuthError(format!("not a JWT: {e}")))?;
        if !ALGORITHMS.contains(&header.alg) {
            return Err(AuthError(format!(
                "the JWT's algorithm {:?} is not accepted (asymmetric ones only)",
                header.alg
            )));
        }
        let candidates: Vec<_> = match &header.kid {
            Some(kid) => keys.keys.iter().filter(|k| k.common.key_id.as_deref() == Some(kid)).collect(),
            None => keys.keys.iter().collect(),
        };
        if candidates.is_empty() {
            return Err(AuthError("no key of the JWKS has the JWT's key id".into()));
        }
        let mut validation = Validation::new(header.alg);
        validation.set_audience(&[CA_AUDIENCE]);
        validation.set_required_spec_claims(&["exp", "sub", "aud"]);
        let mut last = AuthError("no key of the JWKS verifies the JWT".into());
        for jwk in candidates {
            let Ok(key) = DecodingKey::from_jwk(jwk) else { continue };
            match jsonwebtoken::decode::<Claims>(token, &key, &validation) {
                Ok(data) => {
                    let identity = from_service_account_subject(trust_domain, &data.claims.sub).ok_or_else(|| {
                        AuthError(format!(
                            "the JWT's subject {:?} is not system:serviceaccount:NAMESPACE:NAME",
                            crate::text::shown(&data.claims.sub)
                        ))
                    })?;
                    let pod = data.claims.kubernetes.and_then(|k| k.pod).filter(|p| !p.name.is_empty());
                    return Ok(Caller { identities: vec![identity], pod });
                }
                Err(e) => last = AuthError(format!("the JWT does not verify: {e}")),
            }
        }
        Err(last)
    }
}

#[derive(Debug, serde::Deserialize)]
struct Claims {
    sub: String,
    /// Kubernetes' own claims; a Pod-bound token names its Pod here.
    #[serde(rename = "kubernetes.io", default)]
    kubernetes: Option<KubernetesClaims>,
}

#[derive(Debug, serde::Deserialize)]
struct KubernetesClaims {
    #[serde(default)]
    pod: Option<CallerPod>,
}

/// The TokenReview extras that name the Pod a token is bound to.
const POD_NAME_EXTRA: &str = "authentication.kubernetes.io/pod-name";
const POD_UID_EXTRA: &str = "authentication.kubernetes.io/pod-uid";

/// The caller the cluster's TokenReview says `token` is.
async fn token_review(client: &kube::Client, token: &str, trust_domain: &str) -> Result<Caller, AuthError> {
    use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
    let review = TokenReview {
        spec: TokenReviewSpec { token: Some(token.to_string()), audiences: Some(vec![CA_AUDIENCE.to_string()]) },
        ..TokenReview::default()
    };
    let api: kube::Api<TokenReview> = kube::Api::all(client.clone());
    let reviewed = api
        .create(&kube::api::PostParams::default(), &review)
        .await
        .map_err(|e| AuthError(format!("the API server did not review the token: {e}")))?;
    let status = reviewed.status.unwrap_or_default();
    if status.authenticated != Some(true) {
        let why = status.error.as_deref().map(crate::text::shown).unwrap_or_default();
        return Err(AuthError(format!("the API server did not authenticate the token {why}").trim_end().to_string()));
    }
    if let Some(audiences) = &status.audiences
        && !audiences.iter().any(|a| a == CA_AUDIENCE)
    {
        return Err(AuthError(format!("the token is not for the audience {CA_AUDIENCE}")));
    }
    let user = status.user.unwrap_or_default();
    let username = user.username.unwrap_or_default();
    let identity = from_service_account_subject(trust_domain, &username).ok_or_else(|| {
        AuthError(format!("the token's user {:?} is not a service account", crate::text::shown(&username)))
    })?;
    let extra = user.extra.unwrap_or_default();
    let first = |key: &str| extra.get(key).and_then(|values| values.first()).filter(|v| !v.is_empty()).cloned();
    let pod = first(POD_NAME_EXTRA).map(|name| CallerPod { name, uid: first(POD_UID_EXTRA) });
    Ok(Caller { identities: vec![identity], pod })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_are_read_from_the_header() {
        assert_eq!(bearer_token("Bearer abc").unwrap(), "abc");
        assert!(bearer_token("Basic abc").is_err());
        assert!(bearer_token("Bearer ").is_err());
        let long = format!("Bearer {}", "a".repeat(MAX_TOKEN_BYTES + 1));
        let err = bearer_token(&long).unwrap_err();
        assert!(err.0.len() < 100, "{err}");
    }
}
