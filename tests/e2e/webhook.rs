//! The admission webhooks over HTTPS, as the API server calls them: a v1
//! AdmissionReview POSTed to `serve --webhook-addr`, the server's
//! certificate checked against the mesh root, over HTTP/1.1 and HTTP/2.
//! The injector's JSONPatch, applied with a JSON-patch library, gives the
//! pod its sidecar, with the served ProxyConfig objects layered in; the
//! validator refuses a broken VirtualService with the reason; malformed
//! requests get the HTTP answer that says what is wrong.

use serde_json::{Value, json};

use crate::support::https;
use crate::support::scene::MeshDir;
use crate::support::secure::SecureMesh;

const PROXY_CONFIG: &str = "apiVersion: networking.istio.io/v1beta1\nkind: ProxyConfig\n\
                            metadata: {name: shop-defaults, namespace: shop}\nspec: {concurrency: 3}\n";

fn review(operation: &str, kind: (&str, &str, &str), namespace: &str, object: Value) -> String {
    let (group, version, kind) = kind;
    let resource = json!({"group": group, "version": version, "resource": format!("{}s", kind.to_lowercase())});
    json!({
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": "7e3c1a52-1f0b-4c1e-9d61-3b2f0c2d9a10",
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": resource,
            "requestKind": {"group": group, "version": version, "kind": kind},
            "requestResource": resource,
            "name": object["metadata"]["name"].as_str().unwrap_or_default(),
            "namespace": namespace,
            "operation": operation,
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller",
                         "groups": ["system:serviceaccounts", "system:authenticated"]},
            "object": object,
            "oldObject": null,
            "dryRun": false,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
        }
    })
    .to_string()
}

