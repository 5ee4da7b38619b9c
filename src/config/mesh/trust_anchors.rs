//! MeshConfig's `caCertificates`: roots the mesh trusts beside its own CA's,
//! and trust domains its sidecars accept on their inbound mTLS.
//!
//! Role: istiod reads two things from each entry.
//! - **Roots** (`pem`, or the SPIFFE bundle `spiffeBundleUrl` names): only
//!   under istiod's `ISTIO_MULTIROOT_MESH` (`serve --multi-root-mesh`).
//!   They are merged with the CA's own root into one bundle, sent to each
//!   agent over PCDS (`generate::pcds`), and the agent adds them to the
//!   `ROOTCA` it serves its Envoy. A bundle URL is fetched by
//!   `source::spiffe_bundle` (see [`spiffe_bundle`]). Without the flag
//!   istiod ignores both unread; meshpush reports them.
//! - **Trust domains** (`trustDomains`): always. They widen the SPIFFE
//!   trust domains a sidecar's inbound mTLS accepts (Istio's
//!   `TrustDomainsForValidation`: the mesh's trust domain, its aliases,
//!   and these), unless `PILOT_SKIP_VALIDATE_TRUST_DOMAIN`
//!   (`serve --skip-validate-trust-domain`) turns the check off.
//!
//! `certSigners` matters to istiod only as a Kubernetes RA, which meshpush
//! is not (it signs with its own key): reported.
//!
//! Invariants: a root in [`TrustAnchors::roots`] is one PEM certificate
//! whose first block is an X.509 CA, as istiod checks each root; a URL in
//! [`TrustAnchors::bundle_urls`] is `https://` with a host (an `http://`
//! one, which istiod would turn into `https://http://…`, refuses the mesh
//! config, as a root that is not a CA does).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::spiffe_bundle;

/// One `caCertificates` entry as the file spells it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CaCertificate {
    /// `pem`: a root certificate.
    pub pem: Option<String>,
    /// `spiffeBundleUrl`: where a SPIFFE bundle of roots is fetched.
    #[serde(alias = "spiffe_bundle_url")]
    pub spiffe_bundle_url: Option<String>,
    /// `certSigners`: the Kubernetes signers this root is for (RA only).
    #[serde(alias = "cert_signers")]
    pub cert_signers: Option<Vec<String>>,
    /// `trustDomains`: trust domains sidecars accept inbound.
    #[serde(alias = "trust_domains")]
    pub trust_domains: Option<Vec<String>>,
}

/// What of `caCertificates` the mesh applies, with the two istiod features
/// that decide it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TrustAnchors {
    /// `ISTIO_MULTIROOT_MESH`: whether the extra roots are sent to agents
    /// (PCDS is answered only then).
    pub multi_root: bool,
    /// The `pem` roots, checked, in the file's order (applied only with
    /// `multi_root`).
    pub roots: Arc<[Arc<str>]>,
    /// The `spiffeBundleUrl`s, checked and with their scheme, in the
    /// file's order, without repeats (only with `multi_root`).
    pub bundle_urls: Arc<[Arc<str>]>,
    /// Every entry's `trustDomains`, in order, without repeats.
    pub trust_domains: Arc<[Arc<str>]>,
    /// `PILOT_SKIP_VALIDATE_TRUST_DOMAIN`: sidecars accept any trust domain
    /// the roots sign for.
    pub skip_validate_trust_domain: bool,
}

impl TrustAnchors {
    /// The anchors `entries` give under the two features; an error names
    /// the entry whose root is not a CA certificate, or whose bundle URL
    /// cannot be fetched (checked only with `multi_root`, as istiod reads
    /// roots only then).
    pub fn of(
        entries: &[CaCertificate],
        multi_root: bool,
        skip_validate_trust_domain: bool,
    ) -> Result<TrustAnchors, (String, String)> {
        let mut roots = Vec::new();
        let mut bundle_urls: Vec<Arc<str>> = Vec::new();
        let mut trust_domains: Vec<Arc<str>> = Vec::new();
        for (i, entry) in entries.iter().enumerate() {
            if multi_root && let Some(url) = &entry.spiffe_bundle_url {
                let url =
                    spiffe_bundle::bundle_url(url).map_err(|e| (format!("caCertificates[{i}].spiffeBundleUrl"), e))?;
                if !bundle_urls.iter().any(|u| **u == *url) {
                    bundle_urls.push(url.into());
                }
            }
            if multi_root
                && entry.spiffe_bundle_url.is_none()
                && let Some(pem) = &entry.pem
            {
                check_root(pem).map_err(|e| (format!("caCertificates[{i}].pem"), e))?;
                roots.push(Arc::from(pem.as_str()));
            }
            for domain in entry.trust_domains.iter().flatten().filter(|d| !d.is_empty()) {
                if !trust_domains.iter().any(|d| **d == **domain) {
                    trust_domains.push(domain.as_str().into());
                }
            }
        }
        Ok(TrustAnchors {
            multi_root,
            roots: roots.into(),
            bundle_urls: bundle_urls.into(),
            trust_domains: trust_domains.into(),
            skip_validate_trust_domain,
        })
    }

