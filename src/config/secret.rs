//! `v1 Secret`: the certificates and keys a Gateway's `credentialName`
//! (and a DestinationRule's) names.
//!
//! Only the keys Istio reads are kept: `tls.crt`, `tls.key`, `ca.crt`,
//! `ca.crl` (`kubernetes.io/tls`), and `cert`, `key`, `cacert`, `crl` (the
//! generic form); `stringData` is folded into `data` as the API server
//! does. Other keys are dropped on parse.
//!
//! Invariant: a Secret's values never leave this type in readable form
//! except through [`Secret::material`], which the SDS generator alone calls.
//! `Debug` and `Serialize` (every debug view: `/debug/configz`, logs) show
//! each key with its size and, for certificates, nothing more.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::ObjectMeta;

/// The data keys Istio reads, in the two forms a Secret may take.
pub const KEYS: [&str; 8] = ["tls.crt", "tls.key", "ca.crt", "ca.crl", "cert", "key", "cacert", "crl"];

/// `v1 Secret`.
#[derive(Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Secret {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// `kubernetes.io/tls`, `Opaque`, … (Istio reads the keys whatever the type).
    #[serde(rename = "type")]
    pub secret_type: Option<String>,
    /// The values, decoded from base64, of the keys in [`KEYS`].
    #[serde(deserialize_with = "base64_values")]
    pub data: BTreeMap<String, SecretValue>,
    /// Plain-text values; folded into `data` by [`Secret::normalize`].
    #[serde(deserialize_with = "string_values")]
    pub string_data: BTreeMap<String, SecretValue>,
}

/// One value of a Secret. Its bytes are shown nowhere.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SecretValue(pub bytes::Bytes);

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{} bytes>", self.0.len())
    }
}

impl Serialize for SecretValue {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("<redacted: {} bytes>", self.0.len()))
    }
}

fn base64_values<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, SecretValue>, D::Error> {
    let raw: Option<BTreeMap<String, Option<String>>> = Option::deserialize(d)?;
    let mut out = BTreeMap::new();
    for (key, value) in raw.unwrap_or_default() {
        if !KEYS.contains(&key.as_str()) {
            continue;
        }
        // Kubernetes writes base64 on one line; files written by hand may wrap it.
        let text: String = value.unwrap_or_default().chars().filter(|c| !c.is_ascii_whitespace()).collect();
        // The error names the key only: the value may be a private key.
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text.as_bytes())
            .map_err(|_| serde::de::Error::custom(format!("data.{key} is not base64")))?;
        out.insert(key, SecretValue(bytes.into()));
    }
    Ok(out)
}

fn string_values<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, SecretValue>, D::Error> {
    let raw: Option<BTreeMap<String, Option<String>>> = Option::deserialize(d)?;
    Ok(raw
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| KEYS.contains(&k.as_str()))
        .map(|(k, v)| (k, SecretValue(v.unwrap_or_default().into_bytes().into())))
        .collect())
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secret")
            .field("metadata", &self.metadata)
            .field("type", &self.secret_type)
            .field("data", &self.data)
            .finish()
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut out = s.serialize_struct("Secret", 3)?;
        out.serialize_field("metadata", &self.metadata)?;
        out.serialize_field("type", &self.secret_type)?;
        out.serialize_field("data", &self.data)?;
        out.end()
    }
}

/// What a Secret holds for TLS, read as Istio reads it.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TlsMaterial {
    /// Certificate chain and private key (`cert`/`key`, else `tls.crt`/`tls.key`).
    pub identity: Option<(bytes::Bytes, bytes::Bytes)>,
    /// The CA bundle (`cacert`, else `ca.crt`).
    pub ca: Option<bytes::Bytes>,
    /// The revocation list that goes with the CA (`crl`, else `ca.crl`).
    pub crl: Option<bytes::Bytes>,
}

impl fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsMaterial")
            .field("identity", &self.identity.is_some())
            .field("ca", &self.ca.is_some())
            .field("crl", &self.crl.is_some())
            .finish()
    }
}

