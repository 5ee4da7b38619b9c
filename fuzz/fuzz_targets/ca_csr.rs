//! Any bytes, as the CSR of a certificate request: the CA signs it only
//! when every SAN it asks for is an identity the caller holds, the
//! certificate then names exactly those, and a refusal stays short (it
//! reaches the caller's status and the CA's log).
//!
//! The first byte picks the reading: 0 hands the rest over as the PEM text
//! a caller sends; anything else wraps the rest as the DER inside a
//! `CERTIFICATE REQUEST` PEM block, so the fuzzer works on the DER parser.
#![no_main]

use std::sync::OnceLock;
use std::time::Duration;

use base64::Engine as _;
use libfuzzer_sys::fuzz_target;
use meshpush::ca::{CertificateAuthority, Lifetimes};
use meshpush::model::Identity;
use rustls_pki_types::pem::PemObject as _;

/// The one CA every input goes to: a self-signed root in a directory of
/// this process's own.
fn authority() -> &'static CertificateAuthority {
    static CA: OnceLock<CertificateAuthority> = OnceLock::new();
    CA.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("meshpush-fuzz-ca-{}", std::process::id()));
        CertificateAuthority::open(&dir, "cluster.local", Lifetimes::default()).expect("a self-signed CA")
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let csr = if mode == 0 {
        String::from_utf8_lossy(rest).into_owned()
    } else {
        let body = base64::engine::general_purpose::STANDARD.encode(rest);
        format!("-----BEGIN CERTIFICATE REQUEST-----\n{body}\n-----END CERTIFICATE REQUEST-----\n")
    };
    let held: Identity = "spiffe://cluster.local/ns/default/sa/sleep".parse().unwrap();
    match authority().sign_workload(&csr, std::slice::from_ref(&held), Duration::from_secs(3600)) {
        Ok(issued) => {
            let leaf = rustls_pki_types::CertificateDer::from_pem_slice(issued.chain[0].as_bytes()).expect("a PEM leaf");
            assert_eq!(meshpush::ca::tls::identities_of(&leaf), [held], "the certificate names the caller's identity alone");
        }
        Err(e) => {
            let message = e.to_string();
            assert!(message.len() <= 1024, "a {}-byte refusal for a {}-byte CSR", message.len(), csr.len());
        }
    }
});
