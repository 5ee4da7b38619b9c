//! A pod's own `istio-proxy` (or `istio-init`) container: settings the
//! user wants over the injected one, as Istio's injector treats it. Each
//! field the pod's container sets wins, merged as Kubernetes merges a
//! strategic patch (`env` by name, `ports` by container port,
//! `volumeMounts` by mount path, nested objects field by field, other
//! lists whole); `image: auto` means the injector's image. When the proxy
//! runs as another user, `istio-init` exempts that user and group instead
//! of 1337.
//!
//! The first injection records the pod's containers in
//! `proxy.istio.io/overrides` (JSON, Istio's shape) and the next one reads
//! them there, so injecting an injected pod gives the same pod.

use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{INIT_CONTAINER, InjectError, PROXY_CONTAINER};

/// The annotation that keeps a pod's own proxy containers.
pub const OVERRIDES: &str = "proxy.istio.io/overrides";
/// The image name that means "the injector's".
const AUTO_IMAGE: &str = "auto";

/// A pod's own versions of the injected containers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Overrides {
    /// Of `containers` (the proxy).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<Container>,
    /// Of `initContainers` (`istio-init`, or a native proxy).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub init_containers: Vec<Container>,
}

impl Overrides {
    /// Takes the pod's own proxy containers out of a pod whose earlier
    /// injection (if any) was already stripped: those the annotation
    /// recorded, else those the pod holds.
    pub fn take(meta: &ObjectMeta, spec: &mut PodSpec) -> Result<Overrides, InjectError> {
        let ours = |c: &Container| c.name == PROXY_CONTAINER || c.name == INIT_CONTAINER;
        let held = Overrides {
            containers: spec.containers.iter().filter(|c| ours(c)).cloned().collect(),
            init_containers: spec.init_containers.iter().flatten().filter(|c| ours(c)).cloned().collect(),
        };
        spec.containers.retain(|c| !ours(c));
        if let Some(init) = spec.init_containers.as_mut() {
            init.retain(|c| !ours(c));
        }
        match meta.annotations.as_ref().and_then(|a| a.get(OVERRIDES)) {
            Some(text) => serde_json::from_str(text).map_err(|e| {
                InjectError::Pod(format!("annotation {OVERRIDES} is not Istio's JSON of containers: {e}"))
            }),
            None => Ok(held),
        }
    }

    /// Whether the pod has none.
    pub fn is_empty(&self) -> bool {
        self.containers.is_empty() && self.init_containers.is_empty()
    }

    /// The pod's own version of the container `name`, if it has one.
    pub fn find(&self, name: &str) -> Option<&Container> {
        self.containers.iter().chain(&self.init_containers).find(|c| c.name == name)
    }

    /// Lays the pod's own version of `injected` (if any) over it.
    pub fn apply(&self, injected: &mut Container) {
        let Some(own) = self.find(&injected.name) else { return };
        let mut own = serde_json::to_value(own).expect("a container serializes");
        if own.get("image").and_then(Value::as_str) == Some(AUTO_IMAGE) {
            own.as_object_mut().expect("an object").remove("image");
        }
        let mut merged = serde_json::to_value(&*injected).expect("a container serializes");
        merge(&mut merged, own);
        *injected = serde_json::from_value(merged).expect("a merge of two containers is a container");
    }

    /// Records them on the pod, for the next injection.
    pub fn record(&self, meta: &mut ObjectMeta) {
        if self.is_empty() {
            return;
        }
        let text = serde_json::to_string(self).expect("containers serialize");
        meta.annotations.get_or_insert_default().insert(OVERRIDES.into(), text);
    }

    /// The user and group the pod's own proxy runs as, when it says.
    pub fn proxy_user(&self) -> (Option<i64>, Option<i64>) {
        let context = self.find(PROXY_CONTAINER).and_then(|c| c.security_context.as_ref());
        (context.and_then(|s| s.run_as_user), context.and_then(|s| s.run_as_group))
    }
}

/// The list fields of a container merged item by item, and each item's key.
const MERGE_KEYS: [(&str, &str); 5] = [
    ("env", "name"),
    ("ports", "containerPort"),
    ("volumeMounts", "mountPath"),
    ("volumeDevices", "devicePath"),
    ("resizePolicy", "resourceName"),
];

/// Lays `over` onto `base` as a strategic merge patch of a container.
fn merge(base: &mut Value, over: Value) {
    let (Value::Object(base), Value::Object(over)) = (base, over) else { return };
    for (key, value) in over {
        let merge_key = MERGE_KEYS.iter().find(|(field, _)| *field == key).map(|(_, k)| *k);
        match (base.get_mut(&key), value, merge_key) {
            (Some(Value::Array(items)), Value::Array(own), Some(merge_key)) => {
                for item in own {
                    let id = item.get(merge_key).cloned();
                    match items.iter_mut().find(|i| id.is_some() && i.get(merge_key) == id.as_ref()) {
                        Some(existing) => *existing = item,
                        None => items.push(item),
                    }
                }
            }
            (Some(existing @ Value::Object(_)), value @ Value::Object(_), _) => merge(existing, value),
            (_, value, _) => {
                base.insert(key, value);
            }
        }
    }
}
