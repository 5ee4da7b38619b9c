//! `meshpush jwt`: service-account tokens for a mesh without Kubernetes.
//!
//! In a cluster, Kubernetes issues every Pod a projected service-account
//! token and the CA has it reviewed. Without one, the CA verifies tokens
//! against a JWKS file (`serve --jwks`); these commands make such a key
//! set and sign tokens with it, shaped like Kubernetes' own: ES256, the
//! subject `system:serviceaccount:NAMESPACE:NAME`, the audience `istio-ca`,
//! and the `kubernetes.io` claim naming the namespace and service account.
//!
//! `keygen` writes the signing key (mode 0600) and the public key set;
//! `issue` prints one token. The key never reaches the output.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use rcgen::KeyPair;

use crate::ca::authn::{CA_AUDIENCE, CallerPod};
use crate::ca::keys;

/// The signing key's file name in the `keygen` directory.
pub const KEY_FILE: &str = "jwt-key.pem";
/// The key set's file name.
pub const JWKS_FILE: &str = "jwks.json";

/// The issuer tokens name.
pub const ISSUER: &str = "meshpush-jwt";

/// Creates a P-256 signing key and its JWKS in `dir`; returns both paths.
pub fn keygen(dir: &Path) -> Result<(PathBuf, PathBuf), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let key = KeyPair::generate().map_err(|e| e.to_string())?;
    let key_path = dir.join(KEY_FILE);
    let jwks_path = dir.join(JWKS_FILE);
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&key_path)
            .map_err(|e| format!("{}: {e} (a key is never overwritten)", key_path.display()))?;
        file.write_all(key.serialize_pem().as_bytes()).map_err(|e| format!("{}: {e}", key_path.display()))?;
    }
    let jwks = serde_json::json!({ "keys": [jwk(&key)] });
    std::fs::write(&jwks_path, serde_json::to_vec_pretty(&jwks).expect("JSON"))
        .map_err(|e| format!("{}: {e}", jwks_path.display()))?;
    Ok((key_path, jwks_path))
}

/// A token for service account `name` of `namespace`, signed by the key
/// in `key_path`, valid for `ttl`.
pub fn issue(key_path: &Path, namespace: &str, name: &str, ttl: Duration) -> Result<String, String> {
    issue_for_pod(key_path, namespace, name, None, ttl)
}

/// A token as [`issue`] makes, bound to `pod` (of `namespace`) as
/// Kubernetes binds a Pod's projected token: its `kubernetes.io.pod` claim
/// names the Pod and, if known, its UID. A node agent (ztunnel) proves
/// which node it runs on with such a token.
pub fn issue_for_pod(
    key_path: &Path,
    namespace: &str,
    name: &str,
    pod: Option<&CallerPod>,
    ttl: Duration,
) -> Result<String, String> {
    let pem = std::fs::read(key_path).map_err(|e| format!("{}: {e}", key_path.display()))?;
    let key = keys::key_pair_from_pem(&pem).map_err(|e| format!("{}: {e}", key_path.display()))?;
    if !key.is_compatible(&rcgen::PKCS_ECDSA_P256_SHA256) {
        return Err(format!("{}: not a P-256 key (make one with `meshpush jwt keygen`)", key_path.display()));
    }
    crate::model::Identity::new("-", namespace, name)
        .map_err(|_| format!("{namespace}/{name}: not a service account"))?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    let claims = serde_json::json!({
        "iss": ISSUER,
        "sub": format!("system:serviceaccount:{namespace}:{name}"),
        "aud": [CA_AUDIENCE],
        "iat": now,
        "nbf": now,
        "exp": now + ttl.as_secs(),
        "kubernetes.io": { "namespace": namespace, "serviceaccount": { "name": name } },
    });
    let mut claims = claims;
    if let Some(pod) = pod {
        let mut bound = serde_json::json!({ "name": pod.name });
        if let Some(uid) = &pod.uid {
            bound["uid"] = serde_json::Value::from(uid.as_str());
        }
        claims["kubernetes.io"]["pod"] = bound;
    }
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
    header.kid = Some(key_id(&key));
    let encoding = jsonwebtoken::EncodingKey::from_ec_der(&key.serialize_der());
    jsonwebtoken::encode(&header, &claims, &encoding).map_err(|e| e.to_string())
}

/// The public JWK of a P-256 key.
fn jwk(key: &KeyPair) -> serde_json::Value {
    // An uncompressed point: 0x04, then X and Y of 32 bytes each.
    let point = key.public_key_raw();
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    serde_json::json!({
        "kty": "EC",
        "crv": "P-256",
        "alg": "ES256",
        "use": "sig",
        "kid": key_id(key),
        "x": b64(&point[1..33]),
        "y": b64(&point[33..65]),
    })
}

