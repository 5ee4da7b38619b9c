//! Secrets by namespace and name, and how SDS resource names resolve to them.
//!
//! A gateway names a certificate by its `credentialName`; Envoy asks for it
//! over SDS as `kubernetes://NAME` (or `kubernetes://NS/NAME`), and for the
//! CA that checks clients as `kubernetes://NAME-cacert`. Istio's rules,
//! which [`SecretIndex::resolve`] keeps:
//!
//! * a name resolves in the proxy's own namespace, and a proxy reads no
//!   other namespace's Secrets;
//! * `NAME-cacert` is the CA of Secret `NAME-cacert` when that Secret
//!   exists, else the CA (`cacert`, or `ca.crt`) of Secret `NAME`;
//! * any other name is the certificate and key of Secret `NAME`;
//! * a sidecar reads CAs only (Istio's default: a workload's service
//!   account may not read Secrets, and a CA is not one);
//! * `kubernetes-gateway://NS/NAME` is what a Gateway API listener's
//!   `certificateRefs` become: a Secret of the gateway's own namespace, or
//!   of `NS` when a ReferenceGrant in `NS` lets the Gateways of the
//!   proxy's namespace refer to it (Istio's rule for that scheme).
//!
//! Invariant: the index holds each Secret's material once, shared by
//! every snapshot until a Secret changes.

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::gateway_api;
use crate::config::secret::TlsMaterial;
use crate::config::{ConfigKind, ConfigObject};
use crate::model::StoreSnapshot;

/// The scheme of the SDS names Istio gives Kubernetes Secrets.
pub const KUBERNETES_SCHEME: &str = "kubernetes://";
/// The scheme of a Gateway API listener's certificate (`NS/NAME`), which
/// may name another namespace's Secret when a ReferenceGrant allows it.
pub const KUBERNETES_GATEWAY_SCHEME: &str = "kubernetes-gateway://";

/// The suffix of the SDS name of a credential's CA.
pub const CA_SUFFIX: &str = "-cacert";

/// The SDS resource name of a `credentialName` (`kubernetes://NAME`; a
/// name that already has the scheme is kept).
pub fn resource_name(credential: &str) -> String {
    if credential.starts_with(KUBERNETES_SCHEME) || credential.starts_with(KUBERNETES_GATEWAY_SCHEME) {
        credential.to_string()
    } else {
        format!("{KUBERNETES_SCHEME}{credential}")
    }
}

/// The SDS resource name of the CA that goes with a `credentialName`.
pub fn ca_resource_name(credential: &str) -> String {
    format!("{}{CA_SUFFIX}", resource_name(credential))
}

/// What an SDS name resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// A certificate chain and its private key.
    Identity {
        /// PEM certificate chain.
        certificate_chain: bytes::Bytes,
        /// PEM private key.
        private_key: bytes::Bytes,
    },
    /// A CA bundle (and the revocation list that goes with it).
    Ca {
        /// PEM certificates.
        trusted_ca: bytes::Bytes,
        /// PEM CRL, when the Secret has one.
        crl: Option<bytes::Bytes>,
    },
}

/// Why an SDS name does not resolve, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unresolved {
    /// Not a `kubernetes://` name.
    Scheme,
    /// Names a Secret of another namespace than the proxy's.
    OtherNamespace,
    /// A sidecar asked for a certificate and key.
    KeyDenied,
    /// No such Secret, or it lacks what the name asks for.
    Missing,
}

/// Who asks: which Secrets of its namespace a proxy may read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reader {
    /// A gateway: every Secret of its namespace.
    Router,
    /// A sidecar: CA bundles only.
    Sidecar,
}

/// Secrets' TLS material by `(namespace, name)`, and which Secrets of other
/// namespaces ReferenceGrants open to Gateways.
#[derive(Debug, Default)]
pub struct SecretIndex {
    by_key: HashMap<(Arc<str>, Arc<str>), TlsMaterial>,
    /// `(Gateways' namespace, Secret's namespace, Secret's name or every
    /// Secret)` of each ReferenceGrant entry letting Gateways refer to Secrets.
    granted: Vec<(String, String, Option<String>)>,
}

