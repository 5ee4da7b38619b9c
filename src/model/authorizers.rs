//! The external authorizers CUSTOM AuthorizationPolicies name, resolved
//! as istiod resolves them (`processExtensionProvider`, `getExtAuthz` and
//! `LookupCluster` in pilot): each `envoyExtAuthzHttp` or
//! `envoyExtAuthzGrpc` provider of the mesh config, checked on its own
//! (`config::mesh::ext_authz::issues`) and its `service` found in the
//! registry, becomes an [`Authorizer`] — what the generators render — or
//! the reason it cannot be used.
//!
//! Role: one resolution for both readers, so that what is reported is what
//! is served: the AuthorizationPolicy index (push), whose CUSTOM policies
//! carry their authorizer into the keys of the workloads they select, and
//! the reference report (`references::ext_authz`), which says on a policy
//! why its authorizer cannot be used.
//!
//! The registry is the store's Kubernetes Services and ServiceEntries by
//! host and namespace, as istiod's `HostnameAndNamespace`:
//! `NAMESPACE/HOST` names the host of that namespace; a bare `HOST` must
//! be defined in exactly one namespace.
//!
//! Invariant: [`Authorizers::resolve`] is a pure function of the store
//! snapshot and the mesh config.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;

use super::host::{self, Hostname};
use super::store::StoreSnapshot;
use crate::config::mesh::MeshConfig;
use crate::config::mesh::ext_authz::{
    self, AuthorizerProvider, DEFAULT_TIMEOUT, HttpAuthorizerProvider, IssueKind, RequestBody,
};
use crate::config::{ConfigKind, ConfigObject, Duration};

/// An external authorizer, ready to render as Envoy's ext_authz filters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Authorizer {
    /// The provider's name (part of the RBAC policy names that enable it).
    pub provider: Arc<str>,
    /// The service's host (its outbound cluster is `outbound|PORT||HOST`).
    pub host: Hostname,
    /// The service's port.
    pub port: u32,
    /// How long a check may take.
    pub timeout: Duration,
    /// Whether a request passes when the check cannot complete.
    pub fail_open: bool,
    /// The status a client gets when the check cannot complete.
    pub status_on_error: Option<i32>,
    /// Whether (and how much of) the request body is sent.
    pub request_body: Option<RequestBody>,
    /// How it is asked.
    pub api: AuthorizerApi,
}

/// How an authorizer is asked.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum AuthorizerApi {
    /// Over HTTP: HTTP ports only (istiod adds nothing on TCP ports).
    Http(HttpCheck),
    /// Over gRPC (`envoy.service.auth.v3.Authorization`): HTTP and TCP ports.
    Grpc,
}

/// What an HTTP authorizer is sent and what of its answer is kept. Header
/// lists are as written: `name`, `prefix*` or `*suffix`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct HttpCheck {
    /// Put before the request's path.
    pub path_prefix: Arc<str>,
    /// The client's headers sent (`includeRequestHeadersInCheck`, else the
    /// deprecated `includeHeadersInCheck`).
    pub request_headers: Vec<Arc<str>>,
    /// Fixed headers added, by name.
    pub added_headers: Vec<(Arc<str>, Arc<str>)>,
    /// The authorizer's headers put on an allowed request.
    pub upstream_on_allow: Vec<Arc<str>>,
    /// The authorizer's headers sent to a denied client.
    pub client_on_deny: Vec<Arc<str>>,
    /// The authorizer's headers sent to an allowed client.
    pub client_on_allow: Vec<Arc<str>>,
}

/// The mesh config's authorizers by name, each resolved or with the reason
/// it cannot be used.
#[derive(Debug, Clone, Default)]
pub struct Authorizers {
    by_name: BTreeMap<Arc<str>, Result<Arc<Authorizer>, Arc<str>>>,
}

impl Authorizers {
    /// Resolves every authorizer of `mesh` against the registry of `snapshot`.
    pub fn resolve(snapshot: &StoreSnapshot, mesh: &MeshConfig) -> Authorizers {
        let providers: Vec<_> =
            mesh.extension_providers.iter().filter_map(|p| Some((p.name.as_str(), p.authorizer()?))).collect();
        if providers.is_empty() {
            return Authorizers::default();
        }
        let registry = registry(snapshot);
        let by_name = providers
            .into_iter()
            .map(|(name, provider)| (Arc::from(name), resolve_one(name, provider, &registry)))
            .collect();
        Authorizers { by_name }
    }

