//! Kubernetes kinds: `v1 Service`, `v1 Pod`, `v1 Node`, `discovery.k8s.io/v1 EndpointSlice`.
//!
//! Only the fields that decide Envoy configuration are modelled; others are
//! accepted and ignored (the parser reports them at debug level). The
//! annotations of Pods, Nodes and EndpointSlices are read and dropped:
//! nothing meshpush does reads them, and a large mesh has these kinds most.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::ObjectMeta;

/// `v1 Service`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Service {
    /// Metadata; the `networking.istio.io/exportTo` annotation is read from here.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: ServiceSpec,
    /// Status: its load balancer's addresses, which the Ingresses Istio
    /// serves report as theirs.
    pub status: ServiceStatus,
}

/// `Service.status`, as far as meshpush reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ServiceStatus {
    /// The load balancer a `LoadBalancer` Service was given.
    pub load_balancer: LoadBalancerStatus,
}

/// A load balancer's status (`Service.status.loadBalancer`, and the same
/// shape in `Ingress.status.loadBalancer`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LoadBalancerStatus {
    /// Its addresses.
    pub ingress: Vec<LoadBalancerIngress>,
}

/// One address of a load balancer: an IP or a host name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LoadBalancerIngress {
    /// The IP address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    /// The host name (load balancers known by name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
}

/// `Service.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ServiceSpec {
    /// Ports.
    pub ports: Vec<ServicePort>,
    /// Pod selector; empty means endpoints come only from EndpointSlices.
    pub selector: BTreeMap<String, String>,
    /// Cluster IP (`None` or empty for headless services).
    #[serde(rename = "clusterIP")]
    pub cluster_ip: Option<String>,
    /// `ClusterIP`, `NodePort`, `LoadBalancer` or `ExternalName`.
    #[serde(rename = "type")]
    pub service_type: Option<String>,
    /// For `type: ExternalName`: the host this Service is another name of.
    pub external_name: Option<String>,
    /// Addresses outside the cluster that route to the Service.
    #[serde(rename = "externalIPs")]
    pub external_ips: Vec<String>,
    /// Every cluster IP of a dual-stack Service (the first is `clusterIP`).
    #[serde(rename = "clusterIPs")]
    pub cluster_ips: Vec<String>,
    /// `IPv4`, `IPv6`, or both (ztunnel's `ip_families`).
    pub ip_families: Vec<String>,
    /// `Local`: only endpoints on the caller's node (ztunnel keeps to them).
    pub internal_traffic_policy: Option<String>,
    /// `PreferSameZone` (`PreferClose`) or `PreferSameNode`: ztunnel's
    /// failover order.
    pub traffic_distribution: Option<String>,
    /// Whether endpoints that are not ready are still used (ztunnel's
    /// health policy `ALLOW_ALL`).
    pub publish_not_ready_addresses: bool,
}

/// One port of a Service.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ServicePort {
    /// Port name; its prefix (`http-`, `grpc-`, `tcp-`…) gives the protocol
    /// when `appProtocol` is absent, as in Istio.
    pub name: Option<String>,
    /// The service port.
    pub port: u32,
    /// The workload port: a number, or a container port name.
    pub target_port: Option<IntOrString>,
    /// Explicit application protocol (`http`, `http2`, `grpc`, `tcp`…).
    pub app_protocol: Option<String>,
    /// `TCP` (default), `UDP` or `SCTP`; only TCP is served.
    pub protocol: Option<String>,
}

/// A Kubernetes int-or-string field (`targetPort`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum IntOrString {
    /// A number.
    Int(u32),
    /// A name.
    String(String),
}

/// `v1 Pod`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Pod {
    /// Metadata; labels select the pod into Services and subsets.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: PodSpec,
    /// Status; `podIP` is the endpoint address.
    pub status: PodStatus,
}

/// `Pod.spec` (the part meshpush reads).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodSpec {
    /// Service account.
    pub service_account_name: Option<String>,
    /// Containers, for named target ports.
    pub containers: Vec<Container>,
    /// The Node the Pod runs on: its labels give the Pod's locality.
    pub node_name: Option<String>,
    /// Init containers: those that run beside the others
    /// (`restartPolicy: Always`, native sidecars) have ports too.
    pub init_containers: Vec<Container>,
    /// Whether the Pod shares its Node's network (ztunnel's `HOST_NETWORK`).
    pub host_network: bool,
}