#[test]
fn the_api_server_gets_a_sidecar_patch_and_config_refusals_over_tls_checked_against_the_mesh_root() {
    let dir = MeshDir::new();
    dir.write("proxy-config.yaml", PROXY_CONFIG);
    let secure = SecureMesh::start(&dir);
    let root = std::fs::read_to_string(&secure.root).unwrap();
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "cart-5d9c", "labels": {"app": "cart"}},
        "spec": {"containers": [{"name": "cart", "image": "cart:1", "livenessProbe": {"tcpSocket": {"port": 8080}}}]}
    });
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let post = |alpn: &'static [&'static str], path: &'static str, content_type: &'static str, body: String| {
            https::post(secure.webhook, &root, "127.0.0.1", alpn, path, content_type, body)
        };
        // Injection, over HTTP/1.1.
        let body = review("CREATE", ("", "v1", "Pod"), "shop", pod.clone());
        let answer = post(&["http/1.1"], "/inject", "application/json", body).await.unwrap();
        assert_eq!((answer.status, answer.alpn.as_str()), (200, "http/1.1"), "{}", answer.body);
        let reply: Value = serde_json::from_str(&answer.body).unwrap();
        assert_eq!(reply["apiVersion"], "admission.k8s.io/v1");
        let response = &reply["response"];
        assert_eq!(response["uid"], "7e3c1a52-1f0b-4c1e-9d61-3b2f0c2d9a10");
        assert_eq!((response["allowed"].as_bool(), response["patchType"].as_str()), (Some(true), Some("JSONPatch")));
        use base64::Engine as _;
        let patch = base64::engine::general_purpose::STANDARD.decode(response["patch"].as_str().unwrap()).unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
        let mut injected = pod.clone();
        json_patch::patch(&mut injected, &patch).unwrap();
        let containers = injected["spec"]["containers"].as_array().unwrap();
        assert_eq!(containers.iter().map(|c| c["name"].as_str().unwrap()).collect::<Vec<_>>(), ["cart", "istio-proxy"]);
        assert_eq!(injected["spec"]["initContainers"][0]["name"], "istio-init");
        assert_eq!(containers[0]["livenessProbe"]["httpGet"]["path"], "/app-health/cart/livez");
        let env = |name: &str| {
            containers[1]["env"].as_array().unwrap().iter().find(|e| e["name"] == name).map(|e| e["value"].clone())
        };
        let proxy_config: Value = serde_json::from_str(env("PROXY_CONFIG").unwrap().as_str().unwrap()).unwrap();
        assert_eq!(proxy_config["concurrency"], 3, "the namespace's ProxyConfig object, as the webhook serves it");
        assert_eq!(
            env("ISTIO_KUBE_APP_PROBERS").unwrap(),
            "{\"/app-health/cart/livez\":{\"tcpSocket\":{\"port\":8080}}}"
        );

        // Validation, over HTTP/2: a broken VirtualService is refused with the reason.
        let broken = json!({
            "apiVersion": "networking.istio.io/v1",
            "kind": "VirtualService",
            "metadata": {"name": "cart", "namespace": "shop"},
            "spec": {"hosts": ["cart"], "http": [{"route": [{"destination": {"host": "cart"}, "weight": 150}]}]}
        });
        let body = review("CREATE", ("networking.istio.io", "v1", "VirtualService"), "shop", broken);
        let answer = post(&["h2", "http/1.1"], "/validate", "application/json", body).await.unwrap();
        assert_eq!((answer.status, answer.alpn.as_str()), (200, "h2"));
        let reply: Value = serde_json::from_str(&answer.body).unwrap();
        assert_eq!(reply["response"]["allowed"], false);
        let message = reply["response"]["status"]["message"].as_str().unwrap();
        assert!(message.contains("spec.http[0].route[0].weight"), "{message}");

        // What is not a review is answered as such.
        let answer = post(&["http/1.1"], "/validate", "text/plain", "{}".into()).await.unwrap();
        assert_eq!(answer.status, 415, "{}", answer.body);
        let answer = post(&["http/1.1"], "/inject", "application/json", "{\"kind\":".into()).await.unwrap();
        let reply: Value = serde_json::from_str(&answer.body).unwrap();
        assert_eq!((answer.status, reply["response"]["allowed"].as_bool()), (200, Some(false)));
        assert!(reply["response"]["status"]["message"].as_str().unwrap().starts_with("could not decode body"));

        // A client that trusts another root does not get through.
        let other = crate::support::tls::TestCa::new("another mesh");
        let refused = https::post(
            secure.webhook,
            &other.pem,
            "127.0.0.1",
            &["http/1.1"],
            "/inject",
            "application/json",
            "{}".into(),
        )
        .await;
        assert!(refused.is_err(), "a certificate the mesh root did not sign is not trusted");

        // And the webhooks still answer: a valid object passes.
        let fine = json!({
            "apiVersion": "networking.istio.io/v1",
            "kind": "VirtualService",
            "metadata": {"name": "cart", "namespace": "shop"},
            "spec": {"hosts": ["cart"], "http": [{"route": [{"destination": {"host": "cart"}}]}]}
        });
        let body = review("UPDATE", ("networking.istio.io", "v1", "VirtualService"), "shop", fine);
        let answer = post(&["h2"], "/validate", "application/json", body).await.unwrap();
        let reply: Value = serde_json::from_str(&answer.body).unwrap();
        assert_eq!(reply["response"]["allowed"], true, "{}", answer.body);
    });
}

/// A webhook configuration of `kind` named `name`, labelled for `revision`
/// (none: unlabelled), with webhooks of `hooks` names.
fn webhook_configuration(kind: &str, name: &str, revision: Option<&str>, hooks: &[&str]) -> Value {
    let hooks: Vec<Value> = hooks
        .iter()
        .map(|hook| {
            json!({
                "name": hook,
                "clientConfig": {"service": {"name": "meshpush", "namespace": "istio-system", "path": "/inject"}},
                "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
                "failurePolicy": "Ignore",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"]
            })
        })
        .collect();
    let mut object = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": hooks
    });
    if let Some(revision) = revision {
        object["metadata"]["labels"] = json!({"istio.io/rev": revision});
    }
    object
}

