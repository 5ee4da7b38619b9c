use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse};
use serde_json::{Value, json};

use super::{inject, review, validate};
use crate::inject::Injector;

/// A v1 AdmissionReview of `object` as the API server sends one.
pub(crate) fn admission_review(operation: &str, kind: (&str, &str, &str), namespace: &str, object: Value) -> Value {
    let (group, version, kind) = kind;
    json!({
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": "0c9a8d74-9cb7-44dd-b98e-09fd62def2f4",
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": format!("{}s", kind.to_lowercase())},
            "requestKind": {"group": group, "version": version, "kind": kind},
            "requestResource": {"group": group, "version": version, "resource": format!("{}s", kind.to_lowercase())},
            "name": object["metadata"]["name"].as_str().unwrap_or_default(),
            "namespace": namespace,
            "operation": operation,
            "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]},
            "object": object,
            "oldObject": null,
            "dryRun": false,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
        }
    })
}

fn json_headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers
}

fn request(review: &Value) -> AdmissionRequest<DynamicObject> {
    review::read(&json_headers(), &Bytes::from(review.to_string())).map_err(|r| r.status()).unwrap()
}

fn pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "reviews-v1-7d8f9c-",
            "labels": {"app": "reviews", "version": "v1", "pod-template-hash": "7d8f9c"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "reviews-v1-7d8f9c",
                                 "uid": "5f1", "controller": true}],
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update"}]
        },
        "spec": {
            "serviceAccountName": "bookinfo-reviews",
            "containers": [{"name": "reviews", "image": "reviews:v1", "ports": [{"containerPort": 9080}],
                            "readinessProbe": {"httpGet": {"path": "/health", "port": 9080}}}]
        }
    })
}

fn patched(original: &Value, response: &AdmissionResponse) -> Value {
    let patch: json_patch::Patch = serde_json::from_slice(response.patch.as_ref().expect("a patch")).unwrap();
    let mut pod = original.clone();
    json_patch::patch(&mut pod, &patch).unwrap();
    pod
}

#[test]
fn the_webhook_patch_gives_the_pod_meshpush_inject_prints() {
    let review = admission_review("CREATE", ("", "v1", "Pod"), "shop", pod());
    let response = inject::review(&Injector::default(), None, &request(&review));
    assert!(response.allowed);
    assert_eq!(response.uid, "0c9a8d74-9cb7-44dd-b98e-09fd62def2f4");
    let injected = patched(&pod(), &response);
    // `meshpush inject` of the same Pod, in its namespace, by the same injector.
    let mut same = pod();
    same["metadata"]["namespace"] = json!("shop");
    let text = serde_yaml_ng::to_string(&same).unwrap();
    let printed = crate::inject::workload::inject_manifest(&Injector::default(), &text).unwrap().text;
    let mut printed: Value = serde_yaml_ng::from_str(printed.trim_end().trim_end_matches("---")).unwrap();
    // The API server sets the namespace; kube-inject keeps what it was given.
    printed["metadata"].as_object_mut().unwrap().remove("namespace");
    assert_eq!(injected, printed);
    let proxy = &injected["spec"]["containers"][1];
    assert_eq!(proxy["name"], "istio-proxy");
    let owner = proxy["env"].as_array().unwrap().iter().find(|e| e["name"] == "ISTIO_META_OWNER").unwrap();
    assert_eq!(owner["value"], "kubernetes://apis/apps/v1/namespaces/shop/deployments/reviews-v1");
    assert_eq!(injected["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"], "/app-health/reviews/readyz");
    assert!(injected["metadata"]["managedFields"].is_array(), "what injection does not touch stays");
    // Injecting the injected pod changes nothing.
    let again = admission_review("CREATE", ("", "v1", "Pod"), "shop", injected.clone());
    let response = inject::review(&Injector::default(), None, &request(&again));
    assert_eq!(patched(&injected, &response), injected);
}