    /// What of `entries` has no effect, each with its path and why, under
    /// these features.
    pub fn unapplied(&self, entries: &[CaCertificate]) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (i, entry) in entries.iter().enumerate() {
            let path = |field: &str| format!("caCertificates[{i}].{field}");
            match (&entry.pem, &entry.spiffe_bundle_url) {
                (Some(_), Some(_)) => out.push((
                    path("pem"),
                    "is ignored: the entry also sets spiffeBundleUrl, which istiod keeps (one of the two)".into(),
                )),
                (Some(_), None) if !self.multi_root => out.push((path("pem"), NEEDS_MULTI_ROOT.into())),
                _ => {}
            }
            if entry.spiffe_bundle_url.is_some() && !self.multi_root {
                out.push((path("spiffeBundleUrl"), NEEDS_MULTI_ROOT.into()));
            }
            if entry.cert_signers.as_ref().is_some_and(|s| !s.is_empty()) {
                out.push((path("certSigners"), CERT_SIGNERS.into()));
            }
        }
        out
    }
}

/// Why a root is not applied without the feature.
const NEEDS_MULTI_ROOT: &str = "not applied: istiod trusts these roots only with ISTIO_MULTIROOT_MESH=true \
     (`serve --multi-root-mesh`), and the agent only with PROXY_CONFIG_XDS_AGENT=true";

/// Why `certSigners` does nothing.
const CERT_SIGNERS: &str = "has no effect: istiod uses it only as a Kubernetes registration authority \
     (EXTERNAL_CA=ISTIOD_RA_KUBERNETES_API), to pick a signer's root; meshpush signs with its own CA";

/// Checks a root as istiod does: PEM, and its first block an X.509
/// certificate that is a CA.
pub fn check_root(pem: &str) -> Result<(), String> {
    let block = match x509_parser::pem::Pem::iter_from_buffer(pem.as_bytes()).next() {
        Some(Ok(block)) => block,
        _ => return Err("is not PEM: expected -----BEGIN CERTIFICATE-----".into()),
    };
    if block.label != "CERTIFICATE" {
        return Err(format!("begins with a {:?} block: expected a certificate", block.label));
    }
    let cert = block.parse_x509().map_err(|e| format!("is not an X.509 certificate: {e}"))?;
    if !cert.is_ca() {
        return Err("is not a CA certificate (basicConstraints CA:TRUE): it cannot be a root".into());
    }
    Ok(())
}

/// The trust bundle istiod sends: every root, deduplicated and sorted as
/// text (`trustbundle.go`'s merge), so that equal sets give equal bytes.
pub fn bundle<'a>(roots: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut all: Vec<String> = roots.into_iter().map(str::to_string).collect();
    all.sort();
    all.dedup();
    all
}