    /// The authorizer named `name` (exactly, as istiod looks it up), or why
    /// there is none to use.
    pub fn get(&self, name: &str) -> Result<Arc<Authorizer>, Arc<str>> {
        match self.by_name.get(name) {
            Some(resolved) => resolved.clone(),
            None => {
                let known: Vec<String> = self.by_name.keys().map(|n| format!("{n:?}")).collect();
                let known = if known.is_empty() { "none".to_string() } else { known.join(", ") };
                Err(format!(
                    "the mesh config has no envoyExtAuthzHttp or envoyExtAuthzGrpc provider {name:?} (it has {known})"
                )
                .into())
            }
        }
    }
}

/// Hosts of the registry and the namespaces that define each.
type Registry = BTreeMap<Hostname, BTreeSet<Arc<str>>>;

fn registry(snapshot: &StoreSnapshot) -> Registry {
    let mut out: Registry = BTreeMap::new();
    for stored in snapshot.kind(ConfigKind::Service).values() {
        let meta = stored.object.meta();
        out.entry(host::service_fqdn(&meta.name, meta.namespace())).or_default().insert(meta.namespace().into());
    }
    for stored in snapshot.kind(ConfigKind::ServiceEntry).values() {
        let ConfigObject::ServiceEntry(se) = &*stored.object else { continue };
        let namespace: Arc<str> = se.metadata.namespace().into();
        for h in &se.spec.hosts {
            out.entry(host::resolve(h, &namespace)).or_default().insert(namespace.clone());
        }
    }
    out
}

/// One provider: what istiod's builder finds wrong with it, else its
/// service looked up and its settings as the filters take them.
fn resolve_one(name: &str, provider: AuthorizerProvider<'_>, registry: &Registry) -> Result<Arc<Authorizer>, Arc<str>> {
    let key = provider.key();
    let faults: Vec<String> = ext_authz::issues(name, provider)
        .into_iter()
        .filter(|i| i.kind == IssueKind::Fault)
        .map(|i| if i.field.is_empty() { i.message } else { format!("{key}.{}: {}", i.field, i.message) })
        .collect();
    if !faults.is_empty() {
        return Err(format!("provider {name:?} cannot be used: {}", faults.join("; ")).into());
    }
    let (service, port) = provider.service();
    let host = lookup(service, registry).map_err(|e| format!("provider {name:?} cannot be used: {e}"))?;
    let (timeout, fail_open, status, request_body, api) = match provider {
        AuthorizerProvider::Http(p) => {
            (p.timeout, p.fail_open, &p.status_on_error, &p.include_request_body_in_check, AuthorizerApi::Http(http(p)))
        }
        AuthorizerProvider::Grpc(p) => {
            (p.timeout, p.fail_open, &p.status_on_error, &p.include_request_body_in_check, AuthorizerApi::Grpc)
        }
    };
    Ok(Arc::new(Authorizer {
        provider: name.into(),
        host,
        port,
        timeout: timeout.unwrap_or(Duration(DEFAULT_TIMEOUT)),
        fail_open,
        // Checked among the faults above.
        status_on_error: ext_authz::status_on_error(status).ok().flatten(),
        request_body: request_body.clone(),
        api,
    }))
}

/// An HTTP provider's check settings.
fn http(p: &HttpAuthorizerProvider) -> HttpCheck {
    let list = |values: &[String]| values.iter().map(|v| Arc::from(v.as_str())).collect::<Vec<Arc<str>>>();
    // The deprecated list counts only where its replacement is not set, as in istiod.
    let request_headers = if p.include_request_headers_in_check.is_empty() {
        list(&p.include_headers_in_check)
    } else {
        list(&p.include_request_headers_in_check)
    };
    HttpCheck {
        path_prefix: p.path_prefix.as_str().into(),
        request_headers,
        added_headers: p
            .include_additional_headers_in_check
            .iter()
            .map(|(k, v)| (Arc::from(k.as_str()), Arc::from(v.as_str())))
            .collect(),
        upstream_on_allow: list(&p.headers_to_upstream_on_allow),
        client_on_deny: list(&p.headers_to_downstream_on_deny),
        client_on_allow: list(&p.headers_to_downstream_on_allow),
    }
}