#[test]
fn on_kubernetes_every_namespace_and_this_revisions_webhooks_get_the_mesh_root() {
    use crate::support::kube_api::KubeApi;
    use crate::support::meshpush::Meshpush;
    use crate::support::process::{free_addr, scratch_dir, wait_until};
    use std::time::{Duration, Instant};
    let api = KubeApi::start();
    for ns in ["default", "shop", "kube-public", "istio-system"] {
        api.put(&format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n"));
    }
    let injector = ["rev.namespace.sidecar-injector.istio.io", "elsewhere.example.com"];
    api.put_value(webhook_configuration(
        "MutatingWebhookConfiguration",
        "meshpush-injector",
        Some("default"),
        &injector,
    ));
    api.put_value(webhook_configuration("MutatingWebhookConfiguration", "canary", Some("canary"), &injector));
    let validator = ["rev.validation.istio.io"];
    api.put_value(webhook_configuration(
        "ValidatingWebhookConfiguration",
        "meshpush-validator",
        Some("default"),
        &validator,
    ));
    let kubeconfig_dir = scratch_dir("kubeconfig");
    let kubeconfig = kubeconfig_dir.path().join("config");
    std::fs::write(&kubeconfig, api.kubeconfig()).unwrap();
    let ca_dir = scratch_dir("ca");
    let (secure, webhook) = (free_addr().to_string(), free_addr().to_string());
    let ca = ca_dir.path().display().to_string();
    let mesh =
        Meshpush::start_kube(&kubeconfig, &["--ca-dir", &ca, "--secure-xds-addr", &secure, "--webhook-addr", &webhook]);
    let root = std::fs::read_to_string(ca_dir.path().join("root-cert.pem")).unwrap();
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(&root);
    let root_in = |ns: &str| {
        api.get("ConfigMap", ns, "istio-ca-root-cert")
            .and_then(|cm| cm["data"]["root-cert.pem"].as_str().map(String::from))
    };
    let deadline = || Instant::now() + Duration::from_secs(30);
    wait_until(deadline(), "every namespace holds the mesh root", &[mesh.process()], || {
        ["default", "shop", "istio-system"].iter().all(|ns| root_in(ns).as_deref() == Some(root.as_str()))
    });
    let hooks = |kind: &str, name: &str| api.get(kind, "", name).unwrap()["webhooks"].as_array().unwrap().clone();
    wait_until(deadline(), "this revision's webhooks trust the mesh root", &[mesh.process()], || {
        hooks("ValidatingWebhookConfiguration", "meshpush-validator")[0]["clientConfig"]["caBundle"] == encoded.as_str()
            && hooks("MutatingWebhookConfiguration", "meshpush-injector")[0]["clientConfig"]["caBundle"]
                == encoded.as_str()
    });
    assert!(root_in("kube-public").is_none(), "kube-public gets none, as with istiod");
    let config = api.get("ConfigMap", "shop", "istio-ca-root-cert").unwrap();
    assert_eq!(config["metadata"]["labels"]["istio.io/config"], "true");
    let injector_hooks = hooks("MutatingWebhookConfiguration", "meshpush-injector");
    assert!(injector_hooks[1]["clientConfig"].get("caBundle").is_none(), "only the sidecar injector's webhooks");
    assert!(
        hooks("MutatingWebhookConfiguration", "canary")[0]["clientConfig"].get("caBundle").is_none(),
        "another revision's"
    );
    assert_eq!(hooks("ValidatingWebhookConfiguration", "meshpush-validator")[0]["failurePolicy"], "Fail");

    // A changed root is put back, other keys kept; a new namespace gets one;
    // a chart upgrade that resets the caBundle is patched again.
    let mut edited = config.clone();
    edited["data"] = json!({"root-cert.pem": "stale", "extra": "kept"});
    api.put_value(edited);
    api.put("apiVersion: v1\nkind: Namespace\nmetadata: {name: late}\n");
    api.put_value(webhook_configuration(
        "ValidatingWebhookConfiguration",
        "meshpush-validator",
        Some("default"),
        &validator,
    ));
    wait_until(
        deadline(),
        "the root is back, in the new namespace too, and the reset webhook trusts it",
        &[mesh.process()],
        || {
            root_in("shop").as_deref() == Some(root.as_str())
                && root_in("late").as_deref() == Some(root.as_str())
                && hooks("ValidatingWebhookConfiguration", "meshpush-validator")[0]["clientConfig"]["caBundle"]
                    == encoded.as_str()
        },
    );
    let shop = api.get("ConfigMap", "shop", "istio-ca-root-cert").unwrap();
    assert_eq!(shop["data"]["extra"], "kept");
}
