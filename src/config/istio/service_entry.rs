//! `ServiceEntry` and `WorkloadEntry`: services and workloads outside Kubernetes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::ObjectMeta;

/// Istio ServiceEntry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ServiceEntry {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: ServiceEntrySpec,
}

/// `ServiceEntry.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ServiceEntrySpec {
    /// Host names (FQDNs or wildcards).
    pub hosts: Vec<String>,
    /// Virtual IPs.
    pub addresses: Vec<String>,
    /// Ports.
    pub ports: Vec<ServiceEntryPort>,
    /// `MESH_EXTERNAL` or `MESH_INTERNAL` (default).
    pub location: Option<String>,
    /// `NONE` (default), `STATIC` or `DNS`.
    pub resolution: Option<String>,
    /// Inline endpoints.
    pub endpoints: Vec<WorkloadEntrySpec>,
    /// Selects WorkloadEntries (and Pods) in the entry's namespace as endpoints.
    pub workload_selector: Option<WorkloadSelector>,
    /// Namespaces the entry is visible to.
    pub export_to: Vec<String>,
    /// The identities its endpoints' certificates may name under mesh mTLS
    /// (besides their service accounts').
    pub subject_alt_names: Vec<String>,
}

/// A ServiceEntry port.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ServiceEntryPort {
    /// Port number.
    pub number: u32,
    /// `HTTP`, `HTTP2`, `GRPC`, `TCP`…
    pub protocol: Option<String>,
    /// Port name.
    pub name: String,
    /// Port on the endpoints, when different.
    pub target_port: Option<u32>,
}

/// Label selector for workloads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WorkloadSelector {
    /// Labels that must all match.
    pub labels: BTreeMap<String, String>,
}

/// Istio WorkloadEntry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WorkloadEntry {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: WorkloadEntrySpec,
}

/// `WorkloadEntry.spec`, also the shape of a ServiceEntry's inline endpoint.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WorkloadEntrySpec {
    /// IP address or DNS name.
    pub address: String,
    /// Port name → port on this workload.
    pub ports: BTreeMap<String, u32>,
    /// Labels (select the workload into services and subsets).
    pub labels: BTreeMap<String, String>,
    /// Service account.
    pub service_account: Option<String>,
    /// Load-balancing weight (default 1).
    pub weight: Option<u32>,
    /// Locality `region/zone/subzone`.
    pub locality: Option<String>,
    /// Network name.
    pub network: Option<String>,
}

/// Istio WorkloadGroup: the template of the WorkloadEntries of workloads
/// (VMs) that register themselves when their proxy connects.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WorkloadGroup {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: WorkloadGroupSpec,
}

/// `WorkloadGroup.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WorkloadGroupSpec {
    /// Labels and annotations every registered entry gets.
    pub metadata: WorkloadGroupMetadata,
    /// The entry every registered workload starts from (its address is the proxy's).
    pub template: WorkloadEntrySpec,
    /// Readiness probe the workload's agent runs.
    pub probe: Option<serde_yaml_ng::Value>,
}

/// `WorkloadGroup.spec.metadata`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WorkloadGroupMetadata {
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
}