/// A container (only its ports).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Container {
    /// Container name.
    pub name: String,
    /// Declared ports.
    pub ports: Vec<ContainerPort>,
    /// An init container's `Always` makes it a native sidecar.
    pub restart_policy: Option<String>,
}

/// A declared container port.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ContainerPort {
    /// Port name (target of a Service's named `targetPort`).
    pub name: Option<String>,
    /// Port number.
    pub container_port: u32,
    /// `TCP` (the default), `UDP` or `SCTP`.
    pub protocol: Option<String>,
}

impl ContainerPort {
    /// Whether the port is TCP (absent means TCP, as the API server defaults it).
    pub fn is_tcp(&self) -> bool {
        self.protocol.as_deref().is_none_or(|p| p == "TCP")
    }
}

/// `Pod.status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodStatus {
    /// The pod's IP; a pod without one has no endpoint.
    #[serde(rename = "podIP")]
    pub pod_ip: Option<String>,
    /// `Running`, `Pending`…; pods in `Succeeded` or `Failed` have no endpoint.
    pub phase: Option<String>,
    /// Every IP of a dual-stack Pod (the first is `podIP`).
    #[serde(rename = "podIPs")]
    pub pod_ips: Vec<PodIp>,
    /// Conditions; `Ready` decides whether ztunnel sends it traffic.
    pub conditions: Vec<PodCondition>,
}

/// One of `Pod.status.podIPs`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodIp {
    /// The address.
    pub ip: String,
}

/// One of `Pod.status.conditions` (its type and status only).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodCondition {
    /// `Ready`, `PodScheduled`, …
    #[serde(rename = "type")]
    pub condition_type: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
}

impl Pod {
    /// Its IPs: `status.podIPs`, else `status.podIP`.
    pub fn ips(&self) -> Vec<&str> {
        if self.status.pod_ips.is_empty() {
            self.status.pod_ip.as_deref().into_iter().filter(|ip| !ip.is_empty()).collect()
        } else {
            self.status.pod_ips.iter().map(|p| p.ip.as_str()).collect()
        }
    }

    /// Whether it finished (`Succeeded` or `Failed`).
    pub fn is_terminal(&self) -> bool {
        matches!(self.status.phase.as_deref(), Some("Succeeded" | "Failed"))
    }

    /// Whether its `Ready` condition is `True`.
    pub fn is_ready(&self) -> bool {
        self.status.conditions.iter().any(|c| c.condition_type == "Ready" && c.status == "True")
    }
}

/// `v1 Node`: only its labels are read, for the locality of its Pods.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Node {
    /// Metadata; the topology labels below are read from here.
    pub metadata: ObjectMeta,
}

/// `v1 Namespace`: only its labels are read (a Gateway listener's
/// `allowedRoutes` may select namespaces by them).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Namespace {
    /// Metadata.
    pub metadata: ObjectMeta,
}

/// The annotation Istio's CNI sets on a Pod whose traffic it captures for
/// ztunnel (`enabled`; `pending` while partly set up).
pub const AMBIENT_REDIRECTION: &str = "ambient.istio.io/redirection";

/// A Service's or Namespace's traffic distribution (the annotation form of
/// `spec.trafficDistribution`).
pub const TRAFFIC_DISTRIBUTION: &str = "networking.istio.io/traffic-distribution";

/// A Node's region.
pub const REGION_LABEL: &str = "topology.kubernetes.io/region";
/// A Node's region, as Kubernetes before 1.17 labelled it (read when the
/// current label is absent, as Istio does).
pub const REGION_LABEL_BETA: &str = "failure-domain.beta.kubernetes.io/region";
/// A Node's zone.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// A Node's zone, the old label.
pub const ZONE_LABEL_BETA: &str = "failure-domain.beta.kubernetes.io/zone";
/// A Node's subzone (Istio's own label).
pub const SUBZONE_LABEL: &str = "topology.istio.io/subzone";
/// A workload's own locality, overriding its Node's: `region/zone/subzone`
/// (or with `.` between the parts, since label values cannot hold `/`).
pub const LOCALITY_LABEL: &str = "topology.istio.io/locality";
/// The older name of [`LOCALITY_LABEL`].
pub const LOCALITY_LABEL_OLD: &str = "istio-locality";

