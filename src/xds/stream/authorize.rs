//! Which proxy a client on the secure port may be.
//!
//! A stream's node says who the proxy is — its namespace, service account,
//! labels — and the config it is sent follows from that; on the secure port
//! the client certificate says who the client is, or, for a client without
//! one (ztunnel), its bearer token, as istiod authenticates xDS with either.
//! A node must be that identity's (Istio's `checkConnectionIdentity`): its
//! namespace is the identity's namespace and, when the node names a service
//! account (`SERVICE_ACCOUNT` metadata), that too. A router's labels choose the
//! Gateways it serves, and with them which listeners and certificates it is
//! sent; so a router may claim only labels a workload of its own namespace
//! carries (a Pod or WorkloadEntry with every label it claims, running as
//! its service account when the workload names one).
//!
//! A client with neither a certificate nor a token that verifies is
//! `UNAUTHENTICATED`; a node that is not its identity's is
//! `PERMISSION_DENIED`, with the reason.

use tonic::Status;

use crate::model::{Identity, Proxy, ProxyKind};
use crate::push::index::WorkloadIndex;
use crate::text::Shown;

/// Why a secure-port stream was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The metric label (`no_certificate`, `token`, `identity`, `gateway_labels`).
    pub reason: &'static str,
    /// The status it ends with.
    pub code: tonic::Code,
    /// What the client is told.
    pub message: String,
}

impl Refusal {
    /// The gRPC status.
    pub fn status(&self) -> Status {
        Status::new(self.code, self.message.clone())
    }
}

/// The refusal of a client whose bearer token proved nothing (`why` says
/// which check failed; it never holds the token).
pub fn token_refused(why: String) -> Refusal {
    Refusal { reason: "token", code: tonic::Code::Unauthenticated, message: format!("authentication failure: {why}") }
}

/// The identity of `identities` that `proxy` may claim to be.
pub fn node_identity<'a>(proxy: &Proxy, identities: &'a [Identity]) -> Result<&'a Identity, Refusal> {
    if identities.is_empty() {
        return Err(Refusal {
            reason: "no_certificate",
            code: tonic::Code::Unauthenticated,
            message: "the secure xDS port serves ADS only to a client with a workload certificate of this mesh or \
                      an `authorization: Bearer TOKEN` header with a service-account token"
                .into(),
        });
    }
    let account = proxy.metadata.get("SERVICE_ACCOUNT").filter(|sa| !sa.is_empty());
    identities
        .iter()
        .find(|id| id.namespace() == &*proxy.namespace && account.is_none_or(|sa| sa == id.service_account()))
        .ok_or_else(|| Refusal {
            reason: "identity",
            code: tonic::Code::PermissionDenied,
            message: format!(
                "the node claims namespace {}{}, but the client proved {}",
                Shown(&proxy.namespace),
                account.map(|sa| format!(" and service account {}", Shown(sa))).unwrap_or_default(),
                identities.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
            ),
        })
}

