//! Generated meshes: Services, EndpointSlices, Sidecars and VirtualServices
//! as Kubernetes/Istio YAML, and the Envoy node of every simulated sidecar.
//!
//! Every address is data only, from the loopback range: endpoints are
//! `127.1.0.0` upward, addresses introduced by changes `127.200.0.0`
//! upward. Nothing ever connects to them.

use std::fmt::Write as _;
use std::net::Ipv4Addr;

use envoy_types::pb::envoy::config::core::v3::node::UserAgentVersionType;
use envoy_types::pb::envoy::config::core::v3::{BuildVersion, Extension, Node};
use envoy_types::pb::envoy::r#type::v3::SemanticVersion;
use envoy_types::pb::google::protobuf::{Struct, Value, value::Kind};
use prost::Message as _;

/// The service port of every generated service, and so the name of the one
/// outbound route configuration (`9080`).
pub const PORT: u32 = 9080;

/// The match prefix of every `svc-0` VirtualService in the generated files.
const INITIAL_PREFIX: &str = "/loadtest-initial";

/// The shape of a generated mesh.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Shape {
    /// Namespaces `ns-0`…; `ns-0` is the shared one.
    pub namespaces: u32,
    /// Services `svc-0`… in each namespace, each on port 9080 (HTTP).
    pub services_per_namespace: u32,
    /// Endpoints of each service (one EndpointSlice per service).
    pub endpoints_per_service: u32,
    /// Simulated sidecars in each namespace: pods of the namespace's
    /// services, in turn.
    pub sidecars_per_namespace: u32,
    /// Whether each namespace has a Sidecar resource that makes only its own
    /// namespace and `ns-0` visible.
    pub scoped: bool,
}

/// Where a simulated sidecar lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// Namespace index.
    pub namespace: u32,
    /// The service whose pod it is.
    pub service: u32,
    /// Which of the service's endpoints is its pod.
    pub pod: u32,
}

impl Shape {
    /// Number of simulated sidecars (ADS streams).
    pub fn streams(&self) -> u32 {
        self.namespaces * self.sidecars_per_namespace
    }

    /// Number of services.
    pub fn services(&self) -> u32 {
        self.namespaces * self.services_per_namespace
    }

    /// Number of endpoints.
    pub fn endpoints(&self) -> u32 {
        self.services() * self.endpoints_per_service
    }

    /// The namespace a service's namespace index names.
    pub fn namespace(&self, ns: u32) -> String {
        format!("ns-{ns}")
    }

    /// The index of the namespace that holds one namespace's own changes:
    /// the middle one (`ns-0` when there is only one).
    pub fn one_namespace(&self) -> u32 {
        self.namespaces / 2
    }

    /// A service's FQDN.
    pub fn host(&self, ns: u32, service: u32) -> String {
        format!("svc-{service}.ns-{ns}.svc.cluster.local")
    }

    /// The Istio cluster (and EDS) name of a service's port.
    pub fn cluster(&self, ns: u32, service: u32) -> String {
        format!("outbound|{PORT}||{}", self.host(ns, service))
    }

    /// The address of endpoint `pod` of a service, as generated.
    pub fn endpoint_ip(&self, ns: u32, service: u32, pod: u32) -> Ipv4Addr {
        let index = (ns * self.services_per_namespace + service) * self.endpoints_per_service + pod;
        Ipv4Addr::from(u32::from(Ipv4Addr::new(127, 1, 0, 0)) + index)
    }

    /// Where stream `stream` lives.
    pub fn placement(&self, stream: u32) -> Placement {
        let namespace = stream / self.sidecars_per_namespace;
        let within = stream % self.sidecars_per_namespace;
        let service = within % self.services_per_namespace;
        let pod = (within / self.services_per_namespace) % self.endpoints_per_service;
        Placement { namespace, service, pod }
    }

    /// The streams placed in `namespace`.
    pub fn streams_in(&self, namespace: u32) -> u32 {
        if namespace < self.namespaces { self.sidecars_per_namespace } else { 0 }
    }

    /// The whole mesh as YAML files, `(path, text)`, laid out as a GitOps
    /// repository often is: a directory per namespace, a file per service
    /// (`ns-N/svc-M.yaml`: the Service and its EndpointSlice), and one for
    /// the namespace's own config (`ns-N/namespace.yaml`: its Sidecar when
    /// scoped, and a VirtualService for `svc-0`, the target of route
    /// changes). An endpoint change made as a file edit rewrites one small
    /// file.
    pub fn files(&self) -> Vec<(String, String)> {
        let mut files = Vec::with_capacity((self.namespaces * (self.services_per_namespace + 1)) as usize);
        for ns in 0..self.namespaces {
            for service in 0..self.services_per_namespace {
                files.push(self.service_file(ns, service, &self.initial_addresses(ns, service)));
            }
            files.push(self.namespace_file(ns, INITIAL_PREFIX));
        }
        files
    }

