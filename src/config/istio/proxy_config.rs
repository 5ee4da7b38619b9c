//! `ProxyConfig` (`networking.istio.io/v1beta1`): proxy settings for the
//! mesh (in the root namespace), a namespace, or the workloads a selector
//! picks — Envoy's `concurrency`, its environment, its image type.
//!
//! This module is the object as written. How the objects layer over the
//! mesh config's `defaultConfig` into the ProxyConfig a new pod is given is
//! `push::index::proxy_config`. As in Istio, no Envoy configuration served
//! over xDS reads it: it reaches a proxy when its pod is injected.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::WorkloadLabels;
use crate::config::ObjectMeta;

/// The proxy image variants Istio publishes.
pub const IMAGE_TYPES: [&str; 3] = ["default", "debug", "distroless"];

/// Istio ProxyConfig.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ProxyConfigObject {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: ProxyConfigSpec,
}

/// `ProxyConfig.spec`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ProxyConfigSpec {
    /// The workloads of its namespace it applies to; absent: the namespace
    /// (the mesh, in the root namespace).
    pub selector: Option<WorkloadLabels>,
    /// Envoy's worker threads (0: one per hardware thread).
    pub concurrency: Option<i32>,
    /// Environment variables of the proxy (the ProxyConfig's `proxyMetadata`).
    pub environment_variables: BTreeMap<String, String>,
    /// The proxy image variant.
    pub image: Option<ProxyImage>,
}

/// `ProxyConfig.spec.image`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ProxyImage {
    /// `default`, `debug` or `distroless`.
    pub image_type: String,
}
