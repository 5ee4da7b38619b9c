//! Reading private keys as operators have them: PEM in any of the three
//! forms openssl writes — PKCS#8 (`PRIVATE KEY`), PKCS#1 (`RSA PRIVATE
//! KEY`, what `openssl genrsa` and Istio's `samples/certs` hold) and SEC1
//! (`EC PRIVATE KEY`). The signing code (ring, through rcgen) takes PKCS#8
//! only, so the other two are wrapped into PKCS#8 first: the key itself is
//! the same bytes, inside a `PrivateKeyInfo` that names its algorithm.
//!
//! A key's bytes never reach a message: errors name the file and the form.

use rcgen::KeyPair;
use rustls_pki_types::PrivateKeyDer;
use rustls_pki_types::pem::PemObject as _;

/// `rsaEncryption` (RFC 8017).
const RSA_ENCRYPTION: &[u64] = &[1, 2, 840, 113549, 1, 1, 1];
/// `id-ecPublicKey` (RFC 5480).
const EC_PUBLIC_KEY: &[u64] = &[1, 2, 840, 10045, 2, 1];

/// A private key that cannot be used to sign.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// No PEM private key in the text.
    #[error("no PEM private key (PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY) found")]
    NoKey,
    /// A SEC1 key without its curve.
    #[error("the EC PRIVATE KEY does not name its curve; convert it with `openssl pkcs8 -topk8 -nocrypt`")]
    NoCurve,
    /// A key of an algorithm or size ring cannot sign with.
    #[error("the key cannot sign (supported: RSA of 2048 to 8192 bits, ECDSA P-256 and P-384, Ed25519): {0}")]
    Unsupported(rcgen::Error),
}

/// The signing key in `pem`.
pub fn key_pair_from_pem(pem: &[u8]) -> Result<KeyPair, KeyError> {
    let der = PrivateKeyDer::from_pem_slice(pem).map_err(|_| KeyError::NoKey)?;
    let pkcs8 = match &der {
        PrivateKeyDer::Pkcs8(key) => key.secret_pkcs8_der().to_vec(),
        PrivateKeyDer::Pkcs1(key) => wrap_pkcs8(RSA_ENCRYPTION, None, key.secret_pkcs1_der()),
        PrivateKeyDer::Sec1(key) => {
            let curve = sec1_curve(key.secret_sec1_der()).ok_or(KeyError::NoCurve)?;
            wrap_pkcs8(EC_PUBLIC_KEY, Some(&curve), key.secret_sec1_der())
        }
        _ => return Err(KeyError::NoKey),
    };
    KeyPair::try_from(pkcs8.as_slice()).map_err(KeyError::Unsupported)
}

/// A `PrivateKeyInfo` (RFC 5208) holding `key` of `algorithm`; EC keys
/// name their curve as the algorithm's parameter, RSA keys have NULL.
fn wrap_pkcs8(algorithm: &[u64], curve: Option<&yasna::models::ObjectIdentifier>, key: &[u8]) -> Vec<u8> {
    yasna::construct_der(|writer| {
        writer.write_sequence(|seq| {
            seq.next().write_u8(0);
            seq.next().write_sequence(|alg| {
                alg.next().write_oid(&yasna::models::ObjectIdentifier::from_slice(algorithm));
                match curve {
                    Some(curve) => alg.next().write_oid(curve),
                    None => alg.next().write_null(),
                }
            });
            seq.next().write_bytes(key);
        })
    })
}

