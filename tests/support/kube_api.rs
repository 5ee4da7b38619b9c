//! A stand-in Kubernetes API server: what a cluster's kube-apiserver says
//! to a client that lists and watches, over plain HTTP on loopback — or,
//! as a cluster's API server to its Pods ([`KubeApi::start_in_cluster`]),
//! over TLS with a certificate of its own CA, asking every request for the
//! service account's bearer token.
//!
//! No kube-apiserver can run on these machines, so the Kubernetes source is
//! tested against this. It speaks the real protocol, and `kubectl` (a real
//! client) is run against it too (`tests/protocol/kube_api.rs`):
//!
//! * discovery: `/version`, `/api`, `/apis`, `/api/v1`, `/apis/GROUP/VERSION`
//!   (core Services, Pods, Namespaces, Nodes, Secrets, ConfigMaps; `discovery.k8s.io/v1`
//!   EndpointSlices; `networking.istio.io` kinds at `v1`, `v1beta1` and
//!   `v1alpha3`, all versions serving the same objects, as a CRD with
//!   several served versions does);
//! * lists, cluster-wide or in a namespace: a `…List` with
//!   `metadata.resourceVersion`, items without `apiVersion` and `kind`, as
//!   the API server writes them, in pages of `limit` with `continue`
//!   tokens; one object by name;
//! * watches (`?watch=true&resourceVersion=N`): a chunked stream of JSON
//!   lines `{"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": …}`,
//!   from the events after `N`; `BOOKMARK`s every 500 ms when the client
//!   allows them; `timeoutSeconds` ends the stream; a `resourceVersion`
//!   older than the kept history is answered with an `ERROR` event of a
//!   `410 Gone` Status (the client must list again);
//! * TokenReviews (`POST /apis/authentication.k8s.io/v1/tokenreviews`),
//!   authenticating the tokens [`KubeApi::accept_token`] names;
//! * creates (`POST` of a core namespaced kind, 409 AlreadyExists) and
//!   replaces (`PUT` of a core namespaced or a cluster-scoped group kind,
//!   with the resource-version precondition), as the mesh root's
//!   ConfigMaps and the webhook configurations' `caBundle` are written
//!   ([`KubeApi::client_writes`] counts them).
//!
//! The test drives it: [`KubeApi::put`] and [`KubeApi::delete`] change
//! objects (each a new resource version; as the API server does for a
//! kind with a status subresource, a put keeps the object's `status` and
//! moves `metadata.generation` when the `spec` changes), [`KubeApi::compact`] forgets the
//! event history, [`KubeApi::break_watches`] ends every open watch, and
//! [`KubeApi::go_down`] … [`KubeApi::come_back`] is an outage (503s) after
//! which the clients' watches are answered `410 Gone`, and
//! [`KubeApi::refuse`] … [`KubeApi::accept`] fails one resource alone.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch};
use serde_json::{Value, json};
use tokio::sync::broadcast;

/// A kind the stand-in serves.
struct Resource {
    group: &'static str,
    versions: &'static [&'static str],
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
}

const ISTIO_VERSIONS: &[&str] = &["v1", "v1beta1", "v1alpha3"];

const GATEWAY_API_VERSIONS: &[&str] = &["v1", "v1beta1"];