impl SecretIndex {
    /// Builds the index.
    pub fn build(snapshot: &StoreSnapshot) -> SecretIndex {
        let by_key = snapshot
            .kind(ConfigKind::Secret)
            .values()
            .filter_map(|stored| match &*stored.object {
                ConfigObject::Secret(secret) => {
                    let key = stored.object.key();
                    Some(((key.namespace, key.name), secret.material()))
                }
                _ => None,
            })
            .collect();
        let mut granted = Vec::new();
        for stored in snapshot.kind(ConfigKind::ReferenceGrant).values() {
            let ConfigObject::ReferenceGrant(grant) = &*stored.object else { continue };
            let from = grant.spec.from.iter().filter(|f| f.group == gateway_api::GROUP && f.kind == "Gateway");
            for f in from {
                for t in grant.spec.to.iter().filter(|t| t.group.is_empty() && t.kind == "Secret") {
                    let name = t.name.clone().filter(|n| !n.is_empty());
                    granted.push((f.namespace.clone(), grant.metadata.namespace().to_string(), name));
                }
            }
        }
        SecretIndex { by_key, granted }
    }

    /// Whether a ReferenceGrant lets the Gateways of `from` use Secret `namespace/name`.
    fn grants(&self, from: &str, namespace: &str, name: &str) -> bool {
        self.granted.iter().any(|(f, ns, n)| f == from && ns == namespace && n.as_deref().is_none_or(|n| n == name))
    }

    fn get(&self, namespace: &str, name: &str) -> Option<&TlsMaterial> {
        self.by_key.get(&(Arc::from(namespace), Arc::from(name)))
    }

    /// What SDS name `name` gives a `reader` of namespace `namespace`.
    pub fn resolve(&self, namespace: &str, reader: Reader, name: &str) -> Result<Resolved, Unresolved> {
        let (owner, secret) = if let Some(rest) = name.strip_prefix(KUBERNETES_GATEWAY_SCHEME) {
            let (ns, secret) = rest.split_once('/').ok_or(Unresolved::Scheme)?;
            let base = secret.strip_suffix(CA_SUFFIX).unwrap_or(secret);
            if ns != namespace && (reader != Reader::Router || !self.grants(namespace, ns, base)) {
                return Err(Unresolved::OtherNamespace);
            }
            (ns, secret)
        } else {
            let rest = name.strip_prefix(KUBERNETES_SCHEME).ok_or(Unresolved::Scheme)?;
            match rest.split_once('/') {
                Some((ns, secret)) if ns == namespace => (namespace, secret),
                Some(_) => return Err(Unresolved::OtherNamespace),
                None => (namespace, rest),
            }
        };
        let namespace = owner;
        if let Some(base) = secret.strip_suffix(CA_SUFFIX) {
            let ca = |material: &TlsMaterial| {
                let trusted_ca = material.ca.clone()?;
                Some(Resolved::Ca { trusted_ca, crl: material.crl.clone() })
            };
            return match self.get(namespace, secret) {
                Some(own) => ca(own),
                None => self.get(namespace, base).and_then(ca),
            }
            .ok_or(Unresolved::Missing);
        }
        if reader == Reader::Sidecar {
            return Err(Unresolved::KeyDenied);
        }
        let (certificate_chain, private_key) =
            self.get(namespace, secret).and_then(|m| m.identity.clone()).ok_or(Unresolved::Missing)?;
        Ok(Resolved::Identity { certificate_chain, private_key })
    }

    /// Number of Secrets.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ConfigStore;
    use crate::testing::{bookinfo, certs};

    fn index(yaml: &str) -> SecretIndex {
        let store = ConfigStore::new();
        store.apply(bookinfo::puts(yaml));
        SecretIndex::build(&store.snapshot())
    }

    /// `shop` (kubernetes.io/tls with its CA), `bank` (generic keys) and
    /// `bank-cacert` (a CA of its own); returns the PEMs by role.
    fn secrets() -> (String, [String; 6]) {
        let (ca, issuer) = certs::ca("test CA");
        let (bank_ca, _) = certs::ca("bank CA");
        let (cert, key) = certs::leaf(&issuer, &["shop.example.test"]);
        let (bank, bank_key) = certs::leaf(&issuer, &["bank.example.test"]);
        let block =
            |k: &str, v: &str| format!("  {k}: |\n{}", v.lines().map(|l| format!("    {l}\n")).collect::<String>());
        let yaml = format!(
            "{}---\napiVersion: v1\nkind: Secret\nmetadata: {{name: bank, namespace: istio-system}}\nstringData:\n{}{}---\napiVersion: v1\nkind: Secret\nmetadata: {{name: bank-cacert, namespace: istio-system}}\nstringData:\n{}",
            certs::tls_secret("istio-system", "shop", &cert, &key, Some(&ca)),
            block("cert", &bank),
            block("key", &bank_key),
            block("cacert", &bank_ca),
        );
        (yaml, [cert, key, ca, bank, bank_key, bank_ca])
    }

