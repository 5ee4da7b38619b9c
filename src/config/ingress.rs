//! `networking.k8s.io/v1` Ingress and IngressClass, as their manifests write
//! them. What an Ingress means (which ones Istio's ingress controller
//! serves, the Gateway and VirtualServices it becomes) is decided on a whole
//! snapshot by `push::index::ingress`.

use serde::{Deserialize, Serialize};

use super::ObjectMeta;

/// The API group.
pub const GROUP: &str = "networking.k8s.io";
/// The controller of Istio's IngressClass.
pub const ISTIO_CONTROLLER: &str = "istio.io/ingress-controller";
/// The annotation that names an Ingress's class, before `ingressClassName`.
pub const CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";

/// `Ingress`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Ingress {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: IngressSpec,
}

/// `Ingress.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct IngressSpec {
    /// The IngressClass.
    pub ingress_class_name: Option<String>,
    /// Where requests no rule matches go.
    pub default_backend: Option<IngressBackend>,
    /// TLS: hosts and the Secret holding their certificate.
    pub tls: Vec<IngressTls>,
    /// Rules by host.
    pub rules: Vec<IngressRule>,
}

/// One `spec.tls` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct IngressTls {
    /// Hosts the certificate serves (none: every host).
    pub hosts: Vec<String>,
    /// The Secret.
    pub secret_name: Option<String>,
}

/// One rule.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct IngressRule {
    /// The host (absent: every host).
    pub host: Option<String>,
    /// Its paths.
    pub http: Option<HttpIngressRuleValue>,
}

/// `rules[].http`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpIngressRuleValue {
    /// The paths.
    pub paths: Vec<HttpIngressPath>,
}

/// One path.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpIngressPath {
    /// The path.
    pub path: Option<String>,
    /// `Exact`, `Prefix` or `ImplementationSpecific`.
    pub path_type: String,
    /// Where requests go.
    pub backend: IngressBackend,
}

/// A backend.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct IngressBackend {
    /// A Service.
    pub service: Option<IngressServiceBackend>,
    /// Another kind of object (not served by Istio).
    pub resource: Option<TypedLocalObjectReference>,
}

/// `backend.service`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct IngressServiceBackend {
    /// The Service's name.
    pub name: String,
    /// Its port, by number or name.
    pub port: ServiceBackendPort,
}

/// `backend.service.port`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ServiceBackendPort {
    /// The port's name.
    pub name: Option<String>,
    /// The port's number.
    pub number: Option<u32>,
}

/// `backend.resource`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TypedLocalObjectReference {
    /// The group.
    pub api_group: Option<String>,
    /// The kind.
    pub kind: String,
    /// The name.
    pub name: String,
}

/// `IngressClass` (cluster-scoped).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct IngressClass {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: IngressClassSpec,
}

/// `IngressClass.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct IngressClassSpec {
    /// The controller that serves the class.
    pub controller: String,
}
