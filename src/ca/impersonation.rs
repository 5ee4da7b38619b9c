//! Certificates for identities other than the caller's: ztunnel's
//! impersonation.
//!
//! In ambient mode one ztunnel per node holds the certificates of every
//! workload on its node. It asks for each with its own service-account
//! token and the CSR metadata `ImpersonatedIdentity` set to the workload's
//! SPIFFE identity (Istio's node authorizer). The CA signs such a request
//! only when all of these hold:
//!
//! - the caller's account is one of `--ca-trusted-node-accounts`
//!   (`CA_TRUSTED_NODE_ACCOUNTS`; Istio's chart sets `istio-system/ztunnel`);
//! - it proved that account with a Pod-bound token (a certificate does not
//!   say which node its holder runs on), whose Pod exists, runs as that
//!   account and, when both carry one, has the token's UID;
//! - the identity asked for is of this CA's trust domain;
//! - a Pod of that identity's namespace and service account, not
//!   `Failed`, is scheduled on the caller Pod's node.
//!
//! Pods are read from the published snapshot. Anything else is refused
//! with `PERMISSION_DENIED` and logged with the reason (istiod answers
//! `UNAUTHENTICATED`; ztunnel treats both alike, and retries).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use super::authn::Caller;
use crate::config::{ConfigKey, ConfigKind, ConfigObject, k8s};
use crate::engine::PushEngine;
use crate::model::Identity;
use crate::text::Shown;

/// The CSR metadata field that names the identity asked for.
pub const IMPERSONATED_IDENTITY: &str = "ImpersonatedIdentity";

/// How long a request waits for the first snapshot (Pods) to be published.
const FIRST_SNAPSHOT_WAIT: Duration = Duration::from_secs(5);

/// Which callers may hold whose certificates.
#[derive(Debug, Clone)]
pub struct Impersonation {
    /// The `(namespace, service account)` pairs trusted as node agents.
    trusted: BTreeSet<(String, String)>,
    /// The trust domain identities are issued in.
    trust_domain: String,
    engine: Arc<PushEngine>,
}

impl Impersonation {
    /// Node agents of `trusted` accounts may hold the certificates of the
    /// workloads on their node, as `engine`'s snapshots place them.
    pub fn new(trusted: BTreeSet<(String, String)>, trust_domain: &str, engine: Arc<PushEngine>) -> Impersonation {
        Impersonation { trusted, trust_domain: trust_domain.to_string(), engine }
    }

    /// The identity `caller` may be issued when it asks for `requested`,
    /// or why not (a message that names no token).
    pub async fn authorize(&self, caller: &Caller, requested: &str) -> Result<Identity, String> {
        if self.trusted.is_empty() {
            return Err("this CA issues no certificate for another identity: no --ca-trusted-node-accounts".into());
        }
        let [account] = &caller.identities[..] else {
            return Err("a caller asking for another identity must prove exactly one account".into());
        };
        let trusted = (account.namespace().to_string(), account.service_account().to_string());
        if !self.trusted.contains(&trusted) {
            return Err(format!("{account} is not a trusted node account (--ca-trusted-node-accounts)"));
        }
        let Some(pod) = &caller.pod else {
            return Err(format!(
                "{account} proved no Pod: asking for another identity needs a Pod-bound service-account token, \
                 which says which node the caller runs on"
            ));
        };
        let identity: Identity =
            requested.parse().map_err(|_| format!("{} is not a SPIFFE identity", Shown(requested)))?;
        if identity.trust_domain() != self.trust_domain {
            return Err(format!("{identity} is not of the trust domain {}", self.trust_domain));
        }
        if tokio::time::timeout(FIRST_SNAPSHOT_WAIT, self.engine.wait_ready()).await.is_err() {
            return Err("meshpush has not read the mesh yet: no Pod is known".into());
        }
        let ctx = self.engine.snapshot();
        let key = ConfigKey::new(ConfigKind::Pod, account.namespace(), &pod.name);
        let Some(ConfigObject::Pod(own)) = ctx.store.get(&key).map(|s| &*s.object) else {
            return Err(format!("the caller's Pod {}/{} does not exist", account.namespace(), Shown(&pod.name)));
        };
        if service_account(own) != account.service_account() {
            return Err(format!(
                "the caller's Pod {}/{} does not run as {account}",
                account.namespace(),
                own.metadata.name
            ));
        }
        if let (Some(token), Some(stored)) = (&pod.uid, &own.metadata.uid)
            && token != stored
        {
            return Err(format!(
                "the caller's Pod {}/{} is not the one its token was issued to (another UID)",
                account.namespace(),
                own.metadata.name
            ));
        }
        let node = own.spec.node_name.as_deref().filter(|n| !n.is_empty()).ok_or_else(|| {
            format!("the caller's Pod {}/{} is not scheduled on a node", account.namespace(), own.metadata.name)
        })?;
        if !on_node(&ctx.store, &identity, node) {
            return Err(format!("no Pod of {identity} runs on the caller's node {node}"));
        }
        Ok(identity)
    }
}

