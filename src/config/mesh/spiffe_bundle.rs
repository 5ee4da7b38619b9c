//! SPIFFE bundles: the roots a `caCertificates[].spiffeBundleUrl` names, as
//! istiod reads them under `ISTIO_MULTIROOT_MESH`.
//!
//! Role: the mesh config lists the URLs ([`bundle_url`] checks each one
//! when the mesh config is loaded); `source::spiffe_bundle` fetches them
//! and writes what it got into the store as one [`FetchedTrustBundle`] per
//! URL; PCDS (`generate::pcds`) sends those roots with the `pem` ones. This
//! module is the object, the URL rule and the bundle's parser.
//!
//! A bundle is a JWK Set. Its X.509 roots are the keys with `"use":
//! "x509-svid"`, each carrying exactly one certificate in `x5c`, which must
//! be a CA; a bundle without such a key is refused. Other keys (JWT
//! authorities) are ignored, and so is the trust domain the bundle is for,
//! as istiod ignores it: every root joins the one mesh bundle.
//!
//! Invariant: a root of a [`FetchedTrustBundle`] passed [`check_root`],
//! and is PEM-encoded the same way whatever the server's spelling, so one
//! root is one string.

use serde::Serialize;

use super::trust_anchors::check_root;
use crate::config::ObjectMeta;

/// The roots fetched from one SPIFFE bundle URL.
///
/// Not a Kubernetes kind: `source::spiffe_bundle` writes one per URL the
/// mesh config lists, and no file or API can (the parser refuses the
/// kind). It is in the store so that a snapshot stays a function of the
/// store alone: new roots are a change like any other.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FetchedTrustBundle {
    /// Metadata: a cluster-scoped name made from the URL.
    pub metadata: ObjectMeta,
    /// The URL, as [`bundle_url`] gives it (always `https://`).
    pub url: String,
    /// The roots of the last good fetch, PEM, in the bundle's order (none
    /// before the first one).
    pub roots: Vec<String>,
    /// When the roots were fetched as they are (RFC 3339): a later fetch
    /// that gets the same roots leaves the object alone, so nothing is
    /// pushed for it.
    pub fetched: Option<String>,
    /// Why the last fetch failed, when it did: the roots of the last good
    /// fetch stay.
    pub error: Option<String>,
}

/// The name of the [`FetchedTrustBundle`] of `url`.
pub fn fetched_trust_bundle_name(url: &str) -> String {
    let hash = xxhash_rust::xxh3::xxh3_64(url.as_bytes());
    format!("spiffe-bundle-{hash:016x}")
}

/// The URL a `spiffeBundleUrl` is fetched from, or why it cannot be.
///
/// istiod prepends `https://` to a URL that does not begin with it, so a
/// URL without a scheme is fetched over HTTPS, and one of another scheme
/// (`http://…` becomes `https://http://…`) never works: meshpush refuses
/// the latter with the mesh config rather than fail at every fetch.
pub fn bundle_url(url: &str) -> Result<String, String> {
    // A scheme as RFC 3986 spells it; a `://` further on (in a query) is no scheme.
    let scheme = url.split_once("://").map(|(s, _)| s).filter(|s| {
        s.starts_with(|c: char| c.is_ascii_alphabetic())
            && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    });
    let full = match scheme {
        Some(scheme) if scheme.eq_ignore_ascii_case("https") => url.to_string(),
        Some(_) => {
            return Err(format!(
                "{url:?}: SPIFFE bundles are fetched over https only (istiod would fetch \"https://{url}\", \
                 which fails)"
            ));
        }
        None => format!("https://{url}"),
    };
    // `https://` and what follows it, the authority first.
    if full[8..].is_empty() || full[8..].starts_with(['/', '?', '#']) {
        return Err(format!("{url:?} names no host"));
    }
    let parsed: http::Uri = full.parse().map_err(|e| format!("{url:?} is not a URL ({e})"))?;
    if parsed.host().is_none_or(str::is_empty) {
        return Err(format!("{url:?} names no host"));
    }
    Ok(full)
}

