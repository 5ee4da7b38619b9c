//! Sidecar injection: what istiod's injector (Istio's `pkg/kube/inject`)
//! does to a pod, with meshpush's agent and Envoy in the proxy container.
//! The webhook (`serve`'s `/inject`) and `meshpush inject` (as `istioctl
//! kube-inject`) both go through [`Injector::inject`].
//!
//! The flow, for one pod (a Pod, or a workload's pod template):
//! 1. [`policy`] decides whether the pod gets a sidecar (hostNetwork, the
//!    system namespaces, `sidecar.istio.io/inject`, the injector's
//!    selectors and policy). The namespace labels (`istio-injection`,
//!    `istio.io/rev`) are the webhook configuration's selectors, read by
//!    the API server, never here, as with istiod.
//! 2. [`annotations`] checks Istio's annotations by Istio's rules; a bad
//!    one stops the injection with every problem named.
//! 3. [`status`] removes what an earlier injection added (the containers
//!    and volumes its `sidecar.istio.io/status` lists), so injecting an
//!    injected pod gives the same pod; [`overrides`] keeps the pod's own
//!    `istio-proxy` settings, to lay over the injected container.
//! 4. [`sidecar`] adds `istio-init` (the `meshpush iptables` capture,
//!    unless interception is `NONE`), `istio-proxy` (`meshpush agent` and
//!    Envoy), their volumes, labels and annotations; native sidecars (an
//!    init container with `restartPolicy: Always`) on request. A pod that
//!    asks for Istio's `gateway` template gets the proxy as a router
//!    instead: no capture, the pod's own `istio-proxy` filled in.
//! 5. [`probes`] points the application's HTTP, TCP and gRPC probes at the
//!    agent's status port and tells the agent the originals
//!    (`ISTIO_KUBE_APP_PROBERS`).
//! 6. [`status`] writes `sidecar.istio.io/status` as Istio writes it.
//!
//! [`workload`] finds the pods in a manifest (the kinds kube-inject
//! reads). Invariant: injection is a function of the pod, the mesh config,
//! the injector's settings and the ProxyConfig it is given; it never fails
//! half-way (the pod is only changed once every check passed).

pub mod annotations;
pub mod overrides;
pub mod policy;
pub mod probes;
pub mod settings;
pub mod sidecar;
pub mod status;
pub mod workload;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::config::mesh::MeshConfig;
use crate::config::mesh::proxy_config::ProxyConfig;
use crate::model::StoreSnapshot;
pub use settings::InjectorSettings;

/// The name of the proxy container.
pub const PROXY_CONTAINER: &str = "istio-proxy";
/// The name of the traffic-capture init container.
pub const INIT_CONTAINER: &str = "istio-init";
/// The uid and gid the proxy runs as (Istio's), which capture exempts.
pub const PROXY_UID: i64 = 1337;

/// The workload a pod belongs to, as Istio names it in the proxy's
/// metadata (`ISTIO_META_WORKLOAD_NAME`, `ISTIO_META_OWNER`) and the
/// canonical-name label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    /// Its kind (`Deployment`, `CronJob`, `Pod`, …).
    pub kind: String,
    /// Its API version (`apps/v1`, …).
    pub api_version: String,
    /// Its name.
    pub name: String,
    /// Its namespace (`default` when the manifest names none).
    pub namespace: String,
}

impl Workload {
    /// The workload of a Pod, as Istio derives it from its controller
    /// reference (`model::workload_name`).
    pub fn of_pod(meta: &ObjectMeta, namespace: &str) -> Workload {
        use crate::model::workload_name::{Controller, of_pod};
        let controller = meta.owner_references.iter().flatten().find(|o| o.controller == Some(true));
        // At admission a Pod of a controller has no name yet: its prefix stands for it.
        let name = match (&meta.name, &meta.generate_name) {
            (Some(name), _) if !name.is_empty() => name.clone(),
            (_, Some(prefix)) => prefix.trim_end_matches('-').to_string(),
            _ => String::new(),
        };
        let labels = meta.labels.clone().unwrap_or_default();
        let controller = controller.map(|o| Controller { kind: &o.kind, api_version: &o.api_version, name: &o.name });
        let w = of_pod(&name, meta.generate_name.as_deref(), &labels, controller);
        Workload { kind: w.kind, api_version: w.api_version, name: w.name, namespace: namespace.to_string() }
    }