impl Node {
    /// The locality of the Node's Pods, as Istio reads it: region, zone
    /// and subzone labels (the current ones first, then the beta ones),
    /// `region/zone/subzone`; empty when the Node has none of them.
    pub fn locality(&self) -> String {
        let labels = &self.metadata.labels;
        let get = |label: &str, fallback: Option<&str>| {
            labels
                .get(label)
                .filter(|v| !v.is_empty())
                .or_else(|| fallback.and_then(|f| labels.get(f)))
                .map(String::as_str)
                .unwrap_or("")
        };
        let region = get(REGION_LABEL, Some(REGION_LABEL_BETA));
        let zone = get(ZONE_LABEL, Some(ZONE_LABEL_BETA));
        let subzone = get(SUBZONE_LABEL, None);
        if region.is_empty() && zone.is_empty() && subzone.is_empty() {
            return String::new();
        }
        format!("{region}/{zone}/{subzone}")
    }
}

/// A workload's locality from its own labels ([`LOCALITY_LABEL`], then
/// [`LOCALITY_LABEL_OLD`]), with `.` read as `/` when the value has no
/// `/`; `None` when it has neither label.
pub fn locality_label(labels: &BTreeMap<String, String>) -> Option<String> {
    let value = labels.get(LOCALITY_LABEL).or_else(|| labels.get(LOCALITY_LABEL_OLD))?;
    if value.is_empty() {
        return None;
    }
    Some(if value.contains('/') { value.clone() } else { value.replace('.', "/") })
}

/// `discovery.k8s.io/v1 EndpointSlice`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EndpointSlice {
    /// Metadata; label `kubernetes.io/service-name` names the Service.
    pub metadata: ObjectMeta,
    /// `IPv4`, `IPv6` or `FQDN`.
    pub address_type: Option<String>,
    /// Endpoints.
    pub endpoints: Vec<SliceEndpoint>,
    /// Ports, matched to Service ports by name.
    pub ports: Vec<SlicePort>,
}

/// Label on an EndpointSlice naming its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// One endpoint of an EndpointSlice.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SliceEndpoint {
    /// Addresses (the first is used).
    pub addresses: Vec<String>,
    /// Conditions; `ready: false` endpoints are left out.
    pub conditions: SliceConditions,
    /// The backing object, when it is a Pod (its labels are then used).
    pub target_ref: Option<ObjectReference>,
    /// Zone. Read but not used, as in Istio: an endpoint's locality is its
    /// Pod's (from the Pod's Node).
    pub zone: Option<String>,
}

/// EndpointSlice endpoint conditions.
///
/// Only `ready` decides, as in Istio with its defaults: an endpoint not
/// ready gets no traffic whatever `serving` and `terminating` say (Istio
/// sends a serving, terminating endpoint as DRAINING only for services
/// with persistent sessions, `PILOT_PERSISTENT_SESSION_LABEL`, off by
/// default; meshpush has no such sessions). The two are read so that a
/// slice's conditions are all accounted for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SliceConditions {
    /// Ready; absent means ready.
    pub ready: Option<bool>,
    /// Serving (ready regardless of terminating); absent: as `ready`.
    pub serving: Option<bool>,
    /// Terminating; absent means not terminating.
    pub terminating: Option<bool>,
}

/// A reference to another object.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ObjectReference {
    /// Kind.
    pub kind: Option<String>,
    /// Name.
    pub name: Option<String>,
    /// Namespace.
    pub namespace: Option<String>,
}

/// One port of an EndpointSlice.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SlicePort {
    /// Name, matched to a Service port name (empty matches an unnamed port).
    pub name: Option<String>,
    /// The workload port.
    pub port: Option<u32>,
    /// `TCP` (absent: TCP, as the API server defaults it), `UDP` or `SCTP`.
    pub protocol: Option<String>,
}
