//! Workload identity: the SPIFFE ID a mesh certificate carries,
//! `spiffe://TRUST_DOMAIN/ns/NAMESPACE/sa/SERVICE_ACCOUNT`.
//!
//! Istio names every workload by the Kubernetes service account it runs
//! as, in the mesh's trust domain (`cluster.local` by default). The CA puts
//! it in a workload certificate's URI SAN; the secure xDS port reads it back
//! from the client certificate to decide which proxy a stream may claim to
//! be; mTLS clusters check that the server presents the destination's.
//!
//! Invariant: an [`Identity`] always has a non-empty trust domain,
//! namespace and service account without `/`, so its URI round-trips.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// A workload's SPIFFE identity.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Identity {
    trust_domain: Arc<str>,
    namespace: Arc<str>,
    service_account: Arc<str>,
}

/// The URI scheme of SPIFFE IDs.
const SCHEME: &str = "spiffe://";

/// Longest identity URI read (SPIFFE's limit is 2,048 bytes).
pub const MAX_URI_LEN: usize = 2048;

/// A string that is not an Istio SPIFFE identity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{shown:?} is not a SPIFFE identity of the form spiffe://TRUST_DOMAIN/ns/NAMESPACE/sa/SERVICE_ACCOUNT")]
pub struct IdentityError {
    /// The input, cut to a bounded length for messages.
    shown: String,
}

impl IdentityError {
    fn of(s: &str) -> IdentityError {
        IdentityError { shown: crate::text::shown(s).into_owned() }
    }
}

impl Identity {
    /// The identity of service account `service_account` in `namespace`.
    pub fn new(trust_domain: &str, namespace: &str, service_account: &str) -> Result<Identity, IdentityError> {
        let part_ok = |p: &str| !p.is_empty() && !p.contains('/') && p.len() <= 253;
        if !part_ok(trust_domain) || !part_ok(namespace) || !part_ok(service_account) {
            return Err(IdentityError::of(&format!("{SCHEME}{trust_domain}/ns/{namespace}/sa/{service_account}")));
        }
        Ok(Identity {
            trust_domain: trust_domain.into(),
            namespace: namespace.into(),
            service_account: service_account.into(),
        })
    }

    /// The trust domain (`cluster.local`).
    pub fn trust_domain(&self) -> &str {
        &self.trust_domain
    }

    /// The workload's namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The workload's service account.
    pub fn service_account(&self) -> &str {
        &self.service_account
    }

    /// The principal as AuthorizationPolicy writes it: the URI without
    /// `spiffe://` (`cluster.local/ns/default/sa/sleep`).
    pub fn principal(&self) -> String {
        format!("{}/ns/{}/sa/{}", self.trust_domain, self.namespace, self.service_account)
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SCHEME}{}", self.principal())
    }
}

impl FromStr for Identity {
    type Err = IdentityError;

    fn from_str(s: &str) -> Result<Identity, IdentityError> {
        if s.len() > MAX_URI_LEN {
            return Err(IdentityError::of(s));
        }
        let parts: Vec<&str> = s.strip_prefix(SCHEME).ok_or_else(|| IdentityError::of(s))?.split('/').collect();
        match parts[..] {
            [trust_domain, "ns", namespace, "sa", service_account] => {
                Identity::new(trust_domain, namespace, service_account).map_err(|_| IdentityError::of(s))
            }
            _ => Err(IdentityError::of(s)),
        }
    }
}

/// The identity a Kubernetes service-account token's subject names:
/// `system:serviceaccount:NAMESPACE:NAME` (a TokenReview's username, a
/// projected token's `sub`), in `trust_domain`.
pub fn from_service_account_subject(trust_domain: &str, subject: &str) -> Option<Identity> {
    let rest = subject.strip_prefix("system:serviceaccount:")?;
    let (namespace, name) = rest.split_once(':')?;
    if name.contains(':') {
        return None;
    }
    Identity::new(trust_domain, namespace, name).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_round_trip_through_their_uri() {
        let id: Identity = "spiffe://cluster.local/ns/default/sa/sleep".parse().unwrap();
        assert_eq!((id.trust_domain(), id.namespace(), id.service_account()), ("cluster.local", "default", "sleep"));
        assert_eq!(id.to_string(), "spiffe://cluster.local/ns/default/sa/sleep");
        assert_eq!(id.principal(), "cluster.local/ns/default/sa/sleep");
    }

    #[test]
    fn other_uris_are_not_identities() {
        for bad in [
            "",
            "spiffe://cluster.local",
            "spiffe://cluster.local/ns/default",
            "spiffe://cluster.local/ns/default/sa/",
            "spiffe:///ns/default/sa/sleep",
            "spiffe://cluster.local/ns/default/sa/sleep/extra",
            "spiffe://cluster.local/namespace/default/sa/sleep",
            "https://cluster.local/ns/default/sa/sleep",
        ] {
            let err = bad.parse::<Identity>().unwrap_err();
            assert!(err.to_string().contains("not a SPIFFE identity"), "{bad}: {err}");
        }
        let long = format!("spiffe://{}/ns/a/sa/b", "x".repeat(5000));
        assert!(long.parse::<Identity>().unwrap_err().to_string().len() < 400, "messages are bounded");
    }

    #[test]
    fn service_account_subjects_name_identities() {
        let id = from_service_account_subject("td", "system:serviceaccount:bar:httpbin").unwrap();
        assert_eq!(id.to_string(), "spiffe://td/ns/bar/sa/httpbin");
        for bad in
            ["system:serviceaccount:bar", "system:node:x", "system:serviceaccount::x", "system:serviceaccount:a:b:c"]
        {
            assert_eq!(from_service_account_subject("td", bad), None, "{bad}");
        }
    }
}
