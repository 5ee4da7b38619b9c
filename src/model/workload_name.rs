//! The workload a Pod belongs to, as Istio derives it from the Pod's
//! controller (`GetDeployMetaFromPod` in `pkg/kube`): what the injector
//! writes into a proxy's metadata (`ISTIO_META_WORKLOAD_NAME`,
//! `ISTIO_META_OWNER`) and ztunnel is sent as a workload's name.
//!
//! Only a Pod whose name was generated is looked into. Its controller
//! reference then names the workload, with Istio's heuristics: a
//! ReplicaSet named after the pod template hash is its Deployment's (or,
//! by Argo's `rollouts-pod-template-hash`, its Rollout's); a
//! ReplicationController of an OpenShift DeploymentConfig is that
//! DeploymentConfig (its `deploymentconfig` label); a Job named
//! `NAME-TIMESTAMP` (8 to 10 digits) is its CronJob's. Otherwise the Pod
//! is its own workload.

use std::collections::BTreeMap;

/// A Pod's controller reference: kind, API version, name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Controller<'a> {
    /// Its kind (`ReplicaSet`, `Job`, …).
    pub kind: &'a str,
    /// Its API version.
    pub api_version: &'a str,
    /// Its name.
    pub name: &'a str,
}

/// The workload: kind, API version, name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadOf {
    /// `Deployment`, `CronJob`, `Pod`, …
    pub kind: String,
    /// `apps/v1`, …
    pub api_version: String,
    /// Its name.
    pub name: String,
}

/// The workload of Pod `name` (generated from `generate_name`, if it was),
/// with `labels` and controller `controller`.
pub fn of_pod(
    name: &str,
    generate_name: Option<&str>,
    labels: &BTreeMap<String, String>,
    controller: Option<Controller<'_>>,
) -> WorkloadOf {
    let own = || WorkloadOf { kind: "Pod".into(), api_version: "v1".into(), name: name.to_string() };
    let Some(owner) = controller.filter(|_| generate_name.is_some_and(|g| !g.is_empty())) else {
        return own();
    };
    let label = |k: &str| labels.get(k).map(String::as_str).filter(|v| !v.is_empty());
    let trimmed = |hash: &str| {
        owner.name.ends_with(hash).then(|| owner.name.strip_suffix(&format!("-{hash}")).unwrap_or(owner.name))
    };
    let of = |kind: &str, api_version: &str, name: &str| WorkloadOf {
        kind: kind.into(),
        api_version: api_version.into(),
        name: if name.is_empty() { own().name } else { name.to_string() },
    };
    match owner.kind {
        "ReplicaSet" => {
            if let Some(deployment) = label("pod-template-hash").and_then(trimmed) {
                return of("Deployment", owner.api_version, deployment);
            }
            if let Some(rollout) = label("rollouts-pod-template-hash").and_then(trimmed) {
                return of("Rollout", "v1alpha1", rollout);
            }
        }
        "ReplicationController" => {
            if let Some(config) = label("deploymentconfig") {
                return of("DeploymentConfig", owner.api_version, config);
            }
        }
        "Job" => {
            if let Some(cron_job) = cron_job_name(owner.name) {
                return of("CronJob", "batch/v1", cron_job);
            }
        }
        _ => {}
    }
    of(owner.kind, owner.api_version, owner.name)
}

/// A CronJob's name from its Job's (`NAME-TIMESTAMP`, 8 to 10 digits).
fn cron_job_name(job: &str) -> Option<&str> {
    let (name, stamp) = job.rsplit_once('-')?;
    ((8..=10).contains(&stamp.len()) && stamp.bytes().all(|b| b.is_ascii_digit()) && !name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn of(kind: &str, name: &str, pod_labels: &[(&str, &str)]) -> (String, String) {
        let owner = Controller { kind, api_version: "apps/v1", name };
        let w = of_pod("pod-x1", Some("pod-"), &labels(pod_labels), Some(owner));
        (w.kind, w.name)
    }

    #[test]
    fn a_pod_s_workload_follows_istio_s_heuristics() {
        let pair = |k: &str, n: &str| (k.to_string(), n.to_string());
        assert_eq!(of("ReplicaSet", "web-7d9f", &[("pod-template-hash", "7d9f")]), pair("Deployment", "web"));
        assert_eq!(of("ReplicaSet", "web-7d9f", &[("rollouts-pod-template-hash", "7d9f")]), pair("Rollout", "web"));
        assert_eq!(of("ReplicaSet", "web-7d9f", &[]), pair("ReplicaSet", "web-7d9f"));
        assert_eq!(
            of("ReplicationController", "api-3", &[("deploymentconfig", "api")]),
            pair("DeploymentConfig", "api")
        );
        assert_eq!(of("Job", "backup-28801440", &[]), pair("CronJob", "backup"));
        assert_eq!(
            of("Job", "backup-12345678901", &[]),
            pair("Job", "backup-12345678901"),
            "11 digits: not a timestamp"
        );
        assert_eq!(of("StatefulSet", "db", &[]), pair("StatefulSet", "db"));
        // A Pod whose name was not generated is its own workload.
        let owner = Controller { kind: "ReplicaSet", api_version: "apps/v1", name: "web-7d9f" };
        let bare = of_pod("web-0", None, &labels(&[("pod-template-hash", "7d9f")]), Some(owner));
        assert_eq!((bare.kind.as_str(), bare.name.as_str()), ("Pod", "web-0"));
    }
}