/// Whether a router (or waypoint) of `identity` may claim its node's labels: some
/// workload of its namespace carries them all (and runs as its service
/// account, when it names one). Sidecars, and routers without labels,
/// pass.
pub fn gateway_labels(proxy: &Proxy, identity: &Identity, workloads: &WorkloadIndex) -> Result<(), Refusal> {
    if !matches!(proxy.kind, ProxyKind::Router | ProxyKind::Waypoint) || proxy.labels.is_empty() {
        return Ok(());
    }
    let owned = workloads
        .select(&proxy.namespace, &proxy.labels)
        .any(|w| w.service_account.as_deref().is_none_or(|sa| sa == identity.service_account()));
    if owned {
        return Ok(());
    }
    let labels: Vec<String> = proxy.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    Err(Refusal {
        reason: "gateway_labels",
        code: tonic::Code::PermissionDenied,
        message: format!(
            "the {} claims labels {} that no workload of namespace {} running as {} carries",
            if proxy.kind == ProxyKind::Waypoint { "waypoint" } else { "router" },
            Shown(&labels.join(",")),
            Shown(&proxy.namespace),
            identity.service_account(),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ConfigStore;
    use crate::testing::bookinfo::puts;
    use crate::testing::memory::node;

    fn proxy(id: &str) -> Proxy {
        Proxy::from_node(&node(id, "REDIRECT", &[])).unwrap()
    }

    fn router(namespace: &str, labels: &[(&str, &str)]) -> Proxy {
        let id = format!("router~10.0.0.9~ingress-1.{namespace}~{namespace}.svc.cluster.local");
        Proxy::from_node(&node(&id, "NONE", labels)).unwrap()
    }

    /// An ingress Pod running as `ingress` in `istio-system`, another one
    /// without a service account in `edge`.
    fn workloads() -> WorkloadIndex {
        let store = ConfigStore::new();
        store.apply(puts(
            "apiVersion: v1\nkind: Pod\n\
             metadata: {name: ingress-1, namespace: istio-system, labels: {istio: ingressgateway, app: ingress}}\n\
             spec: {serviceAccountName: ingress}\nstatus: {podIP: 10.0.0.9, phase: Running}\n---\n\
             apiVersion: v1\nkind: Pod\n\
             metadata: {name: edge-1, namespace: edge, labels: {istio: edge}}\n\
             status: {podIP: 10.0.0.10, phase: Running}\n",
        ));
        WorkloadIndex::build(&store.snapshot())
    }
    #[test]
    fn a_node_must_be_in_its_certificates_namespace() {
        let sleep: Identity = "spiffe://cluster.local/ns/default/sa/sleep".parse().unwrap();
        let ids = std::slice::from_ref(&sleep);
        let own = proxy("sidecar~10.0.0.1~sleep-1.default~default.svc.cluster.local");
        assert_eq!(node_identity(&own, ids).unwrap(), &sleep);
        let other = proxy("sidecar~10.0.0.1~istiod-1.istio-system~istio-system.svc.cluster.local");
        let refusal = node_identity(&other, ids).unwrap_err();
        assert_eq!((refusal.reason, refusal.code), ("identity", tonic::Code::PermissionDenied));
        assert!(refusal.message.contains("istio-system") && refusal.message.contains("ns/default/sa/sleep"));
        let refusal = node_identity(&own, &[]).unwrap_err();
        assert_eq!((refusal.reason, refusal.code), ("no_certificate", tonic::Code::Unauthenticated));
    }

    #[test]
    fn a_node_naming_a_service_account_must_be_that_account() {
        let sleep: Identity = "spiffe://cluster.local/ns/default/sa/sleep".parse().unwrap();
        let mut claims = proxy("sidecar~10.0.0.1~sleep-1.default~default.svc.cluster.local");
        claims.metadata.insert("SERVICE_ACCOUNT", "httpbin");
        let refusal = node_identity(&claims, std::slice::from_ref(&sleep)).unwrap_err();
        assert!(refusal.message.contains("service account httpbin"), "{}", refusal.message);
        claims.metadata.insert("SERVICE_ACCOUNT", "sleep");
        assert!(node_identity(&claims, std::slice::from_ref(&sleep)).is_ok());
    }

    #[test]
    fn a_router_may_claim_only_labels_its_namespaces_workloads_carry_as_its_account() {
        let index = workloads();
        let ingress: Identity = "spiffe://cluster.local/ns/istio-system/sa/ingress".parse().unwrap();
        let other_account: Identity = "spiffe://cluster.local/ns/istio-system/sa/sleep".parse().unwrap();
        let edge: Identity = "spiffe://cluster.local/ns/edge/sa/default".parse().unwrap();
        // Its own Pod's labels, all or some of them.
        assert!(gateway_labels(&router("istio-system", &[("istio", "ingressgateway")]), &ingress, &index).is_ok());
        let both = [("istio", "ingressgateway"), ("app", "ingress")];
        assert!(gateway_labels(&router("istio-system", &both), &ingress, &index).is_ok());
        // The same labels under another service account of the namespace.
        let refusal = gateway_labels(&router("istio-system", &[("istio", "ingressgateway")]), &other_account, &index)
            .unwrap_err();
        assert_eq!((refusal.reason, refusal.code), ("gateway_labels", tonic::Code::PermissionDenied));
        assert!(
            refusal.message.contains("istio=ingressgateway") && refusal.message.contains("sleep"),
            "{}",
            refusal.message
        );
        // Labels no workload carries with the rest, and another namespace's labels.
        let mixed = [("istio", "ingressgateway"), ("app", "edge")];
        assert!(gateway_labels(&router("istio-system", &mixed), &ingress, &index).is_err());
        assert!(gateway_labels(&router("edge", &[("istio", "ingressgateway")]), &edge, &index).is_err());
        // A workload that names no service account serves any of its namespace's.
        assert!(gateway_labels(&router("edge", &[("istio", "edge")]), &edge, &index).is_ok());
        // Sidecars and routers without labels are not checked here.
        assert!(gateway_labels(&router("edge", &[]), &edge, &index).is_ok());
        let sidecar = proxy("sidecar~10.0.0.1~sleep-1.edge~edge.svc.cluster.local");
        assert!(gateway_labels(&sidecar, &edge, &index).is_ok());
    }
}