#[test]
fn a_pod_that_cannot_be_injected_is_allowed_unchanged_with_the_reason_as_a_warning() {
    let mut broken = pod();
    broken["metadata"]["annotations"] = json!({"sidecar.istio.io/interceptionMode": "MAGIC"});
    let review = admission_review("CREATE", ("", "v1", "Pod"), "shop", broken);
    let response = inject::review(&Injector::default(), None, &request(&review));
    assert!(response.allowed && response.patch.is_none());
    let warnings = response.warnings.unwrap();
    assert!(warnings[0].starts_with("not injected: invalid value 'MAGIC'"), "{warnings:?}");
    let mut skipped = pod();
    skipped["metadata"]["labels"]["sidecar.istio.io/inject"] = json!("false");
    let review = admission_review("CREATE", ("", "v1", "Pod"), "shop", skipped);
    let response = inject::review(&Injector::default(), None, &request(&review));
    assert!(response.allowed && response.patch.is_none() && response.warnings.is_none());
}

#[test]
fn the_injection_path_sets_the_cluster_and_network() {
    let (injector, warnings) = inject::with_params(&Injector::default(), "cluster/east/net/net--slash--1/color/blue");
    assert_eq!((injector.settings.cluster_id.as_str(), injector.settings.network.as_str()), ("east", "net/1"));
    assert_eq!(warnings, ["the injection path's \"color\" is not applied"]);
}

#[test]
fn validation_refuses_what_meshpush_validate_calls_an_error_and_warns_the_rest() {
    let broken = json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": "VirtualService",
        "metadata": {"name": "reviews", "namespace": "shop"},
        "spec": {"hosts": ["reviews"], "http": [{"route": [{"destination": {"host": "reviews"}, "weight": 150}]}]}
    });
    let review = admission_review("CREATE", ("networking.istio.io", "v1", "VirtualService"), "shop", broken.clone());
    let response = validate::review(&request(&review));
    assert!(!response.allowed);
    let text = crate::config::parse::parse_documents("f.yaml", &serde_yaml_ng::to_string(&broken).unwrap());
    let error = text.problems.iter().find(|p| p.is_error()).expect("meshpush validate calls it an error");
    assert!(response.result.message.starts_with("configuration is invalid: "), "{}", response.result.message);
    assert!(response.result.message.contains(&error.message), "{} / {}", response.result.message, error.message);
    assert!(response.result.message.contains("spec.http[0].route[0].weight"), "{}", response.result.message);

    let warned = json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": "DestinationRule",
        "metadata": {"name": "reviews", "namespace": "shop"},
        "spec": {"host": "reviews", "trafficPolicy": {"loadBalancer": {"simple": "ROUND_ROBIN"}}, "colour": "red"}
    });
    let review = admission_review("UPDATE", ("networking.istio.io", "v1", "DestinationRule"), "shop", warned);
    let response = validate::review(&request(&review));
    assert!(response.allowed);
    assert!(response.warnings.unwrap().iter().any(|w| w.contains("colour")));
    let review = admission_review("DELETE", ("networking.istio.io", "v1", "VirtualService"), "shop", broken);
    assert!(validate::review(&request(&review)).allowed, "deletes are not checked");
}

#[test]
fn malformed_reviews_get_an_answer_that_says_what_is_wrong() {
    let status = |headers: &HeaderMap, body: &str| {
        review::read(headers, &Bytes::from(body.to_string())).map(|_| ()).map_err(|r| r.status())
    };
    assert_eq!(status(&json_headers(), ""), Err(StatusCode::BAD_REQUEST));
    let mut text = HeaderMap::new();
    text.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    assert_eq!(status(&text, "{}"), Err(StatusCode::UNSUPPORTED_MEDIA_TYPE));
    let huge = "x".repeat(review::MAX_BODY + 1);
    assert_eq!(status(&json_headers(), &huge), Err(StatusCode::BAD_REQUEST));
    // Not a review: 200, with a refusal that names the problem.
    for body in ["{not json", "{\"kind\": \"AdmissionReview\", \"apiVersion\": \"admission.k8s.io/v1beta1\"}"] {
        assert_eq!(status(&json_headers(), body), Err(StatusCode::OK), "{body}");
    }
}
