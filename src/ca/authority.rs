//! `CertificateAuthority`: the mesh's signing key and the certificates it
//! issues.
//!
//! Its key material is a directory in Istio's plug-in CA layout (the
//! `cacerts` Secret's keys): `ca-cert.pem` (the signing certificate),
//! `ca-key.pem` (its key), `root-cert.pem` (the mesh's trust anchors) and,
//! when the signer is an intermediate, `cert-chain.pem` (the certificates
//! between the signer and the root). A directory without them gets a
//! self-signed root, as istiod's self-signed CA makes one: ten years, the
//! trust domain as its organization; it is written there (the key with
//! mode 0600) so a restarted server keeps its root. On Kubernetes the same
//! material ([`CaMaterial`]) may come from a Secret instead
//! (`source::ca_bundle::root_secret`), so that replicas share one root.
//!
//! A workload certificate is made as Istio makes it: the CSR's public key;
//! no subject; the caller's SPIFFE identity as the only SAN (a URI, marked
//! critical as RFC 5280 asks of a certificate without subject); digital
//! signature and key encipherment; server and client auth; a random
//! 128-bit serial; valid from a minute before now (clock skew between
//! hosts) for the TTL asked (24 h by default, at most `max_ttl`), and
//! never past the signer's own expiry. The response chain is the
//! certificate, `cert-chain.pem`'s certificates, then the roots.
//!
//! Invariant: the signing key stays in this struct; `Debug` does not print
//! it, and no error carries key or CSR bytes.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject as _;

use super::keys::{self, KeyError};
use crate::model::Identity;

/// The signing certificate's file in the plug-in layout.
pub const CA_CERT: &str = "ca-cert.pem";
/// The signing key's file.
pub const CA_KEY: &str = "ca-key.pem";
/// The trust anchors' file.
pub const ROOT_CERT: &str = "root-cert.pem";
/// The intermediates' file (optional).
pub const CERT_CHAIN: &str = "cert-chain.pem";

/// Lifetime of a self-signed root (istiod's `CITADEL_SELF_SIGNED_CA_CERT_TTL`).
pub const SELF_SIGNED_ROOT_TTL: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// How far back a certificate's validity starts, for hosts whose clocks differ.
const CLOCK_SKEW: Duration = Duration::from_secs(60);

/// Workload certificate lifetimes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetimes {
    /// Given when a request asks for none (Istio's `DEFAULT_WORKLOAD_CERT_TTL`: 24 h).
    pub default_ttl: Duration,
    /// The most a request may ask for (Istio's `MAX_WORKLOAD_CERT_TTL`: 90 days).
    pub max_ttl: Duration,
}

impl Default for Lifetimes {
    fn default() -> Self {
        Lifetimes { default_ttl: Duration::from_secs(24 * 3600), max_ttl: Duration::from_secs(90 * 24 * 3600) }
    }
}

/// Why a CA directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: io::Error,
    },
    /// Some of the plug-in files are there, not all.
    #[error("{dir}: has {present} but not {missing}: a plug-in CA needs ca-cert.pem, ca-key.pem and root-cert.pem")]
    Incomplete {
        /// The directory.
        dir: PathBuf,
        /// The files found.
        present: String,
        /// The files missing.
        missing: String,
    },
    /// A file holds no usable certificate.
    #[error("{path}: {reason}")]
    Certificate {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The signing key is not usable.
    #[error("{path}: {source}")]
    Key {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        source: KeyError,
    },
    /// Generating the self-signed root failed.
    #[error("creating a self-signed root: {0}")]
    Generate(rcgen::Error),
}

/// Why a CSR was not signed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignError {
    /// The CSR does not parse or its signature is wrong.
    #[error("the CSR is not a valid PEM PKCS#10 request signed by its key: {0}")]
    BadCsr(String),
    /// The CSR asks for a name the caller does not hold.
    #[error("the CSR asks for {asked}, which the caller does not hold (it holds {held})")]
    NotHeld {
        /// The SAN asked for (bounded).
        asked: String,
        /// The caller's identities.
        held: String,
    },
    /// The TTL asked for is above the maximum.
    #[error("the requested TTL {asked:?} is greater than the maximum allowed, {max:?}")]
    Ttl {
        /// What was asked.
        asked: Duration,
        /// The maximum.
        max: Duration,
    },
    /// The caller has no identity to certify.
    #[error("the caller holds no identity to certify")]
    NoIdentity,
    /// The signer's certificate has expired.
    #[error("the CA's signing certificate has expired")]
    Expired,
    /// Signing itself failed.
    #[error("signing failed: {0}")]
    Signing(String),
}