/// The X.509 roots of a SPIFFE bundle (a JWK Set), PEM, in its order.
pub fn parse_bundle(text: &str) -> Result<Vec<String>, String> {
    use base64::Engine as _;
    let set: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let keys = match set.get("keys") {
        Some(serde_json::Value::Array(keys)) => keys.as_slice(),
        Some(_) => return Err("keys is not a list: not a JWK Set".into()),
        None => &[],
    };
    let mut roots = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        if key.get("use").and_then(serde_json::Value::as_str) != Some("x509-svid") {
            continue;
        }
        let chain = key.get("x5c").and_then(serde_json::Value::as_array).map_or(&[][..], Vec::as_slice);
        let [cert] = chain else {
            return Err(format!(
                "keys[{i}]: an x509-svid key carries exactly one certificate in x5c, not {}",
                chain.len()
            ));
        };
        let der = cert
            .as_str()
            .and_then(|c| base64::engine::general_purpose::STANDARD.decode(c).ok())
            .ok_or_else(|| format!("keys[{i}].x5c[0] is not base64 (DER)"))?;
        let pem = super::trust_anchors::certificate_pem(&der);
        check_root(&pem).map_err(|why| format!("keys[{i}].x5c[0] {why}"))?;
        roots.push(pem);
    }
    if roots.is_empty() {
        return Err("holds no X.509 root: no key has \"use\": \"x509-svid\"".into());
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;

    use super::*;

    /// A root (`is_ca`) or a leaf certificate: its DER.
    fn cert(is_ca: bool) -> Vec<u8> {
        let (root, issuer) = crate::testing::certs::ca("root");
        let pem = if is_ca { root } else { crate::testing::certs::leaf(&issuer, &[]).0 };
        x509_parser::pem::Pem::iter_from_buffer(pem.as_bytes()).next().unwrap().unwrap().contents
    }

    fn x5c(der: &[u8]) -> serde_json::Value {
        serde_json::Value::String(base64::engine::general_purpose::STANDARD.encode(der))
    }

    #[test]
    fn the_x509_svid_keys_are_the_roots_and_other_keys_are_ignored() {
        let (a, b) = (cert(true), cert(true));
        let bundle = serde_json::json!({
            "spiffe_sequence": 3,
            "keys": [
                {"use": "x509-svid", "kty": "EC", "crv": "P-256", "x5c": [x5c(&a)]},
                {"use": "jwt-svid", "kty": "EC", "kid": "k1", "x5c": [x5c(&cert(false)), x5c(&a)]},
                {"kty": "RSA", "n": "AQAB", "e": "AQAB"},
                {"use": "x509-svid", "kty": "EC", "x5c": [x5c(&b)]},
            ]
        });
        let roots = parse_bundle(&bundle.to_string()).unwrap();
        assert_eq!(
            roots,
            [
                crate::config::mesh::trust_anchors::certificate_pem(&a),
                crate::config::mesh::trust_anchors::certificate_pem(&b)
            ],
            "in the bundle's order, the others ignored"
        );
        let parsed: Vec<_> = x509_parser::pem::Pem::iter_from_buffer(roots[0].as_bytes()).collect();
        assert_eq!(parsed.len(), 1);
        assert_eq!(parsed[0].as_ref().unwrap().contents, a, "the PEM holds the DER it was given");
    }

    #[test]
    fn an_x509_svid_key_with_two_certificates_or_none_is_refused() {
        let a = cert(true);
        for chain in [vec![x5c(&a), x5c(&a)], vec![]] {
            let bundle = serde_json::json!({"keys": [{"use": "x509-svid", "x5c": chain}]});
            let why = parse_bundle(&bundle.to_string()).unwrap_err();
            assert!(why.starts_with("keys[0]: ") && why.contains("exactly one certificate"), "{why}");
        }
    }

    #[test]
    fn a_bundle_without_an_x509_svid_key_is_refused() {
        for text in [
            serde_json::json!({"keys": [{"use": "jwt-svid", "kty": "RSA", "n": "AQAB", "e": "AQAB"}]}).to_string(),
            r#"{"keys": []}"#.to_string(),
            "{}".to_string(),
        ] {
            assert!(parse_bundle(&text).unwrap_err().contains("no X.509 root"), "{text}");
        }
        assert!(parse_bundle("<html>").unwrap_err().starts_with("not JSON"));
        assert!(parse_bundle(r#"{"keys": {}}"#).unwrap_err().contains("not a list"));
    }

    #[test]
    fn a_root_that_is_not_a_ca_or_not_a_certificate_is_refused() {
        let leaf = serde_json::json!({"keys": [
            {"use": "x509-svid", "x5c": [x5c(&cert(true))]},
            {"use": "x509-svid", "x5c": [x5c(&cert(false))]},
        ]});
        let why = parse_bundle(&leaf.to_string()).unwrap_err();
        assert!(why.starts_with("keys[1].x5c[0] ") && why.contains("not a CA"), "{why}");
        let junk = serde_json::json!({"keys": [{"use": "x509-svid", "x5c": ["AAAA"]}]});
        assert!(parse_bundle(&junk.to_string()).unwrap_err().contains("not an X.509 certificate"));
        let not_base64 = serde_json::json!({"keys": [{"use": "x509-svid", "x5c": ["*"]}]});
        assert!(parse_bundle(&not_base64.to_string()).unwrap_err().contains("not base64"));
    }

    #[test]
    fn a_url_is_https_without_a_scheme_and_refused_with_another() {
        assert_eq!(bundle_url("https://td.example/bundle").unwrap(), "https://td.example/bundle");
        assert_eq!(bundle_url("td.example:8443/bundle").unwrap(), "https://td.example:8443/bundle");
        assert_eq!(bundle_url("https://[::1]:8443/b").unwrap(), "https://[::1]:8443/b");
        let why = bundle_url("http://td.example/bundle").unwrap_err();
        assert!(why.contains("https only") && why.contains("https://http://td.example/bundle"), "{why}");
        assert!(bundle_url("ftp://td.example/bundle").is_err());
        assert_eq!(bundle_url("td.example/b?next=https://x").unwrap(), "https://td.example/b?next=https://x");
        assert!(bundle_url("https://").unwrap_err().contains("no host"));
        assert!(bundle_url("").unwrap_err().contains("no host"));
        assert!(bundle_url("td example/b").unwrap_err().contains("not a URL"));
    }

    #[test]
    fn a_name_is_the_same_for_one_url_and_differs_between_two() {
        assert_eq!(fetched_trust_bundle_name("https://a/b"), fetched_trust_bundle_name("https://a/b"));
        assert_ne!(fetched_trust_bundle_name("https://a/b"), fetched_trust_bundle_name("https://a/c"));
    }
}