impl TlsMaterial {
    /// Whether the certificate and key can serve: a PEM chain and a PEM key
    /// that parse, the key the first certificate's (what Istio checks of a
    /// Gateway API listener's Secret before serving it). `Err` says what is
    /// wrong, never the material.
    pub fn check_identity(&self) -> Result<(), String> {
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let (chain, key) = self.identity.as_ref().ok_or("no certificate and key")?;
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(chain)
            .collect::<Result<_, _>>()
            .map_err(|_| "the certificate is not PEM".to_string())?;
        if chain.is_empty() {
            return Err("the certificate holds no PEM certificate".to_string());
        }
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|_| "the key is not a PEM private key".to_string())?;
        let provider = rustls::crypto::ring::default_provider();
        rustls::sign::CertifiedKey::from_der(chain, key, &provider)
            .map(drop)
            .map_err(|e| format!("the certificate and key do not make a pair ({e})"))
    }
}

impl Secret {
    /// Folds `stringData` into `data` (a `stringData` key wins, as in Kubernetes).
    pub fn normalize(&mut self) {
        for (k, v) in std::mem::take(&mut self.string_data) {
            self.data.insert(k, v);
        }
    }

    fn value(&self, key: &str) -> Option<&bytes::Bytes> {
        self.data.get(key).map(|v| &v.0).filter(|v| !v.is_empty())
    }

    /// The Secret's TLS material. The generic keys win over the
    /// `kubernetes.io/tls` ones when both pairs are set, as in Istio.
    pub fn material(&self) -> TlsMaterial {
        let pair = |cert: &str, key: &str| Some((self.value(cert)?.clone(), self.value(key)?.clone()));
        let generic = pair("cert", "key");
        let crl = if generic.is_some() { self.value("crl") } else { self.value("ca.crl") };
        TlsMaterial {
            identity: generic.or_else(|| pair("tls.crt", "tls.key")),
            ca: self.value("cacert").or_else(|| self.value("ca.crt")).cloned(),
            crl: crl.or_else(|| self.value("crl")).cloned(),
        }
    }

    /// The keys set, for messages (never their values).
    pub fn keys(&self) -> Vec<&str> {
        self.data.keys().map(String::as_str).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Secret {
        let mut s: Secret = serde_yaml_ng::from_str(yaml).expect("a secret");
        s.normalize();
        s
    }

    #[test]
    fn values_are_decoded_and_never_shown() {
        let s = parse(
            "metadata: {name: gw}\ntype: kubernetes.io/tls\ndata: {tls.crt: Q0VSVA==, tls.key: S0VZLUJZVEVT, other: eA==}\n",
        );
        let m = s.material();
        let (cert, key) = m.identity.clone().expect("a pair");
        assert_eq!((&cert[..], &key[..]), (&b"CERT"[..], &b"KEY-BYTES"[..]));
        assert_eq!(s.keys(), ["tls.crt", "tls.key"], "keys Istio does not read are dropped");
        for shown in [format!("{s:?}"), serde_json::to_string(&s).unwrap(), format!("{m:?}")] {
            assert!(!shown.contains("KEY-BYTES") && !shown.contains("S0VZLUJZVEVT"), "{shown}");
        }
    }

    #[test]
    fn string_data_and_the_generic_form_are_read_as_istio_reads_them() {
        let s = parse(
            "metadata: {name: gw}\ndata: {tls.crt: QQ==, tls.key: Qg==}\nstringData: {cert: C, key: K, cacert: CA}\n",
        );
        let m = s.material();
        assert_eq!(m.identity.map(|(c, k)| (c.to_vec(), k.to_vec())), Some((b"C".to_vec(), b"K".to_vec())));
        assert_eq!(m.ca.as_deref(), Some(&b"CA"[..]));
        assert!(serde_yaml_ng::from_str::<Secret>("data: {tls.crt: '***'}\n").is_err(), "not base64");
    }
}