/// The mesh's CA. See the module docs.
pub struct CertificateAuthority {
    trust_domain: String,
    issuer: Issuer<'static, KeyPair>,
    /// The signer's certificate, PEM.
    signer_pem: String,
    /// `cert-chain.pem`'s certificates, PEM each.
    chain_pem: Vec<String>,
    /// `root-cert.pem` as written (one or more roots).
    roots_pem: String,
    roots: Vec<CertificateDer<'static>>,
    signer_not_after: SystemTime,
    lifetimes: Lifetimes,
    /// Whether this start created the root.
    created: bool,
}

impl fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertificateAuthority")
            .field("trust_domain", &self.trust_domain)
            .field("roots", &self.roots.len())
            .field("intermediates", &self.chain_pem.len())
            .field("signing_key", &"[redacted]")
            .finish_non_exhaustive()
    }
}

/// A certificate issued with its chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    /// The certificate, then intermediates, then the roots; PEM each.
    pub chain: Vec<String>,
    /// When the certificate expires.
    pub not_after: SystemTime,
}

impl CertificateAuthority {
    /// The CA of `dir`: its plug-in files, or a self-signed root created
    /// there when it has none of them.
    pub fn open(dir: &Path, trust_domain: &str, lifetimes: Lifetimes) -> Result<CertificateAuthority, LoadError> {
        match CaMaterial::read(dir)? {
            Some(material) => CertificateAuthority::from_material(dir, &material, trust_domain, lifetimes, false),
            None => {
                let material = CaMaterial::self_signed(trust_domain)?;
                material.write(dir)?;
                CertificateAuthority::from_material(dir, &material, trust_domain, lifetimes, true)
            }
        }
    }

    /// The CA of key material read from `origin` (a directory, or where a
    /// Secret's keys are named as its files); `created` when this start
    /// made the root.
    pub fn from_material(
        origin: &Path,
        material: &CaMaterial,
        trust_domain: &str,
        lifetimes: Lifetimes,
        created: bool,
    ) -> Result<CertificateAuthority, LoadError> {
        let bad = |name: &str, reason: String| LoadError::Certificate { path: origin.join(name), reason };
        let signer = certificates(&material.signer_pem)
            .into_iter()
            .next()
            .ok_or_else(|| bad(CA_CERT, "no PEM certificate".into()))?;
        let signer_not_after = check_signer(&signer).map_err(|reason| bad(CA_CERT, reason))?;
        let roots = certificates(&material.roots_pem);
        if roots.is_empty() {
            return Err(bad(ROOT_CERT, "no PEM certificate".into()));
        }
        let key = keys::key_pair_from_pem(&material.key_pem)
            .map_err(|source| LoadError::Key { path: origin.join(CA_KEY), source })?;
        if !signer_key_matches(&signer, &key) {
            return Err(bad(CA_CERT, format!("its public key is not the key of {CA_KEY}")));
        }
        let issuer = Issuer::from_ca_cert_der(&signer, key).map_err(|e| bad(CA_CERT, e.to_string()))?;
        Ok(CertificateAuthority {
            trust_domain: trust_domain.to_string(),
            issuer,
            signer_pem: pem_of(&signer),
            chain_pem: certificates(&material.chain_pem).iter().map(pem_of).collect(),
            roots_pem: String::from_utf8_lossy(&material.roots_pem).into_owned(),
            roots,
            signer_not_after,
            lifetimes,
            created,
        })
    }

    /// The trust domain identities are issued in.
    pub fn trust_domain(&self) -> &str {
        &self.trust_domain
    }

    /// Whether [`open`](Self::open) created a self-signed root.
    pub fn created_root(&self) -> bool {
        self.created
    }

    /// The roots, PEM (what `ROOTCA` and `root-cert.pem` hold).
    pub fn roots_pem(&self) -> &str {
        &self.roots_pem
    }

    /// The roots, DER (for verifying client certificates).
    pub fn roots(&self) -> &[CertificateDer<'static>] {
        &self.roots
    }