/// The key id: the first 8 bytes of the public key's SHA-256, in hex.
fn key_id(key: &KeyPair) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, key.public_key_raw());
    digest.as_ref()[..8].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ca::Authenticators;

    #[tokio::test]
    async fn issued_tokens_verify_against_the_key_set_and_name_the_account() {
        let dir = tempfile::tempdir().unwrap();
        let (key, jwks) = keygen(dir.path()).unwrap();
        let token = issue(&key, "bar", "httpbin", Duration::from_secs(600)).unwrap();
        let authn = Authenticators::new("cluster.local").with_jwks(&jwks).unwrap();
        let caller = authn.authenticate(&[], Some(&format!("Bearer {token}"))).await.unwrap();
        assert_eq!(caller.identities[0].to_string(), "spiffe://cluster.local/ns/bar/sa/httpbin");
        assert_eq!(caller.pod, None);
        assert!(keygen(dir.path()).unwrap_err().contains("never overwritten"));
        // Bound to a Pod, as a projected token is: the CA learns the Pod.
        let pod = CallerPod { name: "httpbin-7f9c".into(), uid: Some("0b5c-uid".into()) };
        let bound = issue_for_pod(&key, "bar", "httpbin", Some(&pod), Duration::from_secs(600)).unwrap();
        let caller = authn.authenticate(&[], Some(&format!("Bearer {bound}"))).await.unwrap();
        assert_eq!(caller.pod, Some(pod));
    }

    #[tokio::test]
    async fn expired_foreign_and_tampered_tokens_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (key, jwks) = keygen(dir.path()).unwrap();
        let authn = Authenticators::new("cluster.local").with_jwks(&jwks).unwrap();
        let bearer = |t: &str| format!("Bearer {t}");

        // Expired (beyond the 60 s leeway): exp is iat + 0, signed long ago is
        // not possible here, so sign with a TTL of zero and a clock 2 minutes back.
        let expired = {
            let pem = std::fs::read(&key).unwrap();
            let k = keys::key_pair_from_pem(&pem).unwrap();
            let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
            let claims =
                serde_json::json!({"sub": "system:serviceaccount:a:b", "aud": [CA_AUDIENCE], "exp": now - 120});
            let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
            header.kid = Some(key_id(&k));
            jsonwebtoken::encode(&header, &claims, &jsonwebtoken::EncodingKey::from_ec_der(&k.serialize_der())).unwrap()
        };
        let err = authn.authenticate(&[], Some(&bearer(&expired))).await.unwrap_err();
        assert!(err.0.contains("Expired"), "{err}");

        // Signed by another key set's key.
        let other = tempfile::tempdir().unwrap();
        let (other_key, _) = keygen(other.path()).unwrap();
        let foreign = issue(&other_key, "a", "b", Duration::from_secs(600)).unwrap();
        let err = authn.authenticate(&[], Some(&bearer(&foreign))).await.unwrap_err();
        assert!(err.0.contains("key id"), "{err}");

        // A payload changed after signing.
        let good = issue(&key, "a", "b", Duration::from_secs(600)).unwrap();
        let parts: Vec<&str> = good.split('.').collect();
        let forged_claims = serde_json::json!({"sub": "system:serviceaccount:istio-system:istiod", "aud": [CA_AUDIENCE], "exp": u64::MAX / 2});
        let forged = format!(
            "{}.{}.{}",
            parts[0],
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(forged_claims.to_string()),
            parts[2]
        );
        let err = authn.authenticate(&[], Some(&bearer(&forged))).await.unwrap_err();
        assert!(err.0.contains("does not verify"), "{err}");
        assert!(!err.0.contains(&good[..20]), "no token in messages: {err}");

        // Another audience.
        let pem = std::fs::read(&key).unwrap();
        let k = keys::key_pair_from_pem(&pem).unwrap();
        let claims =
            serde_json::json!({"sub": "system:serviceaccount:a:b", "aud": ["kubernetes"], "exp": u64::MAX / 2});
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
        header.kid = Some(key_id(&k));
        let wrong_aud =
            jsonwebtoken::encode(&header, &claims, &jsonwebtoken::EncodingKey::from_ec_der(&k.serialize_der()))
                .unwrap();
        let err = authn.authenticate(&[], Some(&bearer(&wrong_aud))).await.unwrap_err();
        assert!(err.0.contains("InvalidAudience"), "{err}");

        // No credential at all, or not a JWT.
        assert!(authn.authenticate(&[], None).await.unwrap_err().0.contains("no credential"));
        assert!(authn.authenticate(&[], Some("Bearer not-a-jwt")).await.unwrap_err().0.contains("not a JWT"));
    }

    #[tokio::test]
    async fn the_key_set_is_read_again_when_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let (_, jwks) = keygen(dir.path()).unwrap();
        let authn = Authenticators::new("td").with_jwks(&jwks).unwrap();
        let second = tempfile::tempdir().unwrap();
        let (key2, jwks2) = keygen(second.path()).unwrap();
        let token = issue(&key2, "a", "b", Duration::from_secs(600)).unwrap();
        assert!(authn.authenticate(&[], Some(&format!("Bearer {token}"))).await.is_err());
        // Rotate: the file now holds the second key (a different mtime).
        let file = std::fs::File::options().write(true).open(&jwks).unwrap();
        std::fs::copy(&jwks2, &jwks).unwrap();
        file.set_modified(SystemTime::now() + Duration::from_secs(5)).unwrap();
        let caller = authn.authenticate(&[], Some(&format!("Bearer {token}"))).await.unwrap();
        assert_eq!(caller.identities[0].to_string(), "spiffe://td/ns/a/sa/b");
    }
}
