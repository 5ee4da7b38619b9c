//! The pods of a manifest, as `istioctl kube-inject` finds them: a Pod
//! itself; the pod template of a ReplicationController, Deployment,
//! DaemonSet, ReplicaSet, StatefulSet or Job (and OpenShift's
//! DeploymentConfig, `apps.openshift.io/v1` or its legacy `v1`); a CronJob's job's template;
//! each item of a `v1` List. Every other document is printed back as it
//! was written.
//!
//! The output is the documents in their order, each followed by `---`, as
//! kube-inject prints them. An injectable document that is not a valid
//! object of its kind, or a pod whose annotations Istio refuses, stops the
//! whole run with the document and the reason: nothing is half-injected.
//!
//! One difference from kube-inject, on purpose: a CronJob's labels and
//! annotations are read from and written to its pod template (where the
//! pods get them), not the job template's metadata.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Pod, PodSpec, PodTemplateSpec, ReplicationController};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_yaml_ng::Value;

use super::{Injector, Outcome, Workload};

/// An injected manifest.
#[derive(Debug, Default)]
pub struct Injected {
    /// The documents, each followed by `---`.
    pub text: String,
    /// What the user should know: skipped workloads, annotations not
    /// applied.
    pub warnings: Vec<String>,
}

/// Injects every pod of the multi-document YAML `text`.
pub fn inject_manifest(injector: &Injector, text: &str) -> Result<Injected, String> {
    let mut out = Injected::default();
    for (index, document) in documents(text).into_iter().enumerate() {
        if document.trim().is_empty() || serde_yaml_ng::from_str::<Value>(document).is_ok_and(|v| v.is_null()) {
            continue;
        }
        let value: Value =
            serde_yaml_ng::from_str(document).map_err(|e| format!("document {}: not YAML: {e}", index + 1))?;
        match object(injector, value, &mut out.warnings).map_err(|e| format!("document {}: {e}", index + 1))? {
            Some(injected) => {
                let yaml = serde_yaml_ng::to_string(&injected).map_err(|e| e.to_string())?;
                out.text.push_str(&yaml);
            }
            None => {
                out.text.push_str(document.trim_end_matches('\n'));
                out.text.push('\n');
            }
        }
        out.text.push_str("---\n");
    }
    Ok(out)
}

/// The documents of a YAML stream, split on `---` lines.
fn documents(text: &str) -> Vec<&str> {
    let mut docs = Vec::new();
    let mut start = 0;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let bare = line.trim_end();
        if bare == "---" || bare.starts_with("--- ") || bare.starts_with("---#") {
            docs.push(&text[start..offset]);
            start = offset + line.len();
        }
        offset += line.len();
    }
    docs.push(&text[start..]);
    docs
}

/// Injects one object: its injected form, or `None` when its kind has no
/// pod.
pub fn object(injector: &Injector, value: Value, warnings: &mut Vec<String>) -> Result<Option<Value>, String> {
    let api_version = value.get("apiVersion").and_then(Value::as_str).unwrap_or_default().to_string();
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
    let name = value.get("metadata").and_then(|m| m.get("name")).and_then(Value::as_str).unwrap_or_default();
    let namespace = value.get("metadata").and_then(|m| m.get("namespace")).and_then(Value::as_str);
    let namespace = namespace.filter(|n| !n.is_empty()).unwrap_or("default");
    let own_meta = || value.get("metadata").cloned().and_then(|m| serde_yaml_ng::from_value::<ObjectMeta>(m).ok());
    // A Pod's workload is its controller's, as the webhook sees it.
    let workload = match (api_version.as_str(), kind.as_str(), own_meta()) {
        ("v1", "Pod", Some(meta)) => Workload::of_pod(&meta, namespace),
        _ => Workload {
            kind: kind.clone(),
            api_version: api_version.clone(),
            name: name.to_string(),
            namespace: namespace.to_string(),
        },
    };
    let run = Run { injector, workload: &workload, warnings };
    let injected = match (api_version.as_str(), kind.as_str()) {
        ("v1", "List") => return list(injector, value, warnings).map(Some),
        ("v1", "Pod") => run.typed::<Pod>(value, |o| Some((&mut o.metadata, o.spec.as_mut()?)))?,
        ("v1", "ReplicationController") => {
            run.typed::<ReplicationController>(value, |o| template(o.spec.as_mut()?.template.as_mut()?))?
        }
        ("apps/v1", "Deployment") => run.typed::<Deployment>(value, |o| template(&mut o.spec.as_mut()?.template))?,
        ("apps/v1", "DaemonSet") => run.typed::<DaemonSet>(value, |o| template(&mut o.spec.as_mut()?.template))?,
        ("apps/v1", "ReplicaSet") => {
            run.typed::<ReplicaSet>(value, |o| template(o.spec.as_mut()?.template.as_mut()?))?
        }
        ("apps/v1", "StatefulSet") => run.typed::<StatefulSet>(value, |o| template(&mut o.spec.as_mut()?.template))?,
        ("batch/v1", "Job") => run.typed::<Job>(value, |o| template(&mut o.spec.as_mut()?.template))?,
        ("apps.openshift.io/v1" | "v1", "DeploymentConfig") => return open_shift(run, value).map(Some),
        ("batch/v1", "CronJob") => {
            run.typed::<CronJob>(value, |o| template(&mut o.spec.as_mut()?.job_template.spec.as_mut()?.template))?
        }
        _ => return Ok(None),
    };
    Ok(Some(injected))
}