    /// The signing certificate, PEM.
    pub fn signer_pem(&self) -> &str {
        &self.signer_pem
    }

    /// The lifetimes workload certificates get.
    pub fn lifetimes(&self) -> Lifetimes {
        self.lifetimes
    }

    /// Signs `csr_pem` for a caller holding `held`. Every SAN the CSR asks
    /// for must be a URI among `held`; the certificate names all of `held`
    /// (Istio: the caller's identities, whatever the CSR asks). `ttl`
    /// zero means the default.
    pub fn sign_workload(&self, csr_pem: &str, held: &[Identity], ttl: Duration) -> Result<Issued, SignError> {
        if held.is_empty() {
            return Err(SignError::NoIdentity);
        }
        let csr = CertificateSigningRequestParams::from_pem(csr_pem).map_err(|e| SignError::BadCsr(e.to_string()))?;
        let held_uris: Vec<String> = held.iter().map(Identity::to_string).collect();
        for asked in &csr.params.subject_alt_names {
            let ok = matches!(asked, SanType::URI(uri) if held_uris.iter().any(|h| h == uri.as_str()));
            if !ok {
                return Err(SignError::NotHeld {
                    asked: crate::text::shown(&san_text(asked)).into_owned(),
                    held: held_uris.join(", "),
                });
            }
        }
        let ttl = if ttl.is_zero() { self.lifetimes.default_ttl } else { ttl };
        if ttl > self.lifetimes.max_ttl {
            return Err(SignError::Ttl { asked: ttl, max: self.lifetimes.max_ttl });
        }
        let sans = held_uris
            .into_iter()
            .map(|uri| uri.try_into().map(SanType::URI))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e: rcgen::Error| SignError::Signing(e.to_string()))?;
        let params = leaf_params(sans, ttl, self.signer_not_after)?;
        let signed = CertificateSigningRequestParams { params, public_key: csr.public_key };
        let cert = signed.signed_by(&self.issuer).map_err(|e| SignError::Signing(e.to_string()))?;
        Ok(self.issued(cert.pem(), signed.params.not_after.into()))
    }

    /// A certificate for meshpush's own TLS port: `dns_names` (IP
    /// addresses among them become IP SANs) for `key`, valid `ttl`.
    pub fn sign_server(&self, key: &KeyPair, dns_names: &[String], ttl: Duration) -> Result<Issued, SignError> {
        let sans = dns_names
            .iter()
            .map(|name| match name.parse() {
                Ok(ip) => Ok(SanType::IpAddress(ip)),
                Err(_) => name.clone().try_into().map(SanType::DnsName),
            })
            .collect::<Result<Vec<_>, rcgen::Error>>()
            .map_err(|e| SignError::Signing(e.to_string()))?;
        let mut params = leaf_params(sans, ttl, self.signer_not_after)?;
        params.distinguished_name.push(DnType::OrganizationName, self.trust_domain.clone());
        let cert = params.signed_by(key, &self.issuer).map_err(|e| SignError::Signing(e.to_string()))?;
        Ok(self.issued(cert.pem(), params.not_after.into()))
    }

    fn issued(&self, cert: String, not_after: SystemTime) -> Issued {
        let mut chain = vec![cert];
        chain.extend(self.chain_pem.iter().cloned());
        chain.push(self.roots_pem.clone());
        Issued { chain, not_after }
    }
}

/// The parameters every issued leaf shares; `sans` are its names.
fn leaf_params(
    sans: Vec<SanType>,
    ttl: Duration,
    signer_not_after: SystemTime,
) -> Result<CertificateParams, SignError> {
    let now = SystemTime::now();
    if signer_not_after <= now {
        return Err(SignError::Expired);
    }
    let mut params = CertificateParams::default();
    params.subject_alt_names = sans;
    params.distinguished_name = DistinguishedName::new();
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
    params.serial_number = Some(random_serial());
    params.not_before = (now - CLOCK_SKEW).into();
    params.not_after = (now + ttl).min(signer_not_after).into();
    params.use_authority_key_identifier_extension = true;
    Ok(params)
}

/// A positive, random 128-bit serial number.
fn random_serial() -> SerialNumber {
    let mut bytes = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes).expect("the system's random source");
    bytes[0] &= 0x7f;
    SerialNumber::from_slice(&bytes)
}

