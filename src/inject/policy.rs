//! Whether a pod gets a sidecar, decided as Istio's `injectRequired` does,
//! in its order:
//! 1. a pod on the host's network never does;
//! 2. nor one in `kube-system`, `kube-public`, `kube-node-lease` or
//!    `local-path-storage`;
//! 3. `sidecar.istio.io/inject` (the label wins over the annotation)
//!    `"true"` or `"false"` decides; another value is warned about and
//!    ignored;
//! 4. failing that, a `neverInjectSelector` that selects the pod's labels
//!    says no, then an `alwaysInjectSelector` says yes;
//! 5. failing that, the policy: `enabled` injects, `disabled` does not.
//!
//! The namespace labels (`istio-injection`, `istio.io/rev`) are not read
//! here: the webhook configuration's selectors send the API server's
//! requests only for the pods they select.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodSpec;

use super::InjectorSettings;
use super::annotations::INJECT;

/// Namespaces whose pods are never injected.
pub const IGNORED_NAMESPACES: [&str; 4] = ["kube-system", "kube-public", "kube-node-lease", "local-path-storage"];

/// The decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The pod gets a sidecar.
    Inject,
    /// It does not, for this reason.
    Skip(String),
}

/// Decides for the pod `spec` in `namespace`; a value of
/// `sidecar.istio.io/inject` that is neither `true` nor `false` adds a
/// warning.
pub fn required(
    settings: &InjectorSettings,
    spec: &PodSpec,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
    warnings: &mut Vec<String>,
) -> Decision {
    if spec.host_network == Some(true) {
        return Decision::Skip("it has host networking enabled".into());
    }
    if IGNORED_NAMESPACES.contains(&namespace) {
        return Decision::Skip(format!("namespace {namespace} is never injected"));
    }
    let asked = labels.get(INJECT).map(|v| ("label", v)).or_else(|| annotations.get(INJECT).map(|v| ("annotation", v)));
    let mut choice = match asked {
        Some((_, v)) if v == "true" => Some(true),
        Some((_, v)) if v == "false" => Some(false),
        Some((_, v)) if v.is_empty() => None,
        Some((place, v)) => {
            warnings.push(format!(
                "{place} {INJECT}: \"{}\" is neither \"true\" nor \"false\": ignored, the policy decides",
                crate::text::Shown(v)
            ));
            None
        }
        None => None,
    };
    if choice.is_none() && settings.never_inject_selector.iter().any(|s| selects(s, labels)) {
        choice = Some(false);
    }
    if choice.is_none() && settings.always_inject_selector.iter().any(|s| selects(s, labels)) {
        choice = Some(true);
    }
    match choice.unwrap_or(settings.policy == "enabled") {
        true => Decision::Inject,
        false => Decision::Skip("it has sidecar injection disabled".into()),
    }
}

/// Whether a non-empty selector selects `labels` (an empty one selects
/// nothing here, as in Istio).
fn selects(selector: &crate::config::gateway_api::LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    (!selector.match_labels.is_empty() || !selector.match_expressions.is_empty()) && selector.matches(labels)
}