/// The named curve of a SEC1 `ECPrivateKey` (RFC 5915): its `[0]` parameters.
fn sec1_curve(der: &[u8]) -> Option<yasna::models::ObjectIdentifier> {
    yasna::parse_der(der, |reader| {
        reader.read_sequence(|seq| {
            let _version = seq.next().read_u8()?;
            let _key = seq.next().read_bytes()?;
            let curve = seq.read_optional(|r| r.read_tagged(yasna::Tag::context(0), |r| r.read_oid()))?;
            let _public = seq.read_optional(|r| r.read_tagged(yasna::Tag::context(1), |r| r.read_bitvec_bytes()))?;
            Ok(curve)
        })
    })
    .ok()
    .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same P-256 key in the SEC1 form, from its PKCS#8 form: the
    /// inner `ECPrivateKey` with the curve added as `[0]`.
    fn sec1_of(pkcs8: &[u8]) -> Vec<u8> {
        let inner = yasna::parse_der(pkcs8, |r| {
            r.read_sequence(|seq| {
                seq.next().read_u8()?;
                seq.next().read_sequence(|alg| {
                    alg.next().read_oid()?;
                    alg.next().read_oid()
                })?;
                seq.next().read_bytes()
            })
        })
        .unwrap();
        // ring's PKCS#8 ECPrivateKey holds version, key and [1] public key;
        // SEC1 as openssl writes it adds [0] the curve before [1].
        let (version, key, public) = yasna::parse_der(&inner, |r| {
            r.read_sequence(|seq| {
                let v = seq.next().read_u8()?;
                let k = seq.next().read_bytes()?;
                let p = seq.next().read_tagged(yasna::Tag::context(1), |r| r.read_bitvec_bytes())?;
                Ok((v, k, p))
            })
        })
        .unwrap();
        yasna::construct_der(|w| {
            w.write_sequence(|seq| {
                seq.next().write_u8(version);
                seq.next().write_bytes(&key);
                seq.next().write_tagged(yasna::Tag::context(0), |w| {
                    w.write_oid(&yasna::models::ObjectIdentifier::from_slice(&[1, 2, 840, 10045, 3, 1, 7]))
                });
                seq.next().write_tagged(yasna::Tag::context(1), |w| w.write_bitvec_bytes(&public.0, public.1));
            })
        })
    }

    fn pem(label: &str, der: &[u8]) -> String {
        use base64::Engine as _;
        let body = base64::engine::general_purpose::STANDARD.encode(der);
        let lines: Vec<&str> = body.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).unwrap()).collect();
        format!("-----BEGIN {label}-----\n{}\n-----END {label}-----\n", lines.join("\n"))
    }

    #[test]
    fn pkcs8_and_sec1_forms_give_the_same_key() {
        let key = KeyPair::generate().unwrap();
        let from_pkcs8 = key_pair_from_pem(key.serialize_pem().as_bytes()).unwrap();
        assert_eq!(from_pkcs8.public_key_raw(), key.public_key_raw());
        let sec1 = pem("EC PRIVATE KEY", &sec1_of(&key.serialize_der()));
        let from_sec1 = key_pair_from_pem(sec1.as_bytes()).unwrap();
        assert_eq!(from_sec1.public_key_raw(), key.public_key_raw());
    }

    #[test]
    fn istios_sample_pkcs1_rsa_key_signs() {
        // samples/certs/ca-key.pem of istio/istio (Apache 2.0): a PKCS#1 RSA key.
        let text =
            std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/istio/samples/certs/ca-key.pem")).unwrap();
        assert!(String::from_utf8_lossy(&text).contains("BEGIN RSA PRIVATE KEY"));
        let key = key_pair_from_pem(&text).unwrap();
        assert!(key.is_compatible(&rcgen::PKCS_RSA_SHA256));
    }

    #[test]
    fn what_is_not_a_key_says_so_without_showing_it() {
        let err = key_pair_from_pem(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").unwrap_err();
        assert!(matches!(err, KeyError::NoKey), "{err}");
        let sec1_without_curve = pem(
            "EC PRIVATE KEY",
            &yasna::construct_der(|w| {
                w.write_sequence(|seq| {
                    seq.next().write_u8(1);
                    seq.next().write_bytes(&[7; 32]);
                })
            }),
        );
        assert!(matches!(key_pair_from_pem(sec1_without_curve.as_bytes()).unwrap_err(), KeyError::NoCurve));
    }
}