/// A Pod's service account (`default` when unset).
fn service_account(pod: &k8s::Pod) -> &str {
    pod.spec.service_account_name.as_deref().filter(|s| !s.is_empty()).unwrap_or("default")
}

/// Whether a Pod of `identity`'s namespace and service account, not
/// `Failed`, is scheduled on `node` (a range of the namespace's Pods).
fn on_node(store: &crate::model::StoreSnapshot, identity: &Identity, node: &str) -> bool {
    use std::ops::Bound;
    let key = |namespace: &str| ConfigKey::new(ConfigKind::Pod, namespace, "");
    // Every key of `namespace` sorts before any of `namespace\0`.
    let namespace = identity.namespace();
    let range = (Bound::Included(key(namespace)), Bound::Excluded(key(&format!("{namespace}\0"))));
    // A node name is its cluster's: only Pods of the CA's own cluster count.
    store.kind(ConfigKind::Pod).range(range).filter(|(key, _)| key.cluster.is_local()).any(|(_, stored)| {
        matches!(&*stored.object, ConfigObject::Pod(pod)
            if pod.spec.node_name.as_deref() == Some(node)
                && service_account(pod) == identity.service_account()
                && pod.status.phase.as_deref() != Some("Failed"))
    })
}

/// The identity a request's metadata asks for, if it asks for one.
pub fn requested(metadata: Option<&prost_types::Struct>) -> Option<&str> {
    use prost_types::value::Kind;
    match metadata?.fields.get(IMPERSONATED_IDENTITY)?.kind.as_ref()? {
        Kind::StringValue(s) if !s.is_empty() => Some(s),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ca::authn::CallerPod;
    use crate::config::mesh::MeshConfig;
    use crate::model::ConfigStore;
    use crate::push::PushRequest;

    const PODS: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: ztunnel-a, namespace: istio-system, uid: zt-uid-a}
spec: {serviceAccountName: ztunnel, nodeName: node-a}
status: {phase: Running, podIP: 10.0.0.2}
---
apiVersion: v1
kind: Pod
metadata: {name: web-1, namespace: shop}
spec: {serviceAccountName: web, nodeName: node-a}
status: {phase: Pending}
---
apiVersion: v1
kind: Pod
metadata: {name: db-1, namespace: shop}
spec: {serviceAccountName: db, nodeName: node-b}
status: {phase: Running, podIP: 10.0.1.3}
---
apiVersion: v1
kind: Pod
metadata: {name: batch-1, namespace: shop}
spec: {serviceAccountName: batch, nodeName: node-a}
status: {phase: Failed}
---
apiVersion: v1
kind: Pod
metadata: {name: other, namespace: istio-system}
spec: {serviceAccountName: other, nodeName: node-a}
status: {phase: Running, podIP: 10.0.0.9}
"#;

    async fn impersonation() -> Impersonation {
        let engine = PushEngine::for_mesh(MeshConfig::default());
        let store = ConfigStore::new();
        engine.push(PushRequest::new(store.apply(crate::testing::bookinfo::puts(PODS)))).await;
        engine.set_ready();
        let trusted = BTreeSet::from([("istio-system".to_string(), "ztunnel".to_string())]);
        Impersonation::new(trusted, "cluster.local", engine)
    }

    fn caller(ns: &str, sa: &str, pod: Option<(&str, Option<&str>)>) -> Caller {
        Caller {
            identities: vec![Identity::new("cluster.local", ns, sa).unwrap()],
            pod: pod.map(|(name, uid)| CallerPod { name: name.into(), uid: uid.map(Into::into) }),
        }
    }

    #[tokio::test]
    async fn a_trusted_node_agent_gets_the_identities_of_its_node_s_pods_only() {
        let imp = impersonation().await;
        let ztunnel = caller("istio-system", "ztunnel", Some(("ztunnel-a", Some("zt-uid-a"))));
        let web = "spiffe://cluster.local/ns/shop/sa/web";
        // A Pending Pod without an IP counts: ztunnel is asked before it starts.
        assert_eq!(imp.authorize(&ztunnel, web).await.unwrap().to_string(), web);
        let refused = |r: Result<Identity, String>| r.unwrap_err();
        // On another node; Failed; of another trust domain; not an identity.
        assert!(refused(imp.authorize(&ztunnel, "spiffe://cluster.local/ns/shop/sa/db").await).contains("node-a"));
        assert!(refused(imp.authorize(&ztunnel, "spiffe://cluster.local/ns/shop/sa/batch").await).contains("no Pod"));
        assert!(refused(imp.authorize(&ztunnel, "spiffe://other.td/ns/shop/sa/web").await).contains("trust domain"));
        assert!(refused(imp.authorize(&ztunnel, "web").await).contains("not a SPIFFE identity"));
    }

    #[tokio::test]
    async fn an_untrusted_or_unplaced_caller_is_refused() {
        let imp = impersonation().await;
        let web = "spiffe://cluster.local/ns/shop/sa/web";
        let other = caller("istio-system", "other", Some(("other", None)));
        assert!(imp.authorize(&other, web).await.unwrap_err().contains("not a trusted node account"));
        let certificate = caller("istio-system", "ztunnel", None);
        assert!(imp.authorize(&certificate, web).await.unwrap_err().contains("Pod-bound"));
        let gone = caller("istio-system", "ztunnel", Some(("ztunnel-z", None)));
        assert!(imp.authorize(&gone, web).await.unwrap_err().contains("does not exist"));
        let reborn = caller("istio-system", "ztunnel", Some(("ztunnel-a", Some("older-uid"))));
        assert!(imp.authorize(&reborn, web).await.unwrap_err().contains("another UID"));
        // A Pod of another account named in a trusted account's token.
        let borrowed = caller("istio-system", "ztunnel", Some(("other", None)));
        assert!(imp.authorize(&borrowed, web).await.unwrap_err().contains("does not run as"));
        let nobody = Impersonation { trusted: BTreeSet::new(), ..imp };
        let ztunnel = caller("istio-system", "ztunnel", Some(("ztunnel-a", None)));
        assert!(nobody.authorize(&ztunnel, web).await.unwrap_err().contains("no --ca-trusted-node-accounts"));
    }

    #[test]
    fn the_identity_asked_for_is_a_string_field_of_the_metadata() {
        use prost_types::{Struct, Value, value::Kind};
        let with = |kind: Kind| Struct {
            fields: [(IMPERSONATED_IDENTITY.to_string(), Value { kind: Some(kind) })].into_iter().collect(),
        };
        let asked = with(Kind::StringValue("spiffe://cluster.local/ns/a/sa/b".into()));
        assert_eq!(requested(Some(&asked)), Some("spiffe://cluster.local/ns/a/sa/b"));
        assert_eq!(requested(Some(&with(Kind::StringValue(String::new())))), None);
        assert_eq!(requested(Some(&with(Kind::BoolValue(true)))), None);
        assert_eq!(requested(None), None);
    }
}