/// A SAN as text, for a refusal.
fn san_text(san: &SanType) -> String {
    match san {
        SanType::URI(uri) => uri.as_str().to_string(),
        SanType::DnsName(name) => format!("DNS name {}", name.as_str()),
        SanType::IpAddress(ip) => format!("IP address {ip}"),
        SanType::Rfc822Name(name) => format!("email {}", name.as_str()),
        other => format!("{other:?}"),
    }
}

/// Every PEM certificate in `text`.
fn certificates(text: &[u8]) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(text).filter_map(Result::ok).collect()
}

fn pem_of(cert: &CertificateDer<'_>) -> String {
    crate::config::mesh::trust_anchors::certificate_pem(cert.as_ref())
}

/// The signer must be a CA allowed to sign certificates, valid now; its expiry.
fn check_signer(cert: &CertificateDer<'_>) -> Result<SystemTime, String> {
    let (_, x509) = x509_parser::parse_x509_certificate(cert).map_err(|e| format!("not an X.509 certificate: {e}"))?;
    if !x509.is_ca() {
        return Err(
            "the certificate is not a CA (basicConstraints CA:TRUE): it cannot sign workload certificates".into()
        );
    }
    if let Ok(Some(usage)) = x509.key_usage()
        && !usage.value.key_cert_sign()
    {
        return Err("the certificate's key usage does not allow signing certificates (keyCertSign)".into());
    }
    let not_after = x509.validity().not_after.to_datetime();
    let not_after =
        SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(not_after.unix_timestamp()).unwrap_or(0));
    if not_after <= SystemTime::now() {
        return Err(format!("the certificate expired at {}", x509.validity().not_after));
    }
    Ok(not_after)
}

fn signer_key_matches(cert: &CertificateDer<'_>, key: &KeyPair) -> bool {
    use rcgen::PublicKeyData as _;
    x509_parser::parse_x509_certificate(cert)
        .is_ok_and(|(_, x509)| x509.public_key().subject_public_key.data.as_ref() == key.der_bytes())
}

/// A CA's key material in Istio's plug-in layout, as files or a Secret's
/// keys hold it. `Debug` shows no key.
#[derive(Clone, Default)]
pub struct CaMaterial {
    /// `ca-cert.pem`.
    pub signer_pem: Vec<u8>,
    /// `ca-key.pem`.
    pub key_pem: Vec<u8>,
    /// `root-cert.pem`.
    pub roots_pem: Vec<u8>,
    /// `cert-chain.pem` (empty when the signer is the root).
    pub chain_pem: Vec<u8>,
}

impl fmt::Debug for CaMaterial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaMaterial").field("key", &"[redacted]").finish_non_exhaustive()
    }
}

impl CaMaterial {
    /// The file names of the plug-in layout, each with its bytes.
    pub fn files(&self) -> [(&'static str, &[u8]); 4] {
        [
            (CA_CERT, &self.signer_pem),
            (CA_KEY, &self.key_pem),
            (ROOT_CERT, &self.roots_pem),
            (CERT_CHAIN, &self.chain_pem),
        ]
    }

    /// The material of `dir`; `None` when it holds none of the plug-in
    /// files, an error when it holds some and not all.
    pub fn read(dir: &Path) -> Result<Option<CaMaterial>, LoadError> {
        let files = [CA_CERT, CA_KEY, ROOT_CERT];
        let present: Vec<&str> = files.iter().copied().filter(|f| dir.join(f).exists()).collect();
        match present.len() {
            0 => return Ok(None),
            3 => {}
            _ => {
                let missing: Vec<&str> = files.iter().copied().filter(|f| !present.contains(f)).collect();
                return Err(LoadError::Incomplete {
                    dir: dir.to_path_buf(),
                    present: present.join(", "),
                    missing: missing.join(", "),
                });
            }
        }
        let read =
            |name: &str| std::fs::read(dir.join(name)).map_err(|source| LoadError::Io { path: dir.join(name), source });
        let chain_pem = match std::fs::read(dir.join(CERT_CHAIN)) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(source) => return Err(LoadError::Io { path: dir.join(CERT_CHAIN), source }),
        };
        Ok(Some(CaMaterial {
            signer_pem: read(CA_CERT)?,
            key_pem: read(CA_KEY)?,
            roots_pem: read(ROOT_CERT)?,
            chain_pem,
        }))
    }

