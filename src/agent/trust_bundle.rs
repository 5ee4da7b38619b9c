//! The mesh's extra roots, as PCDS brings them to the agent, and the
//! `ROOTCA` Envoy is served with them.
//!
//! Role: with `PROXY_CONFIG_XDS_AGENT=true` (the environment, or the
//! ProxyConfig's `proxyMetadata`, which pilot-agent gets as its environment
//! from the injector) the agent subscribes to PCDS on each upstream stream
//! ([`super::ads_proxy`]) and keeps the bundle of the last response here.
//! SDS then serves `ROOTCA` as the roots of the workload certificate's
//! chain and the bundle's, each certificate once, sorted (pilot-agent's
//! merge), so Envoy accepts peers signed by any of them.
//!
//! pilot-agent also has its workload certificate signed again when the
//! bundle changes; this agent does not, as meshpush's CA root does not
//! change with the mesh config (a new certificate would chain to the same
//! root).
//!
//! Invariant: an empty bundle leaves `ROOTCA` exactly the certificate's
//! roots, with the certificate's serial as its version; a bundle's roots
//! change the version, so Envoy is sent the new roots.

use envoy_types::pb::google::protobuf::Any;
use prost::Message as _;

use crate::generate::pcds::ProxyConfig;
use crate::resource::TypeUrl;

/// The PCDS type URL the agent subscribes to.
pub const PCDS_TYPE: &str = TypeUrl::ProxyConfig.as_str();

/// The roots of the last PCDS response: PEM certificates, each once, sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustBundle {
    roots: Vec<String>,
}

impl TrustBundle {
    /// The bundle of a PCDS response's resources; `None` for a response
    /// with none (pilot-agent ignores it), an error for one that is not a
    /// ProxyConfig of PEM certificates.
    pub fn from_pcds(resources: &[&Any]) -> Result<Option<TrustBundle>, String> {
        let Some(first) = resources.first() else { return Ok(None) };
        if first.type_url != PCDS_TYPE {
            return Err(format!("a PCDS resource of type {:?}", crate::text::shown(&first.type_url)));
        }
        let config = ProxyConfig::decode(first.value.as_slice()).map_err(|e| format!("not a ProxyConfig: {e}"))?;
        let mut roots = Vec::new();
        for (i, pem) in config.ca_certificates_pem.iter().enumerate() {
            let certificates = certificates(pem).map_err(|e| format!("caCertificatesPem[{i}]: {e}"))?;
            roots.extend(certificates);
        }
        roots.sort();
        roots.dedup();
        Ok(Some(TrustBundle { roots }))
    }

    /// Whether it adds no root.
    pub fn is_empty(&self) -> bool {
        self.roots.is_empty()
    }

    /// The roots Envoy trusts: `own` (the workload certificate chain's
    /// roots) and these, each once, sorted; `own` unchanged when this adds
    /// none.
    pub fn with_roots(&self, own: &str) -> String {
        if self.roots.is_empty() {
            return own.to_string();
        }
        // The agent's own roots came from its CA: they parse.
        let mut all = certificates(own).unwrap_or_default();
        all.extend(self.roots.iter().cloned());
        all.sort();
        all.dedup();
        all.concat()
    }

    /// A short digest of the roots, for SDS versions.
    pub fn digest(&self) -> u64 {
        xxhash_rust::xxh3::xxh3_64(self.roots.concat().as_bytes())
    }
}

/// Each certificate of `pem`, re-encoded alike so equal certificates are
/// equal text.
fn certificates(pem: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for block in x509_parser::pem::Pem::iter_from_buffer(pem.as_bytes()) {
        let block = block.map_err(|e| format!("not PEM: {e}"))?;
        if block.label != "CERTIFICATE" {
            return Err(format!("a {:?} block: expected certificates", crate::text::shown(&block.label)));
        }
        out.push(crate::config::mesh::trust_anchors::certificate_pem(&block.contents));
    }
    if out.is_empty() {
        return Err("holds no PEM certificate".into());
    }
    Ok(out)
}

#[cfg(test)]
mod test {
    use super::*;

    fn root() -> String {
        crate::testing::certs::ca("root").0
    }

    fn pcds(roots: &[&str]) -> Any {
        let config = ProxyConfig { ca_certificates_pem: roots.iter().map(|r| r.to_string()).collect() };
        Any { type_url: PCDS_TYPE.into(), value: config.encode_to_vec() }
    }

    #[test]
    fn the_bundle_merges_with_the_own_roots_each_once() {
        let (own, extra) = (root(), root());
        let response = pcds(&[&extra, &own, &format!("{extra}{extra}")]);
        let bundle = TrustBundle::from_pcds(&[&response]).unwrap().unwrap();
        assert_eq!(bundle.roots.len(), 2, "each certificate once");
        let merged = bundle.with_roots(&own);
        assert_eq!(merged.matches("BEGIN CERTIFICATE").count(), 2);
        let parsed: Vec<String> = certificates(&merged).unwrap();
        assert!(parsed.contains(&certificates(&extra).unwrap()[0]));
        assert!(parsed.contains(&certificates(&own).unwrap()[0]));
    }

    #[test]
    fn an_empty_bundle_changes_nothing() {
        let own = root();
        assert_eq!(TrustBundle::default().with_roots(&own), own);
        assert_eq!(TrustBundle::from_pcds(&[]).unwrap(), None, "a response without resources is ignored");
        let empty = TrustBundle::from_pcds(&[&pcds(&[])]).unwrap().unwrap();
        assert!(empty.is_empty());
    }

    #[test]
    fn what_is_not_a_bundle_is_refused_with_where() {
        let wrong = Any { type_url: "type.googleapis.com/x.Y".into(), value: Vec::new() };
        assert!(TrustBundle::from_pcds(&[&wrong]).unwrap_err().contains("of type"));
        let junk = pcds(&["-----BEGIN CERTIFICATE-----\nnot base64\n"]);
        assert!(TrustBundle::from_pcds(&[&junk]).unwrap_err().starts_with("caCertificatesPem[0]"));
    }

    #[test]
    fn the_digest_follows_the_roots() {
        let (a, b) = (root(), root());
        let one = TrustBundle::from_pcds(&[&pcds(&[&a])]).unwrap().unwrap();
        let two = TrustBundle::from_pcds(&[&pcds(&[&a, &b])]).unwrap().unwrap();
        assert_ne!(one.digest(), two.digest());
        let again = TrustBundle::from_pcds(&[&pcds(&[&b, &a])]).unwrap().unwrap();
        assert_eq!(two.digest(), again.digest(), "order does not matter");
    }
}