    /// The file of one service with these endpoint addresses.
    pub fn service_file(&self, ns: u32, service: u32, addresses: &[Ipv4Addr]) -> (String, String) {
        let text = joined(&[self.service_document(ns, service), self.slice_document(ns, service, addresses)]);
        (format!("ns-{ns}/svc-{service}.yaml"), text)
    }

    /// The file of one namespace's own config, `svc-0`'s route matching `prefix`.
    pub fn namespace_file(&self, ns: u32, prefix: &str) -> (String, String) {
        let mut documents = Vec::with_capacity(2);
        if self.scoped {
            documents.push(self.sidecar_document(ns));
        }
        documents.push(self.virtual_service_document(ns, 0, prefix));
        (format!("ns-{ns}/namespace.yaml"), joined(&documents))
    }

    /// Every document of one namespace.
    pub fn namespace_documents(&self, ns: u32) -> Vec<String> {
        let mut documents = Vec::with_capacity(2 * self.services_per_namespace as usize + 2);
        for service in 0..self.services_per_namespace {
            documents.push(self.service_document(ns, service));
            documents.push(self.slice_document(ns, service, &self.initial_addresses(ns, service)));
        }
        if self.scoped {
            documents.push(self.sidecar_document(ns));
        }
        documents.push(self.virtual_service_document(ns, 0, INITIAL_PREFIX));
        documents
    }

    /// A service's endpoint addresses in the generated mesh.
    fn initial_addresses(&self, ns: u32, service: u32) -> Vec<Ipv4Addr> {
        (0..self.endpoints_per_service).map(|pod| self.endpoint_ip(ns, service, pod)).collect()
    }