const RESOURCES: &[Resource] = &[
    Resource { group: "", versions: &["v1"], kind: "Service", plural: "services", namespaced: true },
    Resource { group: "", versions: &["v1"], kind: "Pod", plural: "pods", namespaced: true },
    Resource { group: "", versions: &["v1"], kind: "Namespace", plural: "namespaces", namespaced: false },
    Resource { group: "", versions: &["v1"], kind: "Node", plural: "nodes", namespaced: false },
    Resource { group: "", versions: &["v1"], kind: "Secret", plural: "secrets", namespaced: true },
    Resource { group: "", versions: &["v1"], kind: "ConfigMap", plural: "configmaps", namespaced: true },
    Resource {
        group: "discovery.k8s.io",
        versions: &["v1"],
        kind: "EndpointSlice",
        plural: "endpointslices",
        namespaced: true,
    },
    Resource {
        group: "networking.istio.io",
        versions: ISTIO_VERSIONS,
        kind: "VirtualService",
        plural: "virtualservices",
        namespaced: true,
    },
    Resource {
        group: "networking.istio.io",
        versions: ISTIO_VERSIONS,
        kind: "DestinationRule",
        plural: "destinationrules",
        namespaced: true,
    },
    Resource {
        group: "networking.istio.io",
        versions: ISTIO_VERSIONS,
        kind: "Gateway",
        plural: "gateways",
        namespaced: true,
    },
    Resource {
        group: "networking.istio.io",
        versions: ISTIO_VERSIONS,
        kind: "ServiceEntry",
        plural: "serviceentries",
        namespaced: true,
    },
    Resource {
        group: "networking.istio.io",
        versions: ISTIO_VERSIONS,
        kind: "WorkloadEntry",
        plural: "workloadentries",
        namespaced: true,
    },
    Resource {
        group: "networking.istio.io",
        versions: ISTIO_VERSIONS,
        kind: "WorkloadGroup",
        plural: "workloadgroups",
        namespaced: true,
    },
    Resource {
        group: "networking.istio.io",
        versions: ISTIO_VERSIONS,
        kind: "Sidecar",
        plural: "sidecars",
        namespaced: true,
    },
    Resource {
        group: "networking.istio.io",
        versions: &["v1beta1"],
        kind: "ProxyConfig",
        plural: "proxyconfigs",
        namespaced: true,
    },
    Resource {
        group: "networking.istio.io",
        versions: &["v1alpha3"],
        kind: "EnvoyFilter",
        plural: "envoyfilters",
        namespaced: true,
    },
    Resource {
        group: "security.istio.io",
        versions: &["v1", "v1beta1"],
        kind: "PeerAuthentication",
        plural: "peerauthentications",
        namespaced: true,
    },
    Resource {
        group: "security.istio.io",
        versions: &["v1", "v1beta1"],
        kind: "AuthorizationPolicy",
        plural: "authorizationpolicies",
        namespaced: true,
    },
    Resource {
        group: "security.istio.io",
        versions: &["v1", "v1beta1"],
        kind: "RequestAuthentication",
        plural: "requestauthentications",
        namespaced: true,
    },
    Resource {
        group: "telemetry.istio.io",
        versions: &["v1", "v1alpha1"],
        kind: "Telemetry",
        plural: "telemetries",
        namespaced: true,
    },
    Resource {
        group: "gateway.networking.k8s.io",
        versions: GATEWAY_API_VERSIONS,
        kind: "GatewayClass",
        plural: "gatewayclasses",
        namespaced: false,
    },
    Resource {
        group: "gateway.networking.k8s.io",
        versions: GATEWAY_API_VERSIONS,
        kind: "Gateway",
        plural: "gateways",
        namespaced: true,
    },
    Resource {
        group: "gateway.networking.k8s.io",
        versions: GATEWAY_API_VERSIONS,
        kind: "HTTPRoute",
        plural: "httproutes",
        namespaced: true,
    },
    Resource {
        group: "gateway.networking.k8s.io",
        versions: &["v1"],
        kind: "GRPCRoute",
        plural: "grpcroutes",
        namespaced: true,
    },
    // An API server of an older Gateway API release: TCPRoute and TLSRoute
    // only at their alpha versions (discovery finds them there).
    Resource {
        group: "gateway.networking.k8s.io",
        versions: &["v1alpha2"],
        kind: "TCPRoute",
        plural: "tcproutes",
        namespaced: true,
    },
    Resource {
        group: "gateway.networking.k8s.io",
        versions: &["v1alpha3", "v1alpha2"],
        kind: "TLSRoute",
        plural: "tlsroutes",
        namespaced: true,
    },
    Resource {
        group: "gateway.networking.k8s.io",
        versions: GATEWAY_API_VERSIONS,
        kind: "ReferenceGrant",
        plural: "referencegrants",
        namespaced: true,
    },
    Resource { group: "networking.k8s.io", versions: &["v1"], kind: "Ingress", plural: "ingresses", namespaced: true },
    Resource {
        group: "networking.k8s.io",
        versions: &["v1"],
        kind: "IngressClass",
        plural: "ingressclasses",
        namespaced: false,
    },
    Resource {
        group: "admissionregistration.k8s.io",
        versions: &["v1"],
        kind: "MutatingWebhookConfiguration",
        plural: "mutatingwebhookconfigurations",
        namespaced: false,
    },
    Resource {
        group: "admissionregistration.k8s.io",
        versions: &["v1"],
        kind: "ValidatingWebhookConfiguration",
        plural: "validatingwebhookconfigurations",
        namespaced: false,
    },
];

fn resource_by_plural(group: &str, plural: &str) -> Option<&'static Resource> {
    RESOURCES.iter().find(|r| r.group == group && r.plural == plural)
}

/// The resource of `kind`, or of `GROUP/KIND` (a plain `Gateway` is Istio's).
fn resource_by_kind(kind: &str) -> Option<&'static Resource> {
    match kind.rsplit_once('/') {
        Some((group, kind)) => RESOURCES.iter().find(|r| r.group == group && r.kind == kind),
        None => RESOURCES.iter().find(|r| r.kind == kind),
    }
}

/// One change, as a watch reports it.
#[derive(Clone)]
struct Change {
    revision: u64,
    plural: &'static str,
    group: &'static str,
    kind: &'static str,
    namespace: String,
    object: Value,
}

#[derive(Default)]
struct Objects {
    /// The last resource version given out.
    revision: u64,
    /// Every object: (group, plural, namespace, name) → object (apiVersion
    /// and kind included; rewritten to the version asked for).
    objects: BTreeMap<(&'static str, &'static str, String, String), Value>,
    /// Changes after `compacted`, oldest first.
    history: Vec<Change>,
    /// Watches from a resource version below this are `410 Gone`.
    compacted: u64,
    /// Creates and replaces clients made.
    writes: u64,
}

/// The stand-in API server; stops on drop.
pub struct KubeApi {
    addr: SocketAddr,
    /// The CA that signed the server's certificate (PEM), when it serves TLS.
    ca_pem: Option<String>,
    state: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
    _runtime: Option<tokio::runtime::Runtime>,
}

struct Shared {
    objects: Mutex<Objects>,
    /// The bearer token every request must carry (`None`: anything goes).
    token: Option<String>,
    /// Requests that carried it.
    authorized: std::sync::atomic::AtomicUsize,
    /// While set, every list and watch is answered 503 (an outage).
    down: std::sync::atomic::AtomicBool,
    /// Plurals whose lists and watches are answered 503 (one resource failing).
    refused: Mutex<BTreeSet<String>>,
    /// Watch streams open now.
    watching: std::sync::atomic::AtomicUsize,
    /// Every change (and every `break_watches`, as `None`), to the open watches.
    events: broadcast::Sender<Option<Change>>,
    /// Service-account tokens a TokenReview accepts: token → the user it
    /// reviews as (username, and the extras of a Pod-bound token).
    tokens: Mutex<BTreeMap<String, Value>>,
}

impl KubeApi {
    /// Starts the stand-in on a free loopback port, on a runtime of its own
    /// (so that blocking tests can use it).
    pub fn start() -> KubeApi {
        KubeApi::start_on_runtime(None)
    }