    /// `ISTIO_META_OWNER`: `kubernetes://apis/VERSION/namespaces/NS/KINDs/NAME`.
    pub fn owner(&self) -> String {
        format!(
            "kubernetes://apis/{}/namespaces/{}/{}s/{}",
            self.api_version,
            self.namespace,
            self.kind.to_lowercase(),
            self.name
        )
    }
}

/// What injecting one pod came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The pod has its sidecar; anything set and not applied is in the
    /// warnings, each naming its annotation or field.
    Injected {
        /// What the caller should show.
        warnings: Vec<String>,
    },
    /// The pod gets no sidecar, for this reason.
    Skipped(String),
}

/// Why a pod cannot be injected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InjectError {
    /// Istio's annotations hold values Istio refuses, each listed.
    #[error("{}", .0.join("; "))]
    Annotations(Vec<String>),
    /// The pod itself cannot take a sidecar.
    #[error("{0}")]
    Pod(String),
}

/// The injector: the mesh config and its own settings.
#[derive(Debug, Clone, Default)]
pub struct Injector {
    /// The mesh config (trust domain, `defaultConfig`).
    pub mesh: MeshConfig,
    /// The injector's settings (image, policy, selectors, defaults).
    pub settings: InjectorSettings,
}

impl Injector {
    /// The ProxyConfig a pod is given. With a store (the webhook), its
    /// ProxyConfig objects are layered in as istiod's injector layers them;
    /// without (`meshpush inject`, as kube-inject), the mesh's
    /// `defaultConfig` with the pod's `proxy.istio.io/config` over it.
    pub fn proxy_config(
        &self,
        store: Option<&StoreSnapshot>,
        namespace: &str,
        labels: &BTreeMap<String, String>,
        annotation: Option<&str>,
    ) -> Result<ProxyConfig, String> {
        match store {
            Some(store) => crate::model::proxy_config::effective(store, &self.mesh, namespace, labels, annotation),
            None => {
                let mut config = self.mesh.default_proxy_config.as_ref().clone();
                if let Some(text) = annotation {
                    let (own, _) = ProxyConfig::parse("annotation proxy.istio.io/config", text)?;
                    config = config.over(&own);
                }
                Ok(config)
            }
        }
    }

    /// Injects the pod `meta`/`spec` of `workload` in place, when the
    /// policy says so. `store` is the webhook's config (ProxyConfig
    /// objects); on an error the pod is unchanged.
    pub fn inject(
        &self,
        meta: &mut ObjectMeta,
        spec: &mut PodSpec,
        workload: &Workload,
        store: Option<&StoreSnapshot>,
    ) -> Result<Outcome, InjectError> {
        let empty = BTreeMap::new();
        let labels = meta.labels.as_ref().unwrap_or(&empty);
        let pod_annotations = meta.annotations.as_ref().unwrap_or(&empty);
        let mut warnings = Vec::new();
        if let policy::Decision::Skip(why) =
            policy::required(&self.settings, spec, &workload.namespace, labels, pod_annotations, &mut warnings)
        {
            return Ok(Outcome::Skipped(why));
        }
        let checked = annotations::check(pod_annotations)?;
        warnings.extend(checked.warnings);
        let proxy_config = self
            .proxy_config(
                store,
                &workload.namespace,
                labels,
                pod_annotations.get(annotations::PROXY_CONFIG).map(String::as_str),
            )
            .map_err(|e| InjectError::Annotations(vec![e]))?;
        let mut pod = (meta.clone(), spec.clone());
        let previous = status::strip(&mut pod.0, &mut pod.1);
        let overrides = overrides::Overrides::take(&pod.0, &mut pod.1)?;
        let plan = sidecar::Plan::new(self, &pod.0, workload, &proxy_config, overrides);
        let probers = probes::rewrite(&mut pod.1, &plan, previous.probers.as_deref(), &mut warnings)?;
        let rendered = sidecar::render(self, &plan, &mut pod.0, &mut pod.1, probers);
        status::write(&mut pod.0, &rendered, &self.settings);
        if !previous.injected {
            plan.overrides.record(&mut pod.0);
        }
        (*meta, *spec) = pod;
        Ok(Outcome::Injected { warnings })
    }
}

#[cfg(test)]
mod test;
