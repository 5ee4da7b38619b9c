//! `POST /inject`: the sidecar injector as the API server calls it. The
//! Pod of the review is injected by [`crate::inject::Injector`] with the
//! served snapshot's mesh config and ProxyConfig objects, and answered
//! with the RFC 6902 diff between the Pod as sent and as injected.
//!
//! A Pod the policy skips is allowed unchanged. A Pod that cannot be
//! injected (a bad annotation) is allowed unchanged too, with the reason
//! logged and returned as a warning: on purpose unlike istiod, which
//! refuses it, so that a typo in an annotation never stops a workload from
//! starting. Path segments after `/inject/` are `KEY/VALUE` pairs, as
//! Istio's: `cluster` and `net` set the Pod's cluster and network.

use k8s_openapi::api::core::v1::Pod;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};

use crate::inject::{Injector, Outcome, Workload};
use crate::model::StoreSnapshot;
use crate::text::Shown;

/// Answers one injection request.
pub fn review(
    injector: &Injector,
    store: Option<&StoreSnapshot>,
    request: &AdmissionRequest<DynamicObject>,
) -> AdmissionResponse {
    let response = AdmissionResponse::from(request);
    if request.operation != Operation::Create {
        return response;
    }
    let Some(object) = &request.object else {
        return response.deny("the review holds no Pod");
    };
    let mut sent = match serde_json::to_value(object) {
        Ok(value) => value,
        Err(e) => return response.deny(format!("the object is not JSON: {e}")),
    };
    // Big, and nothing injection reads or writes.
    if let Some(meta) = sent.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        meta.remove("managedFields");
    }
    let mut pod: Pod = match serde_json::from_value(sent) {
        Ok(pod) => pod,
        Err(e) => return response.deny(format!("the object is not a Pod: {e}")),
    };
    let namespace = match pod.metadata.namespace.as_deref().filter(|n| !n.is_empty()) {
        Some(ns) => ns.to_string(),
        None => request.namespace.clone().unwrap_or_else(|| "default".into()),
    };
    pod.metadata.namespace = Some(namespace.clone());
    let before = serde_json::to_value(&pod).expect("a Pod serializes");
    let Some(spec) = pod.spec.as_mut() else {
        return response.deny("the Pod has no spec");
    };
    let workload = Workload::of_pod(&pod.metadata, &namespace);
    let shown = format!("pod {namespace}/{}", Shown(&workload.name));
    match injector.inject(&mut pod.metadata, spec, &workload, store) {
        Ok(Outcome::Skipped(why)) => {
            tracing::debug!("not injecting {shown}: {why}");
            response
        }
        Err(e) => {
            let why = format!("not injected: {e}");
            tracing::warn!("{shown}: {why}");
            with_warnings(response, vec![why])
        }
        Ok(Outcome::Injected { warnings }) => {
            let after = serde_json::to_value(&pod).expect("a Pod serializes");
            tracing::info!("injected the sidecar into {shown}");
            match response.with_patch(json_patch::diff(&before, &after)) {
                Ok(patched) => with_warnings(patched, warnings),
                Err(e) => AdmissionResponse::from(request).deny(format!("the patch does not serialize: {e}")),
            }
        }
    }
}

fn with_warnings(mut response: AdmissionResponse, warnings: Vec<String>) -> AdmissionResponse {
    if !warnings.is_empty() {
        response.warnings = Some(warnings);
    }
    response
}

/// The injector for a request whose path after `/inject/` is `params`:
/// `cluster/ID` and `net/NETWORK` pairs; any other key is named in the
/// returned warnings, unapplied.
pub fn with_params(injector: &Injector, params: &str) -> (Injector, Vec<String>) {
    let mut injector = injector.clone();
    let mut warnings = Vec::new();
    let parts: Vec<&str> = params.split('/').filter(|p| !p.is_empty()).collect();
    for pair in parts.chunks(2) {
        let [key, value] = pair else { break };
        let value = value.replace("--slash--", "/");
        match *key {
            "cluster" => injector.settings.cluster_id = value,
            "net" => injector.settings.network = value,
            other => warnings.push(format!("the injection path's {:?} is not applied", Shown(other).to_string())),
        }
    }
    (injector, warnings)
}