    /// A new self-signed root, as istiod's self-signed CA makes one.
    pub fn self_signed(trust_domain: &str) -> Result<CaMaterial, LoadError> {
        let key = KeyPair::generate().map_err(LoadError::Generate)?;
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::OrganizationName, trust_domain);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        params.serial_number = Some(random_serial());
        let now = SystemTime::now();
        params.not_before = (now - CLOCK_SKEW).into();
        params.not_after = (now + SELF_SIGNED_ROOT_TTL).into();
        let cert = params.self_signed(&key).map_err(LoadError::Generate)?;
        Ok(CaMaterial {
            signer_pem: cert.pem().into_bytes(),
            key_pem: key.serialize_pem().into_bytes(),
            roots_pem: cert.pem().into_bytes(),
            chain_pem: Vec::new(),
        })
    }

    /// Writes it into `dir` (which must hold none of the plug-in files),
    /// the key with mode 0600.
    fn write(&self, dir: &Path) -> Result<(), LoadError> {
        let io = |path: PathBuf| move |source| LoadError::Io { path, source };
        std::fs::create_dir_all(dir).map_err(io(dir.to_path_buf()))?;
        write_private(&dir.join(CA_KEY), &self.key_pem).map_err(io(dir.join(CA_KEY)))?;
        std::fs::write(dir.join(CA_CERT), &self.signer_pem).map_err(io(dir.join(CA_CERT)))?;
        std::fs::write(dir.join(ROOT_CERT), &self.roots_pem).map_err(io(dir.join(ROOT_CERT)))?;
        Ok(())
    }
}