/// The host `service` names in the registry, as istiod's `LookupCluster`
/// finds it.
fn lookup(service: &str, registry: &Registry) -> Result<Hostname, String> {
    match service.split_once('/') {
        Some((namespace, name)) => match registry.get_key_value(name) {
            Some((host, namespaces)) if namespaces.contains(namespace) => Ok(host.clone()),
            _ => Err(format!("its service {service:?} is not a service of the mesh")),
        },
        None => match registry.get_key_value(service) {
            Some((host, namespaces)) if namespaces.len() == 1 => Ok(host.clone()),
            Some((_, namespaces)) => {
                let listed: Vec<&str> = namespaces.iter().map(|n| &**n).collect();
                Err(format!(
                    "its service {service:?} is defined in namespaces {}: name one as NAMESPACE/HOST",
                    listed.join(", ")
                ))
            }
            None => Err(format!("its service {service:?} is not a service of the mesh")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::mesh::MeshSettings;
    use crate::model::ConfigStore;

    const REGISTRY: &str = "\
apiVersion: v1
kind: Service
metadata: {name: ext-authz, namespace: auth}
spec: {ports: [{name: http, port: 8000}]}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: twice-a, namespace: a}
spec: {hosts: [twice.example.com], ports: [{number: 80, name: http, protocol: HTTP}], resolution: DNS}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: twice-b, namespace: b}
spec: {hosts: [twice.example.com], ports: [{number: 80, name: http, protocol: HTTP}], resolution: DNS}
";

    fn resolved(mesh: &str) -> Authorizers {
        let store = ConfigStore::new();
        store.apply(crate::testing::bookinfo::puts(REGISTRY));
        Authorizers::resolve(&store.snapshot(), &MeshSettings::parse("mesh", mesh).unwrap().mesh_config())
    }

    #[test]
    fn a_provider_resolves_to_its_service_with_istio_s_defaults() {
        let all = resolved(
            "extensionProviders:\n- name: http\n  envoyExtAuthzHttp:\n    service: ext-authz.auth.svc.cluster.local\n    \
             port: \"8000\"\n    includeHeadersInCheck: [x-old]\n    includeAdditionalHeadersInCheck: {x-b: '2', x-a: '1'}\n\
             - name: grpc\n  envoyExtAuthzGrpc: {service: a/twice.example.com, port: 9000, timeout: 2s, statusOnError: '503'}\n",
        );
        let http = all.get("http").unwrap();
        assert_eq!(
            (&*http.host, http.port, http.timeout.0),
            ("ext-authz.auth.svc.cluster.local", 8000, DEFAULT_TIMEOUT)
        );
        let AuthorizerApi::Http(check) = &http.api else { panic!("an HTTP authorizer") };
        assert_eq!(check.request_headers, [Arc::from("x-old")], "the deprecated list, its replacement being empty");
        assert_eq!(check.added_headers[0].0.as_ref(), "x-a", "added headers in name order");
        let grpc = all.get("grpc").unwrap();
        assert_eq!(
            (&*grpc.host, grpc.api.clone(), grpc.status_on_error),
            ("twice.example.com", AuthorizerApi::Grpc, Some(503))
        );
    }

    #[test]
    fn a_provider_istiod_cannot_use_says_why() {
        let all = resolved(
            "extensionProviders:\n- {name: gone, envoyExtAuthzHttp: {service: gone.auth.svc.cluster.local, port: 80}}\n\
             - {name: twice, envoyExtAuthzGrpc: {service: twice.example.com, port: 80}}\n\
             - {name: other-ns, envoyExtAuthzGrpc: {service: c/twice.example.com, port: 80}}\n\
             - {name: Upper, envoyExtAuthzGrpc: {service: ext-authz.auth.svc.cluster.local, port: 0}}\n\
             - {name: zipkin, zipkin: {service: ext-authz.auth.svc.cluster.local, port: 80}}\n",
        );
        let why = |name: &str| all.get(name).unwrap_err().to_string();
        assert!(
            why("gone").contains("\"gone.auth.svc.cluster.local\" is not a service of the mesh"),
            "{}",
            why("gone")
        );
        assert!(why("twice").contains("defined in namespaces a, b"), "{}", why("twice"));
        assert!(why("other-ns").contains("is not a service of the mesh"), "{}", why("other-ns"));
        let upper = why("Upper");
        assert!(upper.contains("DNS-1123 label") && upper.contains("envoyExtAuthzGrpc.port: 0"), "{upper}");
        assert!(why("zipkin").contains("no envoyExtAuthzHttp or envoyExtAuthzGrpc provider \"zipkin\""));
        assert!(why("ZIPKIN").contains("(it has \"Upper\", \"gone\", \"other-ns\", \"twice\")"), "{}", why("ZIPKIN"));
    }
}
