//! The workload certificate: a key made here, a CSR for the workload's
//! SPIFFE identity, the CA's answer checked and held, and when to renew it.
//!
//! Invariants: a [`WorkloadCert`] is only made from a chain whose leaf
//! certifies this agent's own key and names its identity, so what Envoy is
//! given over SDS, and what the agent presents to meshpush, always belong
//! together. The key never leaves this module except to Envoy over SDS
//! ([`WorkloadCert::key_pem`]) and to rustls; `Debug` does not show it.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rcgen::{CertificateParams, KeyPair, SanType};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::ca::service::proto::istio_certificate_service_client::IstioCertificateServiceClient;
use crate::ca::service::proto::{IstioCertificateRequest, IstioCertificateResponse};
use crate::model::Identity;

/// The share of a certificate's life, counted from when it arrived, after
/// which it is renewed (Istio's `SECRET_GRACE_PERIOD_RATIO`: 0.5).
const RENEW_AT_LIFE_SHARE: f64 = 0.5;

/// Why an answer of the CA cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// A key or CSR could not be made (a bug or an exhausted system RNG).
    #[error("making a key and CSR: {0}")]
    Csr(String),
    /// The CA answered with no certificate, or with one that does not parse.
    #[error("the CA's answer is not a certificate chain: {0}")]
    Chain(String),
    /// The leaf certifies another key than the one this agent made.
    #[error("the CA's certificate is for another key than the one in the CSR")]
    OtherKey,
    /// The leaf does not name the identity asked for.
    #[error("the CA's certificate does not name {0}")]
    OtherIdentity(Identity),
}

/// A workload's key, the chain the CA signed for it and the roots it trusts.
pub struct WorkloadCert {
    identity: Identity,
    /// Leaf first, then intermediates (PEM), as Envoy's `certificate_chain`.
    chain_pem: String,
    /// The mesh roots the CA returned last (PEM), as Envoy's `trusted_ca`.
    roots_pem: String,
    key_pem: String,
    certified: Arc<CertifiedKey>,
    serial: String,
    not_after: SystemTime,
    received: SystemTime,
}

impl std::fmt::Debug for WorkloadCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkloadCert")
            .field("identity", &self.identity.to_string())
            .field("serial", &self.serial)
            .field("not_after", &self.not_after)
            .field("key", &"<redacted>")
            .finish()
    }
}

impl WorkloadCert {
    /// The identity it names.
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// The leaf and intermediates, PEM.
    pub fn chain_pem(&self) -> &str {
        &self.chain_pem
    }

    /// The mesh roots, PEM.
    pub fn roots_pem(&self) -> &str {
        &self.roots_pem
    }

    /// The private key, PKCS#8 PEM: for Envoy's SDS `default` only.
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// The chain and signing key, as rustls presents them.
    pub fn certified_key(&self) -> Arc<CertifiedKey> {
        self.certified.clone()
    }

    /// The leaf's serial number, hex (what Envoy's `/certs` shows).
    pub fn serial(&self) -> &str {
        &self.serial
    }

    /// When the leaf expires.
    pub fn not_after(&self) -> SystemTime {
        self.not_after
    }

    /// When to ask for the next one: half-way from its arrival to its
    /// expiry (counted from arrival, not from `notBefore`, which the CA
    /// backdates for clock skew).
    pub fn renew_at(&self) -> SystemTime {
        let life = self.not_after.duration_since(self.received).unwrap_or_default();
        self.received + life.mul_f64(RENEW_AT_LIFE_SHARE)
    }

    /// Whether it is still valid at `now`.
    pub fn valid_at(&self, now: SystemTime) -> bool {
        now < self.not_after
    }
}

/// A fresh P-256 key and a CSR for it naming `identity` as its URI SAN.
pub fn key_and_csr(identity: &Identity) -> Result<(KeyPair, String), CertError> {
    let key = KeyPair::generate().map_err(|e| CertError::Csr(e.to_string()))?;
    let mut params = CertificateParams::default();
    let uri = identity.to_string().try_into().map_err(|e: rcgen::Error| CertError::Csr(e.to_string()))?;
    params.subject_alt_names = vec![SanType::URI(uri)];
    let csr = params.serialize_request(&key).and_then(|c| c.pem()).map_err(|e| CertError::Csr(e.to_string()))?;
    Ok((key, csr))
}

/// Asks the CA on `channel` to sign `csr` for `ttl`, authenticated by
/// `token` when given (and by the channel's client certificate, when it
/// presents one).
pub async fn create_certificate(
    channel: tonic::transport::Channel,
    csr: String,
    token: Option<&str>,
    cluster_id: Option<&str>,
    ttl: Duration,
) -> Result<Vec<String>, tonic::Status> {
    let mut client = IstioCertificateServiceClient::new(channel);
    let validity_duration = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX);
    let mut request = tonic::Request::new(IstioCertificateRequest { csr, validity_duration, metadata: None });
    if let Some(token) = token {
        let bearer = format!("Bearer {}", token.trim())
            .parse()
            .map_err(|_| tonic::Status::invalid_argument("the token file holds characters a header cannot carry"))?;
        request.metadata_mut().insert("authorization", bearer);
    }
    // The cluster whose API server reviews the token (pilot-agent's header).
    if let Some(id) = cluster_id.and_then(|id| id.parse().ok()) {
        request.metadata_mut().insert(crate::ca::authn::CLUSTER_ID_HEADER, id);
    }
    let IstioCertificateResponse { cert_chain } = client.create_certificate(request).await?.into_inner();
    Ok(cert_chain)
}