/// A pod template's metadata and spec (none without a spec).
fn template(t: &mut PodTemplateSpec) -> Option<(&mut ObjectMeta, &mut PodSpec)> {
    let spec = t.spec.as_mut()?;
    Some((t.metadata.get_or_insert_default(), spec))
}

/// OpenShift's DeploymentConfig, which has no Kubernetes type: its
/// `spec.template` is injected as a pod template, the rest kept.
fn open_shift(run: Run<'_>, mut value: Value) -> Result<Value, String> {
    let Some(pod) = value.get_mut("spec").and_then(|s| s.get_mut("template")) else {
        run.warnings.push(format!("DeploymentConfig {:?}: it has no pod template: left as it is", run.workload.name));
        return Ok(value);
    };
    *pod = run.typed::<PodTemplateSpec>(pod.clone(), template)?;
    Ok(value)
}

/// A `v1` List: each item injected, the rest kept.
fn list(injector: &Injector, mut value: Value, warnings: &mut Vec<String>) -> Result<Value, String> {
    if let Some(Value::Sequence(items)) = value.get_mut("items") {
        for (i, item) in items.iter_mut().enumerate() {
            if let Some(injected) = object(injector, item.clone(), warnings).map_err(|e| format!("items[{i}]: {e}"))? {
                *item = injected;
            }
        }
    }
    Ok(value)
}

struct Run<'a> {
    injector: &'a Injector,
    workload: &'a Workload,
    warnings: &'a mut Vec<String>,
}

impl Run<'_> {
    /// Parses `value` as `T`, injects the pod `find` gives, and returns it
    /// as YAML again.
    fn typed<T: Serialize + DeserializeOwned>(
        self,
        value: Value,
        find: impl FnOnce(&mut T) -> Option<(&mut ObjectMeta, &mut PodSpec)>,
    ) -> Result<Value, String> {
        let shown =
            format!("{} {:?}", self.workload.kind, format!("{}/{}", self.workload.namespace, self.workload.name));
        let mut object: T = serde_path_to_error::deserialize(value)
            .map_err(|e| format!("{shown}: {}: {}", e.path().clone(), e.into_inner()))?;
        match find(&mut object) {
            None => self.warnings.push(format!("{shown}: it has no pod spec: left as it is")),
            Some((meta, spec)) => match self.injector.inject(meta, spec, self.workload, None) {
                Ok(Outcome::Injected { warnings }) => {
                    self.warnings.extend(warnings.into_iter().map(|w| format!("{shown}: {w}")));
                }
                Ok(Outcome::Skipped(why)) => self.warnings.push(format!("skipping injection of {shown}: {why}")),
                Err(e) => return Err(format!("{shown}: {e}")),
            },
        }
        serde_yaml_ng::to_value(&object).map_err(|e| format!("{shown}: {e}"))
    }
}