    /// Starts the stand-in as a cluster's API server looks from a Pod:
    /// HTTPS with a certificate for 127.0.0.1 of a CA of its own
    /// ([`KubeApi::ca_pem`]), every request refused `401` unless it
    /// carries `Authorization: Bearer TOKEN`.
    pub fn start_in_cluster(token: &str) -> KubeApi {
        KubeApi::start_on_runtime(Some(token.to_string()))
    }

    fn start_on_runtime(token: Option<String>) -> KubeApi {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime for the stand-in API server");
        let mut api = runtime.block_on(KubeApi::serve_with(token));
        api._runtime = Some(runtime);
        api
    }

    /// Starts the stand-in on the current runtime.
    pub async fn serve() -> KubeApi {
        KubeApi::serve_with(None).await
    }

    async fn serve_with(token: Option<String>) -> KubeApi {
        let (events, _) = broadcast::channel(4096);
        let tls = token.is_some().then(tls_identity);
        let state = Arc::new(Shared {
            objects: Mutex::new(Objects::default()),
            token,
            authorized: Default::default(),
            down: Default::default(),
            refused: Default::default(),
            watching: Default::default(),
            events,
            tokens: Default::default(),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the stand-in API server");
        let addr = listener.local_addr().unwrap();
        let router = Router::new()
            .route("/version", get(version))
            .route("/api", get(core_versions))
            .route("/apis", get(groups))
            .route("/api/{version}", get(core_resources))
            .route("/apis/{group}/{version}", get(group_resources))
            .route("/api/{version}/{plural}", get(core_collection))
            .route("/api/{version}/{plural}/{name}", get(core_cluster_one))
            .route("/api/{version}/namespaces/{namespace}/{plural}", get(core_namespaced_collection).post(core_create))
            .route("/api/{version}/namespaces/{namespace}/{plural}/{name}", get(core_one).put(core_replace))
            .route("/apis/{group}/{version}/{plural}", get(group_collection).post(create_review))
            .route("/apis/{group}/{version}/namespaces/{namespace}/{plural}", get(group_namespaced_collection))
            .route("/apis/{group}/{version}/namespaces/{namespace}/{plural}/{name}", get(group_one))
            .route("/apis/{group}/{version}/{plural}/{name}", get(group_cluster_one).put(group_cluster_replace))
            .route("/apis/{group}/{version}/namespaces/{namespace}/{plural}/{name}/status", patch(group_status))
            .route("/apis/{group}/{version}/{plural}/{name}/status", patch(group_cluster_status))
            .layer(axum::middleware::from_fn_with_state(state.clone(), authenticate))
            .with_state(state.clone());
        let (server, ca_pem) = match tls {
            None => (tokio::spawn(async move { drop(axum::serve(listener, router).await) }), None),
            Some((acceptor, ca_pem)) => (tokio::spawn(serve_tls(listener, acceptor, router)), Some(ca_pem)),
        };
        KubeApi { addr, ca_pem, state, server, _runtime: None }
    }

    /// Makes TokenReviews accept `token` as service account `name` of `namespace`.
    pub fn accept_token(&self, token: &str, namespace: &str, name: &str) {
        let user = serde_json::json!({
            "username": format!("system:serviceaccount:{namespace}:{name}"),
            "groups": ["system:serviceaccounts", "system:authenticated"],
        });
        self.state.tokens.lock().expect("tokens").insert(token.to_string(), user);
    }

    /// As [`KubeApi::accept_token`], for a token bound to Pod `pod` (UID
    /// `uid`): the review names the Pod in its extras, as the API server's
    /// does for a projected token.
    pub fn accept_pod_token(&self, token: &str, namespace: &str, name: &str, pod: &str, uid: &str) {
        let user = serde_json::json!({
            "username": format!("system:serviceaccount:{namespace}:{name}"),
            "groups": ["system:serviceaccounts", "system:authenticated"],
            "extra": {
                "authentication.kubernetes.io/pod-name": [pod],
                "authentication.kubernetes.io/pod-uid": [uid],
            },
        });
        self.state.tokens.lock().expect("tokens").insert(token.to_string(), user);
    }

    /// `http://127.0.0.1:PORT` (`https://` when it serves TLS).
    pub fn url(&self) -> String {
        let scheme = if self.ca_pem.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The CA of its certificate, PEM (a Pod's `ca.crt`), when it serves TLS.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// How many requests carried the bearer token it asks for.
    pub fn authorized_requests(&self) -> usize {
        self.state.authorized.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A kubeconfig whose current context is this server (no credentials).
    pub fn kubeconfig(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: stand-in\n  cluster:\n    server: {}\n\
             contexts:\n- name: stand-in\n  context:\n    cluster: stand-in\n    user: tester\n\
             current-context: stand-in\nusers:\n- name: tester\n  user: {{}}\n",
            self.url()
        )
    }

    /// Creates or replaces the object of the YAML (or JSON) `document`; its
    /// new resource version.
    pub fn put(&self, document: &str) -> u64 {
        self.put_value(serde_yaml_ng::from_str(document).expect("a YAML object"))
    }

    /// Creates or replaces `object`; its new resource version.
    pub fn put_value(&self, mut object: Value) -> u64 {
        let kind = object["kind"].as_str().expect("the object has a kind").to_string();
        let group = object["apiVersion"].as_str().and_then(|v| v.rsplit_once('/')).map_or("", |(g, _)| g);
        let resource = resource_by_kind(&format!("{group}/{kind}"))
            .unwrap_or_else(|| panic!("the stand-in does not serve {group}/{kind}"));
        let name = object["metadata"]["name"].as_str().expect("the object has a name").to_string();
        let namespace = if resource.namespaced {
            object["metadata"]["namespace"].as_str().unwrap_or("default").to_string()
        } else {
            String::new()
        };
        let mut objects = self.state.objects.lock().unwrap();
        objects.revision += 1;
        let revision = objects.revision;
        let metadata = object["metadata"].as_object_mut().expect("metadata is an object");
        metadata.insert("resourceVersion".into(), json!(revision.to_string()));
        if resource.namespaced {
            metadata.insert("namespace".into(), json!(namespace));
        }
        metadata.entry("uid").or_insert_with(|| json!(format!("uid-{kind}-{namespace}-{name}")));
        let key = (resource.group, resource.plural, namespace.clone(), name);
        let previous = objects.objects.get(&key).cloned();
        let generation = match &previous {
            Some(old) => {
                let old_generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
                if old["spec"] == object["spec"] { old_generation } else { old_generation + 1 }
            }
            None => object["metadata"]["generation"].as_i64().unwrap_or(1),
        };
        object["metadata"]["generation"] = json!(generation);
        if let Some(status) =
            previous.as_ref().and_then(|old| old.get("status")).filter(|_| object.get("status").is_none())
        {
            object["status"] = status.clone();
        }
        let existed = objects.objects.insert(key, object.clone()).is_some();
        announce(&self.state, &mut objects, resource, namespace, if existed { "MODIFIED" } else { "ADDED" }, object);
        revision
    }

    /// How many creates and replaces clients made.
    pub fn client_writes(&self) -> u64 {
        self.state.objects.lock().unwrap().writes
    }

    /// The object of `kind` (or `GROUP/KIND`) as stored, status included.
    pub fn get(&self, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        let resource = resource_by_kind(kind).unwrap_or_else(|| panic!("the stand-in does not serve {kind}"));
        let namespace = if resource.namespaced { namespace.to_string() } else { String::new() };
        let objects = self.state.objects.lock().unwrap();
        objects.objects.get(&(resource.group, resource.plural, namespace, name.to_string())).cloned()
    }

    /// Deletes an object of `kind` (or `GROUP/KIND`); its deletion's
    /// resource version (`None`: there was none).
    pub fn delete(&self, kind: &str, namespace: &str, name: &str) -> Option<u64> {
        let resource = resource_by_kind(kind).unwrap_or_else(|| panic!("the stand-in does not serve {kind}"));
        let namespace = if resource.namespaced { namespace.to_string() } else { String::new() };
        let mut objects = self.state.objects.lock().unwrap();
        let mut object =
            objects.objects.remove(&(resource.group, resource.plural, namespace.clone(), name.to_string()))?;
        objects.revision += 1;
        let revision = objects.revision;
        object["metadata"]["resourceVersion"] = json!(revision.to_string());
        announce(&self.state, &mut objects, resource, namespace, "DELETED", object);
        Some(revision)
    }

    /// Forgets the event history: a watch from any resource version before
    /// now is answered `410 Gone`.
    pub fn compact(&self) {
        let mut objects = self.state.objects.lock().unwrap();
        // A watch from the current version misses nothing: it stays valid.
        objects.compacted = objects.revision;
        objects.history.clear();
    }

    /// Ends every open watch stream (as an API server restart would).
    pub fn break_watches(&self) {
        let _ = self.state.events.send(None);
    }

    /// An outage: every open watch ends, and every list and watch is
    /// answered `503` until [`KubeApi::come_back`].
    pub fn go_down(&self) {
        self.state.down.store(true, std::sync::atomic::Ordering::SeqCst);
        self.break_watches();
    }

    /// Ends an outage with the event history compacted (as a long outage
    /// outlives etcd's history): a client's watch from before it is `410 Gone`.
    pub fn come_back(&self) {
        self.compact();
        self.state.down.store(false, std::sync::atomic::Ordering::SeqCst);
    }

    /// Answers every list and watch of resource `plural` (`pods`) 503
    /// until [`KubeApi::accept`]: one kind whose first list does not come.
    pub fn refuse(&self, plural: &str) {
        self.state.refused.lock().unwrap().insert(plural.to_string());
    }

    /// Serves `plural`'s lists and watches again.
    pub fn accept(&self, plural: &str) {
        self.state.refused.lock().unwrap().remove(plural);
    }

    /// Watch streams open now.
    pub fn open_watches(&self) -> usize {
        self.state.watching.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The last resource version given out.
    pub fn revision(&self) -> u64 {
        self.state.objects.lock().unwrap().revision
    }
}

impl Drop for KubeApi {
    fn drop(&mut self) {
        self.server.abort();
        if let Some(runtime) = self._runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// `POST /apis/authentication.k8s.io/v1/tokenreviews`: a TokenReview
/// answered as the API server answers it — `authenticated` with the
/// token's service-account user and the audiences asked for, when the
/// token is one [`KubeApi::accept_token`] was given; else not
/// authenticated, with an error.
async fn create_review(
    State(state): State<Arc<Shared>>,
    Path((group, version, plural)): Path<(String, String, String)>,
    body: axum::body::Bytes,
) -> Response {
    if (group.as_str(), version.as_str(), plural.as_str()) != ("authentication.k8s.io", "v1", "tokenreviews") {
        return status(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", "only tokenreviews are created here");
    }
    let Ok(review) = serde_json::from_slice::<Value>(&body) else {
        return status(StatusCode::BAD_REQUEST, "BadRequest", "the body is not a TokenReview");
    };
    let token = review["spec"]["token"].as_str().unwrap_or_default();
    let audiences = review["spec"]["audiences"].clone();
    let user = state.tokens.lock().expect("tokens").get(token).cloned();
    let status = match user {
        Some(user) => serde_json::json!({ "authenticated": true, "user": user, "audiences": audiences }),
        None => serde_json::json!({ "authenticated": false, "error": "invalid bearer token" }),
    };
    let answer = serde_json::json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "metadata": { "creationTimestamp": null },
        "spec": review["spec"],
        "status": status,
    });
    (StatusCode::CREATED, [(header::CONTENT_TYPE, "application/json")], answer.to_string()).into_response()
}

/// Refuses, as the API server does (`401` with a Status), a request
/// without the bearer token the stand-in was started with.
async fn authenticate(
    State(state): State<Arc<Shared>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if let Some(token) = &state.token {
        let bearer = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        if bearer != Some(format!("Bearer {token}").as_str()) {
            return status(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized");
        }
        state.authorized.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    next.run(request).await
}

/// A CA and a certificate for 127.0.0.1 it signed: the TLS acceptor, and
/// the CA's certificate as PEM.
fn tls_identity() -> (tokio_rustls::TlsAcceptor, String) {
    let ca_key = rcgen::KeyPair::generate().expect("a CA key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, "stand-in kubernetes CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).expect("the CA certificate");
    let key = rcgen::KeyPair::generate().expect("a server key");
    let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).expect("server parameters");
    let cert = params.signed_by(&key, &ca).expect("the server certificate");
    let chain = vec![cert.der().clone()];
    let private = tokio_rustls::rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .expect("the server identity");
    let ca_pem = AsRef::<rcgen::Certificate>::as_ref(&ca).pem();
    (tokio_rustls::TlsAcceptor::from(Arc::new(config)), ca_pem)
}

/// Serves `router` over TLS (HTTP/1.1) on `listener`.
async fn serve_tls(listener: tokio::net::TcpListener, acceptor: tokio_rustls::TlsAcceptor, router: Router) {
    while let Ok((tcp, _)) = listener.accept().await {
        let (acceptor, router) = (acceptor.clone(), router.clone());
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else { return };
            let service = hyper_util::service::TowerToHyperService::new(router);
            let io = hyper_util::rt::TokioIo::new(tls);
            drop(hyper::server::conn::http1::Builder::new().serve_connection(io, service).await);
        });
    }
}

async fn version() -> Response {
    axum::Json(json!({
        "major": "1", "minor": "34", "gitVersion": "v1.34.0-meshpush-stand-in",
        "platform": "linux/amd64", "goVersion": "n/a", "compiler": "n/a",
        "gitCommit": "0", "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z"
    }))
    .into_response()
}

async fn core_versions() -> Response {
    axum::Json(json!({
        "kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [{ "clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1" }]
    }))
    .into_response()
}

async fn groups() -> Response {
    // Each group serves the union of its kinds' versions, most preferred
    // first as the API server orders them (GA, then beta, then alpha).
    let mut groups: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for r in RESOURCES.iter().filter(|r| !r.group.is_empty()) {
        let versions = groups.entry(r.group).or_default();
        for v in r.versions {
            if !versions.contains(v) {
                versions.push(v);
            }
        }
    }
    let preference = |v: &str| (v.contains("alpha"), v.contains("beta"), std::cmp::Reverse(v.to_string()));
    let groups: Vec<Value> = groups
        .into_iter()
        .map(|(group, mut versions)| {
            versions.sort_by_key(|v| preference(v));
            let versions: Vec<Value> =
                versions.iter().map(|v| json!({ "groupVersion": format!("{group}/{v}"), "version": v })).collect();
            json!({ "name": group, "versions": versions, "preferredVersion": versions[0] })
        })
        .collect();
    axum::Json(json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": groups })).into_response()
}

fn resource_list(group: &str, version: &str) -> Response {
    let resources: Vec<Value> = RESOURCES
        .iter()
        .filter(|r| r.group == group && r.versions.contains(&version))
        .map(|r| {
            json!({
                "name": r.plural, "singularName": r.kind.to_lowercase(), "namespaced": r.namespaced,
                "kind": r.kind, "verbs": ["get", "list", "watch"]
            })
        })
        .collect();
    if resources.is_empty() {
        return not_found(&format!("{group}/{version}"));
    }
    let group_version = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    axum::Json(
        json!({ "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources }),
    )
    .into_response()
}

async fn core_resources(Path(version): Path<String>) -> Response {
    resource_list("", &version)
}

async fn group_resources(Path((group, version)): Path<(String, String)>) -> Response {
    resource_list(&group, &version)
}

fn not_found(what: &str) -> Response {
    status(StatusCode::NOT_FOUND, "NotFound", &format!("{what} not found"))
}

fn status(code: StatusCode, reason: &str, message: &str) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code.as_u16()
    });
    (code, axum::Json(body)).into_response()
}

/// The query of a list or watch.
#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ListQuery {
    watch: Option<String>,
    resource_version: Option<String>,
    allow_watch_bookmarks: Option<bool>,
    timeout_seconds: Option<u64>,
    limit: Option<usize>,
    #[serde(rename = "continue")]
    continue_token: Option<String>,
    field_selector: Option<String>,
    label_selector: Option<String>,
}

/// Whether `object` passes a label selector, as the API server reads the
/// equality-based one: comma-separated `key=value`, `key==value`,
/// `key!=value`, `key` (present) or `!key` (absent) terms, all of which hold.
fn labels_selected(object: &Value, selector: Option<&str>) -> bool {
    let Some(selector) = selector.filter(|s| !s.is_empty()) else { return true };
    let labels = &object["metadata"]["labels"];
    let label = |key: &str| labels[key.trim()].as_str();
    selector.split(',').all(|term| {
        if let Some((key, value)) = term.split_once("!=") {
            label(key) != Some(value.trim())
        } else if let Some((key, value)) = term.split_once('=') {
            label(key) == Some(value.trim_start_matches('=').trim())
        } else if let Some(key) = term.trim().strip_prefix('!') {
            label(key).is_none()
        } else {
            label(term).is_some()
        }
    })
}

/// Whether `object` passes a field selector, as the API server reads one:
/// comma-separated `field=value`, `field==value` or `field!=value` terms,
/// all of which must hold, on `type`, `metadata.name` or `metadata.namespace`.
fn selected(object: &Value, selector: Option<&str>) -> bool {
    let Some(selector) = selector.filter(|s| !s.is_empty()) else { return true };
    selector.split(',').all(|term| {
        let (field, want, equal) = match term.split_once("!=") {
            Some((f, v)) => (f, v, false),
            None => match term.split_once('=') {
                Some((f, v)) => (f, v.trim_start_matches('='), true),
                None => return false,
            },
        };
        let value = match field.trim() {
            "type" => object["type"].as_str(),
            "metadata.name" => object["metadata"]["name"].as_str(),
            "metadata.namespace" => object["metadata"]["namespace"].as_str(),
            _ => return false,
        };
        (value.unwrap_or("") == want.trim()) == equal
    })
}

async fn core_collection(
    State(state): State<Arc<Shared>>,
    Path((version, plural)): Path<(String, String)>,
    Query(query): Query<ListQuery>,
) -> Response {
    collection(state, "", version, None, plural, query).await
}

async fn core_namespaced_collection(
    State(state): State<Arc<Shared>>,
    Path((version, namespace, plural)): Path<(String, String, String)>,
    Query(query): Query<ListQuery>,
) -> Response {
    collection(state, "", version, Some(namespace), plural, query).await
}

async fn group_collection(
    State(state): State<Arc<Shared>>,
    Path((group, version, plural)): Path<(String, String, String)>,
    Query(query): Query<ListQuery>,
) -> Response {
    collection(state, &group, version, None, plural, query).await
}

async fn group_namespaced_collection(
    State(state): State<Arc<Shared>>,
    Path((group, version, namespace, plural)): Path<(String, String, String, String)>,
    Query(query): Query<ListQuery>,
) -> Response {
    collection(state, &group, version, Some(namespace), plural, query).await
}

async fn core_one(
    State(state): State<Arc<Shared>>,
    Path((version, namespace, plural, name)): Path<(String, String, String, String)>,
) -> Response {
    one(state, "", version, namespace, plural, name)
}

async fn core_cluster_one(
    State(state): State<Arc<Shared>>,
    Path((version, plural, name)): Path<(String, String, String)>,
) -> Response {
    one(state, "", version, String::new(), plural, name)
}

async fn group_one(
    State(state): State<Arc<Shared>>,
    Path((group, version, namespace, plural, name)): Path<(String, String, String, String, String)>,
) -> Response {
    one(state, &group, version, namespace, plural, name)
}

async fn group_cluster_one(
    State(state): State<Arc<Shared>>,
    Path((group, version, plural, name)): Path<(String, String, String, String)>,
) -> Response {
    one(state, &group, version, String::new(), plural, name)
}

async fn core_create(
    State(state): State<Arc<Shared>>,
    Path((version, namespace, plural)): Path<(String, String, String)>,
    body: axum::body::Bytes,
) -> Response {
    write(&state, "", &version, namespace, &plural, None, &body)
}

async fn core_replace(
    State(state): State<Arc<Shared>>,
    Path((version, namespace, plural, name)): Path<(String, String, String, String)>,
    body: axum::body::Bytes,
) -> Response {
    write(&state, "", &version, namespace, &plural, Some(name), &body)
}

async fn group_cluster_replace(
    State(state): State<Arc<Shared>>,
    Path((group, version, plural, name)): Path<(String, String, String, String)>,
    body: axum::body::Bytes,
) -> Response {
    write(&state, &group, &version, String::new(), &plural, Some(name), &body)
}

/// A create (`POST` to the collection, `name` none) or a replace (`PUT` of
/// the object `name`), as the API server takes them: a create of a name
/// that exists is a 409 AlreadyExists; a replace of one that does not is a
/// 404, and one whose `metadata.resourceVersion` is not the object's a 409
/// Conflict. The write is an ADDED or MODIFIED event.
fn write(
    state: &Shared,
    group: &str,
    version: &str,
    namespace: String,
    plural: &str,
    name: Option<String>,
    body: &[u8],
) -> Response {
    let Some(r) = resource_by_plural(group, plural).filter(|r| r.versions.contains(&version)) else {
        return not_found(&format!("{group}/{version} {plural}"));
    };
    let Ok(mut object) = serde_json::from_slice::<Value>(body) else {
        return status(StatusCode::BAD_REQUEST, "BadRequest", "the body is not a JSON object");
    };
    let Some(object_name) = object["metadata"]["name"].as_str().map(str::to_string) else {
        return status(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", "metadata.name: Required value");
    };
    if name.as_ref().is_some_and(|n| *n != object_name) {
        return status(StatusCode::BAD_REQUEST, "BadRequest", "the name of the object does not match the path");
    }
    let mut objects = state.objects.lock().unwrap();
    let key = (r.group, r.plural, namespace.clone(), object_name.clone());
    let existing = objects.objects.get(&key).cloned();
    match (&name, &existing) {
        (None, Some(_)) => {
            return status(StatusCode::CONFLICT, "AlreadyExists", &format!("{plural} {object_name:?} already exists"));
        }
        (Some(_), None) => return not_found(&format!("{plural} {object_name:?}")),
        (Some(_), Some(old)) => {
            let expected = &object["metadata"]["resourceVersion"];
            if !expected.is_null() && *expected != old["metadata"]["resourceVersion"] {
                return status(
                    StatusCode::CONFLICT,
                    "Conflict",
                    "the object has been modified; please apply your changes to the latest version",
                );
            }
        }
        (None, None) => {}
    }
    objects.revision += 1;
    let revision = objects.revision;
    let metadata = object["metadata"].as_object_mut().expect("metadata is an object");
    metadata.insert("resourceVersion".into(), json!(revision.to_string()));
    if r.namespaced {
        metadata.insert("namespace".into(), json!(namespace));
    }
    let uid = existing
        .as_ref()
        .map_or_else(|| json!(format!("uid-{plural}-{object_name}")), |o| o["metadata"]["uid"].clone());
    metadata.insert("uid".into(), uid);
    objects.writes += 1;
    objects.objects.insert(key, object.clone());
    let event = if existing.is_some() { "MODIFIED" } else { "ADDED" };
    announce(state, &mut objects, r, namespace, event, object.clone());
    let code = if existing.is_some() { StatusCode::OK } else { StatusCode::CREATED };
    (code, axum::Json(at_version(object, r, version))).into_response()
}

async fn group_status(
    State(state): State<Arc<Shared>>,
    Path((group, version, namespace, plural, name)): Path<(String, String, String, String, String)>,
    body: axum::body::Bytes,
) -> Response {
    patch_status(&state, &group, &version, namespace, &plural, name, &body)
}

async fn group_cluster_status(
    State(state): State<Arc<Shared>>,
    Path((group, version, plural, name)): Path<(String, String, String, String)>,
    body: axum::body::Bytes,
) -> Response {
    patch_status(&state, &group, &version, String::new(), &plural, name, &body)
}

/// A JSON merge patch of an object's status subresource, as the API server
/// applies it: only `status` changes; a `metadata.resourceVersion` in the
/// patch must be the object's (else 409 Conflict); the write is a MODIFIED
/// event.
fn patch_status(
    state: &Shared,
    group: &str,
    version: &str,
    namespace: String,
    plural: &str,
    name: String,
    body: &[u8],
) -> Response {
    let Some(r) = resource_by_plural(group, plural).filter(|r| r.versions.contains(&version)) else {
        return not_found(&format!("{group}/{version} {plural}"));
    };
    let Ok(patch) = serde_json::from_slice::<Value>(body) else {
        return status(StatusCode::BAD_REQUEST, "BadRequest", "the patch is not JSON");
    };
    let mut objects = state.objects.lock().unwrap();
    let key = (r.group, r.plural, namespace.clone(), name.clone());
    let Some(mut object) = objects.objects.get(&key).cloned() else {
        return not_found(&format!("{plural} {name:?}"));
    };
    let expected = &patch["metadata"]["resourceVersion"];
    if !expected.is_null() && *expected != object["metadata"]["resourceVersion"] {
        return status(
            StatusCode::CONFLICT,
            "Conflict",
            "the object has been modified; please apply your changes to the latest version",
        );
    }
    let mut current = object.get("status").cloned().unwrap_or(Value::Null);
    json_patch::merge(&mut current, &patch["status"]);
    object["status"] = current;
    objects.revision += 1;
    let revision = objects.revision;
    object["metadata"]["resourceVersion"] = json!(revision.to_string());
    objects.objects.insert(key, object.clone());
    announce(state, &mut objects, r, namespace, "MODIFIED", object.clone());
    axum::Json(at_version(object, r, version)).into_response()
}

/// Records the watch event `event` (`ADDED`, `MODIFIED`, `DELETED`) of
/// `object`, at the current revision, and sends it to the open watches.
fn announce(
    state: &Shared,
    objects: &mut Objects,
    r: &'static Resource,
    namespace: String,
    event: &str,
    object: Value,
) {
    let change = Change {
        revision: objects.revision,
        plural: r.plural,
        group: r.group,
        kind: r.kind,
        namespace,
        object: json!({ "type": event, "object": object }),
    };
    objects.history.push(change.clone());
    let _ = state.events.send(Some(change));
}

/// `object` as served at `version` of its group.
fn at_version(mut object: Value, r: &Resource, version: &str) -> Value {
    object["apiVersion"] =
        json!(if r.group.is_empty() { version.to_string() } else { format!("{}/{version}", r.group) });
    object
}

fn one(state: Arc<Shared>, group: &str, version: String, namespace: String, plural: String, name: String) -> Response {
    let Some(r) = resource_by_plural(group, &plural).filter(|r| r.versions.contains(&version.as_str())) else {
        return not_found(&format!("{group}/{version} {plural}"));
    };
    let objects = state.objects.lock().unwrap();
    match objects.objects.get(&(r.group, r.plural, namespace, name.clone())) {
        Some(object) => axum::Json(at_version(object.clone(), r, &version)).into_response(),
        None => {
            let body = json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": format!("{} {name:?} not found", r.plural), "reason": "NotFound",
                "details": { "name": name, "kind": r.plural, "group": r.group }, "code": 404
            });
            (StatusCode::NOT_FOUND, axum::Json(body)).into_response()
        }
    }
}

async fn collection(
    state: Arc<Shared>,
    group: &str,
    version: String,
    namespace: Option<String>,
    plural: String,
    query: ListQuery,
) -> Response {
    let Some(r) = resource_by_plural(group, &plural).filter(|r| r.versions.contains(&version.as_str())) else {
        return not_found(&format!("{group}/{version} {plural}"));
    };
    if state.down.load(std::sync::atomic::Ordering::SeqCst) {
        return status(StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable", "the stand-in API server is down");
    }
    if state.refused.lock().unwrap().contains(&plural) {
        return status(StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable", "the stand-in refuses this resource");
    }
    let in_scope = |ns: &str| namespace.as_deref().is_none_or(|want| want == ns);
    if matches!(query.watch.as_deref(), Some("true" | "1")) {
        return watch(state, r, version, namespace, query);
    }
    let objects = state.objects.lock().unwrap();
    // Pages as the API server cuts them: `limit` items, then a `continue`
    // token naming the list's resource version and where the next page starts.
    let (revision, offset) = match query.continue_token.as_deref().and_then(|t| t.split_once('/')) {
        Some((rv, offset)) => (rv.parse().unwrap_or(objects.revision), offset.parse().unwrap_or(0)),
        None => (objects.revision, 0),
    };
    let limit = query.limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
    let mut matching = objects
        .objects
        .iter()
        .filter(|((g, p, ns, _), _)| *g == r.group && *p == r.plural && in_scope(ns))
        .filter(|(_, object)| selected(object, query.field_selector.as_deref()))
        .filter(|(_, object)| labels_selected(object, query.label_selector.as_deref()))
        .skip(offset);
    let page: Vec<_> = matching.by_ref().take(limit).collect();
    let remaining = matching.count();
    let items: Vec<Value> = page
        .into_iter()
        .map(|(_, object)| {
            // List items carry no apiVersion and kind.
            let mut item = object.clone();
            if let Some(map) = item.as_object_mut() {
                map.remove("apiVersion");
                map.remove("kind");
            }
            item
        })
        .collect();
    let api_version = if r.group.is_empty() { version.clone() } else { format!("{}/{version}", r.group) };
    axum::Json(json!({
        "apiVersion": api_version,
        "kind": format!("{}List", r.kind),
        "metadata": if remaining > 0 {
            json!({ "resourceVersion": revision.to_string(), "continue": format!("{revision}/{}", offset + limit),
                "remainingItemCount": remaining })
        } else {
            json!({ "resourceVersion": revision.to_string() })
        },
        "items": items,
    }))
    .into_response()
}

fn watch(
    state: Arc<Shared>,
    r: &'static Resource,
    version: String,
    namespace: Option<String>,
    query: ListQuery,
) -> Response {
    let from: u64 = query.resource_version.as_deref().and_then(|v| v.parse().ok()).unwrap_or(0);
    let bookmarks = query.allow_watch_bookmarks.unwrap_or(false);
    let timeout = Duration::from_secs(query.timeout_seconds.unwrap_or(300).clamp(1, 3600));
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<String, std::io::Error>>(256);
    // Subscribe before reading the history, so no change falls between.
    let mut events = state.events.subscribe();
    let (backlog, gone, mut last) = {
        let objects = state.objects.lock().unwrap();
        let gone = from != 0 && from < objects.compacted;
        let backlog: Vec<Change> = objects.history.iter().filter(|c| c.revision > from).cloned().collect();
        (backlog, gone, objects.revision.max(from))
    };
    let fields = query.field_selector.clone();
    let labels = query.label_selector.clone();
    let matches = move |c: &Change| {
        c.group == r.group
            && c.plural == r.plural
            && namespace.as_deref().is_none_or(|ns| ns == c.namespace)
            && selected(&c.object["object"], fields.as_deref())
            && labels_selected(&c.object["object"], labels.as_deref())
    };
    let line = move |c: &Change| {
        let mut event = c.object.clone();
        event["object"] = at_version(event["object"].take(), r, &version);
        format!("{event}\n")
    };
    let open = OpenWatch::new(state.clone());
    tokio::spawn(async move {
        let _open = open;
        if gone {
            let status = json!({
                "type": "ERROR",
                "object": { "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": format!("too old resource version: {from}"), "reason": "Expired", "code": 410 }
            });
            let _ = tx.send(Ok(format!("{status}\n"))).await;
            return;
        }
        for change in backlog.iter().filter(|c| matches(c)) {
            if tx.send(Ok(line(change))).await.is_err() {
                return;
            }
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let mut bookmark = tokio::time::interval(Duration::from_millis(500));
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return,
                _ = bookmark.tick(), if bookmarks => {
                    let mark = json!({ "type": "BOOKMARK", "object": {
                        "kind": r.kind, "apiVersion": "v1",
                        "metadata": { "resourceVersion": last.to_string() } } });
                    if tx.send(Ok(format!("{mark}\n"))).await.is_err() {
                        return;
                    }
                }
                event = events.recv() => match event {
                    Ok(Some(change)) => {
                        if change.revision <= last {
                            continue;
                        }
                        last = change.revision;
                        if matches(&change) && tx.send(Ok(line(&change))).await.is_err() {
                            return;
                        }
                    }
                    // break_watches, or this watch fell behind: it ends.
                    Ok(None) | Err(_) => return,
                },
            }
        }
    });
    let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Counts a watch stream as open while it lives.
struct OpenWatch(Arc<Shared>);

impl OpenWatch {
    fn new(state: Arc<Shared>) -> OpenWatch {
        state.watching.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        OpenWatch(state)
    }
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        self.0.watching.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A remote secret as `istioctl create-remote-secret` writes it (the API
/// server keeps `data` base64): each key a cluster id, each value a kubeconfig.
pub fn remote_secret(name: &str, clusters: &[(&str, &str)]) -> String {
    use base64::Engine as _;
    let data: Vec<String> = clusters
        .iter()
        .map(|(id, kubeconfig)| format!("{id}: {}", base64::engine::general_purpose::STANDARD.encode(kubeconfig)))
        .collect();
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  namespace: istio-system\n  \
         labels: {{istio/multiCluster: \"true\"}}\n  annotations: {{networking.istio.io/cluster: {}}}\n\
         data: {{{}}}\n",
        clusters[0].0,
        data.join(", ")
    )
}