/// Checks the CA's `chain` (leaf first, roots last) against `key` and
/// `identity`, and holds them.
pub fn accept(identity: &Identity, key: &KeyPair, chain: &[String]) -> Result<WorkloadCert, CertError> {
    let [leaf_and_intermediates @ .., roots] = chain else {
        return Err(CertError::Chain("no certificate".into()));
    };
    if leaf_and_intermediates.is_empty() {
        return Err(CertError::Chain("only the roots, no leaf".into()));
    }
    let ders: Vec<CertificateDer<'static>> = leaf_and_intermediates
        .iter()
        .flat_map(|pem| CertificateDer::pem_slice_iter(pem.as_bytes()))
        .collect::<Result<_, _>>()
        .map_err(|e| CertError::Chain(e.to_string()))?;
    let leaf = ders.first().ok_or_else(|| CertError::Chain("the leaf is not PEM".into()))?;
    let (_, parsed) = x509_parser::parse_x509_certificate(leaf).map_err(|e| CertError::Chain(e.to_string()))?;
    if *parsed.public_key().subject_public_key.data != *key.public_key_raw() {
        return Err(CertError::OtherKey);
    }
    if !crate::ca::tls::identities_of(leaf).contains(identity) {
        return Err(CertError::OtherIdentity(identity.clone()));
    }
    let not_after = SystemTime::UNIX_EPOCH
        + Duration::from_secs(u64::try_from(parsed.validity().not_after.timestamp()).unwrap_or_default());
    let serial = parsed.raw_serial_as_string().replace(':', "");
    let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let signing = rustls::crypto::ring::sign::any_supported_type(&der).map_err(|e| CertError::Csr(e.to_string()))?;
    let mut chain_pem = String::new();
    for pem in leaf_and_intermediates {
        chain_pem.push_str(pem.trim_end());
        chain_pem.push('\n');
    }
    Ok(WorkloadCert {
        identity: identity.clone(),
        chain_pem,
        roots_pem: roots.clone(),
        key_pem: key.serialize_pem(),
        certified: Arc::new(CertifiedKey::new(ders, signing)),
        serial,
        not_after,
        received: SystemTime::now(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ca::{CertificateAuthority, Lifetimes};

    fn authority() -> (tempfile::TempDir, CertificateAuthority) {
        let dir = tempfile::tempdir().unwrap();
        let ca = CertificateAuthority::open(dir.path(), "cluster.local", Lifetimes::default()).unwrap();
        (dir, ca)
    }

    #[test]
    fn a_chain_for_this_key_and_identity_is_held_and_renewed_half_way() {
        let (_dir, ca) = authority();
        let sleep: Identity = "spiffe://cluster.local/ns/default/sa/sleep".parse().unwrap();
        let (key, csr) = key_and_csr(&sleep).unwrap();
        let issued = ca.sign_workload(&csr, std::slice::from_ref(&sleep), Duration::from_secs(3600)).unwrap();
        let cert = accept(&sleep, &key, &issued.chain).unwrap();
        assert_eq!(cert.identity(), &sleep);
        assert_eq!(cert.roots_pem(), ca.roots_pem());
        assert!(cert.chain_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(!cert.chain_pem().contains(ca.roots_pem().trim()), "the roots are not part of the chain");
        // Half an hour from now, give or take the test's own time.
        let renew = cert.renew_at().duration_since(SystemTime::now()).unwrap();
        assert!(renew > Duration::from_secs(1790) && renew <= Duration::from_secs(1800), "{renew:?}");
        assert!(cert.valid_at(SystemTime::now()) && !cert.valid_at(cert.not_after()));
        // The key is never in its Debug output.
        let debug = format!("{cert:?}");
        assert!(!debug.contains("PRIVATE KEY") && debug.contains("redacted"), "{debug}");
    }

    #[test]
    fn a_chain_for_another_key_or_identity_is_refused() {
        let (_dir, ca) = authority();
        let sleep: Identity = "spiffe://cluster.local/ns/default/sa/sleep".parse().unwrap();
        let (key, csr) = key_and_csr(&sleep).unwrap();
        let issued = ca.sign_workload(&csr, std::slice::from_ref(&sleep), Duration::ZERO).unwrap();
        let (other_key, _) = key_and_csr(&sleep).unwrap();
        assert!(matches!(accept(&sleep, &other_key, &issued.chain), Err(CertError::OtherKey)));
        let httpbin: Identity = "spiffe://cluster.local/ns/default/sa/httpbin".parse().unwrap();
        assert!(matches!(accept(&httpbin, &key, &issued.chain), Err(CertError::OtherIdentity(_))));
        assert!(matches!(accept(&sleep, &key, &issued.chain[issued.chain.len() - 1..]), Err(CertError::Chain(_))));
        assert!(matches!(accept(&sleep, &key, &[]), Err(CertError::Chain(_))));
    }
}