    #[test]
    fn names_resolve_as_istio_resolves_them() {
        let (yaml, [cert, key, shop_ca, bank, bank_key, bank_ca]) = secrets();
        let idx = index(&yaml);
        let ns = "istio-system";
        let identity = |c: &str, k: &str| {
            Ok(Resolved::Identity { certificate_chain: c.to_string().into(), private_key: k.to_string().into() })
        };
        let ca = |c: &str| Ok(Resolved::Ca { trusted_ca: c.to_string().into(), crl: None });
        assert_eq!(idx.resolve(ns, Reader::Router, "kubernetes://shop"), identity(&cert, &key));
        assert_eq!(idx.resolve(ns, Reader::Router, "kubernetes://istio-system/shop"), identity(&cert, &key));
        assert_eq!(idx.resolve(ns, Reader::Router, "kubernetes://shop-cacert"), ca(&shop_ca), "its own ca.crt");
        assert_eq!(idx.resolve(ns, Reader::Router, "kubernetes://bank-cacert"), ca(&bank_ca), "the -cacert Secret");
        assert_eq!(idx.resolve(ns, Reader::Router, "kubernetes://bank"), identity(&bank, &bank_key));
        assert_eq!(idx.resolve("default", Reader::Router, "kubernetes://shop"), Err(Unresolved::Missing));
        assert_eq!(
            idx.resolve("default", Reader::Router, "kubernetes://istio-system/shop"),
            Err(Unresolved::OtherNamespace)
        );
        assert_eq!(idx.resolve(ns, Reader::Sidecar, "kubernetes://shop"), Err(Unresolved::KeyDenied));
        assert_eq!(idx.resolve(ns, Reader::Sidecar, "kubernetes://shop-cacert"), ca(&shop_ca));
        assert_eq!(idx.resolve(ns, Reader::Router, "file-cert:/etc/x"), Err(Unresolved::Scheme));
        assert_eq!(resource_name("shop"), "kubernetes://shop");
        assert_eq!(resource_name("kubernetes-gateway://a/shop"), "kubernetes-gateway://a/shop");
        assert_eq!(ca_resource_name("kubernetes://shop"), "kubernetes://shop-cacert");
    }

    #[test]
    fn a_gateway_reads_another_namespace_s_secret_only_when_granted() {
        let (yaml, [cert, key, ..]) = secrets();
        let grant = |to: &str| {
            format!(
                "---\napiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\nmetadata: {{name: g, namespace: istio-system}}\n\
                 spec:\n  from: [{{group: gateway.networking.k8s.io, kind: Gateway, namespace: edge}}]\n  to: [{to}]\n"
            )
        };
        let name = "kubernetes-gateway://istio-system/shop";
        let identity = Ok(Resolved::Identity { certificate_chain: cert.into(), private_key: key.into() });
        let ungranted = index(&yaml);
        assert_eq!(ungranted.resolve("edge", Reader::Router, name), Err(Unresolved::OtherNamespace));
        assert_eq!(
            ungranted.resolve("istio-system", Reader::Router, name),
            identity,
            "its own namespace needs no grant"
        );
        let granted = index(&format!("{yaml}{}", grant("{group: \"\", kind: Secret, name: shop}")));
        assert_eq!(granted.resolve("edge", Reader::Router, name), identity);
        assert_eq!(granted.resolve("other", Reader::Router, name), Err(Unresolved::OtherNamespace), "only to edge");
        assert_eq!(
            granted.resolve("edge", Reader::Router, "kubernetes-gateway://istio-system/bank"),
            Err(Unresolved::OtherNamespace),
            "only shop"
        );
        assert_eq!(
            granted.resolve("edge", Reader::Sidecar, name),
            Err(Unresolved::OtherNamespace),
            "a sidecar reads none"
        );
        assert_eq!(
            granted.resolve("edge", Reader::Router, "kubernetes://istio-system/shop"),
            Err(Unresolved::OtherNamespace),
            "Istio's own scheme stays in the namespace"
        );
    }
}
