//! `sidecar.istio.io/status`: what an injection added to a pod, written as
//! Istio writes it (compact JSON, keys `initContainers`, `containers`,
//! `volumes`, `imagePullSecrets`, `revision` in that order, an empty list
//! as `null`), and read back to take an injection out before injecting
//! again, so that injecting an injected pod gives the same pod.

use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use super::InjectorSettings;
use super::annotations::STATUS;
use super::probes::APP_PROBERS_ENV;

/// The annotation's value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// The init containers added.
    pub init_containers: Option<Vec<String>>,
    /// The containers added.
    pub containers: Option<Vec<String>>,
    /// The volumes added.
    pub volumes: Option<Vec<String>>,
    /// The image pull secrets added.
    pub image_pull_secrets: Option<Vec<String>>,
    /// The revision that injected it (`default` for none).
    pub revision: String,
}

/// What an earlier injection left that the next one keeps.
#[derive(Debug, Default)]
pub struct Previous {
    /// Whether the pod carried a status (was injected before).
    pub injected: bool,
    /// The agent's `ISTIO_KUBE_APP_PROBERS`: the application's probes as
    /// they were before the first injection rewrote them.
    pub probers: Option<String>,
}

/// Takes an earlier injection out of the pod: the containers, init
/// containers, volumes and pull secrets its status lists, and the status
/// itself. A status that is not Istio's JSON is left alone (as Istio does),
/// and the pod is injected as it is.
pub fn strip(meta: &mut ObjectMeta, spec: &mut PodSpec) -> Previous {
    let Some(text) = meta.annotations.as_ref().and_then(|a| a.get(STATUS)) else {
        return Previous::default();
    };
    let Ok(status) = serde_json::from_str::<Status>(text) else {
        return Previous { injected: true, probers: None };
    };
    let probers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .filter(|c| c.name == super::PROXY_CONTAINER)
        .flat_map(|c| c.env.iter().flatten())
        .find(|e| e.name == APP_PROBERS_ENV)
        .and_then(|e| e.value.clone());
    let listed = |list: &Option<Vec<String>>, name: &str| list.iter().flatten().any(|n| n == name);
    let added = |name: &str| listed(&status.containers, name) || listed(&status.init_containers, name);
    spec.containers.retain(|c| !added(&c.name));
    if let Some(init) = spec.init_containers.as_mut() {
        init.retain(|c| !added(&c.name));
    }
    if let Some(volumes) = spec.volumes.as_mut() {
        volumes.retain(|v| !listed(&status.volumes, &v.name));
    }
    if let Some(secrets) = spec.image_pull_secrets.as_mut() {
        secrets.retain(|s| !listed(&status.image_pull_secrets, &s.name));
    }
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(STATUS);
    }
    Previous { injected: true, probers }
}

/// What one injection added, by name, in the order it added them.
#[derive(Debug, Default)]
pub struct Rendered {
    /// Init containers.
    pub init_containers: Vec<String>,
    /// Containers.
    pub containers: Vec<String>,
    /// Volumes.
    pub volumes: Vec<String>,
}

/// Writes the status annotation of `rendered`.
pub fn write(meta: &mut ObjectMeta, rendered: &Rendered, settings: &InjectorSettings) {
    let list = |names: &Vec<String>| Some(names.clone()).filter(|n| !n.is_empty());
    let status = Status {
        init_containers: list(&rendered.init_containers),
        containers: list(&rendered.containers),
        volumes: list(&rendered.volumes),
        image_pull_secrets: None,
        revision: revision(settings).to_string(),
    };
    let text = serde_json::to_string(&status).expect("a status serializes");
    meta.annotations.get_or_insert_default().insert(STATUS.into(), text);
}

/// The injector's revision as pods carry it (`default` for none).
pub fn revision(settings: &InjectorSettings) -> &str {
    if settings.revision.is_empty() { "default" } else { &settings.revision }
}