    fn service_document(&self, ns: u32, service: u32) -> String {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: svc-{service}\n  namespace: ns-{ns}\n  labels: {{app: svc-{service}}}\n\
             spec:\n  selector: {{app: svc-{service}}}\n  ports:\n  - {{name: http, port: {PORT}, targetPort: {PORT}}}\n"
        )
    }

    /// The EndpointSlice of a service with these addresses (pods in order).
    pub fn slice_document(&self, ns: u32, service: u32, addresses: &[Ipv4Addr]) -> String {
        let mut text = format!(
            "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: svc-{service}-slice\n  namespace: ns-{ns}\n\
             \x20 labels: {{kubernetes.io/service-name: svc-{service}}}\naddressType: IPv4\nports:\n- {{name: http, port: {PORT}}}\nendpoints:\n"
        );
        for (pod, address) in addresses.iter().enumerate() {
            let _ = writeln!(
                text,
                "- addresses: [\"{address}\"]\n  conditions: {{ready: true}}\n  targetRef: {{kind: Pod, name: svc-{service}-{pod}, namespace: ns-{ns}}}"
            );
        }
        text
    }

    fn sidecar_document(&self, ns: u32) -> String {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: default\n  namespace: ns-{ns}\n\
             spec:\n  egress:\n  - hosts: [\"./*\", \"ns-0/*\"]\n"
        )
    }

    /// The VirtualService of `svc-<service>`: a route matching `prefix`, then
    /// a default route, both to the service. Changing `prefix` changes the
    /// route configuration of every proxy that sees the service.
    pub fn virtual_service_document(&self, ns: u32, service: u32, prefix: &str) -> String {
        let host = self.host(ns, service);
        format!(
            "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: svc-{service}\n  namespace: ns-{ns}\n\
             spec:\n  hosts: [{host}]\n  http:\n  - match: [{{uri: {{prefix: \"{prefix}\"}}}}]\n    \
             route: [{{destination: {{host: {host}}}}}]\n  - route: [{{destination: {{host: {host}}}}}]\n"
        )
    }

    /// The encoded `Node` fields of stream `stream`'s own: the id, cluster
    /// and Istio metadata of a sidecar. The rest of the node is
    /// [`node_common`](Self::node_common).
    pub fn node(&self, stream: u32) -> Vec<u8> {
        let Placement { namespace, service, pod } = self.placement(stream);
        let ip = self.endpoint_ip(namespace, service, pod);
        let pod_name = format!("svc-{service}-{pod}");
        let ns = self.namespace(namespace);
        let labels = Struct {
            fields: [
                ("app".to_string(), string(&format!("svc-{service}"))),
                ("version".to_string(), string("v1")),
                ("pod-template-hash".to_string(), string("5d8f7c9b6")),
                ("security.istio.io/tlsMode".to_string(), string("istio")),
                ("service.istio.io/canonical-name".to_string(), string(&format!("svc-{service}"))),
                ("service.istio.io/canonical-revision".to_string(), string("v1")),
            ]
            .into(),
        };
        let owner = format!("kubernetes://apis/apps/v1/namespaces/{ns}/deployments/svc-{service}");
        let ports = format!("[{{\"name\":\"http\",\"containerPort\":{PORT},\"protocol\":\"TCP\"}}]");
        let metadata = Struct {
            fields: [
                ("NAMESPACE".to_string(), string(&ns)),
                ("LABELS".to_string(), Value { kind: Some(Kind::StructValue(labels)) }),
                ("INTERCEPTION_MODE".to_string(), string("REDIRECT")),
                ("ISTIO_VERSION".to_string(), string("1.28.0")),
                ("CLUSTER_ID".to_string(), string("Kubernetes")),
                ("MESH_ID".to_string(), string("cluster.local")),
                ("NAME".to_string(), string(&pod_name)),
                ("WORKLOAD_NAME".to_string(), string(&format!("svc-{service}"))),
                ("SERVICE_ACCOUNT".to_string(), string("default")),
                ("OWNER".to_string(), string(&owner)),
                ("INSTANCE_IPS".to_string(), string(&ip.to_string())),
                ("POD_PORTS".to_string(), string(&ports)),
                ("APP_CONTAINERS".to_string(), string(&format!("svc-{service}"))),
                ("ENVOY_STATUS_PORT".to_string(), string("15021")),
                ("ENVOY_PROMETHEUS_PORT".to_string(), string("15090")),
                // No agent serves these Envoys a workload certificate: they
                // say so, and are sent no mesh mTLS (the figures recorded so
                // far were measured without it).
                ("SDS".to_string(), string("false")),
            ]
            .into(),
        };
        Node {
            id: format!("sidecar~{ip}~{pod_name}.{ns}~{ns}.svc.cluster.local"),
            cluster: format!("svc-{service}.{ns}"),
            metadata: Some(metadata),
            ..Default::default()
        }
        .encode_to_vec()
    }

    /// The encoded `Node` fields every simulated Envoy shares, as Envoy
    /// 1.40.0 fills them: user agent `envoy`, its build version, and the 516
    /// extensions it reports (`envoy-1.40-extensions.txt`, read from the
    /// real binary's `/server_info`). Envoy sends all of it in every request
    /// unless its bootstrap sets `set_node_on_first_message_only` (Istio's
    /// and meshpush's do: then only a stream's first request carries it).
    /// `lean` leaves the extensions out, for comparison only.
    pub fn node_common(lean: bool) -> Vec<u8> {
        let metadata = Struct {
            fields: [
                ("revision.status".to_string(), string("Clean")),
                ("build.type".to_string(), string("RELEASE")),
                ("revision.sha".to_string(), string("9e5580933739775e8bce696a57a2e1bc99368f23")),
                ("ssl.version".to_string(), string("BoringSSL")),
            ]
            .into(),
        };
        let extensions = if lean { Vec::new() } else { envoy_extensions() };
        Node {
            user_agent_name: "envoy".into(),
            user_agent_version_type: Some(UserAgentVersionType::UserAgentBuildVersion(BuildVersion {
                version: Some(SemanticVersion { major_number: 1, minor_number: 40, patch: 0 }),
                metadata: Some(metadata),
            })),
            extensions,
            ..Default::default()
        }
        .encode_to_vec()
    }
}

fn string(v: &str) -> Value {
    Value { kind: Some(Kind::StringValue(v.to_string())) }
}

/// Envoy 1.40.0's extension list.
fn envoy_extensions() -> Vec<Extension> {
    include_str!("envoy-1.40-extensions.txt")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|line| {
            let mut parts = line.split(' ');
            let category = parts.next().unwrap_or_default().to_string();
            let name = parts.next().unwrap_or_default().to_string();
            let type_urls = parts.next().map(|t| t.split(',').map(str::to_string).collect()).unwrap_or_default();
            Extension { name, category, type_urls, ..Default::default() }
        })
        .collect()
}

/// Addresses for changes: `127.200.0.0` upward, each used once.
#[derive(Debug, Default)]
pub struct FreshAddresses {
    next: u32,
}

impl FreshAddresses {
    /// The next unused address.
    pub fn take(&mut self) -> Ipv4Addr {
        let address = Ipv4Addr::from(u32::from(Ipv4Addr::new(127, 200, 0, 0)) + self.next);
        self.next += 1;
        address
    }
}

/// YAML documents as one multi-document file.
fn joined(documents: &[String]) -> String {
    let mut text = String::new();
    for document in documents {
        text.push_str("---\n");
        text.push_str(document);
    }
    text
}