/// Writes `bytes` to a new file only its owner may read.
fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csr(key: &KeyPair, sans: &[&str]) -> String {
        let mut params = CertificateParams::default();
        params.subject_alt_names = sans.iter().map(|s| SanType::URI((*s).try_into().unwrap())).collect();
        params.serialize_request(key).unwrap().pem().unwrap()
    }

    fn id(s: &str) -> Identity {
        s.parse().unwrap()
    }

    fn parsed(pem: &str) -> x509_parser::pem::Pem {
        x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap().1
    }

    #[test]
    fn an_empty_directory_gets_a_self_signed_root_that_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let ca = CertificateAuthority::open(dir.path(), "example.org", Lifetimes::default()).unwrap();
        assert!(ca.created_root());
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(dir.path().join(CA_KEY)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let again = CertificateAuthority::open(dir.path(), "example.org", Lifetimes::default()).unwrap();
        assert!(!again.created_root());
        assert_eq!(again.roots_pem(), ca.roots_pem(), "a restart keeps the root");
        let root = parsed(ca.roots_pem());
        let root = root.parse_x509().unwrap();
        assert!(root.is_ca());
        assert_eq!(root.subject().iter_organization().next().unwrap().as_str().unwrap(), "example.org");
        assert!(!format!("{ca:?}").contains("PRIVATE"), "{ca:?}");
    }

    #[test]
    fn a_workload_certificate_names_the_callers_identity_and_chains_to_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let ca = CertificateAuthority::open(dir.path(), "cluster.local", Lifetimes::default()).unwrap();
        let key = KeyPair::generate().unwrap();
        let sleep = id("spiffe://cluster.local/ns/default/sa/sleep");
        let issued = ca.sign_workload(&csr(&key, &[]), std::slice::from_ref(&sleep), Duration::ZERO).unwrap();
        assert_eq!(issued.chain.len(), 2, "leaf, root");
        assert_eq!(issued.chain[1], ca.roots_pem());
        let leaf = parsed(&issued.chain[0]);
        let leaf = leaf.parse_x509().unwrap();
        let sans = leaf.subject_alternative_name().unwrap().unwrap();
        assert!(sans.critical, "no subject: the SAN is critical");
        assert_eq!(format!("{:?}", sans.value.general_names), r#"[URI("spiffe://cluster.local/ns/default/sa/sleep")]"#);
        assert!(leaf.subject().as_raw().len() <= 2, "empty subject");
        assert!(!leaf.is_ca());
        let lifetime = leaf.validity().not_after.timestamp() - leaf.validity().not_before.timestamp();
        assert_eq!(lifetime, 24 * 3600 + 60, "24 h, from a minute back");
        assert_eq!(leaf.public_key().subject_public_key.data.as_ref(), rcgen::PublicKeyData::der_bytes(&key));
        let root = parsed(ca.roots_pem());
        leaf.verify_signature(Some(root.parse_x509().unwrap().public_key())).unwrap();
    }

    #[test]
    fn a_csr_for_an_identity_not_held_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ca = CertificateAuthority::open(dir.path(), "cluster.local", Lifetimes::default()).unwrap();
        let key = KeyPair::generate().unwrap();
        let held = [id("spiffe://cluster.local/ns/default/sa/sleep")];
        let ok = csr(&key, &["spiffe://cluster.local/ns/default/sa/sleep"]);
        assert!(ca.sign_workload(&ok, &held, Duration::ZERO).is_ok());
        let other = csr(&key, &["spiffe://cluster.local/ns/istio-system/sa/istiod"]);
        let err = ca.sign_workload(&other, &held, Duration::ZERO).unwrap_err();
        assert!(matches!(err, SignError::NotHeld { .. }), "{err}");
        assert!(err.to_string().contains("ns/istio-system/sa/istiod"), "{err}");
        assert_eq!(ca.sign_workload(&ok, &[], Duration::ZERO).unwrap_err(), SignError::NoIdentity);
        let err = ca.sign_workload(
            "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n",
            &held,
            Duration::ZERO,
        );
        assert!(matches!(err, Err(SignError::BadCsr(_))), "{err:?}");
        let err = ca.sign_workload(&ok, &held, Duration::from_secs(91 * 24 * 3600)).unwrap_err();
        assert!(matches!(err, SignError::Ttl { .. }), "{err}");
    }

    #[test]
    fn istios_plug_in_sample_signs_as_an_intermediate() {
        let dir = tempfile::tempdir().unwrap();
        let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/istio/samples/certs");
        for f in [CA_CERT, CA_KEY, ROOT_CERT, CERT_CHAIN] {
            std::fs::copy(sample.join(f), dir.path().join(f)).unwrap();
        }
        let ca = CertificateAuthority::open(dir.path(), "cluster.local", Lifetimes::default()).unwrap();
        assert!(!ca.created_root());
        let key = KeyPair::generate().unwrap();
        let issued = ca
            .sign_workload(&csr(&key, &[]), &[id("spiffe://cluster.local/ns/foo/sa/bar")], Duration::from_secs(3600))
            .unwrap();
        assert_eq!(issued.chain.len(), 3, "leaf, cert-chain.pem's intermediate, root");
        let leaf = parsed(&issued.chain[0]);
        let signer = parsed(ca.signer_pem());
        leaf.parse_x509().unwrap().verify_signature(Some(signer.parse_x509().unwrap().public_key())).unwrap();
    }

    #[test]
    fn a_partial_or_wrong_directory_is_refused_with_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(CA_CERT), "x").unwrap();
        let err = CertificateAuthority::open(dir.path(), "td", Lifetimes::default()).unwrap_err();
        assert!(err.to_string().contains("not ca-key.pem, root-cert.pem"), "{err}");

        // A leaf is not a signer.
        let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/istio/samples/certs");
        let other = tempfile::tempdir().unwrap();
        let self_signed = CertificateAuthority::open(other.path(), "td", Lifetimes::default()).unwrap();
        let key = KeyPair::generate().unwrap();
        let leaf = self_signed.sign_server(&key, &["x.example".into()], Duration::from_secs(60)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(CA_CERT), &leaf.chain[0]).unwrap();
        std::fs::write(dir.path().join(CA_KEY), key.serialize_pem()).unwrap();
        std::fs::copy(sample.join(ROOT_CERT), dir.path().join(ROOT_CERT)).unwrap();
        let err = CertificateAuthority::open(dir.path(), "td", Lifetimes::default()).unwrap_err();
        assert!(err.to_string().contains("not a CA"), "{err}");
        assert!(!err.to_string().contains("PRIVATE"), "{err}");

        // A key that is not the certificate's.
        std::fs::copy(sample.join(CA_CERT), dir.path().join(CA_CERT)).unwrap();
        let err = CertificateAuthority::open(dir.path(), "td", Lifetimes::default()).unwrap_err();
        assert!(err.to_string().contains("is not the key of ca-key.pem"), "{err}");
    }
}