/// A DER certificate as PEM, in 64-column lines: one encoding, so equal
/// certificates are equal text wherever meshpush writes them.
pub fn certificate_pem(der: &[u8]) -> String {
    use base64::Engine as _;
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in body.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// A trust domain as Istio's mesh config validation takes it: non-empty,
/// dot-separated DNS labels (lowercase letters, digits, `-`, at most 63 each).
pub fn check_trust_domain(domain: &str) -> Result<(), String> {
    if domain.is_empty() {
        return Err("is empty: a mesh needs a trust domain".into());
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if domain.split('.').all(label_ok) {
        Ok(())
    } else {
        Err(format!("{domain:?} is not a trust domain: dot-separated DNS labels (lowercase letters, digits, '-')"))
    }
}

#[cfg(test)]
mod test {
    use super::*;

    /// A root (`is_ca`) or a leaf certificate, PEM.
    fn ca_pem(is_ca: bool) -> String {
        let (root, issuer) = crate::testing::certs::ca("root");
        if is_ca { root } else { crate::testing::certs::leaf(&issuer, &[]).0 }
    }

    fn entry(pem: Option<&str>, url: Option<&str>, domains: &[&str]) -> CaCertificate {
        CaCertificate {
            pem: pem.map(str::to_string),
            spiffe_bundle_url: url.map(str::to_string),
            trust_domains: Some(domains.iter().map(|d| d.to_string()).collect()),
            ..Default::default()
        }
    }

    #[test]
    fn roots_are_checked_and_kept_only_under_multi_root() {
        let root = ca_pem(true);
        let entries = [entry(Some(&root), None, &["a.td", "", "b.td"]), entry(None, None, &["a.td", "c.td"])];
        let off = TrustAnchors::of(&entries, false, false).unwrap();
        assert!(off.roots.is_empty());
        let domains: Vec<&str> = off.trust_domains.iter().map(|d| &**d).collect();
        assert_eq!(domains, ["a.td", "b.td", "c.td"], "trust domains apply without the feature, once each");
        assert_eq!(off.unapplied(&entries), [("caCertificates[0].pem".to_string(), NEEDS_MULTI_ROOT.to_string())]);

        let on = TrustAnchors::of(&entries, true, false).unwrap();
        assert_eq!(on.roots.len(), 1);
        assert!(on.unapplied(&entries).is_empty());
    }

    #[test]
    fn a_root_that_is_not_a_ca_is_refused_with_its_path_only_under_multi_root() {
        let leaf = ca_pem(false);
        let entries = [entry(Some(&ca_pem(true)), None, &[]), entry(Some(&leaf), None, &[])];
        let (path, why) = TrustAnchors::of(&entries, true, false).unwrap_err();
        assert_eq!(path, "caCertificates[1].pem");
        assert!(why.contains("not a CA"), "{why}");
        assert!(TrustAnchors::of(&entries, false, false).is_ok(), "istiod reads no root without the feature");
        let junk = [entry(Some("-----BEGIN CERTIFICATE-----"), None, &[])];
        assert!(TrustAnchors::of(&junk, true, false).unwrap_err().1.contains("not PEM"));
    }

    #[test]
    fn an_entry_with_both_keeps_the_url_as_istiod_does() {
        let entries = [entry(Some(&ca_pem(true)), Some("https://bundle.example"), &[])];
        let on = TrustAnchors::of(&entries, true, false).unwrap();
        assert!(on.roots.is_empty(), "the pem is not a root");
        assert_eq!(on.bundle_urls.iter().map(|u| &**u).collect::<Vec<_>>(), ["https://bundle.example"]);
        let paths: Vec<String> = on.unapplied(&entries).into_iter().map(|(p, _)| p).collect();
        assert_eq!(paths, ["caCertificates[0].pem"]);
    }

    #[test]
    fn bundle_urls_are_kept_in_order_once_each_with_their_scheme_only_under_multi_root() {
        let entries = [
            entry(None, Some("b.example/bundle"), &[]),
            entry(None, Some("https://a.example/bundle"), &[]),
            entry(None, Some("https://b.example/bundle"), &[]),
        ];
        let on = TrustAnchors::of(&entries, true, false).unwrap();
        let urls: Vec<&str> = on.bundle_urls.iter().map(|u| &**u).collect();
        assert_eq!(urls, ["https://b.example/bundle", "https://a.example/bundle"]);
        assert!(on.unapplied(&entries).is_empty(), "fetched: applied");

        let off = TrustAnchors::of(&entries, false, false).unwrap();
        assert!(off.bundle_urls.is_empty());
        let unapplied = off.unapplied(&entries);
        assert_eq!(unapplied.len(), 3);
        assert_eq!(unapplied[0], ("caCertificates[0].spiffeBundleUrl".to_string(), NEEDS_MULTI_ROOT.to_string()));
    }

    #[test]
    fn an_http_or_unparsable_bundle_url_is_refused_with_its_path_only_under_multi_root() {
        for url in ["http://bundle.example/b", "https://", "bad host/b"] {
            let entries = [entry(None, Some("https://ok.example"), &[]), entry(None, Some(url), &[])];
            let (path, why) = TrustAnchors::of(&entries, true, false).unwrap_err();
            assert_eq!(path, "caCertificates[1].spiffeBundleUrl", "{url}");
            assert!(why.contains(&format!("{url:?}")), "the URL is named: {why}");
            assert!(TrustAnchors::of(&entries, false, false).is_ok(), "istiod reads no URL without the feature");
        }
    }

    #[test]
    fn the_bundle_is_sorted_without_repeats() {
        assert_eq!(bundle(["b", "a", "b"]), ["a", "b"]);
    }
}
